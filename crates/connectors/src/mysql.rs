//! The MySQL / MariaDB connector.
//!
//! Sessions run in UTC (`time_zone = '+00:00'`), so `TIMESTAMP` columns read
//! and write as UTC; `DATETIME` values are taken as UTC. Reading takes
//! temporal, decimal, text and JSON columns as the server sends them
//! (temporal ones decoded from the binary protocol's parts) and casts the
//! others to a decodable form.
//! Writing uses multi-row `INSERT`s inside a transaction, executed by a
//! task of their own so that the next statement is encoded while the
//! server runs the last, `ON DUPLICATE KEY UPDATE` for upsert, and for
//! overwrite a fresh table swapped in with one
//! atomic `RENAME TABLE`. MariaDB's `JSON` is `LONGTEXT` with a
//! `json_valid` check; discovery recognises it.

use crate::common::*;
use crate::sqlite::{align, text_value};
use sluice_domain::connect::connector::*;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, Row};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

pub const ENGINE: &str = "mysql";
const MAX_PARAMS: usize = 60_000;

#[derive(Clone)]
pub struct MySqlSettings {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    /// `disabled`, `preferred` (the default), `required`, `verify_ca` or
    /// `verify_identity`.
    pub ssl_mode: String,
    /// PEM of the CA certificate(s) the server's certificate must chain to.
    pub ssl_ca: Option<String>,
    /// Whether a server that asks for the password in clear text
    /// (`mysql_clear_password`) over a connection that is not encrypted
    /// gets it (by default it does not).
    pub allow_cleartext_password: bool,
}

pub struct MySqlConnector {
    pool: MySqlPool,
    opts: MySqlConnectOptions,
    host: String,
    database: String,
    /// The connections split reads may take beyond their first.
    extras: Arc<tokio::sync::Semaphore>,
}

fn err(e: &sqlx::Error, host: &str, database: &str) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) => match d.code().as_deref() {
            Some("28000") => ConnectorError::AuthFailed(d.message().to_string()),
            Some("42000") if d.message().contains("Unknown database") => {
                ConnectorError::DatabaseNotFound(format!("database '{database}' does not exist on {host}"))
            }
            Some("42S02") => ConnectorError::EntityNotFound(d.message().to_string()),
            _ if d.message().contains("Access denied") => ConnectorError::AuthFailed(d.message().to_string()),
            _ if d.message().contains("Unknown database") => {
                ConnectorError::DatabaseNotFound(format!("database '{database}' does not exist on {host}"))
            }
            _ => ConnectorError::Other(d.message().to_string()),
        },
        other => {
            transport_error(other, host, "MySQL or MariaDB").unwrap_or_else(|| ConnectorError::Other(db_message(other)))
        }
    }
}

impl MySqlConnector {
    pub fn new(s: MySqlSettings) -> ConnectorResult<Self> {
        let mut opts = MySqlConnectOptions::new()
            .host(&s.host)
            .port(s.port)
            .database(&s.database)
            .username(&s.user)
            .charset("utf8mb4")
            .timezone(Some("+00:00".to_string()))
            .enable_cleartext_plugin(s.allow_cleartext_password);
        if let Some(p) = &s.password {
            opts = opts.password(p);
        }
        use sqlx::mysql::MySqlSslMode;
        opts = opts.ssl_mode(match s.ssl_mode.as_str() {
            "disabled" => MySqlSslMode::Disabled,
            "preferred" => MySqlSslMode::Preferred,
            "required" => MySqlSslMode::Required,
            "verify_ca" => MySqlSslMode::VerifyCa,
            "verify_identity" => MySqlSslMode::VerifyIdentity,
            other => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "ssl_mode must be disabled, preferred, required, verify_ca or verify_identity, not '{other}'"
                )));
            }
        });
        if let Some(ca) = &s.ssl_ca {
            opts = opts.ssl_ca_from_pem(check_pem(ca)?);
        }
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(CONNECT_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(60)))
            .connect_lazy_with(opts.clone());
        Ok(Self { pool, opts, host: format!("{}:{}", s.host, s.port), database: s.database, extras: range_extras() })
    }

    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }

    /// One table's schema; `EntityNotFound` when there is none.
    async fn table(&self, entity: &str) -> ConnectorResult<EntitySchema> {
        self.schemas(Some(entity))
            .await?
            .pop()
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("table '{entity}' does not exist")))
    }

    async fn schemas(&self, table: Option<&str>) -> ConnectorResult<Vec<EntitySchema>> {
        with_timeout("reading the catalog", CONNECT_TIMEOUT, async {
            let rows = sqlx::query(
                "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
                 CAST(DATA_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR), CAST(COLUMN_KEY AS CHAR), CAST(COLUMN_COMMENT AS CHAR) \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND (? IS NULL OR TABLE_NAME = ?) \
                 AND TABLE_NAME NOT LIKE '%\\_\\_sluice\\_%' ORDER BY TABLE_NAME, ORDINAL_POSITION",
            )
            .bind(table)
            .bind(table)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
            // MariaDB's JSON columns: LONGTEXT with a json_valid() check.
            let json_checks: HashSet<(String, String)> = sqlx::query(
                "SELECT CAST(TABLE_NAME AS CHAR), CAST(CHECK_CLAUSE AS CHAR) FROM information_schema.CHECK_CONSTRAINTS \
                 WHERE CONSTRAINT_SCHEMA = DATABASE()",
            )
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| {
                let t: String = r.get(0);
                let clause: String = r.get(1);
                let col = clause.strip_prefix("json_valid(`")?.split('`').next()?.to_string();
                Some((t, col))
            })
            .collect();
            let mut out: Vec<EntitySchema> = Vec::new();
            for r in rows {
                let table: String = r.get(0);
                let name: String = r.get(1);
                let column_type: String = r.get(2);
                let data_type: String = r.get(3);
                let nullable: String = r.get(4);
                let key: String = r.get(5);
                let comment: String = r.get(6);
                let is_json = json_checks.contains(&(table.clone(), name.clone())) || data_type.eq_ignore_ascii_case("json");
                let native = if is_json { "json".to_string() } else { column_type };
                let field_type = match (is_json, comment == ARRAY_COMMENT) {
                    (true, true) => FieldType::Array,
                    (true, false) => FieldType::Object,
                    _ => map_native(&native, &data_type),
                };
                let f = Field {
                    field_type,
                    name,
                    nullable: nullable == "YES",
                    primary_key: key == "PRI",
                    native_type: Some(native_tag(ENGINE, &native)),
                };
                match out.last_mut() {
                    Some(s) if s.name == table => s.fields.push(f),
                    _ => out.push(EntitySchema { name: table, fields: vec![f] }),
                }
            }
            Ok(out)
        })
        .await
    }
}

/// MySQL type → vocabulary.
pub fn map_native(column_type: &str, data_type: &str) -> FieldType {
    let ct = column_type.to_ascii_lowercase();
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" if ct.starts_with("tinyint(1)") => FieldType::Boolean,
        "bool" | "boolean" => FieldType::Boolean,
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" => FieldType::Integer,
        "float" | "double" | "real" => FieldType::Number,
        "decimal" | "numeric" => FieldType::Decimal,
        "datetime" | "timestamp" => FieldType::Timestamp,
        "date" => FieldType::Date,
        "json" => FieldType::Object,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "bit" => FieldType::Binary,
        _ => FieldType::String,
    }
}

/// Vocabulary → MySQL type for tables we create. Key columns cannot be
/// `LONGTEXT`, so string keys are `VARCHAR(255)`.
fn native_for_field(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    // From another engine: keep a decimal's precision and scale where
    // MySQL's DECIMAL can hold them.
    if let (FieldType::Decimal, Some((p, s))) = (f.field_type, decimal_args(f))
        && p <= 65
        && s <= 30
    {
        return format!("DECIMAL({p},{s})");
    }
    match f.field_type {
        FieldType::String if f.primary_key => "VARCHAR(255)",
        FieldType::String => "LONGTEXT",
        FieldType::Integer => "BIGINT",
        FieldType::Number => "DOUBLE",
        FieldType::Decimal => "DECIMAL(38,12)",
        FieldType::Boolean => "BOOLEAN",
        FieldType::Timestamp => "DATETIME(6)",
        FieldType::Date => "DATE",
        FieldType::Object | FieldType::Array => "JSON",
        FieldType::Binary => "LONGBLOB",
    }
    .to_string()
}

fn array_comment(f: &Field) -> String {
    if f.field_type == FieldType::Array && native_for(f, ENGINE).is_none() {
        format!(" COMMENT '{ARRAY_COMMENT}'")
    } else {
        String::new()
    }
}

/// How a column is selected and decoded.
#[derive(Clone, Copy)]
enum Pick {
    /// Cast by the server to a form sqlx decodes ([`select_expr`]).
    Cast(FieldType),
    /// A `DATETIME`, `TIMESTAMP` or `DATE` column as the server sends it
    /// (in the binary protocol a length byte and the parts), decoded here
    /// rather than formatted by the server and parsed again.
    Temporal(FieldType),
    /// A text, JSON or `DECIMAL` column's characters as sent, uncast.
    Text(FieldType),
}

fn pick(f: &Field) -> Pick {
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    let base = native.split('(').next().unwrap_or("").trim();
    match f.field_type {
        t @ (FieldType::Timestamp | FieldType::Date) if matches!(base, "datetime" | "timestamp" | "date") => {
            Pick::Temporal(t)
        }
        FieldType::Decimal if matches!(base, "decimal" | "numeric") => Pick::Text(FieldType::Decimal),
        t @ (FieldType::String | FieldType::Object | FieldType::Array)
            if matches!(base, "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "json") =>
        {
            Pick::Text(t)
        }
        t => Pick::Cast(t),
    }
}

fn select_expr(f: &Field) -> String {
    let c = quote_bt(&f.name);
    match pick(f) {
        Pick::Temporal(_) | Pick::Text(_) => c,
        Pick::Cast(FieldType::Integer | FieldType::Boolean) => format!("CAST({c} AS SIGNED)"),
        Pick::Cast(FieldType::Number) => format!("CAST({c} AS DOUBLE)"),
        Pick::Cast(FieldType::Binary) => c,
        Pick::Cast(FieldType::Timestamp) => format!("DATE_FORMAT({c}, '%Y-%m-%dT%H:%i:%s.%fZ')"),
        Pick::Cast(_) => format!("CAST({c} AS CHAR)"),
    }
}

fn decode(row: &MySqlRow, i: usize, pick: Pick) -> Result<Value, sqlx::Error> {
    let t = match pick {
        Pick::Temporal(t) => {
            return row.try_get_unchecked::<Option<&[u8]>, _>(i)?.map_or(Ok(Value::Null), |b| temporal(b, t));
        }
        Pick::Text(t) => {
            let s = row.try_get_unchecked::<Option<&[u8]>, _>(i)?.map(std::str::from_utf8).transpose();
            let s = s.map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            return Ok(s.map_or(Value::Null, |s| text_value(s.to_owned(), t)));
        }
        Pick::Cast(t) => t,
    };
    Ok(match t {
        FieldType::Integer => row.try_get::<Option<i64>, _>(i)?.map(Value::Int),
        FieldType::Boolean => row.try_get::<Option<i64>, _>(i)?.map(|n| Value::Bool(n != 0)),
        FieldType::Number => row.try_get::<Option<f64>, _>(i)?.map(Value::Float),
        FieldType::Binary => row.try_get::<Option<Vec<u8>>, _>(i)?.map(Value::Bytes),
        FieldType::Timestamp | FieldType::Date => row.try_get::<Option<String>, _>(i)?.map(|s| date_text(s, t)),
        other => row.try_get::<Option<String>, _>(i)?.map(|s| text_value(s, other)),
    }
    .unwrap_or(Value::Null))
}

/// A temporal column's value as sent: in the binary protocol a length
/// byte (0, 4, 7 or 11) then year (2 bytes), month, day, hour, minute,
/// second and microseconds (4 bytes), little-endian; a zero date is NULL
/// (see [`zero_date`]). sqlx prepares every statement, so rows come in
/// the binary protocol; a value in text (which starts with a digit, never
/// a length byte) would be parsed as the cast columns are.
fn temporal(b: &[u8], t: FieldType) -> Result<Value, sqlx::Error> {
    let Some((&len, parts)) = b.split_first().filter(|(len, parts)| **len <= 11 && parts.len() == **len as usize)
    else {
        let s = std::str::from_utf8(b).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        return Ok(date_text(s.to_owned(), t));
    };
    if len == 0 || (len >= 4 && (parts[..2] == [0, 0] || parts[2] == 0 || parts[3] == 0)) {
        return Ok(Value::Null);
    }
    if !matches!(len, 4 | 7 | 11) {
        return Err(sqlx::Error::Decode(format!("a temporal value of {len} bytes from the server").into()));
    }
    let year = u16::from_le_bytes([parts[0], parts[1]]);
    let (h, m, sec) = if len >= 7 { (parts[4], parts[5], parts[6]) } else { (0, 0, 0) };
    let micro = if len >= 11 { u32::from_le_bytes([parts[7], parts[8], parts[9], parts[10]]) } else { 0 };
    let date = time::Month::try_from(parts[2])
        .ok()
        .and_then(|month| time::Date::from_calendar_date(i32::from(year), month, parts[3]).ok());
    let value = match (t, date) {
        (FieldType::Date, Some(date)) => Some(Value::Date(date)),
        (_, Some(date)) => time::Time::from_hms_micro(h, m, sec, micro)
            .ok()
            .map(|time| Value::Timestamp(time::PrimitiveDateTime::new(date, time).assume_utc())),
        _ => None,
    };
    // A date no calendar has (`2024-02-31`, stored under
    // ALLOW_INVALID_DATES) is kept as the text the server prints for it.
    let day = format!("{year:04}-{:02}-{:02}", parts[2], parts[3]);
    Ok(value.unwrap_or_else(|| match t {
        FieldType::Date => Value::String(day),
        _ => Value::String(format!("{day}T{h:02}:{m:02}:{sec:02}.{micro:06}Z")),
    }))
}

/// A date or timestamp in text. MySQL's zero dates ('0000-00-00', or a
/// zero month or day, which non-strict modes store) name no time: NULL, as
/// MySQL's own drivers read them (zeroDateTimeBehavior).
fn date_text(s: String, t: FieldType) -> Value {
    if zero_date(&s) { Value::Null } else { text_value(s, t) }
}

/// A date whose year, month or day is zero (`0000-00-00`, `2024-00-10`).
fn zero_date(s: &str) -> bool {
    let mut parts = s.get(..10).unwrap_or("").split('-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else { return false };
    [y, m, d].iter().any(|p| !p.is_empty() && p.bytes().all(|b| b == b'0'))
}

type MyQuery<'q> = sqlx::query::Query<'q, MySql, <MySql as sqlx::Database>::Arguments>;

fn bind<'q>(q: MyQuery<'q>, v: &Value) -> MyQuery<'q> {
    match v {
        Value::Null => q.bind(Option::<String>::None),
        Value::Bool(b) => q.bind(*b),
        Value::Int(i) => q.bind(*i),
        Value::Float(f) => q.bind(*f),
        Value::Decimal(s) | Value::String(s) => q.bind(s.clone()),
        Value::Timestamp(t) => {
            let t = t.to_offset(time::UtcOffset::UTC);
            q.bind(time::PrimitiveDateTime::new(t.date(), t.time()))
        }
        Value::Date(d) => q.bind(*d),
        Value::Json(j) => q.bind(j.to_string()),
        Value::Bytes(b) => q.bind(b.clone()),
    }
}

#[async_trait::async_trait]
impl Source for MySqlConnector {
    async fn check(&self) -> ConnectorResult<()> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            use sqlx::Connection;
            let mut conn = sqlx::MySqlConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            sqlx::query("SELECT 1").execute(&mut conn).await.map_err(|e| self.e(&e))?;
            let _ = conn.close().await;
            Ok(())
        })
        .await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.schemas(None).await
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        Ok(Arc::new(self.table(entity).await?.fields))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema = self.table(&req.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        let batch_size = batch_size(&req);
        if may_split(&req)
            && let Some(reader) = self.read_in_ranges(&schema, &cols, req.ranges, batch_size).await?
        {
            return Ok(reader);
        }
        let (sql, bound) = select_sql(&schema, &cols, &quote_bt(&schema.name), &req, quote_bt, |_| "?".to_string())?;
        let fields = Arc::new(schema.fields);
        let decode = self.row_decoder(&fields);
        let (host, db) = (self.host.clone(), self.database.clone());
        Ok(select_reader(
            fields,
            self.pool.clone(),
            sql,
            move |q| match &bound {
                Some(v) => bind(q, v),
                None => q,
            },
            batch_size,
            decode,
            move |e| err(e, &host, &db),
        ))
    }
}

impl MySqlConnector {
    fn row_decoder(&self, fields: &[Field]) -> impl Fn(&MySqlRow) -> ConnectorResult<Vec<Value>> + Send + 'static {
        let picks: Vec<Pick> = fields.iter().map(pick).collect();
        let (host, db) = (self.host.clone(), self.database.clone());
        move |row| picks.iter().enumerate().map(|(i, p)| decode(row, i, *p).map_err(|e| err(&e, &host, &db))).collect()
    }

    /// A full read of a large InnoDB table with a single integer key, in up
    /// to `ranges` key ranges read at once, each on a connection of its own
    /// in a consistent snapshot; the snapshots are all begun while the table
    /// is read-locked, so they see the same table. The connections are
    /// made ready first, so the lock lasts only for the `START
    /// TRANSACTION`s; those beyond the first come from the connector's
    /// [`RANGE_EXTRAS`] budget, never waited for, and all are closed after,
    /// not pooled again. `None` (read in one piece) when the table is small,
    /// not InnoDB (other engines keep no snapshot), has no such key, is
    /// empty, or anything before the reads fails, such as a lock not
    /// granted within a second (no `LOCK TABLES` privilege, a long write in
    /// progress).
    async fn read_in_ranges(
        &self,
        schema: &EntitySchema,
        cols: &[String],
        ranges: usize,
        batch_size: usize,
    ) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let Some(key) = split_key(schema) else { return Ok(None) };
        let one_piece = |e: sqlx::Error| -> Option<Box<dyn RecordReader>> {
            tracing::info!(table = %schema.name, error = %self.e(&e), "reading in one piece");
            None
        };
        let table_info: Option<(Option<i64>, Option<String>)> = match sqlx::query_as(
            "SELECT CAST(DATA_LENGTH AS SIGNED), CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
        )
        .bind(&schema.name)
        .fetch_optional(&self.pool)
        .await
        {
            Ok(info) => info,
            Err(e) => return Ok(one_piece(e)),
        };
        let Some((Some(size), Some(engine))) = table_info else { return Ok(None) };
        if size < SPLIT_BYTES || !engine.eq_ignore_ascii_case("InnoDB") {
            return Ok(None);
        }
        let permits = range_permits(&self.extras, ranges);
        if permits.is_empty() {
            return Ok(None);
        }
        // The lock's connection, then at least two readers', each ready to begin.
        let mut readers = range_connections(&self.pool, permits.len() + 2).await;
        if readers.len() < 3 {
            return Ok(None);
        }
        let mut lock = readers.remove(0);
        for conn in &mut readers {
            if let Err(e) = sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut **conn).await {
                return Ok(one_piece(e));
            }
        }
        let table = quote_bt(&schema.name);
        let timeout = RANGE_ACQUIRE.as_secs().max(1);
        let locked = async {
            sqlx::query(AssertSqlSafe(format!("SET SESSION lock_wait_timeout = {timeout}")))
                .execute(&mut *lock)
                .await?;
            sqlx::query(AssertSqlSafe(format!("LOCK TABLES {table} READ"))).execute(&mut *lock).await?;
            for conn in &mut readers {
                sqlx::query("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY").execute(&mut **conn).await?;
            }
            sqlx::query("UNLOCK TABLES").execute(&mut *lock).await
        };
        if let Err(e) = locked.await {
            return Ok(one_piece(e));
        }
        drop(lock);
        let k = quote_bt(&key.name);
        let bounds = sqlx::query_as::<_, (Option<i64>, Option<i64>)>(AssertSqlSafe(format!(
            "SELECT CAST(min({k}) AS SIGNED), CAST(max({k}) AS SIGNED) FROM {table}"
        )))
        .fetch_one(&mut *readers[0])
        .await;
        let (lo, hi) = match bounds {
            Ok((Some(lo), Some(hi))) => (lo, hi),
            Ok(_) => return Ok(None),
            Err(e) => return Ok(one_piece(e)),
        };
        let mut permits = permits.into_iter();
        let conditions = key_ranges(&k, lo, hi, readers.len());
        let fields = Arc::new(schema.fields.clone());
        let mut parts = Vec::with_capacity(readers.len());
        for (i, (mut conn, condition)) in readers.into_iter().zip(conditions).enumerate() {
            let sql = format!("SELECT {} FROM {table} WHERE {condition}", cols.join(", "));
            let (fields, decode, host, db) =
                (fields.clone(), self.row_decoder(&fields), self.host.clone(), self.database.clone());
            // Held until the range is read: the budget counts it.
            let permit = if i > 0 { permits.next() } else { None };
            parts.push(move |tx: tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>| async move {
                let _permit = permit;
                let rows = sqlx::query(AssertSqlSafe(sql)).fetch(&mut *conn);
                pump_rows(rows, fields, batch_size, tx, decode, move |e| err(e, &host, &db)).await;
            });
        }
        Ok(Some(ranges_reader(fields, parts)))
    }
}

#[async_trait::async_trait]
impl Destination for MySqlConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {POSITIONS} (stream varchar(64) NOT NULL, entity varchar(255) NOT NULL, \
             position varchar(255) NOT NULL, updated_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
             PRIMARY KEY (stream, entity))"
        )))
        .execute(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        sqlx::query_as(AssertSqlSafe(format!("SELECT entity, position FROM {POSITIONS} WHERE stream = ?")))
            .bind(stream)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.schemas(Some(entity)).await?.pop())
    }

    /// Entities at once: as many as the pool holds with room to spare.
    fn concurrent_writers(&self) -> usize {
        POOL_WRITERS
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
        // Each writer of an earlier attempt holds a named lock of its own
        // (`mark_slot`); the server says which connection holds each, and
        // those are ended (a user may end its own connections). A writer
        // that attempt opens meanwhile is found in the next round.
        let mut ended = std::collections::BTreeSet::new();
        for number in 1..attempt.number {
            let mark = Attempt { run: attempt.run, number }.mark();
            for _ in 0..MARK_ROUNDS {
                let holders: Vec<i64> = sqlx::query_scalar(
                    "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ?) \
                     SELECT DISTINCT id FROM (SELECT CAST(IS_USED_LOCK(CONCAT(?, ':', n)) AS SIGNED) AS id FROM s) h \
                     WHERE id IS NOT NULL",
                )
                .bind(MARK_SLOTS)
                .bind(&mark)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
                let fresh: Vec<i64> = holders.into_iter().filter(|id| !ended.contains(id)).collect();
                if fresh.is_empty() {
                    break;
                }
                for id in fresh {
                    match sqlx::query(AssertSqlSafe(format!("KILL CONNECTION {id}"))).execute(&self.pool).await {
                        Ok(_) => {}
                        // Gone by itself meanwhile (1094: unknown thread).
                        Err(sqlx::Error::Database(d))
                            if d.code().as_deref() == Some("HY000") && d.message().contains("Unknown thread") => {}
                        Err(e) => return Err(self.e(&e)),
                    }
                    ended.insert(id);
                }
                // A lock goes with its connection once the server ended it.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(ended.len() as u64)
    }
}

/// How many writers of one attempt can each hold a named lock of their own:
/// more than a destination ever opens at once (`POOL_WRITERS`).
const MARK_SLOTS: u32 = 64;

/// How many times a take-over looks again for writers an earlier attempt
/// opened while it was ending the others.
const MARK_ROUNDS: usize = 20;

/// The named lock of writer slot `slot` of the attempt marked `mark` (at
/// most 64 characters, as MySQL allows).
fn mark_slot(mark: &str, slot: u32) -> String {
    format!("{mark}:{slot}")
}

impl MySqlConnector {
    async fn open_writer(
        &self,
        schema: &EntitySchema,
        mode: WriteMode,
        mark: Option<String>,
    ) -> ConnectorResult<Box<dyn EntityWriter>> {
        let pk: Vec<&str> = schema.primary_key();
        if mode == WriteMode::Upsert && pk.is_empty() {
            return Err(ConnectorError::InvalidConfig(format!("upsert into {} needs a primary key", schema.name)));
        }
        let existing = self.describe(&schema.name).await?;
        let exec = |sql: String| sqlx::query(AssertSqlSafe(sql));
        let new_table = format!("{}__sluice_new", schema.name);
        let create = |table: &str| {
            let mut cols: Vec<String> = schema
                .fields
                .iter()
                .map(|f| {
                    let nn = if !f.nullable || f.primary_key { " NOT NULL" } else { " NULL" };
                    format!("{} {}{nn}{}", quote_bt(&f.name), native_for_field(f), array_comment(f))
                })
                .collect();
            if !pk.is_empty() {
                cols.push(format!("PRIMARY KEY ({})", pk.iter().map(|p| quote_bt(p)).collect::<Vec<_>>().join(", ")));
            }
            format!("CREATE TABLE {} ({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", quote_bt(table), cols.join(", "))
        };
        // DDL commits implicitly in MySQL, so it runs before the data transaction.
        match (mode, &existing) {
            (WriteMode::Overwrite, _) => {
                exec(format!("DROP TABLE IF EXISTS {}", quote_bt(&new_table)))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| self.e(&e))?;
                exec(create(&new_table)).execute(&self.pool).await.map_err(|e| self.e(&e))?;
            }
            (_, None) => {
                exec(create(&schema.name)).execute(&self.pool).await.map_err(|e| self.e(&e))?;
            }
            (_, Some(current)) => {
                let table = quote_bt(&schema.name);
                for f in &schema.fields {
                    let (column, want) = (quote_bt(&f.name), native_for_field(f));
                    let sql = match current.field(&f.name) {
                        None => format!("ALTER TABLE {table} ADD COLUMN {column} {want} NULL{}", array_comment(f)),
                        // A source column widened: so is this one.
                        Some(have) if native_for(have, ENGINE).is_some_and(|h| widens(h, &want)) => {
                            let null = if have.nullable { "NULL" } else { "NOT NULL" };
                            format!("ALTER TABLE {table} MODIFY COLUMN {column} {want} {null}{}", array_comment(f))
                        }
                        Some(_) => continue,
                    };
                    exec(sql).execute(&self.pool).await.map_err(|e| self.e(&e))?;
                }
                // A column the source no longer has is written null now.
                for gone in
                    current.fields.iter().filter(|c| !c.nullable && !c.primary_key && schema.field(&c.name).is_none())
                {
                    let Some(native) = native_for(gone, ENGINE) else { continue };
                    exec(format!(
                        "ALTER TABLE {table} MODIFY COLUMN {} {native} NULL{}",
                        quote_bt(&gone.name),
                        array_comment(gone)
                    ))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| self.e(&e))?;
                }
            }
        }
        let target = if mode == WriteMode::Overwrite { new_table.clone() } else { schema.name.clone() };
        let cols: Vec<String> = schema.fields.iter().map(|f| quote_bt(&f.name)).collect();
        let on_dup = if mode == WriteMode::Upsert {
            let updates: Vec<String> = schema
                .fields
                .iter()
                .filter(|f| !f.primary_key)
                .map(|f| format!("{0} = VALUES({0})", quote_bt(&f.name)))
                .collect();
            if updates.is_empty() {
                format!(" ON DUPLICATE KEY UPDATE {0} = {0}", quote_bt(pk[0]))
            } else {
                format!(" ON DUPLICATE KEY UPDATE {}", updates.join(", "))
            }
        } else {
            String::new()
        };
        let session = Session::open(&self.pool, mark).await.map_err(|e| self.e(&e))?;
        let (commands, rx) = tokio::sync::mpsc::channel(1);
        let failed = Arc::new(std::sync::Mutex::new(None));
        let session = tokio::spawn(run_session(session, rx, failed.clone(), self.host.clone(), self.database.clone()));
        Ok(Box::new(MySqlWriter {
            pool: self.pool.clone(),
            commands: Some(commands),
            failed,
            session: Some(session),
            mode,
            insert_head: format!("INSERT INTO {} ({}) VALUES ", quote_bt(&target), cols.join(", ")),
            on_dup,
            width: schema.fields.len(),
            order: schema.fields.iter().map(|f| f.name.clone()).collect(),
            table: schema.name.clone(),
            new_table,
            host: self.host.clone(),
            database: self.database.clone(),
            stats: WriteStats::default(),
            pending: WriteStats::default(),
            key: pk.iter().map(|k| k.to_string()).collect(),
        }))
    }
}

/// Where a destination database keeps the change stream positions its
/// tables hold (see `docs/cdc.md`).
const POSITIONS: &str = "`_sluice_positions`";

/// About the most bytes of values one `INSERT` carries: far under
/// `max_allowed_packet` (16 MB by default in MariaDB, 64 MB in MySQL 8), so
/// that large rows do not make a statement the server refuses.
const STATEMENT_BYTES: usize = 4 << 20;

/// Consecutive runs of `rows`, each at most `most` rows and, past its
/// first row, about `bytes` of values.
fn statements(rows: &[Vec<Value>], most: usize, bytes: usize) -> Vec<&[Vec<Value>]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let n: usize = row.iter().map(Value::approx_size).sum();
        if i > start && (i - start >= most || size + n > bytes) {
            out.push(&rows[start..i]);
            (start, size) = (i, 0);
        }
        size += n;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

type Insert = sqlx::query::Query<'static, MySql, <MySql as sqlx::Database>::Arguments>;

/// What a writer asks of its session task.
enum Command {
    Execute(Insert),
    /// Commit (and begin again when `reopen`), answering once done.
    Commit {
        reopen: bool,
        done: tokio::sync::oneshot::Sender<ConnectorResult<()>>,
    },
    Rollback,
}

/// The failure a session kept, if any.
fn failure_in(failed: &std::sync::Mutex<Option<ConnectorError>>) -> Option<ConnectorError> {
    failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// A writer's connection, its own for the writer's life and inside a
/// transaction while it writes. With an attempt's mark it holds the named
/// lock `mark` (`GET_LOCK`), by which a later attempt of the run finds and
/// ends it (see `end_earlier_attempts`). It goes back to the pool only
/// once it ended cleanly (committed or rolled back, the lock released);
/// dropped otherwise (a cancel, a lost lease), it is closed, which rolls
/// its transaction back.
struct Session {
    conn: PoolConnection<MySql>,
    /// The named lock this session holds (see [`mark_slot`]).
    lock: Option<String>,
    clean: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

impl Session {
    async fn open(pool: &MySqlPool, mark: Option<String>) -> Result<Self, sqlx::Error> {
        let mut s = Session { conn: pool.acquire().await?, lock: None, clean: false };
        if let Some(m) = &mark {
            // The first slot no other writer of the attempt holds.
            for slot in 0..MARK_SLOTS {
                let name = mark_slot(m, slot);
                let got: Option<i64> =
                    sqlx::query_scalar("SELECT GET_LOCK(?, 0)").bind(&name).fetch_one(&mut *s.conn).await?;
                if got == Some(1) {
                    s.lock = Some(name);
                    break;
                }
            }
            if s.lock.is_none() {
                s.clean = true;
                return Err(sqlx::Error::Protocol(format!("more than {MARK_SLOTS} writers of one run attempt")));
            }
            // A backstop where no later attempt may end it: MariaDB ends a
            // transaction idle this long (MySQL has no such setting).
            let _ = sqlx::query("SET SESSION idle_transaction_timeout = 600").execute(&mut *s.conn).await;
        }
        sqlx::query("BEGIN").execute(&mut *s.conn).await?;
        Ok(s)
    }

    /// Commits; begins again when `reopen`, else ends cleanly.
    async fn commit(&mut self, reopen: bool) -> Result<(), sqlx::Error> {
        if !reopen {
            self.release().await?;
        }
        sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        if reopen {
            sqlx::query("BEGIN").execute(&mut *self.conn).await?;
        } else {
            self.clean = true;
        }
        Ok(())
    }

    async fn rollback(&mut self) -> Result<(), sqlx::Error> {
        self.release().await?;
        sqlx::query("ROLLBACK").execute(&mut *self.conn).await?;
        self.clean = true;
        Ok(())
    }

    /// Gives back the lock and the session setting that came with it, for
    /// the connection's next user in the pool.
    async fn release(&mut self) -> Result<(), sqlx::Error> {
        if let Some(name) = &self.lock {
            sqlx::query("DO RELEASE_LOCK(?)").bind(name).execute(&mut *self.conn).await?;
            let _ = sqlx::query("SET SESSION idle_transaction_timeout = DEFAULT").execute(&mut *self.conn).await;
        }
        Ok(())
    }
}

/// Runs a writer's statements in order inside its session's transaction.
/// A failed statement is kept in `failed` (the writer reports it at its
/// next call) and every later statement skipped. When the writer goes away
/// without a commit the session is dropped, which closes its connection.
async fn run_session(
    mut session: Session,
    mut commands: tokio::sync::mpsc::Receiver<Command>,
    failed: Arc<std::sync::Mutex<Option<ConnectorError>>>,
    host: String,
    database: String,
) {
    let failure = || failure_in(&failed);
    let mut open = true;
    while let Some(command) = commands.recv().await {
        match command {
            Command::Execute(q) => {
                if failure().is_some() || !open {
                    continue;
                }
                if let Err(e) = q.execute(&mut *session.conn).await {
                    *failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(err(&e, &host, &database));
                }
            }
            Command::Commit { reopen, done } => {
                let result = async {
                    if let Some(e) = failure() {
                        return Err(e);
                    }
                    if !open {
                        return Err(ConnectorError::Other("writer already finished".into()));
                    }
                    session.commit(reopen).await.map_err(|e| err(&e, &host, &database))?;
                    open = reopen;
                    Ok(())
                }
                .await;
                let _ = done.send(result);
            }
            Command::Rollback => {
                if open {
                    let _ = session.rollback().await;
                }
                return;
            }
        }
    }
}

struct MySqlWriter {
    pool: MySqlPool,
    /// To the session task, which holds the transaction.
    commands: Option<tokio::sync::mpsc::Sender<Command>>,
    failed: Arc<std::sync::Mutex<Option<ConnectorError>>>,
    session: Option<tokio::task::JoinHandle<()>>,
    mode: WriteMode,
    insert_head: String,
    on_dup: String,
    width: usize,
    order: Vec<String>,
    table: String,
    new_table: String,
    host: String,
    database: String,
    stats: WriteStats,
    pending: WriteStats,
    /// The table's key fields, for updates by key.
    key: Vec<String>,
}

impl Drop for MySqlWriter {
    /// A writer dropped unfinished (a cancelled run, a lost lease) stops
    /// its session at once: statements it had queued are not executed
    /// after the run let go of them, and its transaction rolls back.
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.abort();
        }
    }
}

impl MySqlWriter {
    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }

    /// The failure of an earlier statement, if any.
    fn check(&self) -> ConnectorResult<()> {
        failure_in(&self.failed).map_or(Ok(()), Err)
    }

    fn gone() -> ConnectorError {
        ConnectorError::Other("the writer's session ended".into())
    }

    async fn send(&self, command: Command) -> ConnectorResult<()> {
        let commands = self.commands.as_ref().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        commands.send(command).await.map_err(|_| Self::gone())
    }

    /// Commits everything sent so far; begins again when `reopen`.
    async fn commit(&self, reopen: bool) -> ConnectorResult<()> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Commit { reopen, done }).await?;
        answer.await.map_err(|_| Self::gone())?
    }
}

#[async_trait::async_trait]
impl EntityWriter for MySqlWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.check()?;
        let rows = align(batch, &self.order);
        let per_stmt = (MAX_PARAMS / self.width.max(1)).clamp(1, 8_000);
        let placeholder = format!("({})", vec!["?"; self.width].join(", "));
        for chunk in statements(&rows, per_stmt, STATEMENT_BYTES) {
            let sql =
                format!("{}{}{}", self.insert_head, vec![placeholder.as_str(); chunk.len()].join(", "), self.on_dup);
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for row in chunk {
                for v in row {
                    q = bind(q, v);
                }
            }
            // Encoded here, executed by the session while the next one is.
            self.send(Command::Execute(q)).await?;
        }
        self.pending.rows_written += batch.len() as u64;
        self.pending.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        self.check()?;
        let names: Vec<String> = keys.fields.iter().map(|f| quote_bt(&f.name)).collect();
        let per_stmt = (MAX_PARAMS / names.len().max(1)).clamp(1, 8_000);
        for chunk in keys.rows.chunks(per_stmt) {
            let mut q = sqlx::query(AssertSqlSafe(delete_by_keys_sql(&quote_bt(&self.table), &names, chunk.len(), "")));
            for v in chunk.iter().flatten() {
                q = bind(q, v);
            }
            self.send(Command::Execute(q)).await?;
        }
        Ok(())
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        self.check()?;
        let (set, keys) = set_and_key(&rows.fields, &self.key);
        if set.is_empty() || keys.is_empty() {
            return Ok(());
        }
        let name = |i: &usize| quote_bt(&rows.fields[*i].name);
        let sql = update_by_key_sql(
            &quote_bt(&self.table),
            &set.iter().map(name).collect::<Vec<_>>(),
            &keys.iter().map(name).collect::<Vec<_>>(),
        );
        for row in &rows.rows {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for i in set.iter().chain(&keys) {
                q = bind(q, &row[*i]);
            }
            self.send(Command::Execute(q)).await?;
        }
        Ok(())
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.check()?;
        let q = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {POSITIONS} (stream, entity, position) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE position = VALUES(position), updated_at = CURRENT_TIMESTAMP(6)"
        )))
        .bind(stream.to_string())
        .bind(self.table.clone())
        .bind(position.to_string());
        self.send(Command::Execute(q)).await
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Overwrite {
            return Ok(self.stats);
        }
        self.commit(true).await?;
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        self.pending = WriteStats::default();
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        self.commit(false).await?;
        self.commands = None;
        if self.mode == WriteMode::Overwrite {
            let (t, n, old) =
                (quote_bt(&self.table), quote_bt(&self.new_table), quote_bt(&format!("{}__sluice_old", self.table)));
            let exists: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            )
            .bind(&self.table)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
            let exec = |sql: String| sqlx::query(AssertSqlSafe(sql));
            exec(format!("DROP TABLE IF EXISTS {old}")).execute(&self.pool).await.map_err(|e| self.e(&e))?;
            // One RENAME TABLE statement swaps both names atomically.
            let rename = if exists > 0 {
                format!("RENAME TABLE {t} TO {old}, {n} TO {t}")
            } else {
                format!("RENAME TABLE {n} TO {t}")
            };
            exec(rename).execute(&self.pool).await.map_err(|e| self.e(&e))?;
            exec(format!("DROP TABLE IF EXISTS {old}")).execute(&self.pool).await.map_err(|e| self.e(&e))?;
        }
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        Ok(self.stats)
    }

    async fn abort(mut self: Box<Self>) {
        let _ = self.send(Command::Rollback).await;
        self.commands = None;
        if let Some(session) = self.session.take() {
            let _ = session.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporal_values_decode_from_binary_and_from_text() {
        use time::macros::{date, datetime};
        let ts = FieldType::Timestamp;
        let dt = |len: u8, rest: &[u8]| [&[len][..], rest].concat();
        assert_eq!(temporal(&dt(0, &[]), ts).unwrap(), Value::Null, "the zero datetime");
        assert_eq!(temporal(&dt(4, &[0xE8, 0x07, 0, 10]), FieldType::Date).unwrap(), Value::Null, "a zero month");
        assert_eq!(temporal(&dt(4, &[0, 0, 5, 1]), ts).unwrap(), Value::Null, "a zero year");
        assert_eq!(temporal(&dt(4, &[0xE8, 0x07, 5, 1]), FieldType::Date).unwrap(), Value::Date(date!(2024 - 05 - 01)));
        assert_eq!(
            temporal(&dt(7, &[0xE8, 0x07, 5, 1, 10, 11, 12]), ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12 UTC))
        );
        assert_eq!(
            temporal(&dt(11, &[0xE8, 0x07, 5, 1, 10, 11, 12, 0x3F, 0x42, 0x0F, 0]), ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12.999999 UTC)),
            "999,999 microseconds, little-endian"
        );
        // Dates no calendar has, kept as the server prints them.
        assert_eq!(
            temporal(&dt(4, &[0xE8, 0x07, 2, 31]), FieldType::Date).unwrap(),
            Value::String("2024-02-31".into())
        );
        assert_eq!(
            temporal(&dt(11, &[0xE8, 0x07, 2, 31, 10, 0, 0, 0x20, 0xA1, 0x07, 0]), ts).unwrap(),
            Value::String("2024-02-31T10:00:00.500000Z".into())
        );
        assert_eq!(
            temporal(&dt(4, &[0xE8, 0x07, 13, 1]), ts).unwrap(),
            Value::String("2024-13-01T00:00:00.000000Z".into())
        );
        assert!(temporal(&dt(2, &[0xE8, 0x07]), ts).is_err(), "a length MySQL never sends");
        // Text, as an unprepared statement sends it.
        assert_eq!(
            temporal(b"2024-05-01 10:11:12.5", ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12.5 UTC))
        );
        assert_eq!(temporal(b"0000-00-00 00:00:00", ts).unwrap(), Value::Null);
    }

    #[test]
    fn statements_are_cut_by_rows_and_by_bytes() {
        let row = |n: usize| vec![Value::Int(1), Value::String("x".repeat(n))];
        let small: Vec<Vec<Value>> = (0..10).map(|_| row(2)).collect();
        let cut: Vec<usize> = statements(&small, 4, 1 << 20).iter().map(|c| c.len()).collect();
        assert_eq!(cut, [4, 4, 2]);
        let large = vec![row(600), row(600), row(10), row(2_000)];
        let cut: Vec<usize> = statements(&large, 100, 1_000).iter().map(|c| c.len()).collect();
        assert_eq!(cut, [1, 2, 1], "a row over the bound goes alone, never split");
        assert!(statements(&[], 4, 10).is_empty());
    }
}
