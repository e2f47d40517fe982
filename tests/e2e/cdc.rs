//! Change data capture end to end through the API: a PostgreSQL source of
//! the test's own (`wal_level = logical`) into PostgreSQL and MariaDB
//! destinations, on both metadata stores: the first run copies the tables
//! in the slot's snapshot, later runs apply inserts, updates and deletes
//! (hard and soft) and append a change log, each change once, and the
//! state shows the position each table holds.

use serde_json::{Value, json};
use sluice_testkit::services::OwnPostgres;
use sluice_tests::preview_rows;
use sluice_tests::run_flow as run;
use sluice_tests::{Auth, Backend, TestApp, check, spawn_app};
use sqlx::Connection;

/// A PostgreSQL server of the test's own with `wal_level = logical`, and
/// a connection to its database `postgres`.
async fn logical_source() -> Option<(OwnPostgres, sqlx::PgConnection)> {
    let server = tokio::task::spawn_blocking(|| {
        OwnPostgres::start(|_| {}, |_| vec!["wal_level=logical".into(), "max_replication_slots=4".into()])
    })
    .await
    .unwrap()?;
    let conn = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    Some((server, conn))
}

/// A source connection named `name` to that server.
fn source_body(name: &str, port: u16) -> Value {
    json!({"name": name, "type": "postgres", "capability": "source",
        "config": {"host": "127.0.0.1", "port": port, "database": "postgres", "user": "postgres", "sslmode": "disable"}})
}

/// The destination table's rows as `id:note[:deleted]`, by id.
async fn rows(app: &TestApp, auth: &Auth, org: &str, conn: &str, entity: &str) -> Vec<String> {
    let records = preview_rows(app, auth, org, conn, entity).await;
    let int = |v: &Value| v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or(-1);
    let mut out: Vec<(i64, String)> = records
        .iter()
        .map(|r| {
            let mut s = format!("{}:{}", int(&r["id"]), r["note"].as_str().unwrap_or("null"));
            if let Some(op) = r["_sluice_op"].as_str() {
                s = format!("{op} {s}");
            }
            if !r["_sluice_deleted_at"].is_null() && r.get("_sluice_deleted_at").is_some() {
                s.push_str(":deleted");
            }
            (int(&r["id"]), s)
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, s)| s).collect()
}

async fn scenario(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let Some(mut my) = sluice_tests::mariadb().await else { return };
    let mydb = format!("cdc_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {mydb}"))).execute(&mut my).await.unwrap();
    let exec = |sql: &'static str| sql;
    sqlx::raw_sql(exec(
        "CREATE TABLE orders (id int PRIMARY KEY, note text, big text);
         CREATE TABLE keyless (note text);
         INSERT INTO orders VALUES (1, 'one', NULL), (2, 'two', NULL), (3, 'three', NULL);",
    ))
    .execute(&mut src)
    .await
    .unwrap();

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source_id = check!(app.post(&conns, &ann, source_body("shop", source.port)).await, 201).id();
    // The connection test says whether the source can capture changes.
    let tested = check!(app.post(&format!("{conns}/{source_id}/test"), &ann, json!({})).await, 200);
    assert_eq!(tested.body["cdc"], json!({"ready": true, "reasons": []}), "{:?}", tested.body);
    let replica = check!(
        app.post(&format!("{conns}/test"), &ann, json!({"name": "replica", "type": "postgres", "capability": "source",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}))
        .await,
        200
    );
    let wal_level: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&mut sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap())
        .await
        .unwrap();
    if wal_level != "logical" {
        assert_eq!(replica.body["cdc"]["ready"], false, "{:?}", replica.body);
        assert!(replica.body["cdc"]["reasons"][0].as_str().unwrap().starts_with("wal_level is"), "{:?}", replica.body);
    }
    let dests = [
        (
            "postgres",
            json!({"type": "postgres", "capability": "both", "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}),
        ),
        (
            "mysql",
            json!({"type": "mysql", "capability": "both", "config": {"host": "127.0.0.1", "database": mydb, "user": "root"}}),
        ),
        ("sqlite", json!({"type": "sqlite", "capability": "both", "config": {"path": "cdc.db"}})),
    ];
    let flows_path = format!("/v1/organizations/{org}/flows");
    let mappings = json!([
        {"source_entity": "orders", "sync_mode": "cdc_deduped"},
        {"source_entity": "orders", "dest_entity": "orders_soft", "sync_mode": "cdc_deduped", "delete_mode": "soft"},
        {"source_entity": "orders", "dest_entity": "orders_log", "sync_mode": "cdc_append"}
    ]);
    // A table without a primary key, or a cursor, is refused up front.
    let bad = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "bad", "source_connection_id": source_id, "destination_connection_id": source_id,
            "config": {"mappings": [
                {"source_entity": "keyless", "sync_mode": "cdc_deduped"},
                {"source_entity": "orders", "sync_mode": "cdc_append", "cursor_field": "id", "delete_mode": "soft"},
                {"source_entity": "orders", "dest_entity": "some", "sync_mode": "cdc_deduped",
                 "transform": [{"op": "filter", "field": "note", "eq": "one"}]}
            ]}})
        )
        .await,
        422
    );
    let fields: Vec<&str> =
        bad.body["details"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"config.mappings[0].source_entity"), "{fields:?}");
    assert!(fields.contains(&"config.mappings[1].cursor_field"), "{fields:?}");
    assert!(fields.contains(&"config.mappings[1].delete_mode"), "{fields:?}");
    assert!(fields.contains(&"config.mappings[2].transform"), "{fields:?}");

    // A destination that cannot apply changes is refused up front too.
    let lake = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "lake", "type": "file", "capability": "both", "config": {"path": "lake"}})
        )
        .await,
        201
    )
    .id();
    let bad = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "bad", "source_connection_id": source_id, "destination_connection_id": lake,
            "config": {"mappings": mappings}})
        )
        .await,
        422
    );
    assert_eq!(bad.body["details"]["errors"][0]["field"], "config.mappings[0].sync_mode", "{:?}", bad.body);

    let mut flows = Vec::new();
    for (name, mut body) in dests {
        body["name"] = json!(format!("wh-{name}"));
        let conn = check!(app.post(&conns, &ann, body).await, 201).id();
        let flow = check!(
            app.post(
                &flows_path,
                &ann,
                json!({"name": format!("orders-to-{name}"), "source_connection_id": source_id,
                "destination_connection_id": conn, "config": {"mappings": mappings}})
            )
            .await,
            201
        )
        .id();
        flows.push((name, conn, flow));
    }

    // First run: the tables as the slot's snapshot saw them.
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["1:one", "2:two", "3:three"], "{name}");
        assert_eq!(
            rows(&app, &ann, &org, conn, "orders_log").await,
            ["insert 1:one", "insert 2:two", "insert 3:three"],
            "{name}"
        );
    }
    // Changes, one transaction spanning two of them, a large value the
    // next update leaves as it is.
    // Incompressible, so that it is stored out of line (TOAST).
    let big = sluice_testkit::services::incompressible(5000);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO orders VALUES (4, 'four', '{big}');
         BEGIN; UPDATE orders SET note = 'TWO' WHERE id = 2; DELETE FROM orders WHERE id = 3; COMMIT;
         UPDATE orders SET note = 'FOUR' WHERE id = 4;
         INSERT INTO orders VALUES (5, 'five', NULL); DELETE FROM orders WHERE id = 5;
         INSERT INTO orders VALUES (6, 'six', NULL); UPDATE orders SET id = 7 WHERE id = 6;"
    )))
    .execute(&mut src)
    .await
    .unwrap();
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        // 5 was inserted and deleted before 6 was inserted, all before one
        // commit: it stays deleted; 6 then took the key 7: no row is left under 6.
        assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["1:one", "2:TWO", "4:FOUR", "7:six"], "{name}");
        assert_eq!(
            rows(&app, &ann, &org, conn, "orders_soft").await,
            ["1:one", "2:TWO", "3:three:deleted", "4:FOUR", "5:five:deleted", "6:six:deleted", "7:six"],
            "{name}"
        );
        let log = rows(&app, &ann, &org, conn, "orders_log").await;
        let mut want = vec!["insert 1:one", "insert 2:two", "update 2:TWO", "insert 3:three", "delete 3:null"];
        want.extend(["insert 4:four", "update 4:FOUR", "insert 5:five", "delete 5:null", "insert 6:six"]);
        want.extend(["delete 6:null", "update 7:six"]);
        let mut got = log.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}: each change once");
        // The large value the last update left alone is kept.
        let p = check!(
            app.post(&format!("{conns}/{conn}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await,
            200
        );
        let four = p.body["records"].as_array().unwrap().iter().find(|r| r["note"] == "FOUR").unwrap().clone();
        assert_eq!(four["big"].as_str().map(str::len), Some(big.len()), "{name}");
        // The state shows the position each table holds.
        let state = check!(app.get(&format!("{flows_path}/{flow}/state"), &ann).await, 200);
        let entries = state.body["data"].as_array().or(state.body.as_array()).cloned().unwrap_or_default();
        assert!(
            entries.iter().any(
                |e| e["cursor_field"] == "$position" && e["cursor_value"].as_str().is_some_and(|v| v.contains('/'))
            ),
            "{name}: {state:?}"
        );
        // Nothing new: nothing applied again.
        let again = run(&app, &ann, &org, flow).await;
        assert_eq!(again["status"], "succeeded", "{name}: {again}");
        assert_eq!(rows(&app, &ann, &org, conn, "orders_log").await.len(), 12, "{name}");
    }
    // One slot and one publication per flow on the source.
    let (slots, publications): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'sluice_%'), \
         (SELECT count(*) FROM pg_publication WHERE pubname LIKE 'sluice_%')",
    )
    .fetch_one(&mut src)
    .await
    .unwrap();
    assert_eq!((slots, publications), (3, 3));
    // A position is not moved or reset through the cursor API yet: refused.
    let (_, _, first) = &flows[0];
    let put = app.put(&format!("{flows_path}/{first}/state/orders"), &ann, json!({"cursor_value": "0/0"})).await;
    assert_eq!(put.status, 422, "{:?}", put.body);
    assert_eq!(app.delete(&format!("{flows_path}/{first}/state/orders"), &ann).await.status, 422);
    // Deleting a flow, or its last CDC mapping, removes its slot and
    // publication from the source.
    check!(app.delete(&format!("{flows_path}/{first}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 4);
    let (_, _, second) = &flows[1];
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("{flows_path}/{second}"),
            &ann,
            Some(json!({"config": {"mappings": [{"source_entity": "orders", "sync_mode": "full_refresh_overwrite"}]}})),
            &[]
        )
        .await,
        200
    );
    assert_eq!(sluice_objects(&mut src).await, 2);
    let (_, _, third) = &flows[2];
    check!(app.delete(&format!("{flows_path}/{third}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 0);
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {mydb}"))).execute(&mut my).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_apply_once_with_sqlite_metadata() {
    scenario(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_apply_once_with_postgres_metadata() {
    scenario(Backend::Postgres).await;
}

/// How many slots and publications Sluice made on the source.
async fn sluice_objects(src: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'sluice_%') + \
         (SELECT count(*) FROM pg_publication WHERE pubname LIKE 'sluice_%')",
    )
    .fetch_one(src)
    .await
    .unwrap()
}

/// Columns changing at the source while a flow streams: a new column
/// evolves the destination (`allow_all`) or stops that table alone as
/// drift (`block_on_new_column`), which resumes from its position once the
/// flow is updated; a column dropped while changes to it were unread stops
/// that table alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_column_changes_evolve_block_or_stop_one_table() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let sql = |s: &str| sqlx::AssertSqlSafe(s.to_string());
    sqlx::raw_sql(sql(
        "CREATE TABLE orders (id int PRIMARY KEY, note text); CREATE TABLE other (id int PRIMARY KEY, note text);
         INSERT INTO orders VALUES (1, 'one'); INSERT INTO other VALUES (1, 'one');",
    ))
    .execute(&mut src)
    .await
    .unwrap();
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let shop = check!(app.post(&conns, &ann, source_body("shop", source.port)).await, 201).id();
    let wh = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "wh", "type": "sqlite", "capability": "both", "config": {"path": "ddl.db"}})
        )
        .await,
        201
    )
    .id();
    let flows = format!("/v1/organizations/{org}/flows");
    let flow = |name: &str, mappings: Value| json!({"name": name, "source_connection_id": shop, "destination_connection_id": wh, "config": {"mappings": mappings}});
    let open = check!(
        app.post(&flows, &ann, flow("open", json!([{"source_entity": "orders", "sync_mode": "cdc_deduped"}]))).await,
        201
    )
    .id();
    let strict_mappings = |policy: &str| {
        json!([
            {"source_entity": "orders", "dest_entity": "orders_strict", "sync_mode": "cdc_deduped", "schema_policy": policy},
            {"source_entity": "other", "sync_mode": "cdc_deduped"}
        ])
    };
    let strict = check!(app.post(&flows, &ann, flow("strict", strict_mappings("block_on_new_column"))).await, 201).id();
    for f in [&open, &strict] {
        assert_eq!(run(&app, &ann, &org, f).await["status"], "succeeded");
    }

    sqlx::raw_sql(sql("ALTER TABLE orders ADD COLUMN extra text; UPDATE orders SET extra = 'x' WHERE id = 1;
         INSERT INTO other VALUES (2, 'two');"))
    .execute(&mut src)
    .await
    .unwrap();
    // allow_all: the destination gains the column and its value.
    let r = run(&app, &ann, &org, &open).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(preview_rows(&app, &ann, &org, &wh, "orders").await[0]["extra"], "x");
    // block_on_new_column: that table stops as drift, the other goes on.
    let r = run(&app, &ann, &org, &strict).await;
    assert_eq!(r["status"], "drift_detected", "{r}");
    let status = |r: &Value, i: usize| r["entities"][i]["status"].as_str().unwrap().to_string();
    assert_eq!((status(&r, 0), status(&r, 1)), ("drift_detected".into(), "succeeded".into()), "{r}");
    assert_eq!(preview_rows(&app, &ann, &org, &wh, "other").await.len(), 2);
    assert!(preview_rows(&app, &ann, &org, &wh, "orders_strict").await[0].get("extra").is_none());
    // Updated to allow_all, it resumes from its position: no copy again.
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("{flows}/{strict}"),
            &ann,
            Some(json!({"config": {"mappings": strict_mappings("allow_all")}})),
            &[]
        )
        .await,
        200
    );
    let r = run(&app, &ann, &org, &strict).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(preview_rows(&app, &ann, &org, &wh, "orders_strict").await[0]["extra"], "x");
    assert_eq!(r["entities"][0]["rows_read"], 1, "the one change, not a copy: {r}");

    // A column dropped while a change to it was unread stops that table.
    sqlx::raw_sql(sql("UPDATE orders SET note = 'uno' WHERE id = 1; ALTER TABLE orders DROP COLUMN note;"))
        .execute(&mut src)
        .await
        .unwrap();
    let r = run(&app, &ann, &org, &open).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["entities"][0]["error"].as_str().unwrap().contains("dropped"), "{r}");
}
