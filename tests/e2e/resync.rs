//! Clear data and resync: an entity's destination table is replaced by a
//! full copy of the source in the run the request queues (rows deleted at
//! the source and stray rows go, the cursor is the copy's), atomically: a
//! copy that fails leaves the table as it was and the clear pending. Into
//! PostgreSQL (incremental by key) and SQLite (full refresh appended).

use serde_json::json;
use sluice_tests::run_flow as run;
use sluice_tests::{Backend, TestApp, check, on_both_backends, pg_exec, spawn_app};
use sqlx::Connection;
use std::time::{Duration, Instant};

on_both_backends!(a_cleared_entity_is_replaced_by_a_full_copy);

async fn pg_ids(schema: &str, table: &str) -> Vec<i64> {
    let mut c = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
    let q = format!("SELECT id FROM {schema}.{table} ORDER BY id");
    sqlx::query_scalar(sqlx::AssertSqlSafe(q)).fetch_all(&mut c).await.unwrap()
}

async fn a_cleared_entity_is_replaced_by_a_full_copy(app: TestApp) {
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let (s, d) = (&src.name, &dst.name);
    pg_exec(format!(
        "CREATE TABLE {s}.items (id bigint PRIMARY KEY, name text NOT NULL, updated_at timestamptz NOT NULL);
         INSERT INTO {s}.items SELECT i, 'item ' || i, TIMESTAMPTZ '2026-01-01T00:00:00Z' + i * INTERVAL '1 minute'
           FROM generate_series(1, 50) i;"
    ))
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let pg = |name: &str, schema: &str| {
        json!({"name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}})
    };
    let source = check!(app.post(&format!("{base}/connections"), &ann, pg("shop", s)).await, 201).id();
    let warehouse = check!(app.post(&format!("{base}/connections"), &ann, pg("warehouse", d)).await, 201).id();
    let lite = json!({"name": "lite", "type": "sqlite", "capability": "both", "config": {"path": "lake.db"}});
    let lake = check!(app.post(&format!("{base}/connections"), &ann, lite).await, 201).id();
    let flow = |name: &str, dest: &str, mapping: serde_json::Value| {
        json!({"name": name, "source_connection_id": source, "destination_connection_id": dest,
        "config": {"mappings": [mapping]}})
    };
    let keyed = flow(
        "keyed",
        &warehouse,
        json!({"source_entity": "items", "sync_mode": "incremental_deduped", "cursor_field": "updated_at", "primary_key": "id"}),
    );
    let keyed = check!(app.post(&format!("{base}/flows"), &ann, keyed).await, 201).id();
    let appended = flow("appended", &lake, json!({"source_entity": "items", "sync_mode": "full_refresh_append"}));
    let appended = check!(app.post(&format!("{base}/flows"), &ann, appended).await, 201).id();
    for f in [&keyed, &appended] {
        assert_eq!(run(&app, &ann, &org, f).await["status"], "succeeded");
    }
    assert_eq!(run(&app, &ann, &org, &appended).await["status"], "succeeded");
    let lake_file = app.org_files(&org).join("lake.db");
    let lake_count = || async {
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", lake_file.display())).await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM items").fetch_one(&mut c).await.unwrap();
        n
    };
    assert_eq!(lake_count().await, 100, "two copies appended");

    // The destination drifts: a stray row, a row lost; the source deletes
    // one (which no cursor sees).
    pg_exec(format!(
        "INSERT INTO {d}.items VALUES (999, 'stray', now()); DELETE FROM {d}.items WHERE id = 7;
         DELETE FROM {s}.items WHERE id = 3;"
    ))
    .await;

    // A clear whose copy fails leaves the table as it was, the clear
    // pending.
    pg_exec(format!("ALTER TABLE {s}.items RENAME TO items_away")).await;
    let state = format!("{base}/flows/{keyed}/state");
    let queued = check!(app.post(&format!("{state}/items/resync"), &ann, json!({})).await, 202);
    let failed = wait(&app, &ann, &org, &queued.id()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(pg_ids(d, "items").await.contains(&999), "untouched by the failed copy");
    let st = check!(app.get(&state, &ann).await, 200).body;
    assert_eq!((&st["data"][0]["clear_pending"], &st["data"][0]["cursor_value"]), (&json!(true), &json!(null)), "{st}");
    pg_exec(format!("ALTER TABLE {s}.items_away RENAME TO items")).await;

    // The next run makes the copy: the table is the source's, exactly.
    let done = run(&app, &ann, &org, &keyed).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let want: Vec<i64> = (1..=50).filter(|i| *i != 3).collect();
    assert_eq!(pg_ids(d, "items").await, want);
    let st = check!(app.get(&state, &ann).await, 200).body;
    assert!(st["data"][0].get("clear_pending").is_none(), "{st}");
    assert!(st["data"][0]["cursor_value"].as_str().unwrap().starts_with("2026-01-01T00:50:00"), "{st}");
    let log = check!(app.get(&format!("{base}/logs/{}", done["id"].as_str().unwrap()), &ann).await, 200).body;
    assert!(log.to_string().contains("clear and resync"), "{log}");
    // Incremental again after it: nothing new read twice.
    let again = run(&app, &ann, &org, &keyed).await;
    assert_eq!(again["status"], "succeeded");
    assert_eq!(pg_ids(d, "items").await, want);

    // A full refresh appended: one copy, not a third.
    let queued = check!(app.post(&format!("{base}/flows/{appended}/state/items/resync"), &ann, json!({})).await, 202);
    assert_eq!(wait(&app, &ann, &org, &queued.id()).await["status"], "succeeded");
    assert_eq!(lake_count().await, 49);

    // Audited; a Viewer is refused, another organization finds nothing,
    // an unknown entity is not found.
    let audit = check!(app.get(&format!("{base}/audit-logs?resource_id={keyed}"), &ann).await, 200).body;
    assert!(audit.to_string().contains("flow.entity.cleared"), "{audit}");
    let vic = app.token("vic@example.com");
    let inv = check!(
        app.post(&format!("{base}/invitations"), &ann, json!({"email": "vic@example.com", "role": "Viewer"})).await,
        201
    );
    check!(app.post("/v1/invitations/accept", &vic, json!({"token": inv.body["token"]})).await, 200);
    check!(app.post(&format!("{state}/items/resync"), &vic, json!({})).await, 403);
    let eve = app.token("eve@example.com");
    check!(app.post("/v1/organizations", &eve, json!({"name": "Other"})).await, 201);
    check!(app.post(&format!("{state}/items/resync"), &eve, json!({})).await, 404);
    check!(app.post(&format!("{state}/nothing/resync"), &ann, json!({})).await, 404);
}

async fn wait(app: &TestApp, auth: &sluice_tests::Auth, org: &str, run: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run}"), auth).await, 200).body;
        if !["queued", "running"].contains(&r["status"].as_str().unwrap()) {
            return r;
        }
        assert!(Instant::now() < deadline, "run {run} unfinished: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
