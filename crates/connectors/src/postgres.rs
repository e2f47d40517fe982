//! The PostgreSQL connector.
//!
//! Reading casts each column to a type sqlx decodes (numerics and unknown
//! types as text, JSON and arrays as JSON text, timestamps without a zone
//! as UTC) and streams rows through a channel. Writing uses
//! `COPY … FROM STDIN (FORMAT csv)`: straight into the table for append;
//! into a session-local staging table merged with one
//! `INSERT … ON CONFLICT` per checkpoint for upsert (the last staged row of
//! a key wins); into a fresh table that replaces the old one in the same
//! transaction for overwrite, with the primary key built after the load.

use crate::common::*;
use sluice_domain::connector::*;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgSslMode};
use sqlx::{AssertSqlSafe, Postgres, Row};
use std::sync::Arc;
use std::time::Duration;

pub const ENGINE: &str = "postgres";
/// PostgreSQL's binary COPY format, passed between PostgreSQL connectors.
pub const BULK_FORMAT: &str = "postgres-binary";
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
}

pub struct PgConnector {
    pool: PgPool,
    opts: PgConnectOptions,
    schema: String,
    host: String,
    database: String,
}

fn err(e: &sqlx::Error, host: &str, database: &str) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) => match d.code().as_deref() {
            Some("28P01") | Some("28000") => ConnectorError::AuthFailed(d.message().to_string()),
            Some("3D000") => {
                ConnectorError::DatabaseNotFound(format!("database \"{database}\" does not exist on {host}"))
            }
            Some("42P01") => ConnectorError::EntityNotFound(d.message().to_string()),
            Some("57014") => ConnectorError::Timeout(d.message().to_string()),
            _ => ConnectorError::Other(d.message().to_string()),
        },
        sqlx::Error::Io(io) => ConnectorError::Unreachable(format!("{host}: {io}")),
        sqlx::Error::PoolTimedOut => ConnectorError::Timeout(format!("connecting to {host}")),
        sqlx::Error::Tls(t) => ConnectorError::Unreachable(format!("{host}: TLS: {t}")),
        other => ConnectorError::Other(db_message(other)),
    }
}

impl PgConnector {
    pub fn new(s: PgSettings) -> ConnectorResult<Self> {
        let ssl = match s.sslmode.as_str() {
            "disable" => PgSslMode::Disable,
            "prefer" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            other => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "sslmode must be disable, prefer or require, not '{other}'"
                )));
            }
        };
        let mut opts = PgConnectOptions::new()
            .host(&s.host)
            .port(s.port)
            .database(&s.database)
            .username(&s.user)
            .ssl_mode(ssl)
            .application_name("sluice");
        if let Some(p) = &s.password {
            opts = opts.password(p);
        }
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .min_connections(0)
            .acquire_timeout(CONNECT_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(60)))
            .connect_lazy_with(opts.clone());
        Ok(Self { pool, opts, schema: s.schema, host: format!("{}:{}", s.host, s.port), database: s.database })
    }

    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
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
        FieldType::Object | FieldType::Array => format!("to_json({c})::text"),
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
            Value::Timestamp(t) => {
                let t = t.to_offset(time::UtcOffset::UTC);
                write!(
                    out,
                    "\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z\"",
                    t.year(),
                    t.month() as u8,
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second(),
                    t.microsecond()
                )
            }
            Value::Date(d) => write!(out, "\"{:04}-{:02}-{:02}\"", d.year(), d.month() as u8, d.day()),
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
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        use sqlx::postgres::PgPoolCopyExt;
        if format != BULK_FORMAT {
            return Ok(None);
        }
        let cols = fields.iter().map(|f| quote_dq(&f.name)).collect::<Vec<_>>().join(", ");
        let sql = format!("COPY (SELECT {cols} FROM {}) TO STDOUT (FORMAT binary)", self.qualified(entity));
        let stream = self.pool.copy_out_raw(&sql).await.map_err(|e| self.e(&e))?;
        Ok(Some(Box::new(PgBulkOut { stream, host: self.host.clone(), database: self.database.clone() })))
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        Ok(Arc::new(self.table(entity).await?.fields))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema = self.table(&req.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        let (sql, bound) = select_sql(&schema, &cols, &self.qualified(&schema.name), &req, quote_dq, |f| {
            format!("CAST($1 AS {})", native_for_field(f))
        })?;
        let bound = bound.as_ref().and_then(literal);
        let fields = Arc::new(schema.fields);
        let types: Vec<FieldType> = fields.iter().map(|f| f.field_type).collect();
        let pool = self.pool.clone();
        let (host, db) = (self.host.clone(), self.database.clone());
        let batch_size = if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size };
        let f2 = fields.clone();
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            let mut q = sqlx::query(AssertSqlSafe(sql));
            if let Some(b) = bound {
                q = q.bind(b);
            }
            let rows = q.fetch(&pool);
            pump_rows(
                rows,
                f2,
                batch_size,
                tx,
                |row| {
                    types.iter().enumerate().map(|(i, t)| decode(row, i, *t).map_err(|e| err(&e, &host, &db))).collect()
                },
                |e| err(e, &host, &db),
            )
            .await;
        })))
    }
}

struct PgBulkOut {
    stream: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, sqlx::Error>>,
    host: String,
    database: String,
}

#[async_trait::async_trait]
impl BulkStream for PgBulkOut {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        use futures_util::StreamExt;
        match self.stream.next().await {
            None => Ok(None),
            Some(Ok(b)) => Ok(Some(b.to_vec())),
            Some(Err(e)) => Err(err(&e, &self.host, &self.database)),
        }
    }
}

#[async_trait::async_trait]
impl Destination for PgConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.schemas(Some(entity)).await?.pop())
    }

    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> ConnectorResult<Box<dyn EntityWriter>> {
        let pk: Vec<String> = schema.primary_key().into_iter().map(str::to_string).collect();
        if mode == WriteMode::Upsert && pk.is_empty() {
            return Err(ConnectorError::InvalidConfig(format!("upsert into {} needs a primary key", schema.name)));
        }
        let existing = self.describe(&schema.name).await?;
        // One connection for the writer's life: the staging table is local
        // to its session, and checkpoints commit on it.
        let mut tx = self.pool.acquire().await.map_err(|e| self.e(&e))?;
        sqlx::query("BEGIN").execute(&mut *tx).await.map_err(|e| self.e(&e))?;
        let exec = |sql: String| sqlx::query(AssertSqlSafe(sql));
        let columns = |with_not_null: bool| -> Vec<String> {
            schema
                .fields
                .iter()
                .map(|f| {
                    let nn = if with_not_null && !f.nullable && !f.primary_key { " NOT NULL" } else { "" };
                    format!("{} {}{nn}", quote_dq(&f.name), native_for_field(f))
                })
                .collect()
        };
        let pk_list = pk.iter().map(|p| quote_dq(p)).collect::<Vec<_>>().join(", ");
        let new_table = format!("{}__sluice_new", schema.name);
        let mut stage = None;
        match (mode, &existing) {
            (WriteMode::Overwrite, _) => {
                exec(format!("DROP TABLE IF EXISTS {}", self.qualified(&new_table)))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.e(&e))?;
                exec(format!("CREATE TABLE {} ({})", self.qualified(&new_table), columns(true).join(", ")))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.e(&e))?;
            }
            (_, None) => {
                let mut cols = columns(true);
                if !pk.is_empty() {
                    cols.push(format!("PRIMARY KEY ({pk_list})"));
                }
                exec(format!("CREATE TABLE {} ({})", self.qualified(&schema.name), cols.join(", ")))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.e(&e))?;
            }
            (_, Some(current)) => {
                for f in &schema.fields {
                    if current.field(&f.name).is_none() {
                        exec(format!(
                            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}",
                            self.qualified(&schema.name),
                            quote_dq(&f.name),
                            native_for_field(f)
                        ))
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| self.e(&e))?;
                    }
                }
            }
        }
        let created = match (mode, &existing) {
            (WriteMode::Overwrite, _) => Some(new_table.as_str()),
            (_, None) => Some(schema.name.as_str()),
            _ => None,
        };
        for f in &schema.fields {
            let added = existing.as_ref().is_some_and(|e| e.field(&f.name).is_none());
            if f.field_type == FieldType::Array && native_for(f, ENGINE).is_none() && (created.is_some() || added) {
                let table = created.unwrap_or(&schema.name);
                exec(format!("COMMENT ON COLUMN {}.{} IS '{ARRAY_COMMENT}'", self.qualified(table), quote_dq(&f.name)))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.e(&e))?;
            }
        }
        if mode == WriteMode::Upsert {
            let name = format!("sluice_stage_{}", uuid::Uuid::new_v4().simple());
            exec(format!(
                "CREATE TEMP TABLE {} ({}, \"__sluice_seq\" bigint NOT NULL) ON COMMIT DELETE ROWS",
                quote_dq(&name),
                columns(false).join(", ")
            ))
            .execute(&mut *tx)
            .await
            .map_err(|e| self.e(&e))?;
            stage = Some(name);
        }
        let col_list = schema.fields.iter().map(|f| quote_dq(&f.name)).collect::<Vec<_>>().join(", ");
        let copy_sql = match (&stage, mode) {
            (Some(s), _) => format!("COPY {} ({col_list}, \"__sluice_seq\") FROM STDIN (FORMAT csv)", quote_dq(s)),
            (None, WriteMode::Overwrite) => {
                format!("COPY {} ({col_list}) FROM STDIN (FORMAT csv)", self.qualified(&new_table))
            }
            (None, _) => format!("COPY {} ({col_list}) FROM STDIN (FORMAT csv)", self.qualified(&schema.name)),
        };
        let merge = stage.as_ref().map(|s| {
            let updates: Vec<String> =
                schema.fields.iter().filter(|f| !f.primary_key).map(|f| format!("{0} = EXCLUDED.{0}", quote_dq(&f.name))).collect();
            let action = if updates.is_empty() { "DO NOTHING".to_string() } else { format!("DO UPDATE SET {}", updates.join(", ")) };
            format!(
                "INSERT INTO {} ({col_list}) SELECT DISTINCT ON ({pk_list}) {col_list} FROM {} ORDER BY {pk_list}, \"__sluice_seq\" DESC \
                 ON CONFLICT ({pk_list}) {action}",
                self.qualified(&schema.name),
                quote_dq(s)
            )
        });
        // Binary COPY needs the table's exact types: a table this writer
        // just created from a PostgreSQL source's own types.
        let bulk_copy = (mode == WriteMode::Overwrite && schema.fields.iter().all(|f| native_for(f, ENGINE).is_some()))
            .then(|| format!("COPY {} ({col_list}) FROM STDIN (FORMAT binary)", self.qualified(&new_table)));
        Ok(Box::new(PgWriter {
            bulk_copy,
            tx: Some(tx),
            mode,
            copy_sql,
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
        }))
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
        let copy_sql = self.copy_sql.clone();
        let (host, db) = (self.host.clone(), self.database.clone());
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = tx.copy_in_raw(&copy_sql).await.map_err(|e| err(&e, &host, &db))?;
        let mut buf = Vec::with_capacity(COPY_CHUNK + 4096);
        let staging = self.stage.is_some();
        for row in rows.iter() {
            csv_row(&mut buf, row);
            if staging {
                buf.pop();
                self.seq += 1;
                buf.extend_from_slice(format!(",{}\n", self.seq).as_bytes());
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
        self.bulk_copy.as_ref().map(|_| BULK_FORMAT)
    }

    async fn write_bulk(&mut self, mut stream: Box<dyn BulkStream>) -> ConnectorResult<u64> {
        let sql = self
            .bulk_copy
            .clone()
            .ok_or_else(|| ConnectorError::Unsupported("this table loads no bulk format".into()))?;
        let (host, db) = (self.host.clone(), self.database.clone());
        let conn = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = conn.copy_in_raw(&sql).await.map_err(|e| err(&e, &host, &db))?;
        let mut bytes = 0u64;
        loop {
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
        let rows = copy.finish().await.map_err(|e| err(&e, &host, &db))?;
        self.pending.rows_written += rows;
        self.pending.bytes += bytes;
        Ok(rows)
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
