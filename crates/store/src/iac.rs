//! IaC applies on sea-orm: one transaction per apply, with the
//! organization's row locked on PostgreSQL (SQLite's process-wide write
//! lock serializes writers already). Updates are conditional on the
//! `updated_at` the plan saw, so a plan made before another writer's
//! change is refused as stale instead of overwriting it.

use crate::entities::*;
use crate::sync::{flow_from, flow_model};
use crate::{Store, db_err, insert_audit};
use async_trait::async_trait;
use sea_orm::{ActiveValue, ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::iac::ports::IacRepository;
use sluice_domain::iac::ports::stale_plan;
use sluice_domain::iac::{Snapshot, Write, Writes};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::OrgId;

/// A unique violation on insert means another apply created the name
/// first; a missed conditional update means the row changed meanwhile.
fn stale(e: DbErr) -> Error {
    match db_err(e) {
        e if e.kind() == sluice_domain::ErrorKind::Conflict => stale_plan(),
        e => e,
    }
}

/// Writes one kind's creates and updates: an insert, or an update of
/// everything but the key, the organization and the creation time that
/// matches only the row as planned (id, organization, `updated_at`).
macro_rules! write_all {
    ($c:expr, $org:expr, $writes:expr, $entity:ident, $model:expr) => {
        for w in $writes {
            match w {
                Write::Create(item) => {
                    $entity::Entity::insert($model(item)?).exec_without_returning($c).await.map_err(stale)?;
                }
                Write::Update { item, planned_against } => {
                    let mut m = $model(item)?;
                    m.id = ActiveValue::NotSet;
                    m.org_id = ActiveValue::NotSet;
                    m.created_at = ActiveValue::NotSet;
                    let res = $entity::Entity::update_many()
                        .set(m)
                        .filter($entity::Column::Id.eq(item.id.as_uuid()))
                        .filter($entity::Column::OrgId.eq($org.as_uuid()))
                        .filter($entity::Column::UpdatedAt.eq(*planned_against))
                        .exec($c)
                        .await
                        .map_err(stale)?;
                    if res.rows_affected != 1 {
                        return Err(stale_plan());
                    }
                }
            }
        }
    };
}

#[async_trait]
impl IacRepository for Store {
    async fn snapshot(&self, org: OrgId) -> Result<Snapshot> {
        let o = org.as_uuid();
        let integrations = crate::all(
            &self.db,
            integrations::Entity::find()
                .filter(integrations::Column::OrgId.eq(o))
                .order_by_asc(integrations::Column::Id),
            |m| self.integration_from(m),
        )
        .await?;
        let connections = crate::all(
            &self.db,
            connections::Entity::find().filter(connections::Column::OrgId.eq(o)).order_by_asc(connections::Column::Id),
            |m| self.connection_from(m),
        )
        .await?;
        let flows = crate::all(
            &self.db,
            flows::Entity::find().filter(flows::Column::OrgId.eq(o)).order_by_asc(flows::Column::Id),
            flow_from,
        )
        .await?;
        Ok(Snapshot { integrations, connections, flows })
    }

    async fn apply(&self, org: OrgId, writes: &Writes, audit: &[AuditEntry]) -> Result<()> {
        written!(self, |tx| {
            let c = tx.c();
            self.lock_org(c, org).await?;
            write_all!(c, org, &writes.integrations, integrations, |i| self.integration_model(i));
            write_all!(c, org, &writes.connections, connections, |x| self.connection_model(x));
            write_all!(c, org, &writes.flows, flows, flow_model);
            for a in audit {
                insert_audit(c, a).await?;
            }
            Ok(())
        })
    }
}
