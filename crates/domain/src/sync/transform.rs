//! Transform steps (`rename`, `drop`, `cast`, `mask`, `filter`, `set`),
//! implemented once here so previews and flows run the same code.
//!
//! [`plan`] checks steps against the input fields (an unknown field is a
//! validation error naming the step) and answers the output fields;
//! [`apply`] runs the steps over a batch. A value that cannot be cast
//! becomes null.

use crate::FieldError;
use crate::connect::connector::{Field, FieldType, RecordBatch, Value, parse_date, parse_timestamp};
use crate::shared::mask::mask;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[allow(clippy::large_enum_variant)] // a mapping holds a handful of steps; boxing buys nothing
pub enum Step {
    Rename {
        from: String,
        to: String,
    },
    Drop {
        field: String,
    },
    Cast {
        field: String,
        to: FieldType,
    },
    Mask {
        field: String,
    },
    Filter {
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        eq: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ne: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gt: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lt: Option<serde_json::Value>,
    },
    Set {
        field: String,
        value: serde_json::Value,
    },
}

/// Parses steps from JSON, naming the step of each problem.
pub fn parse_steps(path: &str, value: &serde_json::Value) -> Result<Vec<Step>, Vec<FieldError>> {
    let Some(items) = value.as_array() else {
        return Err(vec![FieldError::new(path, "must be an array of steps")]);
    };
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match serde_json::from_value::<Step>(item.clone()) {
            Ok(s) => steps.push(s),
            Err(e) => errors.push(FieldError::new(format!("{path}[{i}]"), e.to_string())),
        }
    }
    if errors.is_empty() { Ok(steps) } else { Err(errors) }
}

/// Checks `steps` against `input` and answers the output fields.
pub fn plan(path: &str, steps: &[Step], input: &[Field]) -> Result<Vec<Field>, Vec<FieldError>> {
    let mut fields = input.to_vec();
    let mut errors = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let find = |fields: &[Field], name: &str| fields.iter().position(|f| f.name == name);
        let missing = |name: &str| FieldError::new(at.clone(), format!("unknown field '{name}'"));
        match step {
            Step::Rename { from, to } => match find(&fields, from) {
                Some(_) if find(&fields, to).is_some() && from != to => {
                    errors.push(FieldError::new(at.clone(), format!("field '{to}' already exists")))
                }
                Some(idx) => fields[idx].name = to.clone(),
                None => errors.push(missing(from)),
            },
            Step::Drop { field } => match find(&fields, field) {
                Some(idx) => {
                    fields.remove(idx);
                }
                None => errors.push(missing(field)),
            },
            Step::Cast { field, to } => match find(&fields, field) {
                Some(idx) => {
                    fields[idx].field_type = *to;
                    fields[idx].native_type = None;
                    fields[idx].nullable = true;
                }
                None => errors.push(missing(field)),
            },
            Step::Mask { field } => match find(&fields, field) {
                Some(idx) => {
                    fields[idx].field_type = FieldType::String;
                    fields[idx].native_type = None;
                }
                None => errors.push(missing(field)),
            },
            Step::Filter { field, eq, ne, gt, lt } => {
                if find(&fields, field).is_none() {
                    errors.push(missing(field));
                }
                let given = [eq, ne, gt, lt].iter().filter(|v| v.is_some()).count();
                if given != 1 {
                    errors.push(FieldError::new(at.clone(), "a filter takes exactly one of eq, ne, gt, lt"));
                }
            }
            Step::Set { field, value } => {
                let t = json_type(value);
                match find(&fields, field) {
                    Some(idx) => {
                        fields[idx].field_type = t;
                        fields[idx].native_type = None;
                    }
                    None => fields.push(Field::new(field.clone(), t)),
                }
            }
        }
    }
    if errors.is_empty() { Ok(fields) } else { Err(errors) }
}

fn json_type(v: &serde_json::Value) -> FieldType {
    use serde_json::Value as J;
    match v {
        J::Bool(_) => FieldType::Boolean,
        J::Number(n) if n.is_i64() || n.is_u64() => FieldType::Integer,
        J::Number(_) => FieldType::Number,
        J::Object(_) => FieldType::Object,
        J::Array(_) => FieldType::Array,
        J::Null | J::String(_) => FieldType::String,
    }
}

/// Runs `steps` over `batch`. The steps must have passed [`plan`] for the
/// batch's fields.
pub fn apply(steps: &[Step], batch: RecordBatch) -> RecordBatch {
    let mut fields: Vec<Field> = batch.fields.as_ref().clone();
    let mut rows = batch.rows;
    for step in steps {
        let idx = |fields: &[Field], name: &str| fields.iter().position(|f| f.name == name);
        match step {
            Step::Rename { from, to } => {
                if let Some(i) = idx(&fields, from) {
                    fields[i].name = to.clone();
                }
            }
            Step::Drop { field } => {
                if let Some(i) = idx(&fields, field) {
                    fields.remove(i);
                    for r in &mut rows {
                        r.remove(i);
                    }
                }
            }
            Step::Cast { field, to } => {
                if let Some(i) = idx(&fields, field) {
                    fields[i].field_type = *to;
                    fields[i].native_type = None;
                    fields[i].nullable = true;
                    for r in &mut rows {
                        let v = std::mem::replace(&mut r[i], Value::Null);
                        r[i] = cast(v, *to);
                    }
                }
            }
            Step::Mask { field } => {
                if let Some(i) = idx(&fields, field) {
                    fields[i].field_type = FieldType::String;
                    fields[i].native_type = None;
                    for r in &mut rows {
                        r[i] = match &r[i] {
                            Value::Null => Value::Null,
                            v => Value::String(mask(&display(v))),
                        };
                    }
                }
            }
            Step::Filter { field, eq, ne, gt, lt } => {
                if let Some(i) = idx(&fields, field) {
                    rows.retain(|r| {
                        let v = &r[i];
                        match (eq, ne, gt, lt) {
                            (Some(x), _, _, _) => compare(v, x) == Some(Ordering::Equal),
                            (_, Some(x), _, _) => compare(v, x) != Some(Ordering::Equal),
                            (_, _, Some(x), _) => compare(v, x) == Some(Ordering::Greater),
                            (_, _, _, Some(x)) => compare(v, x) == Some(Ordering::Less),
                            _ => true,
                        }
                    });
                }
            }
            Step::Set { field, value } => {
                let t = json_type(value);
                let v = from_json(value);
                match idx(&fields, field) {
                    Some(i) => {
                        fields[i].field_type = t;
                        fields[i].native_type = None;
                        for r in &mut rows {
                            r[i] = v.clone();
                        }
                    }
                    None => {
                        fields.push(Field::new(field.clone(), t));
                        for r in &mut rows {
                            r.push(v.clone());
                        }
                    }
                }
            }
        }
    }
    RecordBatch { fields: Arc::new(fields), rows }
}

/// A value's plain string form (strings unquoted).
pub fn display(v: &Value) -> String {
    match v {
        Value::String(s) | Value::Decimal(s) => s.clone(),
        other => match other.to_json() {
            serde_json::Value::String(s) => s,
            j => j.to_string(),
        },
    }
}

/// A JSON literal as a value.
pub fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => n.as_i64().map(Value::Int).unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN))),
        J::String(s) => Value::String(s.clone()),
        other => Value::Json(other.clone()),
    }
}

/// Orders a value against a JSON literal: numbers numerically, timestamps
/// and dates in time, everything else by string form. `None` when either
/// side is null.
pub fn compare(v: &Value, literal: &serde_json::Value) -> Option<Ordering> {
    if v.is_null() || literal.is_null() {
        return None;
    }
    let lit_str = match literal {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match v {
        Value::Int(_) | Value::Float(_) | Value::Decimal(_) => {
            let a = display(v).parse::<f64>().ok()?;
            let b = literal.as_f64().or_else(|| lit_str.parse().ok())?;
            a.partial_cmp(&b)
        }
        Value::Timestamp(t) => parse_timestamp(&lit_str).map(|b| t.cmp(&b)),
        Value::Date(d) => parse_date(&lit_str).map(|b| d.cmp(&b)),
        Value::Bool(b) => literal.as_bool().map(|l| b.cmp(&l)),
        _ => Some(display(v).cmp(&lit_str)),
    }
}

/// Converts a value to `to`; null when it cannot be.
pub fn cast(v: Value, to: FieldType) -> Value {
    if v.is_null() {
        return v;
    }
    let v = v.parsed();
    let s = display(&v);
    match to {
        FieldType::String => Value::String(s),
        FieldType::Integer => match v {
            Value::Int(i) => Value::Int(i),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Value::Int(f as i64),
            Value::Bool(b) => Value::Int(i64::from(b)),
            _ => s.trim().parse::<i64>().map(Value::Int).unwrap_or(Value::Null),
        },
        FieldType::Number => match v {
            Value::Float(f) => Value::Float(f),
            Value::Int(i) => Value::Float(i as f64),
            _ => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float).unwrap_or(Value::Null),
        },
        FieldType::Decimal => match v {
            Value::Int(i) => Value::Decimal(i.to_string()),
            _ => {
                let t = s.trim();
                if t.parse::<f64>().is_ok_and(f64::is_finite) && !t.contains(['e', 'E']) {
                    Value::Decimal(t.to_string())
                } else {
                    Value::Null
                }
            }
        },
        FieldType::Boolean => match v {
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Bool(i != 0),
            _ => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "t" | "yes" | "y" | "1" | "on" => Value::Bool(true),
                "false" | "f" | "no" | "n" | "0" | "off" => Value::Bool(false),
                _ => Value::Null,
            },
        },
        FieldType::Timestamp => match v {
            Value::Timestamp(t) => Value::Timestamp(t),
            Value::Date(d) => Value::Timestamp(d.midnight().assume_utc()),
            _ => parse_timestamp(&s).map(Value::Timestamp).unwrap_or(Value::Null),
        },
        FieldType::Date => match v {
            Value::Date(d) => Value::Date(d),
            Value::Timestamp(t) => Value::Date(t.to_offset(time::UtcOffset::UTC).date()),
            _ => {
                parse_date(&s).or_else(|| parse_timestamp(&s).map(|t| t.date())).map(Value::Date).unwrap_or(Value::Null)
            }
        },
        FieldType::Object => match v {
            Value::Json(j @ serde_json::Value::Object(_)) => Value::Json(j),
            _ => match serde_json::from_str::<serde_json::Value>(&s) {
                Ok(j @ serde_json::Value::Object(_)) => Value::Json(j),
                _ => Value::Null,
            },
        },
        FieldType::Array => match v {
            Value::Json(j @ serde_json::Value::Array(_)) => Value::Json(j),
            _ => match serde_json::from_str::<serde_json::Value>(&s) {
                Ok(j @ serde_json::Value::Array(_)) => Value::Json(j),
                _ => Value::Null,
            },
        },
        FieldType::Binary => match v {
            Value::Bytes(b) => Value::Bytes(b),
            _ => Value::Bytes(s.into_bytes()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn batch() -> RecordBatch {
        let mut id = Field::new("id", FieldType::Integer);
        id.primary_key = true;
        RecordBatch {
            fields: Arc::new(vec![id, Field::new("email", FieldType::String), Field::new("amount", FieldType::String)]),
            rows: vec![
                vec![Value::Int(1), Value::String("john@example.com".into()), Value::String("10.5".into())],
                vec![Value::Int(2), Value::String("ann@example.org".into()), Value::String("x".into())],
                vec![Value::Int(3), Value::Null, Value::String("7".into())],
            ],
        }
    }

    fn steps(v: serde_json::Value) -> Vec<Step> {
        parse_steps("transform", &v).unwrap()
    }

    #[test]
    fn each_step_does_what_it_says() {
        let s = steps(json!([
            {"op": "rename", "from": "email", "to": "contact"},
            {"op": "cast", "field": "amount", "to": "number"},
            {"op": "mask", "field": "contact"},
            {"op": "filter", "field": "id", "ne": 2},
            {"op": "set", "field": "source", "value": "crm"},
            {"op": "drop", "field": "id"}
        ]));
        let planned = plan("transform", &s, &batch().fields).unwrap();
        let out = apply(&s, batch());
        assert_eq!(out.fields.as_ref(), &planned);
        let names: Vec<&str> = out.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["contact", "amount", "source"]);
        assert_eq!(
            out.rows,
            vec![
                vec![Value::String("j****@example.com".into()), Value::Float(10.5), Value::String("crm".into())],
                vec![Value::Null, Value::Float(7.0), Value::String("crm".into())],
            ]
        );
    }

    #[test]
    fn a_failed_cast_is_null() {
        let out = apply(&steps(json!([{"op": "cast", "field": "amount", "to": "integer"}])), batch());
        assert_eq!(
            out.rows.iter().map(|r| r[2].clone()).collect::<Vec<_>>(),
            [Value::Null, Value::Null, Value::Int(7)]
        );
    }

    #[test]
    fn filters_compare_numbers_timestamps_and_strings() {
        assert_eq!(compare(&Value::Int(10), &json!(9)), Some(Ordering::Greater));
        assert_eq!(compare(&Value::Decimal("2.50".into()), &json!("2.5")), Some(Ordering::Equal));
        let t = parse_timestamp("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(compare(&Value::Timestamp(t), &json!("2025-12-31T23:00:00-02:00")), Some(Ordering::Less));
        assert_eq!(compare(&Value::String("b".into()), &json!("a")), Some(Ordering::Greater));
        assert_eq!(compare(&Value::Null, &json!(1)), None);
        let out = apply(&steps(json!([{"op": "filter", "field": "id", "gt": 1}])), batch());
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn unknown_ops_fields_and_ambiguous_filters_are_named() {
        let errs = parse_steps("t", &json!([{"op": "explode", "field": "id"}])).unwrap_err();
        assert_eq!(errs[0].field, "t[0]");
        let errs = parse_steps("t", &json!([{"op": "drop", "field": "id", "extra": 1}])).unwrap_err();
        assert_eq!(errs[0].field, "t[0]");
        let s = steps(json!([{"op": "drop", "field": "nope"}, {"op": "filter", "field": "id", "eq": 1, "lt": 3}]));
        let errs = plan("t", &s, &batch().fields).unwrap_err();
        assert_eq!(errs.len(), 2);
        assert!(errs[0].message.contains("nope"));
        assert_eq!(errs[1].field, "t[1]");
        let s = steps(json!([{"op": "rename", "from": "id", "to": "email"}]));
        assert!(plan("t", &s, &batch().fields).is_err());
    }

    #[test]
    fn casts_cover_the_vocabulary() {
        assert_eq!(cast(Value::String(" 42 ".into()), FieldType::Integer), Value::Int(42));
        assert_eq!(cast(Value::String("yes".into()), FieldType::Boolean), Value::Bool(true));
        assert_eq!(
            cast(Value::String("2026-02-03".into()), FieldType::Date),
            Value::Date(time::macros::date!(2026 - 02 - 03))
        );
        assert_eq!(cast(Value::String("{\"a\":1}".into()), FieldType::Object), Value::Json(json!({"a": 1})));
        assert_eq!(cast(Value::String("1e400".into()), FieldType::Number), Value::Null);
        assert_eq!(cast(Value::Float(3.0), FieldType::Integer), Value::Int(3));
        assert_eq!(cast(Value::String("12.30".into()), FieldType::Decimal), Value::Decimal("12.30".into()));
        assert_eq!(cast(Value::Int(5), FieldType::String), Value::String("5".into()));
    }
}
