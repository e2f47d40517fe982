//! Monitoring owns what an operator and an organization watch: the
//! activity feed of system events (run outcomes, schema drift), the
//! dashboard's counts, the operator's metrics and the health of the
//! metadata store. Notification rules and their deliveries arrive here
//! next.

use super::activity::ActivityEvent;
use super::dashboard::DashboardCounts;
use super::ports::{ActivityRepository, DashboardRepository, HealthCheck, Metrics};
use crate::Result;
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::clock::Clock;
use crate::shared::ids::OrgId;
use std::sync::Arc;
use time::OffsetDateTime;

/// The window of the dashboard's run counts.
pub const DASHBOARD_WINDOW: time::Duration = time::Duration::hours(24);

/// The use cases of monitoring.
#[derive(Clone)]
pub struct MonitoringService {
    pub(crate) identity: IdentityService,
    pub(crate) activity: Arc<dyn ActivityRepository>,
    pub(crate) health: Arc<dyn HealthCheck>,
    pub(crate) dashboard: Arc<dyn DashboardRepository>,
    pub(crate) metrics: Arc<dyn Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl MonitoringService {
    /// The organization's activity events, newest first, at or after `since`.
    pub async fn activity(
        &self,
        p: &Principal,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<ActivityEvent>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.activity.events(org, since, limit).await
    }

    /// The organization's flows, runs and rows of the last
    /// [`DASHBOARD_WINDOW`], and connections, as counts.
    pub async fn dashboard(&self, p: &Principal, org: OrgId) -> Result<DashboardCounts> {
        self.identity.access(p, org, Permission::Read).await?;
        self.dashboard.counts(org, self.clock.now() - DASHBOARD_WINDOW).await
    }

    /// Runs waiting for a worker, in every organization (the operator's gauge).
    pub async fn queue_depth(&self) -> Result<u64> {
        self.dashboard.queue_depth().await
    }

    /// Records a system event (for the contexts above: run outcomes, drift).
    pub(crate) async fn record(&self, event: &ActivityEvent) -> Result<()> {
        self.activity.record_event(event).await
    }

    /// The operator's counters, for the contexts above.
    pub(crate) fn metrics(&self) -> &dyn Metrics {
        self.metrics.as_ref()
    }

    /// Whether the metadata store answers.
    pub async fn health(&self) -> Result<()> {
        self.health.ping().await
    }
}
