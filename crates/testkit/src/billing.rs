//! In-memory billing: every organization of the store on a plan (free
//! unless a test sets another), and the validation meter.

use crate::InMemoryStore;
use async_trait::async_trait;
use sluice_domain::Result;
use sluice_domain::billing::plan::Plan;
use sluice_domain::billing::ports::BillingRepository;
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
    plans: HashMap<OrgId, Plan>,
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
        self.s().plans.insert(org, plan);
    }
}

#[async_trait]
impl BillingRepository for InMemoryBilling {
    async fn plan_of(&self, org: OrgId) -> Result<Option<Plan>> {
        if !self.orgs.s().orgs.iter().any(|o| o.id == org) {
            return Ok(None);
        }
        Ok(Some(self.s().plans.get(&org).copied().unwrap_or(Plan::Free)))
    }

    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool> {
        let mut s = self.s();
        let n = s.usage.entry((org, month.to_string())).or_insert(0);
        if limit.is_some_and(|l| *n >= l) {
            return Ok(false);
        }
        *n += 1;
        Ok(true)
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        Ok(self.s().usage.get(&(org, month.to_string())).copied().unwrap_or(0))
    }
}
