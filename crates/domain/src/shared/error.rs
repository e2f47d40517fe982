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
/// catch-all (HTTP: one status a kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unauthenticated,
    Forbidden,
    /// A request body that cannot be read at all (400), e.g. broken YAML.
    BadRequest,
    NotFound,
    /// A method the resource does not take (405).
    MethodNotAllowed,
    Conflict,
    /// A body over the size limit (413).
    TooLarge,
    /// A body in a media type the endpoint does not read (415).
    UnsupportedMediaType,
    Validation,
    /// A quota or rate limit is used up (429).
    Exhausted,
    /// A part of the service that is not configured, or an outside
    /// service it needs that does not answer (503).
    Unavailable,
    Internal,
}

/// The table of error codes, one row a code: its text (the contract's
/// error body's `code`) and its kind, from which every adapter takes the
/// status. A code is only ever written as a [`Code`]; logic never matches
/// on one.
macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $text:literal => $kind:ident,)*) => {
        /// Every code an error carries (see [`codes!`]'s table below).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($(#[$doc])* $name,)*
        }

        impl Code {
            /// Every code, in the table's order.
            pub const ALL: &[Code] = &[$(Code::$name,)*];

            /// The code as clients read it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Code::$name => $text,)*
                }
            }

            /// The kind of every error with this code.
            pub const fn kind(self) -> ErrorKind {
                match self {
                    $(Code::$name => ErrorKind::$kind,)*
                }
            }
        }
    };
}

codes! {
    // Each kind's own code, for errors that carry no other.
    Unauthenticated = "unauthenticated" => Unauthenticated,
    Forbidden = "forbidden" => Forbidden,
    BadRequest = "bad_request" => BadRequest,
    NotFound = "not_found" => NotFound,
    MethodNotAllowed = "method_not_allowed" => MethodNotAllowed,
    Conflict = "conflict" => Conflict,
    PayloadTooLarge = "payload_too_large" => TooLarge,
    UnsupportedMediaType = "unsupported_media_type" => UnsupportedMediaType,
    ValidationFailed = "validation_failed" => Validation,
    QuotaExceeded = "quota_exceeded" => Exhausted,
    Unavailable = "unavailable" => Unavailable,
    InternalError = "internal_error" => Internal,

    // 400: a body that cannot be read.
    MalformedJson = "malformed_json" => BadRequest,
    MalformedYaml = "malformed_yaml" => BadRequest,
    InvalidSignature = "invalid_signature" => BadRequest,
    // 403
    CsrfFailed = "csrf_failed" => Forbidden,
    // 409: the state of a resource refuses the change.
    AlreadyMember = "already_member" => Conflict,
    ConcurrentApply = "concurrent_apply" => Conflict,
    IdempotencyInProgress = "idempotency_in_progress" => Conflict,
    InUse = "in_use" => Conflict,
    InvitationExpired = "invitation_expired" => Conflict,
    InvitationNotPending = "invitation_not_pending" => Conflict,
    LastAdmin = "last_admin" => Conflict,
    RunFinished = "run_finished" => Conflict,
    RunInProgress = "run_in_progress" => Conflict,
    StalePlan = "stale_plan" => Conflict,
    // 422: a well-formed request that cannot be processed.
    CursorFieldMissing = "cursor_field_missing" => Validation,
    IdempotencyKeyReused = "idempotency_key_reused" => Validation,
    InvalidOauthState = "invalid_oauth_state" => Validation,
    NoCursor = "no_cursor" => Validation,
    NotASource = "not_a_source" => Validation,
    OauthExchangeFailed = "oauth_exchange_failed" => Validation,
    /// A change stream no longer holds what an entity had not read yet.
    PositionLost = "position_lost" => Validation,
    /// A position a change stream does not retain (earlier, unknown, or past its end).
    PositionNotRetained = "position_not_retained" => Validation,
    SchemaUnknown = "schema_unknown" => Validation,
    SourceUnreachable = "source_unreachable" => Validation,
    // 422: the gateway's verdicts on a model's output (its own body).
    SchemaValidationFailed = "schema_validation_failed" => Validation,
    RepairRejected = "repair_rejected" => Validation,
    NoJsonFound = "no_json_found" => Validation,
    // 422: what a connector met (see `ConnectorError::code`).
    Unreachable = "unreachable" => Validation,
    Refused = "refused" => Validation,
    Tls = "tls" => Validation,
    WrongProtocol = "wrong_protocol" => Validation,
    MetadataStore = "metadata_store" => Validation,
    AuthFailed = "auth_failed" => Validation,
    DatabaseNotFound = "database_not_found" => Validation,
    EntityNotFound = "entity_not_found" => Validation,
    Timeout = "timeout" => Validation,
    InvalidConfig = "invalid_config" => Validation,
    Unsupported = "unsupported" => Validation,
    ConnectorError = "connector_error" => Validation,
    // 429
    RateLimited = "rate_limited" => Exhausted,
    // 503: not configured, or an outside service failed.
    BillingNotConfigured = "billing_not_configured" => Unavailable,
    InternalApiDisabled = "internal_api_disabled" => Unavailable,
    OidcUnavailable = "oidc_unavailable" => Unavailable,
    PaymentProviderFailed = "payment_provider_failed" => Unavailable,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A domain error. Its [`Code`] decides its kind, and so its status: the
/// variants group what each carries.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// A body that cannot be read at all (400); `details` carries what
    /// locates the problem (line, column).
    #[error("{message}")]
    BadRequest { code: Code, message: String, details: serde_json::Value },
    #[error("{resource} not found")]
    NotFound { resource: &'static str },
    #[error("{message}")]
    Conflict { code: Code, message: String },
    #[error("validation failed")]
    Validation(Vec<FieldError>),
    /// A well-formed request the server refuses to process (422) for a reason
    /// other than field validation, e.g. a reused idempotency key.
    #[error("{message}")]
    Unprocessable { code: Code, message: String },
    /// A quota or limit is used up, e.g. the monthly validations;
    /// `retry_after` seconds until it renews.
    #[error("{message}")]
    Exhausted { code: Code, message: String, retry_after: u64 },
    /// Not configured, or an outside service it needs failed (503).
    #[error("{message}")]
    Unavailable { code: Code, message: String },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// The error's kind: its code's.
    pub fn kind(&self) -> ErrorKind {
        self.code().kind()
    }

    /// The error's code: its own, else its kind's.
    pub fn code(&self) -> Code {
        match self {
            Error::BadRequest { code, .. }
            | Error::Conflict { code, .. }
            | Error::Unprocessable { code, .. }
            | Error::Exhausted { code, .. }
            | Error::Unavailable { code, .. } => *code,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::Forbidden(_) => Code::Forbidden,
            Error::NotFound { .. } => Code::NotFound,
            Error::Validation(_) => Code::ValidationFailed,
            Error::Internal(_) => Code::InternalError,
        }
    }

    pub fn not_found(resource: &'static str) -> Self {
        Error::NotFound { resource }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict { code: Code::Conflict, message: message.into() }
    }

    /// A change refused while a run of the flow executes (409
    /// `run_in_progress`).
    pub fn run_in_progress() -> Self {
        Error::Conflict {
            code: Code::RunInProgress,
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

#[cfg(test)]
mod code_tests {
    use super::*;

    /// One row a code: no text is written twice, and each is snake_case.
    #[test]
    fn every_code_is_one_row() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{} appears twice", c.as_str());
            assert!(c.as_str().chars().all(|x| x.is_ascii_lowercase() || x == '_'), "{}", c.as_str());
        }
    }
}
