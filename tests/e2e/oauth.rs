//! The OAuth authorization-code flow with PKCE, end to end, against a fake
//! provider on loopback whose token endpoint checks the client, the
//! redirect URI and that the verifier hashes to the challenge it was shown.

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;
use sluice_clients::oauth::ProviderConfig;
use sluice_domain::shared::secret::Secret;
use sluice_tests::{Auth, Backend, Options, check, spawn_app_with};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Provider {
    /// The challenge of the last authorize URL, set by the test.
    challenge: Mutex<Option<String>>,
    redirect_uri: Mutex<Option<String>>,
}

async fn token(p: web::Data<Arc<Provider>>, form: web::Form<HashMap<String, String>>) -> HttpResponse {
    let f = form.into_inner();
    let challenge = p.challenge.lock().unwrap().clone();
    let verifier_ok = f.get("code_verifier").map(|v| sluice_domain::connect::oauth::challenge(v)) == challenge;
    let ok = f.get("grant_type").map(String::as_str) == Some("authorization_code")
        && f.get("client_id").map(String::as_str) == Some("client-1")
        && f.get("client_secret").map(String::as_str) == Some("client-secret-1")
        && f.get("code").map(String::as_str) == Some("good-code")
        && f.get("redirect_uri") == p.redirect_uri.lock().unwrap().as_ref()
        && verifier_ok;
    if ok {
        HttpResponse::Ok().json(json!({"access_token": "at-123", "refresh_token": "rt-456", "expires_in": 3600, "token_type": "Bearer", "scope": "read"}))
    } else {
        HttpResponse::BadRequest()
            .json(json!({"error": "invalid_grant", "error_description": "the code or verifier is wrong"}))
    }
}

fn query_param(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| {
            let mut out = Vec::new();
            let b = v.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' && i + 2 < b.len() {
                    out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            String::from_utf8(out).unwrap()
        })
    })
}

#[tokio::test]
async fn an_oauth_flow_stores_the_tokens_encrypted_and_its_state_is_single_use() {
    let provider = Arc::new(Provider::default());
    let p2 = provider.clone();
    let server =
        HttpServer::new(move || App::new().app_data(web::Data::new(p2.clone())).route("/token", web::post().to(token)))
            .workers(1)
            .bind("127.0.0.1:0")
            .unwrap();
    let port = server.addrs()[0].port();
    let running = server.run();
    let handle = running.handle();
    tokio::spawn(running);

    let mut oauth = BTreeMap::new();
    oauth.insert(
        "fake".to_string(),
        ProviderConfig {
            client_id: "client-1".into(),
            client_secret: Secret::new("client-secret-1"),
            auth_url: format!("http://127.0.0.1:{port}/authorize"),
            token_url: format!("http://127.0.0.1:{port}/token"),
            scopes: Some("read".into()),
        },
    );
    let Some(app) = spawn_app_with(Backend::Sqlite, Options { oauth, ..Default::default() }).await else { return };
    let no_redirect = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let ann = app.token("ann@example.com");
    let Auth::Token(bearer) = &ann else { unreachable!() };
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();

    let start = |name: &str| {
        no_redirect
            .get(format!("{}/v1/organizations/{org}/integrations/fake/auth/start?name={name}", app.base))
            .bearer_auth(bearer)
            .send()
    };
    let res = start("crm-oauth").await.unwrap();
    assert_eq!(res.status(), 302);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&format!("http://127.0.0.1:{port}/authorize?response_type=code&client_id=client-1")),
        "{location}"
    );
    assert_eq!(query_param(&location, "code_challenge_method").as_deref(), Some("S256"));
    let state = query_param(&location, "state").unwrap();
    let redirect_uri = query_param(&location, "redirect_uri").unwrap();
    assert!(redirect_uri.ends_with("/v1/connections/fake/auth/callback"), "{redirect_uri}");
    *provider.challenge.lock().unwrap() = query_param(&location, "code_challenge");
    *provider.redirect_uri.lock().unwrap() = Some(redirect_uri);

    // The provider sends the browser back with a code.
    let callback = |code: &str, state: &str| {
        no_redirect.get(format!("{}/v1/connections/fake/auth/callback?code={code}&state={state}", app.base)).send()
    };
    let res = callback("good-code", &state).await.unwrap();
    assert_eq!(res.status(), 302, "{:?}", res.text().await);
    let to = res.headers()["location"].to_str().unwrap().to_string();
    assert!(to.starts_with("http://console.example/v1/oauth/complete?status=connected"), "{to}");
    let integration = query_param(&to, "integration_id").unwrap();

    let shown = check!(app.get(&format!("/v1/organizations/{org}/integrations/{integration}"), &ann).await, 200);
    assert_eq!(shown.body["type"], "fake");
    assert_eq!(shown.body["credentials"]["access_token"], "***");
    let details =
        check!(app.get(&format!("/v1/organizations/{org}/integrations/{integration}/details"), &ann).await, 200);
    assert_eq!(details.body["credentials"]["access_token"], "at-123");
    assert_eq!(details.body["credentials"]["refresh_token"], "rt-456");
    assert!(details.body["credentials"]["expires_at"].is_string());
    let bytes = app.metadata_bytes();
    assert!(!bytes.windows(6).any(|w| w == b"at-123"), "tokens are encrypted at rest");

    // The state is single-use.
    let res = callback("good-code", &state).await.unwrap();
    assert_eq!(res.status(), 422);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["code"], "invalid_oauth_state");

    // A forged state is refused before any lookup; a refused code says why.
    let res = start("crm-oauth").await.unwrap();
    let fresh = query_param(res.headers()["location"].to_str().unwrap(), "state").unwrap();
    *provider.challenge.lock().unwrap() = query_param(res.headers()["location"].to_str().unwrap(), "code_challenge");
    let (id, sig) = fresh.rsplit_once('.').unwrap();
    let forged = format!("{id}.{}", "0".repeat(sig.len()));
    let res = callback("good-code", &forged).await.unwrap();
    assert_eq!(res.status(), 422);
    let res = callback("bad-code", &fresh).await.unwrap();
    assert_eq!(res.status(), 422);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["code"], "oauth_exchange_failed");
    assert!(body["error"].as_str().unwrap().contains("the code or verifier is wrong"));
    assert!(!body.to_string().contains("client-secret-1"));

    // The provider's refusal lands on the console; unknown providers are 404.
    let res = no_redirect
        .get(format!("{}/v1/connections/fake/auth/callback?error=access_denied", app.base))
        .send()
        .await
        .unwrap();
    assert!(res.headers()["location"].to_str().unwrap().contains("status=error&provider=fake&error=access_denied"));
    let res = no_redirect
        .get(format!("{}/v1/organizations/{org}/integrations/nope/auth/start?name=x", app.base))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let page = no_redirect.get(format!("{}/v1/oauth/complete?status=connected", app.base)).send().await.unwrap();
    assert!(page.text().await.unwrap().contains("connected"));
    handle.stop(false).await;
}
