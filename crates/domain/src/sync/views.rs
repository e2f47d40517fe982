//! Read models of runs and flows: a trace's runs, the flows' topology, and
//! a flow's details (the one composition the API's details route and the
//! console's flow page share).

use super::service::SyncService;
use crate::shared::ids::{FlowId, OrgId};
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

/// A flow's page: the flow, its last runs, its entities' state, and the
/// flows it depends on and that depend on it (`GET …/flows/{id}/details`,
/// the console's flow page).
#[derive(Debug, Clone)]
pub struct FlowDetails {
    pub flow: Flow,
    /// The last [`DETAILS_RUNS`], newest first.
    pub runs: Vec<Run>,
    pub state: Vec<super::service::EntityState>,
    pub upstream: Vec<Neighbour>,
    pub downstream: Vec<Neighbour>,
}

/// A flow next to another in the dependency graph, and on what the
/// downstream one runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub id: FlowId,
    pub name: String,
    pub on: DependsOn,
}

/// How many of a flow's runs its details show.
pub const DETAILS_RUNS: u64 = 20;

impl SyncService {
    /// See [`FlowDetails`].
    pub async fn flow_details(&self, p: &crate::identity::Principal, org: OrgId, id: FlowId) -> Result<FlowDetails> {
        let flow = self.get_flow(p, org, id).await?;
        let page = crate::shared::page::PageRequest { limit: DETAILS_RUNS, after: None };
        let runs = self.list_runs(p, org, id, None, page).await?.items;
        let state = self.state(p, org, id).await?;
        let all = self.flows.all(org).await?;
        let name_of = |fid: FlowId| all.iter().find(|x| x.id == fid).map(|x| x.name.clone()).unwrap_or_default();
        let graph = edges(&all);
        let upstream = graph
            .iter()
            .filter(|e| e.to == id)
            .map(|e| Neighbour { id: e.from, name: name_of(e.from), on: e.on })
            .collect();
        let downstream = graph
            .iter()
            .filter(|e| e.from == id)
            .map(|e| Neighbour { id: e.to, name: name_of(e.to), on: e.on })
            .collect();
        Ok(FlowDetails { flow, runs, state, upstream, downstream })
    }
}
