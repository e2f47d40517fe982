//! Activity events: what happened in an organization, for its feed.

use crate::shared::ids::OrgId;
use time::OffsetDateTime;
use uuid::Uuid;

/// A system event for the activity feed.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityEvent {
    pub id: Uuid,
    pub org_id: OrgId,
    pub event_type: String,
    pub severity: String,
    pub message: String,
    pub data: serde_json::Value,
    pub created_at: OffsetDateTime,
}
