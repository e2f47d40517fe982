//! Scheduling and orchestration: due flows queued once per scheduled
//! time, continuous flows kept going, and downstream flows queued when a
//! run ends.
//!
//! Every "do this once" is a marker with a unique key in the metadata store
//! (`schedule:<flow>:<time>`, `trace:<trace>:<flow>`,
//! `continuous:<flow>:<run>`), written in the same transaction as the run
//! it queues: with any number of processes, the insert that wins queues the
//! run, the others find the key taken.

use super::Engine;
use crate::monitoring::activity::ActivityEvent;
use crate::shared::ids::{FlowId, RunId};
use crate::sync::flow::*;
use crate::{Error, Result};
use serde_json::json;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

fn matches(on: DependsOn, status: RunStatus) -> bool {
    match on {
        DependsOn::Success => status == RunStatus::Succeeded,
        DependsOn::Failure => matches!(status, RunStatus::Failed | RunStatus::DriftDetected),
        DependsOn::Completion => status.finished(),
    }
}

impl Engine {
    /// Queues every due flow once per scheduled time; answers how many runs
    /// this process queued.
    pub async fn schedule_due(&self) -> Result<usize> {
        let now = self.clock.now();
        let mut queued = 0;
        for f in self.queue.due_flows(now).await? {
            if f.config.continuous {
                queued += usize::from(self.keep_going(&f, now).await?);
                continue;
            }
            let (Some(at), Some(expr)) = (f.next_run_at, f.schedule.clone()) else { continue };
            let run = new_run(&f, Trigger::Schedule, Uuid::now_v7(), now);
            let next = next_run(&expr, now);
            let marker = format!("schedule:{}:{}", f.id, at.unix_timestamp());
            if self.queue.queue_once(&marker, &run, Some((f.id, next))).await? {
                queued += 1;
            }
        }
        Ok(queued)
    }

    /// Queues a continuous flow's next run when it has none queued or
    /// running: at once after a run that ended otherwise, after a backoff
    /// (5 s, doubling to 5 min) after consecutive failures. Once per ended
    /// run whatever the number of processes (the marker names it).
    async fn keep_going(&self, f: &Flow, now: OffsetDateTime) -> Result<bool> {
        let recent = self
            .runs
            .list_for_flow(f.org_id, f.id, None, crate::shared::page::PageRequest { limit: 8, after: None })
            .await?;
        let marker = match recent.items.first() {
            Some(last) if !last.status.finished() => return Ok(false),
            Some(last) => {
                let failures = recent.items.iter().take_while(|r| r.status == RunStatus::Failed).count() as u32;
                if failures > 0 {
                    let wait = Duration::seconds(5 * (1i64 << (failures - 1).min(6))).min(Duration::minutes(5));
                    if last.finished_at.is_some_and(|at| at + wait > now) {
                        return Ok(false);
                    }
                }
                format!("continuous:{}:{}", f.id, last.id)
            }
            None => format!("continuous:{}:first", f.id),
        };
        let run = new_run(f, Trigger::Schedule, Uuid::now_v7(), now);
        self.queue.queue_once(&marker, &run, Some((f.id, f.next_run_at))).await
    }

    /// What follows a finished run: its activity event, and the downstream
    /// flows whose condition it meets, queued in the same trace.
    pub async fn after_run(&self, run: &Run) -> Result<Vec<Run>> {
        let now = self.clock.now();
        let rows: u64 = run.entities.iter().map(|e| e.rows_written).sum();
        let seconds = match (run.started_at, run.finished_at) {
            (Some(a), Some(b)) => (b - a).as_seconds_f64().max(0.0),
            _ => 0.0,
        };
        self.monitoring.metrics().run_finished(run.status.as_str(), rows, seconds);
        let severity = match run.status {
            RunStatus::Succeeded => "info",
            RunStatus::Canceled | RunStatus::DriftDetected => "warning",
            _ => "error",
        };
        self.monitoring.record(&ActivityEvent {
                id: Uuid::now_v7(),
                org_id: run.org_id,
                event_type: crate::monitoring::activity::EventType::parse(&format!("run.{}", run.status.as_str())),
                severity: severity.into(),
                message: format!("run {} of flow {} {} ({rows} rows written)", run.id, run.flow_id, run.status.as_str()),
                data: json!({"run_id": run.id, "flow_id": run.flow_id, "trace_id": run.trace_id, "rows_written": rows, "error": run.error}),
                created_at: now,
            })
            .await?;
        // A verification that cannot be queued does not hold back the
        // flows downstream.
        if let Err(e) = self.verifier.verify_after(run).await {
            tracing::error!(run = %run.id, error = %e, "queueing the verification after a run failed");
        }
        self.orchestrate(run).await
    }

    /// Queues the flows downstream of `run`'s flow whose conditions hold.
    /// A flow with several upstream flows (fan-in) is queued once all of
    /// them have a finished run in the trace meeting its condition.
    pub async fn orchestrate(&self, run: &Run) -> Result<Vec<Run>> {
        if !run.status.finished() {
            return Ok(Vec::new());
        }
        let flows = self.flows.all(run.org_id).await?;
        let trace = self.queue.trace(run.org_id, run.trace_id).await?;
        let upstream = run.flow_id.to_string();
        let mut queued = Vec::new();
        for d in flows.iter().filter(|f| f.config.depends_on.iter().any(|x| x.flow == upstream)) {
            let ready = d.config.depends_on.iter().all(|dep| {
                trace
                    .iter()
                    .filter(|r| r.flow_id.to_string() == dep.flow && r.status.finished())
                    .max_by_key(|r| r.id)
                    .is_some_and(|r| matches(dep.on, if r.id == run.id { run.status } else { r.status }))
            });
            if !ready {
                continue;
            }
            let next = new_run(d, Trigger::Upstream, run.trace_id, self.clock.now());
            if self.queue.queue_once(&format!("trace:{}:{}", run.trace_id, d.id), &next, None).await? {
                queued.push(next);
            }
        }
        Ok(queued)
    }

    /// `POST /v1/internal/orchestrate/trigger`: orchestration for a run as if
    /// it had just finished with `status`.
    pub async fn orchestrate_trigger(&self, flow: FlowId, run: RunId, status: RunStatus) -> Result<Vec<Run>> {
        let r = self.queue.find_run(run).await?.ok_or(Error::not_found("run"))?;
        if r.flow_id != flow {
            return Err(Error::invalid("flow_id", "is not the run's flow"));
        }
        self.orchestrate(&Run { status, ..r }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_match_the_statuses_they_name() {
        assert!(matches(DependsOn::Success, RunStatus::Succeeded));
        assert!(!matches(DependsOn::Success, RunStatus::Failed));
        assert!(matches(DependsOn::Failure, RunStatus::Failed));
        assert!(matches(DependsOn::Failure, RunStatus::DriftDetected));
        assert!(!matches(DependsOn::Failure, RunStatus::Canceled));
        assert!(matches(DependsOn::Completion, RunStatus::Canceled));
        assert!(!matches(DependsOn::Completion, RunStatus::Running));
    }
}
