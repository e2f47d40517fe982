//! Moving records: the reader fed by a producer task through a bounded
//! channel, the batches of a `SELECT`, and rows aligned to a writer's
//! columns.

use sluice_domain::connect::connector::{
    ConnectorError, ConnectorResult, Field, ReadRequest, RecordBatch, RecordReader, Value,
};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
    /// The task was awaited (a handle is awaited once).
    joined: bool,
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
        Self { fields, rx, task, joined: false }
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
            // The producer is done: the read ended, unless the producer
            // panicked (what it did not send was never read).
            None if self.joined => Ok(None),
            None => {
                self.joined = true;
                match (&mut self.task).await {
                    Err(e) if e.is_panic() => {
                        Err(ConnectorError::Other("the read stopped before its end (its reading task failed)".into()))
                    }
                    _ => Ok(None),
                }
            }
        }
    }
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

/// The rows per batch a read asks for, or the default.
pub fn batch_size(req: &ReadRequest) -> usize {
    if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size }
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

/// Sends `batch` unless the reader went away; answers whether to go on.
pub async fn send(tx: &mpsc::Sender<ConnectorResult<RecordBatch>>, item: ConnectorResult<RecordBatch>) -> bool {
    tx.send(item).await.is_ok()
}

/// Reorders a batch's rows to `order` (the writer's column order); fields the
/// batch lacks are null.
pub fn align<'a>(batch: &'a RecordBatch, order: &[String]) -> std::borrow::Cow<'a, [Vec<Value>]> {
    let idx: Vec<Option<usize>> = order.iter().map(|n| batch.fields.iter().position(|f| &f.name == n)).collect();
    if idx.iter().enumerate().all(|(i, j)| *j == Some(i)) && batch.fields.len() == order.len() {
        // Already in the table's order: borrowed, not copied.
        return std::borrow::Cow::Borrowed(&batch.rows);
    }
    batch.rows.iter().map(|r| idx.iter().map(|j| j.map(|j| r[j].clone()).unwrap_or(Value::Null)).collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_whose_task_fails_is_an_error_not_an_end() {
        let fields = Arc::new(Vec::new());
        let mut whole = ChannelReader::spawn(fields.clone(), |tx| async move {
            let _ = tx.send(Ok(RecordBatch { fields: Arc::new(Vec::new()), rows: vec![vec![]] })).await;
        });
        assert_eq!(whole.next_batch().await.unwrap().map(|b| b.len()), Some(1));
        assert!(whole.next_batch().await.unwrap().is_none());
        assert!(whole.next_batch().await.unwrap().is_none(), "asked again");
        let mut cut = ChannelReader::spawn(fields, |tx| async move {
            let _ = tx.send(Ok(RecordBatch { fields: Arc::new(Vec::new()), rows: vec![vec![]] })).await;
            panic!("a bug in the reading task");
        });
        assert!(cut.next_batch().await.unwrap().is_some());
        assert!(cut.next_batch().await.is_err(), "what the task did not send was never read");
    }
}
