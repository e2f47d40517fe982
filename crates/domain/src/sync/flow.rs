//! Flows, runs and cursors: the models, their validation rules (cron
//! schedules, mappings, dependency cycles), and the ports that store them.

use crate::shared::ids::{ConnectionId, FlowId, OrgId, RunId};
use crate::sync::SyncMode;
use crate::sync::transform::Step;
use crate::{Error, FieldError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaPolicy {
    #[default]
    AllowAll,
    BlockOnNewColumn,
}

/// One synchronized entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    pub source_entity: String,
    /// Defaults to the source entity's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_entity: Option<String>,
    pub sync_mode: SyncMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor_field: Option<String>,
    /// One field, or several separated by commas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transform: Vec<Step>,
    #[serde(default)]
    pub schema_policy: SchemaPolicy,
    /// The catalog contract (data asset id or name) this mapping's data
    /// follows; the asset then lists the flow among its dependencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    /// How far behind the stored cursor an incremental read starts, for
    /// rows committed late with an older cursor value (`"30s"`, `"5m"`,
    /// `"1h"`, `"0"`); see [`crate::sync::default_lookback`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor_lookback: Option<String>,
    /// What `cdc_deduped` does with a row the source deleted (`hard`
    /// unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_mode: Option<crate::sync::mode::DeleteMode>,
}

impl Mapping {
    /// The lookback this mapping reads with: its own, else the mode's
    /// default, which is none where the source holds the stored cursor at
    /// its oldest writing transaction (`held`: rows committed late are then
    /// read anyway). A value that does not parse counts as none; flows are
    /// checked when written.
    pub fn lookback(&self, held: bool) -> time::Duration {
        match &self.cursor_lookback {
            Some(s) => crate::sync::parse_lookback(s).unwrap_or(time::Duration::ZERO),
            None if held => time::Duration::ZERO,
            None => crate::sync::default_lookback(self.sync_mode),
        }
    }

    pub fn destination(&self) -> &str {
        self.dest_entity.as_deref().unwrap_or(&self.source_entity)
    }

    pub fn key_fields(&self) -> Vec<&str> {
        self.primary_key
            .as_deref()
            .map(|k| k.split(',').map(str::trim).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependsOn {
    Success,
    Failure,
    Completion,
}

impl DependsOn {
    pub fn as_str(self) -> &'static str {
        match self {
            DependsOn::Success => "success",
            DependsOn::Failure => "failure",
            DependsOn::Completion => "completion",
        }
    }
}

/// One edge of the flow graph: `to` runs after a run of `from` ends as
/// `on` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: FlowId,
    pub to: FlowId,
    pub on: DependsOn,
}

/// The edges of the graph of `flows` (their `depends_on`, stored as ids).
pub fn edges(flows: &[Flow]) -> Vec<Edge> {
    flows
        .iter()
        .flat_map(|f| {
            f.config.depends_on.iter().filter_map(move |d| {
                d.flow.parse::<uuid::Uuid>().ok().map(|u| Edge { from: FlowId::from(u), to: f.id, on: d.on })
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// An upstream flow's id or name.
    pub flow: String,
    pub on: DependsOn,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    pub mappings: Vec<Mapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Keep one run going, applying changes as they arrive (change data
    /// capture mappings only; see `docs/cdc.md`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continuous: bool,
    /// `after_run`: verify the destination against the source after each
    /// successful run (see `docs/sync.md`, "Verified syncs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyWhen>,
}

/// When a flow verifies itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyWhen {
    AfterRun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowStatus {
    Active,
    Paused,
}

impl FlowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowStatus::Active => "active",
            FlowStatus::Paused => "paused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(FlowStatus::Active),
            "paused" => Some(FlowStatus::Paused),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    pub id: FlowId,
    pub org_id: OrgId,
    pub name: String,
    pub source_connection_id: ConnectionId,
    pub destination_connection_id: ConnectionId,
    pub schedule: Option<String>,
    pub config: FlowConfig,
    pub status: FlowStatus,
    pub next_run_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl Flow {
    /// The name of the flow's change stream (its slot and publication on
    /// the source).
    pub fn stream_name(&self) -> String {
        self.id.as_uuid().simple().to_string()
    }

    /// Whether any mapping captures changes (so the flow has a change
    /// stream at its source).
    pub fn captures(&self) -> bool {
        self.config.mappings.iter().any(|m| m.sync_mode.cdc())
    }
}

/// The longest schedule taken.
pub const MAX_SCHEDULE_LEN: usize = 256;

/// Parses a five-field cron expression (minute hour day-of-month month
/// day-of-week), UTC. An expression that never fires (`0 0 30 2 *`) is
/// refused like a malformed one.
pub fn parse_cron(expr: &str) -> std::result::Result<croner::Cron, String> {
    use croner::parser::{CronParser, Seconds, Year};
    if expr.len() > MAX_SCHEDULE_LEN {
        return Err(format!("must be at most {MAX_SCHEDULE_LEN} characters"));
    }
    if expr.split_whitespace().count() != 5 {
        return Err("must have five fields: minute hour day-of-month month day-of-week".into());
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| e.to_string())?;
    // Every day of every month comes round within eight years (29
    // February with any weekday within 28, but leap years every 4), so
    // an expression with no time in the eight years after a leap day never
    // fires.
    let from = chrono::DateTime::<chrono::Utc>::from_timestamp(951_782_400, 0).unwrap_or_default(); // 2000-02-29
    match cron.find_next_occurrence(&from, false) {
        Ok(next) if next.timestamp() - from.timestamp() <= 29 * 366 * 86_400 => Ok(cron),
        _ => Err("never fires (no such date)".into()),
    }
}

/// The first time `expr` matches strictly after `after` (UTC).
pub fn next_run(expr: &str, after: OffsetDateTime) -> Option<OffsetDateTime> {
    let cron = parse_cron(expr).ok()?;
    let start = chrono::DateTime::<chrono::Utc>::from_timestamp(after.unix_timestamp(), 0)?;
    let next = cron.find_next_occurrence(&start, false).ok()?;
    OffsetDateTime::from_unix_timestamp(next.timestamp()).ok()
}

/// When a flow is next due: its schedule's next time, or (a continuous
/// flow) from now on, while the scheduler keeps one run of it going; never
/// while paused.
pub fn next_due(
    schedule: Option<&str>,
    status: FlowStatus,
    continuous: bool,
    now: OffsetDateTime,
) -> Option<OffsetDateTime> {
    match (schedule, status) {
        (_, FlowStatus::Active) if continuous => Some(now),
        (Some(s), FlowStatus::Active) => next_run(s, now),
        _ => None,
    }
}

/// A cycle in the dependency graph (`edges`: flow → its upstream flows),
/// as the path of flow names that closes it.
pub fn find_cycle(edges: &BTreeMap<FlowId, Vec<FlowId>>, names: &BTreeMap<FlowId, String>) -> Option<Vec<String>> {
    fn visit(
        n: FlowId,
        edges: &BTreeMap<FlowId, Vec<FlowId>>,
        state: &mut BTreeMap<FlowId, u8>,
        stack: &mut Vec<FlowId>,
    ) -> Option<Vec<FlowId>> {
        state.insert(n, 1);
        stack.push(n);
        for m in edges.get(&n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|x| x == m).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(*m);
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(*m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(*n, edges, &mut state, &mut stack) {
                return Some(
                    c.into_iter().map(|id| names.get(&id).cloned().unwrap_or_else(|| id.to_string())).collect(),
                );
            }
        }
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Schedule,
    Manual,
    Upstream,
    Api,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Upstream => "upstream",
            Trigger::Api => "api",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Trigger::Schedule, Trigger::Manual, Trigger::Upstream, Trigger::Api].into_iter().find(|t| t.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
    DriftDetected,
}

impl RunStatus {
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Canceled,
        RunStatus::DriftDetected,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
            RunStatus::DriftDetected => "drift_detected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        RunStatus::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn finished(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

/// How much a run's log line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [LogLevel::Info, LogLevel::Warn, LogLevel::Error].into_iter().find(|l| l.as_str() == s)
    }
}

/// Where one entity of a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityStatus {
    #[default]
    Running,
    Succeeded,
    Failed,
    DriftDetected,
    Canceled,
    /// Paused at a checkpoint: the process stopped; the run resumes.
    Paused,
}

impl EntityStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            EntityStatus::Running => "running",
            EntityStatus::Succeeded => "succeeded",
            EntityStatus::Failed => "failed",
            EntityStatus::DriftDetected => "drift_detected",
            EntityStatus::Canceled => "canceled",
            EntityStatus::Paused => "paused",
        }
    }
}

/// What a run did to one entity.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EntityStats {
    pub entity: String,
    pub status: EntityStatus,
    pub rows_read: u64,
    pub rows_written: u64,
    pub bytes: u64,
    pub cursor_before: Option<String>,
    pub cursor_after: Option<String>,
    pub duration_ms: u64,
    /// While the entity syncs: when its last checkpoint committed, and the
    /// rows this attempt wrote per second so far.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub checkpoint_at: Option<OffsetDateTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The failure's code where it has one of its own (`position_lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: RunId,
    pub org_id: OrgId,
    pub flow_id: FlowId,
    pub trace_id: Uuid,
    pub trigger: Trigger,
    pub status: RunStatus,
    pub queued_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub entities: Vec<EntityStats>,
    pub error: Option<String>,
    pub attempt: u32,
    pub claimed_by: Option<String>,
    pub heartbeat_at: Option<OffsetDateTime>,
    /// A run waiting out a retry backoff is not claimed before this.
    pub not_before: Option<OffsetDateTime>,
}

/// A queued run of `f`, in trace `trace_id`.
pub fn new_run(f: &Flow, trigger: Trigger, trace_id: Uuid, now: OffsetDateTime) -> Run {
    Run {
        id: RunId::new(),
        org_id: f.org_id,
        flow_id: f.id,
        trace_id,
        trigger,
        status: RunStatus::Queued,
        queued_at: now,
        started_at: None,
        finished_at: None,
        entities: Vec::new(),
        error: None,
        attempt: 1,
        claimed_by: None,
        heartbeat_at: None,
        not_before: None,
    }
}

/// A fencing token: one claim of a run. Every claim runs a new attempt
/// (a run is queued again with the next number), so a worker whose run was
/// taken over holds an attempt that no longer matches, and every write it
/// makes for the run is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub run: RunId,
    pub attempt: u32,
}

impl Run {
    pub fn fence(&self) -> Fence {
        Fence { run: self.id, attempt: self.attempt }
    }

    /// Whether `fence`'s attempt still holds this run: the same attempt,
    /// still running (what every fenced write checks).
    pub fn held_by(&self, fence: Fence) -> bool {
        self.fence() == fence && self.status == RunStatus::Running
    }
}

/// One log line of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLog {
    pub ts: OffsetDateTime,
    pub level: LogLevel,
    pub entity: Option<String>,
    pub message: String,
}

/// How far one entity of a flow got (its cursor, or its change stream
/// position), as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    pub entity: String,
    pub mark: crate::sync::mark::Mark,
    pub updated_at: OffsetDateTime,
}

/// The ids of a flow's upstream flows (as normalized on save). A flow is
/// never its own upstream: [`resolve_dependencies`] refuses that on its own,
/// so a cycle check over these edges does not report it a second time.
pub fn upstream_ids(f: &Flow) -> Vec<FlowId> {
    f.config.depends_on.iter().filter_map(|d| d.flow.parse().ok()).filter(|u| *u != f.id).collect()
}

/// Normalizes flow `id`'s `depends_on` entries to upstream ids with `find`
/// (a flow's id or name → its id). A flow that depends on itself, and an
/// entry `find` does not know (said as "no flow 'x' {place}"), are reported
/// at `{prefix}config.depends_on[j].flow`.
pub fn resolve_dependencies(
    prefix: &str,
    id: FlowId,
    config: &mut FlowConfig,
    find: impl Fn(&str) -> Option<FlowId>,
    place: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (j, dep) in config.depends_on.iter_mut().enumerate() {
        let field = format!("{prefix}config.depends_on[{j}].flow");
        match find(&dep.flow) {
            Some(f) if f == id => errors.push(FieldError::new(field, "a flow cannot depend on itself")),
            Some(f) => dep.flow = f.to_string(),
            None => errors.push(FieldError::new(field, format!("no flow '{}' {place}", dep.flow))),
        }
    }
    errors
}

/// Checks a cron expression as a validation error on `schedule`.
pub fn check_schedule(schedule: Option<&str>) -> std::result::Result<(), Error> {
    match schedule {
        Some(s) => parse_cron(s).map(|_| ()).map_err(|m| {
            // A long expression is not echoed whole.
            let shown: String = s.chars().take(64).collect();
            let more = if shown.len() < s.len() { "…" } else { "" };
            Error::invalid("schedule", format!("'{shown}{more}' is not a valid cron expression: {m}"))
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_has_one_edge_per_dependency_stored_as_an_id() {
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let flow = |name: &str, deps: Vec<(String, DependsOn)>| Flow {
            id: FlowId::new(),
            org_id: OrgId::new(),
            name: name.into(),
            source_connection_id: ConnectionId::new(),
            destination_connection_id: ConnectionId::new(),
            schedule: None,
            config: FlowConfig {
                mappings: vec![],
                depends_on: deps.into_iter().map(|(flow, on)| Dependency { flow, on }).collect(),
                continuous: false,
                verify: None,
            },
            status: FlowStatus::Active,
            next_run_at: None,
            created_at: now,
            updated_at: now,
        };
        let a = flow("a", vec![]);
        let b = flow("b", vec![(a.id.to_string(), DependsOn::Success)]);
        let c = flow("c", vec![(a.id.to_string(), DependsOn::Failure), (b.id.to_string(), DependsOn::Completion)]);
        // A name never normalized to an id makes no edge.
        let d = flow("d", vec![("not-an-id".into(), DependsOn::Success)]);
        let got = edges(&[a.clone(), b.clone(), c.clone(), d]);
        assert_eq!(
            got,
            [
                Edge { from: a.id, to: b.id, on: DependsOn::Success },
                Edge { from: a.id, to: c.id, on: DependsOn::Failure },
                Edge { from: b.id, to: c.id, on: DependsOn::Completion },
            ]
        );
        assert_eq!(DependsOn::Completion.as_str(), "completion");
    }

    #[test]
    fn schedules_that_never_fire_or_run_long_are_refused() {
        for ok in ["*/15 * * * *", "0 0 29 2 *", "0 0 31 12 *", "0 0 29 2 1", "5 4 * * sun"] {
            assert!(parse_cron(ok).is_ok(), "{ok}");
        }
        for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"] {
            let started = std::time::Instant::now();
            assert_eq!(parse_cron(never).err().as_deref(), Some("never fires (no such date)"), "{never}");
            assert!(started.elapsed() < std::time::Duration::from_secs(1), "{never} took {:?}", started.elapsed());
        }
        let long = format!("0 0 * * {}", "1,".repeat(200));
        let Err(Error::Validation(f)) = check_schedule(Some(&long)) else { panic!("accepted") };
        assert!(f[0].message.contains("at most 256") && f[0].message.len() < 200, "{}", f[0].message);
    }
    use time::macros::datetime;

    #[test]
    fn five_field_cron_expressions_are_accepted_and_others_refused() {
        assert!(parse_cron("*/15 * * * *").is_ok());
        assert!(parse_cron("0 3 * * 1-5").is_ok());
        for bad in ["* * * *", "0 */15 * * * *", "61 * * * *", "every hour", ""] {
            assert!(parse_cron(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_next_run_is_strictly_after() {
        assert_eq!(next_run("*/15 * * * *", datetime!(2026-01-01 10:07:30 UTC)), Some(datetime!(2026-01-01 10:15 UTC)));
        assert_eq!(next_run("*/15 * * * *", datetime!(2026-01-01 10:15 UTC)), Some(datetime!(2026-01-01 10:30 UTC)));
        assert_eq!(next_run("0 3 * * *", datetime!(2026-01-01 04:00 UTC)), Some(datetime!(2026-01-02 03:00 UTC)));
    }

    #[test]
    fn a_dependency_cycle_is_named() {
        let (a, b, c) = (FlowId::new(), FlowId::new(), FlowId::new());
        let names: BTreeMap<FlowId, String> = [(a, "a".to_string()), (b, "b".to_string()), (c, "c".to_string())].into();
        let mut edges: BTreeMap<FlowId, Vec<FlowId>> = [(a, vec![b]), (b, vec![c]), (c, vec![])].into();
        assert_eq!(find_cycle(&edges, &names), None);
        edges.insert(c, vec![a]);
        let cycle = find_cycle(&edges, &names).unwrap();
        assert_eq!(cycle.first(), cycle.last());
        assert_eq!(cycle.len(), 4);
        edges.insert(c, vec![c]);
        assert_eq!(find_cycle(&edges, &names).unwrap(), ["c", "c"]);
    }
}

/// A change stream (a replication slot and its publication) a flow left on
/// its source: the source could not be reached when the flow was deleted,
/// or moved off change capture or onto another source. It keeps the
/// source's log until it is dropped: retried on the scheduler's ticks,
/// recorded as an activity event, and shown on the connection's page
/// until it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDrop {
    pub id: Uuid,
    pub org_id: OrgId,
    pub connection_id: ConnectionId,
    /// The stream's name (see [`Flow::stream_name`]).
    pub stream: String,
    pub flow_id: FlowId,
    pub flow_name: String,
    /// Why the last try failed.
    pub error: String,
    pub attempts: u32,
    pub created_at: OffsetDateTime,
    pub tried_at: OffsetDateTime,
}
