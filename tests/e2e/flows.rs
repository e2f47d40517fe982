//! Flows end to end through the API against the real servers: a PostgreSQL
//! source synced into PostgreSQL, MariaDB, SQLite and file destinations;
//! first sync, changes and inserts, second sync, cursor set back, cursor
//! reset, a new source column, overwrite; exact row counts, no duplicate keys.

use serde_json::{Value, json};
use sluice_tests::{Backend, check, spawn_app};
use sqlx::Connection;
use std::time::{Duration, Instant};

use sluice_tests::pg_exec;
use sluice_tests::preview_rows as dest_rows;
use sluice_tests::run_flow as run;

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().or_else(|| r["id"].as_str().and_then(|s| s.parse().ok())).unwrap()).collect()
}

async fn scenario(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.people (id bigint PRIMARY KEY, name text NOT NULL, updated timestamptz NOT NULL);
         INSERT INTO {s}.people VALUES (1, 'ann', '2026-01-01T00:00:00Z'), (2, 'bob', '2026-01-02T00:00:00Z'), (3, 'cy', '2026-01-03T00:00:00Z');"
    ))
    .await;
    let mut my = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await.expect("MariaDB");
    let mydb = format!("flows_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
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
                "name": format!("people-to-{name}"), "source_connection_id": source, "destination_connection_id": conn, "schedule": null,
                "config": {"mappings": [{"source_entity": "people", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}]}
            })).await,
            201
        );
        flows.push((name, conn, flow.id()));
    }

    // First sync.
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        assert_eq!(r["entities"][0]["rows_read"], 3, "{name}");
        assert_eq!(r["entities"][0]["cursor_after"], "2026-01-03T00:00:00.000000Z", "{name}: the greatest cursor");
        assert_eq!(ids(&dest_rows(&app, &ann, &org, conn, "people").await), [1, 2, 3], "{name}");
        if *name == "postgres" {
            // No target yet: loaded like a full refresh, keys built after.
            let logs = check!(
                app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), &ann).await,
                200
            );
            let first = logs.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["message"] == "bulk copy (postgres-binary): a first load into a fresh table");
            assert!(first, "{}", logs.body);
            let mut c = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
            let key: String = sqlx::query_scalar(
                "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid \
                 JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = $1 AND t.relname = 'people' AND c.contype = 'p'",
            )
            .bind(&dst.name)
            .fetch_one(&mut c)
            .await
            .expect("the target has its primary key");
            assert_eq!(key, "PRIMARY KEY (id)");
        }
    }

    // A change, an insert at the boundary value, an insert past it.
    pg_exec(format!(
        "UPDATE {s}.people SET name = 'bobby', updated = '2026-01-05T00:00:00Z' WHERE id = 2;
         INSERT INTO {s}.people VALUES (4, 'dee', '2026-01-03T00:00:00Z'), (5, 'eve', '2026-01-06T00:00:00Z');"
    ))
    .await;
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        assert_eq!(r["entities"][0]["rows_read"], 4, "{name}: the boundary is re-read, nothing lost");
        let rows = dest_rows(&app, &ann, &org, conn, "people").await;
        assert_eq!(ids(&rows), [1, 2, 3, 4, 5], "{name}: one row per key");
        assert_eq!(rows[1]["name"], "bobby", "{name}");
        if *name == "postgres" {
            let logs = check!(
                app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), &ann).await,
                200
            );
            let bulk = logs.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["message"] == "bulk copy (postgres-binary-rows)");
            assert!(bulk, "PostgreSQL to PostgreSQL stages in binary: {}", logs.body);
        }
    }

    // Cursor set back, then reset: the same rows, no duplicates.
    let (_, conn, flow) = &flows[0];
    let state = format!("/v1/organizations/{org}/flows/{flow}/state");
    let st = check!(app.get(&state, &ann).await, 200);
    assert_eq!(st.body["data"][0]["cursor_value"], "2026-01-06T00:00:00.000000Z");
    check!(app.put(&format!("{state}/people"), &ann, json!({"cursor_value": "2026-01-02T00:00:00Z"})).await, 200);
    check!(app.put(&format!("{state}/people"), &ann, json!({"cursor_value": "not a time"})).await, 422);
    check!(app.put(&format!("{state}/nope"), &ann, json!({"cursor_value": "2026-01-02T00:00:00Z"})).await, 404);
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["entities"][0]["cursor_before"], "2026-01-02T00:00:00.000000Z");
    assert_eq!(r["entities"][0]["rows_read"], 4);
    check!(app.delete(&format!("{state}/people"), &ann).await, 204);
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["entities"][0]["rows_read"], 5, "a reset reads everything");
    assert_eq!(ids(&dest_rows(&app, &ann, &org, conn, "people").await), [1, 2, 3, 4, 5]);
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?resource_id={flow}"), &ann).await, 200);
    let actions: Vec<&str> =
        audit.body["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"flow.cursor.updated") && actions.contains(&"flow.cursor.reset"), "{actions:?}");
    let updated = audit.body["data"].as_array().unwrap().iter().find(|e| e["action"] == "flow.cursor.updated").unwrap();
    assert_eq!(updated["details"]["entity"], "people");
    assert_eq!(updated["details"]["old_value"], "2026-01-06T00:00:00.000000Z");
    assert_eq!(updated["details"]["new_value"], "2026-01-02T00:00:00.000000Z");

    // A new source column reaches every destination.
    pg_exec(format!("ALTER TABLE {s}.people ADD COLUMN email text; UPDATE {s}.people SET email = 'eve@example.com', updated = '2026-01-07T00:00:00Z' WHERE id = 5;")).await;
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        let rows = dest_rows(&app, &ann, &org, conn, "people").await;
        assert_eq!(ids(&rows), [1, 2, 3, 4, 5], "{name}");
        assert_eq!(rows[4]["email"], "eve@example.com", "{name}: the new column is carried");
    }

    // Overwrite replaces the destination table.
    let over = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "snapshot", "source_connection_id": source, "destination_connection_id": conn,
            "config": {"mappings": [{"source_entity": "people", "dest_entity": "people_snapshot", "sync_mode": "full_refresh_overwrite"}]}
        })).await,
        201
    )
    .id();
    run(&app, &ann, &org, &over).await;
    pg_exec(format!("DELETE FROM {s}.people WHERE id > 2")).await;
    let r = run(&app, &ann, &org, &over).await;
    assert_eq!(r["entities"][0]["rows_written"], 2);
    assert_eq!(ids(&dest_rows(&app, &ann, &org, conn, "people_snapshot").await), [1, 2]);

    if backend == Backend::Sqlite {
        // PostgreSQL to PostgreSQL: the destination keeps the source's exact types and key.
        let types = |schema: String, table: &'static str| async move {
            let mut c = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
            let cols: Vec<(String, String)> = sqlx::query_as(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            )
            .bind(&schema)
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap();
            let (pk,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary",
            )
            .bind(&schema)
            .bind(table)
            .fetch_one(&mut c)
            .await
            .unwrap();
            (cols, pk)
        };
        assert_eq!(types(dst.name.clone(), "people_snapshot").await, types(src.name.clone(), "people").await);
    }
    let logs = check!(app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), &ann).await, 200);
    assert!(
        logs.body["data"].as_array().unwrap().iter().any(|l| l["message"].as_str().unwrap().contains("rows written")),
        "{}",
        logs.body
    );
    let details = check!(app.get(&format!("/v1/organizations/{org}/flows/{over}/details"), &ann).await, 200);
    assert_eq!(details.body["runs"].as_array().unwrap().len(), 2);
    assert_eq!(details.body["flow"]["last_run"]["status"], "succeeded");
    let runs = check!(app.get(&format!("/v1/organizations/{org}/flows/{over}/runs?status=succeeded"), &ann).await, 200);
    assert_eq!(runs.body["data"].as_array().unwrap().len(), 2);

    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {mydb}"))).execute(&mut my).await.unwrap();
}

/// PostgreSQL to PostgreSQL stages records in binary: when the source
/// holds several versions of one key (no unique constraint there), the one
/// with the greatest cursor wins, whatever the physical order; a text
/// cursor is followed too.
#[tokio::test]
async fn binary_staging_keeps_the_greatest_cursor_of_a_key() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.versions (id bigint NOT NULL, v text, updated timestamptz NOT NULL);
         INSERT INTO {s}.versions VALUES (1, 'newest', '2026-01-03Z'), (2, 'only', '2026-01-01Z'), (1, 'oldest', '2026-01-01Z'), (1, 'middle', '2026-01-02Z');
         CREATE TABLE {s}.tagged (id bigint PRIMARY KEY, tag varchar(10) NOT NULL);
         INSERT INTO {s}.tagged VALUES (1, 'a'), (2, 'b'), (3, 'c');"
    ))
    .await;
    let (ann, org, conns) = sluice_tests::org_with_pg_schemas(&app, &[("src", s), ("dst", &dst.name)]).await;
    let (source, dest) = (conns[0].clone(), conns[1].clone());
    let flow = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "versions", "source_connection_id": source, "destination_connection_id": dest,
            "config": {"mappings": [
                {"source_entity": "versions", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"},
                {"source_entity": "tagged", "sync_mode": "incremental_deduped", "cursor_field": "tag", "primary_key": "id"}
            ]}
        })).await,
        201
    )
    .id();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["entities"][0]["rows_read"], 4);
    assert_eq!(r["entities"][0]["cursor_after"], "2026-01-03T00:00:00.000000Z");
    assert_eq!(r["entities"][1]["cursor_after"], "c");
    let rows = dest_rows(&app, &ann, &org, &dest, "versions").await;
    assert_eq!(ids(&rows), [1, 2]);
    assert_eq!((rows[0]["v"].as_str(), rows[1]["v"].as_str()), (Some("newest"), Some("only")));

    // Past the text cursor: the boundary again, and what follows.
    pg_exec(format!("INSERT INTO {s}.tagged VALUES (4, 'd'), (5, 'b')")).await;
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["entities"][1]["cursor_before"], "c");
    assert_eq!(r["entities"][1]["rows_read"], 2, "c again and d; b is behind the cursor");
    assert_eq!(r["entities"][1]["cursor_after"], "d");
    assert_eq!(ids(&dest_rows(&app, &ann, &org, &dest, "tagged").await), [1, 2, 3, 4]);
    let logs = check!(app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), &ann).await, 200);
    let bulk =
        logs.body["data"].as_array().unwrap().iter().filter(|l| l["message"] == "bulk copy (postgres-binary-rows)");
    assert_eq!(bulk.count(), 2, "{}", logs.body);
}

/// One flow of six tables, source and destination on one connection (one
/// pool of 16): the entities sync at once (`concurrency`, which a
/// PostgreSQL destination bounds at 6), the large one in key ranges (2 by
/// default), while every entity's logs and progress go to the metadata
/// store.
async fn many_tables_at_once(backend: Backend, concurrency: usize) {
    let options = sluice_tests::Options { entity_concurrency: Some(concurrency), ..Default::default() };
    let Some(app) = sluice_tests::spawn_app_with(backend, options).await else { return };
    let Some(db) = sluice_tests::pg_schema().await else { return };
    let s = &db.name;
    let mut setup = String::new();
    for t in 0..5 {
        setup.push_str(&format!(
            "CREATE TABLE {s}.t{t} (id bigint PRIMARY KEY, v text NOT NULL, updated timestamptz NOT NULL);
             INSERT INTO {s}.t{t} SELECT g, 't{t}', '2026-01-01Z'::timestamptz + g * interval '1 second'
             FROM generate_series(1, 2000) g;"
        ));
    }
    // About 45 MB: read in key ranges.
    setup.push_str(&format!(
        "CREATE TABLE {s}.big (id bigint PRIMARY KEY, v text NOT NULL);
         INSERT INTO {s}.big SELECT g * 7 - 1000000, repeat('x', 120) FROM generate_series(1, 300000) g;"
    ));
    pg_exec(setup).await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conn = check!(
        app.post(
            &format!("/v1/organizations/{org}/connections"),
            &ann,
            json!({"name": "pg", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": s, "sslmode": "disable"}})
        )
        .await,
        201
    )
    .id();
    let mode = |t: usize| match t {
        0 | 1 => json!({"sync_mode": "full_refresh_overwrite"}),
        2 | 3 => json!({"sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}),
        _ => json!({"sync_mode": "full_refresh_append"}),
    };
    let mut mappings: Vec<Value> = (0..5)
        .map(|t| {
            let mut m = mode(t);
            m["source_entity"] = json!(format!("t{t}"));
            m["dest_entity"] = json!(format!("copy_t{t}"));
            m
        })
        .collect();
    mappings
        .insert(2, json!({"source_entity": "big", "dest_entity": "copy_big", "sync_mode": "full_refresh_overwrite"}));
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({
                "name": "all", "source_connection_id": conn, "destination_connection_id": conn,
                "config": {"mappings": mappings}
            })
        )
        .await,
        201
    )
    .id();
    let mut pg = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
    for round in 1..=2i64 {
        let r = run(&app, &ann, &org, &flow).await;
        assert_eq!(r["status"], "succeeded", "{backend:?} round {round}: {r}");
        let entities: Vec<&str> =
            r["entities"].as_array().unwrap().iter().map(|e| e["entity"].as_str().unwrap()).collect();
        assert_eq!(entities, ["t0", "t1", "big", "t2", "t3", "t4"], "{backend:?}: in the flow's order");
        let small = (2000i64, 2000i64, 2001i64 * 1000);
        for (table, (rows, keys, id_sum)) in [
            ("copy_big", (300_000i64, 300_000i64, 300_000i64 * 300_001 / 2 * 7 - 300_000 * 1_000_000)),
            ("copy_t0", small),
            ("copy_t1", small),
            ("copy_t2", small),
            ("copy_t3", small),
            // Appended once a run.
            ("copy_t4", (2000 * round, 2000, 2001 * 1000 * round)),
        ] {
            let got: (i64, i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT id), sum(id)::text FROM {s}.{table}"
            )))
            .fetch_one(&mut pg)
            .await
            .unwrap();
            assert_eq!(got, (rows, keys, id_sum.to_string()), "{backend:?} round {round}: {table}");
        }
    }
}

#[tokio::test]
async fn a_flow_of_many_tables_syncs_them_at_once_with_sqlite_metadata() {
    many_tables_at_once(Backend::Sqlite, 4).await;
}

#[tokio::test]
async fn a_flow_of_many_tables_syncs_them_at_once_with_postgres_metadata() {
    many_tables_at_once(Backend::Postgres, 64).await;
}

#[tokio::test]
async fn flows_sync_incrementally_into_every_destination_with_sqlite_metadata() {
    scenario(Backend::Sqlite).await;
}

#[tokio::test]
async fn flows_sync_incrementally_into_every_destination_with_postgres_metadata() {
    scenario(Backend::Postgres).await;
}

#[tokio::test]
async fn flow_validation_and_roles() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let c = app.file_connection(&ann, &org, "f", "x", None).await;
    let bad =
        check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "bad", "source_connection_id": c, "destination_connection_id": c, "schedule": "every minute",
            "config": {"mappings": [{"source_entity": "people", "sync_mode": "incremental_deduped"}]}
        })).await,
        422
    );
    let fields: Vec<&str> =
        bad.body["details"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert!(
        fields.contains(&"schedule")
            && fields.contains(&"config.mappings[0].cursor_field")
            && fields.contains(&"config.mappings[0].primary_key"),
        "{fields:?}"
    );
    check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({
                "name": "bad", "source_connection_id": c, "destination_connection_id": c,
                "config": {"mappings": [{"source_entity": "people", "sync_mode": "sometimes"}]}
            })
        )
        .await,
        422
    );
    let f = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "ok", "source_connection_id": c, "destination_connection_id": c, "schedule": "*/15 * * * *",
            "config": {"mappings": [{"source_entity": "people", "dest_entity": "people_copy", "sync_mode": "full_refresh_append"}]}
        })).await,
        201
    );
    assert!(f.body["next_run_at"].is_string());
    let paused = check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("/v1/organizations/{org}/flows/{}", f.id()),
            &ann,
            Some(json!({"status": "paused"})),
            &[]
        )
        .await,
        200
    );
    assert_eq!(paused.body["next_run_at"], Value::Null, "a paused flow is not scheduled");
    let listed = check!(app.get(&format!("/v1/organizations/{org}/flows?status=paused"), &ann).await, 200);
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1);
    // The connection is in use.
    let e = check!(app.delete(&format!("/v1/organizations/{org}/connections/{c}"), &ann).await, 409);
    assert_eq!(e.body["code"], "in_use");
    // Another organization sees nothing.
    let mal = app.token("mallory@example.com");
    check!(app.get(&format!("/v1/organizations/{org}/flows/{}", f.id()), &mal).await, 404);
    check!(app.post(&format!("/v1/organizations/{org}/flows/{}/run", f.id()), &mal, json!({})).await, 404);
}

#[tokio::test]
async fn downstream_flows_share_the_trace_and_show_in_topology_and_activity() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org).join("src");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    let c = app.file_connection(&ann, &org, "f", "src", None).await;
    let flow = |name: &str, deps: Value| {
        json!({"name": name, "source_connection_id": c, "destination_connection_id": c,
               "config": {"mappings": [{"source_entity": "events", "dest_entity": format!("out_{name}"), "sync_mode": "full_refresh_overwrite"}], "depends_on": deps}})
    };
    let extract =
        check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, flow("extract", json!([]))).await, 201).id();
    let load = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            flow("load", json!([{"flow": "extract", "on": "success"}]))
        )
        .await,
        201
    )
    .id();
    let alert = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            flow("alert", json!([{"flow": extract, "on": "failure"}]))
        )
        .await,
        201
    )
    .id();
    let cycle = check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("/v1/organizations/{org}/flows/{extract}"),
            &ann,
            Some(json!({"config": flow("extract", json!([{"flow": "load", "on": "completion"}]))["config"]})),
            &[]
        )
        .await,
        422
    );
    assert!(cycle.body["details"]["errors"][0]["message"].as_str().unwrap().contains("cycle"), "{}", cycle.body);

    let root = run(&app, &ann, &org, &extract).await;
    assert_eq!(root["status"], "succeeded");
    let trace_id = root["trace_id"].as_str().unwrap().to_string();
    // The worker runs the downstream flow in the same trace.
    let deadline = Instant::now() + Duration::from_secs(30);
    let trace = loop {
        let t = check!(app.get(&format!("/v1/organizations/{org}/flows/traces/{trace_id}"), &ann).await, 200);
        let runs = t.body["runs"].as_array().unwrap().clone();
        if runs.len() == 2 && runs.iter().all(|r| r["status"] == "succeeded") {
            break runs;
        }
        assert!(Instant::now() < deadline, "{}", t.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(trace[0]["flow_id"], extract.as_str());
    assert_eq!(trace[1]["flow_id"], load.as_str());
    assert_eq!(trace[1]["trigger"], "upstream");

    let topo = check!(app.get(&format!("/v1/organizations/{org}/flows/topology"), &ann).await, 200);
    assert_eq!(topo.body["nodes"].as_array().unwrap().len(), 3);
    let edges = topo.body["edges"].as_array().unwrap();
    assert!(edges.contains(&json!({"from": extract, "to": load, "on": "success"})), "{}", topo.body);
    assert!(edges.contains(&json!({"from": extract, "to": alert, "on": "failure"})));
    // A flow's details name its neighbours, with what each runs on.
    let details = check!(app.get(&format!("/v1/organizations/{org}/flows/{extract}/details"), &ann).await, 200);
    let mut downstream = details.body["downstream"].as_array().unwrap().clone();
    downstream.sort_by_key(|n| n["name"].as_str().unwrap().to_string());
    assert_eq!(
        downstream,
        [json!({"id": alert, "name": "alert", "on": "failure"}), json!({"id": load, "name": "load", "on": "success"})]
    );
    assert_eq!(details.body["upstream"], json!([]));
    let details = check!(app.get(&format!("/v1/organizations/{org}/flows/{load}/details"), &ann).await, 200);
    assert_eq!(details.body["upstream"], json!([{"id": extract, "name": "extract", "on": "success"}]));
    let activity = check!(app.get(&format!("/v1/organizations/{org}/activity"), &ann).await, 200);
    assert!(activity.body["data"].as_array().unwrap().iter().filter(|e| e["type"] == "run.succeeded").count() >= 2);
    check!(app.get(&format!("/v1/organizations/{org}/flows/traces/{}", uuid_like()), &ann).await, 404);

    // The internal trigger queues what a failure would have.
    let body = json!({"flow_id": extract, "run_id": root["id"], "status": "failed"});
    let resp =
        app.client.post(format!("{}/v1/internal/orchestrate/trigger", app.base)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = app
        .client
        .post(format!("{}/v1/internal/orchestrate/trigger", app.base))
        .header("X-Internal-Api-Key", sluice_tests::INTERNAL_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let queued: Value = resp.json().await.unwrap();
    assert_eq!(queued["queued"][0]["flow_id"], alert.as_str());
    assert_eq!(queued["queued"][0]["trace_id"], trace_id.as_str());
}

fn uuid_like() -> String {
    "00000000-0000-7000-8000-000000000000".into()
}

#[tokio::test]
async fn a_row_committed_late_by_an_open_transaction_is_not_lost() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.orders (id bigint PRIMARY KEY, updated timestamptz NOT NULL);
         INSERT INTO {s}.orders VALUES (1, now() - interval '1 hour'), (2, now() - interval '1 hour');"
    ))
    .await;
    // A writer stamps its row with its transaction's start (now()) and
    // commits only after the sync has read a later row.
    let mut writer = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("BEGIN; INSERT INTO {s}.orders VALUES (3, now());")))
        .execute(&mut writer)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    pg_exec(format!("INSERT INTO {s}.orders VALUES (4, clock_timestamp());")).await;

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "src", "type": "postgres", "capability": "source",
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": s, "sslmode": "disable"}})
        )
        .await,
        201
    )
    .id();
    let dest = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "wh", "type": "sqlite", "capability": "both", "config": {"path": "wh.db"}})
        )
        .await,
        201
    )
    .id();
    // No lookback: the open transaction alone must hold the cursor back.
    let flow = check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
        "name": "orders", "source_connection_id": source, "destination_connection_id": dest,
        "config": {"mappings": [{"source_entity": "orders", "sync_mode": "incremental_deduped", "cursor_field": "updated",
            "primary_key": "id", "cursor_lookback": "0"}]}})).await, 201).id();
    let first = run(&app, &ann, &org, &flow).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    assert_eq!(ids(&dest_rows(&app, &ann, &org, &dest, "orders").await), [1, 2, 4]);
    sqlx::raw_sql("COMMIT").execute(&mut writer).await.unwrap();
    let second = run(&app, &ann, &org, &flow).await;
    assert_eq!(second["status"], "succeeded", "{second}");
    assert_eq!(ids(&dest_rows(&app, &ann, &org, &dest, "orders").await), [1, 2, 3, 4], "the late row arrived");
}

#[tokio::test]
async fn a_lookback_re_reads_a_window_behind_the_cursor() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org).join("in");
    std::fs::create_dir_all(&dir).unwrap();
    let line = |id: i64, t: &str| format!("{{\"id\": {id}, \"updated\": \"2026-01-01T{t}:00Z\"}}\n");
    std::fs::write(dir.join("events.jsonl"), line(1, "10:00") + &line(2, "10:10")).unwrap();
    let files = app.file_connection(&ann, &org, "in", "in", None).await;
    let flows = format!("/v1/organizations/{org}/flows");
    let body = |name: &str, lookback: Value| {
        json!({"name": name, "source_connection_id": files, "destination_connection_id": files,
            "config": {"mappings": [{"source_entity": "events", "dest_entity": format!("out_{name}"), "sync_mode": "incremental_deduped",
                "cursor_field": "updated", "primary_key": "id", "cursor_lookback": lookback}]}})
    };
    let r = app.post(&flows, &ann, body("bad", json!("soon"))).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_eq!(r.body["details"]["errors"][0]["field"], "config.mappings[0].cursor_lookback", "{}", r.body);
    let with = check!(app.post(&flows, &ann, body("with", json!("5m"))).await, 201).id();
    let without = check!(app.post(&flows, &ann, body("without", json!("0"))).await, 201).id();
    for f in [&with, &without] {
        assert_eq!(run(&app, &ann, &org, f).await["status"], "succeeded");
    }
    // A row arrives late, 2 minutes behind the cursor.
    std::fs::write(dir.join("events.jsonl"), line(1, "10:00") + &line(2, "10:10") + &line(3, "10:08")).unwrap();
    for f in [&with, &without] {
        let r = run(&app, &ann, &org, f).await;
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["entities"][0]["cursor_after"], "2026-01-01T10:10:00.000000Z", "the cursor never moves back: {r}");
    }
    assert_eq!(ids(&dest_rows(&app, &ann, &org, &files, "out_with").await), [1, 2, 3]);
    assert_eq!(ids(&dest_rows(&app, &ann, &org, &files, "out_without").await), [1, 2], "what a lookback of 0 misses");
    let logs = check!(app.get(&format!("/v1/organizations/{org}/flows/{with}/runs"), &ann).await, 200);
    let last = logs.body["data"][0]["id"].as_str().unwrap().to_string();
    let lines = check!(app.get(&format!("/v1/organizations/{org}/logs/{last}"), &ann).await, 200);
    assert!(lines.body.to_string().contains("lookback of 5m"), "{}", lines.body);
}

#[tokio::test]
async fn a_csv_whose_odd_values_come_after_the_sample_loads_whole_with_exact_types() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org).join("csv");
    std::fs::create_dir_all(&dir).unwrap();
    // 10,000 rows; the sample (the first 1,000) sees full kinds, two-decimal
    // amounts and integer codes. Later: an empty kind, three decimals, a
    // code that is not a number.
    let mut text = String::from("id,kind,amount,code\n");
    for i in 1..=10_000 {
        let kind = if i == 5_000 { String::new() } else { format!("k{}", i % 3) };
        let amount = if i == 7_000 { "1234.567".to_string() } else { format!("{}.{:02}", i, i % 100) };
        let code = if i == 9_000 { "X-9".to_string() } else { (i * 7).to_string() };
        text.push_str(&format!("{i},{kind},{amount},{code}\n"));
    }
    std::fs::write(dir.join("payments.csv"), text).unwrap();
    let conns = format!("/v1/organizations/{org}/connections");
    let src = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "csv", "type": "file", "capability": "source", "config": {"path": "csv", "format": "csv"}})
        )
        .await,
        201
    )
    .id();
    let dst_conn = check!(app.post(&conns, &ann, json!({"name": "pg", "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}})).await, 201).id();
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({"name": "payments",
        "source_connection_id": src, "destination_connection_id": dst_conn,
        "config": {"mappings": [{"source_entity": "payments", "sync_mode": "full_refresh_overwrite"}]}})
        )
        .await,
        201
    )
    .id();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["entities"][0]["rows_written"], 10_000, "{r}");
    let mut pg = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
    let cols: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_nullable::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = 'payments' ORDER BY ordinal_position",
    )
    .bind(&dst.name)
    .fetch_all(&mut pg)
    .await
    .unwrap();
    let types: Vec<(&str, &str)> = cols.iter().map(|(c, t, _)| (c.as_str(), t.as_str())).collect();
    assert_eq!(types, [("id", "bigint"), ("kind", "text"), ("amount", "numeric"), ("code", "text")]);
    assert!(cols.iter().all(|(_, _, n)| n == "YES"), "inferred columns are nullable: {cols:?}");
    let (n, odd_amount, empty_kind, code): (i64, String, Option<String>, String) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT (SELECT count(*) FROM {s}.payments), (SELECT amount::text FROM {s}.payments WHERE id = 7000), \
         (SELECT kind FROM {s}.payments WHERE id = 5000), (SELECT code FROM {s}.payments WHERE id = 9000)",
            s = dst.name
        )))
        .fetch_one(&mut pg)
        .await
        .unwrap();
    assert_eq!((n, odd_amount.as_str(), empty_kind, code.as_str()), (10_000, "1234.567", None, "X-9"));
}

/// The flow list shows each flow's newest run (read for the whole page in
/// one query), and a flow without runs shows none.
async fn the_flow_list_shows_each_flows_last_run(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org).join("src");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    let c = app.file_connection(&ann, &org, "f", "src", None).await;
    let mut flows = Vec::new();
    for name in ["twice", "once", "never"] {
        let body = json!({"name": name, "source_connection_id": c, "destination_connection_id": c,
            "config": {"mappings": [{"source_entity": "events", "dest_entity": format!("out_{name}"), "sync_mode": "full_refresh_overwrite"}]}});
        flows.push(check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, body).await, 201).id());
    }
    let mut last = Vec::new();
    for flow in [&flows[0], &flows[0], &flows[1]] {
        last.push(run(&app, &ann, &org, flow).await["id"].as_str().unwrap().to_string());
    }
    let listed = check!(app.get(&format!("/v1/organizations/{org}/flows"), &ann).await, 200);
    let by_name = |n: &str| listed.body["data"].as_array().unwrap().iter().find(|f| f["name"] == n).unwrap().clone();
    assert_eq!(by_name("twice")["last_run"]["id"], json!(last[1]), "{}", listed.body);
    assert_eq!(by_name("once")["last_run"]["id"], json!(last[2]), "{}", listed.body);
    assert_eq!(by_name("once")["last_run"]["status"], "succeeded");
    assert!(by_name("never")["last_run"].is_null(), "{}", listed.body);
    let page = check!(app.get(&format!("/v1/organizations/{org}/flows?limit=1"), &ann).await, 200);
    assert_eq!(page.body["data"][0]["name"], "never");
    assert!(page.body["data"][0]["last_run"].is_null());
}

#[tokio::test]
async fn the_flow_list_shows_each_flows_last_run_with_sqlite_metadata() {
    the_flow_list_shows_each_flows_last_run(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_flow_list_shows_each_flows_last_run_with_postgres_metadata() {
    the_flow_list_shows_each_flows_last_run(Backend::Postgres).await;
}

/// A source column widened (integer to bigint, a longer varchar, a larger
/// numeric) widens the destination's, a dropped NOT NULL source column
/// stops being NOT NULL there, and both keep syncing; under
/// `block_on_new_column` a widened column stops the entity as drift.
#[tokio::test]
async fn widened_and_dropped_source_columns_evolve_the_destination() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let (s, d) = (&src.name, &dst.name);
    pg_exec(format!(
        "CREATE TABLE {s}.items (id bigint PRIMARY KEY, n integer NOT NULL, name varchar(5), gone text NOT NULL,
           amount numeric(6,2), updated timestamptz NOT NULL);
         INSERT INTO {s}.items VALUES (1, 7, 'ab', 'x', 1.5, '2026-01-01Z'), (2, 8, 'cd', 'y', 2.5, '2026-01-02Z');"
    ))
    .await;
    let (ann, org, conns) = sluice_tests::org_with_pg_schemas(&app, &[("src", s), ("dst", d)]).await;
    let (source, dest) = (conns[0].clone(), conns[1].clone());
    let mapping = |policy: &str| {
        json!({"mappings": [{"source_entity": "items", "sync_mode": "incremental_deduped", "cursor_field": "updated",
            "primary_key": "id", "schema_policy": policy}]})
    };
    let flow = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "items", "source_connection_id": source, "destination_connection_id": dest, "config": mapping("allow_all")
        })).await,
        201
    )
    .id();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    pg_exec(format!(
        "ALTER TABLE {s}.items ALTER COLUMN n TYPE bigint, ALTER COLUMN name TYPE varchar(50),
           ALTER COLUMN amount TYPE numeric(12,2), DROP COLUMN gone;
         INSERT INTO {s}.items VALUES (3, 5000000000, 'a much longer name', 123456.78, '2026-01-03Z');"
    ))
    .await;
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let mut pg_conn = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    let types: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT column_name::text, format_type(a.atttypid, a.atttypmod), is_nullable::text FROM information_schema.columns c
         JOIN pg_attribute a ON a.attrelid = format('%I.%I', c.table_schema, c.table_name)::regclass AND a.attname = c.column_name
         WHERE c.table_schema = $1 AND c.table_name = 'items' ORDER BY c.ordinal_position",
    )
    .bind(d)
    .fetch_all(&mut pg_conn)
    .await
    .unwrap();
    let of = |c: &str| types.iter().find(|t| t.0 == c).cloned().unwrap();
    assert_eq!(of("n").1, "bigint", "{types:?}");
    assert_eq!(of("name").1, "character varying(50)", "{types:?}");
    assert_eq!(of("amount").1, "numeric(12,2)", "{types:?}");
    assert_eq!(of("gone").2, "YES", "{types:?}");
    let (n, name): (i64, String) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT n, name FROM {d}.items WHERE id = 3")))
            .fetch_one(&mut pg_conn)
            .await
            .unwrap();
    assert_eq!((n, name.as_str()), (5_000_000_000, "a much longer name"));

    // Under block_on_new_column a widening waits for the user.
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("/v1/organizations/{org}/flows/{flow}"),
            &ann,
            Some(json!({"config": mapping("block_on_new_column")})),
            &[]
        )
        .await,
        200
    );
    pg_exec(format!("ALTER TABLE {s}.items ALTER COLUMN name TYPE varchar(80)")).await;
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["entities"][0]["status"], "drift_detected", "{r}");
    let logs = check!(app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), &ann).await, 200);
    assert!(logs.body.to_string().contains("name (character varying(50) → character varying(80))"), "{}", logs.body);
}

/// The same evolution into MariaDB from MariaDB.
#[tokio::test]
async fn widened_and_dropped_mariadb_columns_evolve_the_destination() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(mut my) = sluice_tests::mariadb().await else { return };
    let tag = sluice_domain::shared::secret::random_base62(8).to_lowercase();
    let (s, d) = (format!("widen_src_{tag}"), format!("widen_dst_{tag}"));
    let exec = |sql: String| sqlx::query(sqlx::AssertSqlSafe(sql));
    for sql in [
        format!("CREATE DATABASE {s}"),
        format!("CREATE DATABASE {d}"),
        format!(
            "CREATE TABLE {s}.items (id bigint PRIMARY KEY, n int NOT NULL, name varchar(5), gone text NOT NULL, updated datetime(6) NOT NULL)"
        ),
        format!("INSERT INTO {s}.items VALUES (1, 7, 'ab', 'x', '2026-01-01'), (2, 8, 'cd', 'y', '2026-01-02')"),
    ] {
        exec(sql).execute(&mut my).await.unwrap();
    }
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let my_conn = |name: &str, db: &str| {
        json!({"name": name, "type": "mysql", "capability": "both",
            "config": {"host": "127.0.0.1", "database": db, "user": "root", "ssl_mode": "disabled"}})
    };
    let source = check!(app.post(&conns, &ann, my_conn("src", &s)).await, 201).id();
    let dest = check!(app.post(&conns, &ann, my_conn("dst", &d)).await, 201).id();
    let flow = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({
            "name": "items", "source_connection_id": source, "destination_connection_id": dest,
            "config": {"mappings": [{"source_entity": "items", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}]}
        })).await,
        201
    )
    .id();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    for sql in [
        format!("ALTER TABLE {s}.items MODIFY n bigint NOT NULL, MODIFY name varchar(50), DROP COLUMN gone"),
        format!("INSERT INTO {s}.items VALUES (3, 5000000000, 'a much longer name', '2026-01-03')"),
    ] {
        exec(sql).execute(&mut my).await.unwrap();
    }
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let (n, name): (i64, String) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT n, name FROM {d}.items WHERE id = 3")))
            .fetch_one(&mut my)
            .await
            .unwrap();
    assert_eq!((n, name.as_str()), (5_000_000_000, "a much longer name"));
    let gone: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{d}' AND TABLE_NAME = 'items' AND COLUMN_NAME = 'gone'"
    )))
    .fetch_one(&mut my)
    .await
    .unwrap();
    assert_eq!(gone, "YES");
    for db in [&s, &d] {
        exec(format!("DROP DATABASE {db}")).execute(&mut my).await.unwrap();
    }
}

/// A flow whose source lost its cursor column can still be paused,
/// resumed, unscheduled, renamed and deleted: only a change of its
/// mappings or connections is checked against the source.
async fn a_flow_the_source_broke_can_be_paused(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    pg_exec(format!("CREATE TABLE {s}.items (id bigint PRIMARY KEY, updated timestamptz NOT NULL)")).await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "src", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": s, "sslmode": "disable"}})
        )
        .await,
        201
    )
    .id();
    let config = json!({"mappings": [{"source_entity": "items", "dest_entity": "copy", "sync_mode": "incremental_append", "cursor_field": "updated"}]});
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({
                "name": "items", "source_connection_id": source, "destination_connection_id": source,
                "schedule": "* * * * *", "config": config
            })
        )
        .await,
        201
    )
    .id();
    pg_exec(format!("ALTER TABLE {s}.items DROP COLUMN updated")).await;
    let path = format!("/v1/organizations/{org}/flows/{flow}");
    let patch = |body: Value| app.send(reqwest::Method::PATCH, &path, &ann, Some(body), &[]);
    assert_eq!(check!(patch(json!({"status": "paused"})).await, 200).body["status"], "paused");
    assert!(check!(patch(json!({"schedule": null})).await, 200).body["schedule"].is_null());
    assert_eq!(check!(patch(json!({"name": "items-broken"})).await, 200).body["name"], "items-broken");
    assert_eq!(check!(patch(json!({"status": "active"})).await, 200).body["status"], "active");
    // The same mappings sent again are not a change; a changed one is checked.
    check!(patch(json!({"config": config})).await, 200);
    let mut changed = config.clone();
    changed["mappings"][0]["dest_entity"] = json!("copy2");
    let refused = check!(patch(json!({"config": changed})).await, 422);
    assert!(refused.body.to_string().contains("updated"), "{}", refused.body);
    check!(app.delete(&path, &ann).await, 204);
}

#[tokio::test]
async fn a_flow_the_source_broke_can_be_paused_with_sqlite_metadata() {
    a_flow_the_source_broke_can_be_paused(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_flow_the_source_broke_can_be_paused_with_postgres_metadata() {
    a_flow_the_source_broke_can_be_paused(Backend::Postgres).await;
}

/// With the defaults, an incremental run reads no lookback where the
/// source holds the cursor at its oldest writing transaction (a PostgreSQL
/// role that sees every session), and a minute where it cannot (a role
/// that sees only its own); the run log says which, and creating a flow
/// that nothing protects says so.
#[tokio::test]
async fn the_default_lookback_follows_the_sources_protection() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    let role = format!("{s}_reader");
    pg_exec(format!(
        "CREATE TABLE {s}.items (id bigint PRIMARY KEY, v text, updated timestamptz NOT NULL);
         INSERT INTO {s}.items VALUES (1, 'a', '2026-01-01Z'), (2, 'b', '2026-01-02Z');
         CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {s} TO {role}; GRANT SELECT ON {s}.items TO {role};"
    ))
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let pg = |name: &str, schema: &str, user: &str| {
        json!({"name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "database": "test", "user": user, "schema": schema, "sslmode": "disable"}})
    };
    let admin_src = check!(app.post(&conns, &ann, pg("src", s, "postgres")).await, 201).id();
    let reader_src = check!(app.post(&conns, &ann, pg("src-reader", s, &role)).await, 201).id();
    let dest = check!(app.post(&conns, &ann, pg("dst", &dst.name, "postgres")).await, 201).id();
    let flow = |name: &str, source: &str, lookback: Option<&str>| {
        let mut m = json!({"source_entity": "items", "dest_entity": name, "sync_mode": "incremental_deduped",
            "cursor_field": "updated", "primary_key": "id"});
        if let Some(l) = lookback {
            m["cursor_lookback"] = json!(l);
        }
        json!({"name": name, "source_connection_id": source, "destination_connection_id": dest, "config": {"mappings": [m]}})
    };
    let second_run_log = |flow: String| {
        let (app, ann, org) = (&app, &ann, &org);
        async move {
            assert_eq!(run(app, ann, org, &flow).await["status"], "succeeded");
            let r = run(app, ann, org, &flow).await;
            let logs =
                check!(app.get(&format!("/v1/organizations/{org}/logs/{}", r["id"].as_str().unwrap()), ann).await, 200);
            logs.body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["message"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };

    let held =
        check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, flow("held", &admin_src, None)).await, 201);
    assert!(held.body.get("warnings").is_none(), "{}", held.body);
    let lines = second_run_log(held.id()).await;
    assert!(lines.iter().any(|l| l.contains("so no lookback is needed")), "{lines:#?}");
    assert!(lines.iter().any(|l| l == "reading where updated >= 2026-01-02T00:00:00.000000Z"), "{lines:#?}");

    let blind =
        check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, flow("blind", &reader_src, None)).await, 201);
    assert!(blind.body.get("warnings").is_none(), "a minute's lookback protects it: {}", blind.body);
    let lines = second_run_log(blind.id()).await;
    assert!(lines.iter().any(|l| l.contains("cannot show its open transactions, so a lookback of 1m")), "{lines:#?}");

    let bare = check!(
        app.post(&format!("/v1/organizations/{org}/flows"), &ann, flow("bare", &reader_src, Some("0"))).await,
        201
    );
    let warning = bare.body["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.starts_with("config.mappings[0]: ") && warning.contains("pg_read_all_stats"), "{}", bare.body);
    drop(src);
    pg_exec(format!("DROP ROLE IF EXISTS {role}")).await;
}
