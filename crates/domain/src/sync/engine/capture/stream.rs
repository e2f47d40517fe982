//! The stream followed: read to the source's end at the run's start (a
//! scheduled run) or on and on (a continuous one), each transaction's
//! changes applied to the entities that do not hold it yet, the table's
//! columns followed as the stream describes them, the source told what it
//! may forget.

use super::commit::Then;
use super::*;

impl Engine {
    /// Applies the stream to the entities: once, to the source's end at
    /// the start (a scheduled run), or on and on (a continuous one).
    pub(super) async fn follow_stream(
        &self,
        scope: Scope<'_>,
        stream: &str,
        entities: &mut [Entity<'_>],
    ) -> Result<(), Failure> {
        let Scope { run, flow, changes, dest, budget, .. } = scope;
        // As many tables at once as the destination takes writers (SQLite:
        // one); the stream is read again for each group (reading leaves
        // it where it is).
        // A scheduled run reads once, to the source's end at its start; a
        // continuous one (`config.continuous`) goes on reading until it is
        // canceled, its process stops, or its flow is paused or changed.
        loop {
            let caught_up = self.clock.now();
            let until = changes.end_position().await?;
            let mut applied = 0;
            for group in entities.chunks_mut(dest.concurrent_writers().max(1)) {
                applied += self.stream_changes(scope, stream, group, &until).await?;
            }
            // The source may forget what every table holds (one that
            // holds no position of its own, stopped before its copy, does
            // not keep it).
            let min = entities
                .iter()
                .filter(|e| !e.standing_in)
                .map(|e| &e.position)
                .reduce(|a, b| if a.after(b) { b } else { a });
            if let Some(min) = min.cloned() {
                changes.confirm(stream, &min).await?;
            }
            self.watch_stream(flow, stream, changes, Some(caught_up), budget).await;
            // A run goes on while a table is being copied in chunks, then
            // ends (a continuous one goes on anyway).
            let copying = entities.iter().any(|e| e.mark.is_some() && e.stopped.is_none());
            if !flow.config.continuous && !copying {
                return Ok(());
            }
            let progress = (applied > 0 || copying).then(|| entities.iter().map(|e| e.stats.clone()).collect());
            self.progress_or_halt(run, progress).await?;
            match self.flows.get(flow.org_id, flow.id).await? {
                Some(f) if f.status == crate::sync::flow::FlowStatus::Active && f.updated_at == flow.updated_at => {}
                _ if !flow.config.continuous => {}
                _ => {
                    let message = "the flow was paused, changed or deleted: this run ends (a changed flow's next run \
                                   starts at once)";
                    self.log(run, LogLevel::Info, None, message.into()).await;
                    return Ok(());
                }
            }
            if entities.iter().all(|e| e.stopped.is_some()) {
                return Ok(());
            }
            // Nothing new yet: wait (up to a second) for the source to write.
            if !copying {
                changes.wait_past(&until, CONTINUOUS_IDLE).await?;
            }
        }
    }

    /// After a run's read, and after a run that failed (its destination
    /// away, say: the log the source keeps then grows): the flow's stream
    /// in the metrics (the log its source keeps for it, and when its
    /// destination last caught up, `None` leaving that as it was), and a
    /// `cdc.retained_over_budget` event, at most one a day per flow, while
    /// the source keeps more than `budget` bytes (the source connection's
    /// [`retained_budget`]).
    pub(super) async fn watch_stream(
        &self,
        flow: &Flow,
        stream: &str,
        changes: &Arc<dyn ChangeSource>,
        caught_up: Option<OffsetDateTime>,
        budget: u64,
    ) {
        let retained = match changes.retained_bytes(stream).await {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(flow = %flow.id, error = %e, "reading how much log the source keeps failed");
                return;
            }
        };
        self.monitoring.metrics().cdc_stream(&flow.id.to_string(), retained, caught_up);
        if retained <= budget {
            return;
        }
        let event = crate::monitoring::activity::EventType::CdcRetainedOverBudget;
        let since = self.clock.now() - time::Duration::days(1);
        let told = match self.monitoring.recent(flow.org_id, since, 1000).await {
            Ok(events) => events.iter().any(|e| e.event_type == event && e.data["flow_id"] == json!(flow.id)),
            Err(_) => false,
        };
        if told {
            return;
        }
        let recorded = self
            .monitoring
            .record(&crate::monitoring::activity::ActivityEvent {
                id: uuid::Uuid::now_v7(),
                org_id: flow.org_id,
                event_type: event,
                severity: "warning".into(),
                message: format!(
                    "flow '{}' makes its source keep {retained} bytes of log, over the {budget} of the source \
                     connection's cdc_max_retained: run it more often, or remove the table that holds it back",
                    flow.name
                ),
                data: json!({"flow_id": flow.id, "flow_name": flow.name, "retained_bytes": retained,
                    "budget_bytes": budget, "connection_id": flow.source_connection_id}),
                created_at: self.clock.now(),
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(flow = %flow.id, error = %e, "recording cdc.retained_over_budget failed");
        }
    }

    /// The stream from each entity's position to `until`; answers how many
    /// changes it applied.
    pub(super) async fn stream_changes(
        &self,
        scope: Scope<'_>,
        stream: &str,
        entities: &mut [Entity<'_>],
        until: &Position,
    ) -> Result<u64, Failure> {
        let Scope { run, changes, dest, .. } = scope;
        let from = earliest_positions(entities);
        let mut reader = changes.changes(stream, &from, until).await?;
        if from.is_empty() {
            return Ok(0);
        }
        for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
            e.writer = Some(
                dest.open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&attempt_of(run)))
                    .await
                    .map_err(|x| e.failed(x))?,
            );
            // The chunks of a copy go first: the changes after the
            // position held replay over them.
            self.copy_chunks(scope, e).await?;
        }
        let mut read = Read { begin: None, since_commit: 0, applied: 0, committed_at: std::time::Instant::now() };
        loop {
            let events = reader.next(BATCH_ROWS).await?;
            if events.is_empty() {
                break;
            }
            for event in events {
                self.on_event(scope, entities, &mut read, event).await?;
            }
        }
        // The read reached `until`: each entity holds every change before
        // it, even a table no transaction touched, so that the source may
        // forget its log up to there (an idle table does not keep it).
        for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
            if until.after(&e.position) {
                e.position = until.clone();
            }
        }
        self.commit_changes(scope, entities, Then::Closed).await?;
        Ok(read.applied)
    }

    /// One event of the stream, for the entities it concerns: a change
    /// applied where the entity does not hold its transaction yet, a
    /// transaction's commit moving each entity on (and committing them
    /// every [`CHECKPOINT_ROWS`] changes, or every second of a continuous
    /// run while changes arrive).
    async fn on_event(
        &self,
        scope: Scope<'_>,
        entities: &mut [Entity<'_>],
        read: &mut Read,
        event: ChangeEvent,
    ) -> Result<(), Failure> {
        let live = |e: &&mut Entity<'_>, entity: &str| e.m.source_entity == entity && e.stopped.is_none();
        match event {
            ChangeEvent::Schema(s) => {
                for e in entities.iter_mut().filter(|e| live(e, &s.name)) {
                    self.follow_columns(scope, e, &s).await?;
                }
            }
            ChangeEvent::Begin { position, committed_at } => read.begin = Some((position, Some(committed_at))),
            ChangeEvent::Halt { entity, reason } => {
                for e in entities.iter_mut().filter(|e| live(e, &entity)) {
                    self.log(scope.run, LogLevel::Error, Some(&entity), reason.clone()).await;
                    e.stop(Stop::Failed(reason.clone())).await;
                }
            }
            ChangeEvent::Change(c) => {
                let Some(begin) = &read.begin else {
                    return Err(Failure::all("the source's stream gave a change outside a transaction"));
                };
                for e in entities.iter_mut().filter(|e| live(e, &c.entity)) {
                    // A transaction that commits before the position this
                    // mapping holds is held already.
                    if !e.position.holds(&begin.0) {
                        e.apply(&c, begin).await?;
                        read.since_commit += 1;
                        read.applied += 1;
                    }
                }
            }
            ChangeEvent::Commit { position, .. } => {
                for e in entities.iter_mut().filter(|e| e.stopped.is_none()) {
                    if position.after(&e.position) {
                        e.position = position.clone();
                    }
                }
                let due = scope.flow.config.continuous
                    && read.since_commit > 0
                    && read.committed_at.elapsed() >= CONTINUOUS_COMMIT;
                if read.since_commit >= CHECKPOINT_ROWS || due {
                    self.commit_changes(scope, entities, Then::Open).await?;
                    read.since_commit = 0;
                    read.committed_at = std::time::Instant::now();
                }
            }
        }
        Ok(())
    }

    /// The stream describes `e`'s table (`s`): before its first change, and
    /// after its columns changed. A column the stream has and the
    /// destination's fields lack is new at the source: with `allow_all` the
    /// entity commits what it holds and reopens on the wider table (the
    /// destination gains the column); with `block_on_new_column` it stops
    /// as drift. One the source's catalog no longer has was dropped since:
    /// the entity stops. Either stop leaves it at its committed position,
    /// so that it resumes there once the flow is updated.
    pub(super) async fn follow_columns(
        &self,
        scope: Scope<'_>,
        e: &mut Entity<'_>,
        s: &EntitySchema,
    ) -> Result<(), Failure> {
        let entity = e.m.source_entity.clone();
        // A column whose type changed since the stream last described the
        // table: its values no longer fit the destination's column.
        let retyped: Vec<String> = s
            .fields
            .iter()
            .filter_map(|f| {
                let before = e.stream_types.get(&f.name)?;
                (*before != f.field_type)
                    .then(|| format!("{} ({} → {})", f.name, before.as_str(), f.field_type.as_str()))
            })
            .collect();
        e.stream_types = s.fields.iter().map(|f| (f.name.clone(), f.field_type)).collect();
        if !retyped.is_empty() {
            let message = retyped_message(&retyped, &entity);
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.stop(Stop::Failed(message)).await;
            return Ok(());
        }
        let new: Vec<String> = s
            .fields
            .iter()
            .filter(|f| e.source_fields.iter().all(|x| x.name != f.name))
            .map(|f| f.name.clone())
            .collect();
        if new.is_empty() {
            e.order = order_of(&s.fields, &e.source_fields);
            return Ok(());
        }
        let catalog = scope.source.entity_fields(&entity).await.map_err(|x| e.failed(x))?;
        let dropped: Vec<&str> =
            new.iter().filter(|n| catalog.iter().all(|f| f.name != **n)).map(String::as_str).collect();
        if !dropped.is_empty() {
            let message = columns_gone_message(&dropped, &s.fields, &catalog, &entity);
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.stop(Stop::Failed(message)).await;
            return Ok(());
        }
        // A column the stream no longer names, and a new one in its place
        // of its type: renamed (a binlog that logs names says so this way).
        let renamed = renamed_columns(&e.source_fields, &s.fields);
        if !renamed.is_empty() {
            let message = renamed_message(&renamed, &entity);
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.stop(Stop::Failed(message)).await;
            return Ok(());
        }
        if e.m.schema_policy == crate::sync::flow::SchemaPolicy::BlockOnNewColumn {
            let message = format!("new source columns {} blocked by schema_policy block_on_new_column", new.join(", "));
            self.log(scope.run, LogLevel::Warn, Some(&entity), message.clone()).await;
            e.stop(Stop::Drift(message)).await;
            return Ok(());
        }
        // Everything before this change is whole: committed at the
        // position reached, then the writer reopens on the wider table.
        self.commit_at(scope, e, Then::Closed).await?;
        e.source_fields = catalog;
        e.schema = capture_schema(e.m, &e.source_fields).map_err(|message| Failure::all(message).of(&entity))?;
        let attempt = attempt_of(scope.run);
        e.writer = Some(
            scope
                .dest
                .open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&attempt))
                .await
                .map_err(|x| e.failed(x))?,
        );
        e.order = order_of(&s.fields, &e.source_fields);
        let message = format!("new source columns {}: added to the destination", new.join(", "));
        self.log(scope.run, LogLevel::Info, Some(&entity), message).await;
        Ok(())
    }
}

/// A read of the stream as it goes: the transaction open, the changes
/// applied since the last commit and in all, and when it last committed.
struct Read {
    begin: Option<Begin>,
    since_commit: u64,
    applied: u64,
    committed_at: std::time::Instant,
}

/// Per source table, the earliest position of its mappings that go on:
/// where the stream is read from (each mapping then skips what it holds).
fn earliest_positions(entities: &[Entity<'_>]) -> Vec<(String, Position)> {
    let mut from: Vec<(String, Position)> = Vec::new();
    for e in entities.iter().filter(|e| e.stopped.is_none()) {
        match from.iter_mut().find(|(t, _)| *t == e.m.source_entity) {
            Some((_, p)) if p.after(&e.position) => *p = e.position.clone(),
            Some(_) => {}
            None => from.push((e.m.source_entity.clone(), e.position.clone())),
        }
    }
    from
}
