//! The rules of syncing an entity: sync modes and the write mode each uses,
//! what a mapping must name, and de-duplication within a batch. Cursor
//! values have their own rules in [`super::cursor`].

use crate::connect::connector::WriteMode;
use crate::shared::record::{RecordBatch, Value, compare_values};
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
    /// Changes from the source's log, mirrored by primary key (deletes
    /// applied, see [`DeleteMode`]).
    CdcDeduped,
    /// Changes from the source's log, each appended as a row.
    CdcAppend,
}

impl SyncMode {
    pub const ALL: [SyncMode; 6] = [
        SyncMode::FullRefreshOverwrite,
        SyncMode::FullRefreshAppend,
        SyncMode::IncrementalAppend,
        SyncMode::IncrementalDeduped,
        SyncMode::CdcDeduped,
        SyncMode::CdcAppend,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::FullRefreshOverwrite => "full_refresh_overwrite",
            SyncMode::FullRefreshAppend => "full_refresh_append",
            SyncMode::IncrementalAppend => "incremental_append",
            SyncMode::IncrementalDeduped => "incremental_deduped",
            SyncMode::CdcDeduped => "cdc_deduped",
            SyncMode::CdcAppend => "cdc_append",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        SyncMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn incremental(self) -> bool {
        matches!(self, SyncMode::IncrementalAppend | SyncMode::IncrementalDeduped)
    }

    /// Whether changes come from the source's log.
    pub fn cdc(self) -> bool {
        matches!(self, SyncMode::CdcDeduped | SyncMode::CdcAppend)
    }

    pub fn needs_primary_key(self) -> bool {
        self == SyncMode::IncrementalDeduped
    }

    pub fn write_mode(self) -> WriteMode {
        match self {
            SyncMode::FullRefreshOverwrite => WriteMode::Overwrite,
            SyncMode::FullRefreshAppend | SyncMode::IncrementalAppend | SyncMode::CdcAppend => WriteMode::Append,
            SyncMode::IncrementalDeduped | SyncMode::CdcDeduped => WriteMode::Upsert,
        }
    }
}

/// What `cdc_deduped` does with a row deleted at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteMode {
    /// The row is deleted.
    #[default]
    Hard,
    /// The row stays, its `_sluice_deleted_at` set.
    Soft,
}

/// The columns change data capture adds: the time a `soft` delete set, and
/// a change log's operation, position and commit time.
pub const DELETED_AT: &str = "_sluice_deleted_at";
pub const OP: &str = "_sluice_op";
pub const POSITION: &str = "_sluice_position";
pub const COMMITTED_AT: &str = "_sluice_committed_at";

/// The connector feature of a destination that applies captured changes
/// (deletes, updates by key, stream positions with the rows).
pub const APPLIES_CHANGES: &str = "apply_changes";

/// The connector feature of a destination of plain files: rows are
/// appended (a change log among them) or replaced whole, never updated or
/// deleted by key.
pub const APPENDS_ONLY: &str = "appends_only";

/// The connector feature of a destination that commits row flows' marks
/// with their rows (`Destination::holds_marks`): a cursor set by hand is
/// moved there too.
pub const HOLDS_MARKS: &str = "holds_marks";

/// Why a mode that updates rows by key is refused by a destination of
/// plain files.
pub fn lake_table_needed(connector_type: &str, mode: &str) -> String {
    format!(
        "{connector_type} destinations of plain files take appends and overwrites only: {mode} updates and \
         deletes rows by key, which needs a lake table (a ducklake or iceberg connection)"
    )
}

impl DeleteMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteMode::Hard => "hard",
            DeleteMode::Soft => "soft",
        }
    }
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
pub(crate) struct SmallSlots {
    first: Option<usize>,
    more: Vec<usize>,
}

impl SmallSlots {
    pub(crate) fn find(&self, is: impl Fn(usize) -> bool) -> Option<usize> {
        self.first.into_iter().chain(self.more.iter().copied()).find(|i| is(*i))
    }

    pub(crate) fn push(&mut self, i: usize) {
        match self.first {
            None => self.first = Some(i),
            Some(_) => self.more.push(i),
        }
    }
}

pub(crate) fn key_hash(row: &[Value], key_idx: &[usize]) -> u64 {
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
            // As the document it is equal to.
            raw @ Value::RawJson(_) => (8u8, raw.to_json().to_string()).hash(&mut h),
            Value::Bytes(b) => (9u8, b).hash(&mut h),
        }
    }
    h.finish()
}

/// Key equality as the hash sees it (floats by their bits, instants
/// whatever their offset).
pub(crate) fn same_key(a: &[Value], b: &[Value], key_idx: &[usize]) -> bool {
    key_idx.iter().all(|i| match (&a[*i], &b[*i]) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.unix_timestamp_nanos() == y.unix_timestamp_nanos(),
        (x, y) => x == y,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::shared::record::{Field, FieldType, parse_timestamp};
    use std::sync::Arc;

    pub(crate) fn ts(s: &str) -> Value {
        Value::Timestamp(parse_timestamp(s).unwrap())
    }

    pub(crate) fn batch(rows: Vec<Vec<Value>>) -> RecordBatch {
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
}
