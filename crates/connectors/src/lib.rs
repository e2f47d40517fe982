//! Sluice's connectors, each both source and destination:
//! `postgres` (COPY in and out), `mysql` (MySQL and MariaDB), `sqlite`, and
//! `file` (CSV and JSON Lines in a directory). [`Registry`] implements the
//! domain's `ConnectorRegistry` port. The type mappings and their lossy
//! cases are in `docs/connectors.md`.

pub mod common;
pub mod file;
pub mod mysql;
pub mod postgres;
pub mod sqlite;

use serde_json::json;
use sluice_domain::connector::*;
use std::path::PathBuf;
use std::sync::Arc;

const SYNC_MODES: [&str; 4] =
    ["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"];

/// Builds connectors. File-based connectors resolve paths under `file_root`.
#[derive(Debug, Clone)]
pub struct Registry {
    file_root: PathBuf,
}

impl Registry {
    pub fn new(file_root: PathBuf) -> Self {
        Self { file_root }
    }
}

fn field(
    name: &'static str,
    t: ConfigFieldType,
    required: bool,
    credential: bool,
    default: Option<serde_json::Value>,
    description: &'static str,
) -> ConfigField {
    ConfigField { name, field_type: t, required, credential, default, description }
}

fn database_fields(default_port: i64) -> Vec<ConfigField> {
    use ConfigFieldType::*;
    vec![
        field("host", String, true, false, None, "server host name or address"),
        field("port", Integer, false, false, Some(json!(default_port)), "server port"),
        field("database", String, true, false, None, "database name"),
        field("user", String, true, false, None, "user name"),
        field("password", String, false, true, None, "password (stored encrypted; a secret reference works too)"),
    ]
}

/// The connector types and their settings.
pub fn specs() -> Vec<ConnectorSpec> {
    use ConfigFieldType::*;
    let mut pg = database_fields(5432);
    pg.push(field("schema", String, false, false, Some(json!("public")), "schema holding the tables"));
    pg.push(field("sslmode", String, false, false, Some(json!("prefer")), "disable, prefer or require"));
    vec![
        ConnectorSpec {
            connector_type: "postgres",
            title: "PostgreSQL",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: pg,
            sync_modes: SYNC_MODES.to_vec(),
            features: vec![
                "discover",
                "preview",
                "incremental",
                "copy_bulk_read",
                "copy_bulk_write",
                "atomic_overwrite",
                "upsert",
            ],
        },
        ConnectorSpec {
            connector_type: "mysql",
            title: "MySQL / MariaDB",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: database_fields(3306),
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert"],
        },
        ConnectorSpec {
            connector_type: "sqlite",
            title: "SQLite",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: vec![field("path", String, true, false, None, "database file, relative to the file root")],
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert"],
        },
        ConnectorSpec {
            connector_type: "file",
            title: "Files (CSV, JSON Lines)",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: vec![
                field("path", String, true, false, None, "directory, relative to the file root; one file per entity"),
                field("format", String, false, false, Some(json!("jsonl")), "jsonl or csv"),
            ],
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert"],
        },
    ]
}

fn required<'a>(c: &'a ResolvedConfig, key: &str) -> ConnectorResult<&'a str> {
    c.str(key).filter(|s| !s.is_empty()).ok_or_else(|| ConnectorError::InvalidConfig(format!("'{key}' is required")))
}

fn port(c: &ResolvedConfig, default: i64) -> ConnectorResult<u16> {
    let p = c.int("port").unwrap_or(default);
    u16::try_from(p)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ConnectorError::InvalidConfig(format!("port {p} is out of range")))
}

impl Registry {
    fn postgres(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<postgres::PgConnector>> {
        Ok(Arc::new(postgres::PgConnector::new(postgres::PgSettings {
            host: required(c, "host")?.to_string(),
            port: port(c, 5432)?,
            database: required(c, "database")?.to_string(),
            user: required(c, "user")?.to_string(),
            password: c.str("password").map(str::to_string),
            schema: c.str("schema").unwrap_or("public").to_string(),
            sslmode: c.str("sslmode").unwrap_or("prefer").to_string(),
        })?))
    }

    fn mysql(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<mysql::MySqlConnector>> {
        Ok(Arc::new(mysql::MySqlConnector::new(mysql::MySqlSettings {
            host: required(c, "host")?.to_string(),
            port: port(c, 3306)?,
            database: required(c, "database")?.to_string(),
            user: required(c, "user")?.to_string(),
            password: c.str("password").map(str::to_string),
        })?))
    }

    fn file(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<file::FileConnector>> {
        let dir = common::confine(&self.file_root, required(c, "path")?)?;
        Ok(Arc::new(file::FileConnector::new(dir, file::Format::parse(c.str("format").unwrap_or("jsonl"))?)))
    }

    async fn sqlite(&self, c: &ResolvedConfig, create: bool) -> ConnectorResult<Arc<sqlite::SqliteConnector>> {
        let path = common::confine(&self.file_root, required(c, "path")?)?;
        Ok(Arc::new(sqlite::SqliteConnector::open(path, create).await?))
    }
}

#[async_trait::async_trait]
impl ConnectorRegistry for Registry {
    fn specs(&self) -> Vec<ConnectorSpec> {
        specs()
    }

    async fn source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        match c.connector_type.as_str() {
            "sqlite" => Ok(self.sqlite(c, false).await?),
            "postgres" => Ok(self.postgres(c)?),
            "mysql" => Ok(self.mysql(c)?),
            "file" => Ok(self.file(c)?),
            other => Err(ConnectorError::Unsupported(format!("no connector of type '{other}'"))),
        }
    }

    async fn destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        match c.connector_type.as_str() {
            "sqlite" => Ok(self.sqlite(c, true).await?),
            "postgres" => Ok(self.postgres(c)?),
            "mysql" => Ok(self.mysql(c)?),
            "file" => Ok(self.file(c)?),
            other => Err(ConnectorError::Unsupported(format!("no connector of type '{other}'"))),
        }
    }
}
