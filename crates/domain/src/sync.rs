//! Moving data: flows and their mappings, the sync modes and cursor rules,
//! transforms; what users call ([`SyncService`]: flows, runs listed and
//! canceled, state, verifications started, views) and what workers call:
//! the run engine ([`engine::Engine`]: a run claimed, leased, executed,
//! recovered) and the verification executor
//! ([`verification::Verifier`]).
//!
//! The two services' types are declared here, above the modules that
//! implement them, so that no module of sync imports one that imports it.

mod admit;
pub mod cursor;
pub mod engine;
pub mod flow;
pub mod mark;
pub mod mode;
pub mod ports;
pub mod service;
pub mod transform;
pub mod validate;
pub mod verification;
pub mod views;

pub use cursor::*;
pub use mode::*;

use crate::connect::service::ConnectService;
use crate::identity::service::IdentityService;
use crate::shared::audit::AuditRepository;
use crate::shared::clock::Clock;
use ports::{CursorRepository, FlowRepository, QueueRepository, RunRepository, StreamDropRepository};
use std::sync::Arc;

/// The use cases of sync: what users call (see `service.rs`, `views.rs`
/// and `verification.rs`). What runs a flow is the [`engine::Engine`] it
/// holds.
#[derive(Clone)]
pub struct SyncService {
    pub(crate) identity: IdentityService,
    pub(crate) connect: ConnectService,
    pub(crate) flows: Arc<dyn FlowRepository>,
    pub(crate) runs: Arc<dyn RunRepository>,
    pub(crate) cursors: Arc<dyn CursorRepository>,
    pub(crate) queue: Arc<dyn QueueRepository>,
    pub(crate) verifications: Arc<dyn verification::VerificationRepository>,
    /// Change streams flows left on their sources, to drop.
    pub(crate) drops: Arc<dyn StreamDropRepository>,
    pub(crate) audit: Arc<dyn AuditRepository>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Queues, ends and orchestrates runs, and drops change streams, for
    /// the use cases that do.
    pub(crate) engine: engine::Engine,
}
