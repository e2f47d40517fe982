//! The ports of connect: where integrations and connections are kept,
//! where secret references resolve, and where discovered schemas are
//! catalogued. The connectors' own ports are in [`super::connector`].

use super::connection::{Connection, ConnectionStatus};
use super::connector::{ConnectorResult, EntitySchema};
use super::integration::Integration;
use super::oauth::{OAuthState, OAuthTokens};
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{ConnectionId, IntegrationId, OrgId};
use crate::shared::page::{Page, PageRequest};
use async_trait::async_trait;
use time::OffsetDateTime;

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
    /// `NotFound`; `Conflict { code: crate::shared::error::Code::InUse }` while connections use it.
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
    /// `NotFound`; `Conflict { code: crate::shared::error::Code::InUse }` while flows use it.
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
    /// Records that a run just worked through these connections (a test
    /// that passed): those not healthy become healthy, their last error
    /// cleared; the healthy ones are left as they are.
    async fn record_working(&self, org: OrgId, ids: &[ConnectionId], at: OffsetDateTime) -> Result<()>;
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

/// Where the schemas that discovery and runs see are catalogued (the
/// catalog's store, written here so that connect and sync need not call
/// up into the catalog).
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait DiscoveredSchemas: Send + Sync {
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
}

/// The configured providers and their endpoints.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait OAuthClient: Send + Sync {
    /// Names of the configured providers.
    fn providers(&self) -> Vec<String>;
    /// The URL the user is sent to.
    fn authorize_url(&self, provider: &str, state: &str, code_challenge: &str) -> Result<String>;
    /// Exchanges `code` for tokens.
    ///
    /// # Errors
    /// `Unprocessable { code: crate::shared::error::Code::OauthExchangeFailed }` with the provider's reason.
    async fn exchange(&self, provider: &str, code: &str, verifier: &str) -> Result<OAuthTokens>;
}

/// Single-use storage of flows in progress.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait OAuthStateStore: Send + Sync {
    async fn put(&self, state: &OAuthState) -> Result<()>;
    /// Removes and answers the state (so it is used at most once).
    async fn take(&self, id: &str) -> Result<Option<OAuthState>>;
}
