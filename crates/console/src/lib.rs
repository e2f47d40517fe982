//! The web console: server-rendered pages (maud) at `/`, on the same use
//! cases and roles as the JSON API, with a little hand-written JavaScript
//! for the live parts (a run's progress and log, over the API's
//! server-sent events). It is an adapter of its own beside the API
//! (`sluice-http`), whose plumbing it shares: the state, the caller, the
//! error rendering, body reading.
//!
//! Sign-in puts a session token in a cookie (`HttpOnly`, `SameSite=Strict`,
//! `Secure` over TLS). A cookie is honoured on console pages and on the
//! API's reads only (the JSON API's writes keep needing a header), and
//! every console form carries a CSRF token derived from the cookie; its
//! `Origin` must be this server.
//!
//! This file is the map of the console's routes; `page` holds what every
//! page is made of, and each other module one area's pages.

mod builder;
mod connect;
mod govern;
mod integrations;
mod orgs;
mod page;
mod rules;
mod signin;
mod svg;
mod sync;

pub use signin::{ConsoleConfig, Sessions, login_link_token};

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use page::{MAX_FORM, PageError};
use sluice_http::error::ApiError;

/// The console's routes, for [`sluice_http::app`]: they are served beside
/// the API, under its middleware (request ids, credentials, logs).
pub fn routes(config: ConsoleConfig) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| pages(cfg, config)
}

fn pages(cfg: &mut web::ServiceConfig, config: ConsoleConfig) {
    // Malformed ids, queries and forms get an HTML page here, not the
    // API's JSON.
    let page = |path: &str| {
        web::resource(path.to_string())
            .app_data(
                web::PathConfig::default()
                    .error_handler(|_, _| PageError::Api(ApiError::not_found("no such page")).into()),
            )
            .app_data(web::QueryConfig::default().error_handler(|e, _| input_error("query", e.to_string())))
            .app_data(
                web::FormConfig::default().limit(MAX_FORM).error_handler(|e, _| input_error("form", e.to_string())),
            )
    };
    cfg.app_data(web::Data::new(config))
        .service(page("/").route(read().to(orgs::home)))
        .route("/assets/console.css", read().to(css))
        .route("/favicon.ico", read().to(favicon))
        .route("/assets/console.js", read().to(js))
        .service(page("/login").route(read().to(signin::page)).route(web::post().to(signin::with_token)))
        .service(page("/login/link").route(read().to(signin::link_page)).route(web::post().to(signin::with_link)))
        .service(page("/login/oidc").route(read().to(signin::oidc_start)))
        .service(page("/login/oidc/callback").route(read().to(signin::oidc_callback)))
        .route("/logout", web::post().to(signin::logout))
        .route("/orgs", web::post().to(orgs::create))
        .service(
            page("/invitations/accept")
                .route(read().to(orgs::invitation_page))
                .route(web::post().to(orgs::accept_invitation)),
        )
        .service(
            web::scope("/o/{org}")
                .app_data(
                    web::PathConfig::default()
                        .error_handler(|_, _| PageError::Api(ApiError::not_found("no such page")).into()),
                )
                .app_data(web::QueryConfig::default().error_handler(|e, _| input_error("query", e.to_string())))
                .route("", read().to(orgs::overview))
                .route("/settings", read().to(orgs::settings))
                .route("/rename", web::post().to(orgs::rename))
                .route("/delete", web::post().to(orgs::delete))
                .route("/invitations", web::post().to(orgs::invite))
                .route("/invitations/{id}/resend", web::post().to(orgs::resend_invitation))
                .route("/invitations/{id}/revoke", web::post().to(orgs::revoke_invitation))
                .route("/members/{user}/role", web::post().to(orgs::member_role))
                .route("/members/{user}/remove", web::post().to(orgs::remove_member))
                .route("/api-keys", web::post().to(orgs::create_key))
                .route("/api-keys/{id}/revoke", web::post().to(orgs::revoke_key))
                .route("/billing/checkout", web::post().to(orgs::checkout))
                .route("/billing/portal", web::post().to(orgs::portal))
                .route("/rules", web::post().to(orgs::create_rule))
                .route("/rules/{id}", read().to(rules::detail))
                .route("/rules/{id}", web::post().to(rules::update))
                .route("/rules/{id}/test", web::post().to(rules::send_test))
                .route("/rules/{id}/delete", web::post().to(orgs::delete_rule))
                .route("/rules/{id}/{action:enable|disable}", web::post().to(orgs::enable_rule))
                .route("/integrations", read().to(integrations::list))
                .route("/integrations", web::post().to(integrations::create))
                .route("/integrations/{id}", read().to(integrations::detail))
                .route("/integrations/{id}", web::post().to(integrations::update))
                .route("/integrations/{id}/reveal", web::post().to(integrations::reveal))
                .route("/integrations/{id}/delete", web::post().to(integrations::delete))
                .route("/connections", read().to(connect::list))
                .route("/connections", web::post().to(connect::create))
                .route("/connections/{id}", read().to(connect::detail))
                .route("/connections/{id}", web::post().to(connect::update))
                .route("/connections/{id}/test", web::post().to(connect::test))
                .route("/connections/{id}/discover", web::post().to(connect::discover))
                .route("/connections/{id}/preview", web::post().to(connect::preview))
                .route("/connections/{id}/delete", web::post().to(connect::delete))
                .route("/flows", read().to(sync::list))
                .route("/flows", web::post().to(builder::create))
                .route("/flows/new", read().to(builder::new_flow))
                .route("/flows/new", web::post().to(builder::tables))
                .route("/flows/build", web::post().to(builder::build))
                .route("/flows/{id}", read().to(sync::detail))
                .route("/flows/{id}", web::post().to(sync::update))
                .route("/flows/{id}/run", web::post().to(sync::run))
                .route("/flows/{id}/verify", web::post().to(sync::verify))
                .route("/flows/{id}/status", web::post().to(sync::set_status))
                .route("/flows/{id}/cursors/set", web::post().to(sync::set_cursor))
                .route("/flows/{id}/cursors/reset", web::post().to(sync::reset_cursor))
                .route("/flows/{id}/resync", web::post().to(sync::resync))
                .route("/flows/{id}/runs", read().to(sync::runs_page))
                .route("/flows/{id}/delete", web::post().to(sync::delete))
                .route("/runs/{id}", read().to(sync::run_page))
                .route("/runs/{id}/log.txt", read().to(sync::run_log_text))
                .route("/runs/{id}/cancel", web::post().to(sync::cancel_run))
                .route("/runs/{id}/retry", web::post().to(sync::retry_run))
                .route("/topology", read().to(sync::topology))
                .route("/traces/{id}", read().to(sync::trace))
                .route("/catalog", read().to(govern::catalog))
                .route("/catalog", web::post().to(govern::create_asset))
                .route("/catalog/{id}", read().to(govern::asset))
                .route("/catalog/{id}", web::post().to(govern::update_asset))
                .route("/catalog/{id}/delete", web::post().to(govern::delete_asset))
                .route("/gateway", read().to(govern::gateway))
                .route("/gateway", web::post().to(govern::gateway_validate))
                .route("/iac", read().to(govern::iac))
                .route("/iac", web::post().to(govern::iac_apply))
                .route("/audit", read().to(govern::audit))
                // Any other path of an organization: the console's 404
                // page, not the API's JSON.
                .default_service(web::to(no_such_page)),
        );
}

async fn no_such_page() -> Result<HttpResponse, PageError> {
    Err(PageError::Api(ApiError::not_found("no such page")))
}

/// GET, and HEAD (answered without a body) for checks and proxies.
fn read() -> actix_web::Route {
    use actix_web::guard;
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// A malformed query or form, as a console page.
fn input_error(what: &str, message: String) -> actix_web::Error {
    PageError::Api(ApiError::validation(vec![sluice_domain::FieldError::new(what, message)])).into()
}

async fn css() -> HttpResponse {
    asset("text/css; charset=utf-8", include_str!("assets/console.css"))
}

async fn js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", include_str!("assets/console.js"))
}

/// The tab's icon, the pages' own (an SVG, which browsers take at this
/// path too): no 404 for what a browser asks of every server.
async fn favicon() -> HttpResponse {
    asset("image/svg+xml", page::ICON)
}

fn asset(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(body)
}
