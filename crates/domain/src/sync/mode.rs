//! The rules of syncing an entity: sync modes and the write mode each uses,
//! what a mapping must name, cursor values (parsing, ordering, advancing),
//! and de-duplication within a batch.
//!
//! Incremental reads take records **at or past** the stored cursor, ordered
//! by it, so records that share the boundary value are never lost; the
//! overlap is absorbed by the upsert of `incremental_deduped` (and is
//! documented as re-delivered by `incremental_append`).

use crate::connect::connector::{
    EntitySchema, FieldType, RecordBatch, Value, WriteMode, compare_values, parse_date, parse_timestamp,
};
use crate::{Error, FieldError};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    FullRefreshOverwrite,
    FullRefreshAppend,
    IncrementalAppend,
    IncrementalDeduped,
}

impl SyncMode {
    pub const ALL: [SyncMode; 4] = [
        SyncMode::FullRefreshOverwrite,
        SyncMode::FullRefreshAppend,
        SyncMode::IncrementalAppend,
        SyncMode::IncrementalDeduped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::FullRefreshOverwrite => "full_refresh_overwrite",
            SyncMode::FullRefreshAppend => "full_refresh_append",
            SyncMode::IncrementalAppend => "incremental_append",
            SyncMode::IncrementalDeduped => "incremental_deduped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        SyncMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn incremental(self) -> bool {
        matches!(self, SyncMode::IncrementalAppend | SyncMode::IncrementalDeduped)
    }

    pub fn needs_primary_key(self) -> bool {
        self == SyncMode::IncrementalDeduped
    }

    pub fn write_mode(self) -> WriteMode {
        match self {
            SyncMode::FullRefreshOverwrite => WriteMode::Overwrite,
            SyncMode::FullRefreshAppend | SyncMode::IncrementalAppend => WriteMode::Append,
            SyncMode::IncrementalDeduped => WriteMode::Upsert,
        }
    }
}

/// Checks the fields a sync mode needs, against the source schema when it
/// is known. `path` prefixes the field names in errors (`config.mappings[0]`).
pub fn check_mapping(
    path: &str,
    mode: SyncMode,
    cursor_field: Option<&str>,
    primary_key: Option<&str>,
    schema: Option<&EntitySchema>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if mode.incremental() {
        match cursor_field {
            None | Some("") => errors
                .push(FieldError::new(format!("{path}.cursor_field"), format!("is required by {}", mode.as_str()))),
            Some(c) => {
                if let Some(s) = schema {
                    match s.field(c) {
                        None => errors.push(FieldError::new(
                            format!("{path}.cursor_field"),
                            format!("'{c}' is not a field of {}", s.name),
                        )),
                        Some(f) if !cursor_type(f.field_type) => errors.push(FieldError::new(
                            format!("{path}.cursor_field"),
                            format!(
                                "'{c}' is {}; a cursor must be an integer, number, decimal, timestamp, date or string",
                                f.field_type
                            ),
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
    }
    if mode.needs_primary_key() {
        match primary_key {
            None | Some("") => {
                errors.push(FieldError::new(format!("{path}.primary_key"), format!("is required by {}", mode.as_str())))
            }
            Some(k) => {
                if let Some(s) = schema {
                    for part in k.split(',').map(str::trim) {
                        if s.field(part).is_none() {
                            errors.push(FieldError::new(
                                format!("{path}.primary_key"),
                                format!("'{part}' is not a field of {}", s.name),
                            ));
                        }
                    }
                }
            }
        }
    }
    errors
}

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

/// The lookback of a mode when a mapping names none: a minute for
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

/// Keeps one row per primary key: the one with the greatest cursor (the
/// later row when cursors tie or there is no cursor). Row order otherwise
/// follows first appearance.
pub fn dedupe(batch: RecordBatch, key_idx: &[usize], cursor_idx: Option<usize>) -> RecordBatch {
    if key_idx.is_empty() {
        return batch;
    }
    // Rows by the hash of their key; equal hashes are told apart by the
    // key values themselves.
    let mut slot: HashMap<u64, SmallSlots> = HashMap::with_capacity(batch.rows.len());
    let mut out: Vec<Vec<Value>> = Vec::with_capacity(batch.rows.len());
    for row in batch.rows {
        let h = key_hash(&row, key_idx);
        let slots = slot.entry(h).or_default();
        match slots.find(|i| same_key(&out[i], &row, key_idx)) {
            None => {
                slots.push(out.len());
                out.push(row);
            }
            Some(i) => {
                let replace = match cursor_idx {
                    Some(c) => compare_values(&row[c], &out[i][c]) != Some(Ordering::Less),
                    None => true,
                };
                if replace {
                    out[i] = row;
                }
            }
        }
    }
    RecordBatch { fields: batch.fields, rows: out }
}

/// The rows of one key hash: almost always one, kept without allocating.
#[derive(Default)]
struct SmallSlots {
    first: Option<usize>,
    more: Vec<usize>,
}

impl SmallSlots {
    fn find(&self, is: impl Fn(usize) -> bool) -> Option<usize> {
        self.first.into_iter().chain(self.more.iter().copied()).find(|i| is(*i))
    }

    fn push(&mut self, i: usize) {
        match self.first {
            None => self.first = Some(i),
            Some(_) => self.more.push(i),
        }
    }
}

fn key_hash(row: &[Value], key_idx: &[usize]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for i in key_idx {
        match &row[*i] {
            Value::Null => 0u8.hash(&mut h),
            Value::Bool(b) => (1u8, b).hash(&mut h),
            Value::Int(n) => (2u8, n).hash(&mut h),
            Value::Float(f) => (3u8, f.to_bits()).hash(&mut h),
            Value::Decimal(d) => (4u8, d).hash(&mut h),
            Value::String(s) => (5u8, s).hash(&mut h),
            Value::Timestamp(t) => (6u8, t.unix_timestamp_nanos()).hash(&mut h),
            Value::Date(d) => (7u8, d.to_julian_day()).hash(&mut h),
            Value::Json(j) => (8u8, j.to_string()).hash(&mut h),
            Value::Bytes(b) => (9u8, b).hash(&mut h),
        }
    }
    h.finish()
}

/// Key equality as the hash sees it (floats by their bits, instants
/// whatever their offset).
fn same_key(a: &[Value], b: &[Value], key_idx: &[usize]) -> bool {
    key_idx.iter().all(|i| match (&a[*i], &b[*i]) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.unix_timestamp_nanos() == y.unix_timestamp_nanos(),
        (x, y) => x == y,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    use crate::connect::connector::Field;
    use std::sync::Arc;

    fn ts(s: &str) -> Value {
        Value::Timestamp(parse_timestamp(s).unwrap())
    }

    fn batch(rows: Vec<Vec<Value>>) -> RecordBatch {
        RecordBatch {
            fields: Arc::new(vec![Field::new("id", FieldType::Integer), Field::new("updated", FieldType::Timestamp)]),
            rows,
        }
    }

    #[test]
    fn modes_write_the_way_their_names_say() {
        assert_eq!(SyncMode::FullRefreshOverwrite.write_mode(), WriteMode::Overwrite);
        assert_eq!(SyncMode::IncrementalAppend.write_mode(), WriteMode::Append);
        assert_eq!(SyncMode::IncrementalDeduped.write_mode(), WriteMode::Upsert);
        assert_eq!(SyncMode::parse("incremental_deduped"), Some(SyncMode::IncrementalDeduped));
        assert_eq!(SyncMode::parse("incremental"), None);
    }

    #[test]
    fn the_greatest_cursor_of_a_key_wins_whatever_the_order() {
        let b = batch(vec![
            vec![Value::Int(1), ts("2026-01-02T00:00:00Z")],
            vec![Value::Int(2), ts("2026-01-01T00:00:00Z")],
            vec![Value::Int(1), ts("2026-01-01T00:00:00Z")],
            vec![Value::Int(1), ts("2026-01-03T00:00:00Z")],
        ]);
        let d = dedupe(b, &[0], Some(1));
        assert_eq!(
            d.rows,
            vec![vec![Value::Int(1), ts("2026-01-03T00:00:00Z")], vec![Value::Int(2), ts("2026-01-01T00:00:00Z")]]
        );
    }

    #[test]
    fn composite_keys_are_told_apart_by_every_part_and_slots_share_hashes() {
        let row = |a: i64, b: &str, v: i64| vec![Value::Int(a), Value::String(b.into()), Value::Int(v)];
        let mut rows = vec![row(1, "x", 1), row(1, "y", 2), row(2, "x", 3), row(1, "x", 4), row(1, "y", 0)];
        // Many distinct keys, so that the hash map grows past its first size.
        rows.extend((0..5000).map(|i| row(10 + i, "z", i)));
        let mut b = batch(rows);
        b.fields = Arc::new(vec![
            Field::new("a", FieldType::Integer),
            Field::new("b", FieldType::String),
            Field::new("v", FieldType::Integer),
        ]);
        let d = dedupe(b, &[0, 1], Some(2));
        assert_eq!(d.rows.len(), 3 + 5000);
        assert_eq!(&d.rows[..3], &[row(1, "x", 4), row(1, "y", 2), row(2, "x", 3)]);
        assert_eq!(d.rows[3 + 4999], row(5009, "z", 4999));
        // The slots of one hash hold several rows when keys collide.
        let mut s = SmallSlots::default();
        s.push(3);
        s.push(7);
        assert_eq!(s.find(|i| i == 7), Some(7));
        assert_eq!(s.find(|i| i == 5), None);
    }

    #[test]
    fn one_instant_is_one_key_whatever_its_offset() {
        let t = time::macros::datetime!(2026-01-01 05:30 +05:30);
        let b = batch(vec![
            vec![Value::Timestamp(t), ts("2026-01-01T00:00:00Z")],
            vec![Value::Timestamp(t.to_offset(time::UtcOffset::UTC)), ts("2026-01-02T00:00:00Z")],
        ]);
        let d = dedupe(b, &[0], Some(1));
        assert_eq!(d.rows.len(), 1);
        assert_eq!(d.rows[0][1], ts("2026-01-02T00:00:00Z"));
    }

    #[test]
    fn among_equal_cursors_the_later_row_wins() {
        let mut b = batch(vec![
            vec![Value::Int(1), ts("2026-01-01T00:00:00Z")],
            vec![Value::Int(1), ts("2026-01-01T00:00:00Z")],
        ]);
        b.fields = Arc::new(vec![Field::new("id", FieldType::Integer), Field::new("v", FieldType::String)]);
        b.rows[0][1] = Value::String("first".into());
        b.rows[1][1] = Value::String("second".into());
        assert_eq!(dedupe(b, &[0], None).rows, vec![vec![Value::Int(1), Value::String("second".into())]]);
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

    #[test]
    fn mappings_name_what_their_mode_needs() {
        let mut id = Field::new("id", FieldType::Integer);
        id.primary_key = true;
        let schema = EntitySchema {
            name: "orders".into(),
            fields: vec![id, Field::new("updated", FieldType::Timestamp), Field::new("meta", FieldType::Object)],
        };
        assert!(check_mapping("m", SyncMode::FullRefreshOverwrite, None, None, Some(&schema)).is_empty());
        let e = check_mapping("m", SyncMode::IncrementalDeduped, None, None, Some(&schema));
        assert_eq!(e.iter().map(|x| x.field.as_str()).collect::<Vec<_>>(), ["m.cursor_field", "m.primary_key"]);
        let e = check_mapping("m", SyncMode::IncrementalAppend, Some("nope"), None, Some(&schema));
        assert!(e[0].message.contains("not a field"));
        let e = check_mapping("m", SyncMode::IncrementalAppend, Some("meta"), None, Some(&schema));
        assert!(e[0].message.contains("cannot") || e[0].message.contains("must be"));
        assert!(
            check_mapping("m", SyncMode::IncrementalDeduped, Some("updated"), Some("id"), Some(&schema)).is_empty()
        );
        // Without the source's schema only presence is checked.
        assert!(check_mapping("m", SyncMode::IncrementalDeduped, Some("x"), Some("y"), None).is_empty());
    }
}
