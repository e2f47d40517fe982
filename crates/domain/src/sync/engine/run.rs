//! A run, from its claim to its stored outcome: the outcome policy
//! (succeeded, failed, retried after a backoff, paused to resume, taken
//! over) and the turns of its entities, which sync concurrently up to the
//! service's [`DEFAULT_ENTITY_CONCURRENCY`] setting and what the
//! destination allows ([`Destination::concurrent_writers`]), each on its
//! own connections. One entity's sync is in [`super::entity`]; the change
//! stream's in [`super::capture`]; claims, leases and fences in
//! [`super::queue`]; how a turn ends in [`super::outcome`].

use super::Engine;
use super::outcome::{EntityOutcome, Failure};
use crate::connect::connector::{Destination, Source};
use crate::sync::flow::*;
use std::sync::Arc;
use std::time::Instant;

/// How many of a run's entities sync at once unless the service is told
/// otherwise.
pub const DEFAULT_ENTITY_CONCURRENCY: usize = 4;

/// A run's source: its connection (which names the entities' catalog
/// assets) and the connector opened on it.
pub(super) type RunSource = crate::connect::service::Opened<dyn Source>;

/// The progress of a run's entities, by mapping: each entity's stats as of
/// its last checkpoint or its end in this attempt, else as an earlier
/// attempt left them. Entities that sync concurrently store it all at each
/// checkpoint, so a later attempt counts every entity's committed rows.
/// The lock is held until the store has it: two checkpoints never store
/// out of order.
pub(super) struct Progress(futures_util::lock::Mutex<Vec<Option<EntityStats>>>);

impl Progress {
    pub(super) fn new(mappings: &[Mapping], earlier: &[EntityStats]) -> Self {
        let slots = mappings.iter().map(|m| earlier.iter().find(|e| e.entity == m.source_entity).cloned()).collect();
        Progress(futures_util::lock::Mutex::new(slots))
    }

    /// Records mapping `index`'s stats; answers every entity's, in order,
    /// with the lock, to hold until they are stored.
    pub(super) async fn set(
        &self,
        index: usize,
        stats: &EntityStats,
    ) -> (futures_util::lock::MutexGuard<'_, Vec<Option<EntityStats>>>, Vec<EntityStats>) {
        let mut slots = self.0.lock().await;
        if let Some(slot) = slots.get_mut(index) {
            *slot = Some(stats.clone());
        }
        let all = slots.iter().flatten().cloned().collect();
        (slots, all)
    }
}

/// What the entities of one run share.
#[derive(Clone, Copy)]
pub(super) struct RunScope<'a> {
    pub(super) run: &'a Run,
    pub(super) flow: &'a Flow,
    pub(super) source: &'a RunSource,
    pub(super) dest: &'a Arc<dyn Destination>,
    pub(super) progress: &'a Progress,
    /// The stats earlier attempts left.
    pub(super) earlier: &'a [EntityStats],
}

impl Turn {
    /// Whether it ends the run for the entities not begun yet: a
    /// cancellation, a stop, or the run taken over.
    fn ends_run(&self) -> bool {
        match self {
            Turn::Skipped => false,
            Turn::Canceled | Turn::Stopped => true,
            Turn::Ran(_, outcome) => match outcome {
                Ok(EntityOutcome::Canceled | EntityOutcome::Stopped) => true,
                Err(f) => f.lost,
                Ok(_) => false,
            },
        }
    }
}

/// How far one mapping's turn in a run got.
pub(super) enum Turn {
    /// Not begun: the run was canceled, stopped or lost before it.
    Skipped,
    /// Not begun: the run was canceled.
    Canceled,
    /// Not begun: the process is stopping.
    Stopped,
    /// Synced (or tried to): its stats, status set, and how it ended.
    Ran(Box<EntityStats>, Result<EntityOutcome, Failure>),
}

/// Carries an earlier attempt's progress of the entities this attempt did
/// not reach, so that the next attempt still counts their rows.
fn keep_earlier(run: &mut Run, earlier: &[EntityStats]) {
    for e in earlier {
        if !run.entities.iter().any(|x| x.entity == e.entity) {
            run.entities.push(e.clone());
        }
    }
}

impl Engine {
    pub(super) async fn log(&self, run: &Run, level: LogLevel, entity: Option<&str>, message: String) {
        let line = RunLog { ts: self.clock.now(), level, entity: entity.map(str::to_string), message };
        if let Err(e) = self.runs.log(run.id, Some(run.fence()), &line).await {
            tracing::warn!(run = %run.id, error = %e, "recording a run log line failed");
        }
    }

    /// Refuses to go on once this attempt no longer holds the run: checked
    /// before every commit to a destination.
    pub(super) async fn hold(&self, run: &Run) -> Result<(), Failure> {
        if self.runs.holds(run.fence()).await? { Ok(()) } else { Err(Failure::lost()) }
    }

    /// Executes a claimed run to its end and stores the outcome: paused
    /// and queued again when the process is stopping, nothing recorded
    /// when another attempt took the run over, queued for a later attempt
    /// when everything that failed may pass later, else finished.
    pub async fn execute_run(&self, mut run: Run) -> Run {
        run.started_at.get_or_insert(self.clock.now());
        let mut transient = Vec::new();
        let result = self.execute_entities(&mut run, &mut transient).await;
        if let Ok(EntityOutcome::Stopped) = &result {
            self.requeue_paused(&mut run).await;
            return run;
        }
        // Another attempt holds the run now (it was taken over while this
        // one was frozen, say, and whatever this one met since, a read cut
        // by the server included, is not the run's outcome): that attempt
        // records it.
        let taken_over = match &result {
            Err(f) if f.lost => true,
            _ => matches!(self.runs.holds(run.fence()).await, Ok(false)) && !self.canceled(&run).await,
        };
        if taken_over {
            tracing::warn!(run = %run.id, attempt = run.attempt, "the run was taken over; this attempt stopped");
            return run;
        }
        let all_transient = match &result {
            Err(f) => f.transient,
            Ok(EntityOutcome::Done) => {
                let failed = run.entities.iter().filter(|e| e.status == EntityStatus::Failed).count();
                failed > 0 && transient.len() == failed
            }
            Ok(_) => false,
        };
        if all_transient && run.attempt < super::queue::MAX_ATTEMPTS && !self.canceled(&run).await {
            let reason = match &result {
                Err(f) => f.message.clone(),
                Ok(_) => transient.join("; "),
            };
            if self.retry_later(&mut run, &reason).await {
                return run;
            }
        }
        self.finish(&mut run, result, all_transient).await;
        run
    }

    /// Queues a run paused at a checkpoint again in a new attempt (the
    /// fence keeps this one from writing more), to resume from the stored
    /// cursors.
    async fn requeue_paused(&self, run: &mut Run) {
        let message = "the worker is stopping: paused at a checkpoint; queued again to resume from it";
        self.log(run, LogLevel::Warn, None, message.into()).await;
        // The progress so far, so that the next attempt counts its rows.
        if let Err(e) = self.runs.progress(run.fence(), &run.entities).await {
            tracing::warn!(run = %run.id, error = %e, "storing a paused run's progress failed");
        }
        match self.queue.requeue(run.fence(), run.claimed_by.clone()).await {
            Ok(true) => {
                run.status = RunStatus::Queued;
                run.attempt += 1;
            }
            // Not held any more, or the store is down: lease recovery
            // takes the run over as for a crash.
            Ok(false) => {}
            Err(e) => tracing::error!(run = %run.id, error = %e, "queueing a paused run again failed"),
        }
    }

    /// Queues a run whose failures may pass for its next attempt after a
    /// backoff; whether it did.
    async fn retry_later(&self, run: &mut Run, reason: &str) -> bool {
        let at = self.clock.now() + super::queue::backoff(run.attempt);
        let message = format!(
            "attempt {} failed ({reason}); retrying after {}",
            run.attempt,
            crate::connect::connector::format_timestamp(at)
        );
        self.log(run, LogLevel::Warn, None, message.clone()).await;
        match self.queue.retry_later(run.fence(), at, &message).await {
            Ok(()) => {
                run.status = RunStatus::Queued;
                run.attempt += 1;
                run.not_before = Some(at);
                run.error = Some(message);
                true
            }
            Err(e) => {
                tracing::error!(run = %run.id, error = %e, "queueing a retry failed");
                false
            }
        }
    }

    /// Ends a run: its status and error from how its entities ended, its
    /// last log line, the stored outcome (a cancellation recorded meanwhile
    /// wins), and what follows it (see [`Self::after_run`]).
    async fn finish(&self, run: &mut Run, result: Result<EntityOutcome, Failure>, all_transient: bool) {
        run.finished_at = Some(self.clock.now());
        run.status = match result {
            Err(f) => {
                self.log(run, LogLevel::Error, None, f.message.clone()).await;
                run.error = Some(f.message);
                RunStatus::Failed
            }
            Ok(EntityOutcome::Canceled) => RunStatus::Canceled,
            // Handled by `requeue_paused`.
            Ok(EntityOutcome::Stopped) => RunStatus::Queued,
            Ok(EntityOutcome::Drift) => RunStatus::DriftDetected,
            Ok(EntityOutcome::Done) => {
                let failed: Vec<&EntityStats> =
                    run.entities.iter().filter(|e| e.status == EntityStatus::Failed).collect();
                if failed.is_empty() {
                    RunStatus::Succeeded
                } else {
                    let names: Vec<&str> = failed.iter().map(|e| e.entity.as_str()).collect();
                    // One cause for them all (a destination away, say) is
                    // said once, here too.
                    let why = match failed[0].error.as_deref() {
                        Some(why) if failed.len() > 1 && failed.iter().all(|e| e.error.as_deref() == Some(why)) => {
                            format!(" ({why})")
                        }
                        _ => String::new(),
                    };
                    run.error = Some(format!(
                        "{} of {} entities failed: {}{why}",
                        failed.len(),
                        run.entities.len(),
                        names.join(", ")
                    ));
                    RunStatus::Failed
                }
            }
        };
        if run.status == RunStatus::Canceled {
            run.error = Some("canceled".into());
        }
        if all_transient && run.status == RunStatus::Failed {
            let why = run.error.take().unwrap_or_default();
            run.error = Some(format!("gave up after {} attempts: {why}", run.attempt));
        }
        let rows: u64 = run.entities.iter().map(|e| e.rows_written).sum();
        // The last line says how the run ended and, when it failed, why.
        let summary = match (&run.error, run.status) {
            (Some(e), RunStatus::Failed) => format!("run failed ({rows} rows written): {e}"),
            _ => format!("run {} ({rows} rows written)", run.status.as_str()),
        };
        self.log(run, if run.status == RunStatus::Succeeded { LogLevel::Info } else { LogLevel::Warn }, None, summary)
            .await;
        // Before the outcome is stored: whoever sees the run succeeded
        // sees its connections healthy too.
        if run.status == RunStatus::Succeeded {
            self.record_working_connections(run).await;
        }
        if let Err(e) = self.runs.save(run).await {
            tracing::error!(run = %run.id, error = %e, "storing the outcome of a run failed");
        }
        // The stored status wins (a cancellation recorded meanwhile).
        if let Ok(Some(s)) = self.runs.status(run.id).await {
            run.status = s;
        }
        match self.after_run(run).await {
            Ok(next) if !next.is_empty() => {
                let ids: Vec<String> = next.iter().map(|r| r.flow_id.to_string()).collect();
                self.log(run, LogLevel::Info, None, format!("queued downstream flows {}", ids.join(", "))).await;
            }
            Ok(_) => {}
            Err(e) => tracing::error!(run = %run.id, error = %e, "orchestrating downstream flows failed"),
        }
    }

    /// A run that succeeded proved its flow's connections work: those a
    /// test last called failing (or never tested) before the run began are
    /// marked healthy. Not when the flow was re-pointed since the run
    /// began (its connections now are not the ones it used), nor over a
    /// test that failed while it ran. Read first, so that the common case
    /// (both healthy) writes nothing.
    async fn record_working_connections(&self, run: &Run) {
        let (Some(started), Ok(Some(flow))) = (run.started_at, self.flows.get(run.org_id, run.flow_id).await) else {
            return;
        };
        if flow.updated_at > started {
            return;
        }
        let mut stale = Vec::new();
        for id in [flow.source_connection_id, flow.destination_connection_id] {
            if let Ok(Some(c)) = self.connect.connections.get(run.org_id, id).await
                && c.status != crate::connect::connection::ConnectionStatus::Healthy
                && c.last_tested_at.is_none_or(|t| t < started)
            {
                stale.push(id);
            }
        }
        if stale.is_empty() {
            return;
        }
        let at = run.finished_at.unwrap_or_else(|| self.clock.now());
        if let Err(e) = self.connect.connections.record_working(run.org_id, &stale, at).await {
            tracing::warn!(run = %run.id, error = %e, "recording the connections' health failed");
        }
    }

    async fn execute_entities(&self, run: &mut Run, transient: &mut Vec<String>) -> Result<EntityOutcome, Failure> {
        let flow = self.flows.get(run.org_id, run.flow_id).await?.ok_or("the flow was deleted")?;
        if let Some(v) = self.verifications.repaired_by(run.id).await? {
            return self.repair(run, &flow, &v).await;
        }
        let source = self.connect.open_source(flow.org_id, flow.source_connection_id).await?;
        let changes = match flow.captures() {
            true => Some(self.connect.open_change_source(flow.org_id, flow.source_connection_id).await?.io),
            false => None,
        };
        let dest = self.connect.open_destination(flow.org_id, flow.destination_connection_id).await?.io;
        self.log(
            run,
            LogLevel::Info,
            None,
            format!("run started ({}), {} entities", run.trigger.as_str(), flow.config.mappings.len()),
        )
        .await;
        if run.attempt > 1 {
            self.end_earlier_sessions(run, &dest).await?;
        }
        // Rows earlier attempts of this run committed (their last progress),
        // so that `rows_written` counts every attempt.
        let earlier = std::mem::take(&mut run.entities);
        let mappings = &flow.config.mappings;
        let mut limit = self.entity_concurrency.min(dest.concurrent_writers().max(1));
        // Mappings that read one source entity share its cursor and stats:
        // those take turns.
        let sources: std::collections::BTreeSet<&str> = mappings.iter().map(|m| m.source_entity.as_str()).collect();
        if sources.len() < mappings.len() {
            limit = 1;
        }
        let progress = Progress::new(mappings, &earlier);
        let halt = std::sync::atomic::AtomicBool::new(false);
        let scope = RunScope { run, flow: &flow, source: &source, dest: &dest, progress: &progress, earlier: &earlier };
        let turns: Vec<Turn> = {
            use futures_util::{FutureExt, StreamExt};
            let (scope, halt) = (&scope, &halt);
            // Boxed as they are made (each begins when first polled), so
            // that the compiler sees them `Send` with these lifetimes.
            let turns: Vec<futures_util::future::BoxFuture<'_, (usize, Turn)>> = mappings
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.sync_mode.cdc())
                .map(|(index, m)| {
                    async move {
                        let turn = self.turn(scope, index, m, halt).await;
                        if turn.ends_run() {
                            // The entities not begun yet are not begun.
                            halt.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        (index, turn)
                    }
                    .boxed()
                })
                .collect();
            // Unordered: an entity begins as soon as any other ends (an
            // ordered buffer would hold finished ones behind a long one).
            let mut ended: Vec<(usize, Turn)> =
                futures_util::stream::iter(turns).buffer_unordered(limit).collect().await;
            if let Some(changes) = &changes
                && !halt.load(std::sync::atomic::Ordering::SeqCst)
            {
                ended.extend(self.capture_turns(run, &flow, &source, changes, &dest, &earlier).await);
            }
            ended.sort_by_key(|(index, _)| *index);
            ended.into_iter().map(|(_, turn)| turn).collect::<Vec<Turn>>()
        };
        tally(run, turns, transient, &earlier)
    }

    /// A take-over ends the destination sessions earlier attempts of the
    /// run hold: a frozen worker's open transaction would hold its locks
    /// for as long as it stays frozen. Where they cannot be ended, only
    /// waited for (a file's lock), an attempt that waited in vain fails, to
    /// be tried again, rather than go on beside them.
    pub(super) async fn end_earlier_sessions(&self, run: &Run, dest: &Arc<dyn Destination>) -> Result<(), Failure> {
        match dest.end_earlier_attempts(&super::queue::attempt_of(run)).await {
            Ok(0) => {}
            Ok(n) => {
                let message = format!("ended {n} destination session(s) an earlier attempt of this run held");
                self.log(run, LogLevel::Info, None, message).await;
            }
            Err(e @ crate::connect::connector::ConnectorError::Timeout(_)) => return Err(e.into()),
            Err(e) => tracing::warn!(run = %run.id, error = %e, "earlier attempts' sessions could not be ended"),
        }
        Ok(())
    }

    /// The flow's CDC mappings' turns: one read of the change stream
    /// (see [`super::capture`]), each entity's outcome logged.
    async fn capture_turns(
        &self,
        run: &Run,
        flow: &Flow,
        source: &RunSource,
        changes: &Arc<dyn crate::connect::changes::ChangeSource>,
        dest: &Arc<dyn Destination>,
        earlier: &[EntityStats],
    ) -> Vec<(usize, Turn)> {
        if self.canceled(run).await {
            return Vec::new();
        }
        let started = Instant::now();
        let mappings: Vec<(usize, &Mapping)> =
            flow.config.mappings.iter().enumerate().filter(|(_, m)| m.sync_mode.cdc()).collect();
        let mut turns = Vec::new();
        let budget = super::capture::retained_budget(&source.connection);
        let scope = super::capture::Scope { run, flow, source: &source.io, changes, dest, budget };
        for (index, mut stats, result) in self.capture(scope, &mappings, earlier).await {
            stats.duration_ms = started.elapsed().as_millis() as u64;
            let outcome = match result {
                Ok(()) => {
                    let message = format!(
                        "{} changes and copied rows read, {} rows written; the destination holds the stream up to {}",
                        stats.rows_read,
                        stats.rows_written,
                        stats.cursor_after.as_deref().unwrap_or("its start")
                    );
                    self.log(run, LogLevel::Info, Some(&stats.entity), message).await;
                    Ok(EntityOutcome::Done)
                }
                Err(f) => match f.halt {
                    Some(EntityOutcome::Canceled) => {
                        stats.status = EntityStatus::Canceled;
                        stats.error = None;
                        Ok(EntityOutcome::Canceled)
                    }
                    Some(EntityOutcome::Drift) => {
                        stats.status = EntityStatus::DriftDetected;
                        stats.error = Some(f.message);
                        Ok(EntityOutcome::Drift)
                    }
                    Some(EntityOutcome::Stopped) => {
                        stats.status = EntityStatus::Paused;
                        stats.error = None;
                        Ok(EntityOutcome::Stopped)
                    }
                    Some(EntityOutcome::Done) | None => {
                        if !f.lost {
                            self.log(run, LogLevel::Error, Some(&stats.entity), f.message.clone()).await;
                        }
                        Err(f)
                    }
                },
            };
            turns.push((index, Turn::Ran(Box::new(stats), outcome)));
        }
        turns
    }

    /// One mapping's turn in a run: begun unless the run was canceled, the
    /// process is stopping (a run, once begun, does its first entity) or
    /// another entity ended the run; its outcome logged as it ends.
    async fn turn(
        &self,
        scope: &RunScope<'_>,
        index: usize,
        m: &Mapping,
        halt: &std::sync::atomic::AtomicBool,
    ) -> Turn {
        let run = scope.run;
        if halt.load(std::sync::atomic::Ordering::SeqCst) {
            return Turn::Skipped;
        }
        if self.canceled(run).await {
            return Turn::Canceled;
        }
        if index > 0 && self.stopping() {
            return Turn::Stopped;
        }
        let started = Instant::now();
        let prior = scope.earlier.iter().find(|e| e.entity == m.source_entity).map_or(0, |e| e.rows_written);
        let mut stats = EntityStats {
            entity: m.source_entity.clone(),
            status: EntityStatus::Running,
            rows_written: prior,
            ..Default::default()
        };
        let outcome = self.sync_entity(scope, index, m, &mut stats).await;
        stats.duration_ms = started.elapsed().as_millis() as u64;
        match &outcome {
            Ok(EntityOutcome::Done) => {
                stats.status = EntityStatus::Succeeded;
                self.log(
                    run,
                    LogLevel::Info,
                    Some(&m.source_entity),
                    format!("{} rows read, {} written", stats.rows_read, stats.rows_written),
                )
                .await;
            }
            Ok(EntityOutcome::Drift) => stats.status = EntityStatus::DriftDetected,
            Ok(EntityOutcome::Canceled) => stats.status = EntityStatus::Canceled,
            Ok(EntityOutcome::Stopped) => stats.status = EntityStatus::Paused,
            Err(f) if f.lost => {}
            Err(f) => {
                self.log(run, LogLevel::Error, Some(&m.source_entity), f.message.clone()).await;
                stats.status = EntityStatus::Failed;
                stats.error = Some(f.message.clone());
            }
        }
        let _ = scope.progress.set(index, &stats).await;
        Turn::Ran(Box::new(stats), outcome)
    }
}

/// How a run's entities ended, from their turns: their stats recorded on
/// the run (an earlier attempt's kept for the entities a pause left), the
/// transient failures told in `transient`.
fn tally(
    run: &mut Run,
    turns: Vec<Turn>,
    transient: &mut Vec<String>,
    earlier: &[EntityStats],
) -> Result<EntityOutcome, Failure> {
    let (mut drift, mut canceled, mut stopped, mut lost) = (false, false, false, None);
    for turn in turns {
        match turn {
            Turn::Skipped => {}
            Turn::Canceled => canceled = true,
            Turn::Stopped => stopped = true,
            Turn::Ran(stats, outcome) => {
                match outcome {
                    Ok(EntityOutcome::Done) => {}
                    Ok(EntityOutcome::Drift) => drift = true,
                    Ok(EntityOutcome::Canceled) => canceled = true,
                    Ok(EntityOutcome::Stopped) => stopped = true,
                    Err(f) if f.lost => {
                        lost = Some(f);
                        continue;
                    }
                    Err(f) => {
                        if f.transient {
                            transient.push(format!("{}: {}", stats.entity, f.message));
                        }
                    }
                }
                run.entities.push(*stats);
            }
        }
    }
    if let Some(f) = lost {
        return Err(f);
    }
    if canceled {
        return Ok(EntityOutcome::Canceled);
    }
    if stopped {
        keep_earlier(run, earlier);
        return Ok(EntityOutcome::Stopped);
    }
    Ok(if drift { EntityOutcome::Drift } else { EntityOutcome::Done })
}
