//! `GET /v1/health`.

use crate::AppState;

use actix_web::{HttpResponse, get, web::Data};
use serde::Serialize;
use utoipa::ToSchema;

/// Liveness of the service and its metadata store.
#[utoipa::path(tag = "system", responses(
    (status = 200, description = "serving", body = HealthResponse),
    (status = 503, description = "the metadata store does not answer", body = HealthResponse)))]
#[get("/health")]
pub async fn health(state: Data<AppState>) -> HttpResponse {
    let version = env!("CARGO_PKG_VERSION").to_string();
    match state.sluice.monitoring.health().await {
        Ok(()) => HttpResponse::Ok().json(HealthResponse { status: "ok".into(), database: "ok".into(), version }),
        Err(e) => {
            tracing::error!(error = %e, "health check: metadata store unavailable");
            HttpResponse::ServiceUnavailable().json(HealthResponse {
                status: "degraded".into(),
                database: "unavailable".into(),
                version,
            })
        }
    }
}

// ---- wire types ----------------------------------------------------------

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthResponse {
    /// `ok`, or `degraded` when the metadata store does not answer.
    pub status: String,
    pub database: String,
    pub version: String,
}
