//! Continuous change capture as a service runs it for long: fifty
//! continuous flows on one process, with its connections and memory
//! bounded; and a continuous flow whose destination goes away (refusing
//! logins, then frozen), which the flow outlives and then catches up
//! with, every change once, its slot's log let go of again.

mod common;

use common::*;
use serde_json::json;
use sqlx::Connection;
use std::time::{Duration, Instant};

/// A PostgreSQL server of the test's own with logical WAL, room for
/// `slots` slots and `connections` sessions.
async fn logical_server(slots: u32, connections: u32) -> Option<sluice_testkit::services::OwnPostgres> {
    tokio::task::spawn_blocking(move || {
        sluice_testkit::services::OwnPostgres::start(
            |_| {},
            move |_| {
                vec![
                    "wal_level=logical".into(),
                    format!("max_replication_slots={slots}"),
                    format!("max_connections={connections}"),
                    "max_wal_size=4GB".into(),
                ]
            },
        )
    })
    .await
    .unwrap()
}

/// A table's rows in an order, as one digest and a count.
async fn digest(c: &mut sqlx::PgConnection, table: &str) -> (i64, String) {
    let sql = format!(
        "SELECT count(*), coalesce(md5(string_agg(id || ':' || v || ':' || coalesce(note, ''), ',' ORDER BY id)), '') \
         FROM {table}"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_one(c).await.unwrap_or((-1, String::new()))
}

/// The resident and peak memory of a process, in KiB (`/proc/<pid>/status`).
fn memory(p: &Proc) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The sessions the service holds on a server, by database.
async fn sessions(c: &mut sqlx::PgConnection) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT datname::text, count(*) FROM pg_stat_activity WHERE application_name = 'sluice' \
         GROUP BY datname ORDER BY datname",
    )
    .fetch_all(c)
    .await
    .unwrap()
}

/// A metadata store for one process: a database of its own on the test
/// PostgreSQL, or a SQLite file in the data directory. Answers the data
/// directory, the store's URL, and what drops the database at the end.
async fn store(
    postgres: bool,
    kind: &str,
) -> Option<(std::path::PathBuf, String, Option<(sea_orm::DatabaseConnection, String)>)> {
    if postgres {
        let (admin, name, db, data) = pg_metadata_db(kind).await?;
        std::fs::create_dir_all(&data).unwrap();
        Some((data, db, Some((admin, name))))
    } else {
        let data = std::env::temp_dir()
            .join(format!("sluice-{kind}-{}", sluice_domain::shared::secret::random_base62(8).to_lowercase()));
        std::fs::create_dir_all(&data).unwrap();
        let db = format!("sqlite://{}?mode=rwc", data.join("meta.db").display());
        Some((data, db, None))
    }
}

async fn drop_store(data: &std::path::Path, db: Option<(sea_orm::DatabaseConnection, String)>) {
    if let Some((admin, name)) = db {
        use sea_orm::ConnectionTrait;
        admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(data);
}

/// Waits up to `secs` for every mirror in `sink` to equal its table.
async fn caught_up(
    tables: &[String],
    src: &mut sqlx::PgConnection,
    sink: &mut sqlx::PgConnection,
    secs: u64,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut behind: Vec<&String> = tables.iter().collect();
    while !behind.is_empty() {
        let mut still = Vec::new();
        for t in behind {
            if digest(src, t).await != digest(sink, &format!("public.{t}")).await {
                still.push(t);
            }
        }
        behind = still;
        assert!(Instant::now() < deadline, "{what}: {} mirrors behind, {:?}…", behind.len(), behind.first());
        if !behind.is_empty() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

const FLOWS: usize = 50;

/// Fifty continuous flows on one process, each of one table of a source
/// into a database of the same server: every flow copies its table, then
/// six rounds of changes to every table (inserts, updates, deletes) each
/// reach every mirror while the flows go on. The fifty first copies, each
/// holding a replication connection while it reads, wait for one of the
/// server's ten (`max_wal_senders`) rather than fail. The service's
/// sessions on the server stay about one a flow at most, and its memory
/// from the first round to the last grows by no more than a fifth.
async fn fifty_continuous_flows(postgres_store: bool) {
    let Some(server) = logical_server(FLOWS as u32 + 10, 400).await else { return };
    let Some((data, db, meta)) = store(postgres_store, "fifty").await else { return };
    let mut src = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    exec(&mut src, "CREATE DATABASE sink".into()).await;
    let mut sink = sqlx::PgConnection::connect(&server.url("sink")).await.unwrap();
    let tables: Vec<String> = (0..FLOWS).map(|i| format!("t{i:02}")).collect();
    for t in &tables {
        exec(
            &mut src,
            format!(
                "CREATE TABLE {t} (id bigint PRIMARY KEY, v int NOT NULL, note text);
                 INSERT INTO {t} SELECT g, 0, 'first' FROM generate_series(1, 100) g"
            ),
        )
        .await;
    }
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Fifty"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let pg = |name: &str, database: &str| {
        json!({"name": name, "type": "postgres", "capability": "both", "config": {"host": "127.0.0.1",
            "port": server.port, "database": database, "user": "postgres", "sslmode": "disable"}})
    };
    let s = id(api.post(&conns, pg("src", "postgres")).await);
    let d = id(api.post(&conns, pg("sink", "sink")).await);
    let mut flows = Vec::new();
    for t in &tables {
        flows.push(id(api
            .post(
                &format!("/v1/organizations/{org}/flows"),
                json!({"name": t, "source_connection_id": s, "destination_connection_id": d,
                "config": {"continuous": true, "mappings": [{"source_entity": t, "sync_mode": "cdc_deduped"}]}}),
            )
            .await));
    }
    caught_up(&tables, &mut src, &mut sink, 240, "the first copies").await;
    let mut samples = Vec::new();
    for round in 0..6i64 {
        for t in &tables {
            let (lo, hi) = (1000 + round * 20, 1000 + round * 20 + 19);
            exec(
                &mut src,
                format!(
                    "BEGIN; INSERT INTO {t} SELECT g, {round}, 'r{round}' FROM generate_series({lo}, {hi}) g;
                     UPDATE {t} SET v = v + 1, note = 'u{round}' WHERE id % 6 = {round};
                     DELETE FROM {t} WHERE id BETWEEN {} AND {}; COMMIT",
                    round * 5 + 1,
                    round * 5 + 5
                ),
            )
            .await;
        }
        caught_up(&tables, &mut src, &mut sink, 120, &format!("round {round}")).await;
        let held = sessions(&mut src).await;
        samples.push((round, memory(&proc), held));
    }
    println!("rounds (round, (rss KiB, peak KiB), sessions by database): {samples:?}");
    for (round, _, held) in &samples {
        let total: i64 = held.iter().map(|(_, n)| n).sum();
        // About one a flow at most: the pools are the connections' (not
        // each flow's), and a pass's own session for the slot ends with it.
        assert!(total <= FLOWS as i64 + 16, "round {round}: {total} sessions for {FLOWS} flows: {held:?}");
    }
    let (first, last) = ((samples[0].1).0, (samples[samples.len() - 1].1).0);
    assert!(last <= first + first / 5, "memory grew from {first} KiB to {last} KiB over the rounds: {samples:?}");
    assert!(last < 256 * 1024, "{last} KiB resident for {FLOWS} continuous flows: {samples:?}");
    for flow in &flows {
        let runs = api.get(&format!("/v1/organizations/{org}/flows/{flow}/runs")).await;
        let statuses: Vec<&str> =
            runs["data"].as_array().unwrap().iter().filter_map(|r| r["status"].as_str()).collect();
        assert_eq!(statuses, ["running"], "one run per flow, kept going: {runs}");
    }
    drop(proc);
    drop_store(&data, meta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_continuous_flows_on_one_process_keep_up_with_sessions_and_memory_bounded_on_sqlite() {
    fifty_continuous_flows(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_continuous_flows_on_one_process_keep_up_with_sessions_and_memory_bounded_on_postgres() {
    fifty_continuous_flows(true).await;
}

/// A table's rows by id, the padding as its digest (none while it is missing).
async fn mirror(c: &mut sqlx::PgConnection, table: &str) -> Vec<(i64, i32, String)> {
    let q = format!("SELECT id, v, md5(coalesce(pad, '')) FROM {table} ORDER BY id");
    sqlx::query_as(sqlx::AssertSqlSafe(q)).fetch_all(c).await.unwrap_or_default()
}

/// How long the destination stays away, each time: 40 s, or
/// `SLUICE_TEST_OUTAGE_SECS` (600 for the ten minutes of issue 47).
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
fn outage() -> Duration {
    Duration::from_secs(std::env::var("SLUICE_TEST_OUTAGE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(40))
}

/// A flow's gauge `name` in `/metrics`, if shown.
async fn flow_metric(api: &Api, name: &str, flow: &str) -> Option<u64> {
    let text = api.client.get(format!("{}/metrics", api.base)).send().await.ok()?.text().await.ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l.contains(flow))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

async fn retained_metric(api: &Api, flow: &str) -> Option<u64> {
    flow_metric(api, "sluice_cdc_retained_bytes", flow).await
}

/// The WAL `slot` keeps from its confirmed position, in bytes.
async fn slot_lag(c: &mut sqlx::PgConnection, slot: &str) -> i64 {
    let sql = format!(
        "SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), -1)::bigint \
         FROM pg_replication_slots WHERE slot_name = '{slot}'"
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(c).await.unwrap()
}

/// A continuous flow (a mirror and a change log) whose destination goes
/// away twice while a writer keeps changing the source: first it refuses
/// logins (its sessions ended), then its server is frozen (SIGSTOP: the
/// flow's sessions and new connections hang). Meanwhile the flow is not
/// given up, tries again no more than its backoff says, and the metrics
/// show the log the source keeps for it growing. Once the destination is
/// back, the mirror equals the source, the change log holds each change
/// once, and the slot lets go of the log again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_flow_outlives_its_destination_going_away_and_applies_every_change_once() {
    let Some(source) = logical_server(4, 100).await else { return };
    let Some(dest) =
        tokio::task::spawn_blocking(|| sluice_testkit::services::OwnPostgres::start(|_| {}, |_| vec![])).await.unwrap()
    else {
        return;
    };
    let Some((data, db, meta)) = store(false, "away").await else { return };
    let mut src = sqlx::PgConnection::connect(&source.url("postgres")).await.unwrap();
    exec(&mut src, "CREATE TABLE events (id bigint PRIMARY KEY, v int NOT NULL, pad text)".into()).await;
    let mut root = sqlx::PgConnection::connect(&dest.url("postgres")).await.unwrap();
    exec(&mut root, "CREATE ROLE sinker LOGIN; CREATE SCHEMA sink AUTHORIZATION sinker".into()).await;
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Away"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(
            &conns,
            json!({"name": "src", "type": "postgres", "capability": "source", "config": {"host": "127.0.0.1",
            "port": source.port, "database": "postgres", "user": "postgres", "sslmode": "disable"}}),
        )
        .await);
    let d = id(api
        .post(
            &conns,
            json!({"name": "dst", "type": "postgres", "capability": "destination", "config": {
            "host": "127.0.0.1", "port": dest.port, "database": "postgres", "user": "sinker", "schema": "sink",
            "sslmode": "disable"}}),
        )
        .await);
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "capture", "source_connection_id": s, "destination_connection_id": d,
            "config": {"continuous": true, "mappings": [
                {"source_entity": "events", "sync_mode": "cdc_deduped"},
                {"source_entity": "events", "dest_entity": "events_log", "sync_mode": "cdc_append"}
            ]}}),
        )
        .await);
    let slot = format!("sluice_{}", flow.replace('-', ""));
    let state = format!("/v1/organizations/{org}/flows/{flow}/state");
    let copied = Instant::now() + Duration::from_secs(60);
    while !api.get(&state).await["data"][0]["cursor_value"].is_string() {
        assert!(Instant::now() < copied, "the first copy did not commit");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The writer: transactions of 100 inserts, 100 updates (every tenth
    // value over 2 KB) or deletes, every 50 ms, until told to stop.
    let (stop, writer) = events_writer(source.url("postgres"), 100, Duration::from_millis(50));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs_path = format!("/v1/organizations/{org}/flows/{flow}/runs");
    let runs = || async { api.get(&runs_path).await["data"].as_array().cloned().unwrap_or_default() };
    let before = runs().await.len();

    // Away 1: the destination refuses the flow's role, and ends its sessions.
    exec(
        &mut root,
        "ALTER ROLE sinker NOLOGIN; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'sinker'"
            .into(),
    )
    .await;
    let from: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(&mut src).await.unwrap();
    let metric_from = retained_metric(&api, &flow).await;
    // The metric as each attempt left it, looked at every second.
    let (away, mut metric_max) = (Instant::now(), metric_from);
    while away.elapsed() < outage() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        metric_max = metric_max.max(retained_metric(&api, &flow).await);
    }
    let written: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{from}')::bigint"
    )))
    .fetch_one(&mut src)
    .await
    .unwrap();
    let lag = flow_metric(&api, "sluice_cdc_lag_seconds", &flow).await;
    let during = runs().await;
    exec(&mut root, "ALTER ROLE sinker LOGIN".into()).await;
    let failed: Vec<&serde_json::Value> =
        during[..during.len() - before].iter().filter(|r| r["status"] == "failed").collect();
    println!(
        "refused for {:?}: {} runs ({} failed), {written} bytes of WAL written, metric {metric_from:?} -> {metric_max:?}, \
         lag {lag:?}; first failure: {}",
        outage(),
        during.len() - before,
        failed.len(),
        failed.last().map(|r| r["error"].to_string() + " " + &r["entities"].to_string()).unwrap_or_default()
    );

    // Tried again no more than the backoff says (5 s doubling), each
    // failure saying why; the log kept for the flow shown growing (each
    // failed run looks), and its lag too.
    // Tried again no more than the backoff says (a transient failure's
    // attempt after 30 s, a failed run's next after 5 s doubling), each
    // failure saying why; the log kept for the flow shown growing (each
    // attempt that fails looks), and its lag too.
    let bound = 3 + (outage().as_secs() / 5 + 1).ilog2() as usize;
    assert!(during.len() - before <= bound, "{} runs while away (at most {bound})", during.len() - before);
    // One cause for both mappings, said on the run too.
    for r in failed.iter() {
        assert!(
            r["error"]
                .as_str()
                .unwrap()
                .ends_with("(authentication failed: role \"sinker\" is not permitted to log in)"),
            "{r}"
        );
    }
    for r in &during[..during.len() - before + 1] {
        let said = r.to_string();
        assert!(
            r["status"] == "running" || said.contains("not permitted to log in") || said.contains("ended the session"),
            "{r}"
        );
    }
    let (grown_from, grown_to) = (metric_from.unwrap_or(0), metric_max.unwrap_or(0));
    assert!(
        grown_to >= grown_from + written as u64 / 4,
        "the retained log shown went from {grown_from} to {grown_to} bytes while {written} were written"
    );
    assert!(lag.unwrap_or(0) * 2 >= outage().as_secs(), "lag {lag:?} s after {:?} away", outage());

    // Back: the mirror catches up while the writer goes on.
    tokio::time::sleep(Duration::from_secs(10)).await;

    // Away 2: the destination's server frozen, every process of it.
    let postmaster = std::fs::read_to_string(dest.dir.join("data").join("postmaster.pid")).unwrap();
    let postmaster = postmaster.lines().next().unwrap().trim().to_string();
    let children = std::process::Command::new("pgrep").args(["-P", &postmaster]).output().unwrap();
    let mut pids: Vec<String> =
        String::from_utf8_lossy(&children.stdout).split_whitespace().map(String::from).collect();
    pids.push(postmaster);
    let freeze = |sig: &str| {
        let ok = std::process::Command::new("kill").arg(format!("-{sig}")).args(&pids).status().unwrap();
        assert!(ok.success(), "kill -{sig} {pids:?}");
    };
    freeze("STOP");
    tokio::time::sleep(outage()).await;
    freeze("CONT");
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let changes = writer.await.unwrap();

    // Caught up: the mirror equals the source row for row, the log holds
    // each change once, and the slot keeps little of the log.
    let want = mirror(&mut src, "events").await;
    let mut sink = sqlx::PgConnection::connect(&dest.url("postgres")).await.unwrap();
    let deadline = Instant::now() + outage() + Duration::from_secs(330);
    loop {
        let got = mirror(&mut sink, "sink.events").await;
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "the mirror did not catch up: {} rows of {}", got.len(), want.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let (logged, distinct): (i64, i64) = loop {
        let log: (i64, i64) =
            sqlx::query_as("SELECT count(*), count(DISTINCT (id, _sluice_op, _sluice_position)) FROM sink.events_log")
                .fetch_one(&mut sink)
                .await
                .unwrap();
        if log.0 as u64 >= changes || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!((logged as u64, distinct as u64), (changes, changes), "each change once");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lag = slot_lag(&mut src, &slot).await;
        if (0..16 << 20).contains(&lag) {
            break;
        }
        assert!(Instant::now() < deadline, "the slot keeps {lag} bytes of log after the flow caught up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all = runs().await;
    assert!(all.iter().any(|r| r["status"] == "running"), "the flow goes on: {all:?}");
    println!("runs in all: {}", all.len());
    drop(proc);
    drop_store(&data, meta).await;
}
