//! The PostgreSQL connector.
//!
//! Reading casts each column to a decodable type (numerics and unknown
//! types as text, JSON and arrays as JSON text, timestamps without a zone
//! as UTC), copies them out in binary and decodes them here ([`binary`]),
//! streaming batches through a channel. Writing uses `COPY … FROM STDIN`,
//! in binary encoded here for the landing table's types (CSV when one of
//! them is a type we do not encode): straight into the table for append;
//! into a session-local staging table merged with one
//! `INSERT … ON CONFLICT` per checkpoint for upsert (the last staged row of
//! a key wins); into a fresh table that replaces the old one in the same
//! transaction for overwrite, with the primary key built after the load.
//! Between two PostgreSQL connections with nothing to transform, records
//! are not decoded at all: an overwrite pipes the source's binary COPY into
//! the fresh table, and an upsert by cursor pipes the source's binary COPY
//! of the records past the cursor (ordered by it, cut into whole records,
//! following the cursor column) into the stage, checkpoint by checkpoint.

use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgSslMode};
use sqlx::{AssertSqlSafe, Postgres, Row};
use std::sync::Arc;
use std::time::Duration;

pub const ENGINE: &str = "postgres";
/// PostgreSQL's binary COPY format, passed between PostgreSQL connectors.
pub const BULK_FORMAT: &str = "postgres-binary";
/// The records of a binary COPY without its header and trailer, in chunks
/// that end on a record's end: what a cursor read streams into a stage.
pub const BULK_ROWS_FORMAT: &str = "postgres-binary-rows";
pub mod binary;
mod cdc;
pub mod pgoutput;
use binary::{HEADER as COPY_HEADER, TRAILER as COPY_TRAILER};
/// The size a chunk of records grows to before it is passed on.
const ROWS_CHUNK: usize = 256 * 1024;
const COPY_CHUNK: usize = 1 << 20;

#[derive(Clone)]
pub struct PgSettings {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    pub schema: String,
    pub sslmode: String,
    /// PEM of the CA certificate(s) the server's certificate must chain
    /// to (`verify-ca`, `verify-full`).
    pub ssl_ca: Option<String>,
    /// Whether a server that asks for the password in clear text over a
    /// connection that is not encrypted gets it (by default it does not).
    pub allow_cleartext_password: bool,
    /// The service's instance id: every connection the pool opens is
    /// checked not to lead to the metadata store (a name that resolves
    /// elsewhere later is caught too).
    pub guard: Option<String>,
}

pub struct PgConnector {
    /// Set once this database was found not to be the service's own
    /// metadata store (see [`PgConnector::instance_marks`]).
    pub(crate) cleared: std::sync::atomic::AtomicBool,
    pool: PgPool,
    opts: PgConnectOptions,
    schema: String,
    host: String,
    database: String,
    /// The connections split reads may take beyond their first.
    extras: Arc<tokio::sync::Semaphore>,
}

/// The Sluice instance ids the database of `conn` carries, as any role
/// connected to it can see them: the database's comment, and the rows of
/// every `sluice_instance` table the role may read.
async fn instance_marks(conn: &mut sqlx::PgConnection, mark: &str) -> Result<Vec<String>, sqlx::Error> {
    let mut marks: Vec<String> = Vec::new();
    let comment: Option<String> = sqlx::query_scalar(
        "SELECT shobj_description(d.oid, 'pg_database') FROM pg_database d WHERE d.datname = current_database()",
    )
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    if let Some(id) = comment.as_deref().and_then(|c| c.strip_prefix(mark)) {
        marks.push(id.trim().to_string());
    }
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relname = 'sluice_instance' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT')",
    )
    .fetch_all(&mut *conn)
    .await?;
    for t in tables {
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!("SELECT id::text FROM {t}")))
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
        marks.extend(ids);
    }
    Ok(marks)
}

/// What the pool logs when a new connection leads to the metadata store
/// (see [`PgSettings::guard`]). sqlx drops that connection and retries, so
/// the caller sees a timeout; `Registry::guard_pg` refuses such a
/// connection up front with a clear error, and this check stays for a
/// server that changes under the pool.
const METADATA_STORE: &str = "sluice: the connection leads to the metadata store";

fn err(e: &sqlx::Error, host: &str, database: &str) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) => match d.code().as_deref() {
            Some("28P01") | Some("28000") => ConnectorError::AuthFailed(d.message().to_string()),
            Some("3D000") => {
                ConnectorError::DatabaseNotFound(format!("database \"{database}\" does not exist on {host}"))
            }
            Some("42P01") => ConnectorError::EntityNotFound(d.message().to_string()),
            Some("57014") => ConnectorError::Timeout(d.message().to_string()),
            // The server ended the session: an administrator, a dropped
            // database, a shutdown.
            Some("57P01" | "57P02" | "57P03") => ConnectorError::Unreachable(format!(
                "{host} ended the session ({}): the database \"{database}\" was dropped, the server is shutting down, or an administrator ended it",
                d.message()
            )),
            _ => ConnectorError::Other(with_place(d.as_ref())),
        },
        other => transport_error(other, host, "PostgreSQL").unwrap_or_else(|| ConnectorError::Other(db_message(other))),
    }
}

/// A database error's message with the table and column it is about, when
/// the server says: a value out of its column's range or too long for it
/// (a COPY's context, without the value), a null in a NOT NULL column.
fn with_place(d: &dyn sqlx::error::DatabaseError) -> String {
    let message = d.message().to_string();
    let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() else { return message };
    if let (Some(table), Some(column)) = (pg.table(), pg.column()) {
        return format!("{message} (table {table}, column {column})");
    }
    // "COPY events, line 3, column amount: \"…\"": the place, not the value.
    match pg.r#where().and_then(|w| w.lines().find(|l| l.starts_with("COPY "))) {
        Some(context) => format!("{message} ({})", context.split_once(": ").map_or(context, |(place, _)| place)),
        None => message,
    }
}

impl PgConnector {
    pub fn new(s: PgSettings) -> ConnectorResult<Self> {
        let ssl = match s.sslmode.as_str() {
            "disable" => PgSslMode::Disable,
            "prefer" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            "verify-ca" => PgSslMode::VerifyCa,
            "verify-full" => PgSslMode::VerifyFull,
            other => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full, not '{other}'"
                )));
            }
        };
        // A host that is a path is a Unix socket of this server, where peer
        // authentication would log in as the service's own user.
        if s.host.starts_with('/') || s.host.starts_with('@') {
            return Err(ConnectorError::InvalidConfig(
                "host must be a network host name or address, not a socket path".into(),
            ));
        }
        // Nothing of the service's own environment (PGPASSWORD…) may reach a
        // tenant's server: the password is always the connection's own.
        let mut opts = PgConnectOptions::new_without_pgpass()
            .password("")
            .host(&s.host)
            .port(s.port)
            .database(&s.database)
            .username(&s.user)
            .ssl_mode(ssl)
            .allow_cleartext_password(s.allow_cleartext_password)
            .application_name("sluice");
        if let Some(p) = &s.password {
            opts = opts.password(p);
        }
        if let Some(ca) = &s.ssl_ca {
            opts = opts.ssl_root_cert_from_pem(check_pem(ca)?);
        }
        let mut pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(CONNECT_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(60)));
        if let Some(id) = s.guard.clone() {
            let id: Arc<str> = id.into();
            pool = pool.after_connect(move |conn, _| {
                let id = id.clone();
                Box::pin(async move {
                    let marks = instance_marks(conn, INSTANCE_MARK).await?;
                    if marks.iter().any(|m| **m == *id) {
                        return Err(sqlx::Error::Protocol(METADATA_STORE.into()));
                    }
                    Ok(())
                })
            });
        }
        let pool = pool.connect_lazy_with(opts.clone());
        Ok(Self {
            cleared: Default::default(),
            pool,
            opts,
            schema: s.schema,
            host: format!("{}:{}", s.host, s.port),
            database: s.database,
            extras: range_extras(),
        })
    }

    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }

    /// The Sluice instance ids this database carries, as any role connected
    /// to it can see them (see [`instance_marks`]). A direct connection, so
    /// that the cause of a failure comes through.
    pub async fn instance_marks(&self, mark: &str) -> ConnectorResult<Vec<String>> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            let marks = instance_marks(&mut conn, mark).await.map_err(|e| self.e(&e));
            let _ = conn.close().await;
            marks
        })
        .await
    }

    async fn schemas(&self, table: Option<&str>) -> ConnectorResult<Vec<EntitySchema>> {
        let sql = "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory::text, \
                   a.attnotnull, coalesce(a.attnum = ANY(i.indkey::int2[]), false), \
                   coalesce(col_description(c.oid, a.attnum), '') \
                   FROM pg_class c \
                   JOIN pg_namespace n ON n.oid = c.relnamespace \
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                   JOIN pg_type t ON t.oid = a.atttypid \
                   LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
                   WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
                   AND ($2::text IS NULL OR c.relname = $2) AND c.relname NOT LIKE '%\\_\\_sluice\\_new' \
                   ORDER BY c.relname, a.attnum";
        let rows = with_timeout("reading the catalog", CONNECT_TIMEOUT, async {
            sqlx::query(sql).bind(&self.schema).bind(table).fetch_all(&self.pool).await.map_err(|e| self.e(&e))
        })
        .await?;
        let mut out: Vec<EntitySchema> = Vec::new();
        for r in rows {
            let table: String = r.get(0);
            let native: String = r.get(2);
            let category: String = r.get(3);
            let notnull: bool = r.get(4);
            let pk: bool = r.get(5);
            let comment: String = r.get(6);
            let mapped = map_native(&native, &category);
            let f = Field {
                name: r.get(1),
                field_type: if mapped == FieldType::Object && comment == ARRAY_COMMENT {
                    FieldType::Array
                } else {
                    mapped
                },
                nullable: !notnull,
                primary_key: pk,
                native_type: Some(native_tag(ENGINE, &native)),
            };
            match out.last_mut() {
                Some(s) if s.name == table => s.fields.push(f),
                _ => out.push(EntitySchema { name: table, fields: vec![f] }),
            }
        }
        Ok(out)
    }

    /// One table's schema; `EntityNotFound` when there is none.
    async fn table(&self, entity: &str) -> ConnectorResult<EntitySchema> {
        self.schemas(Some(entity)).await?.pop().ok_or_else(|| {
            ConnectorError::EntityNotFound(format!("table \"{}.{}\" does not exist", self.schema, entity))
        })
    }

    /// A `COPY … TO STDOUT` on the pool as a bulk stream.
    async fn copy_out(&self, sql: &str) -> ConnectorResult<PgBulkOut<'static>> {
        use sqlx::postgres::PgPoolCopyExt;
        let stream = self.pool.copy_out_raw(sql).await.map_err(|e| self.e(&e))?;
        Ok(PgBulkOut { stream, host: self.host.clone(), database: self.database.clone(), failed: None })
    }

    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote_dq(&self.schema), quote_dq(table))
    }
}

/// PostgreSQL type → vocabulary.
pub fn map_native(native: &str, category: &str) -> FieldType {
    if category == "A" {
        return FieldType::Array;
    }
    let t = native.to_ascii_lowercase();
    match t.as_str() {
        "smallint" | "integer" | "bigint" => FieldType::Integer,
        "real" | "double precision" => FieldType::Number,
        "boolean" => FieldType::Boolean,
        "date" => FieldType::Date,
        "json" | "jsonb" => FieldType::Object,
        "bytea" => FieldType::Binary,
        _ if t.starts_with("numeric") || t.starts_with("decimal") => FieldType::Decimal,
        _ if t.starts_with("timestamp") => FieldType::Timestamp,
        _ => FieldType::String,
    }
}

/// Vocabulary → PostgreSQL type for tables we create.
fn native_for_field(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    // From another engine: keep a decimal's precision and scale, and a
    // timestamp without a zone without one.
    if let (FieldType::Decimal, Some((p, s))) = (f.field_type, decimal_args(f)) {
        return format!("numeric({p},{s})");
    }
    if f.field_type == FieldType::Timestamp && zoneless(f) {
        return "timestamp".into();
    }
    match f.field_type {
        FieldType::String => "text",
        FieldType::Integer => "bigint",
        FieldType::Number => "double precision",
        FieldType::Decimal => "numeric",
        FieldType::Boolean => "boolean",
        FieldType::Timestamp => "timestamptz",
        FieldType::Date => "date",
        FieldType::Object | FieldType::Array => "jsonb",
        FieldType::Binary => "bytea",
    }
    .to_string()
}

/// The select expression that makes a column decodable as its vocabulary type.
fn select_expr(f: &Field) -> String {
    let c = quote_dq(&f.name);
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    match f.field_type {
        FieldType::Integer => format!("{c}::int8"),
        FieldType::Number => format!("{c}::float8"),
        FieldType::Boolean | FieldType::Date | FieldType::Binary => c,
        FieldType::Timestamp if native.starts_with("timestamp without") || native == "timestamp" => {
            format!("({c} AT TIME ZONE 'UTC')")
        }
        FieldType::Timestamp => format!("{c}::timestamptz"),
        FieldType::Object | FieldType::Array => json_text(&c, &native),
        FieldType::Decimal | FieldType::String => format!("{c}::text"),
    }
}

/// A JSON column's text as is (`jsonb` prints the same text `to_json`
/// would, without building it again); other types (arrays, composites)
/// through `to_json`.
fn json_text(c: &str, native: &str) -> String {
    if native == "jsonb" || native == "json" { format!("{c}::text") } else { format!("to_json({c})::text") }
}

/// The expression that formats a column in CSV as the file connector
/// writes the value read from it: integers and shortest round-trip floats
/// (non-finite ones empty, as JSON has none), `true`/`false`, RFC 3339 UTC
/// timestamps with microseconds, ISO dates, JSON text, base64 bytes.
fn csv_expr(f: &Field) -> String {
    const ISO: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'";
    let c = quote_dq(&f.name);
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    match f.field_type {
        FieldType::Integer => format!("{c}::int8"),
        FieldType::Number => {
            format!("CASE WHEN {c}::float8 IN ('NaN', 'Infinity', '-Infinity') THEN NULL ELSE {c}::float8 END")
        }
        FieldType::Boolean => format!("CASE WHEN {c} THEN 'true' WHEN NOT {c} THEN 'false' END"),
        FieldType::Date => format!("to_char({c}, 'YYYY-MM-DD')"),
        FieldType::Timestamp if native.starts_with("timestamp without") || native == "timestamp" => {
            format!("to_char({c}, {ISO})")
        }
        FieldType::Timestamp => format!("to_char({c}::timestamptz AT TIME ZONE 'UTC', {ISO})"),
        FieldType::Object | FieldType::Array => json_text(&c, &native),
        FieldType::Binary => format!("translate(encode({c}, 'base64'), E'\\n', '')"),
        FieldType::Decimal | FieldType::String => format!("{c}::text"),
    }
}

fn decode(row: &PgRow, i: usize, t: FieldType) -> Result<Value, sqlx::Error> {
    Ok(match t {
        FieldType::Integer => row.try_get::<Option<i64>, _>(i)?.map(Value::Int),
        FieldType::Number => row.try_get::<Option<f64>, _>(i)?.map(Value::Float),
        FieldType::Boolean => row.try_get::<Option<bool>, _>(i)?.map(Value::Bool),
        FieldType::Date => row.try_get::<Option<time::Date>, _>(i)?.map(Value::Date),
        FieldType::Binary => row.try_get::<Option<Vec<u8>>, _>(i)?.map(Value::Bytes),
        FieldType::Timestamp => row.try_get::<Option<time::OffsetDateTime>, _>(i)?.map(Value::Timestamp),
        FieldType::Decimal => row.try_get::<Option<String>, _>(i)?.map(Value::Decimal),
        FieldType::String => row.try_get::<Option<String>, _>(i)?.map(Value::String),
        FieldType::Object | FieldType::Array => row
            .try_get::<Option<String>, _>(i)?
            .map(|s| serde_json::from_str(&s).map(Value::Json).unwrap_or(Value::String(s))),
    }
    .unwrap_or(Value::Null))
}

/// The text form PostgreSQL parses back into the column's type.
fn literal(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(if *b { "t".into() } else { "f".into() }),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(float_text(*f)),
        Value::Decimal(s) | Value::String(s) => Some(s.clone()),
        Value::Timestamp(t) => Some(format_timestamp(*t)),
        Value::Date(d) => Some(format_date(*d)),
        Value::Json(j) => Some(j.to_string()),
        Value::Bytes(b) => Some(format!("\\x{}", hex(b))),
    }
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity".into() } else { "-Infinity".into() }
    } else {
        // Shortest text that round-trips.
        format!("{f:?}")
    }
}

fn hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

/// Appends one CSV row in COPY's format: NULL is an empty unquoted field,
/// every other text is quoted. Written in place, without a string per value.
pub fn csv_row(out: &mut Vec<u8>, row: &[Value]) {
    use std::io::Write;
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing into a Vec cannot fail.
        let _ = match v {
            Value::Null => Ok(()),
            Value::Int(n) => write!(out, "{n}"),
            Value::Bool(b) => {
                out.push(if *b { b't' } else { b'f' });
                Ok(())
            }
            // Texts that hold no quote: no escaping to do.
            Value::Decimal(d) => write!(out, "\"{d}\""),
            Value::Float(f) => write!(out, "\"{}\"", float_text(*f)),
            Value::Timestamp(t) => write!(out, "\"{}\"", TimestampText(*t)),
            Value::Date(d) => write!(out, "\"{}\"", DateText(*d)),
            Value::Bytes(b) => {
                out.extend_from_slice(b"\"\\x");
                out.extend_from_slice(hex(b).as_bytes());
                out.push(b'"');
                Ok(())
            }
            Value::String(text) => {
                out.push(b'"');
                let r = Quoted(out).write_all(text.as_bytes());
                out.push(b'"');
                r
            }
            Value::Json(j) => {
                out.push(b'"');
                let r = serde_json::to_writer(Quoted(out), j).map_err(std::io::Error::other);
                out.push(b'"');
                r
            }
        };
    }
    out.push(b'\n');
}

/// Writes into a CSV field between quotes, doubling every quote.
struct Quoted<'a>(&'a mut Vec<u8>);

impl std::io::Write for Quoted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(q) = rest.iter().position(|b| *b == b'"') {
            self.0.extend_from_slice(&rest[..=q]);
            self.0.push(b'"');
            rest = &rest[q + 1..];
        }
        self.0.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl Source for PgConnector {
    /// The start of the oldest transaction of this database that holds a
    /// transaction id (has written), other than this session's. Other
    /// roles' sessions are visible to superusers and members of
    /// `pg_read_all_stats` only; for the rest the lookback protects.
    async fn write_horizon(&self, cursor: &Field) -> ConnectorResult<Option<time::OffsetDateTime>> {
        // A column without a zone holds wall times, not instants: no
        // comparison with a transaction's start means anything.
        if zoneless(cursor) {
            return Ok(None);
        }
        with_timeout("reading open transactions", CONNECT_TIMEOUT, async {
            // With no writer open, now: a transaction that begins after
            // this query and commits after the read is caught next time.
            // A role that cannot see other roles' sessions (neither a
            // superuser nor a member of pg_read_all_stats) cannot tell.
            sqlx::query_scalar(
                "SELECT CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \
                   OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') THEN \
                 (SELECT coalesce(min(xact_start), statement_timestamp()) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL) END",
            )
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))
        })
        .await
    }

    async fn check(&self) -> ConnectorResult<()> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            // A direct connection, so that the cause of a failure comes
            // through (the pool retries until its own timeout).
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&self.schema)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.e(&e))?;
            let _ = conn.close().await;
            if exists {
                Ok(())
            } else {
                Err(ConnectorError::EntityNotFound(format!("schema \"{}\" does not exist", self.schema)))
            }
        })
        .await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.schemas(None).await
    }

    async fn bulk_out(
        &self,
        entity: &str,
        format: &str,
        fields: &[Field],
        cursor: Option<&CursorBound>,
        ranges: usize,
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        use sqlx::postgres::PgPoolCopyExt;
        let cols = fields.iter().map(|f| quote_dq(&f.name)).collect::<Vec<_>>().join(", ");
        let table = self.qualified(entity);
        match (format, cursor) {
            (BULK_FORMAT, None) => {
                let sql = format!("COPY (SELECT {cols} FROM {table}) TO STDOUT (FORMAT binary)");
                Ok(Some(Box::new(self.copy_out(&sql).await?)))
            }
            (SLUICE_CSV, None) => {
                // The values formatted by PostgreSQL as the file writer
                // would write them: nothing decoded here.
                let cols = fields.iter().map(csv_expr).collect::<Vec<_>>().join(", ");
                if ranges > 1 {
                    let schema = EntitySchema { name: entity.to_string(), fields: fields.to_vec() };
                    if let Some(stream) = self.csv_in_ranges(&schema, &cols, ranges).await {
                        return Ok(Some(stream));
                    }
                }
                let sql = format!("COPY (SELECT {cols} FROM {table}) TO STDOUT (FORMAT csv)");
                Ok(Some(Box::new(self.copy_out(&sql).await?)))
            }
            (BULK_ROWS_FORMAT, Some(c)) => {
                let Some(at) = fields.iter().position(|f| f.name == c.field) else {
                    return Err(ConnectorError::InvalidConfig(format!(
                        "cursor field '{}' is not in {entity}",
                        c.field
                    )));
                };
                let f = &fields[at];
                let Some((native, kind)) = native_for(f, ENGINE).and_then(|n| Some((n, CursorKind::of(n)?))) else {
                    return Ok(None);
                };
                let mut sql = format!("COPY (SELECT {cols} FROM {table}");
                if let Some(from) = &c.from {
                    let Some(text) = literal(from) else { return Ok(None) };
                    sql.push_str(&format!(
                        " WHERE {} >= CAST({} AS {native})",
                        quote_dq(&c.field),
                        dollar_quoted(&text)
                    ));
                }
                sql.push_str(&format!(" ORDER BY {}) TO STDOUT (FORMAT binary)", quote_dq(&c.field)));
                let stream = self.pool.copy_out_raw(&sql).await.map_err(|e| self.e(&e))?;
                Ok(Some(Box::new(PgRowsOut {
                    stream,
                    host: self.host.clone(),
                    database: self.database.clone(),
                    parser: RowsParser::new(fields.len(), at, kind),
                })))
            }
            _ => Ok(None),
        }
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        Ok(Arc::new(self.table(entity).await?.fields))
    }

    async fn max_cursor(&self, entity: &str, cursor: &Field) -> ConnectorResult<Option<Value>> {
        // The greatest value under the column's own name, so that the
        // select expression that decodes the column decodes it; by order,
        // not max(), which some types (uuid) lack, and an index serves.
        let c = quote_dq(&cursor.name);
        let sql = format!(
            "SELECT {} FROM (SELECT {c} FROM {} WHERE {c} IS NOT NULL ORDER BY {c} DESC LIMIT 1) m",
            select_expr(cursor),
            self.qualified(entity)
        );
        let row = sqlx::query(AssertSqlSafe(sql)).fetch_optional(&self.pool).await.map_err(|e| self.e(&e))?;
        let Some(row) = row else { return Ok(None) };
        let v = decode(&row, 0, cursor.field_type).map_err(|e| self.e(&e))?;
        Ok((v != Value::Null).then_some(v))
    }

    /// Reads through a binary COPY of the select expressions, decoded here:
    /// no row protocol, and no text parsed for numbers and times.
    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema = self.table(&req.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        // COPY takes no parameters: the cursor's bound is a quoted literal.
        let from = req.cursor.as_ref().and_then(|c| c.from.as_ref()).map(|v| match literal(v) {
            Some(text) => dollar_quoted(&text),
            None => "NULL".to_string(),
        });
        let (sql, _) = select_sql(&schema, &cols, &self.qualified(&schema.name), &req, quote_dq, |f| {
            format!("CAST({} AS {})", from.as_deref().unwrap_or("NULL"), native_for_field(f))
        })?;
        let batch_size = batch_size(&req);
        if let Some(snapshot) = &req.snapshot {
            return self.read_in_snapshot(&schema, &sql, snapshot, batch_size).await;
        }
        if may_split(&req)
            && let Some(reader) = self.read_in_ranges(&schema, &cols, req.ranges, batch_size).await?
        {
            return Ok(reader);
        }
        let sql = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let decoding = Decoding::new(&schema.fields, batch_size, &self.host, &self.database);
        let fields = decoding.fields.clone();
        let mut stream = self.copy_out(&sql).await?;
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            decoding.pump(&mut stream, &tx).await;
        })))
    }
}

/// How a binary COPY of a read's select expressions becomes batches of
/// records.
struct Decoding {
    fields: Arc<Vec<Field>>,
    wires: Vec<binary::Wire>,
    names: Vec<String>,
    batch_size: usize,
    source: String,
}

impl Decoding {
    fn new(fields: &[Field], batch_size: usize, host: &str, database: &str) -> Self {
        Decoding {
            wires: fields.iter().map(|f| binary::Wire::of(f.field_type)).collect(),
            names: fields.iter().map(|f| f.name.clone()).collect(),
            fields: Arc::new(fields.to_vec()),
            batch_size,
            source: format!("{host}/{database}"),
        }
    }

    /// Decodes `stream` into batches sent through `tx`, until its end, the
    /// first failure (sent on) or the reader going away.
    async fn pump(&self, stream: &mut PgBulkOut<'_>, tx: &tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>) {
        let mut decoder = binary::Decoder::default();
        let mut batch = Vec::with_capacity(self.batch_size);
        let bad = |e: String| ConnectorError::Other(format!("reading {}: {e}", self.source));
        loop {
            match stream.chunk().await {
                Ok(Some(bytes)) => decoder.feed(&bytes),
                Err(e) => {
                    send(tx, Err(e)).await;
                    return;
                }
                Ok(None) if decoder.has_partial() => {
                    send(tx, Err(bad("the binary COPY stream ended inside a record".into()))).await;
                    return;
                }
                Ok(None) => break,
            }
            loop {
                match decoder.next(&self.wires, &self.names) {
                    Ok(binary::Step::Record(r)) => {
                        batch.push(r);
                        if batch.len() >= self.batch_size {
                            let rows = std::mem::replace(&mut batch, Vec::with_capacity(self.batch_size));
                            if !send(tx, Ok(RecordBatch { fields: self.fields.clone(), rows })).await {
                                return;
                            }
                        }
                    }
                    Ok(binary::Step::NeedMore | binary::Step::End) => break,
                    Err(e) => {
                        send(tx, Err(bad(e))).await;
                        return;
                    }
                }
            }
        }
        if !batch.is_empty() {
            send(tx, Ok(RecordBatch { fields: self.fields.clone(), rows: batch })).await;
        }
    }
}

impl PgConnector {
    /// How to read a large table with a single integer key in up to
    /// `ranges` key ranges copied at once, each on a connection of its
    /// own, all in one snapshot (exported by the first, imported by the
    /// others, as `pg_dump --jobs` does). The connections beyond the first
    /// come from the connector's [`RANGE_EXTRAS`] budget, never waited for
    /// (so concurrent entities keep the pool), and are closed after, not
    /// pooled again mid-COPY. `None` (read in one piece) when the table is
    /// small, has no such key, is empty, or anything before the copies
    /// fails: the single read reports what is wrong.
    async fn split(&self, schema: &EntitySchema, ranges: usize) -> Option<Vec<Range>> {
        let key = split_key(schema)?;
        let table = self.qualified(&schema.name);
        let one_piece = |e: sqlx::Error| -> Option<Vec<Range>> {
            tracing::info!(table = %schema.name, error = %self.e(&e), "reading in one piece");
            None
        };
        let size: Option<i64> = match sqlx::query_scalar("SELECT pg_relation_size(to_regclass($1))")
            .bind(&table)
            .fetch_one(&self.pool)
            .await
        {
            Ok(size) => size,
            Err(e) => return one_piece(e),
        };
        if size.unwrap_or(0) < SPLIT_BYTES {
            return None;
        }
        let permits = range_permits(&self.extras, ranges);
        if permits.is_empty() {
            return None;
        }
        let mut readers = range_connections(&self.pool, permits.len() + 1).await;
        if readers.len() < 2 {
            return None;
        }
        let k = quote_dq(&key.name);
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
        let lead = &mut readers[0];
        let bounds = async {
            sqlx::query(begin).execute(&mut **lead).await?;
            let (lo, hi): (Option<i64>, Option<i64>) =
                sqlx::query_as(AssertSqlSafe(format!("SELECT min({k})::int8, max({k})::int8 FROM {table}")))
                    .fetch_one(&mut **lead)
                    .await?;
            let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()").fetch_one(&mut **lead).await?;
            Ok::<_, sqlx::Error>((lo, hi, snapshot))
        };
        let (lo, hi, snapshot) = match bounds.await {
            Ok((Some(lo), Some(hi), snapshot)) if snapshot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') => {
                (lo, hi, snapshot)
            }
            Ok(_) => return None,
            Err(e) => return one_piece(e),
        };
        for (i, conn) in readers.iter_mut().enumerate().skip(1) {
            let imported = async {
                sqlx::query(begin).execute(&mut **conn).await?;
                sqlx::query(AssertSqlSafe(format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))).execute(&mut **conn).await
            };
            if let Err(e) = imported.await {
                tracing::info!(table = %schema.name, error = %self.e(&e), "a range's snapshot was not imported");
                readers.truncate(i);
                break;
            }
        }
        let mut permits = permits.into_iter();
        let conditions = key_ranges(&k, lo, hi, readers.len());
        let parts = readers
            .into_iter()
            .zip(conditions)
            .enumerate()
            .map(|(i, (conn, condition))| Range {
                conn,
                condition: format!("{table} WHERE {condition}"),
                permit: if i > 0 { permits.next() } else { None },
            })
            .collect();
        Some(parts)
    }

    /// A full read of a large table in key ranges at once (see
    /// [`PgConnector::split`]), decoded on a task per range.
    async fn read_in_ranges(
        &self,
        schema: &EntitySchema,
        cols: &[String],
        ranges: usize,
        batch_size: usize,
    ) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let Some(parts) = self.split(schema, ranges).await else { return Ok(None) };
        let decoding = Arc::new(Decoding::new(&schema.fields, batch_size, &self.host, &self.database));
        let fields = decoding.fields.clone();
        let mut copies = Vec::with_capacity(parts.len());
        for Range { mut conn, condition, permit } in parts {
            let sql = format!("COPY (SELECT {} FROM {condition}) TO STDOUT (FORMAT binary)", cols.join(", "));
            let (host, database, decoding) = (self.host.clone(), self.database.clone(), decoding.clone());
            copies.push(move |tx_out: tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>| async move {
                // Held until the range is read: the budget counts it.
                let _permit = permit;
                match copy_on(&mut conn, &sql, host, database).await {
                    Ok(mut stream) => decoding.pump(&mut stream, &tx_out).await,
                    Err(e) => {
                        send(&tx_out, Err(e)).await;
                    }
                }
            });
        }
        Ok(Some(ranges_reader(fields, copies)))
    }

    /// PostgreSQL's CSV of `cols` (expressions) in key ranges at once (see
    /// [`PgConnector::split`]): each range's COPY is cut into whole records,
    /// and the pieces of all come in no order.
    async fn csv_in_ranges(&self, schema: &EntitySchema, cols: &str, ranges: usize) -> Option<Box<dyn BulkStream>> {
        let parts = self.split(schema, ranges).await?;
        let mut copies = Vec::with_capacity(parts.len());
        for Range { mut conn, condition, permit } in parts {
            let sql = format!("COPY (SELECT {cols} FROM {condition}) TO STDOUT (FORMAT csv)");
            let (host, database) = (self.host.clone(), self.database.clone());
            copies.push(move |tx: tokio::sync::mpsc::Sender<ConnectorResult<Vec<u8>>>| async move {
                let _permit = permit;
                let mut stream = match copy_on(&mut conn, &sql, host, database).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                // The start of a record a piece ended inside, if any.
                let (mut records, mut held) = (CsvRecords::default(), Vec::new());
                loop {
                    match stream.chunk().await {
                        Ok(Some(mut piece)) => {
                            let Some(end) = records.feed_ends(&piece) else {
                                held.extend_from_slice(&piece);
                                continue;
                            };
                            // PostgreSQL sends a record a message, so a
                            // piece mostly ends on a record's end: it goes
                            // on as it is, not copied.
                            let rest = piece.split_off(end);
                            if !held.is_empty() {
                                held.extend_from_slice(&piece);
                                piece = std::mem::take(&mut held);
                            }
                            held = rest;
                            if tx.send(Ok(piece)).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) if records.complete() => break,
                        Ok(None) => {
                            let e = ConnectorError::Other("a range's CSV ended inside a record".into());
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    }
                }
            });
        }
        Some(ranges_bulk(copies))
    }
}

/// A range's `COPY … TO STDOUT` on its own connection, as a bulk stream.
async fn copy_on<'c>(
    conn: &'c mut PoolConnection<Postgres>,
    sql: &str,
    host: String,
    database: String,
) -> ConnectorResult<PgBulkOut<'c>> {
    match conn.copy_out_raw(sql).await {
        Ok(stream) => Ok(PgBulkOut { stream, host, database, failed: None }),
        Err(e) => Err(err(&e, &host, &database)),
    }
}

/// One range of a split read: its connection (in the read's snapshot),
/// what it selects from (`table WHERE condition`) and its permit of the
/// budget (none for the first).
struct Range {
    conn: PoolConnection<Postgres>,
    condition: String,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

struct PgBulkOut<'a> {
    stream: futures_util::stream::BoxStream<'a, Result<bytes::Bytes, sqlx::Error>>,
    host: String,
    database: String,
    /// A failure met while joining ready pieces, told at the next call.
    failed: Option<ConnectorError>,
}

#[async_trait::async_trait]
impl BulkStream for PgBulkOut<'static> {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        self.chunk().await
    }
}

impl PgBulkOut<'_> {
    /// The next piece, with every piece already received joined to it (up
    /// to [`COPY_CHUNK`]): PostgreSQL sends a message per record, and a
    /// writer is faster with fewer, larger pieces.
    async fn chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        use futures_util::{FutureExt, StreamExt};
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut out = match self.stream.next().await {
            None => return Ok(None),
            Some(Ok(b)) => b.to_vec(),
            Some(Err(e)) => return Err(err(&e, &self.host, &self.database)),
        };
        // Only what is ready: a failure is told at the next call, and the
        // end is met by it.
        while out.len() < COPY_CHUNK {
            match self.stream.next().now_or_never() {
                Some(Some(Ok(b))) => out.extend_from_slice(&b),
                Some(Some(Err(e))) => {
                    self.failed = Some(err(&e, &self.host, &self.database));
                    break;
                }
                Some(None) | None => break,
            }
        }
        Ok(Some(out))
    }
}

/// A cursor read's binary COPY, re-cut into chunks of whole records with
/// the header and trailer taken off, following the cursor column.
struct PgRowsOut {
    stream: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, sqlx::Error>>,
    host: String,
    database: String,
    parser: RowsParser,
}

#[async_trait::async_trait]
impl BulkStream for PgRowsOut {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        use futures_util::StreamExt;
        loop {
            if self.parser.ready() >= ROWS_CHUNK {
                return Ok(Some(self.parser.take()));
            }
            match self.stream.next().await {
                Some(Ok(b)) => self.parser.feed(&b).map_err(ConnectorError::Other)?,
                Some(Err(e)) => return Err(err(&e, &self.host, &self.database)),
                None => {
                    self.parser.end().map_err(ConnectorError::Other)?;
                    return Ok((self.parser.ready() > 0).then(|| self.parser.take()));
                }
            }
        }
    }

    fn records(&self) -> Option<u64> {
        Some(self.parser.taken_records)
    }

    fn last_cursor(&self) -> Option<Value> {
        self.parser.taken_cursor.clone()
    }
}

/// The types of cursor column a binary COPY stream can follow.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CursorKind {
    Int2,
    Int4,
    Int8,
    Timestamp,
    Date,
    Text,
}

impl CursorKind {
    fn of(native: &str) -> Option<Self> {
        Some(match native {
            "smallint" => Self::Int2,
            "integer" => Self::Int4,
            "bigint" => Self::Int8,
            "timestamp with time zone" | "timestamp without time zone" => Self::Timestamp,
            "date" => Self::Date,
            "text" => Self::Text,
            n if n.starts_with("character varying") => Self::Text,
            _ => return None,
        })
    }

    /// A value in binary COPY's representation; `None` for ±infinity.
    fn decode(self, b: &[u8]) -> Option<Value> {
        let wire = match self {
            Self::Int2 => binary::Wire::Int2,
            Self::Int4 => binary::Wire::Int4,
            Self::Int8 => binary::Wire::Int8,
            Self::Timestamp => binary::Wire::Micros,
            Self::Date => binary::Wire::Date,
            Self::Text => binary::Wire::Text(FieldType::String),
        };
        wire.decode(b).ok()
    }
}

/// Cuts a binary COPY byte stream into whole records: drops the header,
/// stops at the trailer, and keeps the cursor column of the last record
/// whose cursor is not NULL.
struct RowsParser {
    width: usize,
    cursor_at: usize,
    kind: CursorKind,
    /// Bytes received and not yet passed on; whole records up to `whole`.
    buf: Vec<u8>,
    whole: usize,
    header_done: bool,
    ended: bool,
    records: u64,
    /// Where the last non-NULL cursor of the whole records is in `buf`.
    cursor: Option<std::ops::Range<usize>>,
    /// What was passed on so far.
    taken_records: u64,
    taken_cursor: Option<Value>,
}

impl RowsParser {
    fn new(width: usize, cursor_at: usize, kind: CursorKind) -> Self {
        Self {
            width,
            cursor_at,
            kind,
            buf: Vec::with_capacity(ROWS_CHUNK + 64 * 1024),
            whole: 0,
            header_done: false,
            ended: false,
            records: 0,
            cursor: None,
            taken_records: 0,
            taken_cursor: None,
        }
    }

    fn ready(&self) -> usize {
        self.whole
    }

    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.ended {
            return if bytes.is_empty() { Ok(()) } else { Err("data after the end of a binary COPY".into()) };
        }
        self.buf.extend_from_slice(bytes);
        if !self.header_done {
            // Signature (11), flags (4), extension length (4) and extension.
            if self.buf.len() < 19 {
                return Ok(());
            }
            if &self.buf[..11] != b"PGCOPY\n\xff\r\n\0" {
                return Err("not a binary COPY stream".into());
            }
            let ext = u32::from_be_bytes(self.buf[15..19].try_into().unwrap_or_default()) as usize;
            if self.buf.len() < 19 + ext {
                return Ok(());
            }
            self.buf.drain(..19 + ext);
            self.header_done = true;
        }
        // Whole records past `whole`.
        let mut at = self.whole;
        while let Some(n) = self.buf.get(at..at + 2) {
            let n = i16::from_be_bytes([n[0], n[1]]);
            if n == -1 {
                self.ended = true;
                self.buf.truncate(at);
                break;
            }
            if n as usize != self.width {
                return Err(format!("a record of {n} columns in a stream of {}", self.width));
            }
            let mut p = at + 2;
            let mut cursor = None;
            let mut complete = true;
            for i in 0..self.width {
                let Some(len) = self.buf.get(p..p + 4) else {
                    complete = false;
                    break;
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                p += 4;
                if len < 0 {
                    continue;
                }
                let end = p + len as usize;
                if end > self.buf.len() {
                    complete = false;
                    break;
                }
                if i == self.cursor_at {
                    cursor = Some(p..end);
                }
                p = end;
            }
            if !complete {
                break;
            }
            if cursor.is_some() {
                self.cursor = cursor;
            }
            self.records += 1;
            at = p;
        }
        self.whole = at;
        Ok(())
    }

    /// At the end of the source's stream: every byte must be part of a
    /// whole record.
    fn end(&mut self) -> Result<(), String> {
        if self.buf.len() > self.whole {
            return Err("the binary COPY stream ended inside a record".into());
        }
        Ok(())
    }

    /// The whole records so far; the partial rest stays.
    fn take(&mut self) -> Vec<u8> {
        if let Some(v) = self.cursor.take().and_then(|r| self.kind.decode(&self.buf[r])) {
            self.taken_cursor = Some(v);
        }
        let rest = self.buf.split_off(self.whole);
        let out = std::mem::replace(&mut self.buf, rest);
        self.whole = 0;
        self.taken_records = self.records;
        out
    }
}

/// A SQL string literal that no content can end early: dollar-quoted with
/// a tag the text does not hold.
fn dollar_quoted(text: &str) -> String {
    let mut tag = String::from("s");
    while text.contains(&format!("${tag}$")) {
        tag.push('s');
    }
    format!("${tag}${text}${tag}$")
}

#[async_trait::async_trait]
impl Destination for PgConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        self.held_positions(stream).await
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.schemas(Some(entity)).await?.pop())
    }

    /// Entities at once: as many as the pool holds with room to spare.
    fn concurrent_writers(&self) -> usize {
        POOL_WRITERS
    }

    fn loads_in_bulk(&self) -> bool {
        true
    }

    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> ConnectorResult<Box<dyn EntityWriter>> {
        self.open_writer(schema, mode, None).await
    }

    async fn open_for(
        &self,
        schema: &EntitySchema,
        mode: WriteMode,
        attempt: &Attempt,
    ) -> ConnectorResult<Box<dyn EntityWriter>> {
        self.open_writer(schema, mode, Some(attempt.mark())).await
    }

    async fn end_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        // A role may end its own sessions (or those of roles it is a
        // member of); only sessions of this database, of this run, of
        // another attempt.
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND starts_with(application_name, $1) \
             AND substr(application_name, length($1) + 1) ~ '^[0-9]{1,9}$' \
             AND substr(application_name, length($1) + 1)::int < $2",
        )
        .bind(attempt.run_mark())
        .bind(attempt.number as i32)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        Ok(ended.max(0) as u64)
    }
}

impl PgConnector {
    async fn open_writer(
        &self,
        schema: &EntitySchema,
        mode: WriteMode,
        mark: Option<String>,
    ) -> ConnectorResult<Box<dyn EntityWriter>> {
        let pk: Vec<String> = schema.primary_key().into_iter().map(str::to_string).collect();
        if mode == WriteMode::Upsert && pk.is_empty() {
            return Err(ConnectorError::InvalidConfig(format!("upsert into {} needs a primary key", schema.name)));
        }
        let existing = self.describe(&schema.name).await?;
        // One connection for the writer's life: the staging table is local
        // to its session, and checkpoints commit on it.
        let mut tx = self.pool.acquire().await.map_err(|e| self.e(&e))?;
        self.run(&mut tx, "BEGIN".into()).await?;
        mark_transaction(&mut tx, mark.as_deref()).await.map_err(|e| self.e(&e))?;
        let pk_list = pk.iter().map(|p| quote_dq(p)).collect::<Vec<_>>().join(", ");
        let new_table = format!("{}__sluice_new", schema.name);
        self.prepare_table(&mut tx, schema, mode, existing.as_ref(), &pk_list, &new_table).await?;
        let stage = if mode == WriteMode::Upsert {
            let name = format!("sluice_stage_{}", uuid::Uuid::new_v4().simple());
            self.run(
                &mut tx,
                format!(
                    "CREATE TEMP TABLE {} ({}, \"__sluice_seq\" bigint) ON COMMIT DELETE ROWS",
                    quote_dq(&name),
                    column_defs(schema, false).join(", ")
                ),
            )
            .await?;
            Some(name)
        } else {
            None
        };
        let col_list = schema.fields.iter().map(|f| quote_dq(&f.name)).collect::<Vec<_>>().join(", ");
        // The stage also takes the sequence the writer numbers rows with.
        let (copy_target, seq_column) = match (&stage, mode) {
            (Some(s), _) => (quote_dq(s), ", \"__sluice_seq\""),
            (None, WriteMode::Overwrite) => (self.qualified(&new_table), ""),
            (None, _) => (self.qualified(&schema.name), ""),
        };
        let merge = stage.as_ref().map(|s| {
            let updates: Vec<String> =
                schema.fields.iter().filter(|f| !f.primary_key).map(|f| format!("{0} = EXCLUDED.{0}", quote_dq(&f.name))).collect();
            let action = if updates.is_empty() { "DO NOTHING".to_string() } else { format!("DO UPDATE SET {}", updates.join(", ")) };
            format!(
                "INSERT INTO {} ({col_list}) SELECT DISTINCT ON ({pk_list}) {col_list} FROM {} ORDER BY {pk_list}, \"__sluice_seq\" DESC NULLS LAST, ctid DESC \
                 ON CONFLICT ({pk_list}) {action}",
                self.qualified(&schema.name),
                quote_dq(s)
            )
        });
        // Binary COPY needs the table's exact types: a table this writer
        // just created from a PostgreSQL source's own types, or the stage
        // of an upsert, created the same way (records staged in bulk carry
        // no sequence: they come ordered by the cursor, so the last one
        // copied, the greatest ctid, wins).
        let exact = schema.fields.iter().all(|f| native_for(f, ENGINE).is_some());
        let bulk_copy = (exact
            && matches!((&stage, mode), (None, WriteMode::Overwrite) | (Some(_), WriteMode::Upsert)))
        .then(|| format!("COPY {copy_target} ({col_list}) FROM STDIN (FORMAT binary)"));
        // Records from any source go in as binary COPY too, encoded here
        // for the types of the table they land in (the stage's and a new
        // table's are the schema's; an existing one's are its own), when
        // every one of them is a type we encode; else as CSV.
        let landing: Vec<String> = schema
            .fields
            .iter()
            .map(|f| match (&stage, mode, existing.as_ref().and_then(|e| e.field(&f.name))) {
                (None, m, Some(current)) if m != WriteMode::Overwrite => {
                    native_for(current, ENGINE).map_or_else(|| native_for_field(f), str::to_string)
                }
                _ => native_for_field(f),
            })
            .collect();
        let mut encoders: Option<Vec<binary::Column>> = landing.iter().map(|n| binary::Column::of(n)).collect();
        if let (Some(e), Some(_)) = (encoders.as_mut(), &stage) {
            e.push(binary::Column::Int8); // the sequence
        }
        let records_copy =
            encoders.map(|e| (format!("COPY {copy_target} ({col_list}{seq_column}) FROM STDIN (FORMAT binary)"), e));
        Ok(Box::new(PgWriter {
            bulk_copy,
            records_copy,
            tx: Some(tx),
            mode,
            copy_sql: format!("COPY {copy_target} ({col_list}{seq_column}) FROM STDIN (FORMAT csv)"),
            merge,
            stage,
            swap: (mode == WriteMode::Overwrite).then(|| Swap {
                table: self.qualified(&schema.name),
                new_table: self.qualified(&new_table),
                bare_table: schema.name.clone(),
                pk_list: pk_list.clone(),
            }),
            order: schema.fields.iter().map(|f| f.name.clone()).collect(),
            host: self.host.clone(),
            database: self.database.clone(),
            stats: WriteStats::default(),
            pending: WriteStats::default(),
            staged: false,
            seq: 0,
            mark,
            table: self.qualified(&schema.name),
            entity: schema.name.clone(),
            key: pk.clone(),
            positions: self.qualified(cdc::POSITIONS),
        }))
    }
}

/// After a writer's `BEGIN`: the transaction carries its attempt's mark
/// (`application_name`), so that a later attempt of the run can end it
/// ([`Destination::end_earlier_attempts`]), and ends itself after
/// [`IDLE_IN_TRANSACTION`] without a statement (a frozen worker's locks,
/// where no later attempt may end its session). Both last as long as the
/// transaction: a pooled connection keeps neither.
async fn mark_transaction(conn: &mut sqlx::PgConnection, mark: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT set_config('application_name', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)",
    )
    .bind(mark.unwrap_or("sluice"))
    .bind(format!("{}s", IDLE_IN_TRANSACTION.as_secs()))
    .execute(conn)
    .await
    .map(|_| ())
}

/// How long a writer's transaction may stay idle (no statement) before the
/// server ends it: far longer than any pause of a working writer (a
/// source's first rows, a checkpoint), a bound on a frozen one.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(600);

/// The column definitions of `schema` (`NOT NULL` where the field is not
/// nullable and not a key, when asked).
fn column_defs(schema: &EntitySchema, with_not_null: bool) -> Vec<String> {
    schema
        .fields
        .iter()
        .map(|f| {
            let nn = if with_not_null && !f.nullable && !f.primary_key { " NOT NULL" } else { "" };
            format!("{} {}{nn}", quote_dq(&f.name), native_for_field(f))
        })
        .collect()
}

impl PgConnector {
    /// Runs one statement on the writer's connection.
    async fn run(&self, tx: &mut PoolConnection<Postgres>, sql: String) -> ConnectorResult<()> {
        sqlx::query(AssertSqlSafe(sql)).execute(&mut **tx).await.map(|_| ()).map_err(|e| self.e(&e))
    }

    /// The table a writer loads: a fresh `<name>__sluice_new` for an
    /// overwrite, the table created (with its key) when missing, or the new
    /// columns added to the one there; array columns marked.
    async fn prepare_table(
        &self,
        tx: &mut PoolConnection<Postgres>,
        schema: &EntitySchema,
        mode: WriteMode,
        existing: Option<&EntitySchema>,
        pk_list: &str,
        new_table: &str,
    ) -> ConnectorResult<()> {
        match (mode, existing) {
            (WriteMode::Overwrite, _) => {
                self.run(tx, format!("DROP TABLE IF EXISTS {}", self.qualified(new_table))).await?;
                self.run(
                    tx,
                    format!("CREATE TABLE {} ({})", self.qualified(new_table), column_defs(schema, true).join(", ")),
                )
                .await?;
            }
            (_, None) => {
                let mut cols = column_defs(schema, true);
                if !pk_list.is_empty() {
                    cols.push(format!("PRIMARY KEY ({pk_list})"));
                }
                self.run(tx, format!("CREATE TABLE {} ({})", self.qualified(&schema.name), cols.join(", "))).await?;
            }
            (_, Some(current)) => {
                let table = self.qualified(&schema.name);
                for f in &schema.fields {
                    let (column, want) = (quote_dq(&f.name), native_for_field(f));
                    match current.field(&f.name) {
                        None => {
                            self.run(tx, format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {want}"))
                                .await?;
                        }
                        // A source column widened (integer to bigint, a
                        // longer varchar, a larger numeric): so is this one,
                        // or its new values would not fit.
                        Some(have) if native_for(have, ENGINE).is_some_and(|h| widens(h, &want)) => {
                            self.run(tx, format!("ALTER TABLE {table} ALTER COLUMN {column} TYPE {want}")).await?;
                        }
                        Some(_) => {}
                    }
                }
                // A column the source no longer has is written null from now
                // on: it may not stay NOT NULL.
                for gone in
                    current.fields.iter().filter(|c| !c.nullable && !c.primary_key && schema.field(&c.name).is_none())
                {
                    self.run(tx, format!("ALTER TABLE {table} ALTER COLUMN {} DROP NOT NULL", quote_dq(&gone.name)))
                        .await?;
                }
            }
        }
        let created = match (mode, existing) {
            (WriteMode::Overwrite, _) => Some(new_table),
            (_, None) => Some(schema.name.as_str()),
            _ => None,
        };
        for f in &schema.fields {
            let added = existing.is_some_and(|e| e.field(&f.name).is_none());
            if f.field_type == FieldType::Array && native_for(f, ENGINE).is_none() && (created.is_some() || added) {
                let table = created.unwrap_or(&schema.name);
                self.run(
                    tx,
                    format!("COMMENT ON COLUMN {}.{} IS '{ARRAY_COMMENT}'", self.qualified(table), quote_dq(&f.name)),
                )
                .await?;
            }
        }
        Ok(())
    }
}

struct Swap {
    table: String,
    new_table: String,
    bare_table: String,
    pk_list: String,
}

struct PgWriter {
    /// The binary COPY statement, when the table can load a bulk stream.
    bulk_copy: Option<String>,
    /// The binary COPY statement for records, and each column's encoder
    /// (`None`: records go as CSV).
    records_copy: Option<(String, Vec<binary::Column>)>,
    /// The writer's connection, inside a transaction while `Some`.
    tx: Option<PoolConnection<Postgres>>,
    mode: WriteMode,
    copy_sql: String,
    merge: Option<String>,
    stage: Option<String>,
    swap: Option<Swap>,
    order: Vec<String>,
    host: String,
    database: String,
    stats: WriteStats,
    pending: WriteStats,
    staged: bool,
    /// The staged rows' order (the last version of a key wins the merge).
    seq: i64,
    /// The attempt's mark, set again in each transaction.
    mark: Option<String>,
    /// The table (qualified and bare) and its key's fields, for deletes,
    /// updates and change stream positions (`cdc`).
    table: String,
    entity: String,
    key: Vec<String>,
    positions: String,
}

impl Drop for PgWriter {
    /// A writer dropped mid-transaction (a cancelled sync) must not hand its
    /// open transaction back to the pool: close the connection instead,
    /// which rolls it back.
    fn drop(&mut self) {
        if let Some(mut conn) = self.tx.take() {
            conn.close_on_drop();
        }
    }
}

impl PgWriter {
    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }

    /// Writes records as one binary COPY, encoded for the landing table's
    /// types; a value its column cannot hold fails the write, naming both.
    async fn write_binary(&mut self, rows: &[Vec<Value>]) -> ConnectorResult<()> {
        let Some((sql, encoders)) = &self.records_copy else {
            return Err(ConnectorError::Other("this table's types have no binary encoding".into()));
        };
        let (host, db) = (self.host.clone(), self.database.clone());
        let staging = self.stage.is_some();
        let width =
            i16::try_from(encoders.len()).map_err(|_| ConnectorError::Unsupported("over 32767 columns".into()))?;
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = tx.copy_in_raw(sql).await.map_err(|e| err(&e, &host, &db))?;
        let mut buf = Vec::with_capacity(COPY_CHUNK + 4096);
        let mut sent = 0u64;
        buf.extend_from_slice(COPY_HEADER);
        for row in rows {
            buf.extend_from_slice(&width.to_be_bytes());
            for (i, (enc, v)) in encoders.iter().zip(row).enumerate() {
                if let Err(e) = enc.encode(&mut buf, v) {
                    let _ = copy.abort("a value does not fit its column").await;
                    let column = self.order.get(i).map(String::as_str).unwrap_or("?");
                    return Err(ConnectorError::Other(format!("column {column}: {e}")));
                }
            }
            if staging {
                self.seq += 1;
                binary::Column::Int8.encode(&mut buf, &Value::Int(self.seq)).ok();
            }
            if buf.len() >= COPY_CHUNK {
                sent += buf.len() as u64;
                copy.send(std::mem::take(&mut buf)).await.map_err(|e| err(&e, &host, &db))?;
            }
        }
        buf.extend_from_slice(COPY_TRAILER);
        sent += buf.len() as u64;
        copy.send(buf).await.map_err(|e| err(&e, &host, &db))?;
        copy.finish().await.map_err(|e| err(&e, &host, &db))?;
        self.staged = true;
        self.pending.rows_written += rows.len() as u64;
        self.pending.bytes += sent;
        Ok(())
    }

    async fn merge_stage(&mut self) -> ConnectorResult<()> {
        if let (Some(sql), true) = (self.merge.clone(), self.staged) {
            let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
            let r = sqlx::query(AssertSqlSafe(sql)).execute(&mut **tx).await;
            r.map_err(|e| self.e(&e))?;
            self.staged = false;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl EntityWriter for PgWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rows = crate::sqlite::align(batch, &self.order);
        if self.records_copy.is_some() {
            return self.write_binary(&rows).await;
        }
        let copy_sql = self.copy_sql.clone();
        let (host, db) = (self.host.clone(), self.database.clone());
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = tx.copy_in_raw(&copy_sql).await.map_err(|e| err(&e, &host, &db))?;
        let mut buf = Vec::with_capacity(COPY_CHUNK + 4096);
        let staging = self.stage.is_some();
        for row in rows.iter() {
            csv_row(&mut buf, row);
            if staging {
                use std::io::Write;
                buf.pop();
                self.seq += 1;
                let _ = writeln!(buf, ",{}", self.seq); // into a Vec: cannot fail
            }
            if buf.len() >= COPY_CHUNK {
                copy.send(std::mem::take(&mut buf)).await.map_err(|e| err(&e, &host, &db))?;
            }
        }
        if !buf.is_empty() {
            copy.send(buf).await.map_err(|e| err(&e, &host, &db))?;
        }
        copy.finish().await.map_err(|e| err(&e, &host, &db))?;
        self.staged = true;
        self.pending.rows_written += batch.len() as u64;
        self.pending.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Overwrite {
            return Ok(self.stats);
        }
        self.merge_stage().await?;
        let (host, db) = (self.host.clone(), self.database.clone());
        let conn = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        sqlx::query("COMMIT").execute(&mut **conn).await.map_err(|e| err(&e, &host, &db))?;
        sqlx::query("BEGIN").execute(&mut **conn).await.map_err(|e| err(&e, &host, &db))?;
        mark_transaction(conn, self.mark.as_deref()).await.map_err(|e| err(&e, &host, &db))?;
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        self.pending = WriteStats::default();
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        self.merge_stage().await?;
        let (host, db) = (self.host.clone(), self.database.clone());
        let mut tx = self.tx.take().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        if let Some(s) = &self.swap {
            let exec = |sql: String| sqlx::query(AssertSqlSafe(sql));
            exec(format!("DROP TABLE IF EXISTS {}", s.table))
                .execute(&mut *tx)
                .await
                .map_err(|e| err(&e, &host, &db))?;
            exec(format!("ALTER TABLE {} RENAME TO {}", s.new_table, quote_dq(&s.bare_table)))
                .execute(&mut *tx)
                .await
                .map_err(|e| err(&e, &host, &db))?;
            if !s.pk_list.is_empty() {
                exec(format!("ALTER TABLE {} ADD PRIMARY KEY ({})", s.table, s.pk_list))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| err(&e, &host, &db))?;
            }
        }
        if let Some(stage) = &self.stage {
            sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {}", quote_dq(stage))))
                .execute(&mut *tx)
                .await
                .map_err(|e| err(&e, &host, &db))?;
        }
        sqlx::query("COMMIT").execute(&mut *tx).await.map_err(|e| err(&e, &host, &db))?;
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        Ok(self.stats)
    }

    fn bulk_format(&self) -> Option<&'static str> {
        self.bulk_copy.as_ref().map(|_| if self.mode == WriteMode::Upsert { BULK_ROWS_FORMAT } else { BULK_FORMAT })
    }

    async fn write_bulk(&mut self, stream: &mut dyn BulkStream, max_records: Option<u64>) -> ConnectorResult<u64> {
        let sql = self
            .bulk_copy
            .clone()
            .ok_or_else(|| ConnectorError::Unsupported("this table loads no bulk format".into()))?;
        // Records alone (a stage's load) are framed here, one COPY per call.
        let framed = self.mode == WriteMode::Upsert;
        let start = stream.records().unwrap_or(0);
        let Some(first) = stream.next_chunk().await? else { return Ok(0) };
        let (host, db) = (self.host.clone(), self.database.clone());
        let conn = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = conn.copy_in_raw(&sql).await.map_err(|e| err(&e, &host, &db))?;
        if framed {
            copy.send(COPY_HEADER).await.map_err(|e| err(&e, &host, &db))?;
        }
        let mut bytes = first.len() as u64;
        copy.send(first).await.map_err(|e| err(&e, &host, &db))?;
        loop {
            if let (Some(max), Some(n)) = (max_records, stream.records())
                && n - start >= max
            {
                break;
            }
            match stream.next_chunk().await {
                Ok(Some(chunk)) => {
                    bytes += chunk.len() as u64;
                    copy.send(chunk).await.map_err(|e| err(&e, &host, &db))?;
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = copy.abort("the source failed").await;
                    return Err(e);
                }
            }
        }
        if framed {
            copy.send(COPY_TRAILER).await.map_err(|e| err(&e, &host, &db))?;
        }
        let rows = copy.finish().await.map_err(|e| err(&e, &host, &db))?;
        if framed {
            self.staged = true;
        }
        self.pending.rows_written += rows;
        self.pending.bytes += bytes;
        Ok(rows)
    }

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        self.delete_keys(keys).await
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        self.update_rows(rows).await
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.write_position(stream, position).await
    }

    async fn abort(mut self: Box<Self>) {
        if let Some(mut conn) = self.tx.take() {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            if let Some(stage) = &self.stage {
                let _ = sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {}", quote_dq(stage))))
                    .execute(&mut *conn)
                    .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_quote_text_and_leave_null_empty() {
        let mut out = Vec::new();
        csv_row(
            &mut out,
            &[
                Value::Int(1),
                Value::Null,
                Value::String("a\"b,c\nd".into()),
                Value::String(String::new()),
                Value::Bool(true),
                Value::Bytes(vec![0xde, 0xad]),
            ],
        );
        assert_eq!(String::from_utf8(out).unwrap(), "1,,\"a\"\"b,c\nd\",\"\",t,\"\\xdead\"\n");
    }

    /// A binary COPY stream: header (with an extension area), records of
    /// (bigint id, text, timestamptz cursor), trailer.
    fn copy_stream(records: &[(i64, Option<&str>, Option<i64>)]) -> Vec<u8> {
        let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&3u32.to_be_bytes());
        out.extend_from_slice(b"ext");
        for (id, text, us) in records {
            out.extend_from_slice(&3i16.to_be_bytes());
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&id.to_be_bytes());
            match text {
                Some(t) => {
                    out.extend_from_slice(&(t.len() as i32).to_be_bytes());
                    out.extend_from_slice(t.as_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
            match us {
                Some(us) => {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&us.to_be_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    #[test]
    fn a_binary_copy_is_cut_into_whole_records_following_the_cursor() {
        let day = 86_400_000_000i64;
        let records =
            [(1, Some("a"), Some(0)), (2, None, Some(day)), (3, Some("c"), None), (4, Some("d\u{e9}"), Some(2 * day))];
        let stream = copy_stream(&records);
        let header = 19 + 3;
        // Fed a byte at a time, taken whenever something is whole.
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        let mut out = Vec::new();
        let mut cursors = Vec::new();
        for b in &stream {
            p.feed(std::slice::from_ref(b)).unwrap();
            if p.ready() > 0 {
                out.extend(p.take());
                cursors.push((p.taken_records, p.taken_cursor.clone()));
            }
        }
        p.end().unwrap();
        assert_eq!(out, stream[header..stream.len() - 2], "the records alone, header and trailer gone");
        assert_eq!(p.taken_records, 4);
        let ts = |d: i64| Value::Timestamp(time::macros::datetime!(2000-01-01 0:00 UTC) + time::Duration::days(d));
        assert_eq!(cursors[0], (1, Some(ts(0))));
        assert_eq!(cursors[2], (3, Some(ts(1))), "a NULL cursor keeps the last one");
        assert_eq!(cursors[3], (4, Some(ts(2))));

        // Fed whole, taken once.
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        p.feed(&stream).unwrap();
        p.end().unwrap();
        assert_eq!(p.take().len(), stream.len() - header - 2);
        assert_eq!((p.taken_records, p.taken_cursor.clone()), (4, Some(ts(2))));
    }

    #[test]
    fn a_broken_binary_copy_is_an_error_not_a_record() {
        let stream = copy_stream(&[(1, Some("a"), Some(0))]);
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        p.feed(&stream[..stream.len() - 5]).unwrap();
        assert!(p.end().is_err(), "ended inside a record");
        let mut p = RowsParser::new(2, 1, CursorKind::Int8);
        assert!(p.feed(&stream).is_err(), "a record of another width");
        let mut p = RowsParser::new(3, 2, CursorKind::Int8);
        assert!(p.feed(b"COPY not binary at all").is_err());
    }

    #[test]
    fn cursor_columns_decode_from_their_binary_form() {
        assert_eq!(CursorKind::of("bigint"), Some(CursorKind::Int8));
        assert_eq!(CursorKind::of("character varying(20)"), Some(CursorKind::Text));
        assert_eq!(CursorKind::of("numeric(12,2)"), None, "followed by the row path");
        assert_eq!(CursorKind::Int2.decode(&(-7i16).to_be_bytes()), Some(Value::Int(-7)));
        assert_eq!(CursorKind::Int4.decode(&70_000i32.to_be_bytes()), Some(Value::Int(70_000)));
        assert_eq!(CursorKind::Int8.decode(&i64::MIN.to_be_bytes()), Some(Value::Int(i64::MIN)));
        assert_eq!(CursorKind::Int8.decode(&[1, 2]), None);
        assert_eq!(
            CursorKind::Timestamp.decode(&1_500_000i64.to_be_bytes()),
            Some(Value::Timestamp(time::macros::datetime!(2000-01-01 0:00:01.5 UTC)))
        );
        assert_eq!(CursorKind::Timestamp.decode(&i64::MAX.to_be_bytes()), None, "infinity");
        assert_eq!(
            CursorKind::Date.decode(&(-1i32).to_be_bytes()),
            Some(Value::Date(time::macros::date!(1999 - 12 - 31)))
        );
        assert_eq!(CursorKind::Text.decode("z\u{e9}".as_bytes()), Some(Value::String("z\u{e9}".into())));
    }

    #[test]
    fn dollar_quoting_outlives_any_text() {
        assert_eq!(dollar_quoted("2026-01-01"), "$s$2026-01-01$s$");
        assert_eq!(dollar_quoted("a$s$b"), "$ss$a$s$b$ss$");
        assert_eq!(dollar_quoted("'; DROP TABLE x; --"), "$s$'; DROP TABLE x; --$s$");
    }

    #[test]
    fn csv_rows_write_every_type_as_copy_reads_it() {
        let mut out = Vec::new();
        let t = time::macros::datetime!(2026-03-04 05:06:07.089 +05:30);
        csv_row(
            &mut out,
            &[
                Value::Int(-9_223_372_036_854_775_808),
                Value::Decimal("-12.50".into()),
                Value::Float(1e308),
                Value::Float(f64::NAN),
                Value::Timestamp(t),
                Value::Date(time::macros::date!(2026 - 03 - 04)),
                Value::Json(serde_json::json!({"q": ["say \"hi\"", 2]})),
                Value::Bool(false),
            ],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-9223372036854775808,\"-12.50\",\"1e308\",\"NaN\",\"2026-03-03T23:36:07.089000Z\",\"2026-03-04\",\
             \"{\"\"q\"\":[\"\"say \\\"\"hi\\\"\"\"\",2]}\",f\n"
        );
    }

    #[test]
    fn native_types_map_to_the_vocabulary() {
        assert_eq!(map_native("numeric(12,2)", "N"), FieldType::Decimal);
        assert_eq!(map_native("timestamp with time zone", "D"), FieldType::Timestamp);
        assert_eq!(map_native("integer[]", "A"), FieldType::Array);
        assert_eq!(map_native("uuid", "U"), FieldType::String);
        assert_eq!(map_native("jsonb", "U"), FieldType::Object);
    }

    #[test]
    fn floats_print_so_they_round_trip() {
        assert_eq!(float_text(0.1), "0.1");
        assert_eq!(float_text(f64::MAX).parse::<f64>().unwrap(), f64::MAX);
        assert_eq!(float_text(f64::NEG_INFINITY), "-Infinity");
    }
}
