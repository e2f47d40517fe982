//! The run queue on sea-orm: due flows, runs queued once by a marker,
//! stale runs, requeues and retries, and the fence every write of a run
//! checks.

use super::flows::flow_from;
use super::{queued_model, run_from};
use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait, LockType};
use sea_orm::{ActiveValue::Set, ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::shared::ids::{FlowId, OrgId, RunId};
use sluice_domain::sync::flow::Fence;
use sluice_domain::sync::flow::*;
use time::OffsetDateTime;
use uuid::Uuid;

/// The statuses a run's record may still change from.
pub(super) const UNENDED: [&str; 3] =
    [RunStatus::Queued.as_str(), RunStatus::Running.as_str(), RunStatus::Canceled.as_str()];

/// `q` narrowed to the run `fence` names while that attempt holds it: the
/// same attempt, still running. [`held`] asks the same of a row it reads.
pub(super) fn fenced<Q: QueryFilter>(q: Q, fence: Fence) -> Q {
    q.filter(runs::Column::Id.eq(fence.run.as_uuid()))
        .filter(runs::Column::Attempt.eq(fence.attempt as i32))
        .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
}

/// Whether `fence` still holds its run. Inside a transaction on
/// PostgreSQL the run's row is locked for share until the transaction
/// ends, so a concurrent take-over waits for what this attempt writes with
/// it (on SQLite the store's write lock does the same).
pub(super) async fn held(store: &Store, c: &impl sea_orm::ConnectionTrait, fence: Fence) -> Result<bool> {
    let mut q = runs::Entity::find_by_id(fence.run.as_uuid());
    if store.backend() == DbBackend::Postgres {
        q = q.lock(LockType::Share);
    }
    Ok(q.one(c)
        .await
        .map_err(db_err)?
        .is_some_and(|r| r.attempt == fence.attempt as i32 && r.status == RunStatus::Running.as_str()))
}

/// Locks a flow's row for the rest of the transaction (PostgreSQL; SQLite
/// writes one transaction at a time).
pub(super) async fn lock_flow(store: &Store, c: &sea_orm::DatabaseTransaction, flow: FlowId) -> Result<()> {
    if store.backend() == DbBackend::Postgres {
        flows::Entity::find_by_id(flow.as_uuid()).lock(LockType::Update).one(c).await.map_err(db_err)?;
    }
    Ok(())
}

#[async_trait]
impl sluice_domain::sync::ports::QueueRepository for Store {
    async fn due_flows(&self, now: OffsetDateTime) -> Result<Vec<Flow>> {
        crate::all(
            &self.db,
            flows::Entity::find()
                .filter(flows::Column::Status.eq(FlowStatus::Active.as_str()))
                .filter(flows::Column::NextRunAt.lte(now)),
            flow_from,
        )
        .await
    }

    async fn queue_once(
        &self,
        marker: &str,
        run: &Run,
        next_run_at: Option<(FlowId, Option<OffsetDateTime>)>,
    ) -> Result<bool> {
        let tx = self.write().await?;
        let r = async {
            let inserted = run_markers::Entity::insert(run_markers::ActiveModel {
                key: Set(marker.to_string()),
                run_id: Set(run.id.as_uuid()),
                created_at: Set(run.queued_at),
            })
            .exec_without_returning(tx.c())
            .await;
            match inserted {
                Ok(_) => {}
                Err(e) => {
                    return match db_err(e) {
                        Error::Conflict { .. } => Ok(false),
                        other => Err(other),
                    };
                }
            }
            runs::Entity::insert(queued_model(run)?).exec_without_returning(tx.c()).await.map_err(db_err)?;
            if let Some((flow, next)) = next_run_at {
                flows::Entity::update_many()
                    .col_expr(flows::Column::NextRunAt, Expr::value(next))
                    .filter(flows::Column::Id.eq(flow.as_uuid()))
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
            }
            tx.queues(crate::wake::Work::Runs).await?;
            Ok(true)
        }
        .await;
        match tx.finish(r).await {
            // A concurrent process inserted the same marker first.
            Err(Error::Conflict { .. }) => Ok(false),
            other => other,
        }
    }

    async fn stale_runs(&self, before: OffsetDateTime) -> Result<Vec<Run>> {
        crate::all(
            &self.db,
            runs::Entity::find()
                .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
                .filter(runs::Column::HeartbeatAt.lt(before)),
            run_from,
        )
        .await
    }

    async fn requeue(&self, fence: Fence, worker: Option<String>) -> Result<bool> {
        written!(self, |tx| {
            let mut q = fenced(runs::Entity::update_many(), fence)
                .col_expr(runs::Column::Status, Expr::value(RunStatus::Queued.as_str()))
                .col_expr(runs::Column::ClaimedBy, Expr::value(Option::<String>::None))
                .col_expr(runs::Column::HeartbeatAt, Expr::value(Option::<OffsetDateTime>::None))
                .col_expr(runs::Column::Attempt, Expr::col(runs::Column::Attempt).add(1));
            if let Some(w) = worker {
                q = q.filter(runs::Column::ClaimedBy.eq(w));
            }
            let requeued = q.exec(tx.c()).await.map_err(db_err)?.rows_affected == 1;
            if requeued {
                tx.queues(crate::wake::Work::Runs).await?;
            }
            Ok(requeued)
        })
    }

    async fn trace(&self, org: OrgId, trace: Uuid) -> Result<Vec<Run>> {
        let mut runs: Vec<Run> = runs::Entity::find()
            .filter(runs::Column::OrgId.eq(org.as_uuid()))
            .filter(runs::Column::TraceId.eq(trace))
            .order_by_asc(runs::Column::Id)
            .all(&self.db)
            .await
            .map_err(db_err)?
            .into_iter()
            .map(run_from)
            .collect::<Result<_>>()?;
        runs.sort_by_key(|r| (r.started_at.unwrap_or(r.queued_at), r.id));
        Ok(runs)
    }

    async fn find_run(&self, id: RunId) -> Result<Option<Run>> {
        runs::Entity::find_by_id(id.as_uuid()).one(&self.db).await.map_err(db_err)?.map(run_from).transpose()
    }

    async fn retry_later(&self, fence: Fence, not_before: OffsetDateTime, error: &str) -> Result<()> {
        written!(self, |tx| {
            fenced(runs::Entity::update_many(), fence)
                .col_expr(runs::Column::Status, Expr::value(RunStatus::Queued.as_str()))
                .col_expr(runs::Column::ClaimedBy, Expr::value(Option::<String>::None))
                .col_expr(runs::Column::HeartbeatAt, Expr::value(Option::<OffsetDateTime>::None))
                .col_expr(runs::Column::NotBefore, Expr::value(Some(not_before)))
                .col_expr(runs::Column::Error, Expr::value(Some(error.to_string())))
                .col_expr(runs::Column::Attempt, Expr::col(runs::Column::Attempt).add(1))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }
}
