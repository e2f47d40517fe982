//! The dashboard of an organization: its flows, its runs and rows of the
//! last day, and its connections' health, as counts.

/// Counts of an organization's resources and recent runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DashboardCounts {
    pub flows_active: u64,
    pub flows_paused: u64,
    /// Runs queued in the window, by status (`failed` counts runs that
    /// stopped on schema drift too).
    pub runs_succeeded: u64,
    pub runs_failed: u64,
    pub runs_running: u64,
    pub runs_queued: u64,
    /// Rows written by the runs that finished in the window.
    pub rows_synced: u64,
    pub connections_healthy: u64,
    pub connections_failing: u64,
    pub connections_untested: u64,
}
