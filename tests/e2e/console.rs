//! The web console over HTTP, on both metadata stores: signing in (a
//! pasted token, a one-time link), the cookie's flags, CSRF and origin
//! checks, the cookie's reach into the API (reads only), every page
//! rendering, and roles (a Viewer sees no write buttons and is refused
//! anyway). The browser tests (`crates/sluice/tests/console.rs`) drive the
//! same pages in Chromium.

use reqwest::StatusCode;
use serde_json::json;
use sluice_tests::{Auth, Backend, TestApp, check, spawn_app};
use std::time::Duration;

/// A browser-like client of the console: keeps no redirects, sends the
/// session cookie and this server's `Origin`.
pub(crate) struct Browser<'a> {
    app: &'a TestApp,
    client: reqwest::Client,
    cookie: Option<String>,
}

impl<'a> Browser<'a> {
    pub(crate) fn new(app: &'a TestApp) -> Self {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Self { app, client, cookie: None }
    }

    fn origin(&self) -> String {
        self.app.base.clone()
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, String, reqwest::header::HeaderMap) {
        let mut req = self.client.get(format!("{}{path}", self.app.base));
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", format!("sluice_session={c}"));
        }
        let res = req.send().await.unwrap();
        let (status, headers) = (res.status(), res.headers().clone());
        (status, res.text().await.unwrap(), headers)
    }

    async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> (StatusCode, String, reqwest::header::HeaderMap) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.app.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(form).unwrap());
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", format!("sluice_session={c}"));
        }
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        let res = req.send().await.unwrap();
        let (status, headers) = (res.status(), res.headers().clone());
        (status, res.text().await.unwrap(), headers)
    }

    /// Posts a form whose action answers with a redirect (post/redirect/
    /// get), and follows it as a browser does, with the notice the action
    /// left in its cookie: the page it lands on.
    async fn post_and_follow(
        &self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> (StatusCode, String, reqwest::header::HeaderMap) {
        let (status, html, headers) = self.post(path, form, origin).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "an action answers with a redirect: {html}");
        let to = headers["location"].to_str().unwrap().to_string();
        let said = headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("sluice_said="))
            .map(|v| v.split(';').next().unwrap().to_string());
        let mut req = self.client.get(format!("{}{to}", self.app.base));
        let mut cookies = vec![];
        if let Some(c) = &self.cookie {
            cookies.push(format!("sluice_session={c}"));
        }
        if let Some(said) = &said {
            cookies.push(format!("sluice_said={said}"));
        }
        req = req.header("Cookie", cookies.join("; "));
        let res = req.send().await.unwrap();
        let (status, headers) = (res.status(), res.headers().clone());
        if said.is_some() {
            // Said once: the page that said it clears the cookie.
            let cleared = headers
                .get_all("set-cookie")
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.starts_with("sluice_said=;") && v.contains("Max-Age=0")));
            assert!(cleared, "{headers:?}");
        }
        (status, res.text().await.unwrap(), headers)
    }

    /// A page requested with the notice cookie `said` beside the session.
    async fn get_saying(&self, path: &str, said: &str) -> String {
        let cookie = format!("sluice_session={}; sluice_said={said}", self.cookie.as_deref().unwrap_or_default());
        let res = self.client.get(format!("{}{path}", self.app.base)).header("Cookie", cookie).send().await.unwrap();
        res.text().await.unwrap()
    }

    /// Signs in with a pasted token; keeps the cookie the server sets.
    pub(crate) async fn sign_in(&mut self, token: &str) {
        let origin = self.origin();
        let (status, _, headers) = self.post("/login", &[("token", token), ("next", "/")], Some(&origin)).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        self.cookie = Some(session_cookie(&headers));
    }

    /// The CSRF token of the page at `path`.
    async fn csrf(&self, path: &str) -> String {
        let (status, html, _) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        let at =
            html.find(r#"name="csrf" value=""#).expect("a form with a CSRF token") + r#"name="csrf" value=""#.len();
        html[at..at + 32].to_string()
    }
}

fn session_cookie(headers: &reqwest::header::HeaderMap) -> String {
    let set = headers.get("set-cookie").expect("a cookie is set").to_str().unwrap().to_string();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP gets no Secure flag: {set}");
    set.split(';').next().unwrap().trim_start_matches("sluice_session=").to_string()
}

pub(crate) fn token_of(auth: &Auth) -> String {
    match auth {
        Auth::Token(t) => t.clone(),
        _ => unreachable!(),
    }
}

async fn signing_in_and_csrf(app: TestApp) {
    let ann = app.token("ann@example.com");
    let mut b = Browser::new(&app);

    // Signed out: pages send to the sign-in page, which keeps the way back.
    let (status, _, headers) = b.get("/o/00000000-0000-0000-0000-000000000000/flows").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/login?next=%2Fo%2F00000000-0000-0000-0000-000000000000%2Fflows");
    // A form posted while signed out leads back to the start, not to the
    // form's target; HEAD answers like GET.
    let (status, _, headers) = b.post("/o/00000000-0000-0000-0000-000000000000/flows", &[("name", "x")], None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/login?next=%2F");
    let head = b.client.head(format!("{}/login", app.base)).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let (status, html, _) = b.get("/login").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("sluice login-link"), "links are offered when the server can mint sessions");

    // A bad token and a sign-in posted from another site are refused.
    let origin = b.origin();
    let (status, html, _) = b.post("/login", &[("token", "not-a-token")], Some(&origin)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(html.contains("does not sign in"), "{html}");
    let (status, _, _) = b.post("/login", &[("token", &token_of(&ann))], Some("https://evil.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = b.post("/login", &[("token", &token_of(&ann))], None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // `next` only ever leads to this server, and a control character in it
    // is no 500.
    for next in ["//evil.example", "/\t/evil.example", "/\n/x", "/\\evil.example"] {
        let (status, _, headers) = b.post("/login", &[("token", &token_of(&ann)), ("next", next)], Some(&origin)).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{next:?}");
        assert_eq!(headers["location"], "/", "{next:?}");
    }
    // A spoofed forwarded host does not make another origin this server's.
    let spoofed = b
        .client
        .post(format!("{}/login", app.base))
        .header("Origin", "http://evil.example")
        .header("X-Forwarded-Host", "evil.example")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={}", token_of(&ann)))
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), StatusCode::FORBIDDEN);

    b.sign_in(&token_of(&ann)).await;
    let (status, html, headers) = b.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("New organization"));
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(headers["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));

    // A form without the CSRF token, with another's, or from another
    // origin changes nothing.
    let csrf = b.csrf("/").await;
    for (form, origin) in [
        (vec![("name", "Acme")], Some(origin.as_str())),
        (vec![("name", "Acme"), ("csrf", "0123456789abcdef0123456789abcdef")], Some(origin.as_str())),
        (vec![("name", "Acme"), ("csrf", csrf.as_str())], Some("https://evil.example")),
        (vec![("name", "Acme"), ("csrf", csrf.as_str())], None),
    ] {
        let (status, html, _) = b.post("/orgs", &form, origin).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
        assert!(html.contains("reload the page"), "{html}");
    }
    assert_eq!(check!(app.get("/v1/organizations", &ann).await, 200).body["data"].as_array().unwrap().len(), 0);

    // With both, the organization is made.
    let (status, _, headers) = b.post("/orgs", &[("name", "Acme"), ("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let org = headers["location"].to_str().unwrap().trim_start_matches("/o/").to_string();
    check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200);

    // The cookie reads the API (the run page's event stream needs it) but
    // writes nothing there: a page of another site cannot post JSON with it.
    let api = format!("{}/v1/organizations/{org}", app.base);
    let cookie = format!("sluice_session={}", b.cookie.clone().unwrap());
    let read = b.client.get(&api).header("Cookie", &cookie).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    let write = b.client.put(&api).header("Cookie", &cookie).json(&json!({"name": "x"})).send().await.unwrap();
    assert_eq!(write.status(), StatusCode::UNAUTHORIZED);
    // Nor through another spelling of the path that routes to the API.
    let encoded = format!("{}/%761/organizations/{org}/api-keys", app.base);
    let write = b
        .client
        .post(&encoded)
        .header("Cookie", &cookie)
        .header("Content-Type", "text/plain")
        .body(r#"{"name": "stolen", "roles": ["Admin"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), StatusCode::UNAUTHORIZED);
    let keys = check!(app.get(&format!("/v1/organizations/{org}/api-keys"), &ann).await, 200);
    assert_eq!(keys.body["data"].as_array().unwrap().len(), 0, "{}", keys.body);

    // Signing out clears the cookie.
    let csrf = b.csrf(&format!("/o/{org}")).await;
    let (status, _, headers) = b.post("/logout", &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"), "{:?}", headers["set-cookie"]);
}

async fn a_login_link_signs_in_once(app: TestApp) {
    let b = Browser::new(&app);
    let link = app.login_link("lin@example.com", Duration::from_secs(600));
    let token = link.split_once("token=").unwrap().1.to_string();
    // Opening the link asks first: a link previewer does not spend it.
    let (status, html, _) = b.get(&link).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("lin@example.com"), "{html}");
    let origin = b.origin();
    let (status, _, headers) = b.post("/login/link", &[("token", &token)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{headers:?}");
    let cookie = session_cookie(&headers);
    assert!(headers["set-cookie"].to_str().unwrap().contains("Max-Age=43200"));
    let signed = Browser { app: &app, client: b.client.clone(), cookie: Some(cookie) };
    assert_eq!(signed.get("/").await.0, StatusCode::OK);
    // Once only; a forged or expired link is refused too.
    let (status, _, _) = b.post("/login/link", &[("token", &token)], Some(&origin)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let forged = token.replacen("bGlu", "YW5u", 1);
    assert_eq!(b.get(&format!("/login/link?token={forged}")).await.0, StatusCode::UNAUTHORIZED);
    let expired = app.login_link("lin@example.com", Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(b.get(&expired).await.0, StatusCode::UNAUTHORIZED);
}

/// An organization "Acme" of Ann (Admin) with Vic as a Viewer, and each
/// signed in to the console.
struct Team<'a> {
    org: String,
    ann: Auth,
    vic: Auth,
    admin: Browser<'a>,
    viewer: Browser<'a>,
}

async fn team(app: &TestApp) -> Team<'_> {
    let ann = app.token("ann@example.com");
    let vic = app.token("vic@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let inv = check!(
        app.post(
            &format!("/v1/organizations/{org}/invitations"),
            &ann,
            json!({"email": "vic@example.com", "role": "Viewer"})
        )
        .await,
        201
    );
    check!(app.post("/v1/invitations/accept", &vic, json!({"token": inv.body["token"]})).await, 200);
    let mut admin = Browser::new(app);
    admin.sign_in(&token_of(&ann)).await;
    let mut viewer = Browser::new(app);
    viewer.sign_in(&token_of(&vic)).await;
    Team { org, ann, vic, admin, viewer }
}

async fn every_page_renders_and_a_viewer_cannot_write(app: TestApp) {
    let Team { org, ann, vic, admin, viewer } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let dir = app.org_files(&org);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/items.jsonl"), "{\"id\": 1}\n{\"id\": 2}\n").unwrap();
    let file = |name: &str, path: &str| json!({"name": name, "type": "file", "capability": "both", "config": {"path": path, "format": "jsonl"}});
    let src = check!(app.post(&format!("{base}/connections"), &ann, file("in", "in")).await, 201).id();
    let dst = check!(app.post(&format!("{base}/connections"), &ann, file("out", "out")).await, 201).id();
    let flow = check!(
        app.post(
            &format!("{base}/flows"),
            &ann,
            json!({"name": "items", "source_connection_id": src, "destination_connection_id": dst,
            "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}})
        )
        .await,
        201
    )
    .id();
    let run = check!(app.post(&format!("{base}/flows/{flow}/run"), &ann, json!({})).await, 202).id();

    // A preview is a page of its own (read-only, so a Viewer's too).
    for b in [&admin, &viewer] {
        let (status, html, _) = b.get(&format!("/o/{org}/connections/{src}?preview=items")).await;
        assert!(status == StatusCode::OK && html.contains("table class=\"compact preview\""), "{html}");
        assert!(html.contains("2 sample rows."), "{html}");
    }
    let csrf = admin.csrf(&format!("/o/{org}/connections/{src}")).await;
    let (status, _, headers) = admin
        .post(
            &format!("/o/{org}/connections/{src}/preview"),
            &[("csrf", &csrf), ("entity", "items")],
            Some(&admin.origin()),
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers["location"].to_str().unwrap().ends_with(&format!("/connections/{src}?preview=items")));

    let pages = [
        String::new(),
        "/connections".into(),
        format!("/connections/{src}"),
        "/integrations".into(),
        "/flows".into(),
        "/flows/new".into(),
        format!("/flows/{flow}"),
        format!("/runs/{run}"),
        "/topology".into(),
        "/catalog".into(),
        "/gateway".into(),
        "/iac".into(),
        "/audit".into(),
        "/settings".into(),
    ];
    for page in &pages {
        for b in [&admin, &viewer] {
            let (status, html, _) = b.get(&format!("/o/{org}{page}")).await;
            assert_eq!(status, StatusCode::OK, "{page}: {html}");
            assert!(html.starts_with("<!DOCTYPE html>"), "{page}");
        }
    }
    // A malformed id or query is a page too, not the API's JSON.
    for (path, code) in [
        ("/o/not-a-uuid".to_string(), StatusCode::NOT_FOUND),
        ("/?org=bad".into(), StatusCode::UNPROCESSABLE_ENTITY),
        (format!("/o/{org}/flows/new?source=x"), StatusCode::UNPROCESSABLE_ENTITY),
        ("/login/link".into(), StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (status, html, _) = admin.get(&path).await;
        assert_eq!(status, code, "{path}: {html}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}: {html}");
    }
    // A failed save keeps what the user typed and names the problem.
    let csrf = admin.csrf(&format!("/o/{org}/flows/{flow}")).await;
    let config = r#"{"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}"#;
    let (status, html, _) = admin
        .post(
            &format!("/o/{org}/flows/{flow}"),
            &[("csrf", &csrf), ("name", "items"), ("schedule", "every tuesday"), ("config", config)],
            Some(&admin.origin()),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a refused save answers with its status");
    assert!(
        html.contains(r#"value="every tuesday""#) && html.contains(r#"<div class="error" role="alert">"#),
        "{html}"
    );
    // Schedules as people think of them: presets offered beside cron, and
    // a common expression said in words where the flow is shown.
    assert!(html.contains(r#"<option value="0 2 * * *">daily at 02:00 UTC</option>"#), "{html}");
    let (status, html, _) = admin
        .post_and_follow(
            &format!("/o/{org}/flows/{flow}"),
            &[("csrf", &csrf), ("name", "items"), ("schedule", "*/15 * * * *"), ("config", config)],
            Some(&admin.origin()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Saved.") && html.contains("Saved: every 15 minutes."), "{html}");
    // A notice is its session's own: one planted in the cookie (unsigned,
    // altered, or left for another member's session) is shown to nobody.
    let form = [("csrf", csrf.as_str()), ("name", "items"), ("schedule", "*/15 * * * *"), ("config", config)];
    let (status, _, headers) = admin.post(&format!("/o/{org}/flows/{flow}"), &form, Some(&admin.origin())).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let said = headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("sluice_said="))
        .map(|v| v.split(';').next().unwrap().to_string())
        .expect("a notice cookie");
    let page = format!("/o/{org}/flows/{flow}");
    let shown = r#"<p class="notice" role="status">"#;
    let html = admin.get_saying(&page, &said).await;
    assert!(html.contains(&format!("{shown}Saved.</p>")), "its own session's: {html}");
    let (tag, _) = said.split_once('.').expect("a tagged notice");
    // The altered tag differs from the real one in its first digit,
    // whatever that digit is.
    let altered = format!("{}{}", if said.starts_with('0') { '1' } else { '0' }, &said[1..]);
    assert_ne!(altered, said);
    for planted in ["Planted%20notice".to_string(), format!("{tag}.Planted%20notice"), altered] {
        let html = admin.get_saying(&page, &planted).await;
        assert!(!html.contains(shown) && !html.contains("Planted"), "{planted}: {html}");
    }
    let html = viewer.get_saying(&page, &said).await;
    assert!(html.contains("<h1>items</h1>") && !html.contains(shown), "another member's session: {html}");
    let (_, html, _) = admin.get(&format!("/o/{org}/flows")).await;
    assert!(html.contains(r#"<code>*/15 * * * *</code> <span class="muted">every 15 minutes</span>"#), "{html}");
    // Back to manual runs, so that no scheduled run starts under the test.
    let (status, html, _) = admin
        .post_and_follow(
            &format!("/o/{org}/flows/{flow}"),
            &[("csrf", &csrf), ("name", "items"), ("schedule", ""), ("config", config)],
            Some(&admin.origin()),
        )
        .await;
    assert!(status == StatusCode::OK && html.contains("Saved."), "{html}");

    // The run page follows the API's event stream.
    let (_, html, _) = admin.get(&format!("/o/{org}/runs/{run}")).await;
    assert!(html.contains(&format!("data-events=\"{base}/runs/{run}/events\"")), "{html}");

    // Runs made within a minute are told apart (a UUIDv7's first digits
    // are its time), and audit entries name their resource.
    let mut runs = vec![run.clone()];
    for _ in 0..2 {
        runs.push(check!(app.post(&format!("{base}/flows/{flow}/run"), &ann, json!({})).await, 202).id());
    }
    let (_, html, _) = admin.get(&format!("/o/{org}/flows/{flow}")).await;
    for id in &runs {
        let hex: String = id.chars().filter(char::is_ascii_hexdigit).collect();
        assert!(html.contains(&format!("…{}", &hex[hex.len() - 12..])), "{id}: {html}");
    }
    let (_, html, _) = admin.get(&format!("/o/{org}/audit")).await;
    assert!(html.contains(&format!("flow <a href=\"/o/{org}/flows/{flow}\"><strong>items</strong></a>")), "{html}");

    // The Admin sees write buttons; the Viewer sees none.
    let (_, html, _) = admin.get(&format!("/o/{org}/flows/{flow}")).await;
    assert!(html.contains("Run now") && html.contains("Pause"), "{html}");
    assert!(
        !html.contains("Change stream") && !html.contains(">Snapshot<"),
        "a flow without CDC has no stream: {html}"
    );
    let (_, html, _) = viewer.get(&format!("/o/{org}/flows/{flow}")).await;
    assert!(!html.contains("Run now") && !html.contains("Pause"), "{html}");
    let (_, html, _) = viewer.get(&format!("/o/{org}/connections")).await;
    assert!(!html.contains("New connection"), "{html}");
    let (_, html, _) = viewer.get(&format!("/o/{org}/settings")).await;
    assert!(!html.contains("Create key") && !html.contains("Invite"), "{html}");
    let (_, html, _) = viewer.get(&format!("/o/{org}/connections/{src}")).await;
    assert!(!html.contains(">Test<") && html.contains(">Discover<"), "{html}");
    let (_, html, _) = viewer.get(&format!("/o/{org}/iac")).await;
    assert!(!html.contains("value=\"apply\"") && !html.contains("value=\"plan\""), "{html}");

    // The gateway playground validates for a signed-in member.
    let asset = check!(
        app.post(&format!("{base}/data-assets"), &ann, json!({"name": "customer", "fields": [
            {"name": "user_id", "type": "integer", "required": true}, {"name": "email", "type": "string", "tags": ["PII.Sensitive"]}]})).await,
        201
    )
    .id();
    let csrf = viewer.csrf(&format!("/o/{org}/gateway")).await;
    let payload = "Sure! {'user_id': '42', 'email': 'ann@example.com',}";
    let form = [("csrf", csrf.as_str()), ("asset", asset.as_str()), ("payload", payload)];
    let (status, html, _) = viewer.post(&format!("/o/{org}/gateway"), &form, Some(&viewer.origin())).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("The cleaned object") && html.contains("&quot;user_id&quot;: 42"), "{html}");
    assert!(!html.contains("&quot;ann@example.com&quot;"), "the tagged field is masked: {html}");

    // And the server refuses the Viewer's writes anyway.
    let csrf = viewer.csrf(&format!("/o/{org}")).await;
    let origin = viewer.origin();
    let (status, html, _) = viewer.post(&format!("/o/{org}/flows/{flow}/run"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    let (status, _, _) = viewer
        .post(&format!("/o/{org}/flows/{flow}/cursors/reset"), &[("csrf", &csrf), ("entity", "items")], Some(&origin))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The Admin manages members: Vic becomes an Editor, the last Admin
    // stays, and a removed member's pages are gone.
    let vic_id = check!(app.get("/v1/users/me", &vic).await, 200).id();
    let ann_id = check!(app.get("/v1/users/me", &ann).await, 200).id();
    let csrf = admin.csrf(&format!("/o/{org}/settings")).await;
    let (status, html, _) = admin
        .post_and_follow(
            &format!("/o/{org}/members/{vic_id}/role"),
            &[("csrf", &csrf), ("role", "Editor")],
            Some(&origin),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("vic@example.com is now Editor"), "{html}");
    // Said once: a reload shows the page without it.
    let (_, html, _) = admin.get(&format!("/o/{org}/settings")).await;
    assert!(!html.contains("is now Editor"), "{html}");
    let (status, html, _) = admin
        .post(&format!("/o/{org}/members/{ann_id}/role"), &[("csrf", &csrf), ("role", "Viewer")], Some(&origin))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    let (status, _, _) = viewer
        .post(
            &format!("/o/{org}/members/{ann_id}/remove"),
            &[("csrf", &viewer.csrf(&format!("/o/{org}")).await)],
            Some(&origin),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an Editor cannot remove members");
    let (status, _, _) =
        admin.post(&format!("/o/{org}/members/{vic_id}/remove"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(viewer.get(&format!("/o/{org}")).await.0, StatusCode::NOT_FOUND);

    // Another organization's pages are not found, as in the API.
    let eve = app.token("eve@example.com");
    let mut stranger = Browser::new(&app);
    stranger.sign_in(&token_of(&eve)).await;
    let (status, _, _) = stranger.get(&format!("/o/{org}/flows/{flow}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The activity feed filters by event type (or its first part) and
    // severity: the finished run is there under `run`, not under `schema`.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, html, _) = admin.get(&format!("/o/{org}/audit?event=run&severity=info")).await;
        if html.contains("run.succeeded") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no run.succeeded in the feed: {html}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, html, _) = admin.get(&format!("/o/{org}/audit?event=schema")).await;
    assert!(!html.contains("run.succeeded") && html.contains("No events."), "{html}");
    let (_, html, _) = admin.get(&format!("/o/{org}/audit?event=run&severity=error")).await;
    assert!(!html.contains("run.succeeded"), "{html}");

    // The Admin runs the flow from the console and lands on its page.
    let csrf = admin.csrf(&format!("/o/{org}")).await;
    let (status, _, headers) =
        admin.post(&format!("/o/{org}/flows/{flow}/run"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers["location"].to_str().unwrap().starts_with(&format!("/o/{org}/runs/")));
}

/// Integrations from the console: created with credentials that no page
/// shows again (but to an Admin who asks), used by a connection, renamed
/// with the stored password kept, refused to a Viewer, and deleted once no
/// connection uses it. Long lists page.
async fn integrations_and_long_lists(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let origin = admin.origin();
    const SECRET: &str = "s3cret-Pw-not-shown";

    // Created: the page shows the key, never the value.
    let csrf = admin.csrf(&format!("/o/{org}/integrations")).await;
    let credentials = format!(r#"{{"password": "{SECRET}"}}"#);
    let form = [
        ("csrf", csrf.as_str()),
        ("name", "warehouse"),
        ("integration_type", "postgres"),
        ("credentials", &credentials),
    ];
    let (status, html, headers) = admin.post(&format!("/o/{org}/integrations"), &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let at = headers["location"].to_str().unwrap().to_string();
    let id = at.rsplit('/').next().unwrap().to_string();
    for page in [at.clone(), format!("/o/{org}/integrations")] {
        let (status, html, _) = admin.get(&page).await;
        assert_eq!(status, StatusCode::OK, "{page}: {html}");
        assert!(html.contains("warehouse") && html.contains("<code>password</code>"), "{page}: {html}");
        assert!(!html.contains(SECRET), "{page} shows the secret");
    }
    // A bad credentials document keeps the form and names the field.
    let form = [
        ("csrf", csrf.as_str()),
        ("name", "other"),
        ("integration_type", "postgres"),
        ("credentials", r#"{"password": 5}"#),
    ];
    let (status, html, _) = admin.post(&format!("/o/{org}/integrations"), &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html.contains("credentials.password") && html.contains("value=\"other\""), "{html}");

    // A connection on it, made in the console; each page links the other.
    let csrf = admin.csrf(&format!("/o/{org}/connections")).await;
    let config = r#"{"host": "127.0.0.1", "port": 1, "database": "x", "user": "postgres"}"#;
    let form = [
        ("csrf", csrf.as_str()),
        ("name", "on-warehouse"),
        ("connector_type", "postgres"),
        ("integration_id", id.as_str()),
        ("config", config),
        ("action", "create"),
    ];
    let (status, html, headers) = admin.post(&format!("/o/{org}/connections"), &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let conn_at = headers["location"].to_str().unwrap().to_string();
    let conn = conn_at.rsplit('/').next().unwrap().to_string();
    let c = check!(app.get(&format!("{base}/connections/{conn}"), &ann).await, 200);
    assert_eq!(c.body["integration_id"], id.as_str());
    let (_, html, _) = admin.get(&conn_at).await;
    assert!(html.contains(&format!("href=\"{at}\"")), "{html}");
    let (_, html, _) = admin.get(&at).await;
    assert!(html.contains(&format!("href=\"{conn_at}\"")) && html.contains("on-warehouse"), "{html}");

    // Renamed, with the placeholder keeping the stored password.
    let csrf = admin.csrf(&at).await;
    let form = [("csrf", csrf.as_str()), ("name", "warehouse-2"), ("credentials", r#"{"password": "***"}"#)];
    let (status, html, _) = admin.post_and_follow(&at, &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Saved.") && html.contains("warehouse-2"), "{html}");
    let details = check!(app.get(&format!("{base}/integrations/{id}/details"), &ann).await, 200);
    assert_eq!(details.body["credentials"]["password"], SECRET, "{}", details.body);

    // Revealed to the Admin who asks; never to a Viewer, who sees no
    // write buttons either and is refused anyway.
    let (status, html, headers) = admin.post(&format!("{at}/reveal"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(SECRET), "{html}");
    assert!(headers["cache-control"].to_str().unwrap().contains("no-store"));
    let (status, html, _) = viewer.get(&at).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!html.contains("Reveal") && !html.contains(">Save<") && !html.contains(">Delete<"), "{html}");
    let (_, html, _) = viewer.get(&format!("/o/{org}/integrations")).await;
    assert!(!html.contains("New integration"), "{html}");
    let vcsrf = viewer.csrf(&format!("/o/{org}")).await;
    for action in ["/reveal", "/delete", ""] {
        let form = [("csrf", vcsrf.as_str()), ("name", "mine"), ("credentials", "{}")];
        let (status, html, _) = viewer.post(&format!("{at}{action}"), &form, Some(&origin)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}: {html}");
        assert!(!html.contains(SECRET));
    }

    // In use, it stays; unused, it goes.
    let (status, html, _) = admin.post(&format!("{at}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(html.contains("use this integration"), "{html}");
    let (status, _, _) = admin.post(&format!("{conn_at}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _, headers) = admin.post(&format!("{at}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(
        (status, headers["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, format!("/o/{org}/integrations").as_str())
    );
    assert_eq!(admin.get(&at).await.0, StatusCode::NOT_FOUND);

    // 101 connections: the list shows the newest 100, then the rest.
    for i in 0..101 {
        let c = json!({"name": format!("c{i:03}"), "type": "file", "capability": "both", "config": {"path": "d", "format": "jsonl"}});
        check!(app.post(&format!("{base}/connections"), &ann, c).await, 201);
    }
    let (_, html, _) = admin.get(&format!("/o/{org}/connections")).await;
    assert!(html.contains(">c100<") && !html.contains(">c000<"), "the newest first, 100 of them");
    let next = html
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.contains("after="))
        .expect("a link to older ones");
    let (status, html, _) = admin.get(&next.replace("&amp;", "&")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(">c000<") && !html.contains(">c100<") && html.contains("Newest"), "{html}");
    assert!(!html.contains("after="), "the last page links no further");
}

mod sqlite_only {
    use super::*;

    #[tokio::test]
    async fn assets_are_served_from_the_binary() {
        let app = spawn_app(Backend::Sqlite).await.unwrap();
        let b = Browser::new(&app);
        for (path, kind) in [("/assets/console.css", "text/css"), ("/assets/console.js", "text/javascript")] {
            let (status, body, headers) = b.get(path).await;
            assert_eq!(status, StatusCode::OK);
            assert!(headers["content-type"].to_str().unwrap().starts_with(kind));
            assert!(body.len() > 1000);
        }
        // The tab's icon: no 404 on every page a browser opens.
        let (status, body, headers) = b.get("/favicon.ico").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-type"], "image/svg+xml");
        assert!(body.starts_with("<svg"), "{body}");
    }
}

/// Eve, the Admin of another organization, signed in: that organization's
/// id and her browser.
async fn stranger(app: &TestApp) -> (String, Browser<'_>) {
    let eve = app.token("eve@example.com");
    let other = check!(app.post("/v1/organizations", &eve, json!({"name": "Other"})).await, 201).id();
    let mut browser = Browser::new(app);
    browser.sign_in(&token_of(&eve)).await;
    (other, browser)
}

/// A pending invitation is sent again (a new token; the old one stops
/// working) or revoked from the settings page; only an Admin may.
async fn invitations_are_resent_and_revoked(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let origin = admin.origin();
    let invite = |email: &str| json!({"email": email, "role": "Editor"});
    let invitations = format!("/v1/organizations/{org}/invitations");
    let bob = check!(app.post(&invitations, &ann, invite("bob@example.com")).await, 201);
    let (bob_id, old_token) = (bob.id(), bob.body["token"].as_str().unwrap().to_string());
    let settings = format!("/o/{org}/settings");
    let (_, html, _) = admin.get(&settings).await;
    assert!(html.contains(&format!("action=\"/o/{org}/invitations/{bob_id}/resend\"")), "{html}");
    let (_, html, _) = viewer.get(&settings).await;
    assert!(!html.contains("/resend"), "{html}");

    // Resent: the page shows the new token once; the old one is refused.
    let csrf = admin.csrf(&settings).await;
    let (status, html, _) =
        admin.post(&format!("/o/{org}/invitations/{bob_id}/resend"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Invitation for <strong>bob@example.com</strong> created"), "{html}");
    let at = html.find("<code class=\"secret\">").expect("the new token") + "<code class=\"secret\">".len();
    let new_token = html[at..].split('<').next().unwrap().to_string();
    assert_ne!(new_token, old_token);
    let bob_auth = app.token("bob@example.com");
    check!(app.post("/v1/invitations/accept", &bob_auth, json!({"token": old_token})).await, 409);
    let joined = check!(app.post("/v1/invitations/accept", &bob_auth, json!({"token": new_token})).await, 200);
    assert_eq!(joined.body["role"], "Editor", "{}", joined.body);

    // Revoked: its token stops working, and the list says so.
    let carl = check!(app.post(&invitations, &ann, invite("carl@example.com")).await, 201);
    let carl_id = carl.id();
    let csrf_v = viewer.csrf(&settings).await;
    for action in ["resend", "revoke"] {
        let path = format!("/o/{org}/invitations/{carl_id}/{action}");
        let (status, _, _) = viewer.post(&path, &[("csrf", &csrf_v)], Some(&origin)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }
    let (status, _, headers) =
        admin.post(&format!("/o/{org}/invitations/{carl_id}/revoke"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], settings.as_str());
    let carl_auth = app.token("carl@example.com");
    check!(app.post("/v1/invitations/accept", &carl_auth, json!({"token": carl.body["token"]})).await, 409);
    let listed = check!(app.get(&invitations, &ann).await, 200).body;
    let status_of =
        |id: &str| listed["data"].as_array().unwrap().iter().find(|i| i["id"] == id).unwrap()["status"].clone();
    assert_eq!((status_of(&bob_id), status_of(&carl_id)), (json!("revoked"), json!("revoked")), "{listed}");
    // Neither may be sent again now.
    let (status, _, _) =
        admin.post(&format!("/o/{org}/invitations/{carl_id}/resend"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Another organization's Admin reaches no invitation of this one, from
    // her own organization's pages or from this one's.
    let dan = check!(app.post(&invitations, &ann, invite("dan@example.com")).await, 201).id();
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}/settings")).await;
    for o in [&other, &org] {
        for action in ["resend", "revoke"] {
            let path = format!("/o/{o}/invitations/{dan}/{action}");
            let (status, _, _) = stranger.post(&path, &[("csrf", &csrf_e)], Some(&origin)).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        }
    }
    let listed = check!(app.get(&invitations, &ann).await, 200).body;
    let dan_now = listed["data"].as_array().unwrap().iter().find(|i| i["id"] == dan.as_str()).unwrap().clone();
    assert_eq!(dan_now["status"], "pending", "{dan_now}");
}

/// A run is cancelled and retried from its page, and a flow deleted from
/// its own (on a process that executes no runs, so that they wait).
async fn runs_are_cancelled_and_retried_and_flows_deleted(backend: Backend) {
    let options = sluice_tests::Options { no_worker: true, ..Default::default() };
    let Some(app) = sluice_tests::spawn_app_with(backend, options).await else { return };
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let conn = app.file_connection(&ann, &org, "files", "in", Some("jsonl")).await;
    let body = json!({"name": "items", "source_connection_id": conn, "destination_connection_id": conn,
        "config": {"mappings": [{"source_entity": "items", "dest_entity": "copy", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body).await, 201).id();
    let run = check!(app.post(&format!("{base}/flows/{flow}/run"), &ann, json!({})).await, 202).id();
    let origin = admin.origin();
    let run_page = format!("/o/{org}/runs/{run}");

    // Only a writer is offered the actions, and only where they apply.
    let (_, html, _) = viewer.get(&run_page).await;
    assert!(!html.contains("Cancel run") && !html.contains("Retry"), "{html}");
    let (_, html, _) = admin.get(&run_page).await;
    assert!(html.contains(&format!("action=\"{run_page}/cancel\"")) && !html.contains(">Retry<"), "{html}");

    // Cancel: the queued run ends as canceled, and its page says so.
    let csrf = admin.csrf(&run_page).await;
    let (status, _, headers) = admin.post(&format!("{run_page}/cancel"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], run_page.as_str());
    assert_eq!(check!(app.get(&format!("{base}/runs/{run}"), &ann).await, 200).body["status"], "canceled");
    let (_, html, _) = admin.get(&run_page).await;
    assert!(!html.contains("Cancel run") && html.contains(">Retry<"), "{html}");
    // Cancelled again, it has already ended: said on its page.
    let (status, html, _) = admin.post(&format!("{run_page}/cancel"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("the run already ended as canceled") && html.contains("Run of items"), "{html}");

    // Retry: a new run of the flow, on its own page.
    let (status, _, headers) = admin.post(&format!("{run_page}/retry"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let again = headers["location"].to_str().unwrap().rsplit('/').next().unwrap().to_string();
    assert_ne!(again, run);
    let queued = check!(app.get(&format!("{base}/runs/{again}"), &ann).await, 200).body;
    assert_eq!((queued["status"].as_str(), queued["flow_id"].as_str()), (Some("queued"), Some(flow.as_str())));
    // A Viewer may do neither.
    let csrf_v = viewer.csrf(&run_page).await;
    for action in ["cancel", "retry"] {
        let (status, _, _) = viewer.post(&format!("{run_page}/{action}"), &[("csrf", &csrf_v)], Some(&origin)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }

    // Another organization's Admin can neither cancel, retry nor delete
    // this organization's runs and flows, from her pages or from these.
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}")).await;
    for o in [&other, &org] {
        for path in [
            format!("/o/{o}/runs/{again}/cancel"),
            format!("/o/{o}/runs/{run}/retry"),
            format!("/o/{o}/flows/{flow}/delete"),
        ] {
            let (status, _, _) = stranger.post(&path, &[("csrf", &csrf_e)], Some(&origin)).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        }
    }
    assert_eq!(check!(app.get(&format!("{base}/runs/{again}"), &ann).await, 200).body["status"], "queued");

    // Delete: offered on the flow's page; the flow and its runs are gone.
    let flow_page = format!("/o/{org}/flows/{flow}");
    let (_, html, _) = viewer.get(&flow_page).await;
    assert!(!html.contains("Delete flow"), "{html}");
    let (status, _, _) = viewer.post(&format!("{flow_page}/delete"), &[("csrf", &csrf_v)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, html, _) = admin.get(&flow_page).await;
    assert!(html.contains("Delete flow") && html.contains("data-confirm=\"Delete this flow"), "{html}");
    let (status, _, headers) = admin.post(&format!("{flow_page}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/o/{org}/flows").as_str());
    check!(app.get(&format!("{base}/flows/{flow}"), &ann).await, 404);
    check!(app.get(&format!("{base}/runs/{again}"), &ann).await, 404);
    let (status, _, _) = admin.get(&flow_page).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn runs_are_cancelled_and_retried_and_flows_deleted_with_sqlite_metadata() {
    runs_are_cancelled_and_retried_and_flows_deleted(Backend::Sqlite).await;
}

#[tokio::test]
async fn runs_are_cancelled_and_retried_and_flows_deleted_with_postgres_metadata() {
    runs_are_cancelled_and_retried_and_flows_deleted(Backend::Postgres).await;
}

/// A connection's settings are edited from its page: a form of the
/// connector's fields, where a credential left empty keeps the stored one
/// and is never shown, or the JSON; refused input says why, keeping what
/// was typed but the credential; only a writer of the organization may.
async fn connections_are_edited_from_their_page(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let origin = admin.origin();
    let conns = format!("/v1/organizations/{org}/connections");
    let id = check!(
        app.post(&conns, &ann, json!({"name": "wh", "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "password": "s3cret-pw", "sslmode": "disable"}}))
        .await,
        201
    )
    .id();
    let page = format!("/o/{org}/connections/{id}");
    let (_, html, _) = admin.get(&page).await;
    for shown in ["Edit settings", "type=\"password\"", "stored: leave empty to keep it", "Edit as JSON"] {
        assert!(html.contains(shown), "{shown}: {html}");
    }
    assert!(!html.contains("s3cret-pw"), "the secret never shows: {html}");
    let (_, html, _) = viewer.get(&page).await;
    assert!(!html.contains("Edit settings"), "{html}");

    // The form: the database changed, the password left empty (kept).
    let csrf = admin.csrf(&page).await;
    let fields = |database: &'static str, port: &'static str, password: &'static str| {
        vec![
            ("name", "warehouse"),
            ("cfg.host", "127.0.0.1"),
            ("cfg.port", port),
            ("cfg.database", database),
            ("cfg.user", "postgres"),
            ("cfg.password", password),
            ("cfg.sslmode", "disable"),
        ]
    };
    let mut form = fields("other", "5432", "");
    form.push(("csrf", &csrf));
    let (status, html, _) = admin.post_and_follow(&page, &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Saved."), "{html}");
    let got = check!(app.get(&format!("{conns}/{id}"), &ann).await, 200).body;
    assert_eq!((&got["name"], &got["config"]["database"]), (&json!("warehouse"), &json!("other")), "{got}");
    assert_eq!(got["config"]["port"], 5432, "{got}");
    assert_eq!(got["config"]["password"], "***", "the stored password is kept: {got}");

    // Refused: a port that is no number; the page says why and keeps what
    // was typed, but not the password typed with it.
    let mut form = fields("third", "not-a-port", "typed-secret");
    form.push(("csrf", &csrf));
    let (status, html, _) = admin.post(&page, &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("port") && html.contains("value=\"third\""), "{html}");
    assert!(!html.contains("typed-secret"), "a typed credential is not sent back: {html}");
    let got = check!(app.get(&format!("{conns}/{id}"), &ann).await, 200).body;
    assert_eq!(got["config"]["database"], "other", "nothing half-written: {got}");

    // As JSON, where "***" keeps the stored credential.
    let json_form =
        [("csrf", csrf.as_str()), ("mode", "json"), ("config", r#"{"database": "test", "password": "***"}"#)];
    let (status, html, _) = admin.post_and_follow(&page, &json_form, Some(&origin)).await;
    assert!(status == StatusCode::OK && html.contains("Saved."), "{html}");
    let got = check!(app.get(&format!("{conns}/{id}"), &ann).await, 200).body;
    assert_eq!((&got["config"]["database"], &got["config"]["password"]), (&json!("test"), &json!("***")), "{got}");
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?resource_id={id}"), &ann).await, 200);
    let text = audit.body.to_string();
    assert!(text.contains("connection.updated") && !text.contains("s3cret-pw"), "{text}");

    // A Viewer may not; another organization's Admin reaches nothing.
    let csrf_v = viewer.csrf(&page).await;
    let (status, _, _) = viewer.post(&page, &[("csrf", csrf_v.as_str()), ("name", "mine")], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}/settings")).await;
    for o in [&other, &org] {
        let path = format!("/o/{o}/connections/{id}");
        let (status, _, _) = stranger.post(&path, &[("csrf", csrf_e.as_str()), ("name", "mine")], Some(&origin)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    let got = check!(app.get(&format!("{conns}/{id}"), &ann).await, 200).body;
    assert_eq!(got["name"], "warehouse", "{got}");

    // A delete refused while a flow uses the connection names the flow and
    // links to it; once the flow is gone, the delete goes through.
    let files = app.file_connection(&ann, &org, "files", "in", Some("jsonl")).await;
    let body = json!({"name": "into the warehouse", "source_connection_id": files, "destination_connection_id": id,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("/v1/organizations/{org}/flows"), &ann, body).await, 201).id();
    let (status, html, _) = admin.post(&format!("{page}/delete"), &[("csrf", csrf.as_str())], Some(&origin)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    let link = format!("<a href=\"/o/{org}/flows/{flow}\">into the warehouse</a>");
    assert!(html.contains("Used by these flows") && html.contains(&link), "{link}: {html}");
    check!(app.delete(&format!("/v1/organizations/{org}/flows/{flow}"), &ann).await, 204);
    let (status, _, headers) = admin.post(&format!("{page}/delete"), &[("csrf", csrf.as_str())], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/o/{org}/connections").as_str());
    check!(app.get(&format!("{conns}/{id}"), &ann).await, 404);
}

/// A notification rule is turned off and on again from the settings page,
/// nothing else changed; only a writer of its organization may.
async fn rules_are_disabled_and_enabled(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let origin = admin.origin();
    let rules = format!("/v1/organizations/{org}/rules");
    let rule = check!(
        app.post(
            &rules,
            &ann,
            json!({"name": "runs", "event": "run.failed",
            "channel": {"type": "webhook", "url": "https://hooks.example.com/in"}})
        )
        .await,
        201
    );
    let (id, secret) = (rule.id(), rule.body["channel"]["secret"].clone());
    let settings = format!("/o/{org}/settings");
    let (_, html, _) = admin.get(&settings).await;
    assert!(html.contains(&format!("action=\"/o/{org}/rules/{id}/disable\"")), "{html}");
    let (_, html, _) = viewer.get(&settings).await;
    assert!(!html.contains("/disable\""), "{html}");
    let csrf = admin.csrf(&settings).await;
    let (status, _, headers) =
        admin.post(&format!("/o/{org}/rules/{id}/disable"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], settings.as_str());
    let got = check!(app.get(&format!("{rules}/{id}"), &ann).await, 200).body;
    assert_eq!(got["enabled"], false, "{got}");
    assert_eq!((&got["name"], &got["channel"]["url"]), (&json!("runs"), &json!("https://hooks.example.com/in")));
    let (_, html, _) = admin.get(&settings).await;
    assert!(html.contains(&format!("action=\"/o/{org}/rules/{id}/enable\"")), "{html}");
    let (status, _, _) = admin.post(&format!("/o/{org}/rules/{id}/enable"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(check!(app.get(&format!("{rules}/{id}"), &ann).await, 200).body["enabled"], true);
    let audit = check!(app.get(&format!("/v1/organizations/{org}/audit-logs?resource_id={id}"), &ann).await, 200);
    let updates = audit.body["data"].as_array().unwrap().iter().filter(|e| e["action"] == "rule.updated").count();
    assert_eq!(updates, 2, "{}", audit.body);
    if let Some(secret) = secret.as_str() {
        assert!(!audit.body.to_string().contains(secret), "the signing secret stays out of the audit log");
    }

    // The rule's page: a test sent through it, listed with its
    // deliveries; the rule edited, its secret kept; disabled from there.
    let page = format!("/o/{org}/rules/{id}");
    let (_, html, _) = admin.get(&settings).await;
    assert!(html.contains(&format!("<a href=\"{page}\">runs</a>")), "{html}");
    let (status, html, _) = admin.get(&page).await;
    assert!(status == StatusCode::OK && html.contains("Nothing delivered yet."), "{html}");
    let (status, html, _) = admin.post_and_follow(&format!("{page}/test"), &[("csrf", &csrf)], Some(&origin)).await;
    assert!(status == StatusCode::OK && html.contains("Test queued"), "{html}");
    assert!(html.contains("<code>rule.test</code>"), "listed at once: {html}");
    let listed = check!(app.get(&format!("{rules}/{id}/deliveries"), &ann).await, 200).body;
    assert_eq!(listed["data"][0]["event_type"], "rule.test", "{listed}");
    let (status, html, _) = admin
        .post(&page, &[("csrf", &csrf), ("name", "runs"), ("event", "run.failed"), ("url", "ftp://x")], Some(&origin))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="rule-url-error""#), "{html}");
    assert!(html.contains(r#"value="ftp://x""#), "the input kept: {html}");
    let edit = [
        ("csrf", csrf.as_str()),
        ("name", "runs-2"),
        ("event", "run.succeeded"),
        ("url", "https://hooks.example.com/2"),
    ];
    let (status, html, _) = admin.post_and_follow(&page, &edit, Some(&origin)).await;
    assert!(status == StatusCode::OK && html.contains("Saved.") && html.contains("Rule runs-2"), "{html}");
    let got = check!(app.get(&format!("{rules}/{id}"), &ann).await, 200).body;
    assert_eq!(
        (&got["event"], &got["enabled"], &got["channel"]["secret"]),
        (&json!("run.succeeded"), &json!(true), &json!("***")),
        "{got}"
    );
    let (status, _, headers) =
        admin.post(&format!("{page}/disable"), &[("csrf", &csrf), ("from", "rule")], Some(&origin)).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (StatusCode::SEE_OTHER, page.as_str()));
    let (status, _, _) = admin.post(&format!("{page}/enable"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // A Viewer reads the page, sends nothing; the API says the same.
    let (status, html, _) = viewer.get(&page).await;
    assert!(status == StatusCode::OK && !html.contains("Send a test"), "{html}");
    let vic = app.token("vic@example.com");
    check!(app.post(&format!("{rules}/{id}/test"), &vic, json!({})).await, 403);

    // A Viewer may not; another organization's Admin finds nothing.
    let csrf_v = viewer.csrf(&settings).await;
    let (status, _, _) =
        viewer.post(&format!("/o/{org}/rules/{id}/disable"), &[("csrf", &csrf_v)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}/settings")).await;
    for o in [&other, &org] {
        for action in ["disable", "test"] {
            let path = format!("/o/{o}/rules/{id}/{action}");
            let (status, _, _) = stranger.post(&path, &[("csrf", &csrf_e)], Some(&origin)).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        }
        assert_eq!(stranger.get(&format!("/o/{o}/rules/{id}")).await.0, StatusCode::NOT_FOUND);
    }
    let eve = app.token("eve@example.com");
    check!(app.post(&format!("{rules}/{id}/test"), &eve, json!({})).await, 404);
    assert_eq!(check!(app.get(&format!("{rules}/{id}"), &ann).await, 200).body["enabled"], true);
}

/// An Admin renames the organization and deletes it from the settings
/// page; a bad name is refused there, and no one else may.
async fn an_organization_is_renamed_and_deleted(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let origin = admin.origin();
    let settings = format!("/o/{org}/settings");
    let (_, html, _) = admin.get(&settings).await;
    assert!(html.contains(&format!("action=\"/o/{org}/rename\"")), "{html}");
    let (_, html, _) = viewer.get(&settings).await;
    assert!(!html.contains("/rename\"") && !html.contains("Delete organization"), "{html}");
    let csrf = admin.csrf(&settings).await;
    let (status, _, headers) =
        admin.post(&format!("/o/{org}/rename"), &[("csrf", &csrf), ("name", "Acme Analytics")], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], settings.as_str());
    let got = check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200).body;
    assert_eq!(got["name"], "Acme Analytics", "{got}");
    let (status, html, _) =
        admin.post(&format!("/o/{org}/rename"), &[("csrf", &csrf), ("name", "  ")], Some(&origin)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("role=\"alert\""), "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="org-name-error""#), "at its field: {html}");
    // A new organization refused: on the organizations' page, at its field.
    let (status, html, _) = admin.post("/orgs", &[("csrf", &csrf), ("name", "  ")], Some(&origin)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("<h1>Organizations</h1>") && html.contains(r#"aria-describedby="org-name-error""#), "{html}");
    // An invitation refused: at its field, the address kept.
    let (status, html, _) = admin
        .post(
            &format!("/o/{org}/invitations"),
            &[("csrf", &csrf), ("email", "not-an-address"), ("role", "Viewer")],
            Some(&origin),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(
        html.contains(r#"value="not-an-address" aria-invalid="true" aria-describedby="inv-email-error""#),
        "{html}"
    );

    // Nobody else: a Viewer is refused, another organization's Admin finds nothing.
    let csrf_v = viewer.csrf(&settings).await;
    for action in ["rename", "delete"] {
        let (status, _, _) = viewer
            .post(&format!("/o/{org}/{action}"), &[("csrf", csrf_v.as_str()), ("name", "Mine")], Some(&origin))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}/settings")).await;
    let (status, _, _) = stranger.post(&format!("/o/{org}/delete"), &[("csrf", csrf_e.as_str())], Some(&origin)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200);

    let (status, _, headers) = admin.post(&format!("/o/{org}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/");
    check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 404);
    check!(app.get(&format!("/v1/organizations/{other}"), &app.token("eve@example.com")).await, 200);
}

async fn flows_are_verified_from_their_page(app: TestApp) {
    use sqlx::Connection;
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let file = app.org_files(&org).join("shop.db");
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
    sqlx::query(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    )
    .execute(&mut c)
    .await
    .unwrap();
    drop(c);
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("wh", "wh.db")).await, 201).id();
    let body = json!({"name": "items", "source_connection_id": shop, "destination_connection_id": wh,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body).await, 201).id();
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    let flow_page = format!("/o/{org}/flows/{flow}");
    let origin = admin.origin();

    // Not verified yet; only a writer is offered the button.
    let (_, html, _) = viewer.get(&flow_page).await;
    assert!(html.contains("Not verified yet") && !html.contains("Verify now"), "{html}");
    let csrf_v = viewer.csrf(&flow_page).await;
    let (status, _, _) = viewer.post(&format!("{flow_page}/verify"), &[("csrf", &csrf_v)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, html, _) = admin.get(&flow_page).await;
    assert!(html.contains(&format!("action=\"{flow_page}/verify\"")), "{html}");
    let csrf = admin.csrf(&flow_page).await;
    let (status, html, _) = admin.post(&format!("{flow_page}/verify"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Verification queued"), "{html}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let l = check!(app.get(&format!("{base}/flows/{flow}/verifications"), &ann).await, 200);
        if l.body["data"][0]["status"] == "matched" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", l.body);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The outcome on the flow's page and on its runs' pages.
    let (_, html, _) = viewer.get(&flow_page).await;
    assert!(html.contains(r#"class="badge ok">matched<"#) && html.contains("<code>items</code>"), "{html}");
    let run = check!(app.get(&format!("{base}/flows/{flow}/runs"), &ann).await, 200).body["data"][0]["id"].clone();
    let (_, html, _) = viewer.get(&format!("/o/{org}/runs/{}", run.as_str().unwrap())).await;
    assert!(
        html.contains("The flow&#39;s last verification") || html.contains("The flow's last verification"),
        "{html}"
    );
    assert!(html.contains(r#"class="badge ok">matched<"#), "{html}");
    // Another organization's Admin cannot verify this flow.
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}")).await;
    for o in [&other, &org] {
        let (status, _, _) =
            stranger.post(&format!("/o/{o}/flows/{flow}/verify"), &[("csrf", &csrf_e)], Some(&origin)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{o}");
    }
}

sluice_tests::on_both_backends!(
    flows_are_verified_from_their_page,
    an_organization_is_renamed_and_deleted,
    rules_are_disabled_and_enabled,
    connections_are_edited_from_their_page,
    signing_in_and_csrf,
    a_login_link_signs_in_once,
    every_page_renders_and_a_viewer_cannot_write,
    integrations_and_long_lists,
    invitations_are_resent_and_revoked,
    failures_say_why_and_the_audit_log_pages,
    flows_are_repointed_and_never_into_themselves,
    an_invitation_link_is_followed_and_accepted,
    assets_are_deleted_and_the_gateway_shows_its_quota,
    tables_are_picked_from_the_source,
    connections_are_created_from_their_spec,
    contracts_are_made_and_edited_in_the_catalog,
    runs_are_listed_by_status_and_day
);

/// A failed run says why on its page and in the flows list; a full
/// refresh is offered no cursor to set; times say their zone; a skip link
/// leads to the content; an unknown page of an organization is the
/// console's 404; the audit log pages on and filters by day.
async fn failures_say_why_and_the_audit_log_pages(app: TestApp) {
    use sqlx::Connection;
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let file = app.org_files(&org).join("shop.db");
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'a');
         CREATE TABLE events (id INTEGER PRIMARY KEY, at TEXT); INSERT INTO events VALUES (1, '2026-01-01');",
    )
    .execute(&mut c)
    .await
    .unwrap();
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("wh", "wh.db")).await, 201).id();
    let body = json!({"name": "shop-sync", "source_connection_id": shop, "destination_connection_id": wh,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"},
            {"source_entity": "events", "sync_mode": "incremental_append", "cursor_field": "at"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body).await, 201).id();
    assert_eq!(sluice_tests::run_flow(&app, &ann, &org, &flow).await["status"], "succeeded");
    // The source loses a table: the next run fails on it.
    sqlx::query("DROP TABLE events").execute(&mut c).await.unwrap();
    drop(c);
    let failed = sluice_tests::run_flow(&app, &ann, &org, &flow).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let cause = failed["entities"].as_array().unwrap().iter().find_map(|e| e["error"].as_str()).unwrap().to_string();
    let escaped = cause.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let run_page = format!("/o/{org}/runs/{}", failed["id"].as_str().unwrap());
    let (_, html, _) = viewer.get(&run_page).await;
    assert!(html.contains("Cause of failure") && html.contains(&escaped), "{cause}: {html}");
    // The log by level, and as text to download.
    let (_, errors_only, _) = viewer.get(&format!("{run_page}?level=error")).await;
    assert!(
        errors_only.contains("<li class=\"error\">") && !errors_only.contains("<li class=\"info\">"),
        "{errors_only}"
    );
    assert!(errors_only.contains("data-level=\"error\""), "{errors_only}");
    let (status, text, headers) = viewer.get(&format!("{run_page}/log.txt")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/plain"), "{headers:?}");
    assert!(headers["content-disposition"].to_str().unwrap().starts_with("attachment"), "{headers:?}");
    assert!(
        text.lines().any(|l| l.contains(" UTC info ")) && text.lines().any(|l| l.contains(" UTC error [events] ")),
        "{text}"
    );
    let (_, text, _) = viewer.get(&format!("{run_page}/log.txt?level=error")).await;
    assert!(!text.is_empty() && text.lines().all(|l| l.contains(" UTC error ")), "{text}");
    let (status, _, _) = viewer.get(&format!("{run_page}?level=loud")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Another organization's member reads none of it, by either path.
    let (other, stranger) = stranger(&app).await;
    let run_id = failed["id"].as_str().unwrap();
    for o in [&other, &org] {
        let (status, _, _) = stranger.get(&format!("/o/{o}/runs/{run_id}/log.txt")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{o}");
    }
    let (_, html, _) = viewer.get(&format!("/o/{org}/flows")).await;
    assert!(html.contains("class=\"error cause\"") && html.contains("events: "), "{html}");
    // Times say they are UTC; a skip link leads to the content.
    assert!(html.contains(" UTC<") && html.contains(r##"class="skip" href="#main""##), "{html}");
    // Set and Reset only where the mode keeps a cursor.
    let flow_page = format!("/o/{org}/flows/{flow}");
    let (_, html, _) = admin.get(&flow_page).await;
    assert_eq!(html.matches(&format!("action=\"{flow_page}/cursors/set\"")).count(), 1, "{html}");
    assert!(html.contains("full refresh: no cursor"), "{html}");

    // An unknown page of the organization: the console's own 404.
    let (status, html, headers) = viewer.get(&format!("/o/{org}/no/such/page")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"), "{html}");

    // The audit log pages on: 105 renames make more than a page.
    for i in 0..105 {
        check!(app.patch(&format!("{base}/flows/{flow}"), &ann, json!({"name": format!("shop-sync-{i}")})).await, 200);
    }
    let audit = format!("/o/{org}/audit");
    let (_, first, _) = viewer.get(&audit).await;
    assert!(!first.contains(">flow.created<"), "the oldest entries are on a later page");
    let at = first.find("rel=\"next\"").map(|i| first[..i].rfind("href=\"").unwrap() + 6).expect("a next page");
    let next = first[at..].split('"').next().unwrap().replace("&amp;", "&");
    assert!(next.contains("after="), "{next}");
    let (status, second, _) = viewer.get(&next).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(second.contains(">flow.created<") && second.contains("Newest"), "{second}");
    // An update links to its resource and says what changed.
    assert!(first.contains(&format!("<a href=\"{flow_page}\"><strong>shop-sync-104</strong></a>")), "{first}");
    assert!(first.contains("<code>name</code> shop-sync-103 → shop-sync-104"), "{first}");
    // Filtered by day: around today has them all, later nothing; a filter
    // carries into the next page's link.
    // (a day either side of today: the test may cross midnight)
    let today = time::OffsetDateTime::now_utc().date();
    let day = |d: time::Date| format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day());
    let (before, after) = (today.previous_day().unwrap(), today.next_day().unwrap());
    let (_, html, _) = viewer.get(&format!("{audit}?since={}&until={}", day(before), day(after))).await;
    assert!(html.contains(">flow.updated<") && html.contains("since="), "{html}");
    let (_, html, _) = viewer.get(&format!("{audit}?since={}", day(after.next_day().unwrap()))).await;
    assert!(html.contains("Nothing recorded."), "{html}");
    let (status, html, _) = viewer.get(&format!("{audit}?until=soon")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("YYYY-MM-DD"), "{html}");
}

/// A new flow's destination does not start as its source; a flow is
/// pointed at another connection from its page; a flow that would write
/// the table it reads is refused (API and console).
async fn flows_are_repointed_and_never_into_themselves(app: TestApp) {
    let Team { org, ann, admin, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("a-shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("b-wh", "wh.db")).await, 201).id();
    let lake = check!(app.post(&format!("{base}/connections"), &ann, lite("c-lake", "lake.db")).await, 201).id();
    let file = app.org_files(&org).join("shop.db");
    {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
        sqlx::query("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)").execute(&mut c).await.unwrap();
    }
    // The new-flow form: the source is the first connection listed, the
    // destination the next (never the same one).
    let (_, html, _) = admin.get(&format!("/o/{org}/flows/new")).await;
    let select = |id: &str| {
        let at = html.find(&format!("id=\"{id}\"")).unwrap();
        html[at..at + html[at..].find("</select>").unwrap()].to_string()
    };
    let values = |part: &str| part.split("value=\"").skip(1).map(|v| v[..36].to_string()).collect::<Vec<_>>();
    let picked = |part: &str| {
        let sel = part.find(" selected").expect("an option selected");
        let value = part[..sel].rfind("value=\"").unwrap() + 7;
        part[value..value + 36].to_string()
    };
    let listed = values(&select("flow-source"));
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(picked(&select("flow-source")), listed[0]);
    assert_eq!(picked(&select("flow-destination")), listed[1]);
    // Into itself: refused, naming the mapping.
    let body = |dest: &str| {
        json!({"name": "items", "source_connection_id": shop, "destination_connection_id": dest,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}})
    };
    let refused = check!(app.post(&format!("{base}/flows"), &ann, body(&shop)).await, 422);
    assert!(refused.body.to_string().contains("config.mappings[0].dest_entity"), "{}", refused.body);
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body(&wh)).await, 201).id();
    // Re-pointed from its page.
    let flow_page = format!("/o/{org}/flows/{flow}");
    let config = check!(app.get(&format!("{base}/flows/{flow}"), &ann).await, 200).body["config"].to_string();
    let csrf = admin.csrf(&flow_page).await;
    let origin = admin.origin();
    let form = |dest: &str| -> Vec<(&'static str, String)> {
        vec![
            ("csrf", csrf.clone()),
            ("name", "items".to_string()),
            ("source", shop.clone()),
            ("destination", dest.to_string()),
            ("schedule", String::new()),
            ("config", config.clone()),
        ]
    };
    let f = form(&lake);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, html, _) = admin.post_and_follow(&flow_page, &f, Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Saved."), "{html}");
    let saved = check!(app.get(&format!("{base}/flows/{flow}"), &ann).await, 200).body;
    assert_eq!(saved["destination_connection_id"], lake.as_str(), "{saved}");
    // Into itself from the page: refused on the form, nothing changed.
    let f = form(&shop);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (_, html, _) = admin.post(&flow_page, &f, Some(&origin)).await;
    assert!(html.contains("would be read from and written to the same table"), "{html}");
    let saved = check!(app.get(&format!("{base}/flows/{flow}"), &ann).await, 200).body;
    assert_eq!(saved["destination_connection_id"], lake.as_str(), "{saved}");
}

/// An invitation made in the console gives a link; the invitee follows
/// it (signing in first), sees what it offers, accepts and lands in the
/// organization. Someone else following it is refused.
async fn an_invitation_link_is_followed_and_accepted(app: TestApp) {
    let Team { org, admin, .. } = team(&app).await;
    let origin = admin.origin();
    let settings = format!("/o/{org}/settings");
    let csrf = admin.csrf(&settings).await;
    let form = [("csrf", csrf.as_str()), ("email", "carol@example.com"), ("role", "Editor")];
    let (status, html, _) = admin.post(&format!("/o/{org}/invitations"), &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    // At the console's configured address.
    let start = html.find("http://console.example/invitations/accept?token=").expect("an invitation link");
    let link = html[start..].split('"').next().unwrap().replace("&amp;", "&");
    let path = link.strip_prefix("http://console.example").unwrap().to_string();

    // Not signed in: to the sign-in page, which comes back here.
    let (status, _, headers) = Browser::new(&app).get(&path).await;
    assert!(status.is_redirection(), "{status}");
    assert!(headers["location"].to_str().unwrap().starts_with("/login?next="), "{headers:?}");
    // Someone else, signed in: refused.
    let mut dave = Browser::new(&app);
    dave.sign_in(&token_of(&app.token("dave@example.com"))).await;
    let (status, html, _) = dave.get(&path).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    assert!(html.contains("a different e-mail address"), "{html}");
    let csrf_d = dave.csrf("/").await;
    let token = path.split("token=").nth(1).unwrap().to_string();
    let (status, _, _) = dave.post("/invitations/accept", &[("csrf", &csrf_d), ("token", &token)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The invitee: what it offers, then joined.
    let mut carol = Browser::new(&app);
    carol.sign_in(&token_of(&app.token("carol@example.com"))).await;
    let (status, _, _) = carol.get(&format!("/o/{org}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not a member yet");
    let (status, html, _) = carol.get(&path).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Join Acme") && html.contains("<strong>Editor</strong>"), "{html}");
    let csrf = carol.csrf(&path).await;
    // (a token is letters, digits and '_': the link carries it as it is)
    let (status, _, _) = carol.post("/invitations/accept", &[("token", &token)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no CSRF token: refused");
    let (status, _, headers) =
        carol.post("/invitations/accept", &[("csrf", &csrf), ("token", &token)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/o/{org}").as_str());
    let (status, html, _) = carol.get(&format!("/o/{org}")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    // Used once.
    let (status, html, _) = carol.get(&path).await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("this invitation is accepted"), "{html}");
}

/// The gateway page shows this month's validations against the plan and a
/// request to copy; an asset is deleted from its page (asked first), by a
/// writer only, and only in its own organization.
async fn assets_are_deleted_and_the_gateway_shows_its_quota(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let body = json!({"name": "customer", "fields": [{"name": "user_id", "type": "integer", "required": true}]});
    let asset = check!(app.post(&format!("{base}/data-assets"), &ann, body).await, 201).id();
    let (status, html, _) = viewer.get(&format!("/o/{org}/gateway")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Validations this month: <strong>0</strong> of 1,000"), "{html}");
    let at = html.find("id=\"gw-curl\"").expect("a request to copy");
    let curl = &html[at..at + html[at..].find("</pre>").unwrap()];
    assert!(curl.contains("http://console.example/v1/gateway/validate") && curl.contains(&asset), "{curl}");
    assert!(curl.contains("X-Api-Key: $KEY"), "{curl}");

    let page = format!("/o/{org}/catalog/{asset}");
    let (_, html, _) = viewer.get(&page).await;
    assert!(!html.contains("Delete asset"), "{html}");
    let (_, html, _) = admin.get(&page).await;
    assert!(html.contains("Delete asset") && html.contains("data-confirm=\"Delete this asset"), "{html}");
    let origin = admin.origin();
    let csrf_v = viewer.csrf(&page).await;
    let (status, _, _) = viewer.post(&format!("{page}/delete"), &[("csrf", &csrf_v)], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (other, stranger) = stranger(&app).await;
    let csrf_e = stranger.csrf(&format!("/o/{other}")).await;
    for o in [&other, &org] {
        let (status, _, _) =
            stranger.post(&format!("/o/{o}/catalog/{asset}/delete"), &[("csrf", &csrf_e)], Some(&origin)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{o}");
    }
    check!(app.get(&format!("{base}/data-assets/{asset}"), &ann).await, 200);
    let csrf = admin.csrf(&page).await;
    let (status, _, headers) = admin.post(&format!("{page}/delete"), &[("csrf", &csrf)], Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/o/{org}/catalog").as_str());
    check!(app.get(&format!("{base}/data-assets/{asset}"), &ann).await, 404);
}

/// The new flow's schema tab: the source's tables listed with the key the
/// source declares and a cursor picked from its change time; the ticked
/// tables (and columns) become one flow; problems land on their rows.
async fn tables_are_picked_from_the_source(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("a-shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("b-wh", "wh.db")).await, 201).id();
    {
        use sqlx::Connection;
        let file = app.org_files(&org).join("shop.db");
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
        for ddl in [
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, secret TEXT, created_at TIMESTAMP, updated_at TIMESTAMP)",
            "CREATE TABLE notes (body TEXT)",
            "INSERT INTO items VALUES (1, 'a', 's', '2026-01-01 00:00:00', '2026-01-02 00:00:00')",
        ] {
            sqlx::query(ddl).execute(&mut c).await.unwrap();
        }
    }
    let origin = admin.origin();
    let csrf = admin.csrf(&format!("/o/{org}/flows/new")).await;
    let basics = [
        ("csrf", csrf.clone()),
        ("name", "shop".to_string()),
        ("source", shop.clone()),
        ("destination", wh.clone()),
        ("schedule", "0 * * * *".to_string()),
        ("entity", "items".to_string()),
    ];
    let pairs = |extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        basics.iter().cloned().chain(extra.iter().map(|(k, v)| (*k, v.to_string()))).collect()
    };
    let post = |path: String, f: Vec<(&'static str, String)>| {
        let origin = origin.clone();
        let admin = &admin;
        async move {
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            admin.post(&path, &f, Some(&origin)).await
        }
    };
    // Step two: both tables, items ticked (it came from "Sync this
    // entity…"), keyed by id, incremental on updated_at.
    let (status, html, _) = post(format!("/o/{org}/flows/new"), pairs(&[])).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let row = |html: &str, table: &str| {
        let at = html.find(&format!("<tr data-entity=\"{table}\"")).unwrap_or_else(|| panic!("{table}: {html}"));
        html[at..at + html[at..].find("</tr>").unwrap()].to_string()
    };
    let items = row(&html, "items");
    assert!(items.contains("name=\"e0.sync\" value=\"on\" checked"), "{items}");
    assert!(items.contains("<option value=\"incremental_deduped\" selected>Incremental · deduped by key"), "{items}");
    assert!(items.contains("<option value=\"updated_at\" selected>"), "{items}");
    assert!(items.contains("<option value=\"created_at\">"), "a creation time is offered: {items}");
    assert!(!items.contains("<option value=\"name\""), "text is no cursor: {items}");
    assert!(items.contains("name=\"e0.key\" value=\"id\""), "{items}");
    let notes = row(&html, "notes");
    assert!(!notes.contains("checked aria-label=\"Sync notes\""), "{notes}");
    assert!(notes.contains("<option value=\"full_refresh_overwrite\" selected>"), "{notes}");
    // Nothing ticked: said on the page, nothing created.
    let (status, html, _) =
        post(format!("/o/{org}/flows/build"), pairs(&[("e0.entity", "items"), ("e0.mode", "full_refresh_overwrite")]))
            .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("Tables: tick at least one table to sync"), "{html}");
    // The service's refusal on the row it concerns, the choices kept.
    let refused = [
        ("e0.entity", "items"),
        ("e0.sync", "on"),
        ("e0.mode", "incremental_append"),
        ("e0.cursor", ""),
        ("e0.key", "id"),
        ("e1.entity", "notes"),
        ("e1.sync", "on"),
        ("e1.mode", "full_refresh_append"),
        ("e1.dest", "notes_log"),
    ];
    let (status, html, _) = post(format!("/o/{org}/flows/build"), pairs(&refused)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    let items = row(&html, "items");
    assert!(items.contains("aria-invalid=\"true\" aria-describedby=\"e0-cursor-error\""), "{items}");
    assert!(items.contains("id=\"e0-cursor-error\""), "{items}");
    assert!(items.contains("<option value=\"incremental_append\" selected>"), "the pick is kept: {items}");
    assert!(row(&html, "notes").contains("value=\"notes_log\""), "{html}");
    let listed = check!(app.get(&format!("{base}/flows"), &ann).await, 200).body;
    assert_eq!(listed["data"].as_array().unwrap().len(), 0, "{listed}");
    // A Viewer is refused before any work.
    let csrf_v = viewer.csrf(&format!("/o/{org}/flows")).await;
    for step in ["new", "build"] {
        let f = [("csrf", csrf_v.as_str()), ("name", "x"), ("source", shop.as_str()), ("e0.entity", "items")];
        let (status, _, _) = viewer.post(&format!("/o/{org}/flows/{step}"), &f, Some(&origin)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{step}");
    }
    // Two tables, one column left out: one flow.
    let mut picked = refused.to_vec();
    picked[2] = ("e0.mode", "incremental_deduped");
    picked[3] = ("e0.cursor", "updated_at");
    picked.extend([
        ("e0.col", "id"),
        ("e0.col", "name"),
        ("e0.col", "updated_at"),
        ("e0.col", "created_at"),
        ("e0.all", "id"),
        ("e0.all", "name"),
        ("e0.all", "secret"),
        ("e0.all", "created_at"),
        ("e0.all", "updated_at"),
    ]);
    let (status, _, headers) = post(format!("/o/{org}/flows/build"), pairs(&picked)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let flow = headers["location"].to_str().unwrap().rsplit('/').next().unwrap().to_string();
    let f = check!(app.get(&format!("{base}/flows/{flow}"), &ann).await, 200).body;
    assert_eq!(f["name"], "shop");
    assert_eq!(f["schedule"], "0 * * * *");
    assert_eq!(f["destination_connection_id"], wh.as_str());
    let m = &f["config"]["mappings"];
    assert_eq!(m[0]["source_entity"], "items", "{f}");
    assert_eq!(m[0]["sync_mode"], "incremental_deduped");
    assert_eq!(m[0]["cursor_field"], "updated_at");
    assert_eq!(m[0]["primary_key"], "id");
    assert_eq!(m[0]["transform"], json!([{"op": "drop", "field": "secret"}]));
    assert_eq!(m[1]["source_entity"], "notes");
    assert_eq!(m[1]["dest_entity"], "notes_log");
    assert_eq!(m[1]["sync_mode"], "full_refresh_append");
    // It runs: the secret column never reaches the destination.
    let done = sluice_tests::run_flow(&app, &ann, &org, &flow).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let wh_file = app.org_files(&org).join("wh.db");
    use sqlx::Connection;
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", wh_file.display())).await.unwrap();
    let cols: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM pragma_table_info('items') ORDER BY cid").fetch_all(&mut c).await.unwrap();
    let cols: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    assert!(cols.contains(&"updated_at") && !cols.contains(&"secret"), "{cols:?}");

    // A cursor value that is not the column's type: at the entity's
    // input, the value kept.
    let flow_page = format!("/o/{org}/flows/{flow}");
    let csrf = admin.csrf(&flow_page).await;
    let (status, html, _) = admin
        .post(
            &format!("{flow_page}/cursors/set"),
            &[("csrf", &csrf), ("entity", "items"), ("value", "soon")],
            Some(&origin),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"value="soon" aria-invalid="true" aria-describedby="cursor-items-error""#), "{html}");

    // Clear data and resync, from the flow's page: to the run it queued.
    let (_, html, _) = admin.get(&flow_page).await;
    assert!(
        html.contains(&format!("action=\"{flow_page}/resync\"")) && html.contains("Clear data and resync"),
        "{html}"
    );
    let csrf = admin.csrf(&flow_page).await;
    let (status, html, _) = admin
        .post_and_follow(&format!("{flow_page}/resync"), &[("csrf", &csrf), ("entity", "notes")], Some(&origin))
        .await;
    assert!(status == StatusCode::OK && html.contains("Clearing notes") && html.contains("<h1>Run "), "{html}");
    let audit = check!(app.get(&format!("{base}/audit-logs?resource_id={flow}"), &ann).await, 200).body;
    assert!(audit.to_string().contains("flow.entity.cleared"), "{audit}");
}

/// A new connection is a form built from its type's spec (typed inputs,
/// password inputs for credentials, each field's help); a refusal is
/// shown next to each field by its label, the field marked invalid, the
/// input kept (but never a typed credential); a saved edit redirects.
async fn connections_are_created_from_their_spec(app: TestApp) {
    let Team { org, ann, admin, .. } = team(&app).await;
    let origin = admin.origin();
    let list = format!("/o/{org}/connections");
    let (status, html, _) = admin.get(&format!("{list}?type=postgres")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains(r#"<option value="postgres" selected>"#), "{html}");
    assert!(html.contains(r#"id="conn-password" name="cfg.password" type="password""#), "{html}");
    assert!(html.contains(r#"id="conn-port" name="cfg.port" type="number""#), "{html}");
    let (_, html, _) = admin.get(&format!("{list}?type=sqlite")).await;
    assert!(html.contains(r#"<option value="sqlite" selected>"#) && html.contains(r#"id="conn-path""#), "{html}");
    assert!(!html.contains("conn-password"), "{html}");
    assert!(html.contains("database file, relative to the file root"), "the field's help: {html}");

    let csrf = admin.csrf(&list).await;
    let post = |form: Vec<(&'static str, &'static str)>| {
        let mut f = form;
        f.push(("csrf", Box::leak(csrf.clone().into_boxed_str())));
        let origin = origin.clone();
        let admin = &admin;
        let path = list.clone();
        async move { admin.post(&path, &f, Some(&origin)).await }
    };
    // Refused: each problem next to its field, marked, the input kept.
    let (status, html, _) = post(vec![
        ("connector_type", "postgres"),
        ("name", "warehouse"),
        ("cfg.host", "127.0.0.1"),
        ("cfg.port", "not-a-port"),
        ("cfg.user", "postgres"),
        ("cfg.password", "typed-secret"),
        ("action", "create"),
    ])
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="conn-port-error conn-port-hint""#), "{html}");
    assert!(html.contains(r#"<span class="field-error" id="conn-port-error">"#), "{html}");
    assert!(
        html.contains(r#"aria-invalid="true" aria-describedby="conn-database-error conn-database-hint""#),
        "{html}"
    );
    assert!(html.contains("<li>Port: ") && !html.contains("<code>config.port</code>"), "labels, not paths: {html}");
    assert!(html.contains(r#"value="not-a-port""#) && html.contains(r#"value="127.0.0.1""#), "kept: {html}");
    assert!(!html.contains("typed-secret"), "a typed credential is not sent back: {html}");
    let listed = check!(app.get(&format!("/v1/organizations/{org}/connections"), &ann).await, 200).body;
    assert_eq!(listed["data"].as_array().unwrap().len(), 0, "nothing created: {listed}");
    // Created from the fields.
    let (status, html, headers) =
        post(vec![("connector_type", "sqlite"), ("name", "lite"), ("cfg.path", "lite.db"), ("action", "create")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let at = headers["location"].to_str().unwrap().to_string();
    let id = at.rsplit('/').next().unwrap();
    let c = check!(app.get(&format!("/v1/organizations/{org}/connections/{id}"), &ann).await, 200).body;
    assert_eq!((&c["type"], &c["config"]["path"]), (&json!("sqlite"), &json!("lite.db")), "{c}");
    // Refused as JSON: the JSON comes back, its credentials blanked.
    let (status, html, _) = post(vec![
        ("connector_type", "postgres"),
        ("name", "wh-json"),
        ("config", r#"{"host": "127.0.0.1", "port": "x", "database": "d", "user": "u", "password": "json-secret"}"#),
        ("action", "create"),
    ])
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(!html.contains("json-secret") && html.contains("&quot;password&quot;: &quot;&quot;"), "{html}");
    assert!(html.contains(r#"aria-describedby="conn-config-error""#), "the problem at the JSON: {html}");
    // JSON, when written, wins over the fields.
    let (status, html, _) = post(vec![
        ("connector_type", "sqlite"),
        ("name", "lite-2"),
        ("cfg.path", "ignored.db"),
        ("config", r#"{"path": "json.db"}"#),
        ("action", "create"),
    ])
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let listed = check!(app.get(&format!("/v1/organizations/{org}/connections"), &ann).await, 200).body;
    let json_one = listed["data"].as_array().unwrap().iter().find(|c| c["name"] == "lite-2").cloned().unwrap();
    assert_eq!(json_one["config"]["path"], "json.db", "{json_one}");
    // An edit refused on its page: the field marked; then saved, and
    // redirected to the page, which says so once.
    let csrf = admin.csrf(&at).await;
    let (status, html, _) =
        admin.post(&at, &[("csrf", csrf.as_str()), ("name", ""), ("cfg.path", "lite.db")], Some(&origin)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="edit-name-error""#), "{html}");
    let (status, html, _) = admin
        .post_and_follow(&at, &[("csrf", csrf.as_str()), ("name", "lite-1"), ("cfg.path", "lite.db")], Some(&origin))
        .await;
    assert!(status == StatusCode::OK && html.contains("Saved.") && html.contains("lite-1"), "{html}");

    // A DuckLake among the destination types, with its fields: the catalog
    // as JSON, its password a credential of its own.
    let (_, html, _) = admin.get(&format!("{list}?type=ducklake")).await;
    assert!(html.contains(r#"<option value="ducklake" selected>"#), "{html}");
    assert!(html.contains(r#"name="cfg.catalog""#) && html.contains(r#"name="cfg.data_path""#), "{html}");
    assert!(html.contains(r#"name="cfg.catalog.password" type="password""#), "{html}");
    let (status, html, headers) = post(vec![
        ("connector_type", "ducklake"),
        ("name", "lake"),
        ("cfg.catalog", r#"{"type": "postgres", "host": "127.0.0.1", "database": "lake", "user": "u"}"#),
        ("cfg.catalog.password", "lake-secret"),
        ("cfg.data_path", "lake/data"),
        ("action", "create"),
    ])
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let id = headers["location"].to_str().unwrap().rsplit('/').next().unwrap().to_string();
    let c = check!(app.get(&format!("/v1/organizations/{org}/connections/{id}"), &ann).await, 200).body;
    assert_eq!(c["config"]["catalog"]["host"], "127.0.0.1", "{c}");
    assert_eq!(c["config"]["catalog"]["password"], "***", "the password is a credential: {c}");
    assert!(!c.to_string().contains("lake-secret"), "{c}");
}

/// A contract made by hand in the catalog, then edited: tags and required
/// per field in a table (a new version only when the fields change), all
/// fields as JSON (a removed field is a breaking version); problems shown
/// at their field.
async fn contracts_are_made_and_edited_in_the_catalog(app: TestApp) {
    let Team { org, ann, admin, viewer, .. } = team(&app).await;
    let origin = admin.origin();
    let catalog = format!("/o/{org}/catalog");
    let csrf = admin.csrf(&catalog).await;
    let (status, html, _) = admin
        .post(&catalog, &[("csrf", &csrf), ("name", "orders"), ("fields", "[{\"name\": \"id\"")], Some(&origin))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="contract-fields-error""#), "{html}");
    let fields = r#"[{"name": "id", "type": "integer", "required": true}, {"name": "email", "type": "string"}]"#;
    let form = [("csrf", csrf.as_str()), ("name", "orders"), ("description", ""), ("fields", fields)];
    let (status, _, headers) = admin.post(&catalog, &form, Some(&origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let page = headers["location"].to_str().unwrap().to_string();
    let id = page.rsplit('/').next().unwrap().to_string();
    let api = format!("/v1/organizations/{org}/data-assets/{id}");
    assert_eq!(check!(app.get(&api, &ann).await, 200).body["version"], 1);

    // The table: tags and a description; a new version for the tags.
    let table = |description: &'static str, tags: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("name", "orders".to_string()),
            ("description", description.to_string()),
            ("f0.type", "integer".to_string()),
            ("f0.required", "on".to_string()),
            ("f0.tags", String::new()),
            ("f1.type", "string".to_string()),
            ("f1.tags", tags.to_string()),
        ]
    };
    let send = |f: Vec<(&'static str, String)>| {
        let (admin, origin, page) = (&admin, origin.clone(), page.clone());
        async move {
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            admin.post_and_follow(&page, &f, Some(&origin)).await
        }
    };
    let (status, html, _) = send(table("Orders of the shop", "sensitive, pii")).await;
    assert!(status == StatusCode::OK && html.contains("Saved as version 2."), "{html}");
    let got = check!(app.get(&api, &ann).await, 200).body;
    assert_eq!(got["fields"][1]["tags"], json!(["sensitive", "pii"]), "{got}");
    assert_eq!(got["description"], "Orders of the shop");
    // The description alone: no new version.
    let (_, html, _) = send(table("Orders", "sensitive, pii")).await;
    assert!(html.contains("Saved.") && !html.contains("version 3"), "{html}");
    assert_eq!(check!(app.get(&api, &ann).await, 200).body["version"], 2);
    // As JSON: a wrong type is shown at the JSON; a removed field is a
    // breaking version.
    let (status, html, _) = admin
        .post(
            &page,
            &[("csrf", &csrf), ("mode", "json"), ("fields", r#"[{"name": "id", "type": "int"}]"#)],
            Some(&origin),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains(r#"aria-invalid="true" aria-describedby="asset-fields-error""#), "{html}");
    let just_id = r#"[{"name": "id", "type": "integer", "required": true}]"#;
    let (status, html, _) =
        admin.post_and_follow(&page, &[("csrf", &csrf), ("mode", "json"), ("fields", just_id)], Some(&origin)).await;
    assert!(status == StatusCode::OK && html.contains("Saved as version 3."), "{html}");
    let versions = check!(app.get(&format!("{api}/versions"), &ann).await, 200).body;
    assert_eq!(versions["data"][2]["change"], "breaking", "{versions}");

    // An edit of a version the page no longer shows is refused.
    let stale = [("csrf", csrf.as_str()), ("version", "2"), ("name", "orders"), ("f0.type", "string")];
    let (status, html, _) = admin.post(&page, &stale, Some(&origin)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("it is now version 3"), "{html}");
    assert_eq!(check!(app.get(&api, &ann).await, 200).body["version"], 3);

    // A Viewer sees no edit, and is refused one.
    let (_, html, _) = viewer.get(&page).await;
    assert!(!html.contains("Edit the fields as JSON") && !html.contains("New contract"), "{html}");
    let csrf_v = viewer.csrf(&catalog).await;
    let (status, _, _) = viewer.post(&page, &[("csrf", &csrf_v), ("name", "mine")], Some(&origin)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// Every run of a flow on its runs page, filtered by status and by days
/// (UTC); a day that is no date is said on the page.
async fn runs_are_listed_by_status_and_day(app: TestApp) {
    let Team { org, ann, admin, .. } = team(&app).await;
    let base = format!("/v1/organizations/{org}");
    let lite = |name: &str, path: &str| json!({"name": name, "type": "sqlite", "capability": "both", "config": {"path": path}});
    let shop = check!(app.post(&format!("{base}/connections"), &ann, lite("shop", "shop.db")).await, 201).id();
    let wh = check!(app.post(&format!("{base}/connections"), &ann, lite("wh", "wh.db")).await, 201).id();
    {
        use sqlx::Connection;
        let file = app.org_files(&org).join("shop.db");
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
        sqlx::query("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)").execute(&mut c).await.unwrap();
    }
    let body = json!({"name": "items", "source_connection_id": shop, "destination_connection_id": wh,
        "config": {"mappings": [{"source_entity": "items", "sync_mode": "full_refresh_overwrite"}]}});
    let flow = check!(app.post(&format!("{base}/flows"), &ann, body).await, 201).id();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = sluice_tests::run_flow(&app, &ann, &org, &flow).await;
        assert_eq!(r["status"], "succeeded", "{r}");
        ids.push(r["id"].as_str().unwrap().to_string());
    }
    let page = format!("/o/{org}/flows/{flow}/runs");
    let (_, html, _) = admin.get(&format!("/o/{org}/flows/{flow}")).await;
    assert!(html.contains(&format!("href=\"{page}\"")), "linked from the flow: {html}");
    let shown = |html: &str| ids.iter().filter(|id| html.contains(&format!("/runs/{id}\""))).count();
    let (status, html, _) = admin.get(&page).await;
    assert_eq!((status, shown(&html)), (StatusCode::OK, 3), "{html}");
    let today = time::OffsetDateTime::now_utc().date();
    let d = |d: time::Date| format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day());
    let (yesterday, tomorrow) = (today.previous_day().unwrap(), today.next_day().unwrap());
    for (query, want) in [
        (format!("status=succeeded&since={}&until={}", d(yesterday), d(tomorrow)), 3),
        ("status=failed".to_string(), 0),
        (format!("until={}", d(yesterday)), 0),
        (format!("since={}", d(tomorrow)), 0),
        (format!("since={}", d(yesterday)), 3),
    ] {
        let (status, html, _) = admin.get(&format!("{page}?{query}")).await;
        assert_eq!((status, shown(&html)), (StatusCode::OK, want), "{query}: {html}");
    }
    let (status, html, _) = admin.get(&format!("{page}?until=soon")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{html}");
    assert!(html.contains("YYYY-MM-DD"), "{html}");
}
