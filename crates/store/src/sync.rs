//! Flows, runs (queue, claiming, heartbeats), run logs and cursors on sea-orm.
//!
//! Claiming is a conditional `UPDATE … WHERE status = 'queued'` whose rows
//! affected tell the winner, on SQLite and PostgreSQL alike; on PostgreSQL
//! candidates are read `FOR UPDATE SKIP LOCKED` so concurrent workers pass
//! each other instead of queueing. A partial unique index allows one
//! running run per flow, whatever the number of workers.

use crate::entities::*;
use crate::{Store, db_err, insert_audit};
use async_trait::async_trait;
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType};
use sea_orm::{ActiveValue::Set, ColumnTrait, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{FlowId, OrgId, RunId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::sync::flow::*;
use sluice_domain::sync::ports::*;
use time::OffsetDateTime;
use uuid::Uuid;

fn corrupt(what: &str) -> Error {
    Error::Internal(anyhow::anyhow!("stored {what} is invalid"))
}

pub(crate) fn flow_from(m: flows::Model) -> Result<Flow> {
    Ok(Flow {
        id: m.id.into(),
        org_id: m.org_id.into(),
        name: m.name,
        source_connection_id: m.source_connection_id.into(),
        destination_connection_id: m.destination_connection_id.into(),
        schedule: m.schedule,
        config: serde_json::from_value(m.config).map_err(|_| corrupt("flow config"))?,
        status: FlowStatus::parse(&m.status).ok_or_else(|| corrupt("flow status"))?,
        next_run_at: m.next_run_at,
        created_at: m.created_at,
        updated_at: m.updated_at,
    })
}

pub(crate) fn flow_model(f: &Flow) -> Result<flows::ActiveModel> {
    Ok(flows::ActiveModel {
        id: Set(f.id.as_uuid()),
        org_id: Set(f.org_id.as_uuid()),
        name: Set(f.name.clone()),
        source_connection_id: Set(f.source_connection_id.as_uuid()),
        destination_connection_id: Set(f.destination_connection_id.as_uuid()),
        schedule: Set(f.schedule.clone()),
        config: Set(serde_json::to_value(&f.config).map_err(|e| Error::Internal(e.into()))?),
        status: Set(f.status.as_str().to_string()),
        next_run_at: Set(f.next_run_at),
        created_at: Set(f.created_at),
        updated_at: Set(f.updated_at),
    })
}

fn run_from(m: runs::Model) -> Result<Run> {
    Ok(Run {
        id: m.id.into(),
        org_id: m.org_id.into(),
        flow_id: m.flow_id.into(),
        trace_id: m.trace_id,
        trigger: Trigger::parse(&m.trigger).ok_or_else(|| corrupt("run trigger"))?,
        status: RunStatus::parse(&m.status).ok_or_else(|| corrupt("run status"))?,
        queued_at: m.queued_at,
        started_at: m.started_at,
        finished_at: m.finished_at,
        entities: serde_json::from_value(m.entities).map_err(|_| corrupt("run stats"))?,
        error: m.error,
        attempt: m.attempt as u32,
        claimed_by: m.claimed_by,
        heartbeat_at: m.heartbeat_at,
        not_before: m.not_before,
    })
}

fn conflict_name(e: Error, name: &str) -> Error {
    match e {
        Error::Conflict { code: sluice_domain::shared::error::code::CONFLICT, .. } => {
            Error::conflict(format!("a flow named '{name}' already exists"))
        }
        other => other,
    }
}

#[async_trait]
impl FlowRepository for Store {
    async fn create(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            flows::Entity::insert(flow_model(f)?)
                .exec_without_returning(tx.c())
                .await
                .map_err(|e| conflict_name(db_err(e), &f.name))?;
        })
    }

    async fn get(&self, org: OrgId, id: FlowId) -> Result<Option<Flow>> {
        crate::owned::<flows::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), flow_from).await
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Flow>> {
        crate::named::<flows::Entity, _>(&self.db, org.as_uuid(), name, flow_from).await
    }

    async fn list(&self, org: OrgId, status: Option<FlowStatus>, page: PageRequest) -> Result<Page<Flow>> {
        let mut q = flows::Entity::find().filter(flows::Column::OrgId.eq(org.as_uuid()));
        if let Some(s) = status {
            q = q.filter(flows::Column::Status.eq(s.as_str()));
        }
        crate::keyset_page(&self.db, q, flows::Column::Id, page, flow_from, |f| f.id.as_uuid()).await
    }

    async fn all(&self, org: OrgId) -> Result<Vec<Flow>> {
        crate::all(&self.db, flows::Entity::find().filter(flows::Column::OrgId.eq(org.as_uuid())), flow_from).await
    }

    async fn update(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let mut m = flow_model(f)?;
            m.id = sea_orm::ActiveValue::Unchanged(f.id.as_uuid());
            m.org_id = sea_orm::ActiveValue::NotSet;
            m.created_at = sea_orm::ActiveValue::NotSet;
            flows::Entity::update(m).exec(tx.c()).await.map_err(|e| conflict_name(db_err(e), &f.name))?;
        })
    }

    async fn delete(&self, org: OrgId, id: FlowId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::delete_owned::<flows::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "flow").await?;
        })
    }
}

#[async_trait]
impl RunRepository for Store {
    async fn enqueue(&self, run: &Run) -> Result<()> {
        let tx = self.write().await?;
        let r = runs::Entity::insert(runs::ActiveModel {
            id: Set(run.id.as_uuid()),
            org_id: Set(run.org_id.as_uuid()),
            flow_id: Set(run.flow_id.as_uuid()),
            trace_id: Set(run.trace_id),
            trigger: Set(run.trigger.as_str().to_string()),
            status: Set(run.status.as_str().to_string()),
            queued_at: Set(run.queued_at),
            started_at: Set(run.started_at),
            finished_at: Set(run.finished_at),
            entities: Set(serde_json::to_value(&run.entities).map_err(|e| Error::Internal(e.into()))?),
            error: Set(run.error.clone()),
            attempt: Set(run.attempt as i32),
            claimed_by: Set(None),
            heartbeat_at: Set(None),
            not_before: Set(run.not_before),
        })
        .exec_without_returning(tx.c())
        .await
        .map(|_| ())
        .map_err(db_err);
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
                        return Err(Error::Conflict {
                            code: sluice_domain::shared::error::code::CLAIM_LOST,
                            message: String::new(),
                        });
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
                Err(Error::Conflict { code: sluice_domain::shared::error::code::CLAIM_LOST, .. }) => continue,
                // The one-running-run-per-flow index refused the claim.
                Err(Error::Conflict { .. }) => continue,
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
                level: Set(line.level.clone()),
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
            |m| Ok(RunLog { ts: m.ts, level: m.level, entity: m.entity, message: m.message }),
        )
        .await
    }
}

/// The statuses a run's record may still change from.
const UNENDED: [&str; 3] = [RunStatus::Queued.as_str(), RunStatus::Running.as_str(), RunStatus::Canceled.as_str()];

/// `q` narrowed to the run `fence` names while that attempt holds it: the
/// same attempt, still running. [`held`] asks the same of a row it reads.
fn fenced<Q: QueryFilter>(q: Q, fence: Fence) -> Q {
    q.filter(runs::Column::Id.eq(fence.run.as_uuid()))
        .filter(runs::Column::Attempt.eq(fence.attempt as i32))
        .filter(runs::Column::Status.eq(RunStatus::Running.as_str()))
}

/// Whether `fence` still holds its run. Inside a transaction on
/// PostgreSQL the run's row is locked for share until the transaction
/// ends, so a concurrent take-over waits for what this attempt writes with
/// it (on SQLite the store's write lock does the same).
async fn held(store: &Store, c: &impl sea_orm::ConnectionTrait, fence: Fence) -> Result<bool> {
    let mut q = runs::Entity::find_by_id(fence.run.as_uuid());
    if store.backend() == DbBackend::Postgres {
        q = q.lock(LockType::Share);
    }
    Ok(q.one(c)
        .await
        .map_err(db_err)?
        .is_some_and(|r| r.attempt == fence.attempt as i32 && r.status == RunStatus::Running.as_str()))
}

fn cursor_from(m: cursors::Model) -> Cursor {
    Cursor { entity: m.entity, cursor_field: m.cursor_field, cursor_value: m.cursor_value, updated_at: m.updated_at }
}

/// Replaces the flow's cursor of `c.entity`.
async fn write_cursor(tx: &sea_orm::DatabaseTransaction, flow: FlowId, c: &Cursor) -> Result<()> {
    cursors::Entity::delete_by_id((flow.as_uuid(), c.entity.clone())).exec(tx).await.map_err(db_err)?;
    cursors::Entity::insert(cursors::ActiveModel {
        flow_id: Set(flow.as_uuid()),
        entity: Set(c.entity.clone()),
        cursor_field: Set(c.cursor_field.clone()),
        cursor_value: Set(c.cursor_value.clone()),
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
            audit.details["old_value"] = old.map(cursor_from).and_then(|c| c.cursor_value).into();
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

/// Locks a flow's row for the rest of the transaction (PostgreSQL; SQLite
/// writes one transaction at a time).
async fn lock_flow(store: &Store, c: &sea_orm::DatabaseTransaction, flow: FlowId) -> Result<()> {
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
            runs::Entity::insert(runs::ActiveModel {
                id: Set(run.id.as_uuid()),
                org_id: Set(run.org_id.as_uuid()),
                flow_id: Set(run.flow_id.as_uuid()),
                trace_id: Set(run.trace_id),
                trigger: Set(run.trigger.as_str().to_string()),
                status: Set(run.status.as_str().to_string()),
                queued_at: Set(run.queued_at),
                started_at: Set(None),
                finished_at: Set(None),
                entities: Set(serde_json::json!([])),
                error: Set(None),
                attempt: Set(run.attempt as i32),
                claimed_by: Set(None),
                heartbeat_at: Set(None),
                not_before: Set(None),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
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
