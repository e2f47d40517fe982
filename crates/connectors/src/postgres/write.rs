//! Writing PostgreSQL: the `Destination` impl, the ending of an earlier
//! attempt's writers (take-over by attempt marks), the table a writer
//! loads, and the writer itself (binary or CSV `COPY … FROM STDIN`, bulk
//! streams, the upsert stage and the overwrite swap).

use super::binary::{self, HEADER as COPY_HEADER, TRAILER as COPY_TRAILER};
use super::bulk::COPY_CHUNK;
use super::types::native_for_field;
use super::{BULK_FORMAT, BULK_ROWS_FORMAT, ENGINE, PgConnector, cdc, csv_row, err};
use crate::common::*;
use sluice_domain::connect::connector::BulkFormat;
use sluice_domain::connect::connector::*;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Postgres};
use std::time::Duration;

#[async_trait::async_trait]
impl Destination for PgConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        self.held_positions(stream).await
    }

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        self.move_held_position(stream, entity, position).await
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

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult {
        self.open_writer(schema, mode, attempt.map(Attempt::mark)).await
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
    async fn open_writer(&self, schema: &EntitySchema, mode: WriteMode, mark: Option<String>) -> WriterResult {
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

pub(super) struct PgWriter {
    /// The binary COPY statement, when the table can load a bulk stream.
    bulk_copy: Option<String>,
    /// The binary COPY statement for records, and each column's encoder
    /// (`None`: records go as CSV).
    records_copy: Option<(String, Vec<binary::Column>)>,
    /// The writer's connection, inside a transaction while `Some`.
    pub(super) tx: Option<PoolConnection<Postgres>>,
    mode: WriteMode,
    copy_sql: String,
    merge: Option<String>,
    stage: Option<String>,
    swap: Option<Swap>,
    order: Vec<String>,
    pub(super) host: String,
    pub(super) database: String,
    stats: WriteStats,
    pending: WriteStats,
    staged: bool,
    /// The staged rows' order (the last version of a key wins the merge).
    seq: i64,
    /// The attempt's mark, set again in each transaction.
    mark: Option<String>,
    /// The table (qualified and bare) and its key's fields, for deletes,
    /// updates and change stream positions (`cdc`).
    pub(super) table: String,
    pub(super) entity: String,
    pub(super) key: Vec<String>,
    pub(super) positions: String,
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

    /// Merges the staged rows into the table and empties the stage, so that
    /// a later merge in the same transaction (after a delete or an update
    /// by key, see `cdc`) does not bring them back.
    pub(super) async fn merge_stage(&mut self) -> ConnectorResult<()> {
        if let (Some(sql), Some(stage), true) = (self.merge.clone(), self.stage.clone(), self.staged) {
            let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
            let r = sqlx::query(AssertSqlSafe(sql)).execute(&mut **tx).await;
            r.map_err(|e| self.e(&e))?;
            let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
            let r = sqlx::query(AssertSqlSafe(format!("TRUNCATE {}", quote_dq(&stage)))).execute(&mut **tx).await;
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
        let rows = align(batch, &self.order);
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

    fn bulk_format(&self) -> Option<BulkFormat> {
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

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.clear_rows(range, soft_column).await
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
