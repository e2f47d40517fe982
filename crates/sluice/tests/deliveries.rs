//! A notification delivery that fails is retried after the process is
//! killed and started again: the outbox is in the metadata store, and the
//! retry carries the same `webhook-id`. A test sent through a rule is
//! delivered like any event.

mod common;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use common::*;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Receiver {
    /// The `webhook-id` of each request, in order.
    ids: Mutex<Vec<String>>,
    /// The `webhook-signature` of each request.
    signed: Mutex<Vec<String>>,
    accept: Mutex<bool>,
}

async fn receive(r: web::Data<Arc<Receiver>>, req: HttpRequest) -> HttpResponse {
    let id = req.headers().get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    r.ids.lock().unwrap().push(id);
    let signature = req.headers().get("webhook-signature").and_then(|v| v.to_str().ok()).unwrap_or_default();
    r.signed.lock().unwrap().push(signature.to_string());
    if *r.accept.lock().unwrap() {
        HttpResponse::NoContent().finish()
    } else {
        HttpResponse::ServiceUnavailable().finish()
    }
}

async fn wait(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failed_delivery_is_retried_after_a_restart() {
    let rx = Arc::new(Receiver::default());
    let r2 = rx.clone();
    let server = HttpServer::new(move || {
        App::new().app_data(web::Data::new(r2.clone())).default_service(web::post().to(receive))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let hook = format!("http://127.0.0.1:{}/hook", server.addrs()[0].port());
    tokio::spawn(server.run());

    let data = std::env::temp_dir().join(format!("sluice-outbox-{}", sluice_domain::shared::secret::random_base62(8)));
    std::fs::create_dir_all(&data).unwrap();
    let db = format!("sqlite://{}/meta.db?mode=rwc", data.display());
    let port = free_port();
    let api = Api { client: client(), base: format!("http://127.0.0.1:{port}"), token: token() };
    let mut vars = env(&data, &db, port);
    vars.push(("SLUICE_WEBHOOK_ALLOW_PRIVATE", "true".into()));
    vars.push(("SLUICE_INTERNAL_API_KEY", "outbox-internal".into()));
    let first = spawn(&["serve"], &vars);
    wait_healthy(&api.client, &api.base).await;
    let org = api.post("/v1/organizations", json!({"name": "Outbox"})).await["id"].as_str().unwrap().to_string();
    let rule = api
        .post(
            &format!("/v1/organizations/{org}/rules"),
            json!({"name": "r", "event": "run.failed", "channel": {"type": "webhook", "url": hook}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let res = api
        .client
        .post(format!("{}/v1/internal/notifications", api.base))
        .header("X-Internal-Api-Key", "outbox-internal")
        .json(&json!({"organization_id": org, "event": "run.failed", "message": "it broke"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);

    // The first attempt gets a 503; the process dies before the retry.
    // It is killed once that attempt is stored: killed while sending, the
    // delivery would stay claimed for `CLAIM` (60 s) before another
    // process may take it, which is a different case.
    wait("the first attempt", 20, || rx.ids.lock().unwrap().len() == 1).await;
    let deliveries = format!("/v1/organizations/{org}/rules/{rule}/deliveries");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = api.get(&deliveries).await;
        if d["data"][0]["attempts"] == 1 {
            assert_eq!(
                (d["data"][0]["status"].as_str(), d["data"][0]["response_code"].as_i64()),
                (Some("pending"), Some(503))
            );
            break;
        }
        assert!(Instant::now() < deadline, "the first attempt not stored: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(first); // SIGKILL
    *rx.accept.lock().unwrap() = true;
    let _second = spawn(&["serve"], &vars);
    wait_healthy(&api.client, &api.base).await;
    wait("the retry after the restart", 40, || rx.ids.lock().unwrap().len() == 2).await;
    let ids = rx.ids.lock().unwrap().clone();
    assert_eq!(ids[0], ids[1], "the retry carries the same webhook-id");
    assert!(ids[0].starts_with("msg_"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = api.get(&deliveries).await;
        if d["data"][0]["status"] == "delivered" {
            assert_eq!(
                (d["data"][0]["attempts"].as_i64(), d["data"][0]["response_code"].as_i64()),
                (Some(2), Some(204))
            );
            break;
        }
        assert!(Instant::now() < deadline, "not recorded as delivered: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A test sent through the rule, disabled: delivered, signed as any
    // delivery, and listed with the rule's deliveries.
    let at = format!("/v1/organizations/{org}/rules/{rule}");
    let body =
        json!({"name": "r", "event": "run.failed", "channel": {"type": "webhook", "url": hook}, "enabled": false});
    let (status, b) = api.call(reqwest::Method::PUT, &at, Some(body)).await;
    assert_eq!(status, 200, "{b}");
    let test = api.post(&format!("{at}/test"), json!({})).await;
    assert_eq!(test["event_type"], "rule.test", "{test}");
    wait("the test's delivery", 20, || rx.ids.lock().unwrap().len() == 3).await;
    assert!(rx.signed.lock().unwrap().iter().all(|s| s.starts_with("v1,")), "every attempt signed");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = api.get(&deliveries).await;
        if d["data"][0]["event_type"] == "rule.test" && d["data"][0]["status"] == "delivered" {
            assert_eq!(d["data"][0]["event_id"], test["event_id"], "{d}");
            break;
        }
        assert!(Instant::now() < deadline, "the test not listed as delivered: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&data);
}
