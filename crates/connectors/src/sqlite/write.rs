//! Writing SQLite: the `Destination` impl and its writer (multi-row
//! `INSERT`s in one transaction, `ON CONFLICT` for upsert, a fresh table
//! renamed over the old one for overwrite).

use super::types::{bind, declared_for};
use super::{SqliteConnector, err};
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, Sqlite, Transaction};

/// SQLite's limit of bound parameters per statement is 32766.
const MAX_PARAMS: usize = 32_000;

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

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        self.positions(stream).await?;
        let q = match position {
            Some(p) => sqlx::query(AssertSqlSafe(format!(
                "UPDATE {POSITIONS} SET position = ?, updated_at = datetime('now') WHERE stream = ? AND entity = ?"
            )))
            .bind(p.to_string()),
            None => sqlx::query(AssertSqlSafe(format!("DELETE FROM {POSITIONS} WHERE stream = ? AND entity = ?"))),
        };
        q.bind(stream.to_string()).bind(entity.to_string()).execute(&self.pool).await.map_err(|e| err(&e))?;
        Ok(())
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        self.entity_schema(entity).await
    }

    /// SQLite takes one writing transaction at a time, and a writer holds
    /// its transaction for the whole entity: entities take turns.
    fn concurrent_writers(&self) -> usize {
        1
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, _attempt: Option<&Attempt>) -> WriterResult {
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

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        let table = quote_dq(&self.table);
        // Text compares by its bytes (the BINARY collation) in SQLite.
        let mut values = Vec::new();
        let within = key_range_sql(
            range,
            |f| quote_dq(&f.name),
            |_, v| {
                values.push(v.clone());
                "?".into()
            },
        );
        let sql = match (soft_column, within) {
            // The form the writer gives timestamps (RFC 3339, UTC).
            (Some(c), within) => {
                let c = quote_dq(c);
                let and = within.map(|w| format!(" AND {w}")).unwrap_or_default();
                format!("UPDATE {table} SET {c} = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE {c} IS NULL{and}")
            }
            (None, Some(w)) => format!("DELETE FROM {table} WHERE {w}"),
            (None, None) => format!("DELETE FROM {table}"),
        };
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for v in &values {
            q = bind(q, v);
        }
        q.execute(&mut **self.tx()?).await.map_err(|e| err(&e))?;
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
