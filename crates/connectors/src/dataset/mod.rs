//! A dataset: a folder of data files per entity (`<root>/<entity>/`, what a
//! reader globs), on local disk or (next) in an S3-compatible bucket, and
//! what the commits need under `<root>/_sluice/`. The base of every
//! destination that lands files: plain Parquet here, the lake tables
//! after.
//!
//! Here: the connector and its `Destination` impl. `objects`: where the
//! files live. `commit`: the commit protocol (staged files, an intent,
//! recovery) and the manifest. `write`: the writer, which cuts files at a
//! size while the source is read.
//!
//! Appends (`full_refresh_append`, `incremental_append`, `cdc_append`) add
//! files; an overwrite publishes its new set, then removes the old one (a
//! reader listing in between sees both). Each file is named by the run
//! and its place in the run (`<run>-<n>.parquet`; run ids grow with time,
//! so names sort in the order written), and the marks the engine commits
//! with the rows (a cursor, a change stream position, the run that
//! finished the entity) are in the same commit: after any kill, a retry
//! resumes from what the folder holds and writes each row once.

use sluice_domain::connect::connector::*;
use std::sync::Arc;

pub mod commit;
pub mod objects;
mod read;
pub mod s3;
mod write;

use objects::Objects;

/// The format of a dataset's files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FileFormat {
    Parquet(crate::parquet::Codec),
    /// CSV (with a header line) or JSON Lines, gzipped or not.
    Text {
        format: crate::file::Format,
        gzip: bool,
    },
}

impl FileFormat {
    /// The name's ending of the files written.
    pub fn ext(self) -> &'static str {
        use crate::file::Format::*;
        match self {
            FileFormat::Parquet(_) => "parquet",
            FileFormat::Text { format: Csv, gzip: false } => "csv",
            FileFormat::Text { format: Csv, gzip: true } => "csv.gz",
            FileFormat::Text { format: Jsonl, gzip: false } => "jsonl",
            FileFormat::Text { format: Jsonl, gzip: true } => "jsonl.gz",
        }
    }

    /// The format's name, as a connection's `format` says it.
    pub fn name(self) -> &'static str {
        self.ext().trim_end_matches(".gz")
    }

    /// Whether a file of this name holds this format's data (read whatever
    /// its compression: a gzipped CSV file is read as one, and the reverse).
    pub fn holds(self, name: &str) -> bool {
        // Text is read gzipped or not; Parquet compresses within the file.
        let name = match self {
            FileFormat::Text { .. } => name.strip_suffix(".gz").unwrap_or(name),
            FileFormat::Parquet(_) => name,
        };
        name.strip_suffix(self.name()).is_some_and(|stem| stem.len() > 1 && stem.ends_with('.'))
    }
}

/// The default size a file is cut at (`file_size_mb`).
pub const FILE_SIZE_MB: u64 = 128;

pub struct DatasetConnector {
    objects: Arc<dyn Objects>,
    format: FileFormat,
    /// A file is cut once it holds this many bytes.
    file_bytes: u64,
}

/// Entity names become folder names: letters, digits, `_`, `-` and `.`
/// only, and never the folder the commits keep.
fn check_entity(name: &str) -> ConnectorResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name != "_sluice"
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ConnectorError::InvalidConfig(format!("'{name}' is not a valid entity name for files")))
    }
}

impl DatasetConnector {
    /// The entity's manifest as a reader of its marks goes by: on disk,
    /// with what a killed writer left finished (when no writer holds the
    /// entity); in a bucket, where a live writer cannot be kept out, as
    /// its pending intent will leave it, without carrying it out.
    async fn marks(&self, entity: &str) -> ConnectorResult<Option<commit::Manifest>> {
        if !self.objects.exclusive() {
            return commit::settled(&*self.objects, entity).await;
        }
        match self.objects.try_lock(entity)? {
            Some(_lock) => commit::recover(&*self.objects, entity).await,
            None => commit::manifest(&*self.objects, entity).await,
        }
    }

    pub fn new(objects: Arc<dyn Objects>, format: FileFormat, file_bytes: u64) -> Self {
        DatasetConnector { objects, format, file_bytes: file_bytes.max(1) }
    }
}

#[async_trait::async_trait]
impl Destination for DatasetConnector {
    async fn check(&self) -> ConnectorResult<()> {
        self.objects.check_writable().await
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        check_entity(entity)?;
        Ok(commit::manifest(&*self.objects, entity).await?.and_then(|m| m.schema))
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult {
        check_entity(&schema.name)?;
        if mode == WriteMode::Upsert {
            return Err(ConnectorError::InvalidConfig(format!(
                "{} files take no upserts or deletes: write into a ducklake or iceberg connection for \
                 incremental_deduped and cdc_deduped",
                self.format.name()
            )));
        }
        self.objects.check_writable().await?;
        let lock = self.objects.lock(&schema.name, attempt).await?;
        let manifest = commit::recover(&*self.objects, &schema.name).await?.unwrap_or_default();
        let run = attempt.map(|a| a.run).unwrap_or_else(uuid::Uuid::now_v7);
        let w = write::DatasetWriter::new(write::Opened {
            objects: self.objects.clone(),
            format: self.format,
            file_bytes: self.file_bytes,
            schema,
            mode,
            run,
            manifest,
            lock,
        })?;
        Ok(Box::new(w))
    }

    /// Waits for an earlier attempt's writer of any entity ever locked here
    /// (a first commit perhaps not made yet), so that no mark is read
    /// while a frozen writer may still commit.
    async fn end_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        let entities = commit::locked(&*self.objects).await?;
        self.objects.wait_for_earlier(&entities, attempt).await
    }

    /// From each entity's manifest, once what a writer killed mid-commit
    /// left is finished (of an entity no writer holds).
    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        self.objects.check_writable().await?;
        let mut out = Vec::new();
        for entity in commit::manifested(&*self.objects).await? {
            if let Some(p) = self.marks(&entity).await?.and_then(|mut m| m.held.remove(stream)) {
                out.push((entity, p));
            }
        }
        Ok(out)
    }

    async fn position_of(&self, stream: &str, entity: &str) -> ConnectorResult<Option<String>> {
        check_entity(entity)?;
        Ok(self.marks(entity).await?.and_then(|mut m| m.held.remove(stream)))
    }

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        check_entity(entity)?;
        let _lock = self.objects.lock(entity, None).await?;
        let Some(mut m) = commit::recover(&*self.objects, entity).await? else { return Ok(()) };
        match position {
            Some(p) => m.held.insert(stream.to_string(), p.to_string()),
            None => m.held.remove(stream),
        };
        // A writer that opened before this goes no further.
        m.version += 1;
        let bytes = serde_json::to_vec(&m).map_err(|e| ConnectorError::Other(e.to_string()))?;
        self.objects.put(&commit::manifest_key(entity), bytes).await
    }

    fn holds_marks(&self) -> bool {
        true
    }
}
