//! The change reader every change-capturing connector hands out: events a
//! reading task of its own sends through a channel.

use sluice_domain::connect::changes::{ChangeEvent, ChangeReader};
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use std::collections::VecDeque;
use tokio::sync::mpsc;

/// Checks a change stream's name (a flow's: letters, digits and `_`, at
/// most 48), which names what a source keeps for it.
pub fn check_stream_name(name: &str) -> ConnectorResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok { Ok(()) } else { Err(ConnectorError::InvalidConfig(format!("'{name}' cannot name a change stream"))) }
}

/// What a reading task sends: events, `None` once it reached the end it
/// was read up to, or the error that stopped it.
pub type ChangeBatch = ConnectorResult<Option<Vec<ChangeEvent>>>;

/// The events a reading task sends; dropped, it ends the task (and what the
/// task holds: its connection to the source) at once.
pub struct ChannelChanges {
    rx: mpsc::Receiver<ChangeBatch>,
    buffered: VecDeque<ChangeEvent>,
    ended: bool,
    task: tokio::task::AbortHandle,
}

impl ChannelChanges {
    /// The reader of the task `task` sending into `rx`.
    pub fn new(rx: mpsc::Receiver<ChangeBatch>, task: tokio::task::AbortHandle) -> Self {
        ChannelChanges { rx, buffered: VecDeque::new(), ended: false, task }
    }
}

impl Drop for ChannelChanges {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait::async_trait]
impl ChangeReader for ChannelChanges {
    async fn next(&mut self, max: usize) -> ConnectorResult<Vec<ChangeEvent>> {
        while self.buffered.is_empty() && !self.ended {
            match self.rx.recv().await {
                Some(Ok(Some(events))) => self.buffered.extend(events),
                Some(Ok(None)) => self.ended = true,
                Some(Err(e)) => return Err(e),
                // The reading task ended without saying so (it panicked):
                // what it did not send was not seen.
                None => {
                    return Err(ConnectorError::Other(
                        "the change stream's reader stopped before the end of the read".into(),
                    ));
                }
            }
        }
        let n = self.buffered.len().min(max.max(1));
        Ok(self.buffered.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_are_checked() {
        assert!(check_stream_name("0190a1b2c3d4").is_ok());
        assert!(check_stream_name("x'; DROP").is_err());
        assert!(check_stream_name("").is_err());
    }
}
