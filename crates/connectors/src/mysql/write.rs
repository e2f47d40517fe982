//! Writing MySQL: the `Destination` impl, the take-over of an earlier
//! attempt's writers (named locks by attempt mark), the table a writer
//! loads, the writer's `Session` task that runs its statements in order,
//! and the writer itself.

use super::types::{array_comment, bind, native_for_field};
use super::{ENGINE, MySqlConnector, err};
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql};
use std::sync::Arc;
use std::time::Duration;

const MAX_PARAMS: usize = 60_000;

#[async_trait::async_trait]
impl Destination for MySqlConnector {
    async fn check(&self) -> ConnectorResult<()> {
        Source::check(self).await
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {POSITIONS} (stream varchar(64) NOT NULL, entity varchar(255) NOT NULL, \
             position varchar(255) NOT NULL, updated_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
             PRIMARY KEY (stream, entity)) ENGINE = InnoDB"
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

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        self.positions(stream).await?;
        let q = match position {
            Some(p) => sqlx::query(AssertSqlSafe(format!(
                "UPDATE {POSITIONS} SET position = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE stream = ? AND entity = ?"
            )))
            .bind(p.to_string()),
            None => sqlx::query(AssertSqlSafe(format!("DELETE FROM {POSITIONS} WHERE stream = ? AND entity = ?"))),
        };
        q.bind(stream.to_string()).bind(entity.to_string()).execute(&self.pool).await.map_err(|e| self.e(&e))?;
        Ok(())
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.schemas(Some(entity)).await?.pop())
    }

    /// Entities at once: as many as the pool holds with room to spare.
    fn concurrent_writers(&self) -> usize {
        POOL_WRITERS
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, attempt: Option<&Attempt>) -> WriterResult {
        self.open_writer(schema, mode, attempt.map(Attempt::mark)).await
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
    async fn open_writer(&self, schema: &EntitySchema, mode: WriteMode, mark: Option<String>) -> WriterResult {
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

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.check()?;
        let table = quote_bt(&self.table);
        // Text by its bytes, as the range was drawn.
        let bytes = |f: &Field, e: String| if f.field_type == FieldType::String { format!("BINARY {e}") } else { e };
        let mut values = Vec::new();
        let within = key_range_sql(
            range,
            |f| bytes(f, quote_bt(&f.name)),
            |f, v| {
                values.push(v.clone());
                bytes(f, "?".into())
            },
        );
        let sql = match (soft_column, within) {
            (Some(c), within) => {
                let c = quote_bt(c);
                let and = within.map(|w| format!(" AND {w}")).unwrap_or_default();
                format!("UPDATE {table} SET {c} = CURRENT_TIMESTAMP(6) WHERE {c} IS NULL{and}")
            }
            (None, Some(w)) => format!("DELETE FROM {table} WHERE {w}"),
            (None, None) => format!("DELETE FROM {table}"),
        };
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for v in &values {
            q = bind(q, v);
        }
        self.send(Command::Execute(q)).await
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
