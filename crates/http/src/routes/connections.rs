//! Connector capabilities, integrations and connections: CRUD, test,
//! discover, preview and preview with a transform.

use super::created;
use crate::AppState;
use crate::dto::ListResponse;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Pagination};
use crate::session::Caller;
use actix_web::web::{Data, Json, Path, Query};
use actix_web::{HttpResponse, delete, get, patch, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sluice_domain::connect::connection::Connection;
use sluice_domain::connect::connector::{Capability, EntitySchema, Field};
use sluice_domain::connect::integration::Integration;
use sluice_domain::connect::service::PreviewRequest;
use sluice_domain::connect::service::{
    ConnectionUpdate, IntegrationUpdate, NewConnection, NewIntegration, TestOutcome,
};
use sluice_domain::shared::ids::{ConnectionId, IntegrationId, OrgId};
use sluice_domain::sync::transform;
use std::collections::BTreeMap;
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CapabilityDto {
    Source,
    Destination,
    Both,
}

impl From<CapabilityDto> for Capability {
    fn from(c: CapabilityDto) -> Self {
        match c {
            CapabilityDto::Source => Capability::Source,
            CapabilityDto::Destination => Capability::Destination,
            CapabilityDto::Both => Capability::Both,
        }
    }
}

impl From<Capability> for CapabilityDto {
    fn from(c: Capability) -> Self {
        match c {
            Capability::Source => CapabilityDto::Source,
            Capability::Destination => CapabilityDto::Destination,
            Capability::Both => CapabilityDto::Both,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CapabilitiesResponse {
    /// Each connector type with its capabilities, settings (credentials
    /// marked) and sync modes.
    #[schema(value_type = Vec<Object>)]
    pub connectors: Vec<Value>,
}

/// The connector types this server offers.
#[utoipa::path(tag = "connectors", responses((status = 200, body = CapabilitiesResponse)))]
#[get("/connectors/capabilities")]
pub async fn capabilities(state: Data<AppState>) -> Json<CapabilitiesResponse> {
    let connectors =
        state.sluice.connect.connector_specs().iter().map(|s| serde_json::to_value(s).unwrap_or_default()).collect();
    Json(CapabilitiesResponse { connectors })
}

// ---- integrations -------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"credentials": {"password": "s3cret"}, "name": "warehouse-creds", "type": "postgres"})))]
pub struct CreateIntegrationBody {
    pub name: String,
    #[serde(rename = "type")]
    pub integration_type: String,
    /// Credential values: secrets, or references (`env:NAME`, `aws:secretsmanager:ARN`).
    #[schema(value_type = Object)]
    pub credentials: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"credentials": {"password": "n3w-s3cret"}})))]
pub struct UpdateIntegrationBody {
    pub name: Option<String>,
    /// Merged into the stored credentials: `"***"` keeps a value, `null` removes it.
    #[schema(value_type = Object)]
    pub credentials: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct IntegrationResponse {
    pub id: Uuid,
    pub name: String,
    #[serde(rename = "type")]
    pub integration_type: String,
    /// Each credential key with `"***"` (or the plain value in `…/details`).
    pub credentials: BTreeMap<String, String>,
    /// `active`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl IntegrationResponse {
    fn new(i: Integration, reveal: bool) -> Self {
        Self {
            id: i.id.as_uuid(),
            name: i.name,
            integration_type: i.integration_type,
            credentials: if reveal { i.credentials.0.clone() } else { i.credentials.masked() },
            status: "active".into(),
            created_at: i.created_at,
            updated_at: i.updated_at,
        }
    }
}

const ORG: (&str, &str) = ("orgId", "organization id");

/// Integrations of an organization.
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<IntegrationResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/integrations")]
pub async fn list_integrations(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<IntegrationResponse>>> {
    let _ = ORG;
    let page = state.sluice.connect.list_integrations(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, |i| IntegrationResponse::new(i, false))))
}

/// Creates an integration (Editor). Credentials are stored encrypted.
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CreateIntegrationBody, responses(
    (status = 201, body = IntegrationResponse), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/integrations")]
pub async fn create_integration(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateIntegrationBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let b = body.into_inner();
    let i = state
        .sluice
        .connect
        .create_integration(
            &caller.principal,
            org,
            NewIntegration {
                name: b.name,
                integration_type: b.integration_type,
                credentials: b.credentials.unwrap_or_default(),
            },
        )
        .await?;
    let id = i.id;
    Ok(created(format!("/v1/organizations/{org}/integrations/{id}"), &IntegrationResponse::new(i, false)))
}

/// One integration; credentials read as `"***"`.
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path), ("integrationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = IntegrationResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/integrations/{integrationId}")]
pub async fn get_integration(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<IntegrationResponse>> {
    let (org, id) = path.into_inner();
    let i = state.sluice.connect.get_integration(&caller.principal, org.into(), IntegrationId::from(id)).await?;
    Ok(Json(IntegrationResponse::new(i, false)))
}

/// The integration with its credentials decrypted (Admin).
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path), ("integrationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = IntegrationResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/integrations/{integrationId}/details")]
pub async fn integration_details(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<IntegrationResponse>> {
    let (org, id) = path.into_inner();
    let i = state.sluice.connect.integration_details(&caller.principal, org.into(), IntegrationId::from(id)).await?;
    Ok(Json(IntegrationResponse::new(i, true)))
}

/// Renames an integration or changes its credentials (Editor).
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path), ("integrationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateIntegrationBody, responses((status = 200, body = IntegrationResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[patch("/organizations/{orgId}/integrations/{integrationId}")]
pub async fn update_integration(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<UpdateIntegrationBody>,
) -> ApiResult<Json<IntegrationResponse>> {
    let (org, id) = path.into_inner();
    let b = body.into_inner();
    let i = state
        .sluice
        .connect
        .update_integration(
            &caller.principal,
            org.into(),
            IntegrationId::from(id),
            IntegrationUpdate { name: b.name, credentials: b.credentials },
        )
        .await?;
    Ok(Json(IntegrationResponse::new(i, false)))
}

/// Deletes an integration no connection uses (Editor).
#[utoipa::path(tag = "integrations", params(("orgId" = Uuid, Path), ("integrationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "in use", body = ErrorBody)))]
#[delete("/organizations/{orgId}/integrations/{integrationId}")]
pub async fn delete_integration(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.connect.delete_integration(&caller.principal, org.into(), IntegrationId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

// ---- connections --------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"capability": "source", "config": {"database": "app", "host": "db.internal", "password": "s3cret", "port": 5432, "schema": "public", "sslmode": "require", "user": "reader"}, "name": "app-db", "type": "postgres"})))]
pub struct CreateConnectionBody {
    pub name: String,
    pub integration_id: Option<Uuid>,
    #[serde(rename = "type")]
    pub connector_type: String,
    pub capability: CapabilityDto,
    /// Settings of the connector type; credential fields are stored encrypted.
    #[schema(value_type = Object)]
    pub config: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"config": {"database": "shop", "host": "mysql.internal", "password": "s3cret", "port": 3306, "user": "reader"}, "type": "mysql"})))]
pub struct TestConnectionBody {
    pub name: Option<String>,
    pub integration_id: Option<Uuid>,
    #[serde(rename = "type")]
    pub connector_type: String,
    /// What to test; by default everything the type can do.
    pub capability: Option<CapabilityDto>,
    #[schema(value_type = Object)]
    pub config: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"config": {"host": "db-replica.internal"}})))]
pub struct UpdateConnectionBody {
    pub name: Option<String>,
    /// A UUID, or `null` to detach the integration.
    #[serde(default, deserialize_with = "super::present")]
    #[schema(value_type = Option<Uuid>)]
    pub integration_id: Option<Value>,
    pub capability: Option<CapabilityDto>,
    /// Merged into the stored settings: `"***"` keeps a secret, `null` removes a setting.
    #[schema(value_type = Object)]
    pub config: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionResponse {
    pub id: Uuid,
    pub name: String,
    pub integration_id: Option<Uuid>,
    #[serde(rename = "type")]
    pub connector_type: String,
    pub capability: CapabilityDto,
    /// Settings, with each credential as `"***"`.
    #[schema(value_type = Object)]
    pub config: BTreeMap<String, Value>,
    /// `untested`, `healthy` or `failing`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_tested_at: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<Connection> for ConnectionResponse {
    fn from(c: Connection) -> Self {
        Self {
            id: c.id.as_uuid(),
            name: c.name.clone(),
            integration_id: c.integration_id.map(|i| i.as_uuid()),
            connector_type: c.connector_type.clone(),
            capability: c.capability.into(),
            config: c.public_config(),
            status: c.status.as_str().into(),
            last_tested_at: c.last_tested_at,
            last_error: c.last_error,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TestResponse {
    pub ok: bool,
    pub latency_ms: u64,
    pub error: Option<String>,
    /// `unreachable`, `auth_failed`, `database_not_found`, `entity_not_found`, `timeout`, `invalid_config`, …
    pub error_code: Option<String>,
    /// For a reachable source that can capture changes (PostgreSQL): whether this one can, and why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cdc: Option<CdcReadinessDto>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CdcReadinessDto {
    pub ready: bool,
    /// One line per missing setting or grant (`wal_level`, `REPLICATION`, a free replication slot).
    pub reasons: Vec<String>,
}

impl From<TestOutcome> for TestResponse {
    fn from(t: TestOutcome) -> Self {
        Self {
            ok: t.ok,
            latency_ms: t.latency_ms,
            error: t.error,
            error_code: t.error_code.map(|c| c.as_str().to_string()),
            cdc: t.cdc.map(|c| CdcReadinessDto { ready: c.ready, reasons: c.reasons }),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FieldDto {
    pub name: String,
    /// `string, integer, number, decimal, boolean, timestamp, date, object, array, binary`.
    #[serde(rename = "type")]
    pub field_type: String,
    pub nullable: bool,
    pub primary_key: bool,
}

impl From<&Field> for FieldDto {
    fn from(f: &Field) -> Self {
        Self {
            name: f.name.clone(),
            field_type: f.field_type.as_str().into(),
            nullable: f.nullable,
            primary_key: f.primary_key,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EntityDto {
    pub name: String,
    pub fields: Vec<FieldDto>,
}

impl From<&EntitySchema> for EntityDto {
    fn from(e: &EntitySchema) -> Self {
        Self { name: e.name.clone(), fields: e.fields.iter().map(Into::into).collect() }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DiscoverResponse {
    pub entities: Vec<EntityDto>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"entity": "public.orders", "limit": 20})))]
pub struct PreviewBody {
    pub entity: String,
    /// 1–1000, default 20.
    pub limit: Option<i64>,
}

impl PreviewBody {
    fn request(&self, connection: Uuid) -> PreviewRequest {
        PreviewRequest { connection: ConnectionId::from(connection), entity: self.entity.clone(), limit: self.limit }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"entity": "public.customers", "limit": 5, "transform": [{"field": "email", "op": "mask"}, {"from": "id", "op": "rename", "to": "customer_id"}]})))]
pub struct PreviewTransformBody {
    pub entity: String,
    pub limit: Option<i64>,
    /// Steps: rename, drop, cast, mask, filter, set.
    #[schema(value_type = Vec<Object>)]
    pub transform: Value,
}

impl PreviewTransformBody {
    fn request(&self, connection: Uuid) -> PreviewRequest {
        PreviewRequest { connection: ConnectionId::from(connection), entity: self.entity.clone(), limit: self.limit }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewResponse {
    pub entity: String,
    pub fields: Vec<FieldDto>,
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<Map<String, Value>>,
}

fn new_connection(
    name: String,
    integration_id: Option<Uuid>,
    t: String,
    cap: CapabilityDto,
    config: Option<BTreeMap<String, Value>>,
) -> NewConnection {
    NewConnection {
        name,
        integration_id: integration_id.map(IntegrationId::from),
        connector_type: t,
        capability: cap.into(),
        config: config.unwrap_or_default(),
    }
}

/// Connections of an organization.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<ConnectionResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/connections")]
pub async fn list_connections(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<ConnectionResponse>>> {
    let page = state.sluice.connect.list_connections(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, Into::into)))
}

/// Creates a connection (Editor).
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CreateConnectionBody, responses((status = 201, body = ConnectionResponse), (status = 403, body = ErrorBody),
    (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/connections")]
pub async fn create_connection(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateConnectionBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let b = body.into_inner();
    let c = state
        .sluice
        .connect
        .create_connection(
            &caller.principal,
            org,
            new_connection(b.name, b.integration_id, b.connector_type, b.capability, b.config),
        )
        .await?;
    let id = c.id;
    Ok(created(format!("/v1/organizations/{org}/connections/{id}"), &ConnectionResponse::from(c)))
}

/// Tests a connection that is not saved (Editor). A failed test is `ok: false`, not an HTTP error.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = TestConnectionBody, responses((status = 200, body = TestResponse), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/connections/test")]
pub async fn test_unsaved(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<TestConnectionBody>,
) -> ApiResult<Json<TestResponse>> {
    let b = body.into_inner();
    let mut nc = new_connection(
        b.name.unwrap_or_else(|| "unsaved".into()),
        b.integration_id,
        b.connector_type,
        CapabilityDto::Both,
        b.config,
    );
    nc.capability = match b.capability {
        Some(c) => c.into(),
        None => state.sluice.connect.default_capability(&nc.connector_type),
    };
    Ok(Json(state.sluice.connect.test_unsaved_connection(&caller.principal, OrgId::from(*path), nc).await?.into()))
}

/// One connection.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ConnectionResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/connections/{connectionId}")]
pub async fn get_connection(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<ConnectionResponse>> {
    let (org, id) = path.into_inner();
    Ok(Json(state.sluice.connect.get_connection(&caller.principal, org.into(), ConnectionId::from(id)).await?.into()))
}

/// Changes a connection (Editor); a changed setting resets its status to `untested`.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateConnectionBody, responses((status = 200, body = ConnectionResponse), (status = 403, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[patch("/organizations/{orgId}/connections/{connectionId}")]
pub async fn update_connection(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<UpdateConnectionBody>,
) -> ApiResult<Json<ConnectionResponse>> {
    let (org, id) = path.into_inner();
    let b = body.into_inner();
    let integration_id = match b.integration_id {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(IntegrationId::from(Uuid::parse_str(&s).map_err(|_| {
            ApiError::validation(vec![sluice_domain::FieldError::new("integration_id", "must be a UUID or null")])
        })?))),
        Some(_) => {
            return Err(ApiError::validation(vec![sluice_domain::FieldError::new(
                "integration_id",
                "must be a UUID or null",
            )]));
        }
    };
    // Through the flows' context: a source that flows capture through
    // is not moved from under their replication slots.
    let c = state
        .sluice
        .sync
        .update_connection(
            &caller.principal,
            org.into(),
            ConnectionId::from(id),
            ConnectionUpdate {
                name: b.name,
                integration_id,
                capability: b.capability.map(Into::into),
                config: b.config,
            },
        )
        .await?;
    Ok(Json(c.into()))
}

/// Deletes a connection (Editor).
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[delete("/organizations/{orgId}/connections/{connectionId}")]
pub async fn delete_connection(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.connect.delete_connection(&caller.principal, org.into(), ConnectionId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Tests a saved connection and records the result on it (Editor).
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = TestResponse), (status = 404, body = ErrorBody)))]
#[post("/organizations/{orgId}/connections/{connectionId}/test")]
pub async fn test_saved(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<TestResponse>> {
    let (org, id) = path.into_inner();
    Ok(Json(state.sluice.connect.test_connection(&caller.principal, org.into(), ConnectionId::from(id)).await?.into()))
}

/// Discovers the entities of a source and catalogues each as a discovered data asset (Editor).
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = DiscoverResponse), (status = 404, body = ErrorBody), (status = 422, description = "the source failed", body = ErrorBody)))]
#[post("/organizations/{orgId}/connections/{connectionId}/discover")]
pub async fn discover(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<DiscoverResponse>> {
    let (org, id) = path.into_inner();
    let entities = state.sluice.connect.discover(&caller.principal, org.into(), ConnectionId::from(id)).await?;
    Ok(Json(DiscoverResponse { entities: entities.iter().map(Into::into).collect() }))
}

fn preview_response(p: sluice_domain::connect::service::Preview) -> PreviewResponse {
    PreviewResponse {
        entity: p.entity,
        fields: p.batch.fields.iter().map(Into::into).collect(),
        records: p.batch.to_json_records(),
    }
}

/// The first records of an entity.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = PreviewBody, responses((status = 200, body = PreviewResponse), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/connections/{connectionId}/preview")]
pub async fn preview(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<PreviewBody>,
) -> ApiResult<Json<PreviewResponse>> {
    let (org, id) = path.into_inner();
    let p = state.sluice.connect.preview(&caller.principal, org.into(), &body.request(id)).await?;
    Ok(Json(preview_response(p)))
}

/// The first records of an entity after transform steps.
#[utoipa::path(tag = "connections", params(("orgId" = Uuid, Path), ("connectionId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = PreviewTransformBody, responses((status = 200, body = PreviewResponse), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/connections/{connectionId}/preview/transform")]
pub async fn preview_transform(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<PreviewTransformBody>,
) -> ApiResult<Json<PreviewResponse>> {
    let (org, id) = path.into_inner();
    let steps = transform::parse_steps("transform", &body.transform).map_err(ApiError::validation)?;
    let p = state.sluice.sync.preview_transform(&caller.principal, org.into(), &body.request(id), &steps).await?;
    Ok(Json(preview_response(p)))
}
