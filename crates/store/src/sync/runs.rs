//! Runs and their logs on sea-orm, the claim included.
//!
//! Claiming is a conditional `UPDATE … WHERE status = 'queued'` whose rows
//! affected tell the winner, on SQLite and PostgreSQL alike; on PostgreSQL
//! candidates are read `FOR UPDATE SKIP LOCKED` so concurrent workers pass
//! each other instead of queueing. A partial unique index allows one
//! running run per flow, whatever the number of workers.

use super::queue::{UNENDED, fenced, held, lock_flow};
use super::{corrupt, queued_model, run_from};
use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::{Expr, LockBehavior, LockType};
use sea_orm::{ActiveValue::Set, ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::shared::ids::{FlowId, OrgId, RunId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::sync::flow::Fence;
use sluice_domain::sync::flow::*;
use sluice_domain::sync::ports::*;
use time::OffsetDateTime;
use uuid::Uuid;

#[async_trait]
impl RunRepository for Store {
    async fn enqueue(&self, run: &Run) -> Result<()> {
        let tx = self.write().await?;
        let r =
            runs::Entity::insert(queued_model(run)?).exec_without_returning(tx.c()).await.map(|_| ()).map_err(db_err);
        let r = match r {
            Ok(()) => tx.queues(crate::wake::Work::Runs).await,
            e => e,
        };
        tx.finish(r).await
    }

    async fn claim(&self, worker: &str, now: OffsetDateTime) -> Result<Option<Run>> {
        let busy = "flow_id NOT IN (SELECT flow_id FROM runs WHERE status = 'running')";
        for _ in 0..5 {
            let tx = self.write().await?;
            let r = async {
                let mut q = runs::Entity::find()
                    .filter(runs::Column::Status.eq(RunStatus::Queued.as_str()))
                    .filter(
                        sea_orm::Condition::any()
                            .add(runs::Column::NotBefore.is_null())
                            .add(runs::Column::NotBefore.lte(now)),
                    )
                    .filter(Expr::cust(busy))
                    .order_by_asc(runs::Column::Id)
                    .limit(1);
                if self.backend() == DbBackend::Postgres {
                    q = q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
                }
                let Some(candidate) = q.one(tx.c()).await.map_err(db_err)? else { return Ok(None) };
                // Serialized with a user's write of the flow's cursors.
                lock_flow(self, tx.c(), FlowId::from_uuid(candidate.flow_id)).await?;
                let res = runs::Entity::update_many()
                    .col_expr(runs::Column::Status, Expr::value(RunStatus::Running.as_str()))
                    .col_expr(runs::Column::ClaimedBy, Expr::value(worker))
                    .col_expr(runs::Column::HeartbeatAt, Expr::value(now))
                    .col_expr(runs::Column::StartedAt, Expr::value(now))
                    .filter(runs::Column::Id.eq(candidate.id))
                    .filter(runs::Column::Status.eq(RunStatus::Queued.as_str()))
                    .exec(tx.c())
                    .await;
                match res {
                    Ok(r) if r.rows_affected == 1 => {}
                    // Another worker won it, or its flow started a run meanwhile.
                    Ok(_) | Err(_) => {
                        return Err(Error::conflict("another worker claimed the run first"));
                    }
                }
                let mut run = run_from(candidate)?;
                run.status = RunStatus::Running;
                run.claimed_by = Some(worker.to_string());
                run.heartbeat_at = Some(now);
                run.started_at = Some(now);
                Ok(Some(run))
            }
            .await;
            match tx.finish(r).await {
                // Another worker claimed it first, or the one-running-run-
                // per-flow index refused the claim: try the next candidate.
                Err(e) if e.kind() == sluice_domain::ErrorKind::Conflict => continue,
                other => return other,
            }
        }
        Ok(None)
    }

    async fn heartbeat(&self, fence: Fence, worker: &str, now: OffsetDateTime) -> Result<bool> {
        written!(self, |tx| {
            fenced(runs::Entity::update_many(), fence)
                .col_expr(runs::Column::HeartbeatAt, Expr::value(now))
                .filter(runs::Column::ClaimedBy.eq(worker))
                .exec(tx.c())
                .await
                .map(|r| r.rows_affected == 1)
                .map_err(db_err)
        })
    }

    async fn holds(&self, fence: Fence) -> Result<bool> {
        // A read on its own: a share lock would end with it, so none is taken.
        held(self, &self.db, fence).await
    }

    async fn progress(&self, fence: Fence, entities: &[EntityStats]) -> Result<bool> {
        written!(self, |tx| {
            let json = serde_json::to_value(entities).map_err(|e| Error::Internal(e.into()))?;
            let n = fenced(runs::Entity::update_many(), fence)
                .col_expr(runs::Column::Entities, Expr::value(json))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            Ok(n.rows_affected == 1)
        })
    }

    async fn save(&self, run: &Run) -> Result<()> {
        written!(self, |tx| {
            // A cancellation recorded meanwhile wins over a worker's outcome;
            // a run taken over by a later attempt keeps that attempt's record.
            let current = runs::Entity::find_by_id(run.id.as_uuid()).one(tx.c()).await.map_err(db_err)?;
            let status = match current.as_ref().map(|c| c.status.as_str()) {
                Some("canceled") => RunStatus::Canceled,
                _ => run.status,
            };
            runs::Entity::update_many()
                .col_expr(runs::Column::Status, Expr::value(status.as_str()))
                .col_expr(runs::Column::StartedAt, Expr::value(run.started_at))
                .col_expr(runs::Column::FinishedAt, Expr::value(run.finished_at))
                .col_expr(
                    runs::Column::Entities,
                    Expr::value(serde_json::to_value(&run.entities).map_err(|e| Error::Internal(e.into()))?),
                )
                .col_expr(runs::Column::Error, Expr::value(run.error.clone()))
                .filter(runs::Column::Id.eq(run.id.as_uuid()))
                .filter(runs::Column::Attempt.eq(run.attempt as i32))
                // An ended run stays as it ended (a canceled one still takes
                // its worker's stats).
                .filter(runs::Column::Status.is_in(UNENDED))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            Ok(())
        })
    }

    async fn get(&self, org: OrgId, id: RunId) -> Result<Option<Run>> {
        crate::owned::<runs::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), run_from).await
    }

    async fn status(&self, id: RunId) -> Result<Option<RunStatus>> {
        Ok(runs::Entity::find_by_id(id.as_uuid())
            .one(&self.db)
            .await
            .map_err(db_err)?
            .and_then(|m| RunStatus::parse(&m.status)))
    }

    async fn list_for_flow(
        &self,
        org: OrgId,
        flow: FlowId,
        status: Option<RunStatus>,
        page: PageRequest,
    ) -> Result<Page<Run>> {
        let mut q = runs::Entity::find()
            .filter(runs::Column::OrgId.eq(org.as_uuid()))
            .filter(runs::Column::FlowId.eq(flow.as_uuid()));
        if let Some(s) = status {
            q = q.filter(runs::Column::Status.eq(s.as_str()));
        }
        crate::keyset_page(&self.db, q, runs::Column::Id, page, run_from, |r| r.id.as_uuid()).await
    }

    async fn last_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>> {
        use sea_orm::Statement;
        if flows.is_empty() {
            return Ok(Vec::new());
        }
        // Each flow's newest run through the (flow_id, id) index: one
        // statement for a page of flows.
        let backend = self.db.get_database_backend();
        let at = |i: usize| if backend == DbBackend::Postgres { format!("${i}") } else { "?".to_string() };
        let list: Vec<String> = (0..flows.len()).map(|i| at(i + 2)).collect();
        let sql = format!(
            "SELECT * FROM runs r WHERE r.org_id = {} AND r.flow_id IN ({}) AND r.id = \
             (SELECT l.id FROM runs l WHERE l.flow_id = r.flow_id ORDER BY l.id DESC LIMIT 1)",
            at(1),
            list.join(", ")
        );
        let values = std::iter::once(sea_orm::Value::from(org.as_uuid()))
            .chain(flows.iter().map(|f| sea_orm::Value::from(f.as_uuid())));
        let rows = runs::Entity::find()
            .from_raw_sql(Statement::from_sql_and_values(backend, sql, values))
            .all(&self.db)
            .await
            .map_err(db_err)?;
        rows.into_iter().map(run_from).collect()
    }

    async fn running_of(&self, org: OrgId, flows: &[FlowId]) -> Result<Vec<Run>> {
        if flows.is_empty() {
            return Ok(Vec::new());
        }
        let rows = runs::Entity::find()
            .filter(runs::Column::OrgId.eq(org.as_uuid()))
            .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(runs::Column::FlowId.is_in(flows.iter().map(|f| f.as_uuid())))
            .all(&self.db)
            .await
            .map_err(db_err)?;
        rows.into_iter().map(run_from).collect()
    }

    async fn recent(&self, org: OrgId, since: OffsetDateTime, limit: u64) -> Result<Vec<Run>> {
        let rows = runs::Entity::find()
            .filter(runs::Column::OrgId.eq(org.as_uuid()))
            .filter(runs::Column::QueuedAt.gte(since))
            .order_by_desc(runs::Column::QueuedAt)
            .limit(limit)
            .all(&self.db)
            .await
            .map_err(db_err)?;
        rows.into_iter().map(run_from).collect()
    }

    async fn running_for_flow(&self, flow: FlowId) -> Result<bool> {
        Ok(runs::Entity::find()
            .filter(runs::Column::FlowId.eq(flow.as_uuid()))
            .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .is_some())
    }

    async fn log(&self, run: RunId, fence: Option<Fence>, line: &RunLog) -> Result<()> {
        written!(self, |tx| {
            if let Some(f) = fence
                && !held(self, tx.c(), f).await?
            {
                return Ok(());
            }
            run_logs::Entity::insert(run_logs::ActiveModel {
                id: Set(Uuid::now_v7()),
                run_id: Set(run.as_uuid()),
                ts: Set(line.ts),
                level: Set(line.level.as_str().to_string()),
                entity: Set(line.entity.clone()),
                message: Set(line.message.clone()),
            })
            .exec_without_returning(tx.c())
            .await
            .map(|_| ())
            .map_err(db_err)
        })
    }

    async fn logs(&self, run: RunId) -> Result<Vec<RunLog>> {
        crate::all(
            &self.db,
            run_logs::Entity::find()
                .filter(run_logs::Column::RunId.eq(run.as_uuid()))
                .order_by_asc(run_logs::Column::Id),
            |m| {
                Ok(RunLog {
                    ts: m.ts,
                    level: LogLevel::parse(&m.level).ok_or_else(|| corrupt("run log level"))?,
                    entity: m.entity,
                    message: m.message,
                })
            },
        )
        .await
    }
}
