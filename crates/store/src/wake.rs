//! Waking the workers when work is queued, instead of leaving it to their
//! next poll: in this process at once (after the commit), and on PostgreSQL
//! in every process sharing the store, through `NOTIFY` (sent by the
//! database at commit, so a listener never hears of uncommitted work) and
//! one `LISTEN` connection per process. Polling stays, as the fallback for
//! a notification lost with a connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// What a committed write queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A run to start.
    Runs,
    /// A notification delivery to send.
    Deliveries,
    /// A verification to execute.
    Verifications,
    /// Credentials changed (an API key revoked, an organization deleted, a
    /// member's role changed or removed): what each process caches of
    /// them is dropped.
    Credentials,
}

impl Work {
    const ALL: [Work; 4] = [Work::Runs, Work::Deliveries, Work::Verifications, Work::Credentials];

    /// The PostgreSQL channel of this kind of work.
    pub fn channel(self) -> &'static str {
        match self {
            Work::Runs => "sluice_runs_queued",
            Work::Deliveries => "sluice_deliveries_queued",
            Work::Verifications => "sluice_verifications_queued",
            Work::Credentials => "sluice_credentials_changed",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Work::Runs => 1,
            Work::Deliveries => 2,
            Work::Credentials => 4,
            Work::Verifications => 8,
        }
    }
}

/// The signals a process's worker and sender wait on, besides their poll.
#[derive(Debug, Default)]
pub struct Wake {
    runs: Notify,
    deliveries: Notify,
    verifications: Notify,
    credentials: Notify,
}

impl Wake {
    fn notify(&self, work: Work) {
        // One stored permit: a wake while nobody waits is not lost.
        match work {
            Work::Runs => self.runs.notify_one(),
            Work::Deliveries => self.deliveries.notify_one(),
            Work::Verifications => self.verifications.notify_one(),
            Work::Credentials => self.credentials.notify_one(),
        }
    }

    /// Resolves when credentials changed (here or, on PostgreSQL, in any
    /// process on the store) since the last wait, or when a notification
    /// may have been missed.
    pub async fn credentials_changed(&self) {
        self.credentials.notified().await;
    }

    /// Resolves when a run was queued since the last wait (or is, now).
    pub async fn run_queued(&self) {
        self.runs.notified().await;
    }

    /// Resolves when a notification delivery was queued.
    pub async fn delivery_queued(&self) {
        self.deliveries.notified().await;
    }

    /// Resolves when a verification was queued.
    pub async fn verification_queued(&self) {
        self.verifications.notified().await;
    }
}

/// The kinds of work one transaction queued, to wake after it commits.
#[derive(Debug, Default)]
pub(crate) struct Pending(AtomicU8);

impl Pending {
    pub(crate) fn add(&self, work: Work) {
        self.0.fetch_or(work.bit(), Ordering::Relaxed);
    }

    pub(crate) fn wake(&self, wake: &Wake) {
        let bits = self.0.load(Ordering::Relaxed);
        for w in Work::ALL {
            if bits & w.bit() != 0 {
                wake.notify(w);
            }
        }
    }
}

/// How long the listener waits in silence before it listens anew on a new
/// connection (sqlx sets no TCP keepalive, so a dead one may never say so).
const QUIET: Duration = Duration::from_secs(300);

/// Listens on PostgreSQL for work other processes queue, until the process
/// ends; reconnects after a lost connection (and wakes everything then, as
/// a notification may have gone with it).
pub(crate) async fn listen(pool: sea_orm::sqlx::PgPool, wake: Arc<Wake>) {
    use sea_orm::sqlx::postgres::PgListener;
    let channels: Vec<&str> = Work::ALL.iter().map(|w| w.channel()).collect();
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listening for queued work failed; polling meanwhile");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen_all(channels.iter().copied()).await {
            tracing::warn!(error = %e, "listening for queued work failed; polling meanwhile");
            tokio::time::sleep(Duration::from_secs(5)).await;
            continue;
        }
        tracing::debug!("listening for queued work");
        // What was sent while no LISTEN was up is unknown: look now.
        Work::ALL.into_iter().for_each(|w| wake.notify(w));
        loop {
            match tokio::time::timeout(QUIET, listener.try_recv()).await {
                Ok(Ok(Some(n))) => {
                    if let Some(w) = Work::ALL.into_iter().find(|w| w.channel() == n.channel()) {
                        wake.notify(w);
                    }
                }
                // The connection was lost and sqlx listens again on a new
                // one: what was sent in between is unknown, so look now.
                Ok(Ok(None)) => Work::ALL.into_iter().for_each(|w| wake.notify(w)),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "listening for queued work failed; polling meanwhile");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
                // Silence this long may be a connection that died without
                // a word (a partition, a failover): listen on a new one.
                Err(_) => break,
            }
        }
    }
}
