//! OAuth 2 authorization-code flow with PKCE for integrations.
//!
//! `start` stores a single-use state (10 minutes) holding the PKCE verifier
//! and answers the provider's authorize URL; the `state` parameter is the
//! state's random id with an HMAC-SHA256 signature, so a forged or altered
//! one is refused before any lookup. `finish` consumes the state, exchanges
//! the code (with the verifier) at the provider's token URL, and stores the
//! tokens, encrypted, as the credentials of the named integration.

use crate::connect::integration::{Credentials, Integration};
use crate::identity::user::validate_name;
use crate::identity::{Actor, Permission, Principal};
use crate::service::Sluice;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{IntegrationId, OrgId};
use crate::shared::secret::{Secret, constant_time_eq, random_base62};
use crate::{Error, Result};
use async_trait::async_trait;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
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

/// The configured providers and their endpoints.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait OAuthClient: Send + Sync {
    /// Names of the configured providers.
    fn providers(&self) -> Vec<String>;
    /// The URL the user is sent to.
    fn authorize_url(&self, provider: &str, state: &str, code_challenge: &str) -> Result<String>;
    /// Exchanges `code` for tokens.
    ///
    /// # Errors
    /// `Unprocessable { code: crate::shared::error::code::OAUTH_EXCHANGE_FAILED }` with the provider's reason.
    async fn exchange(&self, provider: &str, code: &str, verifier: &str) -> Result<OAuthTokens>;
}

/// Single-use storage of flows in progress.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait OAuthStateStore: Send + Sync {
    async fn put(&self, state: &OAuthState) -> Result<()>;
    /// Removes and answers the state (so it is used at most once).
    async fn take(&self, id: &str) -> Result<Option<OAuthState>>;
}

/// The PKCE challenge of a verifier (`S256`): base64url of its SHA-256.
pub fn challenge(verifier: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn signature(key: &[u8], id: &str) -> String {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(id.as_bytes());
    m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// `<id>.<hmac>`.
pub fn sign_state(key: &[u8], id: &str) -> String {
    format!("{id}.{}", signature(key, id))
}

/// The id of a state parameter whose signature holds.
pub fn verify_state(key: &[u8], param: &str) -> Option<String> {
    let (id, sig) = param.rsplit_once('.')?;
    constant_time_eq(signature(key, id).as_bytes(), sig.as_bytes()).then(|| id.to_string())
}

fn bad_state(message: &str) -> Error {
    Error::Unprocessable { code: crate::shared::error::code::INVALID_OAUTH_STATE, message: message.into() }
}

impl Sluice {
    /// Starts a flow for `provider`, to create or update the integration
    /// `name` (Editor); answers the URL to redirect the user to.
    pub async fn start_oauth(&self, p: &Principal, org: OrgId, provider: &str, name: &str) -> Result<String> {
        self.access(p, org, Permission::Write).await?;
        let (client, states, key) = self.oauth_ports()?;
        if !client.providers().iter().any(|x| x == provider) {
            return Err(Error::not_found("oauth provider"));
        }
        let name = validate_name("name", name)?;
        let state = OAuthState {
            id: random_base62(32),
            org_id: org,
            provider: provider.to_string(),
            integration_name: name,
            verifier: random_base62(64),
            actor: p.actor(),
            expires_at: self.now() + STATE_TTL,
        };
        states.put(&state).await?;
        client.authorize_url(provider, &sign_state(key, &state.id), &challenge(&state.verifier))
    }

    /// Completes a flow: answers the organization and the integration that
    /// now holds the tokens.
    pub async fn finish_oauth(&self, provider: &str, state_param: &str, code: &str) -> Result<(OrgId, Integration)> {
        let (client, states, key) = self.oauth_ports()?;
        let id = verify_state(key, state_param)
            .ok_or_else(|| bad_state("the state parameter is not one this server signed"))?;
        let state =
            states.take(&id).await?.ok_or_else(|| bad_state("this authorization was already used or has expired"))?;
        let now = self.now();
        if state.expires_at <= now {
            return Err(bad_state("this authorization has expired; start again"));
        }
        if state.provider != provider {
            return Err(bad_state("the state belongs to another provider"));
        }
        if code.is_empty() {
            return Err(Error::invalid("code", "is required"));
        }
        let tokens = client.exchange(provider, code, &state.verifier).await?;
        let mut creds = Credentials::default();
        creds.0.insert("access_token".into(), tokens.access_token.expose().to_string());
        if let Some(r) = &tokens.refresh_token {
            creds.0.insert("refresh_token".into(), r.expose().to_string());
        }
        if let Some(t) = &tokens.token_type {
            creds.0.insert("token_type".into(), t.clone());
        }
        if let Some(s) = &tokens.scope {
            creds.0.insert("scope".into(), s.clone());
        }
        if let Some(e) = tokens.expires_at {
            creds.0.insert("expires_at".into(), crate::connect::connector::format_timestamp(e));
        }
        let org = state.org_id;
        let masked = |i: &Integration| json!({"name": i.name, "type": i.integration_type, "credentials": i.credentials.masked()});
        match self.ports.integrations.find_by_name(org, &state.integration_name).await? {
            Some(existing) => {
                let mut after = existing.clone();
                after.credentials.0.extend(creds.0);
                after.updated_at = now;
                let audit = AuditEntry::new(
                    Some(org),
                    state.actor.clone(),
                    "integration.oauth_connected",
                    "integration",
                    after.id,
                    now,
                )
                .with_change(masked(&existing), masked(&after));
                self.ports.integrations.update(&after, &audit).await?;
                Ok((org, after))
            }
            None => {
                let i = Integration {
                    id: IntegrationId::new(),
                    org_id: org,
                    name: state.integration_name.clone(),
                    integration_type: provider.to_string(),
                    credentials: creds,
                    created_at: now,
                    updated_at: now,
                };
                let audit = AuditEntry::new(
                    Some(org),
                    state.actor.clone(),
                    "integration.oauth_connected",
                    "integration",
                    i.id,
                    now,
                )
                .with_change(serde_json::Value::Null, masked(&i));
                self.ports.integrations.create(&i, &audit).await?;
                Ok((org, i))
            }
        }
    }

    fn oauth_ports(&self) -> Result<(&dyn OAuthClient, &dyn OAuthStateStore, &[u8])> {
        match (&self.ports.oauth, &self.ports.oauth_states) {
            (Some(c), Some(s)) => Ok((c.as_ref(), s.as_ref(), self.ports.oauth_state_key.as_slice())),
            _ => Err(Error::not_found("oauth provider")),
        }
    }
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
