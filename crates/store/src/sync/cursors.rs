//! Cursors on sea-orm: a run's advance fenced, a user's write guarded.

use super::queue::{held, lock_flow};
use crate::entities::*;
use crate::{Store, db_err, insert_audit};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::FlowId;
use sluice_domain::sync::flow::Fence;
use sluice_domain::sync::flow::*;
use sluice_domain::sync::mark::Mark;
use sluice_domain::sync::ports::*;

pub(super) fn cursor_from(m: cursors::Model) -> Cursor {
    Cursor { entity: m.entity, mark: Mark::from_stored(m.cursor_field, m.cursor_value), updated_at: m.updated_at }
}

/// Replaces the flow's cursor of `c.entity`.
async fn write_cursor(tx: &sea_orm::DatabaseTransaction, flow: FlowId, c: &Cursor) -> Result<()> {
    cursors::Entity::delete_by_id((flow.as_uuid(), c.entity.clone())).exec(tx).await.map_err(db_err)?;
    let (field, value) = c.mark.stored();
    cursors::Entity::insert(cursors::ActiveModel {
        flow_id: Set(flow.as_uuid()),
        entity: Set(c.entity.clone()),
        cursor_field: Set(field),
        cursor_value: Set(value),
        updated_at: Set(c.updated_at),
    })
    .exec_without_returning(tx)
    .await
    .map(|_| ())
    .map_err(db_err)
}

#[async_trait]
impl CursorRepository for Store {
    async fn list(&self, flow: FlowId) -> Result<Vec<Cursor>> {
        crate::all(&self.db, cursors::Entity::find().filter(cursors::Column::FlowId.eq(flow.as_uuid())), |m| {
            Ok(cursor_from(m))
        })
        .await
    }

    async fn get(&self, flow: FlowId, entity: &str) -> Result<Option<Cursor>> {
        Ok(cursors::Entity::find_by_id((flow.as_uuid(), entity.to_string()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(cursor_from))
    }

    async fn set(&self, flow: FlowId, c: &Cursor, audit: Option<AuditEntry>) -> Result<()> {
        written!(self, |tx| {
            write_cursor(tx.c(), flow, c).await?;
            if let Some(a) = &audit {
                insert_audit(tx.c(), a).await?;
            }
            Ok(())
        })
    }

    async fn advance(&self, flow: FlowId, c: &Cursor, fence: Fence) -> Result<bool> {
        written!(self, |tx| {
            if !held(self, tx.c(), fence).await? {
                return Ok(false);
            }
            write_cursor(tx.c(), flow, c).await?;
            Ok(true)
        })
    }

    async fn clear(&self, flow: FlowId, entity: &str, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            cursors::Entity::delete_by_id((flow.as_uuid(), entity.to_string())).exec(tx.c()).await.map_err(db_err)?;
        })
    }

    async fn write_by_user(
        &self,
        flow: FlowId,
        entity: &str,
        cursor: Option<Cursor>,
        mut audit: AuditEntry,
    ) -> Result<()> {
        written!(self, |tx| {
            // The flow's row is what a claim of its runs locks too: a claim
            // and this write never interleave (SQLite's writes are one at a
            // time anyway).
            lock_flow(self, tx.c(), flow).await?;
            let running = runs::Entity::find()
                .filter(runs::Column::FlowId.eq(flow.as_uuid()))
                .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
                .one(tx.c())
                .await
                .map_err(db_err)?;
            if running.is_some() {
                return Err(Error::run_in_progress());
            }
            let key = (flow.as_uuid(), entity.to_string());
            let old = cursors::Entity::find_by_id(key.clone()).one(tx.c()).await.map_err(db_err)?;
            audit.details["old_value"] = old.map(cursor_from).and_then(|c| c.mark.stored().1).into();
            match cursor {
                Some(c) => write_cursor(tx.c(), flow, &c).await?,
                None => {
                    cursors::Entity::delete_by_id(key).exec(tx.c()).await.map_err(db_err)?;
                }
            }
            insert_audit(tx.c(), &audit).await
        })
    }
}
