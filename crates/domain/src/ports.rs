//! Ports: what the domain needs from the outside world. Adapters (the
//! sea-orm store, the JWT verifier, the in-memory testkit) implement them.
//!
//! Every mutating method takes the [`AuditEntry`] that records it; the
//! adapter writes the change and the entry in one transaction.

use crate::Result;
use crate::catalog::{AssetVersion, Change, DataAsset};
use crate::connect::connector::{ConnectorResult, EntitySchema};
use crate::connect::integration::{Connection, ConnectionStatus, Integration};
use crate::identity::Role;
use crate::identity::apikey::ApiKey;
use crate::identity::invitation::Invitation;
use crate::identity::org::{Member, Organization};
use crate::identity::user::{User, VerifiedClaims};
use crate::shared::audit::{AuditEntry, AuditFilter};
use crate::shared::idempotency::{IdempotencyRecord, StoredResponse};
use crate::shared::ids::{ApiKeyId, AssetId, ConnectionId, IntegrationId, InvitationId, OrgId, UserId};
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
    /// `NotFound` for a non-member; `Conflict { code: crate::shared::error::code::LAST_ADMIN }`.
    async fn set_member_role(&self, org: OrgId, user: UserId, role: Role, audit: &AuditEntry) -> Result<Member>;
    /// Removes a member under the same rule.
    ///
    /// # Errors
    /// `NotFound` for a non-member; `Conflict { code: crate::shared::error::code::LAST_ADMIN }`.
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
    /// `Conflict { code: crate::shared::error::code::INVITATION_NOT_PENDING }` when it was used or
    /// revoked meanwhile; `Conflict { code: crate::shared::error::code::ALREADY_MEMBER }`.
    async fn accept(
        &self,
        invitation: &Invitation,
        user: UserId,
        now: OffsetDateTime,
        audit: &AuditEntry,
    ) -> Result<()>;
    /// # Errors
    /// `NotFound`; `Conflict { code: crate::shared::error::code::INVITATION_NOT_PENDING }`.
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

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait AuditRepository: Send + Sync {
    async fn append(&self, entry: &AuditEntry) -> Result<()>;
    async fn list(&self, org: OrgId, filter: &AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Inserts `record` unless one exists for its scope and key; returns the
    /// existing record in that case.
    async fn try_insert(&self, record: &IdempotencyRecord) -> Result<Option<IdempotencyRecord>>;
    /// Replaces `old` with `new` if `old` is still what is stored (compare
    /// and swap on `created_at`); whether it did.
    async fn take_over(&self, old: &IdempotencyRecord, new: &IdempotencyRecord) -> Result<bool>;
    async fn complete(&self, scope: &str, key: &str, response: &StoredResponse) -> Result<()>;
    /// Forgets an in-flight record (its request failed with a 5xx).
    async fn release(&self, scope: &str, key: &str) -> Result<()>;
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

/// Liveness of the metadata store.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait HealthCheck: Send + Sync {
    async fn ping(&self) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait IntegrationRepository: Send + Sync {
    /// # Errors
    /// `Conflict` when the name is taken in the organization.
    async fn create(&self, integration: &Integration, audit: &AuditEntry) -> Result<()>;
    async fn get(&self, org: OrgId, id: IntegrationId) -> Result<Option<Integration>>;
    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Integration>>;
    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Integration>>;
    /// # Errors
    /// `Conflict` when the new name is taken.
    async fn update(&self, integration: &Integration, audit: &AuditEntry) -> Result<()>;
    /// # Errors
    /// `NotFound`; `Conflict { code: crate::shared::error::code::IN_USE }` while connections use it.
    async fn delete(&self, org: OrgId, id: IntegrationId, audit: &AuditEntry) -> Result<()>;
}

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ConnectionRepository: Send + Sync {
    /// # Errors
    /// `Conflict` when the name is taken in the organization.
    async fn create(&self, connection: &Connection, audit: &AuditEntry) -> Result<()>;
    async fn get(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>>;
    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Connection>>;
    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Connection>>;
    async fn update(&self, connection: &Connection, audit: &AuditEntry) -> Result<()>;
    /// # Errors
    /// `NotFound`; `Conflict { code: crate::shared::error::code::IN_USE }` while flows use it.
    async fn delete(&self, org: OrgId, id: ConnectionId, audit: &AuditEntry) -> Result<()>;
    /// Records the outcome of a test.
    async fn record_test(
        &self,
        org: OrgId,
        id: ConnectionId,
        status: ConnectionStatus,
        tested_at: OffsetDateTime,
        error: Option<String>,
    ) -> Result<()>;
}

/// The part of the data catalog that discovery writes.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait CatalogRepository: Send + Sync {
    /// Records `schema` as the `discovered` asset `name` of `connection`:
    /// created at version 1, or given a new version when its fields changed.
    async fn upsert_discovered(
        &self,
        org: OrgId,
        name: &str,
        connection: ConnectionId,
        schema: &EntitySchema,
        now: OffsetDateTime,
    ) -> Result<()>;

    /// Inserts a new asset with its first version entry. A taken name is a
    /// conflict.
    async fn create_asset(&self, asset: &DataAsset, created_by: Option<String>, audit: &AuditEntry) -> Result<()>;

    async fn get_asset(&self, org: OrgId, id: AssetId) -> Result<Option<DataAsset>>;

    /// The `discovered` asset that describes `entity` of `connection`.
    async fn find_discovered(&self, org: OrgId, connection: ConnectionId, entity: &str) -> Result<Option<DataAsset>>;

    async fn list_assets(&self, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>>;

    /// Saves `asset`; with `new_version`, also records its version entry
    /// (`asset.version` is then the new number). Not found when the asset
    /// is gone.
    async fn update_asset(
        &self,
        asset: &DataAsset,
        new_version: Option<(Change, Option<String>)>,
        audit: &AuditEntry,
    ) -> Result<()>;

    /// Deletes the asset and its versions. Not found when there is none.
    async fn delete_asset(&self, org: OrgId, id: AssetId, audit: &AuditEntry) -> Result<()>;

    /// Version entries, oldest first.
    async fn asset_versions(&self, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>>;

    /// Counts one gateway validation of `org` in `month` (`YYYY-MM`) when
    /// fewer than `limit` were counted (any number when `None`); false when
    /// the quota is used up. Atomic across processes.
    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool>;

    /// Gateway validations of `org` counted in `month`.
    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64>;
}

/// Resolves secret references (`env:NAME`, `aws:secretsmanager:ARN`).
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait SecretResolver: Send + Sync {
    /// # Errors
    /// `InvalidConfig` naming the reference (never a value) when it cannot
    /// be resolved.
    async fn resolve(&self, reference: &str) -> ConnectorResult<String>;
}

/// Runs CPU-bound pure work (the gateway's parse and extraction of a large payload)
/// where it cannot hold up other requests: a bounded pool of threads in
/// the service, the calling task in tests and embedders that need none.
#[async_trait]
pub trait Offload: Send + Sync {
    /// Runs `job` to its end.
    async fn run(&self, job: Box<dyn FnOnce() + Send>);
}

/// Runs the work on the calling task.
#[derive(Debug, Default, Clone, Copy)]
pub struct Inline;

#[async_trait]
impl Offload for Inline {
    async fn run(&self, job: Box<dyn FnOnce() + Send>) {
        job();
    }
}
