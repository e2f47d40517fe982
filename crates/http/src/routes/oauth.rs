//! The OAuth authorization-code flow: start (authenticated, redirects to the
//! provider) and callback (public, redirects to the console).

use crate::AppState;
use crate::error::{ApiResult, ErrorBody};
use crate::session::Caller;
use actix_web::web::{Data, Path, Query};
use actix_web::{HttpResponse, get};
use serde::Deserialize;
use sluice_domain::shared::ids::OrgId;
use utoipa::IntoParams;
use uuid::Uuid;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// Name of the integration to create or update with the tokens.
    pub name: String,
}

/// Starts the OAuth flow for `provider` (Editor): 302 to the provider's
/// authorize URL with PKCE and a signed, single-use state (10 minutes).
#[utoipa::path(tag = "oauth", params(("orgId" = Uuid, Path), ("provider" = String, Path), StartQuery), security(("bearer" = []), ("api_key" = [])),
    responses((status = 302, description = "to the provider"), (status = 404, description = "no such provider", body = ErrorBody)))]
#[get("/organizations/{orgId}/integrations/{provider}/auth/start")]
pub async fn start(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, String)>,
    q: Query<StartQuery>,
) -> ApiResult<HttpResponse> {
    let (org, provider) = path.into_inner();
    let url = state.sluice.connect.start_oauth(&caller.principal, OrgId::from(org), &provider, &q.name).await?;
    Ok(HttpResponse::Found().insert_header(("Location", url)).insert_header(("Cache-Control", "no-store")).finish())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    /// Set by the provider when the user refused.
    pub error: Option<String>,
}

/// The provider's redirect: exchanges the code, stores the tokens encrypted
/// in the integration, and sends the browser to the console.
#[utoipa::path(tag = "oauth", params(("provider" = String, Path), CallbackQuery),
    responses((status = 302, description = "to the console"), (status = 422, description = "bad, used or expired state; refused code", body = ErrorBody)))]
#[get("/connections/{provider}/auth/callback")]
pub async fn callback(state: Data<AppState>, path: Path<String>, q: Query<CallbackQuery>) -> ApiResult<HttpResponse> {
    let provider = path.into_inner();
    let console = state.console_url.trim_end_matches('/');
    let enc = |s: &str| {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    if let Some(e) = &q.error {
        let to = format!("{console}/v1/oauth/complete?status=error&provider={}&error={}", enc(&provider), enc(e));
        return Ok(HttpResponse::Found().insert_header(("Location", to)).finish());
    }
    let (org, integration) = state
        .sluice
        .connect
        .finish_oauth(&provider, q.state.as_deref().unwrap_or(""), q.code.as_deref().unwrap_or(""))
        .await?;
    let to = format!(
        "{console}/v1/oauth/complete?status=connected&provider={}&organization_id={org}&integration_id={}",
        enc(&provider),
        integration.id
    );
    Ok(HttpResponse::Found().insert_header(("Location", to)).finish())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CompleteQuery {
    pub status: Option<String>,
    pub error: Option<String>,
}

/// Where the browser lands when no separate console is configured.
#[utoipa::path(tag = "oauth", params(CompleteQuery), responses((status = 200, description = "a short HTML page")))]
#[get("/oauth/complete")]
pub async fn complete(q: Query<CompleteQuery>) -> HttpResponse {
    let ok = q.status.as_deref() == Some("connected");
    let text = if ok {
        "The integration is connected. You can close this window.".to_string()
    } else {
        let e: String = q
            .error
            .as_deref()
            .unwrap_or("unknown")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        format!("The provider did not authorize the integration ({e}). You can close this window and try again.")
    };
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(format!("<!doctype html><meta charset=utf-8><title>Sluice</title><p>{text}</p>"))
}
