//! Monitoring owns what an operator and an organization watch: the
//! activity feed of system events (run outcomes, schema drift) and the
//! health of the metadata store. Notification rules and their deliveries
//! arrive here next.

use super::activity::ActivityEvent;
use super::ports::{ActivityRepository, HealthCheck};
use crate::Result;
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::ids::OrgId;
use std::sync::Arc;
use time::OffsetDateTime;

/// The use cases of monitoring.
#[derive(Clone)]
pub struct MonitoringService {
    pub(crate) identity: IdentityService,
    pub(crate) activity: Arc<dyn ActivityRepository>,
    pub(crate) health: Arc<dyn HealthCheck>,
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

    /// Records a system event (for the contexts above: run outcomes, drift).
    pub(crate) async fn record(&self, event: &ActivityEvent) -> Result<()> {
        self.activity.record_event(event).await
    }

    /// Whether the metadata store answers.
    pub async fn health(&self) -> Result<()> {
        self.health.ping().await
    }
}
