//! Coercion to the contract's types, masking of sensitive fields, and the
//! failure report; the contract's decisions on keys, nulls and numbers.

use super::ContractField;
use super::repair::{Repair, RepairKind};
use super::scan::Finding;
use super::text::{dotted, is_space};
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
    Valid {
        data: Map<String, Value>,
        governance_applied: Vec<String>,
        safety_findings: Vec<Finding>,
        /// Every change made between the raw text and `data`, in order.
        repairs: Vec<Repair>,
    },
    Invalid {
        missing_fields: Vec<String>,
        type_mismatches: Vec<TypeMismatch>,
        /// The changes made before the contract failed, in order.
        repairs: Vec<Repair>,
        /// A text to send back to the model (see [`retry_prompt`]).
        retry_prompt: String,
    },
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

/// A number as written in a string, taken apart: its digits (a point
/// and an exponent included), its sign, and what was around it.
struct NumberText {
    digits: String,
    negative: bool,
    /// A currency sign or code, or a unit word, was around it.
    unit: bool,
    /// Thousands separators were inside it.
    separators: bool,
}

impl NumberText {
    fn float(&self) -> Option<f64> {
        let v: f64 = self.digits.trim_end_matches('.').parse().ok().filter(|f: &f64| f.is_finite())?;
        Some(if self.negative { -v } else { v })
    }

    /// The integer it is, exactly, when it has no point or exponent:
    /// `Some(None)` when it does not fit 64 bits.
    fn exact_integer(&self) -> Option<Option<i64>> {
        if self.digits.contains(['.', 'e']) {
            return None;
        }
        let text = if self.negative { format!("-{}", self.digits) } else { self.digits.clone() };
        Some(text.parse::<i64>().ok())
    }
}

/// The number in a string as people and models write it: around it
/// whitespace, a sign (`+` or `-`), a currency sign or code, a trailing
/// unit word (`"$1,200"`, `"42 years"`, `"EUR 12.50"`, `"-€5"`, `"+7"`);
/// inside it thousands separators (`,`, `_`, spaces). `None` when no
/// number leads the text or words come before it.
fn number_in(s: &str) -> Option<NumberText> {
    const CURRENCY: [char; 8] = ['$', '€', '£', '¥', '₹', '₩', '₽', '¢'];
    let mut t = s.trim_matches(is_space);
    let mut negative = false;
    let mut unit = false;
    if let Some(rest) = t.strip_prefix('-') {
        negative = true;
        t = rest.trim_start_matches(is_space);
    } else if let Some(rest) = t.strip_prefix('+') {
        t = rest.trim_start_matches(is_space);
    }
    // A currency before the number: a sign, or a three-letter code.
    let before = t.len();
    t = t.trim_start_matches(CURRENCY).trim_start_matches(is_space);
    if t.len() > 3 && t.as_bytes()[..3].iter().all(u8::is_ascii_uppercase) && !t.as_bytes()[3].is_ascii_alphabetic() {
        t = t[3..].trim_start_matches(is_space);
    }
    unit |= t.len() != before;
    if !negative && let Some(rest) = t.strip_prefix('-') {
        negative = true;
        t = rest;
    }
    // The number: digits, separators between digits, one point, an exponent.
    let mut digits = String::with_capacity(t.len());
    let mut separators = false;
    let mut chars = t.char_indices().peekable();
    let mut end = 0;
    while let Some((i, c)) = chars.next() {
        let next_is_digit = chars.peek().is_some_and(|(_, n)| n.is_ascii_digit());
        match c {
            '0'..='9' => digits.push(c),
            '.' if !digits.contains(['.', 'e']) => digits.push('.'),
            ',' | '_' | ' ' | '\u{a0}' | '\u{202f}' | '\'' if !digits.is_empty() && next_is_digit => separators = true,
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
    unit |= !t[end..].trim_matches(is_space).is_empty();
    Some(NumberText { digits, negative, unit, separators })
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

/// What coercion noted: a kind and its detail.
type Notes = Vec<(RepairKind, String)>;

/// A value as a repair's detail shows it (short), or nothing for a
/// sensitive field.
fn shown(v: &Value, visible: bool) -> String {
    if !visible {
        return String::new();
    }
    let text = match v {
        Value::String(s) if s.chars().count() > 40 => format!("\"{}…\"", s.chars().take(40).collect::<String>()),
        other => other.to_string(),
    };
    format!(" {text}")
}

/// `v` as the field's type `t`, with what that took; `None` when it does
/// not fit. `visible`: the value may appear in a repair's detail (the field
/// is not sensitive).
fn coerce(v: &Value, t: FieldType, visible: bool) -> Option<(Value, Notes)> {
    let mut notes: Notes = Vec::new();
    let converted = |from: &str, to: &str| format!("{from}{} → {to}", shown(v, visible));
    let numeric = |n: &NumberText, notes: &mut Notes| {
        if n.unit {
            notes.push((
                RepairKind::UnitStripped,
                format!("a currency or unit around the number dropped{}", shown(v, visible)),
            ));
        }
        if n.separators {
            notes.push((RepairKind::SeparatorRemoved, format!("thousands separators dropped{}", shown(v, visible))));
        }
    };
    let rounded = |f: f64, notes: &mut Notes| {
        let r = to_integer(f)?;
        if f.fract() != 0.0 {
            let detail = if visible { format!("{f} → {r}") } else { "a fraction rounded to an integer".into() };
            notes.push((RepairKind::Rounded, detail));
        }
        Some(r)
    };
    let value = match (t, v) {
        (FieldType::Integer, Value::Number(n)) if n.is_i64() => v.clone(),
        // Past i64: not an integer JSON consumers read.
        (FieldType::Integer, Value::Number(n)) if n.is_u64() => return None,
        (FieldType::Integer, Value::Number(n)) => rounded(n.as_f64()?, &mut notes)?,
        (FieldType::Integer, Value::String(s)) => {
            let n = number_in(s)?;
            notes.push((RepairKind::Coerced, converted("string", "integer")));
            numeric(&n, &mut notes);
            match n.exact_integer() {
                // Exactly, however large (no detour through floating point);
                // one past 64 bits does not fit.
                Some(exact) => Value::from(exact?),
                None => rounded(n.float()?, &mut notes)?,
            }
        }
        (FieldType::Number | FieldType::Decimal, Value::Number(_)) => v.clone(),
        (FieldType::Number | FieldType::Decimal, Value::String(s)) => {
            let n = number_in(s)?;
            let f = n.float()?;
            notes.push((RepairKind::Coerced, converted("string", t.as_str())));
            numeric(&n, &mut notes);
            // A whole number stays an integer in JSON (`"$1,200"` → 1200).
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Value::from(f as i64)
            } else {
                Number::from_f64(f).map(Value::Number)?
            }
        }
        (FieldType::Boolean, Value::Bool(_)) => v.clone(),
        (FieldType::Boolean, Value::String(s)) => {
            let b = match s.trim().to_ascii_lowercase().as_str() {
                "yes" | "y" | "true" | "t" | "on" | "1" | "si" | "oui" => true,
                "no" | "n" | "false" | "f" | "off" | "0" | "non" => false,
                _ => return None,
            };
            notes.push((RepairKind::Coerced, converted("string", "boolean")));
            Value::Bool(b)
        }
        (FieldType::Boolean, Value::Number(n)) => {
            let b = match n.as_f64() {
                Some(1.0) => true,
                Some(0.0) => false,
                _ => return None,
            };
            notes.push((RepairKind::Coerced, converted("number", "boolean")));
            Value::Bool(b)
        }
        (FieldType::String | FieldType::Binary, Value::String(_)) => v.clone(),
        (FieldType::String, Value::Number(n)) => {
            notes.push((RepairKind::Coerced, converted("number", "string")));
            Value::String(n.to_string())
        }
        (FieldType::String, Value::Bool(b)) => {
            notes.push((RepairKind::Coerced, converted("boolean", "string")));
            Value::String(b.to_string())
        }
        (FieldType::Timestamp, Value::String(s)) => parse_timestamp(s).map(|_| v.clone())?,
        (FieldType::Date, Value::String(s)) => parse_date(s).map(|_| v.clone())?,
        (FieldType::Array, Value::Array(_)) | (FieldType::Object, Value::Object(_)) => v.clone(),
        _ => return None,
    };
    Some((value, notes))
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
    keys: std::collections::HashMap<String, Option<(&'a str, &'a Value)>>,
}

impl<'a> Folds<'a> {
    fn new(obj: &'a Map<String, Value>, fields: &[ContractField]) -> Self {
        let mut keys = std::collections::HashMap::new();
        for (k, v) in obj.iter().filter(|(k, _)| !fields.iter().any(|f| f.name == **k)) {
            keys.entry(folded(k)).and_modify(|seen| *seen = None).or_insert(Some((k.as_str(), v)));
        }
        Folds { fields: fields.iter().map(|f| folded(&f.name)).collect(), keys }
    }
}

/// The value `obj` holds for `fields[i]`, and the key it was under when
/// that is not the field's name: under its exact name, else under the key
/// that folds to it when the match is one to one: no other field of
/// `fields` folds alike, and no other key of `obj` does (either way the
/// match would be a guess). Independent of the order of `obj`'s keys.
fn lookup<'a>(
    obj: &'a Map<String, Value>,
    fields: &[ContractField],
    i: usize,
    folds: &mut Option<Folds<'a>>,
) -> Option<(&'a Value, Option<&'a str>)> {
    if let Some(v) = obj.get(&fields[i].name) {
        return Some((v, None));
    }
    let folds = folds.get_or_insert_with(|| Folds::new(obj, fields));
    let want = &folds.fields[i];
    if folds.fields.iter().filter(|f| *f == want).count() != 1 {
        return None;
    }
    folds.keys.get(want).copied().flatten().map(|(k, v)| (v, Some(k)))
}

pub(super) struct Walk {
    pub(super) missing: Vec<String>,
    /// The expected type of each missing field, beside `missing`.
    pub(super) missing_types: Vec<&'static str>,
    pub(super) mismatches: Vec<TypeMismatch>,
    pub(super) governance: Vec<String>,
    /// The repairs, when they are recorded (not while candidates are
    /// weighed).
    pub(super) repairs: Option<Vec<Repair>>,
    /// Inside a sensitive object: no value may appear in a repair.
    hidden: bool,
}

impl Walk {
    /// A walk that records no repairs.
    pub(super) fn quiet() -> Self {
        Walk {
            missing: Vec::new(),
            missing_types: Vec::new(),
            mismatches: Vec::new(),
            governance: Vec::new(),
            repairs: None,
            hidden: false,
        }
    }

    fn noting(repairs: Vec<Repair>) -> Self {
        Walk { repairs: Some(repairs), ..Walk::quiet() }
    }

    /// Records a repair (its path and detail made only when recorded).
    fn note(&mut self, path: impl FnOnce() -> String, kind: RepairKind, detail: impl FnOnce() -> String) {
        if let Some(r) = self.repairs.as_mut() {
            r.push(Repair::new(path(), kind, detail()));
        }
    }
}

pub(super) fn walk(
    obj: &Map<String, Value>,
    fields: &[ContractField],
    prefix: &str,
    w: &mut Walk,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut folds = None;
    // The keys a field took under another spelling (for the report of the
    // keys dropped).
    let mut folded_keys: Vec<&str> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        // The dotted path is only made when something is reported.
        let path = || dotted(prefix, &f.name);
        let visible = !f.sensitive() && !w.hidden;
        let found = lookup(obj, fields, i, &mut folds);
        if let Some((_, Some(key))) = found {
            folded_keys.push(key);
            w.note(path, RepairKind::KeyFolded, || format!("the key {} read as {}", Value::from(key), f.name));
        }
        // `null` (and, outside string fields, the null words) is no value:
        // an optional field is dropped, a required one missing.
        let v = match found.map(|(v, _)| v) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if f.field_type != FieldType::String && is_null_word(s) => {
                w.note(path, RepairKind::NullWord, || {
                    if visible {
                        format!("{} read as null", Value::from(s.as_str()))
                    } else {
                        "a null word read as null".into()
                    }
                });
                None
            }
            Some(v) => Some(v),
        };
        let Some(v) = v else {
            if f.required {
                w.missing.push(path());
                w.missing_types.push(f.field_type.as_str());
            }
            continue;
        };
        let coerced = if f.field_type == FieldType::Object && !f.fields.is_empty() {
            match v {
                Value::Object(inner) => {
                    let hidden = std::mem::replace(&mut w.hidden, !visible);
                    let v = walk(inner, &f.fields, &path(), w);
                    w.hidden = hidden;
                    Some((Value::Object(v), Vec::new()))
                }
                _ => None,
            }
        } else {
            coerce(v, f.field_type, visible)
        };
        match coerced {
            None => w.mismatches.push(TypeMismatch {
                field: path(),
                expected: f.field_type.as_str().into(),
                received: type_name(v).into(),
            }),
            Some((c, notes)) => {
                for (kind, detail) in notes {
                    w.note(path, kind, || detail);
                }
                if f.sensitive() {
                    let text = match &c {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.insert(f.name.clone(), Value::String(crate::shared::mask::mask(&text)));
                    w.governance.push(format!("{}_MASK", path()));
                    w.note(path, RepairKind::Masked, || "tagged PII.Sensitive: masked".into());
                } else {
                    out.insert(f.name.clone(), c);
                }
            }
        }
    }
    if w.repairs.is_some() {
        for key in obj.keys().filter(|k| !fields.iter().any(|f| f.name == **k) && !folded_keys.contains(&k.as_str())) {
            w.note(|| dotted(prefix, key), RepairKind::UnknownFieldDropped, || "not in the contract: dropped".into());
        }
    }
    out
}

/// Coerces `obj` to the contract, masks sensitive fields, drops fields the
/// contract does not name, and reports what is missing or mistyped.
pub fn validate(obj: &Map<String, Value>, contract: &[ContractField]) -> Outcome {
    validate_noted(obj, contract, Vec::new())
}

/// [`validate`], its repairs after `repairs` (the extraction's).
pub fn validate_noted(obj: &Map<String, Value>, contract: &[ContractField], repairs: Vec<Repair>) -> Outcome {
    let mut w = Walk::noting(repairs);
    let data = walk(obj, contract, "", &mut w);
    let repairs = w.repairs.take().unwrap_or_default();
    if !w.missing.is_empty() || !w.mismatches.is_empty() {
        let missing: Vec<(String, &str)> = w.missing.iter().cloned().zip(w.missing_types.iter().copied()).collect();
        let retry_prompt = retry_prompt(&missing, &w.mismatches);
        return Outcome::Invalid { missing_fields: w.missing, type_mismatches: w.mismatches, repairs, retry_prompt };
    }
    let mut findings = Vec::new();
    super::scan::scan(&data, contract, "", &mut findings);
    Outcome::Valid { data, governance_applied: w.governance, safety_findings: findings, repairs }
}

/// A text to send back to the model after a schema failure: what to
/// answer, each missing field with its type, each mismatch with the type
/// expected, by dotted path; nothing the model sent (so no sensitive
/// value).
pub fn retry_prompt(missing: &[(String, &str)], mismatches: &[TypeMismatch]) -> String {
    let mut out = String::from(
        "Your previous answer did not match the expected JSON. Answer again with one JSON object and nothing else.",
    );
    if !missing.is_empty() {
        out.push_str("\nMissing required fields:");
        for (path, t) in missing {
            out.push_str(&format!("\n- {path} ({t})"));
        }
    }
    if !mismatches.is_empty() {
        out.push_str("\nFields with the wrong type:");
        for m in mismatches {
            out.push_str(&format!("\n- {}: expected {}, got {}", m.field, m.expected, m.received));
        }
    }
    out
}
