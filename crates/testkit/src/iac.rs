//! IaC applies in memory.

use super::*;

/// IaC applies over the in-memory catalog and flows: all-or-nothing under
/// both locks, with the same stale-plan rule as the SQL store.
#[derive(Clone)]
pub struct InMemoryIac {
    pub(crate) catalog: InMemoryCatalog,
    pub(crate) flows: InMemoryFlows,
    pub(crate) audit: InMemoryStore,
}

#[async_trait]
impl sluice_domain::iac::ports::IacRepository for InMemoryIac {
    async fn snapshot(&self, org: OrgId) -> Result<sluice_domain::iac::Snapshot> {
        let c = self.catalog.s();
        let f = self.flows.s();
        Ok(sluice_domain::iac::Snapshot {
            integrations: c.integrations.iter().filter(|i| i.org_id == org).cloned().collect(),
            connections: c.connections.iter().filter(|x| x.org_id == org).cloned().collect(),
            flows: f.flows.iter().filter(|x| x.org_id == org).cloned().collect(),
        })
    }

    async fn apply(&self, org: OrgId, writes: &sluice_domain::iac::Writes, audit: &[AuditEntry]) -> Result<()> {
        use sluice_domain::iac::Write;
        use sluice_domain::iac::ports::stale_plan;
        let mut c = self.catalog.s();
        let mut f = self.flows.s();
        // Check everything first, so that a refused apply writes nothing.
        fn ok<T>(
            list: &[T],
            w: &Write<T>,
            org: OrgId,
            key: impl Fn(&T) -> (OrgId, Uuid, &str, OffsetDateTime),
        ) -> bool {
            let (_, id, name, _) = key(w.item());
            match w {
                Write::Create(_) => !list.iter().any(|x| {
                    let (o, _, n, _) = key(x);
                    o == org && n == name
                }),
                Write::Update { planned_against, .. } => list.iter().any(|x| {
                    let (o, i, _, at) = key(x);
                    o == org && i == id && at == *planned_against
                }),
            }
        }
        let fresh = writes
            .integrations
            .iter()
            .all(|w| ok(&c.integrations, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)))
            && writes
                .connections
                .iter()
                .all(|w| ok(&c.connections, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)))
            && writes
                .flows
                .iter()
                .all(|w| ok(&f.flows, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)));
        if !fresh {
            return Err(stale_plan());
        }
        fn put<T: Clone>(list: &mut Vec<T>, w: &Write<T>, same: impl Fn(&T, &T) -> bool) {
            match list.iter().position(|x| same(x, w.item())) {
                Some(i) => list[i] = w.item().clone(),
                None => list.push(w.item().clone()),
            }
        }
        for w in &writes.integrations {
            put(&mut c.integrations, w, |a, b| a.id == b.id);
        }
        for w in &writes.connections {
            put(&mut c.connections, w, |a, b| a.id == b.id);
        }
        for w in &writes.flows {
            put(&mut f.flows, w, |a, b| a.id == b.id);
        }
        drop((c, f));
        self.audit.s().audit.extend(audit.iter().cloned());
        Ok(())
    }
}
