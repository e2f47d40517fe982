//! Copies in chunks: how a CDC table is copied while its change stream goes
//! on (a table added to a running flow, one copied again with `DELETE
//! …/state/{entity}`, a first copy that is not a bulk load), and how far
//! such a copy got.
//!
//! Each chunk is the next [`CHUNK_ROWS`] rows by key, read in a snapshot
//! taken after the position the table holds; it goes into the
//! destination in the transaction that then applies the stream from that
//! position, and commits with it. A mirror first clears the chunk's key
//! range there (the keys the source no longer has go), then writes the
//! chunk; the changes that follow replay every transaction after the held
//! position in commit order, so each key ends as its last change left it
//! (a change the chunk had seen already sets what the chunk set, or a
//! state that a later change of the same key, also replayed, moves on).
//! A change log appends the chunk's rows as inserts. The copy's progress
//! (the last key copied) is held with the position, in the same
//! transaction: a kill loses at most the chunk being written.

use crate::connect::connector::{Field, FieldType, Value};
use crate::sync::cursor::{cursor_text, parse_cursor};
use serde::{Deserialize, Serialize};

/// Rows per chunk.
pub const CHUNK_ROWS: usize = 20_000;

/// What separates a held position from its copy's progress in the text a
/// destination holds (`0/16B3748 copy {"after":["41"],"done":3,"total":9}`).
const MARK: &str = " copy ";

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
        Some(m) => format!("{position}{MARK}{m}"),
        None => position.to_string(),
    }
}

/// A held text read back: the position, and the copy's progress when it
/// holds one. Text that is not of that form is a position alone.
pub fn parse_held(text: &str) -> (String, Option<CopyMark>) {
    if let Some((position, mark)) = text.split_once(MARK)
        && let Ok(mark) = serde_json::from_str::<CopyMark>(mark)
    {
        return (position.to_string(), Some(mark));
    }
    (text.to_string(), None)
}

/// Whether a table can be copied in chunks by `key`: a key whose order
/// every engine draws alike (integers, times, and text compared by its
/// bytes; not a source type of an order of its own, like an enum, nor a
/// decimal, which SQLite keeps as text).
pub fn chunkable(key: &[Field]) -> bool {
    !key.is_empty()
        && key.iter().all(|f| match f.field_type {
            FieldType::Integer | FieldType::Timestamp | FieldType::Date => true,
            FieldType::String => {
                let native = f.native_type.as_deref().and_then(|n| n.split_once(':')).map_or("text", |(_, t)| t);
                ["text", "character varying", "varchar", "character", "char", "bpchar", "uuid"]
                    .iter()
                    .any(|t| native == *t || native.starts_with(&format!("{t}(")))
            }
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, t: FieldType, native: Option<&str>) -> Field {
        Field {
            name: name.into(),
            field_type: t,
            nullable: false,
            primary_key: true,
            native_type: native.map(Into::into),
        }
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
    fn the_mark_moves_on_by_the_last_key_and_ends_with_the_table() {
        let start = CopyMark::default();
        let key = [field("id", FieldType::Integer, None), field("at", FieldType::Timestamp, None)];
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

    #[test]
    fn keys_of_an_order_every_engine_shares_are_chunked() {
        let int = field("id", FieldType::Integer, Some("postgres:bigint"));
        let text = field("code", FieldType::String, Some("postgres:character varying(20)"));
        let uuid = field("u", FieldType::String, Some("postgres:uuid"));
        let enumerated = field("mood", FieldType::String, Some("postgres:mood"));
        let float = field("x", FieldType::Number, None);
        assert!(!chunkable(&[field("d", FieldType::Decimal, None)]));
        assert!(chunkable(&[int.clone(), text]));
        assert!(chunkable(&[uuid]));
        assert!(!chunkable(&[int.clone(), enumerated]));
        assert!(!chunkable(&[float]));
        assert!(!chunkable(&[]));
    }
}
