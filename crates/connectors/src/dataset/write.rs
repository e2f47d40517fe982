//! A dataset entity's writer: rows into the open file (spooled locally),
//! the file cut and staged once it holds `file_bytes`, the staged files
//! published by each commit (see `commit`).

use super::FileFormat;
use super::commit::{self, Commit, Manifest};
use super::objects::{Held, Objects};
use crate::common::align;
use crate::parquet::ParquetFile;
use sluice_domain::connect::connector::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// What opening a writer found and was told.
pub struct Opened<'a> {
    pub objects: Arc<dyn Objects>,
    pub format: FileFormat,
    pub file_bytes: u64,
    pub schema: &'a EntitySchema,
    pub mode: WriteMode,
    pub run: uuid::Uuid,
    /// The entity's committed state (recovered).
    pub manifest: Manifest,
    pub lock: Held,
}

/// The file being written.
struct Open {
    file: RowFile,
    spooled: PathBuf,
    name: String,
}

/// A file being written, in the dataset's format.
enum RowFile {
    Parquet(Box<ParquetFile<BufWriter<File>>>),
    Text { out: TextOut, format: crate::file::Format, names: Vec<String>, rows: u64 },
}

enum TextOut {
    Plain(Counted<BufWriter<File>>),
    Gzip(Box<flate2::write::GzEncoder<Counted<BufWriter<File>>>>),
}

/// A writer that counts the bytes through it (a gzipped file's: after
/// compression).
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn spooling(name: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::Other(format!("spooling {name}: {e}"))
}

impl RowFile {
    fn new(format: FileFormat, f: File, schema: &EntitySchema, group: usize, name: &str) -> ConnectorResult<Self> {
        let out = BufWriter::with_capacity(1 << 20, f);
        Ok(match format {
            FileFormat::Parquet(codec) => {
                RowFile::Parquet(Box::new(ParquetFile::new(out, schema, codec)?.with_group_bytes(group)))
            }
            FileFormat::Text { format, gzip } => {
                let counted = Counted { inner: out, bytes: 0 };
                let mut out = if gzip {
                    TextOut::Gzip(Box::new(flate2::write::GzEncoder::new(counted, flate2::Compression::default())))
                } else {
                    TextOut::Plain(counted)
                };
                let names: Vec<String> = schema.fields.iter().map(|f| f.name.clone()).collect();
                if format == crate::file::Format::Csv {
                    out.put(&crate::file::csv_header_line(&names)).map_err(|e| spooling(name, e))?;
                }
                RowFile::Text { out, format, names, rows: 0 }
            }
        })
    }

    fn write(&mut self, rows: &[Vec<Value>], name: &str) -> ConnectorResult<()> {
        match self {
            RowFile::Parquet(p) => p.write(rows),
            RowFile::Text { out, format, names, rows: n } => {
                out.put(&crate::file::encode(*format, names, rows)).map_err(|e| spooling(name, e))?;
                *n += rows.len() as u64;
                Ok(())
            }
        }
    }

    fn rows(&self) -> u64 {
        match self {
            RowFile::Parquet(p) => p.rows(),
            RowFile::Text { rows, .. } => *rows,
        }
    }

    fn bytes_written(&self) -> u64 {
        match self {
            RowFile::Parquet(p) => p.bytes_written(),
            RowFile::Text { out: TextOut::Plain(c), .. } => c.bytes,
            RowFile::Text { out: TextOut::Gzip(g), .. } => g.get_ref().bytes,
        }
    }

    /// Ends the file: its footer (Parquet) or its compressed stream's end.
    fn finish(self, name: &str) -> ConnectorResult<File> {
        let out = match self {
            RowFile::Parquet(p) => p.finish()?.0,
            RowFile::Text { out: TextOut::Plain(c), .. } => c.inner,
            RowFile::Text { out: TextOut::Gzip(g), .. } => g.finish().map_err(|e| spooling(name, e))?.inner,
        };
        out.into_inner().map_err(|e| spooling(name, e))
    }
}

impl TextOut {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            TextOut::Plain(w) => w.write_all(bytes),
            TextOut::Gzip(w) => w.write_all(bytes),
        }
    }
}

pub struct DatasetWriter {
    objects: Arc<dyn Objects>,
    format: FileFormat,
    file_bytes: u64,
    entity: String,
    /// The fields every file holds, and their names (to align batches).
    schema: EntitySchema,
    columns: Vec<String>,
    mode: WriteMode,
    run: String,
    /// What this writer's staged files carry (see `commit::staged_name`).
    token: String,
    /// The next file's place in the run.
    next: u32,
    open: Option<Open>,
    /// Files staged since the last commit.
    staged: Vec<String>,
    /// The committed state (an overwrite's old set until it finishes).
    manifest: Manifest,
    /// Marks to commit with the next commit.
    held: BTreeMap<String, String>,
    /// Rows committed, and written since.
    committed: u64,
    pending: u64,
    bytes: u64,
    _lock: Held,
}

impl DatasetWriter {
    pub fn new(o: Opened<'_>) -> ConnectorResult<Self> {
        // The written fields: an append keeps the entity's, then adds the
        // new ones; an overwrite writes the schema it is given.
        let mut fields = match (&o.manifest.schema, o.mode) {
            (Some(s), WriteMode::Append) => s.fields.clone(),
            _ => Vec::new(),
        };
        // A column the source no longer sends is null from now on.
        for f in &mut fields {
            if !o.schema.fields.iter().any(|x| x.name == f.name) {
                f.nullable = true;
                f.primary_key = false;
            }
        }
        for f in &o.schema.fields {
            match fields.iter_mut().find(|x| x.name == f.name) {
                Some(x) => {
                    x.primary_key = f.primary_key;
                }
                None => {
                    let mut f = f.clone();
                    // Files written before had no such column.
                    if !fields.is_empty() || !o.manifest.files.is_empty() {
                        f.nullable = true;
                    }
                    fields.push(f);
                }
            }
        }
        let schema = EntitySchema { name: o.schema.name.clone(), fields };
        crate::parquet::parquet_schema(&schema)?;
        let run = o.run.simple().to_string();
        // A run that committed files of this entity before (an earlier
        // attempt, or a checkpoint) goes on after them.
        let next = o
            .manifest
            .files
            .iter()
            .filter_map(|n| n.strip_prefix(&format!("{run}-"))?.split('.').next()?.parse::<u32>().ok())
            .map(|n| n + 1)
            .max()
            .unwrap_or(0);
        Ok(DatasetWriter {
            columns: schema.fields.iter().map(|f| f.name.clone()).collect(),
            objects: o.objects,
            format: o.format,
            file_bytes: o.file_bytes,
            entity: o.schema.name.clone(),
            schema,
            mode: o.mode,
            run,
            token: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            next,
            open: None,
            staged: Vec::new(),
            manifest: o.manifest,
            held: BTreeMap::new(),
            committed: 0,
            pending: 0,
            bytes: 0,
            _lock: o.lock,
        })
    }

    fn start_file(&mut self) -> ConnectorResult<&mut Open> {
        if self.open.is_none() {
            let name = format!("{}-{:05}.{}", self.run, self.next, self.format.ext());
            self.next += 1;
            let (spooled, f) = self.objects.spool(&self.entity, &name)?;
            let group = (self.file_bytes / 2).min(crate::parquet::ROW_GROUP_BYTES as u64) as usize;
            let file = RowFile::new(self.format, f, &self.schema, group, &name)?;
            self.open = Some(Open { file, spooled, name });
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    /// Closes the open file (if it holds rows) and stages it.
    async fn seal(&mut self) -> ConnectorResult<()> {
        let Some(open) = self.open.take() else { return Ok(()) };
        if open.file.rows() == 0 {
            let _ = std::fs::remove_file(&open.spooled);
            self.next -= 1;
            return Ok(());
        }
        let f = open.file.finish(&open.name)?;
        self.bytes += f.metadata().map(|m| m.len()).unwrap_or(0);
        drop(f);
        let staged = commit::staged_name(&open.name, &self.token);
        self.objects.upload(&open.spooled, &commit::staged_key(&self.entity, &staged)).await?;
        self.staged.push(staged);
        Ok(())
    }

    /// Publishes what is staged, with the marks held; `last`: an
    /// overwrite's new set replaces the old.
    async fn commit(&mut self, replace: bool) -> ConnectorResult<WriteStats> {
        self.seal().await?;
        let mut manifest = self.manifest.clone();
        let remove = if replace { std::mem::take(&mut manifest.files) } else { Vec::new() };
        manifest.files.extend(self.staged.iter().filter_map(|s| commit::published_name(s)).map(str::to_string));
        manifest.schema = Some(self.schema.clone());
        manifest.held.extend(std::mem::take(&mut self.held));
        let base = self.manifest.version;
        manifest.version = base + 1;
        let c = Commit { publish: std::mem::take(&mut self.staged), remove, manifest, base: Some(base) };
        commit::commit(&*self.objects, &self.entity, &c).await?;
        self.manifest = c.manifest;
        self.committed += self.pending;
        self.pending = 0;
        Ok(WriteStats { rows_written: self.committed, bytes: self.bytes })
    }

    async fn discard(&mut self) {
        if let Some(open) = self.open.take() {
            let _ = std::fs::remove_file(&open.spooled);
        }
        for name in std::mem::take(&mut self.staged) {
            let _ = self.objects.delete(&commit::staged_key(&self.entity, &name)).await;
        }
    }
}

#[async_trait::async_trait]
impl EntityWriter for DatasetWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rows = align(batch, &self.columns);
        // A file is cut between batches, so that a checkpoint, due once a
        // file is cut (see `wants_checkpoint`), commits whole files only; a
        // large batch (a bulk load's) may fill several.
        let limit = self.file_bytes;
        for chunk in rows.chunks(100_000) {
            let open = self.start_file()?;
            open.file.write(chunk, &open.name)?;
            let full = open.file.bytes_written() >= limit;
            self.pending += chunk.len() as u64;
            if full {
                self.seal().await?;
            }
        }
        Ok(())
    }

    /// Appends publish what they wrote; an overwrite's files stay staged
    /// until it finishes.
    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Overwrite {
            self.seal().await?;
            return Ok(WriteStats { rows_written: self.committed, bytes: self.bytes });
        }
        self.commit(false).await
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        let replace = self.mode == WriteMode::Overwrite;
        let done = self.commit(replace).await;
        if done.is_err() {
            self.discard().await;
        }
        done
    }

    async fn abort(mut self: Box<Self>) {
        self.discard().await;
    }

    /// Each commit publishes whole files: due once a file is cut (an
    /// overwrite commits at its end only).
    fn wants_checkpoint(&self) -> Option<bool> {
        Some(!self.staged.is_empty())
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.held.insert(stream.to_string(), position.to_string());
        Ok(())
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            let _ = std::fs::remove_file(&open.spooled);
        }
    }
}
