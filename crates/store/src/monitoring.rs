//! The monitoring context's store: the activity feed.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::connect::connection::ConnectionStatus;
use sluice_domain::monitoring::activity::ActivityEvent;
use sluice_domain::monitoring::dashboard::DashboardCounts;
use sluice_domain::monitoring::delivery::{Delivery, DeliveryStatus, Outgoing};
use sluice_domain::monitoring::rule::{self, Channel, ChannelKind, NotificationRule};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::OrgId;
use sluice_domain::shared::ids::{DeliveryId, RuleId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::shared::secret::Secret;
use sluice_domain::sync::flow::{FlowStatus, RunStatus};
use time::OffsetDateTime;

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for Store {
    async fn record_event(&self, e: &ActivityEvent) -> Result<()> {
        self.record(e, None).await
    }

    async fn record_test(&self, e: &ActivityEvent, rule: RuleId) -> Result<()> {
        self.record(e, Some(rule)).await
    }

    async fn events(&self, org: OrgId, since: Option<OffsetDateTime>, limit: u64) -> Result<Vec<ActivityEvent>> {
        let mut q = activity_events::Entity::find().filter(activity_events::Column::OrgId.eq(org.as_uuid()));
        if let Some(s) = since {
            q = q.filter(activity_events::Column::CreatedAt.gte(s.to_offset(time::UtcOffset::UTC)));
        }
        Ok(q.order_by_desc(activity_events::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await
            .map_err(db_err)?
            .into_iter()
            .map(|m| ActivityEvent {
                id: m.id,
                org_id: m.org_id.into(),
                event_type: sluice_domain::monitoring::activity::EventType::parse(&m.event_type),
                severity: m.severity,
                message: m.message,
                data: m.data,
                created_at: m.created_at,
            })
            .collect())
    }
}

impl Store {
    /// Records `e` and, in the same transaction, queues a delivery per
    /// enabled rule matching it (the outbox), or to the rule `only` alone.
    async fn record(&self, e: &ActivityEvent, only: Option<RuleId>) -> Result<()> {
        written!(self, |tx| {
            activity_events::Entity::insert(activity_events::ActiveModel {
                id: Set(e.id),
                org_id: Set(e.org_id.as_uuid()),
                event_type: Set(e.event_type.to_string()),
                severity: Set(e.severity.clone()),
                message: Set(e.message.clone()),
                data: Set(e.data.clone()),
                created_at: Set(e.created_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
            // The outbox: a delivery per matching rule, in this transaction.
            let mut queued = false;
            let rules =
                notification_rules::Entity::find().filter(notification_rules::Column::OrgId.eq(e.org_id.as_uuid()));
            let rules = match only {
                Some(id) => rules.filter(notification_rules::Column::Id.eq(id.as_uuid())),
                None => rules
                    .filter(notification_rules::Column::Event.eq(e.event_type.as_str()))
                    .filter(notification_rules::Column::Enabled.eq(true)),
            };
            let rules = rules.all(tx.c()).await.map_err(db_err)?;
            for m in rules {
                let r = self.rule_from(m)?;
                if only.is_none() && !r.matches(e) {
                    continue;
                }
                let body = match r.channel.kind {
                    ChannelKind::Webhook => rule::webhook_body(e),
                    ChannelKind::Slack => rule::slack_body(e),
                };
                webhook_deliveries::Entity::insert(webhook_deliveries::ActiveModel {
                    id: Set(DeliveryId::new().as_uuid()),
                    org_id: Set(e.org_id.as_uuid()),
                    rule_id: Set(r.id.as_uuid()),
                    event_id: Set(e.id),
                    event_type: Set(e.event_type.to_string()),
                    message_id: Set(rule::message_id(e)),
                    body: Set(body),
                    status: Set(DeliveryStatus::Pending.as_str().to_string()),
                    attempts: Set(0),
                    response_code: Set(None),
                    error: Set(None),
                    next_attempt_at: Set(Some(e.created_at)),
                    claimed_by: Set(None),
                    claimed_until: Set(None),
                    created_at: Set(e.created_at),
                    updated_at: Set(e.created_at),
                })
                .exec_without_returning(tx.c())
                .await
                .map_err(db_err)?;
                queued = true;
            }
            if queued {
                tx.queues(crate::wake::Work::Deliveries).await?;
            }
            Ok(())
        })
    }
}

/// `(status, count)` of `q`'s rows grouped by `status`.
async fn by_status<E: EntityTrait>(
    db: &impl sea_orm::ConnectionTrait,
    q: sea_orm::Select<E>,
    status: E::Column,
) -> Result<Vec<(String, i64)>>
where
    E::Column: ColumnTrait,
{
    use sea_orm::sea_query::{Expr, ExprTrait};
    q.select_only()
        .column(status)
        .column_as(Expr::col(status).count(), "n")
        .group_by(status)
        .into_tuple::<(String, i64)>()
        .all(db)
        .await
        .map_err(db_err)
}

fn count(rows: &[(String, i64)], statuses: &[&str]) -> u64 {
    rows.iter().filter(|(s, _)| statuses.contains(&s.as_str())).map(|(_, n)| *n as u64).sum()
}

#[async_trait]
impl sluice_domain::monitoring::ports::DashboardRepository for Store {
    async fn counts(&self, org: OrgId, since: OffsetDateTime) -> Result<DashboardCounts> {
        let org = org.as_uuid();
        let since = since.to_offset(time::UtcOffset::UTC);
        let flows =
            by_status(&self.db, flows::Entity::find().filter(flows::Column::OrgId.eq(org)), flows::Column::Status)
                .await?;
        let runs = by_status(
            &self.db,
            runs::Entity::find().filter(runs::Column::OrgId.eq(org)).filter(runs::Column::QueuedAt.gte(since)),
            runs::Column::Status,
        )
        .await?;
        let connections = by_status(
            &self.db,
            connections::Entity::find().filter(connections::Column::OrgId.eq(org)),
            connections::Column::Status,
        )
        .await?;
        // Rows written by the runs that finished in the window, from their
        // per-entity stats.
        let finished: Vec<serde_json::Value> = runs::Entity::find()
            .select_only()
            .column(runs::Column::Entities)
            .filter(runs::Column::OrgId.eq(org))
            .filter(runs::Column::FinishedAt.gte(since))
            .into_tuple()
            .all(&self.db)
            .await
            .map_err(db_err)?;
        let rows_synced = finished
            .iter()
            .flat_map(|e| e.as_array().into_iter().flatten())
            .filter_map(|e| e.get("rows_written").and_then(serde_json::Value::as_u64))
            .sum();
        Ok(DashboardCounts {
            flows_active: count(&flows, &[FlowStatus::Active.as_str()]),
            flows_paused: count(&flows, &[FlowStatus::Paused.as_str()]),
            runs_succeeded: count(&runs, &[RunStatus::Succeeded.as_str()]),
            runs_failed: count(&runs, &[RunStatus::Failed.as_str(), RunStatus::DriftDetected.as_str()]),
            runs_running: count(&runs, &[RunStatus::Running.as_str()]),
            runs_queued: count(&runs, &[RunStatus::Queued.as_str()]),
            rows_synced,
            connections_healthy: count(&connections, &[ConnectionStatus::Healthy.as_str()]),
            connections_failing: count(&connections, &[ConnectionStatus::Failing.as_str()]),
            connections_untested: count(&connections, &[ConnectionStatus::Untested.as_str()]),
        })
    }

    async fn queue_depth(&self) -> Result<u64> {
        let rows = by_status(
            &self.db,
            runs::Entity::find().filter(runs::Column::Status.eq(RunStatus::Queued.as_str())),
            runs::Column::Status,
        )
        .await?;
        Ok(count(&rows, &[RunStatus::Queued.as_str()]))
    }
}

fn rule_aad(id: uuid::Uuid) -> String {
    format!("rule:{id}")
}

impl Store {
    fn rule_from(&self, m: notification_rules::Model) -> Result<NotificationRule> {
        let kind = ChannelKind::parse(&m.channel_type)
            .ok_or_else(|| crate::convert::corrupt("channel type", &m.channel_type))?;
        let secret = match &m.secret {
            Some(sealed) => {
                let plain = self.cipher.decrypt(sealed, &rule_aad(m.id))?;
                Some(Secret::new(String::from_utf8(plain).map_err(|e| crate::convert::corrupt("rule secret", e))?))
            }
            None => None,
        };
        Ok(NotificationRule {
            id: m.id.into(),
            org_id: m.org_id.into(),
            name: m.name,
            event: m.event,
            flow_id: m.flow_id.map(Into::into),
            channel: Channel { kind, url: m.url, secret },
            enabled: m.enabled,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }

    fn rule_secret(&self, r: &NotificationRule) -> Result<Option<String>> {
        r.channel
            .secret
            .as_ref()
            .map(|s| self.cipher.encrypt(s.expose().as_bytes(), &rule_aad(r.id.as_uuid())))
            .transpose()
    }
}

fn delivery_from(m: webhook_deliveries::Model) -> Result<Delivery> {
    Ok(Delivery {
        id: m.id.into(),
        org_id: m.org_id.into(),
        rule_id: m.rule_id.into(),
        event_id: m.event_id,
        event_type: m.event_type,
        status: DeliveryStatus::parse(&m.status)
            .ok_or_else(|| crate::convert::corrupt("delivery status", &m.status))?,
        attempts: u32::try_from(m.attempts).unwrap_or(0),
        response_code: m.response_code.and_then(|c| u16::try_from(c).ok()),
        error: m.error,
        next_attempt_at: m.next_attempt_at,
        created_at: m.created_at,
        updated_at: m.updated_at,
    })
}

#[async_trait]
impl sluice_domain::monitoring::ports::RuleRepository for Store {
    async fn create(&self, r: &NotificationRule, audit: &AuditEntry) -> Result<()> {
        let secret = self.rule_secret(r)?;
        audited!(self, audit, |tx| {
            notification_rules::Entity::insert(notification_rules::ActiveModel {
                id: Set(r.id.as_uuid()),
                org_id: Set(r.org_id.as_uuid()),
                name: Set(r.name.clone()),
                event: Set(r.event.clone()),
                flow_id: Set(r.flow_id.map(|f| f.as_uuid())),
                channel_type: Set(r.channel.kind.as_str().to_string()),
                url: Set(r.channel.url.clone()),
                secret: Set(secret),
                enabled: Set(r.enabled),
                created_at: Set(r.created_at),
                updated_at: Set(r.updated_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
        })
    }

    async fn get(&self, org: OrgId, id: RuleId) -> Result<Option<NotificationRule>> {
        crate::owned::<notification_rules::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), |m| self.rule_from(m))
            .await
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<NotificationRule>> {
        let q = notification_rules::Entity::find().filter(notification_rules::Column::OrgId.eq(org.as_uuid()));
        crate::keyset_page(&self.db, q, notification_rules::Column::Id, page, |m| self.rule_from(m), |r| r.id.as_uuid())
            .await
    }

    async fn update(&self, r: &NotificationRule, audit: &AuditEntry) -> Result<()> {
        use sea_orm::sea_query::Expr;
        let secret = self.rule_secret(r)?;
        audited!(self, audit, |tx| {
            let res = notification_rules::Entity::update_many()
                .col_expr(notification_rules::Column::Name, Expr::value(r.name.clone()))
                .col_expr(notification_rules::Column::Event, Expr::value(r.event.clone()))
                .col_expr(notification_rules::Column::FlowId, Expr::value(r.flow_id.map(|f| f.as_uuid())))
                .col_expr(notification_rules::Column::ChannelType, Expr::value(r.channel.kind.as_str()))
                .col_expr(notification_rules::Column::Url, Expr::value(r.channel.url.clone()))
                .col_expr(notification_rules::Column::Secret, Expr::value(secret))
                .col_expr(notification_rules::Column::Enabled, Expr::value(r.enabled))
                .col_expr(notification_rules::Column::UpdatedAt, Expr::value(r.updated_at))
                .filter(notification_rules::Column::Id.eq(r.id.as_uuid()))
                .filter(notification_rules::Column::OrgId.eq(r.org_id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::not_found("rule"));
            }
        })
    }

    async fn delete(&self, org: OrgId, id: RuleId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::delete_owned::<notification_rules::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "rule").await?;
            webhook_deliveries::Entity::delete_many()
                .filter(webhook_deliveries::Column::RuleId.eq(id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
        })
    }

    async fn deliveries(&self, org: OrgId, rule: RuleId, page: PageRequest) -> Result<Page<Delivery>> {
        let q = webhook_deliveries::Entity::find()
            .filter(webhook_deliveries::Column::OrgId.eq(org.as_uuid()))
            .filter(webhook_deliveries::Column::RuleId.eq(rule.as_uuid()));
        crate::keyset_page(&self.db, q, webhook_deliveries::Column::Id, page, delivery_from, |d| d.id.as_uuid()).await
    }
}

#[async_trait]
impl sluice_domain::monitoring::ports::DeliveryQueue for Store {
    async fn claim(
        &self,
        worker: &str,
        now: OffsetDateTime,
        until: OffsetDateTime,
        limit: u64,
    ) -> Result<Vec<Outgoing>> {
        use sea_orm::sea_query::{Expr, LockBehavior, LockType};
        use sea_orm::{Condition, DbBackend};
        let now = now.to_offset(time::UtcOffset::UTC);
        let claimed: Vec<webhook_deliveries::Model> = written!(self, |tx| {
            let mut q = webhook_deliveries::Entity::find()
                .filter(webhook_deliveries::Column::Status.eq(DeliveryStatus::Pending.as_str()))
                .filter(webhook_deliveries::Column::NextAttemptAt.lte(now))
                .filter(
                    Condition::any()
                        .add(webhook_deliveries::Column::ClaimedUntil.is_null())
                        .add(webhook_deliveries::Column::ClaimedUntil.lt(now)),
                )
                .order_by_asc(webhook_deliveries::Column::NextAttemptAt)
                .limit(limit);
            if self.backend() == DbBackend::Postgres {
                q = q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
            }
            let rows = q.all(tx.c()).await.map_err(db_err)?;
            if !rows.is_empty() {
                webhook_deliveries::Entity::update_many()
                    .col_expr(webhook_deliveries::Column::ClaimedBy, Expr::value(worker))
                    .col_expr(webhook_deliveries::Column::ClaimedUntil, Expr::value(until))
                    .filter(webhook_deliveries::Column::Id.is_in(rows.iter().map(|r| r.id)))
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
            }
            Ok(rows)
        })?;
        let mut out = Vec::with_capacity(claimed.len());
        for m in claimed {
            let rule = notification_rules::Entity::find_by_id(m.rule_id).one(&self.db).await.map_err(db_err)?;
            let Some(rule) = rule.map(|r| self.rule_from(r)).transpose()? else { continue };
            let (body, message_id) = (m.body.clone(), m.message_id.clone());
            out.push(Outgoing {
                delivery: delivery_from(m)?,
                kind: rule.channel.kind,
                url: rule.channel.url,
                secret: rule.channel.secret,
                body,
                message_id,
            });
        }
        Ok(out)
    }

    async fn finish(&self, d: &Delivery, worker: &str) -> Result<bool> {
        use sea_orm::sea_query::Expr;
        written!(self, |tx| {
            let res = webhook_deliveries::Entity::update_many()
                .col_expr(webhook_deliveries::Column::Status, Expr::value(d.status.as_str()))
                .col_expr(
                    webhook_deliveries::Column::Attempts,
                    Expr::value(i32::try_from(d.attempts).unwrap_or(i32::MAX)),
                )
                .col_expr(webhook_deliveries::Column::ResponseCode, Expr::value(d.response_code.map(i32::from)))
                .col_expr(webhook_deliveries::Column::Error, Expr::value(d.error.clone()))
                .col_expr(webhook_deliveries::Column::NextAttemptAt, Expr::value(d.next_attempt_at))
                .col_expr(webhook_deliveries::Column::ClaimedBy, Expr::value(Option::<String>::None))
                .col_expr(webhook_deliveries::Column::ClaimedUntil, Expr::value(Option::<OffsetDateTime>::None))
                .col_expr(webhook_deliveries::Column::UpdatedAt, Expr::value(d.updated_at))
                .filter(webhook_deliveries::Column::Id.eq(d.id.as_uuid()))
                .filter(webhook_deliveries::Column::ClaimedBy.eq(worker))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            Ok(res.rows_affected == 1)
        })
    }
}
