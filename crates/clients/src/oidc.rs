//! OpenID Connect sign-in for the console (`SLUICE_OIDC_ISSUER`,
//! `SLUICE_OIDC_CLIENT_ID`, `SLUICE_OIDC_CLIENT_SECRET`): discovery, the
//! authorization-code flow with PKCE and a nonce, and the ID token's
//! claims.
//!
//! The ID token comes straight from the issuer's token endpoint over TLS,
//! authenticated with the client secret, so TLS vouches for its issuer in
//! place of its signature (OpenID Connect Core 1.0, 3.1.3.7, step 6); its
//! `iss`, `aud`, `exp` and `nonce` are checked all the same. For the same
//! reason the issuer must be `https://` (plain HTTP only on loopback, for
//! development and tests).

use async_trait::async_trait;
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::identity::ports::{IdentityProvider, ProvidedIdentity};
use sluice_domain::shared::secret::Secret;
use std::time::Duration;
use tokio::sync::OnceCell;

use crate::oauth::pairs;

#[derive(Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Secret,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig").field("issuer", &self.issuer).field("client_id", &self.client_id).finish()
    }
}

impl OidcConfig {
    /// Whether the issuer's address may be used: `https://`, or `http://`
    /// on a loopback host.
    ///
    /// # Errors
    /// The reason, for the start-up error.
    pub fn check(&self) -> std::result::Result<(), String> {
        let rest = if let Some(r) = self.issuer.strip_prefix("https://") {
            return if r.is_empty() { Err("SLUICE_OIDC_ISSUER names no host".into()) } else { Ok(()) };
        } else if let Some(r) = self.issuer.strip_prefix("http://") {
            r
        } else {
            return Err("SLUICE_OIDC_ISSUER must be an https:// URL".into());
        };
        let host = rest.split(['/', ':']).next().unwrap_or("");
        if ["127.0.0.1", "localhost", "[::1]"].contains(&host) {
            Ok(())
        } else {
            Err("SLUICE_OIDC_ISSUER must be https:// (plain http only on loopback)".into())
        }
    }
}

struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
}

pub struct Oidc {
    config: OidcConfig,
    redirect_uri: String,
    http: reqwest::Client,
    discovery: OnceCell<Discovery>,
}

fn unavailable(message: String) -> Error {
    Error::Unavailable { code: sluice_domain::shared::error::Code::OidcUnavailable, message }
}

fn refused(message: impl Into<String>) -> Error {
    Error::Unauthenticated(message.into())
}

impl Oidc {
    /// `public_url` is the console's; the callback is `/login/oidc/callback` under it.
    pub fn new(config: OidcConfig, public_url: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No redirects: an endpoint that moves is a misconfiguration to see.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let redirect_uri = format!("{}/login/oidc/callback", public_url.trim_end_matches('/'));
        Self { config, redirect_uri, http, discovery: OnceCell::new() }
    }

    /// The issuer's metadata, fetched once (and again after a failure).
    async fn discovery(&self) -> Result<&Discovery> {
        self.discovery
            .get_or_try_init(|| async {
                let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
                let res = self
                    .http
                    .get(&url)
                    .send()
                    .await
                    .map_err(|e| unavailable(format!("the OpenID provider is unreachable: {e}")))?;
                if !res.status().is_success() {
                    return Err(unavailable(format!("the OpenID provider's discovery answered {}", res.status())));
                }
                let v: serde_json::Value =
                    res.json().await.map_err(|_| unavailable("the OpenID provider's discovery is not JSON".into()))?;
                let field = |k: &str| {
                    v[k].as_str()
                        .map(str::to_string)
                        .ok_or_else(|| unavailable(format!("the OpenID provider's discovery has no {k}")))
                };
                let d = Discovery {
                    issuer: field("issuer")?,
                    authorization_endpoint: field("authorization_endpoint")?,
                    token_endpoint: field("token_endpoint")?,
                };
                if d.issuer.trim_end_matches('/') != self.config.issuer.trim_end_matches('/') {
                    return Err(unavailable(format!(
                        "the OpenID provider calls itself {}, not SLUICE_OIDC_ISSUER ({})",
                        d.issuer, self.config.issuer
                    )));
                }
                Ok(d)
            })
            .await
    }
}

/// The claims of a JWT's payload, read without its signature (see the
/// module's docs for why that is sound here).
fn claims_of(jwt: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The identity in an ID token's claims, when they are for this client,
/// from this issuer, unexpired, with this nonce and a verified e-mail.
fn identity(
    claims: &serde_json::Value,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    now: i64,
) -> Result<ProvidedIdentity> {
    if claims["iss"].as_str().map(|s| s.trim_end_matches('/')) != Some(issuer.trim_end_matches('/')) {
        return Err(refused("the ID token is from another issuer"));
    }
    let aud_ok = match &claims["aud"] {
        serde_json::Value::String(a) => a == client_id,
        serde_json::Value::Array(a) => a.iter().any(|x| x.as_str() == Some(client_id)),
        _ => false,
    };
    if !aud_ok {
        return Err(refused("the ID token is for another client"));
    }
    if claims["exp"].as_i64().is_none_or(|exp| exp + 60 < now) {
        return Err(refused("the ID token has expired"));
    }
    if claims["nonce"].as_str() != Some(nonce) {
        return Err(refused("the ID token's nonce does not match this sign-in"));
    }
    let email = claims["email"]
        .as_str()
        .filter(|e| !e.is_empty())
        .ok_or_else(|| refused("the OpenID provider shared no e-mail address; ask for the email scope"))?;
    if claims["email_verified"] == serde_json::Value::Bool(false) {
        return Err(refused("the OpenID provider has not verified this e-mail address"));
    }
    Ok(ProvidedIdentity { email: email.to_string(), name: claims["name"].as_str().map(str::to_string) })
}

#[async_trait]
impl IdentityProvider for Oidc {
    async fn authorize_url(&self, state: &str, nonce: &str, code_challenge: &str) -> Result<String> {
        let d = self.discovery().await?;
        let q = pairs(&[
            ("response_type", "code"),
            ("client_id", self.config.client_id.as_str()),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("scope", "openid email profile"),
            ("state", state),
            ("nonce", nonce),
            ("code_challenge", code_challenge),
            ("code_challenge_method", "S256"),
        ]);
        let sep = if d.authorization_endpoint.contains('?') { '&' } else { '?' };
        Ok(format!("{}{sep}{q}", d.authorization_endpoint))
    }

    async fn exchange(&self, code: &str, verifier: &str, nonce: &str) -> Result<ProvidedIdentity> {
        let d = self.discovery().await?;
        let body = pairs(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("client_id", self.config.client_id.as_str()),
            ("client_secret", self.config.client_secret.expose()),
            ("code_verifier", verifier),
        ]);
        let res = self
            .http
            .post(&d.token_endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| unavailable(format!("the OpenID provider's token endpoint is unreachable: {e}")))?;
        let status = res.status();
        let json: serde_json::Value = res.json().await.unwrap_or_default();
        if !status.is_success() {
            let reason = json["error_description"].as_str().or(json["error"].as_str()).unwrap_or("no reason given");
            return Err(refused(format!("the OpenID provider refused the sign-in: {reason}")));
        }
        let claims = json["id_token"]
            .as_str()
            .and_then(claims_of)
            .ok_or_else(|| refused("the OpenID provider answered no readable ID token"))?;
        identity(&claims, &d.issuer, &self.config.client_id, nonce, time::OffsetDateTime::now_utc().unix_timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> serde_json::Value {
        json!({"iss": "https://idp.example", "aud": "sluice", "exp": 2000, "nonce": "n1",
            "email": "ada@example.com", "email_verified": true, "name": "Ada"})
    }

    #[test]
    fn an_id_token_for_this_client_issuer_and_nonce_signs_in() {
        let id = identity(&good(), "https://idp.example/", "sluice", "n1", 1000).unwrap();
        assert_eq!(id.email, "ada@example.com");
        assert_eq!(id.name.as_deref(), Some("Ada"));
        let mut multi = good();
        multi["aud"] = json!(["other", "sluice"]);
        assert!(identity(&multi, "https://idp.example", "sluice", "n1", 1000).is_ok());
    }

    #[test]
    fn any_other_id_token_is_refused() {
        let cases: [(&str, serde_json::Value); 6] = [
            ("iss", json!("https://evil.example")),
            ("aud", json!("other")),
            ("exp", json!(100)),
            ("nonce", json!("n2")),
            ("email", json!(null)),
            ("email_verified", json!(false)),
        ];
        for (k, v) in cases {
            let mut c = good();
            c[k] = v;
            assert!(identity(&c, "https://idp.example", "sluice", "n1", 1000).is_err(), "{k}");
        }
    }

    #[test]
    fn the_issuer_must_be_https_except_on_loopback() {
        let c =
            |issuer: &str| OidcConfig { issuer: issuer.into(), client_id: "c".into(), client_secret: Secret::new("s") };
        assert!(c("https://accounts.example.com").check().is_ok());
        assert!(c("http://127.0.0.1:9000/realm").check().is_ok());
        assert!(c("http://localhost:9000").check().is_ok());
        assert!(c("http://idp.example").check().is_err());
        assert!(c("ftp://idp.example").check().is_err());
    }

    #[test]
    fn claims_are_read_from_the_payload() {
        use base64::Engine;
        let enc = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let jwt = format!("{}.{}.sig", enc(&json!({"alg": "RS256"})), enc(&good()));
        assert_eq!(claims_of(&jwt).unwrap()["email"], "ada@example.com");
        assert!(claims_of("garbage").is_none());
    }
}
