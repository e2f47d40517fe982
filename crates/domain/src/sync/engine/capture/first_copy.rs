//! An entity's first copy: in the new stream's snapshot (in bulk where both
//! sides can), or in a snapshot of its own for a table that joins a
//! running stream; change logs first, and a log whose history from the
//! stream's start can no longer be had stopped with `position_lost`.

use super::commit::Then;
use super::*;
use crate::sync::mark::Mark;

impl Engine {
    /// Starts the copies of the tables that hold no position yet. A first
    /// copy in a new stream's snapshot that can load in bulk does so now;
    /// every other table whose key allows it is copied in chunks while the
    /// stream goes on (from the new stream's start, or from the source's
    /// end now), and the rest whole now, in the new stream's snapshot or
    /// (the stream ran already) in a snapshot of their own, from whose
    /// position the stream then goes on for them.
    pub(super) async fn copy_new_tables(
        &self,
        scope: Scope<'_>,
        stream: &str,
        start: crate::connect::changes::StreamStart,
        entities: &mut [Entity<'_>],
    ) -> Result<(), Failure> {
        let changes = scope.changes;
        let fresh = start.snapshot.is_some();
        let mut now: Option<Position> = None;
        for e in entities.iter_mut().filter(|e| e.copy) {
            // A change log is copied whole, in one snapshot (the new
            // stream's, or one of its own), never in chunks: each chunk,
            // read later, would hold as inserts what the changes it logs
            // since the log's start did too. A mirror in a new stream loads
            // in bulk in one go, unless an earlier attempt of the run was
            // lost on the way (a kill mid-copy): then in chunks, each
            // committed, so that another kill does not begin it all again.
            let bulk = bulk_copies(e.m, scope.dest.as_ref()) && scope.run.attempt == 1;
            if e.m.sync_mode == SyncMode::CdcAppend || (fresh && bulk) || e.chunk_key().is_none() {
                continue;
            }
            let from = match (fresh, &now) {
                (true, _) => start.position.clone(),
                (false, Some(p)) => p.clone(),
                (false, None) => now.insert(changes.end_position().await?).clone(),
            };
            let message = format!(
                "copying the table in chunks of {CHUNK_ROWS} rows by its key while its changes stream from {from}"
            );
            self.log(scope.run, LogLevel::Info, Some(&e.m.source_entity), message).await;
            e.held = from.clone();
            e.position = from;
            e.standing_in = false;
            e.mark = Some(CopyMark::default());
            e.held_mark = e.mark.clone();
            e.copy = false;
        }
        if fresh {
            self.mark_first_logs(scope, &start.position, entities).await?;
        } else {
            self.stop_logs_cut_from_their_start(scope, entities).await?;
        }
        if entities.iter().any(|e| e.copy) {
            let snap = match start.snapshot {
                Some(_) => start,
                None => {
                    drop(start);
                    changes.fresh_snapshot(stream).await?
                }
            };
            // Change logs first: once every log of a new stream holds its
            // copy, a kill before a mirror commits leaves a stream the
            // mirrors can still join (in chunks, from the source's end then),
            // and one before any commits begins afresh; a log has no such
            // second chance (its history starts at the stream's start).
            let mut order: Vec<usize> = (0..entities.len()).filter(|i| entities[*i].copy).collect();
            order.sort_by_key(|i| entities[*i].m.sync_mode != SyncMode::CdcAppend);
            for i in order {
                let e = &mut entities[i];
                e.position = snap.position.clone();
                e.standing_in = false;
                match self.copy_first(scope, e, snap.snapshot.as_deref()).await {
                    Ok(()) => e.held = e.position.clone(),
                    // A mirror whose rows its destination table does not
                    // take stops alone; a change log's history would be
                    // cut, so it fails the run.
                    Err(f) if refused_rows(&f) && e.m.sync_mode == SyncMode::CdcDeduped => {
                        self.stop_copy(scope, e, &f, "").await;
                    }
                    Err(f) => return Err(f),
                }
            }
        } else {
            drop(start);
        }
        Ok(())
    }

    /// Before a new stream's first copies: each change log to copy is
    /// marked, in the flow's stored state, as beginning at the stream's
    /// start (`position`), until its copy commits. An attempt that finds a
    /// log so marked without a position while the stream went on (a kill
    /// after another log of the flow committed, before this one did) knows
    /// that its history from the stream's start can no longer be had.
    pub(super) async fn mark_first_logs(
        &self,
        scope: Scope<'_>,
        position: &Position,
        entities: &mut [Entity<'_>],
    ) -> Result<(), Failure> {
        let copy = CopyMark { first: true, total: 1, ..CopyMark::default() };
        let logs: Vec<String> = entities
            .iter()
            .filter(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend)
            .map(|e| e.m.source_entity.clone())
            .collect();
        for entity in logs {
            let mark = Mark::Position { at: Some(position.to_string()), copy: Some(copy.clone()) };
            self.show_position(scope.run, scope.flow, &entity, mark).await?;
        }
        Ok(())
    }

    /// In a stream that goes on, a change log without a position whose
    /// first copy was to begin at the stream's start (see
    /// [`Self::mark_first_logs`]) stops with `position_lost`: that snapshot
    /// is gone, and a copy now would fold the changes since into inserts.
    /// Any other log without a position (one added to the flow, or copied
    /// again) is copied now, its history beginning at that copy.
    pub(super) async fn stop_logs_cut_from_their_start(
        &self,
        scope: Scope<'_>,
        entities: &mut [Entity<'_>],
    ) -> Result<(), Failure> {
        if !entities.iter().any(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend) {
            return Ok(());
        }
        let stored = self.cursors.list(scope.flow.id).await?;
        for e in entities.iter_mut().filter(|e| e.copy && e.m.sync_mode == SyncMode::CdcAppend) {
            let entity = e.m.source_entity.clone();
            let marked = stored.iter().find_map(|c| match &c.mark {
                Mark::Position { at: Some(at), copy: Some(copy) } if c.entity == entity && copy.first => Some(at),
                _ => None,
            });
            let Some(start) = marked else { continue };
            let message = format!(
                "this change log's first copy, at the stream's start ({start}), did not commit before the run \
                 was stopped, while another table of the flow did: its history from the stream's start is lost \
                 (that snapshot is gone); copy it again with DELETE …/state/{entity}, its history then begins at \
                 that copy"
            );
            self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
            e.copy = false;
            e.stopped = Some(Stop::Lost(message));
        }
        Ok(())
    }

    /// An entity's first copy, in the stream's snapshot when there is one,
    /// committed with the stream's position.
    pub(super) async fn copy_first(
        &self,
        scope: Scope<'_>,
        e: &mut Entity<'_>,
        snapshot: Option<&str>,
    ) -> Result<(), Failure> {
        let Scope { run, source, dest, .. } = scope;
        let entity = e.m.source_entity.clone();
        let how = match snapshot {
            Some(_) => format!("copying the table in a snapshot at {}; its changes follow from there", e.position),
            None => "copying the table as it is now; the stream is replayed over it from its position".into(),
        };
        self.log(run, LogLevel::Info, Some(&entity), how).await;
        if let Some(snapshot) = snapshot
            && self.copy_in_bulk(scope, e, snapshot).await?
        {
            return Ok(());
        }
        let mut writer = dest
            .open_for(&e.schema, e.m.sync_mode.write_mode(), Some(&attempt_of(run)))
            .await
            .map_err(|x| e.failed(x))?;
        // A mirror ends up with exactly the source's rows: what it held
        // before (a copy again, a table that left the flow a while) goes,
        // in the copy's transaction, or is marked deleted. A change log
        // keeps its rows and gains the copy's as inserts.
        if e.m.sync_mode == SyncMode::CdcDeduped {
            let soft = (e.m.delete_mode == Some(DeleteMode::Soft)).then_some(DELETED_AT);
            if let Err(x) = writer.clear(&KeyRange::all(), soft).await {
                writer.abort().await;
                return Err(e.failed(x));
            }
        }
        let mut reader = source
            .read(ReadRequest {
                entity: entity.clone(),
                cursor: None,
                limit: None,
                batch_size: BATCH_ROWS,
                ranges: 1,
                snapshot: snapshot.map(str::to_string),
            })
            .await
            .map_err(|x| e.failed(x))?;
        e.order = order_of(&reader.fields(), &e.source_fields);
        let begin: Begin = (e.position.clone(), None);
        loop {
            let batch = match reader.next_batch().await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(x) => {
                    writer.abort().await;
                    return Err(e.failed(x));
                }
            };
            e.stats.rows_read += batch.len() as u64;
            let rows = e.copied_rows(&e.order, batch.rows, &begin);
            if let Err(x) = writer.write(&RecordBatch { fields: Arc::new(e.schema.fields.clone()), rows }).await {
                writer.abort().await;
                return Err(e.failed(x));
            }
        }
        e.writer = Some(writer);
        self.commit_at(scope, e, Then::Closed).await?;
        Ok(())
    }

    /// A mirror's copy as a full refresh does it, where both sides can: the
    /// source's bulk stream (read in the snapshot) into a fresh table,
    /// swapped in with the position in one transaction (which also leaves
    /// exactly the source's rows). Not for a change log (its columns are
    /// not the table's), soft deletes (the rows marked deleted stay) or a
    /// transform. Answers whether it copied.
    pub(super) async fn copy_in_bulk(
        &self,
        scope: Scope<'_>,
        e: &mut Entity<'_>,
        snapshot: &str,
    ) -> Result<bool, Failure> {
        let Scope { run, source, dest, .. } = scope;
        if !bulk_copies(e.m, dest.as_ref()) {
            return Ok(false);
        }
        let entity = e.m.source_entity.clone();
        let attempt = attempt_of(run);
        let mut writer =
            dest.open_for(&e.schema, WriteMode::Overwrite, Some(&attempt)).await.map_err(|x| e.failed(x))?;
        let Some(format) = writer.bulk_format() else {
            writer.abort().await;
            return Ok(false);
        };
        let mut bulk = match source.bulk_out_in_snapshot(&entity, format, &e.source_fields, snapshot).await {
            Ok(Some(b)) => b,
            Ok(None) => {
                writer.abort().await;
                return Ok(false);
            }
            Err(x) => {
                writer.abort().await;
                return Err(e.failed(x));
            }
        };
        self.log(run, LogLevel::Info, Some(&entity), format!("bulk copy ({format}) into a fresh table")).await;
        let loaded = match writer.write_bulk(&mut *bulk, None).await {
            Ok(n) => n,
            Err(x) => {
                writer.abort().await;
                return Err(e.failed(x));
            }
        };
        e.writer = Some(writer);
        self.commit_at(scope, e, Then::Closed).await?;
        e.stats.rows_read += loaded;
        Ok(true)
    }
}

/// Whether a mirror's first copy may load in bulk (see
/// `Engine::copy_in_bulk`): not a change log (its columns are not the
/// table's), soft deletes (the rows marked deleted stay) or a transform.
pub(super) fn bulk_copies(m: &Mapping, dest: &dyn Destination) -> bool {
    m.sync_mode == SyncMode::CdcDeduped
        && m.delete_mode != Some(DeleteMode::Soft)
        && m.transform.is_empty()
        && dest.loads_in_bulk()
}
