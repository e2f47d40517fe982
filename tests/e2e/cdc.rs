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
        OwnPostgres::start(|_| {}, |_| vec!["wal_level=logical".into(), "max_replication_slots=8".into()])
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

/// Ann's organization with a source connection `shop` to the logical
/// server on `port` and a PostgreSQL destination `wh` in `schema`:
/// `(ann, org, shop, wh)`.
async fn shop_and_warehouse(app: &TestApp, port: u16, schema: &str) -> (Auth, String, String, String) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source_id = check!(app.post(&conns, &ann, source_body("shop", port)).await, 201).id();
    let conn = check!(
        app.post(&conns, &ann, json!({"name": "wh", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}}))
        .await,
        201
    )
    .id();
    (ann, org, source_id, conn)
}

/// The destination table's rows as `id:note[:deleted]`, by id.
pub(crate) async fn rows(app: &TestApp, auth: &Auth, org: &str, conn: &str, entity: &str) -> Vec<String> {
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
    // The server and role can; one table cannot be mirrored.
    let reasons = json!(["table \"public\".\"keyless\" has no primary key"]);
    assert_eq!(tested.body["cdc"], json!({"ready": false, "reasons": reasons}), "{:?}", tested.body);
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
        // Files commit rows and positions through each file's manifest.
        ("jsonl", json!({"type": "file", "capability": "both", "config": {"path": "lake"}})),
        ("csv", json!({"type": "file", "capability": "both", "config": {"path": "sheets", "format": "csv"}})),
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
                {"source_entity": "orders", "dest_entity": "some", "sync_mode": "cdc_append",
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
    assert_eq!((slots, publications), (5, 5));
    let (_, _, first) = &flows[0];
    // Deleting a flow, or its last CDC mapping, removes its slot and
    // publication from the source.
    check!(app.delete(&format!("{flows_path}/{first}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 8);
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
    assert_eq!(sluice_objects(&mut src).await, 6);
    for (_, _, flow) in &flows[2..] {
        check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
    }
    assert_eq!(sluice_objects(&mut src).await, 0);
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {mydb}"))).execute(&mut my).await.unwrap();
}

/// A CDC entity's position through the state API and what the stream does
/// with it: an idle table does not keep the slot's log; PUT moves a table
/// forward to a later position the slot retains (and refuses any other);
/// DELETE copies it again, in a snapshot of its own, leaving the mirror
/// equal to the source (a row only the destination had goes) and the change
/// log with the copy's rows as inserts; a slot dropped by hand fails the
/// tables with `position_lost` until they are copied again; a `cdc_append`
/// table joins a running flow. Audited with old and new values.
async fn positions(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    sqlx::raw_sql(
        "CREATE TABLE orders (id int PRIMARY KEY, note text);
         CREATE TABLE items (id int PRIMARY KEY, note text);
         CREATE TABLE busy (id serial PRIMARY KEY, note text);
         INSERT INTO orders VALUES (1, 'one'), (2, 'two');
         INSERT INTO items VALUES (1, 'pen');",
    )
    .execute(&mut src)
    .await
    .unwrap();
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    // A budget of one byte of retained log: every run is over it.
    let mut body = source_body("shop", source.port);
    body["config"]["cdc_max_retained"] = json!(1);
    let source_id = check!(app.post(&conns, &ann, body).await, 201).id();
    let conn = check!(
        app.post(&conns, &ann, json!({"name": "wh", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}))
        .await,
        201
    )
    .id();
    let flows_path = format!("/v1/organizations/{org}/flows");
    let mut mappings = json!([
        {"source_entity": "orders", "sync_mode": "cdc_deduped"},
        {"source_entity": "orders", "dest_entity": "orders_soft", "sync_mode": "cdc_deduped", "delete_mode": "soft"},
        {"source_entity": "orders", "dest_entity": "orders_log", "sync_mode": "cdc_append"}
    ]);
    let flow = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "orders", "source_connection_id": source_id,
            "destination_connection_id": conn, "config": {"mappings": mappings}})
        )
        .await,
        201
    )
    .id();
    let state_path = format!("{flows_path}/{flow}/state");
    let state = check!(app.get(&state_path, &ann).await, 200).body;
    assert_eq!(state["data"].as_array().unwrap().len(), 1, "one entry for the table its three mappings read: {state}");
    assert_eq!(state["data"][0]["cursor_field"], "$position", "{state}");
    assert_eq!(state["data"][0]["snapshot"], json!({"state": "pending", "chunks_done": 0, "chunks_total": 1}));
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    let state = check!(app.get(&state_path, &ann).await, 200).body;
    assert_eq!(state["data"][0]["snapshot"]["state"], "done", "{state}");
    let held = |state: &Value| state["data"][0]["cursor_value"].as_str().unwrap().to_string();
    let first = held(&state);

    // Another table of the database takes writes, the flow's tables none:
    // a run moves the slot on all the same.
    for _ in 0..20 {
        sqlx::query("INSERT INTO busy (note) SELECT repeat('x', 100) FROM generate_series(1, 500)")
            .execute(&mut src)
            .await
            .unwrap();
    }
    let busy_end: String =
        sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text").fetch_one(&mut src).await.unwrap();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    let behind: i64 = sqlx::query_scalar(
        "SELECT pg_wal_lsn_diff($1::pg_lsn, confirmed_flush_lsn)::bigint FROM pg_replication_slots \
         WHERE slot_name LIKE 'sluice_%'",
    )
    .bind(&busy_end)
    .fetch_one(&mut src)
    .await
    .unwrap();
    assert!(behind <= 0, "the slot stays {behind} bytes behind the idle tables' writes");
    let idle = held(&check!(app.get(&state_path, &ann).await, 200).body);
    assert_ne!(idle, first, "an idle table's position moves on too");
    // The metrics show the log kept and the lag; the budget's event is
    // recorded once (a day), not at every run.
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    for name in ["sluice_cdc_retained_bytes", "sluice_cdc_lag_seconds"] {
        let series = format!("{name}{{flow=\"{flow}\"}} ");
        let line = metrics.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("{series} in {metrics}"));
        let value: f64 = line[series.len()..].parse().unwrap();
        assert!(value >= 0.0, "{line}");
    }
    let activity = check!(app.get(&format!("/v1/organizations/{org}/activity"), &ann).await, 200).body;
    let over: Vec<&Value> =
        activity["data"].as_array().unwrap().iter().filter(|e| e["type"] == "cdc.retained_over_budget").collect();
    assert_eq!(over.len(), 1, "{activity}");
    assert_eq!(over[0]["data"]["flow_id"], flow.as_str(), "{:?}", over[0]);
    assert_eq!(over[0]["data"]["budget_bytes"], 1, "{:?}", over[0]);
    // The flow's page says the same, read from the source: the slot, the
    // log it keeps against the budget, each table's snapshot.
    let mut console = crate::console::Browser::new(&app);
    console.sign_in(&crate::console::token_of(&ann)).await;
    let (status, page, _) = console.get(&format!("/o/{org}/flows/{flow}")).await;
    assert_eq!(status, 200, "{page}");
    let slot = flow.replace('-', "");
    for shown in ["Change stream", slot.as_str(), "of the 1 B budget", "over budget", ">done<"] {
        assert!(page.contains(shown), "{shown} on the flow's page: {page}");
    }
    let (status, overview, _) = console.get(&format!("/o/{org}")).await;
    assert_eq!(status, 200, "{overview}");
    let link = format!("/o/{org}/flows/{flow}\">orders</a>");
    for shown in ["Change streams", link.as_str(), "over budget"] {
        assert!(overview.contains(shown), "{shown} on the overview: {overview}");
    }

    // Another organization neither sees nor moves this flow's state.
    let eve = app.token("eve@example.com");
    let other = check!(app.post("/v1/organizations", &eve, json!({"name": "Other"})).await, 201).id();
    for path in [state_path.clone(), format!("/v1/organizations/{other}/flows/{flow}/state")] {
        let got = app.get(&path, &eve).await;
        assert_eq!(got.status, 404, "{path}: {:?}", got.body);
        let put = app.put(&format!("{path}/orders"), &eve, json!({"cursor_value": "0/0"})).await;
        assert_eq!(put.status, 404, "{path}: {:?}", put.body);
        assert_eq!(app.delete(&format!("{path}/orders"), &eve).await.status, 404, "{path}");
    }
    assert_eq!(held(&check!(app.get(&state_path, &ann).await, 200).body), idle);

    // PUT: earlier, unknown or past the end is refused; later skips what is between.
    for bad in ["0/0", "yesterday", "FFFFFFFF/0"] {
        let put = app.put(&format!("{state_path}/orders"), &ann, json!({"cursor_value": bad})).await;
        assert_eq!(put.status, 422, "{bad}: {:?}", put.body);
        assert_eq!(put.body["code"], "position_not_retained", "{bad}: {:?}", put.body);
    }
    sqlx::query("INSERT INTO orders VALUES (3, 'skipped')").execute(&mut src).await.unwrap();
    let past: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text").fetch_one(&mut src).await.unwrap();
    let put = check!(app.put(&format!("{state_path}/orders"), &ann, json!({"cursor_value": past})).await, 200);
    assert_eq!(put.body["cursor_value"], past.as_str());
    sqlx::query("INSERT INTO orders VALUES (4, 'four')").execute(&mut src).await.unwrap();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    assert_eq!(rows(&app, &ann, &org, &conn, "orders").await, ["1:one", "2:two", "4:four"]);
    // Every mapping of the table moved.
    assert_eq!(rows(&app, &ann, &org, &conn, "orders_soft").await, ["1:one", "2:two", "4:four"]);
    assert_eq!(rows(&app, &ann, &org, &conn, "orders_log").await, ["insert 1:one", "insert 2:two", "insert 4:four"]);

    // DELETE: copied again; a row only the destination has goes (or is
    // marked deleted), the change log gains the copy's rows as inserts.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {}.orders VALUES (99, 'stale'); INSERT INTO {}.orders_soft (id, note) VALUES (99, 'stale')",
        dst.name, dst.name
    )))
    .execute(&mut sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap())
    .await
    .unwrap();
    for entity in ["orders"] {
        check!(app.delete(&format!("{state_path}/{entity}"), &ann).await, 204);
    }
    let state = check!(app.get(&state_path, &ann).await, 200).body;
    assert_eq!(state["data"][0]["snapshot"]["state"], "pending", "{state}");
    assert!(state["data"][0]["cursor_value"].is_null(), "{state}");
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(rows(&app, &ann, &org, &conn, "orders").await, ["1:one", "2:two", "3:skipped", "4:four"]);
    assert_eq!(
        rows(&app, &ann, &org, &conn, "orders_soft").await,
        ["1:one", "2:two", "3:skipped", "4:four", "99:stale:deleted"]
    );
    let log = rows(&app, &ann, &org, &conn, "orders_log").await;
    assert_eq!(log.iter().filter(|r| r.starts_with("insert 4:")).count(), 2, "{log:?}");
    assert_eq!(log.len(), 2 + 1 + 4, "the first copy, an insert, the copy again: {log:?}");
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?resource_id={flow}"), &ann).await, 200);
    let entries = audit.body["data"].as_array().unwrap();
    let moved = entries.iter().find(|e| e["action"] == "flow.cursor.updated").expect("PUT audited");
    assert_eq!(moved["details"]["new_value"], past.as_str(), "{moved}");
    assert!(moved["details"]["old_value"].as_str().is_some_and(|v| v.contains('/')), "{moved}");
    let reset = entries.iter().find(|e| e["action"] == "flow.cursor.reset").expect("DELETE audited");
    assert!(reset["details"]["old_value"].as_str().is_some_and(|v| v.contains('/')), "{reset}");
    assert!(reset["details"]["new_value"].is_null(), "{reset}");

    // A cdc_append table joins the running flow: copied once, then its changes.
    mappings.as_array_mut().unwrap().push(json!({"source_entity": "items", "sync_mode": "cdc_append"}));
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("{flows_path}/{flow}"),
            &ann,
            Some(json!({"config": {"mappings": mappings}})),
            &[]
        )
        .await,
        200
    );
    sqlx::query("INSERT INTO items VALUES (2, 'ink')").execute(&mut src).await.unwrap();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    sqlx::query("UPDATE items SET note = 'quill' WHERE id = 1").execute(&mut src).await.unwrap();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    assert_eq!(rows(&app, &ann, &org, &conn, "items").await, ["insert 1:pen", "update 1:quill", "insert 2:ink"]);

    // The slot dropped by hand: the changes since are lost, and the run
    // says so per table until each is copied again.
    sqlx::query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'sluice_%'")
        .execute(&mut src)
        .await
        .unwrap();
    sqlx::query("INSERT INTO orders VALUES (5, 'five')").execute(&mut src).await.unwrap();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["entities"][0]["error_code"], "position_lost", "{r}");
    for entity in ["orders", "items"] {
        check!(app.delete(&format!("{state_path}/{entity}"), &ann).await, 204);
    }
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    assert_eq!(rows(&app, &ann, &org, &conn, "orders").await, ["1:one", "2:two", "3:skipped", "4:four", "5:five"]);
    assert_eq!(
        rows(&app, &ann, &org, &conn, "items").await,
        ["insert 1:pen", "insert 1:quill", "update 1:quill", "insert 2:ink", "insert 2:ink"]
    );

    // Ten thousand soft deletes in one transaction: applied in batches
    // (one scratch table per transaction, not one per row, which ran the
    // destination out of locks).
    sqlx::query("INSERT INTO orders SELECT g, 'bulk' FROM generate_series(1000, 10999) g")
        .execute(&mut src)
        .await
        .unwrap();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    sqlx::query("DELETE FROM orders WHERE id >= 1000").execute(&mut src).await.unwrap();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    let mut wh = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    let (gone, marked): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM {0}.orders WHERE id >= 1000), \
         (SELECT count(*) FROM {0}.orders_soft WHERE id >= 1000 AND _sluice_deleted_at IS NOT NULL)",
        dst.name
    )))
    .fetch_one(&mut wh)
    .await
    .unwrap();
    assert_eq!((gone, marked), (0, 10_000));
    check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 0);
}

/// The runs of a flow, newest first.
pub(crate) async fn runs_of(app: &TestApp, auth: &Auth, org: &str, flow: &str) -> Vec<Value> {
    let r = check!(app.get(&format!("/v1/organizations/{org}/flows/{flow}/runs"), auth).await, 200);
    r.body["data"].as_array().cloned().unwrap_or_default()
}

/// The destination schema's `orders` as `id:note`, by id (none while the
/// table does not exist).
pub(crate) async fn mirror(schema: &str) -> Vec<String> {
    let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT id || ':' || note FROM {schema}.orders ORDER BY id")))
        .fetch_all(&mut c)
        .await
        .unwrap_or_default()
}

/// Waits up to `secs` for `what` to hold.
pub(crate) async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "{what} within {secs} s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A continuous flow: one run started by the scheduler, no run asked for,
/// that applies changes as they come; the state cannot be moved under it
/// (409); paused, its run ends and no other starts; resumed, a new run
/// applies what came meanwhile. A continuous flow takes CDC mappings only
/// and no schedule.
async fn continuous(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    sqlx::raw_sql("CREATE TABLE orders (id int PRIMARY KEY, note text); INSERT INTO orders VALUES (1, 'one');")
        .execute(&mut src)
        .await
        .unwrap();
    let (ann, org, source_id, conn) = shop_and_warehouse(&app, source.port, &dst.name).await;
    let flows_path = format!("/v1/organizations/{org}/flows");
    let body = |mappings: Value, schedule: Value| {
        json!({"name": "orders", "source_connection_id": source_id, "destination_connection_id": conn,
            "schedule": schedule, "config": {"continuous": true, "mappings": mappings}})
    };
    let cdc = json!([{"source_entity": "orders", "sync_mode": "cdc_deduped"}]);
    let bad = check!(app.post(&flows_path, &ann, body(cdc.clone(), json!("*/5 * * * *"))).await, 422);
    assert_eq!(bad.body["details"]["errors"][0]["field"], "schedule", "{:?}", bad.body);
    let full = json!([{"source_entity": "orders", "sync_mode": "full_refresh_overwrite"}]);
    let bad = check!(app.post(&flows_path, &ann, body(full, Value::Null)).await, 422);
    assert_eq!(bad.body["details"]["errors"][0]["field"], "config.continuous", "{:?}", bad.body);

    let flow = check!(app.post(&flows_path, &ann, body(cdc, Value::Null)).await, 201).id();
    // Nobody asks for a run: the scheduler starts one, which copies, then
    // applies each change as it comes.
    eventually(30, "the first copy", || async { mirror(&dst.name).await == ["1:one"] }).await;
    for i in 2..=4 {
        sqlx::query(sqlx::AssertSqlSafe(format!("INSERT INTO orders VALUES ({i}, 'n{i}')")))
            .execute(&mut src)
            .await
            .unwrap();
        eventually(10, "a change applied", || async { mirror(&dst.name).await.len() == i }).await;
    }
    sqlx::raw_sql("UPDATE orders SET note = 'ONE' WHERE id = 1; DELETE FROM orders WHERE id = 2")
        .execute(&mut src)
        .await
        .unwrap();
    eventually(10, "an update and a delete", || async { mirror(&dst.name).await == ["1:ONE", "3:n3", "4:n4"] }).await;
    let runs = runs_of(&app, &ann, &org, &flow).await;
    assert_eq!(runs.len(), 1, "one run, kept going: {runs:?}");
    assert_eq!(runs[0]["status"], "running");
    assert_eq!(runs[0]["trigger"], "schedule");
    // Its position cannot move under it.
    let put = app.put(&format!("{flows_path}/{flow}/state/orders"), &ann, json!({"cursor_value": "0/0"})).await;
    assert_eq!(put.status, 409, "{:?}", put.body);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("sluice_cdc_lag_seconds{{flow=\"{flow}\"}}")), "{metrics}");

    // Paused: the run ends, and no other starts.
    check!(
        app.send(reqwest::Method::PATCH, &format!("{flows_path}/{flow}"), &ann, Some(json!({"status": "paused"})), &[])
            .await,
        200
    );
    eventually(15, "the run to end", || async { runs_of(&app, &ann, &org, &flow).await[0]["status"] == "succeeded" })
        .await;
    sqlx::query("INSERT INTO orders VALUES (5, 'while paused')").execute(&mut src).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    assert_eq!(runs_of(&app, &ann, &org, &flow).await.len(), 1, "no run while paused");
    assert_eq!(mirror(&dst.name).await.len(), 3);
    // Resumed: a new run applies what came meanwhile.
    check!(
        app.send(reqwest::Method::PATCH, &format!("{flows_path}/{flow}"), &ann, Some(json!({"status": "active"})), &[])
            .await,
        200
    );
    eventually(30, "the change made while paused", || async {
        mirror(&dst.name).await == ["1:ONE", "3:n3", "4:n4", "5:while paused"]
    })
    .await;
    check!(
        app.send(reqwest::Method::PATCH, &format!("{flows_path}/{flow}"), &ann, Some(json!({"status": "paused"})), &[])
            .await,
        200
    );
    eventually(15, "the second run to end", || async {
        runs_of(&app, &ann, &org, &flow).await.iter().all(|r| r["status"] == "succeeded")
    })
    .await;
    check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_flow_keeps_one_run_going_with_sqlite_metadata() {
    continuous(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_flow_keeps_one_run_going_with_postgres_metadata() {
    continuous(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_move_and_reset_with_sqlite_metadata() {
    positions(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_move_and_reset_with_postgres_metadata() {
    positions(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_apply_once_with_sqlite_metadata() {
    scenario(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_apply_once_with_postgres_metadata() {
    scenario(Backend::Postgres).await;
}

/// A fingerprint of a table's rows (`id:note:n`, by key), and how many.
async fn fingerprint(c: &mut sqlx::PgConnection, table: &str, live: &str) -> (i64, String) {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), coalesce(md5(string_agg(k || ':' || coalesce(note, '') || ':' || n, ',' ORDER BY k COLLATE \"C\")), '') \
         FROM (SELECT {key}::text AS k, note, n FROM {table} WHERE {live}) t",
        key = if table.ends_with("coded") { "code" } else { "id" }
    )))
    .fetch_one(c)
    .await
    .unwrap()
}

/// Tables added to a running flow are copied in chunks while writes go on
/// (a key range cleared, then the chunk, then the stream replayed over
/// it); a run canceled half-way leaves the chunks it committed, and the
/// next goes on from the last; afterwards the destination equals the
/// source, rows only the destination had gone (or marked deleted).
async fn chunked(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    sqlx::raw_sql(
        "CREATE TABLE small (id int PRIMARY KEY, note text);
         INSERT INTO small VALUES (1, 'one');
         CREATE TABLE big (id int PRIMARY KEY, note text, n int);
         INSERT INTO big SELECT g, 'row ' || g, 0 FROM generate_series(1, 90000) g WHERE g % 1000 <> 0;
         CREATE TABLE coded (code text PRIMARY KEY, note text, n int);
         INSERT INTO coded SELECT md5(g::text), 'c', 0 FROM generate_series(1, 30000) g;",
    )
    .execute(&mut src)
    .await
    .unwrap();
    // Rows only the destination has: in the middle of the key ranges, and
    // past the source's last key.
    let mut wh = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {0}.big (id int PRIMARY KEY, note text, n int);
         INSERT INTO {0}.big VALUES (1000, 'stale', 0), (45000, 'stale', 0), (200000, 'stale', 0), (5, 'old', 7);
         CREATE TABLE {0}.coded (code text PRIMARY KEY, note text, n int, _sluice_deleted_at timestamptz);
         INSERT INTO {0}.coded VALUES ('8-stale', 'stale', 0, NULL), ('zz-stale', 'stale', 0, NULL);",
        dst.name
    )))
    .execute(&mut wh)
    .await
    .unwrap();
    let (ann, org, source_id, conn) = shop_and_warehouse(&app, source.port, &dst.name).await;
    let flows_path = format!("/v1/organizations/{org}/flows");
    let flow = check!(
        app.post(&flows_path, &ann, json!({"name": "shop", "source_connection_id": source_id,
            "destination_connection_id": conn, "config": {"mappings": [{"source_entity": "small", "sync_mode": "cdc_deduped"}]}}))
        .await,
        201
    )
    .id();
    assert_eq!(run(&app, &ann, &org, &flow).await["status"], "succeeded");
    let mappings = json!([
        {"source_entity": "small", "sync_mode": "cdc_deduped"},
        {"source_entity": "big", "sync_mode": "cdc_deduped"},
        {"source_entity": "coded", "sync_mode": "cdc_deduped", "delete_mode": "soft"},
        {"source_entity": "big", "dest_entity": "big_untouched", "sync_mode": "cdc_deduped",
         "transform": [{"op": "filter", "field": "n", "lt": 1}]}
    ]);
    let patch = json!({"config": {"mappings": mappings}});
    check!(app.send(reqwest::Method::PATCH, &format!("{flows_path}/{flow}"), &ann, Some(patch), &[]).await, 200);

    // Writes all along: updates, deletes and inserts over every key range,
    // some in transactions of several statements.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (stop, url) = (stop.clone(), source.url("postgres"));
        async move {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            let mut i: i64 = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let k = (i * 7919) % 90000 + 1;
                let sql = format!(
                    "BEGIN;
                     UPDATE big SET n = n + 1, note = 'u{i}' WHERE id = {k};
                     DELETE FROM big WHERE id = {d};
                     INSERT INTO big VALUES ({new}, 'new', 0) ON CONFLICT (id) DO UPDATE SET n = big.n + 1;
                     UPDATE coded SET n = n + 1 WHERE code = md5('{k}');
                     DELETE FROM coded WHERE code = md5('{d}');
                     COMMIT;",
                    d = (k * 31) % 90000 + 1,
                    new = 90000 + i % 5000
                );
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
            }
            i
        }
    });

    // The run is canceled once a chunk of the big table committed.
    let queued = check!(app.post(&format!("{flows_path}/{flow}/run"), &ann, json!({})).await, 202);
    let run_id = queued.id();
    let state_path = format!("{flows_path}/{flow}/state");
    let snapshot_of = |state: &Value, entity: &str| {
        state["data"].as_array().unwrap().iter().find(|e| e["entity"] == entity).unwrap()["snapshot"].clone()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let state = check!(app.get(&state_path, &ann).await, 200).body;
        let big = snapshot_of(&state, "big");
        if big["state"] == "running" && big["chunks_done"].as_u64().unwrap_or(0) >= 1 {
            assert!(big["chunks_total"].as_u64().unwrap() >= 4, "about 90,000 rows in chunks of 20,000: {big}");
            break;
        }
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run_id}"), &ann).await, 200).body;
        assert!(
            ["queued", "running"].contains(&r["status"].as_str().unwrap()),
            "the run ended before a chunk showed: {r}"
        );
        assert!(std::time::Instant::now() < deadline, "no chunk committed: {state}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    check!(app.post(&format!("/v1/organizations/{org}/runs/{run_id}/cancel"), &ann, json!({})).await, 200);
    let canceled = loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{run_id}"), &ann).await, 200).body;
        if !["queued", "running"].contains(&r["status"].as_str().unwrap()) {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    let state = check!(app.get(&state_path, &ann).await, 200).body;
    let big = snapshot_of(&state, "big");
    let done = big["chunks_done"].as_u64().unwrap();
    assert!(big["state"] == "running" && done >= 1 && done < big["chunks_total"].as_u64().unwrap(), "{state}");
    // The flow's page shows how far the copy got.
    let mut console = crate::console::Browser::new(&app);
    console.sign_in(&crate::console::token_of(&ann)).await;
    let (status, page, _) = console.get(&format!("/o/{org}/flows/{flow}")).await;
    assert_eq!(status, 200, "{page}");
    let shown = format!("{done} of about {} chunks", big["chunks_total"]);
    assert!(page.contains(&shown), "{shown} on the flow's page: {page}");
    // The position shows alone, and cannot be moved while the copy goes on.
    let position =
        state["data"].as_array().unwrap().iter().find(|e| e["entity"] == "big").unwrap()["cursor_value"].clone();
    assert!(position.as_str().is_some_and(|p| p.contains('/') && !p.contains(' ')), "{state}");
    let put = app.put(&format!("{state_path}/big"), &ann, json!({"cursor_value": position})).await;
    assert_eq!(put.status, 422, "{:?}", put.body);
    assert!(put.body.to_string().contains("being copied in chunks"), "{:?}", put.body);

    // The next run goes on from the last chunk committed, not from the start.
    let resumed = run(&app, &ann, &org, &flow).await;
    assert_eq!(resumed["status"], "succeeded", "{resumed}");
    let stats = resumed["entities"].as_array().unwrap().iter().find(|e| e["entity"] == "big").unwrap().clone();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.await.unwrap();
    assert!(writes > 0);
    let logs = |id: &str| {
        let path = format!("/v1/organizations/{org}/logs/{id}");
        let app = &app;
        let ann = &ann;
        async move {
            let body = check!(app.get(&path, ann).await, 200).body;
            body["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|l| l["entity"] == "big")
                .map(|l| l["message"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let first_logs = logs(&run_id).await;
    assert!(first_logs.iter().any(|l| l.starts_with("copying the table in chunks")), "{first_logs:?}");
    let resumed_logs = logs(resumed["id"].as_str().unwrap()).await;
    // From the last chunk committed: the one read above, or the next when
    // the canceled attempt was committing it as the cancel came (it stops
    // at its next commit).
    let after: u64 = resumed_logs
        .iter()
        .find_map(|l| l.strip_prefix("the copy in chunks goes on after chunk "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the resumed run goes on from a chunk: {resumed_logs:?}"));
    assert!(after == done || after == done + 1, "goes on after chunk {after}, {done} were done: {resumed_logs:?}");
    // (The filtered mapping of the same table starts its copy here when the
    // cancel came before its first chunk: at most one copy begins.)
    let began = resumed_logs.iter().filter(|l| l.starts_with("copying the table")).count();
    assert!(began <= 1, "copied again: {resumed_logs:?} {stats}");
    assert!(resumed_logs.iter().any(|l| l.starts_with("the copy in chunks is done")), "{resumed_logs:?}");
    let last = run(&app, &ann, &org, &flow).await;
    assert_eq!(last["status"], "succeeded", "{last}");

    // The destination equals the source, key by key.
    assert_eq!(
        fingerprint(&mut wh, &format!("{}.big", dst.name), "true").await,
        fingerprint(&mut src, "big", "true").await,
        "big, after {writes} writer transactions"
    );
    assert_eq!(
        fingerprint(&mut wh, &format!("{}.coded", dst.name), "_sluice_deleted_at IS NULL").await,
        fingerprint(&mut src, "coded", "true").await,
        "coded's live rows"
    );
    // The filtered mirror holds the rows that pass its filter: rows left
    // it as the writer updated them, and its inserts joined it.
    assert_eq!(
        fingerprint(&mut wh, &format!("{}.big_untouched", dst.name), "true").await,
        fingerprint(&mut src, "big", "n < 1").await,
        "big_untouched holds the rows never updated"
    );
    let stale: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT code FROM {}.coded WHERE note = 'stale' AND _sluice_deleted_at IS NOT NULL ORDER BY code",
        dst.name
    )))
    .fetch_all(&mut wh)
    .await
    .unwrap();
    assert_eq!(stale, ["8-stale", "zz-stale"], "a soft mirror marks what the source lacks");
    let state = check!(app.get(&state_path, &ann).await, 200).body;
    for entity in ["small", "big", "coded"] {
        assert_eq!(snapshot_of(&state, entity)["state"], "done", "{state}");
    }
    check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
    assert_eq!(sluice_objects(&mut src).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_are_copied_online_in_chunks_with_sqlite_metadata() {
    chunked(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_are_copied_online_in_chunks_with_postgres_metadata() {
    chunked(Backend::Postgres).await;
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

    // A column whose type changes between two unread changes stops that
    // table alone, at its position.
    sqlx::raw_sql(sql("UPDATE other SET note = 'deux' WHERE id = 2;
         ALTER TABLE other ALTER COLUMN note TYPE int USING length(note); UPDATE other SET note = 5 WHERE id = 2;
         INSERT INTO orders (id, extra) VALUES (3, 'three');"))
    .execute(&mut src)
    .await
    .unwrap();
    let r = run(&app, &ann, &org, &strict).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!((status(&r, 0), status(&r, 1)), ("succeeded".into(), "failed".into()), "{r}");
    assert!(r["entities"][1]["error"].as_str().unwrap().contains("changed type: note (string → integer)"), "{r}");
    assert_eq!(preview_rows(&app, &ann, &org, &wh, "orders_strict").await.len(), 2);

    // A column dropped while a change to it was unread stops that table.
    sqlx::raw_sql(sql("UPDATE orders SET note = 'uno' WHERE id = 1; ALTER TABLE orders DROP COLUMN note;"))
        .execute(&mut src)
        .await
        .unwrap();
    let r = run(&app, &ann, &org, &open).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["entities"][0]["error"].as_str().unwrap().contains("dropped"), "{r}");

    // A column renamed while a change to it was unread (the relation shows
    // another column at its place, of its type) is said to be renamed, with
    // how to follow it.
    sqlx::raw_sql(sql("CREATE TABLE named (id int PRIMARY KEY, label text); INSERT INTO named VALUES (1, 'a');"))
        .execute(&mut src)
        .await
        .unwrap();
    let named = check!(
        app.post(&flows, &ann, flow("named", json!([{"source_entity": "named", "sync_mode": "cdc_deduped"}]))).await,
        201
    )
    .id();
    assert_eq!(run(&app, &ann, &org, &named).await["status"], "succeeded");
    sqlx::raw_sql(sql("UPDATE named SET label = 'b' WHERE id = 1; ALTER TABLE named RENAME COLUMN label TO title;"))
        .execute(&mut src)
        .await
        .unwrap();
    let r = run(&app, &ann, &org, &named).await;
    assert_eq!(r["status"], "failed", "{r}");
    let error = r["entities"][0]["error"].as_str().unwrap();
    assert!(error.contains("renamed (label → title)"), "{r}");
    assert!(!error.contains("dropped"), "{r}");
    assert!(error.contains("DELETE …/state/named"), "{r}");
}

/// Waits up to `secs` for the verification at `path` to finish; answers it.
async fn finished(app: &TestApp, auth: &Auth, path: &str, secs: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let r = check!(app.get(path, auth).await, 200).body;
        if r["finished_at"].is_string() {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "unfinished after {secs} s: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A continuous flow verified while its source takes writes: the mirror
/// trails the source by the stream's lag, so keys differ when scanned;
/// read again at the end, they are not reported, and the verification
/// matches. A repair cannot follow a run that never ends (422).
async fn verified_while_writes_go_on(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = logical_source().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    sqlx::raw_sql(
        "CREATE TABLE orders (id int PRIMARY KEY, note text, n int);
         INSERT INTO orders SELECT g, 'row ' || g, 0 FROM generate_series(1, 20000) g;",
    )
    .execute(&mut src)
    .await
    .unwrap();
    let (ann, org, source_id, conn) = shop_and_warehouse(&app, source.port, &dst.name).await;
    let flow = check!(
        app.post(
            &format!("/v1/organizations/{org}/flows"),
            &ann,
            json!({"name": "orders",
            "source_connection_id": source_id, "destination_connection_id": conn,
            "config": {"continuous": true, "mappings": [{"source_entity": "orders", "sync_mode": "cdc_deduped"}]}})
        )
        .await,
        201
    )
    .id();
    eventually(60, "the first copy", || async { mirror(&dst.name).await.len() == 20000 }).await;
    let verify = format!("/v1/organizations/{org}/flows/{flow}/verify");
    let r = check!(app.post(&verify, &ann, json!({"repair": true})).await, 422);
    assert_eq!(r.body["details"]["errors"][0]["field"], "repair", "{}", r.body);

    // Updates, inserts and deletes across the table, 50 transactions a
    // second, for 4 s from just before the verification starts.
    let url = source.url("postgres");
    let writer = tokio::spawn(async move {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        for i in 0..200i64 {
            let id = (i * 97) % 20000 + 1;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "UPDATE orders SET n = n + 1 WHERE id IN ({id}, {}); INSERT INTO orders VALUES ({}, 'new', 0); \
                 DELETE FROM orders WHERE id = {}",
                (id * 31) % 20000 + 1,
                20000 + i + 1,
                (i * 53) % 20000 + 1,
            )))
            .execute(&mut c)
            .await
            .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let v = check!(app.post(&verify, &ann, json!({})).await, 202).id();
    let one = format!("/v1/organizations/{org}/verifications/{v}");
    let done = finished(&app, &ann, &one, 90).await;
    writer.await.unwrap();
    assert_eq!(done["status"], "matched", "changes in flight are not differences: {done}");
    let e = &done["entities"][0];
    assert!(e["source_rows"].as_u64().unwrap() > 19000, "{done}");
    assert!(e["rechecked"].as_u64().unwrap() > 0, "the mirror trailed the source when scanned: {done}");
    // Once the continuous run has applied every change (before the flow
    // is paused: a paused flow's run ends at its next pass, leaving what
    // came after that pass's end for the next run), a row changed behind
    // the flow's back is found by its key.
    let rows_sql = "SELECT id || ':' || note || ':' || n FROM {} ORDER BY id";
    let want: Vec<String> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(rows_sql.replace("{}", "orders"))).fetch_all(&mut src).await.unwrap();
    eventually(60, "the mirror to equal the source", || {
        let (want, sql) = (&want, rows_sql.replace("{}", &format!("{}.orders", dst.name)));
        async move {
            let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
            let got: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(&mut c).await.unwrap();
            &got == want
        }
    })
    .await;
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("/v1/organizations/{org}/flows/{flow}"),
            &ann,
            Some(json!({"status": "paused"})),
            &[]
        )
        .await,
        200
    );
    eventually(15, "the run to end", || async { runs_of(&app, &ann, &org, &flow).await[0]["status"] == "succeeded" })
        .await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("UPDATE {}.orders SET note = 'tampered' WHERE id = 7", dst.name)))
        .execute(&mut sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap())
        .await
        .unwrap();
    let v = check!(app.post(&verify, &ann, json!({})).await, 202).id();
    let one = format!("/v1/organizations/{org}/verifications/{v}");
    let done = finished(&app, &ann, &one, 60).await;
    assert_eq!(done["status"], "mismatched", "{done}");
    assert_eq!(done["entities"][0]["different"], json!({"count": 1, "keys": [7]}), "{done}");
    check!(app.delete(&format!("/v1/organizations/{org}/flows/{flow}"), &ann).await, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_while_writes_go_on_with_sqlite_metadata() {
    verified_while_writes_go_on(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_while_writes_go_on_with_postgres_metadata() {
    verified_while_writes_go_on(Backend::Postgres).await;
}
