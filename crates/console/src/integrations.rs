//! Integrations: reusable credentials that connections are built on. The
//! list, a new integration, and one integration's page (rename, change or
//! remove credentials, the connections using it, delete). Credentials are
//! never shown here, except to an Admin who asks to reveal them.

use crate::page::{
    Empty, LOOKUP, OrgCtx, PageError, PageResult, Paging, Post, Session, button, csrf, error_box, page, pager,
    redirect, when,
};
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use sluice_domain::FieldError;
use sluice_domain::connect::connection::Connection;
use sluice_domain::connect::connector::ConnectorSpec;
use sluice_domain::connect::integration::{Integration, PLACEHOLDER};
use sluice_domain::connect::service::{IntegrationUpdate, NewIntegration};
use sluice_domain::shared::ids::IntegrationId;
use sluice_http::AppState;
use sluice_http::error::ApiError;
use std::collections::BTreeMap;
use uuid::Uuid;

/// The credential keys of a connector type, empty, as a JSON template.
fn template(spec: &ConnectorSpec) -> String {
    let keys: serde_json::Map<String, Value> = spec
        .config_fields
        .iter()
        .filter(|f| f.credential)
        .map(|f| (f.name.to_string(), Value::String(String::new())))
        .collect();
    serde_json::to_string_pretty(&keys).unwrap_or_default()
}

/// The connections of the organization that use `id`.
async fn users(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    id: Option<IntegrationId>,
) -> Result<Vec<Connection>, ApiError> {
    let all = state.sluice.connect.list_connections(&s.caller.principal, ctx.id(), LOOKUP).await?.items;
    Ok(all.into_iter().filter(|c| c.integration_id.is_some() && (id.is_none() || c.integration_id == id)).collect())
}

/// `GET /o/{org}/integrations`.
pub async fn list(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<Paging>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    list_page(&state, &s, &ctx, &q, None, None).await
}

async fn list_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    q: &Paging,
    error: Option<&ApiError>,
    form: Option<&IntegrationForm>,
) -> PageResult {
    let page_of = state.sluice.connect.list_integrations(&s.caller.principal, ctx.id(), q.request()).await?;
    let used = users(state, s, ctx, None).await?;
    let specs = state.sluice.connect.connector_specs();
    let providers = state.sluice.connect.oauth_providers();
    let picked = form.map_or("postgres", |f| f.integration_type.as_str());
    let credentials = form.map(|f| f.credentials.clone()).unwrap_or_else(|| {
        specs.iter().find(|sp| sp.connector_type == picked).map(template).unwrap_or_else(|| "{}".into())
    });
    let problems = crate::page::Problems::of(error);
    let body = html! {
        (tabs(ctx, "/integrations"))
        p.hint { "An integration holds credentials that several connections share; a connection's own settings override them." }
        @if page_of.items.is_empty() { p.muted { "No integrations yet." } } @else {
            table {
                thead { tr { th { "Name" } th { "Type" } th { "Credentials" } th { "Connections" } th { "Updated" } } }
                tbody { @for i in &page_of.items { tr {
                    td { a href=(ctx.at(&format!("/integrations/{}", i.id))) { (i.name) } }
                    td { (i.integration_type) }
                    td { (keys(&i.credentials.masked())) }
                    td { (used.iter().filter(|c| c.integration_id == Some(i.id)).count()) }
                    td { (when(i.updated_at)) }
                } } }
            }
            (pager(&ctx.at("/integrations"), q.after, page_of.next_cursor.as_deref()))
        }
        @if ctx.can_write() {
            h2 #new { "New integration" }
            @if let Some(e) = error { (error_box(e)) }
            form.grid method="post" action=(ctx.at("/integrations")) {
                (csrf(s))
                label for="int-name" { "Name" }
                span {
                    input #int-name name="name" required maxlength="100" value=[form.map(|f| f.name.as_str())]
                        aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "int-name")];
                    (problems.note("name", "int-name"))
                }
                label for="int-type" { "Type" }
                select #int-type name="integration_type" data-templates data-target="int-credentials" {
                    @for sp in &specs {
                        option value=(sp.connector_type) data-template=(template(sp)) selected[sp.connector_type == picked] { (sp.title) }
                    }
                }
                label for="int-credentials" { "Credentials (JSON)" }
                span {
                    textarea #int-credentials name="credentials" rows="5" spellcheck="false" autocomplete="off"
                        aria-invalid=[problems.invalid("credentials")] aria-describedby=[problems.described("credentials", "int-credentials")] { (credentials) }
                    (problems.note("credentials", "int-credentials"))
                }
                span {}
                p.hint { "Each value is the secret itself, or a reference resolved when used: " code { "env:NAME" } " or " code { "aws:secretsmanager:ARN" } ", for names the operator granted to this organization." }
                span {}
                div.row { button.primary { "Create" } }
            }
            @if !providers.is_empty() {
                h2 { "Connect with OAuth" }
                @for p in &providers {
                    form.inline method="get" action=(format!("/v1/organizations/{}/integrations/{}/auth/start", ctx.id(), p)) {
                        label.sr for=(format!("oauth-{p}")) { "Name of the " (p) " integration" }
                        input id=(format!("oauth-{p}")) name="name" required maxlength="100" placeholder=(format!("{p} integration name"));
                        button { "Connect " (p) "…" }
                    }
                }
            }
        }
    };
    let mut res = page(ctx, s, "/connections", "Integrations", body);
    if let Some(e) = error {
        *res.status_mut() = e.status();
    }
    Ok(res)
}

/// `password: ***, token: ***`.
fn keys(masked: &BTreeMap<String, String>) -> Markup {
    html! {
        @if masked.is_empty() { span.muted { "none" } }
        @for (i, k) in masked.keys().enumerate() { @if i > 0 { ", " } code { (k) } }
    }
}

/// Connections and Integrations, the two pages of the Connections section.
pub fn tabs(ctx: &OrgCtx, current: &str) -> Markup {
    html! {
        nav.tabs aria-label="Connections and integrations" {
            @for (path, label) in [("/connections", "Connections"), ("/integrations", "Integrations")] {
                a href=(ctx.at(path)) aria-current=[(path == current).then_some("page")] { (label) }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct IntegrationForm {
    name: String,
    integration_type: String,
    #[serde(default)]
    credentials: String,
}

fn parse_credentials(text: &str) -> Result<BTreeMap<String, Value>, ApiError> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_json::from_str(text).map_err(|e| {
        ApiError::validation(vec![FieldError::new("credentials", format!("must be a JSON object of strings: {e}"))])
    })
}

/// `POST /o/{org}/integrations`.
pub async fn create(state: Data<AppState>, post: Post<IntegrationForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let q = Paging::default();
    let credentials = match parse_credentials(&f.credentials) {
        Ok(c) => c,
        Err(e) => return list_page(&state, s, &ctx, &q, Some(&e), Some(f)).await,
    };
    // An empty value is a key left blank in the template, not a secret.
    let credentials = credentials.into_iter().filter(|(_, v)| v.as_str() != Some("")).collect();
    let new = NewIntegration { name: f.name.clone(), integration_type: f.integration_type.clone(), credentials };
    match state.sluice.connect.create_integration(&s.caller.principal, ctx.id(), new).await {
        Ok(i) => Ok(redirect(&ctx.at(&format!("/integrations/{}", i.id)))),
        Err(e) => list_page(&state, s, &ctx, &q, Some(&e.into()), Some(f)).await,
    }
}

/// What an integration's page shows under its facts.
enum Panel {
    None,
    Failed(ApiError, String),
    /// The decrypted credentials, for an Admin who asked.
    Revealed(BTreeMap<String, String>),
}

async fn detail_page(state: &AppState, s: &Session, ctx: &OrgCtx, i: Integration, panel: Panel) -> PageResult {
    let at = ctx.at(&format!("/integrations/{}", i.id));
    let used = users(state, s, ctx, Some(i.id)).await?;
    let draft = match &panel {
        Panel::Failed(_, draft) if !draft.is_empty() => draft.clone(),
        _ => serde_json::to_string_pretty(&i.credentials.masked()).unwrap_or_default(),
    };
    let body = html! {
        p { a href=(ctx.at("/integrations")) { "← Integrations" } }
        dl.facts {
            dt { "Type" } dd { (i.integration_type) }
            dt { "Credentials" } dd { (keys(&i.credentials.masked())) }
            dt { "Created" } dd { (when(i.created_at)) }
            dt { "Updated" } dd { (when(i.updated_at)) }
        }
        @match &panel {
            Panel::Failed(e, _) => { (error_box(e)) }
            Panel::Revealed(values) => {
                div.secret role="status" {
                    p { strong { "Credentials" } " (shown because you asked; this page is not cached):" }
                    table.compact { tbody { @for (k, v) in values { tr { td { code { (k) } } td { code { (v) } } } } } }
                }
            }
            Panel::None => {}
        }
        h2 { "Connections using it" }
        @if used.is_empty() { p.muted { "None." } } @else {
            ul { @for c in &used { li { a href=(ctx.at(&format!("/connections/{}", c.id))) { (c.name) } " " span.muted { (c.connector_type) } } } }
        }
        @if ctx.can_write() {
            h2 { "Edit" }
            form.grid method="post" action=(at) {
                (csrf(s))
                label for="int-name" { "Name" }
                input #int-name name="name" required maxlength="100" value=(i.name);
                label for="int-credentials" { "Credentials (JSON)" }
                textarea #int-credentials name="credentials" rows="5" spellcheck="false" autocomplete="off" { (draft) }
                span {}
                p.hint { code { (PLACEHOLDER) } " keeps a stored value, a new string replaces it, " code { "null" } " removes the key." }
                span {}
                div.row { button.primary { "Save" } }
            }
            div.row {
                @if ctx.is_admin() && !i.credentials.is_empty() {
                    (button(s, &format!("{at}/reveal"), "Reveal credentials", "", Some("Show this integration's credentials on screen?")))
                }
                (button(s, &format!("{at}/delete"), "Delete", "danger", Some("Delete this integration? Connections must not use it any more.")))
            }
        }
    };
    let mut res = page(ctx, s, "/connections", &i.name.clone(), body);
    if let Panel::Failed(e, _) = &panel {
        *res.status_mut() = e.status();
    }
    Ok(res)
}

async fn load(state: &AppState, s: &Session, org: Uuid, id: Uuid) -> Result<(OrgCtx, Integration), PageError> {
    let ctx = OrgCtx::load(state, s, org).await?;
    let i = state.sluice.connect.get_integration(&s.caller.principal, ctx.id(), IntegrationId::from(id)).await?;
    Ok((ctx, i))
}

/// `GET /o/{org}/integrations/{id}`.
pub async fn detail(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, i) = load(&state, &s, org, id).await?;
    detail_page(&state, &s, &ctx, i, Panel::None).await
}

#[derive(Deserialize)]
pub struct EditForm {
    name: String,
    #[serde(default)]
    credentials: String,
}

/// `POST /o/{org}/integrations/{id}`: renames it and merges credentials.
pub async fn update(state: Data<AppState>, post: Post<EditForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, i) = load(&state, s, org, id).await?;
    let f = &post.form;
    let update = match parse_credentials(&f.credentials) {
        Ok(c) => IntegrationUpdate { name: Some(f.name.clone()), credentials: Some(c) },
        Err(e) => return detail_page(&state, s, &ctx, i, Panel::Failed(e, f.credentials.clone())).await,
    };
    match state.sluice.connect.update_integration(&s.caller.principal, ctx.id(), i.id, update).await {
        Ok(after) => {
            Ok(crate::page::redirect_saying(&post.session, &ctx.at(&format!("/integrations/{}", after.id)), "Saved."))
        }
        Err(e) => detail_page(&state, s, &ctx, i, Panel::Failed(e.into(), f.credentials.clone())).await,
    }
}

/// `POST /o/{org}/integrations/{id}/reveal` (Admin).
pub async fn reveal(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, _) = load(&state, s, org, id).await?;
    let i = state.sluice.connect.integration_details(&s.caller.principal, ctx.id(), IntegrationId::from(id)).await?;
    let values = i.credentials.0.clone();
    detail_page(&state, s, &ctx, i, Panel::Revealed(values)).await
}

/// `POST /o/{org}/integrations/{id}/delete`.
pub async fn delete(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, i) = load(&state, s, org, id).await?;
    match state.sluice.connect.delete_integration(&s.caller.principal, ctx.id(), i.id).await {
        Ok(()) => Ok(redirect(&ctx.at("/integrations"))),
        Err(e) => detail_page(&state, s, &ctx, i, Panel::Failed(e.into(), String::new())).await,
    }
}
