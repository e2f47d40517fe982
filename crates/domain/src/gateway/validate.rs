//! Coercion to the contract's types, masking of sensitive fields, and the
//! failure report; the contract's decisions on keys, nulls and numbers.

use super::ContractField;
use super::extract::is_space;
use super::scan::Finding;
use crate::connect::connector::{FieldType, parse_date, parse_timestamp};
use serde::Serialize;
use serde_json::{Map, Number, Value};

/// A value whose type does not fit and could not be coerced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeMismatch {
    pub field: String,
    pub expected: String,
    pub received: String,
}

/// The outcome of validating an extracted object against a contract.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Valid { data: Map<String, Value>, governance_applied: Vec<String>, safety_findings: Vec<Finding> },
    Invalid { missing_fields: Vec<String>, type_mismatches: Vec<TypeMismatch> },
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The number in a string as people and models write it: around it
/// whitespace, a sign, a currency sign or code, a trailing unit word
/// (`"$1,200"`, `"42 years"`, `"EUR 12.50"`, `"-€5"`); inside it thousands
/// separators (`,`, `_`, spaces). `None` when no number leads the text or
/// words come before it.
fn number_in(s: &str) -> Option<f64> {
    const CURRENCY: [char; 8] = ['$', '€', '£', '¥', '₹', '₩', '₽', '¢'];
    let mut t = s.trim_matches(is_space);
    let mut negative = false;
    if let Some(rest) = t.strip_prefix('-') {
        negative = true;
        t = rest.trim_start_matches(is_space);
    }
    // A currency before the number: a sign, or a three-letter code.
    t = t.trim_start_matches(CURRENCY).trim_start_matches(is_space);
    if t.len() > 3 && t.as_bytes()[..3].iter().all(u8::is_ascii_uppercase) && !t.as_bytes()[3].is_ascii_alphabetic() {
        t = t[3..].trim_start_matches(is_space);
    }
    if !negative && let Some(rest) = t.strip_prefix('-') {
        negative = true;
        t = rest;
    }
    // The number: digits, separators between digits, one point, an exponent.
    let mut digits = String::with_capacity(t.len());
    let mut chars = t.char_indices().peekable();
    let mut end = 0;
    while let Some((i, c)) = chars.next() {
        let next_is_digit = chars.peek().is_some_and(|(_, n)| n.is_ascii_digit());
        match c {
            '0'..='9' => digits.push(c),
            '.' if !digits.contains(['.', 'e']) => digits.push('.'),
            ',' | '_' | ' ' | '\u{a0}' | '\u{202f}' | '\'' if !digits.is_empty() && next_is_digit => {}
            'e' | 'E' if !digits.is_empty() && !digits.contains('e') => {
                let rest = &t[i + 1..];
                let exp: String = rest.chars().take_while(|d| d.is_ascii_digit() || *d == '-' || *d == '+').collect();
                if exp.chars().any(|d| d.is_ascii_digit()) {
                    digits.push('e');
                    digits.push_str(&exp);
                    end = i + 1 + exp.len();
                    for _ in 0..exp.chars().count() {
                        chars.next();
                    }
                    continue;
                }
                break;
            }
            _ => break,
        }
        end = i + c.len_utf8();
    }
    if !digits.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    // After it: nothing, a currency sign or code, or a unit word.
    let rest = t[end..].trim_matches(is_space).trim_start_matches(CURRENCY).trim_start_matches(is_space);
    if !(rest.is_empty() || rest.chars().all(|c| c.is_alphabetic() || is_space(c) || c == '.' || c == '%')) {
        return None;
    }
    let v: f64 = digits.trim_end_matches('.').parse().ok().filter(|f: &f64| f.is_finite())?;
    Some(if negative { -v } else { v })
}

/// The words that stand for "no value" in a field that is not a string.
fn is_null_word(s: &str) -> bool {
    let t = s.trim_matches(is_space);
    t.is_empty() || ["null", "none", "n/a", "nil"].iter().any(|w| t.eq_ignore_ascii_case(w))
}

/// An integer field takes a whole number, or a fraction rounded (half away
/// from zero), within the range JSON consumers read exactly.
fn to_integer(f: f64) -> Option<Value> {
    let r = f.round();
    (r.abs() < 9.0e15).then(|| Value::from(r as i64))
}

fn coerce(v: &Value, t: FieldType) -> Option<Value> {
    match (t, v) {
        (FieldType::Integer, Value::Number(n)) if n.is_i64() || n.is_u64() => Some(v.clone()),
        (FieldType::Integer, Value::Number(n)) => n.as_f64().and_then(to_integer),
        (FieldType::Integer, Value::String(s)) => number_in(s).and_then(to_integer),
        (FieldType::Number | FieldType::Decimal, Value::Number(_)) => Some(v.clone()),
        (FieldType::Number | FieldType::Decimal, Value::String(s)) => {
            let f = number_in(s)?;
            // A whole number stays an integer in JSON (`"$1,200"` → 1200).
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Some(Value::from(f as i64))
            } else {
                Number::from_f64(f).map(Value::Number)
            }
        }
        (FieldType::Boolean, Value::Bool(_)) => Some(v.clone()),
        (FieldType::Boolean, Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" | "t" | "on" | "1" | "si" | "oui" => Some(Value::Bool(true)),
            "no" | "n" | "false" | "f" | "off" | "0" | "non" => Some(Value::Bool(false)),
            _ => None,
        },
        (FieldType::Boolean, Value::Number(n)) => match n.as_f64() {
            Some(1.0) => Some(Value::Bool(true)),
            Some(0.0) => Some(Value::Bool(false)),
            _ => None,
        },
        (FieldType::String | FieldType::Binary, Value::String(_)) => Some(v.clone()),
        (FieldType::String, Value::Number(n)) => Some(Value::String(n.to_string())),
        (FieldType::String, Value::Bool(b)) => Some(Value::String(b.to_string())),
        (FieldType::Timestamp, Value::String(s)) => parse_timestamp(s).map(|_| v.clone()),
        (FieldType::Date, Value::String(s)) => parse_date(s).map(|_| v.clone()),
        (FieldType::Array, Value::Array(_)) | (FieldType::Object, Value::Object(_)) => Some(v.clone()),
        _ => None,
    }
}

/// A key as matched when no key is the field's name exactly: case folded,
/// and spaces, hyphens and underscores alike (`"User ID"` ~ `user_id`).
fn folded(key: &str) -> String {
    key.trim_matches(is_space)
        .chars()
        .map(|c| if is_space(c) || c == '-' { '_' } else { c })
        .flat_map(char::to_lowercase)
        .collect()
}

/// How the fields of one contract level and the keys of one object fold,
/// made once per object on the first field not found by its exact name.
struct Folds<'a> {
    /// Each field's folded name, in the contract's order.
    fields: Vec<String>,
    /// The object's keys that no field names exactly, by folded form; a
    /// form two keys share holds `None`.
    keys: std::collections::HashMap<String, Option<&'a Value>>,
}

impl<'a> Folds<'a> {
    fn new(obj: &'a Map<String, Value>, fields: &[ContractField]) -> Self {
        let mut keys = std::collections::HashMap::new();
        for (k, v) in obj.iter().filter(|(k, _)| !fields.iter().any(|f| f.name == **k)) {
            keys.entry(folded(k)).and_modify(|seen| *seen = None).or_insert(Some(v));
        }
        Folds { fields: fields.iter().map(|f| folded(&f.name)).collect(), keys }
    }
}

/// The value `obj` holds for `fields[i]`: under its exact name, else under
/// the key that folds to it when the match is one to one: no other field of
/// `fields` folds alike, and no other key of `obj` does (either way the
/// match would be a guess). Independent of the order of `obj`'s keys.
fn lookup<'a>(
    obj: &'a Map<String, Value>,
    fields: &[ContractField],
    i: usize,
    folds: &mut Option<Folds<'a>>,
) -> Option<&'a Value> {
    if let Some(v) = obj.get(&fields[i].name) {
        return Some(v);
    }
    let folds = folds.get_or_insert_with(|| Folds::new(obj, fields));
    let want = &folds.fields[i];
    if folds.fields.iter().filter(|f| *f == want).count() != 1 {
        return None;
    }
    folds.keys.get(want).copied().flatten()
}

pub(super) struct Walk {
    pub(super) missing: Vec<String>,
    pub(super) mismatches: Vec<TypeMismatch>,
    pub(super) governance: Vec<String>,
}

/// A field's dotted path below `prefix` (the field's name at the top).
pub(super) fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}

pub(super) fn walk(
    obj: &Map<String, Value>,
    fields: &[ContractField],
    prefix: &str,
    w: &mut Walk,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut folds = None;
    for (i, f) in fields.iter().enumerate() {
        // The dotted path is only made when something is reported.
        let path = || dotted(prefix, &f.name);
        // `null` (and, outside string fields, the null words) is no value:
        // an optional field is dropped, a required one missing.
        let v = match lookup(obj, fields, i, &mut folds) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if f.field_type != FieldType::String && is_null_word(s) => None,
            Some(v) => Some(v),
        };
        let Some(v) = v else {
            if f.required {
                w.missing.push(path());
            }
            continue;
        };
        let coerced = if f.field_type == FieldType::Object && !f.fields.is_empty() {
            match v {
                Value::Object(inner) => Some(Value::Object(walk(inner, &f.fields, &path(), w))),
                _ => None,
            }
        } else {
            coerce(v, f.field_type)
        };
        match coerced {
            None => w.mismatches.push(TypeMismatch {
                field: path(),
                expected: f.field_type.as_str().into(),
                received: type_name(v).into(),
            }),
            Some(c) if f.sensitive() => {
                let text = match &c {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.insert(f.name.clone(), Value::String(crate::shared::mask::mask(&text)));
                w.governance.push(format!("{}_MASK", path()));
            }
            Some(c) => {
                out.insert(f.name.clone(), c);
            }
        }
    }
    out
}

/// Coerces `obj` to the contract, masks sensitive fields, drops fields the
/// contract does not name, and reports what is missing or mistyped.
pub fn validate(obj: &Map<String, Value>, contract: &[ContractField]) -> Outcome {
    let mut w = Walk { missing: Vec::new(), mismatches: Vec::new(), governance: Vec::new() };
    let data = walk(obj, contract, "", &mut w);
    if !w.missing.is_empty() || !w.mismatches.is_empty() {
        return Outcome::Invalid { missing_fields: w.missing, type_mismatches: w.mismatches };
    }
    let mut findings = Vec::new();
    super::scan::scan(&data, contract, "", &mut findings);
    Outcome::Valid { data, governance_applied: w.governance, safety_findings: findings }
}
