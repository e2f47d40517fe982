//! Pool sizes, and split reads: the budget of connections they may take,
//! the key ranges they read, and the readers and bulk streams that run
//! the ranges at once.

use super::records::{ChannelReader, READ_AHEAD};
use sluice_domain::connect::connector::{
    BulkStream, ConnectorError, ConnectorResult, EntitySchema, Field, ReadRequest, RecordBatch, RecordReader,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
