//! The verification executor: a verification queued (by a user, after a
//! run with `config.verify: "after_run"`, or after a repair run), claimed
//! by a worker like a run, executed entity by entity with the rules of
//! [`super::compare`], and its repair run queued with its outcome.

use super::Verifier;
use super::compare::*;
use crate::connect::connector::{KeyRange, Source};
use crate::connect::service::OpenError;
use crate::sync::flow::{Flow, Mapping, Run, RunStatus, Trigger, VerifyWhen, new_run};

use crate::monitoring::activity::{ActivityEvent, EventType};
use crate::shared::audit::AuditEntry;
use crate::shared::ids::VerificationId;
use crate::{FieldError, Result};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Waits the time given (the domain has no clock to sleep on: the worker
/// lends its runtime's).
pub type Pause = Arc<dyn Fn(std::time::Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Reads of the keys found differing, a pause apart growing by this much.
pub const RECHECK_ROUNDS: u32 = 3;
pub const RECHECK_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

impl Verifier {
    /// Queues a verification of `requested` entities of `f` for `actor`,
    /// audit-logged.
    pub(crate) async fn queue(
        &self,
        f: &Flow,
        requested: Vec<String>,
        repair: bool,
        actor: crate::shared::audit::Actor,
    ) -> Result<Verification> {
        let v = Verification {
            id: VerificationId::new(),
            org_id: f.org_id,
            flow_id: f.id,
            status: VerificationStatus::Queued,
            requested,
            repair,
            entities: Vec::new(),
            error: None,
            queued_at: self.clock.now(),
            started_at: None,
            finished_at: None,
            claimed_by: None,
            claimed_until: None,
            repair_run_id: None,
        };
        let audit = AuditEntry::new(Some(f.org_id), actor, "verification.started", "verification", v.id, v.queued_at)
            .with_details(json!({"flow_id": f.id, "entities": v.requested, "repair": repair}));
        self.verifications.create_verification(&v, &audit).await?;
        Ok(v)
    }

    /// A successful run of a flow that verifies after each run queues its
    /// verification.
    /// A repair run's end queues the verification of what it repaired.
    pub(crate) async fn verify_after(&self, run: &Run) -> Result<()> {
        if run.status != RunStatus::Succeeded {
            return Ok(());
        }
        let Some(f) = self.flows.get(run.org_id, run.flow_id).await? else { return Ok(()) };
        if let Some(repaired) = self.verifications.repaired_by(run.id).await? {
            let mut entities: Vec<String> =
                repaired.entities.iter().filter(|e| !e.matched()).map(|e| e.entity.clone()).collect();
            entities.dedup();
            self.queue(&f, entities, false, crate::shared::audit::Actor::system()).await?;
            return Ok(());
        }
        if f.config.verify != Some(VerifyWhen::AfterRun) || f.config.continuous {
            return Ok(());
        }
        let Ok(requested) = verified_entities(&f, &[]) else { return Ok(()) };
        self.queue(&f, requested, false, crate::shared::audit::Actor::system()).await?;
        Ok(())
    }

    /// Claims the next verification to execute, held for one lease.
    pub async fn claim(&self, worker: &str) -> Result<Option<Verification>> {
        let now = self.clock.now();
        self.verifications.claim_verification(worker, now, now + self.lease).await
    }

    /// Extends the claim for another lease; `false` once it is lost.
    pub async fn renew(&self, id: VerificationId, worker: &str) -> Result<bool> {
        self.verifications.renew_verification(id, worker, self.clock.now() + self.lease).await
    }

    /// Executes a claimed verification to its end and stores its outcome
    /// (nothing when the claim was lost meanwhile).
    pub async fn execute(&self, mut v: Verification, worker: &str, pause: Pause) -> Result<Verification> {
        v.status = VerificationStatus::Running;
        v.started_at = v.started_at.or(Some(self.clock.now()));
        v.entities.clear();
        v.error = None;
        match self.verify_flow(&mut v, &pause).await {
            Ok(()) => {
                let matched = v.entities.iter().all(EntityCheck::matched);
                v.status = if matched { VerificationStatus::Matched } else { VerificationStatus::Mismatched };
            }
            Err(e) => {
                v.status = VerificationStatus::Failed;
                v.error = Some(e);
            }
        }
        v.finished_at = Some(self.clock.now());
        let stored = match self.repair_run(&mut v).await? {
            Some(run) => {
                let audit = AuditEntry::new(
                    Some(v.org_id),
                    crate::shared::audit::Actor::system(),
                    "run.triggered",
                    "run",
                    run.id,
                    run.queued_at,
                )
                .with_details(json!({"flow_id": v.flow_id, "trigger": run.trigger.as_str(), "repair_of": v.id}));
                self.verifications.queue_repair(&v, &run, worker, &audit).await?
            }
            None => self.verifications.save_verification(&v, worker).await?,
        };
        if !stored {
            return Ok(v);
        }
        if v.status == VerificationStatus::Mismatched {
            let differing: Vec<&str> = v.entities.iter().filter(|e| !e.matched()).map(|e| e.entity.as_str()).collect();
            self.monitoring
                .record(&ActivityEvent {
                    id: uuid::Uuid::now_v7(),
                    org_id: v.org_id,
                    event_type: EventType::VerifyMismatch,
                    severity: "warning".into(),
                    message: format!(
                        "verification {} of flow {} found the destination differing in {}",
                        v.id,
                        v.flow_id,
                        differing.join(", ")
                    ),
                    data: json!({
                        "verification_id": v.id,
                        "flow_id": v.flow_id,
                        "entities": v.entities.iter().filter(|e| !e.matched()).map(|e| json!({
                            "entity": e.entity,
                            "missing": e.missing.count,
                            "extra": e.extra.count,
                            "different": e.different.count,
                        })).collect::<Vec<_>>(),
                    }),
                    created_at: self.clock.now(),
                })
                .await?;
        }
        Ok(v)
    }

    /// The run that repairs what `v` found, when it asked for a repair and
    /// found differences: `None` otherwise, or (saying why in its error)
    /// when more keys differ than were read again.
    async fn repair_run(&self, v: &mut Verification) -> Result<Option<Run>> {
        if !v.repair || v.status != VerificationStatus::Mismatched {
            return Ok(None);
        }
        let many: Vec<String> = v
            .entities
            .iter()
            .filter(|e| e.unlisted > 0)
            .map(|e| format!("{} ({} keys)", e.entity, e.missing.count + e.extra.count + e.different.count))
            .collect();
        if !many.is_empty() {
            v.error = Some(format!(
                "nothing repaired: more than {RECHECKED_KEYS} keys differ in {}; reset the entity's state for a \
                 full re-sync instead",
                many.join(", ")
            ));
            return Ok(None);
        }
        let Some(f) = self.flows.get(v.org_id, v.flow_id).await? else { return Ok(None) };
        let run = new_run(&f, Trigger::Api, uuid::Uuid::now_v7(), self.clock.now());
        v.repair_run_id = Some(run.id);
        Ok(Some(run))
    }

    /// Ends a verification its execution could not finish (it stopped on
    /// an internal error), while `worker` holds it.
    pub async fn fail(&self, mut v: Verification, worker: &str, error: &str) -> Result<bool> {
        v.status = VerificationStatus::Failed;
        v.error = Some(error.to_string());
        v.finished_at = Some(self.clock.now());
        self.verifications.save_verification(&v, worker).await
    }

    async fn verify_flow(&self, v: &mut Verification, pause: &Pause) -> std::result::Result<(), String> {
        let flow = self
            .flows
            .get(v.org_id, v.flow_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the flow was deleted".to_string())?;
        let open = |e: OpenError| match e {
            OpenError::Missing => "a connection of the flow was deleted".to_string(),
            OpenError::Store(e) => e.to_string(),
            OpenError::Resolve { connection, error } => format!("connection '{connection}': {error}"),
            OpenError::Open(error) => error.to_string(),
        };
        let source = self.connect.open_source(v.org_id, flow.source_connection_id).await.map_err(open)?.io;
        let dest = match self.connect.open_source(v.org_id, flow.destination_connection_id).await {
            Ok(d) => d.io,
            // A SQLite file (or directory) a first run creates.
            Err(OpenError::Open(crate::connect::connector::ConnectorError::DatabaseNotFound(_))) => {
                return Err("the destination holds nothing yet: run the flow first".into());
            }
            Err(e) => return Err(open(e)),
        };
        let names = verified_entities(&flow, &v.requested)
            .map_err(|e| e.into_iter().map(|f| f.message).collect::<Vec<_>>().join("; "))?;
        let mappings = flow.config.mappings.iter().filter(|m| verifiable(m) && names.contains(&m.source_entity));
        for m in mappings {
            let started = std::time::Instant::now();
            let mut check = verify_entity(m, source.as_ref(), dest.as_ref(), pause)
                .await
                .map_err(|e| format!("{}: {e}", m.source_entity))?;
            check.entity = m.source_entity.clone();
            check.destination = m.destination().to_string();
            check.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            if !v.repair {
                check.repair_keys.clear();
            }
            v.entities.push(check);
        }
        Ok(())
    }
}

/// Compares one mapping's source entity with its destination.
async fn verify_entity(
    m: &Mapping,
    source: &dyn Source,
    dest: &dyn Source,
    pause: &Pause,
) -> std::result::Result<EntityCheck, String> {
    let source_fields = source.entity_fields(&m.source_entity).await.map_err(|e| e.to_string())?;
    let dest_fields = match dest.entity_fields(m.destination()).await {
        Ok(f) => f,
        Err(crate::connect::connector::ConnectorError::EntityNotFound(_)) => {
            return Err(format!("the destination has no '{}' yet: run the flow first", m.destination()));
        }
        Err(e) => return Err(e.to_string()),
    };
    let plan = Plan::new(m, &source_fields, &dest_fields)?;
    let mut tally = Tally::default();
    let by_digests = match super::digest::digestible(m, &plan, &source_fields, &dest_fields) {
        Some(columns) => super::digest::compare_by_digests(m, &plan, columns, source, dest, &mut tally).await?,
        None => false,
    };
    if !by_digests {
        let all = |key: &[crate::connect::connector::Field]| KeyRange { fields: key.to_vec(), after: None, upto: None };
        let mut s = Ordered::new(read_ordered(source, &m.source_entity, &all(&plan.source_key)).await?);
        let mut d = Ordered::new(read_ordered(dest, m.destination(), &all(&plan.dest_key)).await?);
        merge_into(&plan, &m.transform, &mut s, &mut d, &mut tally).await?;
    }
    let pause = pause.clone();
    recheck(&plan, m, source, dest, tally, RECHECK_ROUNDS, move |round| pause(RECHECK_PAUSE * round)).await
}

/// The source entities a verification of `f` covers: those `asked` names,
/// or when none, every entity the flow mirrors by key.
pub(crate) fn verified_entities(f: &Flow, asked: &[String]) -> std::result::Result<Vec<String>, Vec<FieldError>> {
    let mut errors = Vec::new();
    if asked.is_empty() {
        let all: Vec<String> =
            f.config.mappings.iter().filter(|m| verifiable(m)).map(|m| m.source_entity.clone()).collect();
        if all.is_empty() {
            errors.push(FieldError::new(
                "entities",
                "the flow mirrors no entity by key (full_refresh_overwrite, incremental_deduped or \
                 cdc_deduped): appended rows cannot be verified",
            ));
        }
        return if errors.is_empty() { Ok(all) } else { Err(errors) };
    }
    let mut out = Vec::new();
    for (i, e) in asked.iter().enumerate() {
        match f.config.mappings.iter().find(|m| &m.source_entity == e) {
            None => errors.push(FieldError::new(format!("entities[{i}]"), format!("the flow does not sync '{e}'"))),
            Some(m) if !verifiable(m) => errors.push(FieldError::new(
                format!("entities[{i}]"),
                format!(
                    "'{e}' is synced with {}, which appends rows: only entities mirrored by key \
                     (full_refresh_overwrite, incremental_deduped, cdc_deduped) can be verified",
                    m.sync_mode.as_str()
                ),
            )),
            Some(_) if out.contains(e) => {}
            Some(_) => out.push(e.clone()),
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}
