//! A writer's lock on a file of an organization's directory: taken for the
//! writer's life and freed by the kernel when its process dies; the file
//! names the run attempt that holds it, so that the attempt taking a run
//! over can wait for a frozen one (see `file::manifest`).

use super::paths::{open_in_place, still_at};
use sluice_domain::connect::connector::{Attempt, ConnectorError, ConnectorResult};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a writer (or a read of the positions) waits for the writer
/// that holds the entity.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The lock file of one entity.
#[derive(Debug, Clone)]
pub struct LockFile {
    pub path: PathBuf,
    /// What messages call the entity.
    pub name: String,
}

fn io(what: &str, e: std::io::Error) -> ConnectorError {
    ConnectorError::Other(format!("{what}: {e}"))
}

impl LockFile {
    /// The lock, if no writer holds it.
    pub fn try_lock(&self) -> ConnectorResult<Option<File>> {
        let f = open_in_place(&self.path, OpenOptions::new().create(true).truncate(false).write(true))
            .map_err(|e| io("lock file", e))?;
        match f.try_lock() {
            // The lock is on the file opened: it must still be the one of
            // that name, or another writer would lock another file.
            Ok(()) if still_at(&f, &self.path).map_err(|e| io("lock file", e))? => Ok(Some(f)),
            Ok(()) => {
                Err(ConnectorError::Other(format!("lock file of {}: replaced while it was taken; refused", self.name)))
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io("lock file", e)),
        }
    }

    /// Takes the lock, waiting up to [`LOCK_WAIT`] for the writer that
    /// holds it (off the async threads: it sleeps).
    pub async fn lock(&self) -> ConnectorResult<File> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + LOCK_WAIT;
            loop {
                match me.try_lock()? {
                    Some(f) => return Ok(f),
                    None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                    None => {
                        return Err(ConnectorError::Timeout(format!(
                            "{} is being written by another run (or by an earlier attempt of this one whose \
                             process is frozen); waited {} s",
                            me.name,
                            LOCK_WAIT.as_secs()
                        )));
                    }
                }
            }
        })
        .await
        .map_err(|e| ConnectorError::Other(e.to_string()))?
    }

    /// Writes `attempt`'s mark into the lock file (its lock held).
    pub fn mark(lock: &mut File, attempt: &Attempt) -> ConnectorResult<()> {
        use std::io::{Seek, SeekFrom};
        lock.set_len(0).map_err(|e| io("lock file", e))?;
        lock.seek(SeekFrom::Start(0)).map_err(|e| io("lock file", e))?;
        lock.write_all(attempt.mark().as_bytes()).map_err(|e| io("lock file", e))
    }

    /// Waits for the writer holding this lock when it is an earlier
    /// attempt of `attempt`'s run (a frozen process's): answers whether it
    /// waited.
    pub async fn wait_if_earlier(&self, attempt: &Attempt) -> ConnectorResult<bool> {
        let mark = std::fs::read_to_string(&self.path).unwrap_or_default();
        if !mark.starts_with(&attempt.run_mark()) || mark == attempt.mark() || self.try_lock()?.is_some() {
            return Ok(false);
        }
        drop(self.lock().await?);
        Ok(true)
    }
}
