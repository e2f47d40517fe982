//! Verifications on sea-orm. A claim is a conditional update of a queued
//! row, or of a running one whose claim lapsed, like a webhook delivery's:
//! on PostgreSQL candidates are read `FOR UPDATE SKIP LOCKED`.

use super::corrupt;
use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::{Expr, LockBehavior, LockType};
use sea_orm::{ActiveValue::Set, ColumnTrait, Condition, DbBackend, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{FlowId, OrgId, RunId, VerificationId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::sync::flow::Run;
use sluice_domain::sync::verification::VerificationRepository;
use sluice_domain::sync::verification::{Verification, VerificationStatus};
use sluice_domain::{Error, Result};
use time::OffsetDateTime;

fn verification_from(m: verifications::Model) -> Result<Verification> {
    Ok(Verification {
        id: VerificationId::from_uuid(m.id),
        org_id: m.org_id.into(),
        flow_id: m.flow_id.into(),
        status: VerificationStatus::parse(&m.status).ok_or_else(|| corrupt("verification status"))?,
        requested: serde_json::from_value(m.requested).map_err(|_| corrupt("verification request"))?,
        repair: m.repair,
        entities: serde_json::from_value(m.entities).map_err(|_| corrupt("verification findings"))?,
        error: m.error,
        queued_at: m.queued_at,
        started_at: m.started_at,
        finished_at: m.finished_at,
        claimed_by: m.claimed_by,
        claimed_until: m.claimed_until,
        repair_run_id: m.repair_run_id.map(RunId::from_uuid),
    })
}

fn json(v: Result<serde_json::Value, serde_json::Error>) -> Result<serde_json::Value> {
    v.map_err(|e| Error::Internal(e.into()))
}

#[async_trait]
impl VerificationRepository for Store {
    async fn create_verification(&self, v: &Verification, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let row = verifications::ActiveModel {
                id: Set(v.id.as_uuid()),
                org_id: Set(v.org_id.as_uuid()),
                flow_id: Set(v.flow_id.as_uuid()),
                status: Set(v.status.as_str().to_string()),
                requested: Set(json(serde_json::to_value(&v.requested))?),
                repair: Set(v.repair),
                entities: Set(json(serde_json::to_value(&v.entities))?),
                error: Set(v.error.clone()),
                queued_at: Set(v.queued_at),
                started_at: Set(v.started_at),
                finished_at: Set(v.finished_at),
                claimed_by: Set(None),
                claimed_until: Set(None),
                repair_run_id: Set(None),
            };
            verifications::Entity::insert(row).exec_without_returning(tx.c()).await.map_err(db_err)?;
            tx.queues(crate::wake::Work::Verifications).await?;
        })
    }

    async fn get_verification(&self, org: OrgId, id: VerificationId) -> Result<Option<Verification>> {
        verifications::Entity::find_by_id(id.as_uuid())
            .filter(verifications::Column::OrgId.eq(org.as_uuid()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(verification_from)
            .transpose()
    }

    async fn verifications_of_flow(&self, org: OrgId, flow: FlowId, page: PageRequest) -> Result<Page<Verification>> {
        let q = verifications::Entity::find()
            .filter(verifications::Column::OrgId.eq(org.as_uuid()))
            .filter(verifications::Column::FlowId.eq(flow.as_uuid()));
        crate::keyset_page(&self.db, q, verifications::Column::Id, page, verification_from, |v| v.id.as_uuid()).await
    }

    async fn claim_verification(
        &self,
        worker: &str,
        now: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Result<Option<Verification>> {
        let now = now.to_offset(time::UtcOffset::UTC);
        let until = until.to_offset(time::UtcOffset::UTC);
        for _ in 0..5 {
            let tx = self.write().await?;
            let r = async {
                let lapsed = Condition::all()
                    .add(verifications::Column::Status.eq(VerificationStatus::Running.as_str()))
                    .add(verifications::Column::ClaimedUntil.lt(now));
                let mut q = verifications::Entity::find()
                    .filter(
                        Condition::any()
                            .add(verifications::Column::Status.eq(VerificationStatus::Queued.as_str()))
                            .add(lapsed.clone()),
                    )
                    .order_by_asc(verifications::Column::Id)
                    .limit(1);
                if self.backend() == DbBackend::Postgres {
                    q = q.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
                }
                let Some(candidate) = q.one(tx.c()).await.map_err(db_err)? else { return Ok(None) };
                let res = verifications::Entity::update_many()
                    .col_expr(verifications::Column::Status, Expr::value(VerificationStatus::Running.as_str()))
                    .col_expr(verifications::Column::ClaimedBy, Expr::value(worker))
                    .col_expr(verifications::Column::ClaimedUntil, Expr::value(until))
                    .filter(verifications::Column::Id.eq(candidate.id))
                    .filter(
                        Condition::any()
                            .add(verifications::Column::Status.eq(VerificationStatus::Queued.as_str()))
                            .add(lapsed),
                    )
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
                if res.rows_affected != 1 {
                    return Err(Error::conflict("another worker claimed the verification first"));
                }
                let mut v = verification_from(candidate)?;
                v.status = VerificationStatus::Running;
                v.claimed_by = Some(worker.to_string());
                v.claimed_until = Some(until);
                Ok(Some(v))
            }
            .await;
            match tx.finish(r).await {
                Err(e) if e.kind() == sluice_domain::ErrorKind::Conflict => continue,
                other => return other,
            }
        }
        Ok(None)
    }

    async fn renew_verification(&self, id: VerificationId, worker: &str, until: OffsetDateTime) -> Result<bool> {
        written!(self, |tx| {
            verifications::Entity::update_many()
                .col_expr(verifications::Column::ClaimedUntil, Expr::value(until.to_offset(time::UtcOffset::UTC)))
                .filter(verifications::Column::Id.eq(id.as_uuid()))
                .filter(verifications::Column::Status.eq(VerificationStatus::Running.as_str()))
                .filter(verifications::Column::ClaimedBy.eq(worker))
                .exec(tx.c())
                .await
                .map(|r| r.rows_affected == 1)
                .map_err(db_err)
        })
    }

    async fn save_verification(&self, v: &Verification, worker: &str) -> Result<bool> {
        written!(self, |tx| { saved(tx.c(), v, worker).await })
    }

    async fn queue_repair(&self, v: &Verification, run: &Run, worker: &str, audit: &AuditEntry) -> Result<bool> {
        let tx = self.write().await?;
        let r = async {
            if !saved(tx.c(), v, worker).await? {
                return Ok(false);
            }
            runs::Entity::insert(super::queued_model(run)?).exec_without_returning(tx.c()).await.map_err(db_err)?;
            crate::insert_audit(tx.c(), audit).await?;
            tx.queues(crate::wake::Work::Runs).await?;
            Ok(true)
        }
        .await;
        tx.finish(r).await
    }

    async fn repaired_by(&self, run: RunId) -> Result<Option<Verification>> {
        verifications::Entity::find()
            .filter(verifications::Column::RepairRunId.eq(run.as_uuid()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(verification_from)
            .transpose()
    }
}

/// Stores a verification's outcome while `worker` holds it.
async fn saved(c: &impl sea_orm::ConnectionTrait, v: &Verification, worker: &str) -> Result<bool> {
    verifications::Entity::update_many()
        .col_expr(verifications::Column::Status, Expr::value(v.status.as_str()))
        .col_expr(verifications::Column::Entities, Expr::value(json(serde_json::to_value(&v.entities))?))
        .col_expr(verifications::Column::Error, Expr::value(v.error.clone()))
        .col_expr(verifications::Column::StartedAt, Expr::value(v.started_at))
        .col_expr(verifications::Column::FinishedAt, Expr::value(v.finished_at))
        .col_expr(verifications::Column::RepairRunId, Expr::value(v.repair_run_id.map(|r| r.as_uuid())))
        .filter(verifications::Column::Id.eq(v.id.as_uuid()))
        .filter(verifications::Column::Status.eq(VerificationStatus::Running.as_str()))
        .filter(verifications::Column::ClaimedBy.eq(worker))
        .exec(c)
        .await
        .map(|r| r.rows_affected == 1)
        .map_err(db_err)
}
