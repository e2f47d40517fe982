//! Reading a dataset: the `Source` impl. Entities are the folders under
//! the root that hold data files; an entity Sluice wrote is read as its
//! manifest commits it (its schema, its committed files only), any other
//! as the files its folder holds (the schema of their columns, by name).

use super::{DatasetConnector, check_entity, commit};
use crate::common::*;
use crate::parquet_read::{each_row, file_fields};
use sluice_domain::connect::connector::*;
use std::sync::Arc;

/// The files and fields a read of an entity takes.
struct Plan {
    keys: Vec<String>,
    fields: Vec<Field>,
}

impl DatasetConnector {
    /// The entities of the root: folders that hold files of this format.
    async fn folders(&self) -> ConnectorResult<Vec<String>> {
        let ext = format!(".{}", self.format.ext());
        let mut out: Vec<String> = self
            .objects
            .list("")
            .await?
            .into_iter()
            .filter_map(|o| {
                let (entity, name) = o.key.split_once('/')?;
                (!name.contains('/') && name.ends_with(&ext) && check_entity(entity).is_ok())
                    .then(|| entity.to_string())
            })
            .collect();
        out.dedup();
        Ok(out)
    }

    /// What a read of `entity` takes; `whole`: every file's columns (a
    /// sync), else the first file's (a preview, discovery).
    async fn plan(&self, entity: &str, whole: bool) -> ConnectorResult<Option<Plan>> {
        check_entity(entity)?;
        if let Some(m) = commit::manifest(&*self.objects, entity).await?
            && let Some(schema) = m.schema
        {
            let keys = m.files.iter().map(|n| commit::data_key(entity, n)).collect();
            return Ok(Some(Plan { keys, fields: schema.fields }));
        }
        let ext = format!(".{}", self.format.ext());
        let keys: Vec<String> = self
            .objects
            .list(entity)
            .await?
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k.strip_prefix(&format!("{entity}/")).is_some_and(|n| !n.contains('/') && n.ends_with(&ext)))
            .collect();
        if keys.is_empty() {
            return Ok(None);
        }
        let mut fields: Vec<Field> = Vec::new();
        for key in keys.iter().take(if whole { usize::MAX } else { 1 }) {
            let local = self.objects.fetch(key).await?;
            let what = format!("{}/{key}", self.objects.label().trim_end_matches('/'));
            let path = local.path.clone();
            let found = tokio::task::spawn_blocking(move || file_fields(&path, &what))
                .await
                .map_err(|e| ConnectorError::Other(e.to_string()))??;
            for f in found {
                if !fields.iter().any(|x| x.name == f.name) {
                    fields.push(f);
                }
            }
        }
        Ok(Some(Plan { keys, fields }))
    }
}

#[async_trait::async_trait]
impl Source for DatasetConnector {
    async fn check(&self) -> ConnectorResult<()> {
        self.objects.check_readable().await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.objects.check_readable().await?;
        let mut out = Vec::new();
        for name in self.folders().await? {
            if let Some(p) = self.plan(&name, false).await? {
                out.push(EntitySchema { name, fields: p.fields });
            }
        }
        Ok(out)
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let p = self
            .plan(entity, true)
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("no files for entity '{entity}'")))?;
        Ok(Arc::new(p.fields))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let plan = self
            .plan(&req.entity, req.limit.is_none())
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("no files for entity '{}'", req.entity)))?;
        let cursor_idx = match &req.cursor {
            Some(c) => Some(plan.fields.iter().position(|f| f.name == c.field).ok_or_else(|| {
                ConnectorError::InvalidConfig(format!("cursor field '{}' is not in {}", c.field, req.entity))
            })?),
            None => None,
        };
        let fields = Arc::new(plan.fields);
        let batch_size = if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size };
        let (objects, label, f2) = (self.objects.clone(), self.objects.label().to_string(), fields.clone());
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            let limit = req.limit.unwrap_or(u64::MAX);
            // An incremental read is ordered by the cursor, which files
            // are not: loaded, filtered and sorted.
            let mut kept: Vec<Vec<Value>> = Vec::new();
            let mut count = 0u64;
            for key in plan.keys {
                if count >= limit {
                    break;
                }
                let local = match objects.fetch(&key).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let what = format!("{}/{key}", label.trim_end_matches('/'));
                let (tx2, f3, cursor) = (tx.clone(), f2.clone(), req.cursor.clone());
                let path = local.path.clone();
                let sorted = cursor_idx.is_some();
                let done = tokio::task::spawn_blocking(move || {
                    let mut batch = Vec::with_capacity(batch_size);
                    let mut rows_kept = Vec::new();
                    let mut open = true;
                    let read = each_row(&path, &what, &f3, |row| {
                        let from = cursor.as_ref().and_then(|c| c.from.as_ref());
                        if let (Some(ci), Some(from)) = (cursor_idx, from)
                            && compare_values(&row[ci], from).is_none_or(|o| o == std::cmp::Ordering::Less)
                        {
                            return true;
                        }
                        if sorted {
                            rows_kept.push(row);
                            return true;
                        }
                        count += 1;
                        batch.push(row);
                        if batch.len() >= batch_size {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
                            open = tx2.blocking_send(Ok(RecordBatch { fields: f3.clone(), rows: full })).is_ok();
                        }
                        open && count < limit
                    });
                    if !batch.is_empty() && open {
                        let _ = tx2.blocking_send(Ok(RecordBatch { fields: f3.clone(), rows: batch }));
                    }
                    read.map(|_| (rows_kept, count))
                })
                .await;
                match done {
                    Ok(Ok((rows, n))) => {
                        kept.extend(rows);
                        count = n;
                    }
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    // The reader panicked on the file: the read fails, never
                    // ends early as if the file were done.
                    Err(_) => {
                        let _ = tx
                            .send(Err(ConnectorError::Other(format!("{label}/{key}: not a readable Parquet file"))))
                            .await;
                        return;
                    }
                }
            }
            if let Some(ci) = cursor_idx {
                // Off the async threads, and a failure rather than a panic.
                let sorted = tokio::task::spawn_blocking(move || {
                    kept.sort_by(|a, b| compare_values(&a[ci], &b[ci]).unwrap_or(std::cmp::Ordering::Equal));
                    kept
                })
                .await;
                let Ok(mut kept) = sorted else {
                    let _ =
                        tx.send(Err(ConnectorError::Other("the rows could not be ordered by the cursor".into()))).await;
                    return;
                };
                kept.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                for chunk in kept.chunks(batch_size) {
                    if tx.send(Ok(RecordBatch { fields: f2.clone(), rows: chunk.to_vec() })).await.is_err() {
                        return;
                    }
                }
            }
        })))
    }
}
