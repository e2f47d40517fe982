//! The ports of IaC.

use super::plan::{Snapshot, Writes};
use crate::Error;
use crate::shared::ids::OrgId;

/// Where applies read the organization and write their plans.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait::async_trait]
pub trait IacRepository: Send + Sync {
    /// Every integration, connection and flow of `org`.
    async fn snapshot(&self, org: OrgId) -> crate::Result<Snapshot>;

    /// Writes every create and update of `writes` and every entry of
    /// `audit` in one transaction, serialized with other applies of `org`.
    ///
    /// # Errors
    /// `Conflict { code: crate::shared::error::Code::StalePlan }`, with nothing written, when a
    /// resource was changed after the plan was made (an update's
    /// `planned_against` no longer matches) or a created name was taken
    /// meanwhile; the caller plans again.
    async fn apply(&self, org: OrgId, writes: &Writes, audit: &[crate::shared::audit::AuditEntry])
    -> crate::Result<()>;
}

/// The conflict a stale plan gets from [`IacRepository::apply`].
pub fn stale_plan() -> Error {
    Error::Conflict {
        code: crate::shared::error::Code::StalePlan,
        message: "the organization changed while the apply was planned".into(),
    }
}
