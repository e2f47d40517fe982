//! The billing context's store: organizations' plans and the meter of
//! gateway validations (see meter.rs).

use crate::entities::organizations;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::EntityTrait;
use sluice_domain::Result;
use sluice_domain::billing::plan::Plan;
use sluice_domain::billing::ports::BillingRepository;
use sluice_domain::shared::ids::OrgId;

#[async_trait]
impl BillingRepository for Store {
    async fn plan_of(&self, org: OrgId) -> Result<Option<Plan>> {
        let Some(row) = organizations::Entity::find_by_id(org.as_uuid()).one(&self.db).await.map_err(db_err)? else {
            return Ok(None);
        };
        Ok(Some(Plan::parse(&row.plan).map_err(|e| crate::convert::corrupt("plan", e))?))
    }

    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool> {
        // Group commit: see meter.rs.
        self.meter.consume(self, org, month, limit).await
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        crate::meter::used(&self.db, org, month).await
    }
}
