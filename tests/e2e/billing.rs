//! Billing end to end against a fake Stripe on loopback: checkout and
//! portal sessions (the requests Stripe gets, customers created once),
//! role checks, every handled webhook event, bad and stale signatures,
//! duplicate and racing deliveries, and 503 without a configured key.

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::{Value, json};
use sluice::settings::StripeSettings;
use sluice_domain::billing::provider::sign;
use sluice_domain::shared::secret::Secret;
use sluice_tests::{Auth, Backend, Options, TestApp, check, spawn_app, spawn_app_with};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const KEY: &str = "sk_test_fake";
const WEBHOOK_SECRET: &str = "whsec_fake";

/// One request to the fake Stripe: path, form, idempotency key.
type Call = (String, HashMap<String, String>, Option<String>);

/// What the fake Stripe was asked.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<Call>>,
    customers: Mutex<HashMap<String, String>>,
}

impl Fake {
    fn calls_to(&self, path: &str) -> Vec<HashMap<String, String>> {
        self.calls.lock().unwrap().iter().filter(|(p, ..)| p == path).map(|(_, f, _)| f.clone()).collect()
    }
}

async fn stripe(
    fake: web::Data<Arc<Fake>>,
    req: HttpRequest,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    if req.headers().get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {KEY}")) {
        return HttpResponse::Unauthorized().json(json!({"error": {"message": "Invalid API Key provided"}}));
    }
    let path = req.path().to_string();
    let key = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
    fake.calls.lock().unwrap().push((path.clone(), form.0.clone(), key.clone()));
    match path.as_str() {
        "/v1/customers" => {
            let mut customers = fake.customers.lock().unwrap();
            let n = customers.len() + 1;
            let id = customers.entry(key.unwrap_or_default()).or_insert_with(|| format!("cus_{n}")).clone();
            HttpResponse::Ok().json(json!({"id": id, "object": "customer"}))
        }
        "/v1/checkout/sessions" => {
            HttpResponse::Ok().json(json!({"id": "cs_test_1", "url": "https://checkout.stripe.test/c/cs_test_1"}))
        }
        "/v1/billing_portal/sessions" => HttpResponse::Ok().json(json!({"url": "https://billing.stripe.test/p/1"})),
        _ => HttpResponse::NotFound().json(json!({"error": {"message": "unknown path"}})),
    }
}

/// A fake Stripe and an app on `backend` that uses it.
async fn app_with_stripe(backend: Backend) -> Option<(TestApp, Arc<Fake>)> {
    let fake = Arc::new(Fake::default());
    let f2 = fake.clone();
    let server = HttpServer::new(move || {
        App::new().app_data(web::Data::new(f2.clone())).default_service(web::post().to(stripe))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let port = server.addrs()[0].port();
    tokio::spawn(server.run());
    let settings = StripeSettings {
        secret_key: Secret::new(KEY),
        webhook_secret: Some(Secret::new(WEBHOOK_SECRET)),
        api_base: format!("http://127.0.0.1:{port}"),
        price_pro: Some("price_pro".into()),
        price_enterprise: Some("price_ent".into()),
    };
    let app = spawn_app_with(backend, Options { stripe: Some(settings), ..Default::default() }).await?;
    Some((app, fake))
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Delivers `event` signed at `t` (with `secret`); answers (status, body).
async fn deliver(app: &TestApp, event: &Value, t: i64, secret: &str) -> (u16, Value) {
    let body = event.to_string();
    let signature = format!("t={t},v1={}", sign(body.as_bytes(), t, secret));
    let res = app
        .client
        .post(format!("{}/v1/webhooks/stripe", app.base))
        .header("Stripe-Signature", signature)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn event(id: &str, kind: &str, object: Value) -> Value {
    json!({"id": id, "object": "event", "type": kind, "data": {"object": object}})
}

async fn key(app: &TestApp, admin: &Auth, org: &str, role: &str) -> Auth {
    let k = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), admin, json!({"name": role, "roles": [role]})).await,
        201
    );
    Auth::Key(k.body["key"].as_str().unwrap().to_string())
}

async fn checkout_portal_and_roles(backend: Backend) {
    let Some((app, fake)) = app_with_stripe(backend).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let (viewer, editor) = (key(&app, &ann, &org, "Viewer").await, key(&app, &ann, &org, "Editor").await);
    let checkout = format!("/v1/organizations/{org}/billing/checkout-session");
    let portal = format!("/v1/organizations/{org}/billing/customer-portal-session");
    let status = format!("/v1/organizations/{org}/billing/status");

    // Every member reads the status; only an Admin opens checkout or the portal.
    let s = check!(app.get(&status, &viewer).await, 200);
    assert_eq!(
        s.body,
        json!({"plan": "free", "status": "active", "current_period_end": null,
        "validations_used": 0, "validations_limit": 1000, "customer_id": null})
    );
    for who in [&viewer, &editor] {
        assert_eq!(check!(app.post(&checkout, who, json!({"plan": "pro"})).await, 403).body["code"], "forbidden");
        check!(app.post(&portal, who, json!({})).await, 403);
    }
    let stranger = app.token("eve@example.com");
    check!(app.get(&status, &stranger).await, 404);
    assert!(fake.calls.lock().unwrap().is_empty(), "refused requests reach no provider");

    for bad in [json!({"plan": "free"}), json!({"plan": "gold"}), json!({"plan": "pro", "success_url": "javascript:x"})]
    {
        check!(app.post(&checkout, &ann, bad).await, 422);
    }
    let c =
        check!(app.post(&checkout, &ann, json!({"plan": "pro", "success_url": "https://app.example/ok"})).await, 200);
    assert_eq!(c.body, json!({"url": "https://checkout.stripe.test/c/cs_test_1", "session_id": "cs_test_1"}));
    let sent = &fake.calls_to("/v1/checkout/sessions")[0];
    for (k, v) in [
        ("mode", "subscription"),
        ("customer", "cus_1"),
        ("client_reference_id", org.as_str()),
        ("metadata[organization_id]", org.as_str()),
        ("metadata[plan]", "pro"),
        ("line_items[0][price]", "price_pro"),
        ("success_url", "https://app.example/ok"),
    ] {
        assert_eq!(sent.get(k).map(String::as_str), Some(v), "{k} in {sent:?}");
    }
    assert!(sent["cancel_url"].starts_with("http://127.0.0.1"), "the default return is the public URL");
    check!(app.post(&checkout, &ann, json!({"plan": "enterprise"})).await, 200);
    // The optional body is read like every JSON body: an object, of the right shape.
    assert_eq!(check!(app.post(&portal, &ann, json!(["x"])).await, 422).body["code"], "validation_failed");
    check!(app.post(&portal, &ann, json!({"return": "x"})).await, 422);
    let p = check!(app.post(&portal, &ann, json!({"return_url": "https://app.example/billing"})).await, 200);
    assert_eq!(p.body["url"], "https://billing.stripe.test/p/1");
    assert_eq!(fake.calls_to("/v1/billing_portal/sessions")[0]["customer"], "cus_1");
    assert_eq!(fake.calls_to("/v1/customers").len(), 1, "one customer per organization, reused");
    assert_eq!(check!(app.get(&status, &viewer).await, 200).body["customer_id"], "cus_1");
}

async fn webhooks_change_the_subscription_once(backend: Backend) {
    let Some((app, _fake)) = app_with_stripe(backend).await else { return };
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let status = format!("/v1/organizations/{org}/billing/status");
    let completed = event(
        "evt_1",
        "checkout.session.completed",
        json!({"object": "checkout.session",
        "client_reference_id": org, "customer": "cus_9", "metadata": {"organization_id": org, "plan": "pro"}}),
    );

    // Refused signatures change nothing.
    assert_eq!(deliver(&app, &completed, now(), "whsec_wrong").await.1["code"], "invalid_signature");
    assert_eq!(deliver(&app, &completed, now() - 400, WEBHOOK_SECRET).await.1["code"], "invalid_signature");
    let res =
        app.client.post(format!("{}/v1/webhooks/stripe", app.base)).body(completed.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 400, "no signature at all");
    assert_eq!(check!(app.get(&status, &ann).await, 200).body["plan"], "free");

    assert_eq!(
        deliver(&app, &completed, now(), WEBHOOK_SECRET).await,
        (200, json!({"received": true, "outcome": "applied"}))
    );
    let s = check!(app.get(&status, &ann).await, 200).body;
    assert_eq!(
        (s["plan"].as_str(), s["customer_id"].as_str(), s["validations_limit"].as_i64()),
        (Some("pro"), Some("cus_9"), Some(100_000))
    );
    assert_eq!(deliver(&app, &completed, now(), WEBHOOK_SECRET).await.1["outcome"], "duplicate");
    let org_body = check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200).body;
    assert_eq!(org_body["plan"], "pro", "the organization shows its plan");

    // The later events name only the customer.
    let updated = event(
        "evt_2",
        "customer.subscription.updated",
        json!({"object": "subscription", "customer": "cus_9",
        "status": "active", "items": {"data": [{"price": {"id": "price_ent"}, "current_period_end": 1_893_456_000}]}}),
    );
    assert_eq!(deliver(&app, &updated, now(), WEBHOOK_SECRET).await.1["outcome"], "applied");
    let s = check!(app.get(&status, &ann).await, 200).body;
    assert_eq!(
        (s["plan"].as_str(), s["current_period_end"].as_str()),
        (Some("enterprise"), Some("2030-01-01T00:00:00Z"))
    );
    assert_eq!(s["validations_limit"], Value::Null, "enterprise is unlimited");
    let failed = event("evt_3", "invoice.payment_failed", json!({"object": "invoice", "customer": "cus_9"}));
    assert_eq!(deliver(&app, &failed, now(), WEBHOOK_SECRET).await.1["outcome"], "applied");
    assert_eq!(check!(app.get(&status, &ann).await, 200).body["status"], "past_due");
    let deleted =
        event("evt_4", "customer.subscription.deleted", json!({"object": "subscription", "customer": "cus_9"}));
    assert_eq!(deliver(&app, &deleted, now(), WEBHOOK_SECRET).await.1["outcome"], "applied");
    let s = check!(app.get(&status, &ann).await, 200).body;
    assert_eq!(
        (s["plan"].as_str(), s["status"].as_str(), s["current_period_end"].clone()),
        (Some("free"), Some("canceled"), Value::Null)
    );
    let other = event("evt_5", "charge.succeeded", json!({"object": "charge", "customer": "cus_9"}));
    assert_eq!(
        deliver(&app, &other, now(), WEBHOOK_SECRET).await,
        (200, json!({"received": true, "outcome": "ignored"}))
    );
    let stranger = event("evt_6", "invoice.payment_failed", json!({"customer": "cus_unknown"}));
    assert_eq!(deliver(&app, &stranger, now(), WEBHOOK_SECRET).await.1["outcome"], "ignored");
    let gone = event(
        "evt_8",
        "checkout.session.completed",
        json!({"client_reference_id": "01a20000-0000-7000-8000-000000000000",
        "customer": "cus_9", "metadata": {"plan": "pro"}}),
    );
    assert_eq!(
        deliver(&app, &gone, now(), WEBHOOK_SECRET).await.1["outcome"],
        "ignored",
        "no such organization: acknowledged"
    );
    let (status, body) = deliver(&app, &gone, now(), "whsec_wrong").await;
    assert_eq!((status, body["details"].clone()), (400, json!({})), "the contract's error body");

    // Racing deliveries of one event: exactly one applies it.
    let racing = event(
        "evt_7",
        "customer.subscription.updated",
        json!({"customer": "cus_9", "status": "active",
        "items": {"data": [{"price": {"id": "price_pro"}}]}}),
    );
    let outcomes = deliver_at_once(&app, &racing, 8).await;
    assert_eq!(outcomes.iter().filter(|o| *o == "applied").count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| *o == "duplicate").count(), 7, "{outcomes:?}");

    // Each applied event is one audit entry, with its id.
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?limit=200"), &ann).await, 200).body;
    let entries: Vec<&Value> =
        audit["data"].as_array().unwrap().iter().filter(|e| e["action"] == "billing.subscription_updated").collect();
    assert_eq!(entries.len(), 5, "evt_1, 2, 3, 4 and 7: {entries:?}");
    let racing_entry = entries.iter().find(|e| e["details"]["event_id"] == "evt_7").unwrap();
    assert_eq!(racing_entry["details"]["after"]["plan"], "pro");
    assert_eq!(racing_entry["actor"]["name"], "stripe");
}

/// Delivers `event` `n` times at once; answers the outcomes.
async fn deliver_at_once(app: &TestApp, event: &Value, n: usize) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, base, body) = (app.client.clone(), app.base.clone(), event.to_string());
        tasks.spawn(async move {
            let t = now();
            let signature = format!("t={t},v1={}", sign(body.as_bytes(), t, WEBHOOK_SECRET));
            let res = client
                .post(format!("{base}/v1/webhooks/stripe"))
                .header("Stripe-Signature", signature)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            let v: Value = res.json().await.unwrap();
            v["outcome"].as_str().unwrap().to_string()
        });
    }
    tasks.join_all().await
}

#[tokio::test]
async fn checkout_portal_and_roles_on_sqlite() {
    checkout_portal_and_roles(Backend::Sqlite).await;
}

#[tokio::test]
async fn checkout_portal_and_roles_on_postgres() {
    checkout_portal_and_roles(Backend::Postgres).await;
}

#[tokio::test]
async fn webhooks_change_the_subscription_once_on_sqlite() {
    webhooks_change_the_subscription_once(Backend::Sqlite).await;
}

#[tokio::test]
async fn webhooks_change_the_subscription_once_on_postgres() {
    webhooks_change_the_subscription_once(Backend::Postgres).await;
}

#[tokio::test]
async fn without_a_stripe_key_billing_answers_503_and_the_free_plan_applies() {
    let app = spawn_app(Backend::Sqlite).await.expect("SQLite always starts");
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    for r in [
        app.get(&format!("/v1/organizations/{org}/billing/status"), &ann).await,
        app.post(&format!("/v1/organizations/{org}/billing/checkout-session"), &ann, json!({"plan": "pro"})).await,
        app.post(&format!("/v1/organizations/{org}/billing/customer-portal-session"), &ann, json!({})).await,
        app.post("/v1/webhooks/stripe", &Auth::None, json!({"id": "evt_1", "type": "x"})).await,
    ] {
        assert_eq!((r.status.as_u16(), r.body["code"].as_str()), (503, Some("billing_not_configured")), "{}", r.body);
    }
    assert_eq!(check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200).body["plan"], "free");
}
