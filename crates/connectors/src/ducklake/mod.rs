//! DuckLake tables, written natively: Parquet files (the dataset's writer)
//! into the data path, then one transaction of the catalog's database
//! (SQLite or PostgreSQL) that adds the snapshot, the files, and the marks
//! the flow commits with its rows. A reader sees the snapshot before or
//! the one after, never part of one, and a retry resumes from the marks
//! the catalog holds. No DuckDB is linked: the catalog is plain SQL tables
//! (`catalog`), what DuckDB 1.5's `ducklake` extension reads and writes
//! (format 1.0).
//!
//! Files are named `sluice-<version>-<uuid>.parquet`, `version` the
//! table's writer version when the writer opened (see `catalog`'s
//! `sluice_ducklake_writers`): a writer that opens raises it, so that an
//! earlier one (a frozen process) commits nothing more, then removes the
//! files earlier versions wrote that no snapshot names (a killed attempt's).

use crate::dataset::objects::Objects;
use catalog::{Db, int, text};
use sluice_domain::connect::connector::*;
use std::sync::Arc;

pub mod catalog;
pub mod keys;
mod read;
pub mod stats;
mod write;

/// One column of a table, as its catalog holds it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub id: i64,
    pub name: String,
    pub ty: String,
    pub nullable: bool,
    pub order: i64,
}

/// A table as its catalog holds it now.
#[derive(Debug, Clone)]
pub struct Table {
    pub id: i64,
    /// Its folder's key under the data path (`main/orders/`).
    pub folder: String,
    pub columns: Vec<Column>,
}

/// A DuckLake destination.
pub struct DuckLake {
    db: Db,
    objects: Arc<dyn Objects>,
    /// The data path as the catalog records it (an absolute folder, or
    /// an `s3://` URL), ending in `/`.
    data_path: String,
    schema: String,
    file_bytes: u64,
    /// How long snapshots are kept (`None` or 0: every one).
    retention_hours: Option<i64>,
    ready: tokio::sync::OnceCell<()>,
}

/// The DuckLake type Sluice writes a field as.
pub fn lake_type(f: &Field) -> String {
    match f.field_type {
        FieldType::Integer => "int64".into(),
        FieldType::Number => "float64".into(),
        FieldType::Decimal => match crate::parquet::precision_of(f) {
            Some((p, s)) => format!("decimal({p},{s})"),
            None => "varchar".into(),
        },
        FieldType::Boolean => "boolean".into(),
        FieldType::Timestamp => "timestamptz".into(),
        FieldType::Date => "date".into(),
        FieldType::String => "varchar".into(),
        FieldType::Object | FieldType::Array => "json".into(),
        FieldType::Binary => "blob".into(),
    }
}

/// A DuckLake column as a Sluice field.
pub fn field_of(c: &Column) -> Field {
    let t = c.ty.as_str();
    let field_type = match t {
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64" | "hugeint" => {
            FieldType::Integer
        }
        "float32" | "float64" => FieldType::Number,
        "boolean" => FieldType::Boolean,
        "timestamptz" | "timestamp" | "timestamp_us" | "timestamp_ms" | "timestamp_s" | "timestamp_ns" => {
            FieldType::Timestamp
        }
        "date" => FieldType::Date,
        "json" => FieldType::Object,
        "blob" => FieldType::Binary,
        t if t.starts_with("decimal") => FieldType::Decimal,
        _ => FieldType::String,
    };
    let mut f = Field::new(&c.name, field_type);
    f.nullable = c.nullable;
    f.native_type = Some(format!("ducklake:{t}"));
    f
}

/// Whether a column of type `from` may become `to` (DuckLake's widenings
/// Sluice makes: a wider integer or float).
pub fn widens(from: &str, to: &str) -> bool {
    let ints = ["int8", "int16", "int32", "int64"];
    let uints = ["uint8", "uint16", "uint32"];
    match (ints.iter().position(|t| *t == from), ints.iter().position(|t| *t == to)) {
        (Some(a), Some(b)) => return a < b,
        (None, Some(b)) => return uints.iter().position(|t| *t == from).is_some_and(|a| a < b),
        _ => {}
    }
    from == "float32" && to == "float64"
}

/// Table names become folder names: letters, digits, `_`, `-` and `.`.
fn check_entity(name: &str) -> ConnectorResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ConnectorError::InvalidConfig(format!("'{name}' is not a valid DuckLake table name for Sluice")))
    }
}

/// A folder the catalog records (`path`, relative to `under` or not) as a
/// key under the data path.
fn folder_key(data_path: &str, under: &str, path: &str, relative: bool) -> ConnectorResult<String> {
    let full = if relative { format!("{under}{path}") } else { path.to_string() };
    let key = if relative {
        full
    } else {
        full.strip_prefix(data_path)
            .map(str::to_string)
            .ok_or_else(|| ConnectorError::InvalidConfig(format!("the lake keeps '{path}' outside its data path")))?
    };
    let key = if key.ends_with('/') || key.is_empty() { key } else { format!("{key}/") };
    if key.split('/').any(|p| p == "..") {
        return Err(ConnectorError::InvalidConfig(format!("the lake's folder '{key}' leaves its data path")));
    }
    Ok(key)
}

/// The table `name` of `schema`, as the catalog holds it now (read in
/// `tx`).
async fn read_table(tx: &mut catalog::Tx, data_path: &str, schema: &str, name: &str) -> ConnectorResult<Option<Table>> {
    let sql = format!(
        "SELECT t.table_id, s.path, s.path_is_relative, t.path, t.path_is_relative FROM ducklake_table t \
         JOIN ducklake_schema s ON s.schema_id = t.schema_id AND s.end_snapshot IS NULL \
         WHERE s.schema_name = {} AND t.table_name = {} AND t.end_snapshot IS NULL",
        text(schema),
        text(name)
    );
    let rows = tx.rows(&sql).await?;
    let Some(r) = rows.into_iter().next() else { return Ok(None) };
    let id = int(&r[0]);
    let schema_folder = folder_key(data_path, "", r[1].as_deref().unwrap_or(""), int(&r[2]) == 1)?;
    let folder = folder_key(data_path, &schema_folder, r[3].as_deref().unwrap_or(""), int(&r[4]) == 1)?;
    let rows = tx
        .rows(&format!(
            "SELECT column_id, column_name, column_type, nulls_allowed, column_order FROM ducklake_column \
             WHERE table_id = {id} AND end_snapshot IS NULL AND parent_column IS NULL ORDER BY column_order"
        ))
        .await?;
    let columns = rows
        .into_iter()
        .map(|r| Column {
            id: int(&r[0]),
            name: r[1].clone().unwrap_or_default(),
            ty: r[2].clone().unwrap_or_default(),
            nullable: int(&r[3]) != 0,
            order: int(&r[4]),
        })
        .collect();
    Ok(Some(Table { id, folder, columns }))
}

impl DuckLake {
    pub fn new(db: Db, objects: Arc<dyn Objects>, data_path: String, schema: String, file_bytes: u64) -> Self {
        let data_path = if data_path.ends_with('/') { data_path } else { format!("{data_path}/") };
        DuckLake {
            db,
            objects,
            data_path,
            schema,
            file_bytes: file_bytes.max(1),
            retention_hours: None,
            ready: Default::default(),
        }
    }

    /// Snapshots older than `hours` are expired by the writers (0: none).
    pub fn with_retention(mut self, hours: i64) -> Self {
        self.retention_hours = Some(hours).filter(|h| *h > 0);
        self
    }

    /// The catalog made (where new) and checked, once.
    async fn ready(&self) -> ConnectorResult<()> {
        self.ready
            .get_or_try_init(|| async {
                self.db.init(&self.data_path).await?;
                let recorded = self.db.data_path().await?.unwrap_or_default();
                let norm = |p: &str| p.trim_end_matches('/').to_string();
                if !recorded.is_empty() && norm(&recorded) != norm(&self.data_path) {
                    return Err(ConnectorError::InvalidConfig(format!(
                        "the catalog's data path is '{recorded}', not this connection's data_path"
                    )));
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// The folder a new table of the schema is given (the schema's own, if
    /// it has one already).
    async fn new_folder(&self, tx: &mut catalog::Tx, name: &str) -> ConnectorResult<String> {
        let rows = tx
            .rows(&format!(
                "SELECT path, path_is_relative FROM ducklake_schema WHERE schema_name = {} AND end_snapshot IS NULL",
                text(&self.schema)
            ))
            .await?;
        let schema_folder = match rows.first() {
            Some(r) => folder_key(&self.data_path, "", r[0].as_deref().unwrap_or(""), int(&r[1]) == 1)?,
            None => format!("{}/", self.schema),
        };
        Ok(format!("{schema_folder}{name}/"))
    }

    /// The marks of `stream` each table of the schema holds.
    async fn marks(&self, stream: &str, entity: Option<&str>) -> ConnectorResult<Vec<(String, String)>> {
        let only = entity.map(|e| format!(" AND t.table_name = {}", text(e))).unwrap_or_default();
        let rows = self
            .db
            .rows(&format!(
                "SELECT t.table_name, m.position FROM sluice_ducklake_marks m \
                 JOIN ducklake_table t ON t.table_id = m.table_id AND t.end_snapshot IS NULL \
                 JOIN ducklake_schema s ON s.schema_id = t.schema_id AND s.end_snapshot IS NULL \
                 WHERE m.stream = {} AND s.schema_name = {}{only}",
                text(stream),
                text(&self.schema)
            ))
            .await?;
        Ok(rows.into_iter().filter_map(|r| Some((r[0].clone()?, r[1].clone()?))).collect())
    }
}

#[async_trait::async_trait]
impl Destination for DuckLake {
    async fn check(&self) -> ConnectorResult<()> {
        self.ready().await?;
        self.objects.check_writable().await
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        self.ready().await?;
        let mut tx = self.db.begin().await?;
        let t = read_table(&mut tx, &self.data_path, &self.schema, entity).await?;
        tx.commit().await?;
        let Some(t) = t else { return Ok(None) };
        Ok(Some(EntitySchema { name: entity.to_string(), fields: t.columns.iter().map(field_of).collect() }))
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult {
        check_entity(&schema.name)?;
        self.ready().await?;
        self.objects.check_writable().await?;
        let run = attempt.map(|a| a.run).unwrap_or_else(uuid::Uuid::now_v7);
        let w = write::LakeWriter::open(self, schema, mode, run).await?;
        Ok(Box::new(w))
    }

    /// Fences the writers earlier attempts of the run opened (a frozen
    /// process's): they commit nothing from now on.
    async fn end_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        self.ready().await?;
        let mut tx = self.db.begin().await?;
        let n = tx
            .exec(&format!(
                "UPDATE sluice_ducklake_writers SET version = version + 1 WHERE run = {}",
                text(&attempt.run.to_string())
            ))
            .await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        self.ready().await?;
        self.marks(stream, None).await
    }

    async fn position_of(&self, stream: &str, entity: &str) -> ConnectorResult<Option<String>> {
        self.ready().await?;
        Ok(self.marks(stream, Some(entity)).await?.into_iter().next().map(|(_, p)| p))
    }

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        self.ready().await?;
        let mut tx = self.db.begin().await?;
        let Some(t) = read_table(&mut tx, &self.data_path, &self.schema, entity).await? else { return Ok(()) };
        let sql = match position {
            Some(p) => format!(
                "INSERT INTO sluice_ducklake_marks VALUES ({}, {}, {}) ON CONFLICT (table_id, stream) \
                 DO UPDATE SET position = excluded.position",
                t.id,
                text(stream),
                text(p)
            ),
            None => {
                format!("DELETE FROM sluice_ducklake_marks WHERE table_id = {} AND stream = {}", t.id, text(stream))
            }
        };
        tx.exec(&sql).await?;
        // A writer that opened before this goes no further.
        tx.exec(&format!(
            "UPDATE sluice_ducklake_writers SET version = version + 1 WHERE entity = {}",
            text(&format!("{}.{entity}", self.schema))
        ))
        .await?;
        tx.commit().await
    }

    fn holds_marks(&self) -> bool {
        true
    }
}
