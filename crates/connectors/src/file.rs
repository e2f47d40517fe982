//! The file connector: a directory under the file root holding one file per
//! entity, as JSON Lines (`<entity>.jsonl`) or CSV (`<entity>.csv`).
//!
//! A destination also writes `<entity>.schema.json`, the entity's fields
//! with types and primary key, so that reading the files back keeps them;
//! without it a source infers types from the first 1,000 records. Overwrite
//! and upsert write a temporary file and rename it over the old one
//! (atomic); upsert and incremental reads hold the entity in memory (files
//! are not indexed). In CSV an empty field is null, so empty strings do not
//! survive; binary values are base64 in both formats.

use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sluice_domain::connect::connector::*;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SAMPLE: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

impl Format {
    pub fn parse(s: &str) -> ConnectorResult<Self> {
        match s {
            "jsonl" | "ndjson" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            other => Err(ConnectorError::InvalidConfig(format!("format must be jsonl or csv, not '{other}'"))),
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

pub struct FileConnector {
    /// The connection's directory (`place.path`), inside the organization's,
    /// for the symbolic-link check and for messages.
    place: Confined,
    format: Format,
    /// Schemas inferred from whole files, by entity, with the file's size
    /// and time they were inferred from: a sync asks for the fields, then
    /// reads, and the file is scanned once.
    whole: std::sync::Mutex<HashMap<String, (FileVersion, EntitySchema)>>,
}

/// A file's size and modification time: a changed file is inferred again.
type FileVersion = (u64, Option<std::time::SystemTime>);

fn io(what: &str, e: std::io::Error) -> ConnectorError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ConnectorError::EntityNotFound(what.to_string()),
        _ => ConnectorError::Other(format!("{what}: {e}")),
    }
}

/// Entity names become file names: letters, digits, `_`, `-` and `.` only.
fn check_entity(name: &str) -> ConnectorResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok { Ok(()) } else { Err(ConnectorError::InvalidConfig(format!("'{name}' is not a valid file entity name"))) }
}

impl FileConnector {
    pub fn new(place: Confined, format: Format) -> Self {
        Self { place, format, whole: Default::default() }
    }

    /// A file of this connection as messages show it: under the path the
    /// user wrote, never the server's.
    fn label(&self, file: &Path) -> String {
        match file.file_name() {
            Some(n) => format!("{}/{}", self.place.label.trim_end_matches('/'), n.to_string_lossy()),
            None => self.place.label.clone(),
        }
    }

    /// The entity's data file, checked to resolve inside the organization's
    /// directory (a symbolic link placed there must not lead out).
    fn data_file(&self, entity: &str) -> ConnectorResult<PathBuf> {
        let p = self.data_path(entity);
        self.place.check_inside(&p)?;
        Ok(p)
    }

    fn data_path(&self, entity: &str) -> PathBuf {
        self.place.path.join(format!("{entity}.{}", self.format.ext()))
    }

    fn schema_path(&self, entity: &str) -> PathBuf {
        self.place.path.join(format!("{entity}.schema.json"))
    }

    fn entities(&self) -> ConnectorResult<Vec<String>> {
        let ext = format!(".{}", self.format.ext());
        let mut names: Vec<String> = fs::read_dir(&self.place.path)
            .map_err(|e| io(&format!("directory {}", self.place.label), e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(&ext)).map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The schema a sync reads with: the sidecar, else inferred from every
    /// record (off the async threads; once per file version).
    async fn whole_schema(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        check_entity(entity)?;
        let data = self.data_file(entity)?;
        let Ok(meta) = fs::metadata(&data) else { return Ok(None) };
        let version: FileVersion = (meta.len(), meta.modified().ok());
        if let Some((seen, schema)) = self.whole.lock().unwrap_or_else(|p| p.into_inner()).get(entity)
            && *seen == version
        {
            return Ok(Some(schema.clone()));
        }
        if let Some(s) = self.sidecar(entity)? {
            return Ok(Some(s));
        }
        let (what, format) = (self.label(&data), self.format);
        let fields = tokio::task::spawn_blocking(move || infer_file(&data, &what, format, None))
            .await
            .map_err(|e| ConnectorError::Other(e.to_string()))??;
        let schema = EntitySchema { name: entity.to_string(), fields };
        self.whole.lock().unwrap_or_else(|p| p.into_inner()).insert(entity.to_string(), (version, schema.clone()));
        Ok(Some(schema))
    }

    /// The schema a destination wrote beside the data, if any.
    fn sidecar(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        let sidecar = self.schema_path(entity);
        self.place.check_inside(&sidecar)?;
        Ok(fs::read_to_string(sidecar).ok().and_then(|text| serde_json::from_str::<EntitySchema>(&text).ok()))
    }

    /// The entity's schema: the sidecar if present, else inferred from a
    /// sample (discovery, previews).
    fn schema(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        check_entity(entity)?;
        let data = self.data_file(entity)?;
        if !data.exists() {
            return Ok(None);
        }
        if let Some(s) = self.sidecar(entity)? {
            return Ok(Some(s));
        }
        let fields = infer_file(&data, &self.label(&data), self.format, Some(SAMPLE))?;
        Ok(Some(EntitySchema { name: entity.to_string(), fields }))
    }
}

/// Raw records: JSON values by field name, from either format.
type RawRecord = HashMap<String, serde_json::Value>;

fn read_records(
    path: &Path,
    what: &str,
    format: Format,
    limit: Option<usize>,
) -> ConnectorResult<(Vec<String>, Vec<RawRecord>)> {
    let mut out = Vec::new();
    let names = visit_records(path, what, format, |rec| {
        if limit.is_some_and(|l| out.len() >= l) {
            return false;
        }
        out.push(rec);
        true
    })?;
    Ok((names, out))
}

/// Passes each record of `path` to `visit` until it answers `false`;
/// answers the field names (a CSV's header, else in order of appearance).
fn visit_records(
    path: &Path,
    what: &str,
    format: Format,
    mut visit: impl FnMut(RawRecord) -> bool,
) -> ConnectorResult<Vec<String>> {
    let file = File::open(path).map_err(|e| io(what, e))?;
    let mut names: Vec<String> = Vec::new();
    match format {
        Format::Jsonl => {
            for (n, line) in BufReader::new(file).lines().enumerate() {
                let line = line.map_err(|e| io(what, e))?;
                if line.trim().is_empty() {
                    continue;
                }
                let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
                    .map_err(|e| ConnectorError::Other(format!("{what} line {}: not a JSON object: {e}", n + 1)))?;
                for k in obj.keys() {
                    if !names.contains(k) {
                        names.push(k.clone());
                    }
                }
                if !visit(obj.into_iter().collect()) {
                    break;
                }
            }
        }
        Format::Csv => {
            let mut rdr = csv::ReaderBuilder::new().has_headers(true).flexible(true).from_reader(BufReader::new(file));
            names = rdr
                .headers()
                .map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?
                .iter()
                .map(str::to_string)
                .collect();
            for rec in rdr.records() {
                let rec = rec.map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?;
                let raw = names
                    .iter()
                    .zip(rec.iter())
                    .map(|(k, v)| {
                        let v = if v.is_empty() {
                            serde_json::Value::Null
                        } else {
                            serde_json::Value::String(v.to_string())
                        };
                        (k.clone(), v)
                    })
                    .collect();
                if !visit(raw) {
                    break;
                }
            }
        }
    }
    Ok(names)
}

/// Each field's type, from the records observed: the narrowest type every
/// value fits, widened as values come (integer → decimal → number, date →
/// timestamp, anything else → string). Inferred fields are nullable: a
/// file declares nothing, and an empty value may come at any row.
#[derive(Default)]
struct Inference {
    types: HashMap<String, FieldType>,
}

impl Inference {
    fn observe(&mut self, rec: &RawRecord) {
        for (name, v) in rec {
            let vt = match v {
                serde_json::Value::Null => continue,
                serde_json::Value::Bool(_) => FieldType::Boolean,
                serde_json::Value::Number(x) if x.is_i64() => FieldType::Integer,
                serde_json::Value::Number(_) => FieldType::Number,
                serde_json::Value::Object(_) => FieldType::Object,
                serde_json::Value::Array(_) => FieldType::Array,
                serde_json::Value::String(s) => infer_text(s),
            };
            let merged = match self.types.get(name) {
                None => vt,
                Some(t) => widen(*t, vt),
            };
            self.types.insert(name.clone(), merged);
        }
    }

    fn fields(&self, names: &[String]) -> Vec<Field> {
        names
            .iter()
            .map(|n| Field {
                name: n.clone(),
                field_type: self.types.get(n).copied().unwrap_or(FieldType::String),
                nullable: true,
                primary_key: false,
                native_type: None,
            })
            .collect()
    }
}

/// The narrowest type both `a` and `b` values fit.
fn widen(a: FieldType, b: FieldType) -> FieldType {
    use FieldType::*;
    match (a, b) {
        (a, b) if a == b => a,
        (Integer, Decimal) | (Decimal, Integer) => Decimal,
        (Integer | Decimal, Number) | (Number, Integer | Decimal) => Number,
        (Date, Timestamp) | (Timestamp, Date) => Timestamp,
        _ => String,
    }
}

/// Infers each field's type from the file's records, streaming: the first
/// `limit` (a sample, for discovery and previews), or every one (what a
/// sync reads, so that no value after a sample meets a column too narrow
/// for it).
fn infer_file(path: &Path, what: &str, format: Format, limit: Option<usize>) -> ConnectorResult<Vec<Field>> {
    let mut inf = Inference::default();
    let mut seen = 0;
    let names = visit_records(path, what, format, |rec| {
        if limit.is_some_and(|l| seen >= l) {
            return false;
        }
        seen += 1;
        inf.observe(&rec);
        true
    })?;
    Ok(inf.fields(&names))
}

fn infer_text(s: &str) -> FieldType {
    if s.parse::<i64>().is_ok() {
        FieldType::Integer
    } else if is_plain_decimal(s) {
        // `12.50` is exact: money must not become binary floating point.
        FieldType::Decimal
    } else if s.parse::<f64>().is_ok_and(f64::is_finite) {
        FieldType::Number
    } else if matches!(s, "true" | "false") {
        FieldType::Boolean
    } else if parse_date(s).is_some() && s.len() == 10 {
        FieldType::Date
    } else if parse_timestamp(s).is_some() {
        FieldType::Timestamp
    } else {
        FieldType::String
    }
}

/// `-12.50`, `0.5`, `3.`: digits with one point, no exponent, at most 38
/// significant digits (what every destination's exact type holds).
fn is_plain_decimal(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let Some((int, frac)) = body.split_once('.') else { return false };
    let digits = int.len() + frac.len();
    digits > 0 && digits <= 38 && int.bytes().all(|b| b.is_ascii_digit()) && frac.bytes().all(|b| b.is_ascii_digit())
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
    let file = File::open(path).map_err(|e| io(what, e))?;
    let limit = limit.unwrap_or(u64::MAX);
    let mut batch: Vec<Vec<Value>> = Vec::with_capacity(batch_size);
    let mut count = 0u64;
    let emit = |row: Vec<Value>, batch: &mut Vec<Vec<Value>>| -> bool {
        batch.push(row);
        if batch.len() >= batch_size {
            let full = std::mem::replace(batch, Vec::with_capacity(batch_size));
            return tx.blocking_send(Ok(RecordBatch { fields: fields.clone(), rows: full })).is_ok();
        }
        true
    };
    match format {
        Format::Jsonl => {
            for (n, line) in BufReader::with_capacity(1 << 20, file).lines().enumerate() {
                if count >= limit {
                    break;
                }
                let line = line.map_err(|e| io(what, e))?;
                if line.trim().is_empty() {
                    continue;
                }
                let mut obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
                    .map_err(|e| ConnectorError::Other(format!("{what} line {}: not a JSON object: {e}", n + 1)))?;
                let row = fields
                    .iter()
                    .map(|f| obj.remove(&f.name).map(|v| to_value(&v, f.field_type)).unwrap_or(Value::Null))
                    .collect();
                count += 1;
                if !emit(row, &mut batch) {
                    return Ok(());
                }
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
            let positions: Vec<Option<usize>> =
                fields.iter().map(|f| headers.iter().position(|h| h == &f.name)).collect();
            let mut rec = csv::StringRecord::new();
            while count < limit
                && rdr.read_record(&mut rec).map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?
            {
                let row = fields
                    .iter()
                    .zip(&positions)
                    .map(|(f, p)| match p.and_then(|i| rec.get(i)) {
                        None | Some("") => Value::Null,
                        Some(text) => to_value(&serde_json::Value::String(text.to_string()), f.field_type),
                    })
                    .collect();
                count += 1;
                if !emit(row, &mut batch) {
                    return Ok(());
                }
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.blocking_send(Ok(RecordBatch { fields: fields.clone(), rows: batch }));
    }
    Ok(())
}

/// A raw JSON value as a value of type `t`.
fn to_value(v: &serde_json::Value, t: FieldType) -> Value {
    use serde_json::Value as J;
    match (v, t) {
        (J::Null, _) => Value::Null,
        (J::String(s), FieldType::Binary) => B64.decode(s).map(Value::Bytes).unwrap_or(Value::String(s.clone())),
        (J::String(s), FieldType::Object | FieldType::Array) => {
            serde_json::from_str(s).map(Value::Json).unwrap_or(Value::String(s.clone()))
        }
        (J::String(s), t) => crate::sqlite::text_value(s.clone(), t),
        (J::Number(n), FieldType::Integer) => {
            n.as_i64().map(Value::Int).unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)))
        }
        (J::Number(n), FieldType::Decimal) => Value::Decimal(n.to_string()),
        (J::Number(n), FieldType::String) => Value::String(n.to_string()),
        (J::Number(n), _) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        (J::Bool(b), FieldType::String) => Value::String(b.to_string()),
        (J::Bool(b), _) => Value::Bool(*b),
        (j @ (J::Object(_) | J::Array(_)), FieldType::String) => Value::String(j.to_string()),
        (j, _) => Value::Json(j.clone()),
    }
}

/// A value as JSON for a file: decimals as strings (exact), bytes base64.
fn to_json(v: &Value) -> serde_json::Value {
    v.to_json()
}

fn to_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) | Value::Decimal(s) => s.clone(),
        Value::Json(j) => j.to_string(),
        other => match other.to_json() {
            serde_json::Value::String(s) => s,
            j => j.to_string(),
        },
    }
}

fn records_of(schema_fields: &[Field], raws: Vec<RawRecord>) -> Vec<Vec<Value>> {
    raws.into_iter()
        .map(|r| {
            schema_fields
                .iter()
                .map(|f| r.get(&f.name).map(|v| to_value(v, f.field_type)).unwrap_or(Value::Null))
                .collect()
        })
        .collect()
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

    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> ConnectorResult<Box<dyn EntityWriter>> {
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
        let rows = crate::sqlite::align(batch, &self.order);
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
    fn bulk_format(&self) -> Option<&'static str> {
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
