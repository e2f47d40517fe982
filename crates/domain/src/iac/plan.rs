//! The plan of an apply: the document (see [`super::document`]) validated
//! against the organization, and each resource created, updated with a
//! field-level diff (see [`super::diff`]) or unchanged, for the store to
//! write in one transaction; and the export of an organization.
//!
//! Everything here is pure: the service reads the organization's current
//! state into a [`Snapshot`], calls [`plan`], and hands [`IacPlan::writes`] to
//! the store. Resources are matched by name; resources that exist in the
//! organization but not in the document are left alone.

use super::diff::{DiffEntry, diff, secret_diff};
use super::document::{ConnectionDoc, Document, FlowDoc, IntegrationDoc, VERSION};
use crate::connect::connection::{Connection, ConnectionStatus, check_capability, split_config};
use crate::connect::connector::{Capability, ConnectorSpec};
use crate::connect::integration::Integration;
use crate::identity::user::validate_name;
use crate::shared::ids::{ConnectionId, FlowId, IntegrationId, OrgId};
use crate::sync::flow::{Flow, FlowConfig, FlowStatus, find_cycle, next_due, resolve_dependencies, upstream_ids};
use crate::sync::validate::{Draft, End, check_flow, check_into_itself};
use crate::{Error, FieldError};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use time::OffsetDateTime;
// ---- planning --------------------------------------------------------------

/// The organization's current integrations, connections and flows.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub integrations: Vec<Integration>,
    pub connections: Vec<Connection>,
    pub flows: Vec<Flow>,
}

/// What the plan needs from the connector registry.
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    pub specs: Vec<ConnectorSpec>,
    /// Integration types served by OAuth providers.
    pub oauth_types: Vec<String>,
}

impl Catalogue {
    fn spec(&self, kind: &str) -> Option<&ConnectorSpec> {
        self.specs.iter().find(|s| s.connector_type == kind)
    }

    /// The refusal of a type the registry does not know, at `path`.
    fn unknown_type(&self, path: &str, kind: &str) -> FieldError {
        let mut known: Vec<&str> = self.specs.iter().map(|s| s.connector_type).collect();
        known.extend(self.oauth_types.iter().map(String::as_str));
        FieldError::new(format!("{path}.type"), format!("unknown type '{kind}'; known types: {}", known.join(", ")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Integration,
    Connection,
    Flow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Created,
    Updated,
    Unchanged,
}

/// One resource of the document and what the apply does to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IacChange {
    pub kind: Kind,
    pub name: String,
    pub action: Action,
    /// The resource's id; a new resource's id is assigned by the plan and
    /// not shown by a dry run.
    pub id: Option<String>,
    /// For an update, each changed field; secrets show as `***`.
    pub diff: Vec<DiffEntry>,
}

/// A write of the plan. An update carries the `updated_at` it was planned
/// against, so the store can refuse it when the resource changed meanwhile.
#[derive(Debug, Clone, PartialEq)]
pub enum Write<T> {
    Create(T),
    Update { item: T, planned_against: OffsetDateTime },
}

impl<T> Write<T> {
    pub fn item(&self) -> &T {
        match self {
            Write::Create(t) | Write::Update { item: t, .. } => t,
        }
    }

    pub fn is_create(&self) -> bool {
        matches!(self, Write::Create(_))
    }
}

/// The writes of a plan, in dependency order (integrations, connections,
/// then flows with upstream flows first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    pub integrations: Vec<Write<Integration>>,
    pub connections: Vec<Write<Connection>>,
    pub flows: Vec<Write<Flow>>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.integrations.is_empty() && self.connections.is_empty() && self.flows.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct IacPlan {
    pub changes: Vec<IacChange>,
    pub writes: Writes,
}

impl IacPlan {
    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }
}

/// Prefixes field errors that name a field of a resource with its path.
fn under(prefix: &str, errors: impl IntoIterator<Item = FieldError>) -> impl Iterator<Item = FieldError> {
    errors.into_iter().map(move |mut e| {
        e.field = format!("{prefix}.{}", e.field);
        e
    })
}

fn name_errors(prefix: &str, name: &str) -> Vec<FieldError> {
    match validate_name("name", name) {
        Err(Error::Validation(f)) => under(prefix, f).collect(),
        _ => Vec::new(),
    }
}

/// Reports names defined twice in one list of the document.
fn duplicates<'a>(list: &str, names: impl Iterator<Item = &'a str>) -> Vec<FieldError> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut errors = Vec::new();
    for (i, n) in names.enumerate() {
        let n = n.trim().to_string();
        if let Some(first) = seen.get(&n) {
            errors.push(FieldError::new(
                format!("{list}[{i}].name"),
                format!("'{n}' is already defined at {list}[{first}]"),
            ));
        } else {
            seen.insert(n, i);
        }
    }
    errors
}

/// A connection as a document may refer to it: id, type, capability and
/// settings (the document's, where it has the connection).
type NamedConnection = (ConnectionId, String, Capability, BTreeMap<String, serde_json::Value>);

/// Names and ids of the resources the document may refer to.
struct Names {
    /// name → (id, type) for integrations.
    integrations: BTreeMap<String, (IntegrationId, String)>,
    /// name → (id, type, capability, settings) for connections.
    connections: BTreeMap<String, NamedConnection>,
    flows: BTreeMap<String, FlowId>,
    integration_names: BTreeMap<IntegrationId, String>,
    connection_names: BTreeMap<ConnectionId, String>,
    flow_names: BTreeMap<FlowId, String>,
}

impl Names {
    /// The names and ids of the organization's resources.
    fn of(current: &Snapshot) -> Self {
        Names {
            integrations: current
                .integrations
                .iter()
                .map(|i| (i.name.clone(), (i.id, i.integration_type.clone())))
                .collect(),
            connections: current
                .connections
                .iter()
                .map(|c| (c.name.clone(), (c.id, c.connector_type.clone(), c.capability, c.config.clone())))
                .collect(),
            flows: current.flows.iter().map(|f| (f.name.clone(), f.id)).collect(),
            integration_names: current.integrations.iter().map(|i| (i.id, i.name.clone())).collect(),
            connection_names: current.connections.iter().map(|c| (c.id, c.name.clone())).collect(),
            flow_names: current.flows.iter().map(|f| (f.id, f.name.clone())).collect(),
        }
    }

    /// How a document names an integration: by name, or by id if it has none.
    fn integration_name(&self, id: IntegrationId) -> String {
        self.integration_names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    }

    fn connection_name(&self, id: ConnectionId) -> String {
        self.connection_names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    }

    fn integration(&self, r: &str) -> Option<(IntegrationId, String)> {
        self.integrations.get(r.trim()).cloned().or_else(|| {
            let id: IntegrationId = r.trim().parse().ok()?;
            let name = self.integration_names.get(&id)?;
            self.integrations.get(name).cloned()
        })
    }

    fn connection(&self, r: &str) -> Option<NamedConnection> {
        self.connections.get(r.trim()).cloned().or_else(|| {
            let id: ConnectionId = r.trim().parse().ok()?;
            let name = self.connection_names.get(&id)?;
            self.connections.get(name).cloned()
        })
    }

    fn flow(&self, r: &str) -> Option<FlowId> {
        self.flows.get(r.trim()).copied().or_else(|| {
            let id: FlowId = r.trim().parse().ok()?;
            self.flow_names.contains_key(&id).then_some(id)
        })
    }
}

/// A flow's config as the document writes it: `depends_on` by name.
fn config_by_name(config: &FlowConfig, flow_names: &BTreeMap<FlowId, String>) -> FlowConfig {
    let mut c = config.clone();
    for d in &mut c.depends_on {
        if let Some(n) = d.flow.parse::<FlowId>().ok().and_then(|id| flow_names.get(&id)) {
            d.flow = n.clone();
        }
    }
    c
}

fn connection_view(c: &Connection, names: &Names) -> Value {
    json!({
        "integration": c.integration_id.map(|i| names.integration_name(i)),
        "capability": c.capability.as_str(),
        "config": c.config,
    })
}

fn flow_view(f: &Flow, names: &Names) -> Value {
    json!({
        "source_connection": names.connection_name(f.source_connection_id),
        "destination_connection": names.connection_name(f.destination_connection_id),
        "schedule": f.schedule,
        "status": f.status.as_str(),
        "config": config_by_name(&f.config, &names.flow_names),
    })
}

/// Plans `doc` against the organization's `current` state: validates every
/// resource and reference (all problems at once, each with its YAML path),
/// then decides per resource whether it is created, updated (with a diff)
/// or unchanged. Credentials that are absent or `***` keep their stored
/// value; a secret reference is stored as the reference.
///
/// # Errors
/// `Validation` listing every problem.
pub fn plan(
    doc: &Document,
    current: &Snapshot,
    registry: &Catalogue,
    org: OrgId,
    now: OffsetDateTime,
) -> Result<IacPlan, Error> {
    let mut errors: Vec<FieldError> = Vec::new();
    errors.extend(duplicates("integrations", doc.integrations.iter().map(|i| i.name.as_str())));
    errors.extend(duplicates("connections", doc.connections.iter().map(|c| c.name.as_str())));
    errors.extend(duplicates("flows", doc.flows.iter().map(|f| f.name.as_str())));
    // Every name the document may refer to: the organization's resources,
    // then the document's (a document entry shadows nothing: names are unique).
    let mut p =
        Planner { doc, current, registry, org, now, names: Names::of(current), errors, out: IacPlan::default() };
    let integration_ids: Vec<IntegrationId> =
        doc.integrations.iter().map(|d| p.find_i(&d.name).map_or_else(IntegrationId::new, |i| i.id)).collect();
    for (d, id) in doc.integrations.iter().zip(&integration_ids) {
        p.names.integrations.entry(d.name.trim().to_string()).or_insert((*id, d.kind.clone()));
        p.names.integration_names.entry(*id).or_insert(d.name.trim().to_string());
    }
    let connection_ids: Vec<ConnectionId> =
        doc.connections.iter().map(|d| p.find_c(&d.name).map_or_else(ConnectionId::new, |c| c.id)).collect();
    for (d, id) in doc.connections.iter().zip(&connection_ids) {
        p.names.connections.entry(d.name.trim().to_string()).and_modify(|c| c.3 = d.config.clone()).or_insert((
            *id,
            d.kind.clone(),
            d.capability,
            d.config.clone(),
        ));
        p.names.connection_names.entry(*id).or_insert(d.name.trim().to_string());
    }
    let flow_ids: Vec<FlowId> =
        doc.flows.iter().map(|d| p.find_f(&d.name).map_or_else(FlowId::new, |f| f.id)).collect();
    for (d, id) in doc.flows.iter().zip(&flow_ids) {
        p.names.flows.entry(d.name.trim().to_string()).or_insert(*id);
        p.names.flow_names.entry(*id).or_insert(d.name.trim().to_string());
    }
    p.integrations(&integration_ids);
    p.connections(&connection_ids);
    let planned = p.resolve_flows(&flow_ids);
    let mut edges: BTreeMap<FlowId, Vec<FlowId>> = current.flows.iter().map(|f| (f.id, upstream_ids(f))).collect();
    for (_, f, _) in &planned {
        edges.insert(f.id, upstream_ids(f));
    }
    if let Some(cycle) = find_cycle(&edges, &p.names.flow_names) {
        p.errors.push(FieldError::new("flows", format!("depends_on creates a cycle: {}", cycle.join(" → "))));
    }
    // No two flows write one destination entity (unless both append): the
    // document's against each other and against the organization's others.
    let in_doc: BTreeSet<FlowId> = planned.iter().map(|(_, f, _)| f.id).collect();
    let others = current.flows.iter().filter(|f| !in_doc.contains(&f.id));
    let all: Vec<&Flow> = planned.iter().map(|(_, f, _)| f).chain(others).collect();
    for (i, f, _) in &planned {
        let same = all.iter().filter(|o| o.id != f.id && o.destination_connection_id == f.destination_connection_id);
        if let Some((at, o, name)) = same
            .filter_map(|o| {
                crate::sync::validate::entity_written_by(&f.config, &o.config).map(|(at, m)| (at, m, &o.name))
            })
            .next()
        {
            let entity = f.config.mappings[at].destination();
            p.errors.push(FieldError::new(
                format!("flows[{i}].config.mappings[{at}].dest_entity"),
                crate::sync::validate::entity_taken_message(entity, name, o),
            ));
        }
    }
    if !p.errors.is_empty() {
        return Err(Error::Validation(p.errors));
    }

    p.order_flows(planned, &edges);
    Ok(p.out)
}

/// The state of one planning: what the document may refer to, the problems
/// found, and the plan so far. One method per kind of resource.
struct Planner<'a> {
    doc: &'a Document,
    current: &'a Snapshot,
    registry: &'a Catalogue,
    org: OrgId,
    now: OffsetDateTime,
    names: Names,
    errors: Vec<FieldError>,
    out: IacPlan,
}

impl<'a> Planner<'a> {
    fn find_i(&self, n: &str) -> Option<&'a Integration> {
        self.current.integrations.iter().find(|i| i.name == n.trim())
    }

    fn find_c(&self, n: &str) -> Option<&'a Connection> {
        self.current.connections.iter().find(|c| c.name == n.trim())
    }

    fn find_f(&self, n: &str) -> Option<&'a Flow> {
        self.current.flows.iter().find(|f| f.name == n.trim())
    }

    /// The document's integrations: created, updated (credentials) or
    /// unchanged; a type never changes.
    fn integrations(&mut self, integration_ids: &[IntegrationId]) {
        // Integrations.
        for (i, (d, id)) in self.doc.integrations.iter().zip(integration_ids).enumerate() {
            let path = format!("integrations[{i}]");
            self.errors.extend(name_errors(&path, &d.name));
            let existing = self.find_i(&d.name);
            if self.registry.spec(&d.kind).is_none() && !self.registry.oauth_types.contains(&d.kind) {
                self.errors.push(self.registry.unknown_type(&path, &d.kind));
            }
            if let Some(e) = existing.filter(|e| e.integration_type != d.kind) {
                self.errors.push(FieldError::new(
                    format!("{path}.type"),
                    format!("'{}' exists with type '{}'; a type cannot change", e.name, e.integration_type),
                ));
                continue;
            }
            let mut credentials = existing.map(|e| e.credentials.clone()).unwrap_or_default();
            if let Err(f) = credentials.merge(&format!("{path}.credentials"), &d.credentials) {
                self.errors.extend(f);
                continue;
            }
            let name = d.name.trim().to_string();
            match existing {
                None => {
                    let item = Integration {
                        id: *id,
                        org_id: self.org,
                        name: name.clone(),
                        integration_type: d.kind.clone(),
                        credentials,
                        created_at: self.now,
                        updated_at: self.now,
                    };
                    self.out.changes.push(IacChange {
                        kind: Kind::Integration,
                        name,
                        action: Action::Created,
                        id: Some(id.to_string()),
                        diff: vec![],
                    });
                    self.out.writes.integrations.push(Write::Create(item));
                }
                Some(e) => {
                    let d = secret_diff(&e.credentials, &credentials, "credentials");
                    let action = if d.is_empty() { Action::Unchanged } else { Action::Updated };
                    if action == Action::Updated {
                        let mut item = e.clone();
                        item.credentials = credentials;
                        item.updated_at = self.now;
                        self.out.writes.integrations.push(Write::Update { item, planned_against: e.updated_at });
                    }
                    self.out.changes.push(IacChange {
                        kind: Kind::Integration,
                        name,
                        action,
                        id: Some(id.to_string()),
                        diff: d,
                    });
                }
            }
        }
    }

    /// The document's connections: references to integrations resolved,
    /// settings split from secrets.
    fn connections(&mut self, connection_ids: &[ConnectionId]) {
        // Connections.
        for (i, (d, id)) in self.doc.connections.iter().zip(connection_ids).enumerate() {
            let path = format!("connections[{i}]");
            self.errors.extend(name_errors(&path, &d.name));
            let existing = self.find_c(&d.name);
            let Some(spec) = self.registry.spec(&d.kind) else {
                self.errors.push(self.registry.unknown_type(&path, &d.kind));
                continue;
            };
            if let Some(e) = existing.filter(|e| e.connector_type != d.kind) {
                self.errors.push(FieldError::new(
                    format!("{path}.type"),
                    format!("'{}' exists with type '{}'; a type cannot change", e.name, e.connector_type),
                ));
                continue;
            }
            if let Err(e) = check_capability(spec, d.capability) {
                self.errors.extend(under(&path, [e]));
            }
            let integration_id = match &d.integration {
                None => None,
                Some(r) => match self.names.integration(r) {
                    None => {
                        self.errors.push(FieldError::new(
                            format!("{path}.integration"),
                            format!("no integration '{r}' in the document or the organization"),
                        ));
                        None
                    }
                    Some((iid, kind)) if kind != d.kind => {
                        self.errors.push(FieldError::new(
                            format!("{path}.integration"),
                            format!("the integration '{r}' is for '{kind}', not '{}'", d.kind),
                        ));
                        Some(iid)
                    }
                    Some((iid, _)) => Some(iid),
                },
            };
            let stored = existing.map(|e| e.secrets.clone()).unwrap_or_default();
            let (config, secrets) = match split_config(spec, &d.config, &BTreeMap::new(), &stored) {
                Ok(p) => p,
                Err(f) => {
                    self.errors.extend(under(&path, f));
                    continue;
                }
            };
            // The source of flows that capture changes through it is not
            // moved from under their replication slots (see
            // `SyncService::update_connection`).
            if let Some(e) = existing {
                let moved: Vec<&str> = ["host", "port", "database", "user"]
                    .into_iter()
                    .filter(|k| config.get(*k).unwrap_or(&Value::Null) != e.config.get(*k).unwrap_or(&Value::Null))
                    .collect();
                let capturing: Vec<String> = self
                    .current
                    .flows
                    .iter()
                    .filter(|f| !moved.is_empty() && f.captures() && f.source_connection_id == e.id)
                    .map(|f| format!("'{}'", f.name))
                    .collect();
                if !capturing.is_empty() {
                    self.errors.push(FieldError::new(
                        format!("{path}.config.{}", moved[0]),
                        format!(
                            "'{}' is the source of change capture for {}, whose replication slots live on the \
                             server it names now: delete those flows (which drops their slots) or change their \
                             mappings away from the cdc modes first",
                            e.name,
                            capturing.join(", ")
                        ),
                    ));
                }
            }
            let name = d.name.trim().to_string();
            let mut item = Connection {
                id: *id,
                org_id: self.org,
                name: name.clone(),
                integration_id,
                connector_type: d.kind.clone(),
                capability: d.capability,
                config,
                secrets,
                status: ConnectionStatus::Untested,
                last_tested_at: None,
                last_error: None,
                created_at: self.now,
                updated_at: self.now,
            };
            match existing {
                None => {
                    self.out.changes.push(IacChange {
                        kind: Kind::Connection,
                        name,
                        action: Action::Created,
                        id: Some(id.to_string()),
                        diff: vec![],
                    });
                    self.out.writes.connections.push(Write::Create(item));
                }
                Some(e) => {
                    let mut dd = diff(&connection_view(e, &self.names), &connection_view(&item, &self.names));
                    dd.extend(secret_diff(&e.secrets, &item.secrets, "config"));
                    dd.sort_by(|a, b| a.path.cmp(&b.path));
                    let action = if dd.is_empty() { Action::Unchanged } else { Action::Updated };
                    if action == Action::Updated {
                        let settings_changed = e.config != item.config
                            || e.secrets != item.secrets
                            || e.integration_id != item.integration_id;
                        if !settings_changed {
                            // Only the capability changed: the last test still holds.
                            item.status = e.status;
                            item.last_tested_at = e.last_tested_at;
                            item.last_error = e.last_error.clone();
                        }
                        item.created_at = e.created_at;
                        self.out.writes.connections.push(Write::Update { item, planned_against: e.updated_at });
                    }
                    self.out.changes.push(IacChange {
                        kind: Kind::Connection,
                        name,
                        action,
                        id: Some(id.to_string()),
                        diff: dd,
                    });
                }
            }
        }
    }

    /// The document's flows with their references resolved (connections,
    /// upstream flows), in document order, each with the flow it replaces.
    fn resolve_flows(&mut self, flow_ids: &[FlowId]) -> Vec<(usize, Flow, Option<&'a Flow>)> {
        // Flows: resolve references, then check the dependency graph as a whole.
        let mut planned: Vec<(usize, Flow, Option<&Flow>)> = Vec::new();
        for (i, (d, id)) in self.doc.flows.iter().zip(flow_ids).enumerate() {
            let path = format!("flows[{i}]");
            let mut conn = |field: &str, r: &str| {
                let found = self.names.connection(r);
                if found.is_none() {
                    self.errors.push(FieldError::new(
                        format!("{path}.{field}"),
                        format!("no connection '{r}' in the document or the organization"),
                    ));
                }
                found
            };
            let source = conn("source_connection", &d.source_connection);
            let dest = conn("destination_connection", &d.destination_connection);
            // Each end's spec as its settings make it.
            let spec_of = |c: &Option<NamedConnection>| {
                c.as_ref().and_then(|(_, kind, _, config)| self.registry.spec(kind).map(|s| s.with_config(config)))
            };
            let specs = (spec_of(&source), spec_of(&dest));
            fn end<'a>(
                field: &'a str,
                r: &'a str,
                c: &'a Option<NamedConnection>,
                spec: &'a Option<ConnectorSpec>,
            ) -> Option<End<'a>> {
                c.as_ref().map(|(id, _, capability, _)| End {
                    field,
                    name: r,
                    id: *id,
                    capability: *capability,
                    spec: spec.as_ref(),
                })
            }
            let draft = Draft { name: &d.name, schedule: d.schedule.as_deref(), config: &d.config };
            let ends = (
                end("source_connection", &d.source_connection, &source, &specs.0),
                end("destination_connection", &d.destination_connection, &dest, &specs.1),
            );
            self.errors.extend(check_flow(&path, &draft, ends.0, ends.1));
            self.errors.extend(check_into_itself(&path, &d.config, ends.0, ends.1));
            let mut config = d.config.clone();
            self.errors.extend(resolve_dependencies(
                &format!("{path}."),
                *id,
                &mut config,
                |r| self.names.flow(r),
                "in the document or the organization",
            ));
            let (Some((src, ..)), Some((dst, ..))) = (source, dest) else { continue };
            let existing = self.find_f(&d.name);
            let status = d.status.or(existing.map(|e| e.status)).unwrap_or(FlowStatus::Active);
            let schedule = d.schedule.as_ref().map(|s| s.trim().to_string());
            let next_run_at = next_due(schedule.as_deref(), status, config.continuous, self.now);
            let flow = Flow {
                id: *id,
                org_id: self.org,
                name: d.name.trim().to_string(),
                source_connection_id: src,
                destination_connection_id: dst,
                schedule,
                config,
                status,
                next_run_at,
                created_at: existing.map_or(self.now, |e| e.created_at),
                updated_at: self.now,
            };
            planned.push((i, flow, existing));
        }
        planned
    }

    /// The flows' changes, upstream flows of the document first, otherwise
    /// in document order.
    fn order_flows(&mut self, planned: Vec<(usize, Flow, Option<&'a Flow>)>, edges: &BTreeMap<FlowId, Vec<FlowId>>) {
        // Upstream flows of the document first, otherwise in document order.
        let in_doc: BTreeSet<FlowId> = planned.iter().map(|(_, f, _)| f.id).collect();
        let mut done: BTreeSet<FlowId> = BTreeSet::new();
        let mut ordered = Vec::with_capacity(planned.len());
        while ordered.len() < planned.len() {
            let next = planned.iter().position(|(_, f, _)| {
                !done.contains(&f.id) && edges[&f.id].iter().all(|u| !in_doc.contains(u) || done.contains(u))
            });
            let Some(k) = next else { break };
            done.insert(planned[k].1.id);
            ordered.push(k);
        }
        for k in ordered {
            let (_, flow, existing) = &planned[k];
            let mut flow = flow.clone();
            match existing {
                None => {
                    self.out.changes.push(IacChange {
                        kind: Kind::Flow,
                        name: flow.name.clone(),
                        action: Action::Created,
                        id: Some(flow.id.to_string()),
                        diff: vec![],
                    });
                    self.out.writes.flows.push(Write::Create(flow));
                }
                Some(e) => {
                    let dd = diff(&flow_view(e, &self.names), &flow_view(&flow, &self.names));
                    let action = if dd.is_empty() { Action::Unchanged } else { Action::Updated };
                    if action == Action::Updated {
                        if flow.schedule == e.schedule && flow.status == e.status {
                            flow.next_run_at = e.next_run_at;
                        }
                        self.out.writes.flows.push(Write::Update { item: flow.clone(), planned_against: e.updated_at });
                    }
                    self.out.changes.push(IacChange {
                        kind: Kind::Flow,
                        name: flow.name,
                        action,
                        id: Some(flow.id.to_string()),
                        diff: dd,
                    });
                }
            }
        }
    }
}

/// The organization's configuration as a document that applies back as all
/// `unchanged`: references by name, secrets as `***`.
pub fn export(current: &Snapshot) -> Document {
    let names = Names::of(current);
    let mut integrations: Vec<IntegrationDoc> = current
        .integrations
        .iter()
        .map(|i| IntegrationDoc {
            name: i.name.clone(),
            kind: i.integration_type.clone(),
            credentials: i.credentials.masked().into_iter().map(|(k, v)| (k, Value::String(v))).collect(),
        })
        .collect();
    integrations.sort_by(|a, b| a.name.cmp(&b.name));
    let mut connections: Vec<ConnectionDoc> = current
        .connections
        .iter()
        .map(|c| ConnectionDoc {
            name: c.name.clone(),
            integration: c.integration_id.map(|i| names.integration_name(i)),
            kind: c.connector_type.clone(),
            capability: c.capability,
            config: c.public_config(),
        })
        .collect();
    connections.sort_by(|a, b| a.name.cmp(&b.name));
    let mut flows: Vec<FlowDoc> = current
        .flows
        .iter()
        .map(|f| FlowDoc {
            name: f.name.clone(),
            source_connection: names.connection_name(f.source_connection_id),
            destination_connection: names.connection_name(f.destination_connection_id),
            schedule: f.schedule.clone(),
            status: Some(f.status),
            config: config_by_name(&f.config, &names.flow_names),
        })
        .collect();
    flows.sort_by(|a, b| a.name.cmp(&b.name));
    Document { version: VERSION.into(), integrations, connections, flows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::connector::ConfigField;
    use crate::iac::document::{parse, to_yaml};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-21 12:00 UTC);

    fn registry() -> Catalogue {
        let db = |t: &'static str, caps: Vec<Capability>, modes: Vec<&'static str>| ConnectorSpec {
            connector_type: t,
            title: t,
            capabilities: caps,
            config_fields: vec![
                ConfigField::string("host", false, true),
                ConfigField::string("database", false, true),
                ConfigField::string("user", false, false),
                ConfigField::string("password", true, false),
            ],
            sync_modes: modes,
            features: vec![],
            variants: vec![],
        };
        let all = vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"];
        Catalogue {
            specs: vec![
                db("postgres", vec![Capability::Both], all.clone()),
                db("mysql", vec![Capability::Both], all),
                db("archive", vec![Capability::Destination], vec!["full_refresh_append"]),
            ],
            oauth_types: vec!["github".into()],
        }
    }

    const DOC: &str = r#"
version: "1"
integrations:
  - name: warehouse-creds
    type: postgres
    credentials:
      password: s3cret
connections:
  - name: app-db
    type: mysql
    capability: source
    config: {host: db.internal, database: app, user: reader, password: "env:APP_DB_PASSWORD"}
  - name: warehouse
    integration: warehouse-creds
    type: postgres
    capability: both
    config: {host: wh.internal, database: dw, user: loader}
flows:
  - name: order-rollup
    source_connection: warehouse
    destination_connection: warehouse
    config:
      mappings: [{source_entity: orders, dest_entity: orders_copy, sync_mode: full_refresh_overwrite}]
      depends_on: [{flow: orders, on: success}]
  - name: orders
    source_connection: app-db
    destination_connection: warehouse
    schedule: "*/15 * * * *"
    config:
      mappings:
        - {source_entity: orders, sync_mode: incremental_deduped, cursor_field: updated_at, primary_key: id}
"#;

    /// The organization after the store has written `writes`.
    fn applied(mut s: Snapshot, w: &Writes) -> Snapshot {
        fn put<T: Clone>(list: &mut Vec<T>, item: &T, same: impl Fn(&T) -> bool) {
            match list.iter().position(same) {
                Some(i) => list[i] = item.clone(),
                None => list.push(item.clone()),
            }
        }
        for x in &w.integrations {
            put(&mut s.integrations, x.item(), |i| i.id == x.item().id);
        }
        for x in &w.connections {
            put(&mut s.connections, x.item(), |c| c.id == x.item().id);
        }
        for x in &w.flows {
            put(&mut s.flows, x.item(), |f| f.id == x.item().id);
        }
        s
    }

    fn plan_of(text: &str, s: &Snapshot) -> Result<IacPlan, Error> {
        plan(&parse(text).unwrap(), s, &registry(), OrgId::new(), NOW)
    }

    fn fields(e: Error) -> Vec<String> {
        match e {
            Error::Validation(f) => f.into_iter().map(|e| e.field).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_new_document_is_created_in_dependency_order() {
        let p = plan_of(DOC, &Snapshot::default()).unwrap();
        let order: Vec<(Kind, &str, Action)> = p.changes.iter().map(|c| (c.kind, c.name.as_str(), c.action)).collect();
        assert_eq!(
            order,
            [
                (Kind::Integration, "warehouse-creds", Action::Created),
                (Kind::Connection, "app-db", Action::Created),
                (Kind::Connection, "warehouse", Action::Created),
                (Kind::Flow, "orders", Action::Created),
                (Kind::Flow, "order-rollup", Action::Created),
            ]
        );
        let [Write::Create(orders), Write::Create(rollup)] = &p.writes.flows[..] else { panic!() };
        assert_eq!(rollup.config.depends_on[0].flow, orders.id.to_string(), "dependencies are stored by id");
        assert_eq!(orders.next_run_at, Some(datetime!(2026-11-21 12:15 UTC)));
        let Write::Create(wh) = &p.writes.connections[1] else { panic!() };
        assert_eq!(wh.integration_id, Some(p.writes.integrations[0].item().id));
        assert_eq!(orders.destination_connection_id, wh.id);
        let Write::Create(app) = &p.writes.connections[0] else { panic!() };
        assert_eq!(app.secrets.0["password"], "env:APP_DB_PASSWORD", "a reference is stored as the reference");
        assert!(!app.config.contains_key("password"));
    }

    #[test]
    fn applying_the_same_document_again_changes_nothing() {
        let p = plan_of(DOC, &Snapshot::default()).unwrap();
        let s = applied(Snapshot::default(), &p.writes);
        let again = plan_of(DOC, &s).unwrap();
        assert!(again.changes.iter().all(|c| c.action == Action::Unchanged), "{:?}", again.changes);
        assert!(again.writes.is_empty());
        assert_eq!(again.changes.len(), 5);
        let ids: Vec<&Option<String>> = again.changes.iter().map(|c| &c.id).collect();
        let first: Vec<&Option<String>> = p.changes.iter().map(|c| &c.id).collect();
        assert_eq!(ids, first, "resources are matched by name and keep their ids");
    }

    #[test]
    fn an_edit_is_an_update_with_a_field_level_diff() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        let edited = DOC.replace("*/15 * * * *", "0 * * * *").replace("user: loader", "user: writer");
        let p = plan_of(&edited, &s).unwrap();
        let updated: Vec<&IacChange> = p.changes.iter().filter(|c| c.action == Action::Updated).collect();
        assert_eq!(updated.len(), 2);
        assert_eq!(updated[0].name, "warehouse");
        assert_eq!(
            updated[0].diff,
            vec![DiffEntry { path: "config.user".into(), before: json!("loader"), after: json!("writer") }]
        );
        assert_eq!(updated[1].name, "orders");
        assert_eq!(
            updated[1].diff,
            vec![DiffEntry { path: "schedule".into(), before: json!("*/15 * * * *"), after: json!("0 * * * *") }]
        );
        let Write::Update { item, planned_against } = &p.writes.flows[0] else { panic!() };
        assert_eq!(item.next_run_at, Some(datetime!(2026-11-21 13:00 UTC)));
        assert_eq!(*planned_against, NOW);
        let Write::Update { item: wh, .. } = &p.writes.connections[0] else { panic!() };
        assert_eq!(wh.status, ConnectionStatus::Untested, "changed settings invalidate the last test");
    }

    #[test]
    fn placeholders_and_absent_credentials_keep_the_stored_secret() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        for edited in [
            DOC.replace("password: s3cret", "password: '***'"),
            DOC.replace("    credentials:\n      password: s3cret\n", ""),
            DOC.replace(", password: \"env:APP_DB_PASSWORD\"", ""),
        ] {
            let p = plan_of(&edited, &s).unwrap();
            assert!(p.writes.is_empty(), "{edited}\n{:?}", p.changes);
        }
        let p = plan_of(&DOC.replace("password: s3cret", "password: env:WH_PASSWORD"), &s).unwrap();
        let c = &p.changes[0];
        assert_eq!(c.action, Action::Updated);
        assert_eq!(
            c.diff,
            vec![DiffEntry { path: "credentials.password".into(), before: json!("***"), after: json!("***") }]
        );
        assert_eq!(p.writes.integrations[0].item().credentials.0["password"], "env:WH_PASSWORD");
        let text = serde_json::to_string(&p.changes).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("WH_PASSWORD"), "{text}");
    }

    #[test]
    fn references_resolve_within_the_document_or_the_organization() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        let wh = s.connections.iter().find(|c| c.name == "warehouse").unwrap().id;
        let orders = s.flows.iter().find(|f| f.name == "orders").unwrap().id;
        let doc = format!(
            r#"
version: "1"
flows:
  - name: nightly
    source_connection: app-db
    destination_connection: {wh}
    schedule: "0 3 * * *"
    config:
      mappings: [{{source_entity: customers, sync_mode: full_refresh_append}}]
      depends_on: [{{flow: {orders}, on: completion}}, {{flow: order-rollup, on: failure}}]
"#
        );
        let p = plan_of(&doc, &s).unwrap();
        assert_eq!(p.changes.len(), 1);
        let f = p.writes.flows[0].item();
        assert_eq!(f.destination_connection_id, wh);
        assert_eq!(f.config.depends_on[0].flow, orders.to_string());
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_path() {
        let doc = r#"
version: "1"
integrations:
  - {name: creds, type: postgres}
  - {name: creds, type: oracle}
connections:
  - {name: src, type: postgres, capability: source, integration: nope, config: {host: h, database: d}}
  - {name: dst, type: postgres, capability: destination, integration: creds, config: {host: h}}
  - {name: arc, type: archive, capability: source, config: {host: h, database: d}}
  - {name: my, type: mysql, capability: source, integration: creds, config: {host: h, database: d}}
flows:
  - name: f1
    source_connection: dst
    destination_connection: ghost
    schedule: "every hour"
    config:
      mappings: [{source_entity: t, sync_mode: incremental_deduped}]
      depends_on: [{flow: missing, on: success}]
  - name: f2
    source_connection: src
    destination_connection: arc
    config:
      mappings: [{source_entity: t, sync_mode: full_refresh_overwrite}]
"#;
        let got = fields(plan_of(doc, &Snapshot::default()).unwrap_err());
        let want = [
            "integrations[1].name",
            "integrations[1].type",
            "connections[0].integration",
            "connections[1].config.database",
            "connections[2].capability",
            "connections[3].integration",
            "flows[0].schedule",
            "flows[0].config.mappings[0].cursor_field",
            "flows[0].config.mappings[0].primary_key",
            "flows[0].source_connection",
            "flows[0].destination_connection",
            "flows[0].config.depends_on[0].flow",
            "flows[1].destination_connection",
            "flows[1].config.mappings[0].sync_mode",
        ];
        for w in want {
            assert!(got.contains(&w.to_string()), "missing {w} in {got:?}");
        }
        assert_eq!(got.len(), want.len(), "{got:?}");
    }

    #[test]
    fn a_dependency_cycle_is_refused_and_named() {
        let doc = DOC.replace(
            "      mappings:\n        - {source_entity: orders, sync_mode: incremental_deduped",
            "      depends_on: [{flow: order-rollup, on: success}]\n      mappings:\n        - {source_entity: orders, sync_mode: incremental_deduped",
        );
        let e = plan_of(&doc, &Snapshot::default()).unwrap_err();
        let Error::Validation(f) = e else { panic!() };
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].field, "flows");
        assert!(f[0].message.contains("order-rollup") && f[0].message.contains("orders"), "{}", f[0].message);
    }

    #[test]
    fn depending_on_itself_is_one_error_not_also_a_cycle() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        let id = s.flows.iter().find(|f| f.name == "orders").unwrap().id.to_string();
        for me in [id.as_str(), "orders"] {
            let doc = DOC.replace(
                "      mappings:\n        - {source_entity: orders, sync_mode: incremental_deduped",
                &format!(
                    "      depends_on: [{{flow: {me}, on: success}}]\n      mappings:\n        - {{source_entity: orders, sync_mode: incremental_deduped"
                ),
            );
            assert_ne!(doc, DOC);
            let e = plan_of(&doc, &s).unwrap_err();
            let Error::Validation(f) = e else { panic!("{e:?}") };
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(f[0].message, "a flow cannot depend on itself");
            assert_eq!(f[0].field, "flows[1].config.depends_on[0].flow");
        }
    }

    #[test]
    fn a_type_cannot_change_on_an_existing_resource() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        let doc = DOC.replace("type: mysql", "type: postgres");
        assert_eq!(fields(plan_of(&doc, &s).unwrap_err()), ["connections[0].type"]);
    }

    #[test]
    fn an_absent_status_keeps_a_paused_flow_paused() {
        let mut s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        s.flows.iter_mut().for_each(|f| f.status = FlowStatus::Paused);
        assert!(plan_of(DOC, &s).unwrap().writes.is_empty());
        let doc = DOC.replace("    schedule: \"*/15 * * * *\"", "    schedule: \"*/15 * * * *\"\n    status: active");
        let p = plan_of(&doc, &s).unwrap();
        assert_eq!(p.writes.flows.len(), 1);
        assert_eq!(p.changes.iter().find(|c| c.name == "orders").unwrap().diff[0].path, "status");
    }

    #[test]
    fn an_export_applies_back_unchanged() {
        let s = applied(Snapshot::default(), &plan_of(DOC, &Snapshot::default()).unwrap().writes);
        let yaml = to_yaml(&export(&s)).unwrap();
        assert!(!yaml.contains("s3cret") && !yaml.contains("APP_DB_PASSWORD"), "{yaml}");
        assert!(yaml.contains("depends_on"), "{yaml}");
        let p = plan_of(&yaml, &s).unwrap();
        assert!(p.writes.is_empty(), "{yaml}\n{:?}", p.changes);
        assert_eq!(p.changes.len(), 5);
    }
}
