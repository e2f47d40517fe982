//! The ports of monitoring.

use super::activity::ActivityEvent;
use crate::Result;
use crate::shared::ids::OrgId;
use async_trait::async_trait;
use time::OffsetDateTime;

/// The activity feed's store.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ActivityRepository: Send + Sync {
    async fn record_event(&self, event: &ActivityEvent) -> Result<()>;
    /// The organization's events, newest first, at or after `since`.
    async fn events(&self, org: OrgId, since: Option<OffsetDateTime>, limit: u64) -> Result<Vec<ActivityEvent>>;
}

/// Liveness of the metadata store.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait HealthCheck: Send + Sync {
    async fn ping(&self) -> Result<()>;
}
