//! The ports of billing.

use super::plan::Plan;
use crate::Result;
use crate::shared::ids::OrgId;
use async_trait::async_trait;

/// Where organizations' plans and their validation meter are kept.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait BillingRepository: Send + Sync {
    /// The plan of `org`; `None` when there is no such organization.
    async fn plan_of(&self, org: OrgId) -> Result<Option<Plan>>;

    /// Counts one gateway validation of `org` in `month` (`YYYY-MM`) when
    /// fewer than `limit` were counted (any number when `None`); false when
    /// the quota is used up. Atomic across processes.
    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool>;

    /// Gateway validations of `org` counted in `month`.
    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64>;
}
