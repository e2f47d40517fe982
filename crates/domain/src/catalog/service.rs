//! The catalog owns data assets: versioned schema contracts with their
//! fields and tags, the version history with each change labelled
//! breaking or compatible, and the flows that depend on an asset.

use super::asset::{AssetKind, AssetUpdate, AssetVersion, DataAsset, Dependent, NewAsset, asset_json, dependents};
use super::contract::{ContractField, parse_fields};
use super::drift::classify_change;
use super::ports::CatalogRepository;
use crate::connect::service::named_conflict;
use crate::identity::service::IdentityService;
use crate::identity::user::validate_name;
use crate::identity::{Permission, Principal};
use crate::shared::audit::AuditEntry;
use crate::shared::cache::{Changes, Ttl};
use crate::shared::clock::Clock;
use crate::shared::error::merge_validation;
use crate::shared::ids::{AssetId, ConnectionId, OrgId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::SyncService;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;

/// Contracts by asset, each with its organization's change count at load.
pub(crate) type Contracts = Ttl<(OrgId, AssetId), (Arc<DataAsset>, u64)>;

/// The use cases of the catalog.
#[derive(Clone)]
pub struct CatalogService {
    pub(crate) identity: IdentityService,
    pub(crate) sync: SyncService,
    pub(crate) catalog: Arc<dyn CatalogRepository>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) assets: Arc<Contracts>,
    pub(crate) changes: Arc<Changes>,
}

fn fields_or_errors(v: &Value) -> Result<Vec<ContractField>> {
    parse_fields(v).map_err(Error::Validation)
}

impl CatalogService {
    pub async fn list_assets(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.catalog.list_assets(org, page).await
    }

    pub async fn get_asset(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<DataAsset> {
        self.identity.access(p, org, Permission::Read).await?;
        self.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))
    }

    pub async fn asset_versions(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.catalog.asset_versions(org, id).await
    }

    pub async fn create_asset(&self, p: &Principal, org: OrgId, new: NewAsset) -> Result<DataAsset> {
        self.identity.access(p, org, Permission::Write).await?;
        let mut errors = Vec::new();
        let name = validate_name("name", &new.name).map_err(|e| errors.push(e)).ok();
        let fields = fields_or_errors(&new.fields).map_err(|e| errors.push(e)).ok();
        let (Some(name), Some(fields)) = (name, fields) else {
            return Err(merge_validation(errors));
        };
        let now = self.clock.now();
        let asset = DataAsset {
            id: AssetId::new(),
            org_id: org,
            name,
            kind: AssetKind::Virtual,
            version: 1,
            fields,
            description: clean_description(new.description),
            connection_id: None,
            entity: None,
            created_at: now,
            updated_at: now,
        };
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.created", "data_asset", asset.id, now)
            .with_change(Value::Null, asset_json(&asset));
        self.catalog
            .create_asset(&asset, p.actor().name, &audit)
            .await
            .map_err(|e| named_conflict(e, "data asset", &asset.name))?;
        Ok(asset)
    }

    /// Applies `update`; fields that differ make version n+1, classified
    /// breaking or compatible.
    pub async fn update_asset(&self, p: &Principal, org: OrgId, id: AssetId, update: AssetUpdate) -> Result<DataAsset> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        let mut after = before.clone();
        let mut errors = Vec::new();
        if let Some(n) = update.name {
            match validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(e) => errors.push(e),
            }
        }
        if let Some(f) = update.fields {
            match fields_or_errors(&f) {
                Ok(f) => after.fields = f,
                Err(e) => errors.push(e),
            }
        }
        if let Some(d) = update.description {
            after.description = clean_description(d);
        }
        if !errors.is_empty() {
            return Err(merge_validation(errors));
        }
        if after == before {
            return Ok(after);
        }
        after.updated_at = self.clock.now();
        let new_version = (after.fields != before.fields).then(|| {
            after.version = before.version + 1;
            (classify_change(&before.fields, &after.fields), p.actor().name)
        });
        let mut details = json!({"before": asset_json(&before), "after": asset_json(&after)});
        if let Some((change, _)) = &new_version {
            details["change"] = json!(change.as_str());
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.updated", "data_asset", id, after.updated_at)
            .with_details(details);
        self.catalog
            .update_asset(&after, new_version, &audit)
            .await
            .map_err(|e| named_conflict(e, "data asset", &after.name))?;
        self.forget_assets(org);
        Ok(after)
    }

    /// The flows that depend on the asset: mappings naming it as their
    /// contract, and for a discovered asset the flows reading or writing
    /// its entity on its connection.
    pub async fn asset_dependencies(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<Vec<Dependent>> {
        self.identity.access(p, org, Permission::Read).await?;
        let asset = self.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        Ok(dependents(&asset, &self.sync.flows_of(org).await?))
    }

    /// Deletes an asset; one that flows depend on only with `force`.
    pub async fn delete_asset(&self, p: &Principal, org: OrgId, id: AssetId, force: bool) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        if !force {
            let deps = dependents(&before, &self.sync.flows_of(org).await?);
            if !deps.is_empty() {
                let names: Vec<&str> = deps.iter().map(|d| d.flow_name.as_str()).collect();
                return Err(Error::Conflict {
                    code: crate::shared::error::Code::InUse,
                    message: format!(
                        "flows depend on this data asset ({}); pass ?force=true to delete it anyway",
                        names.join(", ")
                    ),
                });
            }
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.deleted", "data_asset", id, self.clock.now())
            .with_change(asset_json(&before), Value::Null);
        self.catalog.delete_asset(org, id, &audit).await?;
        self.forget_assets(org);
        Ok(())
    }

    /// Drops the organization's cached contracts after a change made here.
    fn forget_assets(&self, org: OrgId) {
        self.changes.touch(org);
    }

    /// The contract of `asset` for the gateway, which has checked access:
    /// cached (see [`crate::shared::cache`]), and loaded again once the
    /// organization's assets changed here or below (discovery, runs).
    pub(crate) async fn contract(&self, org: OrgId, asset: AssetId) -> Result<Arc<DataAsset>> {
        let now = self.clock.now();
        let seen = self.changes.count(org);
        if let Some((a, at)) = self.assets.get(&(org, asset), now)
            && at == seen
        {
            return Ok(a);
        }
        let a = Arc::new(self.catalog.get_asset(org, asset).await?.ok_or(Error::not_found("data asset"))?);
        self.assets.put((org, asset), (a.clone(), seen), now);
        Ok(a)
    }

    /// The `discovered` asset that describes `entity` of `connection`
    /// (for the contexts above, which checked access).
    pub(crate) async fn find_discovered(
        &self,
        org: OrgId,
        connection: ConnectionId,
        entity: &str,
    ) -> Result<Option<DataAsset>> {
        self.catalog.find_discovered(org, connection, entity).await
    }
}

fn clean_description(d: Option<String>) -> Option<String> {
    d.map(|d| d.trim().to_string()).filter(|d| !d.is_empty())
}
