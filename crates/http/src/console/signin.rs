//! Signing in and out: a pasted session token, or a one-time login link
//! from `sluice login-link --email E`.

use super::{Empty, PageError, PageResult, Post, SESSION_COOKIE, SESSION_TTL, bare, html_response, redirect};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::AuthOutcome;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::StatusCode;
use actix_web::web::{Data, Form, Query};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use maud::html;
use serde::Deserialize;

/// Where to go after signing in: a path of this server only.
fn local(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".into(),
    }
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

fn signin_page(next: &str, error: Option<&str>, links: bool) -> HttpResponse {
    let body = bare(
        "Sign in",
        html! {
            main.narrow.signin {
                h1 { "Sign in to Sluice" }
                @if let Some(e) = error { p.error role="alert" { (e) } }
                form method="post" action="/login" {
                    input type="hidden" name="next" value=(next);
                    label for="token" { "Session token" }
                    textarea #token name="token" rows="4" required autofocus
                        placeholder="eyJhbGciOi…" autocomplete="off" spellcheck="false" {}
                    p.hint { "Print one with " code { "sluice token --email you@example.com" } " or take it from your identity provider." }
                    button.primary type="submit" { "Sign in" }
                }
                @if links {
                    p.hint { "Or print a one-time link: " code { "sluice login-link --email you@example.com" } }
                }
            }
        },
    );
    let mut res = html_response(body);
    if error.is_some() {
        *res.status_mut() = StatusCode::UNAUTHORIZED;
    }
    res
}

/// `GET /login`.
pub async fn page(req: HttpRequest, state: Data<AppState>, q: Query<NextQuery>) -> HttpResponse {
    let next = local(q.next.as_deref());
    if matches!(req.extensions().get::<AuthOutcome>(), Some(AuthOutcome::Ok(_))) {
        return redirect(&next);
    }
    signin_page(&next, None, state.console.sessions.is_some())
}

fn session_cookie(req: &HttpRequest, token: &str, max_age: Option<std::time::Duration>) -> Cookie<'static> {
    let mut c = Cookie::build(SESSION_COOKIE, token.to_string())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(req.connection_info().scheme() == "https")
        .finish();
    if let Some(age) = max_age {
        c.set_max_age(actix_web::cookie::time::Duration::seconds(age.as_secs() as i64));
    }
    c
}

#[derive(Deserialize)]
pub struct TokenForm {
    token: String,
    next: Option<String>,
}

fn cross_site() -> PageError {
    ApiError::new(StatusCode::FORBIDDEN, "csrf_failed", "sign-in forms are taken from this server's own pages only")
        .into()
}

/// `POST /login`: checks the pasted token and keeps it in the cookie.
pub async fn with_token(req: HttpRequest, state: Data<AppState>, form: Form<TokenForm>) -> PageResult {
    if !super::same_origin(&req) {
        return Err(cross_site());
    }
    let next = local(form.next.as_deref());
    let token = form.token.trim();
    match state.sluice.identity.authenticate_session(token).await {
        Ok(_) => Ok(HttpResponse::SeeOther()
            .cookie(session_cookie(&req, token, None))
            .insert_header(("Location", next))
            .finish()),
        Err(e) => {
            Ok(signin_page(&next, Some(&format!("That token does not sign in: {e}")), state.console.sessions.is_some()))
        }
    }
}

#[derive(Deserialize)]
pub struct LinkQuery {
    token: String,
}

/// `GET /login/link?token=`: asks before using the link, so that a link
/// previewer fetching it does not spend it.
pub async fn link_page(state: Data<AppState>, q: Query<LinkQuery>) -> PageResult {
    let sessions = state.console.sessions.as_ref().ok_or_else(no_links)?;
    let Some((email, _)) = super::open_login_link(sessions.link_key(), &q.token) else {
        return Err(expired());
    };
    Ok(html_response(bare(
        "Sign in",
        html! {
            main.narrow.signin {
                h1 { "Sign in to Sluice" }
                p { "Continue as " strong { (email) } "?" }
                form method="post" action="/login/link" {
                    input type="hidden" name="token" value=(q.token);
                    button.primary #continue type="submit" autofocus { "Continue" }
                }
            }
        },
    )))
}

fn no_links() -> PageError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "login links are off: this server holds no HS256 secret").into()
}

fn expired() -> PageError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "this login link is invalid, expired or already used; print a new one",
    )
    .into()
}

/// `POST /login/link`: spends the link (once, across processes) and signs
/// in for [`SESSION_TTL`].
pub async fn with_link(req: HttpRequest, state: Data<AppState>, form: Form<LinkQuery>) -> PageResult {
    if !super::same_origin(&req) {
        return Err(cross_site());
    }
    let sessions = state.console.sessions.clone().ok_or_else(no_links)?;
    let Some((email, nonce)) = super::open_login_link(sessions.link_key(), &form.token) else {
        return Err(expired());
    };
    // The idempotency store keeps each nonce once: a second use finds it.
    let scope = "console:login-link";
    match state.sluice.identity.begin_idempotent(scope, &nonce, "login").await {
        Ok(sluice_domain::shared::idempotency::Begin::Proceed) => {}
        _ => return Err(expired()),
    }
    let done = sluice_domain::shared::idempotency::StoredResponse {
        status: 410,
        body: Vec::new(),
        content_type: None,
        location: None,
    };
    state.sluice.identity.complete_idempotent(scope, &nonce, &done).await?;
    let token = sessions.mint(&email, SESSION_TTL).map_err(|e| {
        tracing::error!(error = %e, "minting a console session failed");
        ApiError::internal()
    })?;
    tracing::info!(email = %email, "signed in with a login link");
    Ok(HttpResponse::SeeOther()
        .cookie(session_cookie(&req, &token, Some(SESSION_TTL)))
        .insert_header(("Location", "/"))
        .finish())
}

/// `POST /logout`.
pub async fn logout(req: HttpRequest, _post: Post<Empty>) -> HttpResponse {
    let mut gone = session_cookie(&req, "", None);
    gone.make_removal();
    HttpResponse::SeeOther().cookie(gone).insert_header(("Location", "/login")).finish()
}
