//! The monitoring context's store: the activity feed.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Result;
use sluice_domain::monitoring::activity::ActivityEvent;
use sluice_domain::shared::ids::OrgId;
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
