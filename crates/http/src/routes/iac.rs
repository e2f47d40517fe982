//! Infrastructure as code: apply a YAML document (or plan it with
//! `?dry_run=true`), export the organization as one, and check a proposed
//! schema for drift.

use crate::AppState;
use crate::body::MAX_ANY_BODY;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::Body;
use crate::session::Caller;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::web::{Data, Json, Path, Payload, Query};
use actix_web::{HttpRequest, HttpResponse, get, post};
use serde::{Deserialize, Serialize};
use sluice_domain::catalog::drift::{DriftReport, ProposedField};
use sluice_domain::iac::{Action, IacChange, to_yaml};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// Media types an IaC document may be sent as.
const YAML_TYPES: [&str; 4] = ["application/x-yaml", "application/yaml", "text/yaml", "text/x-yaml"];

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApplyQuery {
    /// Plan only: answer what would change and write nothing.
    pub dry_run: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApplySummary {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApplyResponse {
    pub dry_run: bool,
    /// Names the audit entries of this apply; null for a dry run or an
    /// apply that changed nothing.
    pub apply_id: Option<Uuid>,
    pub summary: ApplySummary,
    /// `{kind, name, action: created|updated|unchanged, id, diff: [{path,
    /// before, after}]}` per resource, in the order they are written.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<IacChange>,
}

/// Applies an IaC document idempotently (Editor): resources are matched by
/// name, created or updated to match, and written in one transaction.
/// Resources absent from the document are left alone.
#[utoipa::path(tag = "iac", params(("orgId" = Uuid, Path), ApplyQuery), security(("bearer" = []), ("api_key" = [])),
    request_body(content = String, content_type = "application/x-yaml", description = "The IaC document (see docs/iac.md)"),
    responses(
        (status = 200, body = ApplyResponse),
        (status = 400, description = "malformed YAML (`malformed_yaml`, with line and column)", body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 415, description = "not `application/x-yaml`", body = ErrorBody),
        (status = 422, description = "every problem with its YAML path", body = ErrorBody)))]
#[post("/organizations/{orgId}/iac/apply")]
pub async fn apply(
    state: Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    path: Path<Uuid>,
    query: Query<ApplyQuery>,
    payload: Payload,
) -> ApiResult<HttpResponse> {
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if !YAML_TYPES.contains(&essence.as_str()) {
        let got = if content_type.is_empty() { "no Content-Type".to_string() } else { format!("'{content_type}'") };
        return Err(ApiError::new(
            sluice_domain::shared::error::Code::UnsupportedMediaType,
            format!("an IaC document is sent as application/x-yaml, not {got}"),
        ));
    }
    let body =
        payload.to_bytes_limited(MAX_ANY_BODY).await.map_err(|_| ApiError::payload_too_large(MAX_ANY_BODY))?.map_err(
            |e| ApiError::new(sluice_domain::shared::error::Code::MalformedYaml, format!("unreadable body: {e}")),
        )?;
    let text = std::str::from_utf8(&body).map_err(|e| {
        ApiError::new(sluice_domain::shared::error::Code::MalformedYaml, format!("the document is not UTF-8: {e}"))
    })?;
    let dry_run = query.dry_run.unwrap_or(false);
    let out = state.sluice.iac.apply_iac(&caller.principal, path.into_inner().into(), text, dry_run).await?;
    let plan = out.plan;
    Ok(HttpResponse::Ok().json(ApplyResponse {
        dry_run: out.dry_run,
        apply_id: out.apply_id,
        summary: ApplySummary {
            created: plan.count(Action::Created),
            updated: plan.count(Action::Updated),
            unchanged: plan.count(Action::Unchanged),
        },
        changes: plan.changes,
    }))
}

/// The organization's integrations, connections and flows as an IaC
/// document that applies back unchanged; secrets read `***`.
#[utoipa::path(tag = "iac", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, content_type = "application/x-yaml", body = String), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/iac/export")]
pub async fn export(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<HttpResponse> {
    let doc = state.sluice.iac.export_iac(&caller.principal, path.into_inner().into()).await?;
    Ok(HttpResponse::Ok().content_type("application/x-yaml").body(to_yaml(&doc)?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"entity_name": "public.orders", "flow_id": "orders", "proposed_schema": [{"name": "id", "required": true, "type": "integer"}, {"name": "total", "type": "string"}]})))]
pub struct DriftBody {
    /// The flow's id or name.
    pub flow_id: String,
    /// A source entity of the flow's mappings (or its destination name).
    pub entity_name: String,
    /// `[{name, type, required?}]`.
    #[schema(value_type = Vec<Object>)]
    pub proposed_schema: Vec<ProposedField>,
}

/// Compares a proposed schema with the one the flow syncs (from its last
/// run or discovery) and classifies each difference as breaking or evolution.
#[utoipa::path(tag = "iac", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = DriftBody,
    responses(
        (status = 200, description = "`{has_drift, drift_type: breaking|evolution|none, impacts: [{type, message, affected_fields}], suggested_actions}`", body = Object),
        (status = 404, description = "unknown flow or entity", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/iac/validate-drift")]
pub async fn validate_drift(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<DriftBody>,
) -> ApiResult<Json<DriftReport>> {
    let b = body.into_inner();
    let report = state
        .sluice
        .iac
        .validate_drift(&caller.principal, path.into_inner().into(), &b.flow_id, &b.entity_name, &b.proposed_schema)
        .await?;
    Ok(Json(report))
}
