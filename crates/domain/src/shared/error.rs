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
    /// A part of the service that is not configured, or an outside
    /// service it needs that does not answer (503).
    Unavailable,
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
    /// A quota or limit is used up, e.g. the monthly validations;
    /// `retry_after` seconds until it renews.
    #[error("{message}")]
    Exhausted { code: &'static str, message: String, retry_after: u64 },
    /// Not configured, or an outside service it needs failed (503).
    #[error("{message}")]
    Unavailable { code: &'static str, message: String },
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
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The error's own code, where it carries one (the kind's otherwise).
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Error::BadRequest { code, .. }
            | Error::Conflict { code, .. }
            | Error::Unprocessable { code, .. }
            | Error::Exhausted { code, .. }
            | Error::Unavailable { code, .. } => Some(code),
            Error::Unauthenticated(_)
            | Error::Forbidden(_)
            | Error::NotFound { .. }
            | Error::Validation(_)
            | Error::Internal(_) => None,
        }
    }

    pub fn not_found(resource: &'static str) -> Self {
        Error::NotFound { resource }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict { code: code::CONFLICT, message: message.into() }
    }

    /// A change refused while a run of the flow executes (409
    /// `run_in_progress`).
    pub fn run_in_progress() -> Self {
        Error::Conflict {
            code: code::RUN_IN_PROGRESS,
            message: "a run of this flow is executing; try again when it ends".into(),
        }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Validation(vec![FieldError::new(field, message)])
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Error::Forbidden(message.into())
    }
}

/// Every code an [`Error`] carries, in one list: logic matches on these
/// constants, never on string literals, and clients read them in the
/// contract's error body.
pub mod code {
    pub const ALREADY_MEMBER: &str = "already_member";
    pub const BILLING_NOT_CONFIGURED: &str = "billing_not_configured";
    pub const INVALID_SIGNATURE: &str = "invalid_signature";
    pub const MALFORMED_JSON: &str = "malformed_json";
    pub const PAYMENT_PROVIDER_FAILED: &str = "payment_provider_failed";
    pub const CLAIM_LOST: &str = "claim_lost";
    pub const CONCURRENT_APPLY: &str = "concurrent_apply";
    pub const CONFLICT: &str = "conflict";
    pub const CURSOR_FIELD_MISSING: &str = "cursor_field_missing";
    pub const IDEMPOTENCY_IN_PROGRESS: &str = "idempotency_in_progress";
    pub const IDEMPOTENCY_KEY_REUSED: &str = "idempotency_key_reused";
    pub const IN_USE: &str = "in_use";
    pub const INVALID_OAUTH_STATE: &str = "invalid_oauth_state";
    pub const INVITATION_EXPIRED: &str = "invitation_expired";
    pub const INVITATION_NOT_PENDING: &str = "invitation_not_pending";
    pub const LAST_ADMIN: &str = "last_admin";
    pub const MALFORMED_YAML: &str = "malformed_yaml";
    pub const NO_CURSOR: &str = "no_cursor";
    pub const NOT_A_SOURCE: &str = "not_a_source";
    pub const OAUTH_EXCHANGE_FAILED: &str = "oauth_exchange_failed";
    /// A change stream no longer holds what an entity had not read yet.
    pub const POSITION_LOST: &str = "position_lost";
    /// A position a change stream does not retain (earlier, unknown, or past its end).
    pub const POSITION_NOT_RETAINED: &str = "position_not_retained";
    pub const QUOTA_EXCEEDED: &str = "quota_exceeded";
    pub const RUN_FINISHED: &str = "run_finished";
    pub const RUN_IN_PROGRESS: &str = "run_in_progress";
    pub const SCHEMA_UNKNOWN: &str = "schema_unknown";
    pub const SOURCE_UNREACHABLE: &str = "source_unreachable";
    pub const STALE_PLAN: &str = "stale_plan";
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The path (`at.key[0]…`) of the first string in `v`, key or value, that
/// holds a NUL character: input that no store takes (PostgreSQL's text
/// cannot hold one), refused as a validation error wherever it enters.
pub fn nul_in(v: &serde_json::Value, at: &str) -> Option<String> {
    // The path is built as the walk goes, one buffer for the whole walk.
    fn walk(v: &serde_json::Value, path: &mut String) -> bool {
        use serde_json::Value;
        use std::fmt::Write;
        let here = path.len();
        let found = match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().enumerate().any(|(i, x)| {
                path.truncate(here);
                let _ = write!(path, "[{i}]");
                walk(x, path)
            }),
            Value::Object(o) => o.iter().any(|(k, x)| {
                path.truncate(here);
                if k.contains('\0') {
                    return true;
                }
                path.push('.');
                path.push_str(k);
                walk(x, path)
            }),
            _ => false,
        };
        if !found {
            path.truncate(here);
        }
        found
    }
    let mut path = at.to_string();
    walk(v, &mut path).then_some(path)
}

/// Several field errors as one validation error.
pub(crate) fn merge_validation(errors: Vec<Error>) -> Error {
    let mut fields = Vec::new();
    for e in errors {
        match e {
            Error::Validation(f) => fields.extend(f),
            other => return other,
        }
    }
    Error::Validation(fields)
}

#[cfg(test)]
mod tests {
    use super::nul_in;
    use serde_json::json;

    #[test]
    fn nul_in_names_the_first_string_with_a_nul_by_its_path() {
        let v = json!({"a": [1, "ok", {"b": "x\u{0}y"}], "c": "fine"});
        assert_eq!(nul_in(&v, "body").as_deref(), Some("body.a[2].b"));
        // A key holding one: the path of its object.
        assert_eq!(nul_in(&json!({"a": {"k\u{0}": 1}}), "$").as_deref(), Some("$.a"));
        assert_eq!(nul_in(&json!("\u{0}"), "body").as_deref(), Some("body"));
        // Earlier siblings without one leave nothing behind in the path.
        let v = json!([{"long_key": ["x", "y"]}, ["z", "n\u{0}"]]);
        assert_eq!(nul_in(&v, "body").as_deref(), Some("body[1][1]"));
        assert_eq!(nul_in(&json!({"a": ["x", {"b": 1}], "c": null}), "body"), None);
    }
}
