//! Whether a change between two versions of a contract can break its
//! consumers (the rule the IaC drift check shares).

use super::contract::{ContractField, widens};
use crate::shared::record::FieldType;
use serde::{Deserialize, Serialize};

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

/// A field of a proposed schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedField {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
    #[serde(default)]
    pub required: bool,
}

/// A field of the schema a flow syncs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentField {
    pub name: String,
    pub field_type: FieldType,
    pub required: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftType {
    Breaking,
    Evolution,
    None,
}

/// What one change of a proposed schema does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImpactKind {
    // Breaking.
    FieldRemoved,
    TypeNarrowed,
    BecameRequired,
    RequiredFieldAdded,
    PrimaryKeyRemoved,
    CursorFieldRemoved,
    // Evolution.
    FieldAdded,
    TypeWidened,
    BecameOptional,
}

impl ImpactKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ImpactKind::FieldRemoved => "field_removed",
            ImpactKind::TypeNarrowed => "type_narrowed",
            ImpactKind::BecameRequired => "became_required",
            ImpactKind::RequiredFieldAdded => "required_field_added",
            ImpactKind::PrimaryKeyRemoved => "primary_key_removed",
            ImpactKind::CursorFieldRemoved => "cursor_field_removed",
            ImpactKind::FieldAdded => "field_added",
            ImpactKind::TypeWidened => "type_widened",
            ImpactKind::BecameOptional => "became_optional",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Impact {
    #[serde(rename = "type")]
    pub kind: ImpactKind,
    pub message: String,
    pub affected_fields: Vec<String>,
}

impl Impact {
    pub fn breaking(&self) -> bool {
        !matches!(self.kind, ImpactKind::FieldAdded | ImpactKind::TypeWidened | ImpactKind::BecameOptional)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    pub has_drift: bool,
    pub drift_type: DriftType,
    pub impacts: Vec<Impact>,
    pub suggested_actions: Vec<String>,
}

/// What the mapping that syncs the entity relies on.
#[derive(Debug, Clone, Default)]
pub struct MappingFacts<'a> {
    pub flow: &'a str,
    pub entity: &'a str,
    pub key_fields: Vec<&'a str>,
    pub cursor_field: Option<&'a str>,
    pub blocks_new_columns: bool,
}

/// Compares a proposed schema with the one a flow syncs. Breaking: a
/// removed field, a narrowed type, a field that became required, an added
/// required field, a removed primary-key or cursor field. Evolution: an
/// added optional field, a widened type (integer → number, anything →
/// string), a field that became optional.
pub fn compare_schemas(current: &[CurrentField], proposed: &[ProposedField], facts: &MappingFacts) -> DriftReport {
    let mut impacts = Vec::new();
    let one = |kind, message: String, field: &str| Impact { kind, message, affected_fields: vec![field.to_string()] };
    for c in current {
        match proposed.iter().find(|p| p.name == c.name) {
            None => {
                let (kind, what) = if facts.key_fields.contains(&c.name.as_str()) {
                    (ImpactKind::PrimaryKeyRemoved, "primary-key field")
                } else if facts.cursor_field == Some(c.name.as_str()) {
                    (ImpactKind::CursorFieldRemoved, "cursor field")
                } else {
                    (ImpactKind::FieldRemoved, "field")
                };
                impacts.push(one(kind, format!("{what} '{}' is removed", c.name), &c.name));
            }
            Some(p) => {
                if p.field_type != c.field_type {
                    let (kind, how) = if crate::catalog::contract::widens(c.field_type, p.field_type) {
                        (ImpactKind::TypeWidened, "widens")
                    } else {
                        (ImpactKind::TypeNarrowed, "changes incompatibly")
                    };
                    impacts.push(one(
                        kind,
                        format!("'{}' {how} from {} to {}", c.name, c.field_type.as_str(), p.field_type.as_str()),
                        &c.name,
                    ));
                }
                if p.required && !c.required {
                    impacts.push(one(ImpactKind::BecameRequired, format!("'{}' becomes required", c.name), &c.name));
                } else if !p.required && c.required {
                    impacts.push(one(ImpactKind::BecameOptional, format!("'{}' becomes optional", c.name), &c.name));
                }
            }
        }
    }
    for p in proposed.iter().filter(|p| !current.iter().any(|c| c.name == p.name)) {
        if p.required {
            impacts.push(one(
                ImpactKind::RequiredFieldAdded,
                format!(
                    "required field '{}' ({}) is added; rows already synced have no value",
                    p.name,
                    p.field_type.as_str()
                ),
                &p.name,
            ));
        } else {
            impacts.push(one(
                ImpactKind::FieldAdded,
                format!("optional field '{}' ({}) is added", p.name, p.field_type.as_str()),
                &p.name,
            ));
        }
    }
    let breaking = impacts.iter().any(Impact::breaking);
    let drift_type = if breaking {
        DriftType::Breaking
    } else if impacts.is_empty() {
        DriftType::None
    } else {
        DriftType::Evolution
    };
    let mut actions = Vec::new();
    if breaking {
        actions.push(format!(
            "pause flow '{}' before the source changes, and resume it once the destination is adapted",
            facts.flow
        ));
        let names = |k: ImpactKind| -> Vec<String> {
            impacts.iter().filter(|i| i.kind == k).flat_map(|i| i.affected_fields.clone()).collect()
        };
        if !names(ImpactKind::PrimaryKeyRemoved).is_empty() {
            actions.push(format!("choose a new primary_key for '{}': de-duplication needs one", facts.entity));
        }
        if !names(ImpactKind::CursorFieldRemoved).is_empty() {
            actions.push(format!(
                "choose a new cursor_field for '{}' and reset its cursor (DELETE …/state/{})",
                facts.entity, facts.entity
            ));
        }
        let narrowed = names(ImpactKind::TypeNarrowed);
        if !narrowed.is_empty() {
            actions.push(format!(
                "add a cast step to the mapping for {} or recreate the destination table",
                narrowed.join(", ")
            ));
        }
        let removed = names(ImpactKind::FieldRemoved);
        if !removed.is_empty() {
            actions.push(format!(
                "update consumers of {}: the destination keeps the column, new rows leave it empty",
                removed.join(", ")
            ));
        }
    } else if drift_type == DriftType::Evolution {
        if facts.blocks_new_columns && impacts.iter().any(|i| i.kind == ImpactKind::FieldAdded) {
            actions.push(format!(
                "the mapping of '{}' has schema_policy block_on_new_column: set allow_all, or the next run stops as drift_detected",
                facts.entity
            ));
        } else {
            actions.push("no action needed: the destination gains new columns and wider types on the next run".into());
        }
    }
    DriftReport { has_drift: !impacts.is_empty(), drift_type, impacts, suggested_actions: actions }
}

/// What changed from `old` to `new`, a short line each, by dotted path:
/// `+ age (string)`, `− name`, `amount: integer → number`,
/// `email: now required`, `email: now optional`, `email: tags PII.Sensitive → none`.
pub fn describe_change(old: &[ContractField], new: &[ContractField]) -> Vec<String> {
    let mut out = Vec::new();
    describe_at("", old, new, &mut out);
    out
}

fn describe_at(prefix: &str, old: &[ContractField], new: &[ContractField], out: &mut Vec<String>) {
    let tags = |t: &[String]| if t.is_empty() { "none".to_string() } else { t.join(", ") };
    for o in old {
        let path = format!("{prefix}{}", o.name);
        match new.iter().find(|n| n.name == o.name) {
            None => out.push(format!("− {path}")),
            Some(n) => {
                if n.field_type != o.field_type {
                    out.push(format!("{path}: {} → {}", o.field_type.as_str(), n.field_type.as_str()));
                }
                if n.required != o.required {
                    out.push(format!("{path}: now {}", if n.required { "required" } else { "optional" }));
                }
                if n.tags != o.tags {
                    out.push(format!("{path}: tags {} → {}", tags(&o.tags), tags(&n.tags)));
                }
                if n.field_type == FieldType::Object && o.field_type == FieldType::Object {
                    describe_at(&format!("{path}."), &o.fields, &n.fields, out);
                }
            }
        }
    }
    for n in new.iter().filter(|n| !old.iter().any(|o| o.name == n.name)) {
        out.push(format!("+ {prefix}{} ({})", n.name, n.field_type.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_described_field_by_field() {
        let f = |v: serde_json::Value| crate::catalog::contract::parse_fields(&v).unwrap();
        let old = f(serde_json::json!([
            {"name": "id", "type": "integer", "required": true},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "integer"},
            {"name": "user", "type": "object", "fields": [{"name": "zip", "type": "string"}]}
        ]));
        let new = f(serde_json::json!([
            {"name": "id", "type": "integer", "required": true},
            {"name": "full_name", "type": "string"},
            {"name": "amount", "type": "number", "required": true},
            {"name": "user", "type": "object", "fields": [{"name": "zip", "type": "string", "tags": ["PII.Sensitive"]}]}
        ]));
        assert_eq!(
            describe_change(&old, &new),
            [
                "− name",
                "amount: integer → number",
                "amount: now required",
                "user.zip: tags none → PII.Sensitive",
                "+ full_name (string)"
            ]
        );
        assert!(describe_change(&old, &old).is_empty());
        assert_eq!(classify_change(&old, &new), Change::Breaking, "a removed field");
    }
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

    fn cur(name: &str, t: FieldType, required: bool) -> CurrentField {
        CurrentField { name: name.into(), field_type: t, required }
    }

    fn prop(name: &str, t: FieldType, required: bool) -> ProposedField {
        ProposedField { name: name.into(), field_type: t, required }
    }

    #[test]
    fn drift_is_classified_field_by_field() {
        let current = [
            cur("id", FieldType::Integer, true),
            cur("updated_at", FieldType::Timestamp, true),
            cur("amount", FieldType::Integer, false),
            cur("note", FieldType::String, false),
        ];
        let facts = MappingFacts {
            flow: "orders",
            entity: "orders",
            key_fields: vec!["id"],
            cursor_field: Some("updated_at"),
            blocks_new_columns: false,
        };
        let same: Vec<ProposedField> = current.iter().map(|c| prop(&c.name, c.field_type, c.required)).collect();
        let r = compare_schemas(&current, &same, &facts);
        assert_eq!((r.has_drift, r.drift_type), (false, DriftType::None));
        assert!(r.suggested_actions.is_empty());

        let mut evolved = same.clone();
        evolved[2].field_type = FieldType::Number;
        evolved.push(prop("currency", FieldType::String, false));
        let r = compare_schemas(&current, &evolved, &facts);
        assert_eq!(r.drift_type, DriftType::Evolution);
        let kinds: Vec<&str> = r.impacts.iter().map(|i| i.kind.as_str()).collect();
        assert_eq!(kinds, ["type_widened", "field_added"]);
        assert_eq!(r.impacts[1].affected_fields, ["currency"]);

        let broken = vec![
            prop("updated_at", FieldType::Timestamp, true),
            prop("amount", FieldType::Boolean, true),
            prop("region", FieldType::String, true),
        ];
        let r = compare_schemas(&current, &broken, &facts);
        assert_eq!(r.drift_type, DriftType::Breaking);
        let kinds: Vec<&str> = r.impacts.iter().map(|i| i.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["primary_key_removed", "type_narrowed", "became_required", "field_removed", "required_field_added"]
        );
        assert!(r.suggested_actions.iter().any(|a| a.contains("primary_key")));
        let without_cursor = vec![prop("id", FieldType::Integer, true)];
        let r = compare_schemas(&current, &without_cursor, &facts);
        assert!(r.impacts.iter().any(|i| i.kind == ImpactKind::CursorFieldRemoved));
        assert!(r.suggested_actions.iter().any(|a| a.contains("reset its cursor")));
    }

    #[test]
    fn a_blocking_schema_policy_is_pointed_out() {
        let current = [cur("id", FieldType::Integer, true)];
        let facts = MappingFacts { flow: "f", entity: "t", blocks_new_columns: true, ..Default::default() };
        let r = compare_schemas(
            &current,
            &[prop("id", FieldType::Integer, true), prop("x", FieldType::Date, false)],
            &facts,
        );
        assert_eq!(r.drift_type, DriftType::Evolution);
        assert!(r.suggested_actions[0].contains("block_on_new_column"));
    }
}
