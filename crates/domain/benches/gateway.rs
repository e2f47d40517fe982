//! The gateway pipeline (extraction, coercion, masking, validation and
//! safety scan) on a 10-field contract with a fenced, messy payload of
//! about 1 KiB. Run: `cargo bench -p sluice-domain --bench gateway`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use sluice_domain::catalog::parse_fields;
use sluice_domain::gateway::{Outcome, extract, validate};
use std::hint::black_box;

fn contract() -> Vec<sluice_domain::gateway::ContractField> {
    parse_fields(&json!([
        {"name": "user_id", "type": "integer", "required": true},
        {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
        {"name": "full_name", "type": "string", "required": true},
        {"name": "is_active", "type": "boolean", "required": true},
        {"name": "balance", "type": "number"},
        {"name": "signup_date", "type": "date"},
        {"name": "last_login", "type": "timestamp"},
        {"name": "plan", "type": "string"},
        {"name": "notes", "type": "string"},
        {"name": "address", "type": "object", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": "string", "required": true}
        ]}
    ]))
    .unwrap()
}

/// Prose around a fenced block whose object has a trailing comma, single
/// quotes, an unquoted key, a comment, Python literals and numeric strings.
const MESSY: &str = r#"Sure! I looked the customer up in the CRM and normalised what I found. A few notes before the data:
the balance is in US dollars, the signup date comes from the billing system, and the address was
confirmed by the customer on their last call. Let me know if you need any other field.

```json
{
  "user_id": " 1,042 ",
  'email': 'jane.doe@example.com',
  full_name: "Jane Doe",
  "is_active": "Yes",
  "balance": "$1,234.50",
  "signup_date": "2024-03-15",
  "last_login": "2026-11-20T08:15:00Z",
  "plan": "pro", // upgraded last month
  "notes": "Prefers e-mail contact; asked about the annual discount and the new reporting dashboard.",
  "address": {"city": "Lisbon", "zip": 1100,},
  "confidence": 0.93,
  "verified": True,
}
```

I hope this helps! If anything looks off, tell me which field and I will check it again. I can also
fetch the order history, the open support tickets or the invoices of the last twelve months if useful.
All values above were copied as they appear in the source systems."#;

fn bench(c: &mut Criterion) {
    let contract = contract();
    let strict = serde_json::to_string(&json!({
        "user_id": 1042, "email": "jane.doe@example.com", "full_name": "Jane Doe", "is_active": true,
        "balance": 1234.5, "signup_date": "2024-03-15", "last_login": "2026-11-20T08:15:00Z", "plan": "pro",
        "notes": "Prefers e-mail contact.", "address": {"city": "Lisbon", "zip": "1100"}
    }))
    .unwrap();
    // The payload must take the full path and come out valid.
    let obj = extract(MESSY, &contract).expect("extracts");
    assert!(matches!(validate(&obj, &contract), Outcome::Valid { .. }), "{:?}", validate(&obj, &contract));

    let mut g = c.benchmark_group("gateway");
    g.throughput(Throughput::Elements(1));
    g.bench_function("messy_1kib_fenced", |b| {
        b.iter(|| {
            let obj = extract(black_box(MESSY), &contract).unwrap();
            black_box(validate(&obj, &contract))
        })
    });
    g.bench_function("strict_json", |b| {
        b.iter(|| {
            let obj = extract(black_box(&strict), &contract).unwrap();
            black_box(validate(&obj, &contract))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
