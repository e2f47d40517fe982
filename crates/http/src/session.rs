//! Who is calling: the credentials a request carries (`Authorization:
//! Bearer`, `X-Api-Key` or the console's session cookie), resolved once by
//! the middleware into an [`AuthOutcome`], and the [`Caller`] that handlers
//! (the API's and the console's) take from it.

use crate::error::ApiError;
use actix_web::dev::{Payload, ServiceRequest};
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use sluice_domain::app::Sluice;
use sluice_domain::identity::Principal;
use sluice_domain::identity::user::VerifiedClaims;
use std::future::{Ready, ready};

pub const API_KEY_HEADER: &str = "X-Api-Key";
/// The cookie holding the console's session token.
pub const SESSION_COOKIE: &str = "sluice_session";

/// Who is calling, as the middleware resolved it from `Authorization:
/// Bearer` or `X-Api-Key`.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    /// The session token's claims; `None` for API keys.
    pub claims: Option<VerifiedClaims>,
}

/// What the middleware found: a caller, or why the credentials failed.
#[derive(Clone, Debug)]
// One a request, kept in its extensions: the size is no matter.
#[allow(clippy::large_enum_variant)]
pub enum AuthOutcome {
    Ok(Caller),
    Failed { code: sluice_domain::shared::error::Code, message: String },
}

/// Marks a request whose caller came from the session cookie.
#[derive(Clone)]
pub struct CookieSession(pub String);

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let reading = matches!(*req.method(), actix_web::http::Method::GET | actix_web::http::Method::HEAD);
        if !reading && req.extensions().get::<CookieSession>().is_some() {
            return ready(Err(ApiError::unauthenticated(
                "the console's session cookie does not write through the API: send 'Authorization: Bearer <token>' or 'X-Api-Key: <key>'",
            )));
        }
        ready(match req.extensions().get::<AuthOutcome>() {
            Some(AuthOutcome::Ok(c)) => Ok(c.clone()),
            Some(AuthOutcome::Failed { code, message }) => Err(ApiError::new(*code, message.clone())),
            None => Err(ApiError::unauthenticated(
                "missing credentials: send 'Authorization: Bearer <token>' or 'X-Api-Key: <key>'",
            )),
        })
    }
}

/// Resolves `Authorization: Bearer` or `X-Api-Key`; `None` when neither is sent.
pub(crate) async fn authenticate(sluice: &Sluice, req: &ServiceRequest) -> Option<AuthOutcome> {
    let bearer = req.headers().get(header::AUTHORIZATION);
    let api_key = req.headers().get(API_KEY_HEADER);
    let fail = |e: ApiError| AuthOutcome::Failed { code: e.code, message: e.message };
    let result = match (bearer, api_key) {
        (None, None) => return cookie_session(sluice, req).await,
        (Some(_), Some(_)) => Err(ApiError::unauthenticated("send either Authorization or X-Api-Key, not both")),
        (Some(v), None) => {
            match v.to_str().ok().and_then(|s| s.strip_prefix("Bearer ").or_else(|| s.strip_prefix("bearer "))) {
                Some(token) => sluice
                    .identity
                    .authenticate_session(token.trim())
                    .await
                    .map(|(principal, claims)| Caller { principal, claims: Some(claims) })
                    .map_err(ApiError::from),
                None => Err(ApiError::unauthenticated("the Authorization header must be 'Bearer <token>'")),
            }
        }
        (None, Some(v)) => match v.to_str() {
            Ok(raw) => sluice
                .identity
                .authenticate_api_key(raw.trim())
                .await
                .map(|principal| Caller { principal, claims: None })
                .map_err(ApiError::from),
            Err(_) => Err(ApiError::unauthenticated("unknown or revoked API key")),
        },
    };
    Some(match result {
        Ok(c) => AuthOutcome::Ok(c),
        Err(e) => fail(e),
    })
}

/// The console's session cookie. Console pages take it (their forms carry
/// a CSRF token); the API's [`Caller`] takes it for reads only, whatever
/// the path's spelling, so no page can make a browser write through the
/// API. A cookie that no longer signs in counts as none (the console asks
/// to sign in again).
async fn cookie_session(sluice: &Sluice, req: &ServiceRequest) -> Option<AuthOutcome> {
    let token = req.cookie(SESSION_COOKIE)?.value().to_string();
    let (principal, claims) = sluice.identity.authenticate_session(&token).await.ok()?;
    req.extensions_mut().insert(CookieSession(token));
    Some(AuthOutcome::Ok(Caller { principal, claims: Some(claims) }))
}
