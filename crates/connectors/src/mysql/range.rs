//! Split reads of MySQL: a large InnoDB table with a single integer key
//! read in key ranges at once, each on a connection of its own, in
//! consistent snapshots begun under one read lock.

use super::{MySqlConnector, err};
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::AssertSqlSafe;
use std::sync::Arc;

impl MySqlConnector {
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
    pub(super) async fn read_in_ranges(
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
