//! Connections: the list, a new connection, and one connection's page
//! with test, discovery, preview, and its settings edited (a form built
//! from the connector's fields, or the JSON).

use crate::page::{
    Empty, LOOKUP, OrgCtx, PageError, PageResult, Paging, Post, Problems, Session, badge, button, csrf, error_box,
    json_block, notice, page, pager, redirect, urlencode, when_opt,
};
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use sluice_domain::FieldError;
use sluice_domain::connect::connection::Connection;
use sluice_domain::connect::connector::{ConfigFieldType, ConnectorSpec};
use sluice_domain::connect::service::{ConnectionUpdate, NewConnection, PreviewRequest};
use sluice_domain::shared::error::Code;
use sluice_domain::shared::ids::{ConnectionId, IntegrationId};
use sluice_http::AppState;
use sluice_http::error::ApiError;
use std::collections::BTreeMap;
use uuid::Uuid;

/// A config template for a connector: its fields with their defaults.
fn template(spec: &ConnectorSpec) -> String {
    let fields: serde_json::Map<String, Value> = spec
        .config_fields
        .iter()
        .filter(|f| f.required || f.default.is_some())
        .map(|f| (f.name.to_string(), f.default.clone().unwrap_or(Value::String(String::new()))))
        .collect();
    serde_json::to_string_pretty(&fields).unwrap_or_default()
}

/// `GET /o/{org}/connections`.
pub async fn list(
    state: Data<AppState>,
    s: Session,
    org: Path<Uuid>,
    q: Query<Paging>,
    picked: Query<TypeQuery>,
) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let form = picked.connector_type.clone().map(|t| ConnectionForm { connector_type: t, ..Default::default() });
    list_page(&state, &s, &ctx, &q, Said::Nothing, form.as_ref()).await
}

/// `?type=`: the connector type whose fields the new-connection form
/// shows.
#[derive(Deserialize)]
pub struct TypeQuery {
    #[serde(rename = "type")]
    connector_type: Option<String>,
}

async fn list_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    q: &Paging,
    said: Said<'_>,
    form: Option<&ConnectionForm>,
) -> PageResult {
    let p = &s.caller.principal;
    let listed = state.sluice.connect.list_connections(p, ctx.id(), q.request()).await?;
    let connections = listed.items;
    let integrations = state.sluice.connect.list_integrations(p, ctx.id(), LOOKUP).await?.items;
    let picked_integration = form.and_then(|f| f.integration_id);
    let specs = state.sluice.connect.connector_specs();
    let picked = form.map_or("postgres", |f| f.connector_type.as_str());
    let spec = specs.iter().find(|sp| sp.connector_type == picked);
    let problems = match &said {
        Said::Problem(e) => Problems::of(Some(e)),
        _ => Problems::default(),
    };
    // Refused as JSON: the problems go with the JSON, not the fields.
    let as_json = form.is_some_and(|f| !f.config.trim().is_empty());
    let none = Problems::default();
    let (field_problems, json_problems) = if as_json { (&none, &problems) } else { (&problems, &none) };
    let body = html! {
        (crate::integrations::tabs(ctx, "/connections"))
        @if connections.is_empty() { p.muted { "No connections yet." } } @else {
            table {
                thead { tr { th { "Name" } th { "Type" } th { "Use" } th { "Status" } th { "Last tested" } } }
                tbody { @for c in &connections { tr {
                    td { a href=(ctx.at(&format!("/connections/{}", c.id))) { (c.name) } }
                    td { (c.connector_type) } td { (c.capability.as_str()) }
                    td { (badge(c.status.as_str())) } td { (when_opt(c.last_tested_at)) }
                } } }
            }
            (pager(&ctx.at("/connections"), q.after, listed.next_cursor.as_deref()))
        }
        @if ctx.can_write() {
            h2 #new { "New connection" }
            @match said {
                Said::Nothing => {}
                Said::Notice(text) => (notice(&text)),
                Said::Problem(e) => (error_box(e)),
            }
            // The type first: the form below shows its fields.
            form.grid.pick method="get" action=(format!("{}#new", ctx.at("/connections"))) {
                label for="conn-type" { "Type" }
                select #conn-type name="type" data-autosubmit {
                    @for sp in &specs {
                        option value=(sp.connector_type) selected[sp.connector_type == picked] { (sp.title) }
                    }
                }
                noscript { span {} button { "Show its fields" } }
            }
            form.grid method="post" action=(ctx.at("/connections")) {
                (csrf(s))
                input type="hidden" name="connector_type" value=(picked);
                label for="conn-name" { "Name" }
                span {
                    input #conn-name name="name" required maxlength="100" value=[form.map(|f| f.name.as_str())]
                        aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "conn-name")];
                    (problems.note("name", "conn-name"))
                }
                label for="conn-integration" { "Integration" }
                select #conn-integration name="integration_id" {
                    option value="" { "None: credentials in the configuration" }
                    @for i in &integrations {
                        option value=(i.id) selected[picked_integration == Some(i.id.as_uuid())] { (i.name) " (" (i.integration_type) ")" }
                    }
                }
                @if let Some(spec) = spec {
                    (spec_fields(spec, "conn", |name| form.and_then(|f| f.fields.get(name).cloned()), |_| false, field_problems))
                }
                details.wide open[as_json] {
                    summary { "Or write the configuration as JSON" }
                    div.grid {
                        label for="conn-config" { "Configuration (JSON)" }
                        span {
                            textarea #conn-config name="config" rows="9" spellcheck="false"
                                placeholder=(spec.map(template).unwrap_or_default())
                                aria-invalid=[json_problems.invalid("config")] aria-describedby=[json_problems.described("config", "conn-config")] {
                                (form.map_or("", |f| f.config.as_str()))
                            }
                            (json_problems.note("config", "conn-config"))
                            br; small.hint { "Written here, it is used instead of the fields above." }
                        }
                    }
                }
                span {}
                div.row {
                    button.primary name="action" value="create" { "Create" }
                    button name="action" value="test" { "Test without saving" }
                }
            }
        }
    };
    Ok(page(ctx, s, "/connections", "Connections", body))
}

/// The new-connection form: its type, name and integration, the
/// configuration as the spec's fields (`cfg.<name>`) or as JSON.
#[derive(Default)]
pub struct ConnectionForm {
    name: String,
    connector_type: String,
    /// The JSON, when written; it wins over the fields.
    config: String,
    /// The spec's fields by name, as typed.
    fields: BTreeMap<String, String>,
    integration_id: Option<Uuid>,
    action: String,
}

impl ConnectionForm {
    fn from_pairs(pairs: BTreeMap<String, String>) -> Result<Self, ApiError> {
        let mut f = ConnectionForm::default();
        for (k, v) in pairs {
            match k.as_str() {
                "name" => f.name = v,
                "connector_type" => f.connector_type = v,
                "config" => f.config = v,
                "action" => f.action = v,
                "integration_id" if v.is_empty() => {}
                "integration_id" => {
                    f.integration_id = Some(Uuid::parse_str(&v).map_err(|_| {
                        ApiError::validation(vec![FieldError::new("integration_id", "pick an integration")])
                    })?)
                }
                other => {
                    if let Some(name) = other.strip_prefix("cfg.") {
                        f.fields.insert(name.to_string(), v);
                    }
                }
            }
        }
        Ok(f)
    }

    /// The configuration: the JSON if written, else the fields typed in.
    fn configuration(&self, spec: Option<&ConnectorSpec>) -> Result<BTreeMap<String, Value>, ApiError> {
        if !self.config.trim().is_empty() {
            return parse_config(&self.config);
        }
        let mut config = BTreeMap::new();
        for f in spec.iter().flat_map(|sp| &sp.config_fields) {
            let raw = self.fields.get(f.name).map_or("", String::as_str);
            if let Some(v) = typed(f.field_type, raw) {
                config.insert(f.name.to_string(), v);
            }
        }
        Ok(config)
    }
}

fn parse_config(text: &str) -> Result<BTreeMap<String, Value>, ApiError> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_json::from_str(text)
        .map_err(|e| ApiError::validation(vec![FieldError::new("config", format!("must be a JSON object: {e}"))]))
}

/// Configuration JSON as sent back into a page: every credential's value
/// replaced by `placeholder` (a typed secret never returns to the page).
/// Text that is no JSON object is returned as it is, for the user to fix
/// the error the page names.
fn without_credentials(spec: Option<&ConnectorSpec>, text: &str, placeholder: &str) -> String {
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str::<Value>(text) else { return text.to_string() };
    let mut hidden = false;
    for c in spec.iter().flat_map(|sp| sp.credential_fields()) {
        if let Some(v) = map.get_mut(c) {
            *v = Value::String(placeholder.to_string());
            hidden = true;
        }
    }
    if hidden { serde_json::to_string_pretty(&map).unwrap_or_default() } else { text.to_string() }
}

/// A field's typed-in text as its type's value; `None` when left empty
/// (a checkbox left unticked is `false`).
fn typed(t: ConfigFieldType, raw: &str) -> Option<Value> {
    match t {
        ConfigFieldType::Boolean => Some(Value::Bool(raw == "true")),
        _ if raw.trim().is_empty() => None,
        // Not a number: sent as text, and refused as the field's type.
        ConfigFieldType::Integer => {
            Some(raw.trim().parse::<i64>().map_or_else(|_| Value::String(raw.into()), Value::from))
        }
        ConfigFieldType::String => Some(Value::String(raw.into())),
        // JSON typed in (`{"type": "sqlite", ...}`); not JSON: sent as text,
        // and refused as the field's type.
        ConfigFieldType::Object => {
            Some(serde_json::from_str::<Value>(raw.trim()).unwrap_or_else(|_| Value::String(raw.into())))
        }
    }
}

/// A connector's settings as a form: one input per field of its spec,
/// typed (numbers, a checkbox, password inputs for credentials), with its
/// help and its problem. `value` is a field's shown value, `stored`
/// whether a credential is stored (left empty, it is kept).
fn spec_fields(
    spec: &ConnectorSpec,
    prefix: &str,
    value: impl Fn(&str) -> Option<String>,
    stored: impl Fn(&str) -> bool,
    problems: &Problems,
) -> Markup {
    html! {
        @for f in &spec.config_fields {
            @let id = format!("{prefix}-{}", f.name);
            @let name = format!("cfg.{}", f.name);
            @let path = format!("config.{}", f.name);
            @let hint = format!("{id}-hint");
            @let described = problems.described(&path, &id).unwrap_or_default();
            @let described = format!("{described} {hint}").trim().to_string();
            label for=(id) { (f.name.replace('_', " ")) @if f.required && f.default.is_none() { " *" } }
            span {
                @if f.credential {
                    input id=(id) name=(name) type="password" autocomplete="new-password"
                        placeholder=(if stored(f.name) { "stored: leave empty to keep it" } else { "" })
                        aria-invalid=[problems.invalid(&path)] aria-describedby=(described);
                } @else if f.field_type == ConfigFieldType::Boolean {
                    @let on = value(f.name).or_else(|| f.default.as_ref().map(|d| d.to_string()));
                    input id=(id) name=(name) type="checkbox" value="true" checked[on.as_deref() == Some("true")]
                        aria-invalid=[problems.invalid(&path)] aria-describedby=(described);
                } @else {
                    @let default = f.default.as_ref().map(|d| match d { Value::String(s) => s.clone(), other => other.to_string() });
                    input id=(id) name=(name) type=(if f.field_type == ConfigFieldType::Integer { "number" } else { "text" })
                        value=[value(f.name)] placeholder=[default]
                        aria-invalid=[problems.invalid(&path)] aria-describedby=(described);
                }
                (problems.note(&path, &id))
                small.hint.block id=(hint) { (f.description) }
            }
        }
    }
}

/// `POST /o/{org}/connections`: creates it, or tests it unsaved.
pub async fn create(state: Data<AppState>, post: Post<BTreeMap<String, String>>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let mut f = ConnectionForm::from_pairs(post.form.clone())?;
    // A credential typed in is never written back into the page.
    let spec = state.sluice.connect.connector_spec(&f.connector_type);
    let config = f.configuration(spec.as_ref());
    for c in spec.iter().flat_map(|sp| sp.credential_fields()) {
        f.fields.remove(c);
    }
    f.config = without_credentials(spec.as_ref(), &f.config, "");
    let f = &f;
    let q = Paging::default();
    let config = match config {
        Ok(c) => c,
        Err(e) => return crate::page::failed(list_page(&state, s, &ctx, &q, Said::Problem(&e), Some(f)).await, &e),
    };
    let new = NewConnection {
        name: f.name.clone(),
        integration_id: f.integration_id.map(IntegrationId::from),
        connector_type: f.connector_type.clone(),
        capability: state.sluice.connect.default_capability(&f.connector_type),
        config,
    };
    if f.action == "test" {
        let outcome = state.sluice.connect.test_unsaved_connection(&s.caller.principal, ctx.id(), new).await;
        let said = match outcome {
            Ok(o) if o.ok => Said::Notice(format!("Connected in {} ms.", o.latency_ms)),
            Ok(o) => {
                let code = o.error_code.map_or("failed", Code::as_str);
                let e = ApiError::new(
                    o.error_code.unwrap_or(Code::ConnectorError),
                    format!("{code}: {}", o.error.unwrap_or_default()),
                );
                return list_page(&state, s, &ctx, &q, Said::Problem(&e), Some(f)).await;
            }
            Err(e) => return list_page(&state, s, &ctx, &q, Said::Problem(&e.into()), Some(f)).await,
        };
        return list_page(&state, s, &ctx, &q, said, Some(f)).await;
    }
    match state.sluice.connect.create_connection(&s.caller.principal, ctx.id(), new).await {
        Ok(c) => Ok(redirect(&ctx.at(&format!("/connections/{}", c.id)))),
        Err(e) => {
            let e: ApiError = e.into();
            crate::page::failed(list_page(&state, s, &ctx, &q, Said::Problem(&e), Some(f)).await, &e)
        }
    }
}

/// What the connections page says above its form: a test's outcome, or
/// why the form was refused.
enum Said<'a> {
    Nothing,
    Notice(String),
    Problem(&'a ApiError),
}

/// What a connection's page shows below its facts.
enum Panel {
    None,
    /// The edit was refused: why, with the form as sent.
    Refused(ApiError, BTreeMap<String, String>),
    /// The delete was refused: why, and the flows that use the connection
    /// (id, name).
    InUse(ApiError, Vec<(Uuid, String)>),
    Tested(Result<sluice_domain::connect::service::TestOutcome, ApiError>),
    Discovered(Result<Vec<sluice_domain::shared::record::EntitySchema>, ApiError>),
    Preview(Result<sluice_domain::connect::service::Preview, ApiError>),
}

async fn detail_page(state: &AppState, s: &Session, ctx: &OrgCtx, c: Connection, panel: Panel) -> PageResult {
    let at = ctx.at(&format!("/connections/{}", c.id));
    let integration = match c.integration_id {
        Some(i) => state.sluice.connect.get_integration(&s.caller.principal, ctx.id(), i).await.ok(),
        None => None,
    };
    let config = serde_json::to_value(&c.config).unwrap_or_default();
    let left = state.sluice.sync.streams_left(&s.caller.principal, ctx.id(), c.id).await.unwrap_or_default();
    let body = html! {
        @if !left.is_empty() {
            section.left-streams role="alert" {
                h2 { "Change streams left on this source" }
                p { "These flows were deleted or moved while this source could not be reached: their replication slots \
                     are still there, keeping its log. Sluice tries again to drop them every few seconds." }
                table.compact {
                    thead { tr { th { "Flow" } th { "Replication slot" } th { "Since" } th { "Tries" } th { "Last error" } } }
                    tbody { @for d in &left { tr {
                        td { (d.flow_name) } td { code { "sluice_" (d.stream) } } td { (when_opt(Some(d.created_at))) }
                        td { (d.attempts) } td.error { (d.error) }
                    } } }
                }
            }
        }
        dl.facts {
            dt { "Type" } dd { (c.connector_type) }
            @if let Some(i) = &integration {
                dt { "Integration" } dd { a href=(ctx.at(&format!("/integrations/{}", i.id))) { (i.name) } }
            }
            dt { "Use" } dd { (c.capability.as_str()) }
            dt { "Status" } dd { (badge(c.status.as_str())) }
            dt { "Last tested" } dd { (when_opt(c.last_tested_at)) }
            @if let Some(e) = &c.last_error { dt { "Last error" } dd.error { (e) } }
        }
        details { summary { "Configuration" } (json_block(&config)) p.hint { "Credentials are stored encrypted and never shown." } }
        @if ctx.can_write() {
            @let (sent, problems) = match &panel {
                Panel::Refused(e, sent) => (Some(sent), Problems::of(Some(e))),
                _ => (None, Problems::default()),
            };
            (edit_form(state, s, &at, &c, sent, &problems))
        }
        div.row {
            @if ctx.can_write() { (button(s, &format!("{at}/test"), "Test", "primary", None)) }
            (button(s, &format!("{at}/discover"), "Discover", "", None))
            @if ctx.can_write() {
                (button(s, &format!("{at}/delete"), "Delete", "danger", Some("Delete this connection? Flows using it stop working.")))
            }
        }
        @match panel {
            Panel::None => {}
            Panel::Refused(e, _) => { (error_box(&e)) }
            Panel::InUse(e, users) => {
                (error_box(&e))
                @if !users.is_empty() {
                    p { "Used by these flows: delete them, or point them to another connection, first." }
                    ul.users { @for (id, name) in &users { li { a href=(ctx.at(&format!("/flows/{id}"))) { (name) } } } }
                }
            }
            Panel::Tested(Ok(o)) => {
                @if o.ok {
                    (notice(&format!("Connected in {} ms.", o.latency_ms)))
                    @if let Some(cdc) = &o.cdc {
                        @if cdc.ready { p.cdc { "Change data capture: ready." } }
                        @else {
                            p.cdc { "Change data capture: not yet, because" }
                            ul.cdc { @for r in &cdc.reasons { li { (r) } } }
                        }
                    }
                }
                @else { p.error role="alert" { strong { (o.error_code.map_or("failed", Code::as_str)) } ": " (o.error.unwrap_or_default()) } }
            }
            Panel::Tested(Err(e)) | Panel::Discovered(Err(e)) | Panel::Preview(Err(e)) => { (error_box(&e)) }
            Panel::Discovered(Ok(entities)) => {
                h2 { "Entities" }
                @if entities.is_empty() { p.muted { "No entities found." } }
                @for e in &entities {
                    details.entity {
                        summary { strong { (e.name) } span.muted { " " (e.fields.len()) " fields" } }
                        table.compact {
                            thead { tr { th { "Field" } th { "Type" } th { "Nullable" } th { "Key" } } }
                            tbody { @for fl in &e.fields { tr {
                                td { code { (fl.name) } } td { (fl.native_type.clone().unwrap_or_else(|| format!("{:?}", fl.field_type).to_lowercase())) }
                                td { (if fl.nullable { "yes" } else { "" }) } td { (if fl.primary_key { "primary" } else { "" }) }
                            } } }
                        }
                        form.inline.preview method="get" action=(at) {
                            input type="hidden" name="preview" value=(e.name);
                            button { "Preview rows" }
                        }
                        @if ctx.can_write() { (sync_link(ctx, &c, &e.name)) }
                    }
                }
            }
            Panel::Preview(Ok(p)) => {
                h2 { "Preview of " code { (p.entity) } }
                div.scroll {
                    table.compact.preview {
                        thead { tr { @for f in p.batch.fields.iter() { th { (f.name) } } } }
                        tbody { @for row in &p.batch.rows { tr { @for v in row { td { (cell(&v.to_json())) } } } } }
                    }
                }
                p.hint { (p.batch.rows.len()) " sample rows." }
                @if ctx.can_write() { p { (sync_link(ctx, &c, &p.entity)) } }
            }
        }
    };
    Ok(page(ctx, s, "/connections", &c.name.clone(), body))
}

/// The connection's settings as a form built from its connector's fields
/// (a password input for each credential: left empty, the stored one is
/// kept; it is never sent back), and as JSON for the rest.
fn edit_form(
    state: &AppState,
    s: &Session,
    at: &str,
    c: &Connection,
    sent: Option<&BTreeMap<String, String>>,
    problems: &Problems,
) -> Markup {
    let spec = state.sluice.connect.connector_spec(&c.connector_type);
    let shown = |name: &str| -> Option<String> {
        match sent {
            Some(sent) => sent.get(&format!("cfg.{name}")).cloned(),
            None => c.config.get(name).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
        }
    };
    let public = serde_json::to_string_pretty(&c.public_config()).unwrap_or_default();
    // Refused as JSON: the problems go with the JSON, not the fields.
    let json = sent.is_some_and(|f| f.get("mode").map(String::as_str) == Some("json"));
    let none = Problems::default();
    let problems = if json { &none } else { problems };
    html! {
        details.edit open[sent.is_some()] {
            summary { "Edit settings" }
            form.grid method="post" action=(at) {
                (csrf(s))
                label for="edit-name" { "Name" }
                span {
                    input #edit-name name="name" required maxlength="100"
                        value=(sent.and_then(|f| f.get("name")).cloned().unwrap_or_else(|| c.name.clone()))
                        aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "edit-name")];
                    (problems.note("name", "edit-name"))
                }
                @if let Some(spec) = &spec {
                    (spec_fields(spec, "edit", shown, |name| c.secrets.0.contains_key(name), problems))
                }
                span {}
                div.row { button.primary { "Save" } }
            }
            details open[json] {
                summary { "Edit as JSON" }
                form.grid method="post" action=(at) {
                    (csrf(s))
                    input type="hidden" name="mode" value="json";
                    label for="edit-json" { "Configuration (JSON; \"***\" keeps a stored credential)" }
                    span {
                        textarea #edit-json name="config" rows="9" spellcheck="false"
                            aria-invalid=[problems.invalid("config").filter(|_| json)] aria-describedby=[problems.described("config", "edit-json").filter(|_| json)] {
                            (sent.and_then(|f| f.get("config")).cloned().unwrap_or(public))
                        }
                        @if json { (problems.note("config", "edit-json")) }
                    }
                    span {}
                    div.row { button.primary { "Save" } }
                }
            }
        }
    }
}

/// The update a sent edit form asks for: by the connector's fields (an
/// empty credential keeps the stored one; an empty setting is removed), or
/// the JSON as sent.
fn update_of(spec: Option<&ConnectorSpec>, form: &BTreeMap<String, String>) -> Result<ConnectionUpdate, ApiError> {
    if form.get("mode").map(String::as_str) == Some("json") {
        let config = parse_config(form.get("config").map_or("", String::as_str))?;
        return Ok(ConnectionUpdate { name: None, integration_id: None, capability: None, config: Some(config) });
    }
    let mut config = BTreeMap::new();
    for f in spec.iter().flat_map(|sp| &sp.config_fields) {
        let raw = form.get(&format!("cfg.{}", f.name)).map_or("", String::as_str);
        if f.credential && raw.is_empty() {
            continue;
        }
        // Emptied: the setting is cleared (its default applies).
        config.insert(f.name.to_string(), typed(f.field_type, raw).unwrap_or(Value::Null));
    }
    Ok(ConnectionUpdate {
        name: form.get("name").cloned(),
        integration_id: None,
        capability: None,
        config: Some(config),
    })
}

/// `POST /o/{org}/connections/{id}`: saves the edited settings.
pub async fn update(
    state: Data<AppState>,
    post: Post<BTreeMap<String, String>>,
    path: Path<(Uuid, Uuid)>,
) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, c) = load(&state, s, org, id).await?;
    let spec = state.sluice.connect.connector_spec(&c.connector_type);
    let mut sent = post.form.clone();
    sent.remove("csrf");
    // A credential typed in is never written back into the page.
    for f in spec.iter().flat_map(|sp| &sp.config_fields).filter(|f| f.credential) {
        sent.remove(&format!("cfg.{}", f.name));
    }
    if let Some(json) = sent.get_mut("config") {
        // "***" keeps the stored credential when the form is sent again.
        *json = without_credentials(spec.as_ref(), json, crate::page::REDACTED);
    }
    let saved = match update_of(spec.as_ref(), &post.form) {
        Ok(update) => state
            .sluice
            .sync
            .update_connection(&s.caller.principal, ctx.id(), c.id, update)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match saved {
        Ok(c) => Ok(crate::page::redirect_saying(
            &post.session,
            &ctx.at(&format!("/connections/{}", c.id)),
            "Saved. Test the connection to check the new settings.",
        )),
        Err(e) => {
            let status = e.status();
            let mut res = detail_page(&state, s, &ctx, c, Panel::Refused(e, sent)).await?;
            *res.status_mut() = status;
            Ok(res)
        }
    }
}

/// To a new flow reading `entity` from this connection.
fn sync_link(ctx: &OrgCtx, c: &Connection, entity: &str) -> Markup {
    html! {
        a.button.sync-entity href=(ctx.at(&format!("/flows/new?source={}&entity={}", c.id, urlencode(entity)))) { "Sync this entity…" }
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "∅".into(),
        Value::String(s) => s.chars().take(120).collect(),
        other => other.to_string().chars().take(120).collect(),
    }
}

async fn load(state: &AppState, s: &Session, org: Uuid, id: Uuid) -> Result<(OrgCtx, Connection), PageError> {
    let ctx = OrgCtx::load(state, s, org).await?;
    let c = state.sluice.connect.get_connection(&s.caller.principal, ctx.id(), ConnectionId::from(id)).await?;
    Ok((ctx, c))
}

/// `GET /o/{org}/connections/{id}`.
pub async fn detail(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>, q: Query<DetailQuery>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, c) = load(&state, &s, org, id).await?;
    // `?preview=<entity>`: sample rows, read-only, so a page of its own
    // that reloads and bookmarks.
    let panel = match q.preview.as_deref().filter(|e| !e.is_empty()) {
        Some(entity) => {
            let request = PreviewRequest { connection: c.id, entity: entity.to_string(), limit: Some(20) };
            let p = state.sluice.connect.preview(&s.caller.principal, ctx.id(), &request).await;
            Panel::Preview(p.map_err(Into::into))
        }
        None => Panel::None,
    };
    detail_page(&state, &s, &ctx, c, panel).await
}

/// A connection page's query: the entity to preview.
#[derive(Deserialize)]
pub struct DetailQuery {
    preview: Option<String>,
}

/// `POST /o/{org}/connections/{id}/test`.
pub async fn test(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, _) = load(&state, s, org, id).await?;
    let outcome = state.sluice.connect.test_connection(&s.caller.principal, ctx.id(), ConnectionId::from(id)).await;
    // Reloaded: the test recorded its outcome on the connection.
    let c = state.sluice.connect.get_connection(&s.caller.principal, ctx.id(), ConnectionId::from(id)).await?;
    detail_page(&state, s, &ctx, c, Panel::Tested(outcome.map_err(Into::into))).await
}

/// `POST /o/{org}/connections/{id}/discover`.
pub async fn discover(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, c) = load(&state, s, org, id).await?;
    let found = state.sluice.connect.discover(&s.caller.principal, ctx.id(), c.id).await;
    detail_page(&state, s, &ctx, c, Panel::Discovered(found.map_err(Into::into))).await
}

#[derive(Deserialize)]
pub struct PreviewForm {
    entity: String,
}

/// `POST /o/{org}/connections/{id}/preview` (older pages): to the
/// connection's page with `?preview=`.
pub async fn preview(state: Data<AppState>, post: Post<PreviewForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, c) = load(&state, &post.session, org, id).await?;
    Ok(redirect(&ctx.at(&format!("/connections/{}?preview={}", c.id, urlencode(&post.form.entity)))))
}

/// `POST /o/{org}/connections/{id}/delete`.
pub async fn delete(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, c) = load(&state, s, org, id).await?;
    let e: ApiError = match state.sluice.connect.delete_connection(&s.caller.principal, ctx.id(), c.id).await {
        Ok(()) => return Ok(redirect(&ctx.at("/connections"))),
        Err(e) => e.into(),
    };
    // Refused while flows use it: which, with links, never a dead end.
    let users = match e.code {
        Code::InUse => flows_using(&state, s, &ctx, c.id).await,
        _ => Vec::new(),
    };
    let status = e.status();
    let mut res = detail_page(&state, s, &ctx, c, Panel::InUse(e, users)).await?;
    *res.status_mut() = status;
    Ok(res)
}

/// The flows of the organization that read or write `id` (id, name), from
/// its first pages of flows.
async fn flows_using(state: &AppState, s: &Session, ctx: &OrgCtx, id: ConnectionId) -> Vec<(Uuid, String)> {
    let mut users = Vec::new();
    let mut page = LOOKUP;
    for _ in 0..10 {
        let Ok(listed) = state.sluice.sync.list_flows(&s.caller.principal, ctx.id(), None, page).await else {
            break;
        };
        users.extend(
            listed
                .items
                .iter()
                .filter(|f| f.source_connection_id == id || f.destination_connection_id == id)
                .map(|f| (f.id.as_uuid(), f.name.clone())),
        );
        match listed.next_cursor.and_then(|next| Uuid::parse_str(&next).ok()) {
            Some(next) => page.after = Some(next),
            None => break,
        }
    }
    users
}
