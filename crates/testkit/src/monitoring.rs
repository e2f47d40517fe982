//! The activity feed in memory.

use super::*;

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for InMemoryFlows {
    async fn record_event(&self, e: &sluice_domain::monitoring::activity::ActivityEvent) -> Result<()> {
        self.s().events.push(e.clone());
        Ok(())
    }

    async fn events(
        &self,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<sluice_domain::monitoring::activity::ActivityEvent>> {
        let mut v: Vec<_> = self
            .s()
            .events
            .iter()
            .filter(|e| e.org_id == org && since.is_none_or(|t| e.created_at >= t))
            .cloned()
            .collect();
        v.reverse();
        v.truncate(limit as usize);
        Ok(v)
    }
}
