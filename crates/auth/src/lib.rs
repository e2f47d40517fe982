//! Session tokens: the [`TokenVerifier`] port implemented with biscuit, and
//! the HS256 issuer behind `sluice token`.
//!
//! HS256 tokens are checked against the shared secret; RS256/RS384/RS512,
//! PS256 and ES256/ES384 tokens against a JWKS (a file, or a URL fetched at
//! start and again when a token names a key id it has not seen, at most once
//! a minute). `iss`, `aud`, `sub` and `exp` are required and checked.

use async_trait::async_trait;
use biscuit::jwa::SignatureAlgorithm;
use biscuit::jwk::JWKSet;
use biscuit::jws::{Compact, RegisteredHeader, Secret};
use biscuit::{ClaimsSet, Empty, JWT, Presence, RegisteredClaims, SingleOrMultiple, Validation, ValidationOptions};
use serde::{Deserialize, Serialize};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::identity::ports::TokenVerifier;
use sluice_domain::identity::user::VerifiedClaims;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::RwLock;

/// The claims Sluice reads beyond the registered ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProfileClaims {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Where RS/ES keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    File(String),
    Url(String),
}

impl JwksSource {
    /// A path, or an `http(s)://` URL.
    pub fn parse(s: &str) -> Self {
        if s.starts_with("http://") || s.starts_with("https://") {
            JwksSource::Url(s.to_string())
        } else {
            JwksSource::File(s.to_string())
        }
    }
}

struct Jwks {
    source: JwksSource,
    keys: RwLock<(JWKSet<Empty>, Instant)>,
    http: reqwest::Client,
}

const REFETCH_INTERVAL: Duration = Duration::from_secs(60);

impl Jwks {
    async fn load(source: &JwksSource, http: &reqwest::Client) -> anyhow::Result<JWKSet<Empty>> {
        let text = match source {
            JwksSource::File(p) => {
                tokio::fs::read_to_string(p).await.map_err(|e| anyhow::anyhow!("reading JWKS file {p}: {e}"))?
            }
            JwksSource::Url(u) => {
                http.get(u)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map_err(|e| anyhow::anyhow!("fetching JWKS from {u}: {e}"))?
                    .text()
                    .await?
            }
        };
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("parsing JWKS: {e}"))
    }

    /// Refetches a URL source when `kid` is unknown and the last fetch is old
    /// enough.
    async fn refresh_for(&self, kid: Option<&str>) {
        let JwksSource::Url(_) = &self.source else { return };
        {
            let guard = self.keys.read().await;
            let known = kid.is_some_and(|k| guard.0.find(k).is_some());
            if known || guard.1.elapsed() < REFETCH_INTERVAL {
                return;
            }
        }
        match Self::load(&self.source, &self.http).await {
            Ok(set) => *self.keys.write().await = (set, Instant::now()),
            Err(e) => {
                tracing::warn!(error = %e, "refreshing the JWKS failed");
                self.keys.write().await.1 = Instant::now();
            }
        }
    }
}

/// Settings of the verifier.
#[derive(Clone)]
pub struct VerifierConfig {
    pub hs256_secret: Option<Vec<u8>>,
    pub jwks: Option<JwksSource>,
    pub issuer: String,
    pub audience: String,
}

impl std::fmt::Debug for VerifierConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifierConfig")
            .field("hs256_secret", &self.hs256_secret.as_ref().map(|_| "[redacted]"))
            .field("jwks", &self.jwks)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Verifies session tokens.
pub struct JwtVerifier {
    hs256: Option<Secret>,
    jwks: Option<Arc<Jwks>>,
    issuer: String,
    audience: String,
}

const ASYMMETRIC: &[SignatureAlgorithm] = &[
    SignatureAlgorithm::RS256,
    SignatureAlgorithm::RS384,
    SignatureAlgorithm::RS512,
    SignatureAlgorithm::PS256,
    SignatureAlgorithm::PS384,
    SignatureAlgorithm::PS512,
    SignatureAlgorithm::ES256,
    SignatureAlgorithm::ES384,
];

impl JwtVerifier {
    /// # Errors
    /// When a JWKS is configured and cannot be loaded.
    pub async fn new(config: VerifierConfig) -> anyhow::Result<Self> {
        let jwks = match config.jwks {
            Some(source) => {
                // reqwest is built without a default TLS provider; like the
                // other adapters that build clients, install ours first, so
                // the verifier works whoever constructs it.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let http = reqwest::Client::builder().build()?;
                let set = Jwks::load(&source, &http).await?;
                Some(Arc::new(Jwks { source, keys: RwLock::new((set, Instant::now())), http }))
            }
            None => None,
        };
        Ok(Self {
            hs256: config.hs256_secret.map(Secret::Bytes),
            jwks,
            issuer: config.issuer,
            audience: config.audience,
        })
    }

    fn options(&self) -> ValidationOptions {
        let mut o = ValidationOptions::default();
        o.claim_presence_options.expiry = Presence::Required;
        o.claim_presence_options.issuer = Presence::Required;
        o.claim_presence_options.audience = Presence::Required;
        o.claim_presence_options.subject = Presence::Required;
        o.issuer = Validation::Validate(self.issuer.clone());
        o.audience = Validation::Validate(self.audience.clone());
        o
    }
}

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::Unauthenticated(format!("invalid session token: {msg}"))
}

/// The latest time a claim may name (9999-12-31T23:59:59Z): later ones do
/// not fit the date types the verifier converts them to.
const MAX_TIME: f64 = 253_402_300_799.0;
/// The longest `sub`, `iss`, `email` or `name` taken.
const MAX_CLAIM_LEN: usize = 512;

/// Checks what the signature check and the claim validation take on
/// trust, before they run: a header without `crit` parameters (none is
/// understood, RFC 7515 §4.1.11), times that are numbers in range, a
/// non-empty `sub`, and string claims of sane length without NUL.
fn precheck(token: &str) -> Result<()> {
    use base64::Engine;
    use serde_json::Value;
    let part = |i: usize| -> Result<serde_json::Map<String, Value>> {
        let raw = token.split('.').nth(i).unwrap_or_default();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(raw.trim_end_matches('='))
            .map_err(|_| bad("not a compact JWT"))?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(bad("not a compact JWT")),
        }
    };
    let header = part(0)?;
    if header.contains_key("crit") {
        return Err(bad("critical header parameters are not understood"));
    }
    let claims = part(1)?;
    for k in ["exp", "nbf", "iat"] {
        if let Some(v) = claims.get(k) {
            let ok = v.as_f64().is_some_and(|t| (0.0..=MAX_TIME).contains(&t));
            if !ok {
                return Err(bad(format!("'{k}' is not a time")));
            }
        }
    }
    for k in ["sub", "iss", "email", "name"] {
        match claims.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.len() <= MAX_CLAIM_LEN && !s.contains('\0') => {}
            Some(_) => return Err(bad(format!("'{k}' must be a string of at most {MAX_CLAIM_LEN} bytes"))),
        }
    }
    if claims.get("sub").and_then(Value::as_str).is_some_and(|s| s.trim().is_empty()) {
        return Err(bad("'sub' is empty"));
    }
    Ok(())
}

#[async_trait]
impl TokenVerifier for JwtVerifier {
    async fn verify(&self, token: &str) -> Result<VerifiedClaims> {
        if token.len() > 16 * 1024 || token.split('.').count() != 3 {
            return Err(bad("not a compact JWT"));
        }
        precheck(token)?;
        let encoded: JWT<ProfileClaims, Empty> = Compact::new_encoded(token);
        let header = encoded.unverified_header().map_err(|_| bad("unreadable header"))?;
        let alg = header.registered.algorithm;
        let decoded = if alg == SignatureAlgorithm::HS256 {
            let secret = self.hs256.as_ref().ok_or_else(|| bad("HS256 tokens are not accepted"))?;
            encoded.decode(secret, alg).map_err(|_| bad("bad signature"))?
        } else if ASYMMETRIC.contains(&alg) {
            let jwks = self.jwks.as_ref().ok_or_else(|| bad(format!("{alg:?} tokens need SLUICE_JWT_JWKS")))?;
            jwks.refresh_for(header.registered.key_id.as_deref()).await;
            let keys = jwks.keys.read().await;
            encoded.decode_with_jwks(&keys.0, Some(alg)).map_err(|_| bad("bad signature or unknown key"))?
        } else {
            return Err(bad(format!("algorithm {alg:?} is not accepted")));
        };
        decoded.validate(self.options()).map_err(|e| match e {
            biscuit::errors::Error::ValidationError(v) => bad(describe(&v)),
            other => bad(other),
        })?;
        let claims = decoded.payload().map_err(bad)?;
        Ok(VerifiedClaims {
            issuer: claims.registered.issuer.clone().unwrap_or_default(),
            subject: claims.registered.subject.clone().unwrap_or_default(),
            email: claims.private.email.clone(),
            name: claims.private.name.clone(),
        })
    }
}

fn describe(v: &biscuit::errors::ValidationError) -> String {
    use biscuit::errors::ValidationError as V;
    match v {
        V::Expired(_) => "expired".into(),
        V::NotYetValid(_) => "not yet valid".into(),
        V::InvalidIssuer(_) => "wrong issuer".into(),
        V::InvalidAudience(_) => "wrong audience".into(),
        V::MissingRequiredClaims(c) => format!("missing claims {}", c.join(", ")),
        other => other.to_string(),
    }
}

/// Signs HS256 session tokens (`sluice token`, tests).
pub struct TokenIssuer {
    secret: Secret,
    issuer: String,
    audience: String,
}

impl TokenIssuer {
    pub fn new(secret: Vec<u8>, issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        Self { secret: Secret::Bytes(secret), issuer: issuer.into(), audience: audience.into() }
    }

    /// A token for `subject`, valid for `ttl`.
    ///
    /// # Errors
    /// When signing fails.
    pub fn issue(
        &self,
        subject: &str,
        email: Option<&str>,
        name: Option<&str>,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        self.issue_until(subject, email, name, now + ttl.as_secs() as i64)
    }

    /// A token for `subject` that expires at `expiry` (Unix seconds).
    ///
    /// # Errors
    /// When signing fails.
    pub fn issue_until(
        &self,
        subject: &str,
        email: Option<&str>,
        name: Option<&str>,
        expiry: i64,
    ) -> anyhow::Result<String> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let claims = ClaimsSet {
            registered: RegisteredClaims {
                issuer: Some(self.issuer.clone()),
                subject: Some(subject.to_string()),
                audience: Some(SingleOrMultiple::Single(self.audience.clone())),
                expiry: Some(expiry.into()),
                issued_at: Some(now.into()),
                ..Default::default()
            },
            private: ProfileClaims { email: email.map(str::to_string), name: name.map(str::to_string) },
        };
        let header = RegisteredHeader { algorithm: SignatureAlgorithm::HS256, ..Default::default() };
        let jwt: JWT<ProfileClaims, Empty> = JWT::new_decoded(header.into(), claims);
        let encoded = jwt.into_encoded(&self.secret).map_err(|e| anyhow::anyhow!("signing the token: {e}"))?;
        Ok(encoded.unwrap_encoded().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn verifier(secret: &[u8]) -> JwtVerifier {
        JwtVerifier::new(VerifierConfig {
            hs256_secret: Some(secret.to_vec()),
            jwks: None,
            issuer: "sluice".into(),
            audience: "sluice".into(),
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn an_issued_token_verifies_with_its_profile() {
        let issuer = TokenIssuer::new(b"s3cret-s3cret-s3cret".to_vec(), "sluice", "sluice");
        let t = issuer.issue("ann@example.com", Some("ann@example.com"), Some("Ann"), Duration::from_secs(60)).unwrap();
        let c = verifier(b"s3cret-s3cret-s3cret").await.verify(&t).await.unwrap();
        assert_eq!(c.subject, "ann@example.com");
        assert_eq!(c.issuer, "sluice");
        assert_eq!(c.email.as_deref(), Some("ann@example.com"));
        assert_eq!(c.name.as_deref(), Some("Ann"));
    }

    #[tokio::test]
    async fn a_token_signed_with_another_secret_is_refused() {
        let t = TokenIssuer::new(b"other".to_vec(), "sluice", "sluice")
            .issue("x", None, None, Duration::from_secs(60))
            .unwrap();
        let e = verifier(b"mine").await.verify(&t).await.unwrap_err();
        assert!(e.to_string().contains("bad signature"), "{e}");
    }

    #[tokio::test]
    async fn wrong_issuer_audience_and_expiry_are_refused() {
        let v = verifier(b"k").await;
        let wrong_iss =
            TokenIssuer::new(b"k".to_vec(), "evil", "sluice").issue("x", None, None, Duration::from_secs(60)).unwrap();
        assert!(v.verify(&wrong_iss).await.unwrap_err().to_string().contains("wrong issuer"));
        let wrong_aud =
            TokenIssuer::new(b"k".to_vec(), "sluice", "other").issue("x", None, None, Duration::from_secs(60)).unwrap();
        assert!(v.verify(&wrong_aud).await.unwrap_err().to_string().contains("wrong audience"));
        let past = time::OffsetDateTime::now_utc().unix_timestamp() - 10;
        let expired = TokenIssuer::new(b"k".to_vec(), "sluice", "sluice").issue_until("x", None, None, past).unwrap();
        assert!(v.verify(&expired).await.unwrap_err().to_string().contains("expired"));
    }

    /// A token with any header and claims, validly signed with HS256.
    fn signed(secret: &[u8], header: serde_json::Value, claims: serde_json::Value) -> String {
        use base64::Engine;
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
        };
        let input = format!("{}.{}", b64(&header), b64(&claims));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
        let sig = ring::hmac::sign(&key, input.as_bytes());
        format!("{input}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    #[tokio::test]
    async fn hostile_but_validly_signed_claims_are_refused_without_a_panic() {
        use serde_json::json;
        let v = verifier(b"k").await;
        let hs = json!({"alg": "HS256", "typ": "JWT"});
        let base = |extra: serde_json::Value| {
            let mut c = json!({"sub": "x", "iss": "sluice", "aud": "sluice", "exp": 4_000_000_000i64});
            c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            c
        };
        // The shape is right: a control token passes.
        v.verify(&signed(b"k", hs.clone(), base(json!({})))).await.unwrap();
        let cases = [
            (hs.clone(), base(json!({"exp": 1i64 << 62})), "'exp' is not a time"),
            (hs.clone(), base(json!({"exp": -1})), "'exp' is not a time"),
            (hs.clone(), base(json!({"nbf": 1e300})), "'nbf' is not a time"),
            (hs.clone(), base(json!({"iat": "soon"})), "'iat' is not a time"),
            (hs.clone(), base(json!({"sub": ""})), "'sub' is empty"),
            (hs.clone(), base(json!({"sub": "x".repeat(10_000)})), "at most 512"),
            (hs.clone(), base(json!({"name": "a\u{0}b"})), "at most 512"),
            (hs.clone(), base(json!({"email": 5})), "must be a string"),
            (json!({"alg": "HS256", "crit": ["exp"], "exp": 1}), base(json!({})), "critical header"),
        ];
        for (header, claims, want) in cases {
            let e = v.verify(&signed(b"k", header, claims.clone())).await.unwrap_err();
            assert!(matches!(e, Error::Unauthenticated(_)) && e.to_string().contains(want), "{claims}: {e}");
        }
    }

    #[tokio::test]
    async fn junk_and_unsigned_tokens_are_refused() {
        let v = verifier(b"k").await;
        for junk in ["", "a.b", "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."] {
            assert!(v.verify(junk).await.is_err(), "{junk}");
        }
    }
}
