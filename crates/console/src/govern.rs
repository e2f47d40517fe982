//! Governance: the catalog, the gateway playground, IaC, and the audit log
//! with the activity feed.

use crate::page::{
    OrgCtx, PageResult, Paging, Post, Problems, Session, audit_changes, audit_resource, badge, button, count, csrf,
    json_block, page, pager, when,
};
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use sluice_domain::catalog::asset::{AssetUpdate, DataAsset, NewAsset};
use sluice_domain::catalog::contract::{ContractField, fields_to_json};
use sluice_domain::gateway::service::GatewayResult;
use sluice_domain::gateway::validate::Outcome;
use sluice_domain::iac::Action;
use sluice_domain::iac::service::ApplyOutcome;
use sluice_domain::shared::audit::AuditFilter;
use sluice_domain::shared::ids::AssetId;
use sluice_domain::shared::page::PageRequest;
use sluice_domain::shared::record::FieldType;
use sluice_http::AppState;
use sluice_http::error::ApiError;
use std::collections::BTreeMap;
use uuid::Uuid;

const ALL: PageRequest = PageRequest { limit: 200, after: None };

fn fields_table(fields: &[ContractField]) -> Markup {
    html! {
        table.compact {
            thead { tr { th { "Field" } th { "Type" } th { "Required" } th { "Tags" } } }
            tbody { @for f in fields { (field_row(f, 0)) } }
        }
    }
}

fn field_row(f: &ContractField, depth: usize) -> Markup {
    html! {
        tr {
            td { span.muted { ("· ".repeat(depth)) } code { (f.name) } }
            td { (serde_json::to_value(f.field_type).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()) }
            td { (if f.required { "yes" } else { "" }) }
            td { @for t in &f.tags { span.tag { (t) } " " } }
        }
        @for c in &f.fields { (field_row(c, depth + 1)) }
    }
}

/// `GET /o/{org}/catalog`.
pub async fn catalog(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<Paging>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    catalog_page(&state, &s, &ctx, &q, None).await
}

/// A contract to start from: every field a type, `sensitive` masks one.
const CONTRACT_TEMPLATE: &str = r#"[
  {"name": "id", "type": "integer", "required": true},
  {"name": "email", "type": "string", "tags": ["sensitive"]},
  {"name": "created_at", "type": "timestamp"}
]"#;

async fn catalog_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    q: &Paging,
    refused: Option<(&ApiError, &NewAssetForm)>,
) -> PageResult {
    let listed = state.sluice.catalog.list_assets(&s.caller.principal, ctx.id(), q.request()).await?;
    let problems = Problems::of(refused.map(|(e, _)| e));
    let sent = refused.map(|(_, f)| f);
    let assets = listed.items;
    let body = html! {
        @if assets.is_empty() { p.muted { "No assets yet: discovery and runs catalogue what they see, and contracts can be added through the API or IaC." } } @else {
            table {
                thead { tr { th { "Asset" } th { "Kind" } th.num { "Version" } th.num { "Fields" } th { "Tags" } th { "Updated" } } }
                tbody { @for a in &assets { tr {
                    td { a href=(ctx.at(&format!("/catalog/{}", a.id))) { (a.name) } }
                    td { (a.kind.as_str()) }
                    td.num { (a.version) } td.num { (a.fields.len()) }
                    td { @for t in tags(a) { span.tag { (t) } " " } }
                    td { (when(a.updated_at)) }
                } } }
            }
            (pager(&ctx.at("/catalog"), q.after, listed.next_cursor.as_deref()))
        }
        @if ctx.can_write() {
            details #new-contract open[refused.is_some()] {
                summary { "New contract" }
                @if let Some((e, _)) = refused { (crate::page::error_box(e)) }
                form.grid method="post" action=(ctx.at("/catalog")) {
                    (csrf(s))
                    label for="contract-name" { "Name" }
                    span {
                        input #contract-name name="name" required value=[sent.map(|f| f.name.as_str())]
                            aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "contract-name")];
                        (problems.note("name", "contract-name"))
                    }
                    label for="contract-description" { "Description" }
                    input #contract-description name="description" value=[sent.map(|f| f.description.as_str())];
                    label for="contract-fields" { "Fields (JSON)" }
                    span {
                        textarea #contract-fields name="fields" rows="8" spellcheck="false"
                            aria-invalid=[problems.invalid("fields")] aria-describedby=[problems.described("fields", "contract-fields")] {
                            (sent.map_or(CONTRACT_TEMPLATE, |f| f.fields.as_str()))
                        }
                        (problems.note("fields", "contract-fields"))
                    }
                    span {} button.primary { "Create contract" }
                }
                p.hint { "Types: " (FieldType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")) ". The gateway validates model output against a contract." }
            }
        }
    };
    let mut res = page(ctx, s, "/catalog", "Catalog", body);
    if let Some((e, _)) = refused {
        *res.status_mut() = e.status();
    }
    Ok(res)
}

fn tags(a: &DataAsset) -> Vec<String> {
    let mut t: Vec<String> = a.fields.iter().flat_map(|f| f.tags.iter().cloned()).collect();
    t.sort();
    t.dedup();
    t
}

/// `GET /o/{org}/catalog/{id}`: fields, versions and dependents.
pub async fn asset(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &s, org).await?;
    let a = state.sluice.catalog.get_asset(&s.caller.principal, ctx.id(), AssetId::from(id)).await?;
    asset_page(&state, &s, &ctx, a, None).await
}

async fn asset_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    a: DataAsset,
    refused: Option<(&ApiError, &BTreeMap<String, String>)>,
) -> PageResult {
    let p = &s.caller.principal;
    let id = a.id;
    let versions = state.sluice.catalog.asset_versions(p, ctx.id(), id).await?;
    let dependents = state.sluice.catalog.asset_dependencies(p, ctx.id(), id).await?;
    let body = html! {
        @if let Some(d) = &a.description { p { (d) } }
        dl.facts {
            dt { "Version" } dd { (a.version) }
            dt { "Id" } dd { code { (a.id) } }
            @if let Some(e) = &a.entity { dt { "Entity" } dd { code { (e) } } }
        }
        h2 { "Fields" }
        (fields_table(&a.fields))
        h2 { "Versions" }
        table {
            thead { tr { th.num { "Version" } th { "Change" } th { "What changed" } th.num { "Fields" } th { "By" } th { "When" } } }
            tbody { @for (i, v) in versions.iter().enumerate().rev() { tr {
                td.num { (v.version) }
                td { (badge(v.change.as_str())) }
                td { @match i.checked_sub(1).and_then(|p| versions.get(p)) {
                    Some(prev) => { @for line in sluice_domain::catalog::drift::describe_change(&prev.fields, &v.fields) { div { code { (line) } } } }
                    None => { span.muted { "first version" } }
                } }
                td.num { (v.fields.len()) } td { (v.created_by.clone().unwrap_or_default()) } td { (when(v.created_at)) }
            } } }
        }
        h2 { "Used by" }
        @if dependents.is_empty() { p.muted { "No flow uses this asset." } } @else {
            ul { @for d in &dependents { li { a href=(ctx.at(&format!("/flows/{}", d.flow_id))) { (d.flow_name) } " — " (d.relation) } } }
        }
        p { a.button href=(ctx.at(&format!("/gateway?asset={}", a.id))) { "Try it in the gateway playground" } }
        @if ctx.can_write() { (asset_edit(s, ctx, &a, refused)) }
        @if ctx.can_write() {
            @let question = if dependents.is_empty() {
                "Delete this asset and its versions?".to_string()
            } else {
                format!("Flows depend on this asset ({}). Delete it and its versions anyway?", dependents.len())
            };
            (button(s, &ctx.at(&format!("/catalog/{}/delete", a.id)), "Delete asset", "danger", Some(&question)))
        }
    };
    let mut res = page(ctx, s, "/catalog", &a.name.clone(), body);
    if let Some((e, _)) = refused {
        *res.status_mut() = e.status();
    }
    Ok(res)
}

/// An asset's edit: its name and description, and each field's type,
/// whether it is required and its tags (`sensitive` masks it in the
/// gateway); or all its fields as JSON (nested ones included).
fn asset_edit(
    s: &Session,
    ctx: &OrgCtx,
    a: &DataAsset,
    refused: Option<(&ApiError, &BTreeMap<String, String>)>,
) -> Markup {
    let at = ctx.at(&format!("/catalog/{}", a.id));
    let problems = Problems::of(refused.map(|(e, _)| e));
    let sent = refused.map(|(_, f)| f);
    let as_json = sent.is_some_and(|f| f.get("mode").map(String::as_str) == Some("json"));
    let none = Problems::default();
    let (table_problems, json_problems) = if as_json { (&none, &problems) } else { (&problems, &none) };
    let value = |key: &str, current: String| sent.and_then(|f| f.get(key).cloned()).unwrap_or(current);
    let json_text = value("fields", serde_json::to_string_pretty(&fields_to_json(&a.fields)).unwrap_or_default());
    html! {
        details.edit open[refused.is_some()] {
            summary { "Edit" }
            @if let Some((e, _)) = refused { (crate::page::error_box(e)) }
            form method="post" action=(at) {
                (csrf(s))
                input type="hidden" name="version" value=(a.version);
                div.grid {
                    label for="asset-name" { "Name" }
                    span {
                        input #asset-name name="name" required value=(value("name", a.name.clone()))
                            aria-invalid=[table_problems.invalid("name")] aria-describedby=[table_problems.described("name", "asset-name")];
                        (table_problems.note("name", "asset-name"))
                    }
                    label for="asset-description" { "Description" }
                    textarea #asset-description name="description" rows="2" { (value("description", a.description.clone().unwrap_or_default())) }
                }
                div.scroll {
                    table.compact {
                        thead { tr { th { "Field" } th { "Type" } th { "Required" } th { "Tags (comma-separated)" } } }
                        tbody { @for (i, f) in a.fields.iter().enumerate() {
                            @let key = |k: &str| format!("f{i}.{k}");
                            @let path = |k: &str| format!("fields[{i}].{k}");
                            @let type_now = value(&key("type"), f.field_type.as_str().to_string());
                            @let tags_now = value(&key("tags"), f.tags.join(", "));
                            @let required_now = sent.map_or(f.required, |x| x.contains_key(&key("required")));
                            tr {
                                td { code { (f.name) } @if !f.fields.is_empty() { " " span.muted { "(" (f.fields.len()) " nested: edit as JSON)" } } }
                                td {
                                    select id=(key("type")) name=(key("type")) aria-label=(format!("Type of {}", f.name))
                                        aria-invalid=[table_problems.invalid(&path("type"))]
                                        aria-describedby=[table_problems.described(&path("type"), &key("type"))] {
                                        @for t in FieldType::ALL { option selected[t.as_str() == type_now] { (t.as_str()) } }
                                    }
                                    (table_problems.note(&path("type"), &key("type")))
                                }
                                td { input type="checkbox" name=(key("required")) value="on" checked[required_now] aria-label=(format!("{} required", f.name)); }
                                td {
                                    input id=(key("tags")) name=(key("tags")) value=(tags_now) aria-label=(format!("Tags of {}", f.name))
                                        aria-invalid=[table_problems.invalid(&path("tags"))] aria-describedby=[table_problems.described(&path("tags"), &key("tags"))];
                                    (table_problems.note(&path("tags"), &key("tags")))
                                }
                            }
                        } }
                    }
                }
                div.row { button.primary { "Save" } }
            }
            details open[as_json] {
                summary { "Edit the fields as JSON" }
                form.stack method="post" action=(at) {
                    (csrf(s))
                    input type="hidden" name="mode" value="json";
                    input type="hidden" name="version" value=(a.version);
                    label for="asset-fields" { "Fields (JSON): " code { "[{name, type, required, tags, fields}]" } }
                    textarea #asset-fields name="fields" rows="12" spellcheck="false"
                        aria-invalid=[json_problems.invalid("fields")] aria-describedby=[json_problems.described("fields", "asset-fields")] { (json_text) }
                    (json_problems.note("fields", "asset-fields"))
                    button.primary { "Save fields" }
                }
            }
            p.hint { "A change of fields makes a new version, marked breaking when a field is removed or retyped." }
        }
    }
}

/// The fields of `a` as the table form left them: each top-level field's
/// type, required and tags; nested fields as they are.
fn edited_fields(a: &DataAsset, form: &BTreeMap<String, String>) -> Value {
    let mut fields = a.fields.clone();
    for (i, f) in fields.iter_mut().enumerate() {
        if let Some(t) = form.get(&format!("f{i}.type")).and_then(|t| FieldType::parse(t)) {
            f.field_type = t;
        }
        f.required = form.contains_key(&format!("f{i}.required"));
        if let Some(tags) = form.get(&format!("f{i}.tags")) {
            f.tags = tags.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect();
        }
    }
    fields_to_json(&fields)
}

/// `POST /o/{org}/catalog/{id}`: the edit, as the table or as JSON.
pub async fn update_asset(
    state: Data<AppState>,
    post: Post<BTreeMap<String, String>>,
    path: Path<(Uuid, Uuid)>,
) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let a = state.sluice.catalog.get_asset(&s.caller.principal, ctx.id(), AssetId::from(id)).await?;
    let f = &post.form;
    // Edits are made to the version the page showed: the fields are
    // matched by their place in it.
    let seen = f.get("version").and_then(|v| v.parse::<i32>().ok());
    let update = if seen.is_some_and(|v| v != a.version) {
        Err(ApiError::new(
            sluice_domain::shared::error::Code::Conflict,
            format!(
                "the asset changed since this page was loaded (it is now version {}): reload it and edit again",
                a.version
            ),
        ))
    } else if f.get("mode").map(String::as_str) == Some("json") {
        match serde_json::from_str::<Value>(f.get("fields").map_or("", String::as_str)) {
            Ok(v) => Ok(AssetUpdate { fields: Some(v), ..AssetUpdate::default() }),
            Err(e) => {
                Err(ApiError::validation(vec![sluice_domain::FieldError::new("fields", format!("is not JSON: {e}"))]))
            }
        }
    } else {
        let description = f.get("description").map(|d| d.trim().to_string()).filter(|d| !d.is_empty());
        let fields = edited_fields(&a, f);
        Ok(AssetUpdate {
            name: f.get("name").cloned(),
            // Unchanged fields make no new version.
            fields: (fields != fields_to_json(&a.fields)).then_some(fields),
            description: (description != a.description).then_some(description),
        })
    };
    let saved = match update {
        Ok(u) => {
            state.sluice.catalog.update_asset(&s.caller.principal, ctx.id(), a.id, u).await.map_err(ApiError::from)
        }
        Err(e) => Err(e),
    };
    match saved {
        Ok(after) => {
            let said = if after.version > a.version {
                format!("Saved as version {}.", after.version)
            } else {
                "Saved.".into()
            };
            Ok(crate::page::redirect_saying(&post.session, &ctx.at(&format!("/catalog/{}", after.id)), &said))
        }
        Err(e) => asset_page(&state, s, &ctx, a, Some((&e, f))).await,
    }
}

#[derive(Deserialize)]
pub struct NewAssetForm {
    name: String,
    #[serde(default)]
    description: String,
    fields: String,
}

/// `POST /o/{org}/catalog`: a contract made by hand.
pub async fn create_asset(state: Data<AppState>, post: Post<NewAssetForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let created = match serde_json::from_str::<Value>(&f.fields) {
        Ok(fields) => {
            let new = NewAsset {
                name: f.name.clone(),
                fields,
                description: Some(f.description.trim().to_string()).filter(|d| !d.is_empty()),
            };
            state.sluice.catalog.create_asset(&s.caller.principal, ctx.id(), new).await.map_err(ApiError::from)
        }
        Err(e) => {
            Err(ApiError::validation(vec![sluice_domain::FieldError::new("fields", format!("is not JSON: {e}"))]))
        }
    };
    match created {
        Ok(a) => Ok(crate::page::redirect_saying(
            &post.session,
            &ctx.at(&format!("/catalog/{}", a.id)),
            "Contract created at version 1.",
        )),
        Err(e) => catalog_page(&state, s, &ctx, &Paging::default(), Some((&e, f))).await,
    }
}

/// `POST /o/{org}/catalog/{id}/delete`: deletes the asset (the page asked
/// first, naming the flows that depend on it), then to the catalog.
pub async fn delete_asset(
    state: Data<AppState>,
    post: Post<crate::page::Empty>,
    path: Path<(Uuid, Uuid)>,
) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    state.sluice.catalog.delete_asset(&s.caller.principal, ctx.id(), AssetId::from(id), true).await?;
    Ok(crate::page::redirect(&ctx.at("/catalog")))
}

#[derive(Deserialize, Default)]
pub struct GatewayForm {
    #[serde(default)]
    asset: String,
    #[serde(default)]
    payload: String,
}

/// `GET /o/{org}/gateway`.
pub async fn gateway(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<GatewayForm>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    gateway_page(&state, &s, &ctx, &q, None).await
}

async fn gateway_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    f: &GatewayForm,
    result: Option<Markup>,
) -> PageResult {
    let assets = state.sluice.catalog.list_assets(&s.caller.principal, ctx.id(), ALL).await?.items;
    let usage = state.sluice.billing.validations(&s.caller.principal, ctx.id()).await?;
    // The request a program sends for the asset picked (or the first).
    let picked = assets.iter().find(|a| a.id.to_string() == f.asset).or(assets.first());
    let curl = picked.map(|a| {
        format!(
            "curl -s {}/v1/gateway/validate -H \"X-Api-Key: $KEY\" -H 'Content-Type: application/json' \\\n  -d '{{\"asset_id\": \"{}\", \"payload_raw\": \"Sure! {{\\\"name\\\": \\\"Ada\\\"}}\"}}'",
            state.console_url.trim_end_matches('/'),
            a.id
        )
    });
    let body = html! {
        p.quota {
            "Validations this month: " strong { (count(usage.validations_used.max(0) as u64)) }
            @match usage.validations_limit {
                Some(l) => { " of " (count(l.max(0) as u64)) " " meter min="0" max=(l) value=(usage.validations_used) {} }
                None => { " (no limit)" }
            }
            span.muted { " · counted again from " (when(usage.validations_period_end)) }
        }
        p.hint { "Paste a model's output: the gateway finds the JSON in it, repairs it, checks it against the asset's contract and masks tagged fields." }
        form.stack method="post" action=(ctx.at("/gateway")) {
            (csrf(s))
            label for="gw-asset" { "Asset" }
            select #gw-asset name="asset" required {
                @for a in &assets { option value=(a.id) selected[a.id.to_string() == f.asset] { (a.name) " (v" (a.version) ")" } }
            }
            label for="gw-payload" { "LLM output" }
            textarea #gw-payload name="payload" rows="10" required spellcheck="false" placeholder="Sure! Here is the JSON: {\"name\": \"Ada\", …}" { (f.payload) }
            button.primary { "Validate" }
        }
        @if let Some(r) = result { section #gw-result { h2 { "Result" } (r) } }
        @if let (Some(c), Some(a)) = (&curl, picked) {
            h2 { "From a program" }
            p.hint { "The same validation for " strong { (a.name) } ", with an API key (Settings → API keys) in " code { "$KEY" } ":" }
            pre.json #gw-curl { (c) }
        }
    };
    Ok(page(ctx, s, "/gateway", "Gateway playground", body))
}

/// `POST /o/{org}/gateway`.
pub async fn gateway_validate(state: Data<AppState>, post: Post<GatewayForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let result = match f.asset.parse::<Uuid>() {
        Err(_) => html! { p.error { "Pick an asset." } },
        Ok(asset) => match state
            .sluice
            .gateway
            .validate_in(&s.caller.principal, ctx.id(), AssetId::from(asset), &f.payload, &[])
            .await
        {
            Ok(GatewayResult::Checked(Outcome::Valid { data, governance_applied, safety_findings, repairs })) => {
                html! {
                    p { (badge("valid")) " The cleaned object:" }
                    (json_block(&serde_json::Value::Object(data)))
                    (repairs_table(&repairs))
                    @if !governance_applied.is_empty() { p { "Governance applied: " @for g in &governance_applied { code { (g) } " " } } }
                    @if !safety_findings.is_empty() {
                        h3 { "Safety findings" }
                        ul { @for x in &safety_findings { li { code { (x.field) } " " (x.kind) ": " (x.detail) } } }
                    }
                }
            }
            Ok(GatewayResult::Checked(Outcome::Invalid { missing_fields, type_mismatches, repairs, retry_prompt })) => {
                html! {
                    p { (badge("invalid")) " The output drifts from the contract." }
                    (repairs_table(&repairs))
                    h3 { "Retry prompt" }
                    pre { (retry_prompt) }
                    @if !missing_fields.is_empty() { p { "Missing: " @for m in &missing_fields { code { (m) } " " } } }
                    @if !type_mismatches.is_empty() {
                        table.compact {
                            thead { tr { th { "Field" } th { "Expected" } th { "Received" } } }
                            tbody { @for t in &type_mismatches { tr { td { code { (t.field) } } td { (t.expected) } td { (t.received) } } } }
                        }
                    }
                }
            }
            Ok(GatewayResult::NoJson) => html! { p { (badge("invalid")) " No JSON object was found in the output." } },
            Ok(GatewayResult::Rejected { repairs }) => {
                html! { p { (badge("invalid")) " A repair was rejected." } (repairs_table(&repairs)) }
            }
            Err(e) => html! { p.error role="alert" { (ApiError::from(e).message) } },
        },
    };
    gateway_page(&state, s, &ctx, f, Some(result)).await
}

/// `GET /o/{org}/iac`: the organization as a document, to edit and apply.
pub async fn iac(state: Data<AppState>, s: Session, org: Path<Uuid>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let doc = state.sluice.iac.export_iac(&s.caller.principal, ctx.id()).await?;
    let text = sluice_domain::iac::to_yaml(&doc).map_err(ApiError::from)?;
    iac_page(&s, &ctx, &text, None)
}

fn iac_page(s: &Session, ctx: &OrgCtx, text: &str, result: Option<Markup>) -> PageResult {
    let body = html! {
        @if let Some(r) = &result { section #iac-result { (r) } }
        p.hint { "The organization's integrations, connections and flows as one YAML document (secrets as ***). Edit it, see the plan, then apply. " a href="/docs/" { "API docs" } }
        form.stack method="post" action=(ctx.at("/iac")) enctype="application/x-www-form-urlencoded" {
            (csrf(s))
            label for="iac-doc" { "Document" }
            textarea #iac-doc name="document" rows="18" spellcheck="false" { (text) }
            label for="iac-file" { "…or load a file" }
            input #iac-file type="file" accept=".yaml,.yml,text/yaml" data-load-into="iac-doc";
            @if ctx.can_write() {
                div.row {
                    button name="action" value="plan" { "Plan" }
                    button.primary name="action" value="apply" data-confirm="Apply this document?" { "Apply" }
                }
            }
        }
    };
    Ok(page(ctx, s, "/iac", "Infrastructure as code", body))
}

#[derive(Deserialize)]
pub struct IacForm {
    document: String,
    action: String,
}

fn plan_view(outcome: &ApplyOutcome) -> Markup {
    let changed = outcome.plan.changes.iter().filter(|c| !matches!(c.action, Action::Unchanged)).count();
    html! {
        h2 { @if outcome.dry_run { "Plan" } @else { "Applied" } }
        p { (changed) " change(s)" @if outcome.dry_run { "; nothing written yet." } @else { "." } }
        table.plan {
            thead { tr { th { "Kind" } th { "Name" } th { "Action" } th { "Changes" } } }
            tbody { @for c in &outcome.plan.changes {
                @let action = match c.action { Action::Created => "create", Action::Updated => "update", Action::Unchanged => "unchanged" };
                tr {
                    td { (serde_json::to_value(c.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()) }
                    td { code { (c.name) } } td { (badge(action)) }
                    td { @for d in &c.diff {
                        div.diff { code { (d.path) } ": " del { (d.before.to_string()) } " → " ins { (d.after.to_string()) } }
                    } }
                }
            } }
        }
    }
}

/// `POST /o/{org}/iac`: plans (dry run) or applies the document.
pub async fn iac_apply(state: Data<AppState>, post: Post<IacForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let dry_run = f.action != "apply";
    let result = match state.sluice.iac.apply_iac(&s.caller.principal, ctx.id(), &f.document, dry_run).await {
        Ok(outcome) => plan_view(&outcome),
        Err(e) => {
            let e = ApiError::from(e);
            html! { div.error role="alert" { p { (e.message) }
            @if let Some(errors) = e.details.get("errors").and_then(|v| v.as_array()) {
                ul { @for x in errors { li { code { (x["field"].as_str().unwrap_or("")) } " " (x["message"].as_str().unwrap_or("")) } } }
            } } }
        }
    };
    iac_page(s, &ctx, &f.document, Some(result))
}

#[derive(Deserialize, Default)]
pub struct AuditQuery {
    action: Option<String>,
    resource_type: Option<String>,
    /// The activity feed's filter: an event type, or its first part
    /// (`run` takes `run.failed` and `run.succeeded`).
    event: Option<String>,
    severity: Option<String>,
    /// The audit log's days, from and to (both included), as YYYY-MM-DD.
    since: Option<String>,
    until: Option<String>,
    /// The last entry of the page before (older entries follow it).
    after: Option<Uuid>,
}

impl AuditQuery {
    /// The query string of the filters (not the page), for the pager.
    fn filters(&self) -> String {
        crate::page::filters_query(&[
            ("action", &self.action),
            ("resource_type", &self.resource_type),
            ("event", &self.event),
            ("severity", &self.severity),
            ("since", &self.since),
            ("until", &self.until),
        ])
    }
}

/// Audit entries a page.
const AUDIT_PAGE: u64 = 100;

/// `GET /o/{org}/audit`: the audit log (filtered by action, resource and
/// days, paged) and the activity feed.
pub async fn audit(state: Data<AppState>, s: Session, org: Path<Uuid>, q: Query<AuditQuery>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let p = &s.caller.principal;
    let nonempty = |v: &Option<String>| v.clone().filter(|x| !x.trim().is_empty());
    let filter = AuditFilter {
        action: nonempty(&q.action),
        resource_type: nonempty(&q.resource_type),
        since: crate::page::day_bound("since", &q.since, false)?,
        until: crate::page::day_bound("until", &q.until, true)?,
        ..AuditFilter::default()
    };
    let listed = state
        .sluice
        .identity
        .list_audit_logs(p, ctx.id(), &filter, PageRequest { limit: AUDIT_PAGE, after: q.after })
        .await?;
    let entries = listed.items;
    let filters = q.filters();
    let base = if filters.is_empty() { ctx.at("/audit") } else { format!("{}?{filters}", ctx.at("/audit")) };
    let event = nonempty(&q.event);
    let severity = nonempty(&q.severity);
    let activity: Vec<_> = state
        .sluice
        .monitoring
        .activity(p, ctx.id(), None, 200)
        .await?
        .into_iter()
        .filter(|a| {
            event
                .as_deref()
                .is_none_or(|e| a.event_type.as_str() == e || a.event_type.as_str().starts_with(&format!("{e}.")))
                && severity.as_deref().is_none_or(|s| a.severity == s)
        })
        .take(50)
        .collect();
    let body = html! {
        div.columns {
            section {
                h2 { "Audit log" }
                form.row method="get" action=(ctx.at("/audit")) {
                    label.sr for="f-action" { "Action" }
                    input #f-action name="action" placeholder="action, e.g. flow.create" value=[q.action.as_deref()];
                    label.sr for="f-type" { "Resource type" }
                    input #f-type name="resource_type" placeholder="resource type" value=[q.resource_type.as_deref()];
                    label for="f-since" { "From" }
                    input #f-since type="date" name="since" value=[q.since.as_deref()];
                    label for="f-until" { "to" }
                    input #f-until type="date" name="until" value=[q.until.as_deref()];
                    @if let Some(e) = &q.event { input type="hidden" name="event" value=(e); }
                    @if let Some(v) = &q.severity { input type="hidden" name="severity" value=(v); }
                    button { "Filter" }
                }
                @if entries.is_empty() { p.muted { "Nothing recorded." } } @else {
                    table.compact {
                        thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Resource" } } }
                        tbody { @for e in &entries { tr {
                            td { (when(e.created_at)) }
                            td { (e.actor.name.clone().or_else(|| e.actor.id.clone()).unwrap_or_else(|| e.actor.kind.as_str().to_string())) }
                            td { code { (e.action) } }
                            td { (audit_resource(&ctx, e)) (audit_changes(e)) }
                        } } }
                    }
                }
                (pager(&base, q.after, listed.next_cursor.as_deref()))
            }
            section {
                h2 { "Activity" }
                form.row method="get" action=(ctx.at("/audit")) {
                    @if let Some(a) = &q.action { input type="hidden" name="action" value=(a); }
                    @if let Some(r) = &q.resource_type { input type="hidden" name="resource_type" value=(r); }
                    label.sr for="f-event" { "Event" }
                    input #f-event name="event" placeholder="event, e.g. run.failed or run" value=[q.event.as_deref()];
                    label.sr for="f-severity" { "Severity" }
                    select #f-severity name="severity" {
                        option value="" { "any severity" }
                        @for sev in ["info", "warning", "error"] { option value=(sev) selected[severity.as_deref() == Some(sev)] { (sev) } }
                    }
                    button { "Filter" }
                }
                @if activity.is_empty() { p.muted { "No events." } }
                ul.feed { @for a in &activity {
                    li { (badge(&a.severity)) " " code { (a.event_type) } " " (a.message) br; time.muted { (when(a.created_at)) } }
                } }
            }
        }
    };
    Ok(page(&ctx, &s, "/audit", "Audit and activity", body))
}

/// What the gateway repaired, in order.
fn repairs_table(repairs: &[sluice_domain::gateway::Repair]) -> maud::Markup {
    html! {
        @if repairs.is_empty() { p.muted { "Strict JSON that matched exactly: nothing repaired." } } @else {
            h3 { "Repairs" }
            table.compact {
                thead { tr { th { "Path" } th { "Kind" } th { "Detail" } } }
                tbody { @for r in repairs { tr { td { code { (r.path) } } td { (r.kind.as_str()) } td { (r.detail) } } } }
            }
        }
    }
}
