//! Clear data and resync: an entity's destination table is emptied and
//! loaded with a full copy of the source in the run the request queues
//! (rows deleted at the source and stray rows go, the cursor is the
//! copy's), in one transaction: a copy that fails midway leaves the table
//! as it was and the clear pending. Into PostgreSQL (incremental by key,
//! repeated keys merged) and SQLite (full refresh appended).

use serde_json::json;
use sluice_tests::{Backend, TestApp, check, on_both_backends, pg_exec, spawn_app};
use sluice_tests::{run_flow as run, wait_run};
use sqlx::Connection;

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
    let pg = sluice_tests::pg_connection;
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

    // A clear whose copy fails midway (the destination refuses a row)
    // leaves the table as it was, the clear pending.
    pg_exec(format!("ALTER TABLE {d}.items ADD CONSTRAINT no_item_9 CHECK (name <> 'item 9') NOT VALID")).await;
    let state = format!("{base}/flows/{keyed}/state");
    let queued = check!(app.post(&format!("{state}/items/resync"), &ann, json!({})).await, 202);
    let failed = wait_run(&app, &ann, &org, &queued.id()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let kept = pg_ids(d, "items").await;
    assert!(kept.contains(&999) && kept.contains(&3) && !kept.contains(&7), "untouched by the failed copy: {kept:?}");
    let st = check!(app.get(&state, &ann).await, 200).body;
    assert_eq!((&st["data"][0]["clear_pending"], &st["data"][0]["cursor_value"]), (&json!(true), &json!(null)), "{st}");
    pg_exec(format!("ALTER TABLE {d}.items DROP CONSTRAINT no_item_9")).await;

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
    // Incremental again after it: nothing read again but the row at the
    // cursor (read from it, inclusive).
    let again = run(&app, &ann, &org, &keyed).await;
    assert_eq!(again["status"], "succeeded");
    assert!(again["entities"][0]["rows_read"].as_u64().unwrap() <= 1, "{again}");
    assert_eq!(pg_ids(d, "items").await, want);

    // A key the source repeats (a table without a primary key, its rows
    // across several batches) merges, as every incremental run does.
    pg_exec(format!(
        "CREATE TABLE {s}.events (id bigint NOT NULL, at timestamptz NOT NULL);
         INSERT INTO {s}.events SELECT i % 12000, TIMESTAMPTZ '2026-01-01T00:00:00Z' + i * INTERVAL '1 second'
           FROM generate_series(1, 25000) i;"
    ))
    .await;
    let dupes = flow(
        "dupes",
        &warehouse,
        json!({"source_entity": "events", "sync_mode": "incremental_deduped", "cursor_field": "at", "primary_key": "id"}),
    );
    let dupes = check!(app.post(&format!("{base}/flows"), &ann, dupes).await, 201).id();
    assert_eq!(run(&app, &ann, &org, &dupes).await["status"], "succeeded");
    let queued = check!(app.post(&format!("{base}/flows/{dupes}/state/events/resync"), &ann, json!({})).await, 202);
    let cleared = wait_run(&app, &ann, &org, &queued.id()).await;
    assert_eq!(cleared["status"], "succeeded", "{cleared}");
    assert_eq!(pg_ids(d, "events").await.len(), 12_000);

    // An entity mapped twice shares one cursor: refused.
    let twice = json!({"name": "twice", "source_connection_id": source, "destination_connection_id": warehouse,
        "config": {"mappings": [
            {"source_entity": "items", "dest_entity": "items_a", "sync_mode": "full_refresh_overwrite"},
            {"source_entity": "items", "dest_entity": "items_b", "sync_mode": "full_refresh_append"}]}});
    let twice = check!(app.post(&format!("{base}/flows"), &ann, twice).await, 201).id();
    let refused = check!(app.post(&format!("{base}/flows/{twice}/state/items/resync"), &ann, json!({})).await, 422);
    assert!(refused.body.to_string().contains("several mappings"), "{}", refused.body);

    // A full refresh appended: one copy, not a third.
    let queued = check!(app.post(&format!("{base}/flows/{appended}/state/items/resync"), &ann, json!({})).await, 202);
    assert_eq!(wait_run(&app, &ann, &org, &queued.id()).await["status"], "succeeded");
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
