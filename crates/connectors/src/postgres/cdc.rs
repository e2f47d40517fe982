//! Change data capture from PostgreSQL: one logical replication slot
//! (`pgoutput`) and one publication per stream, both named
//! `sluice_<stream>`. A new slot is made on a replication connection that
//! exports its snapshot, so that the initial copy sees the tables exactly
//! as of the slot's start. Changes are read with
//! `pg_logical_slot_peek_binary_changes`, which leaves the slot where it
//! is: the slot moves (`pg_replication_slot_advance`) only once every
//! destination committed what it read (see `docs/cdc.md`).

use super::PgConnector;
use super::pgoutput::{self, Column, Lsn, Message, Relation};
use crate::common::{CONNECT_TIMEOUT, quote_dq, with_timeout};
use sluice_domain::connect::changes::{
    Change, ChangeEvent, ChangeOp, ChangeReader, ChangeSource, Chunk, Order, Position, StreamStart,
};
use sluice_domain::connect::connector::{
    ConnectorError, ConnectorResult, EntitySchema, Field, FieldType, KeyRange, RecordBatch, Value,
};
use sluice_domain::shared::record::{parse_date, parse_timestamp};
use sqlx::{AssertSqlSafe, Connection, Row};
use std::collections::HashMap;
use std::time::Duration;
use time::OffsetDateTime;

/// How many events the reading task sends at once.
const CHUNK: usize = 512;

/// The slot and publication of stream `name` (letters, digits and `_`).
fn object_name(name: &str) -> ConnectorResult<String> {
    crate::common::check_stream_name(name)?;
    Ok(format!("sluice_{name}"))
}

fn lsn(s: &str) -> ConnectorResult<Lsn> {
    s.parse().map_err(ConnectorError::InvalidConfig)
}

/// An LSN as the engine compares it.
fn typed(l: Lsn) -> Position {
    Position::new(l.to_string(), Order::Offset(l.0))
}

/// The LSN of a position this source gave.
fn lsn_of(p: &Position) -> ConnectorResult<Lsn> {
    p.offset().map(Lsn).ok_or_else(|| ConnectorError::InvalidConfig(format!("'{p}' is not a PostgreSQL LSN")))
}

/// Microseconds since 2000-01-01 UTC as an instant.
fn pg_time(micros: i64) -> OffsetDateTime {
    const EPOCH_2000: i64 = 946_684_800;
    OffsetDateTime::from_unix_timestamp_nanos((i128::from(EPOCH_2000) * 1_000_000 + i128::from(micros)) * 1_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// The field type of a column by its type's OID (the built-in types; any
/// other reads as text, as its text form).
fn field_type(oid: u32) -> FieldType {
    if array_element(oid).is_some() {
        return FieldType::Array;
    }
    match oid {
        20 | 21 | 23 | 26 => FieldType::Integer,
        700 | 701 => FieldType::Number,
        1700 => FieldType::Decimal,
        16 => FieldType::Boolean,
        1082 => FieldType::Date,
        1114 | 1184 => FieldType::Timestamp,
        114 | 3802 => FieldType::Object,
        17 => FieldType::Binary,
        _ => FieldType::String,
    }
}

/// How the elements of an array type (by the array type's OID) read in
/// JSON, as `to_json` gives them (which is how a copy reads arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    /// Integers, floats and numerics: numbers.
    Number,
    Boolean,
    /// `json` and `jsonb`: the JSON itself.
    Json,
    /// Anything else: its text.
    Text,
}

fn array_element(oid: u32) -> Option<Element> {
    Some(match oid {
        1005 | 1007 | 1016 | 1028 | 1021 | 1022 | 1231 => Element::Number,
        1000 => Element::Boolean,
        199 | 3807 => Element::Json,
        // text, varchar, bpchar, name, uuid, date, time, timestamp(tz),
        // interval, bytea, char, inet, cidr, macaddr.
        1009 | 1015 | 1014 | 1003 | 2951 | 1182 | 1183 | 1115 | 1185 | 1187 | 1001 | 1002 | 1041 | 651 | 1040 => {
            Element::Text
        }
        _ => return None,
    })
}

/// An array's text form (`{1,2}`, `{{"a b",NULL},{c,d}}`, `[0:1]={1,2}`)
/// as a JSON array whose elements read as `kind`; `None` when it is not
/// one.
fn array_json(s: &str, kind: Element) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    // Bounds other than the default come first: `[0:1]={…}`.
    let s = if s.starts_with('[') { &s[s.find('=')? + 1..] } else { s };
    let b = s.as_bytes();
    let mut at = 0;
    let element = |text: &str, quoted: bool| -> J {
        if !quoted && text.eq_ignore_ascii_case("NULL") {
            return J::Null;
        }
        match kind {
            Element::Number => serde_json::from_str::<serde_json::Number>(text)
                .map(J::Number)
                .unwrap_or_else(|_| J::String(text.to_string())),
            Element::Boolean => match text {
                "t" => J::Bool(true),
                "f" => J::Bool(false),
                _ => J::String(text.to_string()),
            },
            Element::Json => serde_json::from_str(text).unwrap_or_else(|_| J::String(text.to_string())),
            Element::Text => J::String(text.to_string()),
        }
    };
    fn level(b: &[u8], at: &mut usize, element: &dyn Fn(&str, bool) -> J, depth: usize) -> Option<J> {
        if depth > 6 || b.get(*at) != Some(&b'{') {
            return None;
        }
        *at += 1;
        let mut out = Vec::new();
        if b.get(*at) == Some(&b'}') {
            *at += 1;
            return Some(J::Array(out));
        }
        loop {
            match b.get(*at)? {
                b'{' => out.push(level(b, at, element, depth + 1)?),
                b'"' => {
                    *at += 1;
                    let mut text = Vec::new();
                    loop {
                        match *b.get(*at)? {
                            b'\\' => {
                                text.push(*b.get(*at + 1)?);
                                *at += 2;
                            }
                            b'"' => {
                                *at += 1;
                                break;
                            }
                            c => {
                                text.push(c);
                                *at += 1;
                            }
                        }
                    }
                    out.push(element(std::str::from_utf8(&text).ok()?, true));
                }
                _ => {
                    let start = *at;
                    while !matches!(b.get(*at)?, b',' | b'}') {
                        *at += 1;
                    }
                    out.push(element(std::str::from_utf8(&b[start..*at]).ok()?.trim(), false));
                }
            }
            match b.get(*at)? {
                b',' => *at += 1,
                b'}' => {
                    *at += 1;
                    return Some(J::Array(out));
                }
                _ => return None,
            }
        }
    }
    let v = level(b, &mut at, &element, 0)?;
    (at == b.len()).then_some(v)
}

/// A column's text form (the session's: UTC, ISO dates, hex bytea) as a
/// value of type `t`; text that does not parse stays text.
fn text_value(s: String, t: FieldType) -> Value {
    match t {
        FieldType::Integer => s.parse().map(Value::Int).unwrap_or(Value::String(s)),
        FieldType::Number => super::binary::parse_float(&s).map(Value::Float).unwrap_or(Value::String(s)),
        FieldType::Decimal => Value::Decimal(s),
        FieldType::Boolean => match s.as_str() {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => Value::String(s),
        },
        FieldType::Date => parse_date(&s).map(Value::Date).unwrap_or(Value::String(s)),
        FieldType::Timestamp => {
            // `2026-01-02 03:04:05.123456+00`; without a zone for `timestamp`.
            let mut iso = s.replacen(' ', "T", 1);
            match iso.rfind(['+', '-']).filter(|&i| i > 10) {
                Some(i) if iso.len() - i == 3 => iso.push_str(":00"),
                Some(_) => {}
                None => iso.push('Z'),
            }
            parse_timestamp(&iso).map(Value::Timestamp).unwrap_or(Value::String(s))
        }
        FieldType::Object | FieldType::Array => Value::json_text(s),
        FieldType::Binary => match s.strip_prefix("\\x").and_then(super::binary::unhex) {
            Some(b) => Value::Bytes(b),
            None => Value::String(s),
        },
        FieldType::String => Value::String(s),
    }
}

/// Where a destination schema keeps the change stream positions its tables
/// hold (see `docs/cdc.md`).
pub(super) const POSITIONS: &str = "_sluice_positions";

/// A key column (or bound) as a chunk's range compares it: text by its
/// bytes (the `C` collation), as every destination draws the same range.
pub(super) fn bytewise(f: &Field, expr: &str) -> String {
    let native = crate::common::native_for(f, super::ENGINE).unwrap_or("text");
    if f.field_type == FieldType::String && !native.starts_with("uuid") {
        format!("{expr} COLLATE \"C\"")
    } else {
        expr.to_string()
    }
}

/// The condition of the rows in `range`, text compared by its bytes and
/// the bounds as literals (see [`crate::common::key_range_sql`]).
fn range_condition(range: &KeyRange) -> Option<String> {
    crate::common::key_range_sql(range, |f| bytewise(f, &quote_dq(&f.name)), |f, v| bytewise(f, &literal_of(f, v)))
}

/// A value as a literal of `f`'s column type (COPY and a statement built
/// as text take no parameters).
pub(super) fn literal_of(f: &Field, v: &Value) -> String {
    match super::types::literal(v) {
        Some(text) => format!("CAST({} AS {})", super::types::dollar_quoted(&text), super::types::native_for_field(f)),
        None => "NULL".into(),
    }
}

/// How many times a chunk's snapshot is taken again when a transaction it
/// counts as running had committed already (see `chunk_snapshot`).
const SNAPSHOT_TRIES: u32 = 200;

/// How long a new stream waits for a replication connection while the
/// server's `max_wal_senders` are all taken.
const SENDER_WAIT: Duration = Duration::from_secs(600);

/// The exported snapshot's connection: the snapshot lives while it does.
/// Dropped, it says goodbye to the server (a `Terminate`, so that the
/// server's process lets go of the slot at once) on a task of its own.
struct SnapshotHold(Option<sqlx::PgConnection>);

impl Drop for SnapshotHold {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = conn.close().await;
            });
        }
    }
}

impl PgConnector {
    /// Begins a chunk's read-only snapshot transaction on `conn`; answers
    /// the log's position as it was taken. A transaction whose commit is
    /// in the log (and so possibly given by the stream already) but which
    /// a snapshot still counts as running would be missing from the
    /// chunk, and the chunk would undo it: such a snapshot (one that
    /// lists a transaction already committed) is taken again, a moment
    /// later.
    async fn chunk_snapshot(&self, conn: &mut sqlx::PgConnection) -> ConnectorResult<String> {
        for _ in 0..SNAPSHOT_TRIES {
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *conn)
                .await
                .map_err(|e| self.e(&e))?;
            let (position, settled): (String, bool) = sqlx::query_as(
                "SELECT pg_current_wal_insert_lsn()::text, NOT EXISTS (SELECT 1 FROM                  pg_snapshot_xip(pg_current_snapshot()) x WHERE pg_xact_status(x) = 'committed')",
            )
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
            if settled {
                return Ok(position);
            }
            sqlx::query("ROLLBACK").execute(&mut *conn).await.map_err(|e| self.e(&e))?;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Err(ConnectorError::Timeout(format!(
            "{}/{}: no snapshot without a committed transaction still counted as running came in {SNAPSHOT_TRIES} \
             tries (is a synchronous standby holding commits?)",
            self.host, self.database
        )))
    }

    /// The positions the tables of this schema hold of change stream
    /// `stream` (the table that keeps them made when missing).
    pub(super) async fn held_positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        let table = self.qualified(POSITIONS);
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (stream text NOT NULL, entity text NOT NULL, position text NOT NULL, \
             updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (stream, entity))"
        );
        // Two runs making it at once: one of them meets the other's type.
        for attempt in 0..2 {
            match sqlx::query(AssertSqlSafe(create.clone())).execute(&self.pool).await {
                Ok(_) => break,
                Err(sqlx::Error::Database(d)) if attempt == 0 && d.code().as_deref() == Some("23505") => {}
                Err(e) => return Err(self.e(&e)),
            }
        }
        sqlx::query_as(AssertSqlSafe(format!("SELECT entity, position FROM {table} WHERE stream = $1")))
            .bind(stream)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))
    }

    /// Moves (or, with `None`, forgets) the position `entity` holds of
    /// change stream `stream`.
    pub(super) async fn move_held_position(
        &self,
        stream: &str,
        entity: &str,
        position: Option<&str>,
    ) -> ConnectorResult<()> {
        self.held_positions(stream).await?;
        let table = self.qualified(POSITIONS);
        let q = match position {
            Some(p) => sqlx::query(AssertSqlSafe(format!(
                "UPDATE {table} SET position = $3, updated_at = now() WHERE stream = $1 AND entity = $2"
            )))
            .bind(stream)
            .bind(entity)
            .bind(p.to_string()),
            None => sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE stream = $1 AND entity = $2")))
                .bind(stream)
                .bind(entity),
        };
        q.execute(&self.pool).await.map_err(|e| self.e(&e))?;
        Ok(())
    }

    /// A pooled connection (closed after, not pooled again) in a read-only
    /// transaction of the exported `snapshot`.
    async fn in_snapshot(&self, snapshot: &str) -> ConnectorResult<sqlx::pool::PoolConnection<sqlx::Postgres>> {
        if snapshot.is_empty() || !snapshot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(ConnectorError::InvalidConfig(format!("'{snapshot}' is not a snapshot name")));
        }
        let mut conn = self.pool.acquire().await.map_err(|e| self.e(&e))?;
        conn.close_on_drop();
        sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        sqlx::query(AssertSqlSafe(format!("SET TRANSACTION SNAPSHOT '{snapshot}'")))
            .execute(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        Ok(conn)
    }

    /// A read of `sql` (the read's select) in an exported snapshot, on a
    /// connection of its own that is closed after (it ends inside the
    /// snapshot's transaction).
    pub(super) async fn read_in_snapshot(
        &self,
        schema: &EntitySchema,
        sql: &str,
        snapshot: &str,
        batch_size: usize,
    ) -> ConnectorResult<Box<dyn sluice_domain::connect::connector::RecordReader>> {
        let mut conn = self.in_snapshot(snapshot).await?;
        let sql = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let decoding = super::Decoding::new(&schema.fields, batch_size, &self.host, &self.database);
        let fields = decoding.fields.clone();
        let (host, database) = (self.host.clone(), self.database.clone());
        Ok(Box::new(crate::common::ChannelReader::spawn(fields, move |tx| async move {
            match super::copy_on(&mut conn, &sql, host, database).await {
                Ok(mut stream) => decoding.pump(&mut stream, &tx).await,
                Err(e) => {
                    crate::common::send(&tx, Err(e)).await;
                }
            }
        })))
    }

    /// The whole of `entity` as a binary COPY in an exported snapshot, on a
    /// connection of its own that is closed after.
    pub(super) async fn bulk_in_snapshot(
        &self,
        entity: &str,
        fields: &[Field],
        snapshot: &str,
    ) -> ConnectorResult<Box<dyn sluice_domain::connect::connector::BulkStream>> {
        let mut conn = self.in_snapshot(snapshot).await?;
        let cols: Vec<String> = fields.iter().map(|f| quote_dq(&f.name)).collect();
        let sql =
            format!("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT binary)", cols.join(", "), self.qualified(entity));
        let (host, database) = (self.host.clone(), self.database.clone());
        let part = move |tx: tokio::sync::mpsc::Sender<ConnectorResult<Vec<u8>>>| async move {
            let mut stream = match super::copy_on(&mut conn, &sql, host, database).await {
                Ok(stream) => stream.binary(),
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            loop {
                match stream.chunk().await {
                    Ok(Some(piece)) => {
                        if tx.send(Ok(piece)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        };
        Ok(crate::common::ranges_bulk(vec![part]))
    }

    /// A direct connection with this connector's settings, for replication
    /// work a pooled connection must not carry on with.
    async fn direct(&self) -> ConnectorResult<sqlx::PgConnection> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            sqlx::PgConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))
        })
        .await
    }

    /// A replication connection. Each new slot's copy holds one while it
    /// reads in the slot's snapshot, and the server allows
    /// `max_wal_senders` of them: while all are taken (many flows
    /// starting at once), it waits for one, up to [`SENDER_WAIT`], rather
    /// than fail the run.
    async fn replication_connection(&self) -> ConnectorResult<sqlx::PgConnection> {
        let deadline = std::time::Instant::now() + SENDER_WAIT;
        let mut pause = Duration::from_millis(500);
        let mut waited = false;
        loop {
            let opts = self.opts.clone().replication("database");
            let tried = with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
                Ok(sqlx::PgConnection::connect_with(&opts).await)
            })
            .await?;
            let e = match tried {
                Ok(conn) => return Ok(conn),
                Err(e) => e,
            };
            let senders_taken = e
                .as_database_error()
                .is_some_and(|d| d.code().as_deref() == Some("53300") && d.message().contains("max_wal_senders"));
            if !senders_taken {
                return Err(self.e(&e));
            }
            if std::time::Instant::now() + pause > deadline {
                return Err(ConnectorError::Timeout(format!(
                    "every replication connection {} allows (max_wal_senders) stayed taken for {} s: each new \
                     stream's first copy holds one while it reads; raise max_wal_senders or start fewer flows \
                     at once",
                    self.host,
                    SENDER_WAIT.as_secs()
                )));
            }
            if !waited {
                tracing::info!(host = %self.host, "every replication connection is taken (max_wal_senders): waiting");
                waited = true;
            }
            // Spread the retries of many runs waiting at once.
            let jitter = Duration::from_millis(u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 4);
            tokio::time::sleep(pause + jitter).await;
            pause = (pause * 2).min(Duration::from_secs(8));
        }
    }

    /// The tables of `entities`, qualified, in a stable order.
    fn table_list(&self, entities: &[String]) -> String {
        let mut names: Vec<String> = entities.iter().map(|e| self.qualified(e)).collect();
        names.sort();
        names.dedup();
        names.join(", ")
    }

    /// The publication stream `object` reads through: the one the
    /// connection names, else its own.
    fn publication_of<'a>(&'a self, object: &'a str) -> &'a str {
        self.publication.as_deref().unwrap_or(object)
    }

    /// The tables of `entities` that the publication the connection names
    /// does not publish (all of them, when it does not exist).
    async fn unpublished(&self, publication: &str, entities: &[String]) -> ConnectorResult<Vec<String>> {
        let published: Vec<String> = sqlx::query_scalar(
            "SELECT t.tablename::text FROM pg_publication p \
             JOIN pg_publication_tables t ON t.pubname = p.pubname WHERE p.pubname = $1 AND t.schemaname = $2",
        )
        .bind(publication)
        .bind(&self.schema)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        let mut missing: Vec<String> = entities.iter().filter(|e| !published.contains(e)).cloned().collect();
        missing.sort();
        missing.dedup();
        Ok(missing)
    }

    /// Makes the publication cover exactly `entities`; a publication the
    /// connection names is only checked to publish them.
    async fn publish(&self, publication: &str, entities: &[String], version: i32) -> ConnectorResult<()> {
        if let Some(named) = &self.publication {
            let missing = self.unpublished(named, entities).await?;
            if missing.is_empty() {
                return Ok(());
            }
            let tables = self.table_list(&missing);
            return Err(ConnectorError::InvalidConfig(format!(
                "the publication {named} (the connection's) does not publish {tables}: \
                 ALTER PUBLICATION {} ADD TABLE {tables}",
                quote_dq(named)
            )));
        }
        let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_publication WHERE pubname = $1")
            .bind(publication)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        let tables = self.table_list(entities);
        if exists.is_none() {
            // Partitions' changes as their partitioned table's (13 and later).
            let with = if version >= 130_000 { " WITH (publish_via_partition_root = true)" } else { "" };
            let sql = format!("CREATE PUBLICATION {} FOR TABLE {tables}{with}", quote_dq(publication));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(|e| self.e(&e))?;
            return Ok(());
        }
        // Compared by name (not as quoted text), so that an unchanged set
        // of tables changes nothing.
        let mut published: Vec<(String, String)> =
            sqlx::query_as("SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1")
                .bind(publication)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
        published.sort();
        let mut wanted: Vec<(String, String)> = entities.iter().map(|e| (self.schema.clone(), e.clone())).collect();
        wanted.sort();
        wanted.dedup();
        if published != wanted {
            let sql = format!("ALTER PUBLICATION {} SET TABLE {tables}", quote_dq(publication));
            sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(|e| self.e(&e))?;
        }
        Ok(())
    }

    /// Waits (up to 10 s) until no session holds the slot: the replication
    /// connection that made it goes away a moment after it is dropped, and
    /// a slot is read by one session at a time.
    async fn wait_for_slot(&self, slot: &str) -> ConnectorResult<()> {
        let started = std::time::Instant::now();
        let deadline = started + std::time::Duration::from_secs(10);
        let mut ended = false;
        loop {
            let holder: Option<i32> =
                sqlx::query_scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1")
                    .bind(slot)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| self.e(&e))?
                    .flatten();
            match holder {
                None => return Ok(()),
                Some(pid) if std::time::Instant::now() >= deadline => {
                    return Err(ConnectorError::Other(format!(
                        "the replication slot {slot} is in use by server process {pid}: another reader of this \
                         flow's changes"
                    )));
                }
                // Past a moment, the holder is an earlier attempt of the
                // run (a killed process's session still decoding, or a
                // frozen one): the run's lease says this attempt is the one,
                // so that session is ended, as a destination's is.
                Some(pid) if !ended && started.elapsed() >= std::time::Duration::from_secs(2) => {
                    tracing::warn!(slot, pid, "ending the session of an earlier attempt that still holds the slot");
                    let _ = sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&self.pool).await;
                    ended = true;
                }
                Some(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    /// The readiness line for a role that may not create a publication in
    /// the database (`CREATE` on it), which Sluice's own publications
    /// need; `None` when it may.
    async fn publication_grant(&self, user: &str) -> ConnectorResult<Option<String>> {
        let (db, create): (String, bool) =
            sqlx::query_as("SELECT current_database()::text, has_database_privilege(current_database(), 'CREATE')")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
        Ok((!create).then(|| {
            format!(
                "the role {user} may not create in database {db}, which its publication needs: GRANT CREATE ON \
                 DATABASE {} TO {} (or name a publication an administrator made in the connection's publication \
                 setting)",
                quote_dq(&db),
                quote_dq(user)
            )
        }))
    }

    /// Makes logical replication slot `slot` on a replication connection
    /// that exports its snapshot (held open by the answer's `hold`).
    async fn create_slot(&self, slot: &str, temporary: bool) -> ConnectorResult<StreamStart> {
        let mut conn = self.replication_connection().await?;
        let kind = if temporary { "TEMPORARY LOGICAL" } else { "LOGICAL" };
        let sql = format!("CREATE_REPLICATION_SLOT {} {kind} pgoutput EXPORT_SNAPSHOT", quote_dq(slot));
        let row = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_one(&mut conn).await.map_err(|e| self.e(&e))?;
        let position: String = row.try_get("consistent_point").map_err(|e| self.e(&e))?;
        let snapshot: String = row.try_get("snapshot_name").map_err(|e| self.e(&e))?;
        Ok(StreamStart {
            position: typed(lsn(&position)?),
            snapshot: Some(snapshot),
            hold: Some(Box::new(SnapshotHold(Some(conn)))),
        })
    }

    /// Refuses, before they join a publication, the tables whose updates
    /// and deletes PostgreSQL could not then publish: once a table without
    /// a replica identity is published, the source's own updates of it
    /// fail. A partitioned table needs PostgreSQL 13 (its changes are then
    /// published as the table's, not its partitions').
    /// Answers the server's version (`server_version_num`).
    async fn check_publishable(&self, entities: &[String]) -> ConnectorResult<i32> {
        let rows: Vec<(String, String, String, bool)> = sqlx::query_as(
            "SELECT c.relname::text, c.relkind::text, c.relreplident::text, \
             EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = ANY($2)",
        )
        .bind(&self.schema)
        .bind(entities)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        for e in entities {
            let table = self.qualified(e);
            let Some((_, kind, identity, pk)) = rows.iter().find(|r| r.0 == *e) else {
                return Err(ConnectorError::EntityNotFound(table));
            };
            match kind.as_str() {
                "r" => {}
                "p" if version >= 130_000 => {}
                "p" => {
                    return Err(ConnectorError::InvalidConfig(format!(
                        "{table} is partitioned: capturing its changes takes PostgreSQL 13 or later"
                    )));
                }
                _ => return Err(ConnectorError::InvalidConfig(format!("{table} is not a table"))),
            }
            let identified = match identity.as_str() {
                "d" => *pk,
                "n" => false,
                _ => true,
            };
            if !identified {
                return Err(ConnectorError::InvalidConfig(format!(
                    "table {table} has no primary key (nor a replica identity): publishing it would make the \
                     source's own updates and deletes of it fail"
                )));
            }
        }
        Ok(version)
    }

    /// The slot's confirmed position, when the slot exists in this database.
    async fn slot_position(&self, slot: &str) -> ConnectorResult<Option<Lsn>> {
        let found: Option<Option<String>> = sqlx::query_scalar(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots \
             WHERE slot_name = $1 AND database = current_database()",
        )
        .bind(slot)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        match found {
            Some(Some(p)) => Ok(Some(lsn(&p)?)),
            // Still being made by another session: a new slot waits for
            // the transactions open at the source to end first.
            Some(None) => Err(ConnectorError::Timeout(format!(
                "the replication slot {slot} is still being created: the source waits for the transactions open on \
                 it to end before a new slot can start"
            ))),
            None => Ok(None),
        }
    }
}

#[async_trait::async_trait]
impl ChangeSource for PgConnector {
    async fn readiness(&self, entities: &[String]) -> ConnectorResult<Vec<String>> {
        let mut reasons = Vec::new();
        let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        if wal_level != "logical" {
            reasons.push(format!(
                "wal_level is '{wal_level}': set wal_level = logical on the server (it takes a restart)"
            ));
        }
        let (user, replication): (String, bool) = sqlx::query_as(
            "SELECT current_user::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        if !replication {
            reasons.push(format!("the role {user} lacks REPLICATION: ALTER ROLE {} REPLICATION", quote_dq(&user)));
        }
        if self.publication.is_none()
            && let Some(line) = self.publication_grant(&user).await?
        {
            reasons.push(line);
        }
        let (max, used): (i32, i64) = sqlx::query_as(
            "SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        if i64::from(max) <= used {
            reasons.push(format!("no free replication slot: max_replication_slots = {max}, {used} in use"));
        }
        let rows = sqlx::query(
            "SELECT c.relname::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
             pg_has_role(c.relowner, 'USAGE') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        )
        .bind(&self.schema)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        let super_user: bool = sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        let mut tables = Vec::new();
        for e in crate::common::tables_to_check(entities, rows.iter().map(|r| r.get::<String, _>(0))) {
            match rows.iter().find(|r| r.get::<String, _>(0) == e) {
                None => tables.push(format!("{} is not a table", self.qualified(&e))),
                Some(r) => {
                    if !r.get::<bool, _>(1) {
                        tables.push(format!("table {} has no primary key", self.qualified(&e)));
                    }
                    if !r.get::<bool, _>(2) && !super_user && self.publication.is_none() {
                        tables.push(format!(
                            "cannot create a publication: the role {user} does not own table {}",
                            self.qualified(&e)
                        ));
                    }
                }
            }
        }
        if let Some(named) = &self.publication {
            let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_publication WHERE pubname = $1")
                .bind(named)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
            if exists.is_none() {
                reasons.push(format!("the publication {named} the connection names does not exist"));
            } else {
                let names = crate::common::tables_to_check(entities, rows.iter().map(|r| r.get::<String, _>(0)));
                for table in self.unpublished(named, &names).await? {
                    tables.push(format!("table {} is not in the publication {named}", self.qualified(&table)));
                }
            }
        }
        crate::common::push_table_reasons(&mut reasons, tables);
        Ok(reasons)
    }

    async fn open_stream(&self, name: &str, entities: &[String]) -> ConnectorResult<StreamStart> {
        let object = object_name(name)?;
        let version = self.check_publishable(entities).await?;
        if let Err(e) = self.publish(self.publication_of(&object), entities, version).await {
            // Name the grant a refused CREATE PUBLICATION lacks.
            let user: String =
                sqlx::query_scalar("SELECT current_user::text").fetch_one(&self.pool).await.map_err(|e| self.e(&e))?;
            return Err(match self.publication_grant(&user).await {
                Ok(Some(line)) if self.publication.is_none() => ConnectorError::InvalidConfig(line),
                _ => e,
            });
        }
        if let Some(position) = self.slot_position(&object).await? {
            return Ok(StreamStart { position: typed(position), snapshot: None, hold: None });
        }
        self.create_slot(&object, false).await
    }

    async fn fresh_snapshot(&self, name: &str) -> ConnectorResult<StreamStart> {
        // A temporary slot of its own exports the snapshot: it goes away
        // with its connection (the hold), and the stream's slot, which
        // reads on from before this point, stays as it is.
        let object = object_name(name)?;
        let temporary = format!("{object}_t{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        self.create_slot(&temporary, true).await
    }

    async fn read_chunk(
        &self,
        entity: &str,
        key: &[Field],
        after: Option<&[Value]>,
        limit: usize,
    ) -> ConnectorResult<Chunk> {
        let schema = self.table(entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(super::types::select_expr).collect();
        let range = KeyRange { fields: key.to_vec(), after: after.map(<[Value]>::to_vec), upto: None };
        let keys: Vec<String> = key.iter().map(|f| bytewise(f, &quote_dq(&f.name))).collect();
        let filter = range_condition(&range);
        let sql = format!(
            "COPY (SELECT {} FROM {}{} ORDER BY {} LIMIT {limit}) TO STDOUT (FORMAT binary)",
            cols.join(", "),
            self.qualified(entity),
            filter.map(|f| format!(" WHERE {f}")).unwrap_or_default(),
            keys.join(", ")
        );
        let mut conn = self.pool.acquire().await.map_err(|e| self.e(&e))?;
        let read = async {
            let position = self.chunk_snapshot(&mut conn).await?;
            // The planner's estimate: from the statistics where the table
            // has them, from its size where not (never analyzed).
            let plan: serde_json::Value = sqlx::query_scalar(AssertSqlSafe(format!(
                "EXPLAIN (FORMAT JSON) SELECT 1 FROM {}",
                self.qualified(entity)
            )))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
            let table_rows = plan[0]["Plan"]["Plan Rows"].as_f64().map(|n| n as i64);
            let decoding = super::Decoding::new(&schema.fields, limit.max(1), &self.host, &self.database);
            let (tx, mut rx) = tokio::sync::mpsc::channel(4);
            {
                let mut stream = super::copy_on(&mut conn, &sql, self.host.clone(), self.database.clone()).await?;
                decoding.pump(&mut stream, &tx).await;
            }
            drop(tx);
            let mut rows = Vec::new();
            while let Some(batch) = rx.recv().await {
                rows.extend(batch?.rows);
            }
            sqlx::query("COMMIT").execute(&mut *conn).await.map_err(|e| self.e(&e))?;
            Ok::<_, ConnectorError>(Chunk {
                fields: decoding.fields.clone(),
                rows,
                position: typed(lsn(&position)?),
                table_rows: table_rows.filter(|n| *n >= 0).map(|n| n as u64),
            })
        };
        let chunk = read.await;
        if chunk.is_err() {
            // Never pooled again inside its transaction.
            conn.close_on_drop();
        }
        chunk
    }

    fn position(&self, text: &str) -> ConnectorResult<Position> {
        Ok(typed(lsn(text)?))
    }

    async fn end_position(&self) -> ConnectorResult<Position> {
        // Flushed, not merely written: a slot is read up to what is flushed,
        // and a read that ends here must have seen every change before it.
        let end: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        Ok(typed(lsn(&end)?))
    }

    async fn wait_past(&self, position: &Position, at_most: std::time::Duration) -> ConnectorResult<bool> {
        let position = lsn_of(position)?;
        let deadline = std::time::Instant::now() + at_most;
        loop {
            if lsn_of(&self.end_position().await?)? > position {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn changes(
        &self,
        name: &str,
        from: &[(String, Position)],
        until: &Position,
    ) -> ConnectorResult<Box<dyn ChangeReader>> {
        let object = object_name(name)?;
        let publication = self.publication_of(&object).to_string();
        let until = lsn_of(until)?;
        self.wait_for_slot(&object).await?;
        let after =
            from.iter().map(|(e, p)| Ok((e.clone(), lsn_of(p)?))).collect::<ConnectorResult<HashMap<_, _>>>()?;
        // A connection of its own, closed when the read ends or is dropped,
        // so that no server process goes on holding the slot after it.
        let mut conn = self.direct().await?;
        // `Ok(None)` says the read reached its end.
        let (tx, rx) = tokio::sync::mpsc::channel::<crate::common::ChangeBatch>(4);
        let (host, database, schema) = (self.host.clone(), self.database.clone(), self.schema.clone());
        let task = tokio::spawn(async move {
            use futures_util::TryStreamExt;
            let mut decoder =
                Decoder { schema, after, relations: HashMap::new(), commit: Lsn::default(), out: Vec::new() };
            // A slot is read by one process at a time: one that is letting
            // go of it is waited for (up to 5 s) before the read fails.
            let mut tries = 0;
            'read: loop {
                let mut rows = sqlx::query(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::text::pg_lsn, NULL, \
                     'proto_version', '1', 'publication_names', $3)",
                )
                .bind(&object)
                .bind(until.to_string())
                .bind(&publication)
                .fetch(&mut conn);
                let mut read_any = false;
                loop {
                    let row = match rows.try_next().await {
                        Ok(Some(r)) => r,
                        Ok(None) => break 'read,
                        Err(sqlx::Error::Database(d))
                            if !read_any && tries < 50 && d.code().as_deref() == Some("55006") =>
                        {
                            tries += 1;
                            drop(rows);
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            continue 'read;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(super::err(&e, &host, &database))).await;
                            return;
                        }
                    };
                    read_any = true;
                    let data: Vec<u8> = row.get(0);
                    if let Err(e) = decoder.feed(&data) {
                        let _ = tx.send(Err(ConnectorError::Other(format!("reading the change stream: {e}")))).await;
                        return;
                    }
                    if decoder.out.len() >= CHUNK && tx.send(Ok(Some(std::mem::take(&mut decoder.out)))).await.is_err()
                    {
                        return;
                    }
                }
            }
            if !decoder.out.is_empty() && tx.send(Ok(Some(decoder.out))).await.is_err() {
                return;
            }
            let _ = conn.close().await;
            let _ = tx.send(Ok(None)).await;
        });
        Ok(Box::new(crate::common::ChannelChanges::new(rx, task.abort_handle())))
    }

    async fn confirm(&self, name: &str, position: &Position) -> ConnectorResult<()> {
        let object = object_name(name)?;
        let position = lsn_of(position)?;
        let Some(held) = self.slot_position(&object).await? else {
            return Err(ConnectorError::Other(format!("the replication slot {object} is gone")));
        };
        if position > held {
            self.wait_for_slot(&object).await?;
            sqlx::query("SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)")
                .bind(&object)
                .bind(position.to_string())
                .execute(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
        }
        Ok(())
    }

    async fn retained_from(&self, name: &str) -> ConnectorResult<Option<Position>> {
        let object = object_name(name)?;
        Ok(self.slot_position(&object).await?.map(typed))
    }

    async fn retained_bytes(&self, name: &str) -> ConnectorResult<Option<u64>> {
        let object = object_name(name)?;
        let found: Option<Option<i64>> = sqlx::query_scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots \
             WHERE slot_name = $1 AND database = current_database()",
        )
        .bind(&object)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        Ok(found.flatten().map(|b| u64::try_from(b).unwrap_or(0)))
    }

    async fn drop_stream(&self, name: &str) -> ConnectorResult<()> {
        let object = object_name(name)?;
        if self.slot_position(&object).await?.is_some() {
            self.wait_for_slot(&object).await?;
            sqlx::query("SELECT pg_drop_replication_slot($1)")
                .bind(&object)
                .execute(&self.pool)
                .await
                .map_err(|e| self.e(&e))?;
        }
        // Its own publication only: one the connection names is the
        // administrator's.
        let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_dq(&object));
        sqlx::query(AssertSqlSafe(sql)).execute(&self.pool).await.map_err(|e| self.e(&e))?;
        Ok(())
    }
}

impl super::PgWriter {
    async fn exec(&mut self, sql: String) -> ConnectorResult<()> {
        let (host, db) = (self.host.clone(), self.database.clone());
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        sqlx::query(AssertSqlSafe(sql)).execute(&mut **tx).await.map_err(|e| super::err(&e, &host, &db))?;
        Ok(())
    }

    /// A temporary table of `rows`, its columns `names` typed as the
    /// target's (for deletes and updates by key). One per set of columns
    /// and transaction (it goes at commit), emptied for each use: a
    /// transaction of many batches takes no more locks for it.
    async fn scratch(&mut self, names: &[String], rows: &[Vec<Value>]) -> ConnectorResult<String> {
        // FNV-1a of the columns: a name that fits PostgreSQL's 63 bytes.
        let hash = names
            .join(",")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
        let scratch = quote_dq(&format!("sluice_keys_{hash:016x}"));
        self.exec(format!(
            "CREATE TEMP TABLE IF NOT EXISTS {scratch} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA",
            names.join(", "),
            self.table
        ))
        .await?;
        self.exec(format!("TRUNCATE {scratch}")).await?;
        let (host, db) = (self.host.clone(), self.database.clone());
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        let mut copy = tx
            .copy_in_raw(&format!("COPY {scratch} ({}) FROM STDIN (FORMAT csv)", names.join(", ")))
            .await
            .map_err(|e| super::err(&e, &host, &db))?;
        let mut buf = Vec::new();
        for row in rows {
            super::csv_row(&mut buf, row);
        }
        copy.send(buf).await.map_err(|e| super::err(&e, &host, &db))?;
        copy.finish().await.map_err(|e| super::err(&e, &host, &db))?;
        Ok(scratch)
    }

    /// Deletes the rows with `keys`' keys; the rows staged before go in
    /// first, so that a row deleted after an upsert stays deleted.
    pub(super) async fn delete_keys(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.merge_stage().await?;
        let names: Vec<String> = keys.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let scratch = self.scratch(&names, &keys.rows).await?;
        let on: Vec<String> = names.iter().map(|n| format!("t.{n} = k.{n}")).collect();
        self.exec(format!("DELETE FROM {} t USING {scratch} k WHERE {}", self.table, on.join(" AND "))).await
    }

    /// Sets the fields of `rows` but the key on the rows with its keys.
    pub(super) async fn update_rows(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.merge_stage().await?;
        let (mut keys, mut set) = (Vec::new(), Vec::new());
        for f in rows.fields.iter() {
            if self.key.contains(&f.name) { keys.push(quote_dq(&f.name)) } else { set.push(quote_dq(&f.name)) }
        }
        if keys.is_empty() || set.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = rows.fields.iter().map(|f| quote_dq(&f.name)).collect();
        let scratch = self.scratch(&names, &rows.rows).await?;
        let assign: Vec<String> = set.iter().map(|n| format!("{n} = u.{n}")).collect();
        let on: Vec<String> = keys.iter().map(|n| format!("t.{n} = u.{n}")).collect();
        let sql =
            format!("UPDATE {} t SET {} FROM {scratch} u WHERE {}", self.table, assign.join(", "), on.join(" AND "));
        self.exec(sql).await
    }

    /// Removes every row (or marks the live ones deleted in
    /// `soft_column`), in the writer's transaction.
    pub(super) async fn clear_rows(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.merge_stage().await?;
        let within = range_condition(range);
        let sql = match (soft_column, within) {
            (Some(c), within) => {
                let c = quote_dq(c);
                let and = within.map(|w| format!(" AND {w}")).unwrap_or_default();
                format!("UPDATE {} SET {c} = now() WHERE {c} IS NULL{and}", self.table)
            }
            (None, Some(w)) => format!("DELETE FROM {} WHERE {w}", self.table),
            (None, None) => format!("DELETE FROM {}", self.table),
        };
        self.exec(sql).await
    }

    /// Records the position this table holds of `stream`, in the writer's
    /// transaction.
    pub(super) async fn write_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        let sql = format!(
            "INSERT INTO {} (stream, entity, position) VALUES ($1, $2, $3) \
             ON CONFLICT (stream, entity) DO UPDATE SET position = EXCLUDED.position, updated_at = now()",
            self.positions
        );
        let (host, db, entity) = (self.host.clone(), self.database.clone(), self.entity.clone());
        let tx = self.tx.as_mut().ok_or_else(|| ConnectorError::Other("writer already finished".into()))?;
        sqlx::query(AssertSqlSafe(sql))
            .bind(stream)
            .bind(entity)
            .bind(position)
            .execute(&mut **tx)
            .await
            .map_err(|e| super::err(&e, &host, &db))?;
        Ok(())
    }
}

/// Turns pgoutput messages into change events: the relations seen so far,
/// and where the transaction at hand commits.
struct Decoder {
    schema: String,
    /// Each entity's position: its changes in transactions that commit
    /// before it are held already.
    after: HashMap<String, Lsn>,
    relations: HashMap<u32, (Relation, bool)>,
    commit: Lsn,
    out: Vec<ChangeEvent>,
}

impl Decoder {
    fn feed(&mut self, data: &[u8]) -> Result<(), String> {
        match pgoutput::decode(data)? {
            Message::Begin { final_lsn, commit_time, .. } => {
                self.commit = final_lsn;
                self.out.push(ChangeEvent::Begin { position: typed(final_lsn), committed_at: pg_time(commit_time) });
            }
            Message::Commit { end_lsn, commit_time, .. } => {
                self.out.push(ChangeEvent::Commit { position: typed(end_lsn), committed_at: pg_time(commit_time) });
            }
            Message::Relation(r) => {
                let ours = r.namespace == self.schema && self.after.contains_key(&r.name);
                if ours {
                    let fields = r
                        .columns
                        .iter()
                        .map(|c| Field {
                            name: c.name.clone(),
                            field_type: field_type(c.type_oid),
                            nullable: !c.key,
                            primary_key: c.key,
                            native_type: None,
                        })
                        .collect();
                    self.out.push(ChangeEvent::Schema(EntitySchema { name: r.name.clone(), fields }));
                }
                self.relations.insert(r.id, (r, ours));
            }
            Message::Insert { relation, new } => self.change(relation, ChangeOp::Insert, new)?,
            Message::Update { relation, old, new } => {
                // A changed key: the row under the old key goes first.
                if let Some(old) = old
                    && self.key_changed(relation, &old, &new)
                {
                    self.change(relation, ChangeOp::Delete, old)?;
                }
                self.change(relation, ChangeOp::Update, new)?
            }
            Message::Delete { relation, old } => self.change(relation, ChangeOp::Delete, old)?,
            Message::Truncate { relations } => {
                if let Some((r, _)) = relations
                    .iter()
                    .filter_map(|id| self.relations.get(id))
                    .find(|(r, ours)| *ours && self.due(&r.name))
                {
                    return Err(format!("table {} was truncated: re-snapshot it", r.name));
                }
            }
            Message::Logical { .. } | Message::Other(_) => {}
        }
        Ok(())
    }

    /// Whether an update's old tuple (the old key, or the old row) names
    /// another key than its new row.
    fn key_changed(&self, relation: u32, old: &[Column], new: &[Column]) -> bool {
        let Some((r, _)) = self.relations.get(&relation) else { return false };
        r.columns.iter().enumerate().any(|(i, c)| c.key && old.get(i) != new.get(i))
    }

    /// Whether the transaction at hand is one `entity` does not hold yet.
    fn due(&self, entity: &str) -> bool {
        self.after.get(entity).is_some_and(|held| self.commit >= *held)
    }

    fn change(&mut self, relation: u32, op: ChangeOp, columns: Vec<Column>) -> Result<(), String> {
        let (r, ours) = self.relations.get(&relation).ok_or("a change of a table the stream did not describe")?;
        if !ours || !self.due(&r.name) {
            return Ok(());
        }
        if columns.len() != r.columns.len() {
            return Err(format!("a change of {} with {} columns, not {}", r.name, columns.len(), r.columns.len()));
        }
        let mut unchanged = Vec::new();
        let values = columns
            .into_iter()
            .zip(&r.columns)
            .enumerate()
            .map(|(i, (c, rc))| match c {
                Column::Null => Value::Null,
                Column::Unchanged => {
                    unchanged.push(i);
                    Value::Null
                }
                Column::Text(s) => match array_element(rc.type_oid) {
                    Some(kind) => array_json(&s, kind).map(Value::Json).unwrap_or(Value::String(s)),
                    None => text_value(s, field_type(rc.type_oid)),
                },
            })
            .collect();
        self.out.push(ChangeEvent::Change(Change { entity: r.name.clone(), op, values, unchanged }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_read_as_values() {
        let ts = |s: &str| text_value(s.into(), FieldType::Timestamp);
        let want = parse_timestamp("2026-01-02T03:04:05.5Z").unwrap();
        assert_eq!(ts("2026-01-02 03:04:05.5+00"), Value::Timestamp(want));
        assert_eq!(ts("2026-01-02 05:04:05.5+02:00"), Value::Timestamp(want));
        assert_eq!(ts("2026-01-02 03:04:05.5"), Value::Timestamp(want));
        assert_eq!(text_value("\\x0aff".into(), FieldType::Binary), Value::Bytes(vec![10, 255]));
        assert_eq!(text_value("t".into(), FieldType::Boolean), Value::Bool(true));
        assert_eq!(text_value("12.50".into(), FieldType::Decimal), Value::Decimal("12.50".into()));
        assert_eq!(text_value("{\"a\": 1}".into(), FieldType::Object), Value::Json(serde_json::json!({"a": 1})));
        assert!(matches!(text_value("{\"a\": 1}".into(), FieldType::Object), Value::RawJson(t) if t == "{\"a\": 1}"));
        assert!(matches!(text_value("NaN".into(), FieldType::Number), Value::Float(f) if f.is_nan()));
        assert_eq!(text_value("x".into(), FieldType::Integer), Value::String("x".into()));
        assert_eq!(pg_time(0), OffsetDateTime::from_unix_timestamp(946_684_800).unwrap());
    }

    #[test]
    fn arrays_read_as_json_as_a_copy_reads_them() {
        use serde_json::json;
        let a = |s: &str, k| array_json(s, k);
        assert_eq!(a("{1,2,NULL}", Element::Number), Some(json!([1, 2, null])));
        assert_eq!(a("{{1.5,2},{3,4}}", Element::Number), Some(json!([[1.5, 2], [3, 4]])));
        assert_eq!(a("{}", Element::Text), Some(json!([])));
        assert_eq!(a("{t,f}", Element::Boolean), Some(json!([true, false])));
        assert_eq!(
            a(r#"{"a b","x\"y",NULL,"NULL",plain}"#, Element::Text),
            Some(json!(["a b", "x\"y", null, "NULL", "plain"]))
        );
        assert_eq!(a(r#"{"{\"k\": 1}"}"#, Element::Json), Some(json!([{"k": 1}])));
        assert_eq!(a("[0:1]={7,8}", Element::Number), Some(json!([7, 8])));
        for bad in ["", "{", "{1,2", "{1}x", "1,2", "{\"open}", &"{".repeat(20)] {
            assert_eq!(a(bad, Element::Number), None, "{bad}");
        }
        assert_eq!(field_type(1007), FieldType::Array);
    }

    #[test]
    fn stream_names_are_checked() {
        assert_eq!(object_name("0194c4a2b3").unwrap(), "sluice_0194c4a2b3");
        for bad in ["", "A", "a-b", "x;drop", &"a".repeat(49)] {
            assert!(object_name(bad).is_err(), "{bad}");
        }
    }
}
