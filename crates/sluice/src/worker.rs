//! The worker: claims queued runs from the metadata store and executes
//! them, renewing its lease with a heartbeat while a run lasts.

use sluice_domain::app::Sluice;
use sluice_store::wake::Wake;
use std::sync::Arc;
use std::time::Duration;

/// How often an idle worker looks for queued runs, when no wake came: a
/// run queued by this process, or by another on a PostgreSQL store, wakes
/// it at once (see `sluice_store::wake`).
pub const POLL: Duration = Duration::from_millis(250);
/// How often a busy worker renews its lease, as a part of the lease: a
/// lost lease is noticed within this much of it.
pub const HEARTBEATS_PER_LEASE: u32 = 6;

/// A name that tells processes apart in run records (`host:pid:random`).
pub fn worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "host".into());
    format!("{host}:{}:{}", std::process::id(), sluice_domain::shared::secret::random_base62(6))
}

/// Claims, executes, repeats, until `stop` turns true: then it claims no
/// more, the run in progress (if any) pauses at its next checkpoint and
/// goes back to the queue, and it returns.
pub async fn run(sluice: Sluice, id: String, mut stop: tokio::sync::watch::Receiver<bool>, wake: Arc<Wake>) {
    tracing::info!(worker = %id, "worker started");
    let mut continuous = tokio::task::JoinSet::new();
    loop {
        // Continuous runs that ended.
        while continuous.try_join_next().is_some() {}
        if *stop.borrow() {
            tracing::info!(worker = %id, "worker stopped: it takes no more runs");
            // Continuous runs pause at their next commit (within a second
            // or so) and go back to the queue.
            sluice.engine.stop_at_checkpoint();
            while continuous.join_next().await.is_some() {}
            return;
        }
        match sluice.engine.claim_run(&id).await {
            Ok(Some(run)) => {
                // A continuous run goes on until it is stopped: it runs
                // beside this loop, which goes on claiming other runs.
                if sluice.engine.is_continuous(&run).await {
                    continuous.spawn(execute(sluice.clone(), id.clone(), run, stop.clone()));
                } else {
                    execute(sluice.clone(), id.clone(), run, stop.clone()).await;
                }
            }
            Ok(None) => {
                // Idle: wait for a queued run, the next poll or the stop,
                // whichever comes first.
                tokio::select! {
                    _ = wake.run_queued() => {}
                    _ = stop.changed() => {}
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
            Err(e) => {
                tracing::error!(worker = %id, error = %e, "claiming runs failed");
                let _ = tokio::time::timeout(Duration::from_secs(2), stop.changed()).await;
            }
        }
    }
}

/// Executes a claimed run with its lease renewed, until it ends, is taken
/// over (its execution is then dropped at once) or `stop` says the process
/// stops (it then pauses at its next checkpoint).
async fn execute(
    sluice: Sluice,
    id: String,
    run: sluice_domain::sync::flow::Run,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let heartbeat = sluice.engine.lease() / HEARTBEATS_PER_LEASE;
    let (run_id, fence) = (run.id, run.fence());
    tracing::info!(worker = %id, run = %run_id, attempt = fence.attempt, flow = %run.flow_id, "run claimed");
    // The heartbeat renews the lease; once it finds the run no
    // longer this attempt's (taken over after a freeze, say), the
    // execution is dropped at once: its open destination
    // transactions roll back and it writes nothing more.
    let (beat, lost) = {
        let (sluice, id) = (sluice.clone(), id.clone());
        renewing(heartbeat, format!("run {run_id}"), move || {
            let (sluice, id) = (sluice.clone(), id.clone());
            async move { sluice.engine.renew_lease(fence, &id).await }
        })
    };
    let execution = sluice.engine.execute_run(run);
    tokio::pin!(execution);
    let mut lost = lost;
    let mut told = *stop.borrow();
    loop {
        tokio::select! {
            done = &mut execution => {
                let rows: u64 = done.entities.iter().map(|e| e.rows_written).sum();
                let status = done.status.as_str();
                if done.finished_at.is_some() {
                    tracing::info!(worker = %id, run = %run_id, status, rows, "run finished");
                } else {
                    tracing::info!(worker = %id, run = %run_id, status, rows, "run paused at a checkpoint; queued again");
                }
                break;
            }
            Ok(()) = &mut lost => {
                tracing::warn!(worker = %id, run = %run_id, attempt = fence.attempt,
                    "the run is no longer this worker's (its lease was taken over); execution stopped");
                break;
            }
            changed = stop.changed(), if !told => {
                // Told to stop (or the sender is gone): the run
                // pauses at its next checkpoint.
                told = changed.is_err() || *stop.borrow();
                if told {
                    sluice.engine.stop_at_checkpoint();
                    tracing::info!(worker = %id, run = %run_id, "stopping: the run pauses at its next checkpoint");
                }
            }
        }
    }
    beat.abort();
}

/// Renews a lease every `period` with `renew` on a task of its own until
/// it is aborted, or until `renew` answers that the lease is lost: the
/// receiver then hears of it.
fn renewing<F, Fut>(
    period: Duration,
    what: String,
    renew: F,
) -> (tokio::task::JoinHandle<()>, tokio::sync::oneshot::Receiver<()>)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = sluice_domain::Result<bool>> + Send,
{
    let (lost_tx, lost) = tokio::sync::oneshot::channel::<()>();
    let beat = tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            match renew().await {
                Ok(true) => {}
                Ok(false) => {
                    let _ = lost_tx.send(());
                    break;
                }
                Err(e) => tracing::warn!(lease = %what, error = %e, "renewing a lease failed"),
            }
        }
    });
    (beat, lost)
}

/// How often due flows are queued and lost runs recovered.
pub const TICK: Duration = Duration::from_secs(5);

/// Runs forever: queue due flows (once per scheduled time, whatever the
/// number of processes), recover runs whose worker stopped answering.
pub async fn schedule(sluice: Sluice) {
    loop {
        match sluice.engine.schedule_due().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(queued = n, "scheduled runs queued"),
            Err(e) => tracing::error!(error = %e, "scheduling failed"),
        }
        match sluice.engine.recover_lost_runs().await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(recovered = n, "runs of lost workers recovered"),
            Err(e) => tracing::error!(error = %e, "recovering lost runs failed"),
        }
        match sluice.engine.retry_stream_drops().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(dropped = n, "change streams left on their sources dropped"),
            Err(e) => tracing::error!(error = %e, "dropping change streams left on their sources failed"),
        }
        tokio::time::sleep(TICK).await;
    }
}

/// How often a process looks for notification deliveries that are due
/// (retries), when no new one woke it.
pub const DELIVERY_POLL: Duration = Duration::from_secs(1);
/// Deliveries one process sends at once.
pub const DELIVERY_BATCH: u64 = 16;

/// Runs forever: sends the notification deliveries that are due, apart
/// from runs and requests, so a slow or dead receiver slows neither.
pub async fn deliver(sluice: Sluice, id: String, wake: Arc<Wake>) {
    loop {
        match sluice.monitoring.deliver_due(&id, DELIVERY_BATCH).await {
            // A full batch: there may be more due at once.
            Ok(n) if n as u64 == DELIVERY_BATCH => continue,
            Ok(_) => {}
            Err(e) => tracing::error!(worker = %id, error = %e, "sending notification deliveries failed"),
        }
        tokio::select! {
            _ = wake.delivery_queued() => {}
            _ = tokio::time::sleep(DELIVERY_POLL) => {}
        }
    }
}

/// Runs forever: drops this process's cached credentials whenever they
/// change in any process on the store (an API key revoked, a member's role
/// changed or removed, an organization deleted), so that the change holds
/// here as soon as its notification arrives, not after the cache's second.
pub async fn forget_changed_credentials(sluice: Sluice, wake: Arc<Wake>) {
    loop {
        wake.credentials_changed().await;
        sluice.identity.forget_cached_credentials();
    }
}

/// How often a process looks for queued verifications, when no wake came
/// (one queued here, or on a PostgreSQL store anywhere, wakes it at once).
pub const VERIFY_POLL: Duration = Duration::from_secs(1);

/// Runs until `stop`: claims queued verifications (or ones whose worker
/// stopped answering) and executes them one at a time, renewing the claim
/// while one lasts. Stopped, the verification in progress is left: its
/// claim lapses and another process takes it up from the start (it only
/// reads).
pub async fn verify(sluice: Sluice, id: String, mut stop: tokio::sync::watch::Receiver<bool>, wake: Arc<Wake>) {
    let pause: sluice_domain::sync::verification::Pause = Arc::new(|d| Box::pin(tokio::time::sleep(d)));
    let heartbeat = sluice.engine.lease() / HEARTBEATS_PER_LEASE;
    loop {
        if *stop.borrow() {
            return;
        }
        match sluice.verifier.claim(&id).await {
            Ok(Some(v)) => {
                let vid = v.id;
                tracing::info!(worker = %id, verification = %vid, flow = %v.flow_id, "verification claimed");
                let (beat, lost) = {
                    let (sluice, id) = (sluice.clone(), id.clone());
                    renewing(heartbeat, format!("verification {vid}"), move || {
                        let (sluice, id) = (sluice.clone(), id.clone());
                        async move { sluice.verifier.renew(vid, &id).await }
                    })
                };
                // In a task of its own: a panic ends this verification
                // (failed), not the loop, nor every worker that claims it next.
                let claimed = v.clone();
                let mut execution = {
                    let (sluice, id, pause) = (sluice.clone(), id.clone(), pause.clone());
                    tokio::spawn(async move { sluice.verifier.execute(v, &id, pause).await })
                };
                tokio::select! {
                    done = &mut execution => match done {
                        Ok(Ok(v)) => tracing::info!(worker = %id, verification = %vid, status = v.status.as_str(), "verification finished"),
                        Ok(Err(e)) => tracing::error!(worker = %id, verification = %vid, error = %e, "storing a verification failed"),
                        Err(e) => {
                            tracing::error!(worker = %id, verification = %vid, error = %e, "a verification stopped on an internal error");
                            let why = "the verification stopped on an internal error (the service's log has it)";
                            if let Err(e) = sluice.verifier.fail(claimed, &id, why).await {
                                tracing::error!(verification = %vid, error = %e, "storing a failed verification failed");
                            }
                        }
                    },
                    Ok(()) = lost => {
                        execution.abort();
                        tracing::warn!(worker = %id, verification = %vid, "the verification is no longer this worker's");
                    }
                    changed = stop.changed() => {
                        execution.abort();
                        beat.abort();
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                }
                beat.abort();
            }
            Ok(None) => {
                tokio::select! {
                    changed = stop.changed() => if changed.is_err() {
                        return;
                    },
                    _ = wake.verification_queued() => {}
                    _ = tokio::time::sleep(VERIFY_POLL) => {}
                }
            }
            Err(e) => {
                tracing::error!(worker = %id, error = %e, "claiming verifications failed");
                let _ = tokio::time::timeout(Duration::from_secs(2), stop.changed()).await;
            }
        }
    }
}
