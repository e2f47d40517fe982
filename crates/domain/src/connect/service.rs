//! Connect owns how Sluice reaches data: the connector registry and its
//! specs, integrations with their credentials (and OAuth), connections,
//! and the use cases that test, discover and preview them.
//!
//! Long file: every use case of connections and integrations is a method
//! of the one `ConnectService` that holds their ports; the secrets rules
//! they share are in `connection.rs` and `secret_policy.rs`, OAuth's in
//! `oauth.rs`.

use super::oauth::{OAuthState, STATE_TTL, challenge, sign_state, verify_state};
use super::ports::{
    ConnectionRepository, DiscoveredSchemas, IntegrationRepository, OAuthClient, OAuthStateStore, SecretResolver,
};
use super::registry::ConnectorRegistry;
use crate::connect::connection::{
    Connection, ConnectionStatus, check_capability, integration_secrets_to_resupply, merge_settings, place,
    secrets_to_resupply, split_config, supplied_secrets, supplied_values,
};
use crate::connect::connector::{
    Capability, ConnectorError, ConnectorSpec, EntitySchema, ReadRequest, RecordBatch, ResolvedConfig, Source,
};
use crate::connect::integration::{Credentials, Integration, SecretValue};
use crate::identity::service::IdentityService;
use crate::identity::user::validate_name;
use crate::identity::{Permission, Principal};
use crate::shared::audit::AuditEntry;
use crate::shared::cache::Changes;
use crate::shared::clock::Clock;
use crate::shared::ids::{ConnectionId, IntegrationId, OrgId};
use crate::shared::page::{Page, PageRequest};
use crate::shared::secret::random_base62;
use crate::{Error, FieldError, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    pub error_code: Option<crate::shared::error::Code>,
    /// For a reachable source whose type captures changes: whether this
    /// connection can (see [`CdcReadiness`]).
    pub cdc: Option<CdcReadiness>,
}

/// Whether a source connection can capture changes, and if not, why: one
/// line per missing setting or grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdcReadiness {
    pub ready: bool,
    pub reasons: Vec<String>,
}

/// What a preview reads: the first `limit` records (default
/// [`DEFAULT_PREVIEW_LIMIT`]) of `entity` of a saved connection.
#[derive(Debug, Clone)]
pub struct PreviewRequest {
    pub connection: ConnectionId,
    pub entity: String,
    pub limit: Option<i64>,
}

/// Records of a preview.
#[derive(Debug, Clone)]
pub struct Preview {
    pub entity: String,
    pub batch: RecordBatch,
}

/// The use cases of connect.
#[derive(Clone)]
pub struct ConnectService {
    pub(crate) identity: IdentityService,
    pub(crate) monitoring: crate::monitoring::service::MonitoringService,
    pub(crate) integrations: Arc<dyn IntegrationRepository>,
    pub(crate) connections: Arc<dyn ConnectionRepository>,
    pub(crate) connectors: Arc<dyn ConnectorRegistry>,
    pub(crate) secrets: Arc<dyn SecretResolver>,
    /// The secret references each organization may resolve.
    pub(crate) secret_policy: Arc<crate::connect::secret_policy::SecretPolicy>,
    pub(crate) schemas: Arc<dyn DiscoveredSchemas>,
    /// OAuth providers; `None` when none is configured.
    pub(crate) oauth: Option<Arc<dyn OAuthClient>>,
    pub(crate) oauth_states: Option<Arc<dyn OAuthStateStore>>,
    /// Signs OAuth `state` parameters.
    pub(crate) oauth_state_key: Vec<u8>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Tells the catalog's cache that discovery catalogued new schemas.
    pub(crate) changes: Arc<Changes>,
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

fn bad_state(message: &str) -> Error {
    Error::Unprocessable { code: crate::shared::error::Code::InvalidOauthState, message: message.into() }
}

/// A connection opened as a connector, with the connection it names.
pub struct Opened<T: ?Sized> {
    pub connection: Connection,
    pub io: Arc<T>,
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// No such connection in the organization (deleted meanwhile, say).
    Missing,
    /// The metadata store failed.
    Store(Error),
    /// Its settings did not resolve: an integration, a secret reference.
    Resolve { connection: String, error: ConnectorError },
    /// Its connector would not open.
    Open(ConnectorError),
}

fn connector_failure(e: ConnectorError) -> Error {
    Error::Unprocessable { code: e.code(), message: e.to_string() }
}

impl ConnectService {
    /// The connector registry, for the contexts that run connectors.
    pub(crate) fn registry(&self) -> &dyn ConnectorRegistry {
        self.connectors.as_ref()
    }

    /// The names of the configured OAuth providers.
    pub fn oauth_providers(&self) -> Vec<String> {
        self.oauth.as_ref().map(|o| o.providers()).unwrap_or_default()
    }

    /// A connection of `org`, without an access check (for the contexts
    /// above, which made theirs).
    pub(crate) async fn connection(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>> {
        self.connections.get(org, id).await
    }

    /// Catalogues the schema a run saw of an entity of `source` as its
    /// discovered asset `name`.
    pub(crate) async fn record_schema(&self, source: &Connection, name: &str, schema: &EntitySchema) -> Result<()> {
        self.schemas.upsert_discovered(source.org_id, name, source.id, schema, self.clock.now()).await?;
        self.changes.touch(source.org_id);
        Ok(())
    }

    fn spec(&self, connector_type: &str, field: &str) -> Result<ConnectorSpec> {
        self.connectors.spec(connector_type).ok_or_else(|| {
            let known: Vec<&str> = self.connectors.specs().iter().map(|s| s.connector_type).collect();
            Error::invalid(field, format!("unknown type '{connector_type}'; known types: {}", known.join(", ")))
        })
    }

    /// What a connection of `connector_type` does when a request does not
    /// say: both when the type reads and writes, else its one capability.
    pub fn default_capability(&self, connector_type: &str) -> Capability {
        match self.connectors.spec(connector_type) {
            Some(spec) if spec.capabilities.len() == 1 => spec.capabilities[0],
            _ => Capability::Both,
        }
    }

    pub fn connector_specs(&self) -> Vec<ConnectorSpec> {
        self.connectors.specs()
    }

    /// The spec of one connector type, if it is known.
    pub fn connector_spec(&self, connector_type: &str) -> Option<ConnectorSpec> {
        self.connectors.spec(connector_type)
    }

    // ---- integrations ---------------------------------------------------

    pub async fn list_integrations(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.integrations.list(org, page).await
    }

    pub async fn get_integration(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<Integration> {
        self.identity.access(p, org, Permission::Read).await?;
        self.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))
    }

    /// The integration with its credentials decrypted (Admin).
    pub async fn integration_details(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<Integration> {
        self.identity.access(p, org, Permission::Administer).await?;
        self.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))
    }

    pub async fn create_integration(&self, p: &Principal, org: OrgId, new: NewIntegration) -> Result<Integration> {
        self.identity.access(p, org, Permission::Write).await?;
        let mut errors = Vec::new();
        let name = validate_name("name", &new.name).map_err(|e| errors.push(e)).ok();
        let oauth_provider = self.oauth.as_ref().is_some_and(|o| o.providers().contains(&new.integration_type));
        if !oauth_provider && let Err(e) = self.spec(&new.integration_type, "type") {
            errors.push(e);
        }
        let mut credentials = Credentials::default();
        match credentials.merge("credentials", &new.credentials) {
            Err(f) => errors.push(Error::Validation(f)),
            Ok(()) => {
                let refused = self.secret_policy.refused_in(org, "credentials", &credentials, &Credentials::default());
                if !refused.is_empty() {
                    errors.push(Error::Validation(refused));
                }
            }
        }
        let Some(name) = name.filter(|_| errors.is_empty()) else {
            return Err(crate::shared::error::merge_validation(errors));
        };
        let now = self.clock.now();
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
        self.integrations.create(&i, &audit).await.map_err(|e| named_conflict(e, "integration", &i.name))?;
        Ok(i)
    }

    pub async fn update_integration(
        &self,
        p: &Principal,
        org: OrgId,
        id: IntegrationId,
        update: IntegrationUpdate,
    ) -> Result<Integration> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))?;
        let mut after = before.clone();
        let mut errors = Vec::new();
        if let Some(n) = update.name {
            match validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(e) => errors.push(e),
            }
        }
        if let Some(c) = update.credentials {
            match after.credentials.merge("credentials", &c) {
                Err(f) => errors.push(Error::Validation(f)),
                Ok(()) => {
                    let mut refused =
                        self.secret_policy.refused_in(org, "credentials", &after.credentials, &before.credentials);
                    if refused.is_empty() {
                        let supplied = supplied_values(&c);
                        refused =
                            self.integration_secrets_to_resupply(p, &before, &after, &supplied, "credentials").await;
                    }
                    if !refused.is_empty() {
                        errors.push(Error::Validation(refused));
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(crate::shared::error::merge_validation(errors));
        }
        if after == before {
            return Ok(after);
        }
        after.updated_at = self.clock.now();
        let mut details = json!({"before": integration_json(&before), "after": integration_json(&after)});
        details["credentials_changed"] = json!(before.credentials != after.credentials);
        let audit = AuditEntry::new(Some(org), p.actor(), "integration.updated", "integration", id, after.updated_at)
            .with_details(details);
        self.integrations.update(&after, &audit).await.map_err(|e| named_conflict(e, "integration", &after.name))?;
        Ok(after)
    }

    pub async fn delete_integration(&self, p: &Principal, org: OrgId, id: IntegrationId) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.integrations.get(org, id).await?.ok_or(Error::not_found("integration"))?;
        let audit = AuditEntry::new(Some(org), p.actor(), "integration.deleted", "integration", id, self.clock.now())
            .with_change(integration_json(&before), Value::Null);
        self.integrations.delete(org, id, &audit).await
    }

    // ---- connections ----------------------------------------------------

    pub async fn list_connections(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.connections.list(org, page).await
    }

    pub async fn get_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<Connection> {
        self.identity.access(p, org, Permission::Read).await?;
        self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))
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
            match self.integrations.get(org, iid).await? {
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
                    errors.extend(self.check_settings(org, spec, &config, &secrets, &Credentials::default()).await);
                    parts = Some((config, secrets));
                }
                Err(f) => errors.extend(f),
            }
        }
        let Some((config, secrets)) = parts.filter(|_| errors.is_empty()) else {
            return Err(Error::Validation(errors));
        };
        let now = self.clock.now();
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
        self.identity.access(p, org, Permission::Write).await?;
        let c = self.build_connection(org, new).await?;
        self.keep_secrets_home(p, None, &c, &[]).await?;
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.created", "connection", c.id, c.created_at)
            .with_change(Value::Null, connection_json(&c));
        self.connections.create(&c, &audit).await.map_err(|e| named_conflict(e, "connection", &c.name))?;
        Ok(c)
    }

    pub async fn update_connection(
        &self,
        p: &Principal,
        org: OrgId,
        id: ConnectionId,
        update: ConnectionUpdate,
    ) -> Result<Connection> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let spec = self.spec(&before.connector_type, "type")?;
        let mut after = before.clone();
        let mut errors: Vec<FieldError> = Vec::new();
        let supplied: Vec<String> = update
            .config
            .as_ref()
            .map(|c| supplied_secrets(&spec, c).into_iter().map(str::to_string).collect())
            .unwrap_or_default();
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
                match self.integrations.get(org, iid).await? {
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
                    errors.extend(self.check_settings(org, &spec, &config, &secrets, &before.secrets).await);
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
        let supplied: Vec<&str> = supplied.iter().map(String::as_str).collect();
        self.keep_secrets_home(p, Some(&before), &after, &supplied).await?;
        // A changed setting invalidates the last test.
        if after.config != before.config
            || after.secrets != before.secrets
            || after.integration_id != before.integration_id
        {
            after.status = ConnectionStatus::Untested;
            after.last_error = None;
        }
        after.updated_at = self.clock.now();
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.updated", "connection", id, after.updated_at)
            .with_change(connection_json(&before), connection_json(&after));
        self.connections.update(&after, &audit).await.map_err(|e| named_conflict(e, "connection", &after.name))?;
        Ok(after)
    }

    pub async fn delete_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let audit = AuditEntry::new(Some(org), p.actor(), "connection.deleted", "connection", id, self.clock.now())
            .with_change(connection_json(&before), Value::Null);
        self.connections.delete(org, id, &audit).await
    }

    /// The problems of a connection's settings as written: the secret
    /// references it sets that `org` may not resolve, else what the
    /// registry checks without any secret (a file path inside the
    /// organization's directory; a database that is not the metadata
    /// store), since the host is not yet known to be one the secrets may
    /// go to. A refused reference is not worth reaching the host for.
    async fn check_settings(
        &self,
        org: OrgId,
        spec: &ConnectorSpec,
        config: &BTreeMap<String, Value>,
        secrets: &Credentials,
        before: &Credentials,
    ) -> Vec<FieldError> {
        let refused = self.secret_policy.refused_in(org, "config", secrets, before);
        if !refused.is_empty() {
            return refused;
        }
        let unresolved = crate::connect::connection::unresolved(org, spec, config, &Credentials::default());
        self.connectors.check_config(&unresolved).await
    }

    /// Refuses (422 on `config.<key>`) to send a stored secret to a place
    /// it was not entered for (see [`secrets_to_resupply`]), unless the
    /// caller may read it (an Admin).
    async fn keep_secrets_home(
        &self,
        p: &Principal,
        before: Option<&Connection>,
        after: &Connection,
        supplied: &[&str],
    ) -> Result<()> {
        let errors = self.secrets_to_resupply(p, before, after, supplied, &[]).await?;
        if errors.is_empty() { Ok(()) } else { Err(Error::Validation(errors)) }
    }

    /// The stored secrets a write of `after` (over `before`) would send to
    /// a place they were not entered for, which the caller must supply
    /// again: none for an Admin (see [`secrets_to_resupply`]). Keys in
    /// `integration_supplied` are the integration's credentials the same
    /// request sets (an IaC document).
    pub(crate) async fn secrets_to_resupply(
        &self,
        p: &Principal,
        before: Option<&Connection>,
        after: &Connection,
        supplied: &[&str],
        integration_supplied: &[&str],
    ) -> Result<Vec<FieldError>> {
        if self.identity.access(p, after.org_id, Permission::Administer).await.is_ok() {
            return Ok(Vec::new());
        }
        let Some(spec) = self.connectors.spec(&after.connector_type) else { return Ok(Vec::new()) };
        let integration = match after.integration_id {
            Some(iid) => self.integrations.get(after.org_id, iid).await?,
            None => None,
        };
        let home = match &integration {
            Some(i) => self.integration_used_at(after, i.id).await?,
            None => false,
        };
        // The integration's secrets this request does not set itself.
        let stored = integration.map(|i| {
            Credentials(
                i.credentials.0.into_iter().filter(|(k, _)| !integration_supplied.contains(&k.as_str())).collect(),
            )
        });
        Ok(secrets_to_resupply(&spec, before, after, stored.as_ref(), home, supplied))
    }

    /// The stored secrets an update of integration `before` to `after`
    /// would send to a place they were not entered for, which the caller
    /// must supply again: none for an Admin (see
    /// [`integration_secrets_to_resupply`]).
    pub(crate) async fn integration_secrets_to_resupply(
        &self,
        p: &Principal,
        before: &Integration,
        after: &Integration,
        supplied: &[&str],
        field: &str,
    ) -> Vec<FieldError> {
        if self.identity.access(p, after.org_id, Permission::Administer).await.is_ok() {
            return Vec::new();
        }
        let Some(spec) = self.connectors.spec(&after.integration_type) else { return Vec::new() };
        integration_secrets_to_resupply(&spec, field, &before.credentials, &after.credentials, supplied)
    }

    /// Whether another saved connection already sends integration
    /// `integration`'s secrets to the place of `c`.
    async fn integration_used_at(&self, c: &Connection, integration: IntegrationId) -> Result<bool> {
        let mut page = PageRequest { limit: crate::shared::page::MAX_LIMIT, after: None };
        loop {
            let found = self.connections.list(c.org_id, page).await?;
            if found
                .items
                .iter()
                .any(|o| o.id != c.id && o.integration_id == Some(integration) && place(&o.config) == place(&c.config))
            {
                return Ok(true);
            }
            match found.items.last().filter(|_| found.next_cursor.is_some()) {
                Some(last) => page.after = Some(last.id.as_uuid()),
                None => return Ok(false),
            }
        }
    }

    /// The settings a connector runs with, secrets resolved.
    pub async fn resolve_connection(&self, c: &Connection) -> std::result::Result<ResolvedConfig, ConnectorError> {
        let spec = self
            .connectors
            .spec(&c.connector_type)
            .ok_or_else(|| ConnectorError::InvalidConfig(format!("unknown connector type {}", c.connector_type)))?;
        let integration = match c.integration_id {
            Some(iid) => {
                self.integrations.get(c.org_id, iid).await.map_err(|e| ConnectorError::Other(e.to_string()))?
            }
            None => None,
        };
        let (values, keys) = merge_settings(&spec, integration.as_ref().map(|i| &i.credentials), &c.config, &c.secrets);
        self.resolve(c.org_id, &c.connector_type, values, keys).await
    }

    async fn run_test(&self, c: &Connection) -> TestOutcome {
        let started = std::time::Instant::now();
        let captures = self.connectors.spec(&c.connector_type).is_some_and(|s| s.features.contains(&"cdc"));
        let result = async {
            let cfg = self.resolve_connection(c).await?;
            if c.capability.reads() {
                self.connectors.source(&cfg).await?.check().await?;
            }
            if c.capability.writes() {
                self.connectors.destination(&cfg).await?.check().await?;
            }
            Ok::<_, ConnectorError>(cfg)
        }
        .await;
        let latency_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(cfg) => {
                let cdc = match captures && c.capability.reads() {
                    true => Some(self.cdc_readiness(&cfg).await),
                    false => None,
                };
                TestOutcome { ok: true, latency_ms, error: None, error_code: None, cdc }
            }
            Err(e) => {
                TestOutcome { ok: false, latency_ms, error: Some(e.to_string()), error_code: Some(e.code()), cdc: None }
            }
        }
    }

    /// Whether the source of `cfg` can capture changes: its server, its
    /// role and each of its tables (a flow naming a table checks it again).
    async fn cdc_readiness(&self, cfg: &ResolvedConfig) -> CdcReadiness {
        let reasons = match self.connectors.change_source(cfg).await {
            Ok(changes) => changes.readiness(&[]).await.unwrap_or_else(|e| vec![e.to_string()]),
            Err(e) => vec![e.to_string()],
        };
        CdcReadiness { ready: reasons.is_empty(), reasons }
    }

    /// Tests a connection that is not saved.
    pub async fn test_unsaved_connection(&self, p: &Principal, org: OrgId, new: NewConnection) -> Result<TestOutcome> {
        self.identity.access(p, org, Permission::Write).await?;
        let c = self.build_connection(org, new).await?;
        self.keep_secrets_home(p, None, &c, &[]).await?;
        Ok(self.run_test(&c).await)
    }

    /// Tests a saved connection and records the outcome on it.
    pub async fn test_connection(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<TestOutcome> {
        self.identity.access(p, org, Permission::Write).await?;
        let c = self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let outcome = self.run_test(&c).await;
        let status = if outcome.ok { ConnectionStatus::Healthy } else { ConnectionStatus::Failing };
        let now = self.clock.now();
        self.connections.record_test(org, id, status, now, outcome.error.clone()).await?;
        if status == ConnectionStatus::Failing && c.status != ConnectionStatus::Failing {
            let event = crate::monitoring::activity::ActivityEvent {
                id: uuid::Uuid::now_v7(),
                org_id: org,
                event_type: crate::monitoring::activity::EventType::ConnectionFailing,
                severity: "error".into(),
                message: format!("connection '{}' failed its test: {}", c.name, outcome.error.as_deref().unwrap_or("")),
                data: json!({"connection_id": c.id, "connection_name": c.name, "error_code": outcome.error_code}),
                created_at: now,
            };
            self.monitoring.record(&event).await?;
        }
        Ok(outcome)
    }

    /// An organization's connection, its settings resolved: the one way
    /// every caller (a run, a cursor's typing, a flow's state) reaches a
    /// connector.
    async fn resolved(
        &self,
        org: OrgId,
        id: ConnectionId,
    ) -> std::result::Result<(Connection, ResolvedConfig), OpenError> {
        let c = self.connections.get(org, id).await.map_err(OpenError::Store)?.ok_or(OpenError::Missing)?;
        let cfg = self.settings_of(&c).await?;
        Ok((c, cfg))
    }

    async fn settings_of(&self, c: &Connection) -> std::result::Result<ResolvedConfig, OpenError> {
        self.resolve_connection(c).await.map_err(|error| OpenError::Resolve { connection: c.name.clone(), error })
    }

    /// A connection in hand (saved or planned) opened as a source.
    ///
    /// # Errors
    /// See [`OpenError`].
    pub async fn source_for(&self, c: &Connection) -> std::result::Result<Arc<dyn Source>, OpenError> {
        let cfg = self.settings_of(c).await?;
        self.connectors.source(&cfg).await.map_err(OpenError::Open)
    }

    /// Opens an organization's connection as a source.
    ///
    /// # Errors
    /// See [`OpenError`].
    pub async fn open_source(
        &self,
        org: OrgId,
        id: ConnectionId,
    ) -> std::result::Result<Opened<dyn Source>, OpenError> {
        let (connection, cfg) = self.resolved(org, id).await?;
        let io = self.connectors.source(&cfg).await.map_err(OpenError::Open)?;
        Ok(Opened { connection, io })
    }

    /// Opens an organization's connection as a change source (its log).
    ///
    /// # Errors
    /// See [`OpenError`].
    pub async fn open_change_source(
        &self,
        org: OrgId,
        id: ConnectionId,
    ) -> std::result::Result<Opened<dyn crate::connect::changes::ChangeSource>, OpenError> {
        let (connection, cfg) = self.resolved(org, id).await?;
        let io = self.connectors.change_source(&cfg).await.map_err(OpenError::Open)?;
        Ok(Opened { connection, io })
    }

    /// Opens an organization's connection as a destination.
    ///
    /// # Errors
    /// See [`OpenError`].
    pub async fn open_destination(
        &self,
        org: OrgId,
        id: ConnectionId,
    ) -> std::result::Result<Opened<dyn crate::connect::connector::Destination>, OpenError> {
        let (connection, cfg) = self.resolved(org, id).await?;
        let io = self.connectors.destination(&cfg).await.map_err(OpenError::Open)?;
        Ok(Opened { connection, io })
    }

    /// A connection already in hand opened as a source, refused when it
    /// only writes (discovery, preview).
    async fn source_of(&self, c: &Connection) -> Result<Arc<dyn Source>> {
        if !c.capability.reads() {
            return Err(Error::Unprocessable {
                code: crate::shared::error::Code::NotASource,
                message: format!("connection '{}' is a {}; it cannot be read", c.name, c.capability.as_str()),
            });
        }
        self.source_for(c).await.map_err(|e| match e {
            OpenError::Store(e) => e,
            OpenError::Missing => Error::not_found("connection"),
            OpenError::Resolve { error, .. } | OpenError::Open(error) => connector_failure(error),
        })
    }

    /// Discovers the entities of a source and catalogues each as a
    /// `discovered` data asset named `<connection>.<entity>`.
    pub async fn discover(&self, p: &Principal, org: OrgId, id: ConnectionId) -> Result<Vec<EntitySchema>> {
        self.identity.access(p, org, Permission::Write).await?;
        let c = self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let entities = self.source_of(&c).await?.discover().await.map_err(connector_failure)?;
        let now = self.clock.now();
        for e in &entities {
            self.schemas.upsert_discovered(org, &format!("{}.{}", c.name, e.name), c.id, e, now).await?;
        }
        self.changes.touch(org);
        Ok(entities)
    }

    /// The first records of an entity.
    pub async fn preview(&self, p: &Principal, org: OrgId, request: &PreviewRequest) -> Result<Preview> {
        let PreviewRequest { connection: id, entity, limit } = request;
        let (id, entity, limit) = (*id, entity.as_str(), *limit);
        self.identity.access(p, org, Permission::Read).await?;
        let limit = match limit {
            None => DEFAULT_PREVIEW_LIMIT,
            Some(l) if (1..=MAX_PREVIEW_LIMIT as i64).contains(&l) => l as u64,
            Some(_) => return Err(Error::invalid("limit", format!("must be between 1 and {MAX_PREVIEW_LIMIT}"))),
        };
        if entity.trim().is_empty() {
            return Err(Error::invalid("entity", "is required"));
        }
        let c = self.connections.get(org, id).await?.ok_or(Error::not_found("connection"))?;
        let source = self.source_of(&c).await?;
        let mut reader = source
            .read(ReadRequest {
                entity: entity.to_string(),
                cursor: None,
                limit: Some(limit),
                batch_size: limit as usize,
                ranges: 1,
                snapshot: None,
            })
            .await
            .map_err(connector_failure)?;
        let fields = reader.fields();
        let mut batch = RecordBatch { fields, rows: Vec::new() };
        while let Some(b) = reader.next_batch().await.map_err(connector_failure)? {
            batch.rows.extend(b.rows);
            if batch.rows.len() as u64 >= limit {
                break;
            }
        }
        batch.rows.truncate(limit as usize);
        Ok(Preview { entity: entity.to_string(), batch })
    }

    /// Resolves secret references in `values` (only under credential keys).
    async fn resolve(
        &self,
        org: crate::shared::ids::OrgId,
        connector_type: &str,
        mut values: BTreeMap<String, Value>,
        credential_keys: Vec<String>,
    ) -> std::result::Result<ResolvedConfig, crate::connect::connector::ConnectorError> {
        for k in &credential_keys {
            if let Some(Value::String(s)) = values.get(k) {
                let parsed = SecretValue::parse(s);
                if parsed.is_reference() {
                    self.secret_policy.check(org, s).map_err(|r| ConnectorError::InvalidConfig(r.0))?;
                    let resolved = self.secrets.resolve(s).await?;
                    values.insert(k.clone(), Value::String(resolved));
                }
            }
        }
        Ok(ResolvedConfig { connector_type: connector_type.to_string(), values, credential_keys, org: Some(org) })
    }

    // ---- OAuth ----------------------------------------------------------

    /// Starts a flow for `provider`, to create or update the integration
    /// `name` (Editor); answers the URL to redirect the user to.
    pub async fn start_oauth(&self, p: &Principal, org: OrgId, provider: &str, name: &str) -> Result<String> {
        self.identity.access(p, org, Permission::Write).await?;
        let (client, states, key) = self.oauth_ports()?;
        if !client.providers().iter().any(|x| x == provider) {
            return Err(Error::not_found("oauth provider"));
        }
        let name = validate_name("name", name)?;
        let state = OAuthState {
            id: random_base62(32),
            org_id: org,
            provider: provider.to_string(),
            integration_name: name,
            verifier: random_base62(64),
            actor: p.actor(),
            expires_at: self.clock.now() + STATE_TTL,
        };
        states.put(&state).await?;
        client.authorize_url(provider, &sign_state(key, &state.id), &challenge(&state.verifier))
    }

    /// Completes a flow: answers the organization and the integration that
    /// now holds the tokens.
    pub async fn finish_oauth(&self, provider: &str, state_param: &str, code: &str) -> Result<(OrgId, Integration)> {
        let (client, states, key) = self.oauth_ports()?;
        let id = verify_state(key, state_param)
            .ok_or_else(|| bad_state("the state parameter is not one this server signed"))?;
        let state =
            states.take(&id).await?.ok_or_else(|| bad_state("this authorization was already used or has expired"))?;
        let now = self.clock.now();
        if state.expires_at <= now {
            return Err(bad_state("this authorization has expired; start again"));
        }
        if state.provider != provider {
            return Err(bad_state("the state belongs to another provider"));
        }
        if code.is_empty() {
            return Err(Error::invalid("code", "is required"));
        }
        let tokens = client.exchange(provider, code, &state.verifier).await?;
        let mut creds = Credentials::default();
        creds.0.insert("access_token".into(), tokens.access_token.expose().to_string());
        if let Some(r) = &tokens.refresh_token {
            creds.0.insert("refresh_token".into(), r.expose().to_string());
        }
        if let Some(t) = &tokens.token_type {
            creds.0.insert("token_type".into(), t.clone());
        }
        if let Some(s) = &tokens.scope {
            creds.0.insert("scope".into(), s.clone());
        }
        if let Some(e) = tokens.expires_at {
            creds.0.insert("expires_at".into(), crate::connect::connector::format_timestamp(e));
        }
        let org = state.org_id;
        let masked = |i: &Integration| json!({"name": i.name, "type": i.integration_type, "credentials": i.credentials.masked()});
        match self.integrations.find_by_name(org, &state.integration_name).await? {
            Some(existing) => {
                let mut after = existing.clone();
                after.credentials.0.extend(creds.0);
                after.updated_at = now;
                let audit = AuditEntry::new(
                    Some(org),
                    state.actor.clone(),
                    "integration.oauth_connected",
                    "integration",
                    after.id,
                    now,
                )
                .with_change(masked(&existing), masked(&after));
                self.integrations.update(&after, &audit).await?;
                Ok((org, after))
            }
            None => {
                let i = Integration {
                    id: IntegrationId::new(),
                    org_id: org,
                    name: state.integration_name.clone(),
                    integration_type: provider.to_string(),
                    credentials: creds,
                    created_at: now,
                    updated_at: now,
                };
                let audit = AuditEntry::new(
                    Some(org),
                    state.actor.clone(),
                    "integration.oauth_connected",
                    "integration",
                    i.id,
                    now,
                )
                .with_change(serde_json::Value::Null, masked(&i));
                self.integrations.create(&i, &audit).await?;
                Ok((org, i))
            }
        }
    }

    fn oauth_ports(&self) -> Result<(&dyn OAuthClient, &dyn OAuthStateStore, &[u8])> {
        match (&self.oauth, &self.oauth_states) {
            (Some(c), Some(s)) => Ok((c.as_ref(), s.as_ref(), self.oauth_state_key.as_slice())),
            _ => Err(Error::not_found("oauth provider")),
        }
    }
}

/// A unique violation on a named resource, said with its name.
pub(crate) fn named_conflict(e: Error, kind: &str, name: &str) -> Error {
    match e {
        Error::Conflict { code: crate::shared::error::Code::Conflict, .. } => {
            Error::conflict(format!("a {kind} named '{name}' already exists"))
        }
        other => other,
    }
}
