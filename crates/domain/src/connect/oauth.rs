//! OAuth 2 authorization-code flow with PKCE for integrations.
//!
//! `start` stores a single-use state (10 minutes) holding the PKCE verifier
//! and answers the provider's authorize URL; the `state` parameter is the
//! state's random id with an HMAC-SHA256 signature, so a forged or altered
//! one is refused before any lookup. `finish` consumes the state, exchanges
//! the code (with the verifier) at the provider's token URL, and stores the
//! tokens, encrypted, as the credentials of the named integration.

use crate::shared::audit::Actor;
use crate::shared::ids::OrgId;
use crate::shared::secret::Secret;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

pub const STATE_TTL: Duration = Duration::minutes(10);

/// A flow in progress, stored until the callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthState {
    pub id: String,
    pub org_id: OrgId,
    pub provider: String,
    pub integration_name: String,
    pub verifier: String,
    pub actor: Actor,
    pub expires_at: OffsetDateTime,
}

/// What the provider's token endpoint answered.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthTokens {
    pub access_token: Secret,
    pub refresh_token: Option<Secret>,
    pub token_type: Option<String>,
    pub scope: Option<String>,
    pub expires_at: Option<OffsetDateTime>,
}

impl std::fmt::Debug for OAuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthTokens").field("token_type", &self.token_type).field("scope", &self.scope).finish()
    }
}

/// The PKCE challenge of a verifier (`S256`): base64url of its SHA-256.
pub fn challenge(verifier: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `<id>.<hmac>`.
pub fn sign_state(key: &[u8], id: &str) -> String {
    crate::shared::secret::sign(key, id)
}

/// The id of a state parameter whose signature holds.
pub fn verify_state(key: &[u8], param: &str) -> Option<String> {
    crate::shared::secret::verify(key, param)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_matches_rfc_7636() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn a_state_verifies_only_unaltered_and_with_its_key() {
        let s = sign_state(b"k1", "abc");
        assert_eq!(verify_state(b"k1", &s).as_deref(), Some("abc"));
        assert_eq!(verify_state(b"k2", &s), None);
        assert_eq!(verify_state(b"k1", &s.replacen("abc", "abd", 1)), None);
        assert_eq!(verify_state(b"k1", "no-signature"), None);
    }
}
