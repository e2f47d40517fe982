//! Reading SQLite: the `Source` impl, whose reads step their statement
//! on a read-only connection and a blocking thread of their own.

use super::types::{decode, param};
use super::{SqliteConnector, err};
use crate::common::*;
use sluice_domain::connect::connector::*;
use std::sync::Arc;

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
    bound: Vec<Value>,
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

    /// The rows in key order (text compares by its bytes in SQLite).
    async fn read_keyed(&self, read: &KeyedRead) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let schema = self
            .entity_schema(&read.entity)
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(read.entity.clone()))?;
        // Decimals and floats are kept as text or reals whose order is not
        // the numbers' in every column: read whole and ordered by the caller.
        if read.range.fields.iter().any(|f| matches!(f.field_type, FieldType::Decimal | FieldType::Number)) {
            return Ok(None);
        }
        let cols: Vec<String> = schema.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let mut bound = Vec::new();
        let sql = keyed_select_sql(
            read,
            &cols,
            &quote_dq(&schema.name),
            |f| format!("{} COLLATE BINARY", quote_dq(&f.name)),
            |f| quote_dq(&f.name),
            |_, v| {
                bound.push(v.clone());
                "?".into()
            },
            true,
            false,
        );
        Ok(Some(self.rows(sql, bound, Arc::new(schema.fields), read.batch_size.max(1))))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema =
            self.entity_schema(&req.entity).await?.ok_or_else(|| ConnectorError::EntityNotFound(req.entity.clone()))?;
        let cols: Vec<String> = schema.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let (sql, bound) = select_sql(&schema, &cols, &quote_dq(&schema.name), &req, quote_dq, |_| "?".to_string())?;
        Ok(self.rows(sql, bound.into_iter().collect(), Arc::new(schema.fields), req.batch_size.max(1)))
    }
}

impl SqliteConnector {
    /// The reader of `sql` with `bound` values.
    fn rows(
        &self,
        sql: String,
        bound: Vec<Value>,
        fields: Arc<Vec<Field>>,
        batch_size: usize,
    ) -> Box<dyn RecordReader> {
        let q = RowsQuery {
            path: self.path.clone(),
            label: self.label.clone(),
            sql,
            bound,
            fields: fields.clone(),
            batch_size,
        };
        Box::new(ChannelReader::spawn(fields, move |tx| async move {
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
        }))
    }
}
