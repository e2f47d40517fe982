//! Notification rules, their deliveries, and the internal notification
//! endpoint.

use super::created;
use crate::AppState;
use crate::dto::ListResponse;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{Body, InternalCaller, Pagination};
use crate::session::Caller;
use actix_web::web::{Data, Json, Path, Query};
use actix_web::{HttpResponse, delete, get, post, put};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_domain::monitoring::delivery::Delivery;
use sluice_domain::monitoring::rule::{NotificationRule, RuleInput};
use sluice_domain::monitoring::service::SavedRule;
use sluice_domain::shared::ids::{OrgId, RuleId};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleFilter {
    /// Only events of this flow.
    pub flow_id: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    /// `webhook` (signed, Standard Webhooks) or `slack` (an incoming-webhook URL).
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    /// A webhook's signing secret (`whsec_…`); generated when absent, kept
    /// on `PUT` when absent or `***`.
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"channel": {"type": "webhook", "url": "https://hooks.example.com/sluice"}, "enabled": true, "event": "run.failed", "filter": {"flow_id": "01a20900-0000-7000-8000-000000000003"}, "name": "failed runs"})))]
pub struct RuleBody {
    pub name: String,
    /// `run.succeeded`, `run.failed`, `run.drift_detected`, `schema.drift`,
    /// `quota.threshold` or `connection.failing`.
    pub event: String,
    #[serde(default)]
    pub filter: Option<RuleFilter>,
    pub channel: ChannelBody,
    /// Default `true`.
    pub enabled: Option<bool>,
}

impl From<RuleBody> for RuleInput {
    fn from(b: RuleBody) -> Self {
        RuleInput {
            name: b.name,
            event: b.event,
            flow_id: b.filter.and_then(|f| f.flow_id),
            channel_type: b.channel.kind,
            url: b.channel.url,
            secret: b.channel.secret,
            enabled: b.enabled,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChannelResponse {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    /// `***` when the channel has a secret; the plain secret only in the
    /// response that generated it.
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RuleResponse {
    pub id: Uuid,
    pub name: String,
    pub event: String,
    pub filter: RuleFilter,
    pub channel: ChannelResponse,
    pub enabled: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<NotificationRule> for RuleResponse {
    fn from(r: NotificationRule) -> Self {
        RuleResponse {
            id: r.id.as_uuid(),
            name: r.name,
            event: r.event,
            filter: RuleFilter { flow_id: r.flow_id.map(|f| f.to_string()) },
            channel: ChannelResponse {
                kind: r.channel.kind.as_str().into(),
                url: r.channel.url,
                secret: r.channel.secret.map(|_| sluice_domain::shared::audit::REDACTED.into()),
            },
            enabled: r.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

impl From<SavedRule> for RuleResponse {
    fn from(s: SavedRule) -> Self {
        let mut r = RuleResponse::from(s.rule);
        if let Some(secret) = s.generated_secret {
            r.channel.secret = Some(secret.expose().to_string());
        }
        r
    }
}

/// The organization's notification rules.
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<RuleResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/rules")]
pub async fn list(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<RuleResponse>>> {
    let page = state.sluice.monitoring.list_rules(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, Into::into)))
}

/// Creates a rule (Editor); a webhook without a secret gets one, shown once.
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = RuleBody, responses((status = 201, body = RuleResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/rules")]
pub async fn create(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<RuleBody>,
) -> ApiResult<HttpResponse> {
    let org = *path;
    let saved =
        state.sluice.monitoring.create_rule(&caller.principal, OrgId::from(org), body.into_inner().into()).await?;
    let location = format!("/v1/organizations/{org}/rules/{}", saved.rule.id);
    Ok(created(location, &RuleResponse::from(saved)))
}

/// One rule.
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), ("ruleId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = RuleResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/rules/{ruleId}")]
pub async fn get(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<Json<RuleResponse>> {
    let (org, id) = path.into_inner();
    Ok(Json(state.sluice.monitoring.get_rule(&caller.principal, org.into(), RuleId::from(id)).await?.into()))
}

/// Replaces a rule (Editor).
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), ("ruleId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = RuleBody, responses((status = 200, body = RuleResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[put("/organizations/{orgId}/rules/{ruleId}")]
pub async fn replace(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<RuleBody>,
) -> ApiResult<Json<RuleResponse>> {
    let (org, id) = path.into_inner();
    let saved = state
        .sluice
        .monitoring
        .replace_rule(&caller.principal, org.into(), RuleId::from(id), body.into_inner().into())
        .await?;
    Ok(Json(saved.into()))
}

/// Deletes a rule and its deliveries (Editor).
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), ("ruleId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[delete("/organizations/{orgId}/rules/{ruleId}")]
pub async fn remove(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.monitoring.delete_rule(&caller.principal, org.into(), RuleId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// What a rule's test queued.
#[derive(Debug, Serialize, ToSchema)]
pub struct RuleTestResponse {
    /// The test's activity event (`rule.test`); its delivery is listed
    /// under the rule's deliveries, with this `event_id`.
    pub event_id: Uuid,
    pub event_type: String,
    pub message: String,
}

/// Sends a test event through this rule alone, enabled or not (Editor):
/// its delivery follows within seconds, under the rule's deliveries.
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), ("ruleId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 202, body = RuleTestResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[post("/organizations/{orgId}/rules/{ruleId}/test")]
pub async fn test(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    let e = state.sluice.monitoring.send_test(&caller.principal, org.into(), RuleId::from(id)).await?;
    Ok(HttpResponse::Accepted().json(RuleTestResponse {
        event_id: e.id,
        event_type: e.event_type.to_string(),
        message: e.message,
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryResponse {
    pub id: Uuid,
    /// The activity event delivered; its id is every attempt's `webhook-id` (`msg_…`).
    pub event_id: Uuid,
    pub event_type: String,
    /// `pending`, `delivered`, `failed` (given up) or `refused` (a private address).
    pub status: String,
    pub attempts: u32,
    /// The last attempt's HTTP status.
    pub response_code: Option<u16>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<Delivery> for DeliveryResponse {
    fn from(d: Delivery) -> Self {
        DeliveryResponse {
            id: d.id.as_uuid(),
            event_id: d.event_id,
            event_type: d.event_type,
            status: d.status.as_str().into(),
            attempts: d.attempts,
            response_code: d.response_code,
            error: d.error,
            next_attempt_at: d.next_attempt_at,
            created_at: d.created_at,
            updated_at: d.updated_at,
        }
    }
}

/// The rule's deliveries and their attempts, newest first.
#[utoipa::path(tag = "rules", params(("orgId" = Uuid, Path), ("ruleId" = Uuid, Path), Pagination),
    security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<DeliveryResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/rules/{ruleId}/deliveries")]
pub async fn deliveries(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<DeliveryResponse>>> {
    let (org, id) = path.into_inner();
    let page = state.sluice.monitoring.deliveries(&caller.principal, org.into(), RuleId::from(id), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, Into::into)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"data": {"source": "scheduler"}, "event": "run.failed", "message": "nightly export failed", "organization_id": "01a20900-0000-7000-8000-000000000006"})))]
pub struct NotificationBody {
    pub organization_id: Uuid,
    /// The event's type, e.g. `run.failed`; rules naming it deliver it.
    pub event: String,
    #[serde(default)]
    pub message: String,
    #[schema(value_type = Object)]
    #[serde(default)]
    pub data: Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationResponse {
    /// The activity event recorded.
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: String,
}

/// Records an activity event and delivers it through the matching rules
/// (internal key).
#[utoipa::path(tag = "internal", request_body = NotificationBody, security(("internal_key" = [])),
    responses((status = 202, body = NotificationResponse), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 422, body = ErrorBody), (status = 503, description = "no internal key configured", body = ErrorBody)))]
#[post("/internal/notifications")]
pub async fn notify(
    state: Data<AppState>,
    _internal: InternalCaller,
    body: Body<NotificationBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let e = state.sluice.monitoring.notify(OrgId::from(b.organization_id), &b.event, &b.message, b.data).await?;
    Ok(HttpResponse::Accepted().json(NotificationResponse { id: e.id, event_type: e.event_type.to_string() }))
}
