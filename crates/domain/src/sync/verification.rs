//! Verification: proof that a destination holds what its source holds,
//! entity by entity, by key. Its use cases are here (a verification
//! started, read, listed); its rules in `compare` (and `digest`, by
//! checksums where the rows lie); its executor, which workers reach, in
//! `execute` ([`Verifier`]); its port in `ports`. A verification's repair
//! is a run, which the engine executes (`crate::sync::engine::repair`).

pub mod compare;
pub mod digest;
pub mod execute;
pub mod ports;
pub mod values;

pub use compare::*;
pub use execute::{Pause, RECHECK_PAUSE, RECHECK_ROUNDS};
pub use ports::*;
pub use values::{key_cmp, key_order, same_meaning};

use crate::connect::service::ConnectService;
use crate::identity::{Permission, Principal};
use crate::monitoring::service::MonitoringService;
use crate::shared::clock::Clock;
use crate::shared::ids::{FlowId, OrgId, VerificationId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::SyncService;
use crate::sync::ports::FlowRepository;
use crate::{Error, FieldError, Result};
use std::sync::Arc;

/// Executes verifications: queues them, claims them for a worker, compares
/// each entity, stores the outcome and queues the repair run asked for.
#[derive(Clone)]
pub struct Verifier {
    pub(crate) monitoring: MonitoringService,
    pub(crate) connect: ConnectService,
    pub(crate) flows: Arc<dyn FlowRepository>,
    pub(crate) verifications: Arc<dyn VerificationRepository>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How long a worker holds a verification without renewing its claim.
    pub(crate) lease: time::Duration,
}

impl SyncService {
    /// Queues a verification of `entities` of the flow (source entity
    /// names; every entity mirrored by key when empty).
    ///
    /// # Errors
    /// `NotFound` for another organization's flow; `Validation` naming an
    /// entity the flow does not sync, or one it does not mirror by key.
    pub async fn start_verification(
        &self,
        p: &Principal,
        org: OrgId,
        flow: FlowId,
        entities: Vec<String>,
        repair: bool,
    ) -> Result<Verification> {
        self.identity.access(p, org, Permission::Write).await?;
        let f = self.flows.get(org, flow).await?.ok_or(Error::not_found("flow"))?;
        let requested = execute::verified_entities(&f, &entities).map_err(Error::Validation)?;
        if repair && f.config.continuous {
            return Err(Error::Validation(vec![FieldError::new(
                "repair",
                "a continuous flow's run never ends, so no repair run can follow it: re-snapshot a differing \
                 table instead (DELETE …/state/{entity})",
            )]));
        }
        self.engine.verifier.queue(&f, requested, repair, p.actor()).await
    }

    pub async fn get_verification(&self, p: &Principal, org: OrgId, id: VerificationId) -> Result<Verification> {
        self.identity.access(p, org, Permission::Read).await?;
        self.verifications.get_verification(org, id).await?.ok_or(Error::not_found("verification"))
    }

    pub async fn list_verifications(
        &self,
        p: &Principal,
        org: OrgId,
        flow: FlowId,
        page: PageRequest,
    ) -> Result<Page<Verification>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.flows.get(org, flow).await?.ok_or(Error::not_found("flow"))?;
        self.verifications.verifications_of_flow(org, flow, page).await
    }
}
