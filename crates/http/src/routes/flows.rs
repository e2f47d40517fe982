//! Flows, runs, run logs and cursors.

use super::created;
use crate::AppState;
use crate::dto::ListResponse;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::Body;
use crate::session::Caller;
use actix_web::web::{Data, Json, Path, Query};
use actix_web::{HttpResponse, delete, get, patch, post, put};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_domain::FieldError;
use sluice_domain::shared::ids::{ConnectionId, FlowId, OrgId, RunId};
use sluice_domain::shared::page::PageRequest;
use sluice_domain::sync::flow::{
    Cursor, EntityStats, Flow, FlowConfig, FlowStatus, Run, RunLog, RunStatus, Trigger, edges,
};
use sluice_domain::sync::service::{EntityState, FlowUpdate, NewFlow};
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"config": {"mappings": [{"cursor_field": "updated_at", "primary_key": "id", "source_entity": "public.orders", "sync_mode": "incremental_deduped"}]}, "destination_connection_id": "01a20900-0000-7000-8000-000000000002", "name": "orders", "schedule": "*/15 * * * *", "source_connection_id": "01a20900-0000-7000-8000-000000000001"})))]
pub struct CreateFlowBody {
    pub name: String,
    pub source_connection_id: Uuid,
    pub destination_connection_id: Uuid,
    /// Five-field cron expression (UTC), or null for manual runs only.
    pub schedule: Option<String>,
    /// `{mappings: [{source_entity, dest_entity?, sync_mode, cursor_field?, primary_key?, transform?, schema_policy?, cursor_lookback?, delete_mode?}], depends_on?: [{flow, on}], continuous?, verify?}`; `sync_mode` also `cdc_deduped` or `cdc_append` for a source that captures changes, and `continuous: true` (CDC mappings only, no schedule) keeps one run going (docs/cdc.md); `verify: "after_run"` verifies the destination after each successful run (docs/sync.md)
    #[schema(value_type = Object)]
    pub config: FlowConfig,
    /// `active` (default) or `paused`.
    pub status: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"schedule": null, "status": "paused"})))]
pub struct UpdateFlowBody {
    pub name: Option<String>,
    pub source_connection_id: Option<Uuid>,
    pub destination_connection_id: Option<Uuid>,
    /// A cron expression, or null to remove the schedule.
    #[serde(default, deserialize_with = "super::present")]
    #[schema(value_type = Option<String>)]
    pub schedule: Option<Value>,
    #[schema(value_type = Object)]
    pub config: Option<FlowConfig>,
    pub status: Option<String>,
}

fn status_of(s: Option<&str>) -> Result<Option<FlowStatus>, ApiError> {
    match s {
        None => Ok(None),
        Some(x) => FlowStatus::parse(x)
            .map(Some)
            .ok_or_else(|| ApiError::validation(vec![FieldError::new("status", "must be active or paused")])),
    }
}

/// One entity's progress in a run, as `RunResponse.entities` holds it (the
/// domain's `EntityStats`, described for the OpenAPI document).
#[derive(ToSchema)]
#[schema(examples(json!({"bytes": 9830400, "checkpoint_at": "2026-11-23T10:00:01Z", "cursor_after": "2026-11-23T09:12:44Z", "cursor_before": "2026-11-22T00:00:00Z", "duration_ms": 1840, "entity": "public.orders", "rows_per_second": 81521.7, "rows_read": 150000, "rows_written": 150000, "status": "running"})))]
#[allow(dead_code)] // a schema only
pub struct EntityProgress {
    pub entity: String,
    /// `running`, `succeeded`, `failed`, `drift_detected`, `canceled` or `paused`.
    pub status: String,
    pub rows_read: u64,
    /// Rows committed to the destination, earlier attempts' included.
    pub rows_written: u64,
    pub bytes: u64,
    /// The cursor the run started from.
    pub cursor_before: Option<String>,
    /// The cursor stored at the last checkpoint (or the end).
    pub cursor_after: Option<String>,
    pub duration_ms: u64,
    /// When the last checkpoint committed.
    #[schema(format = DateTime)]
    pub checkpoint_at: Option<String>,
    /// Rows written per second so far.
    pub rows_per_second: Option<f64>,
    /// Why the entity failed.
    pub error: Option<String>,
    /// The failure's code where it has one of its own: `position_lost`
    /// (a change stream no longer holds what the entity had not read).
    pub error_code: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunResponse {
    pub id: Uuid,
    pub flow_id: Uuid,
    pub trace_id: Uuid,
    /// `schedule`, `manual`, `upstream` or `api`.
    pub trigger: String,
    /// `queued`, `running`, `succeeded`, `failed`, `canceled` or `drift_detected`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    pub queued_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// Per entity, updated at each checkpoint while the run goes on.
    #[schema(value_type = Vec<EntityProgress>)]
    pub entities: Vec<EntityStats>,
    pub error: Option<String>,
    /// The attempt executing (or that executed) the run: 1, then one more
    /// each time it is retried or taken over from a lost worker.
    pub attempt: u32,
    /// In the answer to `POST …/flows/{flowId}/run` only: the run this one
    /// is queued behind (the flow's run still running, or queued before
    /// it), which ends first; absent when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_behind: Option<Uuid>,
}

impl From<Run> for RunResponse {
    fn from(r: Run) -> Self {
        Self {
            id: r.id.as_uuid(),
            flow_id: r.flow_id.as_uuid(),
            trace_id: r.trace_id,
            trigger: r.trigger.as_str().into(),
            status: r.status.as_str().into(),
            queued_at: r.queued_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            entities: r.entities,
            error: r.error,
            attempt: r.attempt,
            queued_behind: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FlowResponse {
    pub id: Uuid,
    pub name: String,
    pub source_connection_id: Uuid,
    pub destination_connection_id: Uuid,
    pub schedule: Option<String>,
    #[schema(value_type = Object)]
    pub config: FlowConfig,
    /// `active` or `paused`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_run_at: Option<OffsetDateTime>,
    pub last_run: Option<RunResponse>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// In the answer to creating a flow only: what its creator should know,
    /// one line each (an incremental mapping that nothing protects from rows
    /// committed late, say); absent when there is nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl FlowResponse {
    fn new(f: Flow, last_run: Option<Run>) -> Self {
        Self {
            id: f.id.as_uuid(),
            name: f.name,
            source_connection_id: f.source_connection_id.as_uuid(),
            destination_connection_id: f.destination_connection_id.as_uuid(),
            schedule: f.schedule,
            config: f.config,
            status: f.status.as_str().into(),
            next_run_at: f.next_run_at,
            last_run: last_run.map(Into::into),
            created_at: f.created_at,
            updated_at: f.updated_at,
            warnings: Vec::new(),
        }
    }
}

async fn last_run(state: &AppState, caller: &Caller, org: OrgId, flow: FlowId) -> ApiResult<Option<Run>> {
    let page =
        state.sluice.sync.list_runs(&caller.principal, org, flow, None, PageRequest { limit: 1, after: None }).await?;
    Ok(page.items.into_iter().next())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FlowQuery {
    /// `active` or `paused`.
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// Flows of an organization, newest first.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), FlowQuery), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<FlowResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows")]
pub async fn list(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<FlowQuery>,
) -> ApiResult<Json<ListResponse<FlowResponse>>> {
    let org = OrgId::from(*path);
    let page = PageRequest::parse(q.limit, q.cursor.as_deref())?;
    let flows =
        state.sluice.sync.list_flow_overviews(&caller.principal, org, status_of(q.status.as_deref())?, page).await?;
    let data = flows.items.into_iter().map(|o| FlowResponse::new(o.flow, o.last_run)).collect();
    Ok(Json(ListResponse { data, next_cursor: flows.next_cursor }))
}

/// Creates a flow (Editor), validated against its connections and the source's schema.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])), request_body = CreateFlowBody,
    responses((status = 201, body = FlowResponse), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/flows")]
pub async fn create(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateFlowBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let b = body.into_inner();
    let f = state
        .sluice
        .sync
        .create_flow(
            &caller.principal,
            org,
            NewFlow {
                name: b.name,
                source_connection_id: ConnectionId::from(b.source_connection_id),
                destination_connection_id: ConnectionId::from(b.destination_connection_id),
                schedule: b.schedule,
                config: b.config,
                status: status_of(b.status.as_deref())?.unwrap_or(FlowStatus::Active),
            },
        )
        .await?;
    let id = f.id;
    let warnings = state.sluice.sync.late_commit_warnings(&caller.principal, org, &f).await?;
    let mut body = FlowResponse::new(f, None);
    body.warnings = warnings;
    Ok(created(format!("/v1/organizations/{org}/flows/{id}"), &body))
}

/// One flow with its last run.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = FlowResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/{flowId}")]
pub async fn get(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<Json<FlowResponse>> {
    let (org, id) = path.into_inner();
    let f = state.sluice.sync.get_flow(&caller.principal, org.into(), FlowId::from(id)).await?;
    let last = last_run(&state, &caller, org.into(), f.id).await?;
    Ok(Json(FlowResponse::new(f, last)))
}

/// Changes a flow (Editor).
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateFlowBody, responses((status = 200, body = FlowResponse), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[patch("/organizations/{orgId}/flows/{flowId}")]
pub async fn update(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<UpdateFlowBody>,
) -> ApiResult<Json<FlowResponse>> {
    let (org, id) = path.into_inner();
    let b = body.into_inner();
    let schedule = match b.schedule {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s)),
        Some(_) => {
            return Err(ApiError::validation(vec![FieldError::new("schedule", "must be a cron expression or null")]));
        }
    };
    let f = state
        .sluice
        .sync
        .update_flow(
            &caller.principal,
            org.into(),
            FlowId::from(id),
            FlowUpdate {
                name: b.name,
                source_connection_id: b.source_connection_id.map(Into::into),
                destination_connection_id: b.destination_connection_id.map(Into::into),
                schedule,
                config: b.config,
                status: status_of(b.status.as_deref())?,
            },
        )
        .await?;
    let last = last_run(&state, &caller, org.into(), f.id).await?;
    Ok(Json(FlowResponse::new(f, last)))
}

/// Deletes a flow with its runs and cursors (Editor); the destination's data stays.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[delete("/organizations/{orgId}/flows/{flowId}")]
pub async fn remove(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.sync.delete_flow(&caller.principal, org.into(), FlowId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Queues a run (Editor): 202 with the run, which a worker then executes.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 202, body = RunResponse), (status = 404, body = ErrorBody)))]
#[post("/organizations/{orgId}/flows/{flowId}/run")]
pub async fn run(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    let trigger = if caller.claims.is_some() { Trigger::Manual } else { Trigger::Api };
    let r = state.sluice.sync.trigger_run(&caller.principal, org.into(), FlowId::from(id), trigger).await?;
    let ahead = state.sluice.sync.run_ahead(&caller.principal, org.into(), &r).await?;
    let rid = r.id;
    let mut body = RunResponse::from(r);
    body.queued_behind = ahead.map(|a| a.id.as_uuid());
    Ok(HttpResponse::Accepted()
        .insert_header((actix_web::http::header::LOCATION, format!("/v1/organizations/{org}/runs/{rid}")))
        .json(body))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunQuery {
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// Run history of a flow, newest first.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path), RunQuery), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<RunResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/{flowId}/runs")]
pub async fn runs(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    q: Query<RunQuery>,
) -> ApiResult<Json<ListResponse<RunResponse>>> {
    let (org, id) = path.into_inner();
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(
            RunStatus::parse(s)
                .ok_or_else(|| ApiError::validation(vec![FieldError::new("status", "is not a run status")]))?,
        ),
    };
    let page = PageRequest::parse(q.limit, q.cursor.as_deref())?;
    let p = state.sluice.sync.list_runs(&caller.principal, org.into(), FlowId::from(id), status, page).await?;
    Ok(Json(ListResponse::from_page(p, Into::into)))
}

/// One run with its per-entity stats.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("runId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = RunResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/runs/{runId}")]
pub async fn get_run(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<Json<RunResponse>> {
    let (org, id) = path.into_inner();
    Ok(Json(state.sluice.sync.get_run(&caller.principal, org.into(), RunId::from(id)).await?.into()))
}

/// Cancels a queued or running run (Editor); a running one stops at its next checkpoint.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("runId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = RunResponse), (status = 404, body = ErrorBody), (status = 409, description = "already finished", body = ErrorBody)))]
#[post("/organizations/{orgId}/runs/{runId}/cancel")]
pub async fn cancel(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<Json<RunResponse>> {
    let (org, id) = path.into_inner();
    Ok(Json(state.sluice.sync.cancel_run(&caller.principal, org.into(), RunId::from(id)).await?.into()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogLine {
    #[serde(with = "time::serde::rfc3339")]
    pub ts: OffsetDateTime,
    pub level: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    pub message: String,
}

impl From<RunLog> for LogLine {
    fn from(l: RunLog) -> Self {
        Self { ts: l.ts, level: l.level.as_str().into(), entity: l.entity, message: l.message }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogsResponse {
    pub run_id: Uuid,
    pub data: Vec<LogLine>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// RFC 3339; lines at or after.
    pub since: Option<String>,
    /// 1–1000, default all.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// Log lines of one run, oldest first.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("runId" = Uuid, Path), LogsQuery),
    security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = LogsResponse), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[get("/organizations/{orgId}/logs/{runId}")]
pub async fn logs(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    q: Query<LogsQuery>,
) -> ApiResult<Json<LogsResponse>> {
    let (org, id) = path.into_inner();
    let since = match q.since.as_deref() {
        None => None,
        Some(s) => Some(
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|_| ApiError::validation(vec![FieldError::new("since", "must be an RFC 3339 timestamp")]))?,
        ),
    };
    let limit = match q.limit {
        None => usize::MAX,
        Some(l) if (1..=1000).contains(&l) => l as usize,
        Some(_) => return Err(ApiError::validation(vec![FieldError::new("limit", "must be between 1 and 1000")])),
    };
    let lines = state.sluice.sync.run_logs(&caller.principal, org.into(), RunId::from(id)).await?;
    let data = lines.into_iter().filter(|l| since.is_none_or(|s| l.ts >= s)).take(limit).map(Into::into).collect();
    Ok(Json(LogsResponse { run_id: id, data }))
}

/// How often the event stream looks for news of a run.
const EVENTS_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// The run's status and progress and its log lines, as server-sent events
/// until it ends: `run` (the run, at once and whenever it changes), `log`
/// (each line), then `end` (the finished run). A comment every poll
/// keeps proxies from closing an idle stream.
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("runId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, description = "`text/event-stream`: events `run`, `log` and `end`, each with a JSON `data`"),
    (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/runs/{runId}/events")]
pub async fn run_events(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    let (org, id) = (OrgId::from(org), RunId::from(id));
    // Access and existence are checked before the stream starts: errors are
    // plain responses.
    let first = state.sluice.sync.get_run(&caller.principal, org, id).await?;
    struct Follow {
        state: Data<AppState>,
        principal: sluice_domain::identity::Principal,
        last: Option<String>,
        sent_lines: usize,
        done: bool,
        first: Option<Run>,
    }
    let follow =
        Follow { state, principal: caller.principal, last: None, sent_lines: 0, done: false, first: Some(first) };
    let frame = |event: &str, data: &serde_json::Value| format!("event: {event}\ndata: {data}\n\n");
    let stream = futures_util::stream::unfold(follow, move |mut f| async move {
        if f.done {
            return None;
        }
        let current = match f.first.take() {
            Some(r) => r,
            None => {
                tokio::time::sleep(EVENTS_POLL).await;
                match f.state.sluice.sync.get_run(&f.principal, org, id).await {
                    Ok(r) => r,
                    Err(e) => {
                        f.done = true;
                        let body = serde_json::json!({"error": e.to_string()});
                        return Some((
                            Ok::<_, actix_web::Error>(actix_web::web::Bytes::from(frame("error", &body))),
                            f,
                        ));
                    }
                }
            }
        };
        let mut out = String::new();
        if let Ok(lines) = f.state.sluice.sync.run_logs(&f.principal, org, id).await {
            for l in lines.into_iter().skip(f.sent_lines) {
                f.sent_lines += 1;
                let line = serde_json::to_value(LogLine::from(l)).unwrap_or_default();
                out.push_str(&frame("log", &line));
            }
        }
        let finished = current.status.finished();
        let body = serde_json::to_value(RunResponse::from(current)).unwrap_or_default();
        let text = body.to_string();
        if finished {
            out.push_str(&frame("end", &body));
            f.done = true;
        } else if f.last.as_deref() != Some(&text) {
            out.push_str(&frame("run", &body));
            f.last = Some(text);
        } else {
            out.push_str(": waiting\n\n");
        }
        Some((Ok(actix_web::web::Bytes::from(out)), f))
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CursorResponse {
    pub entity: String,
    /// `"$position"` for a CDC entity.
    pub cursor_field: Option<String>,
    /// A CDC entity's position: the one its destination holds (a
    /// PostgreSQL LSN, `16/B374D848`).
    pub cursor_value: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// A CDC entity's copy (absent for other entities).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotResponse>,
    /// `true` while a clear and resync is pending: the next run replaces
    /// the destination's table with a full copy (absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub clear_pending: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotResponse {
    /// `pending` (not copied yet, or asked to copy again), `running` or `done`.
    pub state: &'static str,
    pub chunks_done: u64,
    pub chunks_total: u64,
}

impl From<Cursor> for CursorResponse {
    fn from(c: Cursor) -> Self {
        Self {
            entity: c.entity,
            cursor_field: c.mark.field().map(str::to_string),
            cursor_value: c.mark.value().map(str::to_string),
            updated_at: c.updated_at,
            snapshot: None,
            clear_pending: false,
        }
    }
}

impl From<EntityState> for CursorResponse {
    fn from(s: EntityState) -> Self {
        let snapshot = s.snapshot.map(|p| SnapshotResponse {
            state: p.state,
            chunks_done: p.chunks_done,
            chunks_total: p.chunks_total,
        });
        CursorResponse { snapshot, clear_pending: s.clearing, ..s.cursor.into() }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StateResponse {
    pub flow_id: Uuid,
    pub data: Vec<CursorResponse>,
}

// The specification calls a flow's cursors its "state"; the domain calls
// them cursors (`sync.cursors`).
/// The cursor of every entity of the flow (null where none is stored).
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = StateResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/{flowId}/state")]
pub async fn get_state(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<StateResponse>> {
    let (org, id) = path.into_inner();
    let states = state.sluice.sync.state(&caller.principal, org.into(), FlowId::from(id)).await?;
    Ok(Json(StateResponse { flow_id: id, data: states.into_iter().map(Into::into).collect() }))
}

/// Clears the entity's destination table and syncs it again (Editor;
/// audited): answers 202 with the run queued, which replaces the table
/// with a full copy of the source when the copy commits, then stores the
/// cursor it reached. A CDC entity is copied again in a snapshot.
/// 409 `run_in_progress` while a run of the flow is running.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path), ("entity" = String, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 202, body = RunResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 409, body = ErrorBody)))]
#[post("/organizations/{orgId}/flows/{flowId}/state/{entity}/resync")]
pub async fn resync_entity(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid, String)>,
) -> ApiResult<HttpResponse> {
    let (org, id, entity) = path.into_inner();
    let r = state.sluice.sync.clear_and_resync(&caller.principal, org.into(), FlowId::from(id), &entity).await?;
    let rid = r.id;
    Ok(HttpResponse::Accepted()
        .insert_header((actix_web::http::header::LOCATION, format!("/v1/organizations/{org}/runs/{rid}")))
        .json(RunResponse::from(r)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"cursor_value": "2026-01-01T00:00:00Z"})))]
pub struct SetCursorBody {
    /// ISO 8601 for a timestamp cursor, an integer for an id.
    pub cursor_value: String,
}

/// Sets an entity's cursor (Editor; audit-logged). The next run reads records at or past it.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path), ("entity" = String, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = SetCursorBody, responses((status = 200, body = CursorResponse), (status = 404, body = ErrorBody),
    (status = 409, description = "a run is executing", body = ErrorBody), (status = 422, body = ErrorBody)))]
#[put("/organizations/{orgId}/flows/{flowId}/state/{entity}")]
pub async fn set_state(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid, String)>,
    body: Body<SetCursorBody>,
) -> ApiResult<Json<CursorResponse>> {
    let (org, id, entity) = path.into_inner();
    let c = state
        .sluice
        .sync
        .set_cursor(&caller.principal, org.into(), FlowId::from(id), &entity, &body.cursor_value)
        .await?;
    Ok(Json(c.into()))
}

/// Clears an entity's cursor (Editor; audit-logged): the next run reads everything; the destination is not truncated.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path), ("entity" = String, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[delete("/organizations/{orgId}/flows/{flowId}/state/{entity}")]
pub async fn reset_state(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid, String)>,
) -> ApiResult<HttpResponse> {
    let (org, id, entity) = path.into_inner();
    state.sluice.sync.reset_cursor(&caller.principal, org.into(), FlowId::from(id), &entity).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DetailsResponse {
    pub flow: FlowResponse,
    /// The last 20 runs, newest first.
    pub runs: Vec<RunResponse>,
    pub cursors: Vec<CursorResponse>,
    /// Flows this one depends on, and flows that depend on it.
    pub upstream: Vec<FlowRef>,
    pub downstream: Vec<FlowRef>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FlowRef {
    pub id: Uuid,
    pub name: String,
    /// `success`, `failure` or `completion`.
    pub on: String,
}

/// A flow with its last 20 runs, its cursors, and its upstream and downstream flows.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path), ("flowId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = DetailsResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/{flowId}/details")]
pub async fn details(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<DetailsResponse>> {
    let (org, id) = path.into_inner();
    let d = state.sluice.sync.flow_details(&caller.principal, OrgId::from(org), FlowId::from(id)).await?;
    let neighbour = |n: sluice_domain::sync::views::Neighbour| FlowRef {
        id: n.id.as_uuid(),
        name: n.name,
        on: n.on.as_str().into(),
    };
    let last = d.runs.first().cloned();
    Ok(Json(DetailsResponse {
        flow: FlowResponse::new(d.flow, last),
        runs: d.runs.into_iter().map(Into::into).collect(),
        cursors: d.state.into_iter().map(Into::into).collect(),
        upstream: d.upstream.into_iter().map(neighbour).collect(),
        downstream: d.downstream.into_iter().map(neighbour).collect(),
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopologyNode {
    pub id: Uuid,
    pub name: String,
    pub status: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopologyEdge {
    /// The upstream flow.
    pub from: Uuid,
    /// The downstream flow.
    pub to: Uuid,
    /// `success`, `failure` or `completion`.
    pub on: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopologyResponse {
    pub nodes: Vec<TopologyNode>,
    pub edges: Vec<TopologyEdge>,
}

/// The organization's flow dependency graph.
#[utoipa::path(tag = "flows", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = TopologyResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/topology")]
pub async fn topology(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<Json<TopologyResponse>> {
    let flows = state.sluice.sync.topology(&caller.principal, OrgId::from(*path)).await?;
    let nodes = flows
        .iter()
        .map(|f| TopologyNode { id: f.id.as_uuid(), name: f.name.clone(), status: f.status.as_str().into() })
        .collect();
    let edges = edges(&flows)
        .into_iter()
        .map(|e| TopologyEdge { from: e.from.as_uuid(), to: e.to.as_uuid(), on: e.on.as_str().into() })
        .collect();
    Ok(Json(TopologyResponse { nodes, edges }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TraceResponse {
    pub trace_id: Uuid,
    /// In start order.
    pub runs: Vec<RunResponse>,
}

/// All runs of one execution trace (a run and the downstream runs it caused).
#[utoipa::path(tag = "runs", params(("orgId" = Uuid, Path), ("traceId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = TraceResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/flows/traces/{traceId}")]
pub async fn get_trace(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<Json<TraceResponse>> {
    let (org, trace_id) = path.into_inner();
    let in_trace = state.sluice.sync.trace(&caller.principal, org.into(), trace_id).await?;
    Ok(Json(TraceResponse { trace_id, runs: in_trace.into_iter().map(Into::into).collect() }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ActivityResponse {
    pub id: Uuid,
    /// e.g. `run.succeeded`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// `info`, `warning` or `error`.
    pub severity: String,
    pub message: String,
    #[schema(value_type = Object)]
    pub data: Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ActivityQuery {
    /// RFC 3339; events at or after.
    pub since: Option<String>,
    /// 1–200, default 50.
    pub limit: Option<i64>,
}

/// System events (activity feed), newest first.
#[utoipa::path(tag = "activity", params(("orgId" = Uuid, Path), ActivityQuery), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = ListResponse<ActivityResponse>), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[get("/organizations/{orgId}/activity")]
pub async fn activity(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<ActivityQuery>,
) -> ApiResult<Json<ListResponse<ActivityResponse>>> {
    let since = match q.since.as_deref() {
        None => None,
        Some(s) => Some(
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|_| ApiError::validation(vec![FieldError::new("since", "must be an RFC 3339 timestamp")]))?,
        ),
    };
    let limit = PageRequest::parse(q.limit, None)?.limit;
    let events = state.sluice.monitoring.activity(&caller.principal, OrgId::from(*path), since, limit).await?;
    let data = events
        .into_iter()
        .map(|e| ActivityResponse {
            id: e.id,
            event_type: e.event_type.to_string(),
            severity: e.severity,
            message: e.message,
            data: e.data,
            created_at: e.created_at,
        })
        .collect();
    Ok(Json(ListResponse { data, next_cursor: None }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"flow_id": "01a20900-0000-7000-8000-000000000003", "run_id": "01a20900-0000-7000-8000-000000000004", "status": "succeeded"})))]
pub struct OrchestrateBody {
    pub flow_id: Uuid,
    pub run_id: Uuid,
    /// The upstream run's outcome: `succeeded`, `failed`, `canceled` or `drift_detected`.
    pub status: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrchestrateResponse {
    /// The downstream runs queued, in the upstream run's trace.
    pub queued: Vec<RunResponse>,
}

/// Queues the downstream flows whose `depends_on` condition the given
/// outcome meets (internal key).
#[utoipa::path(tag = "internal", request_body = OrchestrateBody, security(("internal_key" = [])),
    responses((status = 200, body = OrchestrateResponse), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 422, body = ErrorBody), (status = 503, description = "no internal key configured", body = ErrorBody)))]
#[post("/internal/orchestrate/trigger")]
pub async fn orchestrate(
    state: Data<AppState>,
    _internal: crate::extract::InternalCaller,
    body: Body<OrchestrateBody>,
) -> ApiResult<Json<OrchestrateResponse>> {
    let status = RunStatus::parse(&body.status).filter(|s| s.finished()).ok_or_else(|| {
        ApiError::validation(vec![FieldError::new("status", "must be succeeded, failed, canceled or drift_detected")])
    })?;
    let queued =
        state.sluice.engine.orchestrate_trigger(FlowId::from(body.flow_id), RunId::from(body.run_id), status).await?;
    Ok(Json(OrchestrateResponse { queued: queued.into_iter().map(Into::into).collect() }))
}
