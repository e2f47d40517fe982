//! Read models of runs and flows: a trace's runs, the flows' topology, a
//! flow's details (the one composition the API's details route and the
//! console's flow page share), its change stream's health, and the
//! change streams left on a connection.

use super::SyncService;
use super::engine::capture::{DEFAULT_MAX_RETAINED, retained_budget};
use super::engine::unopened;
use crate::shared::ids::{ConnectionId, FlowId, OrgId};
use crate::sync::flow::*;
use crate::{Error, Result};
use uuid::Uuid;

impl SyncService {
    /// The change streams left on `connection` (its page shows them).
    pub async fn streams_left(
        &self,
        p: &crate::identity::Principal,
        org: OrgId,
        connection: ConnectionId,
    ) -> Result<Vec<StreamDrop>> {
        self.identity.access(p, org, crate::identity::Permission::Read).await?;
        self.drops.drops_of(org, connection).await
    }

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

/// What a CDC flow's change stream holds back at its source now, read from
/// the source (so every process serving the flow's page says the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHealth {
    /// The stream's name at the source (a PostgreSQL replication slot and
    /// publication).
    pub name: String,
    /// The log the source keeps for the stream; `None` before the flow's
    /// first run made it.
    pub retained_bytes: Option<u64>,
    /// The source connection's `cdc_max_retained`: past it, Sluice records
    /// `cdc.retained_over_budget`.
    pub budget_bytes: u64,
    /// Why the source could not say (it is unreachable, say).
    pub unknown: Option<String>,
}

impl StreamHealth {
    /// Whether the source keeps more than the budget.
    pub fn over_budget(&self) -> bool {
        self.retained_bytes.is_some_and(|b| b > self.budget_bytes)
    }
}

impl SyncService {
    /// A CDC flow's [`StreamHealth`]; `None` for a flow that captures no
    /// changes.
    pub async fn stream_health(
        &self,
        p: &crate::identity::Principal,
        org: OrgId,
        id: FlowId,
    ) -> Result<Option<StreamHealth>> {
        let flow = self.get_flow(p, org, id).await?;
        if !flow.captures() {
            return Ok(None);
        }
        let name = flow.stream_name();
        let (budget_bytes, retained) = match self.connect.open_change_source(org, flow.source_connection_id).await {
            Ok(source) => {
                let retained = source.io.retained_bytes(&name).await.map_err(|e| e.to_string());
                (retained_budget(&source.connection), retained)
            }
            Err(e) => {
                let source = self.connect.connection(org, flow.source_connection_id).await.ok().flatten();
                (source.as_ref().map_or(DEFAULT_MAX_RETAINED, retained_budget), Err(unopened("source")(e).to_string()))
            }
        };
        let (retained_bytes, unknown) = match retained {
            Ok(b) => (b, None),
            Err(why) => (None, Some(why)),
        };
        Ok(Some(StreamHealth { name, retained_bytes, budget_bytes, unknown }))
    }
}
