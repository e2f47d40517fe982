//! Column statistics as DuckLake keeps them: each file's and the table's
//! least and greatest value per column, as text in DuckDB's own form
//! (`-7`, `12.34`, `2026-01-01 00:00:00+00`, `1999-12-31`, `0`/`1`, a
//! blob's hex), and whether a float column holds a NaN. DuckDB prunes files
//! and answers filters by them, and merges its own writes' statistics into
//! the table's: a value left unknown there would have it skip rows.

use sluice_domain::connect::connector::{Field, FieldType, Value};
use std::cmp::Ordering;
use time::{Date, OffsetDateTime};

/// A value as its column compares it.
#[derive(Debug, Clone, PartialEq)]
enum Key {
    Int(i128),
    Float(f64),
    Bytes(Vec<u8>),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Float(a), Key::Float(b)) => a.total_cmp(b),
            (Key::Bytes(a), Key::Bytes(b)) => a.cmp(b),
            _ => Ordering::Equal,
        }
    }
}

/// How a column's values compare and are written.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Int,
    Float,
    /// A decimal of this scale.
    Decimal(u32),
    Bool,
    Timestamp,
    Date,
    Text,
    Blob,
}

fn kind_of(f: &Field) -> Kind {
    match f.field_type {
        FieldType::Integer => Kind::Int,
        FieldType::Number => Kind::Float,
        FieldType::Decimal => match crate::parquet::precision_of(f) {
            Some((_, s)) => Kind::Decimal(s),
            None => Kind::Text,
        },
        FieldType::Boolean => Kind::Bool,
        FieldType::Timestamp => Kind::Timestamp,
        FieldType::Date => Kind::Date,
        FieldType::String | FieldType::Object | FieldType::Array => Kind::Text,
        FieldType::Binary => Kind::Blob,
    }
}

/// A decimal's text as its digits at `scale` (`-3.1` at 2: -310).
fn decimal_at(text: &str, scale: u32) -> Option<i128> {
    let t = text.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if frac.len() > scale as usize || !whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{whole}{frac:0<width$}", width = scale as usize);
    let n: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    Some(if neg { -n } else { n })
}

fn text_value(v: &Value) -> String {
    match v {
        Value::String(s) | Value::Decimal(s) | Value::RawJson(s) => s.clone(),
        Value::Json(j) => j.to_string(),
        other => match other.to_json() {
            serde_json::Value::String(s) => s,
            j => j.to_string(),
        },
    }
}

/// `v` as its column of kind `k` compares it (`None`: null, or NaN).
fn key(v: &Value, k: Kind) -> Option<Key> {
    if v.is_null() {
        return None;
    }
    Some(match (k, v) {
        (Kind::Int, Value::Int(n)) => Key::Int(i128::from(*n)),
        (Kind::Int, other) => Key::Int(text_value(other).trim().parse().ok()?),
        (Kind::Float, Value::Float(x)) if x.is_nan() => return None,
        (Kind::Float, Value::Float(x)) => Key::Float(*x),
        (Kind::Float, Value::Int(n)) => Key::Float(*n as f64),
        (Kind::Float, other) => Key::Float(text_value(other).trim().parse().ok().filter(|x: &f64| !x.is_nan())?),
        (Kind::Decimal(s), Value::Int(n)) => Key::Int(i128::from(*n) * 10i128.pow(s)),
        (Kind::Decimal(s), other) => Key::Int(decimal_at(&text_value(other), s)?),
        (Kind::Bool, Value::Bool(b)) => Key::Int(i128::from(*b)),
        (Kind::Bool, _) => return None,
        (Kind::Timestamp, Value::Timestamp(t)) => Key::Int(t.unix_timestamp_nanos()),
        (Kind::Timestamp, _) => return None,
        (Kind::Date, Value::Date(d)) => Key::Int(i128::from(d.to_julian_day())),
        (Kind::Date, _) => return None,
        (Kind::Blob, Value::Bytes(b)) => Key::Bytes(b.clone()),
        (Kind::Blob, _) => return None,
        (Kind::Text, other) => Key::Bytes(text_value(other).into_bytes()),
    })
}

/// A key as DuckDB writes it.
fn text(k: &Key, kind: Kind) -> Option<String> {
    Some(match (kind, k) {
        (Kind::Int | Kind::Bool, Key::Int(n)) => n.to_string(),
        (Kind::Float, Key::Float(x)) => x.to_string(),
        (Kind::Decimal(s), Key::Int(n)) => {
            let p = 10i128.pow(s);
            let sign = if *n < 0 { "-" } else { "" };
            let (w, f) = (n.abs() / p, n.abs() % p);
            if s == 0 { format!("{sign}{w}") } else { format!("{sign}{w}.{f:0width$}", width = s as usize) }
        }
        (Kind::Timestamp, Key::Int(ns)) => {
            let t = OffsetDateTime::from_unix_timestamp_nanos(*ns).ok()?;
            let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
            let micros = t.microsecond();
            let frac = if micros == 0 { String::new() } else { format!(".{micros:06}") };
            format!("{}{frac}+00", t.format(&f).ok()?)
        }
        (Kind::Date, Key::Int(j)) => {
            let d = Date::from_julian_day(i32::try_from(*j).ok()?).ok()?;
            let f = time::macros::format_description!("[year]-[month]-[day]");
            d.format(&f).ok()?
        }
        (Kind::Text, Key::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        (Kind::Blob, Key::Bytes(b)) => b.iter().map(|x| format!("{x:02X}")).collect(),
        _ => return None,
    })
}

/// A statistic DuckDB or Sluice wrote, read back to compare.
fn parse(t: &str, kind: Kind) -> Option<Key> {
    Some(match kind {
        Kind::Int => Key::Int(t.trim().parse().ok()?),
        Kind::Bool => Key::Int(match t.trim() {
            "1" | "true" => 1,
            "0" | "false" => 0,
            _ => return None,
        }),
        Kind::Float => Key::Float(t.trim().parse().ok()?),
        Kind::Decimal(s) => Key::Int(decimal_at(t, s)?),
        Kind::Timestamp => {
            let body = t.trim().trim_end_matches("+00").trim_end_matches('Z');
            let (main, frac) = body.split_once('.').unwrap_or((body, ""));
            let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
            let at = time::PrimitiveDateTime::parse(main, &f).ok()?.assume_utc();
            let nanos: i128 = if frac.is_empty() { 0 } else { format!("{frac:0<9}")[..9].parse().ok()? };
            Key::Int(at.unix_timestamp_nanos() + nanos)
        }
        Kind::Date => {
            let f = time::macros::format_description!("[year]-[month]-[day]");
            Key::Int(i128::from(Date::parse(t.trim(), &f).ok()?.to_julian_day()))
        }
        Kind::Text => Key::Bytes(t.as_bytes().to_vec()),
        Kind::Blob => {
            let t = t.trim();
            if !t.len().is_multiple_of(2) {
                return None;
            }
            Key::Bytes(
                (0..t.len()).step_by(2).map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok()).collect::<Option<_>>()?,
            )
        }
    })
}

/// One column's statistics so far.
#[derive(Debug, Clone, Default)]
struct Column {
    min: Option<Key>,
    max: Option<Key>,
    nan: bool,
}

/// The statistics of the values written, per column.
#[derive(Debug, Clone)]
pub struct Tracker {
    kinds: Vec<Kind>,
    columns: Vec<Column>,
}

/// One column's statistics as the catalog keeps them: least, greatest,
/// and (for a float column) whether it holds a NaN.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub min: Option<String>,
    pub max: Option<String>,
    pub nan: Option<bool>,
}

impl Tracker {
    pub fn new(fields: &[Field]) -> Self {
        let kinds: Vec<Kind> = fields.iter().map(kind_of).collect();
        Tracker { columns: vec![Column::default(); kinds.len()], kinds }
    }

    /// Takes `rows` (in the fields' order).
    pub fn add(&mut self, rows: &[Vec<Value>]) {
        for r in rows {
            for ((v, c), k) in r.iter().zip(self.columns.iter_mut()).zip(&self.kinds) {
                if matches!(v, Value::Float(x) if x.is_nan()) {
                    c.nan = true;
                    continue;
                }
                let Some(key) = key(v, *k) else { continue };
                if c.min.as_ref().is_none_or(|m| key.cmp(m).is_lt()) {
                    c.min = Some(key.clone());
                }
                if c.max.as_ref().is_none_or(|m| key.cmp(m).is_gt()) {
                    c.max = Some(key);
                }
            }
        }
    }

    /// Each column's statistics.
    pub fn stats(&self) -> Vec<Stat> {
        self.columns
            .iter()
            .zip(&self.kinds)
            .map(|(c, k)| Stat {
                min: c.min.as_ref().and_then(|m| text(m, *k)),
                max: c.max.as_ref().and_then(|m| text(m, *k)),
                nan: matches!(k, Kind::Float).then_some(c.nan),
            })
            .collect()
    }
}

/// `a` and `b` (texts of a column of `field`'s type) merged: the lesser
/// (`least`) or the greater; an unknown one (`None`) gives way.
pub fn merge(field: &Field, a: Option<&str>, b: Option<&str>, least: bool) -> Option<String> {
    let kind = kind_of(field);
    match (a, b) {
        (None, x) | (x, None) => x.map(str::to_string),
        (Some(a), Some(b)) => match (parse(a, kind), parse(b, kind)) {
            (Some(x), Some(y)) => {
                let first = if least { x.cmp(&y).is_le() } else { x.cmp(&y).is_ge() };
                Some(if first { a } else { b }.to_string())
            }
            (Some(_), None) => Some(a.to_string()),
            (None, _) => Some(b.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(t: FieldType, native: Option<&str>) -> Field {
        let mut f = Field::new("c", t);
        f.native_type = native.map(str::to_string);
        f
    }

    #[test]
    fn statistics_are_written_as_duckdb_writes_them() {
        let fields = [
            field(FieldType::Integer, None),
            field(FieldType::Number, None),
            field(FieldType::Decimal, Some("ducklake:decimal(12,2)")),
            field(FieldType::Boolean, None),
            field(FieldType::Timestamp, None),
            field(FieldType::Date, None),
            field(FieldType::String, None),
            field(FieldType::Binary, None),
        ];
        let t = |s: i64, us: i64| {
            Value::Timestamp(
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(s) * 1_000_000_000 + i128::from(us) * 1000)
                    .unwrap(),
            )
        };
        let date = |y, m, d| Value::Date(Date::from_calendar_date(y, time::Month::try_from(m).unwrap(), d).unwrap());
        let mut s = Tracker::new(&fields);
        s.add(&[
            vec![
                Value::Int(1),
                Value::Float(1.5),
                Value::Decimal("12.34".into()),
                Value::Bool(true),
                t(1_767_225_600, 0),
                date(2026, 1, 1),
                Value::String("abc".into()),
                Value::Bytes(b"xy".to_vec()),
            ],
            vec![
                Value::Int(-7),
                Value::Float(f64::NAN),
                Value::Decimal("-3.1".into()),
                Value::Bool(false),
                t(1_748_781_000, 123_456),
                date(1999, 12, 31),
                Value::String("Zed ü".into()),
                Value::Null,
            ],
        ]);
        let got: Vec<(Option<String>, Option<String>)> = s.stats().into_iter().map(|s| (s.min, s.max)).collect();
        let want = [
            ("-7", "1"),
            ("1.5", "1.5"),
            ("-3.10", "12.34"),
            ("0", "1"),
            ("2025-06-01 12:30:00.123456+00", "2026-01-01 00:00:00+00"),
            ("1999-12-31", "2026-01-01"),
            ("Zed ü", "abc"),
            ("7879", "7879"),
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_deref(), g.1.as_deref()), (Some(w.0), Some(w.1)));
        }
        assert_eq!(s.stats()[1].nan, Some(true));
        assert_eq!(s.stats()[0].nan, None);
    }

    #[test]
    fn a_tables_statistics_merge_by_value_not_by_text() {
        let int = field(FieldType::Integer, None);
        assert_eq!(merge(&int, Some("9"), Some("10"), false).as_deref(), Some("10"));
        assert_eq!(merge(&int, Some("9"), Some("10"), true).as_deref(), Some("9"));
        assert_eq!(merge(&int, None, Some("10"), true).as_deref(), Some("10"));
        let ts = field(FieldType::Timestamp, None);
        let (a, b) = ("2026-01-01 00:00:00+00", "2026-01-01 00:00:00.5+00");
        assert_eq!(merge(&ts, Some(a), Some(b), false).as_deref(), Some(b));
        let dec = field(FieldType::Decimal, Some("ducklake:decimal(12,2)"));
        assert_eq!(merge(&dec, Some("-3.10"), Some("-12.00"), true).as_deref(), Some("-12.00"));
        let blob = field(FieldType::Binary, None);
        assert_eq!(merge(&blob, Some("7879"), Some("7a"), false).as_deref(), Some("7a"));
    }
}
