//! The port of verification: where verifications are kept, claimed by
//! workers like runs, and their repairs queued.

use super::compare::Verification;
use crate::Result;
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{FlowId, OrgId, RunId, VerificationId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::flow::Run;
use async_trait::async_trait;
use time::OffsetDateTime;

#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait VerificationRepository: Send + Sync {
    /// Stores a queued verification with the audit entry of its request.
    async fn create_verification(&self, verification: &Verification, audit: &AuditEntry) -> Result<()>;
    async fn get_verification(&self, org: OrgId, id: VerificationId) -> Result<Option<Verification>>;
    /// A flow's verifications, newest first.
    async fn verifications_of_flow(&self, org: OrgId, flow: FlowId, page: PageRequest) -> Result<Page<Verification>>;
    /// Claims the oldest queued verification, or a running one whose
    /// claim lapsed before `now` (its worker stopped answering): it becomes
    /// `running`, held by `worker` until `until`. Two workers never hold
    /// one verification.
    async fn claim_verification(
        &self,
        worker: &str,
        now: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Result<Option<Verification>>;
    /// Extends `worker`'s claim; `false` when it no longer holds it.
    async fn renew_verification(&self, id: VerificationId, worker: &str, until: OffsetDateTime) -> Result<bool>;
    /// Stores the status, entities, error and finish time while `worker`
    /// holds the verification; `false`, storing nothing, when not.
    async fn save_verification(&self, verification: &Verification, worker: &str) -> Result<bool>;
    /// Stores the outcome like [`Self::save_verification`] and queues
    /// `run`, its repair, in the same transaction; `false`, storing and
    /// queueing nothing, when `worker` no longer holds it. `audit`, the
    /// run's trigger, is written in that transaction too.
    async fn queue_repair(
        &self,
        verification: &Verification,
        run: &Run,
        worker: &str,
        audit: &AuditEntry,
    ) -> Result<bool>;
    /// The verification whose repair `run` is, if it is one.
    async fn repaired_by(&self, run: RunId) -> Result<Option<Verification>>;
}
