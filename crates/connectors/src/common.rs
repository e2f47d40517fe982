//! Plumbing shared by the connectors: the channel-backed reader, identifier
//! quoting, native-type tags, timeouts, and path confinement for file-based
//! connectors.

use sluice_domain::connect::connector::{
    BulkStream, ConnectorError, ConnectorResult, EntitySchema, Field, ReadRequest, RecordBatch, RecordReader, Value,
};
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The bulk format of a CSV file as the file connector writes it (header
/// apart): a source that can produce it directly (PostgreSQL's `COPY … TO
/// STDOUT (FORMAT csv)` of expressions that format each value as the file
/// writer would) skips decoding records.
pub const SLUICE_CSV: &str = "sluice-csv";

/// Counts the records of a CSV stream fed in pieces: a line end outside
/// quotes ends one (a doubled quote inside a field toggles twice).
#[derive(Debug, Default)]
pub struct CsvRecords {
    pub records: u64,
    quoted: bool,
    line_open: bool,
}

impl CsvRecords {
    pub fn feed(&mut self, bytes: &[u8]) {
        self.feed_ends(bytes);
    }

    /// Feeds `bytes`; answers where in them the last record ended (just
    /// past its newline), if one did.
    pub fn feed_ends(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut end = None;
        // Only quotes and newlines matter: skipped to, not stepped through.
        for i in memchr::memchr2_iter(b'"', b'\n', bytes) {
            if bytes[i] == b'"' {
                self.quoted = !self.quoted;
            } else if !self.quoted {
                self.records += 1;
                end = Some(i + 1);
            }
        }
        // A record is open when any byte came after the last one's end.
        self.line_open = match end {
            Some(e) => e < bytes.len(),
            None => self.line_open || !bytes.is_empty(),
        };
        end
    }

    /// Whether the stream so far ends between records.
    pub fn complete(&self) -> bool {
        !self.quoted && !self.line_open
    }
}

/// How long connecting and metadata queries may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Batches read ahead of the consumer: one in flight, one waiting.
pub const READ_AHEAD: usize = 2;
pub const DEFAULT_BATCH: usize = 5_000;

/// A reader fed by a producer task through a bounded channel, so the source
/// reads the next batch while the consumer writes the previous one. Dropping
/// the reader stops the producer.
pub struct ChannelReader {
    fields: Arc<Vec<Field>>,
    rx: mpsc::Receiver<ConnectorResult<RecordBatch>>,
    task: JoinHandle<()>,
}

impl ChannelReader {
    /// Spawns `produce`, which sends batches until it returns.
    pub fn spawn<F, Fut>(fields: Arc<Vec<Field>>, produce: F) -> Self
    where
        F: FnOnce(mpsc::Sender<ConnectorResult<RecordBatch>>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let task = tokio::spawn(produce(tx));
        Self { fields, rx, task }
    }
}

impl Drop for ChannelReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait::async_trait]
impl RecordReader for ChannelReader {
    fn fields(&self) -> Arc<Vec<Field>> {
        self.fields.clone()
    }

    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>> {
        match self.rx.recv().await {
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }
}

/// `"name"` with inner quotes doubled (PostgreSQL, SQLite).
pub fn quote_dq(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `` `name` `` with inner backticks doubled (MySQL).
pub fn quote_bt(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Native types are tagged with their engine (`postgres:numeric(12,2)`), so
/// a destination reuses only its own engine's types.
pub fn native_tag(engine: &str, native: &str) -> String {
    format!("{engine}:{native}")
}

pub fn native_for<'a>(field: &'a Field, engine: &str) -> Option<&'a str> {
    field.native_type.as_deref().and_then(|n| n.strip_prefix(engine)).and_then(|n| n.strip_prefix(':'))
}

/// A column type's family and size, for telling a widening apart.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Width {
    /// Bytes of an integer.
    Int(u8),
    /// Bytes of a float.
    Float(u8),
    /// Characters of a string (`u32::MAX`: unbounded).
    Text(u32),
    /// Digits before and after the point (`u32::MAX`: unbounded).
    Decimal(u32, u32),
}

fn width(native: &str) -> Option<Width> {
    let n = native.trim().to_ascii_lowercase();
    let n = n.strip_suffix(" unsigned").unwrap_or(&n);
    // MySQL's display width (`int(11)`) is no size.
    let base = n.split('(').next().unwrap_or(n).trim();
    if let Some(bytes) = [("tinyint", 1), ("smallint", 2), ("mediumint", 3), ("int", 4), ("integer", 4), ("bigint", 8)]
        .iter()
        .find(|(name, _)| *name == base)
        .map(|(_, b)| *b)
    {
        return Some(Width::Int(bytes));
    }
    let args = |prefix: &str| -> Option<Vec<u32>> {
        let inner = n.strip_prefix(prefix)?.strip_prefix('(')?.strip_suffix(')')?;
        inner.split(',').map(|a| a.trim().parse().ok()).collect()
    };
    Some(match n {
        "tinyint" => Width::Int(1),
        "smallint" | "int2" => Width::Int(2),
        "mediumint" => Width::Int(3),
        "integer" | "int" | "int4" => Width::Int(4),
        "bigint" | "int8" => Width::Int(8),
        "real" | "float4" | "float" => Width::Float(4),
        "double precision" | "float8" | "double" => Width::Float(8),
        "text" | "mediumtext" | "longtext" | "character varying" | "varchar" => Width::Text(u32::MAX),
        "numeric" | "decimal" => Width::Decimal(u32::MAX, u32::MAX),
        _ => {
            if let Some(a) = args("character varying").or_else(|| args("varchar")) {
                Width::Text(*a.first()?)
            } else if let Some(a) = args("numeric").or_else(|| args("decimal")) {
                let (p, s) = (*a.first()?, a.get(1).copied().unwrap_or(0));
                Width::Decimal(p.checked_sub(s)?, s)
            } else {
                return None;
            }
        }
    })
}

/// Whether a column of type `have` becomes `want` by widening alone (a
/// larger integer, float or string, a decimal with more digits on both
/// sides of the point): every value it holds fits, so the column can be
/// altered in place. Another type, or a narrower one, is not a widening.
pub fn widens(have: &str, want: &str) -> bool {
    let (Some(h), Some(w)) = (width(have), width(want)) else { return false };
    match (h, w) {
        (Width::Int(a), Width::Int(b)) | (Width::Float(a), Width::Float(b)) => b > a,
        (Width::Text(a), Width::Text(b)) => b > a,
        (Width::Decimal(ai, af), Width::Decimal(bi, bf)) => bi >= ai && bf >= af && (bi, bf) != (ai, af),
        _ => false,
    }
}

/// The precision and scale a decimal field's source declared, whatever
/// its engine (`numeric(12,2)`, `decimal(12,2)`), so an exact column keeps
/// them across engines.
pub fn decimal_args(f: &Field) -> Option<(u32, u32)> {
    let native = f.native_type.as_deref()?.split_once(':')?.1.to_ascii_lowercase();
    let args = native.strip_prefix("numeric(").or_else(|| native.strip_prefix("decimal("))?;
    let (p, s) = args.split_once(')')?.0.split_once(',').unwrap_or((args.split_once(')')?.0, "0"));
    let (p, s) = (p.trim().parse().ok()?, s.trim().parse().ok()?);
    (p > 0 && s <= p).then_some((p, s))
}

/// Whether a timestamp field's source type holds no time zone
/// (PostgreSQL `timestamp without time zone`, MySQL `datetime`), so a
/// destination that has such a type keeps it.
pub fn zoneless(f: &Field) -> bool {
    let Some((engine, native)) = f.native_type.as_deref().and_then(|n| n.split_once(':')) else { return false };
    let n = native.to_ascii_lowercase();
    match engine {
        "postgres" => n.starts_with("timestamp") && !n.contains("with time zone"),
        "mysql" => n.starts_with("datetime"),
        _ => false,
    }
}

/// The column comment marking a JSON column that holds arrays, in engines
/// whose JSON type does not say.
pub const ARRAY_COMMENT: &str = "sluice:array";

/// Runs `fut` with a deadline, reporting `what` on timeout.
pub async fn with_timeout<T>(
    what: &str,
    d: Duration,
    fut: impl Future<Output = ConnectorResult<T>>,
) -> ConnectorResult<T> {
    match tokio::time::timeout(d, fut).await {
        Ok(r) => r,
        Err(_) => Err(ConnectorError::Timeout(format!("{what} took longer than {}s", d.as_secs()))),
    }
}

/// A path of a file-based connection, resolved inside its organization's
/// own directory.
#[derive(Debug, Clone)]
pub struct Confined {
    /// The organization's directory, canonical (symbolic links resolved).
    pub base: PathBuf,
    /// The path inside it.
    pub path: PathBuf,
    /// The path as the user wrote it: what messages show, never `path`.
    pub label: String,
}

impl Confined {
    /// Checks that `p` (a file inside this path) still resolves inside the
    /// organization's directory once symbolic links are followed; a file
    /// that does not exist yet passes.
    pub fn check_inside(&self, p: &Path) -> ConnectorResult<()> {
        match std::fs::canonicalize(p) {
            Ok(real) if real.starts_with(&self.base) => Ok(()),
            Ok(_) => Err(outside(&self.label)),
            // A link to nowhere would be followed when the file is created.
            Err(_) if std::fs::symlink_metadata(p).is_ok() => Err(outside(&self.label)),
            Err(_) => Ok(()),
        }
    }
}

fn outside(label: &str) -> ConnectorError {
    ConnectorError::InvalidConfig(format!("path '{label}' leads outside the organization's directory"))
}

/// The rule for a path as written: relative, without `..`, without NUL,
/// not empty. `Err` holds the reason.
pub fn check_relative(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.trim().is_empty() {
        Err("must not be empty".into())
    } else if path.contains('\0') {
        Err("must not contain a NUL character".into())
    } else if p.is_absolute() || path.starts_with('~') || p.components().any(|c| matches!(c, Component::Prefix(_))) {
        Err("must be relative to the organization's directory, not absolute".into())
    } else if p.components().any(|c| matches!(c, Component::ParentDir)) {
        Err("must not contain '..'".into())
    } else {
        Ok(())
    }
}

/// Resolves `path` inside `dir` (the organization's directory, created if
/// missing): the path must be relative without `..`, and what of it exists
/// must resolve inside `dir` once symbolic links are followed, so that no
/// connection reads or writes another organization's files or the
/// server's own. Messages name `path` as written, never a server path.
pub fn confine(dir: &Path, path: &str) -> ConnectorResult<Confined> {
    check_relative(path).map_err(|m| ConnectorError::InvalidConfig(format!("path {m}")))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| ConnectorError::Other(format!("cannot create the organization's directory: {}", e.kind())))?;
    let base = std::fs::canonicalize(dir)
        .map_err(|e| ConnectorError::Other(format!("cannot open the organization's directory: {}", e.kind())))?;
    let placed = Confined { path: base.join(path), base, label: path.to_string() };
    // The longest part of the path that exists (a dangling link counts:
    // where it points is unknown) must resolve inside; the rest does not
    // exist yet, so holds no link.
    if let Some(existing) = placed.path.ancestors().find(|p| std::fs::symlink_metadata(p).is_ok()) {
        placed.check_inside(existing)?;
    }
    Ok(placed)
}

/// The reader of a `SELECT`: `sql` (with `bind` applied) runs on `pool` in
/// a task of its own, and its rows arrive in batches of `batch_size`, each
/// row decoded by `decode`; database failures are told by `err`.
pub fn select_reader<DB>(
    fields: Arc<Vec<Field>>,
    pool: sqlx::Pool<DB>,
    sql: String,
    bind: impl for<'q> FnOnce(sqlx::query::Query<'q, DB, DB::Arguments>) -> sqlx::query::Query<'q, DB, DB::Arguments>
    + Send
    + 'static,
    batch_size: usize,
    decode: impl Fn(&DB::Row) -> ConnectorResult<Vec<sluice_domain::connect::connector::Value>> + Send + 'static,
    err: impl Fn(&sqlx::Error) -> ConnectorError + Send + 'static,
) -> Box<dyn RecordReader>
where
    DB: sqlx::Database,
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments: sqlx::IntoArguments<DB>,
{
    let batch_fields = fields.clone();
    Box::new(ChannelReader::spawn(fields, move |tx| async move {
        let q = bind(sqlx::query(sqlx::AssertSqlSafe(sql)));
        pump_rows(q.fetch(&pool), batch_fields, batch_size, tx, decode, err).await;
    }))
}

/// Tables smaller than this are read in one piece.
pub const SPLIT_BYTES: i64 = 32 << 20;
/// How long a split read waits for each further connection (and, on
/// MySQL, for the table's read lock) before it reads in fewer ranges, or in
/// one.
pub const RANGE_ACQUIRE: Duration = Duration::from_secs(1);

/// The most connections a PostgreSQL or MySQL connector's pool opens.
pub const POOL_CONNECTIONS: u32 = 16;
/// How many connections of a pool split reads may take beyond one each,
/// all together: the rest stays for the readers and writers of the
/// entities that sync at once (two each) and for short queries.
pub const RANGE_EXTRAS: usize = 4;

/// How many entities may write into one PostgreSQL or MySQL connection at
/// once: each holds about two connections of its pool (a writer, and a
/// reader when source and destination are the same connection), beside
/// the [`RANGE_EXTRAS`] of split reads.
pub const POOL_WRITERS: usize = (POOL_CONNECTIONS as usize - RANGE_EXTRAS) / 2;

/// A connector's budget of [`RANGE_EXTRAS`].
pub fn range_extras() -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(RANGE_EXTRAS))
}

/// Up to `ranges - 1` permits of `budget`, as many as are free now: a
/// split read never waits for them.
pub fn range_permits(budget: &Arc<tokio::sync::Semaphore>, ranges: usize) -> Vec<tokio::sync::OwnedSemaphorePermit> {
    std::iter::from_fn(|| budget.clone().try_acquire_owned().ok()).take(ranges.saturating_sub(1)).collect()
}

/// Up to `n` connections of `pool` for a split read, each waited for at
/// most [`RANGE_ACQUIRE`] (a split read never waits on a pool it holds
/// connections of), and closed when dropped rather than pooled again.
pub async fn range_connections<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    n: usize,
) -> Vec<sqlx::pool::PoolConnection<DB>> {
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        let Ok(Ok(mut conn)) = tokio::time::timeout(RANGE_ACQUIRE, pool.acquire()).await else { break };
        conn.close_on_drop();
        conns.push(conn);
    }
    conns
}

/// Whether a read may be split in key ranges: asked for, and neither a
/// cursor read (ordered) nor a limited one (a preview).
pub fn may_split(req: &ReadRequest) -> bool {
    req.ranges > 1 && req.cursor.is_none() && req.limit.is_none()
}

/// The rows per batch a read asks for, or the default.
pub fn batch_size(req: &ReadRequest) -> usize {
    if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size }
}

/// The single integer key a read can be split by.
pub fn split_key(schema: &EntitySchema) -> Option<&Field> {
    let mut keys = schema.fields.iter().filter(|f| f.primary_key);
    let key = keys.next()?;
    (keys.next().is_none() && key.field_type == sluice_domain::connect::connector::FieldType::Integer).then_some(key)
}

/// `[lo, hi]` cut into `n` ranges of about equal width, as conditions on
/// `key`: the first open below, the last open above, so that together they
/// hold every value.
pub fn key_ranges(key: &str, lo: i64, hi: i64, n: usize) -> Vec<String> {
    let n = n.max(1) as i128;
    let width = ((hi as i128 - lo as i128) / n + 1).max(1);
    let cut = |i: i128| (lo as i128 + i * width).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    (0..n)
        .map(|i| match (i, i == n - 1) {
            (0, true) => "TRUE".to_string(),
            (0, false) => format!("{key} < {}", cut(1)),
            (_, true) => format!("{key} >= {}", cut(i)),
            (_, false) => format!("{key} >= {} AND {key} < {}", cut(i), cut(i + 1)),
        })
        .collect()
}

/// Runs each of `parts` (the ranges of a split read) in a task of its own,
/// so decoding uses every core, each sending what it reads through `tx`,
/// until all end. A part that panics fails the read: never fewer records in
/// silence. Dropping this future stops the parts.
pub async fn join_parts<T, F, Fut>(parts: Vec<F>, tx: mpsc::Sender<ConnectorResult<T>>)
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<ConnectorResult<T>>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for part in parts {
        set.spawn(part(tx.clone()));
    }
    while let Some(done) = set.join_next().await {
        if let Err(e) = done {
            let _ = tx.send(Err(ConnectorError::Other(format!("a range of the read failed: {e}")))).await;
            return;
        }
    }
}

/// The reader of a read split in ranges (see [`join_parts`]): the batches
/// of all arrive as they come.
pub fn ranges_reader<F, Fut>(fields: Arc<Vec<Field>>, parts: Vec<F>) -> Box<dyn RecordReader>
where
    F: FnOnce(mpsc::Sender<ConnectorResult<RecordBatch>>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Box::new(ChannelReader::spawn(fields, move |tx| join_parts(parts, tx)))
}

/// The bulk stream of a read split in ranges (see [`join_parts`]), each
/// part sending chunks that end on a record's end.
pub fn ranges_bulk<F, Fut>(parts: Vec<F>) -> Box<dyn BulkStream>
where
    F: FnOnce(mpsc::Sender<ConnectorResult<Vec<u8>>>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(READ_AHEAD * 2);
    Box::new(ChannelBulk { rx, task: tokio::spawn(join_parts(parts, tx)) })
}

/// Chunks from a producer task; dropping it stops the task.
struct ChannelBulk {
    rx: mpsc::Receiver<ConnectorResult<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl Drop for ChannelBulk {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait::async_trait]
impl BulkStream for ChannelBulk {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        self.rx.recv().await.transpose()
    }
}

/// Drains a row stream into batches of `batch_size` sent through `tx`: the
/// producer side of every SQL connector's reader. Stops at the first error
/// (sent to the reader) or when the reader goes away.
pub async fn pump_rows<R>(
    mut rows: futures_util::stream::BoxStream<'_, Result<R, sqlx::Error>>,
    fields: Arc<Vec<Field>>,
    batch_size: usize,
    tx: mpsc::Sender<ConnectorResult<RecordBatch>>,
    decode: impl Fn(&R) -> ConnectorResult<Vec<sluice_domain::connect::connector::Value>>,
    err: impl Fn(&sqlx::Error) -> ConnectorError,
) {
    use futures_util::TryStreamExt;
    let mut batch = Vec::with_capacity(batch_size);
    loop {
        match rows.try_next().await {
            Ok(Some(row)) => match decode(&row) {
                Ok(values) => {
                    batch.push(values);
                    if batch.len() >= batch_size {
                        let b = RecordBatch {
                            fields: fields.clone(),
                            rows: std::mem::replace(&mut batch, Vec::with_capacity(batch_size)),
                        };
                        if !send(&tx, Ok(b)).await {
                            return;
                        }
                    }
                }
                Err(e) => {
                    send(&tx, Err(e)).await;
                    return;
                }
            },
            Ok(None) => break,
            Err(e) => {
                send(&tx, Err(err(&e))).await;
                return;
            }
        }
    }
    if !batch.is_empty() {
        send(&tx, Ok(RecordBatch { fields, rows: batch })).await;
    }
}

/// The query of a read: `SELECT cols FROM table`, with the cursor bound
/// (`>=` a placeholder) and ordering when the request has a cursor, and its
/// limit. Answers the SQL and the cursor value to bind, if any.
///
/// # Errors
/// `InvalidConfig` when the cursor field is not in the entity.
pub fn select_sql(
    schema: &EntitySchema,
    cols: &[String],
    table: &str,
    req: &ReadRequest,
    quote: fn(&str) -> String,
    placeholder: impl Fn(&Field) -> String,
) -> ConnectorResult<(String, Option<Value>)> {
    let mut sql = format!("SELECT {} FROM {table}", cols.join(", "));
    let mut bound = None;
    if let Some(c) = &req.cursor {
        let f = schema.field(&c.field).ok_or_else(|| {
            ConnectorError::InvalidConfig(format!("cursor field '{}' is not in {}", c.field, schema.name))
        })?;
        if let Some(from) = &c.from {
            sql.push_str(&format!(" WHERE {} >= {}", quote(&c.field), placeholder(f)));
            bound = Some(from.clone());
        }
        sql.push_str(&format!(" ORDER BY {}", quote(&c.field)));
    }
    if let Some(l) = req.limit {
        sql.push_str(&format!(" LIMIT {l}"));
    }
    Ok((sql, bound))
}

/// Sends `batch` unless the reader went away; answers whether to go on.
pub async fn send(tx: &mpsc::Sender<ConnectorResult<RecordBatch>>, item: ConnectorResult<RecordBatch>) -> bool {
    tx.send(item).await.is_ok()
}

/// What the patched drivers (`vendor/sqlx-postgres`, `vendor/sqlx-mysql`)
/// say when they refuse to send a password in clear text.
const CLEARTEXT_REFUSED: &str = "asked for the password in clear text over a connection that is not encrypted";

/// The failures of reaching a database server, as codes with fixed
/// messages: what a failed test reports must not echo what a foreign
/// server sent (a port scanner's oracle). `None` for errors of the
/// database itself.
pub fn transport_error(e: &sqlx::Error, host: &str, engine: &str) -> Option<ConnectorError> {
    use std::io::ErrorKind;
    tracing::debug!(error = ?e, host, "reaching a database server failed");
    Some(match e {
        sqlx::Error::Io(io) => match io.kind() {
            ErrorKind::ConnectionRefused => ConnectorError::Refused(host.to_string()),
            ErrorKind::TimedOut => ConnectorError::Timeout(format!("connecting to {host}")),
            // rustls reports a certificate it refuses as invalid data.
            ErrorKind::InvalidData if is_tls_failure(&io.to_string()) => {
                ConnectorError::Tls(format!("{host}: {}", tls_reason(&io.to_string())))
            }
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                ConnectorError::WrongProtocol(format!(
                    "{host} closed the connection: the server ended the session (a restart, a dropped database, \
                     an administrator), or it is not a {engine} server"
                ))
            }
            kind => ConnectorError::Unreachable(format!("{host} ({kind})")),
        },
        sqlx::Error::PoolTimedOut => ConnectorError::Timeout(format!("connecting to {host}")),
        sqlx::Error::Tls(t) => ConnectorError::Tls(format!("{host}: {}", tls_reason(&t.to_string()))),
        sqlx::Error::Protocol(m) if m.contains(CLEARTEXT_REFUSED) => ConnectorError::Tls(format!(
            "{host} asked for the password in clear text over a connection that is not encrypted; \
             it was not sent (require TLS, or set allow_cleartext_password on the connection)"
        )),
        sqlx::Error::Protocol(_) => {
            ConnectorError::WrongProtocol(format!("{host} did not answer as a {engine} server"))
        }
        _ => return None,
    })
}

/// A CA certificate setting as PEM bytes: it must hold a certificate (the
/// text itself, never a path on the server).
pub fn check_pem(pem: &str) -> ConnectorResult<Vec<u8>> {
    if pem.contains("-----BEGIN CERTIFICATE-----") && pem.contains("-----END CERTIFICATE-----") {
        Ok(pem.as_bytes().to_vec())
    } else {
        Err(ConnectorError::InvalidConfig(
            "ssl_ca must hold the PEM text of the CA certificate (-----BEGIN CERTIFICATE-----…)".into(),
        ))
    }
}

fn is_tls_failure(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["certificate", "handshake", "tls", "alert"].iter().any(|w| m.contains(w))
}

/// A TLS failure told in our words: a certificate problem, or the
/// server's lack of TLS, never the peer's bytes.
fn tls_reason(message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("notvalidforname") {
        "the server's certificate does not name this host"
    } else if m.contains("certificate") || m.contains("unknownissuer") {
        "the server's certificate did not verify"
    } else if m.contains("not support") || m.contains("does not support") || m.contains("refused") {
        "the server does not offer TLS"
    } else {
        "the TLS handshake failed"
    }
}

/// A user-facing message of a database error, never holding a credential.
pub fn db_message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => d.message().to_string(),
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".into(),
        sqlx::Error::Tls(t) => format!("TLS: {t}"),
        sqlx::Error::RowNotFound => "no rows".into(),
        sqlx::Error::ColumnDecode { index, source } => format!("cannot decode column {index}: {source}"),
        other => {
            // sqlx's own messages can quote the connection options; keep
            // only the first line and never the URL.
            other.to_string().lines().next().unwrap_or("database error").to_string()
        }
    }
}

/// `DELETE FROM table WHERE (k, …) IN (…)` for `rows` keys, each `(?, …)`,
/// the list opened by `list` (`"VALUES "` for SQLite, nothing for MySQL);
/// names quoted already.
pub fn delete_by_keys_sql(table: &str, keys: &[String], rows: usize, list: &str) -> String {
    let tuple = format!("({})", vec!["?"; keys.len()].join(", "));
    format!("DELETE FROM {table} WHERE ({}) IN ({list}{})", keys.join(", "), vec![tuple.as_str(); rows].join(", "))
}

/// `UPDATE table SET a = ?, … WHERE k = ? AND …` (the set values first);
/// names quoted already.
pub fn update_by_key_sql(table: &str, set: &[String], keys: &[String]) -> String {
    let assign: Vec<String> = set.iter().map(|n| format!("{n} = ?")).collect();
    let at: Vec<String> = keys.iter().map(|n| format!("{n} = ?")).collect();
    format!("UPDATE {table} SET {} WHERE {}", assign.join(", "), at.join(" AND "))
}

/// The fields of an update's rows split into those set and the key
/// (`key`: the table's key fields), by index.
pub fn set_and_key(fields: &[Field], key: &[String]) -> (Vec<usize>, Vec<usize>) {
    (0..fields.len()).partition(|i| !key.contains(&fields[*i].name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widenings_are_told_from_other_changes() {
        for (have, want) in [
            ("integer", "bigint"),
            ("smallint", "integer"),
            ("int", "bigint"),
            ("real", "double precision"),
            ("character varying(20)", "character varying(200)"),
            ("character varying(20)", "text"),
            ("varchar(20)", "varchar(21)"),
            ("numeric(12,2)", "numeric(14,2)"),
            ("numeric(12,2)", "numeric(13,3)"),
            ("numeric(12,2)", "numeric"),
            ("decimal(10,0)", "decimal(12,0)"),
            ("int(11)", "bigint(20)"),
            ("int", "bigint unsigned"),
        ] {
            assert!(widens(have, want), "{have} -> {want}");
        }
        for (have, want) in [
            ("bigint", "integer"),
            ("integer", "integer"),
            ("text", "character varying(20)"),
            ("numeric(12,2)", "numeric(12,3)"),
            ("numeric(12,2)", "numeric(11,2)"),
            ("integer", "text"),
            ("integer", "numeric(12,2)"),
            ("timestamp", "timestamptz"),
            ("varchar(x)", "text"),
        ] {
            assert!(!widens(have, want), "{have} -> {want}");
        }
    }

    #[test]
    fn csv_records_are_counted_across_pieces_and_quoted_line_ends() {
        let text = b"1,\"two\nlines\",\"say \"\"hi\"\"\"\n2,,x\n";
        let mut c = CsvRecords::default();
        for piece in text.chunks(3) {
            c.feed(piece);
        }
        assert_eq!(c.records, 2);
        assert!(c.complete());
        c.feed(b"3,\"open");
        assert!(!c.complete());
    }

    #[test]
    fn record_ends_are_found_at_any_cut() {
        let text: &[u8] = b"1,\"two\nlines\",\"say \"\"hi\"\"\"\n2,,x\n3,\"\"\"\"\n";
        // Where records end: after each unquoted newline.
        let ends: Vec<usize> = vec![27, 32, 39];
        assert_eq!(text.len(), 39);
        for cut in 0..=text.len() {
            let mut c = CsvRecords::default();
            let first = c.feed_ends(&text[..cut]);
            let second = c.feed_ends(&text[cut..]).map(|e| e + cut);
            assert_eq!(first, ends.iter().copied().rfind(|e| *e <= cut), "cut at {cut}");
            assert_eq!(second, ends.iter().copied().rfind(|e| *e > cut), "cut at {cut}");
            assert_eq!(c.records, 3);
            assert!(c.complete(), "cut at {cut}");
            let mut open = CsvRecords::default();
            open.feed_ends(&text[..cut]);
            assert_eq!(open.complete(), cut == 0 || ends.contains(&cut), "cut at {cut}");
        }
    }

    #[test]
    fn identifiers_are_quoted_safely() {
        assert_eq!(quote_dq("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_bt("a`b"), "`a``b`");
    }

    #[test]
    fn paths_stay_inside_the_organization_directory() {
        let top = std::env::temp_dir().join(format!("sluice-confine-{}", uuid::Uuid::new_v4().simple()));
        let org = top.join("org-a");
        let other = top.join("org-b");
        std::fs::create_dir_all(other.join("data")).unwrap();
        std::fs::write(other.join("warehouse.db"), b"theirs").unwrap();
        let placed = confine(&org, "x/y.db").unwrap();
        assert!(placed.path.ends_with("org-a/x/y.db") && placed.label == "x/y.db", "{placed:?}");
        for bad in ["../org-b/warehouse.db", "/etc/passwd", "a/../../b", "", "~/x", "a\0b"] {
            let e = confine(&org, bad).unwrap_err().to_string();
            assert!(!e.contains(top.to_str().unwrap()), "no server path in '{e}'");
        }
        // Symbolic links that lead out are refused, wherever they sit on
        // the path, and so is a dangling one.
        std::os::unix::fs::symlink(&other, org.join("escape")).unwrap();
        std::os::unix::fs::symlink(other.join("warehouse.db"), org.join("theirs.db")).unwrap();
        std::os::unix::fs::symlink(top.join("nowhere"), org.join("dangling")).unwrap();
        for bad in ["escape", "escape/warehouse.db", "escape/new/file.db", "theirs.db", "dangling"] {
            let e = confine(&org, bad).unwrap_err().to_string();
            assert!(e.contains("outside the organization's directory"), "{bad}: {e}");
            assert!(!e.contains(top.to_str().unwrap()), "{e}");
        }
        // A link that stays inside is fine.
        std::fs::create_dir_all(org.join("real")).unwrap();
        std::os::unix::fs::symlink(org.join("real"), org.join("alias")).unwrap();
        let inside = confine(&org, "alias/t.db").unwrap();
        inside.check_inside(&inside.path).unwrap();
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn decimal_precision_and_zones_cross_engines() {
        let tagged = |t, n: &str| {
            let mut f = Field::new("x", t);
            f.native_type = Some(n.to_string());
            f
        };
        use sluice_domain::connect::connector::FieldType::*;
        assert_eq!(decimal_args(&tagged(Decimal, "mysql:decimal(12,2)")), Some((12, 2)));
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric(10,0)")), Some((10, 0)));
        assert_eq!(decimal_args(&tagged(Decimal, "mysql:decimal(12)")), Some((12, 0)));
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric")), None);
        assert_eq!(decimal_args(&tagged(Decimal, "postgres:numeric(2,5)")), None);
        assert!(zoneless(&tagged(Timestamp, "postgres:timestamp without time zone")));
        assert!(zoneless(&tagged(Timestamp, "postgres:timestamp(3) without time zone")));
        assert!(!zoneless(&tagged(Timestamp, "postgres:timestamp with time zone")));
        assert!(zoneless(&tagged(Timestamp, "mysql:datetime(6)")));
        assert!(!zoneless(&tagged(Timestamp, "mysql:timestamp")));
        assert!(!zoneless(&Field::new("x", Timestamp)));
    }

    #[test]
    fn native_types_are_used_only_by_their_engine() {
        let mut f = Field::new("x", sluice_domain::connect::connector::FieldType::Decimal);
        f.native_type = Some(native_tag("postgres", "numeric(12,2)"));
        assert_eq!(native_for(&f, "postgres"), Some("numeric(12,2)"));
        assert_eq!(native_for(&f, "mysql"), None);
        assert_eq!(native_for(&f, "post"), None);
    }
}
