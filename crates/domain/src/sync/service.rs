//! The use cases of sync that users call: flows (validated, created,
//! changed, deleted), runs queued, listed and canceled, and each entity's
//! state (cursors and positions read, set, reset, cleared and resynced;
//! audit-logged). What executes a run is the engine
//! ([`crate::sync::engine`]).

use super::SyncService;
use super::engine::unreachable;
use super::transform::{self, Step};
use crate::connect::connection::Connection;
use crate::connect::connector::{EntitySchema, RecordBatch};
use crate::connect::service::{OpenError, Preview, PreviewRequest};
use crate::identity::{Permission, Principal};
use crate::shared::audit::AuditEntry;
use crate::shared::ids::{ConnectionId, FlowId, OrgId, RunId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::flow::*;
use crate::sync::mark::{Mark, parse_held};
use crate::sync::{SyncMode, parse_cursor};
use crate::{Error, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A flow as lists show it: with its newest run, and the run still
/// running when that newest one is queued behind it.
#[derive(Debug, Clone)]
pub struct FlowOverview {
    pub flow: Flow,
    pub last_run: Option<Run>,
    pub running: Option<Run>,
}

/// A flow to create; connections are named by id.
#[derive(Debug, Clone)]
pub struct NewFlow {
    pub name: String,
    pub source_connection_id: ConnectionId,
    pub destination_connection_id: ConnectionId,
    pub schedule: Option<String>,
    pub config: FlowConfig,
    pub status: FlowStatus,
}

impl NewFlow {
    /// An active flow from `source` to `destination`, run on demand.
    pub fn active(name: &str, source: ConnectionId, destination: ConnectionId, config: FlowConfig) -> Self {
        NewFlow {
            name: name.to_string(),
            source_connection_id: source,
            destination_connection_id: destination,
            schedule: None,
            config,
            status: FlowStatus::Active,
        }
    }

    /// The flow run on `schedule` (a cron expression) too.
    pub fn scheduled(mut self, schedule: Option<&str>) -> Self {
        self.schedule = schedule.map(str::to_string);
        self
    }
}

#[derive(Debug, Clone, Default)]
pub struct FlowUpdate {
    pub name: Option<String>,
    pub source_connection_id: Option<ConnectionId>,
    pub destination_connection_id: Option<ConnectionId>,
    /// `Some(None)` removes the schedule.
    pub schedule: Option<Option<String>>,
    pub config: Option<FlowConfig>,
    pub status: Option<FlowStatus>,
}

pub(crate) fn flow_json(f: &Flow) -> Value {
    json!({
        "name": f.name,
        "source_connection_id": f.source_connection_id,
        "destination_connection_id": f.destination_connection_id,
        "schedule": f.schedule,
        "status": f.status.as_str(),
        "config": f.config,
    })
}

impl SyncService {
    /// The first records of an entity after the transform `steps` (the
    /// steps a flow mapping can carry), checked against the entity's fields.
    pub async fn preview_transform(
        &self,
        p: &Principal,
        org: OrgId,
        request: &PreviewRequest,
        steps: &[Step],
    ) -> Result<Preview> {
        let preview = self.connect.preview(p, org, request).await?;
        transform::plan("transform", steps, &preview.batch.fields).map_err(Error::Validation)?;
        let batch: RecordBatch = transform::apply(steps, preview.batch);
        Ok(Preview { entity: preview.entity, batch })
    }

    pub async fn list_flows(
        &self,
        p: &Principal,
        org: OrgId,
        status: Option<FlowStatus>,
        page: PageRequest,
    ) -> Result<Page<Flow>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.flows.list(org, status, page).await
    }

    /// A page of flows, each with its newest run and its running one: four
    /// queries whatever the page's size (the access check, the flows, their
    /// last runs, their running runs).
    pub async fn list_flow_overviews(
        &self,
        p: &Principal,
        org: OrgId,
        status: Option<FlowStatus>,
        page: PageRequest,
    ) -> Result<Page<FlowOverview>> {
        self.identity.access(p, org, Permission::Read).await?;
        let flows = self.flows.list(org, status, page).await?;
        let ids: Vec<FlowId> = flows.items.iter().map(|f| f.id).collect();
        let by_flow = |runs: Vec<Run>| -> std::collections::HashMap<FlowId, Run> {
            runs.into_iter().map(|r| (r.flow_id, r)).collect()
        };
        let mut last = by_flow(self.runs.last_of(org, &ids).await?);
        let mut running = by_flow(self.runs.running_of(org, &ids).await?);
        Ok(flows.map(|flow| FlowOverview { last_run: last.remove(&flow.id), running: running.remove(&flow.id), flow }))
    }

    pub async fn get_flow(&self, p: &Principal, org: OrgId, id: FlowId) -> Result<Flow> {
        self.identity.access(p, org, Permission::Read).await?;
        self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))
    }

    /// Every flow of `org` (for the contexts above, which checked access).
    pub(crate) async fn flows_of(&self, org: OrgId) -> Result<Vec<Flow>> {
        self.flows.all(org).await
    }

    /// A flow by id or name (for the contexts above, which checked access).
    pub(crate) async fn find_flow(&self, org: OrgId, id_or_name: &str) -> Result<Option<Flow>> {
        if let Ok(id) = id_or_name.parse::<FlowId>()
            && let Some(f) = self.flows.get(org, id).await?
        {
            return Ok(Some(f));
        }
        self.flows.find_by_name(org, id_or_name).await
    }

    /// The source's schema of each mapped entity, when the source answers
    /// (validation is then exact; otherwise only what can be checked offline).
    pub(crate) async fn source_schemas(
        &self,
        source: &Connection,
        config: &FlowConfig,
    ) -> Option<BTreeMap<String, EntitySchema>> {
        let src = self.connect.source_for(source).await.ok()?;
        src.check().await.ok()?;
        let mut out = BTreeMap::new();
        for m in &config.mappings {
            if let Ok(fields) = src.entity_fields(&m.source_entity).await {
                out.insert(
                    m.source_entity.clone(),
                    EntitySchema { name: m.source_entity.clone(), fields: fields.as_ref().clone() },
                );
            }
        }
        Some(out)
    }

    fn schedule_next(&self, f: &mut Flow) {
        f.next_run_at = next_due(f.schedule.as_deref(), f.status, f.config.continuous, self.clock.now());
    }

    pub async fn create_flow(&self, p: &Principal, org: OrgId, new: NewFlow) -> Result<Flow> {
        self.identity.access(p, org, Permission::Write).await?;
        let now = self.clock.now();
        let mut f = Flow {
            id: FlowId::new(),
            org_id: org,
            name: new.name.trim().to_string(),
            source_connection_id: new.source_connection_id,
            destination_connection_id: new.destination_connection_id,
            schedule: new.schedule,
            config: new.config,
            status: new.status,
            next_run_at: None,
            created_at: now,
            updated_at: now,
        };
        super::admit::flow(self, &mut f, true).await?;
        self.schedule_next(&mut f);
        let audit = AuditEntry::new(Some(org), p.actor(), "flow.created", "flow", f.id, now)
            .with_change(Value::Null, flow_json(&f));
        self.flows.create(&f, &audit).await.map_err(name_taken(&f.name))?;
        Ok(f)
    }

    /// The incremental mappings of `flow` that nothing protects from rows
    /// committed late (by a transaction still open while a run reads, with
    /// an older cursor value), one line each: the source cannot show its
    /// open transactions and no lookback applies. Empty when the source
    /// cannot be reached (the flow was checked when written).
    pub async fn late_commit_warnings(&self, p: &Principal, org: OrgId, flow: &Flow) -> Result<Vec<String>> {
        use crate::connect::connector::FieldType;
        self.identity.access(p, org, Permission::Read).await?;
        let src = match self.connect.open_source(org, flow.source_connection_id).await {
            Ok(o) => o.io,
            Err(OpenError::Store(e)) => return Err(e),
            Err(_) => return Ok(vec![]),
        };
        let mut out = Vec::new();
        for (i, m) in flow.config.mappings.iter().enumerate() {
            let Some(cursor) = m.cursor_field.as_deref().filter(|_| m.sync_mode.incremental()) else { continue };
            let Ok(fields) = src.entity_fields(&m.source_entity).await else { continue };
            let Some(field) = fields.iter().find(|f| f.name == cursor) else { continue };
            if !matches!(field.field_type, FieldType::Timestamp | FieldType::Date) {
                continue;
            }
            let held =
                m.sync_mode == SyncMode::IncrementalDeduped && src.write_horizon(field).await.ok().flatten().is_some();
            if held || m.lookback(held).is_positive() {
                continue;
            }
            let why = if m.sync_mode == SyncMode::IncrementalDeduped {
                "the source cannot show its open transactions (PostgreSQL: a role that is neither a superuser nor a member of pg_read_all_stats) and cursor_lookback is 0"
            } else {
                "incremental_append reads nothing behind the cursor (it would append what it read again)"
            };
            out.push(format!(
                "config.mappings[{i}]: a row committed late (by a transaction open while a run reads) with an older {cursor} \
                 can be missed: {why}; use incremental_deduped with a cursor_lookback (\"5m\"), or a role that sees every session"
            ));
        }
        Ok(out)
    }

    pub async fn update_flow(&self, p: &Principal, org: OrgId, id: FlowId, u: FlowUpdate) -> Result<Flow> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        let mut after = before.clone();
        if let Some(n) = u.name {
            after.name = n.trim().to_string();
        }
        if let Some(s) = u.source_connection_id {
            after.source_connection_id = s;
        }
        if let Some(d) = u.destination_connection_id {
            after.destination_connection_id = d;
        }
        if let Some(s) = u.schedule {
            after.schedule = s;
        }
        if let Some(c) = u.config {
            after.config = c;
        }
        if let Some(s) = u.status {
            after.status = s;
        }
        let against_source = crate::sync::validate::touches_source(Some(&before), &after);
        super::admit::flow(self, &mut after, against_source).await?;
        self.schedule_next(&mut after);
        if after.name == before.name
            && after.schedule == before.schedule
            && after.config == before.config
            && after.status == before.status
            && after.source_connection_id == before.source_connection_id
            && after.destination_connection_id == before.destination_connection_id
        {
            return Ok(before);
        }
        after.updated_at = self.clock.now();
        let audit = AuditEntry::new(Some(org), p.actor(), "flow.updated", "flow", id, after.updated_at)
            .with_change(flow_json(&before), flow_json(&after));
        self.flows.update(&after, &audit).await.map_err(name_taken(&after.name))?;
        // The change stream goes with the flow's last CDC mapping, or with
        // the source it read.
        if before.captures() && (!after.captures() || after.source_connection_id != before.source_connection_id) {
            self.engine.drop_stream(&before).await;
        }
        Ok(after)
    }

    /// Changes a connection ([`ConnectService::update_connection`]), but
    /// refuses (409 `in_use`) to move the source of flows that capture
    /// changes through it to another server, database or user: their
    /// replication slots and publications would stay on the old server,
    /// keeping its log, and their positions would name another server's.
    /// The answer names the flows: delete them (which drops their slots),
    /// or change their mappings away from the `cdc_*` modes, first.
    pub async fn update_connection(
        &self,
        p: &Principal,
        org: OrgId,
        id: ConnectionId,
        update: crate::connect::service::ConnectionUpdate,
    ) -> Result<Connection> {
        self.identity.access(p, org, Permission::Write).await?;
        if let Some(config) = &update.config
            && let Some(before) = self.connect.connection(org, id).await?
        {
            let moved: Vec<&str> = ["host", "port", "database", "user"]
                .into_iter()
                .filter(|k| config.get(*k).is_some_and(|v| before.config.get(*k).unwrap_or(&Value::Null) != v))
                .collect();
            let flows = if moved.is_empty() { Vec::new() } else { self.flows.all(org).await? };
            let capturing: Vec<String> = flows
                .iter()
                .filter(|f| f.captures() && f.source_connection_id == id)
                .map(|f| format!("'{}'", f.name))
                .collect();
            if !capturing.is_empty() {
                return Err(Error::Conflict {
                    code: crate::shared::error::Code::InUse,
                    message: format!(
                        "config.{}: connection '{}' is the source of change capture for flow{} {}, whose replication \
                         slot{} and publication{} live on the server it names now: changed, they would stay there, \
                         keeping its log; delete {} (which drops {}) or change {} mappings away from the cdc modes \
                         first",
                        moved.join(", config."),
                        before.name,
                        if capturing.len() == 1 { "" } else { "s" },
                        capturing.join(", "),
                        if capturing.len() == 1 { "" } else { "s" },
                        if capturing.len() == 1 { "" } else { "s" },
                        if capturing.len() == 1 { "it" } else { "them" },
                        if capturing.len() == 1 { "its slot" } else { "their slots" },
                        if capturing.len() == 1 { "its" } else { "their" },
                    ),
                });
            }
        }
        self.connect.update_connection(p, org, id, update).await
    }

    pub async fn delete_flow(&self, p: &Principal, org: OrgId, id: FlowId) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let before = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        if self.runs.running_for_flow(id).await? {
            return Err(Error::Conflict {
                code: crate::shared::error::Code::RunInProgress,
                message: "a run of this flow is executing; cancel it first".into(),
            });
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "flow.deleted", "flow", id, self.clock.now())
            .with_change(flow_json(&before), Value::Null);
        self.flows.delete(org, id, &audit).await?;
        if before.captures() {
            self.engine.drop_stream(&before).await;
        }
        Ok(())
    }

    /// Queues a run of the flow (202).
    pub async fn trigger_run(&self, p: &Principal, org: OrgId, id: FlowId, trigger: Trigger) -> Result<Run> {
        self.identity.access(p, org, Permission::Write).await?;
        let f = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        let run = self.engine.queue_run(&f, trigger, Uuid::now_v7()).await?;
        let audit = AuditEntry::new(Some(org), p.actor(), "run.triggered", "run", run.id, run.queued_at)
            .with_details(json!({"flow_id": f.id, "trigger": trigger.as_str()}));
        self.audit.append(&audit).await?;
        Ok(run)
    }

    /// The run a queued run `run` waits behind: the flow's running run, or
    /// the newest other run queued before it (a flow runs one at a time).
    pub async fn run_ahead(&self, p: &Principal, org: OrgId, run: &Run) -> Result<Option<Run>> {
        self.identity.access(p, org, Permission::Read).await?;
        if run.status != RunStatus::Queued {
            return Ok(None);
        }
        let recent = self.runs.list_for_flow(org, run.flow_id, None, PageRequest { limit: 20, after: None }).await?;
        let active = |r: &&Run| r.id < run.id && matches!(r.status, RunStatus::Queued | RunStatus::Running);
        let running = recent.items.iter().find(|r| active(r) && r.status == RunStatus::Running);
        Ok(running.or_else(|| recent.items.iter().find(active)).cloned())
    }

    pub async fn list_runs(
        &self,
        p: &Principal,
        org: OrgId,
        flow: FlowId,
        status: Option<RunStatus>,
        page: PageRequest,
    ) -> Result<Page<Run>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.flows.get(org, flow).await?.ok_or(Error::not_found("flow"))?;
        self.runs.list_for_flow(org, flow, status, page).await
    }

    /// The organization's runs of the last `days` days, newest first, at
    /// most `limit`: one query, for overviews and plots.
    pub async fn recent_runs(&self, p: &Principal, org: OrgId, days: i64, limit: u64) -> Result<Vec<Run>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.runs.recent(org, self.clock.now() - time::Duration::days(days), limit).await
    }

    pub async fn get_run(&self, p: &Principal, org: OrgId, id: RunId) -> Result<Run> {
        self.identity.access(p, org, Permission::Read).await?;
        self.runs.get(org, id).await?.ok_or(Error::not_found("run"))
    }

    pub async fn run_logs(&self, p: &Principal, org: OrgId, id: RunId) -> Result<Vec<RunLog>> {
        self.identity.access(p, org, Permission::Read).await?;
        self.runs.get(org, id).await?.ok_or(Error::not_found("run"))?;
        self.runs.logs(id).await
    }

    /// Cancels a queued run at once, or asks a running one to stop at its
    /// next batch.
    pub async fn cancel_run(&self, p: &Principal, org: OrgId, id: RunId) -> Result<Run> {
        self.identity.access(p, org, Permission::Write).await?;
        let mut run = self.runs.get(org, id).await?.ok_or(Error::not_found("run"))?;
        if run.status.finished() {
            return Err(Error::Conflict {
                code: crate::shared::error::Code::RunFinished,
                message: format!("the run already ended as {}", run.status.as_str()),
            });
        }
        let was_queued = run.status == RunStatus::Queued;
        run.status = RunStatus::Canceled;
        run.finished_at = Some(self.clock.now());
        run.error = Some("canceled".into());
        self.runs.save(&run).await?;
        if was_queued {
            // A running run reports its own end; a queued one ends here.
            self.engine.after_run(&run).await?;
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "run.canceled", "run", id, self.clock.now())
            .with_details(json!({"flow_id": run.flow_id}));
        self.audit.append(&audit).await?;
        Ok(run)
    }

    /// The cursor of every mapped entity (null where none is stored).
    pub async fn cursors(&self, p: &Principal, org: OrgId, id: FlowId) -> Result<Vec<Cursor>> {
        let mut cursors = self.stored_cursors(p, org, id).await?;
        for c in &mut cursors {
            // A CDC position shows without its copy's progress, a pending
            // clear as no cursor.
            match &mut c.mark {
                Mark::Position { copy, .. } => *copy = None,
                Mark::Clearing => c.mark = Mark::Cursor { field: None, value: None },
                Mark::Cursor { .. } => {}
            }
        }
        Ok(cursors)
    }

    /// Each mapped entity's mark as stored (a CDC entity's with its copy's
    /// progress).
    async fn stored_cursors(&self, p: &Principal, org: OrgId, id: FlowId) -> Result<Vec<Cursor>> {
        self.identity.access(p, org, Permission::Read).await?;
        let f = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        let stored = self.cursors.list(id).await?;
        Ok(entity_mappings(&f)
            .into_iter()
            .map(|m| {
                stored.iter().find(|c| c.entity == m.source_entity).cloned().unwrap_or(Cursor {
                    entity: m.source_entity.clone(),
                    mark: Mark::Cursor { field: m.cursor_field.clone(), value: None },
                    updated_at: f.updated_at,
                })
            })
            .collect())
    }

    async fn mapping_for(&self, org: OrgId, id: FlowId, entity: &str) -> Result<(Flow, Mapping)> {
        let f = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        let m =
            f.config.mappings.iter().find(|m| m.source_entity == entity).cloned().ok_or(Error::not_found("entity"))?;
        if self.runs.running_for_flow(id).await? {
            return Err(Error::run_in_progress());
        }
        Ok((f, m))
    }

    /// Sets an entity's cursor; the value must parse as the cursor column's type.
    pub async fn set_cursor(&self, p: &Principal, org: OrgId, id: FlowId, entity: &str, value: &str) -> Result<Cursor> {
        self.identity.access(p, org, Permission::Write).await?;
        let (f, m) = self.mapping_for(org, id, entity).await?;
        if m.sync_mode.cdc() {
            return self.move_position(p, &f, &m, value).await;
        }
        let field = m.cursor_field.clone().ok_or_else(|| Error::Unprocessable {
            code: crate::shared::error::Code::NoCursor,
            message: format!("'{entity}' syncs in {} mode, which keeps no cursor", m.sync_mode.as_str()),
        })?;
        // The type of this one cursor column, asked of the source; a failure
        // says what failed (a secret that does not resolve is not an
        // unreachable source).
        let failed = |e: crate::connect::connector::ConnectorError| Error::Unprocessable {
            code: e.code(),
            message: format!("the cursor's type could not be read from the source: {e}"),
        };
        let source = self.connect.open_source(org, f.source_connection_id).await.map_err(|e| match e {
            OpenError::Missing => Error::not_found("connection"),
            OpenError::Store(e) => e,
            OpenError::Resolve { error, .. } | OpenError::Open(error) => failed(error),
        })?;
        let fields = source.io.entity_fields(entity).await.map_err(failed)?;
        let t = fields.iter().find(|x| x.name == field).map(|x| x.field_type).ok_or_else(|| Error::Unprocessable {
            code: crate::shared::error::Code::CursorFieldMissing,
            message: format!("the source has no field '{field}' in '{entity}'"),
        })?;
        let parsed = parse_cursor(value, t)?;
        let cursor = Cursor {
            entity: entity.to_string(),
            mark: Mark::Cursor { field: Some(field), value: crate::sync::cursor_text(&parsed) },
            updated_at: self.clock.now(),
        };
        self.move_held_cursor(&f, entity, cursor.mark.value()).await?;
        // The old value is read, and the guard checked again, in the
        // transaction that writes (a run may have been claimed meanwhile).
        let audit = AuditEntry::new(Some(org), p.actor(), "flow.cursor.updated", "flow", id, cursor.updated_at)
            .with_details(json!({"entity": entity, "new_value": cursor.mark.value()}));
        self.cursors.write_by_user(id, entity, Some(cursor.clone()), audit).await?;
        Ok(cursor)
    }

    /// Clears an entity's cursor: the next run reads everything; the
    /// destination is not truncated.
    pub async fn reset_cursor(&self, p: &Principal, org: OrgId, id: FlowId, entity: &str) -> Result<()> {
        self.identity.access(p, org, Permission::Write).await?;
        let (f, m) = self.mapping_for(org, id, entity).await?;
        let audit = AuditEntry::new(Some(org), p.actor(), "flow.cursor.reset", "flow", id, self.clock.now())
            .with_details(json!({"entity": entity, "new_value": null}));
        if m.sync_mode.cdc() {
            // The destination forgets the positions its tables of this
            // entity hold: the next run copies them again (in a snapshot of
            // their own, the stream going on from there), and the state
            // shows them pending.
            let dest = self.engine.destination_of(&f).await?;
            let stream = f.stream_name();
            for m in f.config.mappings.iter().filter(|x| x.source_entity == entity && x.sync_mode.cdc()) {
                dest.move_position(&stream, m.destination(), None).await.map_err(unreachable("destination"))?;
            }
            let pending =
                Cursor { entity: entity.to_string(), mark: Mark::pending_copy(), updated_at: self.clock.now() };
            return self.cursors.write_by_user(id, entity, Some(pending), audit).await;
        }
        self.move_held_cursor(&f, entity, None).await?;
        self.cursors.write_by_user(id, entity, None, audit).await
    }

    /// Moves the cursor a destination that holds marks committed for
    /// `entity`'s row mappings (see `Destination::holds_marks`) to
    /// `value`: the next run resumes from what the destination holds, so
    /// a cursor set by hand must be set there too (and is not set at all
    /// when the destination cannot be reached). Which types hold marks
    /// their spec says (`holds_marks`), so that no other destination is
    /// opened here.
    async fn move_held_cursor(&self, f: &Flow, entity: &str, value: Option<&str>) -> Result<()> {
        use crate::sync::mark::RowsHeld;
        let Some(conn) = self.connect.connection(f.org_id, f.destination_connection_id).await? else {
            return Ok(());
        };
        let holds = self
            .connect
            .registry()
            .spec(&conn.connector_type)
            .is_some_and(|s| s.with_config(&conn.config).features.contains(&crate::sync::mode::HOLDS_MARKS));
        if !holds {
            return Ok(());
        }
        let dest = self.engine.destination_of(f).await?;
        let stream = f.stream_name();
        for m in f.config.mappings.iter().filter(|x| x.source_entity == entity && !x.sync_mode.cdc()) {
            let held = dest.position_of(&stream, m.destination()).await.map_err(unreachable("destination"))?;
            let Some(mut h) = held.as_deref().and_then(RowsHeld::parse) else {
                continue;
            };
            h.cursor = value.map(str::to_string);
            h.field = m.cursor_field.clone();
            h.done = false;
            dest.move_position(&stream, m.destination(), Some(&h.text())).await.map_err(unreachable("destination"))?;
        }
        Ok(())
    }

    /// Clears an entity's destination table and syncs it again (Editor;
    /// audited `flow.entity.cleared`): the run queued now replaces the
    /// table with a full copy of the source, atomically when the copy
    /// commits (nothing is removed before, and a copy that fails leaves the
    /// table as it was and the clear pending for the next run), then
    /// stores the cursor the copy reached. A CDC entity is copied again in
    /// a snapshot, as a cursor reset does. Refused while a run of the flow
    /// is running.
    pub async fn clear_and_resync(&self, p: &Principal, org: OrgId, id: FlowId, entity: &str) -> Result<Run> {
        self.identity.access(p, org, Permission::Write).await?;
        let (f, m) = self.mapping_for(org, id, entity).await?;
        // Mappings of one entity share its cursor, so one clear would
        // serve only the first to finish.
        if f.config.mappings.iter().filter(|x| x.source_entity == entity).count() > 1 {
            return Err(Error::invalid(
                "entity",
                format!(
                    "'{entity}' has several mappings in this flow, which share its cursor: clear and resync works \
                         on an entity with one mapping"
                ),
            ));
        }
        if m.sync_mode == SyncMode::CdcAppend {
            return Err(Error::invalid(
                "entity",
                format!(
                    "'{entity}' is a change log (cdc_append), which keeps its history: reset its cursor to copy \
                         the table again as inserts, or drop the log's table first"
                ),
            ));
        }
        if m.sync_mode.cdc() {
            // A mirror's copy again empties it in the copy's transaction.
            self.reset_cursor(p, org, id, entity).await?;
            let audit = AuditEntry::new(Some(org), p.actor(), "flow.entity.cleared", "flow", id, self.clock.now())
                .with_details(json!({"entity": entity, "destination": m.destination()}));
            self.audit.append(&audit).await?;
        } else {
            let now = self.clock.now();
            let audit = AuditEntry::new(Some(org), p.actor(), "flow.entity.cleared", "flow", id, now)
                .with_details(json!({"entity": entity, "destination": m.destination()}));
            let mark = Cursor { entity: entity.to_string(), mark: Mark::Clearing, updated_at: now };
            self.cursors.write_by_user(id, entity, Some(mark), audit).await?;
        }
        self.trigger_run(p, org, id, Trigger::Manual).await
    }

    /// Each mapped entity's state: its cursor, and for a CDC entity its
    /// copy's progress (`pending` until its first copy, or a copy asked for
    /// again, commits; `running` while a run of the flow executes then, or
    /// while it is copied in chunks, with the chunks done of about how
    /// many).
    pub async fn state(&self, p: &Principal, org: OrgId, id: FlowId) -> Result<Vec<EntityState>> {
        let cursors = self.stored_cursors(p, org, id).await?;
        let f = self.flows.get(org, id).await?.ok_or(Error::not_found("flow"))?;
        let running = self.runs.running_for_flow(id).await?;
        Ok(cursors
            .into_iter()
            .zip(entity_mappings(&f))
            .map(|(mut cursor, m)| {
                let clearing = cursor.mark.clearing();
                if clearing {
                    cursor.mark = Mark::Cursor { field: m.cursor_field.clone(), value: None };
                }
                let snapshot = m.sync_mode.cdc().then(|| {
                    // A position shows without its copy's progress; an entity
                    // that holds none yet shows as a position pending.
                    let copy = match &mut cursor.mark {
                        Mark::Position { copy, .. } => copy.take(),
                        Mark::Cursor { field: None, value } => {
                            cursor.mark = Mark::Position { at: value.take(), copy: None };
                            None
                        }
                        _ => None,
                    };
                    if let Some(mark) = copy {
                        return SnapshotProgress { state: "running", chunks_done: mark.done, chunks_total: mark.total };
                    }
                    match (cursor.mark.value(), running) {
                        (Some(_), _) => SnapshotProgress { state: "done", chunks_done: 1, chunks_total: 1 },
                        (None, true) => SnapshotProgress { state: "running", chunks_done: 0, chunks_total: 1 },
                        (None, false) => SnapshotProgress { state: "pending", chunks_done: 0, chunks_total: 1 },
                    }
                });
                EntityState { cursor, snapshot, clearing }
            })
            .collect())
    }

    /// Moves a CDC entity forward to `value`, a later position its stream
    /// retains (the changes between are skipped), in the destination that
    /// holds it (each table of its mappings); audited with the old and new
    /// positions.
    async fn move_position(&self, p: &Principal, f: &Flow, m: &Mapping, value: &str) -> Result<Cursor> {
        let entity = m.source_entity.as_str();
        let refused =
            |message: String| Error::Unprocessable { code: crate::shared::error::Code::PositionNotRetained, message };
        let (changes, dest) = (self.engine.change_source_of(f).await?, self.engine.destination_of(f).await?);
        let stream = f.stream_name();
        let held = dest.positions(&stream).await.map_err(unreachable("destination"))?;
        let tables: Vec<&str> = f
            .config
            .mappings
            .iter()
            .filter(|x| x.source_entity == entity && x.sync_mode.cdc())
            .map(|x| x.destination())
            .collect();
        let to = changes.position(value).map_err(|_| {
            refused(format!("'{value}' is not a position of this source (a PostgreSQL LSN reads like 16/B374D848)"))
        })?;
        for table in &tables {
            let (held, mark) = held
                .iter()
                .find(|(e, _)| e == table)
                .map(|(_, p)| parse_held(p))
                .ok_or_else(|| refused(format!("'{entity}' holds no position yet: its copy has not committed")))?;
            if let Some(mark) = mark {
                return Err(refused(format!(
                    "'{entity}' is being copied in chunks ({} of about {} done): moving its position would skip \
                     changes the copy relies on; wait for the copy, or copy it again with DELETE …/state/{entity}",
                    mark.done, mark.total
                )));
            }
            let Ok(held_at) = changes.position(&held) else {
                return Err(refused(format!(
                    "{table} holds '{held}', which is not a position of this source: copy the table again with \
                     DELETE …/state/{entity}"
                )));
            };
            if held_at.after(&to) {
                return Err(refused(format!(
                    "{value} is before {held}, the position {table} holds: moving back would apply changes twice; \
                     copy the table again with DELETE …/state/{entity}"
                )));
            }
        }
        let end = changes.end_position().await.map_err(unreachable("source"))?;
        if to.after(&end) {
            return Err(refused(format!("{value} is past the end of the source's log ({end})")));
        }
        match changes.retained_from(&stream).await.map_err(unreachable("source"))? {
            Some(from) if !from.after(&to) => {}
            _ => return Err(refused(format!("the source's change stream no longer retains {value}"))),
        }
        for table in &tables {
            dest.move_position(&stream, table, Some(value)).await.map_err(unreachable("destination"))?;
        }
        let cursor = Cursor {
            entity: entity.to_string(),
            mark: Mark::Position { at: Some(value.to_string()), copy: None },
            updated_at: self.clock.now(),
        };
        let audit = AuditEntry::new(Some(f.org_id), p.actor(), "flow.cursor.updated", "flow", f.id, cursor.updated_at)
            .with_details(json!({"entity": entity, "new_value": value}));
        self.cursors.write_by_user(f.id, entity, Some(cursor.clone()), audit).await?;
        Ok(cursor)
    }
}

/// The first mapping of each source entity, in order: an entity has one
/// cursor (or position), however many mappings read it.
fn entity_mappings(f: &Flow) -> Vec<&Mapping> {
    let mut seen = std::collections::HashSet::new();
    f.config.mappings.iter().filter(|m| seen.insert(m.source_entity.as_str())).collect()
}

/// A CDC entity's copy: `pending`, `running` or `done`, in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotProgress {
    pub state: &'static str,
    pub chunks_done: u64,
    pub chunks_total: u64,
}

/// An entity's cursor, with its copy's progress for a CDC entity.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityState {
    pub cursor: Cursor,
    pub snapshot: Option<SnapshotProgress>,
    /// A clear and resync is pending: the next run replaces the
    /// destination's table with a full copy.
    pub clearing: bool,
}

/// A flow's write refused by the store's unique name, said as such.
fn name_taken(name: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| crate::connect::service::named_conflict(e, "flow", name)
}
