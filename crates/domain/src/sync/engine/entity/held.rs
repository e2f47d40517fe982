//! What an entity's sync does with a destination that holds its marks
//! (see [`Destination::holds_marks`]): the mark committed with the rows,
//! the run it says finished the entity, and an append that writes each row
//! once.

use super::super::outcome::{EntityOutcome, Failure};
use super::super::{CHECKPOINT_ROWS, Engine};
use super::{Read, Step};
use crate::connect::connector::{Destination, EntityWriter, RecordBatch, Value, compare_values};
use crate::sync::SyncMode;
use crate::sync::cursor_text;
use crate::sync::flow::*;
use crate::sync::mark::RowsHeld;
use std::sync::Arc;

impl Step<'_> {
    /// The mark this run commits with the entity's rows: how far they
    /// reach, and whether the run finished the entity.
    pub(super) fn held(&self, cursor: &Option<Value>, done: bool) -> String {
        RowsHeld {
            run: self.run.id.to_string(),
            done,
            field: self.m.cursor_field.clone().filter(|_| self.m.sync_mode.incremental()),
            cursor: cursor.as_ref().and_then(cursor_text),
        }
        .text()
    }
}

/// Whether a checkpoint is due after `since` rows: where the writer
/// decides (a writer of files, once a file is cut), else every
/// [`CHECKPOINT_ROWS`].
pub(super) fn due(writer: &dyn EntityWriter, since: u64) -> bool {
    writer.wants_checkpoint().unwrap_or(since >= CHECKPOINT_ROWS)
}

/// Where an entity got, as the metadata store holds it and as a
/// destination that holds its marks does.
pub(super) struct Marks {
    pub(super) stored: Option<Cursor>,
    pub(super) held: Option<RowsHeld>,
}

/// An `incremental_append` into a destination that holds its marks (see
/// [`Destination::holds_marks`]) writes each row once, whatever was killed
/// when: it reads on strictly after the cursor the destination holds (the
/// rows at that value are there already), and commits only whole groups of
/// rows sharing a cursor value (the read is ordered by the cursor), so the
/// cursor committed with the rows says exactly which rows are there. A
/// row committed at the source later with a value already passed is not
/// read, as with any cursor without a lookback; with a lookback, the rows
/// behind the cursor are read and appended again, as asked.
pub(super) struct ExactAppend {
    cursor_idx: usize,
    /// The rows up to this value are in the destination: skipped.
    after: Option<Value>,
    /// The cursor value of the last row written.
    pub(super) written: Option<Value>,
}

impl ExactAppend {
    pub(super) fn new(step: &Step<'_>, read: &Read) -> Option<Self> {
        let cursor_idx = read.cursor_idx?;
        if !step.holds || step.m.sync_mode != SyncMode::IncrementalAppend {
            return None;
        }
        let from = read.bound.as_ref().and_then(|b| b.from.as_ref());
        let after = read.floor.clone().filter(|f| from == Some(f));
        Some(ExactAppend { cursor_idx, written: read.floor.clone(), after })
    }

    pub(super) fn skip_held(&self, batch: &mut RecordBatch) {
        use std::cmp::Ordering::{Equal, Less};
        if let Some(after) = &self.after {
            let ci = self.cursor_idx;
            batch.rows.retain(|r| !matches!(compare_values(&r[ci], after), Some(Less | Equal)));
        }
    }

    /// Whether `batch` begins past the value of the last row written.
    pub(super) fn begins_new_value(&self, batch: &RecordBatch) -> bool {
        let (Some(first), Some(written)) = (batch.rows.first(), &self.written) else { return false };
        compare_values(&first[self.cursor_idx], written) == Some(std::cmp::Ordering::Greater)
    }

    pub(super) fn wrote(&mut self, batch: &RecordBatch) {
        if let Some(v) = batch.rows.last().map(|r| &r[self.cursor_idx]).filter(|v| !v.is_null()) {
            self.written = Some(v.clone());
        }
    }
}

impl Engine {
    /// What a destination that holds marks holds of `m`'s entity for this
    /// flow (none where it holds no marks).
    pub(super) async fn held_rows(
        &self,
        flow: &Flow,
        m: &Mapping,
        dest: &Arc<dyn Destination>,
    ) -> Result<Option<RowsHeld>, Failure> {
        if !dest.holds_marks() {
            return Ok(None);
        }
        let held = dest.position_of(&flow.stream_name(), m.destination()).await?;
        Ok(held.as_deref().and_then(RowsHeld::parse))
    }

    /// An entity an earlier attempt of this run finished, its commit in the
    /// destination (the worker lost before the run's outcome was stored):
    /// not written again; its cursor stored as the commit holds it.
    pub(super) async fn finished_before(
        &self,
        run: &Run,
        flow: &Flow,
        m: &Mapping,
        held: &RowsHeld,
        stats: &mut EntityStats,
    ) -> Result<EntityOutcome, Failure> {
        let said = "already committed by an earlier attempt of this run (its worker was lost before the run's \
                    outcome was stored): not written again";
        self.log(run, LogLevel::Info, Some(&m.source_entity), said.to_string()).await;
        if m.sync_mode.incremental() && held.field == m.cursor_field && held.cursor.is_some() {
            self.store_cursor_text(run, flow, m, held.cursor.clone()).await?;
            stats.cursor_after = held.cursor.clone();
        }
        Ok(EntityOutcome::Done)
    }
}
