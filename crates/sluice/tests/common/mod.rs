//! What the process tests share: the `sluice` binary, a server process
//! on a free port, and a small API client.

#![allow(dead_code)] // each test file uses its own part

use serde_json::Value;
use sluice_auth::TokenIssuer;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SECRET: &str = "process-test-secret-process-test";
/// base64 of 32 bytes of 7.
pub const MASTER_KEY: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// The `sluice` binary, built by Cargo for this package's tests.
pub fn sluice_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sluice"))
}

/// PostgreSQL is down: fails the test naming it and how to start it, or,
/// with `SLUICE_TEST_SKIP_SERVICES=1`, records the skip; the caller then
/// returns.
#[track_caller]
pub fn postgres_unreachable(e: impl std::fmt::Display) {
    sluice_testkit::services::unavailable("PostgreSQL on 127.0.0.1:5432", e, "start it");
}

pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn client() -> reqwest::Client {
    sluice::install_crypto_provider();
    reqwest::Client::new()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn spawn(args: &[&str], env: &[(&str, String)]) -> Proc {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null()).env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc(cmd.spawn().unwrap())
}

/// Like [`spawn`], with the process's log (stderr, at `info`) in `log`.
pub fn spawn_logged(args: &[&str], env: &[(&str, String)], log: &Path) -> Proc {
    let mut cmd = Command::new(sluice_bin());
    let file = std::fs::File::create(log).unwrap();
    cmd.args(args).stdout(Stdio::null()).stderr(file).env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc(cmd.spawn().unwrap())
}

/// Runs the binary to its end (at most 30 s): its exit success and stderr.
pub fn run_to_end(args: &[&str], env: &[(&str, String)]) -> (bool, String) {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped()).env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.success(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub async fn wait_healthy(client: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if client.get(format!("{base}/v1/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("sluice at {base} did not become healthy");
}

pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Api {
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let (s, b) = self.call(reqwest::Method::POST, path, Some(body)).await;
        assert!(s == 201 || s == 202 || s == 200, "{path}: {s} {b}");
        b
    }

    pub async fn get(&self, path: &str) -> Value {
        let (s, b) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "{path}: {b}");
        b
    }
}

pub fn env(data: &Path, db: &str, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("SLUICE_DATABASE_URL", db.to_string()),
        ("SLUICE_LISTEN", format!("127.0.0.1:{port}")),
        ("SLUICE_DATA_DIR", data.display().to_string()),
        ("SLUICE_FILE_ROOT", data.join("files").display().to_string()),
        ("SLUICE_JWT_HS256_SECRET", SECRET.to_string()),
        ("SLUICE_MASTER_KEY", MASTER_KEY.to_string()),
    ]
}

pub fn token() -> String {
    TokenIssuer::new(SECRET.as_bytes().to_vec(), "sluice", "sluice")
        .issue("ops@example.com", Some("ops@example.com"), None, Duration::from_secs(3600))
        .unwrap()
}

/// Runs `sql` (several statements) on a PostgreSQL connection.
pub async fn exec(pg: &mut sqlx::PgConnection, sql: String) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pg).await.unwrap();
}

/// Starts `sluice` with `args` and waits until `api` answers.
pub async fn serve(args: &[&str], env: &[(&str, String)], api: &Api) -> Proc {
    let p = spawn(args, env);
    wait_healthy(&api.client, &api.base).await;
    p
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to a process.
pub fn signal(p: &Proc, signal: &str) {
    let ok = Command::new("kill").args([&format!("-{signal}"), &p.0.id().to_string()]).status().unwrap();
    assert!(ok.success(), "kill -{signal}");
}

#[allow(clippy::disallowed_methods)] // a test switch, not configuration
pub fn postgres_admin_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A metadata database of its own on the test PostgreSQL and a data
/// directory for one service: (admin connection, database name, URL,
/// data directory); `None` (skipped, loudly) when PostgreSQL is down.
pub async fn pg_metadata_db(kind: &str) -> Option<(sea_orm::DatabaseConnection, String, String, std::path::PathBuf)> {
    use sea_orm::{ConnectionTrait, Database};
    let admin = match Database::connect(&postgres_admin_url()).await {
        Ok(a) => a,
        Err(e) => {
            postgres_unreachable(e);
            return None;
        }
    };
    let name = format!("sluice_{kind}_{}", sluice_domain::shared::secret::random_base62(8).to_lowercase());
    admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.unwrap();
    let db = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let data = std::env::temp_dir()
        .join(format!("sluice-{kind}-{}", sluice_domain::shared::secret::random_base62(8).to_lowercase()));
    Some((admin, name, db, data))
}

/// A writer of `events (id bigint PRIMARY KEY, v int, pad text)` at `url`:
/// by turns, a transaction of `batch` inserts (ids from 1 on), one of
/// updates of the last `7 × batch` ids (every tenth value over 2 KB,
/// stored out of line), one of deletes of ids older than `10 × batch`,
/// with `pause` between; until the flag answered is set. The task answers
/// how many rows it changed (rows of negative ids are left alone).
pub fn events_writer(
    url: String,
    batch: i64,
    pause: Duration,
) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, tokio::task::JoinHandle<u64>) {
    use sqlx::Connection;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        let (mut changes, mut next, mut t) = (0u64, 1i64, 0u64);
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let sql = match t % 3 {
                0 => {
                    next += batch;
                    format!(
                        "INSERT INTO events SELECT g, 0, 'p' FROM generate_series({}, {}) g",
                        next - batch,
                        next - 1
                    )
                }
                1 => format!(
                    "UPDATE events SET v = v + 1, pad = CASE WHEN id % 10 = 0 THEN \
                     (SELECT string_agg(md5(id::text || i::text || v::text), '') FROM generate_series(1, 80) i) \
                     ELSE 'q' END WHERE id > 0 AND id % 7 = {} AND id >= {}",
                    t % 7,
                    (next - 7 * batch).max(1)
                ),
                _ => format!("DELETE FROM events WHERE id > 0 AND id % 11 = {} AND id < {}", t % 11, next - 10 * batch),
            };
            changes += sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap().rows_affected();
            t += 1;
            tokio::time::sleep(pause).await;
        }
        changes
    });
    (stop, task)
}
