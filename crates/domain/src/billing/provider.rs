//! The payment provider's webhooks (Stripe): the `Stripe-Signature` check
//! and the events that change a subscription, read into what they change.
//! Pure: the service verifies, reads, and hands the change to the store.

use super::plan::{Plan, Subscription, SubscriptionStatus};
use crate::shared::ids::OrgId;
use crate::shared::secret::constant_time_eq;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use time::OffsetDateTime;

/// How far a signed timestamp may be from now.
pub const TOLERANCE: time::Duration = time::Duration::seconds(300);

/// Why a webhook's signature is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// No `t=` or no `v1=` in the header.
    Malformed,
    /// No `v1` value matches the payload.
    Mismatch,
    /// The timestamp is more than [`TOLERANCE`] away from now.
    Stale,
}

impl SignatureError {
    pub fn message(self) -> &'static str {
        match self {
            SignatureError::Malformed => "the Stripe-Signature header is missing or malformed",
            SignatureError::Mismatch => "the Stripe-Signature does not match the payload",
            SignatureError::Stale => "the Stripe-Signature timestamp is outside the tolerance",
        }
    }
}

/// Checks `header` (`t=<unix>,v1=<hex>[,v1=<hex>…]`) against `payload`
/// signed with `secret`: HMAC-SHA256 of `"{t}.{payload}"`, any `v1` value
/// may match (several during a secret's rotation), compared in constant
/// time; the timestamp must lie within [`TOLERANCE`] of `now`.
///
/// # Errors
/// The reason the signature is refused.
pub fn verify_signature(payload: &[u8], header: &str, secret: &str, now: OffsetDateTime) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = t.parse::<i64>().ok(),
            Some(("v1", v)) => signatures.push(v),
            _ => {}
        }
    }
    let (Some(t), false) = (timestamp, signatures.is_empty()) else {
        return Err(SignatureError::Malformed);
    };
    let expected = sign(payload, t, secret);
    if !signatures.iter().any(|s| constant_time_eq(s.as_bytes(), expected.as_bytes())) {
        return Err(SignatureError::Mismatch);
    }
    let at = OffsetDateTime::from_unix_timestamp(t).map_err(|_| SignatureError::Stale)?;
    if (now - at).abs() > TOLERANCE {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

/// The `v1` signature of `payload` at unix time `t` (lowercase hex).
pub fn sign(payload: &[u8], t: i64, secret: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The price ids of the paid plans, to tell which plan a subscription is on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prices {
    pub pro: Option<String>,
    pub enterprise: Option<String>,
}

impl Prices {
    /// The price of a paid `plan`, when configured.
    pub fn of(&self, plan: Plan) -> Option<&str> {
        match plan {
            Plan::Free => None,
            Plan::Pro => self.pro.as_deref(),
            Plan::Enterprise => self.enterprise.as_deref(),
        }
    }

    fn plan(&self, price: &str) -> Option<Plan> {
        [Plan::Pro, Plan::Enterprise].into_iter().find(|p| self.of(*p) == Some(price))
    }
}

/// An event of the payment provider, as far as billing reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEvent {
    pub id: String,
    pub event_type: String,
    /// The organization the event names (`client_reference_id` or
    /// `metadata[organization_id]`), if any.
    pub org: Option<OrgId>,
    /// The provider's customer the event is about, if any.
    pub customer: Option<String>,
    /// What the event changes; `None` for events billing ignores.
    pub change: Option<Change>,
}

/// What an event changes in a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `checkout.session.completed`: the plan bought, now active.
    CheckedOut { plan: Option<Plan> },
    /// `customer.subscription.updated`.
    Updated { status: Option<SubscriptionStatus>, current_period_end: Option<OffsetDateTime>, plan: Option<Plan> },
    /// `customer.subscription.deleted`: back to the free plan.
    Deleted,
    /// `invoice.payment_failed`: the subscription is past due.
    PaymentFailed,
}

/// Reads an event body. `None` when it is not an event (no `id` or
/// `type`); unknown types read with no change.
pub fn parse_event(payload: &[u8], prices: &Prices) -> Option<ProviderEvent> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    let id = v.get("id")?.as_str()?.to_string();
    let event_type = v.get("type")?.as_str()?.to_string();
    let object = v.pointer("/data/object").cloned().unwrap_or(Value::Null);
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
    let org = text("/client_reference_id")
        .or_else(|| text("/metadata/organization_id"))
        .and_then(|s| s.parse::<OrgId>().ok());
    let customer = text("/customer").map(str::to_string);
    let metadata_plan = text("/metadata/plan").and_then(|p| Plan::parse(p).ok()).filter(|p| p.paid());
    let change = match event_type.as_str() {
        "checkout.session.completed" => Some(Change::CheckedOut { plan: metadata_plan }),
        "customer.subscription.updated" => {
            let item = object.pointer("/items/data/0");
            let price = item.and_then(|i| i.pointer("/price/id")).and_then(Value::as_str);
            // Newer API versions keep the period on the item.
            let period_end = object
                .get("current_period_end")
                .or_else(|| item.and_then(|i| i.get("current_period_end")))
                .and_then(Value::as_i64)
                .and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok());
            Some(Change::Updated {
                status: text("/status").and_then(SubscriptionStatus::parse),
                current_period_end: period_end,
                // A plan changed in the portal shows in the price, not the metadata.
                plan: price.and_then(|p| prices.plan(p)).or(metadata_plan),
            })
        }
        "customer.subscription.deleted" => Some(Change::Deleted),
        "invoice.payment_failed" => Some(Change::PaymentFailed),
        _ => None,
    };
    Some(ProviderEvent { id, event_type, org, customer, change })
}

impl Change {
    /// `sub` after the change; `customer` is the event's.
    pub fn apply(&self, mut sub: Subscription, customer: Option<&str>) -> Subscription {
        if let Some(c) = customer
            && sub.customer_id.is_none()
        {
            sub.customer_id = Some(c.to_string());
        }
        match self {
            Change::CheckedOut { plan } => {
                if let Some(p) = plan {
                    sub.plan = *p;
                }
                sub.status = SubscriptionStatus::Active;
            }
            Change::Updated { status, current_period_end, plan } => {
                if let Some(s) = status {
                    sub.status = *s;
                }
                if current_period_end.is_some() {
                    sub.current_period_end = *current_period_end;
                }
                if let Some(p) = plan {
                    sub.plan = *p;
                }
            }
            Change::Deleted => {
                sub.plan = Plan::Free;
                sub.status = SubscriptionStatus::Canceled;
                sub.current_period_end = None;
            }
            Change::PaymentFailed => sub.status = SubscriptionStatus::PastDue,
        }
        sub
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-23 12:00 UTC);

    #[test]
    fn signatures_verify_with_any_v1_within_the_tolerance() {
        let body = br#"{"id":"evt_1"}"#;
        let t = NOW.unix_timestamp();
        let good = sign(body, t, "whsec_test");
        let ok = format!("t={t},v1=deadbeef,v1={good}");
        assert_eq!(verify_signature(body, &ok, "whsec_test", NOW), Ok(()));
        assert_eq!(verify_signature(body, &ok, "whsec_other", NOW), Err(SignatureError::Mismatch));
        assert_eq!(verify_signature(b"{}", &ok, "whsec_test", NOW), Err(SignatureError::Mismatch));
        assert_eq!(verify_signature(body, &format!("v1={good}"), "whsec_test", NOW), Err(SignatureError::Malformed));
        assert_eq!(verify_signature(body, &format!("t={t}"), "whsec_test", NOW), Err(SignatureError::Malformed));
        let late = NOW + time::Duration::seconds(301);
        assert_eq!(verify_signature(body, &ok, "whsec_test", late), Err(SignatureError::Stale));
        assert_eq!(verify_signature(body, &ok, "whsec_test", NOW + time::Duration::seconds(299)), Ok(()));
    }

    #[test]
    fn the_signature_matches_stripes_scheme() {
        // `printf '1614556800.payload' | openssl dgst -sha256 -hmac secret`
        assert_eq!(
            sign(b"payload", 1_614_556_800, "secret"),
            "84abc9c81259248d2566a031edaaeb2f6667f2ffeadc429f8788f248cef77590"
        );
    }

    #[test]
    fn events_read_into_their_changes() {
        let org = OrgId::new();
        let prices = Prices { pro: Some("price_pro".into()), enterprise: Some("price_ent".into()) };
        let ev = |v: Value| parse_event(v.to_string().as_bytes(), &prices).unwrap();
        let checkout = ev(json!({"id": "evt_1", "type": "checkout.session.completed", "data": {"object": {
            "client_reference_id": org.to_string(), "customer": "cus_1", "metadata": {"organization_id": org.to_string(), "plan": "pro"}}}}));
        assert_eq!((checkout.org, checkout.customer.as_deref()), (Some(org), Some("cus_1")));
        assert_eq!(checkout.change, Some(Change::CheckedOut { plan: Some(Plan::Pro) }));
        let updated = ev(json!({"id": "evt_2", "type": "customer.subscription.updated", "data": {"object": {
            "customer": "cus_1", "status": "active", "items": {"data": [{"price": {"id": "price_ent"}, "current_period_end": 1_800_000_000}]},
            "metadata": {"plan": "pro"}}}}));
        let end = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        assert_eq!(
            updated.change,
            Some(Change::Updated {
                status: Some(SubscriptionStatus::Active),
                current_period_end: Some(end),
                plan: Some(Plan::Enterprise)
            }),
            "the price decides over the metadata"
        );
        let sub = updated.change.unwrap().apply(Subscription::free(), updated.customer.as_deref());
        assert_eq!(
            (sub.plan, sub.current_period_end, sub.customer_id.as_deref()),
            (Plan::Enterprise, Some(end), Some("cus_1"))
        );
        let failed =
            ev(json!({"id": "evt_3", "type": "invoice.payment_failed", "data": {"object": {"customer": "cus_1"}}}));
        let sub = failed.change.unwrap().apply(sub, None);
        assert_eq!((sub.plan, sub.status), (Plan::Enterprise, SubscriptionStatus::PastDue));
        let deleted = ev(
            json!({"id": "evt_4", "type": "customer.subscription.deleted", "data": {"object": {"customer": "cus_1"}}}),
        );
        let sub = deleted.change.unwrap().apply(sub, None);
        assert_eq!((sub.plan, sub.status, sub.current_period_end), (Plan::Free, SubscriptionStatus::Canceled, None));
        let other = ev(json!({"id": "evt_5", "type": "charge.succeeded", "data": {"object": {}}}));
        assert_eq!(other.change, None);
        assert!(parse_event(b"not json", &prices).is_none());
        assert!(parse_event(br#"{"type": "x"}"#, &prices).is_none());
    }
}
