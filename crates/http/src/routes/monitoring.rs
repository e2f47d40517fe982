//! Monitoring: the organization's dashboard.

use crate::AppState;
use crate::error::{ApiResult, ErrorBody};
use crate::session::Caller;
use actix_web::get;
use actix_web::web::{Data, Json, Path};
use serde::Serialize;
use sluice_domain::shared::ids::OrgId;
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct FlowCounts {
    pub total: u64,
    pub active: u64,
    pub paused: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunCounts {
    pub succeeded: u64,
    /// Runs that failed or stopped on schema drift.
    pub failed: u64,
    pub running: u64,
    pub queued: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionCounts {
    pub healthy: u64,
    pub failing: u64,
    pub untested: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ValidationCounts {
    /// Gateway validations counted this month.
    pub used: i64,
    /// The plan's monthly validations; `null` for unlimited.
    pub limit: Option<i64>,
    /// When the count starts again.
    #[serde(with = "time::serde::rfc3339")]
    pub period_end: OffsetDateTime,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DashboardResponse {
    pub flows: FlowCounts,
    /// Runs queued in the last 24 hours, by status.
    pub runs_24h: RunCounts,
    /// Rows written by the runs that ended in the last 24 hours.
    pub rows_synced_24h: u64,
    pub connections: ConnectionCounts,
    pub validations: ValidationCounts,
}

/// The organization at a glance: flows, the last day's runs and rows,
/// connections' health and this month's gateway validations.
#[utoipa::path(tag = "activity", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, body = DashboardResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/dashboard")]
pub async fn dashboard(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<Json<DashboardResponse>> {
    let org = OrgId::from(*path);
    let c = state.sluice.monitoring.dashboard(&caller.principal, org).await?;
    let v = state.sluice.billing.validations(&caller.principal, org).await?;
    Ok(Json(DashboardResponse {
        flows: FlowCounts { total: c.flows_active + c.flows_paused, active: c.flows_active, paused: c.flows_paused },
        runs_24h: RunCounts {
            succeeded: c.runs_succeeded,
            failed: c.runs_failed,
            running: c.runs_running,
            queued: c.runs_queued,
        },
        rows_synced_24h: c.rows_synced,
        connections: ConnectionCounts {
            healthy: c.connections_healthy,
            failing: c.connections_failing,
            untested: c.connections_untested,
        },
        validations: ValidationCounts {
            used: v.validations_used,
            limit: v.validations_limit,
            period_end: v.validations_period_end,
        },
    }))
}
