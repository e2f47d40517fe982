//! Support for the end-to-end tests: [`spawn_app`] starts the real Sluice
//! application on a random port against a fresh metadata store, either a
//! temporary SQLite file or a new PostgreSQL database that is dropped when
//! the test ends.

use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use sluice::Application;
use sluice::settings::{LogFormat, Settings};
use sluice_auth::TokenIssuer;
use sluice_domain::shared::secret::{Secret, random_base62};
use std::path::PathBuf;
use std::time::Duration;

pub const JWT_SECRET: &str = "e2e-test-secret-e2e-test-secret";
pub const INTERNAL_KEY: &str = "e2e-internal-key";

/// The PostgreSQL server the tests use; overridable for other machines.
pub fn postgres_admin_url() -> String {
    #[allow(clippy::disallowed_methods)] // a test switch, not configuration
    std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub use sluice_testkit::services::required as services_required;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const PG_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A connection to the test MariaDB, or `None` (loudly, and failing under
/// CI) when it is unreachable.
pub async fn mariadb() -> Option<sqlx::MySqlConnection> {
    use sqlx::Connection;
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(c) => Some(c),
        Err(e) => {
            sluice_testkit::services::unavailable("MariaDB on 127.0.0.1:3306", e, "start it");
            None
        }
    }
}

/// Runs SQL on the `test` database.
/// A connection's body for schema `schema` of the shared test server's
/// `test` database, usable both ways.
pub fn pg_connection(name: &str, schema: &str) -> Value {
    serde_json::json!({"name": name, "type": "postgres", "capability": "both",
        "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}})
}

pub async fn pg_exec(sql: String) {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(PG_TEST_URL).await.expect("PostgreSQL");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.expect("the SQL runs");
}

/// A PostgreSQL schema of the test's own in database `test`, dropped on drop.
pub struct PgSchema {
    pub name: String,
}

/// Creates a fresh schema, or `None` (loudly) when PostgreSQL is
/// unreachable outside CI.
pub async fn pg_schema() -> Option<PgSchema> {
    use sqlx::Connection;
    match sqlx::PgConnection::connect(PG_TEST_URL).await {
        Ok(mut c) => {
            let name = format!("e2e_{}", random_base62(10).to_lowercase());
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                .execute(&mut c)
                .await
                .expect("create schema");
            Some(PgSchema { name })
        }
        Err(e) => {
            sluice_testkit::services::unavailable("PostgreSQL on 127.0.0.1:5432", e, "start it");
            None
        }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            use sqlx::Connection;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let mut c = sqlx::PgConnection::connect(PG_TEST_URL).await.map_err(std::io::Error::other)?;
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                    .execute(&mut c)
                    .await
                    .map_err(std::io::Error::other)
                    .map(|_| ())
            })
        })
        .join();
    }
}

/// Log lines of this test process, captured from the first call on.
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    pub fn contents(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

#[derive(Clone)]
struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs a subscriber that keeps every log line (debug and up) of the
/// process in memory, once; answers a handle on them.
pub fn capture_logs() -> Logs {
    static BUF: std::sync::OnceLock<std::sync::Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    let buf = BUF.get_or_init(|| {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let w = LogWriter(buf.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_ansi(false)
            .with_writer(move || w.clone())
            .try_init();
        buf
    });
    Logs(buf.clone())
}

/// What to clean up when the test ends.
enum Cleanup {
    File(PathBuf),
    PgDatabase { admin_url: String, name: String },
}

pub struct TestApp {
    pub base: String,
    file_root: PathBuf,
    metadata_file: Option<PathBuf>,
    /// The metadata store's PostgreSQL database name, on that backend.
    pub metadata_database: Option<String>,
    pub client: reqwest::Client,
    pub backend: Backend,
    issuer: TokenIssuer,
    sessions: Option<sluice::ConsoleSessions>,
    cleanup: Vec<Cleanup>,
}

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn id(&self) -> String {
        self.body["id"].as_str().unwrap_or_else(|| panic!("no id in {}", self.body)).to_string()
    }
}

/// Credentials for one request.
#[derive(Clone, Debug)]
pub enum Auth {
    None,
    Token(String),
    Key(String),
}

/// Optional settings of a test app.
#[derive(Default, Clone)]
pub struct Options {
    pub oauth: std::collections::BTreeMap<String, sluice_clients::oauth::ProviderConfig>,
    /// Rate limits other than the defaults.
    pub rate_limits: Option<sluice_http::ratelimit::RateLimitConfig>,
    /// A payment provider (a fake Stripe in the test).
    pub stripe: Option<sluice::settings::StripeSettings>,
    /// Deliveries may reach loopback (the tests' receivers).
    pub webhook_allow_private: bool,
    /// Console sign-in with OpenID Connect (a fake provider in the test).
    pub oidc: Option<sluice_clients::oidc::OidcConfig>,
    /// `SLUICE_ENTITY_CONCURRENCY` other than the default.
    pub entity_concurrency: Option<usize>,
    /// The process executes no runs (`serve --no-worker`): queued runs
    /// stay queued.
    pub no_worker: bool,
}

/// Starts the app on `backend`; `None` when PostgreSQL is unreachable outside
/// CI (the test then says so loudly and passes). With `CI=true` an
/// unreachable server fails the test.
pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, Options::default()).await
}

pub async fn spawn_app_with(backend: Backend, options: Options) -> Option<TestApp> {
    sluice::install_crypto_provider();
    let tag = random_base62(10).to_lowercase();
    let data_dir = std::env::temp_dir().join(format!("sluice-e2e-{tag}"));
    let data_dir_root = data_dir.clone();
    let mut cleanup = vec![Cleanup::File(data_dir.clone())];
    let database_url = match backend {
        Backend::Sqlite => {
            let file = std::env::temp_dir().join(format!("sluice-e2e-{tag}.db"));
            for suffix in ["", "-wal", "-shm", ".lock"] {
                cleanup.push(Cleanup::File(PathBuf::from(format!("{}{suffix}", file.display()))));
            }
            format!("sqlite://{}?mode=rwc", file.display())
        }
        Backend::Postgres => {
            let admin_url = postgres_admin_url();
            let name = format!("sluice_e2e_{tag}");
            let admin = match tokio::time::timeout(Duration::from_secs(5), Database::connect(&admin_url)).await {
                Ok(Ok(db)) => db,
                other => {
                    let why = match other {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".into(),
                    };
                    sluice_testkit::services::unavailable(&format!("PostgreSQL at {admin_url}"), why, "start it");
                    return None;
                }
            };
            admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.expect("create the test database");
            admin.close().await.ok();
            let url = match admin_url.rsplit_once('/') {
                Some((base, _)) => format!("{base}/{name}"),
                None => panic!("SLUICE_TEST_POSTGRES_URL must name a database"),
            };
            cleanup.push(Cleanup::PgDatabase { admin_url, name });
            url
        }
    };
    let file_root = data_dir_root.join("files");
    let metadata_file = match backend {
        Backend::Sqlite => Some(std::env::temp_dir().join(format!("sluice-e2e-{tag}.db"))),
        Backend::Postgres => None,
    };
    let metadata_database = (backend == Backend::Postgres).then(|| format!("sluice_e2e_{tag}"));
    let settings = Settings {
        database_url,
        listen: "127.0.0.1:0".into(),
        data_dir,
        jwt_hs256_secret: Some(Secret::new(JWT_SECRET)),
        jwt_jwks: None,
        jwt_issuer: "sluice".into(),
        jwt_audience: "sluice".into(),
        internal_api_key: Some(Secret::new(INTERNAL_KEY)),
        master_key: None,
        public_url: "http://127.0.0.1".into(),
        log_format: LogFormat::Text,
        file_root: file_root.clone(),
        aws: None,
        oauth: options.oauth.clone(),
        console_url: "http://console.example".into(),
        run_worker: !options.no_worker,
        run_lease: sluice::settings::DEFAULT_RUN_LEASE,
        entity_concurrency: options
            .entity_concurrency
            .unwrap_or(sluice_domain::sync::engine::run::DEFAULT_ENTITY_CONCURRENCY),
        read_ranges: sluice_domain::sync::engine::entity::DEFAULT_READ_RANGES,
        rate_limits: options.rate_limits.or(Some(Default::default())),
        stripe: options.stripe.clone(),
        // The tests' receivers listen on loopback.
        webhook_allow_private: options.webhook_allow_private,
        oidc: options.oidc.clone(),
        secret_policy: Default::default(),
    };
    let sessions = sluice::ConsoleSessions::from_settings(&settings);
    let app = Application::build(settings).await.expect("the application starts");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped());
    Some(TestApp {
        base,
        file_root,
        metadata_file,
        metadata_database,
        // An idle connection is dropped well before the server's keep-alive
        // ends, so no request goes out on a connection the server is closing.
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .expect("http client"),
        backend,
        issuer: TokenIssuer::new(JWT_SECRET.as_bytes().to_vec(), "sluice", "sluice"),
        sessions,
        cleanup,
    })
}

impl TestApp {
    /// The directory under which each organization has its own.
    pub fn file_root(&self) -> &std::path::Path {
        &self.file_root
    }

    /// The organization's own directory, where its file and SQLite
    /// connections resolve (created).
    pub fn org_files(&self, org: &str) -> PathBuf {
        let dir = self.file_root.join(org);
        std::fs::create_dir_all(&dir).expect("the organization's directory");
        dir
    }

    /// The metadata store's SQLite file, on that backend.
    pub fn metadata_file(&self) -> Option<&std::path::Path> {
        self.metadata_file.as_deref()
    }

    /// The bytes of the SQLite metadata store (database and WAL), to check
    /// what is stored in plain text.
    pub fn metadata_bytes(&self) -> Vec<u8> {
        let Some(f) = &self.metadata_file else { return Vec::new() };
        let mut out = std::fs::read(f).unwrap_or_default();
        out.extend(std::fs::read(format!("{}-wal", f.display())).unwrap_or_default());
        out
    }

    /// A token with any claims, validly signed with the app's HS256 secret.
    pub fn token_with_claims(&self, claims: Value) -> String {
        use base64::Engine;
        use hmac::{KeyInit, Mac};
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
        let input = format!("{}.{}", b64(&serde_json::json!({"alg": "HS256", "typ": "JWT"})), b64(&claims));
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(JWT_SECRET.as_bytes()).expect("a key");
        mac.update(input.as_bytes());
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{input}.{sig}")
    }

    /// A console login link's path and query for `email`, valid for `ttl`
    /// (as `sluice login-link` prints it, without the host).
    pub fn login_link(&self, email: &str, ttl: Duration) -> String {
        self.sessions.as_ref().expect("the test app holds an HS256 secret").login_link("", email, ttl)
    }

    /// A session token for `email`.
    pub fn token(&self, email: &str) -> Auth {
        Auth::Token(self.issuer.issue(email, Some(email), None, Duration::from_secs(600)).expect("token"))
    }

    /// A request to `path` with `auth`'s credentials.
    fn request(&self, method: Method, path: &str, auth: &Auth) -> reqwest::RequestBuilder {
        let req = self.client.request(method, format!("{}{}", self.base, path));
        match auth {
            Auth::None => req,
            Auth::Token(t) => req.bearer_auth(t),
            Auth::Key(k) => req.header("X-Api-Key", k),
        }
    }

    /// Sends a request and reads the answer whole.
    async fn answer(req: reqwest::RequestBuilder) -> Resp {
        let res = req.send().await.expect("request sent");
        let status = res.status();
        let headers = res.headers().clone();
        let text = res.text().await.expect("body read");
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Resp { status, headers, body }
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        auth: &Auth,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = self.request(method, path, auth);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Self::answer(req).await
    }

    /// Sends `text` as the body with `content_type` (YAML, say).
    pub async fn send_text(&self, method: Method, path: &str, auth: &Auth, text: &str, content_type: &str) -> Resp {
        Self::answer(self.request(method, path, auth).header("Content-Type", content_type).body(text.to_string())).await
    }

    pub async fn get(&self, path: &str, auth: &Auth) -> Resp {
        self.send(Method::GET, path, auth, None, &[]).await
    }

    pub async fn post(&self, path: &str, auth: &Auth, body: Value) -> Resp {
        self.send(Method::POST, path, auth, Some(body), &[]).await
    }

    pub async fn put(&self, path: &str, auth: &Auth, body: Value) -> Resp {
        self.send(Method::PUT, path, auth, Some(body), &[]).await
    }

    pub async fn patch(&self, path: &str, auth: &Auth, body: Value) -> Resp {
        self.send(Method::PATCH, path, auth, Some(body), &[]).await
    }

    pub async fn delete(&self, path: &str, auth: &Auth) -> Resp {
        self.send(Method::DELETE, path, auth, None, &[]).await
    }

    /// Creates a file connection `name` (source and destination) on the
    /// organization's folder `path`; answers its id.
    pub async fn file_connection(
        &self,
        auth: &Auth,
        org: &str,
        name: &str,
        path: &str,
        format: Option<&str>,
    ) -> String {
        let mut config = json!({"path": path});
        if let Some(format) = format {
            config["format"] = json!(format);
        }
        let body = json!({"name": name, "type": "file", "capability": "both", "config": config});
        crate::check!(self.post(&format!("/v1/organizations/{org}/connections"), auth, body).await, 201).id()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        for c in self.cleanup.drain(..) {
            match c {
                Cleanup::File(p) => {
                    let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
                }
                Cleanup::PgDatabase { admin_url, name } => {
                    // Drop cannot await; a helper thread with its own runtime can.
                    let _ = std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                        rt.block_on(async {
                            let admin = Database::connect(&admin_url).await?;
                            admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
                            admin.close().await
                        })
                        .map_err(std::io::Error::other)
                    })
                    .join();
                }
            }
        }
    }
}

/// Asserts a status, printing the body when it differs.
/// One test per backend for each `async fn name(app: TestApp)` named:
/// `sqlite::name` always runs, `postgres::name` needs PostgreSQL (a failure
/// naming it when it is down, unless `SLUICE_TEST_SKIP_SERVICES=1`). The module calling it imports `spawn_app` and `Backend`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $name() {
                let app = super::spawn_app(super::Backend::Sqlite).await.expect("SQLite always starts");
                super::$name(app).await;
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $name() {
                if let Some(app) = super::spawn_app(super::Backend::Postgres).await {
                    super::$name(app).await;
                }
            })*
        }
    };
}

#[macro_export]
macro_rules! check {
    ($resp:expr, $status:expr) => {{
        let r = $resp;
        assert_eq!(r.status.as_u16(), $status, "body: {}", r.body);
        r
    }};
}

/// Queues a run of `flow` and polls it to its end (deadline 60 s).
pub async fn run_flow(app: &TestApp, auth: &Auth, org: &str, flow: &str) -> Value {
    let queued = check!(app.post(&format!("/v1/organizations/{org}/flows/{flow}/run"), auth, json!({})).await, 202);
    assert_eq!(queued.body["status"], "queued");
    wait_run(app, auth, org, &queued.id()).await
}

/// Waits (up to 60 s) for run `id` to end: the run as it ended.
pub async fn wait_run(app: &TestApp, auth: &Auth, org: &str, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = check!(app.get(&format!("/v1/organizations/{org}/runs/{id}"), auth).await, 200);
        let status = r.body["status"].as_str().unwrap().to_string();
        if !["queued", "running"].contains(&status.as_str()) {
            return r.body;
        }
        assert!(std::time::Instant::now() < deadline, "run {id} still {status} after 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A destination entity's rows read back through the API (preview, up to
/// 1,000), by id.
pub async fn preview_rows(app: &TestApp, auth: &Auth, org: &str, conn: &str, entity: &str) -> Vec<Value> {
    let p = check!(
        app.post(
            &format!("/v1/organizations/{org}/connections/{conn}/preview"),
            auth,
            json!({"entity": entity, "limit": 1000})
        )
        .await,
        200
    );
    let mut rows = p.body["records"].as_array().unwrap().clone();
    rows.sort_by_key(|r| r["id"].as_i64().or_else(|| r["id"].as_str().and_then(|s| s.parse().ok())).unwrap_or(0));
    rows
}

/// Ann's organization "Acme" with a PostgreSQL connection (source and
/// destination) on the shared server for each `(name, schema)`: Ann, the
/// organization's id and the connections' ids in order.
pub async fn org_with_pg_schemas(app: &TestApp, schemas: &[(&str, &str)]) -> (Auth, String, Vec<String>) {
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let conns = format!("/v1/organizations/{org}/connections");
    let mut ids = Vec::new();
    for (name, schema) in schemas {
        let body = json!({"name": name, "type": "postgres", "capability": "both",
            "config": {"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}});
        ids.push(check!(app.post(&conns, &ann, body).await, 201).id());
    }
    (ann, org, ids)
}
