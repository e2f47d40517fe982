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

use crate::connect::connector::{Field, FieldType};
pub use crate::sync::mark::{CHUNK_ROWS, CopyMark};

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
