//! Flows, runs (with live progress), cursors, the topology and traces.

use crate::orgs::{duration, runs_table};
use crate::page::{
    Empty, OrgCtx, PageError, PageResult, Paging, Post, Session, badge, button, bytes, count, csrf, error_box, failed,
    json_block, notice, page, pager, redirect, redirect_saying, when, when_opt,
};
use crate::svg;
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use sluice_domain::FieldError;
use sluice_domain::connect::connection::Connection;
use sluice_domain::shared::ids::{ConnectionId, FlowId, RunId};
use sluice_domain::shared::page::PageRequest;
use sluice_domain::sync::flow::{Flow, FlowConfig, FlowStatus, LogLevel, Run, RunStatus, Trigger};
use sluice_domain::sync::service::FlowUpdate;
use sluice_domain::sync::verification::{KeyList, Verification, verifiable};
use sluice_http::AppState;
use sluice_http::error::ApiError;
use uuid::Uuid;

const ALL: PageRequest = PageRequest { limit: 200, after: None };

pub(crate) fn nonempty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

pub(crate) async fn connections(state: &AppState, s: &Session, ctx: &OrgCtx) -> Result<Vec<Connection>, PageError> {
    Ok(state.sluice.connect.list_connections(&s.caller.principal, ctx.id(), ALL).await?.items)
}

fn name_of(conns: &[Connection], id: ConnectionId) -> String {
    conns.iter().find(|c| c.id == id).map_or_else(|| id.to_string(), |c| c.name.clone())
}

/// `GET /o/{org}/flows`.
pub async fn list(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<Paging>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let p = &s.caller.principal;
    let listed = state.sluice.sync.list_flow_overviews(p, ctx.id(), None, q.request()).await?;
    let conns = connections(&state, &s, &ctx).await?;
    // A queued run behind a running one: the running one is what goes on.
    let queued_behind: std::collections::HashSet<FlowId> = listed
        .items
        .iter()
        .filter(|o| o.running.is_some() && o.last_run.as_ref().is_some_and(|r| r.status == RunStatus::Queued))
        .map(|o| o.flow.id)
        .collect();
    let last: std::collections::HashMap<FlowId, Run> = listed
        .items
        .iter()
        .filter_map(|o| o.running.clone().or_else(|| o.last_run.clone()).map(|r| (o.flow.id, r)))
        .collect();
    let flows: Vec<_> = listed.items.into_iter().map(|o| o.flow).collect();
    let body = html! {
        @if ctx.can_write() { p { a.button.primary href=(ctx.at("/flows/new")) { "New flow" } } }
        @if flows.is_empty() { p.muted { "No flows yet. Discover a connection's entities, or create one here." } } @else {
            table {
                thead { tr { th { "Name" } th { "Source → destination" } th { "Schedule" } th { "Status" } th { "Last run" } th { "Next run" } } }
                tbody { @for f in &flows {
                    @let last = last.get(&f.id);
                    tr {
                        td { a href=(ctx.at(&format!("/flows/{}", f.id))) { (f.name) } }
                        td { (name_of(&conns, f.source_connection_id)) " → " (name_of(&conns, f.destination_connection_id)) }
                        td { (schedule_text(f.schedule.as_deref())) }
                        td { (badge(f.status.as_str())) }
                        td {
                            @if let Some(r) = last { a href=(ctx.at(&format!("/runs/{}", r.id))) { (badge(r.status.as_str())) } " " (when(r.queued_at)) } @else { "—" }
                            @if let Some(cause) = last.and_then(failure_cause) { br; span.error.cause { (cause) } }
                            @if queued_behind.contains(&f.id) { " " span.muted { "· another run queued" } }
                        }
                        td { (when_opt(f.next_run_at)) }
                    }
                } }
            }
            (pager(&ctx.at("/flows"), q.after, listed.next_cursor.as_deref()))
        }
    };
    Ok(page(&ctx, &s, "/flows", "Flows", body))
}

async fn flow_page(state: &AppState, s: &Session, ctx: &OrgCtx, flow: Flow, shown: Option<Markup>) -> PageResult {
    flow_page_with(state, s, ctx, flow, shown, Draft::None).await
}

/// What a refused form of a flow's page sent, to show again.
enum Draft<'a> {
    None,
    /// The edit form.
    Edit(&'a EditForm),
    /// A cursor's new value, refused: the entity's input keeps it and
    /// says why.
    Cursor(&'a CursorForm, &'a ApiError),
}

/// A flow's page; `draft` refills the form that was refused with what the
/// user sent.
async fn flow_page_with(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    flow: Flow,
    shown: Option<Markup>,
    draft: Draft<'_>,
) -> PageResult {
    let cursor_sent = match &draft {
        Draft::Cursor(f, e) => Some((f, crate::page::Problems::of(Some(e)), e.message.clone())),
        _ => None,
    };
    let draft = match draft {
        Draft::Edit(f) => Some(f),
        _ => None,
    };
    let p = &s.caller.principal;
    let conns = connections(state, s, ctx).await?;
    let details = state.sluice.sync.flow_details(p, ctx.id(), flow.id).await?;
    let stream = state.sluice.sync.stream_health(p, ctx.id(), flow.id).await?;
    let runs = details.runs;
    let snapshots: Vec<_> = details.state.iter().map(|e| e.snapshot).collect();
    let clearing: Vec<bool> = details.state.iter().map(|e| e.clearing).collect();
    let captures = snapshots.iter().any(Option::is_some);
    let cursors: Vec<_> = details.state.into_iter().map(|e| e.cursor).collect();
    let neighbours = |list: &[sluice_domain::sync::views::Neighbour]| {
        html! { @for (i, n) in list.iter().enumerate() {
            @if i > 0 { ", " }
            a href=(ctx.at(&format!("/flows/{}", n.id))) { (n.name) } " (on " (n.on.as_str()) ")"
        } }
    };
    let last_check = last_verification(state, s, ctx, flow.id).await?;
    let at = ctx.at(&format!("/flows/{}", flow.id));
    let config =
        draft.map_or_else(|| serde_json::to_string_pretty(&flow.config).unwrap_or_default(), |d| d.config.clone());
    let edit_name = draft.map_or_else(|| flow.name.clone(), |d| d.name.clone());
    let edit_schedule = draft.map_or_else(|| flow.schedule.clone().unwrap_or_default(), |d| d.schedule.clone());
    let kept = |d: &str, current: ConnectionId| if d.is_empty() { current.to_string() } else { d.to_string() };
    let edit_source =
        draft.map_or_else(|| flow.source_connection_id.to_string(), |d| kept(&d.source, flow.source_connection_id));
    let edit_destination = draft.map_or_else(
        || flow.destination_connection_id.to_string(),
        |d| kept(&d.destination, flow.destination_connection_id),
    );
    let name = flow.name.clone();
    let body = html! {
        @if let Some(m) = shown { (m) }
        dl.facts {
            dt { "Source" } dd { a href=(ctx.at(&format!("/connections/{}", flow.source_connection_id))) { (name_of(&conns, flow.source_connection_id)) } }
            dt { "Destination" } dd { a href=(ctx.at(&format!("/connections/{}", flow.destination_connection_id))) { (name_of(&conns, flow.destination_connection_id)) } }
            dt { "Schedule" } dd { (schedule_text(flow.schedule.as_deref())) }
            dt { "Status" } dd { (badge(flow.status.as_str())) }
            dt { "Next run" } dd { (when_opt(flow.next_run_at)) }
            @if !details.upstream.is_empty() { dt { "Runs after" } dd { (neighbours(&details.upstream)) } }
            @if !details.downstream.is_empty() { dt { "Followed by" } dd { (neighbours(&details.downstream)) } }
        }
        @if ctx.can_write() {
            div.row {
                (button(s, &format!("{at}/run"), "Run now", "primary", None))
                @if flow.status == FlowStatus::Active {
                    form.inline method="post" action=(format!("{at}/status")) { (csrf(s)) input type="hidden" name="status" value="paused"; button { "Pause" } }
                } @else {
                    form.inline method="post" action=(format!("{at}/status")) { (csrf(s)) input type="hidden" name="status" value="active"; button { "Resume" } }
                }
                (button(s, &format!("{at}/delete"), "Delete flow", "danger", Some("Delete this flow, its runs and its cursors? The destination's data stays.")))
            }
        }
        h2 { "Runs" }
        (runs_table(ctx, &runs, |_| name.clone()))
        p { a href=(format!("{at}/runs")) { "All runs, by status and date →" } }
        h2 { "Verification" }
        (verification_summary(last_check.as_ref()))
        @if ctx.can_write() && flow.config.mappings.iter().any(verifiable) {
            (button(s, &format!("{at}/verify"), "Verify now", "", None))
        }
        @if let Some(h) = &stream {
            h2 { "Change stream" }
            dl.facts {
                dt { "Slot and publication" } dd { code { (h.name) } }
                dt { "Log the source keeps" } dd {
                    @match (h.retained_bytes, &h.unknown) {
                        (_, Some(why)) => { span.muted { "unknown: " (why) } }
                        (None, None) => { span.muted { "none yet: the first run makes the slot" } }
                        (Some(b), None) => {
                            (bytes(b)) " of the " (bytes(h.budget_bytes)) " budget (" code { "cdc_max_retained" } ")"
                            @if h.over_budget() { " " (badge("over budget")) }
                        }
                    }
                }
            }
        }
        h2 { "Entities and cursors" }
        @if cursors.is_empty() { p.muted { "No entities." } } @else {
            table {
                thead { tr { th { "Entity" } th { "Field" } th { "Value" } th { "Updated" } @if captures { th { "Snapshot" } } @if ctx.can_write() { th { "Change" } } } }
                tbody { @for ((c, snapshot), clear) in cursors.iter().zip(&snapshots).zip(&clearing) { tr {
                    td { code { (c.entity) } } td { (c.mark.field().unwrap_or_default()) }
                    td {
                        code.cursor { (c.mark.value().unwrap_or("— (from the start)")) }
                        @if *clear { " " (badge("clear pending")) }
                    }
                    td { (when(c.updated_at)) }
                    @if captures { td { @if let Some(s) = snapshot {
                        (badge(s.state))
                        @if s.state == "running" && s.chunks_done > 0 { " " span.muted { (s.chunks_done) " of about " (s.chunks_total) " chunks" } }
                    } } }
                    @if ctx.can_write() && !keeps_cursor(&flow, &c.entity) { td {
                        span.muted { "full refresh: no cursor" } " "
                        (resync_button(s, &at, &flow, &c.entity))
                    } }
                    @else if ctx.can_write() { td {
                        form.inline method="post" action=(format!("{at}/cursors/set")) data-confirm="Set this cursor? The next run reads from the new value." {
                            (csrf(s))
                            input type="hidden" name="entity" value=(c.entity);
                            label.sr for=(format!("cursor-{}", c.entity)) { "New value" }
                            @let id = format!("cursor-{}", c.entity);
                            @let refused = cursor_sent.as_ref().filter(|(f, _, _)| f.entity == c.entity);
                            input.cursorinput id=(id) name="value" required placeholder="new value"
                                value=[refused.map_or(c.mark.value(), |(f, _, _)| Some(f.value.as_str()))]
                                aria-invalid=[refused.map(|_| "true")] aria-describedby=[refused.map(|_| format!("{id}-error"))];
                            button { "Set" }
                            @if let Some((_, problems, message)) = refused {
                                span.field-error id=(format!("{id}-error")) {
                                    (problems.fields.first().map_or(message.as_str(), |(_, m)| m.as_str()))
                                }
                            }
                        }
                        form.inline method="post" action=(format!("{at}/cursors/reset")) data-confirm="Reset this cursor? The next run reads everything again." {
                            (csrf(s)) input type="hidden" name="entity" value=(c.entity); button.danger { "Reset" }
                        }
                        (resync_button(s, &at, &flow, &c.entity))
                    } }
                } } }
            }
        }
        h2 { "Configuration" }
        @if ctx.can_write() {
            form.stack method="post" action=(at) {
                (csrf(s))
                label for="flow-edit-name" { "Name" } input #flow-edit-name name="name" value=(edit_name);
                label for="flow-edit-source" { "Source" }
                select #flow-edit-source name="source" {
                    @for c in &conns { option value=(c.id) selected[c.id.to_string() == edit_source] { (c.name) " (" (c.connector_type) ")" } }
                }
                label for="flow-edit-destination" { "Destination" }
                select #flow-edit-destination name="destination" {
                    @for c in &conns { option value=(c.id) selected[c.id.to_string() == edit_destination] { (c.name) " (" (c.connector_type) ")" } }
                }
                (schedule_field("flow-edit-schedule", "Schedule", &edit_schedule, false))
                label for="flow-edit-config" { "Mappings and dependencies (JSON)" }
                textarea #flow-edit-config name="config" rows="12" spellcheck="false" { (config) }
                button.primary { "Save" }
            }
        } @else {
            pre.json { (config) }
        }
    };
    Ok(page(ctx, s, "/flows", &flow.name, body))
}

/// The newest verification of a flow, if any.
async fn last_verification(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    flow: FlowId,
) -> Result<Option<Verification>, PageError> {
    let newest = PageRequest { limit: 1, after: None };
    Ok(state
        .sluice
        .sync
        .list_verifications(&s.caller.principal, ctx.id(), flow, newest)
        .await?
        .items
        .into_iter()
        .next())
}

/// A verification's outcome: its status and time, and per entity the rows
/// on each side and the keys of each kind of difference (the first few).
fn verification_summary(v: Option<&Verification>) -> Markup {
    let keys = |k: &KeyList| {
        html! {
            (k.count)
            @if k.count > 0 {
                " " code { (k.keys.iter().take(5).map(ToString::to_string).collect::<Vec<_>>().join(", ")) }
                @if k.count > 5 { "…" }
            }
        }
    };
    html! {
        @match v {
            None => { p.muted { "Not verified yet: a verification compares the destination with the source by primary key." } }
            Some(v) => {
                p {
                    (badge(v.status.as_str())) " "
                    (when_opt(v.finished_at.or(v.started_at).or(Some(v.queued_at))))
                    @if let Some(e) = &v.error { " " span.error { (e) } }
                }
                @if !v.entities.is_empty() {
                    table {
                        thead { tr { th { "Entity" } th { "Source rows" } th { "Destination rows" } th { "Missing" } th { "Extra" } th { "Different" } } }
                        tbody { @for e in &v.entities { tr {
                            td { code { (e.entity) } } td { (e.source_rows) } td { (e.destination_rows) }
                            td { (keys(&e.missing)) } td { (keys(&e.extra)) } td { (keys(&e.different)) }
                        } } }
                    }
                }
            }
        }
    }
}

/// `POST /o/{org}/flows/{id}/verify`: queues a verification of every
/// entity the flow mirrors by key; back to the flow's page.
pub async fn verify(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, flow) = load(&state, s, org, id).await?;
    state.sluice.sync.start_verification(&s.caller.principal, ctx.id(), flow.id, Vec::new(), false).await?;
    let shown = notice("Verification queued: a worker compares each entity by primary key; reload to see it.");
    flow_page(&state, s, &ctx, flow, Some(shown)).await
}

async fn load(state: &AppState, s: &Session, org: Uuid, id: Uuid) -> Result<(OrgCtx, Flow), PageError> {
    let ctx = OrgCtx::load(state, s, org).await?;
    let f = state.sluice.sync.get_flow(&s.caller.principal, ctx.id(), FlowId::from(id)).await?;
    Ok((ctx, f))
}

/// `GET /o/{org}/flows/{id}`.
pub async fn detail(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, f) = load(&state, &s, org, id).await?;
    flow_page(&state, &s, &ctx, f, None).await
}

#[derive(Deserialize)]
pub struct EditForm {
    name: String,
    /// The connections (ids); empty keeps the flow's.
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
    schedule: String,
    config: String,
}

/// `POST /o/{org}/flows/{id}`: saves name, connections, schedule and
/// configuration.
pub async fn update(state: Data<AppState>, post: Post<EditForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, flow) = load(&state, s, org, id).await?;
    let f = &post.form;
    let config: FlowConfig = match serde_json::from_str(&f.config) {
        Ok(c) => c,
        Err(e) => {
            let shown = html! { p.error role="alert" { "The configuration is not valid JSON of a flow: " (e) } };
            let e = ApiError::validation(vec![FieldError::new("config", "is not valid JSON of a flow")]);
            return crate::page::failed(flow_page_with(&state, s, &ctx, flow, Some(shown), Draft::Edit(f)).await, &e);
        }
    };
    // A connection picked other than the flow's re-points it (checked as
    // the API checks it: the connection must be the organization's).
    let pick = |v: &str, current: ConnectionId| {
        Uuid::parse_str(v.trim()).ok().map(ConnectionId::from).filter(|id| *id != current)
    };
    let update = FlowUpdate {
        name: Some(f.name.clone()),
        source_connection_id: pick(&f.source, flow.source_connection_id),
        destination_connection_id: pick(&f.destination, flow.destination_connection_id),
        schedule: Some(nonempty(&f.schedule)),
        config: Some(config),
        status: None,
    };
    let repointed = update.source_connection_id.is_some() || update.destination_connection_id.is_some();
    match state.sluice.sync.update_flow(&s.caller.principal, ctx.id(), flow.id, update).await {
        Ok(saved) => {
            let said = if repointed && saved.config.mappings.iter().any(|m| m.sync_mode.incremental()) {
                "Saved. The flow now uses other connections and keeps its cursors: reset a cursor below \
                 to read that table from the start."
            } else {
                "Saved."
            };
            Ok(redirect_saying(&post.session, &ctx.at(&format!("/flows/{}", saved.id)), said))
        }
        Err(e) => {
            let e: ApiError = e.into();
            crate::page::failed(flow_page_with(&state, s, &ctx, flow, Some(error_box(&e)), Draft::Edit(f)).await, &e)
        }
    }
}

/// `POST /o/{org}/flows/{id}/run`: to the run's page.
pub async fn run(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let r = state.sluice.sync.trigger_run(&s.caller.principal, ctx.id(), FlowId::from(id), Trigger::Manual).await?;
    Ok(redirect(&ctx.at(&format!("/runs/{}", r.id))))
}

#[derive(Deserialize)]
pub struct StatusForm {
    status: String,
}

/// `POST /o/{org}/flows/{id}/status`: pause or resume.
pub async fn set_status(state: Data<AppState>, post: Post<StatusForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let status = FlowStatus::parse(&post.form.status)
        .ok_or_else(|| ApiError::validation(vec![FieldError::new("status", "must be active or paused")]))?;
    let update = FlowUpdate { status: Some(status), ..FlowUpdate::default() };
    state.sluice.sync.update_flow(&s.caller.principal, ctx.id(), FlowId::from(id), update).await?;
    let said = match status {
        FlowStatus::Paused => "Paused: no scheduled run starts until it is resumed.",
        _ => "Resumed.",
    };
    Ok(redirect_saying(&post.session, &ctx.at(&format!("/flows/{id}")), said))
}

#[derive(Deserialize)]
pub struct CursorForm {
    entity: String,
    #[serde(default)]
    value: String,
}

/// `POST /o/{org}/flows/{id}/cursors/set`.
pub async fn set_cursor(state: Data<AppState>, post: Post<CursorForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, flow) = load(&state, s, org, id).await?;
    let f = &post.form;
    match state.sluice.sync.set_cursor(&s.caller.principal, ctx.id(), flow.id, &f.entity, &f.value).await {
        Ok(c) => {
            let said = format!("Cursor of {} set to {}.", c.entity, c.mark.value().unwrap_or_default());
            Ok(redirect_saying(&post.session, &ctx.at(&format!("/flows/{}", flow.id)), &said))
        }
        // Refused (a value that is not the column's type, a run in
        // progress): at the entity's input, the value kept.
        Err(e) => {
            let e: ApiError = e.into();
            let shown = error_box(&e);
            crate::page::failed(flow_page_with(&state, s, &ctx, flow, Some(shown), Draft::Cursor(f, &e)).await, &e)
        }
    }
}

/// `POST /o/{org}/flows/{id}/cursors/reset`.
pub async fn reset_cursor(state: Data<AppState>, post: Post<CursorForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, flow) = load(&state, s, org, id).await?;
    state.sluice.sync.reset_cursor(&s.caller.principal, ctx.id(), flow.id, &post.form.entity).await?;
    let said = format!("Cursor of {} reset; the next run reads from the start.", post.form.entity);
    Ok(redirect_saying(&post.session, &ctx.at(&format!("/flows/{}", flow.id)), &said))
}

/// "Clear data and resync" for `entity`: confirmed, naming the table it
/// replaces.
fn resync_button(s: &Session, at: &str, flow: &Flow, entity: &str) -> Markup {
    let tables: Vec<&str> =
        flow.config.mappings.iter().filter(|m| m.source_entity == entity).map(|m| m.destination()).collect();
    let question = format!(
        "Clear {} and sync {entity} again? A run starts now and replaces the table with a full copy of the source \
         when the copy commits; until then the table stays as it is.",
        tables.join(", ")
    );
    html! {
        form.inline method="post" action=(format!("{at}/resync")) data-confirm=(question) {
            (csrf(s)) input type="hidden" name="entity" value=(entity); button.danger { "Clear data and resync" }
        }
    }
}

/// `POST /o/{org}/flows/{id}/resync`: the run that clears and reloads.
pub async fn resync(state: Data<AppState>, post: Post<CursorForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let r =
        state.sluice.sync.clear_and_resync(&s.caller.principal, ctx.id(), FlowId::from(id), &post.form.entity).await?;
    let said = format!("Clearing {}: this run replaces its table with a full copy of the source.", post.form.entity);
    Ok(redirect_saying(&post.session, &ctx.at(&format!("/runs/{}", r.id)), &said))
}

/// Whether any mapping of `entity` keeps a cursor (or a change stream's
/// position): a full refresh reads everything every time.
fn keeps_cursor(flow: &Flow, entity: &str) -> bool {
    flow.config.mappings.iter().any(|m| m.source_entity == entity && (m.sync_mode.incremental() || m.sync_mode.cdc()))
}

/// Why a finished run failed, in a line for a list: its first failed
/// entity's own error (the run's error only names the entities), else the
/// run's.
fn failure_cause(r: &Run) -> Option<String> {
    if !r.status.finished() || r.status == RunStatus::Succeeded {
        return None;
    }
    let cause = r
        .entities
        .iter()
        .find_map(|e| e.error.as_ref().map(|err| format!("{}: {err}", e.entity)))
        .or_else(|| r.error.clone())?;
    const SHOWN: usize = 160;
    Some(match cause.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &cause[..at]),
        None => cause,
    })
}

/// The per-entity progress rows of a run (the script redraws them from
/// the event stream).
fn entity_rows(r: &Run) -> Markup {
    html! {
        @for e in &r.entities { tr {
            td { code { (e.entity) } } td { (badge(e.status.as_str())) }
            td.num { (count(e.rows_read)) } td.num { (count(e.rows_written)) }
            td.num { (if e.bytes > 0 { bytes(e.bytes) } else { "—".to_string() }) }
            td.num { (e.rows_per_second.map_or("—".to_string(), |r| format!("{} rows/s", count(r.round() as u64)))) }
            td { (when_opt(e.checkpoint_at)) }
            td.cause { @if let Some(err) = &e.error { span.error { (err) } } }
        } }
    }
}

#[derive(Deserialize, Default)]
pub struct LogQuery {
    /// The least level of the log lines shown: `info` (all), `warn`, `error`.
    level: Option<String>,
}

impl LogQuery {
    fn least(&self) -> Result<LogLevel, ApiError> {
        match self.level.as_deref().filter(|l| !l.is_empty()) {
            None => Ok(LogLevel::Info),
            Some(l) => LogLevel::parse(l)
                .ok_or_else(|| ApiError::validation(vec![FieldError::new("level", "info, warn or error")])),
        }
    }
}

/// A log level's rank: lines at `least` or above are shown.
fn rank(l: LogLevel) -> u8 {
    match l {
        LogLevel::Info => 0,
        LogLevel::Warn => 1,
        LogLevel::Error => 2,
    }
}

/// The runs page's filters: a status, and days from and to (both
/// included, UTC, as YYYY-MM-DD).
#[derive(Deserialize, Default)]
pub struct RunsQuery {
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
    /// The last run of the page before (older runs follow it).
    after: Option<Uuid>,
}

impl RunsQuery {
    /// The query string of the filters (not the page), for the pager.
    fn filters(&self) -> String {
        crate::page::filters_query(&[("status", &self.status), ("since", &self.since), ("until", &self.until)])
    }
}

/// The smallest run id made at `t` or later: ids are UUIDv7, ordered by
/// their time, so the runs before `t` are those below it.
fn first_id_at(t: time::OffsetDateTime) -> Uuid {
    let millis = u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &[0; 10]).into_uuid()
}

/// `GET /o/{org}/flows/{id}/runs`: every run of the flow, newest first,
/// paged, by status and days.
pub async fn runs_page(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>, q: Query<RunsQuery>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, flow) = load(&state, &s, org, id).await?;
    let p = &s.caller.principal;
    let status = match q.status.as_deref().filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(
            RunStatus::parse(v)
                .ok_or_else(|| ApiError::validation(vec![FieldError::new("status", "is not a run status")]))?,
        ),
    };
    let since = crate::page::day_bound("since", &q.since, false)?;
    let until = crate::page::day_bound("until", &q.until, true)?;
    // Up to a day: the page starts below that day's end.
    let after = q.after.or_else(|| until.map(first_id_at));
    let request = PageRequest { limit: crate::page::PAGE_SIZE, after };
    let listed = state.sluice.sync.list_runs(p, ctx.id(), flow.id, status, request).await?;
    // From a day: the list ends at the first run before it.
    let mut runs = listed.items;
    let before_since = runs.iter().position(|r| since.is_some_and(|t| r.queued_at < t));
    let next = match before_since {
        Some(i) => {
            runs.truncate(i);
            None
        }
        None => listed.next_cursor,
    };
    let at = ctx.at(&format!("/flows/{}/runs", flow.id));
    let filters = q.filters();
    let base = if filters.is_empty() { at.clone() } else { format!("{at}?{filters}") };
    let name = flow.name.clone();
    let body = html! {
        p { a href=(ctx.at(&format!("/flows/{}", flow.id))) { "← " (flow.name) } }
        form.row method="get" action=(at) {
            label for="r-status" { "Status" }
            select #r-status name="status" {
                option value="" { "any" }
                @for st in RunStatus::ALL { option value=(st.as_str()) selected[status == Some(st)] { (st.as_str()) } }
            }
            label for="r-since" { "From" }
            input #r-since type="date" name="since" value=[q.since.as_deref()];
            label for="r-until" { "to" }
            input #r-until type="date" name="until" value=[q.until.as_deref()];
            button { "Filter" }
            span.muted { "Days in UTC." }
        }
        @if runs.is_empty() { p.muted { "No runs." } } @else { (runs_table(&ctx, &runs, |_| name.clone())) }
        (pager(&base, q.after, next.as_deref()))
    };
    Ok(page(&ctx, &s, "/flows", &format!("Runs of {}", flow.name), body))
}

/// `GET /o/{org}/runs/{id}`: the run with live progress and log.
pub async fn run_page(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>, q: Query<LogQuery>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &s, org).await?;
    let least = q.least()?;
    run_page_with(&state, &s, &ctx, RunId::from(id), None, least).await
}

/// `GET /o/{org}/runs/{id}/log.txt`: the run's whole log as text, one line
/// an entry (time in UTC, level, table, message), to download.
pub async fn run_log_text(
    state: Data<AppState>,
    s: Session,
    path: Path<(Uuid, Uuid)>,
    q: Query<LogQuery>,
) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &s, org).await?;
    let least = rank(q.least()?);
    let logs = state.sluice.sync.run_logs(&s.caller.principal, ctx.id(), RunId::from(id)).await?;
    let mut text = String::new();
    for l in logs.iter().filter(|l| rank(l.level) >= least) {
        let entity = l.entity.as_deref().map(|e| format!(" [{e}]")).unwrap_or_default();
        text.push_str(&format!("{} {}{entity} {}\n", when(l.ts), l.level.as_str(), l.message.replace('\n', " ")));
    }
    Ok(actix_web::HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header((actix_web::http::header::CONTENT_DISPOSITION, format!("attachment; filename=\"run-{id}.log\"")))
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(text))
}

/// A run's page, `shown` above it (what an action on it answered), its log
/// from `least` up.
async fn run_page_with(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    id: RunId,
    shown: Option<Markup>,
    least: LogLevel,
) -> PageResult {
    let p = &s.caller.principal;
    let r = state.sluice.sync.get_run(p, ctx.id(), id).await?;
    let flow = state.sluice.sync.get_flow(p, ctx.id(), r.flow_id).await?;
    let logs: Vec<_> = state
        .sluice
        .sync
        .run_logs(p, ctx.id(), r.id)
        .await?
        .into_iter()
        .filter(|l| rank(l.level) >= rank(least))
        .collect();
    let ahead = state.sluice.sync.run_ahead(p, ctx.id(), &r).await?;
    let last_check = last_verification(state, s, ctx, flow.id).await?;
    let events = format!("/v1/organizations/{}/runs/{}/events", ctx.id(), r.id);
    let at = ctx.at(&format!("/runs/{}", r.id));
    let body = html! {
        @if let Some(m) = shown { (m) }
        @if let Some(a) = &ahead {
            p.notice role="status" {
                "This run is queued behind "
                a href=(ctx.at(&format!("/runs/{}", a.id))) { "run " code { (a.id) } }
                " (" (a.status.as_str()) "), and starts when that one ends: a flow runs one run at a time."
            }
        }
        div #run data-events=(events) data-finished=(r.status.finished()) {
            dl.facts {
                dt { "Flow" } dd { a href=(ctx.at(&format!("/flows/{}", flow.id))) { (flow.name) } }
                dt { "Status" } dd #run-status { (badge(r.status.as_str())) }
                dt { "Trigger" } dd { (r.trigger.as_str()) " · attempt " (r.attempt) }
                dt { "Queued" } dd { (when(r.queued_at)) }
                dt { "Started" } dd #run-started { (when_opt(r.started_at)) }
                dt { "Duration" } dd #run-duration { (duration(&r)) }
                dt { "Trace" } dd { a href=(ctx.at(&format!("/traces/{}", r.trace_id))) { "timeline" } }
            }
            p.error #run-error role="alert" hidden[r.error.is_none()] { (r.error.clone().unwrap_or_default()) }
            @if ctx.can_write() {
                div.row {
                    @if !r.status.finished() {
                        (button(s, &format!("{at}/cancel"), "Cancel run", "danger", Some("Cancel this run? A running run stops at its next batch; what it committed stays.")))
                    } @else if r.status != RunStatus::Succeeded {
                        (button(s, &format!("{at}/retry"), "Retry", "primary", None))
                    }
                }
            }
            h2 { "Progress" }
            table #run-entities {
                thead { tr { th { "Entity" } th { "Status" } th.num { "Rows read" } th.num { "Rows written" } th.num { "Bytes" } th.num { "Rate" } th { "Last checkpoint" } th { "Cause of failure" } } }
                tbody { (entity_rows(&r)) }
            }
            h2 { "Log" }
            nav.row.levels aria-label="Log levels" {
                @for (level, label) in [(LogLevel::Info, "All"), (LogLevel::Warn, "Warnings and errors"), (LogLevel::Error, "Errors")] {
                    a href=(format!("{at}?level={}", level.as_str())) aria-current=[(level == least).then_some("page")] { (label) }
                }
                a.download href=(format!("{at}/log.txt?level={}", least.as_str())) download { "Download" }
            }
            ol.log #run-log aria-live="polite" data-level=(least.as_str()) {
                @for l in &logs {
                    li class=(l.level.as_str()) { time { (when(l.ts)) } " " @if let Some(e) = &l.entity { code { (e) } " " } (l.message) }
                }
            }
            @if r.status.as_str() == "queued" || r.status.as_str() == "running" {
                p.hint #run-live { "Live: this page follows the run until it ends." }
            }
        }
        @if flow.config.mappings.iter().any(verifiable) {
            h2 { "The flow's last verification" }
            (verification_summary(last_check.as_ref()))
        }
    };
    Ok(page(ctx, s, "/flows", &format!("Run of {} ({})", flow.name, r.id), body))
}

/// `POST /o/{org}/runs/{id}/cancel`: a queued run ends at once, a running
/// one at its next batch; back on its page, which says so (or why not).
pub async fn cancel_run(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let id = RunId::from(id);
    match state.sluice.sync.cancel_run(&s.caller.principal, ctx.id(), id).await {
        Ok(_) => Ok(redirect(&ctx.at(&format!("/runs/{id}")))),
        Err(e) => {
            let e = ApiError::from(e);
            failed(run_page_with(&state, s, &ctx, id, Some(error_box(&e)), LogLevel::Info).await, &e)
        }
    }
}

/// `POST /o/{org}/runs/{id}/retry`: queues the run's flow again; on to
/// the new run's page.
pub async fn retry_run(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let p = &s.caller.principal;
    let ended = state.sluice.sync.get_run(p, ctx.id(), RunId::from(id)).await?;
    let r = state.sluice.sync.trigger_run(p, ctx.id(), ended.flow_id, Trigger::Manual).await?;
    Ok(redirect(&ctx.at(&format!("/runs/{}", r.id))))
}

/// `POST /o/{org}/flows/{id}/delete`: on to the flow list; refused (a run
/// of it executes), the flow's page says why, its runs listed.
pub async fn delete(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, flow) = load(&state, s, org, id).await?;
    match state.sluice.sync.delete_flow(&s.caller.principal, ctx.id(), flow.id).await {
        Ok(()) => Ok(redirect(&ctx.at("/flows"))),
        Err(e) => {
            let e = ApiError::from(e);
            failed(flow_page(&state, s, &ctx, flow, Some(error_box(&e))).await, &e)
        }
    }
}

/// `GET /o/{org}/topology`: the flows as a graph of their dependencies.
pub async fn topology(state: Data<AppState>, s: Session, org: Path<Uuid>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let flows = state.sluice.sync.topology(&s.caller.principal, ctx.id()).await?;
    let edges = sluice_domain::sync::flow::edges(&flows);
    let nodes: Vec<svg::Node> = flows
        .iter()
        .map(|f| svg::Node {
            id: f.id.to_string(),
            label: f.name.clone(),
            href: ctx.at(&format!("/flows/{}", f.id)),
            status: f.status.as_str().into(),
        })
        .collect();
    let edges: Vec<(String, String, String)> =
        edges.iter().map(|e| (e.from.to_string(), e.to.to_string(), e.on.as_str().to_string())).collect();
    let body = html! {
        @if nodes.is_empty() { p.muted { "No flows yet." } } @else {
            div.scroll { (svg::graph(&nodes, &edges)) }
            p.hint { "An arrow runs from a flow to the flows that run after it (on success, failure or completion). Click a flow to open it." }
        }
    };
    Ok(page(&ctx, &s, "/topology", "Topology", body))
}

/// `GET /o/{org}/traces/{id}`: a trace's runs as a timeline.
pub async fn trace(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &s, org).await?;
    let p = &s.caller.principal;
    let runs = state.sluice.sync.trace(p, ctx.id(), id).await?;
    let flows = state.sluice.sync.list_flows(p, ctx.id(), None, ALL).await?.items;
    let flow_name = |fid| flows.iter().find(|f| f.id == fid).map_or_else(|| "?".to_string(), |f| f.name.clone());
    let origin = runs.iter().filter_map(|r| r.started_at).min();
    let items: Vec<(String, f64, f64, String)> = runs
        .iter()
        .filter_map(|r| {
            let (o, a) = (origin?, r.started_at?);
            let b = r.finished_at.unwrap_or_else(|| state.sluice.identity.now());
            Some((flow_name(r.flow_id), (a - o).as_seconds_f64(), (b - o).as_seconds_f64(), r.status.as_str().into()))
        })
        .collect();
    let body = html! {
        @if items.is_empty() { p.muted { "No run of this trace has started yet." } } @else { (svg::timeline(&items)) }
        (runs_table(&ctx, &runs, flow_name))
        details { summary { "Trace id" } (json_block(&serde_json::json!(id))) }
    };
    Ok(page(&ctx, &s, "/flows", "Trace", body))
}

/// The schedules people ask for most, offered beside free cron.
const SCHEDULE_PRESETS: [(&str, &str); 7] = [
    ("*/5 * * * *", "every 5 minutes"),
    ("*/15 * * * *", "every 15 minutes"),
    ("0 * * * *", "hourly, on the hour"),
    ("0 */6 * * *", "every 6 hours"),
    ("0 2 * * *", "daily at 02:00 UTC"),
    ("0 2 * * 1-5", "weekdays at 02:00 UTC"),
    ("0 2 * * 1", "weekly, Mondays at 02:00 UTC"),
];

/// A schedule input: cron, with the presets offered as suggestions (each
/// named in words), and a hint saying what the saved expression means.
/// `grid`: in a two-column form, where the hint takes the next row's
/// second column.
pub(crate) fn schedule_field(id: &str, label: &str, value: &str, grid: bool) -> Markup {
    let list = format!("{id}-presets");
    let hint = format!("{id}-hint");
    html! {
        label for=(id) { (label) }
        input id=(id) name="schedule" value=(value) list=(list) autocomplete="off" aria-describedby=(hint)
            placeholder="pick a preset or write cron";
        datalist id=(list) { @for (cron, words) in SCHEDULE_PRESETS { option value=(cron) { (words) } } }
        @if grid { span {} }
        p.hint id=(hint) {
            @if let Some(words) = describe_cron(value) { "Saved: " (words) ". " }
            "Cron, in UTC: minute, hour, day of month, month, day of week. Empty for manual runs only."
        }
    }
}

/// A flow's schedule as lists and pages show it: the expression, and in
/// words what it means when it is a common one.
pub(crate) fn schedule_text(schedule: Option<&str>) -> Markup {
    match schedule {
        None => html! { "manual" },
        Some(cron) => html! {
            code { (cron) }
            @if let Some(words) = describe_cron(cron) { " " span.muted { (words) } }
        },
    }
}

/// Common cron expressions in words (times in UTC, as the scheduler reads
/// them); `None` for the others.
pub(crate) fn describe_cron(expr: &str) -> Option<String> {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = parts.as_slice() else { return None };
    if *dom != "*" || *month != "*" {
        return None;
    }
    let number = |s: &str, max: u32| s.parse::<u32>().ok().filter(|n| *n <= max);
    // A step that does not divide the hour (or the day) evenly is not an
    // even interval: `*/7` runs at :56 and again at :00.
    let every = |s: &str, whole: u32| {
        s.strip_prefix("*/").and_then(|n| n.parse::<u32>().ok()).filter(|n| *n > 0 && whole.is_multiple_of(*n))
    };
    let days = match *dow {
        "*" => None,
        "1-5" => Some("weekdays".to_string()),
        "0,6" | "6,0" => Some("weekends".to_string()),
        d => {
            const NAMES: [&str; 7] =
                ["Sundays", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays"];
            Some(NAMES[number(d, 7)? as usize % 7].to_string())
        }
    };
    let words = match (every(minute, 60), number(minute, 59), *hour) {
        _ if *minute == "*" && *hour == "*" => "every minute".to_string(),
        (Some(1), _, "*") => "every minute".to_string(),
        (Some(n), _, "*") => format!("every {n} minutes"),
        (None, Some(0), "*") => "hourly, on the hour".to_string(),
        (None, Some(m), "*") => format!("hourly at :{m:02}"),
        (None, Some(m), h) => match (every(h, 24), number(h, 23)) {
            (Some(1), _) => format!("hourly at :{m:02}"),
            (Some(n), _) => format!("every {n} hours at :{m:02}"),
            (None, Some(h)) => format!("at {h:02}:{m:02} UTC"),
            _ => return None,
        },
        _ => return None,
    };
    Some(match (days, words.starts_with("at ")) {
        (None, true) => format!("daily {words}"),
        (None, false) => words,
        (Some(d), _) => format!("{d}, {words}"),
    })
}

#[cfg(test)]
mod schedule_tests {
    use super::describe_cron;

    #[test]
    fn common_schedules_read_in_words() {
        let said = |e: &str| describe_cron(e);
        assert_eq!(said("*/15 * * * *").as_deref(), Some("every 15 minutes"));
        assert_eq!(said("* * * * *").as_deref(), Some("every minute"));
        // Steps that do not divide the hour or the day are not intervals.
        assert_eq!(said("*/90 * * * *"), None);
        assert_eq!(said("*/7 * * * *"), None);
        assert_eq!(said("0 */30 * * *"), None);
        assert_eq!(said("0 */5 * * *"), None);
        assert_eq!(said("15 */1 * * *").as_deref(), Some("hourly at :15"));
        assert_eq!(said("*/1 * * * *").as_deref(), Some("every minute"));
        assert_eq!(said("0 * * * *").as_deref(), Some("hourly, on the hour"));
        assert_eq!(said("30 * * * *").as_deref(), Some("hourly at :30"));
        assert_eq!(said("0 */6 * * *").as_deref(), Some("every 6 hours at :00"));
        assert_eq!(said("5 2 * * *").as_deref(), Some("daily at 02:05 UTC"));
        assert_eq!(said("0 2 * * 1-5").as_deref(), Some("weekdays, at 02:00 UTC"));
        assert_eq!(said("0 2 * * 1").as_deref(), Some("Mondays, at 02:00 UTC"));
        assert_eq!(said("0 2 * * 7").as_deref(), Some("Sundays, at 02:00 UTC"));
        assert_eq!(said("0 2 1 * *"), None);
        assert_eq!(said("61 * * * *"), None);
        assert_eq!(said("0 2 * * 9"), None);
        assert_eq!(said("not cron"), None);
    }
}
