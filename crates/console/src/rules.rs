//! A notification rule's page: what it sends where, edited; its
//! deliveries (delivered, refused with the reason, failed, pending with
//! the next attempt); a test sent through it.

use crate::page::{
    OrgCtx, PageError, PageResult, Paging, Post, Problems, Session, badge, button, csrf, error_box, page, pager,
    redirect_saying, when, when_opt,
};
use actix_web::web::{Data, Path, Query};
use maud::{Markup, html};
use serde::Deserialize;
use sluice_domain::monitoring::rule::{EVENTS, NotificationRule, RuleInput};
use sluice_domain::shared::ids::RuleId;
use sluice_http::AppState;
use sluice_http::error::ApiError;
use uuid::Uuid;

async fn load(state: &AppState, s: &Session, org: Uuid, id: Uuid) -> Result<(OrgCtx, NotificationRule), PageError> {
    let ctx = OrgCtx::load(state, s, org).await?;
    let r = state.sluice.monitoring.get_rule(&s.caller.principal, ctx.id(), RuleId::from(id)).await?;
    Ok((ctx, r))
}

/// `GET /o/{org}/rules/{id}`.
pub async fn detail(state: Data<AppState>, s: Session, path: Path<(Uuid, Uuid)>, q: Query<Paging>) -> PageResult {
    let (org, id) = path.into_inner();
    let (ctx, r) = load(&state, &s, org, id).await?;
    rule_page(&state, &s, &ctx, r, &q, None).await
}

async fn rule_page(
    state: &AppState,
    s: &Session,
    ctx: &OrgCtx,
    r: NotificationRule,
    q: &Paging,
    refused: Option<(&ApiError, &RuleForm)>,
) -> PageResult {
    let p = &s.caller.principal;
    let deliveries = state.sluice.monitoring.deliveries(p, ctx.id(), r.id, q.request()).await?;
    let at = ctx.at(&format!("/rules/{}", r.id));
    let problems = Problems::of(refused.map(|(e, _)| e));
    let sent = refused.map(|(_, f)| f);
    let name = sent.map_or(r.name.as_str(), |f| f.name.as_str());
    let event = sent.map_or(r.event.as_str(), |f| f.event.as_str());
    let url = sent.map_or(r.channel.url.as_str(), |f| f.url.as_str());
    let flow = sent.map_or_else(|| r.flow_id.map(|f| f.to_string()).unwrap_or_default(), |f| f.flow_id.clone());
    let flows = state.sluice.sync.list_flows(p, ctx.id(), None, crate::page::LOOKUP).await?.items;
    let field = |id: &str, key: &str| (problems.invalid(key), problems.described(key, id));
    let body = html! {
        dl.facts {
            dt { "Sends" } dd {
                code { (r.event) }
                @if let Some(f) = r.flow_id {
                    " of " a href=(ctx.at(&format!("/flows/{f}"))) { (flows.iter().find(|x| x.id == f).map_or_else(|| f.to_string(), |x| x.name.clone())) }
                }
            }
            dt { "To" } dd { (r.channel.kind.as_str()) " " code { (r.channel.url) } }
            dt { "Enabled" } dd { (if r.enabled { "yes" } else { "no: it delivers nothing until enabled" }) }
            dt { "Created" } dd { (when(r.created_at)) }
        }
        @if ctx.can_write() {
            div.row {
                (button(s, &format!("{at}/test"), "Send a test", "primary", None))
                @let toggle = if r.enabled { "disable" } else { "enable" };
                form.inline method="post" action=(format!("{at}/{toggle}")) {
                    (csrf(s))
                    input type="hidden" name="from" value="rule";
                    button { (if r.enabled { "Disable" } else { "Enable" }) }
                }
                (button(s, &format!("{at}/delete"), "Delete", "danger", Some("Delete this rule and its deliveries?")))
            }
            p.hint { "A test sends a " code { "rule.test" } " event through this rule alone, enabled or not; it shows below within seconds." }
            details.edit open[refused.is_some()] {
                summary { "Edit" }
                @if let Some((e, _)) = refused { (error_box(e)) }
                form.grid method="post" action=(at) {
                    (csrf(s))
                    label for="rule-name" { "Name" }
                    span {
                        @let (invalid, described) = field("rule-name", "name");
                        input #rule-name name="name" required value=(name) aria-invalid=[invalid] aria-describedby=[described];
                        (problems.note("name", "rule-name"))
                    }
                    label for="rule-event" { "Event" }
                    span {
                        @let (invalid, described) = field("rule-event", "event");
                        select #rule-event name="event" aria-invalid=[invalid] aria-describedby=[described] {
                            @for e in EVENTS { option selected[*e == *event] { (e) } }
                        }
                        (problems.note("event", "rule-event"))
                    }
                    label for="rule-flow" { "Only the events of" }
                    span {
                        @let (invalid, described) = field("rule-flow", "filter.flow_id");
                        select #rule-flow name="flow_id" aria-invalid=[invalid] aria-describedby=[described] {
                            option value="" { "every flow" }
                            @for f in &flows { option value=(f.id) selected[f.id.to_string() == flow] { (f.name) } }
                        }
                        (problems.note("filter.flow_id", "rule-flow"))
                    }
                    label for="rule-url" { "URL" }
                    span {
                        @let (invalid, described) = field("rule-url", "channel.url");
                        input #rule-url name="url" type="url" required value=(url) aria-invalid=[invalid] aria-describedby=[described];
                        (problems.note("channel.url", "rule-url"))
                    }
                    span {} div.row { button.primary { "Save" } }
                }
                p.hint { "The channel's type and a webhook's signing secret stay as they are." }
            }
        }
        h2 { "Deliveries" }
        @if deliveries.items.is_empty() {
            p.muted { "Nothing delivered yet." }
        } @else {
            div.scroll {
                table {
                    thead { tr { th { "Event" } th { "Status" } th { "Attempts" } th { "Response" } th { "Why" } th { "Next attempt" } th { "Queued" } } }
                    tbody { @for d in &deliveries.items { tr {
                        td { code { (d.event_type) } }
                        td { (badge(d.status.as_str())) }
                        td { (d.attempts) }
                        td { @if let Some(c) = d.response_code { (c) } @else { "—" } }
                        td.error { (d.error.clone().unwrap_or_default()) }
                        td { (when_opt(d.next_attempt_at)) }
                        td { (when(d.created_at)) }
                    } } }
                }
            }
            (pager(&at, q.after, deliveries.next_cursor.as_deref()))
        }
    };
    let title = format!("Rule {}", r.name);
    Ok(page(ctx, s, "/settings", &title, body))
}

#[derive(Deserialize)]
pub struct RuleForm {
    name: String,
    event: String,
    #[serde(default)]
    flow_id: String,
    url: String,
}

/// `POST /o/{org}/rules/{id}`: saves the edit; the channel's type, its
/// secret and whether the rule is enabled stay.
pub async fn update(state: Data<AppState>, post: Post<RuleForm>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, r) = load(&state, s, org, id).await?;
    let f = &post.form;
    let input = RuleInput {
        name: f.name.clone(),
        event: f.event.clone(),
        flow_id: Some(f.flow_id.trim().to_string()).filter(|x| !x.is_empty()),
        channel_type: r.channel.kind.as_str().to_string(),
        url: f.url.clone(),
        secret: None,
        enabled: Some(r.enabled),
    };
    match state.sluice.monitoring.replace_rule(&s.caller.principal, ctx.id(), r.id, input).await {
        Ok(saved) => Ok(redirect_saying(&post.session, &ctx.at(&format!("/rules/{}", saved.rule.id)), "Saved.")),
        Err(e) => {
            let e = ApiError::from(e);
            crate::page::failed(rule_page(&state, s, &ctx, r, &Paging::default(), Some((&e, f))).await, &e)
        }
    }
}

/// `POST /o/{org}/rules/{id}/test`.
pub async fn send_test(state: Data<AppState>, post: Post<crate::page::Empty>, path: Path<(Uuid, Uuid)>) -> PageResult {
    let (org, id) = path.into_inner();
    let s = &post.session;
    let (ctx, r) = load(&state, s, org, id).await?;
    state.sluice.monitoring.send_test(&s.caller.principal, ctx.id(), r.id).await?;
    let said = "Test queued: its delivery shows below within seconds (reload to follow it).";
    Ok(redirect_saying(&post.session, &ctx.at(&format!("/rules/{}", r.id)), said))
}

/// A rule's name linking to its page, for lists.
pub(crate) fn link(ctx: &OrgCtx, r: &NotificationRule) -> Markup {
    html! { a href=(ctx.at(&format!("/rules/{}", r.id))) { (r.name) } }
}
