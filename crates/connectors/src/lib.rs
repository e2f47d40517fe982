//! Sluice's connectors, each both source and destination:
//! `postgres` (COPY in and out), `mysql` (MySQL and MariaDB), `sqlite`, and
//! `file` (CSV and JSON Lines in a directory; Parquet, a folder per entity,
//! through `dataset`). [`Registry`] implements the
//! domain's `ConnectorRegistry` port. The type mappings and their lossy
//! cases are in `docs/connectors.md`.

pub mod common;
pub mod dataset;
pub mod ducklake;
pub mod file;
pub mod mysql;
pub mod parquet;
pub mod parquet_read;
pub mod postgres;
pub mod sqlite;

use serde_json::json;
use sluice_domain::connect::connector::*;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SYNC_MODES: [&str; 4] =
    ["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"];
/// What a destination of plain files (a folder of Parquet files) takes.
const APPEND_MODES: [&str; 3] = ["full_refresh_overwrite", "full_refresh_append", "incremental_append"];
/// A source that captures changes from its log offers these too (any
/// destination takes them).
const CDC_MODES: [&str; 2] = ["cdc_deduped", "cdc_append"];

/// Builds connectors. File-based connectors resolve paths under `file_root`.
///
/// Connectors to database servers are kept and shared while they are in
/// use, so that runs, previews and discoveries of one connection reuse one
/// bounded pool of connections per tokio runtime (the worker's, and each
/// HTTP worker thread's) instead of opening their own: a warm worker
/// starts a run without connecting, and a busy organization cannot open an
/// unbounded number of connections to its source.
///
/// File-based connections of an organization live in its own directory,
/// `<file root>/<organization id>/`, and no connection may reach the
/// service's own metadata store ([`MetadataStore`]).
#[derive(Debug, Clone)]
pub struct Registry {
    file_root: PathBuf,
    metadata: MetadataStore,
    postgres: Arc<Shared<postgres::PgConnector>>,
    mysql: Arc<Shared<mysql::MySqlConnector>>,
    ducklake: Arc<Shared<ducklake::DuckLake>>,
}

/// What tells the service's own metadata store apart, however a connection
/// spells its address: the instance id written into it, and for SQLite its
/// file.
#[derive(Debug, Clone, Default)]
pub struct MetadataStore {
    pub instance_id: Option<String>,
    pub sqlite_file: Option<PathBuf>,
}

impl Registry {
    pub fn new(file_root: PathBuf) -> Self {
        Self {
            file_root,
            metadata: MetadataStore::default(),
            postgres: Arc::default(),
            mysql: Arc::default(),
            ducklake: Arc::default(),
        }
    }

    /// Refuses every connection to `store`.
    pub fn guarding(mut self, store: MetadataStore) -> Self {
        self.metadata = store;
        self
    }

    /// An organization's own directory (the root itself for tools that
    /// drive connectors without one).
    fn org_dir(&self, c: &ResolvedConfig) -> PathBuf {
        match c.org {
            Some(org) => self.file_root.join(org.to_string()),
            None => self.file_root.clone(),
        }
    }

    fn refused() -> ConnectorError {
        ConnectorError::MetadataStore(
            "this connection leads to Sluice's own metadata store, which no connection may use".into(),
        )
    }

    /// Refuses a PostgreSQL database that carries this service's instance
    /// id; a database found clear is not asked again.
    async fn guard_pg(&self, pg: &postgres::PgConnector) -> ConnectorResult<()> {
        use std::sync::atomic::Ordering;
        let Some(id) = &self.metadata.instance_id else { return Ok(()) };
        if pg.cleared.load(Ordering::Relaxed) {
            return Ok(());
        }
        if pg.instance_marks(INSTANCE_MARK).await?.iter().any(|m| m == id) {
            return Err(Self::refused());
        }
        pg.cleared.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Refuses the metadata store's SQLite file under any name (a link to
    /// it, or a hard link: the same file on the same device), and any file
    /// with more than one link.
    fn guard_sqlite(&self, path: &std::path::Path) -> ConnectorResult<()> {
        use std::os::unix::fs::MetadataExt;
        if let (Some(store), Ok(a)) = (&self.metadata.sqlite_file, std::fs::metadata(path))
            && let Ok(b) = std::fs::metadata(store)
            && a.dev() == b.dev()
            && a.ino() == b.ino()
        {
            return Err(Self::refused());
        }
        // SQLite writes its file in place: a hard link planted in the
        // organization's directory would write the file it names.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.nlink() != 1) {
            return Err(ConnectorError::InvalidConfig(
                "the database file has more than one link (a hard link to it was made): refused, since a file \
                 written in place must be the organization's own"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// How long creating or changing a connection waits to see whether its
/// database is the metadata store.
const CHECK_REACH: Duration = Duration::from_secs(3);

/// How long a shared connector is kept after its last use. Its pool closes
/// idle connections sooner (after a minute).
const SHARED_IDLE: Duration = Duration::from_secs(600);
/// At most this many shared connectors of one type; the least recently used
/// goes first.
const SHARED_MAX: usize = 256;

/// Connectors keyed by a digest of their whole resolved configuration: a
/// changed setting or credential is another key, so a rotated password
/// never reuses connections opened with the old one. Only digests are kept
/// as keys (this type's `Debug` shows a count).
struct Shared<T> {
    map: Mutex<HashMap<String, (Instant, Arc<T>)>>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self { map: Mutex::default() }
    }
}

impl<T> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.map.lock().map(|m| m.len()).unwrap_or(0);
        write!(f, "Shared({n} connectors)")
    }
}

impl<T> Shared<T> {
    fn get_or(&self, c: &ResolvedConfig, build: impl FnOnce() -> ConnectorResult<T>) -> ConnectorResult<Arc<T>> {
        // Per runtime: a pool's connections are sockets of the runtime that
        // opened them, and die with it. The HTTP server's worker threads
        // each run a runtime that stops with the server, while the run in
        // progress goes on to its end on the main one: a connection opened
        // by a request (a test, a discovery) must not serve that run.
        let runtime = tokio::runtime::Handle::try_current().map(|h| h.id().to_string()).unwrap_or_default();
        let key = format!("{runtime}:{}", config_key(c));
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, (used, _)| now.duration_since(*used) < SHARED_IDLE);
        if let Some((used, t)) = map.get_mut(&key) {
            *used = now;
            return Ok(t.clone());
        }
        let t = Arc::new(build()?);
        if map.len() >= SHARED_MAX
            && let Some(oldest) = map.iter().min_by_key(|(_, (used, _))| *used).map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(key, (now, t.clone()));
        Ok(t)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

/// A digest of the type and every setting (the map is ordered, so equal
/// configurations serialize alike).
fn config_key(c: &ResolvedConfig) -> String {
    let mut buf = c.connector_type.clone().into_bytes();
    buf.push(0);
    buf.extend_from_slice(&serde_json::to_vec(&c.values).unwrap_or_default());
    sluice_domain::shared::secret::sha256_hex(&buf)
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

/// `file_size_mb`, of every connection that writes a dataset's files.
fn file_size_field() -> ConfigField {
    let about = "Parquet: a file is cut once it holds this many megabytes";
    field("file_size_mb", ConfigFieldType::Integer, false, false, Some(json!(dataset::FILE_SIZE_MB)), about)
}

fn database_fields(default_port: i64) -> Vec<ConfigField> {
    use ConfigFieldType::*;
    vec![
        field("host", String, true, false, None, "server host name or address"),
        field("port", Integer, false, false, Some(json!(default_port)), "server port"),
        field("database", String, true, false, None, "database name"),
        field("user", String, true, false, None, "user name"),
        field("password", String, false, true, None, "password (stored encrypted; a secret reference works too)"),
        field(
            "allow_cleartext_password",
            Boolean,
            false,
            false,
            Some(json!(false)),
            "send the password to a server that asks for it in clear text over a connection that is not encrypted \
             (otherwise the connection fails and nothing is sent)",
        ),
    ]
}

/// The connector types and their settings.
pub fn specs() -> Vec<ConnectorSpec> {
    use ConfigFieldType::*;
    let mut pg = database_fields(5432);
    pg.push(field("schema", String, false, false, Some(json!("public")), "schema holding the tables"));
    pg.push(field(
        "sslmode",
        String,
        false,
        false,
        Some(json!("prefer")),
        "disable, prefer, require, verify-ca (the certificate chains to ssl_ca) or verify-full (and names the host)",
    ));
    pg.push(field(
        "ssl_ca",
        String,
        false,
        false,
        None,
        "PEM text of the CA certificate for verify-ca and verify-full",
    ));
    pg.push(field(
        "cdc_max_retained",
        Integer,
        false,
        false,
        Some(json!(10_u64 << 30)),
        "bytes of write-ahead log this source may keep for a flow's change stream before an activity event \
         (cdc.retained_over_budget) says so",
    ));
    pg.push(field(
        "publication",
        String,
        false,
        false,
        None,
        "an existing publication that change data capture reads through, for a role that cannot create one \
         (it must publish every table a flow captures); by default each flow makes and drops its own",
    ));
    let mut my = database_fields(3306);
    my.push(field(
        "ssl_mode",
        String,
        false,
        false,
        Some(json!("preferred")),
        "disabled, preferred, required, verify_ca (the certificate chains to ssl_ca) or verify_identity (and names the host)",
    ));
    my.push(field(
        "ssl_ca",
        String,
        false,
        false,
        None,
        "PEM text of the CA certificate for verify_ca and verify_identity",
    ));
    vec![
        ConnectorSpec {
            connector_type: "postgres",
            title: "PostgreSQL",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: pg,
            sync_modes: SYNC_MODES.iter().chain(&CDC_MODES).copied().collect(),
            features: vec![
                "discover",
                "preview",
                "incremental",
                "copy_bulk_read",
                "copy_bulk_write",
                "atomic_overwrite",
                "upsert",
                "cdc",
                "apply_changes",
            ],
            variants: vec![],
        },
        ConnectorSpec {
            connector_type: "mysql",
            title: "MySQL / MariaDB",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: my,
            sync_modes: SYNC_MODES.iter().chain(&CDC_MODES).copied().collect(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert", "cdc", "apply_changes"],
            variants: vec![],
        },
        ConnectorSpec {
            connector_type: "sqlite",
            title: "SQLite",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: vec![field("path", String, true, false, None, "database file, relative to the file root")],
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert", "apply_changes"],
            variants: vec![],
        },
        ConnectorSpec {
            connector_type: "file",
            title: "Files (CSV, JSON Lines, Parquet)",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: vec![
                field(
                    "path",
                    String,
                    true,
                    false,
                    None,
                    "directory, relative to the file root; one file per entity (Parquet: a folder per entity)",
                ),
                field("format", String, false, false, Some(json!("jsonl")), "jsonl, csv or parquet"),
                field("compression", String, false, false, None, "Parquet: zstd (default), snappy or none"),
                file_size_field(),
            ],
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "atomic_overwrite", "upsert", "apply_changes"],
            variants: vec![Variant {
                key: "format",
                value: "parquet",
                sync_modes: APPEND_MODES.to_vec(),
                features: vec!["discover", "preview", "incremental", "appends_only", "holds_marks"],
            }],
        },
        ConnectorSpec {
            connector_type: "s3",
            title: "Object storage (S3 and compatible)",
            capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
            config_fields: vec![
                field("bucket", String, true, false, None, "the bucket"),
                field("prefix", String, false, false, None, "the folder in the bucket; a folder per entity under it"),
                field("region", String, false, false, Some(json!("us-east-1")), "the bucket's region"),
                field("endpoint_url", String, false, false, None, "another S3-compatible service (MinIO, R2, Ceph)"),
                field("path_style", Boolean, false, false, None, "the bucket in the path; default: with endpoint_url"),
                field("access_key_id", String, false, true, None, "access key id"),
                field("secret_access_key", String, false, true, None, "secret access key"),
                field("format", String, false, false, Some(json!("parquet")), "parquet, csv or jsonl"),
                field(
                    "compression",
                    String,
                    false,
                    false,
                    None,
                    "Parquet: zstd (default), snappy or none; CSV and JSON Lines: gzip or none (default)",
                ),
                file_size_field(),
            ],
            sync_modes: APPEND_MODES.to_vec(),
            features: vec!["discover", "preview", "incremental", "appends_only", "holds_marks"],
            variants: vec![],
        },
        ConnectorSpec {
            connector_type: "ducklake",
            title: "DuckLake",
            capabilities: vec![Capability::Destination],
            config_fields: vec![
                field(
                    "catalog",
                    Object,
                    true,
                    false,
                    None,
                    "the catalog's database: {\"type\": \"sqlite\", \"path\": \"lake/catalog.sqlite\"} (relative to \
                     the file root) or {\"type\": \"postgres\", \"host\", \"port\", \"database\", \"user\", \
                     \"password\", \"sslmode\", \"schema\"}",
                ),
                field(
                    "data_path",
                    String,
                    true,
                    false,
                    None,
                    "where the data files go: a folder relative to the file root (lake/data), or s3://bucket/prefix/",
                ),
                field("schema", String, false, false, Some(json!("main")), "the lake's schema holding the tables"),
                file_size_field(),
                field("region", String, false, false, Some(json!("us-east-1")), "s3:// data: the bucket's region"),
                field("endpoint_url", String, false, false, None, "s3:// data: another S3-compatible service"),
                field("path_style", Boolean, false, false, None, "s3:// data: the bucket in the path"),
                field("access_key_id", String, false, true, None, "s3:// data: access key id"),
                field("secret_access_key", String, false, true, None, "s3:// data: secret access key"),
                field(
                    "snapshot_retention_hours",
                    Integer,
                    false,
                    false,
                    Some(json!(168)),
                    "snapshots older than this are expired and the files only they named removed (0: keep every one)",
                ),
                field(
                    "catalog.password",
                    String,
                    false,
                    true,
                    None,
                    "a postgres catalog: its database's password (given inside catalog, or here)",
                ),
            ],
            sync_modes: SYNC_MODES.to_vec(),
            features: vec!["upsert", "apply_changes", "holds_marks", "lake_snapshots"],
            variants: vec![],
        },
    ]
}

/// A dataset's file format (`format`, `compression`).
fn dataset_format(c: &ResolvedConfig) -> ConnectorResult<dataset::FileFormat> {
    match c.str("format").unwrap_or("parquet") {
        "parquet" => Ok(dataset::FileFormat::Parquet(parquet::Codec::parse(c.str("compression"))?)),
        f @ ("csv" | "jsonl") => {
            let gzip = match c.str("compression") {
                None | Some("none") => false,
                Some("gzip") => true,
                Some(other) => {
                    return Err(ConnectorError::InvalidConfig(format!(
                        "compression of {f} files must be gzip or none, not '{other}'"
                    )));
                }
            };
            Ok(dataset::FileFormat::Text { format: file::Format::parse(f)?, gzip })
        }
        other => Err(ConnectorError::InvalidConfig(format!("format must be parquet, csv or jsonl, not '{other}'"))),
    }
}

/// Whether `format` alone is right (so that a refusal is the compression's).
fn dataset_format_only(c: &ResolvedConfig) -> bool {
    matches!(c.str("format"), None | Some("parquet" | "csv" | "jsonl"))
}

/// `file_size_mb` (default [`dataset::FILE_SIZE_MB`]) in bytes.
fn file_bytes(c: &ResolvedConfig) -> ConnectorResult<u64> {
    let mb = match c.values.get("file_size_mb") {
        None | Some(serde_json::Value::Null) => dataset::FILE_SIZE_MB as f64,
        Some(v) => v.as_f64().ok_or_else(|| ConnectorError::InvalidConfig("file_size_mb must be a number".into()))?,
    };
    if !(0.001..=5120.0).contains(&mb) {
        return Err(ConnectorError::InvalidConfig(format!(
            "file_size_mb must be between 0.001 and 5120 (an S3 object's limit is 5 GiB), not {mb}"
        )));
    }
    Ok((mb * 1024.0 * 1024.0) as u64)
}

fn required<'a>(c: &'a ResolvedConfig, key: &str) -> ConnectorResult<&'a str> {
    c.str(key).filter(|s| !s.is_empty()).ok_or_else(|| ConnectorError::InvalidConfig(format!("'{key}' is required")))
}

/// A database server's host: a DNS name or an IP address, never a socket
/// path (a socket of this machine, where peer authentication would log in
/// as the service's own user) or text no resolver takes.
fn host(c: &ResolvedConfig) -> ConnectorResult<String> {
    let h = required(c, "host")?.trim();
    let name = |h: &str| {
        let h = h.strip_suffix('.').unwrap_or(h);
        h.len() <= 253
            && h.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                    && !l.starts_with('-')
            })
    };
    let ip = h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok();
    if h.starts_with('/') || h.starts_with('@') {
        Err(ConnectorError::InvalidConfig("host must be a network host name or address, not a socket path".into()))
    } else if ip || name(h) {
        Ok(h.to_string())
    } else {
        Err(ConnectorError::InvalidConfig(format!("host '{h}' is not a host name or an IP address")))
    }
}

fn ssl_ca(c: &ResolvedConfig) -> Option<String> {
    c.str("ssl_ca").filter(|s| !s.trim().is_empty()).map(str::to_string)
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
        self.postgres.get_or(c, || {
            postgres::PgConnector::new(postgres::PgSettings {
                host: host(c)?,
                port: port(c, 5432)?,
                database: required(c, "database")?.to_string(),
                user: required(c, "user")?.to_string(),
                password: c.str("password").map(str::to_string),
                schema: c.str("schema").unwrap_or("public").to_string(),
                sslmode: c.str("sslmode").unwrap_or("prefer").to_string(),
                ssl_ca: ssl_ca(c),
                allow_cleartext_password: c.bool("allow_cleartext_password").unwrap_or(false),
                guard: self.metadata.instance_id.clone(),
                publication: c.str("publication").filter(|p| !p.is_empty()).map(str::to_string),
            })
        })
    }

    fn mysql(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<mysql::MySqlConnector>> {
        self.mysql.get_or(c, || {
            mysql::MySqlConnector::new(mysql::MySqlSettings {
                host: host(c)?,
                port: port(c, 3306)?,
                database: required(c, "database")?.to_string(),
                user: required(c, "user")?.to_string(),
                password: c.str("password").map(str::to_string),
                ssl_mode: c.str("ssl_mode").unwrap_or("preferred").to_string(),
                ssl_ca: ssl_ca(c),
                allow_cleartext_password: c.bool("allow_cleartext_password").unwrap_or(false),
            })
        })
    }

    fn file(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<file::FileConnector>> {
        let place = common::confine(&self.org_dir(c), required(c, "path")?)?;
        Ok(Arc::new(file::FileConnector::new(place, file::Format::parse(c.str("format").unwrap_or("jsonl"))?)))
    }

    /// A `file` connection of `format: parquet`: a dataset in a folder of
    /// the organization's directory.
    fn local_dataset(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dataset::DatasetConnector>> {
        let place = common::confine(&self.org_dir(c), required(c, "path")?)?;
        let objects = Arc::new(dataset::objects::LocalObjects { place });
        Ok(Arc::new(dataset::DatasetConnector::new(objects, dataset_format(c)?, file_bytes(c)?)))
    }

    /// An `s3` connection: a dataset in a bucket, under its prefix.
    fn s3_dataset(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dataset::DatasetConnector>> {
        let objects = self.s3_objects(c, required(c, "bucket")?, c.str("prefix").unwrap_or(""))?;
        Ok(Arc::new(dataset::DatasetConnector::new(Arc::new(objects), dataset_format(c)?, file_bytes(c)?)))
    }

    /// A bucket's objects under `prefix`, with the connection's S3 settings.
    fn s3_objects(&self, c: &ResolvedConfig, bucket: &str, prefix: &str) -> ConnectorResult<dataset::s3::S3Objects> {
        let endpoint = match c.str("endpoint_url").map(str::trim).filter(|e| !e.is_empty()) {
            Some(e) if e.starts_with("http://") || e.starts_with("https://") => {
                Some(e.trim_end_matches('/').to_string())
            }
            Some(e) => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "endpoint_url must be an http:// or https:// URL, not '{e}'"
                )));
            }
            None => None,
        };
        let config = sluice_clients::s3::S3Config {
            bucket: bucket.to_string(),
            region: c.str("region").filter(|r| !r.is_empty()).unwrap_or("us-east-1").to_string(),
            path_style: c.bool("path_style").unwrap_or(endpoint.is_some()),
            endpoint,
            access_key_id: c.str("access_key_id").unwrap_or_default().to_string(),
            secret_access_key: c.str("secret_access_key").unwrap_or_default().to_string(),
            session_token: None,
        };
        let spool = self.file_root.join(".spool");
        Ok(dataset::s3::S3Objects::new(sluice_clients::s3::S3::new(config), prefix, spool))
    }

    /// A `ducklake` connection: its catalog's database (a SQLite file of
    /// the organization's directory), its data path (a folder there, or a
    /// bucket's prefix).
    fn ducklake(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<ducklake::DuckLake>> {
        let catalog = match c.values.get("catalog") {
            Some(serde_json::Value::Object(m)) => m,
            _ => return Err(ConnectorError::InvalidConfig("catalog must be an object with a type".into())),
        };
        enum Catalog {
            Sqlite(common::Confined),
            Postgres(Arc<postgres::PgConnector>, String),
        }
        let catalog_db = match catalog.get("type").and_then(|t| t.as_str()) {
            Some("sqlite") => match catalog.get("path").and_then(|p| p.as_str()).filter(|p| !p.is_empty()) {
                Some(p) => {
                    let place = common::confine(&self.org_dir(c), p)?;
                    self.guard_sqlite(&place.path)?;
                    Catalog::Sqlite(place)
                }
                None => {
                    return Err(ConnectorError::InvalidConfig("catalog.path is required for a sqlite catalog".into()));
                }
            },
            Some("postgres") => {
                // The catalog's database as a connection of its own: its
                // settings from the object, its password a credential
                // (`catalog.password`).
                let mut values: BTreeMap<String, serde_json::Value> =
                    catalog.iter().filter(|(k, _)| *k != "type").map(|(k, v)| (k.clone(), v.clone())).collect();
                if let Some(p) = c.values.get("catalog.password") {
                    values.insert("password".into(), p.clone());
                }
                let schema = match values.remove("schema") {
                    Some(serde_json::Value::String(s)) if !s.is_empty() => s,
                    None => "public".to_string(),
                    Some(_) => return Err(ConnectorError::InvalidConfig("catalog.schema must be a name".into())),
                };
                let inner = ResolvedConfig {
                    connector_type: "postgres".into(),
                    values,
                    credential_keys: vec!["password".into()],
                    org: c.org,
                };
                let named = |e: ConnectorError| match e {
                    ConnectorError::InvalidConfig(m) => ConnectorError::InvalidConfig(format!("catalog: {m}")),
                    other => other,
                };
                Catalog::Postgres(self.postgres(&inner).map_err(named)?, schema)
            }
            _ => return Err(ConnectorError::InvalidConfig("catalog.type must be sqlite or postgres".into())),
        };
        let data = required(c, "data_path")?.trim();
        let schema = c.str("schema").filter(|s| !s.is_empty()).unwrap_or("main");
        if schema.len() > 200 || !schema.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ConnectorError::InvalidConfig(format!("schema '{schema}' must be letters, digits and _")));
        }
        let bytes = file_bytes(c)?;
        let retention = match c.values.get("snapshot_retention_hours") {
            None | Some(serde_json::Value::Null) => 168,
            Some(v) => v.as_i64().filter(|h| (0..=24 * 365 * 100).contains(h)).ok_or_else(|| {
                ConnectorError::InvalidConfig(
                    "snapshot_retention_hours must be a whole number of hours, 0 or more".into(),
                )
            })?,
        };
        self.ducklake.get_or(c, || {
            let (objects, data_path): (Arc<dyn dataset::objects::Objects>, String) = match data.strip_prefix("s3://") {
                Some(rest) => {
                    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                    if bucket.is_empty() {
                        return Err(ConnectorError::InvalidConfig("data_path s3:// names no bucket".into()));
                    }
                    let prefix = prefix.trim_matches('/');
                    let url =
                        if prefix.is_empty() { format!("s3://{bucket}/") } else { format!("s3://{bucket}/{prefix}/") };
                    (Arc::new(self.s3_objects(c, bucket, prefix)?), url)
                }
                None => {
                    let place = common::confine(&self.org_dir(c), data)?;
                    let url = format!("{}/", place.path.display());
                    (Arc::new(dataset::objects::LocalObjects { place }), url)
                }
            };
            let db = match &catalog_db {
                Catalog::Sqlite(place) => {
                    if let Some(dir) = place.path.parent() {
                        std::fs::create_dir_all(dir).map_err(|e| {
                            ConnectorError::InvalidConfig(format!("cannot create the catalog's folder: {}", e.kind()))
                        })?;
                    }
                    let opts = sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&place.path)
                        .create_if_missing(true)
                        .busy_timeout(Duration::from_secs(30))
                        .foreign_keys(false);
                    let pool = sqlx::sqlite::SqlitePoolOptions::new()
                        .max_connections(4)
                        .acquire_timeout(Duration::from_secs(30))
                        .connect_lazy_with(opts);
                    ducklake::catalog::Db::Sqlite(pool)
                }
                Catalog::Postgres(pg, schema) => ducklake::catalog::Db::Postgres(pg.pool(), schema.clone()),
            };
            Ok(ducklake::DuckLake::new(db, objects, data_path, schema.to_string(), bytes).with_retention(retention))
        })
    }

    fn file_source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        if c.str("format") == Some("parquet") {
            return Ok(self.local_dataset(c)?);
        }
        Ok(self.file(c)?)
    }

    fn file_destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        if c.str("format") == Some("parquet") {
            return Ok(self.local_dataset(c)?);
        }
        Ok(self.file(c)?)
    }

    async fn sqlite(&self, c: &ResolvedConfig, create: bool) -> ConnectorResult<Arc<sqlite::SqliteConnector>> {
        let place = common::confine(&self.org_dir(c), required(c, "path")?)?;
        self.guard_sqlite(&place.path)?;
        Ok(Arc::new(sqlite::SqliteConnector::open(place, create).await?))
    }

    async fn guarded_postgres(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<postgres::PgConnector>> {
        let pg = self.postgres(c)?;
        self.guard_pg(&pg).await?;
        Ok(pg)
    }
}

#[async_trait::async_trait]
impl sluice_domain::connect::registry::ConnectorRegistry for Registry {
    fn specs(&self) -> Vec<ConnectorSpec> {
        specs()
    }

    async fn source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        match c.connector_type.as_str() {
            "sqlite" => Ok(self.sqlite(c, false).await?),
            "postgres" => Ok(self.guarded_postgres(c).await?),
            "mysql" => Ok(self.mysql(c)?),
            "file" => self.file_source(c),
            "s3" => Ok(self.s3_dataset(c)?),
            // Read back for a verification of its mirror, and previews.
            "ducklake" => Ok(self.ducklake(c)?),
            other => Err(ConnectorError::Unsupported(format!("no connector of type '{other}'"))),
        }
    }

    async fn destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        match c.connector_type.as_str() {
            "sqlite" => Ok(self.sqlite(c, true).await?),
            "postgres" => Ok(self.guarded_postgres(c).await?),
            "mysql" => Ok(self.mysql(c)?),
            "file" => self.file_destination(c),
            "s3" => Ok(self.s3_dataset(c)?),
            "ducklake" => Ok(self.ducklake(c)?),
            other => Err(ConnectorError::Unsupported(format!("no connector of type '{other}'"))),
        }
    }

    async fn change_source(
        &self,
        c: &ResolvedConfig,
    ) -> ConnectorResult<Arc<dyn sluice_domain::connect::changes::ChangeSource>> {
        match c.connector_type.as_str() {
            "postgres" => Ok(self.guarded_postgres(c).await?),
            "mysql" => Ok(self.mysql(c)?),
            other => Err(ConnectorError::Unsupported(format!("{other} sources do not capture changes"))),
        }
    }

    async fn check_config(&self, c: &ResolvedConfig) -> Vec<sluice_domain::FieldError> {
        use sluice_domain::FieldError;
        // The settings of a dataset's files, whatever holds them.
        let files = |c: &ResolvedConfig| {
            let mut errors = Vec::new();
            if let Err(e) = dataset_format(c) {
                let field =
                    if c.str("compression").is_some() && dataset_format_only(c) { "compression" } else { "format" };
                errors.push(FieldError::new(format!("config.{field}"), e.to_string()));
            }
            if let Err(e) = file_bytes(c) {
                errors.push(FieldError::new("config.file_size_mb", e.to_string()));
            }
            errors
        };
        match c.connector_type.as_str() {
            "s3" => {
                let mut errors = files(c);
                if let Err(ConnectorError::InvalidConfig(m)) = self.s3_dataset(c).map(|_| ())
                    && m.contains("endpoint_url")
                {
                    errors.push(FieldError::new("config.endpoint_url", m));
                }
                errors
            }
            "ducklake" => match self.ducklake(c) {
                Err(ConnectorError::InvalidConfig(m) | ConnectorError::Unsupported(m)) => {
                    let field = if m.contains("catalog") {
                        "catalog"
                    } else if m.contains("schema") {
                        "schema"
                    } else if m.contains("file_size_mb") {
                        "file_size_mb"
                    } else if m.contains("snapshot_retention_hours") {
                        "snapshot_retention_hours"
                    } else if m.contains("endpoint_url") {
                        "endpoint_url"
                    } else {
                        "data_path"
                    };
                    vec![FieldError::new(format!("config.{field}"), m)]
                }
                _ => Vec::new(),
            },
            "sqlite" | "file" => {
                let Some(path) = c.str("path") else { return Vec::new() };
                let checked = common::confine(&self.org_dir(c), path).and_then(|place| self.guard_sqlite(&place.path));
                let mut errors: Vec<FieldError> =
                    checked.err().map(|e| FieldError::new("config.path", e.to_string())).into_iter().collect();
                if c.connector_type == "file" && c.str("format") == Some("parquet") {
                    errors.extend(files(c));
                }
                errors
            }
            // The settings are written before the password may be known (an
            // integration brings it); what can be reached is checked now,
            // briefly, and everything again whenever it is used.
            "postgres" | "mysql" if c.str("host").is_some() => {
                if let Err(ConnectorError::InvalidConfig(m)) = host(c) {
                    return vec![FieldError::new("config.host", m)];
                }
                if c.connector_type != "postgres" {
                    return Vec::new();
                }
                let Ok(pg) = self.postgres(c) else { return Vec::new() };
                match tokio::time::timeout(CHECK_REACH, self.guard_pg(&pg)).await {
                    Ok(Err(e @ ConnectorError::MetadataStore(_))) => {
                        vec![FieldError::new("config.host", e.to_string())]
                    }
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::connect::registry::ConnectorRegistry;

    fn pg(password: &str, schema: &str) -> ResolvedConfig {
        ResolvedConfig {
            connector_type: "postgres".into(),
            values: [
                ("host", json!("127.0.0.1")),
                ("database", json!("test")),
                ("user", json!("u")),
                ("password", json!(password)),
                ("schema", json!(schema)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            credential_keys: vec!["password".into()],
            org: None,
        }
    }

    #[tokio::test]
    async fn database_connectors_are_shared_per_exact_configuration() {
        let r = Registry::new(std::env::temp_dir());
        let a = r.postgres(&pg("pw-one", "public")).unwrap();
        let b = r.postgres(&pg("pw-one", "public")).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same settings share one connector and its pool");
        let rotated = r.postgres(&pg("two", "public")).unwrap();
        assert!(!Arc::ptr_eq(&a, &rotated), "another password is another pool");
        let other_schema = r.postgres(&pg("pw-one", "s2")).unwrap();
        assert!(!Arc::ptr_eq(&a, &other_schema));
        assert_eq!(r.postgres.len(), 3);
        let shown = format!("{r:?}");
        assert!(shown.contains("Shared(3 connectors)") && !shown.contains("pw-one"), "{shown}");
        // A configuration that fails to build is not kept.
        let mut bad = pg("pw-one", "public");
        bad.values.insert("sslmode".into(), json!("sometimes"));
        assert!(r.postgres(&bad).is_err());
        assert_eq!(r.postgres.len(), 3);
    }

    #[tokio::test]
    async fn socket_paths_and_unparseable_hosts_are_refused_where_they_are_written() {
        let r = Registry::new(std::env::temp_dir());
        for (kind, bad) in [
            ("postgres", "/var/run/postgresql"),
            ("postgres", "@abstract"),
            ("mysql", "/run/mysqld/mysqld.sock"),
            ("postgres", "db host"),
            ("mysql", "db;host"),
            ("postgres", "-leading.example"),
            ("postgres", "a..b"),
        ] {
            let mut c = pg("pw", "public");
            c.connector_type = kind.into();
            c.values.insert("host".into(), json!(bad));
            let errors = r.check_config(&c).await;
            assert_eq!(errors.len(), 1, "{kind} {bad}: {errors:?}");
            assert_eq!(errors[0].field, "config.host", "{errors:?}");
        }
        for good in ["db.internal", "db.internal.", "localhost", "10.0.0.7", "::1", "[::1]", "my_db-1.example.com"] {
            let mut c = pg("pw", "public");
            c.values.insert("host".into(), json!(good));
            assert!(host(&c).is_ok(), "{good}");
        }
    }

    /// A runtime's connector is its own: connections opened on one that
    /// stops (an HTTP worker's at shutdown) never serve another.
    #[test]
    fn each_runtime_has_its_own_connectors() {
        let r = Registry::new(std::env::temp_dir());
        let on = |r: &Registry| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (a, b) = rt.block_on(async {
                (r.postgres(&pg("pw", "public")).unwrap(), r.postgres(&pg("pw", "public")).unwrap())
            });
            assert!(Arc::ptr_eq(&a, &b), "one runtime shares one connector");
            a
        };
        let first = on(&r);
        let second = on(&r);
        assert!(!Arc::ptr_eq(&first, &second), "another runtime, another connector");
        assert_eq!(r.postgres.len(), 2);
    }

    #[tokio::test]
    async fn the_least_recently_used_connector_goes_past_the_cap() {
        let r = Registry::new(std::env::temp_dir());
        let first = r.postgres(&pg("p0", "public")).unwrap();
        let second = r.postgres(&pg("p1", "public")).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        for i in 2..SHARED_MAX {
            r.postgres(&pg(&format!("p{i}"), "public")).unwrap();
        }
        // Using the first again makes the second the oldest.
        std::thread::sleep(Duration::from_millis(2));
        assert!(Arc::ptr_eq(&first, &r.postgres(&pg("p0", "public")).unwrap()));
        r.postgres(&pg("one more", "public")).unwrap();
        assert_eq!(r.postgres.len(), SHARED_MAX);
        assert!(Arc::ptr_eq(&first, &r.postgres(&pg("p0", "public")).unwrap()), "recently used, kept");
        assert!(!Arc::ptr_eq(&second, &r.postgres(&pg("p1", "public")).unwrap()), "the oldest went");
    }
}
