//! Read models of runs and flows across an organization: a trace's runs
//! and the flows' topology.

use super::service::SyncService;
use crate::shared::ids::OrgId;
use crate::sync::flow::*;
use crate::{Error, Result};
use uuid::Uuid;

impl SyncService {
    pub async fn trace(&self, p: &crate::identity::Principal, org: OrgId, trace: Uuid) -> Result<Vec<Run>> {
        self.identity.access(p, org, crate::identity::Permission::Read).await?;
        let runs = self.queue.trace(org, trace).await?;
        if runs.is_empty() {
            return Err(Error::not_found("trace"));
        }
        Ok(runs)
    }

    pub async fn topology(&self, p: &crate::identity::Principal, org: OrgId) -> Result<Vec<Flow>> {
        self.identity.access(p, org, crate::identity::Permission::Read).await?;
        self.flows.all(org).await
    }
}
