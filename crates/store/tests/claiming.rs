//! Claiming runs and once-markers on a real PostgreSQL metadata store,
//! with two stores (two connection pools, as two processes would have)
//! working at once. A fresh database per test, dropped afterwards; skipped
//! loudly when PostgreSQL is unreachable outside CI.

use sluice_domain::connect::connection::{Connection, ConnectionStatus};
use sluice_domain::connect::connector::Capability;
use sluice_domain::connect::integration::Credentials;
use sluice_domain::connect::ports::ConnectionRepository;
use sluice_domain::shared::audit::{Actor, AuditEntry};
use sluice_domain::shared::ids::{ConnectionId, FlowId, OrgId};
use sluice_domain::sync::flow::new_run;
use sluice_domain::sync::flow::*;
use sluice_domain::sync::mark::Mark;
use sluice_domain::sync::ports::{QueueRepository, *};
use sluice_domain::sync::verification::VerificationRepository;
use sluice_store::Store;
use std::collections::HashSet;
use std::sync::Arc;

mod common;
use common::fresh;

async fn seed(store: &Store, flows: usize) -> (OrgId, Vec<Flow>) {
    let now = time::OffsetDateTime::now_utc();
    let org = common::new_org(store, now).await;
    let audit = || AuditEntry::new(Some(org.id), Actor::system(), "x", "x", "x", now);
    let conn = Connection {
        id: ConnectionId::new(),
        org_id: org.id,
        name: "c".into(),
        integration_id: None,
        connector_type: "memory".into(),
        capability: Capability::Both,
        config: Default::default(),
        secrets: Credentials::default(),
        status: ConnectionStatus::Untested,
        last_tested_at: None,
        last_error: None,
        created_at: now,
        updated_at: now,
    };
    ConnectionRepository::create(store, &conn, &audit()).await.unwrap();
    let mut out = Vec::new();
    for i in 0..flows {
        let f = Flow {
            id: FlowId::new(),
            org_id: org.id,
            name: format!("f{i}"),
            source_connection_id: conn.id,
            destination_connection_id: conn.id,
            schedule: None,
            config: FlowConfig::default(),
            status: FlowStatus::Active,
            next_run_at: None,
            created_at: now,
            updated_at: now,
        };
        FlowRepository::create(store, &f, &audit()).await.unwrap();
        out.push(f);
    }
    (org.id, out)
}

#[tokio::test]
async fn two_stores_claim_fifty_runs_each_exactly_once() {
    let Some((_db, url)) = fresh("sluice_claim").await else { return };
    let key = [9u8; 32];
    let a = Arc::new(Store::connect(&url, &key).await.unwrap());
    let b = Arc::new(Store::connect(&url, &key).await.unwrap());
    let (_org, flows) = seed(&a, 50).await;
    let now = time::OffsetDateTime::now_utc();
    for f in &flows {
        RunRepository::enqueue(a.as_ref(), &new_run(f, Trigger::Manual, uuid::Uuid::now_v7(), now)).await.unwrap();
    }
    let worker = |store: Arc<Store>, name: &'static str| {
        tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(r) = store.claim(name, time::OffsetDateTime::now_utc()).await.unwrap() {
                assert_eq!(r.claimed_by.as_deref(), Some(name));
                mine.push(r.id);
            }
            mine
        })
    };
    let (x, y) = tokio::join!(worker(a.clone(), "worker-a"), worker(b.clone(), "worker-b"));
    let (x, y) = (x.unwrap(), y.unwrap());
    let all: HashSet<_> = x.iter().chain(&y).copied().collect();
    assert_eq!(x.len() + y.len(), 50, "every run claimed");
    assert_eq!(all.len(), 50, "no run claimed twice");
    eprintln!("worker-a claimed {}, worker-b claimed {}", x.len(), y.len());
}

#[tokio::test]
async fn one_flow_never_has_two_running_runs_and_markers_win_once() {
    let Some((_db, url)) = fresh("sluice_claim").await else { return };
    let key = [9u8; 32];
    let a = Arc::new(Store::connect(&url, &key).await.unwrap());
    let b = Arc::new(Store::connect(&url, &key).await.unwrap());
    let (_org, flows) = seed(&a, 1).await;
    let f = &flows[0];
    let now = time::OffsetDateTime::now_utc();
    for _ in 0..3 {
        RunRepository::enqueue(a.as_ref(), &new_run(f, Trigger::Manual, uuid::Uuid::now_v7(), now)).await.unwrap();
    }
    let (x, y) = tokio::join!(a.claim("a", now), b.claim("b", now));
    let claimed = [x.unwrap(), y.unwrap()].into_iter().flatten().count();
    assert_eq!(claimed, 1, "one running run per flow");
    assert!(a.claim("a", now).await.unwrap().is_none());

    // Twenty concurrent attempts at one marker: one queues.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let run = new_run(f, Trigger::Schedule, uuid::Uuid::now_v7(), now);
        tasks.push(tokio::spawn(async move { store.queue_once("schedule:test:1", &run, None).await.unwrap() }));
    }
    let mut wins = 0;
    for t in tasks {
        if t.await.unwrap() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
}

/// Every write of a run's attempt is refused once another attempt holds
/// the run: the heartbeat, progress, log lines, cursor advances, the final
/// record and a retry.
async fn writes_of_a_taken_over_attempt_are_refused(store: &Store) {
    use sluice_domain::sync::ports::QueueRepository;
    let (org, flows) = seed(store, 1).await;
    let now = time::OffsetDateTime::now_utc();
    let run = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), now);
    RunRepository::enqueue(store, &run).await.unwrap();
    let first = store.claim("a", now).await.unwrap().unwrap();
    let old = first.fence();
    assert!(store.holds(old).await.unwrap());
    assert!(store.heartbeat(old, "a", now).await.unwrap());
    assert!(store.requeue(old, Some("a".into())).await.unwrap(), "the lease ran out");
    let second = store.claim("b", now).await.unwrap().unwrap();
    assert_eq!(second.attempt, old.attempt + 1);
    let line = |m: &str| RunLog { ts: now, level: LogLevel::Info, entity: None, message: m.into() };
    let cursor = |v: &str| Cursor {
        entity: "t".into(),
        mark: Mark::Cursor { field: Some("id".into()), value: Some(v.into()) },
        updated_at: now,
    };
    let stats = [EntityStats { entity: "t".into(), rows_written: 7, ..Default::default() }];
    // The old attempt: nothing lands.
    assert!(!store.holds(old).await.unwrap());
    assert!(!store.heartbeat(old, "a", now).await.unwrap());
    assert!(!store.heartbeat(old, "b", now).await.unwrap(), "another worker's name does not help");
    assert!(!store.progress(old, &stats).await.unwrap());
    assert!(!store.advance(flows[0].id, &cursor("old"), old).await.unwrap());
    store.log(run.id, Some(old), &line("from the old attempt")).await.unwrap();
    store.retry_later(old, now, "old").await.unwrap();
    let mut stale = first.clone();
    stale.status = RunStatus::Failed;
    stale.error = Some("old".into());
    RunRepository::save(store, &stale).await.unwrap();
    // The new attempt: everything lands.
    assert!(store.progress(second.fence(), &stats).await.unwrap());
    assert!(store.advance(flows[0].id, &cursor("new"), second.fence()).await.unwrap());
    store.log(run.id, Some(second.fence()), &line("from the new attempt")).await.unwrap();
    assert!(!store.requeue(old, Some("b".into())).await.unwrap(), "an old attempt is not queued again");
    let stored = RunRepository::get(store, org, run.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempt, stored.error.as_deref()), (RunStatus::Running, 2, None));
    assert_eq!(stored.entities[0].rows_written, 7);
    let c = CursorRepository::get(store, flows[0].id, "t").await.unwrap().unwrap();
    assert_eq!(c.mark.value(), Some("new"));
    let logs: Vec<String> = store.logs(run.id).await.unwrap().into_iter().map(|l| l.message).collect();
    assert_eq!(logs, ["from the new attempt"]);
    // Once ended, a run's record stays as it ended, even for its attempt.
    let mut failed = second.clone();
    failed.status = RunStatus::Failed;
    failed.error = Some("given up".into());
    RunRepository::save(store, &failed).await.unwrap();
    let mut late = second.clone();
    late.status = RunStatus::Succeeded;
    RunRepository::save(store, &late).await.unwrap();
    let stored = RunRepository::get(store, org, run.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.error.as_deref()), (RunStatus::Failed, Some("given up")));
}

/// Rows of every form the cursors table held before marks were typed,
/// written there as text, read as marks; a mark written back is stored as
/// the same text.
async fn stored_rows_read_as_marks(store: &Store) {
    use sea_orm::{ConnectionTrait, Statement};
    let (_, flows) = seed(store, 1).await;
    let now = time::OffsetDateTime::now_utc();
    let run = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), now);
    RunRepository::enqueue(store, &run).await.unwrap();
    let fence = store.claim("a", now).await.unwrap().unwrap().fence();
    let rows: [(&str, Option<&str>, Option<&str>); 5] = [
        ("inc", Some("updated_at"), Some("2026-01-02T00:00:00.000000Z")),
        ("lsn", Some("$position"), Some("16/B374D848")),
        ("chunks", Some("$position"), Some(r#"0/16B3748 copy {"after":["41"],"done":3,"total":9}"#)),
        ("pending", Some("$position"), None),
        ("clear", Some("$clear"), None),
    ];
    let db = store.connection();
    let text = |v: Option<&str>| v.map_or("NULL".to_string(), |v| format!("'{v}'"));
    for (entity, field, value) in rows {
        let placeholder = Cursor { entity: entity.into(), mark: Mark::Clearing, updated_at: now };
        assert!(store.advance(flows[0].id, &placeholder, fence).await.unwrap());
        let sql = format!(
            "UPDATE cursors SET cursor_field = {}, cursor_value = {} WHERE entity = '{entity}'",
            text(field),
            text(value)
        );
        db.execute_unprepared(&sql).await.unwrap();
    }
    let listed = CursorRepository::list(store, flows[0].id).await.unwrap();
    let mark = |e: &str| listed.iter().find(|c| c.entity == e).map(|c| c.mark.clone()).unwrap();
    assert_eq!(
        mark("inc"),
        Mark::Cursor { field: Some("updated_at".into()), value: Some("2026-01-02T00:00:00.000000Z".into()) }
    );
    assert_eq!(mark("lsn"), Mark::Position { at: Some("16/B374D848".into()), copy: None });
    let Mark::Position { at, copy: Some(copy) } = mark("chunks") else { panic!("{:?}", mark("chunks")) };
    assert_eq!((at.as_deref(), copy.after, copy.done, copy.total), (Some("0/16B3748"), Some(vec!["41".into()]), 3, 9));
    assert_eq!(mark("pending"), Mark::pending_copy());
    assert_eq!(mark("clear"), Mark::Clearing);
    // Written back through the store, each is the text it was.
    for c in &listed {
        assert!(store.advance(flows[0].id, c, fence).await.unwrap());
    }
    let backend = db.get_database_backend();
    let stored = db
        .query_all_raw(Statement::from_string(backend, "SELECT entity, cursor_field, cursor_value FROM cursors"))
        .await
        .unwrap();
    for (entity, field, value) in rows {
        let row = stored.iter().find(|r| r.try_get::<String>("", "entity").unwrap() == entity).unwrap();
        let got: (Option<String>, Option<String>) =
            (row.try_get("", "cursor_field").unwrap(), row.try_get("", "cursor_value").unwrap());
        assert_eq!(got, (field.map(str::to_string), value.map(str::to_string)), "{entity}");
    }
}

#[tokio::test]
async fn stored_rows_read_as_marks_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-marks-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let store = Store::connect(&format!("sqlite://{}?mode=rwc", file.display()), &[9u8; 32]).await.unwrap();
    stored_rows_read_as_marks(&store).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

#[tokio::test]
async fn stored_rows_read_as_marks_on_postgres() {
    let Some((_db, url)) = fresh("sluice_marks").await else { return };
    let store = Store::connect(&url, &[9u8; 32]).await.unwrap();
    stored_rows_read_as_marks(&store).await;
}

#[tokio::test]
async fn a_taken_over_attempt_writes_nothing_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-fence-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let store = Store::connect(&format!("sqlite://{}?mode=rwc", file.display()), &[9u8; 32]).await.unwrap();
    writes_of_a_taken_over_attempt_are_refused(&store).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

#[tokio::test]
async fn a_taken_over_attempt_writes_nothing_on_postgres() {
    let Some((_db, url)) = fresh("sluice_fence").await else { return };
    let store = Store::connect(&url, &[9u8; 32]).await.unwrap();
    writes_of_a_taken_over_attempt_are_refused(&store).await;
}

/// A process frozen inside a metadata transaction (here: a session that
/// locked the run's row for share and then went quiet) does not stop
/// another process from taking the run over: PostgreSQL ends the idle
/// session after `IDLE_IN_TRANSACTION`, the take-over proceeds, and the
/// frozen transaction cannot commit afterwards.
#[tokio::test]
async fn a_process_frozen_inside_a_transaction_does_not_block_the_take_over() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some((_db, url)) = fresh("sluice_frozen").await else { return };
    let key = [9u8; 32];
    let frozen = Store::connect(&url, &key).await.unwrap();
    let other = Store::connect(&url, &key).await.unwrap();
    let (_org, flows) = seed(&frozen, 1).await;
    let now = time::OffsetDateTime::now_utc();
    RunRepository::enqueue(&frozen, &new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), now)).await.unwrap();
    let run = frozen.claim("a", now).await.unwrap().unwrap();

    let tx = frozen.connection().begin().await.unwrap();
    tx.execute_unprepared(&format!("SELECT id FROM runs WHERE id = '{}' FOR SHARE", run.id.as_uuid())).await.unwrap();
    // The tx stays open, unused: the process is frozen.
    let started = std::time::Instant::now();
    let taken =
        tokio::time::timeout(sluice_store::IDLE_IN_TRANSACTION * 4, other.requeue(run.fence(), Some("a".into())))
            .await
            .expect("the take-over waited past the idle-in-transaction timeout")
            .unwrap();
    assert!(taken, "the run was queued again for another worker");
    assert!(
        started.elapsed() >= sluice_store::IDLE_IN_TRANSACTION / 2,
        "the take-over did wait for the frozen session (the lock was real)"
    );
    assert!(tx.commit().await.is_err(), "the frozen transaction was ended");
}

/// `recent`: the organization's runs since a time, newest first, bounded,
/// and none of another organization's.
async fn recent_runs_are_the_organizations_newest(store: &Store) {
    let (org, flows) = seed(store, 2).await;
    let (other, other_flows) = seed(store, 1).await;
    let now = time::OffsetDateTime::now_utc();
    for (i, f) in flows.iter().chain(flows.iter()).enumerate() {
        let at = now - time::Duration::days(i as i64 * 3);
        RunRepository::enqueue(store, &new_run(f, Trigger::Manual, uuid::Uuid::now_v7(), at)).await.unwrap();
    }
    RunRepository::enqueue(store, &new_run(&other_flows[0], Trigger::Manual, uuid::Uuid::now_v7(), now)).await.unwrap();
    let recent = RunRepository::recent(store, org, now - time::Duration::days(7), 10).await.unwrap();
    let ages: Vec<i64> = recent.iter().map(|r| (now - r.queued_at).whole_days()).collect();
    assert_eq!(ages, vec![0, 3, 6], "newest first, within the week");
    assert!(recent.iter().all(|r| r.org_id == org));
    assert_eq!(RunRepository::recent(store, org, now - time::Duration::days(30), 2).await.unwrap().len(), 2);
    assert_eq!(RunRepository::recent(store, other, now - time::Duration::days(1), 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn recent_runs_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-recent-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let store = Store::connect(&format!("sqlite://{}?mode=rwc", file.display()), &[9u8; 32]).await.unwrap();
    recent_runs_are_the_organizations_newest(&store).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

#[tokio::test]
async fn recent_runs_on_postgres() {
    let Some((_db, url)) = fresh("sluice_recent").await else { return };
    let store = Store::connect(&url, &[9u8; 32]).await.unwrap();
    recent_runs_are_the_organizations_newest(&store).await;
}

/// Work queued wakes the workers: this process's at once after the commit
/// (a failed write wakes nobody), and on PostgreSQL another process's
/// through LISTEN/NOTIFY, without waiting for its poll.
#[tokio::test]
async fn queued_runs_wake_this_process_and_others_on_postgres() {
    use std::time::Duration;
    let Some((_db, url)) = fresh("sluice_wake").await else { return };
    let key = [9u8; 32];
    let a = Store::connect(&url, &key).await.unwrap();
    let b = Store::connect(&url, &key).await.unwrap();
    b.listen();
    let (_org, flows) = seed(&a, 1).await;
    let now = time::OffsetDateTime::now_utc();
    let run = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), now);

    // This process: woken by its own commit, and not by a failed one.
    woken_by_commits_only(&a, &run).await;

    // Another process: woken through PostgreSQL once its LISTEN is up (a
    // notification sent before that is lost, as the poll covers).
    let mut heard = false;
    for _ in 0..50 {
        let run = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), time::OffsetDateTime::now_utc());
        RunRepository::enqueue(&a, &run).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(200), b.wake().run_queued()).await.is_ok() {
            heard = true;
            break;
        }
    }
    assert!(heard, "the other store never heard of a queued run");
    // A requeue after a pause is work too.
    let claimed = a.claim("w", time::OffsetDateTime::now_utc()).await.unwrap().expect("a queued run");
    tokio::time::sleep(Duration::from_millis(300)).await;
    while tokio::time::timeout(Duration::from_millis(50), b.wake().run_queued()).await.is_ok() {}
    assert!(a.requeue(claimed.fence(), Some("w".into())).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), b.wake().run_queued()).await.expect("a requeued run wakes others");
}

/// Enqueuing `run` wakes `store`'s own worker once it commits; enqueuing
/// it again fails (the same id) and wakes nobody.
async fn woken_by_commits_only(store: &Store, run: &Run) {
    use std::time::Duration;
    RunRepository::enqueue(store, run).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), store.wake().run_queued()).await.expect("woken by its own commit");
    assert!(RunRepository::enqueue(store, run).await.is_err());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), store.wake().run_queued()).await.is_err(),
        "a rolled-back enqueue woke the worker"
    );
}

/// On the embedded store (one process) a queued run wakes this process's
/// worker after the commit, and a failed enqueue wakes nobody.
#[tokio::test]
async fn queued_runs_wake_this_process_on_sqlite() {
    let file = std::env::temp_dir().join(format!("sluice-wake-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let store = Store::connect(&format!("sqlite://{}?mode=rwc", file.display()), &[9u8; 32]).await.unwrap();
    store.listen(); // nothing to listen to on SQLite
    let (_org, flows) = seed(&store, 1).await;
    let run = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), time::OffsetDateTime::now_utc());
    woken_by_commits_only(&store, &run).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

/// Verifications are claimed like runs: one worker at a time; a claim that
/// lapses (its worker killed or frozen) goes to the next worker, and the
/// first one's renewals and outcome are then refused.
async fn verifications_are_held_by_one_worker_at_a_time(store: &Store) {
    use sluice_domain::shared::ids::VerificationId;
    use sluice_domain::sync::verification::{EntityCheck, Verification, VerificationStatus};
    let (org, flows) = seed(store, 1).await;
    let now = time::OffsetDateTime::now_utc();
    let v = Verification {
        id: VerificationId::new(),
        org_id: org,
        flow_id: flows[0].id,
        status: VerificationStatus::Queued,
        requested: vec!["t".into()],
        repair: false,
        entities: vec![],
        error: None,
        queued_at: now,
        started_at: None,
        finished_at: None,
        claimed_by: None,
        claimed_until: None,
        repair_run_id: None,
    };
    let audit = AuditEntry::new(Some(org), Actor::system(), "verification.started", "verification", v.id, now);
    store.create_verification(&v, &audit).await.unwrap();
    // Queued, it wakes this process's verification loop.
    tokio::time::timeout(std::time::Duration::from_secs(10), store.wake().verification_queued())
        .await
        .expect("a queued verification wakes the worker");
    let lease = time::Duration::seconds(30);
    let (a, b) =
        tokio::join!(store.claim_verification("a", now, now + lease), store.claim_verification("b", now, now + lease));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.is_some() != b.is_some(), "exactly one worker holds it");
    let (first, other) = if a.is_some() { ("a", "b") } else { ("b", "a") };
    assert!(store.renew_verification(v.id, first, now + lease).await.unwrap());
    assert!(!store.renew_verification(v.id, other, now + lease).await.unwrap());
    assert!(store.claim_verification(other, now + lease / 2, now + lease).await.unwrap().is_none(), "held");
    // The claim lapses: the other worker takes it over.
    let later = now + lease * 2;
    let taken = store.claim_verification(other, later, later + lease).await.unwrap().expect("lapsed");
    assert_eq!((taken.id, taken.claimed_by.as_deref()), (v.id, Some(other)));
    let mut done = taken.clone();
    done.status = VerificationStatus::Matched;
    done.entities = vec![EntityCheck { entity: "t".into(), source_rows: 3, destination_rows: 3, ..Default::default() }];
    done.finished_at = Some(later);
    assert!(!store.renew_verification(v.id, first, later + lease).await.unwrap());
    assert!(!store.save_verification(&done, first).await.unwrap(), "the first worker's outcome is refused");
    // A repair is queued with its audit entry in one transaction: nothing
    // of it is written by the worker that lost the claim.
    let repair = new_run(&flows[0], Trigger::Manual, uuid::Uuid::now_v7(), later);
    let triggered = AuditEntry::new(Some(org), Actor::system(), "run.triggered", "run", repair.id, later);
    let mut repaired = done.clone();
    repaired.status = VerificationStatus::Mismatched;
    repaired.repair_run_id = Some(repair.id);
    let audited = || {
        let filter = sluice_domain::shared::audit::AuditFilter {
            resource_id: Some(repair.id.to_string()),
            ..Default::default()
        };
        let page = sluice_domain::shared::page::PageRequest { limit: 10, after: None };
        async move {
            use sluice_domain::shared::audit::AuditRepository;
            AuditRepository::list(store, org, &filter, page).await.unwrap().items.len()
        }
    };
    assert!(!store.queue_repair(&repaired, &repair, first, &triggered).await.unwrap(), "refused");
    assert!(RunRepository::get(store, org, repair.id).await.unwrap().is_none(), "no run queued by the lost claim");
    assert_eq!(audited().await, 0, "no audit entry from the lost claim");
    assert!(store.queue_repair(&repaired, &repair, other, &triggered).await.unwrap());
    assert!(RunRepository::get(store, org, repair.id).await.unwrap().is_some(), "the repair is queued");
    assert_eq!(audited().await, 1, "with its audit entry");
    assert_eq!(store.repaired_by(repair.id).await.unwrap().map(|r| r.id), Some(v.id));
    assert!(!store.save_verification(&done, other).await.unwrap(), "its outcome is stored once");
    let stored = store.get_verification(org, v.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.entities.clone()), (VerificationStatus::Mismatched, done.entities));
    assert!(
        store.claim_verification(first, later + lease * 10, later + lease * 11).await.unwrap().is_none(),
        "finished"
    );
    assert!(store.get_verification(OrgId::new(), v.id).await.unwrap().is_none(), "another organization's");
    let page = store
        .verifications_of_flow(org, flows[0].id, sluice_domain::shared::page::PageRequest { limit: 10, after: None })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
}

#[tokio::test]
async fn verifications_are_held_by_one_worker_at_a_time_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-verify-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let store = Store::connect(&format!("sqlite://{}?mode=rwc", file.display()), &[9u8; 32]).await.unwrap();
    verifications_are_held_by_one_worker_at_a_time(&store).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

#[tokio::test]
async fn verifications_are_held_by_one_worker_at_a_time_on_postgres() {
    let Some((_db, url)) = fresh("sluice_verify").await else { return };
    let store = Store::connect(&url, &[9u8; 32]).await.unwrap();
    verifications_are_held_by_one_worker_at_a_time(&store).await;
}
