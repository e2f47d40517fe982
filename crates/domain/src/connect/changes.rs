//! Change data capture, the port: a source that reads the inserts, updates
//! and deletes of its tables from its log (PostgreSQL's write-ahead log
//! through a replication slot), in commit order, each transaction whole,
//! from a position the caller holds. A [`Position`] is the source's own text
//! (a PostgreSQL LSN, `16/B374D848`) with the order the source's connector
//! read from it once, where it handed it over.

use super::connector::{ConnectorResult, EntitySchema, Field};
pub use super::position::{Order, Position};
use crate::shared::record::Value;
use std::sync::Arc;
use time::OffsetDateTime;

/// What a change did to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
}

impl ChangeOp {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "insert",
            ChangeOp::Update => "update",
            ChangeOp::Delete => "delete",
        }
    }
}

/// One row's change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub entity: String,
    pub op: ChangeOp,
    /// The row after the change, in the entity's field order (see
    /// [`ChangeEvent::Schema`]); for a delete, the row's key with the other
    /// fields null (or the whole old row, where the table logs it).
    pub values: Vec<Value>,
    /// The indexes of fields the change did not carry (a large value an
    /// update left as it was): the destination keeps what it holds.
    pub unchanged: Vec<usize>,
}

/// What a change stream yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeEvent {
    /// The fields of an entity as the changes that follow carry them: sent
    /// before an entity's first change and again after its columns changed.
    Schema(EntitySchema),
    /// The start of a transaction: where it commits and when.
    Begin {
        position: Position,
        committed_at: OffsetDateTime,
    },
    Change(Change),
    /// The entity's changes can no longer be read from here on (its table
    /// was truncated or dropped, or its columns in the log match none the
    /// source has): it stops at its position, saying `reason`; the other
    /// entities go on.
    Halt {
        entity: String,
        reason: String,
    },
    /// The end of a transaction: every change before it, and none after,
    /// is at or before `position`.
    Commit {
        position: Position,
        committed_at: OffsetDateTime,
    },
}

/// A stream's changes, read in order.
#[async_trait::async_trait]
pub trait ChangeReader: Send {
    /// The next events, at most `max`; none when the stream reached the end
    /// it was opened up to (a read that stops short of it fails instead:
    /// the caller takes "none" to mean every change up to that end was
    /// seen).
    async fn next(&mut self, max: usize) -> ConnectorResult<Vec<ChangeEvent>>;
}

/// Where a new stream starts, and the snapshot of the tables at exactly
/// that point, which the initial copy reads in while it is held.
pub struct StreamStart {
    pub position: Position,
    /// The snapshot's name (PostgreSQL's exported snapshot), valid until
    /// `hold` is dropped; `None` for a stream that already existed.
    pub snapshot: Option<String>,
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

/// One chunk of a table's copy, read while its stream goes on (see
/// [`ChangeSource::read_chunk`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// The fields of `rows`, as the source's catalog gives them now.
    pub fields: Arc<Vec<Field>>,
    /// The rows, in key order.
    pub rows: Vec<Vec<Value>>,
    /// Where the source's log was when the chunk's snapshot was taken:
    /// what a change log stamps the chunk's rows with.
    pub position: Position,
    /// The source's estimate of the table's rows, when it has one (for
    /// the copy's count of chunks).
    pub table_rows: Option<u64>,
}

/// A source that reads changes from its log.
#[async_trait::async_trait]
pub trait ChangeSource: Send + Sync {
    /// Why this connection cannot capture the changes of `entities`, one
    /// line each naming the setting or grant that is missing; empty when
    /// it can.
    async fn readiness(&self, entities: &[String]) -> ConnectorResult<Vec<String>>;

    /// Makes sure the stream `name` (its slot and publication) exists and
    /// covers `entities`; creates it when missing.
    async fn open_stream(&self, name: &str, entities: &[String]) -> ConnectorResult<StreamStart>;

    /// A snapshot of the tables as of a position the stream `name` reads
    /// past (it exists already): for copying a table added to the stream,
    /// or copying one again, so that the changes after the copy begin
    /// exactly where it ends. Valid while `hold` is.
    async fn fresh_snapshot(&self, name: &str) -> ConnectorResult<StreamStart>;

    /// At most `limit` rows of `entity` whose key (the fields `key`, in
    /// order) comes after `after` (from the first when `None`), in key
    /// order (text by its bytes, as every destination compares it), read
    /// in a snapshot that sees every transaction whose commit the stream
    /// has given so far: for copying a table in chunks while its stream
    /// goes on (`docs/cdc.md`, "Copies in chunks").
    async fn read_chunk(
        &self,
        entity: &str,
        key: &[Field],
        after: Option<&[Value]>,
        limit: usize,
    ) -> ConnectorResult<Chunk>;

    /// A position of this source's log as stored (by a destination, or
    /// given by a user), read once.
    ///
    /// # Errors
    /// `InvalidConfig` for text that is not a position of this source.
    fn position(&self, text: &str) -> ConnectorResult<Position>;

    /// The position the source's log ends at now: everything before it can
    /// be read.
    async fn end_position(&self) -> ConnectorResult<Position>;

    /// Waits until the source's log ends past `position` (something was
    /// written since), or `at_most` passed; answers whether it did.
    async fn wait_past(&self, position: &Position, at_most: std::time::Duration) -> ConnectorResult<bool>;

    /// The changes of each entity of `from` in the transactions that commit
    /// after its position (`(entity, position)`) and at or before `until`,
    /// in commit order, with every transaction's commit. The stream reads
    /// on from its confirmed position, which is at or before each of them.
    async fn changes(
        &self,
        name: &str,
        from: &[(String, Position)],
        until: &Position,
    ) -> ConnectorResult<Box<dyn ChangeReader>>;

    /// Lets the source forget everything at or before `position`: every
    /// destination holds it.
    async fn confirm(&self, name: &str, position: &Position) -> ConnectorResult<()>;

    /// The earliest position the stream still holds.
    async fn retained_from(&self, name: &str) -> ConnectorResult<Option<Position>>;

    /// How many bytes of its log the source keeps for the stream (from the
    /// oldest it may still need to the end); `None` when it has none.
    async fn retained_bytes(&self, name: &str) -> ConnectorResult<Option<u64>>;

    /// Removes the stream (its slot and publication); nothing when missing.
    async fn drop_stream(&self, name: &str) -> ConnectorResult<()>;
}
