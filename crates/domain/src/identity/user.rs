//! Users: identified by the token issuer and subject, created on their first
//! authenticated request.

use crate::shared::ids::UserId;
use crate::{Error, Result};
use time::OffsetDateTime;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub issuer: String,
    pub subject: String,
    pub email: Option<String>,
    pub name: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl User {
    pub fn display_name(&self) -> String {
        self.name.clone().or_else(|| self.email.clone()).unwrap_or_else(|| self.subject.clone())
    }
}

/// What a verified session token says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedClaims {
    pub issuer: String,
    pub subject: String,
    pub email: Option<String>,
    pub name: Option<String>,
}

/// A change to the current user's profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileUpdate {
    pub name: Option<String>,
    pub email: Option<String>,
}

pub const MAX_NAME_LEN: usize = 200;

/// Checks a display name: trimmed, non-empty, at most 200 characters.
pub fn validate_name(field: &str, name: &str) -> Result<String> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if trimmed.chars().count() > MAX_NAME_LEN {
        return Err(Error::invalid(field, format!("must be at most {MAX_NAME_LEN} characters")));
    }
    Ok(trimmed.to_string())
}

/// A deliberately small e-mail check: one `@`, a non-empty local part, a
/// dotted domain, no spaces. Normalised to lowercase.
pub fn validate_email(field: &str, email: &str) -> Result<String> {
    let e = email.trim().to_lowercase();
    let ok = match e.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !domain.contains('@')
                && !e.contains(char::is_whitespace)
                && e.len() <= 320
        }
        None => false,
    };
    if ok { Ok(e) } else { Err(Error::invalid(field, "is not a valid e-mail address")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalised_and_checked() {
        assert_eq!(validate_email("email", " Ann@Example.COM ").unwrap(), "ann@example.com");
        for bad in ["", "ann", "@x.io", "ann@", "ann@x", "a b@x.io", "ann@.io", "a@b@c.io"] {
            assert!(validate_email("email", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(validate_name("name", "  Acme ").unwrap(), "Acme");
        assert!(validate_name("name", "   ").is_err());
        assert!(validate_name("name", &"x".repeat(201)).is_err());
    }
}
