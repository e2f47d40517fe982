//! A flow's change stream (its replication slot and publication) removed
//! from its source when the flow is deleted, leaves change capture or
//! moves to another source. A source that cannot be reached then keeps
//! them, and with them its log: what must still be dropped is recorded
//! ([`StreamDrop`]), recorded as a `cdc.stream_left` activity event, shown
//! on the connection's page, and retried on the scheduler's ticks until it
//! is gone (`cdc.stream_dropped`).

use super::Engine;
use crate::monitoring::activity::{ActivityEvent, EventType};
use crate::sync::flow::{Flow, StreamDrop};
use serde_json::json;

/// How long after a failed try a left stream is tried again.
pub const DROP_RETRY: time::Duration = time::Duration::seconds(15);

/// Left streams one scheduler tick tries at most.
const DROPS_PER_TICK: u64 = 20;

impl Engine {
    /// Removes the flow's change stream from its source. A source that
    /// cannot be reached keeps it: recorded, to be retried and shown.
    pub(crate) async fn drop_stream(&self, flow: &Flow) {
        let dropped = async {
            let changes = self.change_source_of(flow).await.map_err(|e| e.to_string())?;
            changes.drop_stream(&flow.stream_name()).await.map_err(|e| e.to_string())
        };
        let Err(error) = dropped.await else { return };
        tracing::warn!(flow = %flow.id, stream = %flow.stream_name(), error = %error, "the flow's change stream could not be removed from its source; it is retried");
        let now = self.clock.now();
        let left = StreamDrop {
            id: uuid::Uuid::now_v7(),
            org_id: flow.org_id,
            connection_id: flow.source_connection_id,
            stream: flow.stream_name(),
            flow_id: flow.id,
            flow_name: flow.name.clone(),
            error: error.clone(),
            attempts: 1,
            created_at: now,
            tried_at: now,
        };
        if let Err(e) = self.drops.record_drop(&left).await {
            tracing::error!(flow = %flow.id, error = %e, "recording a change stream left on its source failed");
            return;
        }
        let message = format!(
            "flow '{}' left its change stream (replication slot sluice_{}) on its source, which could not be \
             reached: {error}; it keeps the source's log until it is dropped, which is retried",
            flow.name, left.stream
        );
        self.stream_event(&left, EventType::CdcStreamLeft, "warning", message).await;
    }

    /// Tries again to drop the change streams left on sources whose last
    /// try is [`DROP_RETRY`] old (every process's scheduler does: a drop
    /// is idempotent); answers how many were dropped.
    pub async fn retry_stream_drops(&self) -> crate::Result<usize> {
        let now = self.clock.now();
        let mut dropped = 0;
        for mut left in self.drops.due_drops(now - DROP_RETRY, DROPS_PER_TICK).await? {
            use crate::connect::service::OpenError;
            let tried = async {
                let opened = self.connect.open_change_source(left.org_id, left.connection_id).await;
                let changes = match opened {
                    Ok(o) => o.io,
                    Err(OpenError::Missing) => return Err(None),
                    Err(OpenError::Store(e)) => return Err(Some(e.to_string())),
                    Err(OpenError::Resolve { error, .. } | OpenError::Open(error)) => {
                        return Err(Some(error.to_string()));
                    }
                };
                changes.drop_stream(&left.stream).await.map_err(|e| Some(e.to_string()))
            };
            match tried.await {
                // The connection was deleted: nothing here can reach the
                // source any more; said once more, with what to run there.
                Err(None) => {
                    self.drops.forget_drop(left.id).await?;
                    let message = format!(
                        "the connection of flow '{}' was deleted while its change stream was still on its source: \
                         drop it there by hand (PostgreSQL: SELECT pg_drop_replication_slot('sluice_{}'); DROP \
                         PUBLICATION IF EXISTS sluice_{})",
                        left.flow_name, left.stream, left.stream
                    );
                    self.stream_event(&left, EventType::CdcStreamLeft, "warning", message).await;
                }
                Ok(()) => {
                    self.drops.forget_drop(left.id).await?;
                    dropped += 1;
                    let message = format!(
                        "the change stream flow '{}' left on its source (replication slot sluice_{}) was dropped",
                        left.flow_name, left.stream
                    );
                    self.stream_event(&left, EventType::CdcStreamDropped, "info", message).await;
                }
                Err(Some(error)) => {
                    left.error = error;
                    left.attempts += 1;
                    left.tried_at = now;
                    self.drops.record_drop(&left).await?;
                }
            }
        }
        Ok(dropped)
    }

    async fn stream_event(&self, left: &StreamDrop, event_type: EventType, severity: &str, message: String) {
        let event = ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: left.org_id,
            event_type,
            severity: severity.into(),
            message,
            data: json!({"flow_id": left.flow_id, "flow_name": left.flow_name, "connection_id": left.connection_id,
                "replication_slot": format!("sluice_{}", left.stream), "error": left.error}),
            created_at: self.clock.now(),
        };
        if let Err(e) = self.monitoring.record(&event).await {
            tracing::warn!(error = %e, "recording a change stream's event failed");
        }
    }
}
