//! The ports of sync: where flows, runs with their logs, cursors and the
//! run queue are kept.

use super::flow::*;
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{ConnectionId, FlowId, OrgId, RunId};
use crate::shared::page::{Page, PageRequest};
use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait FlowRepository: Send + Sync {
    /// # Errors
    /// `Conflict` when the name is taken.
    async fn create(&self, flow: &Flow, audit: &AuditEntry) -> Result<()>;
    async fn get(&self, org: OrgId, id: FlowId) -> Result<Option<Flow>>;
    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Flow>>;
    async fn list(&self, org: OrgId, status: Option<FlowStatus>, page: PageRequest) -> Result<Page<Flow>>;
    /// Every flow of the organization (dependency checks, topology).
    async fn all(&self, org: OrgId) -> Result<Vec<Flow>>;
    async fn update(&self, flow: &Flow, audit: &AuditEntry) -> Result<()>;
    /// Deletes the flow with its runs, logs and cursors.
    async fn delete(&self, org: OrgId, id: FlowId, audit: &AuditEntry) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait RunRepository: Send + Sync {
    async fn enqueue(&self, run: &Run) -> Result<()>;
    /// Claims the oldest queued run whose flow has no running run: it
    /// becomes `running`, held by `worker` with a heartbeat at `now`.
    /// Atomic: two workers never claim one run.
    async fn claim(&self, worker: &str, now: OffsetDateTime) -> Result<Option<Run>>;
    /// Renews the lease; `false` when the run is no longer held by
    /// `worker` in this attempt (it was queued again, claimed by another
    /// worker, canceled or ended): the worker must then stop at once.
    async fn heartbeat(&self, fence: Fence, worker: &str, now: OffsetDateTime) -> Result<bool>;
    /// Whether the run is still running in this attempt: checked before a
    /// worker commits anything to a destination.
    async fn holds(&self, fence: Fence) -> Result<bool>;
    /// Stores the entity stats of a running attempt (after each
    /// checkpoint); `false`, storing nothing, when the attempt no longer
    /// holds the run.
    async fn progress(&self, fence: Fence, entities: &[EntityStats]) -> Result<bool>;
    /// Stores the run's status, stats, error and finish time, only while
    /// the stored run is in `run.attempt` (a worker whose run was taken
    /// over stores nothing). A cancellation recorded meanwhile is kept.
    async fn save(&self, run: &Run) -> Result<()>;
    async fn get(&self, org: OrgId, id: RunId) -> Result<Option<Run>>;
    /// The current status of a run (cancellation checks).
    async fn status(&self, id: RunId) -> Result<Option<RunStatus>>;
    async fn list_for_flow(
        &self,
        org: OrgId,
        flow: FlowId,
        status: Option<RunStatus>,
        page: PageRequest,
    ) -> Result<Page<Run>>;
    /// The newest run of each of `flows` that has one, and the running run
    /// of each that has one (a flow runs one at a time), in one query each.
    async fn last_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>>;
    async fn running_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>>;
    /// The organization's runs queued at or after `since`, newest first,
    /// at most `limit` (the console's overview and plots).
    async fn recent(&self, org: OrgId, since: OffsetDateTime, limit: u64) -> Result<Vec<Run>>;
    async fn running_for_flow(&self, flow: FlowId) -> Result<bool>;
    /// Appends a log line; with a `fence`, only while that attempt still
    /// holds the run (a worker's lines), else unconditionally (the
    /// scheduler's).
    async fn log(&self, run: RunId, fence: Option<Fence>, line: &RunLog) -> Result<()>;
    async fn logs(&self, run: RunId) -> Result<Vec<RunLog>>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait CursorRepository: Send + Sync {
    async fn list(&self, flow: FlowId) -> Result<Vec<Cursor>>;
    async fn get(&self, flow: FlowId, entity: &str) -> Result<Option<Cursor>>;
    /// Stores a cursor; with `audit`, in the same transaction.
    async fn set(&self, flow: FlowId, cursor: &Cursor, audit: Option<AuditEntry>) -> Result<()>;
    /// Advances a cursor from a run: in one transaction with the check that
    /// `fence` still holds the run. `false`, storing nothing, when not.
    async fn advance(&self, flow: FlowId, cursor: &Cursor, fence: Fence) -> Result<bool>;
    async fn clear(&self, flow: FlowId, entity: &str, audit: &AuditEntry) -> Result<()>;
    /// A user's write of `entity`'s cursor (`None`: cleared), atomic with
    /// its guard and its audit entry: in one transaction, refused with
    /// `Conflict { code: RUN_IN_PROGRESS }` when a run of the flow is
    /// running (a claim and this write never interleave), and `audit`'s
    /// details gain `old_value`, the value this write replaces as read in
    /// that transaction.
    async fn write_by_user(&self, flow: FlowId, entity: &str, cursor: Option<Cursor>, audit: AuditEntry) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait QueueRepository: Send + Sync {
    /// Active flows due at or before `now`.
    async fn due_flows(&self, now: OffsetDateTime) -> Result<Vec<Flow>>;
    /// Queues `run` unless `marker` exists, and stores `next_run_at` on the
    /// flow, in one transaction; whether it queued.
    async fn queue_once(
        &self,
        marker: &str,
        run: &Run,
        next_run_at: Option<(FlowId, Option<OffsetDateTime>)>,
    ) -> Result<bool>;
    /// Running runs whose heartbeat is older than `before`.
    async fn stale_runs(&self, before: OffsetDateTime) -> Result<Vec<Run>>;
    /// Puts a lost run back in the queue (attempt + 1) if it is still
    /// running in `fence`'s attempt, held by `worker`; whether it did.
    async fn requeue(&self, fence: Fence, worker: Option<String>) -> Result<bool>;
    /// Runs of a trace in start order.
    async fn trace(&self, org: OrgId, trace: Uuid) -> Result<Vec<Run>>;
    /// A run of any organization (internal calls).
    async fn find_run(&self, id: RunId) -> Result<Option<Run>>;
    /// Queues a transiently failed run again (attempt + 1), not to be
    /// claimed before `not_before`, keeping `error` as the reason and the
    /// progress stored so far (the next attempt counts its rows); only
    /// while `fence` holds the run.
    async fn retry_later(&self, fence: Fence, not_before: OffsetDateTime, error: &str) -> Result<()>;
}

/// Change streams a flow left on its source (see
/// [`StreamDrop`]), kept until they are dropped.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait StreamDropRepository: Send + Sync {
    /// Stores `drop`, or replaces the one of its connection and stream.
    async fn record_drop(&self, drop: &StreamDrop) -> Result<()>;
    /// The streams left on `connection`, oldest first.
    async fn drops_of(&self, org: OrgId, connection: ConnectionId) -> Result<Vec<StreamDrop>>;
    /// Up to `limit` streams, of any organization, last tried before `before`.
    async fn due_drops(&self, before: OffsetDateTime, limit: u64) -> Result<Vec<StreamDrop>>;
    /// Forgets a stream (dropped, or its connection gone).
    async fn forget_drop(&self, id: Uuid) -> Result<()>;
}
