//! The one commit at a position: every phase (a first copy, a chunk, the
//! stream's changes, a column change) commits an entity's writer through
//! [`Engine::commit_at`], which writes the position (and a copy's mark) in the
//! destination's transaction with the data, commits only while this
//! attempt holds the run, then shows it in the flow's state.

use super::*;
use crate::connect::connector::WriteStats;
use crate::sync::mark::Mark;

/// What a commit leaves of the entity's writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    /// Open, for more in a new transaction (a checkpoint).
    Open,
    /// Closed (the writer's last commit).
    Closed,
}

impl Engine {
    /// Commits what `e`'s writer holds (its pending changes flushed first)
    /// with the position `e` reached and its copy's mark, in one
    /// destination transaction, only while this attempt holds the run;
    /// then `e` holds that position, its stats count what was committed,
    /// and the flow's state shows it. Nothing when `e` has no writer open.
    /// Answers the writer's totals (since it was opened).
    pub(super) async fn commit_at(
        &self,
        scope: Scope<'_>,
        e: &mut Entity<'_>,
        then: Then,
    ) -> Result<WriteStats, Failure> {
        e.flush().await?;
        let Some(mut writer) = e.writer.take() else { return Ok(WriteStats::default()) };
        let held = e.held_text();
        if let Err(x) = writer.hold_position(&scope.flow.stream_name(), &held).await {
            writer.abort().await;
            return Err(e.failed(x));
        }
        self.hold(scope.run).await.map_err(|_| Failure::lost())?;
        let w = match then {
            Then::Open => {
                let w = writer.checkpoint().await.map_err(|x| e.failed(x))?;
                e.writer = Some(writer);
                w
            }
            Then::Closed => writer.finish().await.map_err(|x| e.failed(x))?,
        };
        e.stats.rows_written = e.committed + w.rows_written;
        e.stats.bytes = w.bytes;
        if then == Then::Closed {
            e.committed = e.stats.rows_written;
        }
        e.held = e.position.clone();
        e.held_mark = e.mark.clone();
        e.stats.cursor_after = Some(e.position.to_string());
        e.stats.checkpoint_at = Some(self.clock.now());
        let mark = Mark::Position { at: Some(e.position.to_string()), copy: e.mark.clone() };
        self.show_position(scope.run, scope.flow, &e.m.source_entity, mark).await?;
        Ok(w)
    }

    /// Commits every entity with the position it reached; `then` says
    /// whether the writers stay open for more, and when they do, the
    /// entities' progress is stored and a cancel or a stop halts the run.
    pub(super) async fn commit_changes(
        &self,
        scope: Scope<'_>,
        entities: &mut [Entity<'_>],
        then: Then,
    ) -> Result<(), Failure> {
        for e in entities.iter_mut() {
            self.commit_at(scope, e, then).await?;
        }
        if then == Then::Open {
            let progress = entities.iter().map(|e| e.stats.clone()).collect();
            self.progress_or_halt(scope.run, Some(progress)).await?;
        }
        Ok(())
    }

    /// Stores the position an entity committed, with its copy's progress,
    /// as its mark in the flow's state. The destination holds both already,
    /// with the rows: that copy is the one a run resumes from. This one is
    /// what `GET …/state` shows without opening the destination, and where
    /// a change log's first copy is marked before it commits (see
    /// `first_copy.rs`), which no destination holds.
    pub(super) async fn show_position(&self, run: &Run, flow: &Flow, entity: &str, mark: Mark) -> Result<(), Failure> {
        let c = Cursor { entity: entity.to_string(), mark, updated_at: self.clock.now() };
        if self.cursors.advance(flow.id, &c, run.fence()).await? { Ok(()) } else { Err(Failure::lost()) }
    }

    /// Between commits: the entities' progress stored (when given), so that
    /// readers see the run advance and a later attempt counts these rows;
    /// then a halt if the run was canceled or the process is stopping.
    pub(super) async fn progress_or_halt(&self, run: &Run, progress: Option<Vec<EntityStats>>) -> Result<(), Failure> {
        if let Some(progress) = progress
            && !self.runs.progress(run.fence(), &progress).await?
        {
            return Err(Failure::lost());
        }
        if self.canceled(run).await {
            return Err(Failure::halted(EntityOutcome::Canceled));
        }
        if self.stopping() {
            return Err(Failure::halted(EntityOutcome::Stopped));
        }
        Ok(())
    }
}
