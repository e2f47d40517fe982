//! The data catalog: schema contracts (data assets) with their versions.

use super::created;
use crate::AppState;
use crate::dto::ListResponse;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Pagination};
use crate::session::Caller;
use actix_web::web::{Data, Json, Path, Query};
use actix_web::{HttpResponse, delete, get, patch, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_domain::FieldError;
use sluice_domain::catalog::asset::{AssetUpdate, AssetVersion, DataAsset, NewAsset};
use sluice_domain::catalog::contract::fields_to_json;
use sluice_domain::shared::ids::{AssetId, OrgId};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"description": "A customer as the CRM extractor returns it", "fields": [{"name": "user_id", "required": true, "type": "integer"}, {"name": "email", "tags": ["PII.Sensitive"], "type": "string"}], "name": "customer"})))]
pub struct CreateAssetBody {
    pub name: String,
    /// `[{name, type, required?, tags?, fields?}]`; types `string, integer,
    /// number, boolean, timestamp, date, object, array` (and `decimal`,
    /// `binary` as discovery reports them); nested `fields` on `object`
    /// fields; the sensitive tag is `PII.Sensitive`.
    #[schema(value_type = Vec<Object>)]
    pub fields: Value,
    pub description: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"fields": [{"name": "user_id", "required": true, "type": "integer"}, {"name": "email", "tags": ["PII.Sensitive"], "type": "string"}, {"name": "plan", "type": "string"}]})))]
pub struct UpdateAssetBody {
    pub name: Option<String>,
    /// Fields that differ from the current ones make version n+1.
    #[schema(value_type = Option<Vec<Object>>)]
    pub fields: Option<Value>,
    /// A string, or null to clear it.
    #[serde(default, deserialize_with = "super::present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssetResponse {
    pub id: Uuid,
    pub name: String,
    /// `virtual` or `discovered`.
    pub kind: String,
    pub version: i32,
    #[schema(value_type = Vec<Object>)]
    pub fields: Value,
    pub description: Option<String>,
    /// For discovered assets: the connection and entity they describe.
    pub connection_id: Option<Uuid>,
    pub entity: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<DataAsset> for AssetResponse {
    fn from(a: DataAsset) -> Self {
        Self {
            id: a.id.as_uuid(),
            name: a.name,
            kind: a.kind.as_str().into(),
            version: a.version,
            fields: fields_to_json(&a.fields),
            description: a.description,
            connection_id: a.connection_id.map(|c| c.as_uuid()),
            entity: a.entity,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssetVersionResponse {
    pub version: i32,
    #[schema(value_type = Vec<Object>)]
    pub fields: Value,
    /// `breaking` or `compatible` against the version before.
    pub change: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub created_by: Option<String>,
}

impl From<AssetVersion> for AssetVersionResponse {
    fn from(v: AssetVersion) -> Self {
        Self {
            version: v.version,
            fields: fields_to_json(&v.fields),
            change: v.change.as_str().into(),
            created_at: v.created_at,
            created_by: v.created_by,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssetVersionsResponse {
    /// Oldest first.
    pub data: Vec<AssetVersionResponse>,
}

/// Catalog assets of an organization, newest first.
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<AssetResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/data-assets")]
pub async fn list_assets(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<AssetResponse>>> {
    let page = state.sluice.catalog.list_assets(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, AssetResponse::from)))
}

/// Creates a virtual asset at version 1 (Editor).
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CreateAssetBody, responses(
    (status = 201, body = AssetResponse), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/data-assets")]
pub async fn create_asset(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateAssetBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let b = body.into_inner();
    let a = state
        .sluice
        .catalog
        .create_asset(&caller.principal, org, NewAsset { name: b.name, fields: b.fields, description: b.description })
        .await?;
    let id = a.id;
    Ok(created(format!("/v1/organizations/{org}/data-assets/{id}"), &AssetResponse::from(a)))
}

/// One asset.
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), ("id" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = AssetResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/data-assets/{id}")]
pub async fn get_asset(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<AssetResponse>> {
    let (org, id) = path.into_inner();
    let a = state.sluice.catalog.get_asset(&caller.principal, org.into(), AssetId::from(id)).await?;
    Ok(Json(a.into()))
}

/// Renames an asset, edits its description, or changes its fields; a
/// change of fields makes version n+1, classified breaking or compatible
/// (Editor).
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), ("id" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateAssetBody, responses((status = 200, body = AssetResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[patch("/organizations/{orgId}/data-assets/{id}")]
pub async fn update_asset(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<UpdateAssetBody>,
) -> ApiResult<Json<AssetResponse>> {
    let (org, id) = path.into_inner();
    let b = body.into_inner();
    let description = match b.description {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s)),
        Some(_) => return Err(ApiError::validation(vec![FieldError::new("description", "must be a string or null")])),
    };
    let a = state
        .sluice
        .catalog
        .update_asset(
            &caller.principal,
            org.into(),
            AssetId::from(id),
            AssetUpdate { name: b.name, fields: b.fields, description },
        )
        .await?;
    Ok(Json(a.into()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteParams {
    /// Delete even when flows depend on the asset.
    pub force: Option<bool>,
}

/// Deletes an asset and its version history (Editor); 409 `in_use` when
/// flows depend on it, unless `?force=true`.
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), ("id" = Uuid, Path), DeleteParams), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "in use", body = ErrorBody)))]
#[delete("/organizations/{orgId}/data-assets/{id}")]
pub async fn delete_asset(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    q: Query<DeleteParams>,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state
        .sluice
        .catalog
        .delete_asset(&caller.principal, org.into(), AssetId::from(id), q.force.unwrap_or(false))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The asset's versions, oldest first.
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), ("id" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = AssetVersionsResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/data-assets/{id}/versions")]
pub async fn asset_versions(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<AssetVersionsResponse>> {
    let (org, id) = path.into_inner();
    let v = state.sluice.catalog.asset_versions(&caller.principal, org.into(), AssetId::from(id)).await?;
    Ok(Json(AssetVersionsResponse { data: v.into_iter().map(Into::into).collect() }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DependentResponse {
    pub flow_id: Uuid,
    pub flow_name: String,
    /// `contract`, `source` or `destination`.
    pub relation: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DependenciesResponse {
    pub data: Vec<DependentResponse>,
}

/// The flows that depend on the asset: mappings naming it as `asset`, and
/// for a discovered asset the flows reading or writing its entity.
#[utoipa::path(tag = "catalog", params(("orgId" = Uuid, Path), ("id" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = DependenciesResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/data-assets/{id}/dependencies")]
pub async fn asset_dependencies(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<DependenciesResponse>> {
    let (org, id) = path.into_inner();
    let deps = state.sluice.catalog.asset_dependencies(&caller.principal, org.into(), AssetId::from(id)).await?;
    Ok(Json(DependenciesResponse {
        data: deps
            .into_iter()
            .map(|d| DependentResponse {
                flow_id: d.flow_id.as_uuid(),
                flow_name: d.flow_name,
                relation: d.relation.into(),
            })
            .collect(),
    }))
}
