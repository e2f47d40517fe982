//! The domain's error type and the closed list of kinds the HTTP layer maps
//! to status codes.

use serde::Serialize;

/// One problem with one input field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
    /// Where a parsed document (YAML) holds the problem, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into(), line: None, column: None }
    }
}

/// The closed list of error kinds; every adapter maps these without a
/// catch-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unauthenticated,
    Forbidden,
    /// A request body that cannot be read at all (400), e.g. broken YAML.
    BadRequest,
    NotFound,
    Conflict,
    Validation,
    /// A quota or rate limit is used up (429).
    Exhausted,
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// A body that cannot be read at all (400); `details` carries what
    /// locates the problem (line, column).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String, details: serde_json::Value },
    #[error("{resource} not found")]
    NotFound { resource: &'static str },
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("validation failed")]
    Validation(Vec<FieldError>),
    /// A well-formed request the server refuses to process (422) for a reason
    /// other than field validation, e.g. a reused idempotency key.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// A quota or rate limit is used up, e.g. the monthly validations.
    #[error("{message}")]
    /// A quota or limit is used up; `retry_after` seconds until it
    /// renews.
    Exhausted { code: &'static str, message: String, retry_after: u64 },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Unauthenticated(_) => ErrorKind::Unauthenticated,
            Error::Forbidden(_) => ErrorKind::Forbidden,
            Error::BadRequest { .. } => ErrorKind::BadRequest,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::Validation(_) | Error::Unprocessable { .. } => ErrorKind::Validation,
            Error::Exhausted { .. } => ErrorKind::Exhausted,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }

    pub fn not_found(resource: &'static str) -> Self {
        Error::NotFound { resource }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict { code: "conflict", message: message.into() }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Validation(vec![FieldError::new(field, message)])
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Error::Forbidden(message.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The path (`at.key[0]…`) of the first string in `v`, key or value, that
/// holds a NUL character: input that no store takes (PostgreSQL's text
/// cannot hold one), refused as a validation error wherever it enters.
pub fn nul_in(v: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match v {
        Value::String(s) => s.contains('\0').then(|| at.to_string()),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| nul_in(x, &format!("{at}[{i}]"))),
        Value::Object(o) => o
            .iter()
            .find_map(|(k, x)| if k.contains('\0') { Some(at.to_string()) } else { nul_in(x, &format!("{at}.{k}")) }),
        _ => None,
    }
}
