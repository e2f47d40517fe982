//! Monitoring owns what an operator and an organization watch: the
//! activity feed of system events (run outcomes, schema drift), the
//! notification rules that send those events out and their deliveries
//! (a durable outbox the workers send from, retried with backoff), the
//! dashboard's counts, the operator's metrics and the health of the
//! metadata store.

use super::activity::ActivityEvent;
use super::dashboard::DashboardCounts;
use super::delivery::{CLAIM, Delivery, after_attempt};
use super::ports::{
    ActivityRepository, DashboardRepository, DeliveryQueue, HealthCheck, Metrics, RuleRepository, WebhookSender,
};
use super::rule::{self, Channel, ChannelKind, NotificationRule, RuleInput};
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::shared::audit::AuditEntry;
use crate::shared::clock::Clock;
use crate::shared::ids::OrgId;
use crate::shared::ids::RuleId;
use crate::shared::page::{Page, PageRequest};
use crate::shared::secret::Secret;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;
use time::OffsetDateTime;

/// The window of the dashboard's run counts.
pub const DASHBOARD_WINDOW: time::Duration = time::Duration::hours(24);

/// The use cases of monitoring.
#[derive(Clone)]
pub struct MonitoringService {
    pub(crate) identity: IdentityService,
    pub(crate) activity: Arc<dyn ActivityRepository>,
    pub(crate) health: Arc<dyn HealthCheck>,
    pub(crate) dashboard: Arc<dyn DashboardRepository>,
    pub(crate) metrics: Arc<dyn Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rules: Arc<dyn RuleRepository>,
    /// To check a rule's flow filter names a flow of its organization.
    pub(crate) flows: Arc<dyn super::ports::FlowDirectory>,
    pub(crate) deliveries: Arc<dyn DeliveryQueue>,
    pub(crate) sender: Arc<dyn WebhookSender>,
}

/// A rule with its signing secret when it was generated: shown once.
#[derive(Debug, Clone)]
pub struct SavedRule {
    pub rule: NotificationRule,
    pub generated_secret: Option<Secret>,
}

/// The event a rule's test sends.
pub const TEST_EVENT: &str = "rule.test";

/// The JSON form of a rule in the audit log (the secret as `***`).
fn rule_json(r: &NotificationRule) -> Value {
    json!({
        "name": r.name,
        "event": r.event,
        "filter": {"flow_id": r.flow_id},
        "channel": {"type": r.channel.kind.as_str(), "url": r.channel.url,
            "secret": r.channel.secret.as_ref().map(|_| crate::shared::audit::REDACTED)},
        "enabled": r.enabled,
    })
}

impl MonitoringService {
    /// The organization's activity events, newest first, at or after `since`.
    pub async fn activity(
        &self,
        p: &Principal,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<ActivityEvent>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.activity.events(org, since, limit).await
    }

    /// The organization's flows, runs and rows of the last
    /// [`DASHBOARD_WINDOW`], and connections, as counts.
    pub async fn dashboard(&self, p: &Principal, org: OrgId) -> Result<DashboardCounts> {
        self.identity.access(p, org, Permission::Read).await?;
        self.dashboard.counts(org, self.clock.now() - DASHBOARD_WINDOW).await
    }

    /// Runs waiting for a worker, in every organization (the operator's gauge).
    pub async fn queue_depth(&self) -> Result<u64> {
        self.dashboard.queue_depth().await
    }

    /// Records a system event (for the contexts above: run outcomes, drift).
    pub(crate) async fn record(&self, event: &ActivityEvent) -> Result<()> {
        self.activity.record_event(event).await
    }

    /// The organization's events at or after `since`, newest first (for
    /// the contexts above, which need not ask twice).
    pub(crate) async fn recent(&self, org: OrgId, since: OffsetDateTime, limit: u64) -> Result<Vec<ActivityEvent>> {
        self.activity.events(org, Some(since), limit).await
    }

    /// The operator's counters, for the contexts above.
    pub(crate) fn metrics(&self) -> &dyn Metrics {
        self.metrics.as_ref()
    }

    // ---- notification rules ---------------------------------------------

    /// The organization's rules. A Slack URL is a credential (whoever
    /// holds it posts to the channel): Viewers see its host only.
    pub async fn list_rules(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<NotificationRule>> {
        let role = self.identity.access(p, org, Permission::Read).await?;
        let mut page = self.rules.list(org, page).await?;
        for r in &mut page.items {
            rule::mask_for(role, r);
        }
        Ok(page)
    }

    pub async fn get_rule(&self, p: &Principal, org: OrgId, id: RuleId) -> Result<NotificationRule> {
        let role = self.identity.access(p, org, Permission::Read).await?;
        let mut r = self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        rule::mask_for(role, &mut r);
        Ok(r)
    }

    /// The channel of a checked rule: a webhook keeps `existing`'s secret
    /// when none is given, else gets a new one (answered once).
    fn channel(checked: &rule::CheckedRule, existing: Option<&Channel>) -> (Channel, Option<Secret>) {
        let (secret, generated) = match (checked.kind, &checked.secret) {
            (ChannelKind::Slack, _) => (None, None),
            (ChannelKind::Webhook, Some(s)) => (Some(Secret::new(s.clone())), None),
            (ChannelKind::Webhook, None) => match existing.and_then(|c| c.secret.clone()) {
                Some(kept) => (Some(kept), None),
                None => {
                    let s = rule::new_secret();
                    (Some(s.clone()), Some(s))
                }
            },
        };
        (Channel { kind: checked.kind, url: checked.url.clone(), secret }, generated)
    }

    /// A rule's flow filter must name a flow of the rule's organization.
    async fn check_flow(&self, org: OrgId, flow: Option<crate::shared::ids::FlowId>) -> Result<()> {
        match flow {
            Some(f) if !self.flows.flow_exists(org, f).await? => {
                Err(Error::invalid("filter.flow_id", "names no flow of this organization"))
            }
            _ => Ok(()),
        }
    }

    /// Creates a rule (Editor); a webhook without a secret gets one.
    pub async fn create_rule(&self, p: &Principal, org: OrgId, input: RuleInput) -> Result<SavedRule> {
        self.identity.access(p, org, Permission::Write).await?;
        let checked = rule::check(&input)?;
        self.check_flow(org, checked.flow_id).await?;
        let now = self.clock.now();
        let (channel, generated_secret) = Self::channel(&checked, None);
        let rule = NotificationRule {
            id: RuleId::new(),
            org_id: org,
            name: checked.name,
            event: checked.event,
            flow_id: checked.flow_id,
            channel,
            enabled: checked.enabled,
            created_at: now,
            updated_at: now,
        };
        let audit = AuditEntry::new(Some(org), p.actor(), "rule.created", "rule", rule.id, now)
            .with_change(Value::Null, rule_json(&rule));
        self.rules.create(&rule, &audit).await?;
        Ok(SavedRule { rule, generated_secret })
    }

    /// Replaces a rule (Editor). A webhook whose request names no secret
    /// keeps the stored one.
    pub async fn replace_rule(&self, p: &Principal, org: OrgId, id: RuleId, input: RuleInput) -> Result<SavedRule> {
        self.identity.access(p, org, Permission::Write).await?;
        let mut input = input;
        if input.secret.as_deref() == Some(crate::shared::audit::REDACTED) {
            input.secret = None;
        }
        let checked = rule::check(&input)?;
        let before = self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        self.check_flow(org, checked.flow_id).await?;
        let (channel, generated_secret) = Self::channel(&checked, Some(&before.channel));
        let after = NotificationRule {
            name: checked.name,
            event: checked.event,
            flow_id: checked.flow_id,
            channel,
            enabled: checked.enabled,
            updated_at: self.clock.now(),
            ..before.clone()
        };
        let audit = AuditEntry::new(Some(org), p.actor(), "rule.updated", "rule", id, after.updated_at)
            .with_change(rule_json(&before), rule_json(&after));
        self.rules.update(&after, &audit).await?;
        Ok(SavedRule { rule: after, generated_secret })
    }

    /// Turns a rule on or off (Editor), everything else as it is; audited.
    pub async fn set_rule_enabled(
        &self,
        p: &Principal,
        org: OrgId,
        id: RuleId,
        enabled: bool,
    ) -> Result<NotificationRule> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        if before.enabled == enabled {
            return Ok(before);
        }
        let after = NotificationRule { enabled, updated_at: self.clock.now(), ..before.clone() };
        let audit = AuditEntry::new(Some(org), p.actor(), "rule.updated", "rule", id, after.updated_at)
            .with_change(rule_json(&before), rule_json(&after));
        self.rules.update(&after, &audit).await?;
        Ok(after)
    }

    pub async fn delete_rule(&self, p: &Principal, org: OrgId, id: RuleId) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        let audit = AuditEntry::new(Some(org), p.actor(), "rule.deleted", "rule", id, self.clock.now())
            .with_change(rule_json(&before), Value::Null);
        self.rules.delete(org, id, &audit).await
    }

    /// Sends a test event through rule `id` alone (Editor), whatever event
    /// it names and whether it is enabled: delivered, refused or retried as
    /// any delivery, and listed with the rule's deliveries. The event is
    /// `rule.test`, recorded in the activity feed.
    pub async fn send_test(&self, p: &Principal, org: OrgId, id: RuleId) -> Result<ActivityEvent> {
        self.identity.access(p, org, Permission::Write).await?;
        let r = self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        let e = ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: org,
            event_type: crate::monitoring::activity::EventType::parse(TEST_EVENT),
            severity: "info".into(),
            message: format!("A test of the notification rule '{}' from Sluice.", r.name),
            data: json!({"rule_id": r.id.to_string(), "rule_name": r.name, "test": true}),
            created_at: self.clock.now(),
        };
        self.activity.record_test(&e, r.id).await?;
        Ok(e)
    }

    /// The rule's deliveries, newest first.
    pub async fn deliveries(&self, p: &Principal, org: OrgId, id: RuleId, page: PageRequest) -> Result<Page<Delivery>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.rules.get(org, id).await?.ok_or(Error::not_found("rule"))?;
        self.rules.deliveries(org, id, page).await
    }

    /// `POST /v1/internal/notifications`: records an event of `org` (the
    /// caller holds the internal key), delivered through matching rules.
    pub async fn notify(&self, org: OrgId, event: &str, message: &str, data: Value) -> Result<ActivityEvent> {
        let mut errors = Vec::new();
        if event.is_empty()
            || event.len() > 100
            || !event.chars().all(|c| c.is_ascii_lowercase() || c == '.' || c == '_')
        {
            errors.push(crate::FieldError::new("event", "must be 1 to 100 characters of a-z, '.' and '_'"));
        }
        if message.chars().count() > 2000 {
            errors.push(crate::FieldError::new("message", "must be at most 2000 characters"));
        }
        if !(data.is_object() || data.is_null()) {
            errors.push(crate::FieldError::new("data", "must be an object"));
        }
        if !errors.is_empty() {
            return Err(Error::Validation(errors));
        }
        if !self.identity.organization_exists(org).await? {
            return Err(Error::not_found("organization"));
        }
        let e = ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: org,
            event_type: crate::monitoring::activity::EventType::parse(event),
            severity: "info".into(),
            message: message.to_string(),
            data: if data.is_null() { json!({}) } else { data },
            created_at: self.clock.now(),
        };
        self.activity.record_event(&e).await?;
        Ok(e)
    }

    /// Sends the deliveries due now (at most `limit`), as `worker`: each
    /// attempt is signed, sent, and its outcome stored with the next
    /// attempt's time. Answers how many were attempted.
    pub async fn deliver_due(&self, worker: &str, limit: u64) -> Result<usize> {
        let now = self.clock.now();
        let due = self.deliveries.claim(worker, now, now + CLAIM, limit).await?;
        let n = due.len();
        let sends = due.into_iter().map(|o| async move {
            let timestamp = self.clock.now().unix_timestamp();
            let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
            if o.kind == ChannelKind::Webhook {
                headers.push(("webhook-id".into(), o.message_id.clone()));
                headers.push(("webhook-timestamp".into(), timestamp.to_string()));
                if let Some(key) = o.secret.as_ref().and_then(|s| rule::secret_key(s.expose())) {
                    headers.push(("webhook-signature".into(), rule::sign(&o.message_id, timestamp, &o.body, &key)));
                }
            }
            let result = self.sender.send(&o.url, &headers, &o.body).await;
            self.metrics.webhook_delivery(result.outcome());
            let after = after_attempt(o.delivery, &result, self.clock.now());
            if let Err(e) = self.deliveries.finish(&after, worker).await {
                tracing::warn!(delivery = %after.id, error = %e, "storing a delivery attempt failed");
            }
        });
        futures_join_all(sends).await;
        Ok(n)
    }

    /// Whether the metadata store answers.
    pub async fn health(&self) -> Result<()> {
        self.health.ping().await
    }
}

/// Runs `futures` concurrently to their ends (no runtime needed: they are
/// polled together on the caller's task).
async fn futures_join_all<F: std::future::Future<Output = ()>>(futures: impl IntoIterator<Item = F>) {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if pending.is_empty() { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
}
