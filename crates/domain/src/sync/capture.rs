//! Change data capture in a run: the flow's `cdc_deduped` and `cdc_append`
//! mappings together, fed by one read of the source's change stream (one
//! per flow, named by the flow's id).
//!
//! - **Positions live with the data.** Each destination commit records the
//!   stream position its entity reached in the same transaction
//!   ([`EntityWriter::hold_position`]); a run resumes from what the
//!   destination holds ([`Destination::positions`]), and the source is told
//!   to forget a position ([`ChangeSource::confirm`]) only once every entity
//!   committed past it. A kill at any instant therefore loses nothing and
//!   applies nothing twice: what was committed carries its position, what
//!   was not is read again.
//! - **The first run copies, then streams.** An entity the destination holds
//!   no position for is copied first. When no entity holds one, the stream
//!   starts afresh: the source exports the snapshot its position starts
//!   from, and the copy reads in it, so the changes that follow begin
//!   exactly where the copy ends. An entity added to a running stream, or
//!   copied again (`DELETE …/state`), is copied in a snapshot of its own
//!   ([`ChangeSource::fresh_snapshot`]) and the stream goes on for it from
//!   that snapshot's position. A `cdc_deduped` copy first clears what the
//!   destination held, in the copy's transaction.
//! - A run reads the stream up to the source's end at its start, commits
//!   every [`CHECKPOINT_ROWS`] changes at a transaction's end, and ends;
//!   having read to that end, every entity holds it (an idle one too).
//! - A position the stream no longer holds fails its entity with
//!   `position_lost`, never skipping what was lost.
//!
//! See `docs/cdc.md`.

use super::entity::{BATCH_ROWS, CHECKPOINT_ROWS};
use super::service::SyncService;
use crate::connect::changes::{Change, ChangeEvent, ChangeOp, ChangeSource, Chunk};
use crate::connect::connection::Connection;
use crate::connect::connector::{
    Destination, EntitySchema, EntityWriter, Field, FieldType, KeyRange, ReadRequest, RecordBatch, Source, Value,
    WriteMode,
};
use crate::sync::chunks::{CHUNK_ROWS, CopyMark, chunkable, held_text, parse_held};
use crate::sync::flow::{Cursor, EntityStats, EntityStatus, Flow, LogLevel, Mapping, Run};
use crate::sync::mode::{COMMITTED_AT, DELETED_AT, DeleteMode, OP, POSITION, SyncMode};
use crate::sync::transform;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use time::OffsetDateTime;

/// The source connection's setting: how many bytes of log its change
/// streams may keep before an event says so.
pub const MAX_RETAINED: &str = "cdc_max_retained";

/// How long a continuous run waits for the source to write before it
/// looks again (and checks whether it should stop).
const CONTINUOUS_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a pass copies chunks of a table before the log is read (and
/// the flow's other tables go on).
const CHUNK_PASS: std::time::Duration = std::time::Duration::from_secs(2);

/// A continuous run commits at least this often while changes arrive.
const CONTINUOUS_COMMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// [`MAX_RETAINED`] unless set: 10 GiB.
pub const DEFAULT_MAX_RETAINED: u64 = 10 << 30;

/// A stop at a commit that is not a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halt {
    /// The run was canceled: what was committed stays.
    Canceled,
    /// The process is stopping: the run goes back to the queue and resumes
    /// from the positions committed.
    Stopped,
    /// The entity's source columns changed as its `schema_policy` does not
    /// take: it stays at its position until the flow is updated.
    Drift,
}

/// Why one entity stopped while the stream went on for the others.
#[derive(Debug, Clone)]
enum Stop {
    Drift(String),
    Failed(String),
    /// The stream no longer holds changes the entity had not read.
    Lost(String),
    /// The destination holds a position past the source's end (edited by
    /// hand): following it would skip every change up to it.
    Beyond(String),
}

/// Why a CDC entity (or all of them) stopped.
#[derive(Debug)]
pub struct CaptureFailure {
    /// The entity, or `None` for all of the flow's CDC entities.
    pub entity: Option<String>,
    pub message: String,
    pub transient: bool,
    /// The run was taken over: stop without recording anything.
    pub lost: bool,
    pub halt: Option<Halt>,
    /// The failure's code, where it has one of its own
    /// ([`crate::shared::error::Code::PositionLost`]).
    pub code: Option<crate::shared::error::Code>,
}

impl CaptureFailure {
    fn all(message: impl Into<String>) -> Self {
        CaptureFailure { entity: None, message: message.into(), transient: false, lost: false, halt: None, code: None }
    }

    fn position_lost(message: impl Into<String>) -> Self {
        CaptureFailure { code: Some(crate::shared::error::Code::PositionLost), ..CaptureFailure::all(message) }
    }

    fn from_connector(e: crate::connect::connector::ConnectorError) -> Self {
        let transient = e.transient();
        CaptureFailure { transient, ..CaptureFailure::all(e.to_string()) }
    }

    fn lost() -> Self {
        CaptureFailure { lost: true, ..CaptureFailure::all("the run was taken over") }
    }

    fn halted(halt: Halt) -> Self {
        CaptureFailure { halt: Some(halt), ..CaptureFailure::all("halted") }
    }
}

impl From<crate::connect::connector::ConnectorError> for CaptureFailure {
    fn from(e: crate::connect::connector::ConnectorError) -> Self {
        CaptureFailure::from_connector(e)
    }
}

impl From<crate::Error> for CaptureFailure {
    fn from(e: crate::Error) -> Self {
        CaptureFailure { transient: e.kind() == crate::ErrorKind::Internal, ..CaptureFailure::all(e.to_string()) }
    }
}

/// The destination's schema of a CDC mapping: its transformed fields, keyed
/// by the source's primary key (`cdc_deduped`), plus the columns change data
/// capture adds.
pub fn capture_schema(m: &Mapping, source_fields: &[Field]) -> Result<EntitySchema, String> {
    let mut fields = transform::plan("transform", &m.transform, source_fields)
        .map_err(|e| e.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; "))?;
    let keys = m.key_fields();
    for f in &mut fields {
        if m.sync_mode == SyncMode::CdcAppend {
            // A delete's row carries the key alone.
            f.primary_key = false;
            f.nullable = true;
        } else if !keys.is_empty() {
            f.primary_key = keys.contains(&f.name.as_str());
        }
        if f.primary_key {
            f.nullable = false;
        }
    }
    if m.sync_mode == SyncMode::CdcDeduped && !fields.iter().any(|f| f.primary_key) {
        return Err(format!("{} has no primary key: cdc_deduped mirrors a table by its key", m.source_entity));
    }
    let extra = |name: &str, t: FieldType| Field {
        name: name.into(),
        field_type: t,
        nullable: true,
        primary_key: false,
        native_type: None,
    };
    match (m.sync_mode, m.delete_mode.unwrap_or_default()) {
        (SyncMode::CdcAppend, _) => {
            fields.push(extra(OP, FieldType::String));
            fields.push(extra(POSITION, FieldType::String));
            fields.push(extra(COMMITTED_AT, FieldType::Timestamp));
        }
        (_, DeleteMode::Soft) => fields.push(extra(DELETED_AT, FieldType::Timestamp)),
        _ => {}
    }
    Ok(EntitySchema { name: m.destination().to_string(), fields })
}

/// What a run's CDC mappings share.
#[derive(Clone, Copy)]
pub(super) struct Scope<'a> {
    pub run: &'a Run,
    pub flow: &'a Flow,
    pub source: &'a Arc<dyn Source>,
    pub changes: &'a Arc<dyn ChangeSource>,
    pub dest: &'a Arc<dyn Destination>,
    /// The source connection's [`retained_budget`].
    pub budget: u64,
}

/// How much log a flow's source may keep for its stream before Sluice
/// warns: the source connection's [`MAX_RETAINED`] (10 GiB unless set).
pub fn retained_budget(source: &Connection) -> u64 {
    let set = source.config.get(MAX_RETAINED);
    set.and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok())).unwrap_or(DEFAULT_MAX_RETAINED)
}

/// What an entity's writer is given next.
enum Pending {
    None,
    /// A change log's rows, in order.
    Log(Vec<Vec<Value>>),
    /// A mirror's changes, one per key.
    Mirror(ByKey),
}

/// What a mirror does to one key.
#[derive(Debug, Clone, PartialEq)]
enum KeyOp {
    Upsert,
    Delete,
    /// Sets the row's fields but these (a large value an update left as it
    /// was, or a soft delete, which sets its time alone).
    Partial(Vec<usize>),
}

/// A mirror's pending changes, one per key: changes of different keys do
/// not depend on each other, so only each key's last state matters (an
/// update folded into the upsert before it, a delete replacing both).
/// Applied as one upsert, one delete and one update per set of kept fields,
/// however the source's transactions interleaved them.
#[derive(Default)]
struct ByKey {
    slots: HashMap<u64, crate::sync::mode::SmallSlots>,
    rows: Vec<(KeyOp, Vec<Value>)>,
}

impl ByKey {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn push(&mut self, op: KeyOp, row: Vec<Value>, key_idx: &[usize]) {
        let h = crate::sync::mode::key_hash(&row, key_idx);
        let slots = self.slots.entry(h).or_default();
        let rows = &mut self.rows;
        let Some(i) = slots.find(|i| crate::sync::mode::same_key(&rows[i].1, &row, key_idx)) else {
            slots.push(rows.len());
            rows.push((op, row));
            return;
        };
        let (before, held) = &mut rows[i];
        match (&*before, op) {
            // What the update left as it was comes from the row before.
            (KeyOp::Upsert, KeyOp::Partial(keep)) => {
                let mut row = row;
                for k in keep {
                    row[k] = held[k].clone();
                }
                *held = row;
            }
            (KeyOp::Partial(kept), KeyOp::Partial(keep)) => {
                let mut row = row;
                for k in &keep {
                    if !kept.contains(k) {
                        row[*k] = held[*k].clone();
                    }
                }
                let both: Vec<usize> = keep.into_iter().filter(|k| kept.contains(k)).collect();
                *before = KeyOp::Partial(both);
                *held = row;
            }
            (_, op) => {
                *before = op;
                *held = row;
            }
        }
    }
}

/// One CDC mapping's part of the run.
struct Entity<'a> {
    m: &'a Mapping,
    index: usize,
    /// The source's fields as the catalog gives them: what the changes are
    /// put in the order of.
    source_fields: Arc<Vec<Field>>,
    schema: EntitySchema,
    writer: Option<Box<dyn EntityWriter>>,
    /// The position the destination holds (or will, at the next commit).
    position: String,
    /// Where each field of the stream's rows goes among `source_fields`.
    order: Vec<Option<usize>>,
    pending: Pending,
    stats: EntityStats,
    /// Rows this attempt committed before the writer now open.
    committed: u64,
    /// The position the destination holds now (committed).
    held: String,
    /// Set when the entity stopped: its changes are skipped from then on,
    /// and it stays at `held`.
    stopped: Option<Stop>,
    /// The destination holds no position: the table is copied first.
    copy: bool,
    /// Each column's type as the stream last described the table.
    stream_types: HashMap<String, FieldType>,
    /// The table is being copied in chunks (see [`crate::sync::chunks`]):
    /// how far, as the next commit holds it.
    mark: Option<CopyMark>,
    /// How far the copy in chunks got as the destination holds it.
    held_mark: Option<CopyMark>,
}

impl Entity<'_> {
    /// Stops this entity alone: what it wrote since its last commit is
    /// rolled back, and it stays at the position it committed.
    async fn stop(&mut self, why: Stop) {
        if let Some(w) = self.writer.take() {
            w.abort().await;
        }
        self.pending = Pending::None;
        self.position = self.held.clone();
        self.mark = self.held_mark.clone();
        self.stopped = Some(why);
    }

    /// What the destination is to hold: the position, and how far a copy
    /// in chunks got.
    fn held_text(&self) -> String {
        held_text(&self.position, self.mark.as_ref())
    }

    /// The key a copy in chunks reads the table by, as the source names
    /// its fields (a mirror's key, which no transform may change; a change
    /// log's source key); `None` when the table cannot be copied so.
    fn chunk_key(&self) -> Option<Vec<Field>> {
        let key: Vec<Field> = match self.m.sync_mode {
            SyncMode::CdcDeduped if self.transform_keeps_key() => self
                .schema
                .fields
                .iter()
                .filter(|f| f.primary_key)
                .filter_map(|k| self.source_fields.iter().find(|f| f.name == k.name).cloned())
                .collect(),
            SyncMode::CdcAppend => self.source_fields.iter().filter(|f| f.primary_key).cloned().collect(),
            _ => return None,
        };
        chunkable(&key).then_some(key)
    }

    /// Whether the mapping's transform leaves the key's names and values as
    /// the source has them (filters, and steps on other fields).
    fn transform_keeps_key(&self) -> bool {
        use transform::Step;
        let key: Vec<&str> = self.schema.fields.iter().filter(|f| f.primary_key).map(|f| f.name.as_str()).collect();
        self.m.transform.iter().all(|s| match s {
            Step::Filter { .. } => true,
            Step::Rename { from: f, to: t } => !key.contains(&f.as_str()) && !key.contains(&t.as_str()),
            Step::Drop { field } | Step::Cast { field, .. } | Step::Mask { field } | Step::Set { field, .. } => {
                !key.contains(&field.as_str())
            }
        })
    }

    /// Writes the chunk read for this table into its open writer: a
    /// mirror's key range cleared first (what the source no longer has
    /// goes), the chunk's rows upserted (a change log's appended as
    /// inserts); the copy's mark then moves past them.
    /// `key` is [`Entity::chunk_key`], `after` the mark's last key read as
    /// its types.
    async fn apply_chunk(
        &mut self,
        chunk: Chunk,
        key: &[Field],
        after: Option<Vec<Value>>,
    ) -> Result<(), CaptureFailure> {
        let Some(mark) = self.mark.clone() else { return Ok(()) };
        let entity = self.m.source_entity.clone();
        let at: Vec<usize> = key.iter().filter_map(|k| chunk.fields.iter().position(|f| f.name == k.name)).collect();
        let last: Option<Vec<Value>> = (chunk.rows.len() >= CHUNK_ROWS)
            .then(|| chunk.rows.last().map(|r| at.iter().map(|i| r[*i].clone()).collect()))
            .flatten();
        let fields = Arc::new(self.schema.fields.clone());
        let Some(writer) = self.writer.as_mut() else { return Ok(()) };
        if self.m.sync_mode == SyncMode::CdcDeduped {
            let key_fields: Vec<Field> =
                key.iter().filter_map(|k| fields.iter().find(|f| f.name == k.name).cloned()).collect();
            let range = KeyRange { fields: key_fields, after, upto: last.clone() };
            let soft = (self.m.delete_mode == Some(DeleteMode::Soft)).then_some(DELETED_AT);
            writer.clear(&range, soft).await.map_err(|x| failure_of(&entity, x))?;
        }
        let order = order_of(&chunk.fields, &self.source_fields);
        let begin = (chunk.position.clone(), None);
        let n = chunk.rows.len() as u64;
        let mut left = chunk.rows.into_iter();
        loop {
            let read: Vec<Vec<Value>> = left.by_ref().take(BATCH_ROWS).collect();
            if read.is_empty() {
                break;
            }
            let rows = self.copied_rows(&order, read, &begin);
            let Some(writer) = self.writer.as_mut() else { return Ok(()) };
            writer.write(&RecordBatch { fields: fields.clone(), rows }).await.map_err(|x| failure_of(&entity, x))?;
        }
        self.stats.rows_read += n;
        self.mark = mark.next(last.as_deref(), chunk.table_rows);
        Ok(())
    }

    fn key_idx(&self) -> Vec<usize> {
        self.schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect()
    }

    /// The change's row in the source's field order, transformed, with the
    /// capture columns.
    /// `None` when the mapping's filter drops the row.
    fn row(&self, c: &Change, begin: &(String, Option<OffsetDateTime>)) -> Option<Vec<Value>> {
        self.row_with(&self.m.transform, &self.order, c, begin)
    }

    /// [`Entity::row`] of a change whose fields come in `order` (see
    /// [`order_of`]), through `steps`.
    fn row_with(
        &self,
        steps: &[transform::Step],
        order: &[Option<usize>],
        c: &Change,
        begin: &(String, Option<OffsetDateTime>),
    ) -> Option<Vec<Value>> {
        let mut row = vec![Value::Null; self.source_fields.len()];
        for (i, v) in c.values.iter().enumerate() {
            if let Some(Some(at)) = order.get(i) {
                row[*at] = v.clone();
            }
        }
        let batch = RecordBatch { fields: self.source_fields.clone(), rows: vec![row] };
        let mut row = transform::apply(steps, batch).rows.pop()?;
        if self.m.sync_mode == SyncMode::CdcAppend {
            row.push(Value::String(c.op.as_str().into()));
            row.push(Value::String(begin.0.clone()));
            row.push(begin.1.map_or(Value::Null, Value::Timestamp));
        } else if self.m.delete_mode == Some(DeleteMode::Soft) {
            row.push(Value::Null);
        }
        Some(row)
    }

    /// A copy's rows (fields in `order`) as the destination takes them:
    /// inserts, transformed, the filter's drops left out.
    fn copied_rows(
        &self,
        order: &[Option<usize>],
        rows: Vec<Vec<Value>>,
        begin: &(String, Option<OffsetDateTime>),
    ) -> Vec<Vec<Value>> {
        let entity = &self.m.source_entity;
        rows.into_iter()
            .filter_map(|values| {
                let c = Change { entity: entity.clone(), op: ChangeOp::Insert, values, unchanged: Vec::new() };
                self.row_with(&self.m.transform, order, &c, begin)
            })
            .collect()
    }

    /// A mirror's row for a change its filter drops: every step but the
    /// filters, for the key to delete (or keep, see [`Entity::apply`]).
    fn unfiltered_row(&self, c: &Change, begin: &(String, Option<OffsetDateTime>)) -> Vec<Value> {
        let steps: Vec<transform::Step> =
            self.m.transform.iter().filter(|s| !matches!(s, transform::Step::Filter { .. })).cloned().collect();
        self.row_with(&steps, &self.order, c, begin).unwrap_or_default()
    }

    async fn flush(&mut self) -> Result<(), CaptureFailure> {
        if self.writer.is_none() {
            return Ok(());
        }
        let key_idx = self.key_idx();
        let fields = Arc::new(self.schema.fields.clone());
        let entity = self.m.source_entity.clone();
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        let Some(writer) = self.writer.as_mut() else { return Ok(()) };
        let failed = |e| failure_of(&entity, e);
        match pending {
            Pending::None => {}
            Pending::Log(rows) => writer.write(&RecordBatch { fields, rows }).await.map_err(failed)?,
            Pending::Mirror(by_key) => {
                let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
                let mut partials: Vec<(Vec<usize>, Vec<Vec<Value>>)> = Vec::new();
                for (op, row) in by_key.rows {
                    match op {
                        KeyOp::Upsert => upserts.push(row),
                        KeyOp::Delete => deletes.push(key_idx.iter().map(|i| row[*i].clone()).collect()),
                        KeyOp::Partial(keep) => match partials.iter_mut().find(|(k, _)| *k == keep) {
                            Some((_, rows)) => rows.push(row),
                            None => partials.push((keep, vec![row])),
                        },
                    }
                }
                if !upserts.is_empty() {
                    writer.write(&RecordBatch { fields: fields.clone(), rows: upserts }).await.map_err(failed)?;
                }
                if !deletes.is_empty() {
                    let key_fields: Vec<Field> = key_idx.iter().map(|i| fields[*i].clone()).collect();
                    let keys = RecordBatch { fields: Arc::new(key_fields), rows: deletes };
                    writer.delete(&keys).await.map_err(failed)?;
                }
                for (keep, rows) in partials {
                    let set: Vec<usize> = (0..fields.len()).filter(|i| !keep.contains(i)).collect();
                    let set_fields: Vec<Field> = set.iter().map(|i| fields[*i].clone()).collect();
                    let rows = rows.into_iter().map(|r| set.iter().map(|i| r[*i].clone()).collect()).collect();
                    writer.update(&RecordBatch { fields: Arc::new(set_fields), rows }).await.map_err(failed)?;
                }
            }
        }
        Ok(())
    }

    /// Queues one change of a mirror's key; a full batch goes to the writer.
    async fn push_key(&mut self, op: KeyOp, row: Vec<Value>) -> Result<(), CaptureFailure> {
        let key_idx = self.key_idx();
        if !matches!(self.pending, Pending::Mirror(_)) {
            self.pending = Pending::Mirror(ByKey::default());
        }
        let Pending::Mirror(by_key) = &mut self.pending else { return Ok(()) };
        by_key.push(op, row, &key_idx);
        if by_key.len() >= BATCH_ROWS {
            self.flush().await?;
        }
        Ok(())
    }

    fn failed(&self, e: crate::connect::connector::ConnectorError) -> CaptureFailure {
        failure_of(&self.m.source_entity, e)
    }

    /// Applies one change.
    async fn apply(&mut self, c: &Change, begin: &(String, Option<OffsetDateTime>)) -> Result<(), CaptureFailure> {
        self.stats.rows_read += 1;
        let row = self.row(c, begin);
        if self.m.sync_mode == SyncMode::CdcAppend {
            // A change log takes no filter (refused when the flow is saved).
            let Some(row) = row else { return Ok(()) };
            if !matches!(self.pending, Pending::Log(_)) {
                self.pending = Pending::Log(Vec::new());
            }
            let Pending::Log(rows) = &mut self.pending else { return Ok(()) };
            rows.push(row);
            if rows.len() >= BATCH_ROWS {
                self.flush().await?;
            }
            return Ok(());
        }
        let unchanged: Vec<usize> = c
            .unchanged
            .iter()
            .filter_map(|i| self.order.get(*i).copied().flatten())
            .filter_map(|at| self.schema.index_of(&self.source_fields[at].name))
            .collect();
        // A mirror with a filter holds the rows that pass it: a row the
        // filter drops goes (it may have passed before). Unless the filter
        // reads a value the change did not carry (a large value the update
        // left as it was): then whether the row passes did not change, and
        // the update applies to the row if the mirror holds it.
        let (op, row) = match row {
            Some(row) => (c.op, row),
            None => {
                let full = self.unfiltered_row(c, begin);
                let undecided = c.unchanged.iter().filter_map(|i| self.order.get(*i).copied().flatten()).any(|at| {
                    let name = &self.source_fields[at].name;
                    self.m.transform.iter().any(|s| matches!(s, transform::Step::Filter { field, .. } if field == name))
                });
                (if undecided { c.op } else { ChangeOp::Delete }, full)
            }
        };
        match op {
            ChangeOp::Delete if self.m.delete_mode == Some(DeleteMode::Soft) => {
                let mut row = row;
                let at = self.schema.fields.len() - 1;
                row[at] = begin.1.map_or(Value::Null, Value::Timestamp);
                let key_idx = self.key_idx();
                let keep: Vec<usize> =
                    (0..self.schema.fields.len()).filter(|i| *i != at && !key_idx.contains(i)).collect();
                self.push_key(KeyOp::Partial(keep), row).await
            }
            ChangeOp::Delete => self.push_key(KeyOp::Delete, row).await,
            _ if !unchanged.is_empty() => self.push_key(KeyOp::Partial(unchanged), row).await,
            _ => self.push_key(KeyOp::Upsert, row).await,
        }
    }
}

impl SyncService {
    /// The CDC mappings of a run (`(index, mapping)`), together: answers
    /// each one's stats and how it ended, or one failure for all of them.
    pub(super) async fn capture(
        &self,
        scope: Scope<'_>,
        mappings: &[(usize, &Mapping)],
        earlier: &[EntityStats],
    ) -> Vec<(usize, EntityStats, Result<(), CaptureFailure>)> {
        let mut entities = Vec::new();
        let outcome = self.capture_all(scope, mappings, earlier, &mut entities).await;
        let mut out = Vec::new();
        for (index, m) in mappings {
            let e = entities.iter_mut().find(|e| e.index == *index);
            let mut stats = e
                .as_ref()
                .map(|e| e.stats.clone())
                .unwrap_or_else(|| EntityStats { entity: m.source_entity.clone(), ..Default::default() });
            // One stream feeds them all: when it stops, it stops for each
            // (what each committed stands, and the next run goes on from it).
            let stopped = e.as_ref().and_then(|e| e.stopped.clone());
            let result = match (&outcome, stopped) {
                (Ok(()), None) => Ok(()),
                (Ok(()), Some(Stop::Drift(message))) => {
                    Err(CaptureFailure { halt: Some(Halt::Drift), ..CaptureFailure::all(message) })
                }
                (Ok(()), Some(Stop::Failed(message))) => Err(CaptureFailure::all(message)),
                (Ok(()), Some(Stop::Lost(message))) => Err(CaptureFailure::position_lost(message)),
                (Ok(()), Some(Stop::Beyond(message))) => Err(CaptureFailure {
                    code: Some(crate::shared::error::Code::PositionNotRetained),
                    ..CaptureFailure::all(message)
                }),
                (Err(f), _) => Err(CaptureFailure {
                    entity: Some(m.source_entity.clone()),
                    message: match &f.entity {
                        Some(x) if *x != m.source_entity => format!("stopped with {x}: {}", f.message),
                        _ => f.message.clone(),
                    },
                    transient: f.transient,
                    lost: f.lost,
                    halt: f.halt,
                    code: f.code,
                }),
            };
            stats.status = if result.is_ok() { EntityStatus::Succeeded } else { EntityStatus::Failed };
            if let Err(f) = &result {
                stats.error = Some(f.message.clone());
                stats.error_code = f.code.map(|c| c.as_str().to_string());
            }
            if let Some(e) = e
                && let Some(w) = e.writer.take()
            {
                w.abort().await;
            }
            out.push((*index, stats, result));
        }
        out
    }

    async fn capture_all<'a>(
        &self,
        scope: Scope<'_>,
        mappings: &[(usize, &'a Mapping)],
        earlier: &[EntityStats],
        entities: &mut Vec<Entity<'a>>,
    ) -> Result<(), CaptureFailure> {
        let stream = scope.flow.stream_name();
        let names: Vec<String> = mappings.iter().map(|(_, m)| m.source_entity.clone()).collect();
        let (held, retained) = self.reconcile_stream(scope, &stream, mappings).await?;
        let start = scope.changes.open_stream(&stream, &names).await?;
        // A position is never past the source's end (one edited by hand
        // would skip every change up to it).
        let end = match held.is_empty() {
            true => None,
            false => Some(scope.changes.end_position().await?),
        };
        let bounds = (retained.as_deref(), end.as_deref());
        for (index, m) in mappings {
            entities.push(self.capture_entity(scope, *index, m, earlier, &held, bounds).await?);
        }
        self.copy_new_tables(scope, &stream, start, entities).await?;
        self.follow_stream(scope, &stream, entities).await
    }

    /// What the destination holds of the stream, and from where the source
    /// still retains it; a stream nothing of which reached the destination
    /// is dropped (to begin afresh, from a new snapshot), and one the
    /// source lost while the destination holds positions in it is refused.
    async fn reconcile_stream(
        &self,
        scope: Scope<'_>,
        stream: &str,
        mappings: &[(usize, &Mapping)],
    ) -> Result<(HashMap<String, String>, Option<String>), CaptureFailure> {
        let Scope { changes, dest, .. } = scope;
        let held: HashMap<String, String> = dest.positions(stream).await?.into_iter().collect();
        let holds_any = mappings.iter().any(|(_, m)| held.contains_key(m.destination()));
        let retained = changes.retained_from(stream).await?;
        match (holds_any, &retained) {
            // Nothing of the stream reached the destination (a first copy
            // that never committed, or every table to copy again): begin
            // afresh, from a new snapshot.
            (false, Some(_)) => changes.drop_stream(stream).await?,
            // Dropped by hand, or by the server (a slot past its WAL
            // limit): what happened since the positions held is gone.
            (true, None) => {
                return Err(CaptureFailure::position_lost(format!(
                    "the source no longer has this flow's change stream (replication slot sluice_{stream}): the \
                     changes after the positions the destination holds are lost; copy each table again with \
                     DELETE …/state/{{entity}}"
                )));
            }
            _ => {}
        }
        Ok((held, retained))
    }

    /// One CDC mapping's entity as the run begins it: its schema, the
    /// position its destination holds (none: it is copied first), and
    /// whether it stops at once (the stream moved past what it holds, a
    /// column changed type, the schema policy blocks new columns).
    async fn capture_entity<'a>(
        &self,
        scope: Scope<'_>,
        index: usize,
        m: &'a Mapping,
        earlier: &[EntityStats],
        held: &HashMap<String, String>,
        (retained, end): (Option<&str>, Option<&str>),
    ) -> Result<Entity<'a>, CaptureFailure> {
        let Scope { run, source, changes, dest, .. } = scope;
        let entity = m.source_entity.as_str();
        let source_fields = source
            .entity_fields(entity)
            .await
            .map_err(|e| CaptureFailure { entity: Some(entity.into()), ..CaptureFailure::from_connector(e) })?;
        let schema = capture_schema(m, &source_fields)
            .map_err(|message| CaptureFailure { entity: Some(entity.into()), ..CaptureFailure::all(message) })?;
        let prior = earlier.iter().find(|e| e.entity == m.source_entity).map_or(0, |e| e.rows_written);
        let (position, mark) = match held.get(m.destination()).map(|t| parse_held(t)) {
            Some((p, mark)) => (Some(p), mark),
            None => (None, None),
        };
        let stats = EntityStats {
            entity: entity.into(),
            status: EntityStatus::Running,
            rows_written: prior,
            cursor_before: position.clone(),
            ..Default::default()
        };
        let mut e = Entity {
            m,
            index,
            order: Vec::new(),
            schema,
            source_fields,
            writer: None,
            position: position.clone().unwrap_or_default(),
            pending: Pending::None,
            stats,
            committed: prior,
            held: String::new(),
            stopped: None,
            copy: position.is_none(),
            stream_types: HashMap::new(),
            held_mark: mark.clone(),
            mark,
        };
        e.held = e.position.clone();
        if let Some(mark) = &e.mark {
            let message = format!(
                "the copy in chunks goes on after chunk {} of about {}, from the position it holds",
                mark.done, mark.total
            );
            self.log(run, LogLevel::Info, Some(entity), message).await;
        }
        let beyond = match (&position, end) {
            (Some(p), Some(end)) => changes.after(p, end).unwrap_or(true),
            _ => false,
        };
        if beyond {
            let (p, end) = (position.as_deref().unwrap_or_default(), end.unwrap_or_default());
            let message = format!(
                "the destination holds {p} for {entity}, past the end of the source's log ({end}): following it \
                 would skip every change up to it (was it edited by hand?); copy the table again with DELETE \
                 …/state/{entity}"
            );
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(Stop::Beyond(message));
        } else if let (Some(p), Some(r)) = (&position, retained)
            && changes.after(r, p)?
        {
            // The stream was moved past what this table holds (it left
            // the flow a while, or the slot was advanced by hand).
            let message = format!(
                "the change stream moved on to {r} while this table holds {p}: the changes between are lost; \
                 copy it again with DELETE …/state/{entity}"
            );
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(Stop::Lost(message));
        } else if let Some(retyped) = match position {
            Some(_) => Some(self.retyped_columns(dest, &e.schema).await).filter(|r| !r.is_empty()),
            None => None,
        } {
            let message = retyped_message(&retyped, entity);
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(Stop::Failed(message));
        } else if position.is_some() && self.blocked_by_policy(run, m, dest, &e.schema).await.unwrap_or(false) {
            let message = "new source columns blocked by schema_policy block_on_new_column".to_string();
            e.stopped = Some(Stop::Drift(message));
        }
        Ok(e)
    }

    /// Starts the copies of the tables that hold no position yet. A first
    /// copy in a new stream's snapshot that can load in bulk does so now;
    /// every other table whose key allows it is copied in chunks while the
    /// stream goes on (from the new stream's start, or from the source's
    /// end now), and the rest whole now, in the new stream's snapshot or
    /// (the stream ran already) in a snapshot of their own, from whose
    /// position the stream then goes on for them.
    async fn copy_new_tables(
        &self,
        scope: Scope<'_>,
        stream: &str,
        start: crate::connect::changes::StreamStart,
        entities: &mut [Entity<'_>],
    ) -> Result<(), CaptureFailure> {
        let changes = scope.changes;
        let fresh = start.snapshot.is_some();
        let mut now: Option<String> = None;
        for e in entities.iter_mut().filter(|e| e.copy) {
            // A change log is copied whole, in one snapshot (the new
            // stream's, or one of its own), never in chunks: each chunk,
            // read later, would hold as inserts what the changes it logs
            // since the log's start did too. A mirror in a new stream loads
            // in bulk in one go, unless an earlier attempt of the run was
            // lost on the way (a kill mid-copy): then in chunks, each
            // committed, so that another kill does not begin it all again.
            let bulk = bulk_copies(e.m, scope.dest.as_ref()) && scope.run.attempt == 1;
            if e.m.sync_mode == SyncMode::CdcAppend || (fresh && bulk) || e.chunk_key().is_none() {
                continue;
            }
            let from = match (fresh, &now) {
                (true, _) => start.position.clone(),
                (false, Some(p)) => p.clone(),
                (false, None) => now.insert(changes.end_position().await?).clone(),
            };
            let message = format!(
                "copying the table in chunks of {CHUNK_ROWS} rows by its key while its changes stream from {from}"
            );
            self.log(scope.run, LogLevel::Info, Some(&e.m.source_entity), message).await;
            e.position = from.clone();
            e.held = from;
            e.mark = Some(CopyMark::default());
            e.held_mark = e.mark.clone();
            e.copy = false;
        }
        if fresh {
            self.mark_first_logs(scope, &start.position, entities).await?;
        } else {
            self.stop_logs_cut_from_their_start(scope, entities).await?;
        }
        if entities.iter().any(|e| e.copy) {
            let snap = match start.snapshot {
                Some(_) => start,
                None => {
                    drop(start);
                    changes.fresh_snapshot(stream).await?
                }
            };
            // Change logs first: once every log of a new stream holds its
            // copy, a kill before a mirror commits leaves a stream the
            // mirrors can still join (in chunks, from the source's end then),
            // and one before any commits begins afresh; a log has no such
            // second chance (its history starts at the stream's start).
            let mut order: Vec<usize> = (0..entities.len()).filter(|i| entities[*i].copy).collect();
            order.sort_by_key(|i| entities[*i].m.sync_mode != SyncMode::CdcAppend);
            for i in order {
                let e = &mut entities[i];
                e.position = snap.position.clone();
                self.copy_first(scope, stream, e, snap.snapshot.as_deref()).await?;
                e.held = e.position.clone();
            }
        } else {
            drop(start);
        }
        Ok(())
    }

    /// Before a new stream's first copies: each change log to copy is
    /// marked, in the flow's stored state, as beginning at the stream's
    /// start (`position`), until its copy commits. An attempt that finds a
    /// log so marked without a position while the stream went on (a kill
    /// after another log of the flow committed, before this one did) knows
    /// that its history from the stream's start can no longer be had.
    async fn mark_first_logs(
        &self,
        scope: Scope<'_>,
        position: &str,
        entities: &mut [Entity<'_>],
    ) -> Result<(), CaptureFailure> {
        let mark = CopyMark { first: true, total: 1, ..CopyMark::default() };
        let logs: Vec<String> = entities
            .iter()
            .filter(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend)
            .map(|e| e.m.source_entity.clone())
            .collect();
        for entity in logs {
            self.show_position(scope.run, scope.flow, &entity, &held_text(position, Some(&mark))).await?;
        }
        Ok(())
    }

    /// In a stream that goes on, a change log without a position whose
    /// first copy was to begin at the stream's start (see
    /// [`Self::mark_first_logs`]) stops with `position_lost`: that snapshot
    /// is gone, and a copy now would fold the changes since into inserts.
    /// Any other log without a position (one added to the flow, or copied
    /// again) is copied now, its history beginning at that copy.
    async fn stop_logs_cut_from_their_start(
        &self,
        scope: Scope<'_>,
        entities: &mut [Entity<'_>],
    ) -> Result<(), CaptureFailure> {
        if !entities.iter().any(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend) {
            return Ok(());
        }
        let stored = self.cursors.list(scope.flow.id).await?;
        for e in entities.iter_mut().filter(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend) {
            let entity = e.m.source_entity.clone();
            let marked = stored
                .iter()
                .filter(|c| c.entity == entity && c.cursor_field.as_deref() == Some(crate::sync::mode::POSITION_FIELD))
                .filter_map(|c| c.cursor_value.as_deref())
                .map(parse_held)
                .find(|(_, mark)| mark.as_ref().is_some_and(|m| m.first));
            let Some((start, _)) = marked else { continue };
            let message = format!(
                "this change log's first copy, at the stream's start ({start}), did not commit before the run \
                 was stopped, while another table of the flow did: its history from the stream's start is lost \
                 (that snapshot is gone); copy it again with DELETE …/state/{entity}, its history then begins at \
                 that copy"
            );
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.copy = false;
            e.stopped = Some(Stop::Lost(message));
        }
        Ok(())
    }

    /// Copies chunks of a table being copied in chunks into its open
    /// writer, one after the other for up to [`CHUNK_PASS`], before the
    /// log is replayed over them from the position it holds (each chunk
    /// read in a snapshot taken now, after that position). Each chunk
    /// commits with that position and the copy's mark, so that a kill loses
    /// at most the chunk being written. A table whose key no longer allows
    /// it stops.
    async fn copy_chunks(&self, scope: Scope<'_>, e: &mut Entity<'_>) -> Result<(), CaptureFailure> {
        let started = std::time::Instant::now();
        while e.stopped.is_none() {
            let Some(mark) = e.mark.clone() else { return Ok(()) };
            let entity = e.m.source_entity.clone();
            let key = e.chunk_key();
            let after = key.as_ref().map(|k| mark.after_values(k));
            let (key, after) = match (key, after) {
                (Some(key), Some(Ok(after))) => (key, after),
                (_, Some(Err(why))) => {
                    let message =
                        format!("{why}: the copy cannot go on; copy the table again with DELETE …/state/{entity}");
                    self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
                    e.stop(Stop::Failed(message)).await;
                    return Ok(());
                }
                _ => {
                    let message = format!(
                        "the table's key no longer allows a copy in chunks (a transform or a key type of an order \
                         of its own): copy it again with DELETE …/state/{entity}"
                    );
                    self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
                    e.stop(Stop::Failed(message)).await;
                    return Ok(());
                }
            };
            let chunk = scope.changes.read_chunk(&entity, &key, after.as_deref(), CHUNK_ROWS).await;
            e.apply_chunk(chunk.map_err(|x| e.failed(x))?, &key, after).await?;
            self.commit_chunk(scope, e).await?;
            if started.elapsed() >= CHUNK_PASS {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Commits the chunk just written, with the position the table holds
    /// (the log after it is not applied yet) and the copy's new mark; then
    /// a halt if the run was canceled or the process is stopping.
    async fn commit_chunk(&self, scope: Scope<'_>, e: &mut Entity<'_>) -> Result<(), CaptureFailure> {
        let held = e.held_text();
        let Some(writer) = e.writer.as_mut() else { return Ok(()) };
        writer.hold_position(&scope.flow.stream_name(), &held).await.map_err(|x| failure_of(&e.m.source_entity, x))?;
        self.hold(scope.run).await.map_err(|_| CaptureFailure::lost())?;
        let w = writer.checkpoint().await.map_err(|x| failure_of(&e.m.source_entity, x))?;
        e.stats.rows_written = e.committed + w.rows_written;
        e.stats.bytes = w.bytes;
        if e.held_mark.is_some() && e.mark.is_none() {
            let message = "the copy in chunks is done: the table now streams its changes alone";
            self.log(scope.run, LogLevel::Info, Some(&e.m.source_entity), message.into()).await;
        }
        e.held_mark = e.mark.clone();
        self.show_position(scope.run, scope.flow, &e.m.source_entity, &held).await?;
        // (The run's progress is stored with the whole pass's.)
        self.progress_or_halt(scope.run, None).await
    }

    /// Applies the stream to the entities: once, to the source's end at
    /// the start (a scheduled run), or on and on (a continuous one).
    async fn follow_stream(
        &self,
        scope: Scope<'_>,
        stream: &str,
        entities: &mut [Entity<'_>],
    ) -> Result<(), CaptureFailure> {
        let Scope { run, flow, changes, dest, budget, .. } = scope;
        // As many tables at once as the destination takes writers (SQLite:
        // one); the stream is read again for each group (reading leaves
        // it where it is).
        // A scheduled run reads once, to the source's end at its start; a
        // continuous one (`config.continuous`) goes on reading until it is
        // canceled, its process stops, or its flow is paused or changed.
        loop {
            let caught_up = self.clock.now();
            let until = changes.end_position().await?;
            let mut applied = 0;
            for group in entities.chunks_mut(dest.concurrent_writers().max(1)) {
                applied += self.stream_changes(scope, stream, group, &until).await?;
            }
            // The source may forget what every table holds.
            let min = entities.iter().map(|e| e.position.clone()).reduce(|a, b| match changes.after(&a, &b) {
                Ok(true) => b,
                _ => a,
            });
            if let Some(min) = min {
                changes.confirm(stream, &min).await?;
            }
            self.watch_stream(flow, stream, changes, caught_up, budget).await;
            // A run goes on while a table is being copied in chunks, then
            // ends (a continuous one goes on anyway).
            let copying = entities.iter().any(|e| e.mark.is_some() && e.stopped.is_none());
            if !flow.config.continuous && !copying {
                return Ok(());
            }
            let progress = (applied > 0 || copying).then(|| entities.iter().map(|e| e.stats.clone()).collect());
            self.progress_or_halt(run, progress).await?;
            match self.flows.get(flow.org_id, flow.id).await? {
                Some(f) if f.status == crate::sync::flow::FlowStatus::Active && f.updated_at == flow.updated_at => {}
                _ if !flow.config.continuous => {}
                _ => {
                    let message = "the flow was paused, changed or deleted: this run ends (a changed flow's next run \
                                   starts at once)";
                    self.log(run, LogLevel::Info, None, message.into()).await;
                    return Ok(());
                }
            }
            if entities.iter().all(|e| e.stopped.is_some()) {
                return Ok(());
            }
            // Nothing new yet: wait (up to a second) for the source to write.
            if !copying {
                changes.wait_past(&until, CONTINUOUS_IDLE).await?;
            }
        }
    }

    /// After a run's read: the flow's stream in the metrics (the log its
    /// source keeps for it, and when its destination last caught up), and
    /// a `cdc.retained_over_budget` event, at most one a day per flow,
    /// while the source keeps more than `budget` bytes (the source
    /// connection's [`retained_budget`]).
    async fn watch_stream(
        &self,
        flow: &Flow,
        stream: &str,
        changes: &Arc<dyn ChangeSource>,
        caught_up: OffsetDateTime,
        budget: u64,
    ) {
        let retained = match changes.retained_bytes(stream).await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(flow = %flow.id, error = %e, "reading how much log the source keeps failed");
                return;
            }
        };
        self.monitoring.metrics().cdc_stream(&flow.id.to_string(), retained, caught_up);
        if retained <= budget {
            return;
        }
        let event = crate::monitoring::activity::EventType::CdcRetainedOverBudget;
        let since = self.clock.now() - time::Duration::days(1);
        let told = match self.monitoring.recent(flow.org_id, since, 1000).await {
            Ok(events) => events.iter().any(|e| e.event_type == event && e.data["flow_id"] == json!(flow.id)),
            Err(_) => false,
        };
        if told {
            return;
        }
        let recorded = self
            .monitoring
            .record(&crate::monitoring::activity::ActivityEvent {
                id: uuid::Uuid::now_v7(),
                org_id: flow.org_id,
                event_type: event,
                severity: "warning".into(),
                message: format!(
                    "flow '{}' makes its source keep {retained} bytes of log, over the {budget} of the source \
                     connection's cdc_max_retained: run it more often, or remove the table that holds it back",
                    flow.name
                ),
                data: json!({"flow_id": flow.id, "flow_name": flow.name, "retained_bytes": retained,
                    "budget_bytes": budget, "connection_id": flow.source_connection_id}),
                created_at: self.clock.now(),
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(flow = %flow.id, error = %e, "recording cdc.retained_over_budget failed");
        }
    }

    /// An entity's first copy, in the stream's snapshot when there is one,
    /// committed with the stream's position.
    async fn copy_first(
        &self,
        scope: Scope<'_>,
        stream: &str,
        e: &mut Entity<'_>,
        snapshot: Option<&str>,
    ) -> Result<(), CaptureFailure> {
        let Scope { run, flow, source, dest, .. } = scope;
        let entity = e.m.source_entity.clone();
        let how = match snapshot {
            Some(_) => format!("copying the table in a snapshot at {}; its changes follow from there", e.position),
            None => "copying the table as it is now; the stream is replayed over it from its position".into(),
        };
        self.log(run, LogLevel::Info, Some(&entity), how).await;
        if let Some(snapshot) = snapshot
            && self.copy_in_bulk(scope, stream, e, snapshot).await?
        {
            return Ok(());
        }
        let mut writer = dest
            .open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&super::queue::attempt_of(run)))
            .await
            .map_err(|x| e.failed(x))?;
        // A mirror ends up with exactly the source's rows: what it held
        // before (a copy again, a table that left the flow a while) goes,
        // in the copy's transaction, or is marked deleted. A change log
        // keeps its rows and gains the copy's as inserts.
        if e.m.sync_mode == SyncMode::CdcDeduped {
            let soft = (e.m.delete_mode == Some(DeleteMode::Soft)).then_some(DELETED_AT);
            if let Err(x) = writer.clear(&KeyRange::all(), soft).await {
                writer.abort().await;
                return Err(e.failed(x));
            }
        }
        let mut reader = source
            .read(ReadRequest {
                entity: entity.clone(),
                cursor: None,
                limit: None,
                batch_size: BATCH_ROWS,
                ranges: 1,
                snapshot: snapshot.map(str::to_string),
            })
            .await
            .map_err(|x| e.failed(x))?;
        e.order = order_of(&reader.fields(), &e.source_fields);
        let begin = (e.position.clone(), None);
        loop {
            let batch = match reader.next_batch().await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(x) => {
                    writer.abort().await;
                    return Err(e.failed(x));
                }
            };
            e.stats.rows_read += batch.len() as u64;
            let rows = e.copied_rows(&e.order, batch.rows, &begin);
            if let Err(x) = writer.write(&RecordBatch { fields: Arc::new(e.schema.fields.clone()), rows }).await {
                writer.abort().await;
                return Err(e.failed(x));
            }
        }
        let w = self.commit_copy(run, stream, &e.m.source_entity, &e.position, writer).await?;
        e.committed += w.rows_written;
        e.stats.rows_written = e.committed;
        e.stats.bytes += w.bytes;
        self.show_position(run, flow, &e.m.source_entity, &e.position).await
    }

    /// Commits a copy's writer with the position it reached, unless the run
    /// was taken over.
    async fn commit_copy(
        &self,
        run: &Run,
        stream: &str,
        entity: &str,
        position: &str,
        mut writer: Box<dyn EntityWriter>,
    ) -> Result<crate::connect::connector::WriteStats, CaptureFailure> {
        if let Err(x) = writer.hold_position(stream, position).await {
            writer.abort().await;
            return Err(failure_of(entity, x));
        }
        self.hold(run).await.map_err(|_| CaptureFailure::lost())?;
        writer.finish().await.map_err(|x| failure_of(entity, x))
    }

    /// A mirror's copy as a full refresh does it, where both sides can: the
    /// source's bulk stream (read in the snapshot) into a fresh table,
    /// swapped in with the position in one transaction (which also leaves
    /// exactly the source's rows). Not for a change log (its columns are
    /// not the table's), soft deletes (the rows marked deleted stay) or a
    /// transform. Answers whether it copied.
    async fn copy_in_bulk(
        &self,
        scope: Scope<'_>,
        stream: &str,
        e: &mut Entity<'_>,
        snapshot: &str,
    ) -> Result<bool, CaptureFailure> {
        let Scope { run, flow, source, dest, .. } = scope;
        if !bulk_copies(e.m, dest.as_ref()) {
            return Ok(false);
        }
        let entity = e.m.source_entity.clone();
        let attempt = super::queue::attempt_of(run);
        let mut writer =
            dest.open_for(&e.schema, WriteMode::Overwrite, Some(&attempt)).await.map_err(|x| e.failed(x))?;
        let Some(format) = writer.bulk_format() else {
            writer.abort().await;
            return Ok(false);
        };
        let mut bulk = match source.bulk_out_in_snapshot(&entity, format, &e.source_fields, snapshot).await {
            Ok(Some(b)) => b,
            Ok(None) => {
                writer.abort().await;
                return Ok(false);
            }
            Err(x) => {
                writer.abort().await;
                return Err(e.failed(x));
            }
        };
        self.log(run, LogLevel::Info, Some(&entity), format!("bulk copy ({format}) into a fresh table")).await;
        let loaded = match writer.write_bulk(&mut *bulk, None).await {
            Ok(n) => n,
            Err(x) => {
                writer.abort().await;
                return Err(e.failed(x));
            }
        };
        let w = self.commit_copy(run, stream, &e.m.source_entity, &e.position, writer).await?;
        e.stats.rows_read += loaded;
        e.committed += loaded;
        e.stats.rows_written = e.committed;
        e.stats.bytes += w.bytes;
        self.show_position(run, flow, &e.m.source_entity, &e.position).await?;
        Ok(true)
    }

    /// The stream describes `e`'s table (`s`): before its first change, and
    /// after its columns changed. A column the stream has and the
    /// destination's fields lack is new at the source: with `allow_all` the
    /// entity commits what it holds and reopens on the wider table (the
    /// destination gains the column); with `block_on_new_column` it stops
    /// as drift. One the source's catalog no longer has was dropped since:
    /// the entity stops. Either stop leaves it at its committed position,
    /// so that it resumes there once the flow is updated.
    async fn follow_columns(
        &self,
        scope: Scope<'_>,
        stream: &str,
        e: &mut Entity<'_>,
        s: &EntitySchema,
    ) -> Result<(), CaptureFailure> {
        let entity = e.m.source_entity.clone();
        // A column whose type changed since the stream last described the
        // table: its values no longer fit the destination's column.
        let retyped: Vec<String> = s
            .fields
            .iter()
            .filter_map(|f| {
                let before = e.stream_types.get(&f.name)?;
                (*before != f.field_type)
                    .then(|| format!("{} ({} → {})", f.name, before.as_str(), f.field_type.as_str()))
            })
            .collect();
        e.stream_types = s.fields.iter().map(|f| (f.name.clone(), f.field_type)).collect();
        if !retyped.is_empty() {
            let message = retyped_message(&retyped, &entity);
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.stop(Stop::Failed(message)).await;
            return Ok(());
        }
        let new: Vec<String> = s
            .fields
            .iter()
            .filter(|f| e.source_fields.iter().all(|x| x.name != f.name))
            .map(|f| f.name.clone())
            .collect();
        if new.is_empty() {
            e.order = order_of(&s.fields, &e.source_fields);
            return Ok(());
        }
        let catalog = scope.source.entity_fields(&entity).await.map_err(|x| e.failed(x))?;
        let dropped: Vec<&str> =
            new.iter().filter(|n| catalog.iter().all(|f| f.name != **n)).map(String::as_str).collect();
        if !dropped.is_empty() {
            let message = columns_gone_message(&dropped, &s.fields, &catalog, &entity);
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.stop(Stop::Failed(message)).await;
            return Ok(());
        }
        if e.m.schema_policy == crate::sync::flow::SchemaPolicy::BlockOnNewColumn {
            let message = format!("new source columns {} blocked by schema_policy block_on_new_column", new.join(", "));
            self.log(scope.run, LogLevel::Warn, Some(&entity), message.clone()).await;
            e.stop(Stop::Drift(message)).await;
            return Ok(());
        }
        // Everything before this change is whole: committed at the
        // position reached, then the writer reopens on the wider table.
        e.flush().await?;
        if let Some(mut w) = e.writer.take() {
            w.hold_position(stream, &e.held_text()).await.map_err(|x| e.failed(x))?;
            self.hold(scope.run).await.map_err(|_| CaptureFailure::lost())?;
            let written = w.finish().await.map_err(|x| e.failed(x))?;
            e.committed += written.rows_written;
            e.stats.rows_written = e.committed;
            e.held = e.position.clone();
            e.held_mark = e.mark.clone();
        }
        e.source_fields = catalog;
        e.schema = capture_schema(e.m, &e.source_fields)
            .map_err(|message| CaptureFailure { entity: Some(entity.clone()), ..CaptureFailure::all(message) })?;
        let attempt = super::queue::attempt_of(scope.run);
        e.writer = Some(
            scope
                .dest
                .open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&attempt))
                .await
                .map_err(|x| e.failed(x))?,
        );
        e.order = order_of(&s.fields, &e.source_fields);
        let message = format!("new source columns {}: added to the destination", new.join(", "));
        self.log(scope.run, LogLevel::Info, Some(&entity), message).await;
        Ok(())
    }

    /// The stream from each entity's position to `until`; answers how many
    /// changes it applied.
    async fn stream_changes(
        &self,
        scope: Scope<'_>,
        stream: &str,
        entities: &mut [Entity<'_>],
        until: &str,
    ) -> Result<u64, CaptureFailure> {
        let Scope { run, flow, changes, dest, .. } = scope;
        // Per source table, the earliest position of its mappings; each
        // mapping then skips what it holds.
        let mut from: Vec<(String, String)> = Vec::new();
        for e in entities.iter().filter(|e| e.stopped.is_none()) {
            match from.iter_mut().find(|(t, _)| *t == e.m.source_entity) {
                Some((_, p)) => {
                    if changes.after(p, &e.position)? {
                        *p = e.position.clone();
                    }
                }
                None => from.push((e.m.source_entity.clone(), e.position.clone())),
            }
        }
        let mut reader = changes.changes(stream, &from, until).await?;
        if from.is_empty() {
            return Ok(0);
        }
        for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
            e.writer = Some(
                dest.open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&super::queue::attempt_of(run)))
                    .await
                    .map_err(|x| e.failed(x))?,
            );
            // The chunks of a copy go first: the changes after the
            // position held replay over them.
            self.copy_chunks(scope, e).await?;
        }
        let mut begin: (String, Option<OffsetDateTime>) = (String::new(), None);
        let (mut since_commit, mut applied) = (0u64, 0u64);
        let mut committed_at = std::time::Instant::now();
        loop {
            let events = reader.next(BATCH_ROWS).await?;
            if events.is_empty() {
                break;
            }
            for event in events {
                match event {
                    ChangeEvent::Schema(s) => {
                        for e in entities.iter_mut().filter(|e| e.m.source_entity == s.name && e.stopped.is_none()) {
                            self.follow_columns(scope, stream, e, &s).await?;
                        }
                    }
                    ChangeEvent::Begin { position, committed_at } => begin = (position, Some(committed_at)),
                    ChangeEvent::Halt { entity, reason } => {
                        for e in entities.iter_mut().filter(|e| e.m.source_entity == entity && e.stopped.is_none()) {
                            self.log(run, LogLevel::Error, Some(&entity), reason.clone()).await;
                            e.stop(Stop::Failed(reason.clone())).await;
                        }
                    }
                    ChangeEvent::Change(c) => {
                        for e in entities.iter_mut().filter(|e| e.m.source_entity == c.entity && e.stopped.is_none()) {
                            // A transaction that commits before the position
                            // this mapping holds is held already.
                            if !changes.holds(&e.position, &begin.0)? {
                                e.apply(&c, &begin).await?;
                                since_commit += 1;
                                applied += 1;
                            }
                        }
                    }
                    ChangeEvent::Commit { position, .. } => {
                        for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
                            if changes.after(&position, &e.position)? {
                                e.position = position.clone();
                            }
                        }
                        // Every CHECKPOINT_ROWS changes; a continuous run
                        // also every second while changes arrive.
                        let due =
                            flow.config.continuous && since_commit > 0 && committed_at.elapsed() >= CONTINUOUS_COMMIT;
                        if since_commit >= CHECKPOINT_ROWS || due {
                            self.commit_changes(run, flow, stream, entities, true).await?;
                            since_commit = 0;
                            committed_at = std::time::Instant::now();
                        }
                    }
                }
            }
        }
        // The read reached `until`: each entity holds every change before
        // it, even a table no transaction touched, so that the source may
        // forget its log up to there (an idle table does not keep it).
        for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
            if changes.after(until, &e.position)? {
                e.position = until.to_string();
            }
        }
        self.commit_changes(run, flow, stream, entities, false).await?;
        Ok(applied)
    }

    /// Commits every entity with the position it reached (then stores it as
    /// the entity's cursor, for `GET …/state`); `reopen` keeps the writers
    /// open for more.
    async fn commit_changes(
        &self,
        run: &Run,
        flow: &Flow,
        stream: &str,
        entities: &mut [Entity<'_>],
        reopen: bool,
    ) -> Result<(), CaptureFailure> {
        for e in entities.iter_mut() {
            e.flush().await?;
            let Some(mut writer) = e.writer.take() else { continue };
            if let Err(x) = writer.hold_position(stream, &e.held_text()).await {
                writer.abort().await;
                return Err(e.failed(x));
            }
            self.hold(run).await.map_err(|_| CaptureFailure::lost())?;
            let w = if reopen {
                let w = writer.checkpoint().await.map_err(|x| e.failed(x))?;
                e.writer = Some(writer);
                w
            } else {
                writer.finish().await.map_err(|x| e.failed(x))?
            };
            e.stats.rows_written = e.committed + w.rows_written;
            e.stats.bytes = w.bytes;
            if !reopen {
                e.committed = e.stats.rows_written;
            }
            e.held = e.position.clone();
            e.held_mark = e.mark.clone();
            e.stats.cursor_after = Some(e.position.clone());
            e.stats.checkpoint_at = Some(self.clock.now());
            self.show_position(run, flow, &e.m.source_entity, &e.held_text()).await?;
        }
        if reopen {
            let progress = entities.iter().map(|e| e.stats.clone()).collect();
            self.progress_or_halt(run, Some(progress)).await?;
        }
        Ok(())
    }

    /// Stores the position `e` committed as its cursor, for `GET …/state`
    /// (the destination holds it already: this is what shows).
    async fn show_position(&self, run: &Run, flow: &Flow, entity: &str, position: &str) -> Result<(), CaptureFailure> {
        let c = Cursor {
            entity: entity.to_string(),
            cursor_field: Some(crate::sync::mode::POSITION_FIELD.into()),
            cursor_value: Some(position.to_string()),
            updated_at: self.clock.now(),
        };
        if self.cursors.advance(flow.id, &c, run.fence()).await? { Ok(()) } else { Err(CaptureFailure::lost()) }
    }

    /// Between commits: the entities' progress stored (when given), so that
    /// readers see the run advance and a later attempt counts these rows;
    /// then a halt if the run was canceled or the process is stopping.
    async fn progress_or_halt(&self, run: &Run, progress: Option<Vec<EntityStats>>) -> Result<(), CaptureFailure> {
        if let Some(progress) = progress
            && !self.runs.progress(run.fence(), &progress).await?
        {
            return Err(CaptureFailure::lost());
        }
        if self.canceled(run).await {
            return Err(CaptureFailure::halted(Halt::Canceled));
        }
        if self.stopping() {
            return Err(CaptureFailure::halted(Halt::Stopped));
        }
        Ok(())
    }
}

/// Whether a mirror's first copy may load in bulk (see
/// `SyncService::copy_in_bulk`): not a change log (its columns are not the
/// table's), soft deletes (the rows marked deleted stay) or a transform.
fn bulk_copies(m: &Mapping, dest: &dyn Destination) -> bool {
    m.sync_mode == SyncMode::CdcDeduped
        && m.delete_mode != Some(DeleteMode::Soft)
        && m.transform.is_empty()
        && dest.loads_in_bulk()
}

/// Why a table whose source columns changed type stops (`retyped`:
/// `column (old → new)`).
fn retyped_message(retyped: &[String], entity: &str) -> String {
    format!(
        "source columns changed type: {}; this table stops at its position: change the destination's columns to \
         match (it then resumes there), or copy the table again with DELETE …/state/{entity}",
        retyped.join(", ")
    )
}

/// Why a table stops when the stream names columns (`gone`) that the
/// source's catalog no longer has: renamed, where the stream's column and
/// the catalog's at the same place have the same type and the catalog's is
/// not in the stream (`stream`, `catalog`: the fields in their order);
/// dropped otherwise.
fn columns_gone_message(gone: &[&str], stream: &[Field], catalog: &[Field], entity: &str) -> String {
    let mut renamed = Vec::new();
    let mut dropped = Vec::new();
    for name in gone {
        let at = stream.iter().position(|f| f.name == *name);
        let now = at.and_then(|i| Some((&stream[i], catalog.get(i)?)));
        match now {
            Some((was, now)) if was.field_type == now.field_type && stream.iter().all(|f| f.name != now.name) => {
                renamed.push(format!("{} → {}", was.name, now.name));
            }
            _ => dropped.push(*name),
        }
    }
    let mut what = Vec::new();
    if !renamed.is_empty() {
        what.push(format!("source columns were renamed ({}) while changes to them were unread", renamed.join(", ")));
    }
    if !dropped.is_empty() {
        what.push(format!("source columns {} were dropped while changes to them were unread", dropped.join(", ")));
    }
    format!(
        "{}: this table stops at its position; copy it again with DELETE …/state/{entity} to follow it (the \
         destination then takes the source's columns as they are now{})",
        what.join("; "),
        if renamed.is_empty() { "" } else { "; a rename transform step keeps a column's old name there" }
    )
}

/// A connector's failure as `entity`'s.
fn failure_of(entity: &str, e: crate::connect::connector::ConnectorError) -> CaptureFailure {
    CaptureFailure { entity: Some(entity.to_string()), ..CaptureFailure::from_connector(e) }
}

/// Where each of `stream`'s fields goes among `fields` (by name).
fn order_of(stream: &[Field], fields: &[Field]) -> Vec<Option<usize>> {
    stream.iter().map(|f| fields.iter().position(|x| x.name == f.name)).collect()
}
