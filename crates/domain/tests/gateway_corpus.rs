//! The gateway benchmark corpus (`benches/gateway_corpus.json`: one
//! customer record as an LLM returns it, once per way such output breaks)
//! goes through the pipeline valid, case by case; and how much of it a
//! strict JSON parser alone would have read.

use serde_json::{Map, Value};
use sluice_domain::catalog::parse_fields;
use sluice_domain::gateway::{Outcome, extract, validate};

const CORPUS: &str = include_str!("../benches/gateway_corpus.json");

#[test]
fn every_case_of_the_corpus_validates_and_few_are_strict_json() {
    let corpus: Value = serde_json::from_str(CORPUS).unwrap();
    let contract = parse_fields(&corpus["contract"]).unwrap();
    let cases = corpus["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 17);
    let mut strict = Vec::new();
    for case in cases {
        let (name, raw) = (case["name"].as_str().unwrap(), case["raw"].as_str().unwrap());
        let obj = extract(raw, &contract).unwrap_or_else(|| panic!("{name}: no object"));
        let Outcome::Valid { data, governance_applied, .. } = validate(&obj, &contract) else {
            panic!("{name}: {:?}", validate(&obj, &contract))
        };
        assert_eq!(data["user_id"], 1042, "{name}");
        assert_eq!(data["email"], "jan****@example.com", "{name}");
        assert_eq!(data["is_active"], true, "{name}");
        assert_eq!(data["balance"], 1234.5, "{name}");
        assert_eq!(data["address"]["zip"], "1100", "{name}");
        assert_eq!(governance_applied, ["email_MASK"], "{name}");
        if serde_json::from_str::<Map<String, Value>>(raw).is_ok() {
            strict.push(name);
        }
    }
    // Only these would have passed a strict parser (and the last of them
    // only as strings where the contract wants numbers and a boolean).
    assert_eq!(strict, ["strict", "strict_pretty", "numeric_and_yes_strings"]);
}
