//! Whether a change between two versions of a contract can break its
//! consumers (the rule the IaC drift check shares).

use super::contract::{ContractField, widens};
use crate::shared::record::FieldType;

/// Whether a new version of a contract can break its consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Breaking,
    Compatible,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Breaking => "breaking",
            Change::Compatible => "compatible",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Change::Breaking, Change::Compatible].into_iter().find(|c| c.as_str() == s)
    }
}

/// Classifies the change from `old` to `new`. Breaking: a removed field, a
/// type that does not widen, a field that became required (an added
/// required field included), recursively through nested objects.
/// Compatible: anything else (added optional fields, widened types,
/// relaxed requirements, tag edits).
pub fn classify_change(old: &[ContractField], new: &[ContractField]) -> Change {
    if breaking(old, new) { Change::Breaking } else { Change::Compatible }
}

fn breaking(old: &[ContractField], new: &[ContractField]) -> bool {
    let removed_or_narrowed = old.iter().any(|o| match new.iter().find(|n| n.name == o.name) {
        None => true,
        Some(n) => {
            !widens(o.field_type, n.field_type)
                || (n.required && !o.required)
                || (o.field_type == FieldType::Object
                    && n.field_type == FieldType::Object
                    && breaking(&o.fields, &n.fields))
        }
    });
    let added_required = new.iter().any(|n| n.required && !old.iter().any(|o| o.name == n.name));
    removed_or_narrowed || added_required
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::contract::tests::parse;
    use serde_json::{Value, json};

    #[test]
    fn classifies_changes_like_the_drift_check() {
        let base = parse(json!([
            {"name": "id", "type": "integer", "required": true},
            {"name": "note", "type": "string"},
            {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}
        ]));
        let with = |v: Value| classify_change(&base, &parse(v));
        // Compatible: widen integer to number, add an optional field, relax required, tag.
        assert_eq!(
            with(json!([
                {"name": "id", "type": "number"},
                {"name": "note", "type": "string", "tags": ["PII.Sensitive"]},
                {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}, {"name": "city", "type": "string"}]},
                {"name": "extra", "type": "boolean"}
            ])),
            Change::Compatible
        );
        assert_eq!(classify_change(&base, &base), Change::Compatible);
        // Breaking: removal, narrowing, newly required, added required, nested removal.
        let breaking = [
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "integer"}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string", "required": true}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string"}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}, {"name": "new", "type": "string", "required": true}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string"}, {"name": "address", "type": "object", "fields": []}]),
        ];
        for (i, v) in breaking.into_iter().enumerate() {
            assert_eq!(with(v), Change::Breaking, "case {i}");
        }
    }
}
