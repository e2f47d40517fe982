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
//!
//! Appends, and every write that holds a change stream position, commit
//! through the entity's manifest (`manifest`), so that a writer killed at
//! any instant leaves the entity as its last commit left it.
//!
//! Here: the connector, its files and the schema of an entity. `formats`:
//! JSON Lines and CSV records, and values from and to them. `infer`: field
//! types inferred from records. `manifest`: commits, positions and the
//! writer lock. `read`: the `Source` impl. `write`: the `Destination` impl
//! and its writer (with the changes CDC applies, on the upsert map).

use crate::common::*;
use sluice_domain::connect::connector::*;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

mod formats;
mod infer;
mod manifest;
mod read;
mod write;

pub use formats::Format;
pub(crate) use formats::{csv_header_line, encode};
pub(crate) use infer::{SAMPLE, infer_file, widen};
pub(crate) use read::each_record;

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
