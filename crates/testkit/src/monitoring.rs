//! The activity feed in memory.

use super::*;

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for InMemoryFlows {
    async fn record_event(&self, e: &sluice_domain::monitoring::activity::ActivityEvent) -> Result<()> {
        self.s().events.push(e.clone());
        Ok(())
    }

    async fn events(
        &self,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<sluice_domain::monitoring::activity::ActivityEvent>> {
        let mut v: Vec<_> = self
            .s()
            .events
            .iter()
            .filter(|e| e.org_id == org && since.is_none_or(|t| e.created_at >= t))
            .cloned()
            .collect();
        v.reverse();
        v.truncate(limit as usize);
        Ok(v)
    }
}

/// The dashboard's counts over the in-memory flows, runs and connections.
#[derive(Clone)]
pub struct InMemoryDashboard {
    pub flows: InMemoryFlows,
    pub catalog: InMemoryCatalog,
}

#[async_trait]
impl sluice_domain::monitoring::ports::DashboardRepository for InMemoryDashboard {
    async fn counts(
        &self,
        org: OrgId,
        since: OffsetDateTime,
    ) -> Result<sluice_domain::monitoring::dashboard::DashboardCounts> {
        use sluice_domain::connect::connection::ConnectionStatus;
        use sluice_domain::sync::flow::{FlowStatus, RunStatus};
        let f = self.flows.s();
        let flows = |s: FlowStatus| f.flows.iter().filter(|x| x.org_id == org && x.status == s).count() as u64;
        let recent: Vec<_> = f.runs.iter().filter(|r| r.org_id == org && r.queued_at >= since).collect();
        let runs = |s: &[RunStatus]| recent.iter().filter(|r| s.contains(&r.status)).count() as u64;
        let rows_synced = f
            .runs
            .iter()
            .filter(|r| r.org_id == org && r.finished_at.is_some_and(|t| t >= since))
            .flat_map(|r| r.entities.iter().map(|e| e.rows_written))
            .sum();
        let c = self.catalog.s();
        let conns =
            |s: ConnectionStatus| c.connections.iter().filter(|x| x.org_id == org && x.status == s).count() as u64;
        Ok(sluice_domain::monitoring::dashboard::DashboardCounts {
            flows_active: flows(FlowStatus::Active),
            flows_paused: flows(FlowStatus::Paused),
            runs_succeeded: runs(&[RunStatus::Succeeded]),
            runs_failed: runs(&[RunStatus::Failed, RunStatus::DriftDetected]),
            runs_running: runs(&[RunStatus::Running]),
            runs_queued: runs(&[RunStatus::Queued]),
            rows_synced,
            connections_healthy: conns(ConnectionStatus::Healthy),
            connections_failing: conns(ConnectionStatus::Failing),
            connections_untested: conns(ConnectionStatus::Untested),
        })
    }

    async fn queue_depth(&self) -> Result<u64> {
        let f = self.flows.s();
        Ok(f.runs.iter().filter(|r| r.status == sluice_domain::sync::flow::RunStatus::Queued).count() as u64)
    }
}
