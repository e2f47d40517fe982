//! Change data capture from MariaDB: the binary log, read as a replica
//! reads it (`COM_BINLOG_DUMP` from a GTID position), on a connection of
//! its own. Nothing is made on the source: the server keeps its binlog for
//! as long as its own expiry says (`binlog_expire_logs_seconds`), and a
//! flow whose position it purged fails with `position_lost`.
//!
//! Positions are MariaDB GTID positions (`0-1-42`). A copy reads in a
//! transaction begun `WITH CONSISTENT SNAPSHOT`, whose binlog position the
//! server gives (`binlog_snapshot_file`, `binlog_snapshot_position`) and
//! `BINLOG_GTID_POS` turns into the GTID position the copy hands over from:
//! no lock is taken. Row images are decoded with the table's columns as
//! the catalog gives them (`binlog`); a table map whose columns no longer
//! match is read against the catalog again, and a change of columns
//! reaches the flow as a new schema.

use super::MySqlConnector;
use super::binlog::{self, Column, Gtid, GtidPos, TableMap};
use super::types::bind;
use crate::common::{CONNECT_TIMEOUT, check_stream_name, native_for, quote_bt, with_timeout};
use sluice_domain::connect::changes::{
    Change, ChangeEvent, ChangeOp, ChangeReader, ChangeSource, Chunk, Order, Position, StreamStart,
};
use sluice_domain::connect::connector::{
    ConnectorError, ConnectorResult, EntitySchema, Field, KeyRange, KeyedRead, Value,
};
use sqlx::{Connection, MySqlConnection, Row};
use std::collections::HashMap;
use std::sync::Arc;
use time::OffsetDateTime;

/// How many events the reading task sends at once.
const CHUNK: usize = 512;

/// How often the server sends a heartbeat while the binlog is idle.
const HEARTBEAT_NS: u64 = 1_000_000_000;

/// A read that gets no event (not even a heartbeat) for this long fails.
const SILENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// MariaDB's error for a binlog position it no longer has (or never had).
const ER_MASTER_FATAL_ERROR_READING_BINLOG: &str = "1236";

fn gtid(s: &str) -> ConnectorResult<GtidPos> {
    GtidPos::parse(s).map_err(ConnectorError::InvalidConfig)
}

/// A GTID position as the engine compares it: per domain, its sequence
/// number.
fn typed(p: &GtidPos) -> Position {
    Position::new(p.to_string(), Order::Sequences(p.domains().map(|(d, n)| (u64::from(d), n)).collect()))
}

impl MySqlConnector {
    /// A connection of its own, outside the pool.
    async fn direct(&self) -> ConnectorResult<MySqlConnection> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            MySqlConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))
        })
        .await
    }

    /// Begins a consistent snapshot on `conn`; answers the GTID position
    /// it sees the binlog at.
    async fn begin_snapshot(&self, conn: &mut MySqlConnection) -> ConnectorResult<GtidPos> {
        for sql in [
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ] {
            sqlx::query(sql).execute(&mut *conn).await.map_err(|e| self.e(&e))?;
        }
        let rows = sqlx::query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        let status = |name: &str| {
            rows.iter()
                .find(|r| r.try_get::<String, _>(0).is_ok_and(|n| n.eq_ignore_ascii_case(name)))
                .and_then(|r| r.try_get::<String, _>(1).ok())
        };
        let (Some(file), Some(offset)) = (status("Binlog_snapshot_file"), status("Binlog_snapshot_position")) else {
            return Err(ConnectorError::Unsupported(format!(
                "{}: the server gives no binlog position of a consistent snapshot (binlog_snapshot_file): \
                 change data capture reads MariaDB 10.6 or later with binary logging on",
                self.host
            )));
        };
        if file.is_empty() {
            return Err(ConnectorError::Unsupported(format!(
                "{}: binary logging is off (log_bin): start the server with --log-bin",
                self.host
            )));
        }
        let offset: u64 = offset.parse().map_err(|_| ConnectorError::Other(format!("a binlog offset '{offset}'")))?;
        let pos: Option<String> = sqlx::query_scalar("SELECT BINLOG_GTID_POS(?, ?)")
            .bind(&file)
            .bind(offset)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        // NULL: the server cannot tell (a position it no longer has).
        let pos = pos.ok_or_else(|| {
            ConnectorError::Other(format!(
                "{}: BINLOG_GTID_POS gives no GTID position for the snapshot's binlog position {file}:{offset}",
                self.host
            ))
        })?;
        gtid(&pos)
    }

    /// A consistent snapshot held for copies, and its position.
    async fn take_snapshot(&self) -> ConnectorResult<StreamStart> {
        let mut conn = self.direct().await?;
        let position = self.begin_snapshot(&mut conn).await?;
        let (name, hold) = super::snapshot::hold(conn)?;
        Ok(StreamStart { position: typed(&position), snapshot: Some(name), hold: Some(hold) })
    }

    /// The columns of `entity` as the binlog decoder reads them, beside
    /// the fields a copy reads.
    async fn columns(&self, entity: &str) -> ConnectorResult<(Vec<Field>, Vec<Column>)> {
        let fields = self.table(entity).await?.fields;
        let rows = sqlx::query(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(COALESCE(CHARACTER_SET_NAME, '') AS CHAR) \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
        )
        .bind(entity)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        let columns = fields
            .iter()
            .map(|f| {
                let row = rows.iter().find(|r| r.get::<String, _>(0) == f.name);
                let column_type = row.map(|r| r.get::<String, _>(1)).unwrap_or_default().to_ascii_lowercase();
                let charset = row.map(|r| r.get::<String, _>(2)).unwrap_or_default();
                let listed = column_type.starts_with("enum(") || column_type.starts_with("set(");
                Column {
                    field_type: f.field_type,
                    unsigned: column_type.contains("unsigned"),
                    labels: if listed { binlog::labels(&column_type) } else { Vec::new() },
                    latin1: charset.eq_ignore_ascii_case("latin1"),
                }
            })
            .collect();
        Ok((fields, columns))
    }

    async fn binlog_position(&self) -> ConnectorResult<GtidPos> {
        let pos: String = sqlx::query_scalar("SELECT CAST(@@GLOBAL.gtid_binlog_pos AS CHAR)")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        gtid(&pos)
    }

    /// Starts a binlog dump on `conn` from `start`.
    async fn dump(&self, conn: &mut MySqlConnection, start: &GtidPos) -> ConnectorResult<bool> {
        let checksum: String = sqlx::query_scalar("SELECT CAST(@@GLOBAL.binlog_checksum AS CHAR)")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        for sql in [
            // This reader understands checksums, MariaDB's events (GTIDs
            // among them) and heartbeats.
            "SET @master_binlog_checksum = @@GLOBAL.binlog_checksum".to_string(),
            "SET @mariadb_slave_capability = 4".to_string(),
            format!("SET @master_heartbeat_period = {HEARTBEAT_NS}"),
            "SET @slave_gtid_strict_mode = 0".to_string(),
            "SET @slave_gtid_ignore_duplicates = 0".to_string(),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await.map_err(|e| self.e(&e))?;
        }
        sqlx::query("SET @slave_connect_state = ?")
            .bind(start.connect_state())
            .execute(&mut *conn)
            .await
            .map_err(|e| self.e(&e))?;
        // COM_BINLOG_DUMP: from the connect state (an empty file name), as
        // a replica of a server id of its own (the server ends an older dump
        // of the same id).
        let server_id: u32 = 0x5100_0000 | (rand_u32() & 0x00ff_ffff);
        let mut cmd = vec![0x12];
        cmd.extend_from_slice(&4u32.to_le_bytes());
        cmd.extend_from_slice(&0u16.to_le_bytes());
        cmd.extend_from_slice(&server_id.to_le_bytes());
        conn.send_raw_command(&cmd).await.map_err(|e| self.e(&e))?;
        Ok(checksum.eq_ignore_ascii_case("CRC32"))
    }

    fn dump_error(&self, e: &sqlx::Error) -> ConnectorError {
        match e {
            sqlx::Error::Database(d) if d.code().as_deref() == Some(ER_MASTER_FATAL_ERROR_READING_BINLOG) => {
                ConnectorError::Other(format!(
                    "the server no longer has the binlog from this flow's position ({}): the changes after it are \
                     lost; copy each table again with DELETE …/state/{{entity}}",
                    d.message()
                ))
            }
            other => self.e(other),
        }
    }
}

fn rand_u32() -> u32 {
    let b = uuid::Uuid::new_v4();
    let b = b.as_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[async_trait::async_trait]
impl ChangeSource for MySqlConnector {
    async fn readiness(&self, entities: &[String]) -> ConnectorResult<Vec<String>> {
        let mut reasons = Vec::new();
        let (version, log_bin, format, image): (String, i64, String, String) = sqlx::query_as(
            "SELECT CAST(VERSION() AS CHAR), @@GLOBAL.log_bin, CAST(@@GLOBAL.binlog_format AS CHAR), \
             CAST(@@GLOBAL.binlog_row_image AS CHAR)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        if !version.to_ascii_lowercase().contains("mariadb") {
            reasons.push(format!(
                "the server is MySQL {version}: change data capture reads MariaDB's binlog (GTIDs as domain-server-\
                 sequence); MySQL's GTID sets (uuid:n) are not read yet"
            ));
        }
        if log_bin == 0 {
            reasons
                .push("binary logging is off (log_bin): start the server with --log-bin (it takes a restart)".into());
        }
        if !format.eq_ignore_ascii_case("ROW") {
            reasons.push(format!(
                "binlog_format is '{format}': SET GLOBAL binlog_format = 'ROW' (and set it in the server's configuration)"
            ));
        }
        if !image.eq_ignore_ascii_case("FULL") {
            reasons.push(format!(
                "binlog_row_image is '{image}': SET GLOBAL binlog_row_image = 'FULL' (and set it in the server's \
                 configuration)"
            ));
        }
        let grants: Vec<String> = sqlx::query_scalar("SHOW GRANTS")
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))?
            .into_iter()
            .map(|g: String| g.to_ascii_uppercase())
            .filter(|g| g.contains(" ON *.* "))
            .collect();
        let granted = |p: &str| grants.iter().any(|g| g.contains("ALL PRIVILEGES") || g.contains(p));
        let user: String = sqlx::query_scalar("SELECT CAST(CURRENT_USER() AS CHAR)")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        if !granted("REPLICATION SLAVE") && !granted("REPLICATION REPLICA") {
            reasons.push(format!("the user {user} lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE ON *.* TO {user}"));
        }
        if !granted("REPLICATION CLIENT") && !granted("BINLOG MONITOR") && !granted("SUPER") {
            reasons.push(format!(
                "the user {user} lacks REPLICATION CLIENT (BINLOG MONITOR): GRANT BINLOG MONITOR ON *.* TO {user}"
            ));
        }
        let tables = sqlx::query(
            "SELECT CAST(t.TABLE_NAME AS CHAR), CAST(COALESCE(t.ENGINE, '') AS CHAR), \
             EXISTS (SELECT 1 FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = t.TABLE_SCHEMA \
               AND s.TABLE_NAME = t.TABLE_NAME AND s.INDEX_NAME = 'PRIMARY') \
             FROM information_schema.TABLES t WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE' \
             ORDER BY t.TABLE_NAME",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        let entities = crate::common::tables_to_check(entities, tables.iter().map(|r| r.get::<String, _>(0)));
        let mut lines = Vec::new();
        for e in &entities {
            match tables.iter().find(|r| r.get::<String, _>(0) == *e) {
                None => lines.push(format!("{} is not a table of {}", quote_bt(e), self.database)),
                Some(r) => {
                    if r.get::<i64, _>(2) == 0 {
                        lines.push(format!("table {} has no primary key", quote_bt(e)));
                    }
                    let engine: String = r.get(1);
                    if !engine.eq_ignore_ascii_case("InnoDB") {
                        lines.push(format!(
                            "table {} uses {engine}, which keeps no snapshot: its copy cannot be consistent \
                             (ALTER TABLE {} ENGINE = InnoDB)",
                            quote_bt(e),
                            quote_bt(e)
                        ));
                    }
                }
            }
        }
        // Columns whose binlog form is not read (text in another character
        // set, MariaDB's UUID and INET types).
        let odd = sqlx::query(
            "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), \
             CAST(COALESCE(CHARACTER_SET_NAME, DATA_TYPE) AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND (COALESCE(CHARACTER_SET_NAME, 'utf8mb4') NOT IN \
             ('utf8mb4', 'utf8mb3', 'utf8', 'latin1', 'ascii', 'binary') OR DATA_TYPE IN ('uuid', 'inet4', 'inet6'))",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.e(&e))?;
        for r in odd.iter().filter(|r| entities.contains(&r.get::<String, _>(0))) {
            let (t, c, what): (String, String, String) = (r.get(0), r.get(1), r.get(2));
            lines.push(format!(
                "column {}.{} is {what}, whose binlog form is not read yet (text in UTF-8, Latin-1 or ASCII is)",
                quote_bt(&t),
                quote_bt(&c)
            ));
        }
        crate::common::push_table_reasons(&mut reasons, lines);
        Ok(reasons)
    }

    async fn open_stream(&self, name: &str, _entities: &[String]) -> ConnectorResult<StreamStart> {
        check_stream_name(name)?;
        self.take_snapshot().await
    }

    async fn fresh_snapshot(&self, name: &str) -> ConnectorResult<StreamStart> {
        check_stream_name(name)?;
        self.take_snapshot().await
    }

    async fn read_chunk(
        &self,
        entity: &str,
        key: &[Field],
        after: Option<&[Value]>,
        limit: usize,
    ) -> ConnectorResult<Chunk> {
        let schema = self.table(entity).await?;
        let read = KeyedRead {
            entity: entity.to_string(),
            range: KeyRange { fields: key.to_vec(), after: after.map(<[Value]>::to_vec), upto: None },
            only: None,
            batch_size: limit,
        };
        let (sql, values) = super::types::keyed_sql(&schema, &read);
        let sql = format!("{sql} LIMIT {}", limit.max(1));
        let fields = Arc::new(schema.fields);
        let decode = self.row_decoder(&fields);
        let mut conn = self.direct().await?;
        let read = async {
            let position = self.begin_snapshot(&mut conn).await?;
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for v in &values {
                q = bind(q, v);
            }
            let found = q.fetch_all(&mut conn).await.map_err(|e| self.e(&e))?;
            let rows = found.iter().map(&decode).collect::<ConnectorResult<Vec<_>>>()?;
            let estimate: Option<u64> = sqlx::query_scalar(
                "SELECT CAST(TABLE_ROWS AS UNSIGNED) FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            )
            .bind(entity)
            .fetch_optional(&mut conn)
            .await
            .map_err(|e| self.e(&e))?
            .flatten();
            sqlx::query("COMMIT").execute(&mut conn).await.map_err(|e| self.e(&e))?;
            Ok::<_, ConnectorError>(Chunk {
                fields: fields.clone(),
                rows,
                position: typed(&position),
                table_rows: estimate,
            })
        };
        let chunk = read.await;
        let _ = conn.close().await;
        chunk
    }

    fn position(&self, text: &str) -> ConnectorResult<Position> {
        Ok(typed(&gtid(text)?))
    }

    async fn end_position(&self) -> ConnectorResult<Position> {
        Ok(typed(&self.binlog_position().await?))
    }

    async fn wait_past(&self, position: &Position, at_most: std::time::Duration) -> ConnectorResult<bool> {
        let position = gtid(position.as_str())?;
        let deadline = std::time::Instant::now() + at_most;
        loop {
            if self.binlog_position().await?.after(&position) {
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
        _name: &str,
        from: &[(String, Position)],
        until: &Position,
    ) -> ConnectorResult<Box<dyn ChangeReader>> {
        let until = gtid(until.as_str())?;
        let after =
            from.iter().map(|(e, p)| Ok((e.clone(), gtid(p.as_str())?))).collect::<ConnectorResult<HashMap<_, _>>>()?;
        let Some(start) = after.values().cloned().reduce(|a, b| a.min(&b)) else {
            return Ok(Box::new(Ended));
        };
        // Nothing past the start: nothing to read.
        if !until.after(&start) {
            return Ok(Box::new(Ended));
        }
        let mut tables = HashMap::new();
        for entity in after.keys() {
            let (fields, columns) = self.columns(entity).await?;
            tables.insert(entity.clone(), Table { fields, columns, types: None, sent: false });
        }
        let mut conn = self.direct().await?;
        let checksum = self.dump(&mut conn, &start).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<crate::common::ChangeBatch>(4);
        let me = self.clone();
        let mut decoder = Decoder {
            database: self.database.clone(),
            checksum,
            file: String::new(),
            offset: 0,
            after,
            tables,
            maps: HashMap::new(),
            running: start,
            until,
            tx: None,
            passed: Vec::new(),
            halted: Vec::new(),
            out: Vec::new(),
            done: false,
        };
        let task = tokio::spawn(async move {
            loop {
                let packet = match tokio::time::timeout(SILENCE, conn.recv_raw_packet()).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(me.dump_error(&e))).await;
                        return;
                    }
                    Err(_) => {
                        let message = format!("{}: the binlog dump sent nothing for {} s", me.host, SILENCE.as_secs());
                        let _ = tx.send(Err(ConnectorError::Timeout(message))).await;
                        return;
                    }
                };
                let event = match packet.first() {
                    Some(0) => &packet[1..],
                    // End of the log: a dump that does not wait for more.
                    Some(0xfe) if packet.len() < 9 => {
                        let message = "the binlog dump ended before the position it was read up to";
                        let _ = tx.send(Err(ConnectorError::Other(message.into()))).await;
                        return;
                    }
                    _ => {
                        let message = "the binlog dump sent a packet of a kind it does not send";
                        let _ = tx.send(Err(ConnectorError::Other(message.into()))).await;
                        return;
                    }
                };
                let mut fed = decoder.feed(event);
                if let Ok(Fed::Refresh(entity)) = &fed {
                    match me.columns(entity).await {
                        Ok((fields, columns)) => {
                            decoder.refreshed(entity, fields, columns);
                            fed = decoder.feed(event);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    }
                }
                match fed {
                    Ok(Fed::Refresh(entity)) => {
                        let message = format!(
                            "the columns of {entity} in the binlog match none it has now (a column dropped, retyped \
                             or renamed after the position it holds): it stops there; copy it again with DELETE \
                             …/state/{entity}"
                        );
                        decoder.halt(&entity, message);
                    }
                    Ok(Fed::Event) => {}
                    Err(e) => {
                        let message = format!("reading the binlog at {}:{}: {e}", decoder.file, decoder.offset);
                        let _ = tx.send(Err(ConnectorError::Other(message))).await;
                        return;
                    }
                }
                let full = decoder.out.len() >= CHUNK;
                if (full || decoder.done)
                    && !decoder.out.is_empty()
                    && tx.send(Ok(Some(std::mem::take(&mut decoder.out)))).await.is_err()
                {
                    return;
                }
                if decoder.done {
                    break;
                }
            }
            let _ = conn.close_hard().await;
            let _ = tx.send(Ok(None)).await;
        });
        Ok(Box::new(crate::common::ChannelChanges::new(rx, task.abort_handle())))
    }

    /// Nothing to do: the server keeps its binlog by its own expiry.
    async fn confirm(&self, name: &str, _position: &Position) -> ConnectorResult<()> {
        check_stream_name(name)
    }

    /// The GTID position the oldest binlog file begins at: what any stream
    /// can still read from.
    async fn retained_from(&self, name: &str) -> ConnectorResult<Option<Position>> {
        check_stream_name(name)?;
        let logs = sqlx::query("SHOW BINARY LOGS").fetch_all(&self.pool).await.map_err(|e| self.e(&e))?;
        let Some(first) = logs.first() else { return Ok(None) };
        let file: String = first.try_get(0).map_err(|e| self.e(&e))?;
        let pos: Option<String> = sqlx::query_scalar("SELECT BINLOG_GTID_POS(?, 4)")
            .bind(&file)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        Ok(Some(typed(&gtid(&pos.unwrap_or_default())?)))
    }

    /// None: the binlog is kept for every replica alike, not for this stream.
    async fn retained_bytes(&self, _name: &str) -> ConnectorResult<Option<u64>> {
        Ok(None)
    }

    /// Nothing to remove: a stream makes nothing on the source.
    async fn drop_stream(&self, name: &str) -> ConnectorResult<()> {
        check_stream_name(name)
    }
}

/// A read with nothing to read.
struct Ended;

#[async_trait::async_trait]
impl ChangeReader for Ended {
    async fn next(&mut self, _max: usize) -> ConnectorResult<Vec<ChangeEvent>> {
        Ok(Vec::new())
    }
}

/// One table the read follows.
struct Table {
    fields: Vec<Field>,
    columns: Vec<Column>,
    /// The table map's column types the fields were matched with.
    types: Option<Vec<u8>>,
    /// Its schema was sent.
    sent: bool,
}

/// A table map of a followed table, and where its columns go.
struct Mapped {
    entity: String,
    map: TableMap,
    /// The decoder's column of each of the map's columns.
    columns: Vec<Column>,
    /// The field each of the map's columns is.
    index: Vec<usize>,
}

/// The field each of a table map's named columns is, where each is one of
/// `fields` of the same type; `None` where one is not (dropped, renamed
/// or retyped since).
fn place_by_name(fields: &[Field], names: &[String], types: &[u8]) -> Option<Vec<usize>> {
    let mut index = Vec::with_capacity(names.len());
    for (name, t) in names.iter().zip(types) {
        let j = fields.iter().position(|f| f.name.eq_ignore_ascii_case(name))?;
        if !codes(&fields[j]).contains(t) || index.contains(&j) {
            return None;
        }
        index.push(j);
    }
    Some(index)
}

/// The transaction being read.
struct Tx {
    gtid: Gtid,
    position: Position,
    standalone: bool,
    /// Past the position the read goes up to: left for the next read.
    beyond: bool,
    /// It changed a table followed.
    changed: bool,
}

enum Fed {
    Event,
    /// The table's columns must be read again before the event is.
    Refresh(String),
}

/// The binlog's events as change events of the tables followed.
struct Decoder {
    database: String,
    checksum: bool,
    /// Where the read is: the binlog file, and the offset past the last event.
    file: String,
    offset: u32,
    after: HashMap<String, GtidPos>,
    tables: HashMap<String, Table>,
    /// Table maps of followed tables, by table id.
    maps: HashMap<u64, Mapped>,
    running: GtidPos,
    until: GtidPos,
    tx: Option<Tx>,
    /// Domains a transaction past `until` arrived in: read up to there.
    passed: Vec<u32>,
    /// Tables whose changes stopped (see [`ChangeEvent::Halt`]).
    halted: Vec<String>,
    out: Vec<ChangeEvent>,
    done: bool,
}

/// The binlog type codes a column of this catalog type is written as.
fn codes(f: &Field) -> &'static [u8] {
    let native = native_for(f, super::ENGINE).unwrap_or("").to_ascii_lowercase();
    let base = native.split(['(', ' ']).next().unwrap_or("");
    match base {
        "tinyint" | "bool" | "boolean" => &[1],
        "smallint" => &[2],
        "mediumint" => &[9],
        "int" | "integer" => &[3],
        "bigint" => &[8],
        "float" => &[4],
        "double" | "real" => &[5],
        "decimal" | "numeric" => &[246, 0],
        "date" => &[10, 14],
        "datetime" => &[18, 12],
        "timestamp" => &[17, 7],
        "time" => &[19, 11],
        "year" => &[13],
        "bit" => &[16],
        "char" | "binary" | "enum" | "set" => &[254],
        "varchar" | "varbinary" => &[15, 253],
        "json" => &[252, 245],
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
        | "geometrycollection" => &[255],
        _ => &[252],
    }
}

fn matches(fields: &[Field], types: &[u8]) -> bool {
    fields.len() == types.len() && fields.iter().zip(types).all(|(f, t)| codes(f).contains(t))
}

/// A statement's words in capitals, its leading comments and spaces gone
/// (`/* app */ truncate t` is `TRUNCATE T`).
fn statement_start(query: &str) -> String {
    let mut q = query.trim_start();
    while let Some(rest) = q.strip_prefix("/*") {
        q = rest.split_once("*/").map_or("", |(_, after)| after).trim_start();
    }
    q.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_uppercase()
}

fn time_of(secs: u32) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(i64::from(secs)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

impl Decoder {
    fn refreshed(&mut self, entity: &str, fields: Vec<Field>, columns: Vec<Column>) {
        if let Some(t) = self.tables.get_mut(entity) {
            t.fields = fields;
            t.columns = columns;
        }
    }

    fn feed(&mut self, event: &[u8]) -> Result<Fed, String> {
        let (header, body) = match binlog::split(event, self.checksum) {
            // The rotate event a dump begins with may come without a checksum.
            Err(_) if event.get(4) == Some(&binlog::ROTATE) => binlog::split(event, false)?,
            other => other?,
        };
        if header.next > 0 {
            self.offset = header.next;
        }
        match header.kind {
            binlog::FORMAT_DESCRIPTION => self.checksum = binlog::format_has_checksum(body)?,
            binlog::ROTATE => {
                self.file = binlog::rotate_event(body)?.trim_end_matches('\0').to_string();
            }
            binlog::MARIADB_GTID => {
                let (g, standalone) = binlog::gtid_event(&header, body)?;
                if let Some(open) = &self.tx {
                    return Err(format!(
                        "transaction {}-{}-{} began before {}-{}-{} ended",
                        g.domain, g.server, g.seq, open.gtid.domain, open.gtid.server, open.gtid.seq
                    ));
                }
                if !self.running.precedes(&g) {
                    return Err(format!(
                        "transaction {}-{}-{} comes after {} in the binlog: sequence numbers went back (a failover \
                         or SET gtid_seq_no); set gtid_strict_mode = ON on the server, and copy the tables again",
                        g.domain, g.server, g.seq, self.running
                    ));
                }
                let mut position = self.running.clone();
                position.advance(&g);
                let beyond = g.seq > self.until.seq(g.domain);
                let position = typed(&position);
                if beyond {
                    if !self.passed.contains(&g.domain) {
                        self.passed.push(g.domain);
                    }
                    self.done = self.reached();
                } else {
                    self.out.push(ChangeEvent::Begin {
                        position: position.clone(),
                        committed_at: time_of(header.timestamp),
                    });
                }
                self.tx = Some(Tx { gtid: g, position, standalone, beyond, changed: false });
            }
            binlog::XID => self.commit(header.timestamp),
            binlog::XA_PREPARE => {
                if self.tx.as_ref().is_some_and(|t| t.changed) {
                    return Err("an XA transaction changed a table followed: XA transactions (PREPARE, then COMMIT \
                                or ROLLBACK apart) are not read yet"
                        .into());
                }
                self.commit(header.timestamp);
            }
            binlog::QUERY => {
                let (db, query) = binlog::query_event(body)?;
                let q = statement_start(&query);
                let control = |w: &str| q == w || q.starts_with(&format!("{w} ")) || q.starts_with(&format!("{w};"));
                if control("COMMIT") || control("ROLLBACK") || control("XA COMMIT") || control("XA ROLLBACK") {
                    // (The rows of a ROLLBACK's transaction are those of
                    // tables that keep no transactions: they happened.)
                    self.commit(header.timestamp);
                } else if control("BEGIN")
                    || control("SAVEPOINT")
                    || control("RELEASE")
                    || control("ROLLBACK TO")
                    || control("XA START")
                    || control("XA END")
                {
                } else {
                    if let Some(t) = self.dropped_table(&db, &q) {
                        let reason = format!(
                            "table {t} was truncated, dropped or replaced (`{}`): it stops at its position; copy it \
                             again with DELETE …/state/{t}",
                            query.chars().take(120).collect::<String>()
                        );
                        self.halt(&t, reason);
                    }
                    let standalone = self.tx.as_ref().is_some_and(|t| t.standalone);
                    if !standalone
                        && db == self.database
                        && self.tables.keys().any(|t| self.due(t))
                        && q.split_whitespace()
                            .next()
                            .is_some_and(|w| ["INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD"].contains(&w))
                    {
                        return Err(format!(
                            "a change logged as a statement (`{}`): a session wrote with binlog_format STATEMENT or \
                             MIXED; set it to ROW, and copy the tables again",
                            query.chars().take(120).collect::<String>()
                        ));
                    }
                    if standalone {
                        self.commit(header.timestamp);
                    }
                }
            }
            binlog::TABLE_MAP => {
                let (database, table) = binlog::table_map_name(body)?;
                if database != self.database || !self.tables.contains_key(&table) {
                    self.maps.remove(&binlog::rows_table(body)?);
                    return Ok(Fed::Event);
                }
                let map = binlog::table_map(body)?;
                let name = map.table.clone();
                let table = self.tables.get_mut(&name).ok_or("a table that went away")?;
                let n = map.types.len();
                // By name where the server logs names; else by position
                // (the columns as the catalog has them, or the first of
                // them: a table map of before columns were added at the
                // end).
                let index: Vec<usize> = match &map.names {
                    Some(names) => match place_by_name(&table.fields, names, &map.types) {
                        Some(index) => index,
                        None => return Ok(Fed::Refresh(name)),
                    },
                    None if n <= table.fields.len() && matches(&table.fields[..n], &map.types) => (0..n).collect(),
                    None => return Ok(Fed::Refresh(name)),
                };
                // Every column, as the catalog has them now, in a map other
                // than the last such: the flow hears of the columns.
                let whole = index.len() == table.fields.len();
                let changed = whole && table.types.as_deref() != Some(&map.types[..]);
                if whole {
                    if changed && table.types.is_some() {
                        table.sent = false;
                    }
                    table.types = Some(map.types.clone());
                }
                if !table.sent {
                    table.sent = true;
                    self.out
                        .push(ChangeEvent::Schema(EntitySchema { name: name.clone(), fields: table.fields.clone() }));
                }
                let columns = index.iter().map(|j| table.columns[*j].clone()).collect();
                self.maps.insert(map.id, Mapped { entity: name, map, columns, index });
            }
            k if binlog::rows_kind(k).is_some() => self.rows(k, body)?,
            binlog::INCIDENT => {
                return Err("the binlog records an incident (events the server may have lost): copy the tables again \
                            with DELETE …/state/{entity}"
                    .into());
            }
            binlog::MARIADB_START_ENCRYPTION => return Err("the binlog is encrypted, which is not read".into()),
            k if (binlog::MARIADB_WRITE_ROWS_COMPRESSED..=binlog::MARIADB_DELETE_ROWS_COMPRESSED_V1).contains(&k)
                || k == 0xa5 =>
            {
                return Err("the binlog's events are compressed (log_bin_compress), which is not read yet".into());
            }
            _ => {}
        }
        Ok(Fed::Event)
    }

    /// Stops reading `entity`'s changes, and says so to the flow.
    fn halt(&mut self, entity: &str, reason: String) {
        if !self.halted.iter().any(|h| h == entity) {
            self.halted.push(entity.to_string());
            self.out.push(ChangeEvent::Halt { entity: entity.to_string(), reason });
        }
    }

    /// Whether the transaction at hand is one `entity` does not hold yet.
    fn due(&self, entity: &str) -> bool {
        if self.halted.iter().any(|h| h == entity) {
            return false;
        }
        match (&self.tx, self.after.get(entity)) {
            (Some(tx), Some(held)) => !tx.beyond && held.precedes(&tx.gtid),
            _ => false,
        }
    }

    fn commit(&mut self, timestamp: u32) {
        let Some(tx) = self.tx.take() else { return };
        if tx.beyond {
            return;
        }
        self.running.advance(&tx.gtid);
        self.out.push(ChangeEvent::Commit { position: tx.position, committed_at: time_of(timestamp) });
        self.done = self.reached();
    }

    /// Whether the read reached `until` in every domain (a transaction past
    /// it arrived in the domain, or the last one before it committed).
    fn reached(&self) -> bool {
        self.until.domains().all(|(d, n)| self.running.seq(d) >= n || self.passed.contains(&d))
    }

    /// The followed table a DDL statement truncates, drops, renames or
    /// replaces, when the transaction at hand is one it does not hold yet.
    fn dropped_table(&self, db: &str, q: &str) -> Option<String> {
        let rest = ["TRUNCATE TABLE ", "TRUNCATE ", "DROP TABLE ", "RENAME TABLE ", "CREATE OR REPLACE TABLE "]
            .iter()
            .find_map(|k| q.strip_prefix(k))?;
        let rest = rest.strip_prefix("IF EXISTS ").unwrap_or(rest);
        // The names it lists, each `t` or `db.t`, quoted or not.
        rest.split([',', ' ', ';', '(']).filter(|w| !w.is_empty()).find_map(|name| {
            let parts: Vec<String> = name.split('.').map(|p| p.trim_matches('`').to_string()).collect();
            let (schema, table) = match parts.as_slice() {
                [t] => (db.to_string(), t.clone()),
                [s, t] => (s.clone(), t.clone()),
                _ => return None,
            };
            if !schema.eq_ignore_ascii_case(&self.database) {
                return None;
            }
            self.tables.keys().find(|t| t.eq_ignore_ascii_case(&table) && self.due(t)).cloned()
        })
    }

    fn rows(&mut self, kind: u8, body: &[u8]) -> Result<(), String> {
        let id = binlog::rows_table(body)?;
        let Some(m) = self.maps.get(&id) else { return Ok(()) };
        if !self.due(&m.entity) {
            return Ok(());
        }
        let fields = &self.tables.get(&m.entity).ok_or("a table that went away")?.fields;
        let width = fields.len();
        // The key's columns, as the map orders them.
        let key: Vec<usize> = (0..m.index.len()).filter(|i| fields[m.index[*i]].primary_key).collect();
        let change = |op: ChangeOp, image: binlog::Image| {
            // Each value to its field; a field the image leaves out (added
            // since, or left out by the row image): an update keeps what
            // the destination holds.
            let mut row: binlog::Image = vec![None; width];
            for (i, v) in image.into_iter().enumerate() {
                if let Some(j) = m.index.get(i) {
                    row[*j] = v;
                }
            }
            let unchanged = match op {
                ChangeOp::Update => row.iter().enumerate().filter(|(_, v)| v.is_none()).map(|(i, _)| i).collect(),
                _ => Vec::new(),
            };
            let values = row.into_iter().map(|v| v.unwrap_or(Value::Null)).collect();
            ChangeEvent::Change(Change { entity: m.entity.clone(), op, values, unchanged })
        };
        let mut out = Vec::new();
        for (before, after) in binlog::rows_event(kind, body, &m.map, &m.columns, &key)? {
            match (before, after) {
                (None, Some(row)) => out.push(change(ChangeOp::Insert, row)),
                (Some(row), None) => out.push(change(ChangeOp::Delete, row)),
                (Some(old), Some(new)) => {
                    // A changed key: the row under the old key goes first.
                    if key.iter().any(|i| old.get(*i) != new.get(*i)) {
                        out.push(change(ChangeOp::Delete, old));
                    }
                    out.push(change(ChangeOp::Update, new));
                }
                (None, None) => {}
            }
        }
        if !out.is_empty()
            && let Some(tx) = self.tx.as_mut()
        {
            tx.changed = true;
        }
        self.out.extend(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::connect::connector::FieldType;

    fn field(name: &str, native: &str, t: FieldType, key: bool) -> Field {
        Field {
            name: name.into(),
            field_type: t,
            nullable: !key,
            primary_key: key,
            native_type: Some(crate::common::native_tag(super::super::ENGINE, native)),
        }
    }

    #[test]
    fn table_maps_match_the_catalogs_columns() {
        let fields =
            [field("id", "int(11)", FieldType::Integer, true), field("note", "text", FieldType::String, false)];
        assert!(matches(&fields, &[3, 252]));
        assert!(!matches(&fields, &[8, 252]), "a retyped column");
        assert!(!matches(&fields, &[3, 252, 15]), "a column more");
        let ts = [field("at", "datetime(6)", FieldType::Timestamp, false)];
        assert!(matches(&ts, &[18]));
    }

    #[test]
    fn statements_read_past_their_comments() {
        assert_eq!(statement_start("  /* app */ truncate\n  `t`"), "TRUNCATE `T`");
        assert_eq!(statement_start("/*a*//*b*/COMMIT"), "COMMIT");
    }
}
