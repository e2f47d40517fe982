//! The gateway pipeline (extraction, coercion, masking, validation and
//! safety scan) on a 10-field contract with a fenced, messy payload of
//! about 1 KiB. Run: `cargo bench -p sluice-domain --bench gateway`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_domain::catalog::contract::parse_fields;
use sluice_domain::gateway::{Outcome, extract, validate};
use std::hint::black_box;

/// The corpus shared with the corpus test and `benches/gateway_python.py`:
/// a 10-field contract and one reply per way LLM output breaks.
const CORPUS: &str = include_str!("gateway_corpus.json");

fn bench(c: &mut Criterion) {
    let corpus: serde_json::Value = serde_json::from_str(CORPUS).unwrap();
    let contract = parse_fields(&corpus["contract"]).unwrap();
    let cases: Vec<(String, String)> = corpus["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["raw"].as_str().unwrap().to_string()))
        .collect();
    let case = |name: &str| cases.iter().find(|(n, _)| n == name).map(|(_, r)| r.clone()).unwrap();
    // The 1,006-byte reply: prose around a fenced block whose object has a
    // trailing comma, single quotes, an unquoted key, a comment, Python
    // literals and numeric strings. It must take the full path and come out valid.
    let messy = case("messy_1kib");
    let strict = case("strict");
    let obj = extract(&messy, &contract).expect("extracts");
    assert!(matches!(validate(&obj, &contract), Outcome::Valid { .. }), "{:?}", validate(&obj, &contract));

    let mut g = c.benchmark_group("gateway");
    g.throughput(Throughput::Elements(1));
    g.bench_function("messy_1kib_fenced", |b| {
        b.iter(|| {
            let obj = extract(black_box(&messy), &contract).unwrap();
            black_box(validate(&obj, &contract))
        })
    });
    g.bench_function("strict_json", |b| {
        b.iter(|| {
            let obj = extract(black_box(&strict), &contract).unwrap();
            black_box(validate(&obj, &contract))
        })
    });
    // Every case of the corpus once per iteration (the run the Python
    // comparison mirrors).
    g.throughput(Throughput::Elements(cases.len() as u64));
    g.bench_function("corpus_all_cases", |b| {
        b.iter(|| {
            for (_, raw) in &cases {
                let obj = extract(black_box(raw), &contract).unwrap();
                black_box(validate(&obj, &contract));
            }
        })
    });
    g.finish();
}

/// Hostile inputs: what once took minutes (`{[` repeated: 158 s for
/// 400 KB) at 1 MiB, plus the worst patterns at the 4 MiB body limit.
fn hostile(c: &mut Criterion) {
    let corpus: serde_json::Value = serde_json::from_str(CORPUS).unwrap();
    let contract = parse_fields(&corpus["contract"]).unwrap();
    let fill = |pattern: &str, len: usize| {
        let mut s = String::with_capacity(len + pattern.len());
        while s.len() < len {
            s.push_str(pattern);
        }
        s
    };
    let mut g = c.benchmark_group("gateway_hostile");
    g.sample_size(10);
    for (name, pattern) in [
        ("brackets", "{["),
        ("open_keys", "{\"a\":"),
        ("open_quotes", "{'a': '"),
        ("tiny_objects", "{a}"),
        ("nested", "[[[[[[[[]]]]]]]]"),
    ] {
        for (size, len) in [("1mib", 1usize << 20), ("4mib", 4 << 20)] {
            let raw = fill(pattern, len);
            g.throughput(Throughput::Bytes(raw.len() as u64));
            g.bench_function(format!("{name}_{size}"), |b| b.iter(|| black_box(extract(black_box(&raw), &contract))));
        }
    }
    let giant = format!("{{{}}}", "a: b, ".repeat((4 << 20) / 6));
    g.bench_function("one_failing_span_4mib", |b| b.iter(|| black_box(extract(black_box(&giant), &contract))));
    g.finish();
}

criterion_group!(benches, bench, hostile);
criterion_main!(benches);
