//! Extractors: the internal key, JSON bodies, pagination, and the
//! configuration that turns malformed JSON, paths and queries into the
//! contract's errors. The caller is in `session`.

use crate::AppState;
use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{FromRequest, HttpRequest, web};
use serde::Deserialize;
use sluice_domain::FieldError;
use sluice_domain::shared::page::PageRequest;
use sluice_domain::shared::secret::constant_time_eq;
use std::future::{Ready, ready};
use utoipa::IntoParams;

pub const MAX_JSON_BODY: usize = 1024 * 1024;
pub const INTERNAL_KEY_HEADER: &str = "X-Internal-Api-Key";

/// A request carrying the internal API key (`X-Internal-Api-Key`), compared
/// in constant time. Without a configured key the internal endpoints answer
/// 503.
#[derive(Debug, Clone, Copy)]
pub struct InternalCaller;

impl FromRequest for InternalCaller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let configured = req.app_data::<web::Data<AppState>>().and_then(|s| s.internal_api_key.clone());
        ready(match configured {
            None => Err(ApiError::new(
                sluice_domain::shared::error::Code::InternalApiDisabled,
                "internal endpoints are disabled: SLUICE_INTERNAL_API_KEY is not set",
            )),
            Some(expected) => match req.headers().get(INTERNAL_KEY_HEADER) {
                Some(v) if constant_time_eq(v.as_bytes(), expected.expose().as_bytes()) => Ok(InternalCaller),
                Some(_) => Err(ApiError::unauthenticated("invalid internal API key")),
                None => Err(ApiError::unauthenticated(format!("missing {INTERNAL_KEY_HEADER} header"))),
            },
        })
    }
}

/// A JSON request body of type `T`, read through [`json_config`] (so
/// malformed JSON is 400 and an oversized body 413) and refused with 422
/// when any string in it, key or value, holds a NUL character: no store
/// takes one (PostgreSQL's text cannot), so it stops here, the same on
/// every store.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<T> Body<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Body<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A request body's JSON as `T`: an object, without NUL characters, of
/// `T`'s shape (every JSON body goes through this, [`Body`] and the
/// handlers that read an optional body alike).
///
/// # Errors
/// 422 naming the problem.
pub(crate) fn from_json_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    // serde would read a struct from an array too; bodies are objects.
    if !value.is_object() {
        return Err(ApiError::validation(vec![FieldError::new("body", "must be a JSON object")]));
    }
    if let Some(field) = sluice_domain::shared::error::nul_in(&value, "body") {
        return Err(ApiError::validation(vec![FieldError::new(field, "must not contain a NUL character")]));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::validation(vec![FieldError::new("body", strip_position(&e.to_string()))]))
}

impl<T: serde::de::DeserializeOwned + 'static> FromRequest for Body<T> {
    type Error = actix_web::Error;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let json = web::Json::<serde_json::Value>::from_request(req, payload);
        Box::pin(async move { Ok(Body(from_json_value(json.await?.into_inner())?)) })
    }
}

/// `?limit=&cursor=` of list endpoints.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Pagination {
    /// 1–200, default 50.
    #[param(minimum = 1, maximum = 200, default = 50)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl Pagination {
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        Ok(PageRequest::parse(self.limit, self.cursor.as_deref())?)
    }
}

/// Malformed JSON is 400 with its position; JSON of the wrong shape is 422;
/// an oversized body 413.
pub fn json_error(err: JsonPayloadError, _req: &HttpRequest) -> actix_web::Error {
    json_api_error(err).into()
}

pub(crate) fn json_api_error(err: JsonPayloadError) -> ApiError {
    use serde_json::error::Category;
    match err {
        JsonPayloadError::Overflow { limit } | JsonPayloadError::OverflowKnownLength { limit, .. } => {
            ApiError::payload_too_large(limit)
        }
        JsonPayloadError::Deserialize(e) => match e.classify() {
            Category::Data => ApiError::validation(vec![FieldError::new("body", strip_position(&e.to_string()))]),
            Category::Eof if e.line() == 1 && e.column() == 0 => {
                ApiError::malformed_json("the request body is empty; send a JSON object", 1, 0)
            }
            _ => ApiError::malformed_json(
                format!("malformed JSON: {}", strip_position(&e.to_string())),
                e.line(),
                e.column(),
            ),
        },
        JsonPayloadError::ContentType => ApiError::new(
            sluice_domain::shared::error::Code::UnsupportedMediaType,
            "send the body as Content-Type: application/json",
        ),
        other => ApiError::malformed_json(format!("unreadable body: {other}"), 0, 0),
    }
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// A path segment that does not parse (an id that is not a UUID) names no
/// resource: 404.
pub fn path_error(_err: PathError, _req: &HttpRequest) -> actix_web::Error {
    ApiError::not_found("no such resource").into()
}

pub fn query_error(err: QueryPayloadError, _req: &HttpRequest) -> actix_web::Error {
    ApiError::validation(vec![FieldError::new("query", err.to_string())]).into()
}

pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_JSON_BODY)
        .content_type_required(false)
        .content_type(|_| true)
        .error_handler(json_error)
}
