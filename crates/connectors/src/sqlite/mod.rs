//! The SQLite connector: a database file under the file root, as source and
//! destination.
//!
//! Types: declared types map by SQLite's affinity rules with a few names of
//! our own so values keep their meaning on the way back: decimals are
//! `DECIMAL_TEXT` (text affinity, exact), timestamps `TIMESTAMP` (RFC 3339
//! text in UTC), objects `JSON_TEXT` and arrays `JSON_ARRAY_TEXT`, booleans `BOOLEAN` (0/1).
//!
//! Here: the connector, opening the file and reading the catalog. `types`:
//! declared types and the vocabulary, values as SQLite stores them.
//! `read`: the `Source` impl, stepping statements on a thread of their
//! own. `write`: the `Destination` impl and its writer.

use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

mod read;
mod types;
mod write;

pub use types::map_declared;
// Shared by every connector; kept under the paths they had here.
pub use crate::common::{align, text_value};

pub const ENGINE: &str = "sqlite";

pub struct SqliteConnector {
    /// The path as the user wrote it, for messages.
    label: String,
    /// The file, inside the organization's directory: reads open it
    /// themselves (see `read::read_rows`).
    path: std::path::PathBuf,
    pool: SqlitePool,
}

impl SqliteConnector {
    /// Opens the database at `path`; `create` makes it when missing
    /// (destinations), otherwise a missing file is `DatabaseNotFound`.
    pub async fn open(place: Confined, create: bool) -> ConnectorResult<Self> {
        let Confined { path, label, .. } = place;
        if !create && !path.exists() {
            return Err(ConnectorError::DatabaseNotFound(format!("no SQLite file at '{label}'")));
        }
        if create && let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                ConnectorError::InvalidConfig(format!("cannot create the directory of '{label}': {}", e.kind()))
            })?;
        }
        let opts = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(create)
            .busy_timeout(std::time::Duration::from_secs(30))
            .foreign_keys(false);
        let pool = SqlitePoolOptions::new().max_connections(4).acquire_timeout(CONNECT_TIMEOUT).connect_lazy_with(opts);
        Ok(Self { label, path, pool })
    }

    async fn entity_schema(&self, table: &str) -> ConnectorResult<Option<EntitySchema>> {
        let rows = sqlx::query("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?) ORDER BY cid")
            .bind(table.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| err(&e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let fields = rows
            .iter()
            .map(|r| {
                let name: String = r.get(0);
                let declared: String = r.get(1);
                let notnull: i64 = r.get(2);
                let pk: i64 = r.get(3);
                Field {
                    name,
                    field_type: map_declared(&declared),
                    nullable: notnull == 0 && pk == 0,
                    primary_key: pk > 0,
                    native_type: Some(native_tag(ENGINE, &declared)),
                }
            })
            .collect();
        Ok(Some(EntitySchema { name: table.to_string(), fields }))
    }
}

fn err(e: &sqlx::Error) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) if d.message().contains("no such table") => {
            ConnectorError::EntityNotFound(d.message().to_string())
        }
        sqlx::Error::PoolTimedOut => ConnectorError::Timeout("waiting for the SQLite file".into()),
        _ => ConnectorError::Other(db_message(e)),
    }
}
