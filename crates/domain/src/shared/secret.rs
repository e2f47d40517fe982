//! Random secrets, their hashes, and a wrapper that never prints its value.

use sha2::{Digest, Sha256};
use std::fmt;

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A string that must not appear in logs: `Debug` and `Display` print
/// `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `len` characters of base62 from the operating system's CSPRNG, drawn
/// without modulo bias.
pub fn random_base62(len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buf).expect("the operating system's random source is available");
        for b in buf {
            // 248 = 62 * 4: values above it would favour the first symbols.
            if b < 248 && out.len() < len {
                out.push(BASE62[(b % 62) as usize] as char);
            }
        }
    }
    out
}

/// Random bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system's random source is available");
    buf
}

/// Lowercase hex SHA-256 of `input`.
pub fn sha256_hex(input: &[u8]) -> String {
    let digest = Sha256::digest(input);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Compare two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn signature(key: &[u8], id: &str) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(id.as_bytes());
    m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// `<id>.<hex HMAC-SHA256 of id>`: a value that proves it was made with
/// `key` (OAuth state parameters, console login links).
pub fn sign(key: &[u8], id: &str) -> String {
    format!("{id}.{}", signature(key, id))
}

/// The `id` of a [`sign`]ed value whose signature holds, compared in
/// constant time.
pub fn verify(key: &[u8], signed: &str) -> Option<String> {
    let (id, sig) = signed.rsplit_once('.')?;
    constant_time_eq(signature(key, id).as_bytes(), sig.as_bytes()).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_base62_has_the_requested_length_and_alphabet() {
        let s = random_base62(40);
        assert_eq!(s.len(), 40);
        assert!(s.bytes().all(|b| BASE62.contains(&b)));
        assert_ne!(s, random_base62(40));
    }

    #[test]
    fn secret_never_prints_its_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn sha256_hex_matches_a_known_vector() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn constant_time_eq_compares_content_and_length() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
