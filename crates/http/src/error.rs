//! The one table from error kind to HTTP status (each code's kind is in
//! the domain's table of codes, `sluice_domain::shared::error::Code`), and
//! the contract's error body. Every failure, malformed input included, renders through
//! [`ApiError`], so none can become a bare 5xx.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::{Value, json};
use sluice_domain::Error;
use sluice_domain::ErrorKind;
use sluice_domain::FieldError;
use sluice_domain::shared::error::Code;
use utoipa::ToSchema;

tokio::task_local! {
    /// The id of the request being served, for error bodies and logs.
    pub static REQUEST_ID: String;
}

/// The id of the current request, or an empty string outside one.
pub fn current_request_id() -> String {
    REQUEST_ID.try_with(Clone::clone).unwrap_or_default()
}

/// The error body of every endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A human-readable message.
    pub error: String,
    /// A stable snake_case code.
    pub code: String,
    /// Machine-readable details; for `validation_failed`, `{"errors": [{field, message}]}`.
    #[schema(value_type = Object)]
    pub details: Value,
    /// The id in the `X-Request-Id` header and the server's log line.
    pub request_id: String,
}

#[derive(Debug)]
pub struct ApiError {
    /// Its status is its code's kind's (see [`ApiError::status`]).
    pub code: Code,
    pub message: String,
    /// Boxed, so that results carrying an error stay small.
    pub details: Box<Value>,
    /// Seconds for the `Retry-After` header (every 429 has one).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// An error with `code`, whose kind gives the status.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: Box::new(json!({})), retry_after: None }
    }

    /// The HTTP status: the one of its code's kind.
    pub fn status(&self) -> StatusCode {
        status_of(self.code.kind())
    }

    /// 429 `rate_limited`, to be tried again after `seconds`.
    pub fn rate_limited(seconds: u64) -> Self {
        let seconds = u32::try_from(seconds).unwrap_or(u32::MAX);
        let mut e = Self::new(Code::RateLimited, format!("too many requests; try again in {seconds} s"));
        e.retry_after = Some(seconds);
        e
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Box::new(details);
        self
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthenticated, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn validation(errors: Vec<FieldError>) -> Self {
        let message = match errors.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            _ => format!("{} fields are invalid", errors.len()),
        };
        Self::new(Code::ValidationFailed, message).with_details(json!({ "errors": errors }))
    }

    pub fn malformed_json(message: impl Into<String>, line: usize, column: usize) -> Self {
        Self::new(Code::MalformedJson, message).with_details(json!({"line": line, "column": column}))
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(Code::PayloadTooLarge, format!("the request body is larger than {limit} bytes"))
            .with_details(json!({"limit_bytes": limit}))
    }

    pub fn internal() -> Self {
        Self::new(Code::InternalError, "internal error; quote the request_id when reporting it")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.as_str())
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        // The status comes from the code's kind (the table below).
        let code = e.code();
        match e {
            Error::Validation(errors) => ApiError::validation(errors),
            Error::Exhausted { message, retry_after, .. } => {
                let mut e = ApiError::new(code, message);
                e.retry_after = Some(u32::try_from(retry_after.max(1)).unwrap_or(u32::MAX));
                e
            }
            Error::BadRequest { message, details, .. } => ApiError::new(code, message).with_details(details),
            Error::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "internal error");
                ApiError::internal()
            }
            other => ApiError::new(code, other.to_string()),
        }
    }
}

/// The status table of the contract: one status a kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::Validation => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Exhausted => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status()
    }

    fn error_response(&self) -> HttpResponse {
        let body = ErrorBody {
            error: self.message.clone(),
            code: self.code.as_str().to_string(),
            details: (*self.details).clone(),
            request_id: current_request_id(),
        };
        let mut res = HttpResponse::build(self.status());
        if self.status() == StatusCode::UNAUTHORIZED {
            res.insert_header(("WWW-Authenticate", "Bearer"));
        }
        if let Some(s) = self.retry_after {
            res.insert_header((actix_web::http::header::RETRY_AFTER, s.to_string()));
        }
        res.json(body)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
