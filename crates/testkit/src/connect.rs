//! Integrations, connections and the catalog in memory, and fake secrets.

use super::*;

use sluice_domain::catalog::asset::{AssetVersion, DataAsset};
use sluice_domain::catalog::drift::Change;
use sluice_domain::catalog::ports::CatalogRepository;
use sluice_domain::connect::connection::{Connection, ConnectionStatus};
use sluice_domain::connect::connector::*;
use sluice_domain::connect::integration::Integration;
use sluice_domain::connect::ports::*;
use sluice_domain::shared::ids::{AssetId, ConnectionId, IntegrationId};

#[derive(Default)]
pub(crate) struct CatalogState {
    pub(crate) integrations: Vec<Integration>,
    pub(crate) connections: Vec<Connection>,
    /// name → (version, schema)
    pub(crate) discovered: HashMap<(OrgId, String), (i32, EntitySchema)>,
    /// (org, connection, entity) → name of its discovered asset
    pub(crate) discovered_by_entity: HashMap<(OrgId, ConnectionId, String), String>,
    pub(crate) assets: Vec<DataAsset>,
    pub(crate) versions: Vec<(AssetId, AssetVersion)>,
}

/// Integrations, connections and discovered assets, in memory.
#[derive(Default, Clone)]
pub struct InMemoryCatalog {
    pub(crate) state: Arc<Mutex<CatalogState>>,
    pub(crate) audit: InMemoryStore,
}

impl InMemoryCatalog {
    /// A catalog whose audit entries go to `store`.
    pub fn new(store: &InMemoryStore) -> Self {
        Self { state: Arc::default(), audit: store.clone() }
    }

    pub(crate) fn s(&self) -> MutexGuard<'_, CatalogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The version of a discovered asset, if catalogued.
    pub fn discovered_version(&self, org: OrgId, name: &str) -> Option<i32> {
        self.s().discovered.get(&(org, name.to_string())).map(|(v, _)| *v)
    }

    fn log(&self, e: &AuditEntry) {
        self.audit.s().audit.push(e.clone());
    }
}

#[async_trait]
impl IntegrationRepository for InMemoryCatalog {
    async fn create(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.integrations.iter().any(|x| x.org_id == i.org_id && x.name == i.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.integrations.push(i.clone());
        self.log(audit);
        Ok(())
    }

    async fn get(&self, org: OrgId, id: IntegrationId) -> Result<Option<Integration>> {
        Ok(self.s().integrations.iter().find(|i| i.org_id == org && i.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Integration>> {
        Ok(self.s().integrations.iter().find(|i| i.org_id == org && i.name == name).cloned())
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        let items = self.s().integrations.iter().filter(|i| i.org_id == org).cloned().collect();
        Ok(page_of(items, page, |i| i.id.as_uuid()))
    }

    async fn update(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.integrations.iter().any(|x| x.org_id == i.org_id && x.name == i.name && x.id != i.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.integrations.iter_mut().find(|x| x.id == i.id) {
            *x = i.clone();
        }
        self.log(audit);
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: IntegrationId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let users = s.connections.iter().filter(|c| c.integration_id == Some(id)).count();
        if users > 0 {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::Code::InUse,
                message: format!("{users} connection(s) use this integration"),
            });
        }
        let before = s.integrations.len();
        s.integrations.retain(|i| !(i.org_id == org && i.id == id));
        if s.integrations.len() == before {
            return Err(Error::not_found("integration"));
        }
        self.log(audit);
        Ok(())
    }
}

#[async_trait]
impl ConnectionRepository for InMemoryCatalog {
    async fn create(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.connections.iter().any(|x| x.org_id == c.org_id && x.name == c.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.connections.push(c.clone());
        self.log(audit);
        Ok(())
    }

    async fn get(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>> {
        Ok(self.s().connections.iter().find(|c| c.org_id == org && c.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Connection>> {
        Ok(self.s().connections.iter().find(|c| c.org_id == org && c.name == name).cloned())
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        let items = self.s().connections.iter().filter(|c| c.org_id == org).cloned().collect();
        Ok(page_of(items, page, |c| c.id.as_uuid()))
    }

    async fn update(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.connections.iter().any(|x| x.org_id == c.org_id && x.name == c.name && x.id != c.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.connections.iter_mut().find(|x| x.id == c.id) {
            *x = c.clone();
        }
        self.log(audit);
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: ConnectionId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.connections.len();
        s.connections.retain(|c| !(c.org_id == org && c.id == id));
        if s.connections.len() == before {
            return Err(Error::not_found("connection"));
        }
        self.log(audit);
        Ok(())
    }

    async fn record_test(
        &self,
        org: OrgId,
        id: ConnectionId,
        status: ConnectionStatus,
        tested_at: OffsetDateTime,
        error: Option<String>,
    ) -> Result<()> {
        if let Some(c) = self.s().connections.iter_mut().find(|c| c.org_id == org && c.id == id) {
            c.status = status;
            c.last_tested_at = Some(tested_at);
            c.last_error = error;
        }
        Ok(())
    }

    async fn record_working(&self, org: OrgId, ids: &[ConnectionId], at: OffsetDateTime) -> Result<()> {
        let mut s = self.s();
        for c in s.connections.iter_mut().filter(|c| c.org_id == org && ids.contains(&c.id)) {
            if c.status != ConnectionStatus::Healthy {
                c.status = ConnectionStatus::Healthy;
                c.last_tested_at = Some(at);
                c.last_error = None;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl DiscoveredSchemas for InMemoryCatalog {
    async fn upsert_discovered(
        &self,
        org: OrgId,
        name: &str,
        connection: ConnectionId,
        schema: &EntitySchema,
        _now: OffsetDateTime,
    ) -> Result<()> {
        let mut s = self.s();
        s.discovered_by_entity.insert((org, connection, schema.name.clone()), name.to_string());
        let entry = s.discovered.entry((org, name.to_string())).or_insert((0, schema.clone()));
        if entry.0 == 0 || entry.1 != *schema {
            entry.0 += 1;
            entry.1 = schema.clone();
        }
        Ok(())
    }
}

#[async_trait]
impl CatalogRepository for InMemoryCatalog {
    async fn create_asset(&self, a: &DataAsset, created_by: Option<String>, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.assets.iter().any(|x| x.org_id == a.org_id && x.name == a.name) {
            return Err(Error::conflict("a resource with these values already exists"));
        }
        s.assets.push(a.clone());
        let v = AssetVersion {
            version: a.version,
            fields: a.fields.clone(),
            change: Change::Compatible,
            created_at: a.created_at,
            created_by,
        };
        s.versions.push((a.id, v));
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn find_discovered(&self, org: OrgId, connection: ConnectionId, entity: &str) -> Result<Option<DataAsset>> {
        let s = self.s();
        let Some(name) = s.discovered_by_entity.get(&(org, connection, entity.to_string())) else { return Ok(None) };
        let Some((version, schema)) = s.discovered.get(&(org, name.clone())) else { return Ok(None) };
        let now = OffsetDateTime::UNIX_EPOCH;
        Ok(Some(DataAsset {
            id: AssetId::new(),
            org_id: org,
            name: name.clone(),
            kind: sluice_domain::catalog::asset::AssetKind::Discovered,
            version: *version,
            fields: schema
                .fields
                .iter()
                .map(|f| sluice_domain::gateway::ContractField {
                    name: f.name.clone(),
                    field_type: f.field_type,
                    required: !f.nullable,
                    tags: vec![],
                    fields: vec![],
                })
                .collect(),
            description: None,
            connection_id: Some(connection),
            entity: Some(entity.to_string()),
            created_at: now,
            updated_at: now,
        }))
    }

    async fn get_asset(&self, org: OrgId, id: AssetId) -> Result<Option<DataAsset>> {
        Ok(self.s().assets.iter().find(|a| a.org_id == org && a.id == id).cloned())
    }

    async fn list_assets(&self, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        let items = self.s().assets.iter().filter(|a| a.org_id == org).cloned().collect();
        Ok(page_of(items, page, |a| a.id.as_uuid()))
    }

    async fn update_asset(
        &self,
        a: &DataAsset,
        new_version: Option<(Change, Option<String>)>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut s = self.s();
        if s.assets.iter().any(|x| x.org_id == a.org_id && x.name == a.name && x.id != a.id) {
            return Err(Error::conflict("a resource with these values already exists"));
        }
        let Some(slot) = s.assets.iter_mut().find(|x| x.org_id == a.org_id && x.id == a.id) else {
            return Err(Error::NotFound { resource: "data asset" });
        };
        *slot = a.clone();
        if let Some((change, created_by)) = new_version {
            let v = AssetVersion {
                version: a.version,
                fields: a.fields.clone(),
                change,
                created_at: a.updated_at,
                created_by,
            };
            s.versions.push((a.id, v));
        }
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn delete_asset(&self, org: OrgId, id: AssetId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.assets.len();
        s.assets.retain(|a| !(a.org_id == org && a.id == id));
        if s.assets.len() == before {
            return Err(Error::NotFound { resource: "data asset" });
        }
        s.versions.retain(|(a, _)| *a != id);
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn asset_versions(&self, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        let s = self.s();
        if !s.assets.iter().any(|a| a.org_id == org && a.id == id) {
            return Err(Error::NotFound { resource: "data asset" });
        }
        Ok(s.versions.iter().filter(|(a, _)| *a == id).map(|(_, v)| v.clone()).collect())
    }
}

/// Resolves `env:` references from a fixed map, for tests.
#[derive(Default, Clone)]
pub struct FakeSecrets(pub HashMap<String, String>);

#[async_trait]
impl SecretResolver for FakeSecrets {
    async fn resolve(&self, reference: &str) -> ConnectorResult<String> {
        match reference.strip_prefix("env:") {
            Some(name) => {
                self.0.get(name).cloned().ok_or_else(|| ConnectorError::InvalidConfig(format!("env:{name} is not set")))
            }
            None => Ok(reference.to_string()),
        }
    }
}
