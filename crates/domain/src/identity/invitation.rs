//! Invitations: a single-use token, shown once, that lets the user with the
//! invited e-mail address join an organization with a role.

use crate::identity::Role;
use crate::shared::ids::{InvitationId, OrgId, UserId};
use crate::{Error, Result};
use time::{Duration, OffsetDateTime};

pub const INVITATION_TTL: Duration = Duration::days(7);
pub const TOKEN_PREFIX: &str = "sli_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvitationStatus {
    Pending,
    Accepted,
    Revoked,
    Expired,
}

impl InvitationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InvitationStatus::Pending => "pending",
            InvitationStatus::Accepted => "accepted",
            InvitationStatus::Revoked => "revoked",
            InvitationStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "pending" => Ok(Self::Pending),
            "accepted" => Ok(Self::Accepted),
            "revoked" => Ok(Self::Revoked),
            "expired" => Ok(Self::Expired),
            other => Err(Error::Internal(anyhow::anyhow!("unknown invitation status {other}"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitation {
    pub id: InvitationId,
    pub org_id: OrgId,
    pub email: String,
    pub role: Role,
    /// The stored status; `pending` past `expires_at` reads as `expired`.
    pub status: InvitationStatus,
    pub expires_at: OffsetDateTime,
    pub created_at: OffsetDateTime,
    pub invited_by: Option<UserId>,
}

impl Invitation {
    /// The status as of `now`.
    pub fn status_at(&self, now: OffsetDateTime) -> InvitationStatus {
        match self.status {
            InvitationStatus::Pending if now >= self.expires_at => InvitationStatus::Expired,
            s => s,
        }
    }

    /// Whether the user with `email` may accept this invitation at `now`.
    /// E-mail addresses compare case-insensitively.
    pub fn check_acceptable(&self, email: Option<&str>, now: OffsetDateTime) -> Result<()> {
        match self.status_at(now) {
            InvitationStatus::Pending => {}
            InvitationStatus::Expired => {
                return Err(Error::Conflict {
                    code: crate::shared::error::Code::InvitationExpired,
                    message: "this invitation has expired".into(),
                });
            }
            s => {
                return Err(Error::Conflict {
                    code: crate::shared::error::Code::InvitationNotPending,
                    message: format!("this invitation is {}", s.as_str()),
                });
            }
        }
        match email {
            Some(e) if e.eq_ignore_ascii_case(&self.email) => Ok(()),
            Some(_) => Err(Error::forbidden("this invitation was sent to a different e-mail address")),
            None => Err(Error::forbidden("your session has no e-mail address; sync your profile and try again")),
        }
    }
}

/// A fresh invitation token (shown to the inviter once) and the hash stored
/// in its place.
pub fn new_token() -> (String, String) {
    let token = format!("{TOKEN_PREFIX}{}", crate::shared::secret::random_base62(40));
    let hash = hash_token(&token);
    (token, hash)
}

pub fn hash_token(token: &str) -> String {
    crate::shared::secret::sha256_hex(token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn invitation(status: InvitationStatus) -> Invitation {
        let created = datetime!(2026-01-01 0:00 UTC);
        Invitation {
            id: InvitationId::new(),
            org_id: OrgId::new(),
            email: "ann@example.com".into(),
            role: Role::Editor,
            status,
            expires_at: created + INVITATION_TTL,
            created_at: created,
            invited_by: None,
        }
    }

    #[test]
    fn a_pending_invitation_is_accepted_by_its_email_in_any_case() {
        let inv = invitation(InvitationStatus::Pending);
        inv.check_acceptable(Some("ANN@example.com"), datetime!(2026-01-02 0:00 UTC)).unwrap();
    }

    #[test]
    fn another_email_is_forbidden() {
        let inv = invitation(InvitationStatus::Pending);
        let err = inv.check_acceptable(Some("bob@example.com"), datetime!(2026-01-02 0:00 UTC));
        assert_eq!(err.unwrap_err().kind(), crate::ErrorKind::Forbidden);
        assert!(inv.check_acceptable(None, datetime!(2026-01-02 0:00 UTC)).is_err());
    }

    #[test]
    fn an_invitation_expires_after_seven_days() {
        let inv = invitation(InvitationStatus::Pending);
        assert_eq!(inv.status_at(datetime!(2026-01-07 23:59 UTC)), InvitationStatus::Pending);
        assert_eq!(inv.status_at(datetime!(2026-01-08 0:00 UTC)), InvitationStatus::Expired);
        let err = inv.check_acceptable(Some("ann@example.com"), datetime!(2026-01-09 0:00 UTC));
        assert!(matches!(err, Err(Error::Conflict { code: crate::shared::error::Code::InvitationExpired, .. })));
    }

    #[test]
    fn accepted_and_revoked_invitations_cannot_be_used_again() {
        for s in [InvitationStatus::Accepted, InvitationStatus::Revoked] {
            let err = invitation(s).check_acceptable(Some("ann@example.com"), datetime!(2026-01-02 0:00 UTC));
            assert!(matches!(err, Err(Error::Conflict { code: crate::shared::error::Code::InvitationNotPending, .. })));
        }
        // An accepted invitation stays accepted after its expiry date.
        let inv = invitation(InvitationStatus::Accepted);
        assert_eq!(inv.status_at(datetime!(2027-01-01 0:00 UTC)), InvitationStatus::Accepted);
    }

    #[test]
    fn tokens_are_prefixed_random_and_stored_as_hashes() {
        let (t1, h1) = new_token();
        let (t2, _) = new_token();
        assert!(t1.starts_with(TOKEN_PREFIX));
        assert_ne!(t1, t2);
        assert_eq!(hash_token(&t1), h1);
        assert!(!h1.contains(&t1));
    }
}
