//! The web console in a real browser: headless Chromium driven over the
//! WebDriver protocol (Debian's `chromium` and `chromium-driver`; `.ci/run`
//! installs them) against the real `sluice` binary and a real PostgreSQL.
//!
//! A user signs in with a one-time link, creates an organization and two
//! PostgreSQL connections, tests, discovers and previews the source,
//! creates a flow from the discovered entity, runs it and watches the run
//! page follow the run to "succeeded", sets a cursor, and plans and applies
//! an IaC document. With `SLUICE_SCREENSHOTS=dir` the main pages are saved
//! there as PNG (`docs/console/` holds the committed ones).

mod common;

use common::*;
use serde_json::{Value, json};
use sluice_domain::shared::secret::random_base62;
use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const PG_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session in headless Chromium; the driver stops on drop.
struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Proc,
}

impl Browser {
    async fn start() -> Option<Self> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            sluice_testkit::services::unavailable(
                "Chromium (Debian's chromium and chromium-driver)",
                format!("{CHROMIUM} or {CHROMEDRIVER} is missing"),
                "install them with `apt-get install chromium chromium-driver`",
            );
            return None;
        }
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Proc(child);
        let http = client();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.json::<Value>().await.is_ok_and(|v| v["value"]["ready"] == true)
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not become ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // The console asks before destructive actions: the test says yes.
            "unhandledPromptBehavior": "accept",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000",
                "--force-prefers-reduced-motion"
            ]}
        }}});
        let r: Value = http.post(format!("{base}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = r["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {r}")).to_string();
        Some(Self { http, session: format!("{base}/session/{session}"), driver })
    }

    async fn try_call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut req = self.http.request(method, format!("{}{path}", self.session)).timeout(Duration::from_secs(60));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        match v["value"].get("error") {
            Some(err) => Err(format!("WebDriver {path}: {err}: {}", v["value"]["message"])),
            None => Ok(v["value"].clone()),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body).await.unwrap_or_else(|e| panic!("{e}"))
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None).await.as_str().unwrap().to_string()
    }

    /// The first element matching `css`, waiting up to 10 s for it.
    async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v: Value = self
                .http
                .post(format!("{}/element", self.session))
                .timeout(Duration::from_secs(30))
                .json(&json!({"using": "css selector", "value": css}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if let Some(id) = v["value"][ELEMENT].as_str() {
                return id.to_string();
            }
            assert!(Instant::now() < deadline, "no element {css} on {}: {v}", self.url().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call(reqwest::Method::POST, &format!("/element/{id}/click"), Some(json!({}))).await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(reqwest::Method::POST, &format!("/element/{id}/clear"), Some(json!({}))).await;
        self.call(reqwest::Method::POST, &format!("/element/{id}/value"), Some(json!({"text": text}))).await;
    }

    /// Sets a field's value at once (long JSON and YAML documents).
    async fn set_value(&self, css: &str, text: &str) {
        self.find(css).await;
        let script = "document.querySelector(arguments[0]).value = arguments[1];";
        self.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": [css, text]}))).await;
    }

    async fn text(&self, css: &str) -> String {
        let id = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{id}/text"), None).await.as_str().unwrap_or("").to_string()
    }

    async fn value(&self, css: &str) -> String {
        let id = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{id}/property/value"), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Whether a checkbox is ticked.
    async fn checked(&self, css: &str) -> bool {
        let id = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{id}/property/checked"), None)
            .await
            .as_bool()
            .unwrap_or(false)
    }

    /// Waits up to `secs` for `css`'s text to contain `want`.
    async fn wait_text(&self, css: &str, want: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            // The page may be between two loads: an element gone stale is
            // looked for again.
            let id = self.find(css).await;
            let t = match self.try_call(reqwest::Method::GET, &format!("/element/{id}/text"), None).await {
                Ok(v) => v.as_str().unwrap_or("").to_string(),
                Err(_) => String::new(),
            };
            if t.contains(want) {
                return t;
            }
            assert!(Instant::now() < deadline, "{css} never showed {want:?}; it shows {t:?} on {}", self.url().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves the page as `name.png` under `SLUICE_SCREENSHOTS`, when set.
    async fn screenshot(&self, name: &str) {
        #[allow(clippy::disallowed_methods)] // a test switch, not configuration
        let Ok(dir) = std::env::var("SLUICE_SCREENSHOTS") else { return };
        use base64::Engine;
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(PathBuf::from(dir).join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver's process ends with `driver`; ask it to close the
        // browser first, from a thread with its own runtime.
        let (http, session) = (self.http.clone(), self.session.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async { http.delete(session).timeout(Duration::from_secs(10)).send().await.ok() })
        })
        .join();
        let _ = &self.driver;
    }
}

/// Schemas of database `test` for the source and the destination, with
/// `rows` orders in the source; dropped on drop.
struct Schemas {
    src: String,
    dst: String,
}

impl Schemas {
    async fn new(rows: i64) -> Option<Self> {
        let mut pg = match sqlx::PgConnection::connect(PG_TEST_URL).await {
            Ok(c) => c,
            Err(e) => {
                postgres_unreachable(e);
                return None;
            }
        };
        let tag = random_base62(8).to_lowercase();
        let s = Self { src: format!("console_src_{tag}"), dst: format!("console_dst_{tag}") };
        for sql in [
            format!("CREATE SCHEMA {}", s.src),
            format!("CREATE SCHEMA {}", s.dst),
            format!(
                "CREATE TABLE {}.orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), updated_at timestamptz NOT NULL)",
                s.src
            ),
            format!(
                "INSERT INTO {}.orders SELECT g, 'customer ' || (g % 97), (g % 1000) / 10.0, timestamptz '2026-01-01' + g * interval '1 second' FROM generate_series(1, {rows}) g",
                s.src
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut pg).await.unwrap();
        }
        Some(s)
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let names = [self.src.clone(), self.dst.clone()];
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(PG_TEST_URL).await {
                    for n in names {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {n} CASCADE")))
                            .execute(&mut c)
                            .await;
                    }
                }
            })
        })
        .join();
    }
}

fn pg_config(schema: &str) -> String {
    json!({"host": "127.0.0.1", "port": 5432, "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"})
        .to_string()
}

/// The id after `/{segment}/` in a console URL.
fn id_after(url: &str, segment: &str) -> String {
    let at = url.find(&format!("/{segment}/")).unwrap_or_else(|| panic!("no /{segment}/ in {url}")) + segment.len() + 2;
    url[at..].split(['/', '?', '#']).next().unwrap().to_string()
}

#[tokio::test]
async fn a_user_syncs_postgres_from_the_console_and_watches_the_run() {
    const ROWS: i64 = 200_000;
    let Some(schemas) = Schemas::new(ROWS).await else { return };
    let Some(browser) = Browser::start().await else { return };
    let data = std::env::temp_dir().join(format!("sluice-console-{}", random_base62(8).to_lowercase()));
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut env = env(&data, &format!("sqlite://{}?mode=rwc", data.join("meta.db").display()), port);
    env.push(("SLUICE_PUBLIC_URL", base.clone()));
    let _server = spawn(&["serve"], &env);
    let api = Api { client: client(), base: base.clone(), token: token() };
    wait_healthy(&api.client, &base).await;

    // Sign in with a one-time link, as `sluice login-link` prints it.
    let mut cmd = Command::new(sluice_bin());
    cmd.args(["login-link", "--email", "ops@example.com"]).env("RUST_LOG", "warn");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let link = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(link.starts_with(&format!("{base}/login/link?token=")), "{link}");
    browser.go(&base).await;
    assert!(browser.url().await.contains("/login"), "signed out, / asks to sign in");
    browser.screenshot("sign-in").await;
    browser.go(&link).await;
    browser.click("#continue").await;
    browser.wait_text("h1", "Organizations", 10).await;

    // An organization.
    browser.type_into("#org-name", "Acme Analytics").await;
    browser.click("form[action='/orgs'] button").await;
    browser.wait_text("h1", "Acme Analytics", 10).await;
    let org = id_after(&browser.url().await, "o");

    // Two PostgreSQL connections: the destination, then the source.
    let mut ids = Vec::new();
    for (name, schema) in [("warehouse", &schemas.dst), ("app-db", &schemas.src)] {
        browser.go(&format!("{base}/o/{org}/connections")).await;
        browser.type_into("#conn-name", name).await;
        browser.set_value("#conn-config", &pg_config(schema)).await;
        browser.click("button[value=create]").await;
        browser.wait_text("h1", name, 10).await;
        ids.push(id_after(&browser.url().await, "connections"));
    }
    let dst = ids[0].clone();

    // Test, discover and preview the source.
    browser.click("form[action$='/test'] button").await;
    browser.wait_text("main", "Connected in", 20).await;
    // Whether it can capture changes, and if not, why.
    browser.wait_text("p.cdc", "Change data capture", 5).await;
    browser.click("form[action$='/discover'] button").await;
    browser.wait_text("details.entity summary", "orders", 20).await;
    browser.click("details.entity summary").await;
    browser.screenshot("discover").await;
    browser.click("details.entity form.preview button").await;
    let preview = browser.wait_text("table.preview", "customer", 20).await;
    assert!(preview.contains("customer 1"), "{preview}");
    browser.screenshot("preview").await;

    // A flow from the discovered entity.
    // Its tables are picked like Airbyte's schema tab: the discovered
    // table ticked, its cursor picked from its columns.
    browser.click("a.sync-entity").await;
    browser.wait_text("h1", "New flow", 10).await;
    browser.click(&format!("#flow-destination option[value='{dst}']")).await;
    browser.type_into("#flow-name", "orders").await;
    browser.click("#choose-tables").await;
    browser.wait_text("h1", "Choose tables", 20).await;
    let row = "tr[data-entity$='orders']";
    assert!(
        browser.checked(&format!("{row} input[type=checkbox][name$='.sync']")).await,
        "the table from discovery is ticked"
    );
    assert_eq!(browser.value(&format!("{row} select.cursor")).await, "updated_at");
    browser.click(&format!("{row} select.mode option[value='incremental_append']")).await;
    browser.screenshot("tables").await;
    browser.click("form[action$='/flows/build'] button.primary").await;
    browser.wait_text("h1", "orders", 10).await;
    let flow = id_after(&browser.url().await, "flows");

    // Run it and watch the run page follow it to the end, without reload.
    browser.click("form[action$='/run'] button").await;
    browser.wait_text("h1", "Run ", 10).await;
    let run = id_after(&browser.url().await, "runs");
    browser.wait_text("#run-status", "succeeded", 120).await;
    let progress = browser.text("#run-entities tbody").await;
    assert!(progress.contains("200,000"), "rows read and written shown: {progress}");
    let log = browser.text("#run-log").await;
    assert!(!log.trim().is_empty(), "the log streamed");
    browser.screenshot("run").await;
    let r = api.get(&format!("/v1/organizations/{org}/runs/{run}")).await;
    assert_eq!(r["status"], "succeeded");
    let mut pg = sqlx::PgConnection::connect(PG_TEST_URL).await.unwrap();
    let (copied,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {}.orders", schemas.dst)))
        .fetch_one(&mut pg)
        .await
        .unwrap();
    assert_eq!(copied, ROWS);

    // Set the cursor back to the start of the year.
    browser.go(&format!("{base}/o/{org}/flows/{flow}")).await;
    let cursor_value = browser.value("input.cursorinput").await;
    assert!(cursor_value.starts_with("2026-01-03"), "the cursor is the newest updated_at: {cursor_value}");
    browser.type_into("input.cursorinput", "2026-01-01T00:00:00Z").await;
    browser.click("form[action$='/cursors/set'] button").await;
    browser.wait_text("p.notice", "set to", 10).await;
    browser.screenshot("flow").await;
    let state = api.get(&format!("/v1/organizations/{org}/flows/{flow}/state")).await;
    assert!(state.to_string().contains("2026-01-01"), "{state}");

    // Plan and apply an IaC document that adds a flow.
    let doc = r#"version: "1"
flows:
  - name: orders-hourly
    source_connection: app-db
    destination_connection: warehouse
    schedule: "0 * * * *"
    config:
      mappings:
        - source_entity: orders
          dest_entity: orders_copy
          sync_mode: full_refresh_overwrite
      depends_on:
        - {flow: orders, on: success}
"#;
    browser.go(&format!("{base}/o/{org}/iac")).await;
    assert!(browser.value("#iac-doc").await.contains("name: orders"), "the export fills the editor");
    browser.set_value("#iac-doc", doc).await;
    browser.click("button[value=plan]").await;
    browser.wait_text("#iac-result", "orders-hourly", 10).await;
    assert!(browser.text("#iac-result").await.contains("create"));
    browser.screenshot("iac-plan").await;
    browser.click("button[value=apply]").await;
    browser.wait_text("#iac-result h2", "Applied", 10).await;
    let flows = api.get(&format!("/v1/organizations/{org}/flows")).await;
    assert!(flows["data"].as_array().unwrap().iter().any(|f| f["name"] == "orders-hourly"), "{flows}");
    // The topology draws the dependency as an edge between the two.
    browser.go(&format!("{base}/o/{org}/topology")).await;
    let svg = browser.find("svg.graph path.edge").await;
    assert!(!svg.is_empty());

    // The remaining main pages, for the README.
    for (page, shot, title) in [
        ("", "overview", "Acme Analytics"),
        ("/flows", "flows", "Flows"),
        ("/topology", "topology", "Topology"),
        ("/audit", "audit", "Audit"),
        ("/settings", "settings", "Settings"),
    ] {
        browser.go(&format!("{base}/o/{org}{page}")).await;
        browser.wait_text("h1", title, 10).await;
        browser.screenshot(shot).await;
    }
    // On a phone's width the same pages still read: no horizontal scroll
    // of the page itself (wide tables scroll in their own box).
    browser.call(reqwest::Method::POST, "/window/rect", Some(json!({"width": 390, "height": 844}))).await;
    for (page, shot) in [
        (format!("/runs/{run}"), "phone-run"),
        ("/flows".to_string(), "phone-flows"),
        (format!("/flows/{flow}"), "phone-flow"),
        ("/audit".to_string(), "phone-audit"),
    ] {
        browser.go(&format!("{base}/o/{org}{page}")).await;
        browser.find("h1").await;
        let script = "return document.documentElement.scrollWidth <= window.innerWidth + 1;";
        let fits =
            browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": []}))).await;
        let why = "const clipped = (e) => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) { if (getComputedStyle(p).overflowX !== 'visible') return p.tagName; } return ''; }; const all = [...document.querySelectorAll('body *')].map(e => [e, e.getBoundingClientRect().right]).sort((x, y) => y[1] - x[1]).slice(0, 8); return document.documentElement.scrollWidth + ' ' + window.innerWidth + ' ' + document.body.scrollWidth + ' :: ' + all.map(([e, r]) => e.tagName + '.' + e.className + '#' + e.id + ' r=' + Math.round(r) + ' clip=' + clipped(e)).join(' | ');";
        let wide = browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": why, "args": []}))).await;
        assert_eq!(fits, true, "{page} is wider than a phone: {wide}");
        // The navigation takes at most two rows (its sections in one).
        let rows = "const tops = new Set([...document.querySelectorAll('header.top > *')].map(e => { const r = e.getBoundingClientRect(); return Math.round((r.top + r.bottom) / 2); })); return tops.size;";
        let rows =
            browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": rows, "args": []}))).await;
        assert!(rows.as_u64().is_some_and(|r| r <= 2), "{page}: the header takes {rows} rows");
        browser.screenshot(shot).await;
    }
    browser.call(reqwest::Method::POST, "/window/rect", Some(json!({"width": 1280, "height": 1000}))).await;

    // The organization switcher: arrow keys move through the list without
    // leaving the page; Enter goes to the one picked.
    api.post("/v1/organizations", json!({"name": "Beta"})).await;
    browser.go(&format!("{base}/o/{org}")).await;
    browser.wait_text("h1", "Acme Analytics", 10).await;
    browser.find("#org-switch").await;
    let focus = "document.getElementById('org-switch').focus();";
    browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": focus, "args": []}))).await;
    // Keys pressed as a keyboard does (W3C actions on the focused select).
    let press = |keys: &[&str]| {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| [json!({"type": "keyDown", "value": k}), json!({"type": "keyUp", "value": k})])
            .collect();
        json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})
    };
    // Towards the other organization, whichever end of the list this is.
    let first = "return document.getElementById('org-switch').selectedIndex === 0;";
    let first = browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": first, "args": []}))).await;
    let toward = if first == true { "\u{E015}" } else { "\u{E013}" };
    browser.call(reqwest::Method::POST, "/actions", Some(press(&[toward]))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(browser.url().await.contains(&org), "arrow keys left the page: {}", browser.url().await);
    let picked = "return document.getElementById('org-switch').value;";
    let picked =
        browser.call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": picked, "args": []}))).await;
    assert_ne!(picked.as_str(), Some(org.as_str()), "the arrow keys moved the pick");
    browser.call(reqwest::Method::POST, "/actions", Some(press(&["\u{E007}"]))).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !browser.url().await.contains(picked.as_str().unwrap()) {
        assert!(Instant::now() < deadline, "Enter did not go to the picked organization: {}", browser.url().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.go(&format!("{base}/o/{org}")).await;

    // The added flow is deleted from its own page (the console asks
    // first), and the browser lands on the flow list.
    let hourly = flows["data"].as_array().unwrap().iter().find(|f| f["name"] == "orders-hourly").unwrap()["id"].clone();
    browser.go(&format!("{base}/o/{org}/flows/{}", hourly.as_str().unwrap())).await;
    browser.click("form[action$='/delete'] button").await;
    browser.wait_text("h1", "Flows", 10).await;
    let flows = api.get(&format!("/v1/organizations/{org}/flows")).await;
    assert!(flows["data"].as_array().unwrap().iter().all(|f| f["id"] != hourly), "{flows}");
    let _ = std::fs::remove_dir_all(&data);
}
