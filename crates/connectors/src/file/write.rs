//! Writing a file connection: the `Destination` impl and its writer
//! (appended in place, or a temporary file renamed over the old one;
//! upserts held in memory), rolled back when dropped unfinished.

use super::formats::{Format, read_records, records_of, to_json, to_text};
use super::{FileConnector, check_entity, io};
use crate::common::*;
use sluice_domain::connect::connector::BulkFormat;
use sluice_domain::connect::connector::*;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[async_trait::async_trait]
impl Destination for FileConnector {
    async fn check(&self) -> ConnectorResult<()> {
        let dir = self.place.path.clone();
        tokio::task::spawn_blocking(move || fs::create_dir_all(&dir))
            .await
            .map_err(|e| ConnectorError::Other(e.to_string()))?
            .map_err(|e| io(&format!("directory '{}'", self.place.label), e))?;
        let probe = self.place.path.join(format!(".sluice-probe-{}", uuid::Uuid::new_v4().simple()));
        fs::write(&probe, b"").map_err(|e| {
            ConnectorError::InvalidConfig(format!("'{}' is not writable: {}", self.place.label, e.kind()))
        })?;
        let _ = fs::remove_file(probe);
        Ok(())
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        self.schema(entity)
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, _attempt: Option<&Attempt>) -> WriterResult {
        check_entity(&schema.name)?;
        Destination::check(self).await?;
        let key: Vec<usize> = schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect();
        if mode == WriteMode::Upsert && key.is_empty() {
            return Err(ConnectorError::InvalidConfig(format!("upsert into {} needs a primary key", schema.name)));
        }
        let existing = self.schema(&schema.name)?;
        // The written schema: the existing fields, then new ones.
        let mut fields = match (&existing, mode) {
            (Some(e), WriteMode::Append | WriteMode::Upsert) => e.fields.clone(),
            _ => Vec::new(),
        };
        for f in &schema.fields {
            match fields.iter_mut().find(|x| x.name == f.name) {
                Some(x) => x.primary_key = f.primary_key,
                None => fields.push(f.clone()),
            }
        }
        let data = self.data_path(&schema.name);
        let widened = existing.as_ref().is_some_and(|e| e.fields.len() != fields.len());
        // Rows already in the file, kept for upsert and for a CSV whose header changes.
        let mut rows: Vec<Vec<Value>> = Vec::new();
        if data.exists()
            && (mode == WriteMode::Upsert || (mode == WriteMode::Append && widened && self.format == Format::Csv))
        {
            let (_, raws) = read_records(&data, &self.label(&data), self.format, None)?;
            rows = records_of(&fields, raws);
        }
        let sidecar = EntitySchema { name: schema.name.clone(), fields: fields.clone() };
        let tmp_schema = self.place.path.join(format!(".{}.schema.json.tmp", schema.name));
        fs::write(&tmp_schema, serde_json::to_vec_pretty(&sidecar).unwrap_or_default())
            .map_err(|e| io("schema file", e))?;
        fs::rename(&tmp_schema, self.schema_path(&schema.name)).map_err(|e| io("schema file", e))?;
        let rewrite = mode != WriteMode::Append || !rows.is_empty();
        let mut w = FileWriter {
            fields: fields.clone(),
            order: fields.iter().map(|f| f.name.clone()).collect(),
            format: self.format,
            data,
            tmp: self.place.path.join(format!(".{}.{}.tmp", schema.name, self.format.ext())),
            mode,
            key: fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect(),
            upserts: BTreeMap::new(),
            out: None,
            committed_len: None,
            stats: WriteStats::default(),
            pending: WriteStats::default(),
        };
        if mode == WriteMode::Upsert {
            for r in rows.drain(..) {
                let k = w.key_of(&r);
                w.upserts.insert(k, r);
            }
        } else if rewrite {
            // Append to a CSV whose header grows: copy the old rows over first.
            w.out = Some(w.start(&w.tmp.clone(), false)?);
            if !rows.is_empty() {
                w.append_rows(&rows)?;
            }
        } else {
            let new_file = !w.data.exists() || fs::metadata(&w.data).map(|m| m.len() == 0).unwrap_or(true);
            let mut out = w.start(&w.data.clone(), !new_file)?;
            out.flush().map_err(|e| io("file", e))?;
            w.committed_len = Some(fs::metadata(&w.data).map(|m| m.len()).unwrap_or(0));
            w.out = Some(out);
        }
        Ok(Box::new(w))
    }
}

struct FileWriter {
    fields: Vec<Field>,
    order: Vec<String>,
    format: Format,
    data: PathBuf,
    tmp: PathBuf,
    mode: WriteMode,
    key: Vec<usize>,
    upserts: BTreeMap<String, Vec<Value>>,
    out: Option<BufWriter<File>>,
    /// Length of the data file up to the last checkpoint (append to the
    /// file itself); an abort truncates back to it.
    committed_len: Option<u64>,
    stats: WriteStats,
    pending: WriteStats,
}

impl FileWriter {
    fn start(&self, path: &Path, append: bool) -> ConnectorResult<BufWriter<File>> {
        let file = if append { OpenOptions::new().append(true).open(path) } else { File::create(path) }
            .map_err(|e| io(&path.file_name().unwrap_or_default().to_string_lossy(), e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        if self.format == Format::Csv && !append {
            let mut w = csv::Writer::from_writer(Vec::new());
            let _ = w.write_record(&self.order);
            out.write_all(&w.into_inner().unwrap_or_default()).map_err(|e| io("file", e))?;
        }
        Ok(out)
    }

    fn key_of(&self, row: &[Value]) -> String {
        self.key.iter().map(|i| to_text(&row[*i])).collect::<Vec<_>>().join("\u{1f}")
    }

    fn encode(&self, rows: &[Vec<Value>]) -> Vec<u8> {
        match self.format {
            Format::Jsonl => {
                let mut buf = Vec::new();
                for r in rows {
                    let obj: serde_json::Map<String, serde_json::Value> =
                        self.order.iter().zip(r).map(|(k, v)| (k.clone(), to_json(v))).collect();
                    let _ = serde_json::to_writer(&mut buf, &obj);
                    buf.push(b'\n');
                }
                buf
            }
            Format::Csv => {
                let mut w = csv::Writer::from_writer(Vec::new());
                for r in rows {
                    let _ = w.write_record(r.iter().map(to_text));
                }
                w.into_inner().unwrap_or_default()
            }
        }
    }

    /// Appends the rows; answers the bytes written.
    fn append_rows(&mut self, rows: &[Vec<Value>]) -> ConnectorResult<u64> {
        let bytes = self.encode(rows);
        let out = self.out.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        out.write_all(&bytes).map_err(|e| io("file", e))?;
        Ok(bytes.len() as u64)
    }

    /// Writes the upsert map to the temporary file and renames it into place.
    fn flush_upserts(&mut self) -> ConnectorResult<()> {
        let rows: Vec<Vec<Value>> = self.upserts.values().cloned().collect();
        let mut out = self.start(&self.tmp.clone(), false)?;
        out.write_all(&self.encode(&rows)).map_err(|e| io("file", e))?;
        let f = out.into_inner().map_err(|e| io("file", e.into_error()))?;
        f.sync_all().map_err(|e| io("file", e))?;
        fs::rename(&self.tmp, &self.data).map_err(|e| io("file", e))
    }
}

#[async_trait::async_trait]
impl EntityWriter for FileWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        let rows = align(batch, &self.order);
        if self.mode == WriteMode::Upsert {
            for r in rows.into_owned() {
                let k = self.key_of(&r);
                self.upserts.insert(k, r);
            }
            self.pending.bytes += batch.approx_bytes();
        } else {
            self.pending.bytes += self.append_rows(&rows)?;
        }
        self.pending.rows_written += batch.len() as u64;
        let _ = &self.fields;
        Ok(())
    }

    /// An overwrite of a CSV file takes CSV straight from a source that
    /// formats values as this writer would (PostgreSQL).
    fn bulk_format(&self) -> Option<BulkFormat> {
        (self.format == Format::Csv && self.mode == WriteMode::Overwrite).then_some(SLUICE_CSV)
    }

    async fn write_bulk(&mut self, stream: &mut dyn BulkStream, _max_records: Option<u64>) -> ConnectorResult<u64> {
        let mut counted = CsvRecords::default();
        while let Some(chunk) = stream.next_chunk().await? {
            counted.feed(&chunk);
            let out = self.out.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
            out.write_all(&chunk).map_err(|e| io("file", e))?;
            self.pending.bytes += chunk.len() as u64;
        }
        if !counted.complete() {
            return Err(ConnectorError::Other("the source's CSV ended inside a record".into()));
        }
        self.pending.rows_written += counted.records;
        Ok(counted.records)
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        match self.mode {
            WriteMode::Overwrite => return Ok(self.stats),
            WriteMode::Upsert => self.flush_upserts()?,
            WriteMode::Append => {
                if let Some(out) = self.out.as_mut() {
                    out.flush().map_err(|e| io("file", e))?;
                    out.get_ref().sync_data().map_err(|e| io("file", e))?;
                    if self.committed_len.is_some() {
                        self.committed_len =
                            Some(fs::metadata(&self.data).map(|m| m.len()).map_err(|e| io("file", e))?);
                    }
                }
            }
        }
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        self.pending = WriteStats::default();
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Upsert {
            self.flush_upserts()?;
        } else if let Some(out) = self.out.take() {
            let f = out.into_inner().map_err(|e| io("file", e.into_error()))?;
            f.sync_all().map_err(|e| io("file", e))?;
            // Overwrite (and a CSV rewritten for new columns) goes through
            // the temporary file; the rename is the atomic switch.
            if self.mode == WriteMode::Overwrite || self.tmp.exists() {
                fs::rename(&self.tmp, &self.data).map_err(|e| io("file", e))?;
            }
        }
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        Ok(self.stats)
    }

    async fn abort(self: Box<Self>) {
        // Dropping the writer rolls it back (see `Drop`).
    }
}

impl FileWriter {
    /// Drops what was not committed: buffered rows unwritten, the file cut
    /// back to its last checkpoint, the temporary file removed.
    fn discard(&mut self) {
        if let Some(out) = self.out.take() {
            let (file, _) = out.into_parts();
            if let Some(len) = self.committed_len {
                let _ = file.set_len(len);
            }
        }
        let _ = fs::remove_file(&self.tmp);
    }
}

/// A writer dropped without `finish` (a run stopped, taken over or failed
/// on the way) rolls back like a database transaction.
impl Drop for FileWriter {
    fn drop(&mut self) {
        self.discard();
    }
}
