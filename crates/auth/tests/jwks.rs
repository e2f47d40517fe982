//! ES256 tokens verified against a JWKS, from a file and from a URL served on
//! loopback, with a key generated for the test.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use biscuit::jwa::SignatureAlgorithm;
use biscuit::jws::{RegisteredHeader, Secret};
use biscuit::{ClaimsSet, Empty, JWT, RegisteredClaims, SingleOrMultiple};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use sluice_auth::{JwksSource, JwtVerifier, ProfileClaims, VerifierConfig};
use sluice_domain::identity::ports::TokenVerifier;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Key {
    pair: Arc<EcdsaKeyPair>,
    kid: String,
}

fn new_key(kid: &str) -> Key {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    Key { pair: Arc::new(pair), kid: kid.into() }
}

fn jwks(key: &Key) -> String {
    let public = key.pair.public_key().as_ref();
    serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": key.kid,
        "x": B64.encode(&public[1..33]), "y": B64.encode(&public[33..65]),
    }]})
    .to_string()
}

fn token(key: &Key, kid: &str, issuer: &str) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = ClaimsSet {
        registered: RegisteredClaims {
            issuer: Some(issuer.into()),
            subject: Some("idp|123".into()),
            audience: Some(SingleOrMultiple::Single("sluice".into())),
            expiry: Some((now + 300).into()),
            ..Default::default()
        },
        private: ProfileClaims { email: Some("ann@example.com".into()), name: Some("Ann".into()) },
    };
    let header =
        RegisteredHeader { algorithm: SignatureAlgorithm::ES256, key_id: Some(kid.into()), ..Default::default() };
    let jwt: JWT<ProfileClaims, Empty> = JWT::new_decoded(header.into(), claims);
    jwt.into_encoded(&Secret::EcdsaKeyPair(key.pair.clone())).unwrap().unwrap_encoded().to_string()
}

async fn verifier(source: JwksSource) -> JwtVerifier {
    JwtVerifier::new(VerifierConfig {
        hs256_secret: None,
        jwks: Some(source),
        issuer: "https://idp.example".into(),
        audience: "sluice".into(),
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn an_es256_token_verifies_against_a_jwks_file() {
    let key = new_key("k1");
    let path =
        std::env::temp_dir().join(format!("sluice-jwks-{}.json", sluice_domain::shared::secret::random_base62(8)));
    std::fs::write(&path, jwks(&key)).unwrap();
    let v = verifier(JwksSource::File(path.display().to_string())).await;

    let claims = v.verify(&token(&key, "k1", "https://idp.example")).await.unwrap();
    assert_eq!(claims.subject, "idp|123");
    assert_eq!(claims.email.as_deref(), Some("ann@example.com"));

    let wrong_iss = v.verify(&token(&key, "k1", "https://evil.example")).await.unwrap_err();
    assert!(wrong_iss.to_string().contains("wrong issuer"), "{wrong_iss}");
    let other = new_key("k1");
    assert!(v.verify(&token(&other, "k1", "https://idp.example")).await.is_err(), "a key not in the JWKS is refused");
    assert!(v.verify(&token(&key, "unknown", "https://idp.example")).await.is_err());
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn an_hs256_token_is_refused_when_only_a_jwks_is_configured() {
    let key = new_key("k1");
    let path =
        std::env::temp_dir().join(format!("sluice-jwks-{}.json", sluice_domain::shared::secret::random_base62(8)));
    std::fs::write(&path, jwks(&key)).unwrap();
    let v = verifier(JwksSource::File(path.display().to_string())).await;
    let hs = sluice_auth::TokenIssuer::new(b"x".to_vec(), "https://idp.example", "sluice")
        .issue("s", None, None, std::time::Duration::from_secs(60))
        .unwrap();
    let e = v.verify(&hs).await.unwrap_err();
    assert!(e.to_string().contains("HS256"), "{e}");
    std::fs::remove_file(path).unwrap();
}

/// Serves `body` as JSON to every connection on a loopback port; stops when
/// the test's runtime ends.
async fn serve_json(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let res = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    body.len(),
                    body
                );
                let _ = sock.write_all(res.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/.well-known/jwks.json")
}

#[tokio::test]
async fn an_es256_token_verifies_against_a_jwks_url() {
    let key = new_key("url-key");
    let url = serve_json(jwks(&key)).await;
    let v = verifier(JwksSource::parse(&url)).await;
    let claims = v.verify(&token(&key, "url-key", "https://idp.example")).await.unwrap();
    assert_eq!(claims.name.as_deref(), Some("Ann"));
}

#[tokio::test]
async fn an_unreachable_jwks_url_fails_at_start_with_its_address() {
    let err = JwtVerifier::new(VerifierConfig {
        hs256_secret: None,
        jwks: Some(JwksSource::parse("http://127.0.0.1:9/jwks.json")),
        issuer: "i".into(),
        audience: "a".into(),
    })
    .await
    .err()
    .expect("an unreachable JWKS is an error");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}
