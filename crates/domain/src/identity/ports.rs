//! The ports of identity: where users, organizations, members,
//! invitations and API keys are kept, and who verifies session tokens.
//!
//! Every mutating method takes the [`AuditEntry`] that records it; the
//! adapter writes the change and the entry in one transaction.

use super::Role;
use super::apikey::ApiKey;
use super::invitation::Invitation;
use super::org::{Member, Organization};
use super::user::{User, VerifiedClaims};
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use crate::shared::page::{Page, PageRequest};
use async_trait::async_trait;
use time::OffsetDateTime;

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait UserRepository: Send + Sync {
    /// The user identified by the claims' issuer and subject, created with
    /// the claims' e-mail and name if it does not exist yet.
    async fn upsert_from_claims(&self, claims: &VerifiedClaims, now: OffsetDateTime) -> Result<User>;
    async fn get(&self, id: UserId) -> Result<Option<User>>;
    /// Saves `user`'s e-mail, name and `updated_at`.
    async fn update(&self, user: &User, audit: &AuditEntry) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait OrgRepository: Send + Sync {
    /// Creates `org` with `admin` as its first Admin.
    ///
    /// # Errors
    /// `Conflict` when the slug is taken.
    async fn create(&self, org: &Organization, admin: UserId, audit: &AuditEntry) -> Result<()>;
    async fn get(&self, id: OrgId) -> Result<Option<Organization>>;
    /// The organizations `user` belongs to, newest first.
    async fn list_for_user(&self, user: UserId, page: PageRequest) -> Result<Page<Organization>>;
    /// # Errors
    /// `Conflict` when the new slug is taken.
    async fn update(&self, org: &Organization, audit: &AuditEntry) -> Result<()>;
    /// Deletes the organization with its members, invitations and keys. The
    /// audit log keeps its entries.
    async fn delete(&self, id: OrgId, audit: &AuditEntry) -> Result<()>;

    async fn role_of(&self, org: OrgId, user: UserId) -> Result<Option<Role>>;
    async fn list_members(&self, org: OrgId, page: PageRequest) -> Result<Page<Member>>;
    async fn get_member(&self, org: OrgId, user: UserId) -> Result<Option<Member>>;
    /// Changes a member's role, applying
    /// [`check_admin_retained`](crate::identity::org::check_admin_retained) inside the
    /// transaction.
    ///
    /// # Errors
    /// `NotFound` for a non-member; `Conflict { code: crate::shared::error::Code::LastAdmin }`.
    async fn set_member_role(&self, org: OrgId, user: UserId, role: Role, audit: &AuditEntry) -> Result<Member>;
    /// Removes a member under the same rule.
    ///
    /// # Errors
    /// `NotFound` for a non-member; `Conflict { code: crate::shared::error::Code::LastAdmin }`.
    async fn remove_member(&self, org: OrgId, user: UserId, audit: &AuditEntry) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait InvitationRepository: Send + Sync {
    async fn create(&self, invitation: &Invitation, token_hash: &str, audit: &AuditEntry) -> Result<()>;
    async fn find_by_token_hash(&self, token_hash: &str) -> Result<Option<Invitation>>;
    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Invitation>>;
    /// Marks the invitation accepted and adds `user` as a member with the
    /// invitation's role, atomically.
    ///
    /// # Errors
    /// `Conflict { code: crate::shared::error::Code::InvitationNotPending }` when it was used or
    /// revoked meanwhile; `Conflict { code: crate::shared::error::Code::AlreadyMember }`.
    async fn accept(
        &self,
        invitation: &Invitation,
        user: UserId,
        now: OffsetDateTime,
        audit: &AuditEntry,
    ) -> Result<()>;
    /// # Errors
    /// `NotFound`; `Conflict { code: crate::shared::error::Code::InvitationNotPending }`.
    async fn revoke(&self, org: OrgId, id: InvitationId, audit: &AuditEntry) -> Result<Invitation>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ApiKeyRepository: Send + Sync {
    async fn create(&self, key: &ApiKey, hash: &str, audit: &AuditEntry) -> Result<()>;
    /// Active (not revoked) keys of `org`, newest first.
    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<ApiKey>>;
    /// # Errors
    /// `NotFound` when no active key `id` exists in `org`.
    async fn revoke(&self, org: OrgId, id: ApiKeyId, now: OffsetDateTime, audit: &AuditEntry) -> Result<()>;
    /// The active key with this hash.
    async fn find_active_by_hash(&self, hash: &str) -> Result<Option<ApiKey>>;
    async fn touch(&self, id: ApiKeyId, now: OffsetDateTime) -> Result<()>;
}

/// Verifies session tokens.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait TokenVerifier: Send + Sync {
    /// # Errors
    /// `Unauthenticated` with a reason (expired, bad signature, wrong
    /// issuer or audience, malformed).
    async fn verify(&self, token: &str) -> Result<VerifiedClaims>;
}

/// Who an identity provider says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvidedIdentity {
    pub email: String,
    pub name: Option<String>,
}

/// An OpenID Connect provider the console signs users in with (the
/// authorization-code flow with PKCE and a nonce).
#[async_trait]
pub trait IdentityProvider: Send + Sync {
    /// Where to send the browser to sign in.
    ///
    /// # Errors
    /// `Unavailable` when the provider cannot be reached or described.
    async fn authorize_url(&self, state: &str, nonce: &str, code_challenge: &str) -> Result<String>;
    /// The identity behind an authorization `code`.
    ///
    /// # Errors
    /// `Unauthenticated` when the provider refuses the code or its ID
    /// token does not hold (issuer, audience, expiry, nonce, e-mail);
    /// `Unavailable` when it cannot be reached.
    async fn exchange(&self, code: &str, verifier: &str, nonce: &str) -> Result<ProvidedIdentity>;
}
