//! The connector layer's vocabulary and ports: field types, values, record
//! batches, entity schemas, and the source/destination traits that the
//! PostgreSQL, MySQL, SQLite and file adapters implement.
//!
//! Sources are pulled batch by batch ([`RecordReader`]), so a sync holds one
//! or two batches in memory however large the table. Destinations write
//! inside a transaction that the caller commits at checkpoints
//! ([`EntityWriter::checkpoint`]); overwrite replaces the table atomically
//! at [`EntityWriter::finish`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use time::OffsetDateTime;

pub use crate::shared::record::*;

/// What to read of an entity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadRequest {
    pub entity: String,
    /// Read only records whose cursor field is at or past this value,
    /// ordered by the cursor field.
    pub cursor: Option<CursorBound>,
    /// Stop after this many records.
    pub limit: Option<u64>,
    /// Rows per batch.
    pub batch_size: usize,
    /// When neither `cursor` nor `limit` is set: the read may be split
    /// into up to this many ranges of an integer key, read at once (in one
    /// snapshot of the source) and arriving in no order. 0 or 1: one read.
    /// Sources that cannot split ignore it.
    pub ranges: usize,
    /// Read in this snapshot of the source (the one a change stream
    /// exported as it began: see [`crate::connect::changes::StreamStart`]).
    pub snapshot: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CursorBound {
    pub field: String,
    /// `None`: read everything, still ordered by the cursor.
    pub from: Option<Value>,
}

/// How a destination writes an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    Append,
    /// Replace the whole table atomically when the writer finishes.
    Overwrite,
    /// Insert or update by primary key.
    Upsert,
}

/// Counters of a writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub rows_written: u64,
    pub bytes: u64,
}

/// Failures of a connector, told apart so users can act on them. Messages
/// never contain a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectorError {
    #[error("cannot reach {0}")]
    Unreachable(String),
    /// The host answered, but refused the connection.
    #[error("connection refused by {0}")]
    Refused(String),
    /// TLS could not be set up (or a certificate did not verify).
    #[error("TLS failed: {0}")]
    Tls(String),
    /// Something answered, but not the database the connection expects.
    #[error("{0}")]
    WrongProtocol(String),
    /// The connection's target is the service's own metadata store.
    #[error("{0}")]
    MetadataStore(String),
    #[error("authentication failed: {0}")]
    AuthFailed(String),
    #[error("database not found: {0}")]
    DatabaseNotFound(String),
    #[error("entity not found: {0}")]
    EntityNotFound(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Other(String),
}

impl ConnectorError {
    /// Whether trying again later may help: the server could not be
    /// reached, or did not answer in time.
    pub fn transient(&self) -> bool {
        matches!(self, ConnectorError::Unreachable(_) | ConnectorError::Timeout(_))
    }

    pub fn code(&self) -> crate::shared::error::Code {
        use crate::shared::error::Code;
        match self {
            ConnectorError::Unreachable(_) => Code::Unreachable,
            ConnectorError::Refused(_) => Code::Refused,
            ConnectorError::Tls(_) => Code::Tls,
            ConnectorError::WrongProtocol(_) => Code::WrongProtocol,
            ConnectorError::MetadataStore(_) => Code::MetadataStore,
            ConnectorError::AuthFailed(_) => Code::AuthFailed,
            ConnectorError::DatabaseNotFound(_) => Code::DatabaseNotFound,
            ConnectorError::EntityNotFound(_) => Code::EntityNotFound,
            ConnectorError::Timeout(_) => Code::Timeout,
            ConnectorError::InvalidConfig(_) => Code::InvalidConfig,
            ConnectorError::Unsupported(_) => Code::Unsupported,
            ConnectorError::Other(_) => Code::ConnectorError,
        }
    }
}

pub type ConnectorResult<T> = std::result::Result<T, ConnectorError>;

/// A bulk format: bytes one connector writes and another loads as they
/// are, without decoding records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkFormat {
    /// PostgreSQL's binary COPY, a table's columns.
    PostgresBinary,
    /// PostgreSQL's binary COPY of a cursor read, cut on record boundaries.
    PostgresBinaryRows,
    /// CSV as Sluice's file destination writes it (PostgreSQL can emit it).
    SluiceCsv,
}

impl BulkFormat {
    pub const fn as_str(self) -> &'static str {
        match self {
            BulkFormat::PostgresBinary => "postgres-binary",
            BulkFormat::PostgresBinaryRows => "postgres-binary-rows",
            BulkFormat::SluiceCsv => "sluice-csv",
        }
    }
}

impl std::fmt::Display for BulkFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bytes in an engine's own bulk format (PostgreSQL's binary COPY), passed
/// from a source to a destination of the same engine without decoding.
#[async_trait::async_trait]
pub trait BulkStream: Send {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>>;

    /// The records in the chunks yielded so far, for streams whose chunks
    /// end on record boundaries (those of a cursor read); `None` otherwise.
    fn records(&self) -> Option<u64> {
        None
    }

    /// The greatest cursor value among the records yielded so far, for
    /// streams of a cursor read.
    fn last_cursor(&self) -> Option<Value> {
        None
    }
}

/// Pulls batches of one entity.
#[async_trait::async_trait]
pub trait RecordReader: Send {
    /// The entity's fields, in the order of every batch's rows.
    fn fields(&self) -> Arc<Vec<Field>>;
    /// The next batch, or `None` at the end.
    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>>;
}

/// A reader over rows already in memory: one batch (none when empty).
pub struct HeldRows {
    pub fields: Arc<Vec<Field>>,
    pub rows: Option<Vec<Vec<Value>>>,
}

#[async_trait::async_trait]
impl RecordReader for HeldRows {
    fn fields(&self) -> Arc<Vec<Field>> {
        self.fields.clone()
    }

    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>> {
        Ok(self.rows.take().filter(|r| !r.is_empty()).map(|rows| RecordBatch { fields: self.fields.clone(), rows }))
    }
}

#[async_trait::async_trait]
pub trait Source: Send + Sync {
    async fn check(&self) -> ConnectorResult<()>;
    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>>;
    /// # Errors
    /// `EntityNotFound` for an unknown entity; `InvalidConfig` for an
    /// unknown cursor field.
    async fn read(&self, request: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>>;

    /// The fields of one entity, without reading its records. The default
    /// opens a read of none; connectors with a catalog answer from it.
    ///
    /// # Errors
    /// `EntityNotFound` for an unknown entity.
    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let probe = self
            .read(ReadRequest { entity: entity.into(), limit: Some(0), batch_size: 1, ..Default::default() })
            .await?;
        Ok(probe.fields())
    }

    /// The entity as a bulk stream in `format`, columns in `fields`' order,
    /// when this source speaks that format; `None` otherwise. With a
    /// `cursor`, only the records at or past its value, ordered by it, in a
    /// stream that counts its records and follows the cursor (`None` when
    /// the source cannot follow that cursor's type in this format). With
    /// none, a format whose records can be cut apart may be read in up to
    /// `ranges` key ranges at once, its records then in no order.
    async fn bulk_out(
        &self,
        _entity: &str,
        _format: BulkFormat,
        _fields: &[Field],
        _cursor: Option<&CursorBound>,
        _ranges: usize,
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        Ok(None)
    }

    /// The whole of `entity` as a bulk stream in `format`, read in an
    /// exported `snapshot` (a change stream's start); `None` when the
    /// source has no such stream.
    async fn bulk_out_in_snapshot(
        &self,
        _entity: &str,
        _format: BulkFormat,
        _fields: &[Field],
        _snapshot: &str,
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        Ok(None)
    }

    /// When the oldest transaction still writing to the source began (or,
    /// with none open, now), as far as this connection can see, for a read
    /// by the timestamp field `cursor`; `None` when the source cannot tell
    /// (or the field holds no instants). Rows such a transaction commits
    /// later may carry cursor values from its start, so a cursor read is
    /// not stored past it.
    async fn write_horizon(&self, _cursor: &Field) -> ConnectorResult<Option<OffsetDateTime>> {
        Ok(None)
    }

    /// The greatest value of `cursor` in the entity: `None` when it holds
    /// no rows, or when this source cannot tell (the default). A first
    /// incremental load reads it before an unordered bulk copy, and stores
    /// it as the cursor once the copy is in: rows changed meanwhile carry
    /// greater values, and the next run reads them again.
    async fn max_cursor(&self, _entity: &str, _cursor: &Field) -> ConnectorResult<Option<Value>> {
        Ok(None)
    }

    /// The rows of an entity ordered by a key, as [`KeyRange`] orders it
    /// (text by its bytes), in the range or of the keys `read` names;
    /// `None` when this source cannot read by key (a verification then
    /// reads the whole entity and orders it itself).
    async fn read_keyed(&self, _read: &KeyedRead) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        Ok(None)
    }

    /// The least and the greatest value of the integer field `key` of
    /// `entity`; `None` when it holds no rows or this source cannot tell.
    async fn key_span(&self, _entity: &str, _key: &str) -> ConnectorResult<Option<(i64, i64)>> {
        Ok(None)
    }

    /// Checksums of the rows of `request`'s buckets, computed where the
    /// rows lie; `None` when this source cannot. Two sources of one engine
    /// give equal digests for rows whose columns, of equal types (as
    /// [`Field::native_type`] names them), hold equal values.
    async fn digests(&self, _request: &DigestRequest) -> ConnectorResult<Option<Vec<Digest>>> {
        Ok(None)
    }
}

/// What [`Source::digests`] sums: the rows of `entity` whose integer `key`
/// lies in `lo..=hi`, in buckets of `width` keys (bucket `b` holds the
/// keys from `lo + b * width`), each row hashed from `columns` in order;
/// rows whose `unless` column is set (soft-deleted) are left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestRequest {
    pub entity: String,
    pub key: String,
    pub columns: Vec<String>,
    pub unless: Option<String>,
    pub lo: i64,
    pub hi: i64,
    pub width: i64,
}

/// One bucket's rows: how many, and the sum of their 64-bit hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub bucket: i64,
    pub rows: u64,
    pub sum: i128,
}

/// What [`Source::read_keyed`] reads: every field of `entity`, ordered by
/// `range.fields`, the rows of `range`, or with `only` set, just the rows
/// of those keys (their values in `range.fields`' order).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyedRead {
    pub entity: String,
    pub range: KeyRange,
    pub only: Option<Vec<Vec<Value>>>,
    pub batch_size: usize,
}

/// Writes one entity inside a transaction.
#[async_trait::async_trait]
pub trait EntityWriter: Send {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()>;
    /// Commits what was written so far and opens the next transaction
    /// (append and upsert). Overwrite writes stay invisible until `finish`.
    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats>;
    /// Commits the rest; for overwrite, swaps the new table in atomically.
    async fn finish(self: Box<Self>) -> ConnectorResult<WriteStats>;
    /// Rolls back what is not yet committed.
    async fn abort(self: Box<Self>);

    /// The bulk format this writer can load as is, if any.
    fn bulk_format(&self) -> Option<BulkFormat> {
        None
    }

    /// Loads a bulk stream (in [`EntityWriter::bulk_format`]); answers the
    /// rows loaded. With `max_records`, stops at the first chunk boundary
    /// at or past that many records (of a stream that counts them), so that
    /// the caller can checkpoint and call again; 0 means the stream ended.
    async fn write_bulk(&mut self, _stream: &mut dyn BulkStream, _max_records: Option<u64>) -> ConnectorResult<u64> {
        Err(ConnectorError::Unsupported("this destination loads no bulk format".into()))
    }

    /// Deletes the rows with the keys of `keys` (its fields the entity's
    /// primary key), in the writer's transaction.
    async fn delete(&mut self, _keys: &RecordBatch) -> ConnectorResult<()> {
        Err(ConnectorError::Unsupported("this destination applies no deletes".into()))
    }

    /// Sets the fields of `rows` but its key fields (the entity's primary
    /// key, which `rows` holds too) on the rows with those keys, in the
    /// writer's transaction; other fields keep their values.
    async fn update(&mut self, _rows: &RecordBatch) -> ConnectorResult<()> {
        Err(ConnectorError::Unsupported("this destination updates no rows in place".into()))
    }

    /// Removes the entity's rows whose key is in `range` (every row, for
    /// [`KeyRange::all`]) in the writer's transaction (readers see them
    /// until it commits); with `soft_column`, sets that column to the
    /// current time on those rows where it is null instead. A copy of the
    /// range that follows then leaves exactly the source's rows.
    async fn clear(&mut self, _range: &KeyRange, _soft_column: Option<&str>) -> ConnectorResult<()> {
        Err(ConnectorError::Unsupported("this destination deletes no rows".into()))
    }

    /// Whether a checkpoint is due now, where the writer decides (`None`:
    /// the engine's count of rows decides). A writer of files answers
    /// `true` once a file is cut, so that each commit publishes whole files.
    fn wants_checkpoint(&self) -> Option<bool> {
        None
    }

    /// Records, in the writer's transaction (so with the rows it commits),
    /// that the entity holds change stream `stream` up to `position` (see
    /// [`Destination::positions`]).
    async fn hold_position(&mut self, _stream: &str, _position: &str) -> ConnectorResult<()> {
        Err(ConnectorError::Unsupported("this destination holds no change stream positions".into()))
    }
}

/// A range of an entity's primary key, for [`EntityWriter::clear`]: the
/// keys after `after` (from the first when `None`) up to and including
/// `upto` (to the last when `None`), compared as rows of the key's fields
/// in order, text by its bytes (as PostgreSQL's `C` collation does), so
/// that every engine draws the same range.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyRange {
    /// The key's fields, as the destination names them.
    pub fields: Vec<Field>,
    pub after: Option<Vec<Value>>,
    pub upto: Option<Vec<Value>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange::default()
    }
}

/// Which attempt of which run writes: what a destination marks its
/// sessions with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub run: uuid::Uuid,
    pub number: u32,
}

impl Attempt {
    /// The mark of this attempt's sessions (63 characters at most: it fits
    /// PostgreSQL's `application_name`).
    pub fn mark(&self) -> String {
        format!("sluice:{}:{}", self.run.simple(), self.number)
    }

    /// What every attempt of this run's marks begin with.
    pub fn run_mark(&self) -> String {
        format!("sluice:{}:", self.run.simple())
    }
}

/// What opening an entity's writer answers.
pub type WriterResult = ConnectorResult<Box<dyn EntityWriter>>;

#[async_trait::async_trait]
pub trait Destination: Send + Sync {
    async fn check(&self) -> ConnectorResult<()>;
    /// The destination's schema of `entity`, if it exists.
    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>>;
    /// Creates the entity from `schema` or adds the columns it lacks, then
    /// opens a writer.
    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> WriterResult {
        self.open_for(schema, mode, None).await
    }
    /// [`Destination::open`] for `attempt`, whose sessions a destination
    /// that can marks as its own (see [`Destination::end_earlier_attempts`]).
    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult;
    /// Ends the sessions that earlier attempts of `attempt`'s run still
    /// hold here (a frozen worker's open transaction keeps its locks, and
    /// the attempt that took the run over would wait on them); answers how
    /// many it ended. A destination that cannot tell them answers 0.
    async fn end_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        let _ = attempt;
        Ok(0)
    }
    /// Whether a fresh table here (an [`WriteMode::Overwrite`] writer) can
    /// load a source's bulk stream: only then does a first incremental
    /// load open one, since opening it has effects of its own (a table
    /// made and dropped) that a destination without that path should not
    /// pay.
    fn loads_in_bulk(&self) -> bool {
        false
    }
    /// How many entities may be written here at once: a run syncs up to
    /// this many of its entities concurrently (and no more than the
    /// service's setting). A database that takes one writer at a time
    /// (SQLite) answers 1.
    fn concurrent_writers(&self) -> usize {
        usize::MAX
    }
    /// Whether each entity here commits the marks of a run that writes
    /// rows (a cursor, the run that finished it) with the rows, through
    /// [`EntityWriter::hold_position`] under the flow's stream: a retry
    /// then resumes from what the destination holds, rather than from the
    /// metadata store's cursor, which is stored after the commit and can
    /// lag it by a kill. Where rows cannot be written twice harmlessly (an
    /// append into files) this is what keeps them once.
    fn holds_marks(&self) -> bool {
        false
    }
    /// The position of change stream `stream` each entity here holds, as
    /// its writers committed them ([`EntityWriter::hold_position`]): where
    /// the stream resumes, whatever happened to the run that wrote them.
    async fn positions(&self, _stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        Err(ConnectorError::Unsupported("this destination holds no change stream positions".into()))
    }

    /// The position of change stream `stream` that `entity` holds, if any
    /// (one entity of [`Destination::positions`]).
    async fn position_of(&self, stream: &str, entity: &str) -> ConnectorResult<Option<String>> {
        Ok(self.positions(stream).await?.into_iter().find(|(e, _)| e == entity).map(|(_, p)| p))
    }

    /// Moves the position `entity` holds of change stream `stream` (it
    /// holds one) to `position`, or forgets it (`None`: the entity is
    /// copied again, as new to the stream).
    async fn move_position(&self, _stream: &str, _entity: &str, _position: Option<&str>) -> ConnectorResult<()> {
        Err(ConnectorError::Unsupported("this destination holds no change stream positions".into()))
    }
}

/// Whether a connector type reads, writes, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    Source,
    Destination,
    Both,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Source => "source",
            Capability::Destination => "destination",
            Capability::Both => "both",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "source" => Some(Capability::Source),
            "destination" => Some(Capability::Destination),
            "both" => Some(Capability::Both),
            _ => None,
        }
    }

    pub fn reads(self) -> bool {
        matches!(self, Capability::Source | Capability::Both)
    }

    pub fn writes(self) -> bool {
        matches!(self, Capability::Destination | Capability::Both)
    }
}

/// The type of a configuration field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigFieldType {
    String,
    Integer,
    Boolean,
    /// A JSON object of settings (a lake's `catalog`).
    Object,
}

/// One configuration field of a connector type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigField {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub field_type: ConfigFieldType,
    pub required: bool,
    /// A credential: stored encrypted, read back as `***`.
    pub credential: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    pub description: &'static str,
}

impl ConfigField {
    /// A string setting without a default or a description.
    pub const fn string(name: &'static str, credential: bool, required: bool) -> Self {
        ConfigField { name, field_type: ConfigFieldType::String, required, credential, default: None, description: "" }
    }
}

/// What a connection of a type takes when one of its settings has a given
/// value, in place of the type's modes and features (a `file` connection
/// of `format: parquet` writes folders of files, which take no upserts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub key: &'static str,
    pub value: &'static str,
    pub sync_modes: Vec<&'static str>,
    pub features: Vec<&'static str>,
}

/// A connector type as `/v1/connectors/capabilities` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConnectorSpec {
    #[serde(rename = "type")]
    pub connector_type: &'static str,
    pub title: &'static str,
    pub capabilities: Vec<Capability>,
    pub config_fields: Vec<ConfigField>,
    pub sync_modes: Vec<&'static str>,
    pub features: Vec<&'static str>,
    /// What some settings change (the first that matches applies).
    #[serde(skip)]
    pub variants: Vec<Variant>,
}

impl ConnectorSpec {
    /// The spec of a connection of this type with `config`.
    pub fn with_config(&self, config: &BTreeMap<String, serde_json::Value>) -> ConnectorSpec {
        let mut spec = self.clone();
        if let Some(v) = self.variants.iter().find(|v| config.get(v.key).and_then(|x| x.as_str()) == Some(v.value)) {
            spec.sync_modes = v.sync_modes.clone();
            spec.features = v.features.clone();
        }
        spec
    }

    pub fn credential_fields(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.config_fields.iter().filter(|f| f.credential).map(|f| f.name)
    }

    /// Checks a merged configuration (connection config over integration
    /// credentials): required fields present, known fields of the right type.
    pub fn validate(&self, config: &BTreeMap<String, serde_json::Value>) -> Vec<crate::FieldError> {
        let mut errors = Vec::new();
        for f in &self.config_fields {
            match config.get(f.name) {
                None | Some(serde_json::Value::Null) if f.required && f.default.is_none() => {
                    errors.push(crate::FieldError::new(format!("config.{}", f.name), "is required"))
                }
                None | Some(serde_json::Value::Null) => {}
                Some(v) => {
                    let ok = match f.field_type {
                        ConfigFieldType::String => v.is_string(),
                        ConfigFieldType::Integer => {
                            v.as_i64().is_some() || v.as_str().is_some_and(|s| s.parse::<i64>().is_ok())
                        }
                        ConfigFieldType::Boolean => v.is_boolean(),
                        ConfigFieldType::Object => v.is_object(),
                    };
                    if !ok {
                        errors.push(crate::FieldError::new(
                            format!("config.{}", f.name),
                            match f.field_type {
                                ConfigFieldType::Integer => "must be an integer",
                                ConfigFieldType::String => "must be a string",
                                ConfigFieldType::Boolean => "must be a boolean",
                                ConfigFieldType::Object => "must be an object",
                            },
                        ));
                    }
                }
            }
        }
        for k in config.keys() {
            if !self.config_fields.iter().any(|f| f.name == k) {
                errors.push(crate::FieldError::new(
                    format!("config.{k}"),
                    format!("is not a setting of {}", self.connector_type),
                ));
            }
        }
        errors
    }
}

/// A connection's settings with every secret resolved, handed to a
/// connector. `Debug` hides credential values.
#[derive(Clone, PartialEq)]
pub struct ResolvedConfig {
    pub connector_type: String,
    pub values: BTreeMap<String, serde_json::Value>,
    pub credential_keys: Vec<String>,
    /// The organization whose connection this is: file-based connectors
    /// resolve paths inside its own directory. `None` only in tools and
    /// tests that drive connectors directly.
    pub org: Option<crate::shared::ids::OrgId>,
}

impl ResolvedConfig {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.values.get(key).and_then(|v| v.as_str())
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.values.get(key).and_then(|v| v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok())))
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.values.get(key).and_then(|v| v.as_bool())
    }
}

impl fmt::Debug for ResolvedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: BTreeMap<&String, String> = self
            .values
            .iter()
            .map(|(k, v)| (k, if self.credential_keys.contains(k) { "***".to_string() } else { v.to_string() }))
            .collect();
        f.debug_struct("ResolvedConfig").field("type", &self.connector_type).field("values", &shown).finish()
    }
}

/// The prefix of the metadata database's comment that carries the
/// service's instance id: the store writes it, connectors refuse a database
/// that shows it.
pub const INSTANCE_MARK: &str = "sluice-instance:";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::integration::tests::spec;
    use serde_json::json;

    #[test]
    fn timestamps_parse_in_the_shapes_users_send() {
        let want = time::macros::datetime!(2026-01-02 03:04:05 UTC);
        for s in ["2026-01-02T03:04:05Z", "2026-01-02T05:04:05+02:00", "2026-01-02 03:04:05", "2026-01-02T03:04:05"] {
            assert_eq!(parse_timestamp(s), Some(want), "{s}");
        }
        assert_eq!(parse_timestamp("2026-01-02T03:04:05.250Z").unwrap().millisecond(), 250);
        // The common shape's own path agrees with the general parsers.
        for s in [
            "2026-01-02 03:04:05.123456789Z",
            "2026-01-02T03:04:05.000001Z",
            "0001-01-01T00:00:00Z",
            "2024-02-29T23:59:59.5Z",
        ] {
            let general =
                time::OffsetDateTime::parse(&s.replacen(' ', "T", 1), &time::format_description::well_known::Rfc3339);
            assert_eq!(parse_timestamp(s), general.ok(), "{s}");
        }
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "12",
            "2026-02-30T00:00:00Z",
            "2026-01-02T24:00:00Z",
            "2026-01-02T03:04:05.Z",
            "2026-01-0xT03:04:05Z",
            "+026-01-02T03:04:05Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
        assert_eq!(format_timestamp(want), "2026-01-02T03:04:05.000000Z");
    }

    #[test]
    fn values_compare_by_meaning() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_values(&Value::Int(2), &Value::Decimal("10.5".into())), Some(Less));
        assert_eq!(compare_values(&Value::Null, &Value::Int(0)), Some(Less));
        let t = |s| Value::Timestamp(parse_timestamp(s).unwrap());
        assert_eq!(compare_values(&t("2026-01-01T00:00:00+01:00"), &t("2025-12-31T23:30:00Z")), Some(Less));
        assert_eq!(compare_values(&Value::String("b".into()), &Value::String("a".into())), Some(Greater));
        assert_eq!(compare_values(&Value::String("1".into()), &Value::Bool(true)), None);
    }

    #[test]
    fn values_render_as_json_without_losing_exactness() {
        assert_eq!(Value::Decimal("12.50".into()).to_json(), json!("12.50"));
        assert_eq!(Value::Int(i64::MAX).to_json(), json!(i64::MAX));
        assert_eq!(Value::Float(f64::NAN).to_json(), json!(null));
        assert_eq!(Value::Bytes(vec![0, 255]).to_json(), json!("AP8="));
        assert_eq!(Value::Date(time::macros::date!(2026 - 02 - 28)).to_json(), json!("2026-02-28"));
    }

    #[test]
    fn configs_are_checked_against_the_spec() {
        let ok: BTreeMap<String, serde_json::Value> =
            [("host".to_string(), json!("db")), ("port".into(), json!(5433))].into();
        assert!(spec().validate(&ok).is_empty());
        let bad: BTreeMap<String, serde_json::Value> =
            [("port".to_string(), json!("x")), ("hots".into(), json!("db"))].into();
        let fields: Vec<String> = spec().validate(&bad).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["config.host", "config.port", "config.hots"]);
        assert_eq!(spec().credential_fields().collect::<Vec<_>>(), ["password"]);
    }

    #[test]
    fn resolved_configs_hide_credentials_in_debug() {
        let c = ResolvedConfig {
            connector_type: "postgres".into(),
            values: [("password".to_string(), json!("hunter2")), ("host".into(), json!("db"))].into(),
            credential_keys: vec!["password".into()],
            org: None,
        };
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && d.contains("db"), "{d}");
    }
}
