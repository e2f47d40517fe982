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

/// The tables a readiness check looks at: those named, or, for a
/// connection's own test (none named), every table it can see.
pub fn tables_to_check(named: &[String], all: impl Iterator<Item = String>) -> Vec<String> {
    if named.is_empty() { all.collect() } else { named.to_vec() }
}

/// At most this many lines about single tables in a readiness report; the
/// rest are counted in one line.
const TABLE_LINES: usize = 10;

/// Appends the lines about single tables to a readiness report, at most
/// [`TABLE_LINES`] of them and one that counts the rest.
pub fn push_table_reasons(reasons: &mut Vec<String>, tables: Vec<String>) {
    let more = tables.len().saturating_sub(TABLE_LINES);
    reasons.extend(tables.into_iter().take(TABLE_LINES));
    if more > 0 {
        reasons.push(format!("and {more} more lines like these, about other tables"));
    }
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

    #[test]
    fn a_readiness_report_counts_what_it_does_not_list() {
        let named = tables_to_check(&["a".into()], ["a", "b"].into_iter().map(String::from));
        assert_eq!(named, ["a"]);
        let all = tables_to_check(&[], ["a", "b"].into_iter().map(String::from));
        assert_eq!(all, ["a", "b"]);
        let mut reasons = vec!["wal_level".to_string()];
        push_table_reasons(&mut reasons, (0..13).map(|i| format!("t{i}")).collect());
        assert_eq!(reasons.len(), 1 + TABLE_LINES + 1);
        assert_eq!(reasons[TABLE_LINES], "t9");
        assert_eq!(reasons.last().unwrap(), "and 3 more lines like these, about other tables");
        let mut few = Vec::new();
        push_table_reasons(&mut few, vec!["t".into()]);
        assert_eq!(few, ["t"]);
    }
}
