//! The ports of the catalog.

use super::asset::{AssetVersion, DataAsset};
use super::drift::Change;
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{AssetId, ConnectionId, OrgId};
use crate::shared::page::{Page, PageRequest};
use async_trait::async_trait;

/// Where data assets and their versions are kept.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait CatalogRepository: Send + Sync {
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
}
