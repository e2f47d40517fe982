//! The ports of billing: where subscriptions and the validation meter are
//! kept, and the payment provider.

use super::plan::{Metered, Plan, Subscription};
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::OrgId;
use async_trait::async_trait;

/// A change of a subscription, computed from the stored one.
pub type Update<'a> = &'a (dyn Fn(Subscription) -> Subscription + Send + Sync);
/// The audit entry of a change, from the subscription before and after.
pub type Audit<'a> = &'a (dyn Fn(&Subscription, &Subscription) -> AuditEntry + Send + Sync);

/// Where organizations' subscriptions and their validation meter are kept.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait BillingRepository: Send + Sync {
    /// The subscription of `org`; `None` when there is no such organization.
    async fn subscription(&self, org: OrgId) -> Result<Option<Subscription>>;

    /// The organization whose payment-provider customer is `customer`.
    async fn org_of_customer(&self, customer: &str) -> Result<Option<OrgId>>;

    /// Stores `customer` as the payment-provider customer of `org` unless it
    /// has one already; answers the one stored (another request may have
    /// stored its own first).
    async fn set_customer(&self, org: OrgId, customer: &str) -> Result<String>;

    /// Records the provider's event `event_id` and, in the same transaction,
    /// applies `update` to the subscription of `org` (read and written
    /// under the organization's lock) with the entry `audit` makes. Answers
    /// false, changing nothing, when the event was recorded before: each
    /// event is processed once, also when deliveries race.
    async fn apply_event<'a>(
        &self,
        event_id: &str,
        event_type: &str,
        org: OrgId,
        update: Update<'a>,
        audit: Audit<'a>,
    ) -> Result<bool>;

    /// Counts one gateway validation of `org` in `month` (`YYYY-MM`) when
    /// fewer than `limit` were counted (any number when `None`), answering
    /// the month's count with it under a limit; `Refused` when the quota is
    /// used up. Atomic across processes: no two validations get one count.
    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<Metered>;

    /// Gateway validations of `org` counted in `month`.
    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64>;
}

/// A checkout for a paid plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutRequest {
    pub org: OrgId,
    pub plan: Plan,
    /// The provider's price of the plan.
    pub price: String,
    pub customer: String,
    pub success_url: String,
    pub cancel_url: String,
}

/// A checkout session to send the user to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutSession {
    pub url: String,
    pub id: String,
}

/// The payment provider (Stripe).
///
/// # Errors
/// Every method: `Unavailable` (`payment_provider_failed`) when the
/// provider does not answer or refuses, with its reason.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait PaymentProvider: Send + Sync {
    /// Creates the provider's customer of `org` (named `name`); the same
    /// organization gets the same customer when asked again at once.
    async fn create_customer(&self, org: OrgId, name: &str) -> Result<String>;
    async fn checkout_session(&self, request: &CheckoutRequest) -> Result<CheckoutSession>;
    /// A customer-portal session of `customer`; answers its URL.
    async fn portal_session(&self, customer: &str, return_url: &str) -> Result<String>;
}
