//! Console sign-in with OpenID Connect, end to end, against a fake
//! provider on loopback: discovery, the authorize redirect with PKCE, state
//! and nonce, the state checked against the sign-in's own cookie, the code
//! exchange (whose verifier must hash to the challenge), and the ID token's
//! nonce and e-mail.

use actix_web::{App, HttpResponse, HttpServer, web};
use base64::Engine;
use serde_json::json;
use sluice_domain::shared::secret::Secret;
use sluice_tests::{Backend, Options, spawn_app_with};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Idp {
    issuer: Mutex<String>,
    /// Shown in the authorize URL, read by the test.
    challenge: Mutex<Option<String>>,
    nonce: Mutex<Option<String>>,
    /// Codes not yet exchanged (each is good once).
    codes: Mutex<Vec<String>>,
    /// The ID token carries another nonce (a replayed token).
    wrong_nonce: Mutex<bool>,
}

async fn discovery(p: web::Data<Arc<Idp>>) -> HttpResponse {
    let issuer = p.issuer.lock().unwrap().clone();
    HttpResponse::Ok().json(json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"), "jwks_uri": format!("{issuer}/jwks")}))
}

async fn token(p: web::Data<Arc<Idp>>, form: web::Form<HashMap<String, String>>) -> HttpResponse {
    let f = form.into_inner();
    let code = f.get("code").cloned().unwrap_or_default();
    let fresh = {
        let mut codes = p.codes.lock().unwrap();
        let known = codes.contains(&code);
        codes.retain(|c| c != &code);
        known
    };
    let verifier_ok =
        f.get("code_verifier").map(|v| sluice_domain::connect::oauth::challenge(v)) == *p.challenge.lock().unwrap();
    let client_ok = f.get("client_id").map(String::as_str) == Some("console")
        && f.get("client_secret").map(String::as_str) == Some("console-secret");
    if !(fresh && verifier_ok && client_ok) {
        return HttpResponse::BadRequest()
            .json(json!({"error": "invalid_grant", "error_description": "code already used or verifier wrong"}));
    }
    let nonce =
        if *p.wrong_nonce.lock().unwrap() { "another".to_string() } else { p.nonce.lock().unwrap().clone().unwrap() };
    let enc = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let exp = time::OffsetDateTime::now_utc().unix_timestamp() + 300;
    let claims = json!({"iss": *p.issuer.lock().unwrap(), "aud": "console", "sub": "u-1", "exp": exp, "nonce": nonce,
        "email": "sso@example.com", "email_verified": true, "name": "Sam"});
    let id_token = format!("{}.{}.c2ln", enc(json!({"alg": "RS256", "kid": "k1"})), enc(claims));
    HttpResponse::Ok().json(json!({"access_token": "at", "token_type": "Bearer", "id_token": id_token}))
}

fn query_param(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("x={v}")).unwrap()[0].1.clone())
    })
}

#[tokio::test]
async fn a_user_signs_in_with_openid_connect_and_a_forged_or_replayed_callback_is_refused() {
    let idp = Arc::new(Idp::default());
    let p2 = idp.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(p2.clone()))
            .route("/.well-known/openid-configuration", web::get().to(discovery))
            .route("/token", web::post().to(token))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let issuer = format!("http://127.0.0.1:{}", server.addrs()[0].port());
    *idp.issuer.lock().unwrap() = issuer.clone();
    let running = server.run();
    let handle = running.handle();
    tokio::spawn(running);

    let oidc = sluice_clients::oidc::OidcConfig {
        issuer: issuer.clone(),
        client_id: "console".into(),
        client_secret: Secret::new("console-secret"),
    };
    let Some(app) = spawn_app_with(Backend::Sqlite, Options { oidc: Some(oidc), ..Default::default() }).await else {
        return;
    };
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = http.get(format!("{}/login", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(login.contains("Sign in with single sign-on"), "{login}");

    // Start: to the provider, with PKCE, state and nonce; the sign-in's
    // cookie is Lax (the provider sends the browser back cross-site).
    let start = || async {
        let res = http.get(format!("{}/login/oidc?next=%2Fo%2Fabc", app.base)).send().await.unwrap();
        assert_eq!(res.status(), 303);
        let location = res.headers()["location"].to_str().unwrap().to_string();
        let cookie = res.headers()["set-cookie"].to_str().unwrap().to_string();
        (location, cookie)
    };
    let (location, cookie) = start().await;
    assert!(location.starts_with(&format!("{issuer}/authorize?response_type=code&client_id=console")), "{location}");
    assert_eq!(query_param(&location, "scope").as_deref(), Some("openid email profile"));
    assert_eq!(query_param(&location, "code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(query_param(&location, "redirect_uri").as_deref(), Some("http://console.example/login/oidc/callback"));
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/login/oidc", "Max-Age=600"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    let state = query_param(&location, "state").unwrap();
    *idp.challenge.lock().unwrap() = query_param(&location, "code_challenge");
    *idp.nonce.lock().unwrap() = query_param(&location, "nonce");
    idp.codes.lock().unwrap().push("code-1".into());
    let jar = cookie.split(';').next().unwrap().to_string();

    let callback = |state: String, cookie: Option<String>| {
        let mut req = http.get(format!("{}/login/oidc/callback?code=code-1&state={state}", app.base));
        if let Some(c) = cookie {
            req = req.header("Cookie", c);
        }
        req.send()
    };
    // A callback this browser did not start, or with another state, signs no one in.
    let r = callback(state.clone(), None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    let r = callback("forged".into(), Some(jar.clone())).await.unwrap();
    assert_eq!(r.status(), 401);
    let tampered = jar.replacen("oidc.", "oidc.x", 1);
    assert_eq!(callback(state.clone(), Some(tampered)).await.unwrap().status(), 401);

    // The real one: a session for the provider's e-mail, then on to `next`.
    let r = callback(state.clone(), Some(jar.clone())).await.unwrap();
    assert_eq!(r.status(), 200);
    let set: Vec<String> = r.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let session = set.iter().find(|c| c.starts_with("sluice_session=")).expect("a session cookie").clone();
    assert!(session.contains("SameSite=Strict") && session.contains("HttpOnly"), "{session}");
    assert!(
        set.iter().any(|c| c.starts_with("sluice_oidc=") && c.contains("Max-Age=0")),
        "the sign-in's cookie is spent: {set:?}"
    );
    let page = r.text().await.unwrap();
    assert!(page.contains(r#"content="0;url=/o/abc""#) && page.contains("sso@example.com"), "{page}");
    let me = http
        .get(format!("{}/v1/users/me", app.base))
        .header("Cookie", session.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    let me: serde_json::Value = me.json().await.unwrap();
    assert_eq!(me["email"], "sso@example.com");

    // The same code again: the provider refuses it, and so does the console.
    let r = callback(state, Some(jar)).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("code already used"));

    // An ID token with another sign-in's nonce is refused.
    let (location, cookie) = start().await;
    *idp.challenge.lock().unwrap() = query_param(&location, "code_challenge");
    *idp.nonce.lock().unwrap() = query_param(&location, "nonce");
    *idp.wrong_nonce.lock().unwrap() = true;
    idp.codes.lock().unwrap().push("code-1".into());
    let r = callback(query_param(&location, "state").unwrap(), Some(cookie.split(';').next().unwrap().to_string()))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("nonce"));
    handle.stop(false).await;
}
