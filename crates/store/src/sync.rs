//! Flows, runs (queue, claiming, heartbeats), run logs and cursors on
//! sea-orm, one file a port: `flows`, `runs` (the claim and the lease),
//! `cursors`, `queue` (and the fence every write of a run checks).

mod cursors;
mod drops;
mod flows;
mod queue;
mod runs;
mod verifications;

use sluice_domain::sync::flow::{Run, RunStatus, Trigger};
use sluice_domain::{Error, Result};

pub(crate) use flows::{flow_from, flow_model};

fn corrupt(what: &str) -> Error {
    Error::Internal(anyhow::anyhow!("stored {what} is invalid"))
}

fn run_from(m: crate::entities::runs::Model) -> Result<Run> {
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

/// The row of a run as it is queued: claimed by no one yet.
fn queued_model(run: &Run) -> Result<crate::entities::runs::ActiveModel> {
    use sea_orm::ActiveValue::Set;
    Ok(crate::entities::runs::ActiveModel {
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
}
