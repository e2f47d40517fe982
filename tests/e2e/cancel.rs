//! A cancelled run leaves no broken connection behind: runs cancelled in
//! the middle of their COPY (PostgreSQL) and their reads and writes
//! (MariaDB), three times each, and then twenty runs over the same
//! connections in the same process, every one succeeding.

use serde_json::{Value, json};
use sluice_tests::{Auth, Backend, TestApp, check, pg_exec, spawn_app};
use std::time::{Duration, Instant};

const BIG: u32 = 300_000;

/// The run's body once it left `queued` and `running` (deadline 120 s).
async fn until_ended(app: &TestApp, auth: &Auth, org: &str, run: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run}"), auth).await, 200);
        if !["queued", "running"].contains(&r.body["status"].as_str().unwrap()) {
            return r.body;
        }
        assert!(Instant::now() < deadline, "run {run} did not end: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts `flow` after resetting `entity`'s cursor (so that the whole table
/// is read again), cancels the run once it has committed a checkpoint (in
/// the middle of its copy), and waits for it to end as canceled.
async fn cancel_mid_copy(app: &TestApp, auth: &Auth, org: &str, flow: &str, entity: &str) {
    check!(app.delete(&format!("/v1/organizations/{org}/flows/{flow}/state/{entity}"), auth).await, 204);
    let run = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), auth, json!({})).await, 202).id();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run}"), auth).await, 200);
        let status = r.body["status"].as_str().unwrap().to_string();
        assert!(["queued", "running"].contains(&status.as_str()), "the run ended before it was cancelled: {}", r.body);
        if status == "running" && r.body["entities"][0]["rows_read"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "run {run} made no progress: {}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Run now while it runs: a second run is queued behind it, and says so.
    let second = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), auth, json!({})).await, 202);
    assert_eq!(second.body["queued_behind"], json!(run), "{}", second.body);
    check!(app.post(&format!("/v1/organizations/{org}/runs/{}/cancel", second.id()), auth, json!({})).await, 200);
    check!(app.post(&format!("/v1/organizations/{org}/runs/{run}/cancel"), auth, json!({})).await, 200);
    let r = until_ended(app, auth, org, &run).await;
    assert_eq!(r["status"], "canceled", "{r}");
    let read = r["entities"][0]["rows_read"].as_u64().unwrap();
    assert!(read < u64::from(BIG), "the cancel came after the copy's end: {r}");
}

/// Cancels `big` three times mid-copy, then runs `small` twenty times
/// (each reading its whole table again), every one succeeding.
async fn cancels_then_twenty_runs(app: &TestApp, auth: &Auth, org: &str, big: &str, small: &str) {
    let first = check!(app.post(&format!("/v1/organizations/{org}/flows/{big}/run"), auth, json!({})).await, 202).id();
    assert_eq!(until_ended(app, auth, org, &first).await["status"], "succeeded");
    for _ in 0..3 {
        cancel_mid_copy(app, auth, org, big, "big").await;
    }
    for i in 0..20 {
        check!(app.delete(&format!("/v1/organizations/{org}/flows/{small}/state/small"), auth).await, 204);
        let run =
            check!(app.post(&format!("/v1/organizations/{org}/flows/{small}/run"), auth, json!({})).await, 202).id();
        let r = until_ended(app, auth, org, &run).await;
        assert_eq!(r["status"], "succeeded", "run {i} after the cancels: {r}");
        assert_eq!(r["entities"][0]["rows_read"], 1000, "{r}");
    }
}

/// An organization with connections `src` and `dst` and two flows between
/// them, of `big` and of `small`: (org, big flow, small flow).
async fn flows(app: &TestApp, auth: &Auth, src: Value, dst: Value) -> (String, String, String) {
    let org = check!(app.post("/v1/organizations", auth, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let src = check!(app.post(&conns, auth, src).await, 201).id();
    let dst = check!(app.post(&conns, auth, dst).await, 201).id();
    let flow = |entity: &str| {
        json!({"name": entity, "source_connection_id": src, "destination_connection_id": dst,
            "config": {"mappings": [{"source_entity": entity, "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}]}})
    };
    let big = check!(app.post(&format!("/v1/organizations/{org}/flows"), auth, flow("big")).await, 201).id();
    let small = check!(app.post(&format!("/v1/organizations/{org}/flows"), auth, flow("small")).await, 201).id();
    (org, big, small)
}

#[tokio::test]
async fn runs_cancelled_mid_copy_leave_postgres_connections_usable() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.big (id bigint PRIMARY KEY, v text NOT NULL, updated timestamptz NOT NULL);
         INSERT INTO {s}.big SELECT i, md5(i::text), '2026-01-01Z'::timestamptz + i * interval '1 second' FROM generate_series(1, {BIG}) i;
         CREATE TABLE {s}.small (id bigint PRIMARY KEY, v text NOT NULL, updated timestamptz NOT NULL);
         INSERT INTO {s}.small SELECT i, md5(i::text), '2026-01-01Z'::timestamptz + i * interval '1 second' FROM generate_series(1, 1000) i;"
    ))
    .await;
    let pg = |name: &str, schema: &str| {
        json!({"name": name, "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}})
    };
    let ann = app.token("ann@example.com");
    let (org, big, small) = flows(&app, &ann, pg("src", s), pg("dst", &dst.name)).await;
    cancels_then_twenty_runs(&app, &ann, &org, &big, &small).await;
}

#[tokio::test]
async fn runs_cancelled_mid_read_leave_mariadb_connections_usable() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(mut my) = sluice_tests::mariadb().await else { return };
    let tag = sluice_domain::shared::secret::random_base62(8).to_lowercase();
    let (srcdb, dstdb) = (format!("cancel_src_{tag}"), format!("cancel_dst_{tag}"));
    for sql in [
        format!("CREATE DATABASE {srcdb}"),
        format!("CREATE DATABASE {dstdb}"),
        format!(
            "CREATE TABLE {srcdb}.big (id bigint PRIMARY KEY, v varchar(40) NOT NULL, updated datetime(6) NOT NULL)"
        ),
        format!("INSERT INTO {srcdb}.big SELECT seq, md5(seq), '2026-01-01' + INTERVAL seq SECOND FROM seq_1_to_{BIG}"),
        format!(
            "CREATE TABLE {srcdb}.small (id bigint PRIMARY KEY, v varchar(40) NOT NULL, updated datetime(6) NOT NULL)"
        ),
        format!(
            "INSERT INTO {srcdb}.small SELECT seq, md5(seq), '2026-01-01' + INTERVAL seq SECOND FROM seq_1_to_1000"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut my).await.unwrap();
    }
    let mysql = |name: &str, db: &str| {
        json!({"name": name, "type": "mysql", "capability": "both",
            "config": {"host": "127.0.0.1", "database": db, "user": "root", "ssl_mode": "disabled"}})
    };
    let ann = app.token("ann@example.com");
    let (org, big, small) = flows(&app, &ann, mysql("src", &srcdb), mysql("dst", &dstdb)).await;
    cancels_then_twenty_runs(&app, &ann, &org, &big, &small).await;
    for db in [&srcdb, &dstdb] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut my).await.unwrap();
    }
}
