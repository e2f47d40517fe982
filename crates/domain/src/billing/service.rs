//! Billing owns what an organization pays for: its plan and the plan's
//! limits, and the meter of gateway validations against the monthly quota.
//! Stripe checkout, the customer portal and webhooks arrive here next.

use super::plan::{Plan, seconds_to_next_month, usage_month};
use super::ports::BillingRepository;
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::cache::Ttl;
use crate::shared::clock::Clock;
use crate::shared::ids::OrgId;
use crate::{Error, Result};
use std::sync::Arc;

/// The use cases of billing.
#[derive(Clone)]
pub struct BillingService {
    pub(crate) identity: IdentityService,
    pub(crate) billing: Arc<dyn BillingRepository>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Plans by organization, read on every gateway call (see
    /// [`crate::shared::cache`]).
    pub(crate) plans: Arc<Ttl<OrgId, Plan>>,
}

impl BillingService {
    /// The plan of `org`, as its members see it.
    pub async fn plan(&self, p: &Principal, org: OrgId) -> Result<Plan> {
        self.identity.access(p, org, Permission::Read).await?;
        self.plan_of(org).await
    }

    async fn plan_of(&self, org: OrgId) -> Result<Plan> {
        self.plans
            .get_or_load(&org, self.clock.now(), async {
                self.billing.plan_of(org).await?.ok_or(Error::not_found("organization"))
            })
            .await
    }

    /// Counts one gateway validation of `org` against its plan's monthly
    /// quota (for the gateway, which has checked access).
    ///
    /// # Errors
    /// `Exhausted` (`quota_exceeded`, retry when the month rolls over) when
    /// the quota is used up.
    pub(crate) async fn consume_validation(&self, org: OrgId) -> Result<()> {
        let now = self.clock.now();
        let plan = self.plan_of(org).await?;
        let limit = plan.monthly_validations();
        if self.billing.consume_validation(org, &usage_month(now), limit).await? {
            return Ok(());
        }
        Err(Error::Exhausted {
            code: crate::shared::error::code::QUOTA_EXCEEDED,
            message: format!(
                "the monthly quota of {} validations of the {} plan is used up",
                limit.unwrap_or_default(),
                plan.as_str()
            ),
            retry_after: seconds_to_next_month(now),
        })
    }
}
