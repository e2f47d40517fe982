//! Writing a file connection: the `Destination` impl and its writer
//! (appended in place, or a temporary file renamed over the old one;
//! upserts held in memory), rolled back when dropped unfinished.

use super::formats::{Format, csv_header_line, encode, read_records, records_of, to_text};
use super::manifest::{EntityFiles, create_new};
use super::{FileConnector, check_entity, io};
use crate::common::*;
use sluice_domain::connect::connector::BulkFormat;
use sluice_domain::connect::connector::*;
use sluice_domain::sync::verification::key_cmp;
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

    /// From each entity's manifest, once what a writer killed mid-commit
    /// left is finished (of an entity no writer holds: a writer's commits
    /// are in its manifest already; an earlier attempt's writer is waited
    /// for before, by `end_earlier_attempts`).
    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        Destination::check(self).await?;
        let mut out = Vec::new();
        for entity in self.manifested()? {
            let files = self.files(&entity)?;
            let manifest = match files.try_lock()? {
                Some(_lock) => files.recover()?,
                None => files.manifest()?,
            };
            if let Some(p) = manifest.and_then(|mut m| m.positions.remove(stream)) {
                out.push((entity, p));
            }
        }
        Ok(out)
    }

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        let files = self.files(entity)?;
        let _lock = files.lock().await?;
        let Some(mut m) = files.recover()? else { return Ok(()) };
        match position {
            Some(p) => m.positions.insert(stream.to_string(), p.to_string()),
            None => m.positions.remove(stream),
        };
        files.write_manifest(&m)
    }

    /// Waits for the entities an earlier attempt's writer holds (a file
    /// has no session to end: see `manifest`).
    async fn end_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        self.wait_for_earlier_attempts(attempt).await
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult {
        check_entity(&schema.name)?;
        Destination::check(self).await?;
        let files = self.files(&schema.name)?;
        let mut lock = files.lock().await?;
        if let Some(attempt) = attempt {
            files.mark(&mut lock, attempt)?;
        }
        files.recover()?;
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
        let data = files.data.clone();
        // A CSV file's header must name the written fields: one that grows
        // (or a writer killed after widening the schema file, before its
        // rewrite committed) is written again.
        let widened = existing.as_ref().is_some_and(|e| e.fields.len() != fields.len())
            || (self.format == Format::Csv
                && csv_header(&data).is_some_and(|h| !h.iter().eq(fields.iter().map(|f| &f.name))));
        // Rows already in the file, kept for a CSV whose header changes
        // (an upsert reads them when it first changes something).
        let mut rows: Vec<Vec<Value>> = Vec::new();
        if data.exists() && mode == WriteMode::Append && widened && self.format == Format::Csv {
            let (_, raws) = read_records(&data, &self.label(&data), self.format, None)?;
            rows = records_of(&fields, raws);
        }
        let sidecar = EntitySchema { name: schema.name.clone(), fields: fields.clone() };
        let tmp_schema = self.place.path.join(format!(".{}.schema.json.tmp", schema.name));
        fs::write(&tmp_schema, serde_json::to_vec_pretty(&sidecar).unwrap_or_default())
            .map_err(|e| io("schema file", e))?;
        fs::rename(&tmp_schema, self.schema_path(&schema.name)).map_err(|e| io("schema file", e))?;
        let rewrite = mode != WriteMode::Append || (widened && self.format == Format::Csv && data.exists());
        let label = self.label(&data);
        let mut w = FileWriter {
            fields: fields.clone(),
            order: fields.iter().map(|f| f.name.clone()).collect(),
            format: self.format,
            data,
            files,
            _lock: lock,
            positions: BTreeMap::new(),
            done: false,
            label,
            loaded: false,
            dirty: false,
            tmp: self.place.path.join(format!(".{}.{}.tmp", schema.name, self.format.ext())),
            mode,
            key: fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect(),
            upserts: BTreeMap::new(),
            out: None,
            committed_len: None,
            stats: WriteStats::default(),
            pending: WriteStats::default(),
        };
        match mode {
            // The file's rows are read at the first change.
            WriteMode::Upsert => {}
            // Overwrite, or an append to a CSV whose header grows (the old
            // rows copied over first): into the temporary file.
            _ if rewrite => {
                w.out = Some(w.start(&w.tmp.clone(), false)?);
                if !rows.is_empty() {
                    w.append_rows(&rows)?;
                }
            }
            _ => {
                let new_file = !w.data.exists() || fs::metadata(&w.data).map(|m| m.len() == 0).unwrap_or(true);
                let mut out = w.start(&w.data.clone(), !new_file)?;
                out.flush().map_err(|e| io("file", e))?;
                out.get_ref().sync_data().map_err(|e| io("file", e))?;
                let len = fs::metadata(&w.data).map(|m| m.len()).unwrap_or(0);
                w.committed_len = Some(len);
                w.out = Some(out);
                // Appends in place commit through the manifest, so that a
                // writer killed mid-way leaves no rows behind.
                w.files.start_appending(len)?;
            }
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
    /// The entity's data file, manifest and lock (see `manifest`).
    files: EntityFiles,
    /// Held for the writer's life: one writer per entity.
    _lock: File,
    /// The change stream positions to commit with the next commit.
    positions: BTreeMap<String, String>,
    /// Finished: nothing to roll back.
    done: bool,
    /// The data file as messages name it (under the user's path).
    label: String,
    /// Upsert: the file's rows are in `upserts` (read at the first change).
    loaded: bool,
    /// Upsert: `upserts` changed since the last commit.
    dirty: bool,
    out: Option<BufWriter<File>>,
    /// Length of the data file up to the last checkpoint (append to the
    /// file itself); an abort truncates back to it.
    committed_len: Option<u64>,
    stats: WriteStats,
    pending: WriteStats,
}

impl FileWriter {
    fn start(&self, path: &Path, append: bool) -> ConnectorResult<BufWriter<File>> {
        let file =
            if append { crate::common::open_in_place(path, OpenOptions::new().append(true)) } else { create_new(path) }
                .map_err(|e| io(&path.file_name().unwrap_or_default().to_string_lossy(), e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        if self.format == Format::Csv && !append {
            out.write_all(&csv_header_line(&self.order)).map_err(|e| io("file", e))?;
        }
        Ok(out)
    }

    fn key_of(&self, row: &[Value]) -> String {
        self.key.iter().map(|i| to_text(&row[*i])).collect::<Vec<_>>().join("\u{1f}")
    }

    fn encode(&self, rows: &[Vec<Value>]) -> Vec<u8> {
        encode(self.format, &self.order, rows)
    }

    /// Appends the rows; answers the bytes written.
    fn append_rows(&mut self, rows: &[Vec<Value>]) -> ConnectorResult<u64> {
        let bytes = self.encode(rows);
        let out = self.out.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        out.write_all(&bytes).map_err(|e| io("file", e))?;
        Ok(bytes.len() as u64)
    }

    /// Reads the file's rows into the upsert map, once.
    fn load(&mut self) -> ConnectorResult<()> {
        if !self.loaded {
            if self.data.exists() {
                let (_, raws) = read_records(&self.data, &self.label, self.format, None)?;
                for r in records_of(&self.fields, raws) {
                    let k = self.key_of(&r);
                    self.upserts.insert(k, r);
                }
            }
            self.loaded = true;
        }
        self.dirty = true;
        Ok(())
    }

    /// Commits the upsert map: written whole to the temporary file and
    /// renamed over the data file; when nothing changed, only the
    /// positions held, through the manifest.
    fn flush_upserts(&mut self) -> ConnectorResult<()> {
        // A file that is not there yet is written, empty if need be, so
        // that the entity exists once its writer finished.
        if !self.dirty && self.data.exists() {
            if !self.positions.is_empty() {
                let len = fs::metadata(&self.data).map(|m| m.len()).unwrap_or(0);
                self.files.commit_length(len, &self.positions, false)?;
                self.positions.clear();
            }
            return Ok(());
        }
        let mut out = self.start(&self.tmp.clone(), false)?;
        // Encoded 10,000 rows at a time, each chunk copied alone (not the
        // whole map at once).
        let mut chunk = Vec::with_capacity(10_000);
        for row in self.upserts.values() {
            chunk.push(row.clone());
            if chunk.len() == 10_000 {
                out.write_all(&self.encode(&chunk)).map_err(|e| io("file", e))?;
                chunk.clear();
            }
        }
        out.write_all(&self.encode(&chunk)).map_err(|e| io("file", e))?;
        let f = out.into_inner().map_err(|e| io("file", e.into_error()))?;
        f.sync_all().map_err(|e| io("file", e))?;
        self.files.commit_rename(&self.tmp, &self.positions)?;
        self.positions.clear();
        self.dirty = false;
        Ok(())
    }

    /// Commits what was appended: in place, the file's length through the
    /// manifest; into the temporary file (a CSV whose header grew), by a
    /// rename, after which the writer appends in place. `more`: the writer
    /// goes on.
    fn commit_appended(&mut self, more: bool) -> ConnectorResult<()> {
        let Some(mut out) = self.out.take() else { return Ok(()) };
        out.flush().map_err(|e| io("file", e))?;
        if self.committed_len.is_some() {
            out.get_ref().sync_data().map_err(|e| io("file", e))?;
            let len = fs::metadata(&self.data).map(|m| m.len()).map_err(|e| io("file", e))?;
            self.out = Some(out);
            self.files.commit_length(len, &self.positions, more)?;
            self.committed_len = Some(len);
        } else {
            let f = out.into_inner().map_err(|e| io("file", e.into_error()))?;
            f.sync_all().map_err(|e| io("file", e))?;
            drop(f);
            self.files.commit_rename(&self.tmp, &self.positions)?;
            let len = fs::metadata(&self.data).map(|m| m.len()).map_err(|e| io("file", e))?;
            self.committed_len = Some(len);
            if more {
                self.out = Some(self.start(&self.data.clone(), true)?);
                self.files.start_appending(len)?;
            }
        }
        self.positions.clear();
        Ok(())
    }

    /// The position of each of `fields` (named as this writer's) in a row.
    fn places(&self, fields: &[Field]) -> ConnectorResult<Vec<usize>> {
        fields
            .iter()
            .map(|f| {
                self.order
                    .iter()
                    .position(|n| *n == f.name)
                    .ok_or_else(|| ConnectorError::InvalidConfig(format!("'{}' is not a field of this entity", f.name)))
            })
            .collect()
    }

    /// The upsert map's key of a row of `fields` (which hold the key).
    fn key_in(&self, fields: &[Field], row: &[Value]) -> ConnectorResult<String> {
        let parts = self
            .key
            .iter()
            .map(|k| {
                let name = &self.order[*k];
                fields.iter().position(|f| f.name == *name).map(|i| to_text(&row[i])).ok_or_else(|| {
                    ConnectorError::InvalidConfig(format!("the key field '{name}' is missing from the change"))
                })
            })
            .collect::<ConnectorResult<Vec<_>>>()?;
        Ok(parts.join("\u{1f}"))
    }

    fn keyed(&self, what: &str) -> ConnectorResult<()> {
        if self.mode == WriteMode::Upsert {
            Ok(())
        } else {
            Err(ConnectorError::Unsupported(format!("a file writer {what} only in upsert mode")))
        }
    }
}

#[async_trait::async_trait]
impl EntityWriter for FileWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        let rows = align(batch, &self.order);
        if self.mode == WriteMode::Upsert {
            self.load()?;
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
            WriteMode::Append => self.commit_appended(true)?,
        }
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        self.pending = WriteStats::default();
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        match self.mode {
            WriteMode::Upsert => self.flush_upserts()?,
            WriteMode::Append => self.commit_appended(false)?,
            // Through the temporary file; the rename is the atomic switch.
            WriteMode::Overwrite => {
                if let Some(out) = self.out.take() {
                    let f = out.into_inner().map_err(|e| io("file", e.into_error()))?;
                    f.sync_all().map_err(|e| io("file", e))?;
                    drop(f);
                    self.files.commit_rename(&self.tmp, &self.positions)?;
                }
            }
        }
        self.done = true;
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        Ok(self.stats)
    }

    async fn abort(self: Box<Self>) {
        // Dropping the writer rolls it back (see `Drop`).
    }

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        self.keyed("deletes")?;
        self.load()?;
        for row in &keys.rows {
            let k = self.key_in(&keys.fields, row)?;
            self.upserts.remove(&k);
        }
        Ok(())
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        self.keyed("updates rows")?;
        self.load()?;
        let places = self.places(&rows.fields)?;
        for row in &rows.rows {
            let k = self.key_in(&rows.fields, row)?;
            if let Some(held) = self.upserts.get_mut(&k) {
                for (v, at) in row.iter().zip(&places) {
                    held[*at] = v.clone();
                }
            }
        }
        self.pending.rows_written += rows.len() as u64;
        Ok(())
    }

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.keyed("deletes")?;
        if *range == KeyRange::all() && soft_column.is_none() {
            // Everything goes: no need to read it first.
            self.upserts.clear();
            self.loaded = true;
            self.dirty = true;
            return Ok(());
        }
        self.load()?;
        let places = self.places(&range.fields)?;
        let within = |row: &[Value]| {
            let key: Vec<Value> = places.iter().map(|i| row[*i].clone()).collect();
            range.after.as_ref().is_none_or(|a| key_cmp(&key, a).is_gt())
                && range.upto.as_ref().is_none_or(|u| key_cmp(&key, u).is_le())
        };
        match soft_column {
            Some(c) => {
                let at = self.places(&[Field::new(c, FieldType::Timestamp)])?[0];
                let now = Value::Timestamp(time::OffsetDateTime::now_utc());
                for row in self.upserts.values_mut() {
                    if row[at].is_null() && within(row) {
                        row[at] = now.clone();
                    }
                }
            }
            None => self.upserts.retain(|_, row| !within(row)),
        }
        Ok(())
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.positions.insert(stream.to_string(), position.to_string());
        Ok(())
    }
}

impl FileWriter {
    /// Drops what was not committed: buffered rows unwritten, the file cut
    /// back to its last checkpoint, the temporary file removed.
    fn discard(&mut self) {
        // Unwritten rows stay unwritten (`into_parts` drops the buffer).
        let file = self.out.take().map(|out| out.into_parts().0);
        let _ = fs::remove_file(&self.tmp);
        // The manifest says what is committed; the lock is still held.
        match self.files.manifest() {
            Ok(Some(_)) => {
                if let Err(e) = self.files.recover() {
                    tracing::warn!(error = %e, "rolling a file writer back failed");
                }
            }
            _ => {
                if let (Some(file), Some(len)) = (file, self.committed_len) {
                    let _ = file.set_len(len);
                }
            }
        }
    }
}

/// A writer dropped without `finish` (a run stopped, taken over or failed
/// on the way) rolls back like a database transaction.
impl Drop for FileWriter {
    fn drop(&mut self) {
        if !self.done {
            self.discard();
        }
    }
}

/// The header of a CSV file, if it has one.
fn csv_header(path: &Path) -> Option<Vec<String>> {
    let file = File::open(path).ok()?;
    let mut r = csv::ReaderBuilder::new().has_headers(true).flexible(true).from_reader(std::io::BufReader::new(file));
    let h = r.headers().ok()?;
    (!h.is_empty()).then(|| h.iter().map(str::to_string).collect())
}
