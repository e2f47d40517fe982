//! Changes applied to an entity's writer: a change log's rows in order; a
//! mirror's folded by key first (see `ByKey`), so that each key's last
//! state is written once per batch, however the source's transactions
//! interleaved them; a filter's drops deleted.

use super::*;

impl Entity<'_> {
    /// Applies one change.
    pub(super) async fn apply(&mut self, c: &Change, begin: &Begin) -> Result<(), Failure> {
        self.stats.rows_read += 1;
        let row = self.row(c, begin);
        if self.m.sync_mode == SyncMode::CdcAppend {
            // A change log takes no filter (refused when the flow is saved).
            let Some(row) = row else { return Ok(()) };
            if !matches!(self.pending, Pending::Log(_)) {
                self.pending = Pending::Log(Vec::new());
            }
            let Pending::Log(rows) = &mut self.pending else { return Ok(()) };
            rows.push(row);
            if rows.len() >= BATCH_ROWS {
                self.flush().await?;
            }
            return Ok(());
        }
        let unchanged: Vec<usize> = c
            .unchanged
            .iter()
            .filter_map(|i| self.order.get(*i).copied().flatten())
            .filter_map(|at| self.schema.index_of(&self.source_fields[at].name))
            .collect();
        // A mirror with a filter holds the rows that pass it: a row the
        // filter drops goes (it may have passed before). Unless the filter
        // reads a value the change did not carry (a large value the update
        // left as it was): then whether the row passes did not change, and
        // the update applies to the row if the mirror holds it.
        let (op, row) = match row {
            Some(row) => (c.op, row),
            None => {
                let full = self.unfiltered_row(c, begin);
                let undecided = c.unchanged.iter().filter_map(|i| self.order.get(*i).copied().flatten()).any(|at| {
                    let name = &self.source_fields[at].name;
                    self.m.transform.iter().any(|s| matches!(s, transform::Step::Filter { field, .. } if field == name))
                });
                (if undecided { c.op } else { ChangeOp::Delete }, full)
            }
        };
        match op {
            ChangeOp::Delete if self.m.delete_mode == Some(DeleteMode::Soft) => {
                let mut row = row;
                let at = self.schema.fields.len() - 1;
                row[at] = begin.1.map_or(Value::Null, Value::Timestamp);
                let key_idx = self.key_idx();
                let keep: Vec<usize> =
                    (0..self.schema.fields.len()).filter(|i| *i != at && !key_idx.contains(i)).collect();
                self.push_key(KeyOp::Partial(keep), row).await
            }
            ChangeOp::Delete => self.push_key(KeyOp::Delete, row).await,
            _ if !unchanged.is_empty() => self.push_key(KeyOp::Partial(unchanged), row).await,
            _ => self.push_key(KeyOp::Upsert, row).await,
        }
    }

    /// Queues one change of a mirror's key; a full batch goes to the writer.
    pub(super) async fn push_key(&mut self, op: KeyOp, row: Vec<Value>) -> Result<(), Failure> {
        let key_idx = self.key_idx();
        if !matches!(self.pending, Pending::Mirror(_)) {
            self.pending = Pending::Mirror(ByKey::default());
        }
        let Pending::Mirror(by_key) = &mut self.pending else { return Ok(()) };
        by_key.push(op, row, &key_idx);
        if by_key.len() >= BATCH_ROWS {
            self.flush().await?;
        }
        Ok(())
    }

    pub(super) async fn flush(&mut self) -> Result<(), Failure> {
        if self.writer.is_none() {
            return Ok(());
        }
        let key_idx = self.key_idx();
        let fields = Arc::new(self.schema.fields.clone());
        let entity = self.m.source_entity.clone();
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        let Some(writer) = self.writer.as_mut() else { return Ok(()) };
        let failed = |e| failure_of(&entity, e);
        match pending {
            Pending::None => {}
            Pending::Log(rows) => writer.write(&RecordBatch { fields, rows }).await.map_err(failed)?,
            Pending::Mirror(by_key) => {
                let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
                let mut partials: Vec<(Vec<usize>, Vec<Vec<Value>>)> = Vec::new();
                for (op, row) in by_key.rows {
                    match op {
                        KeyOp::Upsert => upserts.push(row),
                        KeyOp::Delete => deletes.push(key_idx.iter().map(|i| row[*i].clone()).collect()),
                        KeyOp::Partial(keep) => match partials.iter_mut().find(|(k, _)| *k == keep) {
                            Some((_, rows)) => rows.push(row),
                            None => partials.push((keep, vec![row])),
                        },
                    }
                }
                if !upserts.is_empty() {
                    writer.write(&RecordBatch { fields: fields.clone(), rows: upserts }).await.map_err(failed)?;
                }
                if !deletes.is_empty() {
                    let key_fields: Vec<Field> = key_idx.iter().map(|i| fields[*i].clone()).collect();
                    let keys = RecordBatch { fields: Arc::new(key_fields), rows: deletes };
                    writer.delete(&keys).await.map_err(failed)?;
                }
                for (keep, rows) in partials {
                    let set: Vec<usize> = (0..fields.len()).filter(|i| !keep.contains(i)).collect();
                    let set_fields: Vec<Field> = set.iter().map(|i| fields[*i].clone()).collect();
                    let rows = rows.into_iter().map(|r| set.iter().map(|i| r[*i].clone()).collect()).collect();
                    writer.update(&RecordBatch { fields: Arc::new(set_fields), rows }).await.map_err(failed)?;
                }
            }
        }
        Ok(())
    }
}
