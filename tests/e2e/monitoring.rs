//! The dashboard and the operator's metrics end to end, on both metadata
//! stores: counts of flows, the last day's runs and rows, connections'
//! health and the month's validations; `/metrics` with route patterns
//! (never an id), run, row and gateway counters, and the queue's depth.

use serde_json::{Value, json};
use sluice_tests::{Auth, Backend, TestApp, check, spawn_app};
use std::time::{Duration, Instant};

async fn run_to_end(app: &TestApp, auth: &Auth, org: &str, flow: &str) -> Value {
    let id = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), auth, json!({})).await, 202).id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{id}"), auth).await, 200).body;
        if !["queued", "running"].contains(&r["status"].as_str().unwrap()) {
            return r;
        }
        assert!(Instant::now() < deadline, "the run did not end: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn dashboard_and_metrics(app: TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/items.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n{\"id\": 3}\n").unwrap();
    let conns = format!("/v1/organizations/{org}/connections");
    let file = |name: &str, path: &str| json!({"name": name, "type": "file", "capability": "both", "config": {"path": path, "format": "jsonl"}});
    let src = check!(app.post(&conns, &ann, file("in", "in")).await, 201).id();
    let dst = check!(app.post(&conns, &ann, file("out", "out")).await, 201).id();
    check!(app.post(&conns, &ann, file("idle", "idle")).await, 201);
    assert_eq!(check!(app.post(&format!("{conns}/{src}/test"), &ann, json!({})).await, 200).body["ok"], true);
    let broken = check!(
        app.post(
            &conns,
            &ann,
            json!({"name": "pg", "type": "postgres", "capability": "source",
        "config": {"host": "127.0.0.1", "port": 1, "database": "x", "user": "x"}})
        )
        .await,
        201
    )
    .id();
    assert_eq!(check!(app.post(&format!("{conns}/{broken}/test"), &ann, json!({})).await, 200).body["ok"], false);
    let flows = format!("/v1/organizations/{org}/flows");
    let flow = |name: &str, status: &str| {
        json!({"name": name, "source_connection_id": src, "destination_connection_id": dst,
        "status": status, "config": {"mappings": [{"source_entity": "items", "dest_entity": format!("{name}_out"), "sync_mode": "full_refresh_overwrite"}]}})
    };
    let active = check!(app.post(&flows, &ann, flow("copy", "active")).await, 201).id();
    check!(app.post(&flows, &ann, flow("later", "paused")).await, 201);
    assert_eq!(run_to_end(&app, &ann, &org, &active).await["status"], "succeeded");
    assert_eq!(run_to_end(&app, &ann, &org, &active).await["status"], "succeeded");

    // Two gateway validations count against the month.
    let asset = check!(
        app.post(
            &format!("/v1/organizations/{org}/data-assets"),
            &ann,
            json!({"name": "c", "fields": [{"name": "a", "type": "integer", "required": true}]})
        )
        .await,
        201
    )
    .id();
    let key = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), &ann, json!({"name": "gw", "roles": ["Viewer"]})).await,
        201
    );
    let viewer = Auth::Key(key.body["key"].as_str().unwrap().to_string());
    check!(
        app.post("/v1/gateway/validate", &viewer, json!({"asset_id": asset, "payload_raw": "{\"a\": 1}"})).await,
        200
    );
    check!(
        app.post("/v1/gateway/validate", &viewer, json!({"asset_id": asset, "payload_raw": "{\"b\": 1}"})).await,
        422
    );

    let d = check!(app.get(&format!("/v1/organizations/{org}/dashboard"), &viewer).await, 200).body;
    assert_eq!(d["flows"], json!({"total": 2, "active": 1, "paused": 1}));
    assert_eq!(d["runs_24h"], json!({"succeeded": 2, "failed": 0, "running": 0, "queued": 0}));
    assert_eq!(d["rows_synced_24h"], 6, "two runs of three rows");
    // The destination was never tested, but a run worked through it.
    assert_eq!(d["connections"], json!({"healthy": 2, "failing": 1, "untested": 1}));
    assert_eq!((d["validations"]["used"].as_i64(), d["validations"]["limit"].as_i64()), (Some(2), Some(1000)));
    assert!(d["validations"]["period_end"].as_str().unwrap().ends_with("-01T00:00:00Z"), "{d}");
    let stranger = app.token("eve@example.com");
    check!(app.get(&format!("/v1/organizations/{org}/dashboard"), &stranger).await, 404);

    // The metrics: unauthenticated, patterns not ids.
    let res = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let text = res.text().await.unwrap();
    // Every sample line parses: `name{labels} value`, the labels quoted.
    let mut names = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        assert!(value.parse::<f64>().is_ok(), "not a number: {line}");
        let name = series.split('{').next().unwrap();
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name: {line}");
        if let Some(labels) = series.strip_prefix(name) {
            assert!(labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')), "bad labels: {line}");
            for pair in labels.trim_matches(|c| c == '{' || c == '}').split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(!k.is_empty() && v.starts_with('"'), "bad label: {line}");
            }
        }
        names.insert(name.to_string());
    }
    for name in [
        "http_requests_total",
        "http_request_duration_seconds_bucket",
        "sluice_runs_total",
        "sluice_rows_synced_total",
        "sluice_run_duration_seconds_sum",
        "sluice_gateway_validations_total",
        "sluice_queue_depth",
    ] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
    assert!(!text.contains(&org) && !text.contains(&active), "no ids in labels");
    for line in [
        "http_requests_total{method=\"GET\",route=\"/v1/organizations/{orgId}/dashboard\",status=\"200\"} 1",
        "http_requests_total{method=\"GET\",route=\"/v1/organizations/{orgId}/dashboard\",status=\"404\"} 1",
        "sluice_runs_total{status=\"succeeded\"} 2",
        "sluice_rows_synced_total 6",
        "sluice_gateway_validations_total{outcome=\"valid\"} 1",
        "sluice_gateway_validations_total{outcome=\"invalid\"} 1",
        "sluice_queue_depth 0",
        "sluice_run_duration_seconds_count 2",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// A run's events stream until it ends; logs take `since` and `limit`.
async fn run_events_and_log_filters(app: TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let dir = app.org_files(&org);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let rows: String = (0..5000).map(|i| format!("{{\"id\": {i}}}\n")).collect();
    std::fs::write(dir.join("in/items.jsonl"), rows).unwrap();
    let conn = app.file_connection(&ann, &org, "in", "in", Some("jsonl")).await;
    let flow = check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({"name": "copy", "source_connection_id": conn,
        "destination_connection_id": conn, "config": {"mappings": [{"source_entity": "items", "dest_entity": "copy", "sync_mode": "full_refresh_overwrite"}]}})).await, 201).id();
    let run = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), &ann, json!({})).await, 202).id();
    let Auth::Token(bearer) = &ann else { unreachable!() };
    let mut res = app
        .client
        .get(format!("{}/v1/organizations/{org}/runs/{run}/events", app.base))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: log\n"), "{text}");
    let end = text.split("event: end\ndata: ").nth(1).expect("an end event").lines().next().unwrap();
    let end: Value = serde_json::from_str(end).unwrap();
    assert_eq!(
        (end["status"].as_str(), end["entities"][0]["rows_written"].as_i64()),
        (Some("succeeded"), Some(5000)),
        "{text}"
    );
    let stranger = app.token("eve@example.com");
    check!(app.get(&format!("/v1/organizations/{org}/runs/{run}/events"), &stranger).await, 404);

    let logs = format!("/v1/organizations/{org}/logs/{run}");
    let all = check!(app.get(&logs, &ann).await, 200).body["data"].as_array().unwrap().len();
    assert!(all >= 2, "started and finished");
    assert_eq!(check!(app.get(&format!("{logs}?limit=1"), &ann).await, 200).body["data"].as_array().unwrap().len(), 1);
    assert_eq!(check!(app.get(&format!("{logs}?since=2999-01-01T00:00:00Z"), &ann).await, 200).body["data"], json!([]));
    check!(app.get(&format!("{logs}?limit=0"), &ann).await, 422);
    check!(app.get(&format!("{logs}?since=yesterday"), &ann).await, 422);
}

sluice_tests::on_both_backends!(dashboard_and_metrics, run_events_and_log_filters);
