//! Reading a file connection: the `Source` impl, streaming a file record
//! by record (or, for a cursor read, loading, filtering and sorting it).

use super::FileConnector;
use super::formats::{
    Format, Members, each_line, first_places, member_error, open_input, raw_to_value, read_records, records_of,
    to_value,
};
use crate::common::*;
use sluice_domain::connect::connector::*;
use std::fs;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

/// Passes each record of `path` (as `fields`' values) to `visit` until it
/// answers `false`, or `limit` records were passed: one record in memory
/// at a time, however large the file.
pub(crate) fn each_record(
    path: &Path,
    what: &str,
    format: Format,
    fields: &[Field],
    limit: Option<u64>,
    mut visit: impl FnMut(Vec<Value>) -> bool,
) -> ConnectorResult<()> {
    let file = open_input(path, what)?;
    let limit = limit.unwrap_or(u64::MAX);
    let mut count = 0u64;
    match format {
        Format::Jsonl => {
            // Each member goes to its field by name (the first field of a
            // name, if two share one; the last member, if a line repeats one).
            let index = first_places(fields.iter().map(|f| f.name.as_str()));
            if limit > 0 {
                each_line(file, what, |n, line| {
                    let mut row = vec![Value::Null; fields.len()];
                    for (name, raw) in Members::parse(line, what, n)?.0 {
                        if let Some(&i) = index.get(name.as_ref()) {
                            row[i] =
                                raw_to_value(raw, fields[i].field_type).map_err(|e| member_error(what, n, &name, e))?;
                        }
                    }
                    count += 1;
                    // At the limit, the next line is not read.
                    Ok(visit(row) && count < limit)
                })?;
            }
        }
        Format::Csv => {
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(true)
                .flexible(true)
                .from_reader(BufReader::with_capacity(1 << 20, file));
            let headers: Vec<String> = rdr
                .headers()
                .map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?
                .iter()
                .map(str::to_string)
                .collect();
            // Each field's column: the first of its name.
            let columns = first_places(headers.iter().map(String::as_str));
            let positions: Vec<Option<usize>> = fields.iter().map(|f| columns.get(f.name.as_str()).copied()).collect();
            let mut rec = csv::StringRecord::new();
            while count < limit
                && rdr.read_record(&mut rec).map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?
            {
                let row = fields
                    .iter()
                    .zip(&positions)
                    .map(|(f, p)| match p.and_then(|i| rec.get(i)) {
                        None | Some("") => Value::Null,
                        Some(text) => to_value(serde_json::Value::String(text.to_string()), f.field_type),
                    })
                    .collect();
                count += 1;
                if !visit(row) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Reads `path` record by record, sending batches as they fill: memory
/// holds one batch (plus the channel's) however large the file.
fn stream_records(
    path: &Path,
    what: &str,
    format: Format,
    fields: &Arc<Vec<Field>>,
    limit: Option<u64>,
    batch_size: usize,
    tx: &tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>,
) -> ConnectorResult<()> {
    let mut batch: Vec<Vec<Value>> = Vec::with_capacity(batch_size);
    let mut open = true;
    each_record(path, what, format, fields, limit, |row| {
        batch.push(row);
        if batch.len() >= batch_size {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
            open = tx.blocking_send(Ok(RecordBatch { fields: fields.clone(), rows: full })).is_ok();
        }
        open
    })?;
    if open && !batch.is_empty() {
        let _ = tx.blocking_send(Ok(RecordBatch { fields: fields.clone(), rows: batch }));
    }
    Ok(())
}

#[async_trait::async_trait]
impl Source for FileConnector {
    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let schema = self
            .whole_schema(entity)
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("no file for entity '{entity}'")))?;
        Ok(Arc::new(schema.fields))
    }

    async fn check(&self) -> ConnectorResult<()> {
        let dir = self.place.path.clone();
        let meta = tokio::task::spawn_blocking(move || fs::metadata(&dir))
            .await
            .map_err(|e| ConnectorError::Other(e.to_string()))?;
        match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(ConnectorError::InvalidConfig(format!("'{}' is not a directory", self.place.label))),
            Err(_) => Err(ConnectorError::DatabaseNotFound(format!("directory '{}' does not exist", self.place.label))),
        }
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        Source::check(self).await?;
        let mut out = Vec::new();
        for name in self.entities()? {
            if let Ok(Some(s)) = self.schema(&name) {
                out.push(s);
            }
        }
        Ok(out)
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        // A sync reads every record, so its types come from every record;
        // a preview's from a sample.
        let schema =
            if req.limit.is_none() { self.whole_schema(&req.entity).await? } else { self.schema(&req.entity)? };
        let schema =
            schema.ok_or_else(|| ConnectorError::EntityNotFound(format!("no file for entity '{}'", req.entity)))?;
        let cursor_idx = match &req.cursor {
            Some(c) => Some(schema.index_of(&c.field).ok_or_else(|| {
                ConnectorError::InvalidConfig(format!("cursor field '{}' is not in {}", c.field, schema.name))
            })?),
            None => None,
        };
        let fields = Arc::new(schema.fields.clone());
        let path = self.data_file(&req.entity)?;
        let what = self.label(&path);
        let format = self.format;
        let batch_size = if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size };
        let f2 = fields.clone();
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            let _ = tokio::task::spawn_blocking(move || {
                let produce = || -> ConnectorResult<()> {
                    // Incremental reads must be ordered by the cursor, which
                    // a file is not: load, filter and sort.
                    if let (Some(ci), Some(c)) = (cursor_idx, &req.cursor) {
                        let (_, raws) = read_records(&path, &what, format, None)?;
                        let mut rows = records_of(&f2, raws);
                        if let Some(from) = &c.from {
                            rows.retain(|r| {
                                compare_values(&r[ci], from).is_some_and(|o| o != std::cmp::Ordering::Less)
                            });
                        }
                        rows.sort_by(|a, b| compare_values(&a[ci], &b[ci]).unwrap_or(std::cmp::Ordering::Equal));
                        if let Some(l) = req.limit {
                            rows.truncate(l as usize);
                        }
                        for chunk in rows.chunks(batch_size) {
                            if tx.blocking_send(Ok(RecordBatch { fields: f2.clone(), rows: chunk.to_vec() })).is_err() {
                                return Ok(());
                            }
                        }
                        return Ok(());
                    }
                    stream_records(&path, &what, format, &f2, req.limit, batch_size, &tx)
                };
                if let Err(e) = produce() {
                    let _ = tx.blocking_send(Err(e));
                }
            })
            .await;
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows `stream_records` sends for `text` read with `limit`, or its error.
    fn stream(text: &str, limit: Option<u64>) -> ConnectorResult<Vec<Vec<Value>>> {
        let path = std::env::temp_dir().join(format!("sluice-read-{}-{}.jsonl", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        let fields = Arc::new(vec![Field::new("id", FieldType::Integer), Field::new("doc", FieldType::Object)]);
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let done = stream_records(&path, "t.jsonl", Format::Jsonl, &fields, limit, 2, &tx);
        drop(tx);
        std::fs::remove_file(path).unwrap();
        done?;
        let mut rows = Vec::new();
        while let Some(batch) = rx.blocking_recv() {
            rows.extend(batch?.rows);
        }
        Ok(rows)
    }

    #[test]
    fn a_json_lines_read_stops_at_its_limit_without_reading_further() {
        let text =
            "{\"id\": 1, \"doc\": {\"a\": [1]}}\n\n{\"doc\": null, \"id\": 2, \"other\": 5}\n{\"id\": 3}\nnot json\n";
        let two = stream(text, Some(2)).unwrap();
        assert_eq!(two, [vec![Value::Int(1), Value::RawJson("{\"a\": [1]}".into())], vec![Value::Int(2), Value::Null]]);
        assert!(stream(text, Some(0)).unwrap().is_empty());
        let e = stream(text, None).unwrap_err().to_string();
        assert!(e.contains("t.jsonl line 5: not a JSON object"), "{e}");
        let e = stream("{\"id\": 1, \"doc\": {\"x\": 1e400}}\n", None).unwrap_err().to_string();
        assert!(e.contains("t.jsonl line 1: doc: number out of range"), "{e}");
    }
}
