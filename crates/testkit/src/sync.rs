//! Flows, runs, cursors and the run queue in memory.

use super::*;

use sluice_domain::shared::ids::{FlowId, RunId};
use sluice_domain::sync::flow::Fence;
use sluice_domain::sync::flow::*;
use sluice_domain::sync::ports::*;
use sluice_domain::sync::verification::Verification;

#[derive(Default)]
pub(crate) struct FlowState {
    pub(crate) flows: Vec<Flow>,
    pub(crate) runs: Vec<Run>,
    pub(crate) logs: HashMap<RunId, Vec<RunLog>>,
    pub(crate) cursors: HashMap<(FlowId, String), Cursor>,
    pub(crate) markers: std::collections::HashSet<String>,
    pub(crate) events: Vec<sluice_domain::monitoring::activity::ActivityEvent>,
    pub(crate) rules: Vec<sluice_domain::monitoring::rule::NotificationRule>,
    /// Each delivery with its body, message id and claim (worker, until).
    pub(crate) deliveries: Vec<crate::monitoring::Queued>,
    pub(crate) verifications: Vec<sluice_domain::sync::verification::Verification>,
    pub(crate) drops: Vec<sluice_domain::sync::flow::StreamDrop>,
}

/// Flows, runs and cursors in memory.
#[derive(Default, Clone)]
pub struct InMemoryFlows {
    pub(crate) state: Arc<Mutex<FlowState>>,
    pub(crate) audit: InMemoryStore,
}

impl InMemoryFlows {
    pub fn new(store: &InMemoryStore) -> Self {
        Self { state: Arc::default(), audit: store.clone() }
    }

    pub(crate) fn s(&self) -> MutexGuard<'_, FlowState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every running run queued again for its next attempt, as another
    /// worker taking it over after its lease ran out does: the attempt
    /// running holds it no more. Answers how many.
    pub fn take_over_running(&self) -> usize {
        let mut s = self.s();
        let mut n = 0;
        for r in s.runs.iter_mut().filter(|r| r.status == RunStatus::Running) {
            queue_again(r);
            n += 1;
        }
        n
    }

    /// Every running run marked canceled, as a user's cancel from another
    /// process is (its worker ends it). Answers how many.
    pub fn cancel_running(&self) -> usize {
        let mut s = self.s();
        let mut n = 0;
        for r in s.runs.iter_mut().filter(|r| r.status == RunStatus::Running) {
            r.status = RunStatus::Canceled;
            n += 1;
        }
        n
    }
}

#[async_trait]
impl FlowRepository for InMemoryFlows {
    async fn create(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.flows.iter().any(|x| x.org_id == f.org_id && x.name == f.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.flows.push(f.clone());
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn get(&self, org: OrgId, id: FlowId) -> Result<Option<Flow>> {
        Ok(self.s().flows.iter().find(|f| f.org_id == org && f.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Flow>> {
        Ok(self.s().flows.iter().find(|f| f.org_id == org && f.name == name).cloned())
    }

    async fn list(&self, org: OrgId, status: Option<FlowStatus>, page: PageRequest) -> Result<Page<Flow>> {
        let items = self
            .s()
            .flows
            .iter()
            .filter(|f| f.org_id == org && status.is_none_or(|st| f.status == st))
            .cloned()
            .collect();
        Ok(page_of(items, page, |f| f.id.as_uuid()))
    }

    async fn all(&self, org: OrgId) -> Result<Vec<Flow>> {
        Ok(self.s().flows.iter().filter(|f| f.org_id == org).cloned().collect())
    }

    async fn update(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.flows.iter().any(|x| x.org_id == f.org_id && x.name == f.name && x.id != f.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.flows.iter_mut().find(|x| x.id == f.id) {
            *x = f.clone();
        }
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: FlowId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        s.flows.retain(|f| !(f.org_id == org && f.id == id));
        s.runs.retain(|r| r.flow_id != id);
        s.cursors.retain(|(f, _), _| *f != id);
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }
}

#[async_trait]
impl RunRepository for InMemoryFlows {
    async fn enqueue(&self, run: &Run) -> Result<()> {
        self.s().runs.push(run.clone());
        Ok(())
    }

    async fn claim(&self, worker: &str, now: OffsetDateTime) -> Result<Option<Run>> {
        let mut s = self.s();
        let busy: Vec<FlowId> = s.runs.iter().filter(|r| r.status == RunStatus::Running).map(|r| r.flow_id).collect();
        let Some(r) = s
            .runs
            .iter_mut()
            .filter(|r| {
                r.status == RunStatus::Queued && !busy.contains(&r.flow_id) && r.not_before.is_none_or(|t| t <= now)
            })
            .min_by_key(|r| r.id)
        else {
            return Ok(None);
        };
        r.status = RunStatus::Running;
        r.claimed_by = Some(worker.to_string());
        r.heartbeat_at = Some(now);
        r.started_at = Some(now);
        Ok(Some(r.clone()))
    }

    async fn heartbeat(&self, fence: Fence, worker: &str, now: OffsetDateTime) -> Result<bool> {
        let mut s = self.s();
        match s.runs.iter_mut().find(|r| r.held_by(fence) && r.claimed_by.as_deref() == Some(worker)) {
            Some(r) => {
                r.heartbeat_at = Some(now);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn holds(&self, fence: Fence) -> Result<bool> {
        Ok(self.s().runs.iter().any(|r| r.held_by(fence)))
    }

    async fn progress(&self, fence: Fence, entities: &[EntityStats]) -> Result<bool> {
        let mut s = self.s();
        match s.runs.iter_mut().find(|r| r.held_by(fence)) {
            Some(r) => {
                r.entities = entities.to_vec();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn save(&self, run: &Run) -> Result<()> {
        let mut s = self.s();
        if let Some(r) = s.runs.iter_mut().find(|r| {
            r.fence() == run.fence() && matches!(r.status, RunStatus::Queued | RunStatus::Running | RunStatus::Canceled)
        }) {
            // A cancellation recorded meanwhile wins over a worker's outcome.
            let canceled = r.status == RunStatus::Canceled;
            *r = run.clone();
            if canceled {
                r.status = RunStatus::Canceled;
            }
        }
        Ok(())
    }

    async fn get(&self, org: OrgId, id: RunId) -> Result<Option<Run>> {
        Ok(self.s().runs.iter().find(|r| r.org_id == org && r.id == id).cloned())
    }

    async fn status(&self, id: RunId) -> Result<Option<RunStatus>> {
        Ok(self.s().runs.iter().find(|r| r.id == id).map(|r| r.status))
    }

    async fn list_for_flow(
        &self,
        org: OrgId,
        flow: FlowId,
        status: Option<RunStatus>,
        page: PageRequest,
    ) -> Result<Page<Run>> {
        let items = self
            .s()
            .runs
            .iter()
            .filter(|r| r.org_id == org && r.flow_id == flow && status.is_none_or(|st| r.status == st))
            .cloned()
            .collect();
        Ok(page_of(items, page, |r| r.id.as_uuid()))
    }

    async fn last_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>> {
        let mut last: std::collections::HashMap<FlowId, Run> = std::collections::HashMap::new();
        for r in self.s().runs.iter().filter(|r| r.org_id == org && flows.contains(&r.flow_id)) {
            if last.get(&r.flow_id).is_none_or(|l| l.id < r.id) {
                last.insert(r.flow_id, r.clone());
            }
        }
        Ok(last.into_values().collect())
    }

    async fn running_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>> {
        Ok(self
            .s()
            .runs
            .iter()
            .filter(|r| r.org_id == org && flows.contains(&r.flow_id) && r.status == RunStatus::Running)
            .cloned()
            .collect())
    }

    async fn recent(&self, org: OrgId, since: time::OffsetDateTime, limit: u64) -> Result<Vec<Run>> {
        let mut items: Vec<Run> =
            self.s().runs.iter().filter(|r| r.org_id == org && r.queued_at >= since).cloned().collect();
        items.sort_by_key(|r| std::cmp::Reverse(r.queued_at));
        items.truncate(limit as usize);
        Ok(items)
    }

    async fn running_for_flow(&self, flow: FlowId) -> Result<bool> {
        Ok(self.s().runs.iter().any(|r| r.flow_id == flow && r.status == RunStatus::Running))
    }

    async fn log(&self, run: RunId, fence: Option<Fence>, line: &RunLog) -> Result<()> {
        let mut s = self.s();
        let held = fence.is_none_or(|f| s.runs.iter().any(|r| r.fence() == f && r.status == RunStatus::Running));
        if held {
            s.logs.entry(run).or_default().push(line.clone());
        }
        Ok(())
    }

    async fn logs(&self, run: RunId) -> Result<Vec<RunLog>> {
        Ok(self.s().logs.get(&run).cloned().unwrap_or_default())
    }
}

#[async_trait]
impl CursorRepository for InMemoryFlows {
    async fn list(&self, flow: FlowId) -> Result<Vec<Cursor>> {
        Ok(self.s().cursors.iter().filter(|((f, _), _)| *f == flow).map(|(_, c)| c.clone()).collect())
    }

    async fn get(&self, flow: FlowId, entity: &str) -> Result<Option<Cursor>> {
        Ok(self.s().cursors.get(&(flow, entity.to_string())).cloned())
    }

    async fn set(&self, flow: FlowId, cursor: &Cursor, audit: Option<AuditEntry>) -> Result<()> {
        self.s().cursors.insert((flow, cursor.entity.clone()), cursor.clone());
        if let Some(a) = audit {
            self.audit.s().audit.push(a);
        }
        Ok(())
    }

    async fn advance(&self, flow: FlowId, cursor: &Cursor, fence: Fence) -> Result<bool> {
        let mut s = self.s();
        if !s.runs.iter().any(|r| r.held_by(fence)) {
            return Ok(false);
        }
        s.cursors.insert((flow, cursor.entity.clone()), cursor.clone());
        Ok(true)
    }

    async fn clear(&self, flow: FlowId, entity: &str, audit: &AuditEntry) -> Result<()> {
        self.s().cursors.remove(&(flow, entity.to_string()));
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn write_by_user(
        &self,
        flow: FlowId,
        entity: &str,
        cursor: Option<Cursor>,
        mut audit: AuditEntry,
    ) -> Result<()> {
        let mut s = self.s();
        if s.runs.iter().any(|r| r.flow_id == flow && r.status == RunStatus::Running) {
            return Err(Error::run_in_progress());
        }
        let key = (flow, entity.to_string());
        let old = s.cursors.get(&key).and_then(|c| c.mark.stored().1);
        match cursor {
            Some(c) => s.cursors.insert(key, c),
            None => s.cursors.remove(&key),
        };
        drop(s);
        audit.details["old_value"] = old.into();
        self.audit.s().audit.push(audit);
        Ok(())
    }
}

#[async_trait]
impl sluice_domain::sync::ports::QueueRepository for InMemoryFlows {
    async fn due_flows(&self, now: OffsetDateTime) -> Result<Vec<Flow>> {
        Ok(self
            .s()
            .flows
            .iter()
            .filter(|f| f.status == FlowStatus::Active && f.next_run_at.is_some_and(|t| t <= now))
            .cloned()
            .collect())
    }

    async fn queue_once(
        &self,
        marker: &str,
        run: &Run,
        next_run_at: Option<(FlowId, Option<OffsetDateTime>)>,
    ) -> Result<bool> {
        let mut s = self.s();
        if !s.markers.insert(marker.to_string()) {
            return Ok(false);
        }
        s.runs.push(run.clone());
        if let Some((flow, next)) = next_run_at
            && let Some(f) = s.flows.iter_mut().find(|f| f.id == flow)
        {
            f.next_run_at = next;
        }
        Ok(true)
    }

    async fn stale_runs(&self, before: OffsetDateTime) -> Result<Vec<Run>> {
        Ok(self
            .s()
            .runs
            .iter()
            .filter(|r| r.status == RunStatus::Running && r.heartbeat_at.is_some_and(|h| h < before))
            .cloned()
            .collect())
    }

    async fn requeue(&self, fence: Fence, worker: Option<String>) -> Result<bool> {
        let mut s = self.s();
        match s.runs.iter_mut().find(|r| r.held_by(fence) && (worker.is_none() || r.claimed_by == worker)) {
            Some(r) => {
                queue_again(r);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn trace(&self, org: OrgId, trace: uuid::Uuid) -> Result<Vec<Run>> {
        let mut runs: Vec<Run> =
            self.s().runs.iter().filter(|r| r.org_id == org && r.trace_id == trace).cloned().collect();
        runs.sort_by_key(|r| (r.started_at.unwrap_or(r.queued_at), r.id));
        Ok(runs)
    }

    async fn find_run(&self, id: RunId) -> Result<Option<Run>> {
        Ok(self.s().runs.iter().find(|r| r.id == id).cloned())
    }

    async fn retry_later(&self, fence: Fence, not_before: OffsetDateTime, error: &str) -> Result<()> {
        if let Some(r) = self.s().runs.iter_mut().find(|r| r.held_by(fence)) {
            r.status = RunStatus::Queued;
            r.claimed_by = None;
            r.heartbeat_at = None;
            r.not_before = Some(not_before);
            r.error = Some(error.to_string());
            r.attempt += 1;
        }
        Ok(())
    }
}

#[async_trait]
impl sluice_domain::sync::verification::VerificationRepository for InMemoryFlows {
    async fn create_verification(
        &self,
        v: &sluice_domain::sync::verification::Verification,
        audit: &AuditEntry,
    ) -> Result<()> {
        self.s().verifications.push(v.clone());
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn get_verification(
        &self,
        org: OrgId,
        id: sluice_domain::shared::ids::VerificationId,
    ) -> Result<Option<sluice_domain::sync::verification::Verification>> {
        Ok(self.s().verifications.iter().find(|v| v.org_id == org && v.id == id).cloned())
    }

    async fn verifications_of_flow(
        &self,
        org: OrgId,
        flow: FlowId,
        page: PageRequest,
    ) -> Result<Page<sluice_domain::sync::verification::Verification>> {
        let items = self.s().verifications.iter().filter(|v| v.org_id == org && v.flow_id == flow).cloned().collect();
        Ok(page_of(items, page, |v| v.id.as_uuid()))
    }

    async fn claim_verification(
        &self,
        worker: &str,
        now: time::OffsetDateTime,
        until: time::OffsetDateTime,
    ) -> Result<Option<sluice_domain::sync::verification::Verification>> {
        use sluice_domain::sync::verification::VerificationStatus as S;
        let mut s = self.s();
        let found = s
            .verifications
            .iter_mut()
            .find(|v| v.status == S::Queued || (v.status == S::Running && v.claimed_until.is_some_and(|u| u < now)));
        Ok(found.map(|v| {
            v.status = S::Running;
            v.claimed_by = Some(worker.to_string());
            v.claimed_until = Some(until);
            v.clone()
        }))
    }

    async fn renew_verification(
        &self,
        id: sluice_domain::shared::ids::VerificationId,
        worker: &str,
        until: time::OffsetDateTime,
    ) -> Result<bool> {
        let mut s = self.s();
        let v = s.verifications.iter_mut().find(|v| v.id == id && v.claimed_by.as_deref() == Some(worker));
        Ok(v.map(|v| v.claimed_until = Some(until)).is_some())
    }

    async fn save_verification(
        &self,
        v: &sluice_domain::sync::verification::Verification,
        worker: &str,
    ) -> Result<bool> {
        use sluice_domain::sync::verification::VerificationStatus as S;
        let mut s = self.s();
        let held = s
            .verifications
            .iter_mut()
            .find(|x| x.id == v.id && x.status == S::Running && x.claimed_by.as_deref() == Some(worker));
        Ok(held
            .map(|x| {
                *x = Verification { claimed_by: x.claimed_by.clone(), claimed_until: x.claimed_until, ..v.clone() }
            })
            .is_some())
    }

    async fn queue_repair(&self, v: &Verification, run: &Run, worker: &str, audit: &AuditEntry) -> Result<bool> {
        if !self.save_verification(v, worker).await? {
            return Ok(false);
        }
        self.s().runs.push(run.clone());
        self.audit.s().audit.push(audit.clone());
        Ok(true)
    }

    async fn repaired_by(&self, run: RunId) -> Result<Option<Verification>> {
        Ok(self.s().verifications.iter().find(|v| v.repair_run_id == Some(run)).cloned())
    }
}

#[async_trait]
impl sluice_domain::sync::ports::StreamDropRepository for InMemoryFlows {
    async fn record_drop(&self, d: &sluice_domain::sync::flow::StreamDrop) -> Result<()> {
        let mut s = self.s();
        s.drops.retain(|x| !(x.connection_id == d.connection_id && x.stream == d.stream));
        s.drops.push(d.clone());
        Ok(())
    }

    async fn drops_of(
        &self,
        org: OrgId,
        connection: sluice_domain::shared::ids::ConnectionId,
    ) -> Result<Vec<sluice_domain::sync::flow::StreamDrop>> {
        let mut out: Vec<_> =
            self.s().drops.iter().filter(|d| d.org_id == org && d.connection_id == connection).cloned().collect();
        out.sort_by_key(|d| d.created_at);
        Ok(out)
    }

    async fn due_drops(
        &self,
        before: time::OffsetDateTime,
        limit: u64,
    ) -> Result<Vec<sluice_domain::sync::flow::StreamDrop>> {
        let mut out: Vec<_> = self.s().drops.iter().filter(|d| d.tried_at < before).cloned().collect();
        out.sort_by_key(|d| d.tried_at);
        out.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(out)
    }

    async fn forget_drop(&self, id: uuid::Uuid) -> Result<()> {
        self.s().drops.retain(|d| d.id != id);
        Ok(())
    }
}

/// A run queued again for its next attempt (what `requeue` and a take-over
/// do): the attempt that held it holds it no more.
fn queue_again(r: &mut Run) {
    r.status = RunStatus::Queued;
    r.claimed_by = None;
    r.heartbeat_at = None;
    r.attempt += 1;
}
