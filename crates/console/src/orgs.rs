//! Organizations: the list, the overview with its plots, and the settings
//! page (members, invitations, API keys, billing, notification rules).

use crate::page::{
    Empty, OrgCtx, PageResult, Paging, Post, Session, badge, bare, button, bytes, count, csrf, html_response, notice,
    page, pager, redirect, short_id, when, when_opt,
};
use crate::svg;
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use sluice_domain::identity::access::Role;
use sluice_domain::identity::invitation::InvitationStatus;
use sluice_domain::identity::service::{CreatedInvitation, NewOrganization};
use sluice_domain::shared::ids::{ApiKeyId, InvitationId, RuleId, UserId};
use sluice_domain::shared::page::PageRequest;
use sluice_domain::sync::flow::{Flow, Run, RunStatus};
use sluice_domain::sync::views::StreamHealth;
use sluice_http::AppState;
use uuid::Uuid;

const ALL: PageRequest = PageRequest { limit: 200, after: None };

#[derive(Deserialize)]
pub struct HomeQuery {
    org: Option<Uuid>,
    after: Option<Uuid>,
}

/// `GET /`: the caller's organizations; straight to the one picked.
pub async fn home(state: Data<AppState>, s: Session, q: Query<HomeQuery>) -> PageResult {
    if let Some(org) = q.org {
        return Ok(redirect(&format!("/o/{org}")));
    }
    home_page(&state, &s, q.after, None).await
}

/// The organizations' page; `refused`: a new organization refused, why and
/// the name sent.
async fn home_page(
    state: &AppState,
    s: &Session,
    after: Option<Uuid>,
    refused: Option<(&sluice_http::error::ApiError, &str)>,
) -> PageResult {
    let problems = crate::page::Problems::of(refused.map(|(e, _)| e));
    let paging = Paging { after };
    let listed = state.sluice.identity.list_organizations(&s.caller.principal, paging.request()).await?;
    let orgs = listed.items;
    let markup = bare(
        "Organizations",
        html! {
            main.narrow {
                h1 { "Organizations" }
                @if orgs.is_empty() { p { "You belong to no organization yet. Create one, or accept an invitation." } }
                ul.cards {
                    @for o in &orgs {
                        li { a href=(format!("/o/{}", o.id)) { strong { (o.name) } span.muted { " " (o.slug) } } }
                    }
                }
                (pager("/", after, listed.next_cursor.as_deref()))
                h2 { "New organization" }
                @if let Some((e, _)) = refused { (crate::page::error_box(e)) }
                form.stack method="post" action="/orgs" {
                    (csrf(s))
                    label for="org-name" { "Name" }
                    input #org-name name="name" required maxlength="100" value=[refused.map(|(_, name)| name)]
                        aria-invalid=[problems.invalid("name")] aria-describedby=[problems.described("name", "org-name")];
                    (problems.note("name", "org-name"))
                    button.primary { "Create" }
                }
                form method="post" action="/logout" { (csrf(s)) button.link { "Sign out" } }
            }
        },
    );
    let mut res = html_response(markup);
    if let Some((e, _)) = refused {
        *res.status_mut() = e.status();
    }
    Ok(res)
}

#[derive(Deserialize)]
pub struct NameForm {
    name: String,
}

#[derive(Deserialize)]
pub struct InvitationToken {
    token: String,
}

/// `GET /invitations/accept?token=`: the invitation link's page. Signed in
/// (the sign-in brings the invitee back here), it says which organization
/// and role the invitation offers, and asks before joining.
pub async fn invitation_page(state: Data<AppState>, s: Session, q: Query<InvitationToken>) -> PageResult {
    let (org, role) = state.sluice.identity.invitation_offer(&s.caller.principal, &q.token).await?;
    Ok(html_response(bare(
        "Invitation",
        html! {
            main.narrow {
                h1 { "Join " (org.name) }
                p { "You are invited to join " strong { (org.name) } " as " strong { (role.as_str()) } "." }
                form.stack method="post" action="/invitations/accept" {
                    (csrf(&s))
                    input type="hidden" name="token" value=(q.token);
                    button.primary { "Accept and join" }
                }
                p { a href="/" { "Not now" } }
            }
        },
    )))
}

/// `POST /invitations/accept`: joins, then on to the organization.
pub async fn accept_invitation(state: Data<AppState>, post: Post<InvitationToken>) -> PageResult {
    let (org, _) = state.sluice.identity.accept_invitation(&post.session.caller.principal, &post.form.token).await?;
    Ok(redirect(&format!("/o/{}", org.id)))
}

/// `POST /orgs`.
pub async fn create(state: Data<AppState>, post: Post<NameForm>) -> PageResult {
    let new = NewOrganization { name: post.form.name.clone(), slug: None };
    match state.sluice.identity.create_organization(&post.session.caller.principal, new).await {
        Ok(org) => Ok(redirect(&format!("/o/{}", org.id))),
        Err(e) => {
            let e = sluice_http::error::ApiError::from(e);
            home_page(&state, &post.session, None, Some((&e, &post.form.name))).await
        }
    }
}

/// How far back the overview looks, and how many runs it reads at most.
const RECENT_DAYS: i64 = 14;
const RECENT_RUNS: u64 = 5_000;

/// The organization's runs of the last two weeks, newest first (one query).
pub(super) async fn recent_runs(state: &AppState, s: &Session, ctx: &OrgCtx) -> Vec<Run> {
    state.sluice.sync.recent_runs(&s.caller.principal, ctx.id(), RECENT_DAYS, RECENT_RUNS).await.unwrap_or_default()
}

/// Rows written per day over the last two weeks.
fn rows_per_day(runs: &[Run], today: time::Date) -> Vec<(String, f64)> {
    (0..14)
        .rev()
        .map(|back| {
            let day = today - time::Duration::days(back);
            let rows: u64 = runs
                .iter()
                .filter(|r| r.finished_at.is_some_and(|t| t.date() == day))
                .flat_map(|r| r.entities.iter().map(|e| e.rows_written))
                .sum();
            (format!("{:02}-{:02}", u8::from(day.month()), day.day()), rows as f64)
        })
        .collect()
}

/// Each flow's finished runs' durations in seconds.
fn durations(flows: &[Flow], runs: &[Run]) -> Vec<(String, Vec<f64>)> {
    flows
        .iter()
        .map(|f| {
            let d = runs
                .iter()
                .filter(|r| r.flow_id == f.id)
                .filter_map(|r| Some((r.finished_at? - r.started_at?).as_seconds_f64()))
                .collect();
            (f.name.clone(), d)
        })
        .filter(|(_, d): &(String, Vec<f64>)| !d.is_empty())
        .collect()
}

/// `GET /o/{org}`: counts, plots and the latest runs.
pub async fn overview(state: Data<AppState>, s: Session, org: Path<Uuid>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    let p = &s.caller.principal;
    let d = state.sluice.monitoring.dashboard(p, ctx.id()).await?;
    let flows = state.sluice.sync.list_flows(p, ctx.id(), None, ALL).await?.items;
    let runs = recent_runs(&state, &s, &ctx).await;
    let streams = stream_health(&state, &s, &ctx, &flows).await;
    let name_of = |id| flows.iter().find(|f| f.id == id).map_or("?", |f| f.name.as_str());
    let today = state.sluice.identity.now().date();
    let stat = |label: &str, value: u64, href: String| {
        html! { a.stat href=(href) { span.value { (count(value)) } span.label { (label) } } }
    };
    let body = html! {
        section.stats aria-label="Last 24 hours" {
            (stat("active flows", d.flows_active, ctx.at("/flows")))
            (stat("paused flows", d.flows_paused, ctx.at("/flows")))
            (stat("runs succeeded", d.runs_succeeded, ctx.at("/flows")))
            (stat("runs failed", d.runs_failed, ctx.at("/flows")))
            (stat("running · queued", d.runs_running + d.runs_queued, ctx.at("/flows")))
            (stat("rows synced", d.rows_synced, ctx.at("/flows")))
            (stat("connections failing", d.connections_failing, ctx.at("/connections")))
        }
        p.hint { "Counts cover the last 24 hours." }
        div.charts {
            (svg::bars("Rows synced per day", "rows", &rows_per_day(&runs, today)))
            @let series = durations(&flows, &runs);
            @if series.is_empty() {
                figure.chart { figcaption { "Run durations per flow" } p.muted { "No finished runs yet." } }
            } @else {
                (svg::strips("Run durations per flow", "s", &series))
            }
        }
        @if !streams.is_empty() {
            h2 { "Change streams" }
            table {
                thead { tr { th { "Flow" } th { "Log the source keeps" } th { "Budget" } } }
                tbody { @for (flow, h) in &streams { tr {
                    td { a href=(ctx.at(&format!("/flows/{}", flow.id))) { (flow.name) } }
                    td {
                        @match (h.retained_bytes, &h.unknown) {
                            (_, Some(_)) => { span.muted { "unknown (the source did not answer)" } }
                            (None, None) => { span.muted { "none yet" } }
                            (Some(b), None) => { (bytes(b)) @if h.over_budget() { " " (badge("over budget")) } }
                        }
                    }
                    td { (bytes(h.budget_bytes)) }
                } } }
            }
        }
        h2 { "Latest runs" }
        (runs_table(&ctx, &runs[..runs.len().min(15)], |id| name_of(id).to_string()))
    };
    Ok(page(&ctx, &s, "", &ctx.org.name.clone(), body))
}

/// How many change streams the overview asks their sources about.
const OVERVIEW_STREAMS: usize = 20;

/// The change streams of the organization's CDC flows (the first
/// [`OVERVIEW_STREAMS`]), each read from its source, all at once.
async fn stream_health<'a>(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    flows: &'a [Flow],
) -> Vec<(&'a Flow, StreamHealth)> {
    let p = &s.caller.principal;
    let capturing = flows.iter().filter(|f| f.captures()).take(OVERVIEW_STREAMS);
    let asked = capturing.map(|f| async move { (f, state.sluice.sync.stream_health(p, ctx.id(), f.id).await) });
    futures_util::future::join_all(asked).await.into_iter().filter_map(|(f, h)| Some((f, h.ok().flatten()?))).collect()
}

/// A table of runs, each linking to its page.
pub(super) fn runs_table(
    ctx: &OrgCtx,
    runs: &[Run],
    flow_name: impl Fn(sluice_domain::shared::ids::FlowId) -> String,
) -> Markup {
    html! {
        @if runs.is_empty() { p.muted { "No runs yet." } } @else {
            table {
                thead { tr { th { "Run" } th { "Flow" } th { "Status" } th { "Trigger" } th { "Queued" } th.num { "Rows written" } th.num { "Duration" } } }
                tbody {
                    @for r in runs {
                        tr {
                            td { a href=(ctx.at(&format!("/runs/{}", r.id))) { (short_id(&r.id.to_string())) } }
                            td { (flow_name(r.flow_id)) }
                            td { (badge(r.status.as_str())) }
                            td { (r.trigger.as_str()) }
                            td { (when(r.queued_at)) }
                            td.num { (count(r.entities.iter().map(|e| e.rows_written).sum())) }
                            td.num { (duration(r)) }
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn duration(r: &Run) -> String {
    match (r.started_at, r.finished_at) {
        (Some(a), Some(b)) => format!("{:.1} s", (b - a).as_seconds_f64()),
        (Some(_), None) if r.status == RunStatus::Running => "running".into(),
        _ => "—".into(),
    }
}

/// `GET /o/{org}/settings`.
pub async fn settings(state: Data<AppState>, s: Session, org: Path<Uuid>) -> PageResult {
    let ctx = OrgCtx::load(&state, &s, org.into_inner()).await?;
    settings_page(&state, &s, ctx, None).await
}

/// A settings form refused: which (`rename`, `invite`, `key`, `rule`), why,
/// and what it held.
pub(crate) struct Refused {
    form: &'static str,
    error: sluice_http::error::ApiError,
    sent: std::collections::BTreeMap<&'static str, String>,
}

async fn settings_page(state: &AppState, s: &Session, ctx: OrgCtx, shown: Option<Markup>) -> PageResult {
    settings_page_with(state, s, ctx, shown, None).await
}

async fn settings_page_with(
    state: &AppState,
    s: &Session,
    ctx: OrgCtx,
    shown: Option<Markup>,
    refused: Option<&Refused>,
) -> PageResult {
    // The refused form's problems, each next to its field, its input kept.
    let problems_of = |form: &str| match refused.filter(|r| r.form == form) {
        Some(r) => crate::page::Problems::of(Some(&r.error)),
        None => crate::page::Problems::default(),
    };
    let sent = |form: &str, key: &str| refused.filter(|r| r.form == form).and_then(|r| r.sent.get(key).cloned());
    let (rename_p, invite_p, key_p, rule_p) =
        (problems_of("rename"), problems_of("invite"), problems_of("key"), problems_of("rule"));

    let p = &s.caller.principal;
    let id = ctx.id();
    let members = state.sluice.identity.list_members(p, id, ALL).await?.items;
    let invitations =
        if ctx.is_admin() { state.sluice.identity.list_invitations(p, id, ALL).await?.items } else { vec![] };
    let keys = if ctx.is_admin() { state.sluice.identity.list_api_keys(p, id, ALL).await?.items } else { vec![] };
    let billing = state.sluice.billing.status(p, id).await;
    let rules = state.sluice.monitoring.list_rules(p, id, ALL).await?.items;
    let body = html! {
        @if let Some(m) = shown { (m) }
        @if let Some(r) = refused { (crate::page::error_box(&r.error)) }
        @if ctx.is_admin() {
            section {
                h2 { "Organization" }
                div.row {
                    form.inline method="post" action=(ctx.at("/rename")) {
                        (csrf(s))
                        label.sr for="org-name" { "Name" }
                        input #org-name name="name" required maxlength="100" value=(sent("rename", "name").unwrap_or_else(|| ctx.org.name.clone()))
                            aria-invalid=[rename_p.invalid("name")] aria-describedby=[rename_p.described("name", "org-name")];
                        button { "Rename" }
                        (rename_p.note("name", "org-name"))
                    }
                    (button(s, &ctx.at("/delete"), "Delete organization", "danger",
                        Some("Delete this organization, its connections, flows and runs? This cannot be undone.")))
                }
            }
        }
        section {
            h2 { "Members" }
            table {
                thead { tr { th { "Name" } th { "E-mail" } th { "Role" } th { "Joined" } @if ctx.is_admin() { th { "" } } } }
                tbody { @for m in &members { tr {
                    td { (m.name.clone().unwrap_or_default()) } td { (m.email.clone().unwrap_or_default()) }
                    td {
                        @if ctx.is_admin() {
                            form.inline method="post" action=(ctx.at(&format!("/members/{}/role", m.user_id))) {
                                (csrf(s))
                                label.sr for=(format!("role-{}", m.user_id)) { "Role" }
                                select id=(format!("role-{}", m.user_id)) name="role" {
                                    @for r in Role::ALL { option selected[r == m.role] { (r.as_str()) } }
                                }
                                button { "Change" }
                            }
                        } @else { (m.role.as_str()) }
                    }
                    td { (when(m.joined_at)) }
                    @if ctx.is_admin() { td {
                        (button(s, &ctx.at(&format!("/members/{}/remove", m.user_id)), "Remove", "danger",
                            Some("Remove this member? They lose access to the organization.")))
                    } }
                } } }
            }
            @if ctx.is_admin() {
                h3 { "Invitations" }
                @if !invitations.is_empty() {
                    table {
                        thead { tr { th { "E-mail" } th { "Role" } th { "Status" } th { "Expires" } th { "" } } }
                        tbody { @for i in &invitations { tr {
                            td { (i.email) } td { (i.role.as_str()) } td { (badge(i.status.as_str())) } td { (when(i.expires_at)) }
                            td { @if i.status == InvitationStatus::Pending {
                                (button(s, &ctx.at(&format!("/invitations/{}/resend", i.id)), "Resend", "", Some("Make a new token for this invitation? The one sent before stops working.")))
                                (button(s, &ctx.at(&format!("/invitations/{}/revoke", i.id)), "Revoke", "danger", Some("Revoke this invitation? Its token stops working.")))
                            } }
                        } } }
                    }
                }
                form.row method="post" action=(ctx.at("/invitations")) {
                    (csrf(s))
                    label.sr for="inv-email" { "E-mail" }
                    input #inv-email name="email" type="email" placeholder="colleague@example.com" required value=[sent("invite", "email")]
                        aria-invalid=[invite_p.invalid("email")] aria-describedby=[invite_p.described("email", "inv-email")];
                    (invite_p.note("email", "inv-email"))
                    (role_select("inv-role", "role"))
                    button { "Invite" }
                }
            }
        }
        @if ctx.is_admin() {
            section {
                h2 { "API keys" }
                @if !keys.is_empty() {
                    table {
                        thead { tr { th { "Name" } th { "Prefix" } th { "Roles" } th { "Last used" } th { "" } } }
                        tbody { @for k in &keys { tr {
                            td { (k.name) } td { code { (k.prefix) } }
                            td { (k.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")) }
                            td { (when_opt(k.last_used_at)) }
                            td { @if k.revoked_at.is_some() { (badge("revoked")) } @else {
                                (button(s, &ctx.at(&format!("/api-keys/{}/revoke", k.id)), "Revoke", "danger", Some("Revoke this key? Clients using it stop working.")))
                            } }
                        } } }
                    }
                }
                form.row method="post" action=(ctx.at("/api-keys")) {
                    (csrf(s))
                    label.sr for="key-name" { "Key name" }
                    input #key-name name="name" placeholder="ci-deploy" required value=[sent("key", "name")]
                        aria-invalid=[key_p.invalid("name")] aria-describedby=[key_p.described("name", "key-name")];
                    (key_p.note("name", "key-name"))
                    (role_select("key-role", "role"))
                    button { "Create key" }
                }
            }
        }
        section {
            h2 { "Billing" }
            @match &billing {
                Ok(b) => {
                    dl.facts {
                        dt { "Plan" } dd { (b.subscription.plan.as_str()) }
                        dt { "Status" } dd { (badge(b.subscription.status.as_str())) }
                        dt { "Renews" } dd { (when_opt(b.subscription.current_period_end)) }
                        dt { "Validations this month" } dd {
                            (count(b.validations_used.max(0) as u64)) " of "
                            (b.validations_limit.map_or("unlimited".to_string(), |l| count(l.max(0) as u64)))
                            @if let Some(l) = b.validations_limit.filter(|l| *l > 0) {
                                meter min="0" max=(l) value=(b.validations_used) {}
                            }
                        }
                    }
                    @if ctx.is_admin() {
                        div.row {
                            (button(s, &ctx.at("/billing/checkout?plan=pro"), "Upgrade to Pro", "primary", None))
                            (button(s, &ctx.at("/billing/checkout?plan=enterprise"), "Upgrade to Enterprise", "", None))
                            (button(s, &ctx.at("/billing/portal"), "Manage billing", "", None))
                        }
                    }
                }
                Err(e) => { p.muted { (e.to_string()) } }
            }
        }
        section {
            h2 { "Notification rules" }
            @if !rules.is_empty() {
                table {
                    thead { tr { th { "Name" } th { "Event" } th { "Channel" } th { "Enabled" } th { "" } } }
                    tbody { @for r in &rules { tr {
                        td { (crate::rules::link(&ctx, r)) } td { code { (r.event) } } td { (r.channel.kind.as_str()) }
                        td { (if r.enabled { "yes" } else { "no" }) }
                        td { @if ctx.can_write() {
                            div.row {
                                @if r.enabled {
                                    (button(s, &ctx.at(&format!("/rules/{}/disable", r.id)), "Disable", "", None))
                                } @else {
                                    (button(s, &ctx.at(&format!("/rules/{}/enable", r.id)), "Enable", "", None))
                                }
                                (button(s, &ctx.at(&format!("/rules/{}/delete", r.id)), "Delete", "danger", Some("Delete this rule?")))
                            }
                        } }
                    } } }
                }
            }
            @if ctx.can_write() {
                form.grid method="post" action=(ctx.at("/rules")) {
                    (csrf(s))
                    label for="rule-name" { "Name" }
                    span {
                        input #rule-name name="name" required value=[sent("rule", "name")]
                            aria-invalid=[rule_p.invalid("name")] aria-describedby=[rule_p.described("name", "rule-name")];
                        (rule_p.note("name", "rule-name"))
                    }
                    label for="rule-event" { "Event" }
                    select #rule-event name="event" {
                        @for e in sluice_domain::monitoring::rule::EVENTS { option { (e) } }
                    }
                    label for="rule-channel" { "Channel" }
                    select #rule-channel name="channel_type" { option value="webhook" { "Webhook" } option value="slack" { "Slack" } }
                    label for="rule-url" { "URL" }
                    span {
                        input #rule-url name="url" type="url" required placeholder="https://hooks.example.com/sluice" value=[sent("rule", "url")]
                            aria-invalid=[rule_p.invalid("channel.url")] aria-describedby=[rule_p.described("channel.url", "rule-url")];
                        (rule_p.note("channel.url", "rule-url"))
                    }
                    span {} button { "Add rule" }
                }
            }
        }
    };
    Ok(page(&ctx, s, "/settings", "Settings", body))
}

fn role_select(id: &str, name: &str) -> Markup {
    html! {
        label.sr for=(id) { "Role" }
        select id=(id) name=(name) { @for r in Role::ALL { option selected[r == Role::Viewer] { (r.as_str()) } } }
    }
}

#[derive(Deserialize)]
pub struct InviteForm {
    email: String,
    role: String,
}

/// `POST /o/{org}/invitations`: shows the invitation's token once.
pub async fn invite(
    state: Data<AppState>,
    post: Post<InviteForm>,
    org: Path<Uuid>,
    req: actix_web::HttpRequest,
) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let role: Role = post.form.role.parse()?;
    match state.sluice.identity.create_invitation(&s.caller.principal, ctx.id(), &post.form.email, role).await {
        Ok(created) => settings_page(&state, s, ctx, Some(invitation_token(&state, &req, &created))).await,
        Err(e) => refused(&state, s, ctx, "invite", e, [("email", post.form.email.clone())]).await,
    }
}

/// `POST /o/{org}/invitations/{id}/resend`: shows the new token once.
pub async fn resend_invitation(
    state: Data<AppState>,
    post: Post<Empty>,
    path: Path<(Uuid, Uuid)>,
    req: actix_web::HttpRequest,
) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let created =
        state.sluice.identity.resend_invitation(&s.caller.principal, ctx.id(), InvitationId::from(id)).await?;
    settings_page(&state, s, ctx, Some(invitation_token(&state, &req, &created))).await
}

/// `POST /o/{org}/invitations/{id}/revoke`.
pub async fn revoke_invitation(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &post.session, org).await?;
    let p = &post.session.caller.principal;
    state.sluice.identity.revoke_invitation(p, ctx.id(), InvitationId::from(id)).await?;
    Ok(redirect(&ctx.at("/settings")))
}

/// A new invitation's link (its token in it, at the address the admin
/// reached the console by), shown once.
fn invitation_token(state: &AppState, req: &actix_web::HttpRequest, created: &CreatedInvitation) -> Markup {
    // The console's configured address; without one, the Host this
    // request came to (never forwarded headers, which any client sets).
    let base = match state.console_url.trim_end_matches('/') {
        "" => {
            let host = req.headers().get(actix_web::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
            format!("{}://{host}", req.connection_info().scheme())
        }
        url => url.to_string(),
    };
    let link = format!("{base}/invitations/accept?token={}", crate::page::urlencode(created.token.expose()));
    html! {
        div.once role="status" {
            p {
                "Invitation for " strong { (created.invitation.email) } " created. Send them this link; it is shown once. "
                "They sign in with that e-mail, then accept:"
            }
            p { a.secret.invite-link href=(link) { (link) } }
            p.hint { "Or the token alone, for " code { "POST /v1/invitations/accept" } ": " code.secret { (created.token.expose()) } }
        }
    }
}

#[derive(Deserialize)]
pub struct RoleForm {
    role: String,
}

/// `POST /o/{org}/members/{user}/role` (Admin; the last Admin stays).
pub async fn member_role(state: Data<AppState>, post: Post<RoleForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, user) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    let role: Role = post.form.role.parse()?;
    let m = state.sluice.identity.update_member_role(&s.caller.principal, ctx.id(), UserId::from(user), role).await?;
    let who = m.email.clone().or(m.name.clone()).unwrap_or_else(|| "The member".into());
    Ok(crate::page::redirect_saying(&post.session, &ctx.at("/settings"), &format!("{who} is now {}.", m.role.as_str())))
}

/// `POST /o/{org}/members/{user}/remove` (Admin; the last Admin stays).
pub async fn remove_member(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, user) = path.into_inner();
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org).await?;
    state.sluice.identity.remove_member(&s.caller.principal, ctx.id(), UserId::from(user)).await?;
    Ok(crate::page::redirect_saying(&post.session, &ctx.at("/settings"), "Member removed."))
}

/// `POST /o/{org}/api-keys`: shows the key once.
pub async fn create_key(state: Data<AppState>, post: Post<KeyForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let role: Role = post.form.role.parse()?;
    let created =
        match state.sluice.identity.create_api_key(&s.caller.principal, ctx.id(), &post.form.name, &[role]).await {
            Ok(c) => c,
            Err(e) => return refused(&state, s, ctx, "key", e, [("name", post.form.name.clone())]).await,
        };
    let shown = html! {
        div.once role="status" {
            p { "API key " strong { (created.key.name) } " created. Copy it now; it is shown once:" }
            code.secret #new-key { (created.plain.expose()) }
        }
    };
    settings_page(&state, s, ctx, Some(shown)).await
}

#[derive(Deserialize)]
pub struct KeyForm {
    name: String,
    role: String,
}

/// `POST /o/{org}/api-keys/{id}/revoke`.
pub async fn revoke_key(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &post.session, org).await?;
    state.sluice.identity.revoke_api_key(&post.session.caller.principal, ctx.id(), ApiKeyId::from(id)).await?;
    Ok(redirect(&ctx.at("/settings")))
}

#[derive(Deserialize)]
pub struct PlanQuery {
    plan: String,
}

/// `POST /o/{org}/billing/checkout?plan=`: on to the provider's checkout.
pub async fn checkout(state: Data<AppState>, post: Post<Empty>, org: Path<Uuid>, q: Query<PlanQuery>) -> PageResult {
    let ctx = OrgCtx::load(&state, &post.session, org.into_inner()).await?;
    let back = format!("{}{}", state.console_url.trim_end_matches('/'), ctx.at("/settings"));
    let session = state
        .sluice
        .billing
        .checkout(&post.session.caller.principal, ctx.id(), &q.plan, Some(&back), Some(&back))
        .await?;
    Ok(redirect(&session.url))
}

/// `POST /o/{org}/billing/portal`.
pub async fn portal(state: Data<AppState>, post: Post<Empty>, org: Path<Uuid>) -> PageResult {
    let ctx = OrgCtx::load(&state, &post.session, org.into_inner()).await?;
    let back = format!("{}{}", state.console_url.trim_end_matches('/'), ctx.at("/settings"));
    let url = state.sluice.billing.portal(&post.session.caller.principal, ctx.id(), Some(&back)).await?;
    Ok(redirect(&url))
}

#[derive(Deserialize)]
pub struct RuleForm {
    name: String,
    event: String,
    channel_type: String,
    url: String,
}

/// `POST /o/{org}/rules`: shows a webhook's signing secret once.
pub async fn create_rule(state: Data<AppState>, post: Post<RuleForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let f = &post.form;
    let input = sluice_domain::monitoring::rule::RuleInput {
        name: f.name.clone(),
        event: f.event.clone(),
        flow_id: None,
        channel_type: f.channel_type.clone(),
        url: f.url.clone(),
        secret: None,
        enabled: Some(true),
    };
    let saved = match state.sluice.monitoring.create_rule(&s.caller.principal, ctx.id(), input).await {
        Ok(saved) => saved,
        Err(e) => return refused(&state, s, ctx, "rule", e, [("name", f.name.clone()), ("url", f.url.clone())]).await,
    };
    let shown = match saved.generated_secret {
        Some(secret) => html! {
            div.once role="status" {
                p { "Rule " strong { (saved.rule.name) } " created. Its signing secret, shown once:" }
                code.secret { (secret.expose()) }
            }
        },
        None => notice(&format!("Rule {} created.", saved.rule.name)),
    };
    settings_page(&state, s, ctx, Some(shown)).await
}

#[derive(Deserialize)]
pub struct RenameForm {
    name: String,
}

/// The settings page with form `form` refused by `e`: the problem next to
/// its field, the input kept, answered with `e`'s status.
async fn refused<const N: usize>(
    state: &AppState,
    s: &Session,
    ctx: OrgCtx,
    form: &'static str,
    e: sluice_domain::Error,
    sent: [(&'static str, String); N],
) -> PageResult {
    let error = sluice_http::error::ApiError::from(e);
    let status = error.status();
    let r = Refused { form, error, sent: sent.into_iter().collect() };
    let mut res = settings_page_with(state, s, ctx, None, Some(&r)).await?;
    *res.status_mut() = status;
    Ok(res)
}

/// The settings page with `e` above it, answered with `e`'s status.
async fn settings_refused(state: &AppState, s: &Session, ctx: OrgCtx, e: sluice_domain::Error) -> PageResult {
    let e = sluice_http::error::ApiError::from(e);
    let status = e.status();
    let mut res = settings_page(state, s, ctx, Some(crate::page::error_box(&e))).await?;
    *res.status_mut() = status;
    Ok(res)
}

/// `POST /o/{org}/rename` (Admin).
pub async fn rename(state: Data<AppState>, post: Post<RenameForm>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    let update =
        sluice_domain::identity::service::OrganizationUpdate { name: Some(post.form.name.clone()), slug: None };
    match state.sluice.identity.update_organization(&s.caller.principal, ctx.id(), update).await {
        Ok(_) => Ok(crate::page::redirect_saying(&post.session, &ctx.at("/settings"), "Renamed.")),
        Err(e) => refused(&state, s, ctx, "rename", e, [("name", post.form.name.clone())]).await,
    }
}

/// `POST /o/{org}/delete` (Admin): to the organizations' list after.
pub async fn delete(state: Data<AppState>, post: Post<Empty>, org: Path<Uuid>) -> PageResult {
    let s = &post.session;
    let ctx = OrgCtx::load(&state, s, org.into_inner()).await?;
    match state.sluice.identity.delete_organization(&s.caller.principal, ctx.id()).await {
        Ok(()) => Ok(redirect("/")),
        Err(e) => settings_refused(&state, s, ctx, e).await,
    }
}

/// `POST /o/{org}/rules/{id}/enable` and `…/disable`: a rule turned on
/// or off, nothing else changed.
pub async fn enable_rule(state: Data<AppState>, post: Post<FromForm>, path: Path<(Uuid, Uuid, String)>) -> PageResult {
    let (org, id, action) = path.into_inner();
    let ctx = OrgCtx::load(&state, &post.session, org).await?;
    let enabled = action == "enable";
    state
        .sluice
        .monitoring
        .set_rule_enabled(&post.session.caller.principal, ctx.id(), RuleId::from(id), enabled)
        .await?;
    let said = if enabled { "Rule enabled." } else { "Rule disabled: it delivers nothing until enabled." };
    let back = if post.form.from == "rule" { format!("/rules/{id}") } else { "/settings".to_string() };
    Ok(crate::page::redirect_saying(&post.session, &ctx.at(&back), said))
}

/// Which page a form was sent from, to go back to: `rule` (its page), or
/// the settings.
#[derive(Deserialize)]
pub struct FromForm {
    #[serde(default)]
    from: String,
}

/// `POST /o/{org}/rules/{id}/delete`.
pub async fn delete_rule(state: Data<AppState>, post: Post<Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let ctx = OrgCtx::load(&state, &post.session, org).await?;
    state.sluice.monitoring.delete_rule(&post.session.caller.principal, ctx.id(), RuleId::from(id)).await?;
    Ok(crate::page::redirect_saying(&post.session, &ctx.at("/settings"), "Rule deleted, with its deliveries."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_per_day_covers_two_weeks_ending_today() {
        let days = rows_per_day(&[], time::macros::date!(2026 - 11 - 23));
        assert_eq!(days.len(), 14);
        assert_eq!(days.last().map(|d| d.0.as_str()), Some("11-23"));
        assert_eq!(days[0].0, "11-10");
    }
}
