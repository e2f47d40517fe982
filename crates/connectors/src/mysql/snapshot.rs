//! The consistent snapshots a change stream's copies read in: a connection
//! inside a transaction begun `WITH CONSISTENT SNAPSHOT`, registered by a
//! name of its own until its hold is dropped (connectors are made per use;
//! the snapshot outlives the one that took it), and reads on it.

use super::types::bind;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult, Field, Value};
use sqlx::{Connection, MySqlConnection};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

type Held = Arc<tokio::sync::Mutex<Option<MySqlConnection>>>;

/// The snapshots copies read in, by name: a connection inside a
/// transaction begun `WITH CONSISTENT SNAPSHOT`, held until its
/// [`SnapshotHold`] is dropped. (Connectors are made per use; the
/// snapshot outlives the one that took it.)
fn snapshots() -> &'static Mutex<HashMap<String, Held>> {
    static SNAPSHOTS: OnceLock<Mutex<HashMap<String, Held>>> = OnceLock::new();
    SNAPSHOTS.get_or_init(Default::default)
}

/// A snapshot's hold: dropped, its connection ends (on a task of its own).
struct SnapshotHold(String);

impl Drop for SnapshotHold {
    fn drop(&mut self) {
        let held = snapshots().lock().map(|mut m| m.remove(&self.0)).ok().flatten();
        if let Some(held) = held
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Some(conn) = held.lock().await.take() {
                    let _ = conn.close().await;
                }
            });
        }
    }
}

/// The connection of snapshot `name`, while it is held.
pub(super) fn held(name: &str) -> Option<Held> {
    snapshots().lock().ok()?.get(name).cloned()
}

/// Registers `conn` (inside its snapshot transaction): its name, and the
/// hold that ends it when dropped.
pub(super) fn hold(conn: MySqlConnection) -> ConnectorResult<(String, Box<dyn std::any::Any + Send>)> {
    let name = format!("mariadb-{}", uuid::Uuid::new_v4().simple());
    snapshots()
        .lock()
        .map_err(|_| ConnectorError::Other("the snapshots' lock is poisoned".into()))?
        .insert(name.clone(), Arc::new(tokio::sync::Mutex::new(Some(conn))));
    Ok((name.clone(), Box::new(SnapshotHold(name))))
}

/// A copy's read in snapshot `name` (see [`held`]).
pub(super) fn read_in_snapshot(
    held: Held,
    fields: Arc<Vec<Field>>,
    sql: String,
    bound: Option<Value>,
    batch_size: usize,
    decode: impl Fn(&sqlx::mysql::MySqlRow) -> ConnectorResult<Vec<Value>> + Send + 'static,
    err: impl Fn(&sqlx::Error) -> ConnectorError + Send + 'static,
) -> Box<dyn sluice_domain::connect::connector::RecordReader> {
    let batch_fields = fields.clone();
    Box::new(crate::common::ChannelReader::spawn(fields, move |tx| async move {
        let mut guard = held.lock().await;
        let Some(conn) = guard.as_mut() else {
            let _ = tx.send(Err(ConnectorError::Other("the copy's snapshot ended before it was read".into()))).await;
            return;
        };
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(v) = &bound {
            q = bind(q, v);
        }
        crate::common::pump_rows(q.fetch(conn), batch_fields, batch_size, tx, decode, err).await;
    }))
}
