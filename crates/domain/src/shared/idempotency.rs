//! Idempotency keys: a retried mutation with the same key and the same
//! request gets the stored response; the same key with another request is
//! refused; a key whose first request is still running answers "in progress".

use crate::{Error, Result};
use async_trait::async_trait;
use time::{Duration, OffsetDateTime};

/// How long a stored response is replayed.
pub const RETENTION: Duration = Duration::hours(24);
/// How long an unfinished request holds its key; after that its process is
/// presumed dead and a retry may take the key over.
pub const IN_FLIGHT_LEASE: Duration = Duration::minutes(5);
pub const MAX_KEY_LEN: usize = 255;

/// What is kept of a response to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    pub location: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// `org:<id>` or `user:<id>`.
    pub scope: String,
    pub key: String,
    /// Hash of method, path and body.
    pub fingerprint: String,
    /// `None` while the first request is in flight.
    pub response: Option<StoredResponse>,
    pub created_at: OffsetDateTime,
}

/// What to do with a request that carries a key already on record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The record is stale: take the key over and run the request.
    TakeOver,
    Replay(StoredResponse),
    Mismatch,
    InProgress,
}

/// The rules, as a pure function of the record on file.
pub fn decide(existing: &IdempotencyRecord, fingerprint: &str, now: OffsetDateTime) -> Decision {
    let age = now - existing.created_at;
    if age >= RETENTION {
        return Decision::TakeOver;
    }
    if existing.fingerprint != fingerprint {
        return Decision::Mismatch;
    }
    match &existing.response {
        Some(r) => Decision::Replay(r.clone()),
        None if age >= IN_FLIGHT_LEASE => Decision::TakeOver,
        None => Decision::InProgress,
    }
}

/// The fingerprint of a request.
pub fn fingerprint(method: &str, path_and_query: &str, body: &[u8]) -> String {
    let mut buf = Vec::with_capacity(method.len() + path_and_query.len() + body.len() + 2);
    buf.extend_from_slice(method.as_bytes());
    buf.push(b'\n');
    buf.extend_from_slice(path_and_query.as_bytes());
    buf.push(b'\n');
    buf.extend_from_slice(body);
    crate::shared::secret::sha256_hex(&buf)
}

/// A key is 1–255 printable ASCII characters.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(Error::invalid("X-Idempotency-Key", "must be 1-255 printable ASCII characters"));
    }
    Ok(())
}

/// The outcome of [`begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The caller owns the key: run the request, then `complete` or `release`.
    Proceed,
    Replay(StoredResponse),
}

/// Claims `key` in `scope` for a request with `fingerprint`.
///
/// # Errors
/// `Unprocessable { code: crate::shared::error::Code::IdempotencyKeyReused }` when the key was used
/// for another request; `Conflict { code: crate::shared::error::Code::IdempotencyInProgress }` while
/// the first request runs.
pub async fn begin(
    store: &dyn IdempotencyStore,
    scope: &str,
    key: &str,
    fingerprint: &str,
    now: OffsetDateTime,
) -> Result<Begin> {
    validate_key(key)?;
    let fresh = IdempotencyRecord {
        scope: scope.to_string(),
        key: key.to_string(),
        fingerprint: fingerprint.to_string(),
        response: None,
        created_at: now,
    };
    // Another process may take a stale record over between our read and our
    // write; a few rounds settle it.
    for _ in 0..3 {
        let Some(existing) = store.try_insert(&fresh).await? else {
            return Ok(Begin::Proceed);
        };
        match decide(&existing, fingerprint, now) {
            Decision::Replay(r) => return Ok(Begin::Replay(r)),
            Decision::Mismatch => {
                return Err(Error::Unprocessable {
                    code: crate::shared::error::Code::IdempotencyKeyReused,
                    message: "this idempotency key was used for a different request".into(),
                });
            }
            Decision::InProgress => return Err(in_progress()),
            Decision::TakeOver => {
                if store.take_over(&existing, &fresh).await? {
                    return Ok(Begin::Proceed);
                }
            }
        }
    }
    Err(in_progress())
}

/// The conflict a request meets while another with its key is in flight.
pub fn in_progress() -> Error {
    Error::Conflict {
        code: crate::shared::error::Code::IdempotencyInProgress,
        message: "a request with this idempotency key is still in progress".into(),
    }
}

/// Where idempotency records are kept.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Inserts `record` unless one exists for its scope and key; returns the
    /// existing record in that case.
    async fn try_insert(&self, record: &IdempotencyRecord) -> Result<Option<IdempotencyRecord>>;
    /// Replaces `old` with `new` if `old` is still what is stored (compare
    /// and swap on `created_at`); whether it did.
    async fn take_over(&self, old: &IdempotencyRecord, new: &IdempotencyRecord) -> Result<bool>;
    async fn complete(&self, scope: &str, key: &str, response: &StoredResponse) -> Result<()>;
    /// Forgets an in-flight record (its request failed with a 5xx).
    async fn release(&self, scope: &str, key: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn record(response: Option<StoredResponse>) -> IdempotencyRecord {
        IdempotencyRecord {
            scope: "org:1".into(),
            key: "k".into(),
            fingerprint: "fp".into(),
            response,
            created_at: datetime!(2026-01-01 0:00 UTC),
        }
    }

    fn stored() -> StoredResponse {
        StoredResponse { status: 201, body: b"{}".to_vec(), content_type: None, location: None }
    }

    #[test]
    fn the_same_request_replays_the_stored_response() {
        let d = decide(&record(Some(stored())), "fp", datetime!(2026-01-01 1:00 UTC));
        assert_eq!(d, Decision::Replay(stored()));
    }

    #[test]
    fn another_request_with_the_key_is_a_mismatch_even_while_in_flight() {
        let now = datetime!(2026-01-01 0:01 UTC);
        assert_eq!(decide(&record(Some(stored())), "other", now), Decision::Mismatch);
        assert_eq!(decide(&record(None), "other", now), Decision::Mismatch);
    }

    #[test]
    fn an_unfinished_request_is_in_progress_until_its_lease_ends() {
        assert_eq!(decide(&record(None), "fp", datetime!(2026-01-01 0:04 UTC)), Decision::InProgress);
        assert_eq!(decide(&record(None), "fp", datetime!(2026-01-01 0:05 UTC)), Decision::TakeOver);
    }

    #[test]
    fn records_older_than_24_hours_are_forgotten() {
        let later = datetime!(2026-01-02 0:00 UTC);
        assert_eq!(decide(&record(Some(stored())), "other", later), Decision::TakeOver);
        assert_eq!(decide(&record(Some(stored())), "fp", later), Decision::TakeOver);
    }

    #[test]
    fn the_fingerprint_covers_method_path_and_body() {
        let a = fingerprint("POST", "/v1/x", b"{}");
        assert_eq!(a, fingerprint("POST", "/v1/x", b"{}"));
        assert_ne!(a, fingerprint("PUT", "/v1/x", b"{}"));
        assert_ne!(a, fingerprint("POST", "/v1/y", b"{}"));
        assert_ne!(a, fingerprint("POST", "/v1/x", b"{ }"));
    }

    #[test]
    fn keys_must_be_printable_and_bounded() {
        validate_key("550e8400-e29b-41d4-a716-446655440000").unwrap();
        for bad in ["", "has space", "tab\t", &"k".repeat(256)] {
            assert!(validate_key(bad).is_err(), "{bad:?}");
        }
    }
}
