//! Split reads of PostgreSQL: a large table with a single integer key
//! read in key ranges at once, each on a connection of its own, all in one
//! exported snapshot.

use super::PgConnector;
use super::bulk::copy_on;
use super::read::Decoding;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Postgres};
use std::sync::Arc;

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
    pub(super) async fn read_in_ranges(
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
    pub(super) async fn csv_in_ranges(
        &self,
        schema: &EntitySchema,
        cols: &str,
        ranges: usize,
    ) -> Option<Box<dyn BulkStream>> {
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

/// One range of a split read: its connection (in the read's snapshot),
/// what it selects from (`table WHERE condition`) and its permit of the
/// budget (none for the first).
struct Range {
    conn: PoolConnection<Postgres>,
    condition: String,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}
