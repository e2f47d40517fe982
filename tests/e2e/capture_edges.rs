//! Change capture's edges where a flow is saved: a CDC flow is refused on
//! a source that cannot capture (the connection test's line, at the
//! mapping's `sync_mode`), a run that meets a missing grant names it, and
//! no two flows write one destination entity unless both append into it
//! (409 through the API, 422 in a manifest), the source of a capturing
//! flow is not moved from under its slot; a position held past the
//! source's end is refused, never followed. On both metadata stores.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_testkit::services::OwnPostgres;
use sluice_tests::{Backend, TestApp, check, spawn_app};
use sqlx::Connection;

async fn sql(c: &mut sqlx::PgConnection, text: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_string())).execute(c).await.unwrap();
}

fn pg(name: &str, port: u16, database: &str, user: &str, schema: &str) -> Value {
    json!({"name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "port": port, "database": database, "user": user, "schema": schema,
            "sslmode": "disable"}})
}

fn cdc_flow(name: &str, source: &str, dest: &str, mappings: Value) -> Value {
    json!({"name": name, "source_connection_id": source, "destination_connection_id": dest,
        "config": {"mappings": mappings}})
}

/// A PostgreSQL server of the test's own with logical WAL.
async fn logical_server() -> Option<OwnPostgres> {
    tokio::task::spawn_blocking(|| {
        OwnPostgres::start(|_| {}, |_| vec!["wal_level=logical".into(), "max_replication_slots=8".into()])
    })
    .await
    .unwrap()
}

async fn refused_flows(app: TestApp) {
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let Some(server) = logical_server().await else { return };
    let mut root = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    sql(
        &mut root,
        "CREATE ROLE plain LOGIN; CREATE ROLE capturer LOGIN REPLICATION;
         CREATE TABLE orders (id int PRIMARY KEY, note text); ALTER TABLE orders OWNER TO plain;
         CREATE TABLE items (id int PRIMARY KEY, note text); ALTER TABLE items OWNER TO capturer;
         CREATE TABLE other (id int PRIMARY KEY, note text); ALTER TABLE other OWNER TO capturer;
         INSERT INTO items VALUES (1, 'one'); INSERT INTO other VALUES (1, 'uno');",
    )
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let flows = format!("/v1/organizations/{org}/flows");
    let wh = check!(app.post(&conns, &ann, pg("wh", 5432, "test", "postgres", &dst.name)).await, 201).id();
    let refused = |r: &sluice_tests::Resp, needle: &str| {
        assert_eq!(r.status.as_u16(), 422, "{}", r.body);
        let e = &r.body["details"]["errors"][0];
        assert_eq!(e["field"], "config.mappings[0].sync_mode", "{}", r.body);
        assert!(e["message"].as_str().unwrap().contains(needle), "{needle}: {}", r.body);
    };

    // The shared server logs no logical WAL: the flow is refused, saying so.
    let mut shared = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    let level: String = sqlx::query_scalar("SHOW wal_level").fetch_one(&mut shared).await.unwrap();
    if level != "logical" {
        sql(&mut shared, &format!("CREATE TABLE {}.src (id int PRIMARY KEY, note text)", dst.name)).await;
        let replica =
            check!(app.post(&conns, &ann, pg("replica", 5432, "test", "postgres", &dst.name)).await, 201).id();
        let m = json!([{"source_entity": "src", "dest_entity": "src_copy", "sync_mode": "cdc_deduped"}]);
        refused(&app.post(&flows, &ann, cdc_flow("replica", &replica, &wh, m.clone())).await, "wal_level is 'replica'");
        // A flow saved otherwise, then switched to change capture: the same.
        let full = json!([{"source_entity": "src", "dest_entity": "src_copy", "sync_mode": "full_refresh_overwrite"}]);
        let f = check!(app.post(&flows, &ann, cdc_flow("replica", &replica, &wh, full)).await, 201).id();
        let path = format!("{flows}/{f}");
        let r = app.send(Method::PATCH, &path, &ann, Some(json!({"config": {"mappings": m}})), &[]).await;
        refused(&r, "wal_level");
        check!(app.send(Method::DELETE, &format!("{flows}/{f}"), &ann, None, &[]).await, 204);
    }

    // A role without REPLICATION.
    let plain = check!(app.post(&conns, &ann, pg("plain", server.port, "postgres", "plain", "public")).await, 201).id();
    let m = json!([{"source_entity": "orders", "sync_mode": "cdc_deduped"}]);
    refused(&app.post(&flows, &ann, cdc_flow("plain", &plain, &wh, m)).await, "lacks REPLICATION: ALTER ROLE");

    // A role that may not create the publication (CREATE on the database).
    let cap = check!(app.post(&conns, &ann, pg("cap", server.port, "postgres", "capturer", "public")).await, 201).id();
    let items = json!([{"source_entity": "items", "sync_mode": "cdc_deduped"}]);
    refused(&app.post(&flows, &ann, cdc_flow("items", &cap, &wh, items.clone())).await, "GRANT CREATE ON DATABASE");
    sql(&mut root, "GRANT CREATE ON DATABASE postgres TO capturer").await;
    let flow = check!(app.post(&flows, &ann, cdc_flow("items", &cap, &wh, items.clone())).await, 201).id();
    // Taken away before the first run: the run names the grant.
    sql(&mut root, "REVOKE CREATE ON DATABASE postgres FROM capturer").await;
    let r = sluice_tests::run_flow(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["entities"][0]["error"].as_str().unwrap().contains("GRANT CREATE ON DATABASE"), "{r}");
    sql(&mut root, "GRANT CREATE ON DATABASE postgres TO capturer").await;
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");

    // Two flows writing one destination entity: refused unless both append.
    let taken = |r: sluice_tests::Resp| {
        assert_eq!(r.status.as_u16(), 409, "{}", r.body);
        let message = r.body["error"].as_str().unwrap();
        assert!(message.contains("config.mappings[0].dest_entity"), "{}", r.body);
        assert!(message.contains("flow 'items' (cdc_deduped from 'items')"), "{}", r.body);
    };
    let into_items = |mode: &str| json!([{"source_entity": "other", "dest_entity": "items", "sync_mode": mode}]);
    taken(app.post(&flows, &ann, cdc_flow("second", &cap, &wh, into_items("cdc_deduped"))).await);
    taken(app.post(&flows, &ann, cdc_flow("second", &cap, &wh, into_items("full_refresh_append"))).await);
    // Through another connection to the same schema too.
    let wh2 = check!(app.post(&conns, &ann, pg("wh2", 5432, "test", "postgres", &dst.name)).await, 201).id();
    taken(app.post(&flows, &ann, cdc_flow("second", &cap, &wh2, into_items("full_refresh_overwrite"))).await);
    // A flow that writes elsewhere may not be changed to take it.
    let own = json!([{"source_entity": "other", "dest_entity": "other_copy", "sync_mode": "full_refresh_append"}]);
    let second = check!(app.post(&flows, &ann, cdc_flow("second", &cap, &wh, own)).await, 201).id();
    let path = format!("{flows}/{second}");
    let change = json!({"config": {"mappings": into_items("full_refresh_overwrite")}});
    taken(app.send(Method::PATCH, &path, &ann, Some(change), &[]).await);
    // Two flows that both append into one entity do so by design.
    let log = json!([{"source_entity": "other", "dest_entity": "other_copy", "sync_mode": "full_refresh_append"}]);
    check!(app.post(&flows, &ann, cdc_flow("third", &cap, &wh, log)).await, 201);
    // A manifest may not either: 422 at the mapping's dest_entity.
    let yaml = "version: 1\nflows:\n  - name: fourth\n    source_connection: cap\n    destination_connection: wh\n    \
         config:\n      mappings:\n        - source_entity: other\n          dest_entity: items\n          \
         sync_mode: full_refresh_overwrite\n";
    let r = app
        .send_text(Method::POST, &format!("/v1/organizations/{org}/iac/apply"), &ann, yaml, "application/x-yaml")
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_eq!(r.body["details"]["errors"][0]["field"], "flows[0].config.mappings[0].dest_entity", "{}", r.body);

    // The source of a capturing flow is not moved from under its slot.
    let path = format!("{conns}/{cap}");
    let r = app.send(Method::PATCH, &path, &ann, Some(json!({"config": {"port": 1}})), &[]).await;
    assert_eq!((r.status.as_u16(), r.body["code"].clone()), (409, json!("in_use")), "{}", r.body);
    let message = r.body["error"].as_str().unwrap();
    assert!(
        message.starts_with("config.port: connection 'cap' is the source of change capture for flow 'items'"),
        "{message}"
    );
    check!(app.send(Method::PATCH, &path, &ann, Some(json!({"name": "capture"})), &[]).await, 200);
    let yaml = "version: 1\nconnections:\n  - name: capture\n    type: postgres\n    capability: both\n    config:\n      \
         host: 127.0.0.1\n      port: 1\n      database: postgres\n      user: capturer\n      schema: public\n      \
         sslmode: disable\n";
    let r = app
        .send_text(Method::POST, &format!("/v1/organizations/{org}/iac/apply"), &ann, yaml, "application/x-yaml")
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_eq!(r.body["details"]["errors"][0]["field"], "connections[0].config.port", "{}", r.body);
    // The flow still captures from where its slot is.
    sql(&mut root, "INSERT INTO items VALUES (2, 'two')").await;
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    drop(root);
}

/// A position a destination holds past the source's end (a file's manifest
/// edited by hand) fails its table as the state API refuses the same
/// value (`position_not_retained`, naming it), never skipping the changes
/// up to it; copied again, the table is whole.
async fn a_position_past_the_sources_end_is_refused(app: TestApp) {
    let Some(server) = logical_server().await else { return };
    let mut src = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    sql(&mut src, "CREATE TABLE orders (id int PRIMARY KEY, note text); INSERT INTO orders VALUES (1, 'one');").await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let shop =
        check!(app.post(&conns, &ann, pg("shop", server.port, "postgres", "postgres", "public")).await, 201).id();
    let out = json!({"name": "out", "type": "file", "capability": "both",
        "config": {"path": "out", "format": "jsonl"}});
    let out = check!(app.post(&conns, &ann, out).await, 201).id();
    let m = json!([{"source_entity": "orders", "sync_mode": "cdc_deduped"}]);
    let flows = format!("/v1/organizations/{org}/flows");
    let flow = check!(app.post(&flows, &ann, cdc_flow("orders", &shop, &out, m)).await, 201).id();
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");

    sql(&mut src, "INSERT INTO orders VALUES (2, 'two')").await;
    let manifest = app.org_files(&org).join("out/.orders.jsonl.manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let positions = m["positions"].as_object_mut().unwrap();
    assert_eq!(positions.len(), 1, "{m}");
    for v in positions.values_mut() {
        *v = json!("FF/FFFFFFFF");
    }
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    // The state API refuses that value for the same reason.
    let state = format!("{flows}/{flow}/state/orders");
    let put = app.send(Method::PUT, &state, &ann, Some(json!({"cursor_value": "FF/FFFFFFFF"})), &[]).await;
    assert_eq!((put.status.as_u16(), put.body["code"].clone()), (422, json!("position_not_retained")), "{}", put.body);
    let r = sluice_tests::run_flow(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["entities"][0]["error_code"], "position_not_retained", "{r}");
    let error = r["entities"][0]["error"].as_str().unwrap();
    assert!(error.contains("FF/FFFFFFFF for orders, past the end of the source's log"), "{r}");
    // Copied again, the table holds both rows.
    check!(app.send(Method::DELETE, &state, &ann, None, &[]).await, 204);
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    let rows = sluice_tests::preview_rows(&app, &ann, &org, &out, "orders").await;
    let ids: Vec<i64> = rows.iter().filter_map(|r| r["id"].as_i64()).collect();
    assert_eq!(ids.len(), 2, "{rows:?}");
}

/// A flow deleted while its source cannot be reached leaves its slot there:
/// recorded (`cdc.stream_left`), shown on the connection's page, and
/// dropped by a retry once the source answers again (`cdc.stream_dropped`).
async fn a_stream_left_on_an_unreachable_source_is_dropped_later(app: TestApp) {
    let Some(server) = logical_server().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let mut root = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    sql(
        &mut root,
        "CREATE ROLE capturer LOGIN REPLICATION; GRANT CREATE ON DATABASE postgres TO capturer;
         CREATE TABLE items (id int PRIMARY KEY, note text); ALTER TABLE items OWNER TO capturer;
         INSERT INTO items VALUES (1, 'one');",
    )
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let cap = check!(app.post(&conns, &ann, pg("cap", server.port, "postgres", "capturer", "public")).await, 201).id();
    let wh = check!(app.post(&conns, &ann, pg("wh", 5432, "test", "postgres", &dst.name)).await, 201).id();
    let m = json!([{"source_entity": "items", "sync_mode": "cdc_deduped"}]);
    let flows = format!("/v1/organizations/{org}/flows");
    let flow = check!(app.post(&flows, &ann, cdc_flow("items", &cap, &wh, m)).await, 201).id();
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    let slot = format!("sluice_{}", flow.replace('-', ""));
    async fn slots(c: &mut sqlx::PgConnection, slot: &str) -> i64 {
        let q = format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'");
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(q)).fetch_one(c).await.unwrap()
    }
    assert_eq!(slots(&mut root, &slot).await, 1);

    // The source refuses the role (and ends its sessions): the flow is
    // deleted all the same, and its slot stays, recorded.
    sql(
        &mut root,
        "ALTER ROLE capturer NOLOGIN;
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'capturer';",
    )
    .await;
    check!(app.send(Method::DELETE, &format!("{flows}/{flow}"), &ann, None, &[]).await, 204);
    assert_eq!(slots(&mut root, &slot).await, 1, "the source could not be reached: the slot stays");
    let events = |kind: &'static str| {
        let (app, ann, org) = (&app, &ann, &org);
        async move {
            let activity = check!(app.get(&format!("/v1/organizations/{org}/activity"), ann).await, 200).body;
            activity["data"].as_array().unwrap().iter().filter(|e| e["type"] == kind).cloned().collect::<Vec<Value>>()
        }
    };
    let left = events("cdc.stream_left").await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["data"]["replication_slot"], slot.as_str(), "{left:?}");
    let mut console = crate::console::Browser::new(&app);
    console.sign_in(&crate::console::token_of(&ann)).await;
    let page = format!("/o/{org}/connections/{cap}");
    let (status, html, _) = console.get(&page).await;
    assert_eq!(status, 200, "{html}");
    for shown in ["Change streams left on this source", slot.as_str(), ">items<"] {
        assert!(html.contains(shown), "{shown} on the connection's page: {html}");
    }
    // Another organization sees nothing of it.
    let eve = app.token("eve@example.com");
    let other = check!(app.post("/v1/organizations", &eve, json!({"name": "Other"})).await, 201).id();
    let theirs = check!(app.get(&format!("/v1/organizations/{other}/activity"), &eve).await, 200).body;
    assert!(!theirs.to_string().contains(&slot), "{theirs}");

    // The source answers again: a retry drops the slot, and says so.
    sql(&mut root, "ALTER ROLE capturer LOGIN").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    // (The slot goes first, then the publication.)
    let publications = "SELECT count(*) FROM pg_publication";
    while slots(&mut root, &slot).await > 0
        || sqlx::query_scalar::<_, i64>(publications).fetch_one(&mut root).await.unwrap() > 0
    {
        assert!(std::time::Instant::now() < deadline, "the slot and publication were not dropped within 90 s");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while events("cdc.stream_dropped").await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no cdc.stream_dropped event");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (_, html, _) = console.get(&page).await;
    assert!(!html.contains("Change streams left on this source"), "{html}");
}

sluice_tests::on_both_backends!(
    refused_flows,
    a_position_past_the_sources_end_is_refused,
    a_stream_left_on_an_unreachable_source_is_dropped_later,
);
