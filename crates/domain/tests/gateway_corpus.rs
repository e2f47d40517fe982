//! The gateway benchmark corpus (`benches/gateway_corpus.json`: one
//! customer record as an LLM returns it, once per way such output breaks
//! and once per extraction decision of the contract) goes through the
//! pipeline valid, case by case, with the values each case expects; and
//! how much of it a strict JSON parser alone would have read.

use serde_json::{Map, Value};
use sluice_domain::catalog::contract::parse_fields;
use sluice_domain::gateway::{Outcome, check};

const CORPUS: &str = include_str!("../benches/gateway_corpus.json");

/// The value at a dotted path (`address.zip`).
fn at<'a>(data: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = data.get(parts.next()?)?;
    for p in parts {
        v = v.get(p)?;
    }
    Some(v)
}

#[test]
fn every_case_of_the_corpus_validates_with_its_expected_values() {
    let corpus: Value = serde_json::from_str(CORPUS).unwrap();
    let contract = parse_fields(&corpus["contract"]).unwrap();
    let defaults = corpus["expect"].as_object().unwrap();
    let cases = corpus["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 33);
    let mut strict = Vec::new();
    for case in cases {
        let (name, raw) = (case["name"].as_str().unwrap(), case["raw"].as_str().unwrap());
        let Some(Outcome::Valid { data, governance_applied, repairs, .. }) = check(raw, &contract) else {
            panic!("{name}: {:?}", check(raw, &contract))
        };
        // The repair record of each case, in order (`path:kind`).
        let record: Vec<String> = repairs.iter().map(|r| format!("{}:{}", r.path, r.kind.as_str())).collect();
        let want: Vec<&str> = case["repairs"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        assert_eq!(record, want, "{name}: the repairs");
        assert!(!format!("{repairs:?}").contains("jane.doe"), "{name}: a sensitive value in a repair");
        let absent: Vec<&str> =
            case["absent"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let under_absent = |p: &str| absent.iter().any(|a| p == *a || p.starts_with(&format!("{a}.")));
        let mut expect: Vec<(&str, &Value)> =
            defaults.iter().filter(|(p, _)| !under_absent(p)).map(|(p, v)| (p.as_str(), v)).collect();
        if let Some(more) = case["expect"].as_object() {
            for (p, v) in more {
                expect.retain(|(q, _)| q != p);
                expect.push((p.as_str(), v));
            }
        }
        for (path, want) in expect {
            assert_eq!(at(&data, path), Some(want), "{name}: {path} in {}", Value::Object(data.clone()));
        }
        for path in absent {
            assert_eq!(at(&data, path), None, "{name}: {path} must be absent");
        }
        assert_eq!(governance_applied, ["email_MASK"], "{name}");
        if serde_json::from_str::<Map<String, Value>>(raw).is_ok() {
            strict.push(name);
        }
    }
    // Only these would have passed a strict parser (and several of them
    // only with strings where the contract wants numbers, nulls and words).
    assert_eq!(
        strict,
        [
            "strict",
            "strict_pretty",
            "numeric_and_yes_strings",
            "duplicate_keys",
            "folded_keys",
            "null_words",
            "money_and_separators",
            "unit_words",
            "integer_rounding",
            "short_email"
        ]
    );
}
