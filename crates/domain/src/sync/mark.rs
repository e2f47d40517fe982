//! How far an entity of a flow got, typed: a cursor, a change stream's
//! position with its copy's progress, or a clearing pending. This module
//! alone reads and writes the stored form, which `GET …/state` shows too:
//! two texts, a cursor field and a value.
//!
//! | mark | field | value |
//! |---|---|---|
//! | a cursor | the mapping's cursor field (none: a full refresh) | the value reached, as text (none: from the start) |
//! | a position | `$position` | the position as its source writes it (none: its copy is pending), then, while the table is copied in chunks, ` copy ` and the copy's progress as JSON |
//! | a clearing | `$clear` | none |
//!
//! A destination holds a CDC table's position and copy progress as that
//! same value text ([`held_text`], [`parse_held`]); one that holds the
//! marks of row flows too ([`crate::connect::connector::Destination::holds_marks`])
//! holds a [`RowsHeld`] for each entity such a flow writes.

use crate::connect::connector::{Field, Value};
use crate::sync::cursor::{cursor_text, parse_cursor};
use serde::{Deserialize, Serialize};

/// Rows per chunk of a copy in chunks (see `engine/chunks.rs`).
pub const CHUNK_ROWS: usize = 20_000;

/// The stored field of a change stream position.
const POSITION_FIELD: &str = "$position";
/// The stored field of a clear and resync pending: the next run replaces
/// the destination's table with a full copy, then stores the cursor that
/// copy reached.
const CLEAR_FIELD: &str = "$clear";
/// What separates a held position from its copy's progress in the text a
/// destination holds (`0/16B3748 copy {"after":["41"],"done":3,"total":9}`).
const COPY: &str = " copy ";

/// What begins the text of a [`RowsHeld`].
const ROWS: &str = "$rows ";

/// What a destination that holds marks holds of an entity a run writes
/// rows into, committed with them: the run that committed last, whether
/// that run finished the entity, and the cursor the committed rows reach
/// (an incremental mapping's, as stored text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowsHeld {
    pub run: String,
    #[serde(default)]
    pub done: bool,
    /// The cursor field (none: a full refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl RowsHeld {
    /// The text the destination holds: `$rows ` and the mark as JSON.
    pub fn text(&self) -> String {
        format!("{ROWS}{}", serde_json::to_string(self).unwrap_or_default())
    }

    /// A held text as a row entity's mark; `None` for any other text (a
    /// change stream's position).
    pub fn parse(text: &str) -> Option<RowsHeld> {
        serde_json::from_str(text.strip_prefix(ROWS)?).ok()
    }
}

/// How far an entity got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// An incremental mapping's cursor: its field (none for a full
    /// refresh) and the value reached, as text (none: from the start).
    Cursor { field: Option<String>, value: Option<String> },
    /// A CDC entity's position in its flow's change stream (none: its
    /// first copy, or a copy asked for again, has not committed), with how
    /// far a copy in chunks got.
    Position { at: Option<String>, copy: Option<CopyMark> },
    /// A clear and resync is pending.
    Clearing,
}

impl Mark {
    /// A CDC entity whose copy is pending.
    pub fn pending_copy() -> Mark {
        Mark::Position { at: None, copy: None }
    }

    /// A mark read from its stored form. Any other field is a cursor's,
    /// and a position's value that carries no copy's progress is the
    /// position alone.
    pub fn from_stored(field: Option<String>, value: Option<String>) -> Mark {
        match field.as_deref() {
            Some(POSITION_FIELD) => {
                let (at, copy) = match value.as_deref().map(parse_held) {
                    Some((at, copy)) => (Some(at), copy),
                    None => (None, None),
                };
                Mark::Position { at, copy }
            }
            Some(CLEAR_FIELD) => Mark::Clearing,
            _ => Mark::Cursor { field, value },
        }
    }

    /// The stored form: the field and the value.
    pub fn stored(&self) -> (Option<String>, Option<String>) {
        match self {
            Mark::Cursor { field, value } => (field.clone(), value.clone()),
            Mark::Position { at, copy } => {
                (Some(POSITION_FIELD.into()), at.as_deref().map(|at| held_text(at, copy.as_ref())))
            }
            Mark::Clearing => (Some(CLEAR_FIELD.into()), None),
        }
    }

    /// The field shown (`GET …/cursors`, `GET …/state`): a position's is
    /// `$position`.
    pub fn field(&self) -> Option<&str> {
        match self {
            Mark::Cursor { field, .. } => field.as_deref(),
            Mark::Position { .. } => Some(POSITION_FIELD),
            Mark::Clearing => Some(CLEAR_FIELD),
        }
    }

    /// The value shown: a position without its copy's progress.
    pub fn value(&self) -> Option<&str> {
        match self {
            Mark::Cursor { value, .. } => value.as_deref(),
            Mark::Position { at, .. } => at.as_deref(),
            Mark::Clearing => None,
        }
    }

    pub fn clearing(&self) -> bool {
        *self == Mark::Clearing
    }
}

/// How far a copy in chunks got: the key of the last row copied (`None`:
/// none yet), as text, and the chunks done of about how many.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyMark {
    pub after: Option<Vec<String>>,
    pub done: u64,
    pub total: u64,
    /// Only in the flow's stored state, never in a destination: a change
    /// log whose first copy is to begin at its new stream's start, not
    /// committed yet (see `capture/first_copy.rs`, `mark_first_logs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first: bool,
}

impl CopyMark {
    /// The key values copied up to, read back as `key`'s types.
    ///
    /// # Errors
    /// A message when the mark does not fit the key (its columns changed).
    pub fn after_values(&self, key: &[Field]) -> Result<Option<Vec<Value>>, String> {
        let Some(after) = &self.after else { return Ok(None) };
        if after.len() != key.len() {
            return Err(format!("the copy's mark has {} key values, the key {} fields", after.len(), key.len()));
        }
        key.iter()
            .zip(after)
            .map(|(f, v)| parse_cursor(v, f.field_type).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// The mark once the chunk that ends at `last` (its last row's key;
    /// `None` when it was the table's last) is copied; `table_rows` the
    /// source's estimate of the table's size. `None` when the copy is done.
    pub fn next(&self, last: Option<&[Value]>, table_rows: Option<u64>) -> Option<CopyMark> {
        let last = last?;
        let done = self.done + 1;
        let estimated = table_rows.map_or(0, |n| n.div_ceil(CHUNK_ROWS as u64));
        Some(CopyMark {
            after: Some(last.iter().map(|v| cursor_text(v).unwrap_or_default()).collect()),
            done,
            total: self.total.max(estimated).max(done + 1),
            first: false,
        })
    }
}

/// The text a destination holds for a table: its position, and while the
/// table is being copied in chunks, how far the copy got.
pub fn held_text(position: &str, mark: Option<&CopyMark>) -> String {
    match mark.and_then(|m| serde_json::to_string(m).ok()) {
        Some(m) => format!("{position}{COPY}{m}"),
        None => position.to_string(),
    }
}

/// A held text read back: the position, and the copy's progress when it
/// holds one. Text that is not of that form is a position alone.
pub fn parse_held(text: &str) -> (String, Option<CopyMark>) {
    if let Some((position, mark)) = text.split_once(COPY)
        && let Ok(mark) = serde_json::from_str::<CopyMark>(mark)
    {
        return (position.to_string(), Some(mark));
    }
    (text.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::connector::FieldType;

    fn field(name: &str, t: FieldType) -> Field {
        Field { name: name.into(), field_type: t, nullable: false, primary_key: true, native_type: None }
    }

    #[test]
    fn a_held_text_carries_the_copys_progress_and_reads_back() {
        assert_eq!(parse_held("16/B374D848"), ("16/B374D848".into(), None));
        let mark = CopyMark { after: Some(vec!["41".into(), "a b".into()]), done: 3, total: 9, first: false };
        let text = held_text("16/B374D848", Some(&mark));
        assert_eq!(text, r#"16/B374D848 copy {"after":["41","a b"],"done":3,"total":9}"#);
        assert_eq!(parse_held(&text), ("16/B374D848".into(), Some(mark)));
        assert_eq!(held_text("0/1", None), "0/1");
        // Not a mark: the whole text is the position (refused later as one).
        assert_eq!(parse_held("0/1 copy nonsense"), ("0/1 copy nonsense".into(), None));
    }

    #[test]
    fn a_row_entitys_held_mark_reads_back_and_is_never_a_position() {
        let h = RowsHeld {
            run: "0192".into(),
            done: true,
            field: Some("updated_at".into()),
            cursor: Some("2026-01-02T00:00:00Z".into()),
        };
        assert_eq!(
            h.text(),
            r#"$rows {"run":"0192","done":true,"field":"updated_at","cursor":"2026-01-02T00:00:00Z"}"#
        );
        assert_eq!(RowsHeld::parse(&h.text()), Some(h));
        let bare = RowsHeld { run: "0192".into(), done: false, field: None, cursor: None };
        assert_eq!(RowsHeld::parse(r#"$rows {"run":"0192"}"#), Some(bare));
        assert_eq!(RowsHeld::parse("16/B374D848"), None);
        assert_eq!(RowsHeld::parse("$rows not json"), None);
    }

    /// Rows stored before the mark was typed, exactly as the stores hold
    /// them, read as marks and written back unchanged.
    #[test]
    fn stored_rows_of_every_form_read_as_marks_and_write_back_unchanged() {
        let s = |v: &str| Some(v.to_string());
        let rows = [
            (s("updated_at"), s("2026-01-02T00:00:00.000000Z")),
            (s("id"), None),
            (None, None),
            (s("$position"), s("16/B374D848")),
            (s("$position"), s("0-1-42,1-2-7")),
            (s("$position"), s(r#"0/16B3748 copy {"after":["41"],"done":3,"total":9}"#)),
            (s("$position"), s(r#"0/16B3748 copy {"after":null,"done":0,"total":1,"first":true}"#)),
            (s("$position"), None),
            (s("$clear"), None),
        ];
        let marks: Vec<Mark> = rows.iter().cloned().map(|(f, v)| Mark::from_stored(f, v)).collect();
        for ((f, v), m) in rows.iter().zip(&marks) {
            assert_eq!(&m.stored(), &(f.clone(), v.clone()), "{m:?} writes back as it was stored");
        }
        assert_eq!(marks[0], Mark::Cursor { field: s("updated_at"), value: s("2026-01-02T00:00:00.000000Z") });
        assert_eq!(marks[3], Mark::Position { at: s("16/B374D848"), copy: None });
        let Mark::Position { at, copy: Some(copy) } = &marks[5] else { panic!("a copy's progress: {:?}", marks[5]) };
        assert_eq!((at.as_deref(), copy.done, copy.total), (Some("0/16B3748"), 3, 9));
        let Mark::Position { copy: Some(first), .. } = &marks[6] else { panic!("a first log: {:?}", marks[6]) };
        assert!(first.first);
        assert_eq!(marks[7], Mark::pending_copy());
        assert!(marks[8].clearing());
        // What shows: a position without its copy's progress.
        assert_eq!((marks[5].field(), marks[5].value()), (Some("$position"), Some("0/16B3748")));
        assert_eq!((marks[0].field(), marks[0].value()), (Some("updated_at"), Some("2026-01-02T00:00:00.000000Z")));
        assert_eq!((marks[8].field(), marks[8].value()), (Some("$clear"), None));
    }

    #[test]
    fn the_copys_mark_moves_on_by_the_last_key_and_ends_with_the_table() {
        let start = CopyMark::default();
        let key = [field("id", FieldType::Integer), field("at", FieldType::Timestamp)];
        assert_eq!(start.after_values(&key), Ok(None));
        let at = time::macros::datetime!(2026-01-02 03:04:05.5 UTC);
        let next = start.next(Some(&[Value::Int(7), Value::Timestamp(at)]), Some(50_000)).unwrap();
        assert_eq!((next.done, next.total), (1, 3));
        assert_eq!(next.after_values(&key), Ok(Some(vec![Value::Int(7), Value::Timestamp(at)])));
        // An estimate below what was done already never shows fewer chunks.
        let later = next.next(Some(&[Value::Int(9), Value::Timestamp(at)]), Some(0)).unwrap();
        assert_eq!((later.done, later.total), (2, 3));
        assert_eq!(later.next(None, None), None);
        assert!(next.after_values(&key[..1]).is_err());
    }
}
