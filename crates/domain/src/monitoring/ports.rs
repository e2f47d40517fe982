//! The ports of monitoring.

use super::activity::ActivityEvent;
use super::dashboard::DashboardCounts;
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

/// The counts the dashboard and the operator's gauges read.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait DashboardRepository: Send + Sync {
    /// The organization's counts, runs queued at or after `since`.
    async fn counts(&self, org: OrgId, since: OffsetDateTime) -> Result<DashboardCounts>;
    /// Runs waiting for a worker, in every organization.
    async fn queue_depth(&self) -> Result<u64>;
}

/// What an operator counts (Prometheus, in the service). Calls are cheap
/// and never fail.
pub trait Metrics: Send + Sync {
    /// A run ended with `status` after `seconds`, having written `rows`.
    fn run_finished(&self, status: &str, rows: u64, seconds: f64);
    /// The gateway answered one validation: `valid`, `invalid`, `no_json`
    /// or `quota_exceeded`.
    fn gateway_validation(&self, outcome: &'static str);
    /// A notification delivery attempt ended: `delivered`, `failed` or `refused`.
    fn webhook_delivery(&self, outcome: &'static str);
}

/// Counts nothing (embedders and tests without an operator).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn run_finished(&self, _status: &str, _rows: u64, _seconds: f64) {}
    fn gateway_validation(&self, _outcome: &'static str) {}
    fn webhook_delivery(&self, _outcome: &'static str) {}
}
