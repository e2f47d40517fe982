//! The SQLite connector: a database file under the file root, as source and
//! destination.
//!
//! Types: declared types map by SQLite's affinity rules with a few names of
//! our own so values keep their meaning on the way back: decimals are
//! `DECIMAL_TEXT` (text affinity, exact), timestamps `TIMESTAMP` (RFC 3339
//! text in UTC), objects `JSON_TEXT` and arrays `JSON_ARRAY_TEXT`, booleans `BOOLEAN` (0/1).

use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Row, Sqlite, Transaction};
use std::sync::Arc;

pub const ENGINE: &str = "sqlite";
/// SQLite's limit of bound parameters per statement is 32766.
const MAX_PARAMS: usize = 32_000;

pub struct SqliteConnector {
    /// The path as the user wrote it, for messages.
    label: String,
    /// The file, inside the organization's directory: reads open it
    /// themselves (see [`read_rows`]).
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

/// Declared type → vocabulary, by SQLite's affinity rules refined.
pub fn map_declared(declared: &str) -> FieldType {
    let t = declared.to_ascii_uppercase();
    if t.contains("BOOL") {
        FieldType::Boolean
    } else if t.contains("DECIMAL") || t.contains("NUMERIC") {
        FieldType::Decimal
    } else if t.contains("INT") {
        FieldType::Integer
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        FieldType::Number
    } else if t.contains("TIMESTAMP") || t.contains("DATETIME") {
        FieldType::Timestamp
    } else if t.starts_with("DATE") {
        FieldType::Date
    } else if t.contains("JSON_ARRAY") {
        FieldType::Array
    } else if t.contains("JSON") {
        FieldType::Object
    } else if t.contains("BLOB") {
        FieldType::Binary
    } else {
        FieldType::String
    }
}

/// Vocabulary → declared type for tables we create.
fn declared_for(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    match f.field_type {
        FieldType::String => "TEXT",
        FieldType::Integer => "INTEGER",
        FieldType::Number => "REAL",
        FieldType::Decimal => "DECIMAL_TEXT",
        FieldType::Boolean => "BOOLEAN",
        FieldType::Timestamp => "TIMESTAMP",
        FieldType::Date => "DATE",
        FieldType::Object => "JSON_TEXT",
        FieldType::Array => "JSON_ARRAY_TEXT",
        FieldType::Binary => "BLOB",
    }
    .to_string()
}

/// A stored value as a value of type `t`, by its storage class. Text that
/// is not UTF-8 fails the read, as it always did.
fn decode(cell: rusqlite::types::ValueRef<'_>, i: usize, t: FieldType) -> ConnectorResult<Value> {
    use rusqlite::types::ValueRef as V;
    Ok(match cell {
        V::Null => Value::Null,
        V::Integer(n) => match t {
            FieldType::Boolean => Value::Bool(n != 0),
            FieldType::Number => Value::Float(n as f64),
            FieldType::Decimal => Value::Decimal(n.to_string()),
            FieldType::Timestamp => {
                time::OffsetDateTime::from_unix_timestamp(n).map(Value::Timestamp).unwrap_or(Value::Int(n))
            }
            FieldType::String => Value::String(n.to_string()),
            _ => Value::Int(n),
        },
        V::Real(f) => match t {
            FieldType::Decimal => Value::Decimal(f.to_string()),
            FieldType::String => Value::String(f.to_string()),
            _ => Value::Float(f),
        },
        V::Blob(b) => match t {
            FieldType::Binary => Value::Bytes(b.to_vec()),
            _ => Value::String(String::from_utf8_lossy(b).into_owned()),
        },
        V::Text(b) => match std::str::from_utf8(b) {
            Ok(text) => text_value(text.to_string(), t),
            Err(_) => return Err(ConnectorError::Other(format!("cannot read column {i}: its text is not UTF-8"))),
        },
    })
}

/// A value as SQLite stores it: what reads bind and writes insert.
fn param(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as P;
    match v {
        Value::Null => P::Null,
        Value::Bool(b) => P::Integer(i64::from(*b)),
        Value::Int(i) => P::Integer(*i),
        Value::Float(f) => P::Real(*f),
        Value::Decimal(s) | Value::String(s) => P::Text(s.clone()),
        Value::Timestamp(t) => P::Text(format_timestamp(*t)),
        Value::Date(d) => P::Text(format_date(*d)),
        Value::Json(j) => P::Text(j.to_string()),
        Value::Bytes(b) => P::Blob(b.clone()),
    }
}

/// A failure of a read, told without the server's paths: opening the file
/// names it as the user wrote it.
fn read_err(e: &rusqlite::Error, label: &str) -> ConnectorError {
    if let rusqlite::Error::SqliteFailure(f, _) = e
        && matches!(f.code, rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::PermissionDenied)
    {
        return ConnectorError::Other(format!("cannot open the SQLite file '{label}'"));
    }
    let m = e.to_string();
    match e.sqlite_error_code() {
        _ if m.contains("no such table") => ConnectorError::EntityNotFound(m),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            ConnectorError::Timeout("waiting for the SQLite file".into())
        }
        _ => ConnectorError::Other(m),
    }
}

/// Interrupts a read's statement when dropped.
struct Interrupt(Option<rusqlite::InterruptHandle>);

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.interrupt();
        }
    }
}

/// What one read runs: the query, its bound value, the columns' types.
struct RowsQuery {
    path: std::path::PathBuf,
    label: String,
    sql: String,
    bound: Option<Value>,
    fields: Arc<Vec<Field>>,
    batch_size: usize,
}

/// Steps the query on a connection of its own, read-only, on the blocking
/// thread it is called on, sending batches through `tx` until the end, the
/// first failure (sent on) or the reader going away. sqlx's driver hands
/// each row over from its worker thread, a lock and a wake per row, which
/// held a SQLite source to about 8 s per million rows; stepping here does
/// not.
///
/// The connection's interrupt handle goes to `interrupt` once open: the
/// reader going away interrupts a statement that returns no row for long.
fn read_rows(
    q: &RowsQuery,
    tx: &tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>,
    interrupt: tokio::sync::oneshot::Sender<rusqlite::InterruptHandle>,
) -> ConnectorResult<()> {
    use rusqlite::OpenFlags;
    let e = |e: rusqlite::Error| read_err(&e, &q.label);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(&q.path, flags).map_err(e)?;
    let _ = interrupt.send(conn.get_interrupt_handle());
    conn.busy_timeout(std::time::Duration::from_secs(30)).map_err(e)?;
    let mut stmt = conn.prepare(&q.sql).map_err(e)?;
    let types: Vec<FieldType> = q.fields.iter().map(|f| f.field_type).collect();
    let mut rows = stmt.query(rusqlite::params_from_iter(q.bound.iter().map(param))).map_err(e)?;
    let mut batch = Vec::with_capacity(q.batch_size);
    while let Some(row) = rows.next().map_err(e)? {
        let mut values = Vec::with_capacity(types.len());
        for (i, t) in types.iter().enumerate() {
            values.push(decode(row.get_ref(i).map_err(e)?, i, *t)?);
        }
        batch.push(values);
        if batch.len() >= q.batch_size {
            let rows = std::mem::replace(&mut batch, Vec::with_capacity(q.batch_size));
            if tx.blocking_send(Ok(RecordBatch { fields: q.fields.clone(), rows })).is_err() {
                return Ok(());
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.blocking_send(Ok(RecordBatch { fields: q.fields.clone(), rows: batch }));
    }
    Ok(())
}

/// Interprets stored text as a value of type `t`; text that does not parse
/// stays a string rather than being lost.
pub fn text_value(s: String, t: FieldType) -> Value {
    match t {
        FieldType::Integer => s.trim().parse().map(Value::Int).unwrap_or(Value::String(s)),
        FieldType::Number => s.trim().parse().map(Value::Float).unwrap_or(Value::String(s)),
        FieldType::Decimal => Value::Decimal(s),
        FieldType::Boolean => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "t" => Value::Bool(true),
            "0" | "false" | "f" => Value::Bool(false),
            _ => Value::String(s),
        },
        FieldType::Timestamp => parse_timestamp(&s).map(Value::Timestamp).unwrap_or(Value::String(s)),
        FieldType::Date => parse_date(&s).map(Value::Date).unwrap_or(Value::String(s)),
        FieldType::Object | FieldType::Array => serde_json::from_str(&s).map(Value::Json).unwrap_or(Value::String(s)),
        FieldType::Binary => Value::Bytes(s.into_bytes()),
        FieldType::String => Value::String(s),
    }
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// Binds `v` as SQLite stores it ([`param`]).
fn bind<'q>(q: SqliteQuery<'q>, v: &Value) -> SqliteQuery<'q> {
    use rusqlite::types::Value as P;
    match param(v) {
        P::Null => q.bind(Option::<String>::None),
        P::Integer(i) => q.bind(i),
        P::Real(f) => q.bind(f),
        P::Text(s) => q.bind(s),
        P::Blob(b) => q.bind(b),
    }
}

#[async_trait::async_trait]
impl Source for SqliteConnector {
    async fn check(&self) -> ConnectorResult<()> {
        with_timeout("opening the SQLite file", CONNECT_TIMEOUT, async {
            sqlx::query("SELECT count(*) FROM sqlite_master").fetch_one(&self.pool).await.map_err(|e| {
                let m = db_message(&e);
                if m.contains("file is not a database") {
                    ConnectorError::InvalidConfig(format!("'{}' is not a SQLite database", self.label))
                } else {
                    err(&e)
                }
            })?;
            Ok(())
        })
        .await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' \
             AND name NOT LIKE '%__sluice_new' ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| err(&e))?;
        let mut out = Vec::new();
        for n in names {
            if let Some(s) = self.entity_schema(&n).await? {
                out.push(s);
            }
        }
        Ok(out)
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let schema = self.entity_schema(entity).await?.ok_or_else(|| ConnectorError::EntityNotFound(entity.into()))?;
        Ok(Arc::new(schema.fields))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema =
            self.entity_schema(&req.entity).await?.ok_or_else(|| ConnectorError::EntityNotFound(req.entity.clone()))?;
        let cols: Vec<String> = schema.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let (sql, bound) = select_sql(&schema, &cols, &quote_dq(&schema.name), &req, quote_dq, |_| "?".to_string())?;
        let fields = Arc::new(schema.fields);
        let q = RowsQuery {
            path: self.path.clone(),
            label: self.label.clone(),
            sql,
            bound,
            fields: fields.clone(),
            batch_size: req.batch_size.max(1),
        };
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            let told = tx.clone();
            let (interrupt, handle) = tokio::sync::oneshot::channel();
            let stepping = tokio::task::spawn_blocking(move || {
                if let Err(e) = read_rows(&q, &tx, interrupt) {
                    let _ = tx.blocking_send(Err(e));
                }
            });
            // Dropped with this task when the reader goes away: the
            // statement stops at once rather than at its next row.
            let _interrupt = Interrupt(handle.await.ok());
            let stepped = stepping.await;
            if let Err(e) = stepped {
                // Never fewer records in silence.
                send(&told, Err(ConnectorError::Other(format!("reading the SQLite file failed: {e}")))).await;
            }
        })))
    }
}

#[async_trait::async_trait]
impl Destination for SqliteConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {POSITIONS} (stream TEXT NOT NULL, entity TEXT NOT NULL, \
             position TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (stream, entity))"
        )))
        .execute(&self.pool)
        .await
        .map_err(|e| err(&e))?;
        sqlx::query_as(AssertSqlSafe(format!("SELECT entity, position FROM {POSITIONS} WHERE stream = ?")))
            .bind(stream)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| err(&e))
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        self.entity_schema(entity).await
    }

    /// SQLite takes one writing transaction at a time, and a writer holds
    /// its transaction for the whole entity: entities take turns.
    fn concurrent_writers(&self) -> usize {
        1
    }

    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> ConnectorResult<Box<dyn EntityWriter>> {
        let mut tx = self.pool.begin().await.map_err(|e| err(&e))?;
        let existing = self.entity_schema(&schema.name).await?;
        let target = match mode {
            WriteMode::Overwrite => format!("{}__sluice_new", schema.name),
            _ => schema.name.clone(),
        };
        let pk = schema.primary_key();
        if mode == WriteMode::Upsert && pk.is_empty() {
            return Err(ConnectorError::InvalidConfig(format!("upsert into {} needs a primary key", schema.name)));
        }
        let create = |table: &str| {
            let mut cols: Vec<String> = schema
                .fields
                .iter()
                .map(|f| {
                    format!(
                        "{} {}{}",
                        quote_dq(&f.name),
                        declared_for(f),
                        if f.nullable || f.primary_key { "" } else { " NOT NULL" }
                    )
                })
                .collect();
            if !pk.is_empty() {
                cols.push(format!("PRIMARY KEY ({})", pk.iter().map(|p| quote_dq(p)).collect::<Vec<_>>().join(", ")));
            }
            format!("CREATE TABLE {} ({})", quote_dq(table), cols.join(", "))
        };
        let exec = |sql: String| sqlx::query(AssertSqlSafe(sql));
        match (mode, existing) {
            (WriteMode::Overwrite, _) | (_, None) => {
                exec(format!("DROP TABLE IF EXISTS {}", quote_dq(&target)))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| err(&e))?;
                exec(create(&target)).execute(&mut *tx).await.map_err(|e| err(&e))?;
            }
            (_, Some(current)) => {
                for f in &schema.fields {
                    if current.field(&f.name).is_none() {
                        exec(format!(
                            "ALTER TABLE {} ADD COLUMN {} {}",
                            quote_dq(&target),
                            quote_dq(&f.name),
                            declared_for(f)
                        ))
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| err(&e))?;
                    }
                }
            }
        }
        let cols: Vec<String> = schema.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let conflict = if mode == WriteMode::Upsert {
            let updates: Vec<String> = schema
                .fields
                .iter()
                .filter(|f| !f.primary_key)
                .map(|f| format!("{0} = excluded.{0}", quote_dq(&f.name)))
                .collect();
            let keys = pk.iter().map(|p| quote_dq(p)).collect::<Vec<_>>().join(", ");
            if updates.is_empty() {
                format!(" ON CONFLICT ({keys}) DO NOTHING")
            } else {
                format!(" ON CONFLICT ({keys}) DO UPDATE SET {}", updates.join(", "))
            }
        } else {
            String::new()
        };
        Ok(Box::new(SqliteWriter {
            pool: self.pool.clone(),
            tx: Some(tx),
            mode,
            table: schema.name.clone(),
            target,
            insert_head: format!(
                "INSERT INTO {} ({}) VALUES ",
                quote_dq(&schema.name_for_insert(mode)),
                cols.join(", ")
            ),
            conflict,
            width: schema.fields.len(),
            order: schema.fields.iter().map(|f| f.name.clone()).collect(),
            stats: WriteStats::default(),
            pending: WriteStats::default(),
            key: pk.iter().map(|k| k.to_string()).collect(),
        }))
    }
}

/// The table an insert goes to.
trait InsertTarget {
    fn name_for_insert(&self, mode: WriteMode) -> String;
}

impl InsertTarget for EntitySchema {
    fn name_for_insert(&self, mode: WriteMode) -> String {
        match mode {
            WriteMode::Overwrite => format!("{}__sluice_new", self.name),
            _ => self.name.clone(),
        }
    }
}

struct SqliteWriter {
    pool: SqlitePool,
    tx: Option<Transaction<'static, Sqlite>>,
    mode: WriteMode,
    table: String,
    target: String,
    insert_head: String,
    conflict: String,
    width: usize,
    order: Vec<String>,
    stats: WriteStats,
    pending: WriteStats,
    /// The table's key fields, for updates by key.
    key: Vec<String>,
}

/// Where a destination database keeps the change stream positions its
/// tables hold (see `docs/cdc.md`).
const POSITIONS: &str = "\"_sluice_positions\"";

impl SqliteWriter {
    fn tx(&mut self) -> ConnectorResult<&mut Transaction<'static, Sqlite>> {
        self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))
    }
}

/// Reorders a batch's rows to `order` (the writer's column order); fields the
/// batch lacks are null.
pub fn align<'a>(batch: &'a RecordBatch, order: &[String]) -> std::borrow::Cow<'a, [Vec<Value>]> {
    let idx: Vec<Option<usize>> = order.iter().map(|n| batch.fields.iter().position(|f| &f.name == n)).collect();
    if idx.iter().enumerate().all(|(i, j)| *j == Some(i)) && batch.fields.len() == order.len() {
        // Already in the table's order: borrowed, not copied.
        return std::borrow::Cow::Borrowed(&batch.rows);
    }
    batch.rows.iter().map(|r| idx.iter().map(|j| j.map(|j| r[j].clone()).unwrap_or(Value::Null)).collect()).collect()
}

#[async_trait::async_trait]
impl EntityWriter for SqliteWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rows = align(batch, &self.order);
        let per_stmt = (MAX_PARAMS / self.width.max(1)).max(1);
        let placeholder = format!("({})", vec!["?"; self.width].join(", "));
        for chunk in rows.chunks(per_stmt) {
            let sql =
                format!("{}{}{}", self.insert_head, vec![placeholder.as_str(); chunk.len()].join(", "), self.conflict);
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for row in chunk {
                for v in row {
                    q = bind(q, v);
                }
            }
            let tx = self.tx()?;
            q.execute(&mut **tx).await.map_err(|e| err(&e))?;
        }
        self.pending.rows_written += batch.len() as u64;
        self.pending.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        let names: Vec<String> = keys.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let table = quote_dq(&self.table);
        for chunk in keys.rows.chunks((MAX_PARAMS / names.len().max(1)).max(1)) {
            let mut q = sqlx::query(AssertSqlSafe(delete_by_keys_sql(&table, &names, chunk.len(), "VALUES ")));
            for v in chunk.iter().flatten() {
                q = bind(q, v);
            }
            q.execute(&mut **self.tx()?).await.map_err(|e| err(&e))?;
        }
        Ok(())
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        let (set, keys) = set_and_key(&rows.fields, &self.key);
        if set.is_empty() || keys.is_empty() {
            return Ok(());
        }
        let name = |i: &usize| quote_dq(&rows.fields[*i].name);
        let sql = update_by_key_sql(
            &quote_dq(&self.table),
            &set.iter().map(name).collect::<Vec<_>>(),
            &keys.iter().map(name).collect::<Vec<_>>(),
        );
        for row in &rows.rows {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for i in set.iter().chain(&keys) {
                q = bind(q, &row[*i]);
            }
            q.execute(&mut **self.tx()?).await.map_err(|e| err(&e))?;
        }
        Ok(())
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        let sql = format!(
            "INSERT INTO {POSITIONS} (stream, entity, position, updated_at) VALUES (?, ?, ?, datetime('now')) \
             ON CONFLICT (stream, entity) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at"
        );
        let table = self.table.clone();
        sqlx::query(AssertSqlSafe(sql))
            .bind(stream.to_string())
            .bind(table)
            .bind(position.to_string())
            .execute(&mut **self.tx()?)
            .await
            .map_err(|e| err(&e))?;
        Ok(())
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode != WriteMode::Overwrite {
            let tx = self.tx.take().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
            tx.commit().await.map_err(|e| err(&e))?;
            self.tx = Some(self.pool.begin().await.map_err(|e| err(&e))?);
            self.stats.rows_written += self.pending.rows_written;
            self.stats.bytes += self.pending.bytes;
            self.pending = WriteStats::default();
        }
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Overwrite {
            let (table, target) = (quote_dq(&self.table), quote_dq(&self.target));
            let tx = self.tx()?;
            sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(&mut **tx)
                .await
                .map_err(|e| err(&e))?;
            sqlx::query(AssertSqlSafe(format!("ALTER TABLE {target} RENAME TO {table}")))
                .execute(&mut **tx)
                .await
                .map_err(|e| err(&e))?;
        }
        let tx = self.tx.take().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        tx.commit().await.map_err(|e| err(&e))?;
        self.stats.rows_written += self.pending.rows_written;
        self.stats.bytes += self.pending.bytes;
        Ok(self.stats)
    }

    async fn abort(mut self: Box<Self>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.rollback().await;
        }
    }
}
