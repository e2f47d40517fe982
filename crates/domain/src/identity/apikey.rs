//! Organization API keys: `slk_` plus 40 base62 characters, shown once, stored
//! as a SHA-256 hash.

use crate::identity::Role;
use crate::shared::ids::{ApiKeyId, OrgId};
use crate::shared::secret::{Secret, random_base62, sha256_hex};
use crate::{Error, Result};
use time::OffsetDateTime;

pub const KEY_PREFIX: &str = "slk_";
pub const KEY_RANDOM_LEN: usize = 40;
/// How many leading characters of a key are kept to recognise it.
pub const DISPLAY_PREFIX_LEN: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub org_id: OrgId,
    pub name: String,
    pub prefix: String,
    pub roles: Vec<Role>,
    pub created_at: OffsetDateTime,
    pub last_used_at: Option<OffsetDateTime>,
    pub revoked_at: Option<OffsetDateTime>,
}

/// A newly generated key: the plain value (shown once) and what is stored.
pub struct GeneratedKey {
    pub plain: Secret,
    pub hash: String,
    pub prefix: String,
}

pub fn generate() -> GeneratedKey {
    let plain = format!("{KEY_PREFIX}{}", random_base62(KEY_RANDOM_LEN));
    GeneratedKey { hash: hash_key(&plain), prefix: plain[..DISPLAY_PREFIX_LEN].to_string(), plain: Secret::new(plain) }
}

pub fn hash_key(plain: &str) -> String {
    sha256_hex(plain.as_bytes())
}

/// Whether `raw` has the shape of a Sluice API key (checked before any
/// lookup, so junk never reaches the store).
pub fn looks_like_key(raw: &str) -> bool {
    raw.len() >= KEY_PREFIX.len() + 32
        && raw.len() <= 128
        && raw.starts_with(KEY_PREFIX)
        && raw[KEY_PREFIX.len()..].bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Validates the roles of a new key: at least one, no duplicates.
pub fn validate_roles(roles: &[Role]) -> Result<Vec<Role>> {
    if roles.is_empty() {
        return Err(Error::invalid("roles", "must name at least one of Admin, Editor, Viewer"));
    }
    let mut out = roles.to_vec();
    out.sort_by(|a, b| b.cmp(a));
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_contract_shape() {
        let k = generate();
        assert!(looks_like_key(k.plain.expose()));
        assert_eq!(k.plain.expose().len(), 44);
        assert_eq!(k.prefix, &k.plain.expose()[..8]);
        assert_eq!(k.hash, hash_key(k.plain.expose()));
    }

    #[test]
    fn junk_is_not_a_key() {
        for junk in ["", "slk_", "slk_short", "Bearer x", &format!("slk_{}", "!".repeat(40))] {
            assert!(!looks_like_key(junk), "{junk}");
        }
    }

    #[test]
    fn roles_must_be_non_empty_and_are_deduplicated() {
        assert!(validate_roles(&[]).is_err());
        assert_eq!(
            validate_roles(&[Role::Viewer, Role::Admin, Role::Viewer]).unwrap(),
            vec![Role::Admin, Role::Viewer]
        );
    }
}
