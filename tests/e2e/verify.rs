//! Verified syncs end to end: a PostgreSQL source synced into PostgreSQL,
//! MariaDB, SQLite and file destinations verifies clean on each (a masked
//! column compared masked, types that differ compared by value); a
//! destination corrupted three ways (a row deleted, a value changed, a
//! stray key inserted) is found by key; the request's rules and roles.

use serde_json::{Value, json};
use sluice_tests::run_flow as run;
use sluice_tests::{Auth, Backend, TestApp, check, on_both_backends, pg_exec, spawn_app};
use sqlx::Connection;
use std::time::{Duration, Instant};

on_both_backends!(
    clean_syncs_verify_clean_and_corruption_is_found_by_key,
    a_ducklake_mirror_is_verified_and_repaired_through_its_commits,
    postgres_tables_are_compared_by_checksums_where_the_rows_lie,
    verification_requests_are_checked
);

/// Starts a verification and waits for its end.
async fn verify(app: &TestApp, auth: &Auth, org: &str, flow: &str, body: Value) -> Value {
    let v = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/verify"), auth, body).await, 202);
    assert_eq!(v.body["status"], "queued", "{}", v.body);
    let id = v.id();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/verifications/{id}"), auth).await, 200);
        if !["queued", "running"].contains(&r.body["status"].as_str().unwrap()) {
            return r.body;
        }
        assert!(Instant::now() < deadline, "verification {id} unfinished after 90 s: {}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn clean_syncs_verify_clean_and_corruption_is_found_by_key(app: TestApp) {
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.people (id bigint PRIMARY KEY, name text NOT NULL, email text, score numeric(10,2),
           meta jsonb, born date, active boolean, updated timestamptz NOT NULL);
         INSERT INTO {s}.people SELECT i, 'person ' || i, 'p' || i || '@example.com', i * 1.25,
           jsonb_build_object('tags', jsonb_build_array('a', i)), DATE '2000-01-01' + i, i % 2 = 0,
           TIMESTAMPTZ '2026-01-01T00:00:00Z' + i * INTERVAL '1 minute' FROM generate_series(1, 60) i;"
    ))
    .await;
    let Some(mut my) = sluice_tests::mariadb().await else { return };
    let mydb = format!("verify_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {mydb}"))).execute(&mut my).await.unwrap();

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let pg = |schema: &str, cap: &str| {
        json!({"type": "postgres", "capability": cap,
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}})
    };
    let mut body = pg(s, "source");
    body["name"] = json!("crm");
    let source = check!(app.post(&conns, &ann, body).await, 201).id();
    let dests = [
        ("postgres", pg(&dst.name, "both")),
        (
            "mysql",
            json!({"type": "mysql", "capability": "both", "config": {"host": "127.0.0.1", "database": mydb, "user": "root"}}),
        ),
        ("sqlite", json!({"type": "sqlite", "capability": "both", "config": {"path": "warehouse.db"}})),
        ("file", json!({"type": "file", "capability": "both", "config": {"path": "lake", "format": "jsonl"}})),
    ];
    let mut flows = Vec::new();
    for (name, mut body) in dests {
        body["name"] = json!(format!("wh-{name}"));
        let conn = check!(app.post(&conns, &ann, body).await, 201).id();
        let flow = check!(
            app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
                "name": format!("people-to-{name}"), "source_connection_id": source, "destination_connection_id": conn,
                "config": {"mappings": [{"source_entity": "people", "sync_mode": "incremental_deduped", "cursor_field": "updated",
                    "primary_key": "id", "transform": [{"op": "mask", "field": "email"}]}]}
            })).await,
            201
        );
        flows.push((name, flow.id()));
    }
    for (name, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        let v = verify(&app, &ann, &org, flow, json!({})).await;
        assert_eq!(v["status"], "matched", "{name}: {v}");
        let e = &v["entities"][0];
        assert_eq!(e["entity"], "people", "{name}: {v}");
        assert_eq!((e["source_rows"].as_u64(), e["destination_rows"].as_u64()), (Some(60), Some(60)), "{name}: {v}");
        for kind in ["missing", "extra", "different"] {
            assert_eq!(e[kind], json!({"count": 0, "keys": []}), "{name}: {v}");
        }
    }

    // Each database destination corrupted three ways.
    let d = &dst.name;
    pg_exec(format!(
        "DELETE FROM {d}.people WHERE id = 3; UPDATE {d}.people SET score = 99 WHERE id = 5;
         INSERT INTO {d}.people SELECT 999, name, email, score, meta, born, active, updated FROM {d}.people WHERE id = 1;"
    ))
    .await;
    for sql in [
        "DELETE FROM people WHERE id = 3",
        "UPDATE people SET score = 99 WHERE id = 5",
        "INSERT INTO people SELECT 999, name, email, score, meta, born, active, updated FROM people WHERE id = 1",
    ] {
        let sql = sql.replace("people", &format!("{mydb}.people"));
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut my).await.unwrap();
    }
    let lite = app.org_files(&org).join("warehouse.db");
    let mut lite =
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", lite.display())).await.expect("the SQLite destination");
    for sql in [
        "DELETE FROM people WHERE id = 3",
        "UPDATE people SET score = 99 WHERE id = 5",
        "INSERT INTO people SELECT 999, name, email, score, meta, born, active, updated FROM people WHERE id = 1",
    ] {
        sqlx::query(sql).execute(&mut lite).await.unwrap();
    }
    drop(lite);
    for (name, flow) in flows.iter().filter(|(n, _)| *n != "file") {
        let v = verify(&app, &ann, &org, flow, json!({"entities": ["people"]})).await;
        assert_eq!(v["status"], "mismatched", "{name}: {v}");
        let e = &v["entities"][0];
        assert_eq!((e["source_rows"].as_u64(), e["destination_rows"].as_u64()), (Some(60), Some(60)), "{name}: {v}");
        assert_eq!(e["missing"], json!({"count": 1, "keys": [3]}), "{name}: {v}");
        assert_eq!(e["extra"], json!({"count": 1, "keys": [999]}), "{name}: {v}");
        assert_eq!(e["different"], json!({"count": 1, "keys": [5]}), "{name}: {v}");
        // Listed with the flow's others, newest first.
        let list = check!(app.get(&format!("/v1/organizations/{org}/flows/{flow}/verifications"), &ann).await, 200);
        let list = list.body["data"].as_array().unwrap().clone();
        assert_eq!(list.len(), 2, "{name}");
        assert_eq!((list[0]["id"].clone(), list[1]["status"].clone()), (v["id"].clone(), json!("matched")), "{name}");
    }
    // Repaired: one run syncs exactly the differing keys again, then a
    // new verification finds each destination equal to its source.
    for (name, flow) in flows.iter().filter(|(n, _)| *n != "file") {
        let v = verify(&app, &ann, &org, flow, json!({"repair": true})).await;
        assert_eq!((v["status"].as_str(), v["repair"].as_bool()), (Some("mismatched"), Some(true)), "{name}: {v}");
        let run_id = v["repair_run_id"].as_str().unwrap_or_else(|| panic!("{name}: no repair run: {v}")).to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        let run = loop {
            let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run_id}"), &ann).await, 200).body;
            if r["finished_at"].is_string() {
                break r;
            }
            assert!(Instant::now() < deadline, "{name}: repair run unfinished: {r}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(run["status"], "succeeded", "{name}: {run}");
        assert_eq!(run["entities"][0]["rows_written"], 3, "{name}: two rows written again, one removed: {run}");
        let list = format!("/v1/organizations/{org}/flows/{flow}/verifications");
        let after = loop {
            let l = check!(app.get(&list, &ann).await, 200).body;
            let newest = l["data"][0].clone();
            if newest["id"] != v["id"]
                && ["matched", "mismatched", "failed"].contains(&newest["status"].as_str().unwrap())
            {
                break newest;
            }
            assert!(Instant::now() < deadline, "{name}: no verification after the repair: {l}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(after["status"], "matched", "{name}: {after}");
        assert_eq!(after["requested"], json!(["people"]), "{name}: {after}");
    }
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?action=run.triggered"), &ann).await, 200);
    let repairs =
        audit.body["data"].as_array().unwrap().iter().filter(|a| a["details"]["repair_of"].is_string()).count();
    assert_eq!(repairs, 3, "{}", audit.body);
    // The mismatch is an activity event rules can deliver.
    let events = check!(app.get(&format!("/v1/organizations/{org}/activity"), &ann).await, 200);
    let n = events.body["data"].as_array().unwrap().iter().filter(|e| e["type"] == "verify.mismatch").count();
    assert_eq!(n, 6, "three corruptions found, then found again by the repairs: {}", events.body);
}

/// A PostgreSQL table mirrored into PostgreSQL, columns of equal types and
/// no computed column: both databases sum their rows by key range, and
/// only ranges that differ are read. What is found is what a read finds:
/// a missing row, a changed value, a stray key inside the span and one
/// beyond it, a soft-deleted row left out.
async fn postgres_tables_are_compared_by_checksums_where_the_rows_lie(app: TestApp) {
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let (s, d) = (&src.name, &dst.name);
    pg_exec(format!(
        "CREATE TABLE {s}.events (id bigint PRIMARY KEY, kind text, amount numeric(12,2), payload jsonb,
           at timestamptz NOT NULL);
         INSERT INTO {s}.events SELECT i * 3, 'k' || (i % 5), i * 0.5, jsonb_build_object('n', i),
           TIMESTAMPTZ '2026-01-01Z' + i * INTERVAL '1 s' FROM generate_series(1, 5000) i;"
    ))
    .await;
    let (ann, org, ids) = sluice_tests::org_with_pg_schemas(&app, &[("app", s), ("wh", d)]).await;
    let (source, wh) = (&ids[0], &ids[1]);
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({
                "name": "events", "source_connection_id": source, "destination_connection_id": wh,
                "config": {"mappings": [{"source_entity": "events", "sync_mode": "full_refresh_overwrite",
                    "transform": [{"op": "rename", "from": "kind", "to": "category"}]}]}
            })
        )
        .await,
        201
    )
    .id();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "matched", "{v}");
    let e = &v["entities"][0];
    assert_eq!((e["source_rows"].as_u64(), e["destination_rows"].as_u64()), (Some(5000), Some(5000)), "{v}");
    assert_eq!(e["summed_rows"], 5000, "every range summed alike, none read: {v}");

    pg_exec(format!(
        "DELETE FROM {d}.events WHERE id = 300; UPDATE {d}.events SET payload = '{{\"n\": 0}}' WHERE id = 6000;
         INSERT INTO {d}.events (id, category, amount, payload, at) VALUES (7001, 'k1', 1, '{{}}', now()), (99999, 'k1', 1, '{{}}', now());"
    ))
    .await;
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "mismatched", "{v}");
    let e = &v["entities"][0];
    assert_eq!(e["missing"], json!({"count": 1, "keys": [300]}), "{v}");
    assert_eq!(e["different"], json!({"count": 1, "keys": [6000]}), "{v}");
    assert_eq!(e["extra"], json!({"count": 2, "keys": [7001, 99999]}), "{v}");
    assert_eq!((e["source_rows"].as_u64(), e["destination_rows"].as_u64()), (Some(5000), Some(5001)), "{v}");
    let summed = e["summed_rows"].as_u64().unwrap();
    assert!(summed > 4000 && summed < 5000, "the ranges of the three keys inside the span were read: {v}");
}

async fn verification_requests_are_checked(app: TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let file = app.org_files(&org).join("a.db");
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
    sqlx::query("CREATE TABLE events (id INTEGER PRIMARY KEY)").execute(&mut c).await.unwrap();
    sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)").execute(&mut c).await.unwrap();
    let a = check!(app.post(&conns, &ann, lite("a", "a.db")).await, 201).id();
    let b = check!(app.post(&conns, &ann, lite("b", "b.db")).await, 201).id();
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({
                "name": "log", "source_connection_id": a, "destination_connection_id": b,
                "config": {"mappings": [
                    {"source_entity": "events", "sync_mode": "incremental_append", "cursor_field": "id"},
                    {"source_entity": "users", "sync_mode": "full_refresh_overwrite"}
                ]}
            })
        )
        .await,
        201
    )
    .id();
    let url = format!("/v1/organizations/{org}/flows/{flow}/verify");
    let r = check!(app.post(&url, &ann, json!({"entities": ["events", "nope"]})).await, 422);
    let details = r.body["details"].to_string();
    assert!(details.contains("entities[0]") && details.contains("appends rows"), "{}", r.body);
    assert!(details.contains("entities[1]") && details.contains("does not sync 'nope'"), "{}", r.body);
    check!(app.post(&url, &ann, json!({"entities": "users"})).await, 422);
    check!(app.post(&url, &ann, json!({"unknown": true})).await, 422);
    // A Viewer reads verifications but starts none; another organization
    // sees nothing.
    let k = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), &ann, json!({"name": "v", "roles": ["Viewer"]})).await,
        201
    );
    let viewer = Auth::Key(k.body["key"].as_str().unwrap().to_string());
    check!(app.post(&url, &viewer, json!({})).await, 403);
    // Every entity the flow mirrors by key; before a first run there is
    // nothing to compare with.
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["requested"], json!(["users"]), "{v}");
    assert_eq!(
        (v["status"].as_str(), v["error"].as_str()),
        (Some("failed"), Some("the destination holds nothing yet: run the flow first")),
        "{v}"
    );
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "matched", "{v}");
    assert_eq!(v["entities"][0]["source_rows"], 0, "{v}");
    // A flow that verifies after each successful run.
    let config = |verify: &str, users: &str| {
        json!({"config": {"verify": verify, "mappings": [
            {"source_entity": "events", "sync_mode": "incremental_append", "cursor_field": "id"},
            {"source_entity": "users", "sync_mode": users}
        ]}})
    };
    let flow_url = format!("/v1/organizations/{org}/flows/{flow}");
    let r = check!(app.patch(&flow_url, &ann, config("after_run", "full_refresh_append")).await, 422);
    assert_eq!(r.body["details"]["errors"][0]["field"], "config.verify", "{}", r.body);
    check!(app.patch(&flow_url, &ann, config("after_run", "full_refresh_overwrite")).await, 200);
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    let list = format!("/v1/organizations/{org}/flows/{flow}/verifications");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = check!(app.get(&list, &ann).await, 200);
        let newest = l.body["data"][0].clone();
        if l.body["data"].as_array().unwrap().len() == 3 && newest["status"] == "matched" {
            break;
        }
        assert!(Instant::now() < deadline, "no verification after the run: {}", l.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A source table gone fails the verification, naming it.
    sqlx::query("DROP TABLE users").execute(&mut c).await.unwrap();
    drop(c);
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("users: "), "{v}");
    assert_eq!(check!(app.get(&list, &viewer).await, 200).body["data"].as_array().unwrap().len(), 4);
    let bob = app.token("bob@example.com");
    let other = check!(app.post("/v1/organizations", &bob, json!({"name": "Other"})).await, 201).id();
    let one = format!("/v1/organizations/{other}/verifications/{}", v["id"].as_str().unwrap());
    check!(app.get(&one, &bob).await, 404);
    check!(app.get(&format!("/v1/organizations/{other}/flows/{flow}/verifications"), &bob).await, 404);
    check!(app.post(&format!("/v1/organizations/{other}/flows/{flow}/verify"), &bob, json!({})).await, 404);
}

/// A DuckLake mirror (its catalog a SQLite file) verifies clean; a user's
/// DuckDB deleting, changing and adding rows is found by key (the lake read
/// as its files less its delete files), and the repair run writes the
/// differing keys again through a commit like any other, after which the
/// lake matches again.
async fn a_ducklake_mirror_is_verified_and_repaired_through_its_commits(app: TestApp) {
    let Some(python) = sluice_testkit::services::lake_python() else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.people (id bigint PRIMARY KEY, name text NOT NULL, email text, score numeric(10,2),
           born date, active boolean, updated timestamptz NOT NULL);
         INSERT INTO {s}.people SELECT i, 'person ' || i, 'p' || i || '@example.com', i * 1.25,
           DATE '2000-01-01' + i, i % 2 = 0, TIMESTAMPTZ '2026-01-01T00:00:00Z' + i * INTERVAL '1 minute'
           FROM generate_series(1, 60) i;"
    ))
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "crm", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": s, "sslmode": "disable"}})
        )
        .await,
        201
    )
    .id();
    let lake = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "lake", "type": "ducklake", "capability": "destination",
            "config": {"catalog": {"type": "sqlite", "path": "lake/catalog.sqlite"}, "data_path": "lake/tables"}})
        )
        .await,
        201
    )
    .id();
    let flow =
        check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "people-to-lake", "source_connection_id": source, "destination_connection_id": lake,
            "config": {"mappings": [{"source_entity": "people", "sync_mode": "incremental_deduped",
                "cursor_field": "updated", "primary_key": "id", "transform": [{"op": "mask", "field": "email"}]}]}
        }))
        .await,
        201
    )
        .id();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "matched", "{v}");
    let e = &v["entities"][0];
    assert_eq!((e["source_rows"].as_u64(), e["destination_rows"].as_u64()), (Some(60), Some(60)), "{v}");

    let dir = std::fs::canonicalize(app.org_files(&org)).unwrap().join("lake");
    let (catalog, data) = (dir.join("catalog.sqlite"), dir.join("tables"));
    sluice_testkit::services::ducklake_exec(
        &python,
        &catalog,
        &data,
        "DELETE FROM lake.main.people WHERE id = 3; UPDATE lake.main.people SET score = 99 WHERE id = 5; \
         INSERT INTO lake.main.people SELECT 999, name, email, score, born, active, updated FROM lake.main.people \
         WHERE id = 1; SELECT 1",
    );
    let v = verify(&app, &ann, &org, &flow, json!({"repair": true})).await;
    assert_eq!(v["status"], "mismatched", "{v}");
    let e = &v["entities"][0];
    assert_eq!(e["missing"], json!({"count": 1, "keys": [3]}), "{v}");
    assert_eq!(e["extra"], json!({"count": 1, "keys": [999]}), "{v}");
    assert_eq!(e["different"], json!({"count": 1, "keys": [5]}), "{v}");
    let run_id = v["repair_run_id"].as_str().unwrap_or_else(|| panic!("no repair run: {v}")).to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let repair = loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run_id}"), &ann).await, 200).body;
        if r["finished_at"].is_string() {
            break r;
        }
        assert!(Instant::now() < deadline, "repair run unfinished: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(repair["status"], "succeeded", "{repair}");
    assert_eq!(repair["entities"][0]["rows_written"], 3, "two rows written again, one removed: {repair}");
    let seen = sluice_testkit::services::ducklake_query(
        &python,
        &catalog,
        &data,
        "SELECT count(*), count(DISTINCT id), max(id), sum(score)::VARCHAR FROM lake.main.people",
    );
    let sum: f64 = (1..=60).map(|i| f64::from(i) * 1.25).sum();
    assert_eq!(seen, json!([[60, 60, 60, format!("{sum:.2}")]]), "the lake equals the source again: {seen}");
    let v = verify(&app, &ann, &org, &flow, json!({})).await;
    assert_eq!(v["status"], "matched", "{v}");
}
