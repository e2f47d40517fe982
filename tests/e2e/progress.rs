//! A load that commits once (a full refresh in bulk) shows that it is
//! working while it runs: the bytes read so far grow in the run's stats
//! before anything is committed.

use serde_json::json;
use sluice_tests::{Backend, TestApp, check, on_both_backends, pg_exec, spawn_app};
use std::time::{Duration, Instant};

on_both_backends!(a_bulk_load_shows_its_bytes_before_it_commits);

async fn a_bulk_load_shows_its_bytes_before_it_commits(app: TestApp) {
    let Some(src) = sluice_tests::pg_schema().await else { return };
    let Some(dst) = sluice_tests::pg_schema().await else { return };
    let s = &src.name;
    // About 200 MB in binary COPY: several reports before the commit.
    pg_exec(format!(
        "CREATE TABLE {s}.blobs (id bigint PRIMARY KEY, body text NOT NULL);
         INSERT INTO {s}.blobs SELECT i, repeat(md5(i::text), 32) FROM generate_series(1, 200000) i;"
    ))
    .await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let pg = sluice_tests::pg_connection;
    let source = check!(app.post(&format!("{base}/connections"), &ann, pg("src", s)).await, 201).id();
    let dest = check!(app.post(&format!("{base}/connections"), &ann, pg("dst", &dst.name)).await, 201).id();
    let flow = json!({"name": "blobs", "source_connection_id": source, "destination_connection_id": dest,
        "config": {"mappings": [{"source_entity": "blobs", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, flow).await, 201).id();
    let run = check!(app.post(&format!("{base}/flows/{flow}/run"), &ann, json!({})).await, 202).id();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen_working = None;
    let done = loop {
        let r = check!(app.get(&format!("{base}/runs/{run}"), &ann).await, 200).body;
        let e = &r["entities"][0];
        if r["status"] == "running" && e["bytes"].as_u64().unwrap_or(0) > 0 && e["rows_written"] == 0 {
            seen_working = Some(e["bytes"].as_u64().unwrap());
        }
        if !["queued", "running"].contains(&r["status"].as_str().unwrap()) {
            break r;
        }
        assert!(Instant::now() < deadline, "unfinished: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done["status"], "succeeded", "{done}");
    let shown = seen_working.expect("bytes shown while the load ran, before its commit");
    assert!(shown > 0, "{shown}");
    assert_eq!(done["entities"][0]["rows_written"], 200_000);
}
