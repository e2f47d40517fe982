//! When two values are the same for a verification: keys ordered as every
//! side reads them ([`key_cmp`], [`key_order`]), values equal by meaning
//! ([`same_meaning`]: numbers as numbers, decimals by their canonical text,
//! times and dates by their instant).

use crate::shared::record::{Value, compare_values, parse_date, parse_timestamp};
use crate::sync::transform;
use std::cmp::Ordering;

/// Orders keys as every side reads them: value by value, numbers as
/// numbers, text by its bytes; values of types that do not compare by
/// their text.
pub fn key_cmp(a: &[Value], b: &[Value]) -> Ordering {
    a.iter().zip(b).map(|(x, y)| part_cmp(x, y)).find(|o| o.is_ne()).unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// One part of two keys as [`key_cmp`] orders them.
pub(super) fn part_cmp(x: &Value, y: &Value) -> Ordering {
    compare_values(x, y).unwrap_or_else(|| text(x).cmp(&text(y)))
}

/// A total order of keys for sorting one side's rows in memory: values
/// as [`key_cmp`] orders them where both are of one kind (numbers with
/// numbers), else by kind, so that a column of mixed kinds still sorts.
pub fn key_order(a: &[Value], b: &[Value]) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) | Value::Decimal(_) => 2,
            Value::Timestamp(_) | Value::Date(_) => 3,
            Value::String(_) => 4,
            Value::Bytes(_) => 5,
            Value::Json(_) | Value::RawJson(_) => 6,
        }
    }
    fn number(v: &Value) -> f64 {
        match v {
            Value::Int(n) => *n as f64,
            Value::Float(f) => *f,
            Value::Decimal(d) => d.trim().parse().unwrap_or(f64::NAN),
            _ => f64::NAN,
        }
    }
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Value::Int(p), Value::Int(q)) => p.cmp(q),
            _ if rank(x) != rank(y) => rank(x).cmp(&rank(y)),
            _ if rank(x) == 2 => number(x).total_cmp(&number(y)),
            _ => compare_values(x, y).unwrap_or_else(|| text(x).cmp(&text(y))),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

pub(super) fn text(v: &Value) -> String {
    transform::display(v)
}

/// Whether two values of one column mean the same, however each side
/// types it: numbers by value, instants whatever their offset, JSON by
/// structure, text that spells the other side's value.
pub fn same_meaning(a: &Value, b: &Value) -> bool {
    use Value::*;
    if a == b {
        return true;
    }
    match (a, b) {
        (Null, _) | (_, Null) => false,
        (Float(x), Float(y)) => x.is_nan() && y.is_nan() || close(*x, *y),
        (Json(x), String(s)) | (String(s), Json(x)) => {
            serde_json::from_str::<serde_json::Value>(s).is_ok_and(|p| &p == x)
        }
        (Json(x), Json(y)) => x == y,
        (RawJson(r), String(s)) | (String(s), RawJson(r)) => {
            match (serde_json::from_str::<serde_json::Value>(r), serde_json::from_str::<serde_json::Value>(s)) {
                (Ok(x), Ok(y)) => x == y,
                _ => false,
            }
        }
        (Timestamp(t), String(s)) | (String(s), Timestamp(t)) => parse_timestamp(s) == Some(*t),
        (Date(d), String(s)) | (String(s), Date(d)) => parse_date(s) == Some(*d),
        (Timestamp(t), Date(d)) | (Date(d), Timestamp(t)) => {
            t.to_offset(time::UtcOffset::UTC) == d.midnight().assume_utc()
        }
        (Bool(x), Int(n)) | (Int(n), Bool(x)) => (*n == 0 || *n == 1) && (*n == 1) == *x,
        (Bool(x), String(s)) | (String(s), Bool(x)) => {
            matches!(
                (s.trim().to_ascii_lowercase().as_str(), x),
                ("true" | "t" | "1", true) | ("false" | "f" | "0", false)
            )
        }
        (Bytes(x), String(s)) | (String(s), Bytes(x)) => {
            s.as_bytes() == x.as_slice()
                || base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).is_ok_and(|d| &d == x)
        }
        (Int(_) | Decimal(_) | Float(_), Int(_) | Decimal(_) | Float(_) | String(_))
        | (String(_), Int(_) | Decimal(_) | Float(_)) => same_number(a, b),
        _ => compare_values(a, b) == Some(Ordering::Equal),
    }
}

pub(super) fn close(x: f64, y: f64) -> bool {
    x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
}

pub(super) fn same_number(a: &Value, b: &Value) -> bool {
    let exact = |v: &Value| match v {
        Value::Int(n) => Some(n.to_string()),
        Value::Decimal(s) | Value::String(s) => canonical_decimal(s),
        _ => None,
    };
    if let (Some(x), Some(y)) = (exact(a), exact(b)) {
        return x == y;
    }
    let float = |v: &Value| match v {
        Value::Int(n) => Some(*n as f64),
        Value::Float(f) => Some(*f),
        Value::Decimal(s) | Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match (float(a), float(b)) {
        (Some(x), Some(y)) => close(x, y),
        _ => false,
    }
}

/// A decimal's digits without leading or trailing zeros (`-012.500` is
/// `-12.5`, `-0.0` is `0`); `None` for text that is not a plain decimal.
pub(super) fn canonical_decimal(s: &str) -> Option<String> {
    let s = s.trim();
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let body = match (int.is_empty(), frac.is_empty()) {
        (true, true) => return Some("0".into()),
        (_, true) => int.to_string(),
        (true, false) => format!("0.{frac}"),
        (false, false) => format!("{int}.{frac}"),
    };
    Some(if negative { format!("-{body}") } else { body })
}
