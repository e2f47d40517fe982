//! Object storage through the API, on both metadata stores: an `s3`
//! connection's settings refused at their fields, a PostgreSQL table
//! landed in a bucket (an emulator's) as gzipped CSV and read back by
//! DuckDB over S3 and by Sluice as a source, the modes plain files cannot
//! take refused naming the lake tables.

use serde_json::json;
use sluice_tests::{Backend, TestApp, check, on_both_backends, pg_exec, run_flow, spawn_app};

on_both_backends!(a_table_lands_in_a_bucket_as_csv_and_is_read_back);

async fn a_table_lands_in_a_bucket_as_csv_and_is_read_back(app: TestApp) {
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(python) = sluice_testkit::services::lake_python() else { return };
    let Some((_moto, url)) = sluice_testkit::services::moto() else { return };
    let s = &src.name;
    pg_exec(format!(
        "CREATE TABLE {s}.orders (id bigint PRIMARY KEY, note text, total numeric(12,2), at timestamptz);
         INSERT INTO {s}.orders SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE 'a, \"quoted\" note ' || i END,
           i * 1.25, TIMESTAMPTZ '2026-01-01T00:00:00Z' + i * INTERVAL '1 second' FROM generate_series(1, 3000) i;"
    ))
    .await;
    // The emulator is this test's own.
    let bucket = "lake".to_string();
    sluice_testkit::services::moto_bucket(&url, &bucket);

    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let s3 = |name: &str, extra: serde_json::Value| {
        let mut config = json!({"bucket": bucket, "prefix": "raw", "endpoint_url": url,
            "access_key_id": "AKIDEXAMPLE", "secret_access_key": "test-secret"});
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"name": name, "type": "s3", "capability": "both", "config": config})
    };
    // Settings refused at their fields.
    for (extra, field, says) in [
        (json!({"format": "csv", "compression": "snappy"}), "config.compression", "gzip or none"),
        (json!({"format": "parquet", "compression": "gzip"}), "config.compression", "zstd, snappy or none"),
        (json!({"format": "xml"}), "config.format", "parquet, csv or jsonl"),
        (json!({"endpoint_url": "ftp://x"}), "config.endpoint_url", "http:// or https://"),
    ] {
        let r = check!(app.post(&conns, &ann, s3("bad", extra.clone())).await, 422);
        let text = r.body.to_string();
        assert!(text.contains(field) && text.contains(says), "{extra}: {text}");
    }

    let shop = check!(app.post(&conns, &ann, sluice_tests::pg_connection("shop", s)).await, 201).id();
    let lake = check!(app.post(&conns, &ann, s3("lake", json!({"format": "csv", "compression": "gzip"}))).await, 201);
    assert_eq!(lake.body["config"]["secret_access_key"], "***");
    let lake = lake.id();
    check!(app.post(&format!("{conns}/{lake}/test"), &ann, json!({})).await, 200);
    let flows = format!("/v1/organizations/{org}/flows");
    let flow = |mode: &str| {
        json!({"name": format!("to-{mode}"), "source_connection_id": shop, "destination_connection_id": lake,
            "config": {"mappings": [{"source_entity": "orders", "sync_mode": mode, "cursor_field": "at",
                "primary_key": "id"}]}})
    };
    let r = check!(app.post(&flows, &ann, flow("incremental_deduped")).await, 422);
    assert!(r.body.to_string().contains("ducklake") && r.body.to_string().contains("iceberg"), "{}", r.body);
    let to_lake = check!(app.post(&flows, &ann, flow("incremental_append")).await, 201).id();
    assert_eq!(run_flow(&app, &ann, &org, &to_lake).await["status"], "succeeded");
    pg_exec(format!(
        "INSERT INTO {s}.orders SELECT i, 'late', 1, TIMESTAMPTZ '2026-02-01T00:00:00Z' + i * INTERVAL '1 second'
           FROM generate_series(3001, 3100) i;"
    ))
    .await;
    assert_eq!(run_flow(&app, &ann, &org, &to_lake).await["status"], "succeeded");
    let glob = format!("s3://{bucket}/raw/orders/*.csv.gz");
    assert_eq!(sluice_testkit::services::duckdb_counts(&python, &glob, Some(&url)), (3_100, 3_100));

    // The bucket read back as a source: the entity, its types, its rows.
    let found = check!(app.post(&format!("{conns}/{lake}/discover"), &ann, json!({})).await, 200);
    let text = found.body.to_string();
    assert!(text.contains("\"orders\""), "{text}");
    let rows = sluice_tests::preview_rows(&app, &ann, &org, &lake, "orders").await;
    assert_eq!(rows.len(), 1_000);
    let seventh = rows.iter().find(|r| r["id"] == 7).unwrap();
    assert!(seventh["note"].is_null(), "{seventh}");
    let eighth = rows.iter().find(|r| r["id"] == 8).unwrap();
    assert_eq!(eighth["note"], "a, \"quoted\" note 8", "{eighth}");

    // Incrementally out of the bucket, by object: each run reads the
    // objects (and the rest of objects) past the cursor, strictly after
    // it, so nothing is read twice.
    let lite = json!({"name": "lite", "type": "sqlite", "capability": "both", "config": {"path": "copy.db"}});
    let lite = check!(app.post(&conns, &ann, lite).await, 201).id();
    let out = json!({"name": "out", "source_connection_id": lake, "destination_connection_id": lite,
        "config": {"mappings": [{"source_entity": "orders", "sync_mode": "incremental_append",
            "cursor_field": "_sluice_object"}]}});
    let out = check!(app.post(&flows, &ann, out).await, 201).id();
    // An object is read by place once it has been there a few seconds
    // (SETTLE: S3 keeps its time to the second).
    let settle = || tokio::time::sleep(std::time::Duration::from_secs(6));
    let copied = |n: i64| {
        let file = app.org_files(&org).join("copy.db");
        async move {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await.unwrap();
            let (rows, ids): (i64, i64) =
                sqlx::query_as("SELECT count(*), count(DISTINCT id) FROM orders").fetch_one(&mut c).await.unwrap();
            assert_eq!((rows, ids), (n, n));
        }
    };
    // The files just put are left for the next run (how many depends on
    // how long ago each was put); the two runs then hold each row once.
    assert_eq!(run_flow(&app, &ann, &org, &out).await["status"], "succeeded");
    settle().await;
    assert_eq!(run_flow(&app, &ann, &org, &out).await["status"], "succeeded");
    copied(3_100).await;
    let state = check!(app.get(&format!("{flows}/{out}/state"), &ann).await, 200);
    let cursor = state.body.to_string();
    assert!(cursor.contains("_sluice_object") && cursor.contains("orders/"), "{cursor}");
    assert_eq!(run_flow(&app, &ann, &org, &out).await["status"], "succeeded");
    copied(3_100).await;
    pg_exec(format!("UPDATE {s}.orders SET at = at + INTERVAL '60 days', note = 'again' WHERE id > 3050")).await;
    assert_eq!(run_flow(&app, &ann, &org, &to_lake).await["status"], "succeeded");
    settle().await;
    assert_eq!(run_flow(&app, &ann, &org, &out).await["status"], "succeeded");
    {
        use sqlx::Connection;
        let file = app.org_files(&org).join("copy.db");
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await.unwrap();
        let (rows, again): (i64, i64) =
            sqlx::query_as("SELECT count(*), count(*) FILTER (WHERE note = 'again') FROM orders")
                .fetch_one(&mut c)
                .await
                .unwrap();
        assert_eq!((rows, again), (3_150, 50), "the new file's 50 rows, once");
    }

    // A pattern of files as a mapping's source: it needs a table to write
    // into, and reads every file it matches.
    let pattern = |dest: Option<&str>| {
        let mut m = json!({"source_entity": "orders/*.csv.gz", "sync_mode": "full_refresh_overwrite"});
        if let Some(d) = dest {
            m["dest_entity"] = json!(d);
        }
        json!({"name": format!("pattern-{}", dest.unwrap_or("none")), "source_connection_id": lake,
            "destination_connection_id": lite, "config": {"mappings": [m]}})
    };
    let r = check!(app.post(&flows, &ann, pattern(None)).await, 422);
    assert!(r.body.to_string().contains("dest_entity"), "{}", r.body);
    let outside = json!({"name": "outside", "source_connection_id": lake, "destination_connection_id": lite,
        "config": {"mappings": [{"source_entity": "../orders/*.csv.gz", "dest_entity": "x",
            "sync_mode": "full_refresh_overwrite"}]}});
    check!(app.post(&flows, &ann, outside).await, 422);
    let by_pattern = check!(app.post(&flows, &ann, pattern(Some("all_orders"))).await, 201).id();
    assert_eq!(run_flow(&app, &ann, &org, &by_pattern).await["status"], "succeeded");
    {
        use sqlx::Connection;
        let file = app.org_files(&org).join("copy.db");
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await.unwrap();
        let (rows, ids): (i64, i64) =
            sqlx::query_as("SELECT count(*), count(DISTINCT id) FROM all_orders").fetch_one(&mut c).await.unwrap();
        // Every run's files: the first two runs' 3,100 rows, and the third's
        // 50 rows again.
        assert_eq!((rows, ids), (3_150, 3_100));
    }
}
