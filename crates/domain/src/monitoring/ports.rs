//! The ports of monitoring.

use super::activity::ActivityEvent;
use super::dashboard::DashboardCounts;
use super::delivery::{AttemptResult, Delivery, Outgoing};
use super::rule::NotificationRule;
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::OrgId;
use crate::shared::ids::RuleId;
use crate::shared::page::{Page, PageRequest};
use async_trait::async_trait;
use time::OffsetDateTime;

/// The activity feed's store.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ActivityRepository: Send + Sync {
    /// Records `event` and, in the same transaction, queues a delivery
    /// for every enabled rule of its organization that
    /// [matches](NotificationRule::matches) it (the outbox).
    async fn record_event(&self, event: &ActivityEvent) -> Result<()>;
    /// Records `event` and queues its delivery to `rule` alone, whatever
    /// event the rule names and whether it is enabled: a test of the rule.
    async fn record_test(&self, event: &ActivityEvent, rule: crate::shared::ids::RuleId) -> Result<()>;
    /// The organization's events, newest first, at or after `since`.
    async fn events(&self, org: OrgId, since: Option<OffsetDateTime>, limit: u64) -> Result<Vec<ActivityEvent>>;
}

/// Whether a flow is one of an organization's: a rule's filter must name
/// one. (Flows belong to sync, above this context; the facade adapts.)
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait FlowDirectory: Send + Sync {
    async fn flow_exists(&self, org: OrgId, flow: crate::shared::ids::FlowId) -> Result<bool>;
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
    /// Flow `flow`'s change stream: its source keeps `retained_bytes` of log
    /// for it, and its destination holds every change the source had at
    /// `caught_up` (the lag is the time since; `None`: as it was).
    fn cdc_stream(&self, _flow: &str, _retained_bytes: u64, _caught_up: Option<time::OffsetDateTime>) {}
}

/// Counts nothing (embedders and tests without an operator).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn run_finished(&self, _status: &str, _rows: u64, _seconds: f64) {}
    fn gateway_validation(&self, _outcome: &'static str) {}
    fn webhook_delivery(&self, _outcome: &'static str) {}
}

/// Where notification rules and their deliveries are kept. Every mutating
/// method takes the [`AuditEntry`] that records it.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait RuleRepository: Send + Sync {
    async fn create(&self, rule: &NotificationRule, audit: &AuditEntry) -> Result<()>;
    async fn get(&self, org: OrgId, id: RuleId) -> Result<Option<NotificationRule>>;
    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<NotificationRule>>;
    /// # Errors
    /// `NotFound` when the rule is gone.
    async fn update(&self, rule: &NotificationRule, audit: &AuditEntry) -> Result<()>;
    /// Deletes the rule and its deliveries. `NotFound` when there is none.
    async fn delete(&self, org: OrgId, id: RuleId, audit: &AuditEntry) -> Result<()>;
    /// The rule's deliveries, newest first.
    async fn deliveries(&self, org: OrgId, rule: RuleId, page: PageRequest) -> Result<Page<Delivery>>;
}

/// The outbox of deliveries, claimed by workers like runs: a delivery is
/// sent by one worker at a time.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait DeliveryQueue: Send + Sync {
    /// Claims up to `limit` pending deliveries due at `now` (unclaimed, or
    /// whose claim ran out) for `worker` until `until`; answers what each
    /// attempt sends.
    async fn claim(
        &self,
        worker: &str,
        now: OffsetDateTime,
        until: OffsetDateTime,
        limit: u64,
    ) -> Result<Vec<Outgoing>>;
    /// Stores `delivery` after an attempt and releases it, while `worker`
    /// still holds it; false (nothing stored) when it does not.
    async fn finish(&self, delivery: &Delivery, worker: &str) -> Result<bool>;
}

/// Sends one delivery attempt (an HTTP POST of a JSON body).
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait WebhookSender: Send + Sync {
    async fn send(&self, url: &str, headers: &[(String, String)], body: &str) -> AttemptResult;
}
