//! Schema contracts: the fields a data asset promises, read from and
//! written to their JSON form, and which type widens to which.

use crate::shared::error::FieldError;
use crate::shared::record::FieldType;
use serde_json::{Map, Value, json};

/// The tag that marks a field as sensitive.
pub const SENSITIVE: &str = "PII.Sensitive";

/// One field of a contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractField {
    pub name: String,
    pub field_type: FieldType,
    pub required: bool,
    pub tags: Vec<String>,
    /// Fields of an `object` field.
    pub fields: Vec<ContractField>,
}

impl ContractField {
    pub fn sensitive(&self) -> bool {
        self.tags.iter().any(|t| t == SENSITIVE)
    }
}

/// Reads a contract's `fields` array (`[{name, type, required?, tags?,
/// fields?}]`), reporting every problem with its JSON path
/// (`fields[2].type`). Names must be unique within their object; nested
/// `fields` are allowed only on `object` fields.
///
/// # Errors
/// The list of problems, when there is any.
pub fn parse_fields(value: &Value) -> Result<Vec<ContractField>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let fields = parse_level(value, "fields", &mut errors);
    if errors.is_empty() { Ok(fields) } else { Err(errors) }
}

fn parse_level(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<ContractField> {
    let Some(items) = value.as_array() else {
        errors.push(FieldError::new(path, "must be an array of fields"));
        return Vec::new();
    };
    let mut out: Vec<ContractField> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(obj) = item.as_object() else {
            errors.push(FieldError::new(at, "must be an object with name and type"));
            continue;
        };
        if let Some(f) = parse_field(obj, &at, errors) {
            if out.iter().any(|o| o.name == f.name) {
                errors.push(FieldError::new(format!("{at}.name"), format!("duplicate field name {:?}", f.name)));
            } else {
                out.push(f);
            }
        }
    }
    out
}

fn parse_field(obj: &Map<String, Value>, at: &str, errors: &mut Vec<FieldError>) -> Option<ContractField> {
    let before = errors.len();
    let name = match obj.get("name").and_then(Value::as_str).map(str::trim) {
        Some(n) if !n.is_empty() && n.len() <= 255 => n.to_string(),
        _ => {
            errors.push(FieldError::new(format!("{at}.name"), "must be a non-empty string of at most 255 characters"));
            String::new()
        }
    };
    let field_type = match obj.get("type").and_then(Value::as_str).and_then(FieldType::parse) {
        Some(t) => t,
        None => {
            let names: Vec<&str> = FieldType::ALL.iter().map(|t| t.as_str()).collect();
            errors.push(FieldError::new(format!("{at}.type"), format!("must be one of {}", names.join(", "))));
            FieldType::String
        }
    };
    let required = match obj.get("required") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(FieldError::new(format!("{at}.required"), "must be a boolean"));
            false
        }
    };
    let mut tags = Vec::new();
    match obj.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (j, t) in items.iter().enumerate() {
                match t.as_str().map(str::trim) {
                    Some(t) if !t.is_empty() => {
                        if !tags.iter().any(|x: &String| x == t) {
                            tags.push(t.to_string());
                        }
                    }
                    _ => errors.push(FieldError::new(format!("{at}.tags[{j}]"), "must be a non-empty string")),
                }
            }
        }
        Some(_) => errors.push(FieldError::new(format!("{at}.tags"), "must be an array of strings")),
    }
    let fields = match obj.get("fields") {
        None | Some(Value::Null) => Vec::new(),
        Some(nested) if field_type == FieldType::Object => parse_level(nested, &format!("{at}.fields"), errors),
        Some(_) => {
            errors
                .push(FieldError::new(format!("{at}.fields"), "only fields of type object may declare nested fields"));
            Vec::new()
        }
    };
    (errors.len() == before).then_some(ContractField { name, field_type, required, tags, fields })
}

/// The JSON form of a contract, the inverse of [`parse_fields`]. Nested
/// `fields` appear only where there are some.
pub fn fields_to_json(fields: &[ContractField]) -> Value {
    Value::Array(
        fields
            .iter()
            .map(|f| {
                let mut v = json!({
                    "name": f.name,
                    "type": f.field_type.as_str(),
                    "required": f.required,
                    "tags": f.tags,
                });
                if !f.fields.is_empty() {
                    v["fields"] = fields_to_json(&f.fields);
                }
                v
            })
            .collect(),
    )
}

/// Whether a value of type `from` is always acceptable where `to` is
/// expected: the same type, integer to number, anything to string.
pub fn widens(from: FieldType, to: FieldType) -> bool {
    from == to || to == FieldType::String || (from == FieldType::Integer && to == FieldType::Number)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn parse(v: Value) -> Vec<ContractField> {
        parse_fields(&v).expect("valid fields")
    }

    #[test]
    fn parses_and_round_trips_nested_contracts() {
        let v = json!([
            {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
            {"name": "age", "type": "integer"},
            {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string", "required": true}]}
        ]);
        let fields = parse(v);
        assert_eq!(fields.len(), 3);
        assert!(fields[0].sensitive() && fields[0].required);
        assert!(!fields[1].required && fields[1].tags.is_empty());
        assert_eq!(fields[2].fields[0].name, "zip");
        assert_eq!(parse(fields_to_json(&fields)), fields);
        assert!(fields_to_json(&fields)[1].get("fields").is_none());
    }

    #[test]
    fn reports_every_problem_with_its_path() {
        let v = json!([
            {"name": "", "type": "string"},
            {"name": "a", "type": "text"},
            {"name": "b", "type": "string", "required": "yes", "tags": ["ok", 3]},
            {"name": "c", "type": "string", "fields": []},
            {"name": "d", "type": "object", "fields": [{"name": "x", "type": "integer"}, {"name": "x", "type": "integer"}]},
            "e"
        ]);
        let errors = parse_fields(&v).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            paths,
            [
                "fields[0].name",
                "fields[1].type",
                "fields[2].required",
                "fields[2].tags[1]",
                "fields[3].fields",
                "fields[4].fields[1].name",
                "fields[5]"
            ]
        );
        assert!(errors[1].message.contains("integer"), "the message lists the accepted types: {}", errors[1].message);
        assert_eq!(parse_fields(&json!({"name": "a"})).unwrap_err()[0].field, "fields");
    }

    #[test]
    fn duplicate_tags_collapse_and_names_are_trimmed() {
        let f = parse(json!([{"name": " a ", "type": "string", "tags": ["t", "t"]}]));
        assert_eq!(f[0].name, "a");
        assert_eq!(f[0].tags, ["t"]);
    }

    #[test]
    fn widening_rules() {
        assert!(widens(FieldType::Integer, FieldType::Number));
        assert!(widens(FieldType::Boolean, FieldType::String));
        assert!(!widens(FieldType::Number, FieldType::Integer));
        assert!(!widens(FieldType::String, FieldType::Timestamp));
    }
}
