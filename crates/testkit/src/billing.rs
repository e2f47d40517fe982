//! In-memory billing: every organization of the store on a plan (free
//! unless a test sets another), and the validation meter.

use crate::InMemoryStore;
use async_trait::async_trait;
use sluice_domain::Result;
use sluice_domain::billing::plan::{Plan, Subscription};
use sluice_domain::billing::ports::{Audit, BillingRepository, Update};
use sluice_domain::shared::ids::OrgId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Default)]
pub struct InMemoryBilling {
    orgs: InMemoryStore,
    state: Arc<Mutex<Billing>>,
}

#[derive(Default)]
struct Billing {
    subscriptions: HashMap<OrgId, Subscription>,
    events: std::collections::HashSet<String>,
    usage: HashMap<(OrgId, String), i64>,
}

impl InMemoryBilling {
    pub fn new(orgs: &InMemoryStore) -> Self {
        Self { orgs: orgs.clone(), state: Arc::default() }
    }

    fn s(&self) -> MutexGuard<'_, Billing> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `org` on `plan`.
    pub fn set_plan(&self, org: OrgId, plan: Plan) {
        self.s().subscriptions.entry(org).or_insert_with(Subscription::free).plan = plan;
    }

    fn exists(&self, org: OrgId) -> bool {
        self.orgs.s().orgs.iter().any(|o| o.id == org)
    }
}

#[async_trait]
impl BillingRepository for InMemoryBilling {
    async fn subscription(&self, org: OrgId) -> Result<Option<Subscription>> {
        if !self.exists(org) {
            return Ok(None);
        }
        Ok(Some(self.s().subscriptions.get(&org).cloned().unwrap_or_else(Subscription::free)))
    }

    async fn org_of_customer(&self, customer: &str) -> Result<Option<OrgId>> {
        let s = self.s();
        Ok(s.subscriptions.iter().find(|(_, x)| x.customer_id.as_deref() == Some(customer)).map(|(o, _)| *o))
    }

    async fn set_customer(&self, org: OrgId, customer: &str) -> Result<String> {
        if !self.exists(org) {
            return Err(sluice_domain::Error::not_found("organization"));
        }
        let mut s = self.s();
        let sub = s.subscriptions.entry(org).or_insert_with(Subscription::free);
        Ok(sub.customer_id.get_or_insert_with(|| customer.to_string()).clone())
    }

    async fn apply_event<'a>(
        &self,
        event_id: &str,
        _event_type: &str,
        org: OrgId,
        update: Update<'a>,
        audit: Audit<'a>,
    ) -> Result<bool> {
        if !self.exists(org) {
            return Err(sluice_domain::Error::not_found("organization"));
        }
        let entry = {
            let mut s = self.s();
            if !s.events.insert(event_id.to_string()) {
                return Ok(false);
            }
            let before = s.subscriptions.get(&org).cloned().unwrap_or_else(Subscription::free);
            let after = update(before.clone());
            s.subscriptions.insert(org, after.clone());
            audit(&before, &after)
        };
        self.orgs.s().audit.push(entry);
        Ok(true)
    }

    async fn consume_validation(
        &self,
        org: OrgId,
        month: &str,
        limit: Option<i64>,
    ) -> Result<sluice_domain::billing::plan::Metered> {
        use sluice_domain::billing::plan::Metered;
        let mut s = self.s();
        let n = s.usage.entry((org, month.to_string())).or_insert(0);
        if limit.is_some_and(|l| *n >= l) {
            return Ok(Metered::Refused);
        }
        *n += 1;
        Ok(Metered::Counted { used: limit.map(|_| *n) })
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        Ok(self.s().usage.get(&(org, month.to_string())).copied().unwrap_or(0))
    }
}
