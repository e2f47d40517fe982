//! Notification rules end to end: CRUD with roles and validation, events
//! delivered to a receiver on loopback that verifies the Standard Webhooks
//! signature, a failed attempt retried with the same webhook-id, Slack's
//! body, the deliveries listed, and loopback refused unless allowed.

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sluice_tests::{Auth, Backend, Options, TestApp, check, spawn_app, spawn_app_with};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the receiver got: (path, webhook-id, timestamp, signature, body).
type Got = (String, Option<String>, Option<String>, Option<String>, String);

#[derive(Default)]
struct Receiver {
    got: Mutex<Vec<Got>>,
    /// Answers 500 to this many requests to `/hook` first.
    fail_first: Mutex<u32>,
}

async fn receive(r: web::Data<Arc<Receiver>>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let h = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    r.got.lock().unwrap().push((
        req.path().to_string(),
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
        String::from_utf8_lossy(&body).into_owned(),
    ));
    let mut fail = r.fail_first.lock().unwrap();
    if *fail > 0 && req.path() == "/hook" {
        *fail -= 1;
        return HttpResponse::InternalServerError().finish();
    }
    HttpResponse::NoContent().finish()
}

async fn receiver() -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver::default());
    let r2 = r.clone();
    let server = HttpServer::new(move || {
        App::new().app_data(web::Data::new(r2.clone())).default_service(web::post().to(receive))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let url = format!("http://127.0.0.1:{}", server.addrs()[0].port());
    tokio::spawn(server.run());
    (r, url)
}

/// A Standard Webhooks verification, as a receiver's library does it.
fn verify(secret: &str, id: &str, timestamp: &str, body: &str, signature: &str) -> bool {
    let key = B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let expected = format!("v1,{}", B64.encode(mac.finalize().into_bytes()));
    signature.split(' ').any(|s| s == expected)
}

async fn notify(app: &TestApp, org: &str, event: &str, data: Value) {
    let internal = Auth::None;
    let res = app
        .client
        .post(format!("{}/v1/internal/notifications", app.base))
        .header("X-Internal-Api-Key", sluice_tests::INTERNAL_KEY)
        .json(&json!({"organization_id": org, "event": event, "message": format!("{event} happened"), "data": data}))
        .send()
        .await
        .unwrap();
    let _ = internal;
    assert_eq!(res.status(), 202, "{:?}", res.text().await);
}

async fn rules_deliver_signed_and_retry(backend: Backend) {
    let Some(app) = spawn_app_with(backend, Options { webhook_allow_private: true, ..Default::default() }).await else {
        return;
    };
    let (rx, url) = receiver().await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let rules = format!("/v1/organizations/{org}/rules");
    let key = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), &ann, json!({"name": "v", "roles": ["Viewer"]})).await,
        201
    );
    let viewer = Auth::Key(key.body["key"].as_str().unwrap().to_string());

    // Validation and roles.
    let bad = check!(
        app.post(
            &rules,
            &ann,
            json!({"name": "", "event": "run.exploded", "channel": {"type": "pager", "url": "ftp://x"}})
        )
        .await,
        422
    );
    let fields: Vec<&str> =
        bad.body["details"]["errors"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["name", "event", "channel.type", "channel.url"]);
    let creds = check!(app.post(&rules, &ann, json!({"name": "c", "event": "run.failed", "channel": {"type": "slack", "url": "https://user:pw@hooks.example/x"}})).await, 422);
    assert_eq!(creds.body["details"]["errors"][0]["field"], "channel.url");
    check!(app.post(&rules, &ann, json!(["r", "run.failed"])).await, 422);
    // A flow filter names a flow of this organization.
    let stray = json!({"name": "ops", "event": "run.failed", "filter": {"flow_id": uuid_like()}, "channel": {"type": "webhook", "url": format!("{url}/hook")}});
    let refused = check!(app.post(&rules, &ann, stray).await, 422);
    assert_eq!(refused.body["details"]["errors"][0]["field"], "filter.flow_id", "{}", refused.body);
    let flow = a_flow(&app, &ann, &org).await;
    let hook = json!({"name": "ops", "event": "run.failed", "filter": {"flow_id": flow}, "channel": {"type": "webhook", "url": format!("{url}/hook")}});
    check!(app.post(&rules, &viewer, hook.clone()).await, 403);
    let created = check!(app.post(&rules, &ann, hook).await, 201);
    let secret = created.body["channel"]["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "the generated secret is shown once: {}", created.body);
    let rule = created.id();
    let shown = check!(app.get(&format!("{rules}/{rule}"), &viewer).await, 200);
    assert_eq!(shown.body["channel"]["secret"], "***");
    check!(
        app.post(
            &rules,
            &ann,
            json!({"name": "chat", "event": "run.failed", "channel": {"type": "slack", "url": format!("{url}/slack")}})
        )
        .await,
        201
    );
    let listed = check!(app.get(&rules, &viewer).await, 200).body;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);
    // A Slack URL is a credential: a Viewer sees its host, an Admin all of it.
    let chat = |body: &Value| {
        body["data"].as_array().unwrap().iter().find(|r| r["name"] == "chat").unwrap()["channel"]["url"].clone()
    };
    assert_eq!(chat(&listed), format!("{}/***", url.split('/').take(3).collect::<Vec<_>>().join("/")));
    assert_eq!(chat(&check!(app.get(&rules, &ann).await, 200).body), format!("{url}/slack"));
    // PUT without a secret keeps it; the audit log never shows it.
    let put = check!(
        app.put(
            &format!("{rules}/{rule}"),
            &ann,
            json!({"name": "ops team", "event": "run.failed",
        "filter": {"flow_id": flow}, "channel": {"type": "webhook", "url": format!("{url}/hook"), "secret": "***"}})
        )
        .await,
        200
    );
    assert_eq!(put.body["channel"]["secret"], "***");
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs"), &ann).await, 200).body.to_string();
    assert!(audit.contains("rule.updated") && !audit.contains(&secret), "{audit}");

    // An event of another flow matches only the unfiltered Slack rule; one
    // of this flow both. The webhook's first attempt gets a 500.
    *rx.fail_first.lock().unwrap() = 1;
    notify(&app, &org, "run.failed", json!({"flow_id": uuid_like()})).await;
    notify(&app, &org, "run.failed", json!({"flow_id": flow, "run_id": "r1"})).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    while rx.got.lock().unwrap().iter().filter(|g| g.0 == "/hook").count() < 2 {
        if Instant::now() > deadline {
            let d = app.get(&format!("{rules}/{rule}/deliveries"), &ann).await.body;
            panic!("the retried delivery did not come: got {:?}, deliveries {d}", rx.got.lock().unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = rx.got.lock().unwrap().clone();
    let hooks: Vec<&Got> = got.iter().filter(|g| g.0 == "/hook").collect();
    assert_eq!(hooks[0].1, hooks[1].1, "one webhook-id across retries");
    for (_, id, ts, sig, body) in &hooks {
        let (id, ts, sig) = (id.as_deref().unwrap(), ts.as_deref().unwrap(), sig.as_deref().unwrap());
        assert!(id.starts_with("msg_"), "{id}");
        assert!(verify(&secret, id, ts, body, sig), "the signature verifies with the rule's secret");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["data"]["organization_id"].as_str()),
            (Some("run.failed"), Some(org.as_str()))
        );
        assert_eq!(v["data"]["run_id"], "r1");
    }
    let slack: Vec<&Got> = got.iter().filter(|g| g.0 == "/slack").collect();
    assert_eq!(slack.len(), 2, "the Slack rule takes both events");
    assert!(slack[0].3.is_none(), "Slack deliveries are not signed");
    assert_eq!(serde_json::from_str::<Value>(&slack[0].4).unwrap()["text"], "[run.failed] run.failed happened");

    let d = check!(app.get(&format!("{rules}/{rule}/deliveries"), &viewer).await, 200).body;
    let d = &d["data"][0];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64(), d["response_code"].as_i64()),
        (Some("delivered"), Some(2), Some(204)),
        "{d}"
    );
    check!(app.delete(&format!("{rules}/{rule}"), &viewer).await, 403);
    check!(app.delete(&format!("{rules}/{rule}"), &ann).await, 204);
    check!(app.get(&format!("{rules}/{rule}/deliveries"), &ann).await, 404);
}

/// A flow between two file connections of `org`.
async fn a_flow(app: &TestApp, who: &Auth, org: &str) -> String {
    let dir = app.org_files(org);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/items.jsonl"), "{\"id\": 1}\n").unwrap();
    let base = format!("/v1/organizations/{org}");
    let file = |name: &str| json!({"name": name, "type": "file", "capability": "both", "config": {"path": name, "format": "jsonl"}});
    let src = check!(app.post(&format!("{base}/connections"), who, file("in")).await, 201).id();
    let dst = check!(app.post(&format!("{base}/connections"), who, file("out")).await, 201).id();
    let flow = json!({"name": "items", "source_connection_id": src, "destination_connection_id": dst,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}});
    check!(app.post(&format!("{base}/flows"), who, flow).await, 201).id()
}

fn uuid_like() -> String {
    let b = sluice_domain::shared::secret::random_bytes::<16>();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-4{}-8{}-{}", &h[..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32])
}

#[tokio::test]
async fn rules_deliver_signed_and_retry_on_sqlite() {
    rules_deliver_signed_and_retry(Backend::Sqlite).await;
}

#[tokio::test]
async fn rules_deliver_signed_and_retry_on_postgres() {
    rules_deliver_signed_and_retry(Backend::Postgres).await;
}

#[tokio::test]
async fn deliveries_to_loopback_are_refused_by_default_and_runs_notify() {
    let app = spawn_app(Backend::Sqlite).await.expect("SQLite always starts");
    let (rx, url) = receiver().await;
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let rules = format!("/v1/organizations/{org}/rules");
    // Created with an idempotency key: the replay shows the secret again,
    // and the stored response keeps it encrypted.
    let Auth::Token(bearer) = &ann else { unreachable!() };
    let create = || {
        app.client
            .post(format!("{}{rules}", app.base))
            .bearer_auth(bearer)
            .header("X-Idempotency-Key", "rule-once")
            .json(&json!({"name": "r", "event": "run.succeeded", "channel": {"type": "webhook", "url": format!("{url}/hook")}}))
            .send()
    };
    let first: Value = create().await.unwrap().json().await.unwrap();
    let replay = create().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: Value = replay.json().await.unwrap();
    let secret = first["channel"]["secret"].as_str().unwrap().to_string();
    assert_eq!(replay["channel"]["secret"], secret.as_str());
    let stored = app.metadata_bytes();
    assert!(!stored.windows(secret.len()).any(|w| w == secret.as_bytes()), "no plain secret at rest");
    let rule = first["id"].as_str().unwrap().to_string();
    // A finished run records run.succeeded, which the rule delivers.
    let dir = app.org_files(&org);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/items.jsonl"), "{\"id\": 1}\n").unwrap();
    let conns = format!("/v1/organizations/{org}/connections");
    let file = json!({"name": "in", "type": "file", "capability": "both", "config": {"path": "in", "format": "jsonl"}});
    let src = check!(app.post(&conns, &ann, file).await, 201).id();
    let flow = check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, json!({"name": "f", "source_connection_id": src,
        "destination_connection_id": src, "config": {"mappings": [{"source_entity": "items", "dest_entity": "copy", "sync_mode": "full_refresh_overwrite"}]}})).await, 201).id();
    check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), &ann, json!({})).await, 202);
    let deliveries = format!("{rules}/{rule}/deliveries");
    let deadline = Instant::now() + Duration::from_secs(30);
    let d = loop {
        let d = check!(app.get(&deliveries, &ann).await, 200).body;
        if d["data"][0]["status"] == "refused" {
            break d;
        }
        assert!(Instant::now() < deadline, "no refused delivery: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(d["data"][0]["event_type"], "run.succeeded");
    assert!(d["data"][0]["error"].as_str().unwrap().contains("private"), "{d}");
    assert!(rx.got.lock().unwrap().is_empty(), "nothing reached the receiver");
}
