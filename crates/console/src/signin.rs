//! Signing in and out: a pasted session token, a one-time login link from
//! `sluice login-link --email E`, or OpenID Connect; the console's sign-in
//! settings and login-link tokens.

use crate::page::{Empty, PageError, PageResult, Post, bare, html_response, redirect, same_origin, urlencode};
use actix_web::cookie::{Cookie, SameSite};
use actix_web::web::{Data, Form, Query};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use maud::html;
use serde::Deserialize;
use sluice_http::AppState;
use sluice_http::error::ApiError;
use sluice_http::session::{AuthOutcome, SESSION_COOKIE};
use std::sync::Arc;
use time::OffsetDateTime;

/// How long a session made by a login link or OpenID Connect lasts.
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// Mints session tokens for the console's own sign-in paths (login links,
/// OpenID Connect); the server implements it with its HS256 secret.
pub trait Sessions: Send + Sync {
    /// A session token for the user with this e-mail, valid for `ttl`.
    ///
    /// # Errors
    /// When signing fails.
    fn mint(&self, email: &str, ttl: std::time::Duration) -> anyhow::Result<String>;
    /// The key that signs login links.
    fn link_key(&self) -> &[u8];
}

/// The console's settings.
#[derive(Clone, Default)]
pub struct ConsoleConfig {
    /// `None` when the server cannot mint sessions (no HS256 secret): then
    /// only a pasted token signs in.
    pub sessions: Option<Arc<dyn Sessions>>,
    /// The OpenID Connect provider users sign in with, when configured
    /// (it needs `sessions` too: the console mints its own session).
    pub oidc: Option<Arc<dyn sluice_domain::identity::ports::IdentityProvider>>,
}

/// A login link's token: `<base64url e-mail>.<expiry>.<nonce>.<hmac>`.
pub fn login_link_token(key: &[u8], email: &str, ttl: std::time::Duration) -> String {
    use base64::Engine;
    let expiry = OffsetDateTime::now_utc().unix_timestamp() + ttl.as_secs() as i64;
    let email = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(email.as_bytes());
    let nonce = sluice_domain::shared::secret::random_base62(22);
    sluice_domain::shared::secret::sign(key, &format!("{email}.{expiry}.{nonce}"))
}

/// The e-mail and nonce of a genuine, unexpired login-link token.
fn open_login_link(key: &[u8], token: &str) -> Option<(String, String)> {
    use base64::Engine;
    let id = sluice_domain::shared::secret::verify(key, token)?;
    let mut parts = id.split('.');
    let (email, expiry, nonce) = (parts.next()?, parts.next()?, parts.next()?);
    let expiry: i64 = expiry.parse().ok()?;
    if expiry < OffsetDateTime::now_utc().unix_timestamp() {
        return None;
    }
    let email = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(email).ok()?).ok()?;
    Some((email, nonce.to_string()))
}

/// Where to go after signing in: a path of this server only.
fn local(next: Option<&str>) -> String {
    // Browsers drop tabs and newlines from URLs (`/\t/evil` becomes
    // `//evil`) and read `\` as `/`: none of them, nor any other control
    // character or space, passes; nor does a second leading slash.
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.len() <= 2048
                && n.chars().all(|c| !c.is_control() && !c.is_whitespace() && c != '\\') =>
        {
            n.to_string()
        }
        _ => "/".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{local, login_link_token, open_login_link};

    #[test]
    fn a_login_link_opens_with_its_key_only_and_not_after_it_expires() {
        let t = login_link_token(b"k1", "ada@example.com", std::time::Duration::from_secs(60));
        let (email, nonce) = open_login_link(b"k1", &t).expect("opens");
        assert_eq!(email, "ada@example.com");
        assert_eq!(nonce.len(), 22);
        assert!(open_login_link(b"k2", &t).is_none());
        let mut forged = t.clone();
        forged.replace_range(0..1, if t.starts_with('Y') { "Z" } else { "Y" });
        assert!(open_login_link(b"k1", &forged).is_none());
        let old = login_link_token(b"k1", "ada@example.com", std::time::Duration::ZERO);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert!(open_login_link(b"k1", &old).is_none());
    }

    #[test]
    fn next_leads_to_this_server_only() {
        assert_eq!(local(Some("/o/1/flows?x=1")), "/o/1/flows?x=1");
        for bad in [
            "//evil.example",
            "/\\evil",
            "/\t/evil.example",
            "/\n/x",
            "/\r/x",
            "/ /x",
            "https://evil",
            "evil",
            "/\u{7f}x",
        ] {
            assert_eq!(local(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(local(None), "/");
    }
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

fn signin_page(next: &str, error: Option<&str>, links: bool, oidc: bool) -> HttpResponse {
    let body = bare(
        "Sign in",
        html! {
            main.narrow.signin {
                h1 { "Sign in to Sluice" }
                @if let Some(e) = error { p.error role="alert" { (e) } }
                @if oidc {
                    p { a.button.primary #sso href=(format!("/login/oidc?next={}", urlencode(next))) { "Sign in with single sign-on" } }
                    p.hint { "Or paste a session token:" }
                }
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
        *res.status_mut() = sluice_http::error::status_of(sluice_domain::shared::error::Code::Unauthenticated.kind());
    }
    res
}

/// `GET /login`.
pub async fn page(req: HttpRequest, console: Data<ConsoleConfig>, q: Query<NextQuery>) -> HttpResponse {
    let next = local(q.next.as_deref());
    if matches!(req.extensions().get::<AuthOutcome>(), Some(AuthOutcome::Ok(_))) {
        return redirect(&next);
    }
    signin_page(&next, None, console.sessions.is_some(), oidc_on(&console))
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
    ApiError::new(
        sluice_domain::shared::error::Code::CsrfFailed,
        "sign-in forms are taken from this server's own pages only",
    )
    .into()
}

/// `POST /login`: checks the pasted token and keeps it in the cookie.
pub async fn with_token(
    req: HttpRequest,
    state: Data<AppState>,
    console: Data<ConsoleConfig>,
    form: Form<TokenForm>,
) -> PageResult {
    if !same_origin(&req) {
        return Err(cross_site());
    }
    let next = local(form.next.as_deref());
    let token = form.token.trim();
    match state.sluice.identity.authenticate_session(token).await {
        Ok(_) => Ok(HttpResponse::SeeOther()
            .cookie(session_cookie(&req, token, None))
            .insert_header(("Location", next))
            .finish()),
        Err(e) => Ok(signin_page(
            &next,
            Some(&format!("That token does not sign in: {e}")),
            console.sessions.is_some(),
            oidc_on(&console),
        )),
    }
}

#[derive(Deserialize)]
pub struct LinkQuery {
    token: String,
}

/// `GET /login/link?token=`: asks before using the link, so that a link
/// previewer fetching it does not spend it.
pub async fn link_page(console: Data<ConsoleConfig>, q: Query<LinkQuery>) -> PageResult {
    let sessions = console.sessions.as_ref().ok_or_else(no_links)?;
    let Some((email, _)) = open_login_link(sessions.link_key(), &q.token) else {
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
    ApiError::new(
        sluice_domain::shared::error::Code::NotFound,
        "login links are off: this server holds no HS256 secret",
    )
    .into()
}

fn expired() -> PageError {
    ApiError::new(
        sluice_domain::shared::error::Code::Unauthenticated,
        "this login link is invalid, expired or already used; print a new one",
    )
    .into()
}

/// `POST /login/link`: spends the link (once, across processes) and signs
/// in for [`SESSION_TTL`].
pub async fn with_link(
    req: HttpRequest,
    state: Data<AppState>,
    console: Data<ConsoleConfig>,
    form: Form<LinkQuery>,
) -> PageResult {
    if !same_origin(&req) {
        return Err(cross_site());
    }
    let sessions = console.sessions.clone().ok_or_else(no_links)?;
    let Some((email, nonce)) = open_login_link(sessions.link_key(), &form.token) else {
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

fn oidc_on(console: &ConsoleConfig) -> bool {
    console.oidc.is_some() && console.sessions.is_some()
}

/// The short-lived cookie that carries an OpenID Connect sign-in's state,
/// nonce, PKCE verifier and destination from the start to the callback.
const OIDC_COOKIE: &str = "sluice_oidc";
const OIDC_TTL: std::time::Duration = std::time::Duration::from_secs(600);

fn sso_off() -> PageError {
    ApiError::new(sluice_domain::shared::error::Code::NotFound, "single sign-on is not configured on this server")
        .into()
}

/// `GET /login/oidc?next=`: on to the provider, with a fresh state, nonce
/// and PKCE verifier kept (signed) in a cookie of this path.
pub async fn oidc_start(req: HttpRequest, console: Data<ConsoleConfig>, q: Query<NextQuery>) -> PageResult {
    let (Some(provider), Some(sessions)) = (console.oidc.clone(), console.sessions.clone()) else {
        return Err(sso_off());
    };
    use base64::Engine;
    use sluice_domain::shared::secret::random_base62;
    let (st, nonce, verifier) = (random_base62(32), random_base62(32), random_base62(64));
    let next = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(local(q.next.as_deref()));
    let url = provider.authorize_url(&st, &nonce, &sluice_domain::connect::oauth::challenge(&verifier)).await?;
    let value =
        sluice_domain::shared::secret::sign(sessions.link_key(), &format!("oidc.{st}.{nonce}.{verifier}.{next}"));
    // Lax, not Strict: the provider sends the browser back from its site.
    let cookie = Cookie::build(OIDC_COOKIE, value)
        .path("/login/oidc")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(req.connection_info().scheme() == "https")
        .max_age(actix_web::cookie::time::Duration::seconds(OIDC_TTL.as_secs() as i64))
        .finish();
    Ok(HttpResponse::SeeOther().cookie(cookie).insert_header(("Location", url)).finish())
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /login/oidc/callback`: checks the state against the cookie,
/// exchanges the code, and signs in as the provider's verified e-mail.
pub async fn oidc_callback(req: HttpRequest, console: Data<ConsoleConfig>, q: Query<CallbackQuery>) -> PageResult {
    let (Some(provider), Some(sessions)) = (console.oidc.clone(), console.sessions.clone()) else {
        return Err(sso_off());
    };
    let refuse =
        |m: String| -> PageError { ApiError::new(sluice_domain::shared::error::Code::Unauthenticated, m).into() };
    if let Some(e) = &q.error {
        return Err(refuse(format!(
            "the provider did not sign you in: {}",
            q.error_description.as_deref().unwrap_or(e)
        )));
    }
    let kept = req
        .cookie(OIDC_COOKIE)
        .and_then(|c| sluice_domain::shared::secret::verify(sessions.link_key(), c.value()))
        .ok_or_else(|| {
            refuse("this sign-in was not started here, or took longer than 10 minutes; start again".into())
        })?;
    let parts: Vec<&str> = kept.split('.').collect();
    let [_, st, nonce, verifier, next] = parts.as_slice() else {
        return Err(refuse("this sign-in's state is unreadable; start again".into()));
    };
    let (Some(code), Some(sent)) = (q.code.as_deref(), q.state.as_deref()) else {
        return Err(refuse("the provider sent no code or state".into()));
    };
    if !sluice_domain::shared::secret::constant_time_eq(sent.as_bytes(), st.as_bytes()) {
        return Err(refuse("the state does not match this sign-in; start again".into()));
    }
    let who = provider.exchange(code, verifier, nonce).await?;
    let token = sessions.mint(&who.email, SESSION_TTL).map_err(|e| {
        tracing::error!(error = %e, "minting a console session failed");
        ApiError::internal()
    })?;
    tracing::info!(email = %who.email, "signed in with OpenID Connect");
    use base64::Engine;
    let next = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(next)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .map_or_else(|| "/".to_string(), |n| local(Some(&n)));
    let mut spent = Cookie::build(OIDC_COOKIE, "").path("/login/oidc").finish();
    spent.make_removal();
    // A page, not a redirect: the session cookie is SameSite=Strict, and
    // the browser arrived from the provider's site; the page's own
    // navigation is same-site, so the cookie goes with it.
    let page = bare(
        "Signed in",
        html! {
            meta http-equiv="refresh" content=(format!("0;url={next}"));
            main.narrow { p { "Signed in as " strong { (who.email) } ". " a #continue href=(next) { "Continue" } } }
        },
    );
    let mut res = html_response(page);
    res.add_cookie(&session_cookie(&req, &token, Some(SESSION_TTL))).map_err(|_| ApiError::internal())?;
    res.add_cookie(&spent).map_err(|_| ApiError::internal())?;
    Ok(res)
}

/// `POST /logout`.
pub async fn logout(req: HttpRequest, _post: Post<Empty>) -> HttpResponse {
    let mut gone = session_cookie(&req, "", None);
    gone.make_removal();
    HttpResponse::SeeOther().cookie(gone).insert_header(("Location", "/login")).finish()
}
