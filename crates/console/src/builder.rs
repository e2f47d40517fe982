//! The new flow's schema tab: from the source's discovery, the tables to
//! sync (and their columns), each table's sync mode by a readable name,
//! its primary key as the source declares it, and a cursor picked from
//! the columns that can be one. Several tables make one flow.
//!
//! Step one (`GET …/flows/new`) names the flow and its connections (or
//! creates a flow of one entity typed by hand, `POST …/flows`); it posts
//! to step two (`POST …/flows/new`), which discovers the source and
//! lists its tables; that posts to `POST …/flows/build`, which creates the
//! flow, or shows the tables again with each problem on its row.

use crate::page::{OrgCtx, PageError, PageResult, Post, Problems, Session, csrf, error_box, page, redirect, urlencode};
use crate::sync::{connections, nonempty, schedule_field, schedule_text};
use actix_web::web::Query;
use actix_web::web::{Data, Path};
use maud::{Markup, html};
use serde::Deserialize;
use sluice_domain::FieldError;
use sluice_domain::shared::ids::ConnectionId;
use sluice_domain::shared::record::{EntitySchema, Field, FieldType};
use sluice_domain::sync::flow::{FlowConfig, FlowStatus, Mapping};
use sluice_domain::sync::mode::SyncMode;
use sluice_domain::sync::service::NewFlow;
use sluice_domain::sync::transform::Step;
use sluice_http::AppState;
use sluice_http::error::ApiError;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// A sync mode as the schema tab names it.
pub(crate) fn mode_label(m: SyncMode) -> &'static str {
    match m {
        SyncMode::FullRefreshOverwrite => "Full refresh · replace",
        SyncMode::FullRefreshAppend => "Full refresh · append",
        SyncMode::IncrementalAppend => "Incremental · append",
        SyncMode::IncrementalDeduped => "Incremental · deduped by key",
        SyncMode::CdcDeduped => "Change capture · mirror",
        SyncMode::CdcAppend => "Change capture · change log",
    }
}

/// Columns a cursor can be read from: times, dates and integers that grow.
fn cursor_candidate(f: &Field) -> bool {
    matches!(f.field_type, FieldType::Timestamp | FieldType::Date | FieldType::Integer) && !f.primary_key
        || f.primary_key && f.field_type == FieldType::Integer
}

/// The cursor offered first: a column named as last-changed times usually
/// are, else the first timestamp; none when no column says "changed".
fn default_cursor(e: &EntitySchema) -> Option<&str> {
    const NAMES: [&str; 7] =
        ["updated_at", "modified_at", "last_modified", "last_updated", "updated", "changed_at", "modified"];
    let time = |f: &&Field| matches!(f.field_type, FieldType::Timestamp | FieldType::Date);
    NAMES
        .iter()
        .find_map(|n| e.fields.iter().filter(time).find(|f| f.name.eq_ignore_ascii_case(n)))
        .map(|f| f.name.as_str())
}

/// The mode a table starts with: one row per key, read incrementally,
/// when the source declares a key and a last-changed column; else a full
/// refresh, which needs neither.
fn default_mode(e: &EntitySchema, offered: &[SyncMode]) -> SyncMode {
    let incremental = !e.primary_key().is_empty() && default_cursor(e).is_some();
    if incremental && offered.contains(&SyncMode::IncrementalDeduped) {
        SyncMode::IncrementalDeduped
    } else {
        SyncMode::FullRefreshOverwrite
    }
}

/// One table's row as the user left it.
#[derive(Default, Clone)]
struct Choice {
    sync: bool,
    mode: String,
    cursor: String,
    key: String,
    dest: String,
    /// The ticked columns, and all the columns the row listed.
    columns: Vec<String>,
    listed: Vec<String>,
}

/// Both steps' form: the flow's basics, and each table's choice by the
/// table's name (rows are numbered `e<i>.` in the page).
#[derive(Default)]
pub struct BuilderForm {
    name: String,
    source: String,
    destination: String,
    schedule: String,
    /// A table to tick on arrival (from a connection's "Sync this
    /// entity…").
    entity: String,
    choices: BTreeMap<String, Choice>,
    /// The tables in the page's order (rows by number, each table once):
    /// the order of the flow's mappings.
    order: Vec<String>,
}

impl BuilderForm {
    fn from_pairs(pairs: &[(String, String)]) -> Self {
        // Rows and columns past what any page lists are not read (the form
        // is bounded in bytes; these bound the work on it).
        const MAX_ROWS: usize = 10_000;
        const MAX_COLUMNS: usize = 4_000;
        let mut f = BuilderForm::default();
        let mut rows: BTreeMap<usize, (String, Choice)> = BTreeMap::new();
        for (k, v) in pairs {
            match k.as_str() {
                "name" => f.name = v.clone(),
                "source" => f.source = v.clone(),
                "destination" => f.destination = v.clone(),
                "schedule" => f.schedule = v.clone(),
                "entity" => f.entity = v.clone(),
                _ => {
                    let Some((row, field)) = k.strip_prefix('e').and_then(|r| r.split_once('.')) else { continue };
                    let Ok(row) = row.parse::<usize>() else { continue };
                    if row >= MAX_ROWS {
                        continue;
                    }
                    let (entity, c) = rows.entry(row).or_default();
                    match field {
                        "entity" => *entity = v.clone(),
                        "sync" => c.sync = true,
                        "mode" => c.mode = v.clone(),
                        "cursor" => c.cursor = v.clone(),
                        "key" => c.key = v.clone(),
                        "dest" => c.dest = v.clone(),
                        "col" if c.columns.len() < MAX_COLUMNS => c.columns.push(v.clone()),
                        "all" if c.listed.len() < MAX_COLUMNS => c.listed.push(v.clone()),
                        _ => {}
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        f.order = rows.values().map(|(e, _)| e.clone()).filter(|e| !e.is_empty() && seen.insert(e.clone())).collect();
        f.choices = rows.into_values().filter(|(e, _)| !e.is_empty()).collect();
        f
    }

    /// The ticked tables' mappings, in the page's order, each with the
    /// name of its table.
    fn mappings(&self) -> Result<Vec<(String, Mapping)>, ApiError> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for entity in &self.order {
            let Some(c) = self.choices.get(entity).filter(|c| c.sync) else { continue };
            let Some(sync_mode) = SyncMode::parse(&c.mode) else {
                errors.push(FieldError::new(format!("{entity}\0mode"), "pick a sync mode"));
                continue;
            };
            if c.columns.is_empty() && !c.listed.is_empty() {
                errors.push(FieldError::new(format!("{entity}\0columns"), "tick at least one column"));
                continue;
            }
            // An unticked column is dropped before the write.
            let ticked: std::collections::HashSet<&String> = c.columns.iter().collect();
            let transform = c
                .listed
                .iter()
                .filter(|col| !ticked.contains(col))
                .map(|col| Step::Drop { field: col.clone() })
                .collect();
            let nonempty = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
            out.push((
                entity.clone(),
                Mapping {
                    source_entity: entity.clone(),
                    dest_entity: nonempty(&c.dest),
                    sync_mode,
                    cursor_field: if sync_mode.incremental() { nonempty(&c.cursor) } else { None },
                    primary_key: nonempty(&c.key),
                    transform,
                    schema_policy: Default::default(),
                    asset: None,
                    cursor_lookback: None,
                    delete_mode: None,
                },
            ));
        }
        if !errors.is_empty() {
            return Err(ApiError::validation(errors));
        }
        if out.is_empty() {
            return Err(ApiError::validation(vec![FieldError::new("tables", "tick at least one table to sync")]));
        }
        Ok(out)
    }
}

/// Refused before any work for a caller who may not create flows.
fn writer_only(ctx: &OrgCtx) -> Result<(), PageError> {
    if ctx.can_write() {
        Ok(())
    } else {
        Err(ApiError::new(sluice_domain::shared::error::Code::Forbidden, "creating flows needs the Editor role").into())
    }
}

/// `POST /o/{org}/flows/new`: the source's tables to pick from.
pub async fn tables(state: Data<AppState>, post: Post<Vec<(String, String)>>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    writer_only(&ctx)?;
    let f = BuilderForm::from_pairs(&post.form);
    tables_page(&state, s, &ctx, &f, None).await
}

/// `POST /o/{org}/flows/build`: the flow of the ticked tables.
pub async fn build(state: Data<AppState>, post: Post<Vec<(String, String)>>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    writer_only(&ctx)?;
    let f = BuilderForm::from_pairs(&post.form);
    let built = f.mappings().and_then(|picked| {
        let (names, mappings): (Vec<String>, Vec<Mapping>) = picked.into_iter().unzip();
        let new = NewFlow {
            name: f.name.clone(),
            source_connection_id: connection_id("source", &f.source)?,
            destination_connection_id: connection_id("destination", &f.destination)?,
            schedule: Some(f.schedule.trim().to_string()).filter(|s| !s.is_empty()),
            config: FlowConfig { mappings, depends_on: vec![], continuous: false, verify: None },
            status: FlowStatus::Active,
        };
        Ok((names, new))
    });
    let (names, new) = match built {
        Ok(b) => b,
        Err(e) => return refused(&state, s, &ctx, &f, &e, &[]).await,
    };
    match state.sluice.sync.create_flow(&s.caller.principal, ctx.id(), new).await {
        Ok(flow) => Ok(crate::page::redirect(&ctx.at(&format!("/flows/{}", flow.id)))),
        Err(e) => refused(&state, s, &ctx, &f, &ApiError::from(e), &names).await,
    }
}

/// The tables again, with `e`'s problems on their rows; `names` are the
/// ticked tables in the order of the flow's mappings.
async fn refused(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    f: &BuilderForm,
    e: &ApiError,
    names: &[String],
) -> PageResult {
    let shown = RowProblems::of(e, names);
    let mut res = tables_page(state, s, ctx, f, Some((e, &shown))).await?;
    *res.status_mut() = e.status();
    Ok(res)
}

/// A refused flow's problems: by table and field where one is named,
/// the rest for the top of the page.
struct RowProblems {
    rows: HashMap<(String, String), String>,
    rest: Vec<(String, String)>,
}

impl RowProblems {
    fn of(e: &ApiError, names: &[String]) -> Self {
        let mut rows = HashMap::new();
        let mut rest = Vec::new();
        let listed = e.details.get("errors").and_then(|v| v.as_array()).cloned().unwrap_or_default();
        for x in listed {
            let path = x["field"].as_str().unwrap_or("");
            let message = x["message"].as_str().unwrap_or("").to_string();
            // Ours: "<table>\0<field>"; the service's:
            // "config.mappings[<i>].<field>".
            let at = path.split_once('\0').map(|(t, f)| (t.to_string(), f.to_string())).or_else(|| {
                let rest = path.strip_prefix("config.mappings[")?;
                let (i, field) = rest.split_once("].")?;
                let table = names.get(i.parse::<usize>().ok()?)?;
                let field = match field.split(['.', '[']).next()? {
                    "sync_mode" => "mode",
                    "cursor_field" => "cursor",
                    "primary_key" => "key",
                    "dest_entity" => "dest",
                    "transform" => "columns",
                    _ => "mode",
                };
                Some((table.clone(), field.to_string()))
            });
            match at {
                Some(k) => {
                    rows.entry(k).or_insert(message);
                }
                None => rest.push((path.to_string(), message)),
            }
        }
        RowProblems { rows, rest }
    }

    fn on(&self, table: &str, field: &str) -> Option<&str> {
        self.rows.get(&(table.to_string(), field.to_string())).map(String::as_str)
    }
}

/// What a basic field is called on the page.
fn label_of(field: &str) -> &str {
    match field {
        "name" => "Name",
        "source" => "Source",
        "destination" => "Destination",
        "schedule" => "Schedule",
        "tables" => "Tables",
        other => other,
    }
}

async fn tables_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    f: &BuilderForm,
    problem: Option<(&ApiError, &RowProblems)>,
) -> PageResult {
    let p = &s.caller.principal;
    let source = connection_id("source", &f.source).map_err(PageError::from)?;
    let destination = connection_id("destination", &f.destination).ok();
    let source_conn = state.sluice.connect.get_connection(p, ctx.id(), source).await?;
    let dest_conn = match destination {
        Some(d) => state.sluice.connect.get_connection(p, ctx.id(), d).await.ok(),
        None => None,
    };
    let offered: Vec<SyncMode> = state
        .sluice
        .connect
        .connector_spec(&source_conn.connector_type)
        .map(|spec| spec.sync_modes.iter().filter_map(|m| SyncMode::parse(m)).collect())
        .unwrap_or_else(|| SyncMode::ALL.to_vec());
    let back = ctx.at(&format!(
        "/flows/new?source={}&destination={}&name={}&schedule={}",
        urlencode(&f.source),
        urlencode(&f.destination),
        urlencode(&f.name),
        urlencode(&f.schedule)
    ));
    let discovered = state.sluice.connect.discover(p, ctx.id(), source).await.map_err(ApiError::from);
    let entities = match discovered {
        Ok(e) => e,
        Err(e) => {
            let body = html! {
                (error_box(&e))
                p { a href=(back) { "← Back to the flow's connections" } }
            };
            let mut res = page(ctx, s, "/flows", "Choose tables", body);
            *res.status_mut() = e.status();
            return Ok(res);
        }
    };
    let body = html! {
        p {
            "From " a href=(ctx.at(&format!("/connections/{}", source_conn.id))) { (source_conn.name) }
            " (" (source_conn.connector_type) ") into "
            @if let Some(d) = &dest_conn { a href=(ctx.at(&format!("/connections/{}", d.id))) { (d.name) } " (" (d.connector_type) ")" } @else { "?" }
            ", " (schedule_text(Some(f.schedule.trim()).filter(|s| !s.is_empty()))) ". "
            a href=(back) { "Change" }
        }
        @if let Some((e, shown)) = problem {
            div.error role="alert" {
                p { (e.message) }
                @if !shown.rest.is_empty() {
                    ul { @for (field, message) in &shown.rest { li { (label_of(field)) ": " (message) } } }
                }
                @if !shown.rows.is_empty() { p { "Each table's problem is shown on its row." } }
            }
        }
        @if entities.is_empty() {
            p.muted { "The source has no tables to sync." }
        } @else {
            form method="post" action=(ctx.at("/flows/build")) {
                (csrf(s))
                input type="hidden" name="name" value=(f.name);
                input type="hidden" name="source" value=(f.source);
                input type="hidden" name="destination" value=(f.destination);
                input type="hidden" name="schedule" value=(f.schedule);
                div.scroll {
                    table.builder {
                        thead { tr {
                            th { "Sync" } th { "Table" } th { "Mode" } th { "Cursor" } th { "Primary key" }
                            th { "Destination table" } th { "Columns" }
                        } }
                        tbody { @for (i, e) in entities.iter().enumerate() { (table_row(i, e, f, &offered, problem.map(|x| x.1))) } }
                    }
                }
                p.hint {
                    "Replace copies the whole table each run; append adds each copy after the last. "
                    "Incremental reads rows whose cursor grew since the last run; deduped keeps one row per primary key. "
                    "Change capture reads the source's log, deletes included: a mirror applies them, a change log keeps every change as a row. "
                    "An unticked column is left out of the destination."
                }
                div.row { button.primary { "Create flow" } a.button href=(back) { "Back" } }
            }
        }
    };
    let status = problem.map(|(e, _)| e.status());
    let mut res = page(ctx, s, "/flows", "Choose tables", body);
    if let Some(status) = status {
        *res.status_mut() = status;
    }
    Ok(res)
}

fn table_row(i: usize, e: &EntitySchema, f: &BuilderForm, offered: &[SyncMode], shown: Option<&RowProblems>) -> Markup {
    let sent = f.choices.get(&e.name);
    let keys = e.primary_key().join(",");
    let sync = sent.map_or(f.entity == e.name, |c| c.sync);
    let mode = sent.and_then(|c| SyncMode::parse(&c.mode)).unwrap_or_else(|| default_mode(e, offered));
    let cursor = sent.map_or_else(|| default_cursor(e).unwrap_or("").to_string(), |c| c.cursor.clone());
    let key = sent.map_or(keys.clone(), |c| c.key.clone());
    let dest = sent.map_or("", |c| c.dest.as_str());
    let ticked = |col: &str| sent.is_none_or(|c| c.columns.iter().any(|x| x == col));
    let kept = e.fields.iter().filter(|fl| ticked(&fl.name)).count();
    let problem = |field: &str| shown.and_then(|p| p.on(&e.name, field));
    let invalid = |field: &str| problem(field).map(|_| "true");
    let id = format!("e{i}");
    let note = |field: &str| {
        html! { @if let Some(m) = problem(field) { span.field-error id=(format!("{id}-{field}-error")) { (m) } } }
    };
    let described = |field: &str| problem(field).map(|_| format!("{id}-{field}-error"));
    html! {
        tr data-entity=(e.name) {
            td { input type="checkbox" name=(format!("{id}.sync")) value="on" checked[sync] aria-label=(format!("Sync {}", e.name)); }
            td { code { (e.name) } input type="hidden" name=(format!("{id}.entity")) value=(e.name); }
            td {
                select.mode name=(format!("{id}.mode")) aria-label=(format!("Mode of {}", e.name))
                    aria-invalid=[invalid("mode")] aria-describedby=[described("mode")] {
                    @for m in offered { option value=(m.as_str()) selected[*m == mode] { (mode_label(*m)) } }
                }
                (note("mode"))
            }
            td {
                select.cursor name=(format!("{id}.cursor")) aria-label=(format!("Cursor of {}", e.name))
                    aria-invalid=[invalid("cursor")] aria-describedby=[described("cursor")] {
                    option value="" { "none" }
                    @for fl in e.fields.iter().filter(|fl| cursor_candidate(fl)) {
                        option value=(fl.name) selected[fl.name == cursor] { (fl.name) " · " (type_name(fl)) }
                    }
                }
                (note("cursor"))
            }
            td {
                input.key name=(format!("{id}.key")) value=(key) size="12" placeholder="none"
                    aria-label=(format!("Primary key of {}", e.name)) aria-invalid=[invalid("key")] aria-describedby=[described("key")];
                (note("key"))
            }
            td {
                input.dest name=(format!("{id}.dest")) value=(dest) size="14" placeholder=(e.name)
                    aria-label=(format!("Destination table of {}", e.name)) aria-invalid=[invalid("dest")] aria-describedby=[described("dest")];
                (note("dest"))
            }
            td {
                details.cols open[problem("columns").is_some()] {
                    summary { (kept) " of " (e.fields.len()) }
                    @for fl in &e.fields {
                        label.check {
                            input type="checkbox" name=(format!("{id}.col")) value=(fl.name) checked[ticked(&fl.name)];
                            " " (fl.name) " " span.muted { (type_name(fl)) @if fl.primary_key { ", key" } }
                        }
                        input type="hidden" name=(format!("{id}.all")) value=(fl.name);
                    }
                }
                (note("columns"))
            }
        }
    }
}

fn type_name(f: &Field) -> String {
    format!("{:?}", f.field_type).to_lowercase()
}

// ---- step one: the flow's name and connections (or one entity by hand) ----

#[derive(Deserialize, Default)]
pub struct NewFlowQuery {
    source: Option<Uuid>,
    entity: Option<String>,
    /// Back from choosing tables: what step one said.
    destination: Option<Uuid>,
    name: Option<String>,
    schedule: Option<String>,
}

/// `GET /o/{org}/flows/new`.
pub async fn new_flow(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<NewFlowQuery>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let form = FlowForm {
        source: q.source.map(|u| u.to_string()).unwrap_or_default(),
        destination: q.destination.map(|u| u.to_string()).unwrap_or_default(),
        source_entity: q.entity.clone().unwrap_or_default(),
        name: q.name.clone().or_else(|| q.entity.clone().map(|e| format!("sync {e}"))).unwrap_or_default(),
        schedule: q.schedule.clone().unwrap_or_default(),
        sync_mode: "full_refresh_overwrite".into(),
        ..Default::default()
    };
    new_flow_page(&state, &s, &ctx, &form, None).await
}

async fn new_flow_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    f: &FlowForm,
    error: Option<&ApiError>,
) -> PageResult {
    let conns = connections(state, s, ctx).await?;
    // Source and destination never start as one connection: unless picked,
    // the destination is the first connection other than the source.
    let source = match f.source.as_str() {
        "" => conns.first().map(|c| c.id.to_string()).unwrap_or_default(),
        picked => picked.to_string(),
    };
    let destination = match f.destination.as_str() {
        "" => conns.iter().map(|c| c.id.to_string()).find(|id| *id != source).unwrap_or_else(|| source.clone()),
        picked => picked.to_string(),
    };
    let modes = sluice_domain::sync::SyncMode::ALL;
    let by_hand = error.is_some();
    let problems = Problems::of(error);
    let m = |field: &str| format!("config.mappings[0].{field}");
    let body = html! {
        @if let Some(e) = error { (error_box(e)) }
        form.grid method="post" action=(ctx.at("/flows/new")) {
            (csrf(s))
            label for="flow-name" { "Name" }
            span {
                input #flow-name name="name" required value=(f.name)
                    aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "flow-name")];
                (problems.note("name", "flow-name"))
            }
            label for="flow-source" { "Source" }
            select #flow-source name="source" required {
                @for c in &conns { option value=(c.id) selected[c.id.to_string() == source] { (c.name) " (" (c.connector_type) ")" } }
            }
            label for="flow-destination" { "Destination" }
            select #flow-destination name="destination" required {
                @for c in &conns { option value=(c.id) selected[c.id.to_string() == destination] { (c.name) " (" (c.connector_type) ")" } }
            }
            (schedule_field("flow-schedule", "Schedule", &f.schedule, true))
            input type="hidden" name="entity" value=(f.source_entity);
            span {} div.row { button.primary #choose-tables { "Choose tables →" } }
            details.by-hand.wide open[by_hand] {
                summary { "Or name one entity by hand" }
                div.grid {
                    label for="flow-entity" { "Source entity" }
                    (problems.input("flow-entity", "source_entity", &f.source_entity, "public.orders", &m("source_entity")))
                    label for="flow-dest-entity" { "Destination entity" }
                    (problems.input("flow-dest-entity", "dest_entity", &f.dest_entity, "same as the source", &m("dest_entity")))
                    label for="flow-mode" { "Sync mode" }
                    select #flow-mode name="sync_mode" {
                        @for mode in modes { option value=(mode.as_str()) selected[mode.as_str() == f.sync_mode] { (mode_label(mode)) } }
                    }
                    label for="flow-cursor" { "Cursor field" }
                    (problems.input("flow-cursor", "cursor_field", &f.cursor_field, "updated_at (incremental modes)", &m("cursor_field")))
                    label for="flow-pk" { "Primary key" }
                    (problems.input("flow-pk", "primary_key", &f.primary_key, "id (deduped mode)", &m("primary_key")))
                    span {} button #create-by-hand formaction=(ctx.at("/flows")) { "Create flow" }
                }
            }
        }
        p.hint { "Transforms and dependencies can be added on the flow's page, or with IaC." }
    };
    Ok(page(ctx, s, "/flows", "New flow", body))
}

#[derive(Deserialize, Default)]
pub struct FlowForm {
    name: String,
    source: String,
    #[serde(default)]
    destination: String,
    source_entity: String,
    #[serde(default)]
    dest_entity: String,
    sync_mode: String,
    #[serde(default)]
    cursor_field: String,
    #[serde(default)]
    primary_key: String,
    #[serde(default)]
    schedule: String,
}

pub(crate) fn connection_id(field: &str, s: &str) -> Result<ConnectionId, ApiError> {
    s.parse::<Uuid>()
        .map(ConnectionId::from)
        .map_err(|_| ApiError::validation(vec![FieldError::new(field, "pick a connection")]))
}

/// `POST /o/{org}/flows`.
pub async fn create(state: Data<AppState>, post: Post<FlowForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let built = (|| {
        let sync_mode = SyncMode::parse(&f.sync_mode)
            .ok_or_else(|| ApiError::validation(vec![FieldError::new("sync_mode", "pick a sync mode")]))?;
        let mapping = Mapping {
            source_entity: f.source_entity.trim().to_string(),
            dest_entity: nonempty(&f.dest_entity),
            sync_mode,
            cursor_field: nonempty(&f.cursor_field),
            primary_key: nonempty(&f.primary_key),
            transform: vec![],
            schema_policy: Default::default(),
            asset: None,
            cursor_lookback: None,
            delete_mode: None,
        };
        Ok::<_, ApiError>(NewFlow {
            name: f.name.clone(),
            source_connection_id: connection_id("source", &f.source)?,
            destination_connection_id: connection_id("destination", &f.destination)?,
            schedule: nonempty(&f.schedule),
            config: FlowConfig { mappings: vec![mapping], depends_on: vec![], continuous: false, verify: None },
            status: FlowStatus::Active,
        })
    })();
    let result = match built {
        Ok(new) => state.sluice.sync.create_flow(&s.caller.principal, ctx.id(), new).await.map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match result {
        Ok(flow) => Ok(redirect(&ctx.at(&format!("/flows/{}", flow.id)))),
        Err(e) => crate::page::failed(new_flow_page(&state, s, &ctx, f, Some(&e)).await, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, t: FieldType, key: bool) -> Field {
        Field { name: name.into(), field_type: t, nullable: !key, primary_key: key, native_type: None }
    }

    fn orders() -> EntitySchema {
        EntitySchema {
            name: "public.orders".into(),
            fields: vec![
                field("id", FieldType::Integer, true),
                field("note", FieldType::String, false),
                field("created_at", FieldType::Timestamp, false),
                field("updated_at", FieldType::Timestamp, false),
            ],
        }
    }

    #[test]
    fn a_keyed_table_with_a_change_time_starts_incremental_by_key() {
        let e = orders();
        assert_eq!(default_cursor(&e), Some("updated_at"));
        assert_eq!(default_mode(&e, &SyncMode::ALL), SyncMode::IncrementalDeduped);
        let cursors: Vec<_> = e.fields.iter().filter(|f| cursor_candidate(f)).map(|f| f.name.as_str()).collect();
        assert_eq!(cursors, ["id", "created_at", "updated_at"]);
        let mut plain = orders();
        plain.fields.retain(|f| f.name != "updated_at");
        assert_eq!(default_cursor(&plain), None, "a creation time is offered, not picked");
        assert_eq!(default_mode(&plain, &SyncMode::ALL), SyncMode::FullRefreshOverwrite);
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn ticked_tables_become_mappings_in_the_page_order() {
        let f = BuilderForm::from_pairs(&pairs(&[
            ("name", "shop"),
            ("e0.entity", "a"),
            ("e0.mode", "full_refresh_overwrite"),
            ("e0.cursor", "updated_at"),
            ("e1.entity", "b"),
            ("e1.sync", "on"),
            ("e1.mode", "incremental_deduped"),
            ("e1.cursor", "updated_at"),
            ("e1.key", " id "),
            ("e1.col", "id"),
            ("e1.col", "updated_at"),
            ("e1.all", "id"),
            ("e1.all", "secret"),
            ("e1.all", "updated_at"),
            ("e2.entity", "c"),
            ("e2.sync", "on"),
            ("e2.mode", "full_refresh_overwrite"),
            ("e2.cursor", "updated_at"),
            ("e2.dest", "c_copy"),
        ]));
        let m = f.mappings().unwrap();
        assert_eq!(m.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        let b = &m[0].1;
        assert_eq!(
            (b.sync_mode, b.cursor_field.as_deref(), b.primary_key.as_deref()),
            (SyncMode::IncrementalDeduped, Some("updated_at"), Some("id"))
        );
        assert_eq!(b.transform, vec![Step::Drop { field: "secret".into() }]);
        let c = &m[1].1;
        assert_eq!(c.cursor_field, None, "a full refresh keeps no cursor");
        assert_eq!(c.dest_entity.as_deref(), Some("c_copy"));
        assert!(c.transform.is_empty());
    }

    #[test]
    fn nothing_ticked_or_no_column_kept_is_said_on_the_form() {
        let none = BuilderForm::from_pairs(&pairs(&[("e0.entity", "a"), ("e0.mode", "full_refresh_overwrite")]));
        let e = none.mappings().unwrap_err();
        assert_eq!(e.details["errors"][0]["field"], "tables");
        let bare = BuilderForm::from_pairs(&pairs(&[
            ("e0.entity", "a"),
            ("e0.sync", "on"),
            ("e0.mode", "full_refresh_overwrite"),
            ("e0.all", "id"),
        ]));
        let e = bare.mappings().unwrap_err();
        let shown = RowProblems::of(&e, &[]);
        assert_eq!(shown.on("a", "columns"), Some("tick at least one column"));
    }

    #[test]
    fn the_services_errors_land_on_their_tables_rows() {
        let e = ApiError::validation(vec![
            FieldError::new("config.mappings[1].cursor_field", "is required by incremental_append"),
            FieldError::new("name", "must not be empty"),
        ]);
        let shown = RowProblems::of(&e, &["a".into(), "b".into()]);
        assert_eq!(shown.on("b", "cursor"), Some("is required by incremental_append"));
        assert_eq!(shown.rest, vec![("name".to_string(), "must not be empty".to_string())]);
    }
}
