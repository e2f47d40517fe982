//! Change data capture from MariaDB's binlog end to end through the API: a
//! MariaDB source of the test's own (a ROW binlog, GTIDs) into PostgreSQL,
//! MariaDB and SQLite destinations, on both metadata stores: the first run
//! copies the tables in a consistent snapshot, later runs apply inserts,
//! updates and deletes (hard and soft) and append a change log, each change
//! once, the state shows the GTID position each table holds, a column added
//! at the source evolves the destination, and a binlog purged past a
//! table's position fails it with `position_lost` until it is copied again.

use super::cdc::rows;
use serde_json::{Value, json};
use sluice_testkit::services::OwnMariaDb;
use sluice_tests::run_flow as run;
use sluice_tests::{Backend, check, spawn_app};
use sqlx::Connection;

/// A MariaDB server of the test's own with a ROW binlog (and `settings`),
/// and a connection to its database `shop`.
async fn binlog_source(settings: &'static [&'static str]) -> Option<(OwnMariaDb, sqlx::MySqlConnection)> {
    let server = tokio::task::spawn_blocking(move || OwnMariaDb::start(settings)).await.unwrap()?;
    let mut root = sqlx::MySqlConnection::connect(&server.url("mysql")).await.unwrap();
    sqlx::query("CREATE DATABASE shop").execute(&mut root).await.unwrap();
    let conn = sqlx::MySqlConnection::connect(&server.url("shop")).await.unwrap();
    Some((server, conn))
}

/// The destination table's rows as `[op ]id:note[:amount][:deleted]`, by id.
async fn exec(c: &mut sqlx::MySqlConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(c).await.unwrap();
}

async fn scenario(backend: Backend) {
    let Some(app) = spawn_app(backend).await else { return };
    // On one store the server logs column names in its table maps, on the
    // other not (its default): both ways of matching a table map.
    let names = backend == Backend::Postgres;
    let settings: &'static [&'static str] = if names { &["--binlog-row-metadata=FULL"] } else { &[] };
    let Some((source, mut src)) = binlog_source(settings).await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let Some(mut my) = sluice_tests::mariadb().await else { return };
    let mydb = format!("cdc_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {mydb}"))).execute(&mut my).await.unwrap();
    exec(
        &mut src,
        "CREATE TABLE orders (id int PRIMARY KEY, note varchar(100), big longtext, amount decimal(10,2), \
           at datetime(6), flag tinyint(1), kind enum('a','b'), day date) ENGINE = InnoDB;
         CREATE TABLE keyless (note text) ENGINE = InnoDB;
         INSERT INTO orders VALUES (1, 'one', NULL, 1.50, '2024-05-01 10:11:12.5', 1, 'a', '2024-05-01'),
           (2, 'two', NULL, -2.25, NULL, 0, 'b', NULL), (3, 'three', NULL, NULL, NULL, NULL, NULL, NULL);",
    )
    .await;

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source_body = |name: &str, port: u16, db: &str| {
        json!({"name": name, "type": "mysql", "capability": "source",
            "config": {"host": "127.0.0.1", "port": port, "database": db, "user": "root", "ssl_mode": "disabled"}})
    };
    let source_id = check!(app.post(&conns, &ann, source_body("shop", source.port, "shop")).await, 201).id();
    // The connection test says whether the source can capture changes.
    let tested = check!(app.post(&format!("{conns}/{source_id}/test"), &ann, json!({})).await, 200);
    // The server and user can; one table cannot be mirrored.
    let reasons = json!(["table `keyless` has no primary key"]);
    assert_eq!(tested.body["cdc"], json!({"ready": false, "reasons": reasons}), "{:?}", tested.body);
    // A user with exactly the grants docs/cdc.md asks for sees the keys
    // (MariaDB shows it no TABLE_CONSTRAINTS rows, but the key's index).
    exec(
        &mut src,
        "CREATE USER capturer IDENTIFIED BY 'pw'; GRANT SELECT ON shop.* TO capturer;
         GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO capturer;",
    )
    .await;
    let mut least = source_body("least", source.port, "shop");
    least["config"]["user"] = json!("capturer");
    least["config"]["password"] = json!("pw");
    let tested = check!(app.post(&format!("{conns}/test"), &ann, least).await, 200);
    assert_eq!(tested.body["cdc"], json!({"ready": false, "reasons": reasons}), "{:?}", tested.body);
    // The shared server logs no binlog: it says so, one line.
    let shared = check!(app.post(&format!("{conns}/test"), &ann, source_body("shared", 3306, &mydb)).await, 200);
    let log_bin: i64 = sqlx::query_scalar("SELECT @@log_bin").fetch_one(&mut my).await.unwrap();
    if log_bin == 0 {
        assert_eq!(shared.body["cdc"]["ready"], false, "{:?}", shared.body);
        let reasons = shared.body["cdc"]["reasons"].as_array().unwrap();
        assert!(reasons.iter().any(|r| r.as_str().unwrap().starts_with("binary logging is off")), "{reasons:?}");
    }
    // The capabilities list the modes for MySQL/MariaDB sources.
    let caps = check!(app.get("/v1/connectors/capabilities", &ann).await, 200);
    assert!(caps.body.to_string().contains("cdc_deduped"), "{}", caps.body);

    let dests = [
        (
            "postgres",
            json!({"type": "postgres", "capability": "both", "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}),
        ),
        (
            "mysql",
            json!({"type": "mysql", "capability": "both", "config": {"host": "127.0.0.1", "database": mydb, "user": "root"}}),
        ),
        ("sqlite", json!({"type": "sqlite", "capability": "both", "config": {"path": "binlog.db"}})),
    ];
    let flows_path = format!("/v1/organizations/{org}/flows");
    let mappings = json!([
        {"source_entity": "orders", "sync_mode": "cdc_deduped"},
        {"source_entity": "orders", "dest_entity": "orders_soft", "sync_mode": "cdc_deduped", "delete_mode": "soft"},
        {"source_entity": "orders", "dest_entity": "orders_log", "sync_mode": "cdc_append"}
    ]);
    let bad = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "bad", "source_connection_id": source_id, "destination_connection_id": source_id,
            "config": {"mappings": [{"source_entity": "keyless", "sync_mode": "cdc_deduped"}]}})
        )
        .await,
        422
    );
    let errors = bad.body["details"]["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["field"] == "config.mappings[0].source_entity"
            && e["message"].as_str().unwrap().contains("no primary key")),
        "{:?}",
        bad.body
    );

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

    // First run: the tables as the snapshot saw them.
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
    // Changes: one transaction spanning two of them, a large value, a key
    // that changes.
    let big = sluice_testkit::services::incompressible(5000);
    exec(
        &mut src,
        &format!(
            "INSERT INTO orders (id, note, big) VALUES (4, 'four', '{big}');
             BEGIN; UPDATE orders SET note = 'TWO' WHERE id = 2; DELETE FROM orders WHERE id = 3; COMMIT;
             UPDATE orders SET note = 'FOUR' WHERE id = 4;
             INSERT INTO orders (id, note) VALUES (5, 'five'); DELETE FROM orders WHERE id = 5;
             INSERT INTO orders (id, note) VALUES (6, 'six'); UPDATE orders SET id = 7 WHERE id = 6;"
        ),
    )
    .await;
    for (name, conn, flow) in &flows {
        let r = run(&app, &ann, &org, flow).await;
        assert_eq!(r["status"], "succeeded", "{name}: {r}");
        assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["1:one", "2:TWO", "4:FOUR", "7:six"], "{name}");
        assert_eq!(
            rows(&app, &ann, &org, conn, "orders_soft").await,
            ["1:one", "2:TWO", "3:three:deleted", "4:FOUR", "5:five:deleted", "6:six:deleted", "7:six"],
            "{name}"
        );
        let mut got = rows(&app, &ann, &org, conn, "orders_log").await;
        let mut want = vec!["insert 1:one", "insert 2:two", "update 2:TWO", "insert 3:three", "delete 3:three"];
        want.extend(["insert 4:four", "update 4:FOUR", "insert 5:five", "delete 5:five", "insert 6:six"]);
        // (The row under a changed key goes with its key only, as from PostgreSQL.)
        want.extend(["delete 6:null", "update 7:six"]);
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}: each change once");
        // Values read from the binlog as a copy reads them.
        let p = check!(
            app.post(&format!("{conns}/{conn}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await,
            200
        );
        let records = p.body["records"].as_array().unwrap();
        let four = records.iter().find(|r| r["note"] == "FOUR").unwrap();
        assert_eq!(four["big"].as_str().map(str::len), Some(big.len()), "{name}");
        // The state shows the GTID position each table holds.
        let state = check!(app.get(&format!("{flows_path}/{flow}/state"), &ann).await, 200);
        let entries = state.body["data"].as_array().or(state.body.as_array()).cloned().unwrap_or_default();
        let gtid = |v: &str| v.split('-').count() == 3 && v.split('-').all(|p| p.parse::<u64>().is_ok());
        assert!(
            entries.iter().all(|e| e["cursor_field"] == "$position" && e["cursor_value"].as_str().is_some_and(gtid)),
            "{name}: {state:?}"
        );
        let again = run(&app, &ann, &org, flow).await;
        assert_eq!(again["status"], "succeeded", "{name}: {again}");
        assert_eq!(rows(&app, &ann, &org, conn, "orders_log").await.len(), 12, "{name}: nothing applied twice");
    }

    // Values of every kind arrive as a copy of the same rows reads them.
    exec(&mut src, "UPDATE orders SET amount = 3.75, at = '2025-01-02 03:04:05.000006', flag = 1, kind = 'b', day = '2025-01-02' WHERE id = 7").await;
    let (_, conn, flow) = &flows[0];
    assert_eq!(run(&app, &ann, &org, flow).await["status"], "succeeded");
    let copy = check!(
        app.post(&format!("{conns}/{source_id}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await,
        200
    );
    let mirror =
        check!(app.post(&format!("{conns}/{conn}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await, 200);
    let seven = |b: &Value| b["records"].as_array().unwrap().iter().find(|r| r["id"] == 7).cloned().unwrap();
    let (s, d) = (seven(&copy.body), seven(&mirror.body));
    for col in ["note", "amount", "flag", "kind", "day"] {
        assert_eq!(s[col], d[col], "{col}: {s} / {d}");
    }
    assert!(d["at"].as_str().unwrap().starts_with("2025-01-02T03:04:05.000006"), "{d}");

    // A column added at the source: the rows before it and after it.
    exec(
        &mut src,
        "UPDATE orders SET note = 'uno' WHERE id = 1;
         ALTER TABLE orders ADD COLUMN extra int;
         INSERT INTO orders (id, note, extra) VALUES (8, 'eight', 88);",
    )
    .await;
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["1:uno", "2:TWO", "4:FOUR", "7:six", "8:eight"]);
    let p =
        check!(app.post(&format!("{conns}/{conn}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await, 200);
    let eight = p.body["records"].as_array().unwrap().iter().find(|r| r["id"] == 8).cloned().unwrap();
    assert_eq!(eight["extra"], 88, "{eight}");

    // A column added in the middle, between changes not yet read: by
    // name the earlier rows still fit; by position they match no form of
    // the table, which stops until copied again.
    exec(
        &mut src,
        "UPDATE orders SET note = 'UNO' WHERE id = 1; ALTER TABLE orders ADD COLUMN early int AFTER id; \
         UPDATE orders SET early = 5, note = 'DOS' WHERE id = 2",
    )
    .await;
    let r = run(&app, &ann, &org, flow).await;
    if names {
        assert_eq!(r["status"], "succeeded", "{r}");
    } else {
        assert_eq!(r["status"], "failed", "{r}");
        assert!(r["entities"][0]["error"].as_str().unwrap().contains("match none"), "{r}");
        check!(app.delete(&format!("{flows_path}/{flow}/state/orders"), &ann).await, 204);
        assert_eq!(run(&app, &ann, &org, flow).await["status"], "succeeded");
    }
    assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["1:UNO", "2:DOS", "4:FOUR", "7:six", "8:eight"]);
    let p =
        check!(app.post(&format!("{conns}/{conn}/preview"), &ann, json!({"entity": "orders", "limit": 10})).await, 200);
    let two = p.body["records"].as_array().unwrap().iter().find(|r| r["id"] == 2).cloned().unwrap();
    assert_eq!((two["early"].clone(), two["extra"].clone()), (json!(5), Value::Null), "{two}");

    // A binlog purged past what a table holds: position_lost, until copied again.
    exec(&mut src, "INSERT INTO orders (id, note) VALUES (9, 'nine')").await;
    // A file the server still needs for its crash recovery (its binlog
    // checkpoint) is kept by PURGE: flushed again until it goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        exec(&mut src, "FLUSH BINARY LOGS").await;
        let logs = sqlx::query("SHOW BINARY LOGS").fetch_all(&mut src).await.unwrap();
        let last: String = logs.last().map(|r| sqlx::Row::get(r, 0)).unwrap();
        exec(&mut src, &format!("PURGE BINARY LOGS TO '{last}'")).await;
        if sqlx::query("SHOW BINARY LOGS").fetch_all(&mut src).await.unwrap().len() == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the test's MariaDB keeps its old binlogs");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["entities"][0]["error_code"], "position_lost", "{r}");
    for entity in ["orders"] {
        check!(app.delete(&format!("{flows_path}/{flow}/state/{entity}"), &ann).await, 204);
    }
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(
        rows(&app, &ann, &org, conn, "orders").await,
        ["1:UNO", "2:DOS", "4:FOUR", "7:six", "8:eight", "9:nine"]
    );

    // A table joins the flow: copied while the stream goes on.
    exec(
        &mut src,
        "CREATE TABLE items (id int PRIMARY KEY, note text) ENGINE = InnoDB; INSERT INTO items VALUES (1, 'pen')",
    )
    .await;
    check!(
        app.send(
            reqwest::Method::PATCH,
            &format!("{flows_path}/{flow}"),
            &ann,
            Some(json!({"config": {"mappings": [
                {"source_entity": "orders", "sync_mode": "cdc_deduped"},
                {"source_entity": "items", "sync_mode": "cdc_deduped"}
            ]}})),
            &[]
        )
        .await,
        200
    );
    assert_eq!(run(&app, &ann, &org, flow).await["status"], "succeeded");
    assert_eq!(rows(&app, &ann, &org, conn, "items").await, ["1:pen"]);
    // A TRUNCATE logs no rows: that table stops, saying so, until copied
    // again; the other goes on.
    exec(
        &mut src,
        "/* app */ TRUNCATE TABLE orders; INSERT INTO orders (id, note) VALUES (10, 'ten'); \
         INSERT INTO items VALUES (2, 'ink')",
    )
    .await;
    let r = run(&app, &ann, &org, flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    let entity = |name: &str| r["entities"].as_array().unwrap().iter().find(|e| e["entity"] == name).cloned().unwrap();
    assert!(entity("orders")["error"].as_str().unwrap().contains("truncated"), "{r}");
    assert_eq!(entity("items")["status"], "succeeded", "{r}");
    assert_eq!(rows(&app, &ann, &org, conn, "items").await, ["1:pen", "2:ink"]);
    // PUT: earlier, unknown or past the end is refused; later skips what
    // is between.
    let state_path = format!("{flows_path}/{flow}/state");
    let end: String = sqlx::query_scalar("SELECT CAST(@@gtid_binlog_pos AS CHAR)").fetch_one(&mut src).await.unwrap();
    let seq: u64 = end.rsplit('-').next().unwrap().parse().unwrap();
    for bad in ["0-7-1".to_string(), "16/B374D848".into(), format!("0-7-{}", seq + 100), "x-y-z".into()] {
        let put = app.put(&format!("{state_path}/items"), &ann, json!({"cursor_value": bad})).await;
        assert_eq!(put.status, 422, "{bad}: {:?}", put.body);
    }
    exec(&mut src, "INSERT INTO items VALUES (3, 'cap')").await;
    let past: String = sqlx::query_scalar("SELECT CAST(@@gtid_binlog_pos AS CHAR)").fetch_one(&mut src).await.unwrap();
    let put = check!(app.put(&format!("{state_path}/items"), &ann, json!({"cursor_value": past})).await, 200);
    assert_eq!(put.body["cursor_value"], past.as_str());
    check!(app.delete(&format!("{flows_path}/{flow}/state/orders"), &ann).await, 204);
    assert_eq!(run(&app, &ann, &org, flow).await["status"], "succeeded");
    assert_eq!(rows(&app, &ann, &org, conn, "orders").await, ["10:ten"]);
    assert_eq!(rows(&app, &ann, &org, conn, "items").await, ["1:pen", "2:ink"], "the PUT skipped 3");

    for (_, _, flow) in &flows {
        check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
    }
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {mydb}"))).execute(&mut my).await.unwrap();
}

/// A continuous flow from the binlog: one run, started by the scheduler,
/// that applies changes as they come (waiting on the source's GTID
/// position between them); paused, its run ends.
async fn continuous(backend: Backend) {
    use super::cdc::{eventually, mirror, runs_of};
    let Some(app) = spawn_app(backend).await else { return };
    let Some((source, mut src)) = binlog_source(&[]).await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    exec(
        &mut src,
        "CREATE TABLE orders (id int PRIMARY KEY, note text) ENGINE = InnoDB; INSERT INTO orders VALUES (1, 'one')",
    )
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source_id = check!(
        app.post(&conns, &ann, json!({"name": "shop", "type": "mysql", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "shop", "user": "root", "ssl_mode": "disabled"}}))
        .await,
        201
    )
    .id();
    let conn = check!(
        app.post(&conns, &ann, json!({"name": "wh", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}))
        .await,
        201
    )
    .id();
    let flows_path = format!("/v1/organizations/{org}/flows");
    let flow = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "orders", "source_connection_id": source_id, "destination_connection_id": conn,
                "config": {"continuous": true, "mappings": [{"source_entity": "orders", "sync_mode": "cdc_deduped"}]}})
        )
        .await,
        201
    )
    .id();
    eventually(30, "the first copy", || async { mirror(&dst.name).await == ["1:one"] }).await;
    for i in 2..=4 {
        exec(&mut src, &format!("INSERT INTO orders VALUES ({i}, 'n{i}')")).await;
        eventually(10, "a change applied", || async { mirror(&dst.name).await.len() == i }).await;
    }
    exec(&mut src, "UPDATE orders SET note = 'ONE' WHERE id = 1; DELETE FROM orders WHERE id = 2").await;
    eventually(10, "an update and a delete", || async { mirror(&dst.name).await == ["1:ONE", "3:n3", "4:n4"] }).await;
    let runs = runs_of(&app, &ann, &org, &flow).await;
    assert_eq!(runs.len(), 1, "one run, kept going: {runs:?}");
    assert_eq!(runs[0]["status"], "running");
    check!(
        app.send(reqwest::Method::PATCH, &format!("{flows_path}/{flow}"), &ann, Some(json!({"status": "paused"})), &[])
            .await,
        200
    );
    eventually(15, "the run to end", || async { runs_of(&app, &ann, &org, &flow).await[0]["status"] == "succeeded" })
        .await;
    check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_binlog_flow_applies_changes_as_they_come_with_sqlite_metadata() {
    continuous(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuous_binlog_flow_applies_changes_as_they_come_with_postgres_metadata() {
    continuous(Backend::Postgres).await;
}

#[tokio::test]
async fn binlog_changes_apply_once_with_sqlite_metadata() {
    scenario(Backend::Sqlite).await;
}

#[tokio::test]
async fn binlog_changes_apply_once_with_postgres_metadata() {
    scenario(Backend::Postgres).await;
}

/// Every row of `schema.table` as JSON (its columns by name), by id; none
/// while the table does not exist.
async fn mirrored(schema: &str, table: &str) -> Vec<Value> {
    let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    let sql = format!("SELECT row_to_json(t)::text FROM {schema}.{table} t ORDER BY id");
    let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(&mut c).await.unwrap_or_default();
    rows.iter().map(|r| serde_json::from_str(r).unwrap()).collect()
}

/// DDL between changes a run has still to read, one kind to a table, with
/// a table beside them that only changes: a column dropped, retyped or
/// renamed, a table renamed or dropped. Each stops its table alone at its
/// position, saying what happened and to copy it again; the steady table
/// gets every change; a table copied again (`DELETE …/state/{entity}`)
/// equals the source. `names`: the server logs column names
/// (`binlog_row_metadata = FULL`), else types only.
async fn ddl_mid_stream(backend: Backend, names: bool) {
    let Some(app) = spawn_app(backend).await else { return };
    let settings: &'static [&'static str] = if names { &["--binlog-row-metadata=FULL"] } else { &[] };
    let Some((source, mut src)) = binlog_source(settings).await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let tables = ["steady", "dropcol", "retype", "renamecol", "renamed", "dropped"];
    for t in tables {
        exec(
            &mut src,
            &format!(
                "CREATE TABLE {t} (id int PRIMARY KEY, note varchar(50), n int) ENGINE = InnoDB;
                 INSERT INTO {t} VALUES (1, 'one', 1)"
            ),
        )
        .await;
    }
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let source_id = check!(
        app.post(&conns, &ann, json!({"name": "shop", "type": "mysql", "capability": "source",
            "config": {"host": "127.0.0.1", "port": source.port, "database": "shop", "user": "root", "ssl_mode": "disabled"}}))
        .await,
        201
    )
    .id();
    let conn = check!(
        app.post(&conns, &ann, json!({"name": "wh", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": dst.name, "sslmode": "disable"}}))
        .await,
        201
    )
    .id();
    let mappings: Vec<Value> = tables.iter().map(|t| json!({"source_entity": t, "sync_mode": "cdc_deduped"})).collect();
    let flows_path = format!("/v1/organizations/{org}/flows");
    let flow = check!(
        app.post(
            &flows_path,
            &ann,
            json!({"name": "shop", "source_connection_id": source_id,
            "destination_connection_id": conn, "config": {"mappings": mappings}})
        )
        .await,
        201
    )
    .id();
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "succeeded", "{r}");

    // A change logged in each table's old form, the DDL, a change in the
    // new form; the steady table changes between them.
    let mut step = 2;
    for (t, ddl, after) in [
        ("dropcol", "ALTER TABLE dropcol DROP COLUMN n", "INSERT INTO dropcol VALUES (2, 'two')"),
        ("retype", "ALTER TABLE retype MODIFY n varchar(20)", "INSERT INTO retype VALUES (2, 'two', 'x')"),
        (
            "renamecol",
            "ALTER TABLE renamecol RENAME COLUMN note TO title",
            "INSERT INTO renamecol VALUES (2, 'two', 2)",
        ),
        ("renamed", "RENAME TABLE renamed TO renamed_too", "INSERT INTO renamed_too VALUES (2, 'two', 2)"),
        ("dropped", "DROP TABLE dropped", "SELECT 1"),
    ] {
        exec(&mut src, &format!("UPDATE {t} SET note = 'uno' WHERE id = 1")).await;
        for sql in [ddl, after] {
            step += 1;
            exec(&mut src, &format!("INSERT INTO steady VALUES ({step}, 'n{step}', {step})")).await;
            exec(&mut src, sql).await;
        }
    }
    exec(&mut src, "UPDATE steady SET note = 'last' WHERE id = 1").await;
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(r["status"], "failed", "{r}");
    let entity = |r: &Value, name: &str| {
        r["entities"].as_array().unwrap().iter().find(|e| e["entity"] == name).cloned().unwrap_or(Value::Null)
    };
    println!("DDL mid-stream (names {names}): {}", r["entities"]);
    assert_eq!(entity(&r, "steady")["status"], "succeeded", "{r}");
    let want: Vec<Value> = (1..=12)
        .filter(|i| *i != 2)
        .map(|i| match i {
            1 => json!({"id": 1, "note": "last", "n": 1}),
            i => json!({"id": i, "note": format!("n{i}"), "n": i}),
        })
        .collect();
    assert_eq!(mirrored(&dst.name, "steady").await, want, "the steady table has every change");
    for t in ["dropcol", "retype", "renamecol", "renamed", "dropped"] {
        let e = entity(&r, t);
        assert_eq!(e["status"], "failed", "{t}: {e}");
        let said = e["error"].as_str().unwrap_or_default();
        assert!(said.contains("copy"), "{t} says to copy it again: {said}");
        // Stopped at its position: the change before the DDL is not
        // applied in a form the table no longer has.
        assert_eq!(mirrored(&dst.name, t).await, [json!({"id": 1, "note": "one", "n": 1})], "{t}");
    }
    // Copied again, each table whose columns changed equals the source.
    for t in ["dropcol", "retype", "renamecol"] {
        check!(app.delete(&format!("{flows_path}/{flow}/state/{t}"), &ann).await, 204);
    }
    let r = run(&app, &ann, &org, &flow).await;
    for t in ["dropcol", "renamecol", "steady"] {
        assert_eq!(entity(&r, t)["status"], "succeeded", "{t}: {r}");
    }
    // The copy of the retyped table meets the destination's column of the
    // old type: it stops alone, saying what to do; done, it copies.
    let said = entity(&r, "retype")["error"].as_str().unwrap_or_default().to_string();
    assert!(said.contains("the copy stops; change the destination's columns"), "{said}");
    let mut pg = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {}.retype", dst.name))).execute(&mut pg).await.unwrap();
    check!(app.delete(&format!("{flows_path}/{flow}/state/retype"), &ann).await, 204);
    let r = run(&app, &ann, &org, &flow).await;
    assert_eq!(entity(&r, "retype")["status"], "succeeded", "{r}");
    // Each holds the source's rows in its columns as they are now (the
    // old columns stay, written null from then on).
    let cols = |t: &'static str, names: &'static [&'static str]| {
        let dst = dst.name.clone();
        async move {
            mirrored(&dst, t)
                .await
                .iter()
                .map(|r| names.iter().map(|n| r[n].clone()).collect())
                .collect::<Vec<Vec<Value>>>()
        }
    };
    assert_eq!(cols("dropcol", &["id", "note"]).await, [[json!(1), json!("uno")], [json!(2), json!("two")]]);
    assert_eq!(
        cols("retype", &["id", "note", "n"]).await,
        [[json!(1), json!("uno"), json!("1")], [json!(2), json!("two"), json!("x")]]
    );
    assert_eq!(
        cols("renamecol", &["id", "title", "n"]).await,
        [[json!(1), json!("uno"), json!(1)], [json!(2), json!("two"), json!(2)]]
    );
    check!(app.delete(&format!("{flows_path}/{flow}"), &ann).await, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_between_unread_changes_stops_each_table_alone_with_types_logged_on_sqlite_metadata() {
    ddl_mid_stream(Backend::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_between_unread_changes_stops_each_table_alone_with_names_logged_on_postgres_metadata() {
    ddl_mid_stream(Backend::Postgres, true).await;
}
