//! Stripe's REST API, the few calls billing makes: customers, checkout
//! sessions and customer-portal sessions. Form-encoded requests with
//! `Authorization: Bearer <secret key>` against a configurable base URL
//! (tests point it at a local fake). A small client over our `reqwest`:
//! the maintained Stripe crates bring a second HTTP stack and thousands of
//! generated types for three calls.

use crate::oauth::pairs;
use async_trait::async_trait;
use sluice_domain::billing::ports::{CheckoutRequest, CheckoutSession, PaymentProvider};
use sluice_domain::shared::error::Code;
use sluice_domain::shared::ids::OrgId;
use sluice_domain::shared::secret::Secret;
use sluice_domain::{Error, Result};
use std::time::Duration;

/// Stripe's API.
pub const DEFAULT_BASE: &str = "https://api.stripe.com";

pub struct Stripe {
    base: String,
    key: Secret,
    http: reqwest::Client,
}

fn failed(message: String) -> Error {
    Error::Unavailable { code: Code::PaymentProviderFailed, message }
}

impl Stripe {
    /// A client of the API at `base` (e.g. [`DEFAULT_BASE`]) with the secret `key`.
    pub fn new(base: &str, key: Secret) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap_or_default();
        Stripe { base: base.trim_end_matches('/').to_string(), key, http }
    }

    /// POSTs the form `items` to `path`; answers the JSON object. A retry
    /// with the same `idempotency_key` gets the first answer again.
    async fn post(
        &self,
        path: &str,
        items: &[(&str, &str)],
        idempotency_key: Option<&str>,
    ) -> Result<serde_json::Value> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(self.key.expose())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(pairs(items));
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        let res = req.send().await.map_err(|e| failed(format!("Stripe is unreachable: {}", e.without_url())))?;
        let status = res.status();
        let json: serde_json::Value =
            res.json().await.map_err(|_| failed(format!("Stripe did not answer JSON ({status})")))?;
        if !status.is_success() {
            let reason = json.pointer("/error/message").and_then(|m| m.as_str()).unwrap_or("no reason given");
            // Whatever the answer says, the key never goes further.
            let reason = reason.replace(self.key.expose(), sluice_domain::shared::audit::REDACTED);
            return Err(failed(format!("Stripe refused the request ({status}): {reason}")));
        }
        Ok(json)
    }

    fn field(json: &serde_json::Value, name: &str) -> Result<String> {
        json.get(name)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| failed(format!("Stripe answered no {name}")))
    }
}

#[async_trait]
impl PaymentProvider for Stripe {
    async fn create_customer(&self, org: OrgId, name: &str) -> Result<String> {
        let org = org.to_string();
        let json = self
            .post(
                "/v1/customers",
                &[("name", name), ("metadata[organization_id]", &org)],
                Some(&format!("sluice-customer-{org}")),
            )
            .await?;
        Self::field(&json, "id")
    }

    async fn checkout_session(&self, r: &CheckoutRequest) -> Result<CheckoutSession> {
        let org = r.org.to_string();
        let plan = r.plan.as_str();
        let json = self
            .post(
                "/v1/checkout/sessions",
                &[
                    ("mode", "subscription"),
                    ("customer", &r.customer),
                    ("client_reference_id", &org),
                    ("line_items[0][price]", &r.price),
                    ("line_items[0][quantity]", "1"),
                    ("success_url", &r.success_url),
                    ("cancel_url", &r.cancel_url),
                    ("metadata[organization_id]", &org),
                    ("metadata[plan]", plan),
                    ("subscription_data[metadata][organization_id]", &org),
                    ("subscription_data[metadata][plan]", plan),
                ],
                None,
            )
            .await?;
        Ok(CheckoutSession { url: Self::field(&json, "url")?, id: Self::field(&json, "id")? })
    }

    async fn portal_session(&self, customer: &str, return_url: &str) -> Result<String> {
        let json = self
            .post("/v1/billing_portal/sessions", &[("customer", customer), ("return_url", return_url)], None)
            .await?;
        Self::field(&json, "url")
    }
}
