//! Use cases of integrations and connections: CRUD with the credential
//! rules, and test, discover, preview and preview-with-transform through
//! the connector registry.

use crate::connect::connector::{
    Capability, ConnectorError, ConnectorSpec, EntitySchema, ReadRequest, RecordBatch, ResolvedConfig,
};
use crate::connect::integration::{
    self, Connection, ConnectionStatus, Credentials, Integration, check_capability, merge_settings, split_config,
};
use crate::identity::user::validate_name;
use crate::identity::{Permission, Principal};
use crate::service::Sluice;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{ConnectionId, IntegrationId, OrgId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::transform::{self, Step};
use crate::{Error, FieldError, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const DEFAULT_PREVIEW_LIMIT: u64 = 20;
pub const MAX_PREVIEW_LIMIT: u64 = 1000;

/// A new integration.
#[derive(Debug, Clone, Default)]
pub struct NewIntegration {
    pub name: String,
    pub integration_type: String,
    pub credentials: BTreeMap<String, Value>,
}

/// Changes to an integration.
#[derive(Debug, Clone, Default)]
pub struct IntegrationUpdate {
    pub name: Option<String>,
    pub credentials: Option<BTreeMap<String, Value>>,
}

/// A connection to create or test.
#[derive(Debug, Clone)]
pub struct NewConnection {
    pub name: String,
    pub integration_id: Option<IntegrationId>,
    pub connector_type: String,
    pub capability: Capability,
    pub config: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default)]
pub struct ConnectionUpdate {
    pub name: Option<String>,
    pub integration_id: Option<Option<IntegrationId>>,
    pub capability: Option<Capability>,
    pub config: Option<BTreeMap<String, Value>>,
}

/// The outcome of a connection test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOutcome {
    pub ok: bool,
    pub latency_ms: u64,
    pub error: Option<String>,
    pub error_code: Option<&'static str>,
}

/// Records of a preview.
#[derive(Debug, Clone)]
pub struct Preview {
    pub entity: String,
    pub batch: RecordBatch,
}

pub(crate) fn integration_json(i: &Integration) -> Value {
    json!({"name": i.name, "type": i.integration_type, "credentials": i.credentials.masked()})
}

pub(crate) fn connection_json(c: &Connection) -> Value {
    json!({
        "name": c.name,
        "type": c.connector_type,
        "capability": c.capability.as_str(),
        "integration_id": c.integration_id,
        "config": c.public_config(),
    })
}

fn connector_failure(e: ConnectorError) -> Error {
    Error::Unprocessable { code: e.code(), message: e.to_string() }
}

impl Sluice {
    fn spec(&self, connector_type: &str, field: &str) -> Result<ConnectorSpec> {
        self.ports.connectors.spec(connector_type).ok_or_else(|| {
            let known: Vec<&str> = self.ports.connectors.specs().iter().map(|s| s.connector_type).collect();
            Error::invalid(field, format!("unknown type '{connector_type}'; known types: {}", known.join(", ")))
        })
    }

    pub fn connector_specs(&self) -> Vec<ConnectorSpec> {
        self.ports.connectors.specs()
    }

    // ---- integrations ---------------------------------------------------

    pub async fn list_integrations(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        self.access(p, org, Permission::Read).await?;
        self.ports.integrations.list(org, page).await
    }

    pub async fn get_integration(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<Integration> {
        self.access(p, org, Permission::Read).await?;
        self.ports.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))
    }

    /// The integration with its credentials decrypted (Admin).
    pub async fn integration_details(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<Integration> {
        self.access(p, org, Permission::Administer).await?;
        self.ports.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))
    }

    pub async fn create_integration(&self, p: &Principal, org: OrgId, new: NewIntegration) -> Result<Integration> {
        self.access(p, org, Permission::Write).await?;
        let mut errors = Vec::new();
        let name = validate_name("name", &new.name).map_err(|e| errors.push(e)).ok();
        let oauth_provider = self.ports.oauth.as_ref().is_some_and(|o| o.providers().contains(&new.integration_type));
        if !oauth_provider && let Err(e) = self.spec(&new.integration_type, "type") {
            errors.push(e);
        }
        let mut credentials = Credentials::default();
        if let Err(f) = credentials.merge("credentials", &new.credentials) {
            errors.push(Error::Validation(f));
        }
        let Some(name) = name.filter(|_| errors.is_empty()) else {
            return Err(crate::service::merge_validation(errors));
        };
        let now = self.now();
        let i = Integration {
            id: IntegrationId::new(),
            org_id: org,
            name,
            integration_type: new.integration_type,
            credentials,
            created_at: now,
            updated_at: now,
        };
        let audit = AuditEntry::new(Some(org), p.actor(), "integration.created", "integration", i.id, now)
            .with_change(Value::Null, integration_json(&i));
        self.ports.integrations.create(&i, &audit).await.map_err(|e| named_conflict(e, "integration", &i.name))?;
        Ok(i)
    }

    pub async fn update_integration(
        &self,
        p: &Principal,
        org: OrgId,
        id: IntegrationId,
        update: IntegrationUpdate,
    ) -> Result<Integration> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))?;
        let mut after = before.clone();
        let mut errors = Vec::new();
        if let Some(n) = update.name {
            match validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(e) => errors.push(e),
            }
        }
        if let Some(c) = update.credentials
            && let Err(f) = after.credentials.merge("credentials", &c)
        {
            errors.push(Error::Validation(f));
        }
        if !errors.is_empty() {
            return Err(crate::service::merge_validation(errors));
        }
        if after == before {
            return Ok(after);
        }
        after.updated_at = self.now();
        let mut details = json!({"before": integration_json(&before), "after": integration_json(&after)});
        details["credentials_changed"] = json!(before.credentials != after.credentials);
        let audit = AuditEntry::new(Some(org), p.actor(), "integration.updated", "integration", id, after.updated_at)
            .with_details(details);
        self.ports
            .integrations
            .update(&after, &audit)
            .await
            .map_err(|e| named_conflict(e, "integration", &after.name))?;
        Ok(after)
    }

    pub async fn delete_integration(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<()> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))?;
        let audit = AuditEntry::new(Some(org), p.actor(), "integration.deleted", "integration", id, self.now())
            .with_change(integration_json(&before), Value::Null);
        self.ports.integrations.delete(org, id, &audit).await
    }

    // ---- connections ----------------------------------------------------

    pub async fn list_connections(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        self.access(p, org, Permission::Read).await?;
        self.ports.connections.list(org, page).await
    }

    pub async fn get_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<Connection> {
        self.access(p, org, Permission::Read).await?;
        self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))
    }

    /// Validates a new connection and builds it (not saved).
    async fn build_connection(&self, org: OrgId, new: NewConnection) -> Result<Connection> {
        let mut errors: Vec<FieldError> = Vec::new();
        if let Err(Error::Validation(f)) = validate_name("name", &new.name) {
            errors.extend(f);
        }
        let spec = match self.spec(&new.connector_type, "type") {
            Ok(s) => Some(s),
            Err(Error::Validation(f)) => {
                errors.extend(f);
                None
            }
            Err(e) => return Err(e),
        };
        if let Some(iid) = new.integration_id {
            match self.ports.integrations.get(org, iid).await? {
                None => errors.push(FieldError::new("integration_id", "no such integration in this organization")),
                Some(i) if i.integration_type != new.connector_type => errors.push(FieldError::new(
                    "integration_id",
                    format!("the integration is for '{}', not '{}'", i.integration_type, new.connector_type),
                )),
                Some(_) => {}
            }
        }
        let mut parts = None;
        if let Some(spec) = &spec {
            if let Err(e) = check_capability(spec, new.capability) {
                errors.push(e);
            }
            match split_config(spec, &new.config, &BTreeMap::new(), &Credentials::default()) {
                Ok((config, secrets)) => {
                    errors.extend(
                        self.ports
                            .connectors
                            .check_config(&integration::unresolved(org, spec, &config, &secrets))
                            .await,
                    );
                    parts = Some((config, secrets));
                }
                Err(f) => errors.extend(f),
            }
        }
        let Some((config, secrets)) = parts.filter(|_| errors.is_empty()) else {
            return Err(Error::Validation(errors));
        };
        let now = self.now();
        Ok(Connection {
            id: ConnectionId::new(),
            org_id: org,
            name: new.name.trim().to_string(),
            integration_id: new.integration_id,
            connector_type: new.connector_type,
            capability: new.capability,
            config,
            secrets,
            status: ConnectionStatus::Untested,
            last_tested_at: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        })
    }

    pub async fn create_connection(&self, p: &Principal, org: OrgId, new: NewConnection) -> Result<Connection> {
        self.access(p, org, Permission::Write).await?;
        let c = self.build_connection(org, new).await?;
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.created", "connection", c.id, c.created_at)
            .with_change(Value::Null, connection_json(&c));
        self.ports.connections.create(&c, &audit).await.map_err(|e| named_conflict(e, "connection", &c.name))?;
        Ok(c)
    }

    pub async fn update_connection(
        &self,
        p: &Principal,
        org: OrgId,
        id: ConnectionId,
        update: ConnectionUpdate,
    ) -> Result<Connection> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let spec = self.spec(&before.connector_type, "type")?;
        let mut after = before.clone();
        let mut errors: Vec<FieldError> = Vec::new();
        if let Some(n) = update.name {
            match validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(Error::Validation(f)) => errors.extend(f),
                Err(e) => return Err(e),
            }
        }
        if let Some(cap) = update.capability {
            match check_capability(&spec, cap) {
                Ok(()) => after.capability = cap,
                Err(e) => errors.push(e),
            }
        }
        if let Some(iid) = update.integration_id {
            if let Some(iid) = iid {
                match self.ports.integrations.get(org, iid).await? {
                    Some(i) if i.integration_type == after.connector_type => {}
                    Some(i) => errors.push(FieldError::new(
                        "integration_id",
                        format!("the integration is for '{}', not '{}'", i.integration_type, after.connector_type),
                    )),
                    None => errors.push(FieldError::new("integration_id", "no such integration in this organization")),
                }
            }
            after.integration_id = iid;
        }
        if let Some(cfg) = update.config {
            match split_config(&spec, &cfg, &before.config, &before.secrets) {
                Ok((config, secrets)) => {
                    errors.extend(
                        self.ports
                            .connectors
                            .check_config(&integration::unresolved(org, &spec, &config, &secrets))
                            .await,
                    );
                    after.config = config;
                    after.secrets = secrets;
                }
                Err(f) => errors.extend(f),
            }
        }
        if !errors.is_empty() {
            return Err(Error::Validation(errors));
        }
        if after == before {
            return Ok(after);
        }
        // A changed setting invalidates the last test.
        if after.config != before.config
            || after.secrets != before.secrets
            || after.integration_id != before.integration_id
        {
            after.status = ConnectionStatus::Untested;
            after.last_error = None;
        }
        after.updated_at = self.now();
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.updated", "connection", id, after.updated_at)
            .with_change(connection_json(&before), connection_json(&after));
        self.ports
            .connections
            .update(&after, &audit)
            .await
            .map_err(|e| named_conflict(e, "connection", &after.name))?;
        Ok(after)
    }

    pub async fn delete_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<()> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.deleted", "connection", id, self.now())
            .with_change(connection_json(&before), Value::Null);
        self.ports.connections.delete(org, id, &audit).await
    }

    /// The settings a connector runs with, secrets resolved.
    pub async fn resolve_connection(&self, c: &Connection) -> std::result::Result<ResolvedConfig, ConnectorError> {
        let spec = self
            .ports
            .connectors
            .spec(&c.connector_type)
            .ok_or_else(|| ConnectorError::InvalidConfig(format!("unknown connector type {}", c.connector_type)))?;
        let integration = match c.integration_id {
            Some(iid) => {
                self.ports.integrations.get(c.org_id, iid).await.map_err(|e| ConnectorError::Other(e.to_string()))?
            }
            None => None,
        };
        let (values, keys) = merge_settings(&spec, integration.as_ref().map(|i| &i.credentials), &c.config, &c.secrets);
        integration::resolve(c.org_id, &c.connector_type, values, keys, self.ports.secrets.as_ref()).await
    }

    async fn run_test(&self, c: &Connection) -> TestOutcome {
        let started = std::time::Instant::now();
        let result = async {
            let cfg = self.resolve_connection(c).await?;
            if c.capability.reads() {
                self.ports.connectors.source(&cfg).await?.check().await?;
            }
            if c.capability.writes() {
                self.ports.connectors.destination(&cfg).await?.check().await?;
            }
            Ok::<(), ConnectorError>(())
        }
        .await;
        let latency_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(()) => TestOutcome { ok: true, latency_ms, error: None, error_code: None },
            Err(e) => TestOutcome { ok: false, latency_ms, error: Some(e.to_string()), error_code: Some(e.code()) },
        }
    }

    /// Tests a connection that is not saved.
    pub async fn test_unsaved_connection(&self, p: &Principal, org: OrgId, new: NewConnection) -> Result<TestOutcome> {
        self.access(p, org, Permission::Write).await?;
        let c = self.build_connection(org, new).await?;
        Ok(self.run_test(&c).await)
    }

    /// Tests a saved connection and records the outcome on it.
    pub async fn test_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<TestOutcome> {
        self.access(p, org, Permission::Write).await?;
        let c = self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let outcome = self.run_test(&c).await;
        let status = if outcome.ok { ConnectionStatus::Healthy } else { ConnectionStatus::Failing };
        self.ports.connections.record_test(org, id, status, self.now(), outcome.error.clone()).await?;
        Ok(outcome)
    }

    async fn source_of(&self, c: &Connection) -> Result<std::sync::Arc<dyn crate::connect::connector::Source>> {
        if !c.capability.reads() {
            return Err(Error::Unprocessable {
                code: crate::shared::error::code::NOT_A_SOURCE,
                message: format!("connection '{}' is a {}; it cannot be read", c.name, c.capability.as_str()),
            });
        }
        let cfg = self.resolve_connection(c).await.map_err(connector_failure)?;
        self.ports.connectors.source(&cfg).await.map_err(connector_failure)
    }

    /// Discovers the entities of a source and catalogues each as a
    /// `discovered` data asset named `<connection>.<entity>`.
    pub async fn discover(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<Vec<EntitySchema>> {
        self.access(p, org, Permission::Write).await?;
        let c = self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let entities = self.source_of(&c).await?.discover().await.map_err(connector_failure)?;
        let now = self.now();
        for e in &entities {
            self.ports.catalog.upsert_discovered(org, &format!("{}.{}", c.name, e.name), c.id, e, now).await?;
        }
        self.forget_assets(org);
        Ok(entities)
    }

    /// The first records of an entity, optionally transformed.
    pub async fn preview(
        &self,
        p: &Principal,
        org: OrgId,
        id: ConnectionId,
        entity: &str,
        limit: Option<i64>,
        steps: Option<&[Step]>,
    ) -> Result<Preview> {
        self.access(p, org, Permission::Read).await?;
        let limit = match limit {
            None => DEFAULT_PREVIEW_LIMIT,
            Some(l) if (1..=MAX_PREVIEW_LIMIT as i64).contains(&l) => l as u64,
            Some(_) => return Err(Error::invalid("limit", format!("must be between 1 and {MAX_PREVIEW_LIMIT}"))),
        };
        if entity.trim().is_empty() {
            return Err(Error::invalid("entity", "is required"));
        }
        let c = self.ports.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let source = self.source_of(&c).await?;
        let mut reader = source
            .read(ReadRequest {
                entity: entity.to_string(),
                cursor: None,
                limit: Some(limit),
                batch_size: limit as usize,
            })
            .await
            .map_err(connector_failure)?;
        let fields = reader.fields();
        if let Some(steps) = steps {
            transform::plan("transform", steps, &fields).map_err(Error::Validation)?;
        }
        let mut batch = RecordBatch { fields, rows: Vec::new() };
        while let Some(b) = reader.next_batch().await.map_err(connector_failure)? {
            batch.rows.extend(b.rows);
            if batch.rows.len() as u64 >= limit {
                break;
            }
        }
        batch.rows.truncate(limit as usize);
        if let Some(steps) = steps {
            batch = transform::apply(steps, batch);
        }
        Ok(Preview { entity: entity.to_string(), batch })
    }
}

/// A unique violation on a named resource, said with its name.
pub(crate) fn named_conflict(e: Error, kind: &str, name: &str) -> Error {
    match e {
        Error::Conflict { code: crate::shared::error::code::CONFLICT, .. } => {
            Error::conflict(format!("a {kind} named '{name}' already exists"))
        }
        other => other,
    }
}
