//! Encryption of credentials at rest: AES-256-GCM with a random 96-bit nonce
//! per value and the row's identity as associated data (a ciphertext copied
//! to another row does not decrypt). Stored as
//! `v1:<key id>:<base64(nonce ‖ ciphertext)>`, where the key id is the first
//! 8 hex digits of SHA-256 of the key, so a wrong master key is reported as
//! such rather than as corrupt data.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sluice_domain::Error;
use sluice_domain::shared::secret::{random_bytes, sha256_hex};

#[derive(Clone)]
pub struct Cipher {
    key_id: String,
    aead: Aes256Gcm,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cipher").field("key_id", &self.key_id).finish()
    }
}

impl Cipher {
    pub fn new(key: &[u8; 32]) -> Self {
        Self { key_id: sha256_hex(key)[..8].to_string(), aead: Aes256Gcm::new(key.into()) }
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn encrypt(&self, plaintext: &[u8], aad: &str) -> Result<String, Error> {
        let nonce_bytes = random_bytes::<12>();
        let nonce = Nonce::from(nonce_bytes);
        let ct = self
            .aead
            .encrypt(&nonce, Payload { msg: plaintext, aad: aad.as_bytes() })
            .map_err(|_| Error::Internal(anyhow::anyhow!("encryption failed")))?;
        let mut out = Vec::with_capacity(12 + ct.len());
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(&ct);
        Ok(format!("v1:{}:{}", self.key_id, B64.encode(out)))
    }

    pub fn decrypt(&self, stored: &str, aad: &str) -> Result<Vec<u8>, Error> {
        let fail = |m: &str| Error::Internal(anyhow::anyhow!("cannot decrypt stored credentials: {m}"));
        let mut parts = stored.splitn(3, ':');
        let (Some("v1"), Some(key_id), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(fail("unknown format"));
        };
        if key_id != self.key_id {
            return Err(fail(&format!(
                "they were encrypted with master key {key_id}, but the configured key is {}; run `sluice rotate-master-key`",
                self.key_id
            )));
        }
        let raw = B64.decode(body).map_err(|_| fail("bad encoding"))?;
        if raw.len() < 12 + 16 {
            return Err(fail("too short"));
        }
        let (nonce, ct) = raw.split_at(12);
        let nonce = Nonce::try_from(nonce).map_err(|_| fail("bad nonce"))?;
        self.aead.decrypt(&nonce, Payload { msg: ct, aad: aad.as_bytes() }).map_err(|_| fail("authentication failed"))
    }

    /// Encrypts a JSON object of strings.
    pub fn seal_map(&self, map: &std::collections::BTreeMap<String, String>, aad: &str) -> Result<String, Error> {
        let json = serde_json::to_vec(map).map_err(|e| Error::Internal(e.into()))?;
        self.encrypt(&json, aad)
    }

    pub fn open_map(&self, stored: &str, aad: &str) -> Result<std::collections::BTreeMap<String, String>, Error> {
        let plain = self.decrypt(stored, aad)?;
        serde_json::from_slice(&plain)
            .map_err(|e| Error::Internal(anyhow::anyhow!("stored credentials are not a map: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_only_with_its_key_and_row() {
        let c = Cipher::new(&[7u8; 32]);
        let sealed = c.encrypt(b"hunter2", "integration:1").unwrap();
        assert!(sealed.starts_with(&format!("v1:{}:", c.key_id())));
        assert!(!sealed.contains("hunter2"));
        assert_eq!(c.decrypt(&sealed, "integration:1").unwrap(), b"hunter2");
        assert!(c.decrypt(&sealed, "integration:2").is_err(), "bound to its row");
        let other = Cipher::new(&[8u8; 32]);
        let err = other.decrypt(&sealed, "integration:1").unwrap_err().to_string();
        assert!(err.contains("rotate-master-key"), "{err}");
        assert_ne!(c.encrypt(b"hunter2", "x").unwrap(), c.encrypt(b"hunter2", "x").unwrap(), "fresh nonce per value");
    }

    #[test]
    fn tampering_is_detected() {
        let c = Cipher::new(&[1u8; 32]);
        let sealed = c.encrypt(b"secret", "a").unwrap();
        let mut raw = B64.decode(sealed.rsplit(':').next().unwrap()).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        let forged = format!("v1:{}:{}", c.key_id(), B64.encode(raw));
        assert!(c.decrypt(&forged, "a").is_err());
        assert!(c.decrypt("garbage", "a").is_err());
    }
}
