//! A table copied in chunks while its stream goes on (see
//! [`crate::sync::engine::chunks`]): each chunk cleared and written by key
//! range, committed with the position it holds and the copy's mark.

use super::commit::Then;
use super::*;

impl Entity<'_> {
    /// The key a copy in chunks reads the table by, as the source names
    /// its fields (a mirror's key, which no transform may change; a change
    /// log's source key); `None` when the table cannot be copied so.
    pub(super) fn chunk_key(&self) -> Option<Vec<Field>> {
        let key: Vec<Field> = match self.m.sync_mode {
            SyncMode::CdcDeduped if self.transform_keeps_key() => self
                .schema
                .fields
                .iter()
                .filter(|f| f.primary_key)
                .filter_map(|k| self.source_fields.iter().find(|f| f.name == k.name).cloned())
                .collect(),
            SyncMode::CdcAppend => self.source_fields.iter().filter(|f| f.primary_key).cloned().collect(),
            _ => return None,
        };
        chunkable(&key).then_some(key)
    }

    /// Whether the mapping's transform leaves the key's names and values as
    /// the source has them (filters, and steps on other fields).
    pub(super) fn transform_keeps_key(&self) -> bool {
        use transform::Step;
        let key: Vec<&str> = self.schema.fields.iter().filter(|f| f.primary_key).map(|f| f.name.as_str()).collect();
        self.m.transform.iter().all(|s| match s {
            Step::Filter { .. } => true,
            Step::Rename { from: f, to: t } => !key.contains(&f.as_str()) && !key.contains(&t.as_str()),
            Step::Drop { field } | Step::Cast { field, .. } | Step::Mask { field } | Step::Set { field, .. } => {
                !key.contains(&field.as_str())
            }
        })
    }

    /// Writes the chunk read for this table into its open writer: a
    /// mirror's key range cleared first (what the source no longer has
    /// goes), the chunk's rows upserted (a change log's appended as
    /// inserts); the copy's mark then moves past them.
    /// `key` is [`Entity::chunk_key`], `after` the mark's last key read as
    /// its types.
    pub(super) async fn apply_chunk(
        &mut self,
        chunk: Chunk,
        key: &[Field],
        after: Option<Vec<Value>>,
    ) -> Result<(), Failure> {
        let Some(mark) = self.mark.clone() else { return Ok(()) };
        let entity = self.m.source_entity.clone();
        let at: Vec<usize> = key.iter().filter_map(|k| chunk.fields.iter().position(|f| f.name == k.name)).collect();
        let last: Option<Vec<Value>> = (chunk.rows.len() >= CHUNK_ROWS)
            .then(|| chunk.rows.last().map(|r| at.iter().map(|i| r[*i].clone()).collect()))
            .flatten();
        let fields = Arc::new(self.schema.fields.clone());
        let Some(writer) = self.writer.as_mut() else { return Ok(()) };
        if self.m.sync_mode == SyncMode::CdcDeduped {
            let key_fields: Vec<Field> =
                key.iter().filter_map(|k| fields.iter().find(|f| f.name == k.name).cloned()).collect();
            let range = KeyRange { fields: key_fields, after, upto: last.clone() };
            let soft = (self.m.delete_mode == Some(DeleteMode::Soft)).then_some(DELETED_AT);
            writer.clear(&range, soft).await.map_err(|x| failure_of(&entity, x))?;
        }
        let order = order_of(&chunk.fields, &self.source_fields);
        let begin: Begin = (chunk.position.clone(), None);
        let n = chunk.rows.len() as u64;
        let mut left = chunk.rows.into_iter();
        loop {
            let read: Vec<Vec<Value>> = left.by_ref().take(BATCH_ROWS).collect();
            if read.is_empty() {
                break;
            }
            let rows = self.copied_rows(&order, read, &begin);
            let Some(writer) = self.writer.as_mut() else { return Ok(()) };
            writer.write(&RecordBatch { fields: fields.clone(), rows }).await.map_err(|x| failure_of(&entity, x))?;
        }
        self.stats.rows_read += n;
        self.mark = mark.next(last.as_deref(), chunk.table_rows);
        Ok(())
    }
}

impl Engine {
    /// Copies chunks of a table being copied in chunks into its open
    /// writer, one after the other for up to [`CHUNK_PASS`], before the
    /// log is replayed over them from the position it holds (each chunk
    /// read in a snapshot taken now, after that position). Each chunk
    /// commits with that position and the copy's mark, so that a kill loses
    /// at most the chunk being written. A table whose key no longer allows
    /// it stops.
    pub(super) async fn copy_chunks(&self, scope: Scope<'_>, e: &mut Entity<'_>) -> Result<(), Failure> {
        let started = std::time::Instant::now();
        while e.stopped.is_none() {
            let Some(mark) = e.mark.clone() else { return Ok(()) };
            let entity = e.m.source_entity.clone();
            let key = e.chunk_key();
            let after = key.as_ref().map(|k| mark.after_values(k));
            let (key, after) = match (key, after) {
                (Some(key), Some(Ok(after))) => (key, after),
                (_, Some(Err(why))) => {
                    let message =
                        format!("{why}: the copy cannot go on; copy the table again with DELETE …/state/{entity}");
                    self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
                    e.stop(Stop::Failed(message)).await;
                    return Ok(());
                }
                _ => {
                    let message = format!(
                        "the table's key no longer allows a copy in chunks (a transform or a key type of an order \
                         of its own): copy it again with DELETE …/state/{entity}"
                    );
                    self.log(scope.run, LogLevel::Error, Some(&entity), message.clone()).await;
                    e.stop(Stop::Failed(message)).await;
                    return Ok(());
                }
            };
            let chunk = scope.changes.read_chunk(&entity, &key, after.as_deref(), CHUNK_ROWS).await;
            let chunk = chunk.map_err(|x| e.failed(x))?;
            let written = match e.apply_chunk(chunk, &key, after).await {
                Ok(()) => self.commit_chunk(scope, e).await,
                Err(f) => Err(f),
            };
            match written {
                Ok(()) => {}
                // Rows this destination table does not take (a column of
                // another type): this table stops alone, the others go on.
                Err(f) if refused_rows(&f) => {
                    let at = format!("at chunk {}", e.held_mark.as_ref().map_or(0, |m| m.done) + 1);
                    self.stop_copy(scope, e, &f, &at).await;
                    return Ok(());
                }
                Err(f) => return Err(f),
            }
            if started.elapsed() >= CHUNK_PASS {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Commits the chunk just written, with the position the table holds
    /// (the log after it is not applied yet) and the copy's new mark; then
    /// a halt if the run was canceled or the process is stopping.
    pub(super) async fn commit_chunk(&self, scope: Scope<'_>, e: &mut Entity<'_>) -> Result<(), Failure> {
        let done = e.held_mark.is_some() && e.mark.is_none();
        self.commit_at(scope, e, Then::Open).await?;
        if done {
            let message = "the copy in chunks is done: the table now streams its changes alone";
            self.log(scope.run, LogLevel::Info, Some(&e.m.source_entity), message.into()).await;
        }
        // (The run's progress is stored with the whole pass's.)
        self.progress_or_halt(scope.run, None).await
    }
}
