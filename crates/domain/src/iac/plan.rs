//! Infrastructure as code: the YAML document, its validation against the
//! organization, and the plan (create, update with a field-level diff,
//! unchanged) that an apply writes in one transaction.
//!
//! Everything here is pure: the service reads the organization's current
//! state into a [`Snapshot`], calls [`plan`], and hands [`IacPlan::writes`] to
//! the store. Resources are matched by name; resources that exist in the
//! organization but not in the document are left alone.

use crate::connect::connection::{Connection, ConnectionStatus, check_capability, split_config};
use crate::connect::connector::{Capability, ConnectorSpec, FieldType};
use crate::connect::integration::{Credentials, Integration, PLACEHOLDER};
use crate::identity::user::validate_name;
use crate::shared::ids::{ConnectionId, FlowId, IntegrationId, OrgId};
use crate::sync::flow::{
    Flow, FlowConfig, FlowStatus, check_config, check_schedule, find_cycle, next_run, resolve_dependencies,
    upstream_ids,
};
use crate::{Error, FieldError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use time::OffsetDateTime;

/// The document versions this build understands.
pub const VERSION: &str = "1";

/// The IaC document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// `"1"` (a bare `1` is accepted too).
    #[serde(deserialize_with = "version_string")]
    pub version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub integrations: Vec<IntegrationDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<ConnectionDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<FlowDoc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntegrationDoc {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Values are secrets, secret references (`env:NAME`,
    /// `aws:secretsmanager:ARN`) or `***` (keep the stored value). Keys
    /// that are absent keep their stored value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionDoc {
    pub name: String,
    /// The name (or id) of an integration in the document or the organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integration: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub capability: Capability,
    /// Settings; credential fields follow the rules of integration
    /// credentials.
    #[serde(default)]
    pub config: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDoc {
    pub name: String,
    /// The name (or id) of a connection in the document or the organization.
    pub source_connection: String,
    pub destination_connection: String,
    /// A five-field cron expression; absent for a flow run on demand only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// `active` or `paused`; absent keeps a flow's current status (new
    /// flows start active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FlowStatus>,
    /// `mappings` and `depends_on` (flow names or ids).
    pub config: FlowConfig,
}

fn version_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a version string such as \"1\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

// ---- parsing --------------------------------------------------------------

/// Why a document was refused before planning.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// Not YAML at all (400 `malformed_yaml`).
    Malformed { message: String, line: Option<u64>, column: Option<u64> },
    /// YAML, but not an IaC document: each problem with its path (422).
    Invalid(Vec<FieldError>),
}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::Malformed { message, line, column } => Error::BadRequest {
                code: crate::shared::error::code::MALFORMED_YAML,
                message: match (line, column) {
                    (Some(l), Some(c)) => format!("malformed YAML at line {l}, column {c}: {message}"),
                    _ => format!("malformed YAML: {message}"),
                },
                details: json!({"line": line, "column": column}),
            },
            ParseError::Invalid(errors) => Error::Validation(errors),
        }
    }
}

fn yaml_options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.with_snippet = false;
    o
}

fn location(e: &serde_saphyr::Error) -> (Option<u64>, Option<u64>) {
    match e.location() {
        Some(l) if l.line() > 0 => (Some(l.line()), Some(l.column())),
        _ => (None, None),
    }
}

/// The first line of a parser message, without the position it repeats.
fn short_message(e: &serde_saphyr::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("").trim();
    let first = match first.find(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    let first = first.split(", set DuplicateKeyPolicy").next().unwrap_or(first);
    let first = first.trim_end_matches(['.', ':']);
    match first {
        "expected sequence start" => "must be a list".into(),
        "expected mapping start" => "must be a mapping".into(),
        other => other.to_string(),
    }
}

/// Parses an IaC document. Unparseable YAML is [`ParseError::Malformed`]
/// with its position; unknown fields, wrong types, missing fields and an
/// unsupported `version` are [`ParseError::Invalid`] with the YAML path
/// (`flows[1].config.mappings[0].sync_mode`) and, where the parser knows
/// them, line and column.
pub fn parse(text: &str) -> Result<Document, ParseError> {
    // Syntax first, so that a broken file is told apart from a wrong shape.
    let value: Value = serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
        let (line, column) = location(&e);
        ParseError::Malformed { message: short_message(&e), line, column }
    })?;
    if !value.is_object() {
        let found = match value {
            Value::Null => "an empty document",
            Value::Array(_) => "a list",
            _ => "a scalar",
        };
        return Err(ParseError::Invalid(vec![FieldError::new(
            "$",
            format!("must be a mapping with version, integrations, connections and flows; found {found}"),
        )]));
    }
    if let Some(at) = crate::shared::error::nul_in(&value, "$") {
        return Err(ParseError::Invalid(vec![FieldError::new(
            at.trim_start_matches("$.").to_string(),
            "must not contain a NUL character",
        )]));
    }
    let mut path = String::new();
    let doc: Document = serde_saphyr::with_deserializer_from_str_with_options(text, yaml_options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let (line, column) = location(&e);
        let message = short_message(&e);
        // Name the offending field itself where serde names it.
        let mut field = if path == "." { String::new() } else { path.clone() };
        if let Some(name) = backticked(&message).filter(|_| message.starts_with("missing field")) {
            field = if field.is_empty() { name.to_string() } else { format!("{field}.{name}") };
        }
        if field.is_empty() {
            field = "$".into();
        }
        let mut fe = FieldError::new(field, message);
        fe.line = line;
        fe.column = column;
        ParseError::Invalid(vec![fe])
    })?;
    if doc.version != VERSION {
        return Err(ParseError::Invalid(vec![FieldError::new(
            "version",
            format!("version '{}' is not supported; this server understands version \"{VERSION}\"", doc.version),
        )]));
    }
    Ok(doc)
}

fn backticked(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

/// Serializes a document as YAML.
///
/// # Errors
/// Only if a value cannot be represented, which the document's types rule out.
pub fn to_yaml(doc: &Document) -> Result<String, Error> {
    serde_saphyr::to_string(doc).map_err(|e| Error::Internal(anyhow::anyhow!("serializing the IaC document: {e}")))
}

// ---- diffs -----------------------------------------------------------------

/// One changed leaf of a resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffEntry {
    pub path: String,
    pub before: Value,
    pub after: Value,
}

/// The leaf-level differences between two JSON values: objects are compared
/// key by key, lists of equal length item by item; anything else is one
/// entry at its path.
pub fn diff(before: &Value, after: &Value) -> Vec<DiffEntry> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<DiffEntry>) {
        match (a, b) {
            _ if a == b => {}
            (Value::Object(x), Value::Object(y)) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(&p, x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), p, q, out);
                }
            }
            _ => out.push(DiffEntry { path: path.to_string(), before: a.clone(), after: b.clone() }),
        }
    }
    let mut out = Vec::new();
    walk("", before, after, &mut out);
    out
}

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

fn secret_diff(before: &Credentials, after: &Credentials, prefix: &str) -> Vec<DiffEntry> {
    let keys: BTreeSet<&String> = before.0.keys().chain(after.0.keys()).collect();
    keys.into_iter()
        .filter(|k| before.0.get(*k) != after.0.get(*k))
        .map(|k| DiffEntry {
            path: format!("{prefix}.{k}"),
            before: before.0.get(k).map_or(Value::Null, |_| PLACEHOLDER.into()),
            after: after.0.get(k).map_or(Value::Null, |_| PLACEHOLDER.into()),
        })
        .collect()
}

/// Names and ids of the resources the document may refer to.
struct Names {
    /// name → (id, type) for integrations.
    integrations: BTreeMap<String, (IntegrationId, String)>,
    /// name → (id, type, capability) for connections.
    connections: BTreeMap<String, (ConnectionId, String, Capability)>,
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
                .map(|c| (c.name.clone(), (c.id, c.connector_type.clone(), c.capability)))
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

    fn connection(&self, r: &str) -> Option<(ConnectionId, String, Capability)> {
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
        p.names.connections.entry(d.name.trim().to_string()).or_insert((*id, d.kind.clone(), d.capability));
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
            self.errors.extend(name_errors(&path, &d.name));
            if let Err(Error::Validation(f)) = check_schedule(d.schedule.as_deref()) {
                self.errors.extend(under(&path, f));
            }
            self.errors.extend(under(&path, check_config(&d.config)));
            let mut conn = |field: &str, r: &str, reads: bool| {
                let wanted = if reads { "a source" } else { "a destination" };
                match self.names.connection(r) {
                    None => {
                        self.errors.push(FieldError::new(
                            format!("{path}.{field}"),
                            format!("no connection '{r}' in the document or the organization"),
                        ));
                        None
                    }
                    Some((cid, kind, cap)) => {
                        let ok = if reads { cap.reads() } else { cap.writes() };
                        if !ok {
                            self.errors.push(FieldError::new(
                                format!("{path}.{field}"),
                                format!("'{r}' is a {}; it cannot be {wanted}", cap.as_str()),
                            ));
                        }
                        Some((cid, kind))
                    }
                }
            };
            let source = conn("source_connection", &d.source_connection, true);
            let dest = conn("destination_connection", &d.destination_connection, false);
            if let Some(spec) = dest.as_ref().and_then(|(_, kind)| self.registry.spec(kind)) {
                for (j, m) in d.config.mappings.iter().enumerate() {
                    if !spec.sync_modes.is_empty() && !spec.sync_modes.contains(&m.sync_mode.as_str()) {
                        self.errors.push(FieldError::new(
                            format!("{path}.config.mappings[{j}].sync_mode"),
                            format!("{} destinations do not support {}", spec.connector_type, m.sync_mode.as_str()),
                        ));
                    }
                }
            }
            let mut config = d.config.clone();
            self.errors.extend(resolve_dependencies(
                &format!("{path}."),
                *id,
                &mut config,
                |r| self.names.flow(r),
                "in the document or the organization",
            ));
            let (Some((src, _)), Some((dst, _))) = (source, dest) else { continue };
            let existing = self.find_f(&d.name);
            let status = d.status.or(existing.map(|e| e.status)).unwrap_or(FlowStatus::Active);
            let schedule = d.schedule.as_ref().map(|s| s.trim().to_string());
            let next_run_at = match (&schedule, status) {
                (Some(s), FlowStatus::Active) => next_run(s, self.now),
                _ => None,
            };
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

// ---- port -------------------------------------------------------------------

/// The conflict a stale plan gets from [`IacRepository::apply`].
pub fn stale_plan() -> Error {
    Error::Conflict {
        code: crate::shared::error::code::STALE_PLAN,
        message: "the organization changed while the apply was planned".into(),
    }
}

// ---- drift validation -------------------------------------------------------

/// A field of a proposed schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedField {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: FieldType,
    #[serde(default)]
    pub required: bool,
}

/// A field of the schema a flow syncs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentField {
    pub name: String,
    pub field_type: FieldType,
    pub required: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftType {
    Breaking,
    Evolution,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Impact {
    /// `field_removed`, `type_narrowed`, `became_required`,
    /// `required_field_added`, `primary_key_removed`, `cursor_field_removed`
    /// (breaking); `field_added`, `type_widened`, `became_optional` (evolution).
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
    pub affected_fields: Vec<String>,
}

impl Impact {
    pub fn breaking(&self) -> bool {
        !matches!(self.kind, "field_added" | "type_widened" | "became_optional")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    pub has_drift: bool,
    pub drift_type: DriftType,
    pub impacts: Vec<Impact>,
    pub suggested_actions: Vec<String>,
}

/// What the mapping that syncs the entity relies on.
#[derive(Debug, Clone, Default)]
pub struct MappingFacts<'a> {
    pub flow: &'a str,
    pub entity: &'a str,
    pub key_fields: Vec<&'a str>,
    pub cursor_field: Option<&'a str>,
    pub blocks_new_columns: bool,
}

/// Compares a proposed schema with the one a flow syncs. Breaking: a
/// removed field, a narrowed type, a field that became required, an added
/// required field, a removed primary-key or cursor field. Evolution: an
/// added optional field, a widened type (integer → number, anything →
/// string), a field that became optional.
pub fn compare_schemas(current: &[CurrentField], proposed: &[ProposedField], facts: &MappingFacts) -> DriftReport {
    let mut impacts = Vec::new();
    let one = |kind, message: String, field: &str| Impact { kind, message, affected_fields: vec![field.to_string()] };
    for c in current {
        match proposed.iter().find(|p| p.name == c.name) {
            None => {
                let (kind, what) = if facts.key_fields.contains(&c.name.as_str()) {
                    ("primary_key_removed", "primary-key field")
                } else if facts.cursor_field == Some(c.name.as_str()) {
                    ("cursor_field_removed", "cursor field")
                } else {
                    ("field_removed", "field")
                };
                impacts.push(one(kind, format!("{what} '{}' is removed", c.name), &c.name));
            }
            Some(p) => {
                if p.field_type != c.field_type {
                    let (kind, how) = if crate::catalog::contract::widens(c.field_type, p.field_type) {
                        ("type_widened", "widens")
                    } else {
                        ("type_narrowed", "changes incompatibly")
                    };
                    impacts.push(one(
                        kind,
                        format!("'{}' {how} from {} to {}", c.name, c.field_type.as_str(), p.field_type.as_str()),
                        &c.name,
                    ));
                }
                if p.required && !c.required {
                    impacts.push(one("became_required", format!("'{}' becomes required", c.name), &c.name));
                } else if !p.required && c.required {
                    impacts.push(one("became_optional", format!("'{}' becomes optional", c.name), &c.name));
                }
            }
        }
    }
    for p in proposed.iter().filter(|p| !current.iter().any(|c| c.name == p.name)) {
        if p.required {
            impacts.push(one(
                "required_field_added",
                format!(
                    "required field '{}' ({}) is added; rows already synced have no value",
                    p.name,
                    p.field_type.as_str()
                ),
                &p.name,
            ));
        } else {
            impacts.push(one(
                "field_added",
                format!("optional field '{}' ({}) is added", p.name, p.field_type.as_str()),
                &p.name,
            ));
        }
    }
    let breaking = impacts.iter().any(Impact::breaking);
    let drift_type = if breaking {
        DriftType::Breaking
    } else if impacts.is_empty() {
        DriftType::None
    } else {
        DriftType::Evolution
    };
    let mut actions = Vec::new();
    if breaking {
        actions.push(format!(
            "pause flow '{}' before the source changes, and resume it once the destination is adapted",
            facts.flow
        ));
        let names = |k: &str| -> Vec<String> {
            impacts.iter().filter(|i| i.kind == k).flat_map(|i| i.affected_fields.clone()).collect()
        };
        if !names("primary_key_removed").is_empty() {
            actions.push(format!("choose a new primary_key for '{}': de-duplication needs one", facts.entity));
        }
        if !names("cursor_field_removed").is_empty() {
            actions.push(format!(
                "choose a new cursor_field for '{}' and reset its cursor (DELETE …/state/{})",
                facts.entity, facts.entity
            ));
        }
        let narrowed = names("type_narrowed");
        if !narrowed.is_empty() {
            actions.push(format!(
                "add a cast step to the mapping for {} or recreate the destination table",
                narrowed.join(", ")
            ));
        }
        let removed = names("field_removed");
        if !removed.is_empty() {
            actions.push(format!(
                "update consumers of {}: the destination keeps the column, new rows leave it empty",
                removed.join(", ")
            ));
        }
    } else if drift_type == DriftType::Evolution {
        if facts.blocks_new_columns && impacts.iter().any(|i| i.kind == "field_added") {
            actions.push(format!(
                "the mapping of '{}' has schema_policy block_on_new_column: set allow_all, or the next run stops as drift_detected",
                facts.entity
            ));
        } else {
            actions.push("no action needed: the destination gains new columns and wider types on the next run".into());
        }
    }
    DriftReport { has_drift: !impacts.is_empty(), drift_type, impacts, suggested_actions: actions }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::connector::{ConfigField, ConfigFieldType};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-21 12:00 UTC);

    fn field(name: &'static str, credential: bool, required: bool) -> ConfigField {
        ConfigField { name, field_type: ConfigFieldType::String, required, credential, default: None, description: "" }
    }

    fn registry() -> Catalogue {
        let db = |t: &'static str, caps: Vec<Capability>, modes: Vec<&'static str>| ConnectorSpec {
            connector_type: t,
            title: t,
            capabilities: caps,
            config_fields: vec![
                field("host", false, true),
                field("database", false, true),
                field("user", false, false),
                field("password", true, false),
            ],
            sync_modes: modes,
            features: vec![],
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
    fn versions_are_checked_and_a_bare_number_is_accepted() {
        assert_eq!(parse("version: 1").unwrap().version, "1");
        assert_eq!(
            parse("version: '1'\nflows: []").unwrap(),
            Document { version: "1".into(), integrations: vec![], connections: vec![], flows: vec![] }
        );
        let ParseError::Invalid(e) = parse("version: '2'").unwrap_err() else { panic!() };
        assert_eq!(e[0].field, "version");
        let ParseError::Invalid(e) = parse("integrations: []").unwrap_err() else { panic!() };
        assert_eq!((e[0].field.as_str(), e[0].message.as_str()), ("version", "missing field `version`"));
    }

    #[test]
    fn broken_yaml_is_malformed_with_its_position() {
        let e = parse("version: 1\nflows: [\n").unwrap_err();
        let ParseError::Malformed { line, column, .. } = e else { panic!("{e:?}") };
        assert_eq!(line, Some(2), "where the unclosed bracket opens");
        assert!(column.is_some());
        let e = parse("version: 1\nversion: 1\n").unwrap_err();
        let ParseError::Malformed { message, line, .. } = e else { panic!("{e:?}") };
        assert!(message.contains("duplicate"), "{message}");
        assert_eq!(line, Some(2));
    }

    #[test]
    fn wrong_shapes_name_their_yaml_path_line_and_column() {
        let cases = [
            (
                "version: '1'\nintegrations:\n  - name: a\n    type: postgres\n    colour: red\n",
                "integrations[0].colour",
                5,
            ),
            (
                "version: '1'\nflows:\n  - name: a\n    source_connection: s\n    destination_connection: d\n    config:\n      mappings:\n        - source_entity: x\n          sync_mode: sometimes\n",
                "flows[0].config.mappings[0].sync_mode",
                9,
            ),
            ("version: '1'\nconnections:\n  - name: a\n    type: postgres\n", "connections[0].capability", 4),
            ("version: '1'\nconnections: 5\n", "connections", 2),
            ("version: '1'\nconnections:\n  - name: [1, 2]\n", "connections[0].name", 3),
        ];
        for (text, path, line) in cases {
            let ParseError::Invalid(e) = parse(text).unwrap_err() else { panic!("{text}") };
            assert_eq!(e[0].field, path, "{text}");
            assert_eq!(e[0].line, Some(line), "{text}");
            assert!(e[0].column.is_some());
        }
        let ParseError::Invalid(e) = parse("- a\n- b\n").unwrap_err() else { panic!() };
        assert_eq!(e[0].field, "$");
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

    #[test]
    fn diffs_walk_objects_and_equal_length_lists() {
        let d = diff(&json!({"a": 1, "b": [1, 2], "c": {"x": 1}}), &json!({"a": 1, "b": [1, 3], "c": {}, "d": true}));
        let paths: Vec<&str> = d.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["b[1]", "c.x", "d"]);
        assert_eq!(diff(&json!([1]), &json!([1, 2]))[0].path, "");
    }

    fn cur(name: &str, t: FieldType, required: bool) -> CurrentField {
        CurrentField { name: name.into(), field_type: t, required }
    }

    fn prop(name: &str, t: FieldType, required: bool) -> ProposedField {
        ProposedField { name: name.into(), field_type: t, required }
    }

    #[test]
    fn drift_is_classified_field_by_field() {
        let current = [
            cur("id", FieldType::Integer, true),
            cur("updated_at", FieldType::Timestamp, true),
            cur("amount", FieldType::Integer, false),
            cur("note", FieldType::String, false),
        ];
        let facts = MappingFacts {
            flow: "orders",
            entity: "orders",
            key_fields: vec!["id"],
            cursor_field: Some("updated_at"),
            blocks_new_columns: false,
        };
        let same: Vec<ProposedField> = current.iter().map(|c| prop(&c.name, c.field_type, c.required)).collect();
        let r = compare_schemas(&current, &same, &facts);
        assert_eq!((r.has_drift, r.drift_type), (false, DriftType::None));
        assert!(r.suggested_actions.is_empty());

        let mut evolved = same.clone();
        evolved[2].field_type = FieldType::Number;
        evolved.push(prop("currency", FieldType::String, false));
        let r = compare_schemas(&current, &evolved, &facts);
        assert_eq!(r.drift_type, DriftType::Evolution);
        let kinds: Vec<&str> = r.impacts.iter().map(|i| i.kind).collect();
        assert_eq!(kinds, ["type_widened", "field_added"]);
        assert_eq!(r.impacts[1].affected_fields, ["currency"]);

        let broken = vec![
            prop("updated_at", FieldType::Timestamp, true),
            prop("amount", FieldType::Boolean, true),
            prop("region", FieldType::String, true),
        ];
        let r = compare_schemas(&current, &broken, &facts);
        assert_eq!(r.drift_type, DriftType::Breaking);
        let kinds: Vec<&str> = r.impacts.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            ["primary_key_removed", "type_narrowed", "became_required", "field_removed", "required_field_added"]
        );
        assert!(r.suggested_actions.iter().any(|a| a.contains("primary_key")));
        let without_cursor = vec![prop("id", FieldType::Integer, true)];
        let r = compare_schemas(&current, &without_cursor, &facts);
        assert!(r.impacts.iter().any(|i| i.kind == "cursor_field_removed"));
        assert!(r.suggested_actions.iter().any(|a| a.contains("reset its cursor")));
    }

    #[test]
    fn a_blocking_schema_policy_is_pointed_out() {
        let current = [cur("id", FieldType::Integer, true)];
        let facts = MappingFacts { flow: "f", entity: "t", blocks_new_columns: true, ..Default::default() };
        let r = compare_schemas(
            &current,
            &[prop("id", FieldType::Integer, true), prop("x", FieldType::Date, false)],
            &facts,
        );
        assert_eq!(r.drift_type, DriftType::Evolution);
        assert!(r.suggested_actions[0].contains("block_on_new_column"));
    }
}
