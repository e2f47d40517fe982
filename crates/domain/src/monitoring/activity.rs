//! Activity events: what happened in an organization, for its feed.

use crate::shared::ids::OrgId;
use time::OffsetDateTime;
use uuid::Uuid;

/// What an event says happened: the service's own kinds, or one an
/// internal caller names (`POST /v1/internal/notifications`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventType {
    RunSucceeded,
    RunFailed,
    RunDriftDetected,
    RunCanceled,
    SchemaDrift,
    QuotaThreshold,
    ConnectionFailing,
    /// A flow's change stream makes its source keep more log than the
    /// source connection's `cdc_max_retained` (see `docs/cdc.md`).
    CdcRetainedOverBudget,
    /// A flow's change stream stayed on its source (unreachable when the
    /// flow was deleted or moved): retried until it is dropped.
    CdcStreamLeft,
    /// A change stream left on its source was dropped at last.
    CdcStreamDropped,
    /// A verification found the destination differing from its source.
    VerifyMismatch,
    /// A name an internal caller chose (a-z, '.', '_').
    Other(String),
}

impl EventType {
    /// The service's own kinds (every one a rule can name but
    /// `run.canceled`).
    pub const OWN: [EventType; 11] = [
        EventType::RunSucceeded,
        EventType::RunFailed,
        EventType::RunDriftDetected,
        EventType::RunCanceled,
        EventType::SchemaDrift,
        EventType::QuotaThreshold,
        EventType::ConnectionFailing,
        EventType::CdcRetainedOverBudget,
        EventType::CdcStreamLeft,
        EventType::CdcStreamDropped,
        EventType::VerifyMismatch,
    ];

    pub const fn as_str(&self) -> &str {
        match self {
            EventType::RunSucceeded => "run.succeeded",
            EventType::RunFailed => "run.failed",
            EventType::RunDriftDetected => "run.drift_detected",
            EventType::RunCanceled => "run.canceled",
            EventType::SchemaDrift => "schema.drift",
            EventType::QuotaThreshold => "quota.threshold",
            EventType::ConnectionFailing => "connection.failing",
            EventType::CdcRetainedOverBudget => "cdc.retained_over_budget",
            EventType::CdcStreamLeft => "cdc.stream_left",
            EventType::CdcStreamDropped => "cdc.stream_dropped",
            EventType::VerifyMismatch => "verify.mismatch",
            EventType::Other(s) => s.as_str(),
        }
    }

    /// The kind named `s`: one of the service's own, else `Other`.
    pub fn parse(s: &str) -> Self {
        Self::OWN.into_iter().find(|e| e.as_str() == s).unwrap_or_else(|| EventType::Other(s.to_string()))
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A system event for the activity feed.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityEvent {
    pub id: Uuid,
    pub org_id: OrgId,
    pub event_type: EventType,
    pub severity: String,
    pub message: String,
    pub data: serde_json::Value,
    pub created_at: OffsetDateTime,
}
