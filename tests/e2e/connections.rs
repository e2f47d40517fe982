//! Connections through the real application against the real servers:
//! test, discover and preview a natively typed PostgreSQL table; failures
//! told apart; the password absent from responses, the metadata database
//! and the log.

use serde_json::json;
use sluice_tests::{Backend, check, spawn_app};
use sqlx::Connection;

const PASSWORD: &str = "pg-secret-4f9a1c";

#[tokio::test]
async fn postgres_connections_are_tested_discovered_and_previewed_without_leaking_the_password() {
    let logs = sluice_tests::capture_logs();
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let Some(pg) = sluice_tests::pg_schema().await else { return };
    let mut c = sqlx::PgConnection::connect(sluice_tests::PG_TEST_URL).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {s}.orders (id bigint PRIMARY KEY, amount numeric(12,2) NOT NULL, placed timestamptz, meta jsonb, tags int[], note text); \
         INSERT INTO {s}.orders VALUES (1, 12.50, '2026-01-01 10:00+02', '{{\"a\": 1}}', '{{1,2}}', 'héllo'), (2, -0.01, NULL, NULL, NULL, NULL)",
        s = pg.name
    )))
    .execute(&mut c)
    .await
    .unwrap();

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let integ = check!(
        app.post(
            &format!("{base}/integrations"),
            &ann,
            json!({"name": "warehouse", "type": "postgres", "credentials": {"password": PASSWORD}})
        )
        .await,
        201
    );
    let conn = check!(
        app.post(
            &format!("{base}/connections"),
            &ann,
            json!({"name": "pg", "type": "postgres", "capability": "both", "integration_id": integ.id(),
                   "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": pg.name, "sslmode": "disable"}})
        )
        .await,
        201
    );
    let cid = conn.id();
    let t = check!(app.post(&format!("{base}/connections/{cid}/test"), &ann, json!({})).await, 200);
    assert_eq!(t.body["ok"], true, "{}", t.body);
    let d = check!(app.post(&format!("{base}/connections/{cid}/discover"), &ann, json!({})).await, 200);
    let orders = d.body["entities"].as_array().unwrap().iter().find(|e| e["name"] == "orders").unwrap().clone();
    let types: Vec<&str> = orders["fields"].as_array().unwrap().iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["integer", "decimal", "timestamp", "object", "array", "string"]);
    assert_eq!(orders["fields"][0]["primary_key"], true);
    assert_eq!(orders["fields"][1]["nullable"], false);
    let p = check!(
        app.post(&format!("{base}/connections/{cid}/preview"), &ann, json!({"entity": "orders", "limit": 5})).await,
        200
    );
    assert_eq!(
        p.body["records"][0],
        json!({"id": 1, "amount": "12.50", "placed": "2026-01-01T08:00:00.000000Z", "meta": {"a": 1}, "tags": [1, 2], "note": "héllo"})
    );
    assert_eq!(p.body["records"][1]["placed"], json!(null));

    // Failures are distinct and readable.
    for (config, code) in [
        (
            json!({"host": "127.0.0.1", "port": 1, "database": "test", "user": "postgres", "password": PASSWORD, "sslmode": "disable"}),
            "refused",
        ),
        (
            json!({"host": "no-such-host.invalid", "database": "test", "user": "postgres", "password": PASSWORD, "sslmode": "disable"}),
            "unreachable",
        ),
        (
            json!({"host": "127.0.0.1", "database": "no_such_db_here", "user": "postgres", "password": PASSWORD, "sslmode": "disable"}),
            "database_not_found",
        ),
        (
            json!({"host": "127.0.0.1", "database": "test", "user": "no_such_role", "password": PASSWORD, "sslmode": "disable"}),
            "auth_failed",
        ),
    ] {
        let t = check!(
            app.post(
                &format!("{base}/connections/test"),
                &ann,
                json!({"type": "postgres", "capability": "source", "config": config})
            )
            .await,
            200
        );
        assert_eq!(t.body["ok"], false);
        assert_eq!(t.body["error_code"], code, "{}", t.body);
        assert!(!t.body.to_string().contains(PASSWORD));
    }
    let mysql = check!(
        app.post(
            &format!("{base}/connections/test"),
            &ann,
            json!({"type": "mysql", "capability": "source", "config": {"host": "127.0.0.1", "database": "test", "user": "root", "password": PASSWORD}})
        )
        .await,
        200
    );
    assert_eq!(mysql.body["error_code"], "auth_failed", "{}", mysql.body);
    // Without a capability, a test checks everything the type can do.
    let any = check!(
        app.post(
            &format!("{base}/connections/test"),
            &ann,
            json!({"type": "postgres", "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "sslmode": "disable"}})
        )
        .await,
        200
    );
    assert_eq!(any.body["ok"], true, "{}", any.body);

    // The password is nowhere: responses, the metadata database, the log.
    for path in [
        format!("{base}/integrations"),
        format!("{base}/connections"),
        format!("{base}/connections/{cid}"),
        format!("{base}/audit-logs"),
    ] {
        let r = check!(app.get(&path, &ann).await, 200);
        assert!(!r.body.to_string().contains(PASSWORD), "{path} leaks the password");
    }
    let db_bytes = app.metadata_bytes();
    assert!(!db_bytes.is_empty());
    assert!(
        !db_bytes.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()),
        "the password is stored in plain text"
    );
    let details = check!(app.get(&format!("{base}/integrations/{}/details", integ.id()), &ann).await, 200);
    assert_eq!(details.body["credentials"]["password"], PASSWORD);
    let logged = logs.contents();
    assert!(logged.contains("request"), "the log captured requests");
    assert!(!logged.contains(PASSWORD), "the password reached the log");
}

#[tokio::test]
async fn file_connections_read_files_under_the_file_root_only() {
    let Some(app) = spawn_app(Backend::Sqlite).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org).join("exports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), "{\"id\": 1, \"kind\": \"click\", \"at\": \"2026-01-01T00:00:00Z\"}\n{\"id\": 2, \"kind\": \"view\", \"at\": \"2026-01-02T00:00:00Z\"}\n").unwrap();
    let base = format!("/v1/organizations/{org}/connections");
    let c = check!(
        app.post(
            &base,
            &ann,
            json!({"name": "files", "type": "file", "capability": "source", "config": {"path": "exports"}})
        )
        .await,
        201
    );
    let d = check!(app.post(&format!("{base}/{}/discover", c.id()), &ann, json!({})).await, 200);
    let types: Vec<&str> =
        d.body["entities"][0]["fields"].as_array().unwrap().iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["integer", "string", "timestamp"]);
    let p = check!(app.post(&format!("{base}/{}/preview", c.id()), &ann, json!({"entity": "events"})).await, 200);
    assert_eq!(p.body["records"].as_array().unwrap().len(), 2);
    let escape = check!(
        app.post(
            &format!("{base}/test"),
            &ann,
            json!({"type": "file", "capability": "source", "config": {"path": "../../etc"}})
        )
        .await,
        422
    );
    assert_eq!(escape.body["details"]["errors"][0]["field"], "config.path", "{}", escape.body);
}

/// A connection whose test failed is healthy again once a run worked
/// through it (a destination that just took its rows is not "failing"),
/// and the overview stops counting it as failing.
async fn a_run_that_works_heals_its_connections(app: sluice_tests::TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("wh", "wh.db")).await, 201).id();
    // The source's file is not there yet: its test fails.
    let tested = check!(app.post(&format!("{base}/connections/{shop}/test"), &ann, json!({})).await, 200);
    assert_eq!(tested.body["ok"], false, "{}", tested.body);
    let conn = check!(app.get(&format!("{base}/connections/{shop}"), &ann).await, 200);
    assert_eq!(conn.body["status"], "failing", "{}", conn.body);
    let file = app.org_files(&org).join("shop.db");
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
    sqlx::raw_sql("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'a');")
        .execute(&mut c)
        .await
        .unwrap();
    drop(c);
    let body = json!({"name": "items", "source_connection_id": shop, "destination_connection_id": wh,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body).await, 201).id();
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    for id in [&shop, &wh] {
        let conn = check!(app.get(&format!("{base}/connections/{id}"), &ann).await, 200);
        assert_eq!(conn.body["status"], "healthy", "{}", conn.body);
        assert!(conn.body["last_error"].is_null(), "{}", conn.body);
    }
}

sluice_tests::on_both_backends!(a_run_that_works_heals_its_connections);
