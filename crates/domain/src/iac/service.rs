//! Infrastructure as code owns the YAML document of an organization's
//! integrations, connections and flows: apply (and its dry run) planned
//! as a diff and written in one transaction, export, and validate-drift.
//! The rules live in [`crate::iac`]; this module reads the organization,
//! plans, and hands the plan to the store.

use super::ports::IacRepository;
use crate::catalog::drift::{CurrentField, DriftReport, MappingFacts, ProposedField};
use crate::catalog::service::CatalogService;
use crate::connect::connection::supplied_values;
use crate::connect::integration::Credentials;
use crate::connect::service::ConnectService;
use crate::connect::service::{connection_json, integration_json};
use crate::iac::{self, Action, Catalogue, Document, IacPlan};
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::audit::AuditEntry;
use crate::shared::clock::Clock;
use crate::shared::ids::OrgId;
use crate::sync::SyncService;
use crate::sync::service::flow_json;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// How often an apply plans again when another apply changed the
/// organization between its plan and its write.
const ATTEMPTS: usize = 5;

/// The result of an apply or a dry run.
#[derive(Debug, Clone)]
pub struct ApplyOutcome {
    pub dry_run: bool,
    /// Names the audit entries of a real apply.
    pub apply_id: Option<Uuid>,
    pub plan: IacPlan,
}

/// The use cases of IaC.
#[derive(Clone)]
pub struct IacService {
    pub(crate) identity: IdentityService,
    pub(crate) connect: ConnectService,
    pub(crate) sync: SyncService,
    pub(crate) catalog: CatalogService,
    pub(crate) iac: Arc<dyn IacRepository>,
    pub(crate) clock: Arc<dyn Clock>,
}

fn audit_entries(
    org: OrgId,
    p: &Principal,
    plan: &IacPlan,
    apply_id: Uuid,
    at: time::OffsetDateTime,
) -> Vec<AuditEntry> {
    let w = &plan.writes;
    let integrations = w
        .integrations
        .iter()
        .map(|x| ("integration", x.is_create(), x.item().id.to_string(), integration_json(x.item())));
    let connections =
        w.connections.iter().map(|x| ("connection", x.is_create(), x.item().id.to_string(), connection_json(x.item())));
    let flows = w.flows.iter().map(|x| ("flow", x.is_create(), x.item().id.to_string(), flow_json(x.item())));
    let writes = integrations.chain(connections).chain(flows);
    let mut out: Vec<AuditEntry> = writes
        .map(|(kind, created, id, after)| {
            let verb = if created { "created" } else { "updated" };
            let diff = plan.changes.iter().find(|c| c.action == Action::Updated && c.id.as_deref() == Some(&id));
            let mut e = AuditEntry::new(Some(org), p.actor(), &format!("{kind}.{verb}"), kind, &id, at)
                .with_change(Value::Null, after);
            e.details["apply_id"] = json!(apply_id);
            if let Some(c) = diff {
                e.details["diff"] = json!(c.diff);
            }
            e
        })
        .collect();
    out.push(AuditEntry::new(Some(org), p.actor(), "iac.applied", "organization", org, at).with_details(json!({
        "apply_id": apply_id,
        "created": plan.count(Action::Created),
        "updated": plan.count(Action::Updated),
        "unchanged": plan.count(Action::Unchanged),
    })));
    out
}

impl IacService {
    fn iac_catalogue(&self) -> Catalogue {
        Catalogue { specs: self.connect.registry().specs(), oauth_types: self.connect.oauth_providers() }
    }

    /// Applies an IaC document (YAML text): validates it, plans it against
    /// the organization and writes the plan in one transaction; with
    /// `dry_run`, answers the plan and writes nothing.
    ///
    /// # Errors
    /// `BadRequest { code: crate::shared::error::Code::MalformedYaml }` for text that is not YAML;
    /// `Validation` listing every problem with its YAML path;
    /// `Conflict { code: crate::shared::error::Code::ConcurrentApply }` when other applies kept
    /// changing the organization.
    pub async fn apply_iac(&self, p: &Principal, org: OrgId, text: &str, dry_run: bool) -> Result<ApplyOutcome> {
        self.identity.access(p, org, Permission::Write).await?;
        let doc = iac::parse(text)?;
        let registry = self.iac_catalogue();
        for _ in 0..ATTEMPTS {
            let current = self.iac.snapshot(org).await?;
            let now = self.clock.now();
            let mut plan = iac::plan(&doc, &current, &registry, org, now)?;
            self.check_connection_settings(p, org, &doc, &current, &plan).await?;
            self.check_flows_against_sources(&doc, &current, &plan).await?;
            if dry_run {
                for c in plan.changes.iter_mut().filter(|c| c.action == Action::Created) {
                    c.id = None;
                }
                return Ok(ApplyOutcome { dry_run, apply_id: None, plan });
            }
            if plan.writes.is_empty() {
                return Ok(ApplyOutcome { dry_run, apply_id: None, plan });
            }
            let apply_id = Uuid::now_v7();
            let audit = audit_entries(org, p, &plan, apply_id, now);
            match self.iac.apply(org, &plan.writes, &audit).await {
                Ok(()) => return Ok(ApplyOutcome { dry_run, apply_id: Some(apply_id), plan }),
                // Planned against rows another writer changed meanwhile
                // (the store refuses every write of such a plan): plan again.
                Err(e) if e.kind() == crate::ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict {
            // Lost to other applies ATTEMPTS times; sending it again may succeed.
            code: crate::shared::error::Code::ConcurrentApply,
            message: "other applies kept changing this organization; try again".into(),
        })
    }

    /// The registry's checks of each connection the plan writes (file
    /// paths inside the organization's directory) and the secret
    /// references the plan sets that the organization may not resolve, by
    /// YAML path.
    async fn check_connection_settings(
        &self,
        p: &Principal,
        org: OrgId,
        doc: &Document,
        current: &crate::iac::plan::Snapshot,
        plan: &IacPlan,
    ) -> Result<()> {
        let mut errors = Vec::new();
        let none = Credentials::default();
        for w in &plan.writes.integrations {
            let i = w.item();
            let Some(at) = doc.integrations.iter().position(|d| d.name.trim() == i.name) else { continue };
            let before = current.integrations.iter().find(|e| e.id == i.id).map_or(&none, |e| &e.credentials);
            let field = format!("integrations[{at}].credentials");
            errors.extend(self.connect.secret_policy.refused_in(org, &field, &i.credentials, before));
            // A stored secret goes only where it was entered for, as
            // through the API (docs/security.md).
            if let Some(existing) = current.integrations.iter().find(|e| e.id == i.id) {
                let supplied = supplied_values(&doc.integrations[at].credentials);
                errors.extend(self.connect.integration_secrets_to_resupply(p, existing, i, &supplied, &field).await);
            }
        }
        for w in &plan.writes.connections {
            let c = w.item();
            let Some(spec) = self.connect.registry().spec(&c.connector_type) else { continue };
            let Some(i) = doc.connections.iter().position(|d| d.name.trim() == c.name) else { continue };
            let before = current.connections.iter().find(|e| e.id == c.id).map_or(&none, |e| &e.secrets);
            errors.extend(self.connect.secret_policy.refused_in(
                org,
                &format!("connections[{i}].config"),
                &c.secrets,
                before,
            ));
            // A stored secret goes only where it was entered for, as
            // through the API (docs/security.md).
            let existing = current.connections.iter().find(|e| e.id == c.id);
            let supplied = crate::connect::connection::supplied_secrets(&spec, &doc.connections[i].config);
            let integration_supplied: Vec<&str> = doc
                .integrations
                .iter()
                .find(|d| c.integration_id.is_some() && plan_integration_id(plan, current, &d.name) == c.integration_id)
                .map(|d| supplied_values(&d.credentials))
                .unwrap_or_default();
            for mut e in self.connect.secrets_to_resupply(p, existing, c, &supplied, &integration_supplied).await? {
                e.field = format!("connections[{i}].{}", e.field);
                errors.push(e);
            }
            // Reached without any secret: the host is not yet known to be
            // one the secrets may go to.
            let cfg = crate::connect::connection::unresolved(org, &spec, &c.config, &none);
            for mut e in self.connect.registry().check_config(&cfg).await {
                e.field = format!("connections[{i}].{}", e.field);
                errors.push(e);
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(Error::Validation(errors)) }
    }

    /// The flows the plan writes checked against their sources' schemas,
    /// as the API checks them: a new flow, or one whose mappings or
    /// connections change, when its source answers.
    async fn check_flows_against_sources(
        &self,
        doc: &Document,
        current: &crate::iac::plan::Snapshot,
        plan: &IacPlan,
    ) -> Result<()> {
        let mut errors = Vec::new();
        for f in plan.writes.flows.iter().map(|w| w.item()) {
            let before = current.flows.iter().find(|e| e.id == f.id);
            if !crate::sync::validate::touches_source(before, f) {
                continue;
            }
            let Some(i) = doc.flows.iter().position(|d| d.name.trim() == f.name) else { continue };
            let planned = plan.writes.connections.iter().map(|w| w.item());
            let Some(source) = planned
                .chain(current.connections.iter())
                .find(|c| c.id == f.source_connection_id)
                .filter(|c| c.capability.reads())
            else {
                continue;
            };
            if let Some(schemas) = self.sync.source_schemas(source, &f.config).await {
                let path = format!("flows[{i}]");
                errors.extend(crate::sync::validate::check_against_source(&path, &f.config, &source.name, &schemas));
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(Error::Validation(errors)) }
    }

    /// The organization's configuration as an IaC document that applies
    /// back unchanged (secrets as `***`).
    pub async fn export_iac(&self, p: &Principal, org: OrgId) -> Result<Document> {
        self.identity.access(p, org, Permission::Read).await?;
        Ok(iac::export(&self.iac.snapshot(org).await?))
    }

    /// Compares a proposed schema of one entity with the one the flow syncs:
    /// the source schema its last run saw or discovery recorded (the
    /// entity's discovered asset), else the source's live schema.
    pub async fn validate_drift(
        &self,
        p: &Principal,
        org: OrgId,
        flow: &str,
        entity: &str,
        proposed: &[ProposedField],
    ) -> Result<DriftReport> {
        self.identity.access(p, org, Permission::Read).await?;
        let f = self.sync.find_flow(org, flow).await?.ok_or(Error::not_found("flow"))?;
        let m = f
            .config
            .mappings
            .iter()
            .find(|m| m.source_entity == entity || m.destination() == entity)
            .ok_or(Error::not_found("entity"))?;
        let mut errors = Vec::new();
        for (i, pf) in proposed.iter().enumerate() {
            if pf.name.trim().is_empty() {
                errors.push(crate::FieldError::new(format!("proposed_schema[{i}].name"), "is required"));
            } else if proposed[..i].iter().any(|o| o.name == pf.name) {
                errors.push(crate::FieldError::new(
                    format!("proposed_schema[{i}].name"),
                    format!("'{}' appears twice", pf.name),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(Error::Validation(errors));
        }
        let source =
            self.connect.connection(org, f.source_connection_id).await?.ok_or(Error::not_found("connection"))?;
        let recorded = self.catalog.find_discovered(org, source.id, &m.source_entity).await?.map(|a| {
            a.fields
                .iter()
                .map(|c| CurrentField { name: c.name.clone(), field_type: c.field_type, required: c.required })
                .collect::<Vec<_>>()
        });
        let current = match recorded {
            Some(fields) => fields,
            None => {
                let schemas = self.sync.source_schemas(&source, &f.config).await.ok_or_else(|| Error::Unprocessable {
                    code: crate::shared::error::Code::SchemaUnknown,
                    message: format!(
                        "no schema of '{}' is recorded and '{}' cannot be reached; run the flow or discover the connection first",
                        m.source_entity, source.name
                    ),
                })?;
                let s = schemas.get(&m.source_entity).ok_or_else(|| Error::Unprocessable {
                    code: crate::shared::error::Code::SchemaUnknown,
                    message: format!("'{}' does not exist in '{}'", m.source_entity, source.name),
                })?;
                s.fields
                    .iter()
                    .map(|x| CurrentField { name: x.name.clone(), field_type: x.field_type, required: !x.nullable })
                    .collect()
            }
        };
        let facts = MappingFacts {
            flow: &f.name,
            entity: &m.source_entity,
            key_fields: m.key_fields(),
            cursor_field: m.cursor_field.as_deref(),
            blocks_new_columns: m.schema_policy == crate::sync::flow::SchemaPolicy::BlockOnNewColumn,
        };
        Ok(crate::catalog::drift::compare_schemas(&current, proposed, &facts))
    }
}

/// The id the plan gives the integration named `name` (written by the
/// plan, or already in the organization).
fn plan_integration_id(
    plan: &IacPlan,
    current: &crate::iac::plan::Snapshot,
    name: &str,
) -> Option<crate::shared::ids::IntegrationId> {
    plan.writes
        .integrations
        .iter()
        .map(|w| w.item())
        .find(|i| i.name == name.trim())
        .map(|i| i.id)
        .or_else(|| current.integrations.iter().find(|i| i.name == name.trim()).map(|i| i.id))
}
