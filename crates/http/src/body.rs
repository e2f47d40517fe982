//! Reading a request body whole, up to a limit: the idempotency middleware
//! (to fingerprint and replay it), the handlers that take raw bytes, and the
//! console's forms.

use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::web::{Bytes, BytesMut};
use futures_util::StreamExt;

/// The largest body any endpoint takes (IaC documents and gateway payloads).
pub const MAX_ANY_BODY: usize = 4 * 1024 * 1024;

/// The whole body, up to `limit` bytes (413 past it).
///
/// # Errors
/// 413 past `limit`; 400 when the body cannot be read.
pub async fn read_body(payload: &mut Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::malformed_json(format!("unreadable body: {e}"), 0, 0))?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
