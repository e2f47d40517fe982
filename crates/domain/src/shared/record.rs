//! The record vocabulary every context speaks: field types, fields,
//! entity schemas, values and batches of records, with the text forms of
//! timestamps and dates.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use time::{Date, OffsetDateTime};

/// The catalog's type vocabulary; every connector maps its native types to
/// and from these (see `docs/connectors.md` for each mapping and its lossy
/// cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Integer,
    Number,
    /// Exact decimal, carried as its canonical string.
    Decimal,
    Boolean,
    Timestamp,
    Date,
    Object,
    Array,
    Binary,
}

impl FieldType {
    pub const ALL: [FieldType; 10] = [
        FieldType::String,
        FieldType::Integer,
        FieldType::Number,
        FieldType::Decimal,
        FieldType::Boolean,
        FieldType::Timestamp,
        FieldType::Date,
        FieldType::Object,
        FieldType::Array,
        FieldType::Binary,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Decimal => "decimal",
            FieldType::Boolean => "boolean",
            FieldType::Timestamp => "timestamp",
            FieldType::Date => "date",
            FieldType::Object => "object",
            FieldType::Array => "array",
            FieldType::Binary => "binary",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        FieldType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field of an entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
    pub nullable: bool,
    pub primary_key: bool,
    /// The source's own type (`numeric(12,2)`, `timestamptz`, …), so that a
    /// destination of the same engine can keep it exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_type: Option<String>,
}

impl Field {
    pub fn new(name: impl Into<String>, field_type: FieldType) -> Self {
        Self { name: name.into(), field_type, nullable: true, primary_key: false, native_type: None }
    }
}

/// A table, file or other entity and its fields, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntitySchema {
    pub name: String,
    pub fields: Vec<Field>,
}

impl EntitySchema {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    pub fn primary_key(&self) -> Vec<&str> {
        self.fields.iter().filter(|f| f.primary_key).map(|f| f.name.as_str()).collect()
    }
}

/// One value of a record.
#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A decimal in canonical form (`-12.50`).
    Decimal(String),
    String(String),
    Timestamp(OffsetDateTime),
    Date(Date),
    /// Objects and arrays.
    Json(serde_json::Value),
    /// A JSON document's text as a source sent it, checked to be JSON but
    /// not parsed: a destination that stores JSON text takes it as is, and
    /// whatever needs the document parses it ([`Value::to_json`]). Equal
    /// to the [`Value::Json`] it parses to.
    RawJson(String),
    Bytes(Vec<u8>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a == b,
            (Decimal(a), Decimal(b)) | (String(a), String(b)) => a == b,
            (Timestamp(a), Timestamp(b)) => a == b,
            (Date(a), Date(b)) => a == b,
            (Json(a), Json(b)) => a == b,
            (RawJson(a), RawJson(b)) => a == b || parse_json(a).is_some_and(|x| parse_json(b) == Some(x)),
            (RawJson(t), Json(j)) | (Json(j), RawJson(t)) => parse_json(t).as_ref() == Some(j),
            (Bytes(a), Bytes(b)) => a == b,
            _ => false,
        }
    }
}

fn parse_json(text: &str) -> Option<serde_json::Value> {
    serde_json::from_str(text).ok()
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A source's JSON text as a value: kept as [`Value::RawJson`] when it
    /// is JSON (checked without building the document), a string when not.
    pub fn json_text(text: String) -> Value {
        let mut de = serde_json::Deserializer::from_str(&text);
        let valid = serde::de::IgnoredAny::deserialize(&mut de).is_ok() && de.end().is_ok();
        if valid { Value::RawJson(text) } else { Value::String(text) }
    }

    /// [`Value::RawJson`] parsed into [`Value::Json`]; every other value as
    /// it is.
    pub fn parsed(self) -> Value {
        match self {
            Value::RawJson(t) => parse_json(&t).map_or(Value::String(t), Value::Json),
            v => v,
        }
    }

    /// An approximation of the value's size, for the bytes counters.
    pub fn approx_size(&self) -> usize {
        match self {
            Value::Null => 1,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) | Value::Timestamp(_) => 8,
            Value::Date(_) => 4,
            Value::Decimal(s) | Value::String(s) => s.len(),
            Value::Json(j) => json_size(j),
            Value::RawJson(t) => t.len(),
            Value::Bytes(b) => b.len(),
        }
    }

    /// The value as JSON, for previews and file output. Timestamps are RFC
    /// 3339 in UTC, dates ISO 8601, decimals strings (exactness first), bytes
    /// base64.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map(J::Number).unwrap_or(J::Null),
            Value::Decimal(d) => J::String(d.clone()),
            Value::String(s) => J::String(s.clone()),
            Value::Timestamp(t) => J::String(format_timestamp(*t)),
            Value::Date(d) => J::String(format_date(*d)),
            Value::Json(j) => j.clone(),
            Value::RawJson(t) => parse_json(t).unwrap_or_else(|| J::String(t.clone())),
            Value::Bytes(b) => J::String(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)),
        }
    }
}

/// Orders two values of one column: numbers numerically (integers, floats
/// and decimals together), timestamps and dates in time, strings and bytes
/// lexically. Null sorts first. `None` for values that do not compare.
pub fn compare_values(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    fn num(v: &Value) -> Option<f64> {
        match v {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            Value::Decimal(d) => d.trim().parse().ok(),
            _ => None,
        }
    }
    // Decimals exactly, digit by digit: a numeric(38) key is past what a
    // float tells apart.
    let exact = match (a, b) {
        (Value::Decimal(x), Value::Decimal(y)) => exact_decimal(x, y),
        (Value::Int(x), Value::Decimal(y)) => exact_decimal(&x.to_string(), y),
        (Value::Decimal(x), Value::Int(y)) => exact_decimal(x, &y.to_string()),
        _ => None,
    };
    if exact.is_some() {
        return exact;
    }
    match (a, b) {
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        (Value::Null, _) => Some(Ordering::Less),
        (_, Value::Null) => Some(Ordering::Greater),
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Timestamp(x), Value::Timestamp(y)) => Some(x.cmp(y)),
        (Value::Date(x), Value::Date(y)) => Some(x.cmp(y)),
        (Value::Timestamp(x), Value::Date(y)) => Some(x.cmp(&y.midnight().assume_utc())),
        (Value::Date(x), Value::Timestamp(y)) => Some(x.midnight().assume_utc().cmp(y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Bytes(x), Value::Bytes(y)) => Some(x.cmp(y)),
        _ => match (num(a), num(b)) {
            (Some(x), Some(y)) => x.partial_cmp(&y),
            _ => None,
        },
    }
}

/// Two plain decimal texts (`-12.50`, `3`, `.5`) compared exactly; `None`
/// when either is not plain (an exponent, say).
fn exact_decimal(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    /// The sign (negative and not zero), the integer digits without
    /// leading zeros, the fraction's without trailing ones.
    fn parts(s: &str) -> Option<(bool, &str, &str)> {
        let s = s.trim();
        let (neg, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
            return None;
        }
        let (int, frac) = (int.trim_start_matches('0'), frac.trim_end_matches('0'));
        Some((neg && !(int.is_empty() && frac.is_empty()), int, frac))
    }
    let (na, ia, fa) = parts(a)?;
    let (nb, ib, fb) = parts(b)?;
    // Fractions without trailing zeros compare as text: .45 < .5.
    let size = ia.len().cmp(&ib.len()).then_with(|| ia.cmp(ib)).then_with(|| fa.cmp(fb));
    Some(match (na, nb) {
        (false, false) => size,
        (true, true) => size.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    })
}

/// RFC 3339 in UTC with microseconds (`2026-01-02T03:04:05.123456Z`).
pub fn format_timestamp(t: OffsetDateTime) -> String {
    TimestampText(t).to_string()
}

pub fn format_date(d: Date) -> String {
    DateText(d).to_string()
}

/// Shows a timestamp as [`format_timestamp`] does, for writing it in place.
pub struct TimestampText(pub OffsetDateTime);

impl fmt::Display for TimestampText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0.to_offset(time::UtcOffset::UTC);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            t.year(),
            t.month() as u8,
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        )
    }
}

/// Shows a date as [`format_date`] does, for writing it in place.
pub struct DateText(pub Date);

impl fmt::Display for DateText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.0.year(), self.0.month() as u8, self.0.day())
    }
}

/// About the length of `j` as JSON text, without writing it.
fn json_size(j: &serde_json::Value) -> usize {
    use serde_json::Value as J;
    match j {
        J::Null => 4,
        J::Bool(_) => 5,
        J::Number(_) => 8,
        J::String(s) => s.len() + 2,
        J::Array(a) => 2 + a.iter().map(|v| json_size(v) + 1).sum::<usize>(),
        J::Object(o) => 2 + o.iter().map(|(k, v)| k.len() + 4 + json_size(v)).sum::<usize>(),
    }
}

/// The shape databases and [`format_timestamp`] write, by far the most
/// common, without the general parsers: `YYYY-MM-DD[T ]HH:MM:SS[.f…]Z` (up
/// to nanoseconds). Anything else is left to them.
fn parse_utc_fast(s: &str) -> Option<OffsetDateTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[b.len() - 1] != b'Z' || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if b[10] != b'T' && b[10] != b' ' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |acc, c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
    };
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if !digits.is_empty() && digits.len() <= 9 => {
            let n = num(20..b.len() - 1)?;
            n * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let month = time::Month::try_from(u8::try_from(num(5..7)?).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(i32::try_from(num(0..4)?).ok()?, month, u8::try_from(num(8..10)?).ok()?).ok()?;
    let t = time::Time::from_hms_nano(
        u8::try_from(num(11..13)?).ok()?,
        u8::try_from(num(14..16)?).ok()?,
        u8::try_from(num(17..19)?).ok()?,
        nanos,
    )
    .ok()?;
    Some(time::PrimitiveDateTime::new(date, t).assume_utc())
}

/// Parses RFC 3339 / ISO 8601 timestamps, with `T` or a space, with or
/// without an offset (none means UTC).
pub fn parse_timestamp(s: &str) -> Option<OffsetDateTime> {
    use time::format_description::well_known::{Iso8601, Rfc3339};
    let s = s.trim();
    if let Some(t) = parse_utc_fast(s) {
        return Some(t);
    }
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t);
    }
    if let Ok(t) = OffsetDateTime::parse(s, &Iso8601::DEFAULT) {
        return Some(t);
    }
    let normalized = s.replacen(' ', "T", 1);
    if let Ok(t) = OffsetDateTime::parse(&normalized, &Rfc3339) {
        return Some(t);
    }
    let fmt = time::macros::format_description!(
        version = 2,
        "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    time::PrimitiveDateTime::parse(&normalized, &fmt).ok().map(|p| p.assume_utc())
}

pub fn parse_date(s: &str) -> Option<Date> {
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    Date::parse(s.trim(), &fmt).ok()
}

/// Rows of one entity with a shared field list.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordBatch {
    pub fields: Arc<Vec<Field>>,
    pub rows: Vec<Vec<Value>>,
}

impl RecordBatch {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// About the size of the rows' values: every row of a small batch, a
    /// spread sample of about 128 rows of a large one, scaled (a run's
    /// byte count is a gauge, and measuring every value of every batch
    /// cost a tenth of a sync's time).
    pub fn approx_bytes(&self) -> u64 {
        let n = self.rows.len();
        let stride = (n / 128).max(1);
        let sampled: u64 =
            self.rows.iter().step_by(stride).map(|r| r.iter().map(Value::approx_size).sum::<usize>() as u64).sum();
        sampled * n as u64 / n.div_ceil(stride).max(1) as u64
    }

    /// The rows as JSON objects (previews).
    pub fn to_json_records(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        self.rows
            .iter()
            .map(|row| self.fields.iter().zip(row).map(|(f, v)| (f.name.clone(), v.to_json())).collect())
            .collect()
    }
}

#[cfg(test)]
mod decimal_tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn decimals_compare_exactly_past_a_floats_digits() {
        let d = |s: &str| Value::Decimal(s.into());
        let cases = [
            (d("12345678901234567890123"), d("12345678901234567890124"), Less),
            (d("0.10000000000000000000001"), d("0.1"), Greater),
            (d("-1.5"), d("-1.45"), Less),
            (d("-0.0"), d("0"), Equal),
            (d("007.50"), d("7.5"), Equal),
            (d(".5"), d("0.45"), Greater),
            (Value::Int(9_007_199_254_740_993), d("9007199254740992"), Greater),
            (d("1e3"), d("999"), Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_values(&a, &b), Some(want), "{a:?} {b:?}");
            assert_eq!(compare_values(&b, &a), Some(want.reverse()), "{b:?} {a:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_text_is_kept_as_read_and_equals_its_document() {
        let raw = Value::json_text("{\"k\": 1, \"tag\": [\"x\", null]}".into());
        assert!(matches!(&raw, Value::RawJson(t) if t == "{\"k\": 1, \"tag\": [\"x\", null]}"), "as read: {raw:?}");
        let tree = Value::Json(json!({"tag": ["x", null], "k": 1}));
        assert_eq!(raw, tree, "equal to the document it parses to");
        assert_eq!(tree, raw);
        assert_eq!(raw, Value::RawJson("{\"tag\":[\"x\",null],\"k\":1}".into()), "whatever its spacing and order");
        assert_ne!(raw, Value::Json(json!({"k": 2})));
        assert_ne!(Value::RawJson("x".into()), Value::RawJson("y".into()), "two texts that are not JSON differ");
        assert_ne!(raw, Value::String("{\"k\": 1, \"tag\": [\"x\", null]}".into()), "a string is not a document");
        assert_eq!(raw.to_json(), json!({"k": 1, "tag": ["x", null]}));
        assert_eq!(raw.clone().parsed(), tree);
        assert_eq!(raw.approx_size(), 28, "its text's length");
        // Text that is not JSON stays a string, as before.
        for bad in ["{\"k\": 1", "{} {}", "", "nope"] {
            assert_eq!(Value::json_text(bad.into()), Value::String(bad.into()), "{bad:?}");
        }
        assert_eq!(Value::json_text(" [1, 2] ".into()).parsed(), Value::Json(json!([1, 2])));
    }
}
