//! Plumbing shared by the connectors: the channel-backed reader, identifier
//! quoting, native-type tags, timeouts, and path confinement for file-based
//! connectors.

use sluice_domain::connector::{
    ConnectorError, ConnectorResult, EntitySchema, Field, ReadRequest, RecordBatch, RecordReader, Value,
};
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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

/// Resolves `path` under `root`: relative paths are joined to it, and the
/// result must stay inside it (no `..` escapes), so connections cannot read
/// the server's own files.
pub fn confine(root: &Path, path: &str) -> ConnectorResult<PathBuf> {
    let p = Path::new(path);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(ConnectorError::InvalidConfig(format!("path '{path}' must not contain '..'")));
    }
    let joined = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
    if !joined.starts_with(root) {
        return Err(ConnectorError::InvalidConfig(format!(
            "path '{path}' is outside the file root {}; set SLUICE_FILE_ROOT to allow it",
            root.display()
        )));
    }
    Ok(joined)
}

/// Drains a row stream into batches of `batch_size` sent through `tx`: the
/// producer side of every SQL connector's reader. Stops at the first error
/// (sent to the reader) or when the reader goes away.
pub async fn pump_rows<R>(
    mut rows: futures_util::stream::BoxStream<'_, Result<R, sqlx::Error>>,
    fields: Arc<Vec<Field>>,
    batch_size: usize,
    tx: mpsc::Sender<ConnectorResult<RecordBatch>>,
    decode: impl Fn(&R) -> ConnectorResult<Vec<sluice_domain::connector::Value>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_safely() {
        assert_eq!(quote_dq("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_bt("a`b"), "`a``b`");
    }

    #[test]
    fn paths_stay_under_the_root() {
        let root = Path::new("/srv/files");
        assert_eq!(confine(root, "x/y.db").unwrap(), Path::new("/srv/files/x/y.db"));
        assert_eq!(confine(root, "/srv/files/z").unwrap(), Path::new("/srv/files/z"));
        assert!(confine(root, "../etc/passwd").is_err());
        assert!(confine(root, "/etc/passwd").is_err());
        assert!(confine(root, "a/../../b").is_err());
    }

    #[test]
    fn native_types_are_used_only_by_their_engine() {
        let mut f = Field::new("x", sluice_domain::connector::FieldType::Decimal);
        f.native_type = Some(native_tag("postgres", "numeric(12,2)"));
        assert_eq!(native_for(&f, "postgres"), Some("numeric(12,2)"));
        assert_eq!(native_for(&f, "mysql"), None);
        assert_eq!(native_for(&f, "post"), None);
    }
}
