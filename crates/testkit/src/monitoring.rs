//! The activity feed in memory.

use super::*;

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for InMemoryFlows {
    async fn record_event(&self, e: &sluice_domain::monitoring::activity::ActivityEvent) -> Result<()> {
        self.record(e, None)
    }

    async fn record_test(
        &self,
        e: &sluice_domain::monitoring::activity::ActivityEvent,
        rule: sluice_domain::shared::ids::RuleId,
    ) -> Result<()> {
        self.record(e, Some(rule))
    }

    async fn events(
        &self,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<sluice_domain::monitoring::activity::ActivityEvent>> {
        let mut v: Vec<_> = self
            .s()
            .events
            .iter()
            .filter(|e| e.org_id == org && since.is_none_or(|t| e.created_at >= t))
            .cloned()
            .collect();
        v.reverse();
        v.truncate(limit as usize);
        Ok(v)
    }
}

/// The dashboard's counts over the in-memory flows, runs and connections.
#[derive(Clone)]
pub struct InMemoryDashboard {
    pub flows: InMemoryFlows,
    pub catalog: InMemoryCatalog,
}

#[async_trait]
impl sluice_domain::monitoring::ports::DashboardRepository for InMemoryDashboard {
    async fn counts(
        &self,
        org: OrgId,
        since: OffsetDateTime,
    ) -> Result<sluice_domain::monitoring::dashboard::DashboardCounts> {
        use sluice_domain::connect::connection::ConnectionStatus;
        use sluice_domain::sync::flow::{FlowStatus, RunStatus};
        let f = self.flows.s();
        let flows = |s: FlowStatus| f.flows.iter().filter(|x| x.org_id == org && x.status == s).count() as u64;
        let recent: Vec<_> = f.runs.iter().filter(|r| r.org_id == org && r.queued_at >= since).collect();
        let runs = |s: &[RunStatus]| recent.iter().filter(|r| s.contains(&r.status)).count() as u64;
        let rows_synced = f
            .runs
            .iter()
            .filter(|r| r.org_id == org && r.finished_at.is_some_and(|t| t >= since))
            .flat_map(|r| r.entities.iter().map(|e| e.rows_written))
            .sum();
        let c = self.catalog.s();
        let conns =
            |s: ConnectionStatus| c.connections.iter().filter(|x| x.org_id == org && x.status == s).count() as u64;
        Ok(sluice_domain::monitoring::dashboard::DashboardCounts {
            flows_active: flows(FlowStatus::Active),
            flows_paused: flows(FlowStatus::Paused),
            runs_succeeded: runs(&[RunStatus::Succeeded]),
            runs_failed: runs(&[RunStatus::Failed, RunStatus::DriftDetected]),
            runs_running: runs(&[RunStatus::Running]),
            runs_queued: runs(&[RunStatus::Queued]),
            rows_synced,
            connections_healthy: conns(ConnectionStatus::Healthy),
            connections_failing: conns(ConnectionStatus::Failing),
            connections_untested: conns(ConnectionStatus::Untested),
        })
    }

    async fn queue_depth(&self) -> Result<u64> {
        let f = self.flows.s();
        Ok(f.runs.iter().filter(|r| r.status == sluice_domain::sync::flow::RunStatus::Queued).count() as u64)
    }
}

/// A delivery in the in-memory outbox.
#[derive(Clone, Debug)]
pub struct Queued {
    pub delivery: sluice_domain::monitoring::delivery::Delivery,
    pub body: String,
    pub message_id: String,
    pub claim: Option<(String, OffsetDateTime)>,
}

#[async_trait]
impl sluice_domain::monitoring::ports::RuleRepository for InMemoryFlows {
    async fn create(&self, r: &sluice_domain::monitoring::rule::NotificationRule, audit: &AuditEntry) -> Result<()> {
        self.s().rules.push(r.clone());
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn get(
        &self,
        org: OrgId,
        id: sluice_domain::shared::ids::RuleId,
    ) -> Result<Option<sluice_domain::monitoring::rule::NotificationRule>> {
        Ok(self.s().rules.iter().find(|r| r.org_id == org && r.id == id).cloned())
    }

    async fn list(
        &self,
        org: OrgId,
        page: PageRequest,
    ) -> Result<Page<sluice_domain::monitoring::rule::NotificationRule>> {
        let items = self.s().rules.iter().filter(|r| r.org_id == org).cloned().collect();
        Ok(page_of(items, page, |r| r.id.as_uuid()))
    }

    async fn update(&self, r: &sluice_domain::monitoring::rule::NotificationRule, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let slot = s.rules.iter_mut().find(|x| x.org_id == r.org_id && x.id == r.id).ok_or(Error::not_found("rule"))?;
        *slot = r.clone();
        drop(s);
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: sluice_domain::shared::ids::RuleId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.rules.len();
        s.rules.retain(|r| !(r.org_id == org && r.id == id));
        if s.rules.len() == before {
            return Err(Error::not_found("rule"));
        }
        s.deliveries.retain(|d| d.delivery.rule_id != id);
        drop(s);
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn deliveries(
        &self,
        org: OrgId,
        rule: sluice_domain::shared::ids::RuleId,
        page: PageRequest,
    ) -> Result<Page<sluice_domain::monitoring::delivery::Delivery>> {
        let items = self
            .s()
            .deliveries
            .iter()
            .filter(|d| d.delivery.org_id == org && d.delivery.rule_id == rule)
            .map(|d| d.delivery.clone())
            .collect();
        Ok(page_of(items, page, |d| d.id.as_uuid()))
    }
}

#[async_trait]
impl sluice_domain::monitoring::ports::DeliveryQueue for InMemoryFlows {
    async fn claim(
        &self,
        worker: &str,
        now: OffsetDateTime,
        until: OffsetDateTime,
        limit: u64,
    ) -> Result<Vec<sluice_domain::monitoring::delivery::Outgoing>> {
        use sluice_domain::monitoring::delivery::{DeliveryStatus, Outgoing};
        let mut s = self.s();
        let rules = s.rules.clone();
        let mut out = Vec::new();
        for q in s.deliveries.iter_mut() {
            if out.len() as u64 >= limit {
                break;
            }
            let due = q.delivery.status == DeliveryStatus::Pending
                && q.delivery.next_attempt_at.is_some_and(|t| t <= now)
                && q.claim.as_ref().is_none_or(|(_, u)| *u < now);
            let Some(rule) = rules.iter().find(|r| r.id == q.delivery.rule_id) else { continue };
            if due {
                q.claim = Some((worker.to_string(), until));
                out.push(Outgoing {
                    delivery: q.delivery.clone(),
                    kind: rule.channel.kind,
                    url: rule.channel.url.clone(),
                    secret: rule.channel.secret.clone(),
                    body: q.body.clone(),
                    message_id: q.message_id.clone(),
                });
            }
        }
        Ok(out)
    }

    async fn finish(&self, d: &sluice_domain::monitoring::delivery::Delivery, worker: &str) -> Result<bool> {
        let mut s = self.s();
        let Some(q) = s.deliveries.iter_mut().find(|q| q.delivery.id == d.id) else { return Ok(false) };
        if q.claim.as_ref().is_none_or(|(w, _)| w != worker) {
            return Ok(false);
        }
        q.delivery = d.clone();
        q.claim = None;
        Ok(true)
    }
}

/// One attempt a [`RecordingSender`] saw: URL, headers, body.
pub type Sent = (String, Vec<(String, String)>, String);

/// A webhook sender that records each attempt and answers as told
/// (`Delivered(200)` unless a test sets otherwise).
#[derive(Clone, Default)]
pub struct RecordingSender {
    pub sent: Arc<Mutex<Vec<Sent>>>,
    pub answer: Arc<Mutex<Option<sluice_domain::monitoring::delivery::AttemptResult>>>,
}

#[async_trait]
impl sluice_domain::monitoring::ports::WebhookSender for RecordingSender {
    async fn send(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> sluice_domain::monitoring::delivery::AttemptResult {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).push((url.to_string(), headers.to_vec(), body.to_string()));
        self.answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or(sluice_domain::monitoring::delivery::AttemptResult::Delivered(200))
    }
}

impl InMemoryFlows {
    fn record(
        &self,
        e: &sluice_domain::monitoring::activity::ActivityEvent,
        only: Option<sluice_domain::shared::ids::RuleId>,
    ) -> Result<()> {
        use sluice_domain::monitoring::delivery::{Delivery, DeliveryStatus};
        use sluice_domain::monitoring::rule::{self, ChannelKind};
        let mut s = self.s();
        s.events.push(e.clone());
        let queued: Vec<Queued> = s
            .rules
            .iter()
            .filter(|r| match only {
                Some(id) => r.id == id && r.org_id == e.org_id,
                None => r.matches(e),
            })
            .map(|r| Queued {
                delivery: Delivery {
                    id: sluice_domain::shared::ids::DeliveryId::new(),
                    org_id: e.org_id,
                    rule_id: r.id,
                    event_id: e.id,
                    event_type: e.event_type.to_string(),
                    status: DeliveryStatus::Pending,
                    attempts: 0,
                    response_code: None,
                    error: None,
                    next_attempt_at: Some(e.created_at),
                    created_at: e.created_at,
                    updated_at: e.created_at,
                },
                body: match r.channel.kind {
                    ChannelKind::Webhook => rule::webhook_body(e),
                    ChannelKind::Slack => rule::slack_body(e),
                },
                message_id: rule::message_id(e),
                claim: None,
            })
            .collect();
        s.deliveries.extend(queued);
        Ok(())
    }
}
