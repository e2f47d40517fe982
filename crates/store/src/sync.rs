//! Flows, runs (queue, claiming, heartbeats), run logs and cursors on
//! sea-orm, one file a port: `flows`, `runs` (the claim and the lease),
//! `cursors`, `queue` (and the fence every write of a run checks).

mod cursors;
mod flows;
mod queue;
mod runs;

use sluice_domain::Error;

pub(crate) use flows::{flow_from, flow_model};

fn corrupt(what: &str) -> Error {
    Error::Internal(anyhow::anyhow!("stored {what} is invalid"))
}
