//! The LLM validation gateway as pure functions, embeddable without HTTP:
//! [`extract`] one JSON object from raw model output, [`validate`] it
//! against a contract (coercion, masking of sensitive fields, dropping
//! unknown fields, the failure report), and list safety findings.
//!
//! Extraction tries strict JSON first. Otherwise it scans the text for
//! balanced `{…}` (and `[…]`) candidates, which covers prose around the
//! object, fenced code blocks and XML-like tags, and repairs each the ways
//! LLM output breaks: trailing commas, single or smart quotes, unquoted
//! keys, comments, Python literals (`True`, `None`), and a final object cut
//! off before its closing braces. Of several candidates it takes the first
//! that fits the contract best.

use crate::connector::{FieldType, parse_date, parse_timestamp};
use serde::Serialize;
use serde_json::{Map, Number, Value};

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

// ---- extraction ----------------------------------------------------------

/// The JSON object in `raw`, if any; `contract` breaks ties between
/// candidates (the one holding most of the contract's field names wins,
/// the earliest among equals).
pub fn extract(raw: &str, contract: &[ContractField]) -> Option<Map<String, Value>> {
    if let Some(o) = serde_json::from_str::<Value>(raw.trim()).ok().and_then(as_object) {
        return Some(o);
    }
    // Byte offsets: `{` and `[` never occur inside a multi-byte character.
    let b = raw.as_bytes();
    let mut candidates = Vec::new();
    let mut i = 0;
    let mut unclosed = None;
    while i < b.len() {
        if b[i] == b'{' || b[i] == b'[' {
            match matching_close(raw, i) {
                Some(end) => {
                    if let Some(o) = lenient(&raw[i..=end]) {
                        candidates.push(o);
                        i = end + 1;
                        continue;
                    }
                }
                None if b[i] == b'{' && unclosed.is_none() => unclosed = Some(i),
                None => {}
            }
        }
        i += 1;
    }
    if candidates.is_empty()
        && let Some(start) = unclosed
        && let Some(o) = lenient(&complete_truncated(&raw[start..]))
    {
        candidates.push(o);
    }
    let score = |o: &Map<String, Value>| contract.iter().filter(|f| o.contains_key(&f.name)).count();
    let mut best: Option<(usize, Map<String, Value>)> = None;
    for c in candidates {
        let s = score(&c);
        if best.as_ref().is_none_or(|(b, _)| s > *b) {
            best = Some((s, c));
        }
    }
    best.map(|(_, o)| o)
}

/// An object, or the first object of an array.
fn as_object(v: Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(o) => Some(o),
        Value::Array(items) => items.into_iter().find_map(|x| match x {
            Value::Object(o) => Some(o),
            _ => None,
        }),
        _ => None,
    }
}

fn lenient(text: &str) -> Option<Map<String, Value>> {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(as_object)
        .or_else(|| serde_json::from_str::<Value>(&repair(text)).ok().and_then(as_object))
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’')
}

fn closes(open: char, c: char) -> bool {
    match open {
        '"' => c == '"' || c == '”',
        '\'' => c == '\'',
        '“' | '”' => c == '”' || c == '“' || c == '"',
        '‘' | '’' => c == '’' || c == '‘',
        _ => false,
    }
}

/// The character at byte offset `i` of `s` (`None` at the end).
fn at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|rest| rest.chars().next())
}

/// Skips a `//` or `/* */` comment starting at byte `i`; the offset after
/// it, or `None` when no comment starts there.
fn skip_comment(b: &[u8], mut i: usize) -> Option<usize> {
    match b.get(i..i + 2) {
        Some(b"//") => {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            Some(i)
        }
        Some(b"/*") => {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            Some((i + 2).min(b.len()))
        }
        _ => None,
    }
}

/// The byte offset of the bracket closing the one at byte `start`,
/// skipping strings and comments.
fn matching_close(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut in_str: Option<char> = None;
    let mut i = start;
    while let Some(c) = at(s, i) {
        if let Some(q) = in_str {
            if c == '\\' {
                i += 1;
                i += at(s, i).map_or(1, char::len_utf8);
                continue;
            }
            if closes(q, c) {
                in_str = None;
            }
            i += c.len_utf8();
            continue;
        }
        if let Some(next) = skip_comment(b, i) {
            i = next;
            continue;
        }
        match c {
            c if is_quote(c) => in_str = Some(c),
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += c.len_utf8();
    }
    None
}

/// Rewrites JSON-ish text as strict JSON: quotes of any kind become double
/// quotes, bare keys and words are quoted, Python and JS literals become
/// JSON ones, comments and trailing commas go.
pub fn repair(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let next_significant = |mut j: usize| -> Option<char> {
        loop {
            let c = at(text, j)?;
            if c.is_whitespace() {
                j += c.len_utf8();
            } else if let Some(next) = skip_comment(b, j) {
                j = next;
            } else {
                return Some(c);
            }
        }
    };
    let mut i = 0;
    while let Some(c) = at(text, i) {
        if c.is_whitespace() {
            out.push(c);
            i += c.len_utf8();
        } else if let Some(next) = skip_comment(b, i) {
            i = next;
        } else if is_quote(c) {
            i += c.len_utf8();
            out.push('"');
            loop {
                // Plain runs are copied whole; quotes, backslashes and
                // control characters one by one.
                let start = i;
                while let Some(d) = at(text, i) {
                    if closes(c, d) || d == '\\' || d == '"' || u32::from(d) < 0x20 {
                        break;
                    }
                    i += d.len_utf8();
                }
                out.push_str(&text[start..i]);
                match at(text, i) {
                    None => break,
                    Some(d) if closes(c, d) => {
                        i += d.len_utf8();
                        break;
                    }
                    Some('\\') if i + 1 < b.len() => {
                        let e = at(text, i + 1).unwrap_or('\\');
                        push_escaped(
                            &mut out,
                            match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => other,
                            },
                        );
                        i += 1 + e.len_utf8();
                    }
                    Some(d) => {
                        push_escaped(&mut out, d);
                        i += d.len_utf8();
                    }
                }
            }
            out.push('"');
        } else if c == ',' {
            if !matches!(next_significant(i + 1), Some('}') | Some(']') | None) {
                out.push(',');
            }
            i += 1;
        } else if matches!(c, '{' | '}' | '[' | ']' | ':') {
            out.push(c);
            i += 1;
        } else if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'-' | b'+' | b'_')) {
                i += 1;
            }
            let token = &text[start..i];
            let t = token.trim_start_matches('+').replace('_', "");
            if serde_json::from_str::<Number>(&t).is_ok() {
                out.push_str(&t);
            } else {
                push_quoted(&mut out, token);
            }
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while let Some(d) = at(text, i) {
                if !(d.is_alphanumeric() || matches!(d, '_' | '$' | '-' | '.')) {
                    break;
                }
                i += d.len_utf8();
            }
            let word = &text[start..i];
            let is_key = next_significant(i) == Some(':');
            match (is_key, word) {
                (false, "True" | "true") => out.push_str("true"),
                (false, "False" | "false") => out.push_str("false"),
                (false, "None" | "null" | "NULL" | "undefined" | "NaN" | "Infinity") => out.push_str("null"),
                _ => push_quoted(&mut out, word),
            }
        } else {
            i += c.len_utf8();
        }
    }
    out
}

/// Appends `c` as it is written inside a JSON string.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if u32::from(c) < 0x20 => {
            use std::fmt::Write;
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        }
        c => out.push(c),
    }
}

fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    s.chars().for_each(|c| push_escaped(out, c));
    out.push('"');
}

/// Closes what a cut-off object left open: the string, a dangling key or
/// comma, and the brackets.
fn complete_truncated(text: &str) -> String {
    let mut stack = Vec::new();
    let mut in_str: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if let Some(q) = in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if closes(q, c) {
                in_str = None;
            }
            continue;
        }
        match c {
            c if is_quote(c) => in_str = Some(c),
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut out = text.to_string();
    if let Some(q) = in_str {
        out.push(match q {
            '“' | '”' => '”',
            '‘' | '’' => '’',
            other => other,
        });
    }
    let trimmed = out.trim_end().to_string();
    out = match trimmed.chars().last() {
        Some(',') => trimmed[..trimmed.len() - 1].to_string(),
        Some(':') => format!("{trimmed} null"),
        _ => trimmed,
    };
    while let Some(close) = stack.pop() {
        out.push(close);
    }
    out
}

// ---- coercion, governance, validation ------------------------------------

/// A value whose type does not fit and could not be coerced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeMismatch {
    pub field: String,
    pub expected: String,
    pub received: String,
}

/// A safety finding in a field that is not tagged sensitive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub field: String,
    /// `secret`, `email`, `card_number` or `prompt_injection`.
    pub kind: String,
    pub detail: String,
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

/// A numeric string as written by people and models: whitespace, thousands
/// separators, currency symbols and a trailing `.0` are tolerated.
fn clean_number(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| !matches!(c, ',' | '_' | ' ' | '\u{a0}' | '$' | '€' | '£' | '¥' | '₹'))
        .collect::<String>()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic() && c.is_uppercase())
        .to_string()
}

fn coerce(v: &Value, t: FieldType) -> Option<Value> {
    match (t, v) {
        (FieldType::Integer, Value::Number(n)) if n.is_i64() || n.is_u64() => Some(v.clone()),
        (FieldType::Integer, Value::Number(n)) => {
            n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| Value::from(f as i64))
        }
        (FieldType::Integer, Value::String(s)) => {
            let c = clean_number(s);
            let c = c.strip_suffix(".00").or_else(|| c.strip_suffix(".0")).unwrap_or(&c);
            c.parse::<i64>().ok().map(Value::from)
        }
        (FieldType::Number | FieldType::Decimal, Value::Number(_)) => Some(v.clone()),
        (FieldType::Number | FieldType::Decimal, Value::String(s)) => {
            clean_number(s).parse::<f64>().ok().filter(|f| f.is_finite()).and_then(Number::from_f64).map(Value::Number)
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

struct Walk {
    missing: Vec<String>,
    mismatches: Vec<TypeMismatch>,
    governance: Vec<String>,
}

/// A field's dotted path below `prefix` (the field's name at the top).
fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}

fn walk(obj: &Map<String, Value>, fields: &[ContractField], prefix: &str, w: &mut Walk) -> Map<String, Value> {
    let mut out = Map::new();
    for f in fields {
        // The dotted path is only made when something is reported.
        let path = || dotted(prefix, &f.name);
        let v = match obj.get(&f.name) {
            None | Some(Value::Null) => {
                if f.required {
                    w.missing.push(path());
                } else if obj.contains_key(&f.name) {
                    out.insert(f.name.clone(), Value::Null);
                }
                continue;
            }
            Some(v) => v,
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
                out.insert(f.name.clone(), Value::String(crate::transform::mask(&text)));
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
    scan(&data, contract, "", &mut findings);
    Outcome::Valid { data, governance_applied: w.governance, safety_findings: findings }
}

// ---- safety findings ---------------------------------------------------------

/// What the scan looks for, as one set: a string is searched once for all
/// of them.
struct Patterns {
    set: regex::RegexSet,
    /// `(kind, detail)` of each pattern of `set`, in its order.
    meta: Vec<(&'static str, &'static str)>,
}

fn patterns() -> &'static Patterns {
    static P: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let table: [(&str, &str, &str); 8] = [
            (r"\bsk-[A-Za-z0-9_-]{20,}", "secret", "an OpenAI-style API key"),
            (r"\bAKIA[0-9A-Z]{16}\b", "secret", "an AWS access key id"),
            (r"\bgh[pousr]_[A-Za-z0-9]{36,}\b", "secret", "a GitHub token"),
            (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "secret", "a Slack token"),
            (r"\bslk_[A-Za-z0-9]{32,}\b", "secret", "a Sluice API key"),
            (r"-----BEGIN [A-Z ]*PRIVATE KEY-----", "secret", "a private key"),
            (r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}", "email", "an e-mail address"),
            (
                r"(?i)\b(ignore|disregard|forget)\s+(all\s+|the\s+|any\s+)?(previous|prior|above)\s+(instructions|prompts?|messages?)|\bsystem prompt\b|\byou are now\b|\bjailbreak\b",
                "prompt_injection",
                "a prompt-injection phrase",
            ),
        ];
        Patterns {
            set: regex::RegexSet::new(table.iter().map(|(p, _, _)| *p)).expect("valid patterns"),
            meta: table.iter().map(|(_, k, d)| (*k, *d)).collect(),
        }
    })
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Card-number-like runs of 13–19 digits (spaces and dashes allowed) that
/// pass the Luhn check.
fn card_numbers(s: &str) -> bool {
    if s.bytes().filter(u8::is_ascii_digit).count() < 13 {
        return false;
    }
    let re = {
        static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        R.get_or_init(|| regex::Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("a valid pattern"))
    };
    re.find_iter(s).any(|m| {
        let digits: Vec<u32> = m.as_str().chars().filter_map(|c| c.to_digit(10)).collect();
        (13..=19).contains(&digits.len()) && luhn(&digits)
    })
}

fn scan(data: &Map<String, Value>, fields: &[ContractField], prefix: &str, out: &mut Vec<Finding>) {
    for f in fields {
        if f.sensitive() {
            continue;
        }
        let path = || dotted(prefix, &f.name);
        match data.get(&f.name) {
            Some(Value::Object(inner)) if !f.fields.is_empty() => scan(inner, &f.fields, &path(), out),
            Some(Value::String(s)) => {
                let p = patterns();
                let hits = p.set.matches(s);
                let card = card_numbers(s);
                if !hits.matched_any() && !card {
                    continue;
                }
                let path = path();
                for (kind, detail) in hits.into_iter().map(|i| p.meta[i]) {
                    if !out.iter().any(|x| x.field == path && x.kind == kind) {
                        out.push(Finding { field: path.clone(), kind: kind.into(), detail: detail.into() });
                    }
                }
                if card {
                    out.push(Finding {
                        field: path.clone(),
                        kind: "card_number".into(),
                        detail: "a Luhn-valid card number".into(),
                    });
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
