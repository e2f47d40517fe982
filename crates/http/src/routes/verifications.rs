//! Verifications of flows: started, listed, shown.

use crate::AppState;
use crate::dto::ListResponse;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::Pagination;
use crate::session::Caller;
use actix_web::web::{self, Data, Json, Path, Query};
use actix_web::{HttpResponse, get, post};
use serde::{Deserialize, Serialize};
use sluice_domain::shared::ids::{FlowId, VerificationId};
use sluice_domain::sync::verification::{EntityCheck, KeyList, Verification};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"entities": ["public.orders"], "repair": false})))]
pub struct VerifyBody {
    /// Source entities to verify; every entity the flow mirrors by key
    /// when absent or empty.
    #[serde(default)]
    pub entities: Vec<String>,
    #[serde(default)]
    pub repair: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyListResponse {
    pub count: u64,
    /// At most 100 primary-key values: a number or string, an array for a
    /// composite key.
    #[schema(value_type = Vec<Object>)]
    pub keys: Vec<serde_json::Value>,
}

impl From<KeyList> for KeyListResponse {
    fn from(k: KeyList) -> Self {
        KeyListResponse { count: k.count, keys: k.keys }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EntityCheckResponse {
    /// The source entity.
    pub entity: String,
    /// The destination entity it was compared with.
    pub destination: String,
    /// Rows the destination should hold: the source's, after the mapping's
    /// filter.
    pub source_rows: u64,
    pub destination_rows: u64,
    /// Keys only the source has.
    pub missing: KeyListResponse,
    /// Keys only the destination has.
    pub extra: KeyListResponse,
    /// Keys whose values differ.
    pub different: KeyListResponse,
    pub duration_ms: u64,
    /// Keys the scan found differing and read again at the end: those
    /// equal by then (a change the flow had not carried yet) or changing
    /// at the source are not reported.
    pub rechecked: u64,
    /// Rows compared inside the databases: of key ranges whose checksums
    /// agreed on both sides, so never read (both sides of one engine, an
    /// integer key, columns of equal types).
    pub summed_rows: u64,
}

impl From<EntityCheck> for EntityCheckResponse {
    fn from(e: EntityCheck) -> Self {
        EntityCheckResponse {
            entity: e.entity,
            destination: e.destination,
            source_rows: e.source_rows,
            destination_rows: e.destination_rows,
            missing: e.missing.into(),
            extra: e.extra.into(),
            different: e.different.into(),
            duration_ms: e.duration_ms,
            rechecked: e.rechecked,
            summed_rows: e.summed_rows,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct VerificationResponse {
    pub id: Uuid,
    pub flow_id: Uuid,
    /// `queued`, `running`, `matched`, `mismatched` or `failed`.
    pub status: String,
    pub repair: bool,
    /// The entities asked for (every mirrored one when empty).
    pub requested: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub queued_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    pub error: Option<String>,
    pub entities: Vec<EntityCheckResponse>,
    /// With `repair`: the run that syncs the differing keys again (a new
    /// verification follows it).
    pub repair_run_id: Option<Uuid>,
}

impl From<Verification> for VerificationResponse {
    fn from(v: Verification) -> Self {
        VerificationResponse {
            id: v.id.as_uuid(),
            flow_id: v.flow_id.as_uuid(),
            status: v.status.as_str().into(),
            repair: v.repair,
            requested: v.requested,
            queued_at: v.queued_at,
            started_at: v.started_at,
            finished_at: v.finished_at,
            error: v.error,
            entities: v.entities.into_iter().map(Into::into).collect(),
            repair_run_id: v.repair_run_id.map(|r| r.as_uuid()),
        }
    }
}

/// Starts a verification of the flow (Editor): 202 with it queued; a
/// worker compares each entity's source and destination by primary key.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body(content = VerifyBody, description = "optional"),
    responses((status = 202, body = VerificationResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/flows/{flowId}/verify")]
pub async fn verify(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    let b: VerifyBody = if body.iter().all(u8::is_ascii_whitespace) {
        VerifyBody::default()
    } else {
        let value = serde_json::from_slice(&body)
            .map_err(|e| crate::extract::json_api_error(actix_web::error::JsonPayloadError::Deserialize(e)))?;
        crate::extract::from_json_value(value)?
    };
    let v = state
        .sluice
        .sync
        .start_verification(&caller.principal, org.into(), FlowId::from(id), b.entities, b.repair)
        .await?;
    let vid = v.id;
    Ok(HttpResponse::Accepted()
        .insert_header((actix_web::http::header::LOCATION, format!("/v1/organizations/{org}/verifications/{vid}")))
        .json(VerificationResponse::from(v)))
}

/// A flow's verifications, newest first.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<VerificationResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/{flowId}/verifications")]
pub async fn list_verifications(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<VerificationResponse>>> {
    let (org, id) = path.into_inner();
    let page = q.page()?;
    let p = state.sluice.sync.list_verifications(&caller.principal, org.into(), FlowId::from(id), page).await?;
    Ok(Json(ListResponse::from_page(p, Into::into)))
}

/// One verification with its findings.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("verificationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = VerificationResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/verifications/{verificationId}")]
pub async fn get_verification(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<VerificationResponse>> {
    let (org, id) = path.into_inner();
    let v = state.sluice.sync.get_verification(&caller.principal, org.into(), VerificationId::from_uuid(id)).await?;
    Ok(Json(v.into()))
}
