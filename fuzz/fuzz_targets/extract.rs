//! Fuzzes the gateway's JSON extraction and validation: no input may panic,
//! and whatever is extracted must be an object that validation accepts or
//! reports on without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_domain::connect::connector::FieldType;
use sluice_domain::gateway::{ContractField, SENSITIVE, extract, validate};

fn contract() -> Vec<ContractField> {
    let f = |name: &str, t, required| ContractField {
        name: name.into(),
        field_type: t,
        required,
        tags: vec![],
        fields: vec![],
    };
    let mut email = f("email", FieldType::String, false);
    email.tags.push(SENSITIVE.into());
    vec![
        f("name", FieldType::String, true),
        f("age", FieldType::Integer, false),
        f("score", FieldType::Number, false),
        f("active", FieldType::Boolean, false),
        f("when", FieldType::Timestamp, false),
        email,
        ContractField {
            name: "address".into(),
            field_type: FieldType::Object,
            required: false,
            tags: vec![],
            fields: vec![f("zip", FieldType::Integer, true)],
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let c = contract();
        if let Some(obj) = extract(text, &c) {
            // The extracted object serializes back to JSON that parses.
            let json = serde_json::to_string(&obj).expect("an extracted object serializes");
            assert!(serde_json::from_str::<serde_json::Value>(&json).is_ok());
            let _ = validate(&obj, &c);
        }
    }
});
