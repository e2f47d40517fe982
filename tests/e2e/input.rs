//! Bad input is a clear 4xx on both metadata stores, and every filter of
//! every list endpoint works on both.

use reqwest::Method;
use serde_json::{Value, json};
use sluice_tests::{Backend, TestApp, check, spawn_app};

fn n(body: &Value) -> usize {
    body["data"].as_array().map_or(0, Vec::len)
}

async fn nul_characters_are_refused_everywhere_with_422(app: TestApp) {
    let ann = app.token("ann@example.com");
    let r = app.post("/v1/organizations", &ann, json!({"name": "A\u{0}B"})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert_eq!(r.body["details"]["errors"][0]["field"], "body.name", "{}", r.body);
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let bodies = [
        ("integrations", json!({"name": "i\u{0}", "type": "postgres", "credentials": {}})),
        ("integrations", json!({"name": "i", "type": "postgres", "credentials": {"password": "p\u{0}w"}})),
        ("connections", json!({"name": "c\u{0}", "type": "file", "capability": "source", "config": {"path": "x"}})),
        ("connections", json!({"name": "c", "type": "file", "capability": "source", "config": {"path": "x\u{0}"}})),
        ("data-assets", json!({"name": "a\u{0}", "fields": []})),
        ("api-keys", json!({"name": "k\u{0}", "roles": ["Viewer"]})),
        ("invitations", json!({"email": "a\u{0}@example.com", "role": "Viewer"})),
        ("flows", json!({"name": "f\u{0}"})),
        ("members", json!({"\u{0}": 1})),
    ];
    for (what, body) in bodies {
        let r = app.post(&format!("{base}/{what}"), &ann, body.clone()).await;
        assert!([404, 405, 422].contains(&r.status.as_u16()), "{what} {body}: {} {}", r.status, r.body);
        assert!(r.status.as_u16() != 404 || what == "members", "{what}: {}", r.body);
    }
    let r = app.put(&base, &ann, json!({"name": "x\u{0}"})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    let yaml = "version: 1\nintegrations:\n  - name: \"a\\0b\"\n    type: postgres\n";
    let r = app.send_text(Method::POST, &format!("{base}/iac/apply"), &ann, yaml, "application/x-yaml").await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    for q in ["audit-logs?entity=%00", "audit-logs?action=a%00b", "flows?status=%00", "activity?since=%00"] {
        let r = app.get(&format!("{base}/{q}"), &ann).await;
        assert_eq!(r.status.as_u16(), 422, "{q}: {}", r.body);
    }
}

async fn every_list_filter_works(app: TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let dir = app.org_files(&org).join("src");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), "{\"id\": 1, \"at\": \"2026-01-01T00:00:00Z\"}\n").unwrap();
    let c = app.file_connection(&ann, &org, "f", "src", None).await;
    let flow = check!(
        app.post(&format!("{base}/flows"), &ann, json!({"name": "copy", "source_connection_id": c, "destination_connection_id": c,
            "config": {"mappings": [{"source_entity": "events", "dest_entity": "out", "sync_mode": "incremental_append", "cursor_field": "at"}]}}))
            .await,
        201
    )
    .id();
    check!(
        app.put(&format!("{base}/flows/{flow}/state/events"), &ann, json!({"cursor_value": "2025-01-01T00:00:00Z"}))
            .await,
        200
    );
    let run = check!(app.post(&format!("{base}/flows/{flow}/run"), &ann, json!({})).await, 202).id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = check!(app.get(&format!("{base}/runs/{run}"), &ann).await, 200);
        if r.body["status"] == "succeeded" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.body);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let me = check!(app.get("/v1/users/me", &ann).await, 200).id();
    let since = "2000-01-01T00:00:00Z";
    let until = "2999-01-01T00:00:00Z";
    // (query, at least this many results, exactly none for a miss)
    let audit = format!("{base}/audit-logs");
    let cases: Vec<(String, usize)> = vec![
        (format!("{audit}?entity=events"), 1),
        (format!("{audit}?action=flow.cursor.updated"), 1),
        (format!("{audit}?resource_type=flow"), 1),
        (format!("{audit}?resource_id={flow}"), 1),
        (format!("{audit}?actor_id={me}"), 1),
        (format!("{audit}?since={since}&until={until}"), 1),
        (format!("{audit}?entity=events&action=flow.cursor.updated&resource_type=flow&since={since}"), 1),
        (format!("{base}/flows?status=active"), 1),
        (format!("{base}/flows/{flow}/runs?status=succeeded"), 1),
        (format!("{base}/activity?since={since}"), 1),
        (format!("{base}/connections?limit=1"), 1),
        (format!("{base}/data-assets?limit=5"), 0),
        (format!("{base}/integrations"), 0),
        (format!("{base}/members"), 1),
        (format!("{base}/invitations"), 0),
        (format!("{base}/api-keys"), 0),
    ];
    for (q, at_least) in cases {
        let r = check!(app.get(&q, &ann).await, 200);
        assert!(n(&r.body) >= at_least, "{q}: {}", r.body);
    }
    for miss in [
        format!("{audit}?entity=nothing"),
        format!("{audit}?until={since}"),
        format!("{base}/flows?status=paused"),
        format!("{base}/flows/{flow}/runs?status=failed"),
    ] {
        let r = check!(app.get(&miss, &ann).await, 200);
        assert_eq!(n(&r.body), 0, "{miss}: {}", r.body);
    }
    for bad in [format!("{audit}?since=yesterday"), format!("{base}/flows?status=asleep"), format!("{audit}?limit=0")] {
        let r = app.get(&bad, &ann).await;
        assert_eq!(r.status.as_u16(), 422, "{bad}: {}", r.body);
    }
}

async fn schedules_and_credentials_are_checked(app: TestApp) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");
    let r = app
        .post(
            &format!("{base}/integrations"),
            &ann,
            json!({"name": "i", "type": "postgres", "credentials": {"password": 12345}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    let r = app
        .post(
            &format!("{base}/connections"),
            &ann,
            json!({"name": "c", "type": "postgres", "capability": "source",
            "config": {"host": "h", "database": "d", "user": "u", "password": 12345}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    app.org_files(&org);
    let c = app.file_connection(&ann, &org, "f", "src", None).await;
    let flow = |schedule: Value| {
        json!({"name": "s", "source_connection_id": c, "destination_connection_id": c, "schedule": schedule,
            "config": {"mappings": [{"source_entity": "a", "dest_entity": "b", "sync_mode": "full_refresh_append"}]}})
    };
    let r = app.post(&format!("{base}/flows"), &ann, flow(json!("0 0 30 2 *"))).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    let long = format!("0 0 * * {}", "1,".repeat(300));
    let r = app.post(&format!("{base}/flows"), &ann, flow(json!(long))).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    assert!(r.body.to_string().len() < 1000, "the schedule is echoed whole: {}", r.body);
    check!(app.post(&format!("{base}/flows"), &ann, flow(json!("0 0 29 2 *"))).await, 201);
}

#[tokio::test]
async fn a_session_token_with_an_out_of_range_expiry_is_401() {
    let app = spawn_app(Backend::Sqlite).await.expect("SQLite always starts");
    // Signed with the app's secret: only the claim is wrong.
    let token = app.token_with_claims(json!({"sub": "x", "iss": "sluice", "aud": "sluice", "exp": 1i64 << 62}));
    let r = app.get("/v1/users/me", &sluice_tests::Auth::Token(token)).await;
    assert_eq!(r.status.as_u16(), 401, "{}", r.body);
    check!(app.get("/v1/health", &sluice_tests::Auth::None).await, 200);
}

sluice_tests::on_both_backends!(
    nul_characters_are_refused_everywhere_with_422,
    every_list_filter_works,
    schedules_and_credentials_are_checked,
);
