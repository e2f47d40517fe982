//! Sluice's HTTP adapter: the JSON API's actix-web routes over the domain's
//! use cases, and the web plumbing the console (`sluice-console`) shares:
//! the state, the caller, errors, request ids and body reading.
//!
//! [`app`] builds the whole application (routes, middleware, error handling,
//! OpenAPI, and the pages it is given); the binary serves it and the tests
//! drive it in process, so both run the same thing.

pub mod body;
pub mod dto;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod middleware;
mod openapi_docs;
pub mod ratelimit;
pub mod routes;
pub mod session;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::web::{self, Data};
use actix_web::{App, HttpRequest, HttpResponse};
use sluice_domain::app::Sluice;
use sluice_domain::shared::secret::Secret;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_actix_web::AppExt;
use utoipa_actix_web::service_config::ServiceConfig;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub sluice: Sluice,
    /// The key of `/v1/internal/*`; `None` disables those endpoints (503).
    pub internal_api_key: Option<Secret>,
    /// Where the OAuth callback sends the browser at the end.
    pub console_url: String,
    /// Per-client rate limits; `None` switches them off.
    pub rate_limits: Option<std::sync::Arc<ratelimit::RateLimits>>,
    /// The operator's metrics (`GET /metrics`), shared with the domain's
    /// services that count into them.
    pub metrics: std::sync::Arc<metrics::Metrics>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sluice API",
        description = "Self-hosted data movement and governance. Errors share one body: `{error, code, details, request_id}`. \
Lists answer `{data, next_cursor}` and take `limit` (1-200) and `cursor`. Mutations accept `X-Idempotency-Key`.",
        license(name = "Apache-2.0")
    ),
    modifiers(&Security),
    tags(
        (name = "system"), (name = "users"), (name = "organizations"), (name = "members"),
        (name = "invitations"), (name = "api-keys"), (name = "audit"), (name = "connectors"),
        (name = "integrations"), (name = "connections"), (name = "oauth"), (name = "flows"), (name = "runs"), (name = "activity"), (name = "iac"), (name = "billing"), (name = "rules"), (name = "internal")
    )
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
        components
            .add_security_scheme("api_key", SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-Api-Key"))));
    }
}

/// Registers every documented `/v1` route.
fn v1(cfg: &mut ServiceConfig) {
    use routes::*;
    // actix tries resources in this order: the hottest paths come first.
    cfg.service(health::health)
        .service(gateway::validate)
        .service(users::me)
        .service(users::update_me)
        .service(users::sync_profile)
        .service(users::accept_invitation)
        .service(orgs::list)
        .service(orgs::create)
        .service(orgs::get)
        .service(orgs::update)
        .service(orgs::remove)
        .service(orgs::list_members)
        .service(orgs::update_member)
        .service(orgs::remove_member)
        .service(orgs::create_invitation)
        .service(orgs::list_invitations)
        .service(orgs::revoke_invitation)
        .service(orgs::create_api_key)
        .service(orgs::list_api_keys)
        .service(orgs::revoke_api_key)
        .service(orgs::audit_logs)
        .service(connections::capabilities)
        .service(connections::list_integrations)
        .service(connections::create_integration)
        .service(connections::get_integration)
        .service(connections::integration_details)
        .service(connections::update_integration)
        .service(connections::delete_integration)
        .service(connections::list_connections)
        .service(connections::create_connection)
        .service(connections::test_unsaved)
        .service(connections::get_connection)
        .service(connections::update_connection)
        .service(connections::delete_connection)
        .service(connections::test_saved)
        .service(connections::discover)
        .service(connections::preview)
        .service(connections::preview_transform)
        .service(catalog::list_assets)
        .service(catalog::create_asset)
        .service(catalog::get_asset)
        .service(catalog::update_asset)
        .service(catalog::delete_asset)
        .service(catalog::asset_versions)
        .service(catalog::asset_dependencies)
        .service(flows::list)
        .service(flows::create)
        .service(flows::topology)
        .service(flows::get_trace)
        .service(flows::get)
        .service(flows::update)
        .service(flows::remove)
        .service(flows::run)
        .service(flows::runs)
        .service(flows::get_run)
        .service(flows::cancel)
        .service(flows::logs)
        .service(flows::run_events)
        .service(flows::get_state)
        .service(flows::set_state)
        .service(flows::reset_state)
        .service(flows::resync_entity)
        .service(verifications::verify)
        .service(verifications::list_verifications)
        .service(verifications::get_verification)
        .service(flows::details)
        .service(flows::activity)
        .service(flows::orchestrate)
        .service(iac::apply)
        .service(iac::export)
        .service(iac::validate_drift)
        .service(oauth::start)
        .service(oauth::callback)
        .service(oauth::complete)
        .service(monitoring::dashboard)
        .service(rules::list)
        .service(rules::create)
        .service(rules::get)
        .service(rules::replace)
        .service(rules::remove)
        .service(rules::deliveries)
        .service(rules::test)
        .service(rules::notify)
        .service(billing::status)
        .service(billing::checkout)
        .service(billing::portal)
        .service(billing::stripe_webhook)
        .route("/openapi.json", web::get().to(openapi_json));
}

/// The generated document, serialized once at start-up.
struct OpenApiJson(Vec<u8>);

async fn openapi_json(doc: Data<OpenApiJson>) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(doc.0.clone())
}

/// The OpenAPI 3 document, generated from the handlers' annotations.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, api) = App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .service(utoipa_actix_web::scope("/v1").configure(v1))
        .split_for_parts();
    completed(api)
}

/// `api` with what the annotations leave out (response descriptions,
/// examples, unique operation ids), completed on the document as JSON: the
/// document served and the one committed are both this.
fn completed(api: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let mut doc = serde_json::to_value(&api).unwrap_or_default();
    openapi_docs::complete(&mut doc);
    serde_json::from_value(doc).unwrap_or(api)
}

/// `GET /metrics`: unauthenticated, like every Prometheus target.
async fn metrics_text(state: Data<AppState>) -> HttpResponse {
    let depth = match state.sluice.monitoring.queue_depth().await {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(error = %e, "the queue depth could not be read");
            None
        }
    };
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(state.metrics.render(depth))
}

/// The API's routes as templates (`/v1/organizations/{orgId}`) with their
/// methods, to tell an unknown path (404) from a known one asked with
/// another method (405).
struct Routes(Vec<(Vec<String>, Vec<&'static str>)>);

impl Routes {
    fn of(api: &utoipa::openapi::OpenApi) -> Self {
        let routes = api
            .paths
            .paths
            .iter()
            .map(|(path, item)| {
                let methods = [
                    ("GET", item.get.is_some()),
                    ("PUT", item.put.is_some()),
                    ("POST", item.post.is_some()),
                    ("DELETE", item.delete.is_some()),
                    ("PATCH", item.patch.is_some()),
                ]
                .into_iter()
                .filter_map(|(m, has)| has.then_some(m))
                .collect();
                (path.split('/').map(str::to_string).collect(), methods)
            })
            .collect();
        Routes(routes)
    }

    /// The methods of the route `path` matches, if any.
    fn allowed(&self, path: &str) -> Option<&[&'static str]> {
        let parts: Vec<&str> = path.split('/').collect();
        self.0.iter().find_map(|(template, methods)| {
            let fits = template.len() == parts.len()
                && template.iter().zip(&parts).all(|(t, p)| t == p || (t.starts_with('{') && !p.is_empty()));
            fits.then_some(methods.as_slice())
        })
    }
}

async fn not_found(req: HttpRequest, routes: Data<Routes>) -> HttpResponse {
    use actix_web::ResponseError;
    if let Some(allowed) = routes.allowed(req.path()).filter(|a| !a.contains(&req.method().as_str())) {
        let mut res = error::ApiError::new(
            sluice_domain::shared::error::Code::MethodNotAllowed,
            format!("{} {} is not allowed; use {}", req.method(), req.path(), allowed.join(", ")),
        )
        .error_response();
        if let Ok(v) = actix_web::http::header::HeaderValue::from_str(&allowed.join(", ")) {
            res.headers_mut().insert(actix_web::http::header::ALLOW, v);
        }
        return res;
    }
    error::ApiError::not_found(format!("no route for {} {}", req.method(), req.path())).error_response()
}

/// The application, ready for `HttpServer::new` or `actix_web::test::init_service`:
/// the API, and `pages` (the console's routes, `sluice_console::routes`)
/// beside it under the same middleware.
pub fn app(
    state: AppState,
    pages: impl FnOnce(&mut web::ServiceConfig),
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let (app, api) = App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .app_data(Data::new(state))
        .app_data(extract::json_config())
        .app_data(web::PathConfig::default().error_handler(extract::path_error))
        .app_data(web::QueryConfig::default().error_handler(extract::query_error))
        .service(utoipa_actix_web::scope("/v1").configure(v1))
        .split_for_parts();
    let api = completed(api);
    let doc = serde_json::to_vec_pretty(&api).unwrap_or_default();
    let routes = Data::new(Routes::of(&api));
    app.app_data(Data::new(OpenApiJson(doc)))
        .app_data(routes)
        .service(utoipa_swagger_ui::SwaggerUi::new("/docs/{_:.*}").url("/v1/openapi.json", api))
        .route("/metrics", web::get().to(metrics_text))
        .configure(pages)
        .route(
            "/docs",
            web::get()
                .to(|| async { HttpResponse::PermanentRedirect().insert_header(("Location", "/docs/")).finish() }),
        )
        .default_service(web::to(not_found))
        .wrap(actix_web::middleware::from_fn(middleware::handle))
}
