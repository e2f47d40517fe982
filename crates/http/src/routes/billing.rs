//! Billing: the organization's plan and subscription, checkout and
//! customer-portal sessions with the payment provider (Stripe), and the
//! provider's webhooks.

use crate::AppState;
use crate::body::read_body;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::Body;
use crate::extract::MAX_JSON_BODY;
use crate::session::Caller;
use actix_web::web::{self, Data, Json, Path};
use actix_web::{HttpRequest, HttpResponse, get, post};
use serde::{Deserialize, Serialize};
use sluice_domain::billing::service::{BillingStatus, WebhookOutcome};
use sluice_domain::shared::ids::OrgId;
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct BillingStatusResponse {
    /// `free`, `pro` or `enterprise`.
    pub plan: String,
    /// The subscription's status (`active`, `past_due`, `canceled`, …).
    pub status: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub current_period_end: Option<OffsetDateTime>,
    /// Gateway validations counted this month.
    pub validations_used: i64,
    /// The plan's monthly validations; `null` for unlimited.
    pub validations_limit: Option<i64>,
    /// The payment provider's customer, once created.
    pub customer_id: Option<String>,
}

impl From<BillingStatus> for BillingStatusResponse {
    fn from(b: BillingStatus) -> Self {
        let s = b.subscription;
        Self {
            plan: s.plan.as_str().into(),
            status: s.status.as_str().into(),
            current_period_end: s.current_period_end,
            validations_used: b.validations_used,
            validations_limit: b.validations_limit,
            customer_id: s.customer_id,
        }
    }
}

/// The organization's plan, subscription and validations this month.
#[utoipa::path(tag = "billing", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = BillingStatusResponse), (status = 404, body = ErrorBody),
    (status = 503, description = "billing is not configured (`billing_not_configured`)", body = ErrorBody)))]
#[get("/organizations/{orgId}/billing/status")]
pub async fn status(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<Json<BillingStatusResponse>> {
    Ok(Json(state.sluice.billing.status(&caller.principal, OrgId::from(*path)).await?.into()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"cancel_url": "https://sluice.example.com/billing", "plan": "pro", "success_url": "https://sluice.example.com/billing?checkout=success"})))]
pub struct CheckoutBody {
    /// `pro` or `enterprise`.
    pub plan: String,
    /// Where the provider sends the user after paying; by default the console.
    pub success_url: Option<String>,
    /// Where the provider sends the user who gives up; by default the console.
    pub cancel_url: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CheckoutResponse {
    /// Send the user here.
    pub url: String,
    pub session_id: String,
}

/// A checkout session for a paid plan (Admin).
#[utoipa::path(tag = "billing", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CheckoutBody, responses((status = 200, body = CheckoutResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
    (status = 503, description = "billing is not configured, or Stripe failed", body = ErrorBody)))]
#[post("/organizations/{orgId}/billing/checkout-session")]
pub async fn checkout(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CheckoutBody>,
) -> ApiResult<Json<CheckoutResponse>> {
    let b = body.into_inner();
    let s = state
        .sluice
        .billing
        .checkout(&caller.principal, OrgId::from(*path), &b.plan, b.success_url.as_deref(), b.cancel_url.as_deref())
        .await?;
    Ok(Json(CheckoutResponse { url: s.url, session_id: s.id }))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"return_url": "https://sluice.example.com/billing"})))]
pub struct PortalBody {
    /// Where the portal sends the user back; by default the console.
    pub return_url: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PortalResponse {
    /// Send the user here.
    pub url: String,
}

/// A customer-portal session (Admin); the body is optional.
#[utoipa::path(tag = "billing", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body(content = PortalBody, description = "optional"), responses((status = 200, body = PortalResponse),
    (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 503, description = "billing is not configured, or Stripe failed", body = ErrorBody)))]
#[post("/organizations/{orgId}/billing/customer-portal-session")]
pub async fn portal(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: web::Bytes,
) -> ApiResult<Json<PortalResponse>> {
    let b: PortalBody = if body.iter().all(u8::is_ascii_whitespace) {
        PortalBody::default()
    } else {
        let value = serde_json::from_slice(&body)
            .map_err(|e| crate::extract::json_api_error(actix_web::error::JsonPayloadError::Deserialize(e)))?;
        crate::extract::from_json_value(value)?
    };
    let url = state.sluice.billing.portal(&caller.principal, OrgId::from(*path), b.return_url.as_deref()).await?;
    Ok(Json(PortalResponse { url }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookResponse {
    /// `true`: the event is acknowledged.
    pub received: bool,
    /// `applied`, `duplicate` (processed before) or `ignored`.
    pub outcome: String,
}

/// Stripe's webhooks: the raw body is verified against `Stripe-Signature`;
/// each event is processed once. Unauthenticated otherwise.
#[utoipa::path(tag = "billing", responses((status = 200, body = WebhookResponse),
    (status = 400, description = "a bad or stale signature (`invalid_signature`), or no event", body = ErrorBody),
    (status = 503, description = "no webhook secret is configured", body = ErrorBody)))]
#[post("/webhooks/stripe")]
pub async fn stripe_webhook(state: Data<AppState>, req: HttpRequest, body: web::Payload) -> ApiResult<HttpResponse> {
    let bytes = read_body(&mut body.into_inner(), MAX_JSON_BODY).await?;
    let signature = req.headers().get("Stripe-Signature").and_then(|v| v.to_str().ok());
    let outcome = state.sluice.billing.webhook(&bytes, signature).await?;
    let outcome = match outcome {
        WebhookOutcome::Applied => "applied",
        WebhookOutcome::Duplicate => "duplicate",
        WebhookOutcome::Ignored => "ignored",
    };
    Ok(HttpResponse::Ok().json(WebhookResponse { received: true, outcome: outcome.into() }))
}
