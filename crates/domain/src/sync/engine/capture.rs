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

mod chunked;
mod commit;
mod first_copy;
mod mirror;
mod rows;
mod stream;

use super::chunks::{CHUNK_ROWS, CopyMark, chunkable};
use super::outcome::{EntityOutcome, Failure, failure_of};
use super::queue::attempt_of;
use super::{BATCH_ROWS, CHECKPOINT_ROWS, Engine};
use crate::connect::changes::{Change, ChangeEvent, ChangeOp, ChangeSource, Chunk, Position};
use crate::connect::connection::Connection;
use crate::connect::connector::{
    ConnectorError, ConnectorResult, Destination, EntitySchema, EntityWriter, Field, FieldType, KeyRange, ReadRequest,
    RecordBatch, Source, Value, WriteMode,
};
use crate::sync::flow::{Cursor, EntityStats, EntityStatus, Flow, LogLevel, Mapping, Run};
use crate::sync::mark::{held_text, parse_held};
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

/// Whether a failure is of the rows a destination table refused (a column
/// of another type, say), not of the run: the table stops alone. One of a
/// lost lease, a cancel, a server away (transient) or with a code of its
/// own still fails the run.
fn refused_rows(f: &Failure) -> bool {
    !f.transient && !f.lost && f.halt.is_none() && f.code.is_none()
}

impl Engine {
    /// Stops a table whose copy its destination refused (`at`: where),
    /// saying what to do; the stream goes on for the others.
    async fn stop_copy(&self, scope: Scope<'_>, e: &mut Entity<'_>, f: &Failure, at: &str) {
        let entity = e.m.source_entity.clone();
        let at = if at.is_empty() { String::new() } else { format!(" {at}") };
        let message = format!(
            "{}: the copy stops{at}; change the destination's columns to match the source's (or drop its \
             table), then copy it again with DELETE …/state/{entity}",
            f.message
        );
        self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
        e.stop(Stop::Failed(message)).await;
    }
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
    /// The position reached: what the destination holds, or will at the
    /// next commit. (Two positions, this and `held`, because a commit can
    /// fail: an entity that stops goes back to what it committed.)
    position: Position,
    /// Where each field of the stream's rows goes among `source_fields`.
    order: Vec<Option<usize>>,
    pending: Pending,
    stats: EntityStats,
    /// Rows this attempt committed before the writer now open.
    committed: u64,
    /// The position the destination holds now (committed).
    held: Position,
    /// The entity holds no position of its own (none yet, or none this
    /// source can read): `position` stands at the stream's start until a
    /// copy sets it, and the source is not held back for it.
    standing_in: bool,
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
        held_text(self.position.as_str(), self.mark.as_ref())
    }

    fn key_idx(&self) -> Vec<usize> {
        self.schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect()
    }

    fn failed(&self, e: crate::connect::connector::ConnectorError) -> Failure {
        failure_of(&self.m.source_entity, e)
    }
}

impl Engine {
    /// The CDC mappings of a run (`(index, mapping)`), together: answers
    /// each one's stats and how it ended, or one failure for all of them.
    pub(super) async fn capture(
        &self,
        scope: Scope<'_>,
        mappings: &[(usize, &Mapping)],
        earlier: &[EntityStats],
    ) -> Vec<(usize, EntityStats, Result<(), Failure>)> {
        let mut entities = Vec::new();
        let outcome = self.capture_all(scope, mappings, earlier, &mut entities).await;
        if outcome.is_err() {
            // The source keeps its log for the stream all the same.
            self.watch_stream(scope.flow, &scope.flow.stream_name(), scope.changes, None, scope.budget).await;
        }
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
                    Err(Failure { halt: Some(EntityOutcome::Drift), ..Failure::all(message) })
                }
                (Ok(()), Some(Stop::Failed(message))) => Err(Failure::all(message)),
                (Ok(()), Some(Stop::Lost(message))) => Err(Failure::position_lost(message)),
                (Ok(()), Some(Stop::Beyond(message))) => {
                    Err(Failure::coded(crate::shared::error::Code::PositionNotRetained, message))
                }
                (Err(f), _) => Err(Failure {
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
    ) -> Result<(), Failure> {
        let stream = scope.flow.stream_name();
        // A table gone from the source (dropped or renamed since the last
        // run) stops alone; the stream goes on for the others.
        let mut fields = Vec::with_capacity(mappings.len());
        for (_, m) in mappings {
            fields.push(scope.source.entity_fields(&m.source_entity).await);
        }
        let gone = |f: &ConnectorResult<Arc<Vec<Field>>>| matches!(f, Err(ConnectorError::EntityNotFound(_)));
        let mut names: Vec<String> =
            mappings.iter().zip(&fields).filter(|(_, f)| !gone(f)).map(|((_, m), _)| m.source_entity.clone()).collect();
        names.dedup();
        if names.is_empty() {
            let (Some(Err(e)), Some((_, m))) = (fields.into_iter().next(), mappings.first()) else {
                return Err(Failure::all("the flow has no table"));
            };
            return Err(failure_of(&m.source_entity, e));
        }
        let (held, retained) = self.reconcile_stream(scope, &stream, mappings).await?;
        let start = scope.changes.open_stream(&stream, &names).await?;
        // A position is never past the source's end (one edited by hand
        // would skip every change up to it).
        let end = match held.is_empty() {
            true => None,
            false => Some(scope.changes.end_position().await?),
        };
        let bounds = Bounds { start: &start.position, retained: retained.as_ref(), end: end.as_ref() };
        for ((index, m), fields) in mappings.iter().zip(fields) {
            entities.push(self.capture_entity(scope, (*index, m), fields, earlier, &held, bounds).await?);
        }
        self.copy_new_tables(scope, &stream, start, entities).await?;
        self.follow_stream(scope, &stream, entities).await
    }

    /// What the destination holds of the stream (its texts, by table), and
    /// from where the source still retains it; a stream nothing of which
    /// reached the destination is dropped (to begin afresh, from a new
    /// snapshot), and one the source lost while the destination holds
    /// positions in it is refused.
    async fn reconcile_stream(
        &self,
        scope: Scope<'_>,
        stream: &str,
        mappings: &[(usize, &Mapping)],
    ) -> Result<(HashMap<String, String>, Option<Position>), Failure> {
        let Scope { changes, dest, .. } = scope;
        // A row flow's marks (of the mappings before they captured) are not
        // positions in the stream.
        let held: HashMap<String, String> = dest
            .positions(stream)
            .await?
            .into_iter()
            .filter(|(_, text)| crate::sync::mark::RowsHeld::parse(text).is_none())
            .collect();
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
                return Err(Failure::position_lost(format!(
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
    /// position its destination holds (read once, as the source's; none:
    /// it is copied first), and whether it stops at once (the stream moved
    /// past what it holds, a column changed type, the schema policy blocks
    /// new columns).
    async fn capture_entity<'a>(
        &self,
        scope: Scope<'_>,
        (index, m): (usize, &'a Mapping),
        source_fields: ConnectorResult<Arc<Vec<Field>>>,
        earlier: &[EntityStats],
        held: &HashMap<String, String>,
        bounds: Bounds<'_>,
    ) -> Result<Entity<'a>, Failure> {
        let Scope { run, changes, dest, .. } = scope;
        let entity = m.source_entity.as_str();
        let (source_fields, gone) = match source_fields {
            Ok(f) => (f, None),
            Err(ConnectorError::EntityNotFound(_)) => {
                let message = format!(
                    "the source has no table {entity} any more (dropped, or renamed): this table stops at its \
                     position while the flow's others go on; once it is back, copy it again with DELETE \
                     …/state/{entity}, or remove it from the flow"
                );
                (Arc::new(Vec::new()), Some(message))
            }
            Err(e) => return Err(failure_of(entity, e)),
        };
        let schema = match &gone {
            Some(_) => EntitySchema { name: m.destination().to_string(), fields: Vec::new() },
            None => capture_schema(m, &source_fields).map_err(|message| Failure::all(message).of(entity))?,
        };
        let prior = earlier.iter().find(|e| e.entity == m.source_entity).map_or(0, |e| e.rows_written);
        let (text, mark) = match held.get(m.destination()).map(|t| parse_held(t)) {
            Some((p, mark)) => (Some(p), mark),
            None => (None, None),
        };
        let position = text.as_deref().map(|t| changes.position(t));
        let stats = EntityStats {
            entity: entity.into(),
            status: EntityStatus::Running,
            rows_written: prior,
            cursor_before: text.clone(),
            ..Default::default()
        };
        // A table to copy takes its position from its copy; until then it
        // stands at the stream's start.
        let at = match &position {
            Some(Ok(p)) => p.clone(),
            _ => bounds.start.clone(),
        };
        let mut e = Entity {
            m,
            index,
            order: Vec::new(),
            schema,
            source_fields,
            writer: None,
            held: at.clone(),
            position: at,
            standing_in: !matches!(position, Some(Ok(_))),
            pending: Pending::None,
            stats,
            committed: prior,
            stopped: None,
            copy: position.is_none(),
            stream_types: HashMap::new(),
            held_mark: mark.clone(),
            mark,
        };
        if let Some(message) = gone {
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.copy = false;
            e.stopped = Some(Stop::Failed(message));
            return Ok(e);
        }
        if let Some(mark) = &e.mark {
            let message = format!(
                "the copy in chunks goes on after chunk {} of about {}, from the position it holds",
                mark.done, mark.total
            );
            self.log(run, LogLevel::Info, Some(entity), message).await;
        }
        let stop = match (&text, &position) {
            (Some(text), Some(position)) => stop_at_start(entity, text, position.as_ref().ok(), bounds),
            _ => None,
        };
        if let Some(stop) = stop {
            let (Stop::Beyond(message) | Stop::Lost(message) | Stop::Drift(message) | Stop::Failed(message)) = &stop;
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(stop);
        } else if let Some(retyped) = match position {
            Some(_) => Some(self.retyped_columns(dest, &e.schema).await).filter(|r| !r.is_empty()),
            None => None,
        } {
            let message = retyped_message(&retyped, entity);
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(Stop::Failed(message));
        } else if let Some(renamed) = match (&position, dest.describe(m.destination()).await) {
            // Renamed since the last run (a binlog matched by position
            // names the changes after the catalog, so the stream would not
            // tell).
            (Some(_), Ok(Some(there))) => Some(renamed_columns(&there.fields, &e.schema.fields)),
            _ => None,
        }
        .filter(|r| !r.is_empty())
        {
            let message = renamed_message(&renamed, entity);
            self.log(run, LogLevel::Error, Some(entity), message.clone()).await;
            e.stopped = Some(Stop::Failed(message));
        } else if position.is_some() && self.blocked_by_policy(run, m, dest, &e.schema).await.unwrap_or(false) {
            let message = "new source columns blocked by schema_policy block_on_new_column".to_string();
            e.stopped = Some(Stop::Drift(message));
        }
        Ok(e)
    }
}

/// Why an entity that holds `text` (`held`, as the source reads it; none:
/// it reads none) stops as the run begins: a position the source cannot
/// read, one past its end, or one the stream no longer retains.
fn stop_at_start(entity: &str, text: &str, held: Option<&Position>, bounds: Bounds<'_>) -> Option<Stop> {
    let Some(held) = held else {
        return Some(Stop::Beyond(format!(
            "the destination holds '{text}' for {entity}, which is not a position of this source (was it edited by \
             hand, or the connection pointed at another server?); copy the table again with DELETE …/state/{entity}"
        )));
    };
    if let Some(end) = bounds.end.filter(|end| held.after(end)) {
        return Some(Stop::Beyond(format!(
            "the destination holds {text} for {entity}, past the end of the source's log ({end}): following it \
             would skip every change up to it (was it edited by hand?); copy the table again with DELETE \
             …/state/{entity}"
        )));
    }
    // The stream was moved past what this table holds (it left the flow a
    // while, or the slot was advanced by hand).
    let r = bounds.retained.filter(|r| r.after(held))?;
    Some(Stop::Lost(format!(
        "the change stream moved on to {r} while this table holds {text}: the changes between are lost; copy it \
         again with DELETE …/state/{entity}"
    )))
}

/// Where the positions an entity holds must lie: the stream's start (what
/// a table to copy stands at until its copy), the earliest the source
/// retains, the source's end now.
#[derive(Clone, Copy)]
struct Bounds<'a> {
    start: &'a Position,
    retained: Option<&'a Position>,
    end: Option<&'a Position>,
}

/// The transaction a change belongs to: where it begins, and when it
/// committed (none for a copy's rows).
type Begin = (Position, Option<OffsetDateTime>);

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

/// Why a table stops whose source columns were renamed (`renamed`:
/// `old → new`) since the destination took them: followed, the new names
/// would start columns of their own beside the old ones.
fn renamed_message(renamed: &[String], entity: &str) -> String {
    format!(
        "source columns were renamed ({}): this table stops at its position; copy it again with DELETE \
         …/state/{entity} to follow them (the destination then takes the source's columns as they are now; a \
         rename transform step keeps a column's old name there)",
        renamed.join(", ")
    )
}

/// The columns of `was` (in their order) that `now` names otherwise, as
/// `old → new`: the two at the same place among the columns only one of
/// them has, of the same type. Sluice's own columns (`_sluice_…`) aside.
fn renamed_columns(was: &[Field], now: &[Field]) -> Vec<String> {
    let only = |a: &[Field], b: &[Field]| -> Vec<(String, FieldType)> {
        a.iter()
            .filter(|f| !f.name.starts_with("_sluice_") && b.iter().all(|x| x.name != f.name))
            .map(|f| (f.name.clone(), f.field_type))
            .collect()
    };
    let (old, new) = (only(was, now), only(now, was));
    old.iter().zip(&new).filter(|((_, a), (_, b))| a == b).map(|((a, _), (b, _))| format!("{a} → {b}")).collect()
}

/// Where each of `stream`'s fields goes among `fields` (by name).
fn order_of(stream: &[Field], fields: &[Field]) -> Vec<Option<usize>> {
    stream.iter().map(|f| fields.iter().position(|x| x.name == f.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(cols: &[(&str, FieldType)]) -> Vec<Field> {
        cols.iter().map(|(n, t)| Field::new(*n, *t)).collect()
    }

    #[test]
    fn a_column_in_the_place_of_one_gone_of_its_type_is_a_rename() {
        use FieldType::*;
        let was = fields(&[("id", Integer), ("note", String), ("n", Integer), ("_sluice_op", String)]);
        let renamed = fields(&[("id", Integer), ("title", String), ("n", Integer)]);
        assert_eq!(renamed_columns(&was, &renamed), ["note → title"]);
        // Another type in its place: dropped and added, not renamed.
        let retyped = fields(&[("id", Integer), ("flag", Boolean), ("n", Integer)]);
        assert!(renamed_columns(&was, &retyped).is_empty());
        // Only added, or only dropped: nothing renamed.
        let wider = fields(&[("id", Integer), ("note", String), ("n", Integer), ("extra", String)]);
        assert!(renamed_columns(&was, &wider).is_empty());
        assert!(renamed_columns(&was, &fields(&[("id", Integer), ("n", Integer)])).is_empty());
        // Two, paired in order.
        let both = fields(&[("id", Integer), ("title", String), ("count", Integer)]);
        assert_eq!(renamed_columns(&was, &both), ["note → title", "n → count"]);
    }
}
