//! OAuth 2 providers configured by environment
//! (`SLUICE_OAUTH_<PROVIDER>_{CLIENT_ID,CLIENT_SECRET,AUTH_URL,TOKEN_URL}`,
//! optional `_SCOPES`): authorize URLs and the code exchange.

use async_trait::async_trait;
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::connect::oauth::OAuthTokens;
use sluice_domain::connect::ports::OAuthClient;
use sluice_domain::shared::secret::Secret;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone)]
pub struct ProviderConfig {
    pub client_id: String,
    pub client_secret: Secret,
    pub auth_url: String,
    pub token_url: String,
    pub scopes: Option<String>,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("client_id", &self.client_id)
            .field("auth_url", &self.auth_url)
            .field("token_url", &self.token_url)
            .finish()
    }
}

pub struct OAuthProviders {
    providers: BTreeMap<String, ProviderConfig>,
    /// `{SLUICE_PUBLIC_URL}`; the callback is `/v1/connections/{provider}/auth/callback` under it.
    public_url: String,
    http: reqwest::Client,
}

/// Percent-encodes for a query string or form body.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A form body (or query string) of `items`.
pub fn pairs(items: &[(&str, &str)]) -> String {
    items.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

impl OAuthProviders {
    pub fn new(providers: BTreeMap<String, ProviderConfig>, public_url: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap_or_default();
        Self { providers, public_url: public_url.trim_end_matches('/').to_string(), http }
    }

    pub fn redirect_uri(&self, provider: &str) -> String {
        format!("{}/v1/connections/{provider}/auth/callback", self.public_url)
    }

    fn get(&self, provider: &str) -> Result<&ProviderConfig> {
        self.providers.get(provider).ok_or(Error::not_found("oauth provider"))
    }
}

fn failed(message: String) -> Error {
    Error::Unprocessable { code: sluice_domain::shared::error::Code::OauthExchangeFailed, message }
}

#[async_trait]
impl OAuthClient for OAuthProviders {
    fn providers(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    fn authorize_url(&self, provider: &str, state: &str, code_challenge: &str) -> Result<String> {
        let p = self.get(provider)?;
        let redirect = self.redirect_uri(provider);
        let mut q = vec![
            ("response_type", "code"),
            ("client_id", p.client_id.as_str()),
            ("redirect_uri", redirect.as_str()),
            ("state", state),
            ("code_challenge", code_challenge),
            ("code_challenge_method", "S256"),
        ];
        if let Some(s) = &p.scopes {
            q.push(("scope", s.as_str()));
        }
        let sep = if p.auth_url.contains('?') { '&' } else { '?' };
        Ok(format!("{}{sep}{}", p.auth_url, pairs(&q)))
    }

    async fn exchange(&self, provider: &str, code: &str, verifier: &str) -> Result<OAuthTokens> {
        let p = self.get(provider)?;
        let redirect = self.redirect_uri(provider);
        let body = pairs(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect.as_str()),
            ("client_id", p.client_id.as_str()),
            ("client_secret", p.client_secret.expose()),
            ("code_verifier", verifier),
        ]);
        let res = self
            .http
            .post(&p.token_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| failed(format!("the {provider} token endpoint is unreachable: {e}")))?;
        let status = res.status();
        let json: serde_json::Value = res
            .json()
            .await
            .map_err(|_| failed(format!("the {provider} token endpoint did not answer JSON ({status})")))?;
        if !status.is_success() || json.get("error").is_some() {
            let reason = json["error_description"].as_str().or(json["error"].as_str()).unwrap_or("unknown error");
            return Err(failed(format!("{provider} refused the code: {reason}")));
        }
        let access =
            json["access_token"].as_str().ok_or_else(|| failed(format!("{provider} answered no access_token")))?;
        Ok(OAuthTokens {
            access_token: Secret::new(access),
            refresh_token: json["refresh_token"].as_str().map(Secret::new),
            token_type: json["token_type"].as_str().map(str::to_string),
            scope: json["scope"].as_str().map(str::to_string),
            expires_at: json["expires_in"]
                .as_i64()
                .map(|s| time::OffsetDateTime::now_utc() + time::Duration::seconds(s)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorize_urls_carry_pkce_state_and_the_callback() {
        let mut m = BTreeMap::new();
        m.insert(
            "github".to_string(),
            ProviderConfig {
                client_id: "cid".into(),
                client_secret: Secret::new("shh"),
                auth_url: "https://idp.example/authorize".into(),
                token_url: "https://idp.example/token".into(),
                scopes: Some("repo read:org".into()),
            },
        );
        let p = OAuthProviders::new(m, "http://localhost:8080/");
        let url = p.authorize_url("github", "st.sig", "chal").unwrap();
        assert!(url.starts_with("https://idp.example/authorize?response_type=code&client_id=cid"));
        assert!(
            url.contains("redirect_uri=http%3A%2F%2Flocalhost%3A8080%2Fv1%2Fconnections%2Fgithub%2Fauth%2Fcallback")
        );
        assert!(url.contains("state=st.sig") && url.contains("code_challenge=chal&code_challenge_method=S256"));
        assert!(url.contains("scope=repo%20read%3Aorg"));
        assert!(!url.contains("shh"));
        assert!(p.authorize_url("gitlab", "s", "c").is_err());
    }
}
