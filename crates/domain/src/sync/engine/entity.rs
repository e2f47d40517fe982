//! One entity's sync in a run: planning its read (cursor, lookback,
//! horizon), the schema policy, and the paths its rows take.
//!
//! Records flow from the source in bounded batches (the source reads ahead
//! while a batch is written), through the mapping's transform and, for
//! `incremental_deduped`, de-duplication within the batch. Every
//! [`CHECKPOINT_ROWS`] rows the destination commits and only then is the
//! cursor advanced to the greatest value it has committed, so a crash
//! resumes from the last checkpoint: nothing is lost, and the re-read
//! overlap is absorbed by the upsert. Overwrite commits once, at the end,
//! swapping the new table in. A first load goes in bulk where both sides
//! can (binary COPY, a file stream), in key ranges read at once.

use super::outcome::{EntityOutcome, Failure};
use super::queue::attempt_of;
use super::run::{Progress, RunScope, RunSource};
use super::{BATCH_ROWS, CHECKPOINT_ROWS, Engine};
use crate::connect::connector::{
    CursorBound, Destination, EntitySchema, EntityWriter, ReadRequest, Value, WriteMode, WriteStats,
};
use crate::sync::flow::*;
use crate::sync::transform;
use crate::sync::{SyncMode, advance, capped, cursor_text, dedupe, parse_cursor, read_from};
use held::{ExactAppend, Marks, due};
use std::sync::Arc;
use std::time::Instant;

mod held;

/// Into how many key ranges, read at once, a full refresh of a large table
/// is split unless the service is told otherwise.
pub const DEFAULT_READ_RANGES: usize = 2;

/// How often a load without checkpoints (a bulk first load, a full
/// refresh in bulk) shows the bytes it has read so far, or after how many.
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
const REPORT_BYTES: u64 = 64 << 20;

/// A bulk stream that shows the bytes read so far in the run's progress
/// every [`REPORT_EVERY`] (or [`REPORT_BYTES`]), so that a long load that
/// commits once is seen working, not stalled. Only the bytes move: rows
/// written stay those committed, which a later attempt counts on.
struct Reporting<'a> {
    inner: &'a mut dyn crate::connect::connector::BulkStream,
    service: &'a Engine,
    step: &'a Step<'a>,
    stats: EntityStats,
    reported: (Instant, u64),
}

#[async_trait::async_trait]
impl crate::connect::connector::BulkStream for Reporting<'_> {
    async fn next_chunk(&mut self) -> crate::connect::connector::ConnectorResult<Option<Vec<u8>>> {
        let chunk = self.inner.next_chunk().await?;
        if let Some(c) = &chunk {
            self.stats.bytes += c.len() as u64;
            let (at, bytes) = self.reported;
            if at.elapsed() >= REPORT_EVERY || self.stats.bytes - bytes >= REPORT_BYTES {
                self.reported = (Instant::now(), self.stats.bytes);
                self.stats.duration_ms = self.step.started.elapsed().as_millis() as u64;
                let (held, all) = self.step.progress.set(self.step.index, &self.stats).await;
                // Shown only: the commit checks that this attempt still
                // holds the run.
                if let Err(e) = self.service.runs.progress(self.step.run.fence(), &all).await {
                    tracing::debug!(run = %self.step.run.id, error = %e, "bulk progress not stored");
                }
                drop(held);
            }
        }
        Ok(chunk)
    }

    fn records(&self) -> Option<u64> {
        self.inner.records()
    }

    fn last_cursor(&self) -> Option<Value> {
        self.inner.last_cursor()
    }
}

/// What one entity's sync works on, whatever path it takes.
struct Step<'a> {
    run: &'a Run,
    flow: &'a Flow,
    m: &'a Mapping,
    /// Rows earlier attempts committed; this attempt's writer counts its own.
    prior: u64,
    /// When this attempt began the entity.
    started: Instant,
    /// The run's entities' progress, which each checkpoint stores.
    progress: &'a Progress,
    /// The mapping's place in the flow.
    index: usize,
    /// The destination commits this entity's marks with its rows (see
    /// [`Destination::holds_marks`]).
    holds: bool,
}

/// Where an entity's read starts and how far its cursor may be stored.
struct Read {
    /// The cursor field's place among the source's fields (incremental).
    cursor_idx: Option<usize>,
    /// The greatest cursor read so far (the stored one to begin with).
    cursor: Option<Value>,
    /// The stored cursor the run began from: never stored behind it.
    floor: Option<Value>,
    bound: Option<CursorBound>,
    /// The start of the oldest transaction writing to the source when the
    /// read began: never stored past it.
    horizon: Option<time::OffsetDateTime>,
    /// A clear and resync is pending: this run replaces the destination's
    /// table with a full copy (no checkpoint: the copy replaces the table
    /// whole, or not at all), then stores the cursor it reached.
    clearing: bool,
}

impl Read {
    /// The cursor to store now.
    fn capped(&self) -> Option<Value> {
        capped(self.cursor.clone(), self.horizon, &self.floor)
    }
}

/// The destination's schema: the transformed fields, keyed as the mapping
/// says; appending adds copies of the same records, so an append holds no
/// unique key (the source's or the mapping's).
pub(super) fn destination_schema(
    m: &Mapping,
    source_fields: &[crate::connect::connector::Field],
) -> Result<EntitySchema, Failure> {
    let mut out_fields = transform::plan("transform", &m.transform, source_fields)
        .map_err(|e| e.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; "))?;
    let keys = m.key_fields();
    if m.sync_mode.write_mode() == crate::connect::connector::WriteMode::Append {
        for f in &mut out_fields {
            f.primary_key = false;
        }
    } else if !keys.is_empty() {
        for f in &mut out_fields {
            f.primary_key = keys.contains(&f.name.as_str());
            if f.primary_key {
                f.nullable = false;
            }
        }
    }
    Ok(EntitySchema { name: m.destination().to_string(), fields: out_fields })
}

impl Engine {
    /// Catalogues the source's schema of `entity` as its discovered asset,
    /// so that the catalog follows the schema every run saw (and
    /// validate-drift compares with the last run). Never fails the run.
    pub(super) async fn record_source_schema(
        &self,
        source: &crate::connect::connection::Connection,
        entity: &str,
        fields: &[crate::connect::connector::Field],
    ) {
        let schema = crate::connect::connector::EntitySchema { name: entity.to_string(), fields: fields.to_vec() };
        let name = format!("{}.{entity}", source.name);
        if let Err(e) = self.connect.record_schema(source, &name, &schema).await {
            tracing::warn!(connection = %source.id, entity, error = %e, "could not catalogue the source schema");
        }
    }

    pub(super) async fn sync_entity(
        &self,
        scope: &RunScope<'_>,
        index: usize,
        m: &Mapping,
        stats: &mut EntityStats,
    ) -> Result<EntityOutcome, Failure> {
        let RunScope { run, flow, source, dest, progress, .. } = *scope;
        let entity = m.source_entity.as_str();
        // What earlier attempts committed; this attempt's writer counts its own.
        let prior = stats.rows_written;
        // The source's fields first: the stored cursor is typed by them.
        let source_fields = source.io.entity_fields(entity).await?;
        self.record_source_schema(&source.connection, entity, &source_fields).await;
        let held = self.held_rows(flow, m, dest).await?;
        if let Some(h) = held.as_ref().filter(|h| h.done && h.run == run.id.to_string()) {
            return self.finished_before(run, flow, m, h, stats).await;
        }
        let marks = Marks { stored: self.cursors.get(flow.id, entity).await?, held };
        let mut read = self.plan_read(run, m, source, &source_fields, marks, stats).await?;
        let schema = destination_schema(m, &source_fields)?;
        if self.blocked_by_policy(run, m, dest, &schema).await? {
            return Ok(EntityOutcome::Drift);
        }
        let step = Step { run, flow, m, prior, started: Instant::now(), progress, index, holds: dest.holds_marks() };
        if !read.clearing && self.first_load(run, m, dest, &schema, &source_fields, stats).await? {
            // The target is not there yet: loaded like a full refresh (a
            // fresh table, keys built after), when both sides can; else,
            // or when that cannot begin, the checkpointed way below.
            match dest.open_for(&schema, WriteMode::Overwrite, Some(&attempt_of(run))).await {
                Ok(writer) => match self.bulk_first_load(&step, writer, source, &source_fields, read, stats).await? {
                    Ok(outcome) => return Ok(outcome),
                    Err(unloaded) => read = unloaded,
                },
                Err(e) => tracing::warn!(run = %run.id, entity, error = %e, "no fresh table for a first load"),
            }
        }
        // A clear of a table kept by key empties it in the copy's own
        // transaction (its indexes, grants and views stay; repeated keys
        // merge as ever); a table of appended rows is replaced by a fresh
        // one. Either commits once, at the end.
        let mode = match (read.clearing, m.sync_mode.write_mode()) {
            (true, WriteMode::Upsert) => WriteMode::Upsert,
            (true, _) => WriteMode::Overwrite,
            (false, mode) => mode,
        };
        let mut writer = dest.open_for(&schema, mode, Some(&attempt_of(run))).await?;
        if read.clearing
            && mode == WriteMode::Upsert
            && let Err(e) = writer.clear(&crate::connect::connector::KeyRange::all(), None).await
        {
            writer.abort().await;
            return Err(e.into());
        }
        // Same engine on both sides and nothing to transform: the source's
        // bulk stream goes straight in, undecoded (a fresh table, or a
        // stage merged at each checkpoint).
        if m.transform.is_empty()
            && !read.clearing
            && let Some(format) = writer.bulk_format()
        {
            let cursor = match m.sync_mode {
                SyncMode::FullRefreshOverwrite => Some(None),
                SyncMode::IncrementalDeduped => Some(read.bound.as_ref()),
                _ => None,
            };
            if let Some(cursor) = cursor
                && let Some(stream) =
                    source.io.bulk_out(entity, format, &source_fields, cursor, self.read_ranges).await?
            {
                self.log(run, LogLevel::Info, Some(entity), format!("bulk copy ({format})")).await;
                return if m.sync_mode == SyncMode::FullRefreshOverwrite {
                    self.bulk_overwrite(&step, writer, stream, stats).await
                } else {
                    self.bulk_upsert(&step, writer, stream, read, stats).await
                };
            }
        }
        let reader = source
            .io
            .read(ReadRequest {
                entity: entity.into(),
                cursor: read.bound.clone(),
                limit: None,
                batch_size: BATCH_ROWS,
                // A full refresh commits once, at the end: its records
                // may come in any order, so a large table is read in key
                // ranges at once.
                ranges: if m.sync_mode.incremental() { 1 } else { self.read_ranges },
                snapshot: None,
            })
            .await?;
        self.copy_rows(&step, &schema, writer, reader, read, stats).await
    }

    /// Where the read starts and how far the cursor may go: the stored
    /// cursor (typed by the source's field), read a lookback behind it
    /// (rows committed late with older values); the cursor itself only
    /// moves forward, and never past the oldest transaction still writing
    /// to the source when the read began. Logs where it reads from.
    async fn plan_read(
        &self,
        run: &Run,
        m: &Mapping,
        source: &RunSource,
        source_fields: &[crate::connect::connector::Field],
        marks: Marks,
        stats: &mut EntityStats,
    ) -> Result<Read, Failure> {
        let entity = m.source_entity.as_str();
        let cursor_idx = if m.sync_mode.incremental() {
            let c = m.cursor_field.as_deref().ok_or("the mapping names no cursor_field")?;
            Some(
                source_fields
                    .iter()
                    .position(|f| f.name == c)
                    .ok_or_else(|| format!("the source has no cursor field '{c}'"))?,
            )
        } else {
            None
        };
        let Marks { stored, held } = marks;
        let clearing = stored.as_ref().is_some_and(|c| c.mark.clearing());
        stats.cursor_before = stored.as_ref().and_then(|c| c.mark.value()).map(str::to_string);
        // The destination's commit is what it holds: a worker lost between
        // it and the cursor's store leaves the store behind.
        if let Some(h) = held.as_ref().filter(|h| !clearing && cursor_idx.is_some() && h.field == m.cursor_field)
            && h.cursor != stats.cursor_before
        {
            let said = format!(
                "resuming from the cursor the destination committed ({}), not the one stored ({}): a worker was \
                 lost between the two",
                h.cursor.as_deref().unwrap_or("none"),
                stats.cursor_before.as_deref().unwrap_or("none")
            );
            self.log(run, LogLevel::Info, Some(entity), said).await;
            stats.cursor_before = h.cursor.clone();
        }
        if clearing {
            let what = "clear and resync: the destination's table is replaced by a full copy of the source when this \
                        copy commits (nothing is removed before)";
            self.log(run, LogLevel::Info, Some(entity), what.to_string()).await;
        }
        let cursor: Option<Value> = match (cursor_idx, &stats.cursor_before) {
            (Some(i), Some(text)) => {
                Some(parse_cursor(text, source_fields[i].field_type).map_err(|e| format!("stored cursor: {e:?}"))?)
            }
            _ => None,
        };
        // Only where re-reading is absorbed (the upsert): an append would
        // append what it reads again.
        let horizon = match cursor_idx.map(|i| &source_fields[i]) {
            Some(f)
                if f.field_type == crate::connect::connector::FieldType::Timestamp
                    && m.sync_mode == SyncMode::IncrementalDeduped =>
            {
                source.io.write_horizon(f).await.unwrap_or_else(|e| {
                    tracing::warn!(run = %run.id, error = %e, "cannot see the source's open transactions");
                    None
                })
            }
            _ => None,
        };
        // Where the source holds the cursor at its oldest writing
        // transaction, late commits are read anyway: no lookback by default.
        let lookback = m.lookback(horizon.is_some());
        let bound = cursor_idx
            .map(|i| CursorBound { field: source_fields[i].name.clone(), from: read_from(&cursor, lookback) });
        if let (Some(i), Some(_)) = (cursor_idx, &stats.cursor_before) {
            let field = &source_fields[i].name;
            use crate::connect::connector::FieldType;
            let in_time = matches!(source_fields[i].field_type, FieldType::Timestamp | FieldType::Date);
            let protection = match (&horizon, m.cursor_lookback.is_some(), lookback.is_positive() && in_time) {
                (Some(_), false, _) => format!(
                    "rows committed late: {field} is stored no later than the oldest transaction writing to the source, \
                     so no lookback is needed"
                ),
                (Some(_), true, _) => format!(
                    "rows committed late: {field} is stored no later than the oldest transaction writing to the source, \
                     and the mapping's cursor_lookback of {lookback} reads behind it too"
                ),
                (None, _, true) => format!(
                    "rows committed late: the source cannot show its open transactions, so a lookback of {lookback} \
                     reads behind {field}"
                ),
                (None, _, false) => format!(
                    "rows committed late: no protection (the source cannot show its open transactions and there is \
                     no lookback); a row committed after this read with an older {field} is missed"
                ),
            };
            self.log(run, LogLevel::Info, Some(entity), protection).await;
        }
        if let Some(b) = &bound {
            let from = match (&stats.cursor_before, &b.from) {
                (None, _) => format!("reading everything (no cursor on {})", b.field),
                (Some(v), Some(f)) if cursor.as_ref() != Some(f) => {
                    format!(
                        "reading where {} >= {} (the cursor {v} less a lookback of {lookback})",
                        b.field,
                        cursor_text(f).unwrap_or_default()
                    )
                }
                (Some(v), _) => format!("reading where {} >= {v}", b.field),
            };
            self.log(run, LogLevel::Info, Some(entity), from).await;
        }
        Ok(Read { cursor_idx, floor: cursor.clone(), cursor, bound, horizon, clearing })
    }

    /// Whether `schema_policy: block_on_new_column` stops the entity: the
    /// destination exists and the source brings columns it lacks, or a
    /// column whose type changed in the same engine (a widening, which
    /// would otherwise evolve the destination column).
    pub(super) async fn blocked_by_policy(
        &self,
        run: &Run,
        m: &Mapping,
        dest: &Arc<dyn Destination>,
        schema: &EntitySchema,
    ) -> Result<bool, Failure> {
        if m.schema_policy != SchemaPolicy::BlockOnNewColumn {
            return Ok(false);
        }
        let Some(existing) = dest.describe(&schema.name).await? else { return Ok(false) };
        let new: Vec<&str> =
            schema.fields.iter().filter(|f| existing.field(&f.name).is_none()).map(|f| f.name.as_str()).collect();
        let retyped = retyped(schema, &existing);
        if new.is_empty() && retyped.is_empty() {
            return Ok(false);
        }
        let mut what = Vec::new();
        if !new.is_empty() {
            what.push(format!("new source columns {}", new.join(", ")));
        }
        if !retyped.is_empty() {
            what.push(format!("source columns whose type changed {}", retyped.join(", ")));
        }
        let message = format!("{} blocked by schema_policy block_on_new_column", what.join("; "));
        self.log(run, LogLevel::Warn, Some(&m.source_entity), message).await;
        Ok(true)
    }

    /// The source columns of `schema` whose type is no longer the one the
    /// destination's table has (`column (old → new)`): told only where both
    /// sides are one engine, whose native types compare exactly.
    pub(super) async fn retyped_columns(&self, dest: &Arc<dyn Destination>, schema: &EntitySchema) -> Vec<String> {
        match dest.describe(&schema.name).await {
            Ok(Some(existing)) => retyped(schema, &existing),
            _ => Vec::new(),
        }
    }

    /// Whether an incremental upsert starts from nothing: no cursor stored,
    /// no target table, nothing to transform, and keys the source itself
    /// keeps unique (its primary key), so that they can be built after the
    /// load; on a destination that loads in bulk, and on the run's first
    /// attempt only. A first load has no checkpoint: an attempt after a
    /// stop (or after a failure, such as keys that turned out not unique)
    /// takes the checkpointed way, which resumes and de-duplicates.
    async fn first_load(
        &self,
        run: &Run,
        m: &Mapping,
        dest: &Arc<dyn Destination>,
        schema: &EntitySchema,
        source_fields: &[crate::connect::connector::Field],
        stats: &EntityStats,
    ) -> Result<bool, Failure> {
        if m.sync_mode != SyncMode::IncrementalDeduped
            || !m.transform.is_empty()
            || stats.cursor_before.is_some()
            || run.attempt > 1
            || !dest.loads_in_bulk()
        {
            return Ok(false);
        }
        let keys = |fields: &[crate::connect::connector::Field]| {
            let mut k: Vec<String> = fields.iter().filter(|f| f.primary_key).map(|f| f.name.clone()).collect();
            k.sort();
            k
        };
        let target_keys = keys(&schema.fields);
        if target_keys.is_empty() || target_keys != keys(source_fields) {
            return Ok(false);
        }
        Ok(dest.describe(&schema.name).await?.is_none())
    }

    /// The first load of an incremental upsert, as a full refresh: the
    /// source's greatest cursor read first, then its unordered bulk stream
    /// into a fresh table with the keys built after, swapped in once, then
    /// that cursor stored (capped by the source's open transactions). Rows
    /// changed during the copy carry greater cursors and are read again by
    /// the next run. `Err(read)` hands the read back when either side has
    /// no bulk path (the fresh table is dropped).
    async fn bulk_first_load(
        &self,
        step: &Step<'_>,
        writer: Box<dyn EntityWriter>,
        source: &RunSource,
        source_fields: &[crate::connect::connector::Field],
        mut read: Read,
        stats: &mut EntityStats,
    ) -> Result<Result<EntityOutcome, Read>, Failure> {
        let entity = step.m.source_entity.as_str();
        let (Some(format), Some(ci)) = (writer.bulk_format(), read.cursor_idx) else {
            writer.abort().await;
            return Ok(Err(read));
        };
        let max = match source.io.max_cursor(entity, &source_fields[ci]).await {
            Ok(max) => max,
            Err(e) => {
                tracing::warn!(run = %step.run.id, entity, error = %e, "no greatest cursor for a first load");
                writer.abort().await;
                return Ok(Err(read));
            }
        };
        let stream = match source.io.bulk_out(entity, format, source_fields, None, self.read_ranges).await {
            Ok(Some(stream)) => stream,
            Ok(None) => {
                writer.abort().await;
                return Ok(Err(read));
            }
            Err(e) => {
                writer.abort().await;
                return Err(e.into());
            }
        };
        self.log(
            step.run,
            LogLevel::Info,
            Some(entity),
            format!("bulk copy ({format}): a first load into a fresh table"),
        )
        .await;
        let outcome = self.bulk_overwrite(step, writer, stream, stats).await?;
        read.cursor = max;
        self.end_cursor(step, read.capped(), stats).await?;
        Ok(Ok(outcome))
    }

    /// A fresh table loaded from the source's bulk stream, swapped in once.
    async fn bulk_overwrite(
        &self,
        step: &Step<'_>,
        mut writer: Box<dyn EntityWriter>,
        mut stream: Box<dyn crate::connect::connector::BulkStream>,
        stats: &mut EntityStats,
    ) -> Result<EntityOutcome, Failure> {
        let mut reporting = Reporting {
            inner: &mut *stream,
            service: self,
            step,
            stats: EntityStats { bytes: 0, ..stats.clone() },
            reported: (Instant::now(), 0),
        };
        let loaded = match writer.write_bulk(&mut reporting, None).await {
            Ok(n) => n,
            Err(e) => {
                writer.abort().await;
                return Err(e.into());
            }
        };
        let w = self.commit(step, writer, stats).await?;
        stats.rows_read = loaded;
        stats.bytes = w.bytes;
        Ok(EntityOutcome::Done)
    }

    /// An upsert by cursor from the source's bulk stream: the records past
    /// the cursor, ordered by it, staged in bulk and merged at each
    /// checkpoint (the last staged version of a key wins, so the greatest
    /// cursor).
    async fn bulk_upsert(
        &self,
        step: &Step<'_>,
        mut writer: Box<dyn EntityWriter>,
        mut stream: Box<dyn crate::connect::connector::BulkStream>,
        mut read: Read,
        stats: &mut EntityStats,
    ) -> Result<EntityOutcome, Failure> {
        loop {
            let loaded = match writer.write_bulk(&mut *stream, Some(CHECKPOINT_ROWS)).await {
                Ok(n) => n,
                Err(e) => {
                    writer.abort().await;
                    return Err(e.into());
                }
            };
            if loaded == 0 {
                break;
            }
            stats.rows_read += loaded;
            if let Some(c) = stream.last_cursor() {
                read.cursor = Some(c);
            }
            let (w, canceled) = self.checkpoint(step, &mut writer, &read.capped(), stats).await?;
            stats.bytes = w.bytes;
            if canceled {
                return Ok(self.cancel_after_checkpoint(step.run, &step.m.source_entity, writer).await);
            }
            if self.stopping() {
                return Ok(self.stop_after_checkpoint(step.run, &step.m.source_entity, writer).await);
            }
        }
        let w = self.commit(step, writer, stats).await?;
        stats.bytes = w.bytes;
        self.end_cursor(step, read.capped(), stats).await?;
        Ok(EntityOutcome::Done)
    }

    /// Record by record: batches read, transformed, de-duplicated for an
    /// upsert, written. Only incremental modes commit along the way (each
    /// commit then advances the cursor, so a resumed run reads on from
    /// there); a full refresh commits once, at the end: an interrupted
    /// append leaves nothing behind, and its retry appends the copy once.
    async fn copy_rows(
        &self,
        step: &Step<'_>,
        schema: &EntitySchema,
        mut writer: Box<dyn EntityWriter>,
        mut reader: Box<dyn crate::connect::connector::RecordReader>,
        mut read: Read,
        stats: &mut EntityStats,
    ) -> Result<EntityOutcome, Failure> {
        let m = step.m;
        let incremental = m.sync_mode.incremental();
        let key_idx: Vec<usize> =
            schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect();
        let out_cursor_idx = m.cursor_field.as_deref().and_then(|c| schema.index_of(c));
        let mut since_checkpoint = 0u64;
        let mut exact = ExactAppend::new(step, &read);
        loop {
            let mut batch = match reader.next_batch().await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    writer.abort().await;
                    return Err(e.into());
                }
            };
            stats.rows_read += batch.len() as u64;
            stats.bytes += batch.approx_bytes();
            if let Some(x) = &exact {
                x.skip_held(&mut batch);
                // A checkpoint only where a new cursor value begins: the
                // rows committed are then every row up to the value held.
                if !read.clearing && due(&*writer, since_checkpoint) && x.begins_new_value(&batch) {
                    let at = x.written.clone();
                    let (_, canceled) = self.checkpoint(step, &mut writer, &at, stats).await?;
                    since_checkpoint = 0;
                    if canceled {
                        return Ok(self.cancel_after_checkpoint(step.run, &m.source_entity, writer).await);
                    }
                    if self.stopping() {
                        return Ok(self.stop_after_checkpoint(step.run, &m.source_entity, writer).await);
                    }
                }
            }
            if let Some(ci) = read.cursor_idx {
                read.cursor = advance(read.cursor.take(), &batch, ci);
            }
            if let Some(x) = &mut exact {
                x.wrote(&batch);
            }
            let mut out = transform::apply(&m.transform, batch);
            if m.sync_mode == SyncMode::IncrementalDeduped {
                out = dedupe(out, &key_idx, out_cursor_idx);
            }
            since_checkpoint += out.len() as u64;
            if let Err(e) = writer.write(&out).await {
                writer.abort().await;
                return Err(e.into());
            }
            // A clear commits once: a cancel or a stop between its batches
            // rolls it back whole, the clear still pending.
            if read.clearing && since_checkpoint >= CHECKPOINT_ROWS {
                since_checkpoint = 0;
                let why = if self.canceled(step.run).await {
                    Some((EntityOutcome::Canceled, "canceled"))
                } else if self.stopping() {
                    Some((EntityOutcome::Stopped, "paused: the process is stopping"))
                } else {
                    None
                };
                if let Some((outcome, why)) = why {
                    writer.abort().await;
                    let said = format!("{why}; the clear's copy is rolled back and the clear stays pending");
                    self.log(step.run, LogLevel::Info, Some(&m.source_entity), said).await;
                    return Ok(outcome);
                }
            }
            if incremental && exact.is_none() && !read.clearing && due(&*writer, since_checkpoint) {
                let (_, canceled) = self.checkpoint(step, &mut writer, &read.capped(), stats).await?;
                since_checkpoint = 0;
                if canceled {
                    return Ok(self.cancel_after_checkpoint(step.run, &m.source_entity, writer).await);
                }
                if self.stopping() {
                    return Ok(self.stop_after_checkpoint(step.run, &m.source_entity, writer).await);
                }
            }
        }
        let cursor = if incremental { read.capped() } else { None };
        if step.holds
            && let Err(e) = writer.hold_position(&step.flow.stream_name(), &step.held(&cursor, true)).await
        {
            writer.abort().await;
            return Err(e.into());
        }
        self.commit(step, writer, stats).await?;
        if read.clearing {
            // The clear is done: its mark gives way to the cursor the copy
            // reached (none when it read nothing, or keeps none).
            self.replace_cursor(step.run, step.flow, step.m, &cursor).await?;
            stats.cursor_after = cursor.as_ref().and_then(cursor_text);
        } else {
            self.end_cursor(step, cursor, stats).await?;
        }
        Ok(EntityOutcome::Done)
    }

    /// The end of an entity's load: the writer commits while this attempt
    /// still holds the run; rows written count earlier attempts' too.
    async fn commit(
        &self,
        step: &Step<'_>,
        writer: Box<dyn EntityWriter>,
        stats: &mut EntityStats,
    ) -> Result<WriteStats, Failure> {
        self.hold(step.run).await?;
        let w = writer.finish().await?;
        stats.rows_written = step.prior + w.rows_written;
        Ok(w)
    }

    /// After the commit, the cursor the load reached (if any) is stored and
    /// reported.
    async fn end_cursor(&self, step: &Step<'_>, cursor: Option<Value>, stats: &mut EntityStats) -> Result<(), Failure> {
        self.store_cursor(step.run, step.flow, step.m, &cursor).await?;
        stats.cursor_after = cursor.as_ref().and_then(cursor_text);
        Ok(())
    }

    /// Commits what the writer holds, then (only then) stores `cursor`:
    /// the destination holds everything read so far. Answers the writer's
    /// totals and whether the run was canceled meanwhile. Nothing is
    /// committed once this attempt no longer holds the run.
    async fn checkpoint(
        &self,
        step: &Step<'_>,
        writer: &mut Box<dyn EntityWriter>,
        cursor: &Option<Value>,
        stats: &mut EntityStats,
    ) -> Result<(WriteStats, bool), Failure> {
        let run = step.run;
        self.hold(run).await?;
        if step.holds {
            writer.hold_position(&step.flow.stream_name(), &step.held(cursor, false)).await?;
        }
        let w = writer.checkpoint().await?;
        stats.rows_written = step.prior + w.rows_written;
        let elapsed = step.started.elapsed();
        stats.duration_ms = elapsed.as_millis() as u64;
        stats.checkpoint_at = Some(self.clock.now());
        stats.rows_per_second = (elapsed.as_secs_f64() > 0.0)
            .then(|| (w.rows_written as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0);
        self.store_cursor(run, step.flow, step.m, cursor).await?;
        stats.cursor_after = cursor.as_ref().and_then(cursor_text);
        // Progress, so that a later attempt counts these rows and readers
        // see the run advance.
        let (held, progress) = step.progress.set(step.index, stats).await;
        let stored = self.runs.progress(run.fence(), &progress).await?;
        drop(held);
        if !stored {
            return Err(Failure::lost());
        }
        Ok((w, self.canceled(run).await))
    }

    /// A run canceled at a checkpoint: the uncommitted rest is rolled back.
    async fn cancel_after_checkpoint(&self, run: &Run, entity: &str, writer: Box<dyn EntityWriter>) -> EntityOutcome {
        writer.abort().await;
        self.log(run, LogLevel::Warn, Some(entity), "canceled after a checkpoint; committed rows stay".into()).await;
        EntityOutcome::Canceled
    }

    /// A run paused at a checkpoint because the process is stopping:
    /// nothing is left uncommitted, the cursor holds the place.
    async fn stop_after_checkpoint(&self, run: &Run, entity: &str, writer: Box<dyn EntityWriter>) -> EntityOutcome {
        writer.abort().await;
        self.log(run, LogLevel::Info, Some(entity), "paused after a checkpoint: the process is stopping".into()).await;
        EntityOutcome::Stopped
    }

    async fn store_cursor(&self, run: &Run, flow: &Flow, m: &Mapping, cursor: &Option<Value>) -> Result<(), Failure> {
        if cursor.is_none() {
            return Ok(());
        }
        self.replace_cursor(run, flow, m, cursor).await
    }

    /// Stores `cursor` as the entity's, none included (fenced by the run).
    async fn replace_cursor(&self, run: &Run, flow: &Flow, m: &Mapping, cursor: &Option<Value>) -> Result<(), Failure> {
        self.store_cursor_text(run, flow, m, cursor.as_ref().and_then(cursor_text)).await
    }

    async fn store_cursor_text(
        &self,
        run: &Run,
        flow: &Flow,
        m: &Mapping,
        value: Option<String>,
    ) -> Result<(), Failure> {
        let mark = crate::sync::mark::Mark::Cursor { field: m.cursor_field.clone(), value };
        let c = Cursor { entity: m.source_entity.clone(), mark, updated_at: self.clock.now() };
        if self.cursors.advance(flow.id, &c, run.fence()).await? { Ok(()) } else { Err(Failure::lost()) }
    }
}

/// See [`Engine::retyped_columns`].
fn retyped(schema: &EntitySchema, existing: &EntitySchema) -> Vec<String> {
    let engine = |n: &str| n.split_once(':').map(|(e, t)| (e.to_string(), t.to_string()));
    schema
        .fields
        .iter()
        .filter_map(|f| {
            let (se, st) = engine(f.native_type.as_deref()?)?;
            let (de, dt) = engine(existing.field(&f.name)?.native_type.as_deref()?)?;
            (se == de && st != dt).then(|| format!("{} ({dt} → {st})", f.name))
        })
        .collect()
}
