//! The run engine: what workers call. A run is claimed, leased and fenced
//! (`queue`), executed to its stored outcome (`run`), one entity at a time
//! by its rows (`entity`) or with the flow's other CDC entities through
//! the source's change stream (`capture`, copies in chunks in `chunks`), or
//! as a verification's repair (`repair`); due flows are queued and
//! finished runs followed by what depends on them (`orchestrate`); change
//! streams a flow left behind are dropped (`drops`). How an entity's turn
//! ends, on either path, is said in one vocabulary (`outcome`).
//!
//! [`Engine`] is built once, from only the ports a run needs, and reached
//! by the worker directly; the use cases that queue, cancel or
//! orchestrate a run ([`crate::sync::SyncService`]) hold it too.

pub mod capture;
pub mod chunks;
pub mod drops;
pub mod entity;
pub mod orchestrate;
pub mod outcome;
pub mod queue;
pub mod repair;
pub mod run;

use crate::connect::changes::ChangeSource;
use crate::connect::connector::{ConnectorError, Destination};
use crate::connect::service::{ConnectService, OpenError};
use crate::monitoring::service::MonitoringService;
use crate::shared::clock::Clock;
use crate::sync::flow::Flow;
use crate::sync::ports::{CursorRepository, FlowRepository, QueueRepository, RunRepository, StreamDropRepository};
use crate::sync::verification::{VerificationRepository, Verifier};
use crate::{Error, Result};
use std::sync::Arc;

/// Rows between commits (and cursor advances) of an incremental sync, and
/// changes between a change stream's commits.
pub const CHECKPOINT_ROWS: u64 = 50_000;
/// Rows per batch read from a source (and changes per read of a stream).
pub const BATCH_ROWS: usize = 10_000;

/// Executes runs: claims them, holds their lease, syncs their entities,
/// stores their outcome, recovers those whose worker was lost.
#[derive(Clone)]
pub struct Engine {
    pub(crate) monitoring: MonitoringService,
    pub(crate) connect: ConnectService,
    pub(crate) flows: Arc<dyn FlowRepository>,
    pub(crate) runs: Arc<dyn RunRepository>,
    pub(crate) cursors: Arc<dyn CursorRepository>,
    pub(crate) queue: Arc<dyn QueueRepository>,
    pub(crate) verifications: Arc<dyn VerificationRepository>,
    /// Change streams flows left on their sources, to drop.
    pub(crate) drops: Arc<dyn StreamDropRepository>,
    /// Queues the verification that follows a run.
    pub(crate) verifier: Verifier,
    pub(crate) clock: Arc<dyn Clock>,
    /// How long a worker holds a run without renewing its heartbeat.
    pub(crate) lease: time::Duration,
    /// Set when the process is stopping: runs pause at their next
    /// checkpoint and go back to the queue (shared by every clone).
    pub(crate) stopping: Arc<std::sync::atomic::AtomicBool>,
    /// How many of a run's entities sync at once (at least 1).
    pub(crate) entity_concurrency: usize,
    /// Into how many key ranges a full refresh of a large table may be
    /// read at once (1: one read).
    pub(crate) read_ranges: usize,
}

impl Engine {
    /// How long a run's lease lasts: workers renew it several times within.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::try_from(self.lease).unwrap_or(std::time::Duration::from_secs(60))
    }

    /// A CDC flow's change source; a failure says it could not be reached.
    pub(crate) async fn change_source_of(&self, f: &Flow) -> Result<Arc<dyn ChangeSource>> {
        let opened = self.connect.open_change_source(f.org_id, f.source_connection_id).await;
        opened.map(|o| o.io).map_err(unopened("source"))
    }

    /// A flow's destination; a failure says it could not be reached.
    pub(crate) async fn destination_of(&self, f: &Flow) -> Result<Arc<dyn Destination>> {
        let opened = self.connect.open_destination(f.org_id, f.destination_connection_id).await;
        opened.map(|o| o.io).map_err(unopened("destination"))
    }
}

/// A connector's failure reaching a flow's `side` as a 422 that says so.
pub(crate) fn unreachable(side: &'static str) -> impl Fn(ConnectorError) -> Error {
    move |e| Error::Unprocessable {
        code: if side == "source" { crate::shared::error::Code::SourceUnreachable } else { e.code() },
        message: format!("the flow's {side} could not be reached: {e}"),
    }
}

/// The error of a flow's connection on `side` that would not open.
pub(crate) fn unopened(side: &'static str) -> impl Fn(OpenError) -> Error {
    move |e| match e {
        OpenError::Missing => Error::not_found("connection"),
        OpenError::Store(e) => e,
        OpenError::Resolve { error, .. } | OpenError::Open(error) => unreachable(side)(error),
    }
}
