//! How a run is claimed, leased, fenced, queued again and recovered.
//!
//! A worker claims the oldest queued run whose flow runs nothing else
//! ([`Engine::claim_run`]); the claim starts an attempt, whose
//! [`Fence`](crate::sync::flow::Fence) every write of the run carries (a cursor, progress, a log
//! line, the outcome), so an attempt that was taken over writes nothing
//! more. The worker renews its lease while it runs
//! ([`Engine::renew_lease`]); a run whose lease lapsed is queued
//! again in a new attempt, or failed after [`MAX_ATTEMPTS`]
//! ([`Engine::recover_lost_runs`]). A process that is stopping pauses
//! its runs at a checkpoint and queues them again
//! ([`Engine::stop_at_checkpoint`]). The store's side is in the
//! ports' `RunRepository` and `QueueRepository`.

use super::Engine;
use crate::Result;
use crate::sync::flow::*;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// A run whose worker has not renewed its lease for this long is presumed
/// lost.
pub const LEASE: Duration = Duration::seconds(60);
/// A lost run is queued again until it has been attempted this many times.
pub const MAX_ATTEMPTS: u32 = 3;

impl Engine {
    /// Queues a run in trace `trace_id`.
    pub async fn queue_run(&self, f: &Flow, trigger: Trigger, trace_id: Uuid) -> Result<Run> {
        let run = new_run(f, trigger, trace_id, self.clock.now());
        self.runs.enqueue(&run).await?;
        Ok(run)
    }

    /// Whether `run` is a continuous flow's: it goes on until stopped, so
    /// a worker runs it beside the others.
    pub async fn is_continuous(&self, run: &Run) -> bool {
        matches!(self.flows.get(run.org_id, run.flow_id).await, Ok(Some(f)) if f.config.continuous)
    }

    /// Claims the next queued run for `worker`.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn claim_run(&self, worker: &str) -> crate::Result<Option<Run>> {
        self.runs.claim(worker, self.clock.now()).await
    }

    /// Asks every run this process executes to pause at its next
    /// checkpoint (or before its next entity) and go back to the queue,
    /// to resume from there: the process is stopping.
    pub fn stop_at_checkpoint(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) async fn canceled(&self, run: &Run) -> bool {
        matches!(self.runs.status(run.id).await, Ok(Some(RunStatus::Canceled)))
    }

    /// Renews `worker`'s lease on the run it executes; `false` when the run
    /// is no longer that attempt's (taken over, canceled or ended): the
    /// worker must then stop at once.
    ///
    /// # Errors
    /// A store failure.
    pub async fn renew_lease(&self, fence: Fence, worker: &str) -> Result<bool> {
        self.runs.heartbeat(fence, worker, self.clock.now()).await
    }

    /// Finds running runs whose worker stopped renewing its lease: queued
    /// again while attempts remain, failed otherwise. Answers how many.
    pub async fn recover_lost_runs(&self) -> Result<usize> {
        self.recover_runs_older_than(self.clock.now() - self.lease).await
    }

    /// Recovers every run marked running: for a store only this process
    /// uses (SQLite), at start-up, where any such run is an orphan of a
    /// crash.
    pub async fn recover_orphans(&self) -> Result<usize> {
        self.recover_runs_older_than(self.clock.now() + Duration::days(1)).await
    }

    async fn recover_runs_older_than(&self, cutoff: OffsetDateTime) -> Result<usize> {
        let now = self.clock.now();
        let mut n = 0;
        for mut run in self.queue.stale_runs(cutoff).await? {
            // A continuous run is always taken over: it commits as it goes
            // and resumes from there, and it never ends on its own.
            if run.attempt < MAX_ATTEMPTS || self.is_continuous(&run).await {
                if self.queue.requeue(run.fence(), run.claimed_by.clone()).await? {
                    let _ = self
                        .runs
                        .log(
                            run.id,
                            None,
                            &RunLog {
                                ts: now,
                                level: LogLevel::Warn,
                                entity: None,
                                message: format!(
                                    "worker {} stopped answering; queued again (attempt {})",
                                    run.claimed_by.as_deref().unwrap_or("?"),
                                    run.attempt + 1
                                ),
                            },
                        )
                        .await;
                    n += 1;
                }
            } else {
                run.status = RunStatus::Failed;
                run.finished_at = Some(now);
                let why = format!("the worker was lost {} times; giving up", run.attempt);
                run.error = Some(why.clone());
                self.runs.save(&run).await?;
                let line =
                    RunLog { ts: now, level: LogLevel::Error, entity: None, message: format!("run failed: {why}") };
                let _ = self.runs.log(run.id, None, &line).await;
                self.after_run(&run).await?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// How long a run that failed transiently waits before its next attempt:
/// 30 s, then 60 s, doubling.
pub fn backoff(attempt: u32) -> Duration {
    Duration::seconds(30 * (1i64 << attempt.saturating_sub(1).min(10)))
}

/// The attempt a run's destination sessions are marked with.
pub(super) fn attempt_of(run: &Run) -> crate::connect::connector::Attempt {
    crate::connect::connector::Attempt { run: run.id.as_uuid(), number: run.attempt }
}
