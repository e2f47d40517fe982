//! The monitoring context's store: the activity feed.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Result;
use sluice_domain::connect::connection::ConnectionStatus;
use sluice_domain::monitoring::activity::ActivityEvent;
use sluice_domain::monitoring::dashboard::DashboardCounts;
use sluice_domain::shared::ids::OrgId;
use sluice_domain::sync::flow::{FlowStatus, RunStatus};
use time::OffsetDateTime;

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for Store {
    async fn record_event(&self, e: &ActivityEvent) -> Result<()> {
        written!(self, |tx| {
            activity_events::Entity::insert(activity_events::ActiveModel {
                id: Set(e.id),
                org_id: Set(e.org_id.as_uuid()),
                event_type: Set(e.event_type.clone()),
                severity: Set(e.severity.clone()),
                message: Set(e.message.clone()),
                data: Set(e.data.clone()),
                created_at: Set(e.created_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map(|_| ())
            .map_err(db_err)
        })
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
                event_type: m.event_type,
                severity: m.severity,
                message: m.message,
                data: m.data,
                created_at: m.created_at,
            })
            .collect())
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
