//! The one middleware every request passes: it assigns the request id (the
//! `X-Request-Id` header, error bodies and log lines), resolves the caller's
//! credentials once, applies `X-Idempotency-Key`, and logs the outcome.

use crate::AppState;
use crate::body::{MAX_ANY_BODY, read_body};
use crate::error::{ApiError, REQUEST_ID};
use crate::session::{API_KEY_HEADER, AuthOutcome, Caller, authenticate};
use actix_web::body::{BoxBody, MessageBody, to_bytes_limited};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::web::Data;
use actix_web::{HttpMessage, HttpResponse, ResponseError};
use sluice_domain::app::Sluice;
use sluice_domain::shared::idempotency;
use sluice_domain::shared::idempotency::{Begin, StoredResponse};
use sluice_domain::shared::secret::constant_time_eq;
use std::time::Instant;
use tracing::Instrument;

pub const REQUEST_ID_HEADER: &str = "X-Request-Id";
pub const IDEMPOTENCY_KEY_HEADER: &str = "X-Idempotency-Key";
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Responses larger than this are not kept for replay.
const MAX_STORED_RESPONSE: usize = 4 * 1024 * 1024;

/// The middleware function; see the module docs.
///
/// # Errors
/// Never: every failure becomes a response with the contract's body.
pub async fn handle(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let request_id = incoming_request_id(&req).unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let span = tracing::info_span!("request", request_id = %request_id, method = %req.method(), path = %req.path());
    let started = Instant::now();
    let id = request_id.clone();
    REQUEST_ID
        .scope(
            request_id.clone(),
            async move {
                let mut res = match serve(req, next).await {
                    Ok(res) => res,
                    // Handlers turn their errors into responses; only a
                    // failure inside actix itself lands here.
                    Err(e) => return Err(e),
                };
                if let Ok(v) = HeaderValue::from_str(&id) {
                    res.headers_mut().insert(HeaderName::from_static("x-request-id"), v);
                }
                let status = res.status().as_u16();
                let elapsed = started.elapsed().as_secs_f64();
                if let Some(state) = res.request().app_data::<Data<AppState>>() {
                    // The pattern, not the path: no ids in the labels.
                    let route = res.request().match_pattern().unwrap_or_else(|| "unmatched".into());
                    state.metrics.request(res.request().method().as_str(), &route, status, elapsed);
                }
                // Rounded to 0.01 ms: log lines stay short and readable.
                let ms = (elapsed * 100_000.0).round() / 100.0;
                if res.status().is_server_error() {
                    tracing::error!(status, latency_ms = ms, "request failed");
                } else {
                    tracing::info!(status, latency_ms = ms, "request");
                }
                Ok(res)
            }
            .instrument(span),
        )
        .await
}

/// A client's own request id is kept when it is short and printable.
fn incoming_request_id(req: &ServiceRequest) -> Option<String> {
    let v = req.headers().get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let ok = !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    ok.then(|| v.to_string())
}

async fn serve(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(state) = req.app_data::<Data<AppState>>().cloned() else {
        return call(next, req).await;
    };
    // A NUL character in the path or the query reaches no store (see
    // `extract::Body` for bodies).
    let uri = req.uri();
    if [uri.authority().map(|a| a.as_str()), uri.path_and_query().map(|pq| pq.as_str())]
        .into_iter()
        .any(|part| part.is_some_and(|p| p.contains("%00")))
    {
        let at = if req.query_string().contains("%00") { "query" } else { "path" };
        let err = ApiError::validation(vec![sluice_domain::FieldError::new(at, "must not contain a NUL character")]);
        return Ok(req.into_response(err.error_response()));
    }
    let internal_key = req.headers().get(crate::extract::INTERNAL_KEY_HEADER);
    if let Some(limits) = &state.rate_limits
        && (req.headers().contains_key(header::AUTHORIZATION)
            || req.headers().contains_key(API_KEY_HEADER)
            || internal_key.is_some())
        && let Err(seconds) = limits.before_auth(peer_ip(&req))
    {
        return Ok(req.into_response(ApiError::rate_limited(seconds).error_response()));
    }
    // A wrong internal key is a failed credential like any other (the
    // internal endpoints' extractor answers its 401).
    let wrong_internal_key = match (&state.internal_api_key, internal_key) {
        (Some(expected), Some(sent)) => !constant_time_eq(sent.as_bytes(), expected.expose().as_bytes()),
        _ => false,
    };
    let outcome = authenticate(&state.sluice, &req).await;
    if let Some(limits) = &state.rate_limits
        && let Err(seconds) = rate_limit(limits, &req, outcome.as_ref(), wrong_internal_key)
    {
        return Ok(req.into_response(ApiError::rate_limited(seconds).error_response()));
    }
    let caller = match &outcome {
        Some(AuthOutcome::Ok(c)) => Some(c.clone()),
        _ => None,
    };
    if let Some(o) = outcome {
        req.extensions_mut().insert(o);
    }
    let mutating = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    let key = req.headers().get(IDEMPOTENCY_KEY_HEADER).map(|v| v.to_str().map(str::to_string));
    match (mutating, key, caller) {
        (true, Some(Ok(key)), Some(caller)) => idempotent(&state.sluice, req, next, &caller, key).await,
        (true, Some(Err(_)), Some(_)) => {
            let err = ApiError::from(sluice_domain::Error::invalid(IDEMPOTENCY_KEY_HEADER, "must be printable ASCII"));
            Ok(req.into_response(err.error_response()))
        }
        _ => call(next, req).await,
    }
}

/// The TCP peer's address (rate limits key anonymous callers by it).
fn peer_ip(req: &ServiceRequest) -> std::net::IpAddr {
    req.peer_addr().map_or(std::net::IpAddr::from([0, 0, 0, 0]), |a| a.ip())
}

/// Counts the request against its client's limit: the API key or user
/// once authenticated, else the address (failed credentials against a
/// much tighter limit than none at all).
fn rate_limit(
    limits: &crate::ratelimit::RateLimits,
    req: &ServiceRequest,
    outcome: Option<&AuthOutcome>,
    wrong_internal_key: bool,
) -> Result<(), crate::ratelimit::RetryAfter> {
    use crate::ratelimit::Client;
    use sluice_domain::identity::Principal;
    let ip = peer_ip(req);
    match outcome {
        Some(AuthOutcome::Ok(c)) => match &c.principal {
            Principal::ApiKey { id, .. } => limits.client(Client::ApiKey(id.as_uuid())),
            Principal::User(u) => limits.client(Client::User(u.id.as_uuid())),
        },
        Some(AuthOutcome::Failed { .. }) => limits.failed_auth(ip),
        None if wrong_internal_key => limits.failed_auth(ip),
        None => limits.anonymous(ip),
    }
}

/// Calls the rest of the chain. The request must not be cloned before this:
/// the router needs it unshared.
async fn call(
    next: Next<impl MessageBody + 'static>,
    req: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    Ok(next.call(req).await?.map_into_boxed_body())
}

async fn idempotent(
    sluice: &Sluice,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    caller: &Caller,
    key: String,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let scope = sluice_domain::identity::service::IdentityService::idempotency_scope(&caller.principal);
    let (http_req, mut payload) = req.into_parts();
    let body = match read_body(&mut payload, MAX_ANY_BODY).await {
        Ok(b) => b,
        Err(e) => return Ok(ServiceResponse::new(http_req, e.error_response())),
    };
    let path = http_req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
    let fp = idempotency::fingerprint(http_req.method().as_str(), &path, &body);
    match sluice.identity.begin_idempotent(&scope, &key, &fp).await {
        Err(e) => Ok(ServiceResponse::new(http_req, ApiError::from(e).error_response())),
        Ok(Begin::Replay(stored)) => Ok(ServiceResponse::new(http_req, replay(&stored))),
        Ok(Begin::Proceed) => {
            let req = ServiceRequest::from_parts(http_req, Payload::from(body));
            let res = match call(next, req).await {
                Ok(res) if !res.status().is_server_error() => res,
                other => {
                    if let Err(e) = sluice.identity.release_idempotent(&scope, &key).await {
                        tracing::warn!(error = %e, "releasing an idempotency key failed");
                    }
                    return other;
                }
            };
            let (http_req, res) = res.into_parts();
            let (head, body) = res.into_parts();
            let bytes = match to_bytes_limited(body, MAX_STORED_RESPONSE).await {
                Ok(Ok(b)) => b,
                _ => {
                    let _ = sluice.identity.release_idempotent(&scope, &key).await;
                    return Ok(ServiceResponse::new(http_req, ApiError::internal().error_response()));
                }
            };
            let header_str =
                |name: header::HeaderName| head.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let stored = StoredResponse {
                status: head.status().as_u16(),
                body: bytes.to_vec(),
                content_type: header_str(header::CONTENT_TYPE),
                location: header_str(header::LOCATION),
            };
            if let Err(e) = sluice.identity.complete_idempotent(&scope, &key, &stored).await {
                tracing::warn!(error = %e, "storing an idempotent response failed");
            }
            Ok(ServiceResponse::new(http_req, head.set_body(BoxBody::new(bytes))))
        }
    }
}

fn replay(stored: &StoredResponse) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut res = HttpResponse::build(status);
    res.insert_header((REPLAYED_HEADER, "true"));
    if let Some(ct) = &stored.content_type {
        res.insert_header((header::CONTENT_TYPE, ct.as_str()));
    }
    if let Some(loc) = &stored.location {
        res.insert_header((header::LOCATION, loc.as_str()));
    }
    res.body(stored.body.clone())
}
