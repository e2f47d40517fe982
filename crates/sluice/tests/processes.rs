//! The real `sluice` binary as separate processes: a process killed with
//! SIGKILL in the middle of a large incremental sync resumes after restart
//! with every record exactly once (and a second process on its SQLite store
//! refuses to start meanwhile); two `sluice worker` processes on one
//! PostgreSQL metadata store execute 50 queued runs each exactly once; a
//! run taken over from a frozen worker ends that worker's destination
//! session and finishes while it stays frozen; an API key revoked through
//! one process stops working in another at once; change data capture killed
//! again and again mid-run applies every change exactly once.

mod common;

use common::*;
use serde_json::json;
use sluice_domain::shared::secret::random_base62;
use sqlx::Connection;
use std::time::{Duration, Instant};

const PG_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema of the test's own in database `test`, dropped on drop.
struct PgSchema {
    name: String,
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(PG_TEST_URL).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                        .execute(&mut c)
                        .await;
                }
            })
        })
        .join();
    }
}

/// A fresh schema, or `None` (loudly) when PostgreSQL is unreachable outside CI.
async fn pg_schema() -> Option<PgSchema> {
    match sqlx::PgConnection::connect(PG_TEST_URL).await {
        Ok(mut c) => {
            let name = format!("proc_{}", random_base62(10).to_lowercase());
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}"))).execute(&mut c).await.unwrap();
            Some(PgSchema { name })
        }
        Err(e) => {
            postgres_unreachable(e);
            None
        }
    }
}

/// A fresh data directory and SQLite metadata store for one process test:
/// (data dir, database URL, port, API client).
fn sqlite_service(prefix: &str) -> (std::path::PathBuf, String, u16, Api) {
    let data = std::env::temp_dir().join(format!("sluice-{prefix}-{}", random_base62(8).to_lowercase()));
    std::fs::create_dir_all(&data).unwrap();
    let db = format!("sqlite://{}?mode=rwc", data.join("meta.db").display());
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    (data, db, port, api)
}

/// A PostgreSQL connection body to a schema of database `test`.
fn pg_conn(name: &str, schema: &str) -> serde_json::Value {
    json!({"name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}})
}

/// An organization named `name` with connections to the `src` and `dst`
/// schemas and a flow between them with one `mapping`: (org id, flow id).
async fn org_with_pg_flow(api: &Api, name: &str, src: &str, dst: &str, mapping: serde_json::Value) -> (String, String) {
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": name})).await);
    let s = id(api.post(&format!("/v1/organizations/{org}/connections"), pg_conn("src", src)).await);
    let d = id(api.post(&format!("/v1/organizations/{org}/connections"), pg_conn("dst", dst)).await);
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "sync", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [mapping]}}),
        )
        .await);
    (org, flow)
}

/// An empty `events` table in `dst` shaped like the source's: a load into
/// an existing table stages and checkpoints, where a first load into no
/// table copies in bulk with no checkpoint to stop at.
async fn existing_target(pg: &mut sqlx::PgConnection, src: &str, dst: &str) {
    exec(pg, format!("CREATE TABLE {dst}.events (LIKE {src}.events INCLUDING ALL)")).await;
}

#[tokio::test]
async fn a_sync_killed_with_sigkill_resumes_after_restart_with_every_record_once() {
    let Some(src) = pg_schema().await else { return };
    let Some(dst) = pg_schema().await else { return };
    const ROWS: i64 = 400_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    existing_target(&mut pg, &src.name, &dst.name).await;

    let (data, db, port, api) = sqlite_service("crash");
    let first = serve(&["serve"], &env(&data, &db, port), &api).await;

    let (org, flow) = org_with_pg_flow(
        &api,
        "Crash",
        &src.name,
        &dst.name,
        json!({"source_entity": "events",
        "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}),
    )
    .await;
    let run = api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Wait for a checkpoint (a stored cursor) while the run is still going, then kill.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = api.get(&format!("/v1/organizations/{org}/flows/{flow}/state")).await;
        let status = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await["status"].clone();
        assert_ne!(status, "succeeded", "the sync ended before it could be interrupted; make it larger");
        if state["data"][0]["cursor_value"].is_string() && status == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint within 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second process on the same SQLite store refuses to start, whether
    // its port is taken or free, and leaves the live run alone.
    for other_port in [port, free_port()] {
        let (ok, err) = run_to_end(&["serve"], &env(&data, &db, other_port));
        assert!(!ok, "a second serve on the same store started");
        let why = if other_port == port { "binding" } else { "another sluice process is using the SQLite store" };
        assert!(err.contains(why), "{err}");
    }
    let (ok, err) = run_to_end(&["worker"], &env(&data, &db, free_port()));
    assert!(!ok && err.contains("another sluice process"), "{err}");
    let live = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
    assert_eq!(live["status"], "running", "{live}");
    let logs = api.get(&format!("/v1/organizations/{org}/logs/{run}")).await;
    assert!(!logs.to_string().contains("queued again"), "the live run was re-queued: {logs}");
    drop(first); // SIGKILL
    let (copied,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {}.events", dst.name)))
        .fetch_one(&mut pg)
        .await
        .unwrap();
    assert!(copied > 0 && copied < ROWS, "killed mid-sync with {copied} of {ROWS} rows committed");

    // Restart: the interrupted run is queued again and finishes from its checkpoint.
    let _second = serve(&["serve"], &env(&data, &db, port), &api).await;
    let done = succeeded(&api, &org, &run, 300, "the resumed run did not finish").await;
    assert!(done["entities"][0]["cursor_before"].is_string(), "resumed from the checkpoint: {done}");
    assert!(
        done["entities"][0]["rows_read"].as_i64().unwrap() < ROWS,
        "read from the checkpoint on, not from the start: {done}"
    );
    let (count, distinct): (i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*), count(DISTINCT id) FROM {}.events", dst.name)))
            .fetch_one(&mut pg)
            .await
            .unwrap();
    assert_eq!((count, distinct), (ROWS, ROWS), "every source record exactly once");
    let logs = api.get(&format!("/v1/organizations/{org}/logs/{run}")).await;
    assert!(
        logs["data"].as_array().unwrap().iter().any(|l| l["message"].as_str().unwrap().contains("queued again")),
        "{logs}"
    );
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn two_worker_processes_execute_fifty_runs_each_exactly_once() {
    use sea_orm::ConnectionTrait;
    let Some((admin, name, db, data)) = pg_metadata_db("scale").await else { return };

    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let _api_proc = serve(&["serve", "--no-worker"], &env(&data, &db, port), &api).await;
    let org = api.post("/v1/organizations", json!({"name": "Scale"})).await["id"].as_str().unwrap().to_string();
    let files = data.join("files").join(&org);
    std::fs::create_dir_all(files.join("in")).unwrap();
    std::fs::write(files.join("in/items.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    let c = api
        .post(
            &format!("/v1/organizations/{org}/connections"),
            json!({"name": "files", "type": "file", "capability": "both", "config": {"path": "in"}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut flows = Vec::new();
    for i in 0..10 {
        let f = api
            .post(&format!("/v1/organizations/{org}/flows"), json!({"name": format!("f{i}"), "source_connection_id": c, "destination_connection_id": c,
                "config": {"mappings": [{"source_entity": "items", "dest_entity": format!("out_{i}"), "sync_mode": "full_refresh_append"}]}}))
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        flows.push(f);
    }
    // 50 runs queued before any worker exists.
    let mut runs = Vec::new();
    for f in &flows {
        for _ in 0..5 {
            runs.push(
                api.post(&format!("/v1/organizations/{org}/flows/{f}/run"), json!({})).await["id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    let w1 = spawn(&["worker"], &env(&data, &db, free_port()));
    let w2 = spawn(&["worker"], &env(&data, &db, free_port()));
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut finished = 0;
        for r in &runs {
            let s = api.get(&format!("/v1/organizations/{org}/runs/{r}")).await["status"].clone();
            assert!(s != "failed", "run {r} failed");
            if s == "succeeded" {
                finished += 1;
            }
        }
        if finished == runs.len() {
            break;
        }
        assert!(Instant::now() < deadline, "{finished} of 50 runs finished in 180 s");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop((w1, w2));
    // Exactly once, in the data: five appends of two records per flow.
    for i in 0..10 {
        let lines = std::fs::read_to_string(files.join(format!("in/out_{i}.jsonl"))).unwrap().lines().count();
        assert_eq!(lines, 10, "out_{i}: each of its 5 runs appended once");
    }
    // And in the logs: one start per run; both processes worked.
    for r in &runs {
        let logs = api.get(&format!("/v1/organizations/{org}/logs/{r}")).await;
        let starts = logs["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["message"].as_str().unwrap().starts_with("run started"))
            .count();
        assert_eq!(starts, 1, "run {r} started {starts} times");
    }
    let meta = sea_orm::Database::connect(&db).await.unwrap();
    let rows = meta
        .query_all_raw(sea_orm::Statement::from_string(
            meta.get_database_backend(),
            "SELECT claimed_by, count(*) AS n FROM runs GROUP BY claimed_by",
        ))
        .await
        .unwrap();
    let per_worker: Vec<(String, i64)> =
        rows.iter().map(|r| (r.try_get("", "claimed_by").unwrap(), r.try_get("", "n").unwrap())).collect();
    eprintln!("runs per worker: {per_worker:?}");
    assert_eq!(per_worker.len(), 2, "both worker processes claimed runs: {per_worker:?}");
    assert_eq!(per_worker.iter().map(|(_, n)| n).sum::<i64>(), 50);
    meta.close().await.ok();
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn an_append_killed_mid_load_is_committed_once_and_a_keyed_source_appends_again() {
    let Some(src) = pg_schema().await else { return };
    let Some(dst) = pg_schema().await else { return };
    const ROWS: i64 = 1_000_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    exec(
        &mut pg,
        format!(
            "CREATE TABLE {s}.items (id bigint PRIMARY KEY, payload text NOT NULL);
             INSERT INTO {s}.items SELECT g, 'item number ' || g FROM generate_series(1, {ROWS}) g;",
            s = src.name
        ),
    )
    .await;
    let (data, db, port, api) = sqlite_service("append");
    let first = serve(&["serve"], &env(&data, &db, port), &api).await;
    let (org, flow) = org_with_pg_flow(
        &api,
        "Append",
        &src.name,
        &dst.name,
        json!({"source_entity": "items", "sync_mode": "full_refresh_append"}),
    )
    .await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let count_sql = format!("SELECT count(*) FROM {}.items", dst.name);
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    // Kill while the load is under way: the worker is copying (PostgreSQL
    // shows the COPY) and the run is still running.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (copying,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sluice' AND query ILIKE 'COPY%' AND state = 'active'",
        )
        .fetch_one(&mut pg)
        .await
        .unwrap();
        let status = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await["status"].clone();
        assert_ne!(status, "succeeded", "the append ended before it could be interrupted; make it larger");
        if copying > 0 && status == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "no load under way within 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(first); // SIGKILL
    assert_eq!(count_rows(&mut pg, &count_sql).await, 0, "an interrupted append commits nothing");

    let _second = serve(&["serve"], &env(&data, &db, port), &api).await;
    let wait = |run: String| {
        let api = &api;
        let org = &org;
        async move {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
                if r["status"] == "succeeded" {
                    return r;
                }
                assert!(!["failed", "canceled"].contains(&r["status"].as_str().unwrap()), "{r}");
                assert!(Instant::now() < deadline, "the run did not finish: {r}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait(run).await;
    assert_eq!(count_rows(&mut pg, &count_sql).await, ROWS, "the resumed append committed the copy once");
    // The destination holds no unique key, so the next copy appends.
    let again = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    wait(again).await;
    assert_eq!(count_rows(&mut pg, &count_sql).await, 2 * ROWS, "a second full copy appended");
    let _ = std::fs::remove_dir_all(&data);
}

/// Creates `schema.events` with `rows` rows, one second apart.
async fn seed_events(pg: &mut sqlx::PgConnection, schema: &str, rows: i64) {
    exec(
        pg,
        format!(
            "CREATE TABLE {schema}.events (id bigint PRIMARY KEY, payload text NOT NULL, updated timestamptz NOT NULL);
             INSERT INTO {schema}.events SELECT g, 'event number ' || g, timestamptz '2026-01-01' + g * interval '1 second' FROM generate_series(1, {rows}) g;"
        ),
    )
    .await;
}

/// Waits up to `secs` for `run` to succeed (failing on a failure or a
/// cancel, or with `late` when it takes longer); answers the run.
async fn succeeded(api: &Api, org: &str, run: &str, secs: u64, late: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
        if r["status"] == "succeeded" {
            return r;
        }
        assert!(!["failed", "canceled"].contains(&r["status"].as_str().unwrap()), "{r}");
        assert!(Instant::now() < deadline, "{late}: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Rows `sql` counts, 0 when its table does not exist.
async fn count_rows(pg: &mut sqlx::PgConnection, sql: &str) -> i64 {
    let r: Result<(i64,), _> = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_string())).fetch_one(pg).await;
    r.map(|(n,)| n).unwrap_or(0)
}

/// Sends SIGTERM and waits (up to 60 s) for a clean exit; answers the
/// process's log.
async fn terminate(p: &mut Proc, log: &std::path::Path) -> String {
    signal(p, "TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the process did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "a clean exit: {status:?}");
    std::fs::read_to_string(log).unwrap()
}

#[tokio::test]
async fn a_frozen_worker_whose_run_was_taken_over_writes_nothing_more() {
    use sea_orm::ConnectionTrait;
    let Some((admin, name, db, data)) = pg_metadata_db("fence").await else { return };
    let Some(src) = pg_schema().await else { return };
    let Some(dst) = pg_schema().await else { return };
    const ROWS: i64 = 1_000_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    std::fs::create_dir_all(&data).unwrap();
    // A short lease, so that the take-over comes within seconds.
    let env_with = |port: u16| {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let _api_proc = serve(&["serve", "--no-worker"], &env_with(port), &api).await;
    // Through rows (a transform), so the load checkpoints often.
    let (org, flow) = org_with_pg_flow(
        &api,
        "Fence",
        &src.name,
        &dst.name,
        json!({"source_entity": "events",
        "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id",
        "transform": [{"op": "set", "field": "copied", "value": true}]}),
    )
    .await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    let first_log = data.join("first.log");
    let first = spawn_logged(&["worker"], &env_with(free_port()), &first_log);
    // Freeze the first worker in the middle of the run (after a checkpoint).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let state = api.get(&format!("/v1/organizations/{org}/flows/{flow}/state")).await;
        let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
        assert_ne!(r["status"], "succeeded", "the sync ended before it could be frozen; make it larger");
        if state["data"][0]["cursor_value"].is_string() && r["status"] == "running" {
            assert_eq!(r["attempt"], 1, "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint within 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&first, "STOP");
    // A second worker takes the run over once the lease runs out.
    let _second = spawn(&["worker"], &env_with(free_port()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
        if r["attempt"] == 2 && r["status"] == "running" {
            break;
        }
        assert_ne!(r["status"], "succeeded", "{r}");
        assert!(Instant::now() < deadline, "the run was not taken over: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The second attempt ends the frozen one's destination session (whose
    // open transaction holds its locks) and finishes while the first
    // worker stays frozen; then the first wakes.
    let done = succeeded(&api, &org, &run, 300, "the run did not finish while the first worker stayed frozen").await;
    signal(&first, "CONT");
    // Give the first worker time to do anything it still would: it must
    // stop within one heartbeat (half a second here) of waking.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
    let first_said = std::fs::read_to_string(&first_log).unwrap();
    assert!(
        first_said.contains("this attempt stopped") || first_said.contains("execution stopped"),
        "the first worker did not notice it lost the run: {first_said}"
    );
    assert_eq!(after, done, "the run record changed after the second attempt ended");
    assert_eq!(done["attempt"], 2, "{done}");
    assert!(
        done["entities"][0]["rows_written"].as_i64().unwrap()
            >= ROWS - done["entities"][0]["rows_read"].as_i64().unwrap()
    );
    let logs = api.get(&format!("/v1/organizations/{org}/logs/{run}")).await;
    let lines: Vec<&str> = logs["data"].as_array().unwrap().iter().map(|l| l["message"].as_str().unwrap()).collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("run succeeded")).count(), 1, "{lines:#?}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("run started")).count(), 2, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("queued again")), "a take-over line: {lines:#?}");
    assert!(
        lines.iter().any(|l| l.starts_with("ended 1 destination session(s)")),
        "the take-over ended the frozen attempt's session: {lines:#?}"
    );
    // The recovering process logs the take-over after re-queueing, so the
    // new attempt's first line may come before it; what matters is that
    // nothing of the first attempt (which read from no cursor) follows the
    // second attempt's start.
    let second_start = lines.iter().rposition(|l| l.starts_with("run started")).expect("two starts");
    assert!(
        !lines[second_start..].iter().any(|l| l.starts_with("reading everything")),
        "after the take-over only the second attempt writes: {lines:#?}"
    );
    let (count, distinct): (i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*), count(DISTINCT id) FROM {}.events", dst.name)))
            .fetch_one(&mut pg)
            .await
            .unwrap();
    assert_eq!((count, distinct), (ROWS, ROWS), "every source record exactly once");
    drop(first);
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn sigterm_pauses_an_incremental_run_at_its_next_checkpoint_and_it_resumes_with_every_record_once() {
    let Some(src) = pg_schema().await else { return };
    let Some(dst) = pg_schema().await else { return };
    const ROWS: i64 = 600_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    existing_target(&mut pg, &src.name, &dst.name).await;
    let (data, db, port, api) = sqlite_service("pause");
    let log = data.join("serve.log");
    let mut first = spawn_logged(&["serve"], &env(&data, &db, port), &log);
    wait_healthy(&api.client, &api.base).await;
    let (org, flow) = org_with_pg_flow(
        &api,
        "Pause",
        &src.name,
        &dst.name,
        json!({"source_entity": "events", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}),
    )
    .await;
    let run = api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A first checkpoint while the run goes on, then SIGTERM.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
        assert_ne!(r["status"], "succeeded", "the sync ended before it could be stopped; make it larger");
        if r["status"] == "running" && r["entities"][0]["checkpoint_at"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint within 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = terminate(&mut first, &log).await;
    assert!(text.contains("run paused at a checkpoint; queued again"), "{text}");
    assert!(!text.contains("stopped with a run in progress"), "it did not wait out the grace: {text}");
    let copied = count_rows(&mut pg, &format!("SELECT count(*) FROM {}.events", dst.name)).await;
    assert!(copied > 0 && copied < ROWS, "paused mid-sync with {copied} of {ROWS} rows committed");

    // Started again: queued in a new attempt, it resumes from the cursor.
    let _second = serve(&["serve"], &env(&data, &db, port), &api).await;
    let done = succeeded(&api, &org, &run, 300, "the resumed run did not finish").await;
    assert_eq!(done["attempt"], 2, "{done}");
    assert!(done["entities"][0]["cursor_before"].is_string(), "resumed from the checkpoint: {done}");
    // Both attempts' rows count (records within the lookback behind the
    // cursor are read and upserted again: docs/sync.md).
    let written = done["entities"][0]["rows_written"].as_i64().unwrap();
    assert!(written >= ROWS, "rows of both attempts counted: {done}");
    assert!(done["entities"][0]["rows_read"].as_i64().unwrap() < ROWS, "read from the checkpoint on: {done}");
    let (count, distinct): (i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*), count(DISTINCT id) FROM {}.events", dst.name)))
            .fetch_one(&mut pg)
            .await
            .unwrap();
    assert_eq!((count, distinct), (ROWS, ROWS), "every source record exactly once");
    let logs = api.get(&format!("/v1/organizations/{org}/logs/{run}")).await.to_string();
    assert!(logs.contains("paused after a checkpoint"), "{logs}");
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn sigterm_lets_the_run_in_progress_end_and_takes_no_more() {
    let Some(src) = pg_schema().await else { return };
    let Some(dst) = pg_schema().await else { return };
    const ROWS: i64 = 400_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    let (data, db, port, api) = sqlite_service("sigterm");
    let log = data.join("serve.log");
    let mut first = spawn_logged(&["serve"], &env(&data, &db, port), &log);
    wait_healthy(&api.client, &api.base).await;
    let (org, flow) = org_with_pg_flow(
        &api,
        "Term",
        &src.name,
        &dst.name,
        json!({"source_entity": "events", "sync_mode": "full_refresh_overwrite"}),
    )
    .await;
    let run = api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let queued = api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get(&format!("/v1/organizations/{org}/runs/{run}")).await["status"] != "running" {
        assert!(Instant::now() < deadline, "the run did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = terminate(&mut first, &log).await;
    assert!(text.contains("pauses at its next checkpoint") && text.contains("stopped"), "{text}");

    // Started again: the run ended succeeded before the stop, whole; the
    // queued one was not taken by the stopping process.
    let _second = serve(&["serve", "--no-worker"], &env(&data, &db, port), &api).await;
    let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(count_rows(&mut pg, &format!("SELECT count(*) FROM {}.events", dst.name)).await, ROWS);
    assert_eq!(api.get(&format!("/v1/organizations/{org}/runs/{queued}")).await["status"], "queued");
    let _ = std::fs::remove_dir_all(&data);
}

/// On one PostgreSQL store, an API key revoked through one process stops
/// working in another within 100 ms of the revocation's answer (the other
/// process's cache is dropped by the store's notification; before, it
/// served the key for up to a second).
#[tokio::test]
async fn a_revoked_key_stops_working_in_every_process_at_once() {
    use sea_orm::ConnectionTrait;
    let Some((admin, name, db, data)) = pg_metadata_db("revoke").await else { return };
    let (pa, pb) = (free_port(), free_port());
    let a = Api { client: client(), base: format!("http://127.0.0.1:{pa}"), token: token() };
    let b = Api { client: a.client.clone(), base: format!("http://127.0.0.1:{pb}"), token: token() };
    let _a_proc = serve(&["serve"], &env(&data, &db, pa), &a).await;
    let _b_proc = serve(&["serve", "--no-worker"], &env(&data, &db, pb), &b).await;
    let org = a.post("/v1/organizations", json!({"name": "Revoke"})).await["id"].as_str().unwrap().to_string();
    let with_key = |key: &str| {
        b.client.get(format!("{}/v1/organizations/{org}/flows", b.base)).header("X-Api-Key", key.to_string()).send()
    };
    for trial in 0..5 {
        let k = a
            .post(
                &format!("/v1/organizations/{org}/api-keys"),
                json!({"name": format!("k{trial}"), "roles": ["Admin"]}),
            )
            .await;
        let (id, key) = (k["id"].as_str().unwrap().to_string(), k["key"].as_str().unwrap().to_string());
        // Process B knows the key (and caches it).
        assert_eq!(with_key(&key).await.unwrap().status().as_u16(), 200);
        let (s, body) = a.call(reqwest::Method::DELETE, &format!("/v1/organizations/{org}/api-keys/{id}"), None).await;
        assert_eq!(s, 204, "{body}");
        let revoked = Instant::now();
        loop {
            let status = with_key(&key).await.unwrap().status().as_u16();
            if status == 401 {
                break;
            }
            assert_eq!(status, 200);
            let waited = revoked.elapsed();
            assert!(
                waited < Duration::from_millis(100),
                "trial {trial}: the revoked key still worked after {waited:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(with_key(&key).await.unwrap().status().as_u16(), 401, "and stays revoked");
    }
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    let _ = std::fs::remove_dir_all(&data);
}

/// The records of a JSON Lines file `<entity>.jsonl` in `dir` (none when
/// it is not there yet).
fn jsonl(dir: &std::path::Path, entity: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join(format!("{entity}.jsonl"))).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The CDC crash tests' mirror `events` in `dir`, as (id, v, padding), by id.
fn lake_rows(dir: &std::path::Path) -> Vec<(i64, i32, String)> {
    let mut got: Vec<(i64, i32, String)> = jsonl(dir, "events")
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r["v"].as_i64().unwrap() as i32, r["pad"].as_str().unwrap_or("").into()))
        .collect();
    got.sort();
    got
}

/// The CDC crash tests' change log `events_log` in `dir`: its changes, and
/// how many of them differ in key, operation or position.
fn lake_log(dir: &std::path::Path) -> (i64, i64) {
    let log = jsonl(dir, "events_log");
    let distinct: std::collections::HashSet<String> =
        log.iter().map(|r| format!("{} {} {}", r["id"], r["_sluice_op"], r["_sluice_position"])).collect();
    (log.len() as i64, distinct.len() as i64)
}

/// Where `change_capture_killed_again_and_again` applies the changes.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    /// PostgreSQL, with SQLite metadata.
    Postgres,
    /// MariaDB, with PostgreSQL metadata.
    Mariadb,
    /// JSON Lines files, with SQLite metadata.
    Files,
    /// A DuckLake (a SQLite catalog, a data folder), with SQLite metadata.
    DuckLake,
}

/// Change data capture from a PostgreSQL source of the test's own
/// (`wal_level = logical`) while the process is killed with SIGKILL again
/// and again mid-run: 600,000 changes (inserts, updates with values over
/// 2 KB, deletes) in 600 transactions; afterwards the mirror equals the
/// source row for row and the change log holds each change once. On the
/// SQLite store into PostgreSQL and into JSON Lines files, and on a
/// PostgreSQL store into MariaDB (a third of the load for MariaDB and files:
/// 200,000 changes).
async fn change_capture_killed_again_and_again(into: Target) {
    /// A row as compared: id, value, the padding (its digest in a database).
    type Row = (i64, i32, String);
    let postgres_store = into == Target::Mariadb;
    let Some(dst) = pg_schema().await else { return };
    let mariadb = if postgres_store {
        let mut my = match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
            Ok(my) => my,
            Err(e) => {
                sluice_testkit::services::unavailable("MariaDB on 127.0.0.1:3306", e, "start it");
                return;
            }
        };
        let name = format!("cdc_{}", random_base62(8).to_lowercase());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut my).await.unwrap();
        Some((my, name))
    } else {
        None
    };
    let Some(source) = tokio::task::spawn_blocking(|| {
        sluice_testkit::services::OwnPostgres::start(
            |_| {},
            |_| vec!["wal_level=logical".into(), "max_replication_slots=4".into(), "max_wal_size=4GB".into()],
        )
    })
    .await
    .unwrap() else {
        return;
    };
    let mut src = sqlx::PgConnection::connect(&source.url("postgres")).await.unwrap();
    exec(&mut src, "CREATE TABLE events (id bigint PRIMARY KEY, v int NOT NULL, pad text)".into()).await;
    // A second table keeps the stream going while events is copied again.
    exec(&mut src, "CREATE TABLE marker (id int PRIMARY KEY); INSERT INTO marker VALUES (1)".into()).await;
    let mut store = None;
    let (data, db, port, api) = if postgres_store {
        let Some((admin, name, db, data)) = pg_metadata_db("cdc").await else { return };
        std::fs::create_dir_all(&data).unwrap();
        store = Some((admin, name));
        let port = free_port();
        (data, db, port, Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() })
    } else {
        sqlite_service("cdc-crash")
    };
    // A short lease on the shared store, so that a killed run is taken
    // over within seconds (the SQLite store's one process takes it back
    // when it starts).
    let environment = {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let mut proc = Some(serve(&["serve"], &environment, &api).await);
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Capture"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(&conns, json!({"name": "src", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "postgres", "user": "postgres", "sslmode": "disable"}}))
        .await);
    let d = match &mariadb {
        Some((_, name)) => id(api
            .post(
                &conns,
                json!({"name": "dst", "type": "mysql", "capability": "both",
                "config": {"host": "127.0.0.1", "database": name, "user": "root"}}),
            )
            .await),
        None if into == Target::Files => id(api
            .post(&conns, json!({"name": "dst", "type": "file", "capability": "both", "config": {"path": "lake"}}))
            .await),
        None if into == Target::DuckLake => id(api
            .post(
                &conns,
                json!({"name": "dst", "type": "ducklake", "capability": "destination", "config": {
                "catalog": {"type": "sqlite", "path": "lake/catalog.sqlite"}, "data_path": "lake/data",
                "file_size_mb": 4}}),
            )
            .await),
        None => id(api.post(&conns, pg_conn("dst", &dst.name)).await),
    };
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "capture", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "sync_mode": "cdc_deduped"},
                {"source_entity": "events", "dest_entity": "events_log", "sync_mode": "cdc_append"},
                {"source_entity": "marker", "sync_mode": "cdc_deduped"}
            ]}}),
        )
        .await);
    let trigger = |api: &Api| {
        let path = format!("/v1/organizations/{org}/flows/{flow}/run");
        let api = Api { client: api.client.clone(), base: api.base.clone(), token: api.token.clone() };
        async move { api.post(&path, json!({})).await["id"].as_str().unwrap().to_string() }
    };
    // Into PostgreSQL, the first copy is killed on the way: 100,000 rows
    // of 1 KB that it loads in bulk, in one transaction. The attempt that
    // takes the run over copies the table in chunks instead, each one
    // committed, so that another kill would not begin it all again.
    let seeded: i64 = if into == Target::Postgres { 100_000 } else { 0 };
    exec(&mut src, format!("INSERT INTO events SELECT -g, 0, repeat('s', 1000) FROM generate_series(1, {seeded}) g"))
        .await;
    let first = trigger(&api).await;
    if seeded > 0 {
        let logs = format!("/v1/organizations/{org}/logs/{first}");
        let deadline = Instant::now() + Duration::from_secs(60);
        // A line of the log about `events`.
        let says = |logs: &serde_json::Value, what: &str| {
            logs["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["entity"] == "events" && l["message"].as_str().is_some_and(|m| m.starts_with(what)))
        };
        while !says(&api.get(&logs).await, "copying the table in a snapshot") {
            assert!(Instant::now() < deadline, "the first copy did not begin");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(proc.take());
        let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
        let held: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {}._sluice_positions WHERE entity = 'events'",
            dst.name
        )))
        .fetch_one(&mut pg)
        .await
        .unwrap();
        assert_eq!(held, 0, "the kill came after the first copy committed: make the table larger");
        proc = Some(serve(&["serve"], &environment, &api).await);
        succeeded(&api, &org, &first, 300, "the first copy did not finish after the kill").await;
        let logs = api.get(&logs).await;
        assert!(says(&logs, "copying the table in chunks of 20000 rows"), "{logs}");
    } else {
        succeeded(&api, &org, &first, 120, "the first copy did not finish").await;
    }

    // Two rounds of load, each 150 transactions of 1,000 inserts, 100 of
    // 1,000 updates (every tenth value over 2 KB, stored out of line) and 50
    // of 1,000 deletes; each round's run killed after each of its first two
    // commits (a run whose worker is lost three times is given up), then
    // resumed after a restart.
    let mut changes = 0i64;
    let mut kills = 0;
    let state = format!("/v1/organizations/{org}/flows/{flow}/state");
    let position = |s: &serde_json::Value| s["data"][0]["cursor_value"].as_str().map(str::to_string);
    // MariaDB applies upserts slower, and a file is written again whole at
    // each commit: a third of the load, in one round.
    let (rounds, scale) = if into != Target::Postgres { (1i64, 3) } else { (2i64, 1) };
    for round in 0..rounds {
        let base = round * 150_000;
        for t in 0..150 / scale {
            let (lo, hi) = (base + t * 1000 + 1, base + t * 1000 + 1000);
            exec(&mut src, format!("INSERT INTO events SELECT g, 0, NULL FROM generate_series({lo}, {hi}) g")).await;
            changes += 1000;
        }
        for t in 0..100 / scale {
            let (lo, hi) = (base + t * 1000 + 1, base + t * 1000 + 1000);
            exec(
                &mut src,
                format!(
                    "UPDATE events SET v = v + 1, pad = CASE WHEN id % 10 = 0 THEN \
                     (SELECT string_agg(md5(id::text || i::text), '') FROM generate_series(1, 80) i) ELSE 'p' END \
                     WHERE id BETWEEN {lo} AND {hi}"
                ),
            )
            .await;
            changes += 1000;
        }
        for t in 0..50 / scale {
            let (lo, hi) = (base + 100_000 / scale + t * 1000 + 1, base + 100_000 / scale + t * 1000 + 1000);
            exec(&mut src, format!("DELETE FROM events WHERE id BETWEEN {lo} AND {hi}")).await;
            changes += 1000;
        }
        let run = trigger(&api).await;
        let mut seen = position(&api.get(&state).await);
        let mut killed = 0;
        let deadline = Instant::now() + Duration::from_secs(600);
        while killed < 2 {
            let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
            if r["status"] == "succeeded" {
                break;
            }
            assert!(!["failed", "canceled"].contains(&r["status"].as_str().unwrap()), "{r}");
            let now = position(&api.get(&state).await);
            if now != seen && r["status"] == "running" {
                // SIGKILL right after a commit, or a little later, mid-write.
                tokio::time::sleep(Duration::from_millis([0, 150, 60, 300][(kills + killed) % 4])).await;
                drop(proc.take());
                killed += 1;
                seen = now;
                proc = Some(serve(&["serve"], &environment, &api).await);
            }
            assert!(Instant::now() < deadline, "no progress within 600 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        kills += killed;
        succeeded(&api, &org, &run, 600, "the resumed run did not finish").await;
    }
    assert!(kills >= rounds as usize, "the runs ended before they could be killed ({kills} kills)");
    // A third of the load leaves about 34,000 rows: two chunks, and the
    // second could end between two looks (it did once in CI). 60,000 more,
    // streamed by the last run, make the copy again five chunks long.
    if into != Target::Postgres {
        exec(&mut src, "INSERT INTO events SELECT g, 0, NULL FROM generate_series(1000001, 1060000) g".to_string())
            .await;
        changes += 60_000;
    }
    let last = trigger(&api).await;
    succeeded(&api, &org, &last, 120, "the last run did not finish").await;

    // Copied again (`DELETE …/state`), in chunks while the stream goes on
    // for the other table, killed after each of its first two chunks: it
    // goes on from the last chunk committed.
    let (status, _) = api.call(reqwest::Method::DELETE, &format!("{state}/events"), None).await;
    assert_eq!(status, 204);
    let recopy = trigger(&api).await;
    // The mirror's chunks (the change log of the same table, copied whole,
    // shows as done: its copy is one commit).
    let chunks = |s: &serde_json::Value| {
        let snapshot = &s["data"][0]["snapshot"];
        if snapshot["state"] == "running" { snapshot["chunks_done"].as_u64().unwrap_or(0) } else { 0 }
    };
    let mut seen = 0;
    let mut killed = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while killed < 2 {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{recopy}")).await;
        if r["status"] == "succeeded" {
            break;
        }
        assert!(!["failed", "canceled"].contains(&r["status"].as_str().unwrap()), "{r}");
        let now = chunks(&api.get(&state).await);
        if now > seen && r["status"] == "running" {
            tokio::time::sleep(Duration::from_millis([0, 150][killed % 2])).await;
            drop(proc.take());
            killed += 1;
            seen = now;
            proc = Some(serve(&["serve"], &environment, &api).await);
        }
        assert!(Instant::now() < deadline, "no chunk within 600 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(killed >= 1, "the copy ended before it could be killed");
    kills += killed;
    succeeded(&api, &org, &recopy, 600, "the resumed copy did not finish").await;
    let logs = api.get(&format!("/v1/organizations/{org}/logs/{recopy}")).await;
    assert!(
        logs["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("the copy in chunks goes on after chunk"))),
        "{logs}"
    );

    // The mirror equals the source row for row; the change log has each
    // change once.
    let rows = "SELECT id, v, md5(coalesce(pad, '')) FROM events ORDER BY id";
    let want: Vec<Row> = match into {
        Target::Files | Target::DuckLake => sqlx::query_as("SELECT id, v, coalesce(pad, '') FROM events ORDER BY id"),
        _ => sqlx::query_as(rows),
    }
    .fetch_all(&mut src)
    .await
    .unwrap();
    let (got, (logged, distinct)): (Vec<Row>, (i64, i64)) = match mariadb {
        None if into == Target::Files => {
            let lake = data.join("files").join(&org).join("lake");
            (lake_rows(&lake), lake_log(&lake))
        }
        None if into == Target::DuckLake => {
            let python = sluice_testkit::services::lake_python().expect("checked at the start");
            let lake = std::fs::canonicalize(data.join("files").join(&org).join("lake")).unwrap();
            let (catalog, folder) = (lake.join("catalog.sqlite"), lake.join("data"));
            let read = |sql: &str| sluice_testkit::services::ducklake_query(&python, &catalog, &folder, sql);
            let rows = read("SELECT id, v, coalesce(pad, '') FROM lake.main.events ORDER BY id");
            let got: Vec<Row> = rows
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap() as i32, r[2].as_str().unwrap().to_string()))
                .collect();
            let log = read(
                "SELECT count(*), count(DISTINCT id::VARCHAR || ' ' || _sluice_op || ' ' || _sluice_position) \
                 FROM lake.main.events_log",
            );
            // What killed attempts put and no snapshot names is gone: every
            // file left is named by the catalog (live, or ended and kept
            // for time travel).
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", catalog.display())).await.unwrap();
            let named: Vec<(String,)> =
                sqlx::query_as("SELECT path FROM ducklake_data_file UNION ALL SELECT path FROM ducklake_delete_file")
                    .fetch_all(&mut c)
                    .await
                    .unwrap();
            for table in ["events", "events_log"] {
                for f in std::fs::read_dir(folder.join("main").join(table)).unwrap().filter_map(|e| e.ok()) {
                    let name = f.file_name().to_string_lossy().to_string();
                    assert!(named.iter().any(|(n,)| *n == name), "{table}/{name} is named by no snapshot");
                }
            }
            (got, (log[0][0].as_i64().unwrap(), log[0][1].as_i64().unwrap()))
        }
        Some((mut my, name)) => {
            let got = sqlx::query_as(sqlx::AssertSqlSafe(rows.replace("events", &format!("{name}.events"))))
                .fetch_all(&mut my)
                .await
                .unwrap();
            let log = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT id, _sluice_op, _sluice_position) FROM {name}.events_log"
            )))
            .fetch_one(&mut my)
            .await
            .unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}"))).execute(&mut my).await.unwrap();
            (got, log)
        }
        None => {
            let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
            let got = sqlx::query_as(sqlx::AssertSqlSafe(rows.replace("events", &format!("{}.events", dst.name))))
                .fetch_all(&mut pg)
                .await
                .unwrap();
            let log = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT (id, _sluice_op, _sluice_position)) FROM {}.events_log",
                dst.name
            )))
            .fetch_one(&mut pg)
            .await
            .unwrap();
            (got, log)
        }
    };
    assert_eq!(got.len(), want.len(), "after {kills} kills");
    assert!(got == want, "the mirror equals the source row for row, after {kills} kills");
    // The change log gained the first copy's rows and the copy again's as
    // inserts, once each.
    let copied = seeded + want.len() as i64;
    assert_eq!((logged, distinct), (changes + copied, changes + copied), "each change once, after {kills} kills");
    drop(proc);
    if let Some((admin, name)) = store {
        use sea_orm::ConnectionTrait;
        admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_capture_killed_again_and_again_applies_every_change_once_with_sqlite_metadata() {
    change_capture_killed_again_and_again(Target::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_capture_killed_again_and_again_applies_every_change_once_into_mariadb_with_postgres_metadata() {
    change_capture_killed_again_and_again(Target::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_capture_killed_again_and_again_applies_every_change_once_into_files() {
    change_capture_killed_again_and_again(Target::Files).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_capture_killed_again_and_again_applies_every_change_once_into_a_ducklake() {
    if sluice_testkit::services::lake_python().is_none() {
        return;
    }
    change_capture_killed_again_and_again(Target::DuckLake).await;
}

/// A continuous CDC flow on two serving processes sharing a PostgreSQL
/// store, while a writer keeps changing the source (inserts, updates with
/// values over 2 KB, deletes) and one transaction stays open across the
/// first kills: 20 times, the process holding the run is killed with
/// SIGKILL (and started again) or frozen with SIGSTOP past its lease (the
/// other process takes the run over; the frozen one, woken, writes nothing
/// more). Afterwards the mirror equals the source row for row and the
/// change log holds each change once. Into PostgreSQL, and (`files`) into
/// JSON Lines files, where the process that takes over waits for the
/// frozen one's lock on the file it was writing.
async fn continuous_capture_killed_and_frozen(files: bool) {
    type Row = (i64, i32, String);
    let Some(dst) = pg_schema().await else { return };
    let Some(source) = tokio::task::spawn_blocking(|| {
        sluice_testkit::services::OwnPostgres::start(
            |_| {},
            |_| vec!["wal_level=logical".into(), "max_replication_slots=4".into(), "max_wal_size=4GB".into()],
        )
    })
    .await
    .unwrap() else {
        return;
    };
    let Some((admin, name, db, data)) = pg_metadata_db("continuous").await else { return };
    std::fs::create_dir_all(&data).unwrap();
    let mut src = sqlx::PgConnection::connect(&source.url("postgres")).await.unwrap();
    exec(&mut src, "CREATE TABLE events (id bigint PRIMARY KEY, v int NOT NULL, pad text)".into()).await;
    let ports = [free_port(), free_port()];
    let environment = |port: u16| {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let apis: Vec<Api> =
        ports.iter().map(|p| Api { client: client(), base: format!("http://127.0.0.1:{p}"), token: token() }).collect();
    let mut procs: Vec<Proc> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        procs.push(serve(&["serve"], &environment(*p), &apis[i]).await);
    }
    let api = &apis[0];
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Continuous"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(&conns, json!({"name": "src", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "postgres", "user": "postgres", "sslmode": "disable"}}))
        .await);
    let d = match files {
        true => id(api
            .post(&conns, json!({"name": "dst", "type": "file", "capability": "both", "config": {"path": "lake"}}))
            .await),
        false => id(api.post(&conns, pg_conn("dst", &dst.name)).await),
    };
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

    // The first copy (a new slot waits for the transactions open at the
    // source, so the open one below comes after it).
    let state = format!("/v1/organizations/{org}/flows/{flow}/state");
    let copied = Instant::now() + Duration::from_secs(120);
    while !api.get(&state).await["data"][0]["cursor_value"].is_string() {
        assert!(Instant::now() < copied, "the first copy did not commit");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One transaction open across the first kills (its rows arrive when it
    // commits, near the end).
    let mut open = sqlx::PgConnection::connect(&source.url("postgres")).await.unwrap();
    exec(&mut open, "BEGIN; INSERT INTO events SELECT -g, 0, 'open' FROM generate_series(1, 500) g".into()).await;
    // The writer: transactions of 200 inserts, 200 updates (every tenth
    // value over 2 KB, stored out of line) or deletes, until told to stop.
    let (stop, writer) = events_writer(source.url("postgres"), 200, Duration::from_millis(20));

    let meta = sqlx::PgPool::connect(&db).await.unwrap();
    // The process holding the flow's running run, by the pid in its worker id.
    let holder = || async {
        let claimed: Option<String> = sqlx::query_scalar(
            "SELECT claimed_by FROM runs WHERE flow_id = $1::uuid AND status = 'running' ORDER BY queued_at DESC LIMIT 1",
        )
        .bind(&flow)
        .fetch_optional(&meta)
        .await
        .unwrap()
        .flatten();
        claimed.and_then(|w| w.split(':').nth(1).and_then(|p| p.parse::<u32>().ok()))
    };
    let procs_pids = std::sync::Mutex::new(Vec::<u32>::new());
    let runs_now = || async {
        let r: Vec<(String, i32, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT status, attempt, claimed_by, left(entities::text, 600) FROM runs WHERE flow_id = $1::uuid \
             ORDER BY queued_at DESC LIMIT 4",
        )
        .bind(&flow)
        .fetch_all(&meta)
        .await
        .unwrap();
        let pids: Vec<u32> = procs_pids.lock().unwrap().clone();
        format!("{r:?}; processes {pids:?}")
    };
    let (mut kills, mut freezes) = (0, 0);
    for event in 0..20 {
        *procs_pids.lock().unwrap() = procs.iter().map(|p| p.0.id()).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        tokio::time::sleep(Duration::from_millis(1200 + (event as u64 * 377) % 1500)).await;
        let pid = loop {
            if let Some(pid) = holder().await
                && procs.iter().any(|p| p.0.id() == pid)
            {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "event {event}: no process holds the continuous run: {}",
                runs_now().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let i = procs.iter().position(|p| p.0.id() == pid).unwrap();
        if event % 2 == 0 {
            drop(procs.remove(i));
            kills += 1;
            procs.insert(i, serve(&["serve"], &environment(ports[i]), &apis[i]).await);
        } else {
            // Frozen past its lease: the other process takes the run over.
            signal(&procs[i], "STOP");
            let taken = loop {
                if holder().await.is_some_and(|p| p != pid) {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            signal(&procs[i], "CONT");
            assert!(taken, "event {event}: the frozen process's run was not taken over: {}", runs_now().await);
            freezes += 1;
        }
        if event == 12 {
            exec(&mut open, "COMMIT".into()).await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let changes = writer.await.unwrap() + 500;

    // The mirror catches up with the source, row for row; the change log
    // has each change once.
    let rows = "SELECT id, v, md5(coalesce(pad, '')) FROM events ORDER BY id";
    // The padding itself from a file.
    let want: Vec<Row> = match files {
        true => sqlx::query_as("SELECT id, v, coalesce(pad, '') FROM events ORDER BY id"),
        false => sqlx::query_as(rows),
    }
    .fetch_all(&mut src)
    .await
    .unwrap();
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    let mirror = rows.replace("events", &format!("{}.events", dst.name));
    let lake = data.join("files").join(&org).join("lake");
    let caught_up = Instant::now() + Duration::from_secs(180);
    loop {
        let got: Vec<Row> = match files {
            true => lake_rows(&lake),
            false => sqlx::query_as(sqlx::AssertSqlSafe(mirror.clone())).fetch_all(&mut pg).await.unwrap(),
        };
        if got == want {
            break;
        }
        assert!(Instant::now() < caught_up, "the mirror did not catch up: {} rows of {}", got.len(), want.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The log commits in a transaction of its own, after the mirror's (the
    // mappings' order): a reader can see the mirror whole before the log's
    // last commit lands, so the log is read until it holds every change (or
    // a while passed), then compared.
    let log_sql =
        format!("SELECT count(*), count(DISTINCT (id, _sluice_op, _sluice_position)) FROM {}.events_log", dst.name);
    let logged_by = Instant::now() + Duration::from_secs(30);
    let (logged, distinct): (i64, i64) = loop {
        let (logged, distinct): (i64, i64) = match files {
            true => lake_log(&lake),
            false => sqlx::query_as(sqlx::AssertSqlSafe(log_sql.clone())).fetch_one(&mut pg).await.unwrap(),
        };
        if logged as u64 >= changes || Instant::now() > logged_by {
            break (logged, distinct);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let twice = if logged as u64 == changes || files {
        String::new()
    } else {
        // What a key's changes look like where the log holds more of them.
        let sql = format!(
            "SELECT concat_ws(' ', id, _sluice_op, v, '@' || _sluice_position) FROM {0}.events_log \
             WHERE id IN (SELECT id FROM {0}.events_log GROUP BY id, _sluice_op, v HAVING count(*) > 1 LIMIT 3) \
             ORDER BY id, _sluice_position",
            dst.name
        );
        let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(&mut pg).await.unwrap();
        format!("; keys whose change repeats: {lines:?}; runs: {}", runs_now().await)
    };
    assert_eq!(
        (logged as u64, distinct as u64),
        (changes, changes),
        "each change once, after {kills} kills and {freezes} freezes{twice}"
    );
    assert_eq!((kills, freezes), (10, 10));
    // Paused, the run ends and the flow goes; nothing is left on the source.
    let (st, _) = api
        .call(
            reqwest::Method::PATCH,
            &format!("/v1/organizations/{org}/flows/{flow}"),
            Some(json!({"status": "paused"})),
        )
        .await;
    assert_eq!(st, 200);
    drop(procs);
    use sea_orm::ConnectionTrait;
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_capture_killed_and_frozen_twenty_times_applies_every_change_once() {
    continuous_capture_killed_and_frozen(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_capture_into_files_killed_and_frozen_twenty_times_applies_every_change_once() {
    continuous_capture_killed_and_frozen(true).await;
}

async fn my_exec(c: &mut sqlx::MySqlConnection, sql: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(c).await.unwrap();
}

/// Change data capture from a MariaDB source of the test's own (a ROW
/// binlog) while the process is killed with SIGKILL after commits and
/// mid-write, and frozen with SIGSTOP past its lease: 90,000 changes
/// (inserts, updates with values over 2 KB, deletes) in 90 transactions,
/// one more kept open across the kills. Afterwards the mirror equals the
/// source row for row and the change log holds each change once. On the
/// SQLite store into PostgreSQL, and on a PostgreSQL store into MariaDB.
async fn binlog_capture_killed_and_frozen(postgres_store: bool) {
    /// A row as compared: id, value, the digest of the padding.
    type Row = (i64, i32, String);
    let Some(dst) = pg_schema().await else { return };
    let mariadb = if postgres_store {
        let mut my = match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
            Ok(my) => my,
            Err(e) => {
                sluice_testkit::services::unavailable("MariaDB on 127.0.0.1:3306", e, "start it");
                return;
            }
        };
        let name = format!("binlog_{}", random_base62(8).to_lowercase());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut my).await.unwrap();
        Some((my, name))
    } else {
        None
    };
    let Some(source) = tokio::task::spawn_blocking(|| sluice_testkit::services::OwnMariaDb::start(&[])).await.unwrap()
    else {
        return;
    };
    let mut root = sqlx::MySqlConnection::connect(&source.url("mysql")).await.unwrap();
    my_exec(&mut root, "CREATE DATABASE shop".into()).await;
    let mut src = sqlx::MySqlConnection::connect(&source.url("shop")).await.unwrap();
    my_exec(
        &mut src,
        "CREATE TABLE events (id bigint PRIMARY KEY, v int NOT NULL, pad longtext) ENGINE = InnoDB".into(),
    )
    .await;
    let mut store = None;
    let (data, db, port, api) = if postgres_store {
        let Some((admin, name, db, data)) = pg_metadata_db("binlog").await else { return };
        std::fs::create_dir_all(&data).unwrap();
        store = Some((admin, name));
        let port = free_port();
        (data, db, port, Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() })
    } else {
        sqlite_service("binlog-crash")
    };
    let environment = {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let mut proc = Some(serve(&["serve"], &environment, &api).await);
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Binlog"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(&conns, json!({"name": "src", "type": "mysql", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "shop", "user": "root", "ssl_mode": "disabled"}}))
        .await);
    let d = match &mariadb {
        Some((_, name)) => id(api
            .post(
                &conns,
                json!({"name": "dst", "type": "mysql", "capability": "both",
                "config": {"host": "127.0.0.1", "database": name, "user": "root"}}),
            )
            .await),
        None => id(api.post(&conns, pg_conn("dst", &dst.name)).await),
    };
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "capture", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "sync_mode": "cdc_deduped"},
                {"source_entity": "events", "dest_entity": "events_log", "sync_mode": "cdc_append"}
            ]}}),
        )
        .await);
    let trigger = |api: &Api| {
        let path = format!("/v1/organizations/{org}/flows/{flow}/run");
        let api = Api { client: api.client.clone(), base: api.base.clone(), token: api.token.clone() };
        async move { api.post(&path, json!({})).await["id"].as_str().unwrap().to_string() }
    };
    let first = trigger(&api).await;
    succeeded(&api, &org, &first, 120, "the first copy did not finish").await;

    // Two rounds: 40 transactions of 1,000 inserts and 15 of 1,000 updates
    // (every tenth value over 2 KB), the run killed with SIGKILL right
    // after a commit and then mid-write; 15 more of updates and 20 of 1,000
    // deletes, the run frozen with SIGSTOP past its lease (taken over when
    // the process wakes; the frozen attempt writes nothing more). One more
    // transaction stays open across both, committed before the last run.
    let mut changes = 0i64;
    let mut open = sqlx::MySqlConnection::connect(&source.url("shop")).await.unwrap();
    let state = format!("/v1/organizations/{org}/flows/{flow}/state");
    let position = |s: &serde_json::Value| s["data"][0]["cursor_value"].as_str().map(str::to_string);
    let (mut kills, mut freezes) = (0, 0);
    for round in 0..2 {
        if round == 0 {
            for t in 0..40 {
                let (lo, hi) = (t * 1000 + 1, t * 1000 + 1000);
                my_exec(&mut src, format!("INSERT INTO events SELECT seq, 0, NULL FROM seq_{lo}_to_{hi}")).await;
                changes += 1000;
            }
            my_exec(&mut open, "BEGIN".into()).await;
            my_exec(&mut open, "INSERT INTO events SELECT -seq, 0, 'open' FROM seq_1_to_500".into()).await;
        }
        for t in round * 15..round * 15 + 15 {
            let (lo, hi) = (t * 1000 + 1, t * 1000 + 1000);
            my_exec(
                &mut src,
                format!(
                    "UPDATE events SET v = v + 1, pad = IF(id % 10 = 0, REPEAT(MD5(CONCAT(id, '-', v)), 80), 'p') \
                     WHERE id BETWEEN {lo} AND {hi}"
                ),
            )
            .await;
            changes += 1000;
        }
        if round == 1 {
            for t in 0..20 {
                let (lo, hi) = (20_000 + t * 1000 + 1, 20_000 + t * 1000 + 1000);
                my_exec(&mut src, format!("DELETE FROM events WHERE id BETWEEN {lo} AND {hi}")).await;
                changes += 1000;
            }
        }
        let run = trigger(&api).await;
        let mut seen = position(&api.get(&state).await);
        let mut events = 0;
        let deadline = Instant::now() + Duration::from_secs(600);
        while events < 2 - round {
            let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
            if r["status"] == "succeeded" {
                break;
            }
            assert!(!["failed", "canceled"].contains(&r["status"].as_str().unwrap()), "{r}");
            let now = position(&api.get(&state).await);
            if now != seen && r["status"] == "running" {
                seen = now;
                events += 1;
                if round == 0 {
                    tokio::time::sleep(Duration::from_millis([0, 150][kills % 2])).await;
                    drop(proc.take());
                    kills += 1;
                    proc = Some(serve(&["serve"], &environment, &api).await);
                } else {
                    let p = proc.as_ref().unwrap();
                    signal(p, "STOP");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    signal(p, "CONT");
                    freezes += 1;
                }
            }
            assert!(Instant::now() < deadline, "no progress within 600 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        succeeded(&api, &org, &run, 600, "the resumed run did not finish").await;
    }
    assert!(kills >= 1, "the runs ended before they could be killed");
    eprintln!("binlog capture: {kills} kills, {freezes} freezes");
    my_exec(&mut open, "COMMIT".into()).await;
    changes += 500;
    let last = trigger(&api).await;
    succeeded(&api, &org, &last, 300, "the last run did not finish").await;

    // The mirror equals the source row for row; the change log has each
    // change once (and the first copy's rows: none, the table was empty).
    let want: Vec<Row> = sqlx::query_as("SELECT id, v, MD5(COALESCE(pad, '')) FROM events ORDER BY id")
        .fetch_all(&mut src)
        .await
        .unwrap();
    let (got, (logged, distinct)): (Vec<Row>, (i64, i64)) = match mariadb {
        Some((mut my, name)) => {
            let got = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, v, MD5(COALESCE(pad, '')) FROM {name}.events ORDER BY id"
            )))
            .fetch_all(&mut my)
            .await
            .unwrap();
            let log = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT id, _sluice_op, _sluice_position) FROM {name}.events_log"
            )))
            .fetch_one(&mut my)
            .await
            .unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}"))).execute(&mut my).await.unwrap();
            (got, log)
        }
        None => {
            let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
            let got = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, v::int4, md5(coalesce(pad, '')) FROM {}.events ORDER BY id",
                dst.name
            )))
            .fetch_all(&mut pg)
            .await
            .unwrap();
            let log = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT (id, _sluice_op, _sluice_position)) FROM {}.events_log",
                dst.name
            )))
            .fetch_one(&mut pg)
            .await
            .unwrap();
            (got, log)
        }
    };
    assert_eq!(got.len(), want.len(), "after {kills} kills and {freezes} freezes");
    assert!(got == want, "the mirror equals the source row for row, after {kills} kills and {freezes} freezes");
    assert_eq!((logged, distinct), (changes, changes), "each change once, after {kills} kills and {freezes} freezes");
    drop(proc);
    if let Some((admin, name)) = store {
        use sea_orm::ConnectionTrait;
        admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binlog_capture_killed_and_frozen_applies_every_change_once_with_sqlite_metadata() {
    binlog_capture_killed_and_frozen(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binlog_capture_killed_and_frozen_applies_every_change_once_into_mariadb_with_postgres_metadata() {
    binlog_capture_killed_and_frozen(true).await;
}

/// One writer transaction of `a_change_logs_history_survives_kills_in_its_first_run`
/// (numbered from 1): a row of the seed updated to `i`, a row inserted, and
/// every seventh the row the transaction before inserted deleted. As the
/// log holds them: `(op, id, v)`, `v` null for a delete (it carries the key).
fn history_tx(i: i64, seeded: i64) -> Vec<(String, i64, Option<i64>)> {
    let mut out = vec![("update".to_string(), i % seeded + 1, Some(i)), ("insert".to_string(), 1_000_000 + i, Some(i))];
    if i % 7 == 0 {
        out.push(("delete".to_string(), 1_000_000 + i - 1, None));
    }
    out.sort();
    out
}

/// The change log history tests' source: a logical-WAL PostgreSQL of its
/// own whose `events` holds `seeded` rows, and a connection to it.
async fn history_source(seeded: i64) -> Option<(sluice_testkit::services::OwnPostgres, sqlx::PgConnection)> {
    let source = tokio::task::spawn_blocking(|| {
        sluice_testkit::services::OwnPostgres::start(
            |_| {},
            |_| vec!["wal_level=logical".into(), "max_replication_slots=8".into()],
        )
    })
    .await
    .unwrap()?;
    let mut src = sqlx::PgConnection::connect(&source.url("postgres")).await.unwrap();
    exec(
        &mut src,
        format!(
            "CREATE TABLE events (id bigint PRIMARY KEY, v bigint NOT NULL, pad text);
             INSERT INTO events SELECT g, 0, repeat('h', 600) FROM generate_series(1, {seeded}) g"
        ),
    )
    .await;
    Some((source, src))
}

/// The writer of the change log history tests: transaction `i` of
/// [`history_tx`] every few milliseconds until `stop`; answers how many it
/// committed.
fn history_writer(
    url: String,
    seeded: i64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut i = 0i64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            i += 1;
            let mut sql = format!(
                "BEGIN; UPDATE events SET v = {i} WHERE id = {}; INSERT INTO events VALUES ({}, {i}, NULL);",
                i % seeded + 1,
                1_000_000 + i
            );
            if i % 7 == 0 {
                sql.push_str(&format!(" DELETE FROM events WHERE id = {};", 1_000_000 + i - 1));
            }
            sql.push_str(" COMMIT;");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
            tokio::time::sleep(Duration::from_millis(4)).await;
        }
        i
    })
}

/// A PostgreSQL LSN (`16/B374D848`) as a number, for ordering.
fn lsn(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// When a first run is killed, in `a_change_logs_history_survives_kills_in_its_first_run`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Window {
    /// While the first copy is written, before any table committed.
    BeforeAnyCommit,
    /// At the first commit of any table (before, the mirror's bulk copy
    /// committed first and its log's copy was cut).
    FirstCommit,
    /// The log committed, the mirror being copied in chunks.
    MirrorChunks,
}

async fn held_position(pg: &mut sqlx::PgConnection, schema: &str, entity: &str) -> Option<String> {
    let sql = format!("SELECT position FROM {schema}._sluice_positions WHERE entity = '{entity}'");
    let r: Result<Option<String>, _> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_optional(pg).await;
    r.ok().flatten()
}

/// Two flows' first runs copy a mirror and a change log of one table
/// while a writer commits a transaction every few milliseconds; each run is
/// killed with SIGKILL twice: the first before any table committed, then at
/// the first commit of the next attempt; the second at the first commit,
/// then while the mirror is copied in chunks. Each log then holds the table
/// as of its stream's start (the copy's inserts, every row as the writer's
/// transactions up to then left it), then each of the writer's
/// transactions after it, once, in commit order, and nothing else; no
/// mirror commits before its log; each mirror equals the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_logs_history_survives_kills_in_its_first_run() {
    const SEEDED: i64 = 150_000;
    let Some(dst) = pg_schema().await else { return };
    let Some((source, mut src)) = history_source(SEEDED).await else { return };
    let (data, db, port, api) = sqlite_service("cdc-history");
    let environment = {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let mut proc = Some(serve(&["serve"], &environment, &api).await);
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "History"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(&conns, json!({"name": "src", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "postgres", "user": "postgres", "sslmode": "disable"}}))
        .await);
    let d = id(api.post(&conns, pg_conn("dst", &dst.name)).await);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = history_writer(source.url("postgres"), SEEDED, stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    let plans =
        [("a", [Window::BeforeAnyCommit, Window::FirstCommit]), ("b", [Window::FirstCommit, Window::MirrorChunks])];
    let mut flows = Vec::new();
    for (name, windows) in plans {
        let (mirror, log) = (format!("events_{name}"), format!("events_{name}_log"));
        let flow = id(api
            .post(
                &format!("/v1/organizations/{org}/flows"),
                json!({"name": name, "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                    {"source_entity": "events", "dest_entity": mirror, "sync_mode": "cdc_deduped"},
                    {"source_entity": "events", "dest_entity": log, "sync_mode": "cdc_append"}
                ]}}),
            )
            .await);
        let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
        let logs = format!("/v1/organizations/{org}/logs/{run}");
        for window in windows {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let (m, l) =
                    (held_position(&mut pg, &dst.name, &mirror).await, held_position(&mut pg, &dst.name, &log).await);
                assert!(m.is_none() || l.is_some(), "{name}: a mirror committed before its change log: {m:?}");
                let copying = match window {
                    Window::BeforeAnyCommit => api.get(&logs).await["data"].as_array().unwrap().iter().any(|l| {
                        l["message"].as_str().is_some_and(|m| m.starts_with("copying the table in a snapshot"))
                    }),
                    _ => false,
                };
                let now = match window {
                    Window::BeforeAnyCommit => copying,
                    Window::FirstCommit => m.is_some() || l.is_some(),
                    Window::MirrorChunks => l.is_some() && m.as_deref().is_some_and(|m| m.contains(" copy ")),
                };
                if now {
                    break;
                }
                let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
                assert!(r["status"] != "succeeded", "{name}: the run ended before {window:?}: {r}");
                assert!(Instant::now() < deadline, "{name}: no {window:?} within 120 s: {r}");
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            if window == Window::BeforeAnyCommit {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            drop(proc.take());
            if window == Window::BeforeAnyCommit {
                let (m, l) =
                    (held_position(&mut pg, &dst.name, &mirror).await, held_position(&mut pg, &dst.name, &log).await);
                assert_eq!((m, l), (None, None), "{name}: the kill came after a commit: seed more rows");
            }
            proc = Some(serve(&["serve"], &environment, &api).await);
        }
        succeeded(&api, &org, &run, 300, "the first run did not finish after two kills").await;
        flows.push((flow, mirror, log));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    for (flow, mirror, log) in &flows {
        let last = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
        succeeded(&api, &org, &last, 120, "the catch-up run did not finish").await;
        check_history(&mut pg, &dst.name, log, SEEDED, written).await;
        let q = "SELECT id, v FROM events ORDER BY id";
        let source_rows: Vec<(i64, i64)> = sqlx::query_as(q).fetch_all(&mut src).await.unwrap();
        let mirrored: Vec<(i64, i64)> =
            sqlx::query_as(sqlx::AssertSqlSafe(q.replace("events", &format!("{}.{mirror}", dst.name))))
                .fetch_all(&mut pg)
                .await
                .unwrap();
        assert!(mirrored == source_rows, "{mirror} equals the source");
    }
    drop(proc);
    let _ = std::fs::remove_dir_all(&data);
}

/// The change log `schema.log` of `a_change_logs_history_survives_kills_in_its_first_run`
/// against the writer's `written` transactions: the copy (the inserts at
/// the log's first position) is the table after the writer's first `seen`
/// transactions, then come transactions `seen + 1 ..= written`, each once,
/// in commit order, and nothing else.
async fn check_history(pg: &mut sqlx::PgConnection, schema: &str, log: &str, seeded: i64, written: i64) {
    let rows: Vec<(i64, Option<i64>, String, String)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT id, v, _sluice_op, _sluice_position FROM {schema}.{log}")))
            .fetch_all(pg)
            .await
            .unwrap();
    check_history_rows(rows, log, seeded, written);
}

/// [`check_history`] of a log's rows (id, v, operation, position).
fn check_history_rows(rows: Vec<(i64, Option<i64>, String, String)>, log: &str, seeded: i64, written: i64) {
    let start = rows.iter().map(|r| lsn(&r.3)).min().unwrap();
    let (copy, changes): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| lsn(&r.3) == start);
    assert!(copy.iter().all(|r| r.2 == "insert"), "{log}: the copy is inserts");
    let seen = copy.iter().map(|r| r.0 - 1_000_000).max().unwrap_or(0).max(0);
    let mut state: std::collections::BTreeMap<i64, i64> = (1..=seeded).map(|k| (k, 0)).collect();
    for i in 1..=seen {
        for (op, k, v) in history_tx(i, seeded) {
            match op.as_str() {
                "delete" => state.remove(&k),
                _ => state.insert(k, v.unwrap()),
            };
        }
    }
    let copied: std::collections::BTreeMap<i64, i64> = copy.iter().map(|r| (r.0, r.1.unwrap())).collect();
    assert_eq!(copy.len(), copied.len(), "{log}: each row copied once");
    assert!(copied == state, "{log}: the copy is the table as of the stream's start (after transaction {seen})");
    let mut by_tx: std::collections::BTreeMap<u64, Vec<(String, i64, Option<i64>)>> = Default::default();
    for (k, v, op, at) in changes {
        by_tx.entry(lsn(&at)).or_default().push((op, k, v));
    }
    let got: Vec<Vec<(String, i64, Option<i64>)>> = by_tx
        .into_values()
        .map(|mut t| {
            t.sort();
            t
        })
        .collect();
    let want: Vec<_> = (seen + 1..=written).map(|i| history_tx(i, seeded)).collect();
    assert!(written > seen + 50, "{log}: the writer went on ({seen} before the start, {written} in all)");
    assert_eq!(got.len(), want.len(), "{log}: one logged transaction per writer transaction after the start");
    assert!(got == want, "{log}: each transaction after the start once, in commit order");
}

/// What DuckDB sees of the Parquet files `glob` names (rows, distinct ids).
/// Kills (SIGKILL) the service whenever run `run` of `flow` stores a new
/// cursor while it goes on, at most twice (a run whose worker is lost a
/// third time fails, by design), calling `between` with the kill's number
/// before each restart; answers how many kills there were (at least one).
async fn kill_at_checkpoints(
    api: &Api,
    org: &str,
    flow: &str,
    run: &str,
    proc: &mut Proc,
    env: &[(&str, String)],
    between: impl Fn(i32),
) -> i32 {
    let mut kills = 0;
    let mut last_cursor = serde_json::Value::Null;
    let deadline = Instant::now() + Duration::from_secs(300);
    while kills < 2 {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
        let status = r["status"].clone();
        if status == "succeeded" {
            break;
        }
        assert!(status != "failed" && status != "canceled", "{r}");
        let state = api.get(&format!("/v1/organizations/{org}/flows/{flow}/state")).await;
        let cursor = state["data"][0]["cursor_value"].clone();
        if status == "running" && cursor.is_string() && cursor != last_cursor {
            last_cursor = cursor;
            let _ = proc.0.kill(); // SIGKILL
            let _ = proc.0.wait();
            kills += 1;
            between(kills);
            *proc = serve(&["serve"], env, api).await;
        }
        assert!(Instant::now() < deadline, "no checkpoint within 300 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(kills >= 1, "the run ended before it could be killed; make it larger");
    kills
}

fn duckdb_counts(python: &std::path::Path, glob: &std::path::Path) -> (i64, i64) {
    sluice_testkit::services::duckdb_counts(python, &glob.display().to_string(), None)
}

#[tokio::test]
async fn an_incremental_append_into_parquet_files_killed_again_and_again_lands_every_record_once() {
    let Some(python) = sluice_testkit::services::lake_python() else { return };
    let Some(src) = pg_schema().await else { return };
    const ROWS: i64 = 400_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    let (data, db, port, api) = sqlite_service("parquet-kill");
    let mut proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Lake"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api.post(&conns, pg_conn("src", &src.name)).await);
    let lake = json!({"name": "lake", "type": "file", "capability": "destination",
        "config": {"path": "lake", "format": "parquet", "file_size_mb": 1}});
    let d = id(api.post(&conns, lake).await);
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "to-lake", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "sync_mode": "incremental_append", "cursor_field": "updated"}]}}),
        )
        .await);
    // Plain files take no upserts: the modes that need them are refused,
    // naming what takes them.
    for mode in ["incremental_deduped", "cdc_deduped"] {
        let (status, body) = api
            .call(
                reqwest::Method::POST,
                &format!("/v1/organizations/{org}/flows"),
                Some(json!({"name": mode, "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                    {"source_entity": "events", "sync_mode": mode, "cursor_field": "updated", "primary_key": "id"}]}})),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        let said = body.to_string();
        assert!(said.contains("ducklake") && said.contains("iceberg") && said.contains(mode), "{said}");
    }
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    let folder = data.join("files").join(&org).join("lake");
    let glob = folder.join("events/*.parquet");

    // Killed whenever a new checkpoint is stored while the run goes on;
    // between lives, a reader sees whole files, each row once.
    let kills = kill_at_checkpoints(&api, &org, &flow, &run, &mut proc, &env(&data, &db, port), |kills| {
        let (rows, distinct) = duckdb_counts(&python, &glob);
        assert_eq!(rows, distinct, "after kill {kills}: a row twice");
        assert!(rows < ROWS, "killed mid-run");
    })
    .await;
    let done = succeeded(&api, &org, &run, 300, "the resumed run did not finish").await;
    assert_eq!(duckdb_counts(&python, &glob), (ROWS, ROWS), "every source record exactly once after {kills} kills");
    assert!(done["entities"][0]["rows_read"].as_i64().unwrap() < ROWS, "resumed, not read again: {done}");
    let staged = std::fs::read_dir(folder.join("_sluice/events/staging")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(staged, 0, "what killed attempts staged is removed");

    // The next run appends the new rows alone: the last value read is
    // not delivered again.
    exec(
        &mut pg,
        format!(
            "INSERT INTO {0}.events SELECT g, 'late ' || g, timestamptz '2026-01-01' + g * interval '1 second' \
             FROM generate_series({1}, {2}) g",
            src.name,
            ROWS + 1,
            ROWS + 1_000
        ),
    )
    .await;
    let again = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    succeeded(&api, &org, &again, 120, "the second run did not finish").await;
    assert_eq!(duckdb_counts(&python, &glob), (ROWS + 1_000, ROWS + 1_000));

    // An overwrite of the same rows into another entity, killed once its
    // first files are staged: the attempt that takes over publishes the
    // whole new set once, and a second overwrite replaces it.
    let snapshot = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "snapshot", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "dest_entity": "snapshot", "sync_mode": "full_refresh_overwrite"}]}}),
        )
        .await);
    let snap_glob = folder.join("snapshot/*.parquet");
    let staging = folder.join("_sluice/snapshot/staging");
    let over = id(api.post(&format!("/v1/organizations/{org}/flows/{snapshot}/run"), json!({})).await);
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0) == 0 {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{over}")).await;
        assert!(r["status"] != "succeeded", "the overwrite ended before its kill: {r}");
        assert!(Instant::now() < deadline, "nothing staged within 120 s: {r}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(proc); // SIGKILL
    let published = std::fs::read_dir(folder.join("snapshot")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(published, 0, "an overwrite publishes nothing before it ends");
    proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    succeeded(&api, &org, &over, 300, "the overwrite did not finish after its kill").await;
    assert_eq!(duckdb_counts(&python, &snap_glob), (ROWS + 1_000, ROWS + 1_000), "the new set once");
    let again = id(api.post(&format!("/v1/organizations/{org}/flows/{snapshot}/run"), json!({})).await);
    succeeded(&api, &org, &again, 300, "the second overwrite did not finish").await;
    assert_eq!(duckdb_counts(&python, &snap_glob), (ROWS + 1_000, ROWS + 1_000), "replaced, not added to");
    assert_eq!(std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0), 0, "nothing left staged");

    // The same into a bucket (an emulator's): credentials kept as secrets,
    // a missing bucket named in one line, the files read back by DuckDB
    // over S3.
    let Some((_moto, url)) = sluice_testkit::services::moto() else { return };
    sluice_testkit::services::moto_bucket(&url, "lake");
    let s3 = |name: &str, bucket: &str| {
        json!({"name": name, "type": "s3", "capability": "destination", "config": {"bucket": bucket,
            "prefix": "sluice/", "endpoint_url": url, "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": "test-secret", "file_size_mb": 1}})
    };
    let missing = id(api.post(&conns, s3("missing", "no-such-bucket")).await);
    let (_, tested) = api.call(reqwest::Method::POST, &format!("{conns}/{missing}/test"), None).await;
    assert!(tested.to_string().contains("bucket s3://no-such-bucket does not exist"), "{tested}");
    let bucket = api.post(&conns, s3("bucket", "lake")).await;
    assert_eq!(bucket["config"]["secret_access_key"], "***", "{bucket}");
    assert!(!bucket.to_string().contains("test-secret"));
    let (status, tested) = api.call(reqwest::Method::POST, &format!("{conns}/{}/test", id(bucket.clone())), None).await;
    assert_eq!(status, 200, "{tested}");
    // An incremental append into the bucket, killed at its checkpoints as
    // on disk: DuckDB reads every row once over S3, and nothing a killed
    // attempt staged is left in the bucket.
    let to_s3 = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "to-bucket", "source_connection_id": s, "destination_connection_id": id(bucket),
                "config": {"mappings": [{"source_entity": "events", "sync_mode": "incremental_append",
                    "cursor_field": "updated"}]}}),
        )
        .await);
    let in_bucket = "s3://lake/sluice/events/*.parquet";
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{to_s3}/run"), json!({})).await);
    let kills = kill_at_checkpoints(&api, &org, &to_s3, &run, &mut proc, &env(&data, &db, port), |kills| {
        let (rows, distinct) = sluice_testkit::services::duckdb_counts(&python, in_bucket, Some(&url));
        assert_eq!(rows, distinct, "after kill {kills} into the bucket: a row twice");
        assert!(rows < ROWS + 1_000, "killed mid-run");
    })
    .await;
    let done = succeeded(&api, &org, &run, 300, "the run into the bucket did not finish").await;
    let seen = sluice_testkit::services::duckdb_counts(&python, in_bucket, Some(&url));
    assert_eq!(seen, (ROWS + 1_000, ROWS + 1_000), "every row once in the bucket after {kills} kills");
    assert!(done["entities"][0]["rows_read"].as_i64().unwrap() < ROWS + 1_000, "resumed, not read again: {done}");
    let staged = sluice_testkit::services::moto_keys(&url, "lake", "sluice/_sluice/events/staging/");
    assert!(staged.is_empty(), "what killed attempts staged is removed from the bucket: {staged:?}");
    drop(proc);
    let _ = std::fs::remove_dir_all(&data);
}

/// PostgreSQL into a DuckLake (its catalog a SQLite file, its data a
/// folder) through the API: an incremental append killed with SIGKILL at
/// its checkpoints, then an overwrite killed before its end. DuckDB,
/// attaching the lake between lives, sees each row once and never part of
/// a commit; after the runs, every file left in the table's folder is
/// named by the catalog (a killed attempt's are removed).
#[tokio::test]
async fn an_incremental_append_into_a_ducklake_killed_again_and_again_lands_every_record_once() {
    let Some(python) = sluice_testkit::services::lake_python() else { return };
    let Some(src) = pg_schema().await else { return };
    const ROWS: i64 = 300_000;
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    seed_events(&mut pg, &src.name, ROWS).await;
    let (data, db, port, api) = sqlite_service("ducklake-kill");
    let mut proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Lake"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api.post(&conns, pg_conn("src", &src.name)).await);
    let lake = json!({"name": "lake", "type": "ducklake", "capability": "destination", "config": {
        "catalog": {"type": "sqlite", "path": "lake/catalog.sqlite"}, "data_path": "lake/data", "file_size_mb": 1}});
    let d = id(api.post(&conns, lake).await);
    let (status, tested) = api.call(reqwest::Method::POST, &format!("{conns}/{d}/test"), None).await;
    assert_eq!(status, 200, "{tested}");
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "to-lake", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "sync_mode": "incremental_append", "cursor_field": "updated"}]}}),
        )
        .await);
    let folder = std::fs::canonicalize(data.join("files").join(&org)).unwrap().join("lake");
    let (catalog, lake_data) = (folder.join("catalog.sqlite"), folder.join("data"));
    let counts = |table: &str| sluice_testkit::services::ducklake_counts(&python, &catalog, &lake_data, table);
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    let kills = kill_at_checkpoints(&api, &org, &flow, &run, &mut proc, &env(&data, &db, port), |kills| {
        let (rows, distinct) = counts("main.events");
        assert_eq!(rows, distinct, "after kill {kills}: a row twice");
        assert!(rows < ROWS, "killed mid-run");
    })
    .await;
    let done = succeeded(&api, &org, &run, 300, "the resumed run did not finish").await;
    assert_eq!(counts("main.events"), (ROWS, ROWS), "every source record exactly once after {kills} kills");
    assert!(done["entities"][0]["rows_read"].as_i64().unwrap() < ROWS, "resumed, not read again: {done}");

    // An overwrite into another table, killed once its first file is put:
    // nothing shows until the attempt that takes over commits the whole
    // new set, once.
    let snapshot = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "snapshot", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "dest_entity": "snapshot", "sync_mode": "full_refresh_overwrite"}]}}),
        )
        .await);
    let over = id(api.post(&format!("/v1/organizations/{org}/flows/{snapshot}/run"), json!({})).await);
    let table_dir = lake_data.join("main/snapshot");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_dir(&table_dir).map(|d| d.count()).unwrap_or(0) == 0 {
        let r = api.get(&format!("/v1/organizations/{org}/runs/{over}")).await;
        assert!(r["status"] != "succeeded", "the overwrite ended before its kill: {r}");
        assert!(Instant::now() < deadline, "nothing put within 120 s: {r}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(proc); // SIGKILL
    assert_eq!(counts("main.snapshot"), (0, 0), "an overwrite shows nothing before it ends");
    proc = serve(&["serve"], &env(&data, &db, port), &api).await;
    succeeded(&api, &org, &over, 300, "the overwrite did not finish after its kill").await;
    assert_eq!(counts("main.snapshot"), (ROWS, ROWS), "the new set once");
    let again = id(api.post(&format!("/v1/organizations/{org}/flows/{snapshot}/run"), json!({})).await);
    succeeded(&api, &org, &again, 300, "the second overwrite did not finish").await;
    assert_eq!(counts("main.snapshot"), (ROWS, ROWS), "replaced, not added to");
    // What the killed attempts put and no snapshot names is gone (the
    // attempt that took over removed it).
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", catalog.display())).await.unwrap();
    let named: Vec<(String,)> = sqlx::query_as("SELECT path FROM ducklake_data_file").fetch_all(&mut c).await.unwrap();
    for table in ["events", "snapshot"] {
        for f in std::fs::read_dir(lake_data.join("main").join(table)).unwrap().filter_map(|e| e.ok()) {
            let name = f.file_name().to_string_lossy().to_string();
            assert!(named.iter().any(|(n,)| *n == name), "{table}/{name} is named by no snapshot");
        }
    }
    drop(proc);
    let _ = std::fs::remove_dir_all(&data);
}

/// A change log into Parquet files (`cdc_append`, the one change capture
/// mode plain files take) on the PostgreSQL metadata store, its first run
/// killed with SIGKILL before any commit and again once its copy
/// committed, while a writer commits a transaction every few milliseconds:
/// DuckDB then reads the table as of the stream's start, then each of the
/// writer's transactions after it once, in commit order, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_log_into_parquet_files_killed_in_its_first_run_keeps_its_history_once() {
    use sea_orm::ConnectionTrait;
    const SEEDED: i64 = 100_000;
    let Some(python) = sluice_testkit::services::lake_python() else { return };
    let Some((admin, name, db, data)) = pg_metadata_db("cdc_parquet").await else { return };
    std::fs::create_dir_all(&data).unwrap();
    let Some((source, _src)) = history_source(SEEDED).await else { return };
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let environment = {
        let mut e = env(&data, &db, port);
        e.push(("SLUICE_RUN_LEASE", "3".to_string()));
        e
    };
    let mut proc = Some(serve(&["serve"], &environment, &api).await);
    let id = |v: serde_json::Value| v["id"].as_str().unwrap().to_string();
    let org = id(api.post("/v1/organizations", json!({"name": "Lake history"})).await);
    let conns = format!("/v1/organizations/{org}/connections");
    let s = id(api
        .post(&conns, json!({"name": "src", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "postgres", "user": "postgres", "sslmode": "disable"}}))
        .await);
    let lake = json!({"name": "lake", "type": "file", "capability": "destination",
        "config": {"path": "lake", "format": "parquet", "file_size_mb": 1}});
    let d = id(api.post(&conns, lake).await);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = history_writer(source.url("postgres"), SEEDED, stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let flow = id(api
        .post(
            &format!("/v1/organizations/{org}/flows"),
            json!({"name": "log", "source_connection_id": s, "destination_connection_id": d, "config": {"mappings": [
                {"source_entity": "events", "dest_entity": "events_log", "sync_mode": "cdc_append"}]}}),
        )
        .await);
    let run = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    let logs = format!("/v1/organizations/{org}/logs/{run}");
    let folder = data.join("files").join(&org).join("lake");
    let manifest = folder.join("_sluice/events_log/manifest.json");
    for before_any_commit in [true, false] {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let now = if before_any_commit {
                api.get(&logs).await["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("copying the table")))
            } else {
                manifest.exists()
            };
            if now {
                break;
            }
            let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
            assert!(r["status"] != "succeeded", "the run ended before its kill: {r}");
            assert!(Instant::now() < deadline, "no window to kill in within 120 s: {r}");
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        if before_any_commit {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(proc.take());
        if before_any_commit {
            assert!(!manifest.exists(), "the kill came after a commit: seed more rows");
        }
        proc = Some(serve(&["serve"], &environment, &api).await);
    }
    succeeded(&api, &org, &run, 300, "the first run did not finish after two kills").await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    let last = id(api.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), json!({})).await);
    succeeded(&api, &org, &last, 120, "the catch-up run did not finish").await;

    let script = r#"
import json, sys, duckdb
for r in duckdb.connect().execute(
        f"SELECT id, v, _sluice_op, _sluice_position FROM read_parquet('{sys.argv[1]}')").fetchall():
    print(json.dumps(r))
"#;
    let glob = folder.join("events_log/*.parquet");
    let out = std::process::Command::new(&python).arg("-c").arg(script).arg(&glob).output().unwrap();
    assert!(out.status.success(), "DuckDB: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<(i64, Option<i64>, String, String)> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    check_history_rows(rows, "events_log", SEEDED, written);
    drop(proc);
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    let _ = std::fs::remove_dir_all(&data);
}
