//! Every cursor rule: which column types can be a cursor, parsing a value
//! a user sets, its text form, where an incremental read starts (the
//! stored cursor, moved back by a lookback), how far the stored cursor may
//! go (not past the oldest open writer), and advancing it over a batch.
//!
//! Incremental reads take records **at or past** the stored cursor, ordered
//! by it, so records that share the boundary value are never lost; the
//! overlap is absorbed by the upsert of `incremental_deduped` (and is
//! documented as re-delivered by `incremental_append`).

use super::mode::SyncMode;
use crate::Error;
use crate::shared::record::{FieldType, RecordBatch, Value, compare_values, parse_date, parse_timestamp};
use std::cmp::Ordering;

/// Types a cursor can be.
pub fn cursor_type(t: FieldType) -> bool {
    matches!(
        t,
        FieldType::Integer
            | FieldType::Number
            | FieldType::Decimal
            | FieldType::Timestamp
            | FieldType::Date
            | FieldType::String
    )
}

/// A cursor value as given by a user (`PUT …/state/{entity}`), checked
/// against the cursor column's type: ISO 8601 for timestamps and dates,
/// an integer for integer ids.
///
/// # Errors
/// `Validation` on `cursor_value` naming the expected form.
pub fn parse_cursor(raw: &str, t: FieldType) -> Result<Value, Error> {
    let bad = |want: &str| Error::invalid("cursor_value", format!("must be {want} for a {t} cursor"));
    let s = raw.trim();
    match t {
        FieldType::Integer => s.parse::<i64>().map(Value::Int).map_err(|_| bad("an integer")),
        FieldType::Number => {
            s.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::Float).ok_or_else(|| bad("a number"))
        }
        FieldType::Decimal => {
            if s.parse::<f64>().is_ok_and(f64::is_finite) && !s.contains(['e', 'E']) {
                Ok(Value::Decimal(s.to_string()))
            } else {
                Err(bad("a decimal number"))
            }
        }
        FieldType::Timestamp => parse_timestamp(s).map(Value::Timestamp).ok_or_else(|| bad("an ISO 8601 timestamp")),
        FieldType::Date => parse_date(s).map(Value::Date).ok_or_else(|| bad("an ISO 8601 date (YYYY-MM-DD)")),
        FieldType::String => Ok(Value::String(raw.to_string())),
        other => Err(Error::invalid("cursor_value", format!("a {other} field cannot be a cursor"))),
    }
}

/// The stored form of a cursor value (what `GET …/state` shows).
pub fn cursor_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        other => Some(crate::sync::transform::display(other)),
    }
}

/// The lookback of a mode when a mapping names none and the source cannot
/// hold the cursor at its oldest writing transaction: a minute for
/// `incremental_deduped`, where the upsert absorbs what is read again; none
/// for `incremental_append`, where it would be appended again.
pub fn default_lookback(mode: SyncMode) -> time::Duration {
    match mode {
        SyncMode::IncrementalDeduped => time::Duration::minutes(1),
        _ => time::Duration::ZERO,
    }
}

/// The longest lookback taken.
pub const MAX_LOOKBACK: time::Duration = time::Duration::days(30);

/// Parses a lookback: a whole number with a unit (`s`, `m`, `h`, `d`), or
/// `0`; at most 30 days.
///
/// # Errors
/// A message saying what is wrong.
pub fn parse_lookback(s: &str) -> Result<time::Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(time::Duration::ZERO);
    }
    let bad = || format!("'{s}' is not a duration such as \"30s\", \"5m\", \"1h\" or \"0\"");
    let unit = t.chars().last().ok_or_else(bad)?;
    let n: i64 = t[..t.len() - unit.len_utf8()].trim().parse().map_err(|_| bad())?;
    if n < 0 {
        return Err(bad());
    }
    let per_unit: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(per_unit).map(time::Duration::seconds) {
        Some(d) if d <= MAX_LOOKBACK => Ok(d),
        _ => Err(format!("'{s}' is longer than 30 days")),
    }
}

/// Where a read by cursor starts: `lookback` before the stored cursor for
/// time cursors (whole days for dates); other cursors as stored.
pub fn read_from(cursor: &Option<Value>, lookback: time::Duration) -> Option<Value> {
    match cursor {
        Some(Value::Timestamp(t)) if lookback.is_positive() => Some(Value::Timestamp(t.saturating_sub(lookback))),
        Some(Value::Date(d)) if lookback.is_positive() => {
            let days = (lookback.whole_seconds() + 86_399) / 86_400;
            Some(Value::Date(d.saturating_sub(time::Duration::days(days))))
        }
        other => other.clone(),
    }
}

/// The cursor to store after reading up to `read`: never past `horizon`
/// (the start of the oldest transaction that was writing to the source
/// when the read began, whose rows may still appear with older values),
/// and never behind `before` (the stored cursor) on that account.
pub fn capped(read: Option<Value>, horizon: Option<time::OffsetDateTime>, before: &Option<Value>) -> Option<Value> {
    match (read, horizon) {
        (Some(Value::Timestamp(t)), Some(h)) if t > h => {
            let floor = match before {
                Some(Value::Timestamp(b)) => h.max(*b),
                _ => h,
            };
            Some(Value::Timestamp(floor.min(t)))
        }
        (read, _) => read,
    }
}

/// The greatest cursor value of a batch, or `current` if none is greater.
pub fn advance(current: Option<Value>, batch: &RecordBatch, cursor_idx: usize) -> Option<Value> {
    let mut best = current;
    for r in &batch.rows {
        let v = &r[cursor_idx];
        if v.is_null() {
            continue;
        }
        let greater = match &best {
            None => true,
            Some(b) => compare_values(v, b) == Some(Ordering::Greater),
        };
        if greater {
            best = Some(v.clone());
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::mode::tests::{batch, ts};

    #[test]
    fn lookbacks_parse_and_move_the_read_back_never_the_stored_cursor() {
        use time::macros::{date, datetime};
        assert_eq!(parse_lookback("5m"), Ok(time::Duration::minutes(5)));
        assert_eq!(parse_lookback(" 30s "), Ok(time::Duration::seconds(30)));
        assert_eq!(parse_lookback("0"), Ok(time::Duration::ZERO));
        assert_eq!(parse_lookback("2d"), Ok(time::Duration::days(2)));
        for bad in ["", "5", "m", "-1m", "5 minutes", "31d", "1.5h", "5M", "200000000000000d", "9223372036854775807s"] {
            assert!(parse_lookback(bad).is_err(), "{bad}");
        }
        let t = Some(Value::Timestamp(datetime!(2026-01-01 00:05 UTC)));
        assert_eq!(read_from(&t, time::Duration::minutes(5)), Some(Value::Timestamp(datetime!(2026-01-01 00:00 UTC))));
        assert_eq!(read_from(&t, time::Duration::ZERO), t);
        let d = Some(Value::Date(date!(2026 - 01 - 10)));
        assert_eq!(read_from(&d, time::Duration::hours(1)), Some(Value::Date(date!(2026 - 01 - 09))));
        assert_eq!(read_from(&Some(Value::Int(7)), time::Duration::hours(1)), Some(Value::Int(7)));
        assert_eq!(default_lookback(SyncMode::IncrementalDeduped), time::Duration::minutes(1));
        assert_eq!(default_lookback(SyncMode::IncrementalAppend), time::Duration::ZERO);
    }

    #[test]
    fn the_stored_cursor_stops_at_the_oldest_open_writer() {
        use time::macros::datetime;
        let ts = |t| Some(Value::Timestamp(t));
        let read = ts(datetime!(2026-01-01 10:00 UTC));
        let before = ts(datetime!(2026-01-01 08:00 UTC));
        // A writer open since 09:00: its rows may still appear with 09:00.
        assert_eq!(
            capped(read.clone(), Some(datetime!(2026-01-01 09:00 UTC)), &before),
            ts(datetime!(2026-01-01 09:00 UTC))
        );
        // One open since before the stored cursor does not move it back.
        assert_eq!(capped(read.clone(), Some(datetime!(2026-01-01 07:00 UTC)), &before), before);
        // None open, or none older than what was read: as read.
        assert_eq!(capped(read.clone(), None, &before), read);
        assert_eq!(capped(read.clone(), Some(datetime!(2026-01-01 11:00 UTC)), &before), read);
        assert_eq!(capped(Some(Value::Int(5)), Some(datetime!(2026-01-01 09:00 UTC)), &None), Some(Value::Int(5)));
    }

    #[test]
    fn the_cursor_advances_to_the_greatest_value_and_never_back() {
        let b = batch(vec![
            vec![Value::Int(1), ts("2026-01-02T00:00:00Z")],
            vec![Value::Int(2), Value::Null],
            vec![Value::Int(3), ts("2026-01-01T00:00:00Z")],
        ]);
        assert_eq!(advance(None, &b, 1), Some(ts("2026-01-02T00:00:00Z")));
        assert_eq!(advance(Some(ts("2026-02-01T00:00:00Z")), &b, 1), Some(ts("2026-02-01T00:00:00Z")));
        assert_eq!(advance(None, &batch(vec![]), 1), None);
    }

    #[test]
    fn cursor_values_are_checked_against_the_column_type() {
        assert_eq!(
            parse_cursor("2026-01-01T00:00:00+02:00", FieldType::Timestamp).unwrap(),
            ts("2025-12-31T22:00:00Z")
        );
        assert_eq!(parse_cursor(" 42 ", FieldType::Integer).unwrap(), Value::Int(42));
        assert!(parse_cursor("yesterday", FieldType::Timestamp).is_err());
        assert!(parse_cursor("4.2", FieldType::Integer).is_err());
        assert!(parse_cursor("2026-02-30", FieldType::Date).is_err());
        let e = parse_cursor("x", FieldType::Timestamp).unwrap_err();
        assert!(
            matches!(e, Error::Validation(ref f) if f[0].field == "cursor_value" && f[0].message.contains("ISO 8601"))
        );
        assert!(parse_cursor("{}", FieldType::Object).is_err());
    }
}
