//! Organizations and their members, and the rule that an organization always
//! keeps at least one Admin.

use crate::identity::Role;
use crate::shared::ids::{OrgId, UserId};
use crate::{Error, Result};
use time::OffsetDateTime;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Organization {
    pub id: OrgId,
    pub name: String,
    pub slug: String,
    pub created_at: OffsetDateTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub org_id: OrgId,
    pub user_id: UserId,
    pub email: Option<String>,
    pub name: Option<String>,
    pub role: Role,
    pub joined_at: OffsetDateTime,
}

pub const MAX_SLUG_LEN: usize = 63;

/// A slug is 2–63 characters of lowercase ASCII letters, digits and single
/// hyphens, starting and ending with a letter or digit.
pub fn validate_slug(slug: &str) -> Result<String> {
    let ok = (2..=MAX_SLUG_LEN).contains(&slug.len())
        && slug.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slug.starts_with('-')
        && !slug.ends_with('-')
        && !slug.contains("--");
    if ok {
        Ok(slug.to_string())
    } else {
        Err(Error::invalid(
            "slug",
            "must be 2-63 lowercase letters, digits and single hyphens, not starting or ending with a hyphen",
        ))
    }
}

/// The slug a name suggests: ASCII letters and digits lowercased, every other
/// run of characters one hyphen. Falls back to "org" when nothing is left.
pub fn slugify(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_end_matches('-').chars().take(MAX_SLUG_LEN - 7).collect();
    out = out.trim_end_matches('-').to_string();
    if out.len() < 2 { "org".to_string() } else { out }
}

/// The last-Admin rule. `admins` is the number of Admins the organization has
/// now; `target` is the member's current role; `new_role` is what it becomes
/// (`None`: the member is removed). Adapters call this inside the transaction
/// that makes the change, so two concurrent demotions cannot both pass.
pub fn check_admin_retained(admins: u64, target: Role, new_role: Option<Role>) -> Result<()> {
    let loses_admin = target == Role::Admin && new_role != Some(Role::Admin);
    if loses_admin && admins <= 1 {
        return Err(Error::Conflict {
            code: crate::shared::error::Code::LastAdmin,
            message: "an organization must keep at least one Admin".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_makes_valid_slugs() {
        assert_eq!(slugify("Acme Data, Inc."), "acme-data-inc");
        assert_eq!(slugify("  ünïcode  "), "n-code");
        assert_eq!(slugify("!!"), "org");
        for name in ["Acme Data, Inc.", "x", "a--b", &"long name ".repeat(20)] {
            validate_slug(&slugify(name)).unwrap();
        }
    }

    #[test]
    fn slug_validation_rejects_bad_shapes() {
        for bad in ["A", "a", "-ab", "ab-", "a--b", "a_b", "Ab", &"a".repeat(64)] {
            assert!(validate_slug(bad).is_err(), "{bad}");
        }
        validate_slug("acme-2").unwrap();
    }

    #[test]
    fn removing_or_demoting_the_last_admin_is_a_conflict() {
        let err = check_admin_retained(1, Role::Admin, None).unwrap_err();
        assert!(matches!(err, Error::Conflict { code: crate::shared::error::Code::LastAdmin, .. }));
        assert!(check_admin_retained(1, Role::Admin, Some(Role::Editor)).is_err());
    }

    #[test]
    fn other_changes_keep_the_admin_count_and_pass() {
        check_admin_retained(2, Role::Admin, None).unwrap();
        check_admin_retained(1, Role::Admin, Some(Role::Admin)).unwrap();
        check_admin_retained(1, Role::Editor, None).unwrap();
        check_admin_retained(1, Role::Viewer, Some(Role::Admin)).unwrap();
    }
}
