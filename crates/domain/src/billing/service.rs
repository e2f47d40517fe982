//! Billing owns what an organization pays for: its plan and subscription
//! with the payment provider (Stripe: checkout, the customer portal, and
//! the webhooks that change a subscription, each processed once), and the
//! meter of gateway validations against the plan's monthly quota.

use super::plan::{Metered, Plan, Subscription, next_month, seconds_to_next_month, threshold_reached, usage_month};
use super::ports::{BillingRepository, CheckoutRequest, CheckoutSession, PaymentProvider};
use super::provider::{Prices, parse_event, verify_signature};
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::audit::{Actor, ActorKind, AuditEntry};
use crate::shared::cache::Ttl;
use crate::shared::clock::Clock;
use crate::shared::error::Code;
use crate::shared::ids::OrgId;
use crate::shared::secret::Secret;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;
use time::OffsetDateTime;

/// How billing reaches the payment provider; without a provider (no
/// secret key configured) the billing endpoints answer 503 and every
/// organization stays on its plan.
#[derive(Clone, Default)]
pub struct BillingConfig {
    pub provider: Option<Arc<dyn PaymentProvider>>,
    /// Verifies the provider's webhooks.
    pub webhook_secret: Option<Secret>,
    pub prices: Prices,
    /// Where the provider sends users back (`SLUICE_PUBLIC_URL`).
    pub public_url: String,
}

/// The use cases of billing.
#[derive(Clone)]
pub struct BillingService {
    pub(crate) identity: IdentityService,
    pub(crate) monitoring: crate::monitoring::service::MonitoringService,
    pub(crate) billing: Arc<dyn BillingRepository>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Plans by organization, read on every gateway call (see
    /// [`crate::shared::cache`]).
    pub(crate) plans: Arc<Ttl<OrgId, Plan>>,
    pub(crate) config: BillingConfig,
}

/// An organization's billing, as `…/billing/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillingStatus {
    pub subscription: Subscription,
    /// Gateway validations counted this month, and the plan's limit
    /// (`None`: unlimited).
    pub validations_used: i64,
    pub validations_limit: Option<i64>,
    /// When the validation count starts again (the next month, UTC).
    pub validations_period_end: OffsetDateTime,
}

/// What a webhook delivery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The event changed a subscription.
    Applied,
    /// The event was processed before: nothing changed.
    Duplicate,
    /// An event billing does not act on, or for no organization it knows.
    Ignored,
}

fn not_configured() -> Error {
    Error::Unavailable {
        code: Code::BillingNotConfigured,
        message: "billing is not configured on this server (SLUICE_STRIPE_SECRET_KEY)".into(),
    }
}

/// The JSON form of a subscription, as the audit log shows it.
pub fn subscription_json(s: &Subscription) -> Value {
    json!({
        "plan": s.plan.as_str(),
        "status": s.status.as_str(),
        "current_period_end": s.current_period_end.map(crate::shared::record::format_timestamp),
        "customer_id": s.customer_id,
    })
}

/// A URL the provider may send a user to: absolute http(s).
fn check_return_url(field: &str, url: &str) -> Result<String> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok { Ok(url.to_string()) } else { Err(Error::invalid(field, "must be an absolute http(s) URL")) }
}

impl BillingService {
    /// The plan of `org`, as its members see it.
    pub async fn plan(&self, p: &Principal, org: OrgId) -> Result<Plan> {
        self.identity.access(p, org, Permission::Read).await?;
        self.plan_of(org).await
    }

    async fn plan_of(&self, org: OrgId) -> Result<Plan> {
        self.plans
            .get_or_load(&org, self.clock.now(), async { Ok::<_, Error>(self.subscription_of(org).await?.plan) })
            .await
    }

    async fn subscription_of(&self, org: OrgId) -> Result<Subscription> {
        self.billing.subscription(org).await?.ok_or(Error::not_found("organization"))
    }

    fn provider(&self) -> Result<&dyn PaymentProvider> {
        self.config.provider.as_deref().ok_or_else(not_configured)
    }

    /// The organization's plan, subscription and validations this month.
    pub async fn status(&self, p: &Principal, org: OrgId) -> Result<BillingStatus> {
        self.identity.access(p, org, Permission::Read).await?;
        self.provider()?;
        self.usage(org).await
    }

    /// The plan and the validations of this month, as the dashboard shows
    /// them: readable by every member, with or without a payment provider.
    pub async fn validations(&self, p: &Principal, org: OrgId) -> Result<BillingStatus> {
        self.identity.access(p, org, Permission::Read).await?;
        self.usage(org).await
    }

    async fn usage(&self, org: OrgId) -> Result<BillingStatus> {
        let now = self.clock.now();
        let subscription = self.subscription_of(org).await?;
        let validations_used = self.billing.validations_used(org, &usage_month(now)).await?;
        Ok(BillingStatus {
            validations_limit: subscription.plan.monthly_validations(),
            subscription,
            validations_used,
            validations_period_end: next_month(now),
        })
    }

    /// A checkout session for a paid `plan` (Admin); the organization's
    /// provider customer is created on first use and reused after.
    pub async fn checkout(
        &self,
        p: &Principal,
        org: OrgId,
        plan: &str,
        success_url: Option<&str>,
        cancel_url: Option<&str>,
    ) -> Result<CheckoutSession> {
        self.identity.access(p, org, Permission::Administer).await?;
        let provider = self.provider()?;
        let plan = match Plan::parse(plan) {
            Ok(p) if p.paid() => p,
            _ => return Err(Error::invalid("plan", "must be pro or enterprise")),
        };
        let Some(price) = self.config.prices.of(plan) else {
            return Err(Error::Unavailable {
                code: Code::BillingNotConfigured,
                message: format!("no price is configured for the {} plan", plan.as_str()),
            });
        };
        let base = self.config.public_url.trim_end_matches('/');
        let success_url = match success_url {
            Some(u) => check_return_url("success_url", u)?,
            None => format!("{base}/billing?checkout=success"),
        };
        let cancel_url = match cancel_url {
            Some(u) => check_return_url("cancel_url", u)?,
            None => format!("{base}/billing?checkout=canceled"),
        };
        let customer = self.customer(p, org).await?;
        let request = CheckoutRequest { org, plan, price: price.to_string(), customer, success_url, cancel_url };
        provider.checkout_session(&request).await
    }

    /// A customer-portal session (Admin); answers its URL.
    pub async fn portal(&self, p: &Principal, org: OrgId, return_url: Option<&str>) -> Result<String> {
        self.identity.access(p, org, Permission::Administer).await?;
        let provider = self.provider()?;
        let return_url = match return_url {
            Some(u) => check_return_url("return_url", u)?,
            None => format!("{}/billing", self.config.public_url.trim_end_matches('/')),
        };
        let customer = self.customer(p, org).await?;
        provider.portal_session(&customer, &return_url).await
    }

    /// The organization's provider customer, created on first use.
    async fn customer(&self, p: &Principal, org: OrgId) -> Result<String> {
        if let Some(c) = self.subscription_of(org).await?.customer_id {
            return Ok(c);
        }
        let name = self.identity.get_organization(p, org).await?.name;
        let created = self.provider()?.create_customer(org, &name).await?;
        self.billing.set_customer(org, &created).await
    }

    /// Processes one webhook delivery of the payment provider: the raw
    /// body, verified against `signature` (the `Stripe-Signature` header).
    ///
    /// # Errors
    /// `BadRequest` (`invalid_signature`) for a missing, wrong or stale
    /// signature and (`malformed_json`) for a body that is no event;
    /// nothing changes then. `Unavailable` without a webhook secret.
    pub async fn webhook(&self, payload: &[u8], signature: Option<&str>) -> Result<WebhookOutcome> {
        let secret = self.config.webhook_secret.as_ref().ok_or_else(not_configured)?;
        let now = self.clock.now();
        verify_signature(payload, signature.unwrap_or_default(), secret.expose(), now).map_err(|e| {
            Error::BadRequest { code: Code::InvalidSignature, message: e.message().into(), details: json!({}) }
        })?;
        let event = parse_event(payload, &self.config.prices).ok_or_else(|| Error::BadRequest {
            code: Code::MalformedJson,
            message: "the body is not a payment-provider event".into(),
            details: json!({}),
        })?;
        let Some(change) = event.change.clone() else {
            return Ok(WebhookOutcome::Ignored);
        };
        let org = match (event.org, event.customer.as_deref()) {
            (Some(org), _) => Some(org),
            (None, Some(customer)) => self.billing.org_of_customer(customer).await?,
            (None, None) => None,
        };
        let Some(org) = org else {
            tracing::warn!(event = %event.id, kind = %event.event_type, "a billing event for no known organization");
            return Ok(WebhookOutcome::Ignored);
        };
        let customer = event.customer.clone();
        let update = move |s: Subscription| change.apply(s, customer.as_deref());
        let actor = Actor { kind: ActorKind::System, id: Some(event.id.clone()), name: Some("stripe".into()) };
        let audit = |before: &Subscription, after: &Subscription| {
            let mut e =
                AuditEntry::new(Some(org), actor.clone(), "billing.subscription_updated", "organization", org, now)
                    .with_change(subscription_json(before), subscription_json(after));
            e.details["event_id"] = json!(event.id);
            e.details["event_type"] = json!(event.event_type);
            e
        };
        let applied = match self.billing.apply_event(&event.id, &event.event_type, org, &update, &audit).await {
            Ok(applied) => applied,
            // An organization that does not exist (any more): acknowledged,
            // or the provider retries it for days.
            Err(Error::NotFound { .. }) => {
                tracing::warn!(event = %event.id, org = %org, "a billing event for an organization that does not exist");
                return Ok(WebhookOutcome::Ignored);
            }
            Err(e) => return Err(e),
        };
        self.plans.remove_where(|o, _| *o == org);
        Ok(if applied { WebhookOutcome::Applied } else { WebhookOutcome::Duplicate })
    }

    /// Records `quota.threshold`: the validation counted as `used` reached
    /// `percent` of the month's quota. Never fails the validation.
    async fn quota_reached(&self, org: OrgId, plan: Plan, month: &str, used: i64, limit: i64, percent: i64) {
        let event = crate::monitoring::activity::ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: org,
            event_type: crate::monitoring::activity::EventType::QuotaThreshold,
            severity: if percent >= 100 { "error" } else { "warning" }.into(),
            message: format!("{percent}% of the {} plan's {limit} monthly validations are used", plan.as_str()),
            data: json!({"percent": percent, "used": used, "limit": limit, "plan": plan.as_str(), "month": month}),
            created_at: self.clock.now(),
        };
        if let Err(e) = self.monitoring.record(&event).await {
            tracing::warn!(org = %org, error = %e, "recording quota.threshold failed");
        }
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
        let month = usage_month(now);
        match self.billing.consume_validation(org, &month, limit).await? {
            Metered::Counted { used } => {
                if let (Some(used), Some(limit)) = (used, limit)
                    && let Some(percent) = threshold_reached(used, limit)
                {
                    self.quota_reached(org, plan, &month, used, limit, percent).await;
                }
                return Ok(());
            }
            Metered::Refused => {}
        }
        Err(Error::Exhausted {
            code: Code::QuotaExceeded,
            message: format!(
                "the monthly quota of {} validations of the {} plan is used up",
                limit.unwrap_or_default(),
                plan.as_str()
            ),
            retry_after: seconds_to_next_month(now),
        })
    }
}
