//! The servers and tools the tests use (PostgreSQL, MariaDB, `moto_server`,
//! Chromium…): a test whose server is down fails naming it and how to start
//! it, unless `SLUICE_TEST_SKIP_SERVICES=1` opts out. Then the test says it
//! is skipped on the terminal and in a ledger the run shares, and the
//! `sluice-tests` package's last test binary (`skipped`) prints the total in
//! the run's last lines.
//!
//! The ledger is one file per `cargo test` process (the parent of every test
//! binary it runs) under `target/<profile>/skipped-tests/`.

use std::fmt::Display;
use std::io::Write as _;
use std::path::PathBuf;

/// Whether the servers the tests use must be up: always, unless
/// `SLUICE_TEST_SKIP_SERVICES=1` says to skip the tests that need them.
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
pub fn required() -> bool {
    !std::env::var("SLUICE_TEST_SKIP_SERVICES").is_ok_and(|v| v == "1")
}

/// The test on this thread needs `what`, which is unavailable (`why`).
/// Fails it naming `what` and `start` (how to get it running), or, with the
/// opt-out, records the skip and returns: the caller then returns too.
#[track_caller]
pub fn unavailable(what: &str, why: impl Display, start: &str) {
    assert!(
        !required(),
        "{what} is unavailable ({why}): {start} (.ci/run does), or set SLUICE_TEST_SKIP_SERVICES=1 to skip the tests that need it"
    );
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    // Straight to the terminal: cargo shows no captured output of a passing test.
    let _ = writeln!(std::io::stderr(), "\n!!! SKIPPED {test}: {what} is unavailable ({why})\n");
    if let Some(file) = ledger() {
        let _ = std::fs::create_dir_all(file.parent().unwrap_or(&file));
        let line = format!("{}\t{}\n", one_line(what), one_line(&test));
        // One short append per skip: atomic enough across the test processes.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// The skips of this `cargo test` run so far, `(what, test)`, and forgets
/// them (and ledgers of runs older than a day).
pub fn take_skipped() -> Vec<(String, String)> {
    let Some(file) = ledger() else { return Vec::new() };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    if let Some(Ok(entries)) = file.parent().map(std::fs::read_dir) {
        let day = std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    text.lines().filter_map(|l| l.split_once('\t')).map(|(w, t)| (w.to_string(), t.to_string())).collect()
}

/// A summary of `skipped` for the run's last lines.
pub fn summary(skipped: &[(String, String)]) -> String {
    if skipped.is_empty() {
        return if required() {
            "every test ran: no server the tests use was skipped".into()
        } else {
            "SLUICE_TEST_SKIP_SERVICES=1, yet no test was skipped: every server the tests use was up".into()
        };
    }
    let mut by_what = std::collections::BTreeMap::<&str, usize>::new();
    for (what, _) in skipped {
        *by_what.entry(what.as_str()).or_default() += 1;
    }
    let parts: Vec<String> = by_what.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    // A test may skip a part per server: count the tests once.
    let n = skipped.iter().map(|(_, t)| t).collect::<std::collections::BTreeSet<_>>().len();
    format!(
        "{n} test{} SKIPPED (SLUICE_TEST_SKIP_SERVICES=1): {}; the lines starting \"!!! SKIPPED\" above name them",
        if n == 1 { " was" } else { "s were" },
        parts.join(", ")
    )
}

/// This run's ledger: `target/<profile>/skipped-tests/<cargo's pid>`, found
/// from the test binary's path (`target/<profile>/deps/<binary>`).
fn ledger() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile = exe.parent()?.parent()?;
    Some(profile.join("skipped-tests").join(std::os::unix::process::parent_id().to_string()))
}

fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// A PostgreSQL server of the test's own, for settings the shared server
/// must keep (`wal_level = logical`, TLS): `initdb` and `postgres` under
/// `runuser -u postgres`, in a temporary directory, on a free port, trust
/// authentication, `fsync` off. Stopped and removed on drop.
pub struct OwnPostgres {
    pub dir: PathBuf,
    pub port: u16,
    child: std::process::Child,
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest PostgreSQL server binaries under `/usr/lib/postgresql`.
fn postgres_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("postgres").exists() && b.join("initdb").exists())
        .collect();
    found.sort();
    found.pop()
}

/// Runs `cmd`, failing the test with its error output.
pub fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl OwnPostgres {
    /// Starts one: `prepare` first puts what the settings name into its
    /// directory (certificates), then the server runs with each of the
    /// `settings` of that directory (`name=value`). `None` (after
    /// [`unavailable`]) where the binaries or `runuser` are missing. Blocks
    /// until the server takes logins.
    pub fn start(
        prepare: impl FnOnce(&std::path::Path),
        settings: impl FnOnce(&std::path::Path) -> Vec<String>,
    ) -> Option<Self> {
        use std::process::{Command, Stdio};
        let Some(bin) = postgres_bin() else {
            unavailable(
                "the PostgreSQL server binaries",
                "none under /usr/lib/postgresql",
                "install Debian's postgresql package",
            );
            return None;
        };
        if Command::new("which").arg("runuser").output().map(|o| !o.status.success()).unwrap_or(true) {
            unavailable("runuser", "not on the PATH", "install util-linux");
            return None;
        }
        let name = format!("sluice-pg-{}", sluice_domain::shared::secret::random_base62(8));
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        prepare(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        run(Command::new("chown").args(["-R", "postgres:postgres", dir.to_str().unwrap()]));
        let data = dir.join("data");
        run(Command::new("runuser").args(["-u", "postgres", "--"]).arg(bin.join("initdb")).args([
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ]));
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(bin.join("postgres"));
        cmd.args(["-D", data.to_str().unwrap(), "-p", &port.to_string(), "-k", dir.to_str().unwrap()]);
        cmd.args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]);
        for s in settings(&dir) {
            cmd.arg("-c").arg(s);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let server = OwnPostgres { dir, port, child };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the test's PostgreSQL did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Accepting connections is not yet taking them: wait for a login.
        while !Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-tAc", "SELECT 1"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(std::time::Instant::now() < deadline, "the test's PostgreSQL takes no logins");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(server)
    }

    /// A URL of database `database` on it.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

/// A MariaDB server of the test's own, for settings the shared server must
/// keep (a ROW binlog): `mariadb-install-db` and `mariadbd` as `mysql`, in
/// a temporary directory, on a free port, root without a password. Stopped
/// and removed on drop.
pub struct OwnMariaDb {
    pub dir: PathBuf,
    pub port: u16,
    child: std::process::Child,
}

impl Drop for OwnMariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl OwnMariaDb {
    /// Starts one with binary logging on (`binlog_format = ROW`, GTIDs in
    /// domain 0) and each of `settings` (`--name=value`). `None` (after
    /// [`unavailable`]) where the binaries are missing. Blocks until the
    /// server takes logins.
    pub fn start(settings: &[&str]) -> Option<Self> {
        use std::process::{Command, Stdio};
        let found = |b: &str| Command::new("which").arg(b).output().is_ok_and(|o| o.status.success());
        let server =
            ["mariadbd", "/usr/sbin/mariadbd"].into_iter().find(|b| found(b) || std::path::Path::new(b).exists());
        let (Some(server), true) = (server, found("mariadb-install-db")) else {
            unavailable("the MariaDB server binaries", "no mariadbd or mariadb-install-db", "install mariadb-server");
            return None;
        };
        let name = format!("sluice-mariadb-{}", sluice_domain::shared::secret::random_base62(8));
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        // A temporary directory of its own: two servers bootstrapping at
        // once in /tmp trip over each other's temporary tables.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        run(Command::new("chown").args(["-R", "mysql:mysql", dir.to_str().unwrap()]));
        let data = dir.join("data");
        run(Command::new("mariadb-install-db").args([
            "--no-defaults",
            &format!("--datadir={}", data.display()),
            "--user=mysql",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            &format!("--tmpdir={}", tmp.display()),
        ]));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = Command::new(server);
        cmd.args(["--no-defaults", "--user=mysql", "--bind-address=127.0.0.1", "--skip-name-resolve"]);
        cmd.arg(format!("--datadir={}", data.display()));
        cmd.arg(format!("--port={port}"));
        cmd.arg(format!("--socket={}", dir.join("sock").display()));
        cmd.arg(format!("--tmpdir={}", tmp.display()));
        cmd.arg(format!("--log-bin={}", dir.join("binlog").display()));
        cmd.args(["--binlog-format=ROW", "--server-id=7", "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0"]);
        cmd.args(settings);
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let server = OwnMariaDb { dir, port, child };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "-e", "SELECT 1"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(std::time::Instant::now() < deadline, "the test's MariaDB takes no logins");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(server)
    }

    /// A URL of database `database` on it.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }
}

/// What DuckDB 1.5.5 (the lake readers' venv, `python`) sees of the
/// files `glob` names (Parquet, or CSV and JSON Lines by their names,
/// gzipped or not): (rows, distinct `id`s). An `s3://` glob is
/// read through `httpfs`, loaded from its wheel, from the S3 endpoint
/// `s3` (an emulator's, with its test credentials).
pub fn duckdb_counts(python: &std::path::Path, glob: &str, s3: Option<&str>) -> (i64, i64) {
    let script = r#"
import glob, json, os, sys, duckdb, duckdb_extension_httpfs
files, endpoint = sys.argv[1], sys.argv[2]
c = duckdb.connect(config={"allow_unsigned_extensions": True, "autoinstall_known_extensions": False,
    "autoload_known_extensions": False})
if endpoint:
    ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions", "*",
        "httpfs.duckdb_extension"))[0]
    c.execute(f"LOAD '{ext}'")
    c.execute(f"""CREATE SECRET (TYPE s3, KEY_ID 'AKIDEXAMPLE', SECRET 'test-secret', REGION 'us-east-1',
        ENDPOINT '{endpoint.split('://')[1]}', URL_STYLE 'path', USE_SSL false)""")
name = files.removesuffix(".gz")
reader = "read_csv" if name.endswith(".csv") else "read_json" if name.endswith(".jsonl") else "read_parquet"
print(json.dumps(c.execute(f"SELECT count(*), count(DISTINCT id) FROM {reader}('{files}')").fetchone()))
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(glob)
        .arg(s3.unwrap_or(""))
        .output()
        .expect("the lake readers' python runs");
    assert!(out.status.success(), "DuckDB: {}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<i64> = serde_json::from_slice(&out.stdout).expect("two counts");
    (v[0], v[1])
}

/// A `moto_server` (the local AWS emulator) of one test, on a free port of
/// loopback; stopped when dropped.
pub struct Moto(std::process::Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a `moto_server`: it and its URL, or `None` (loudly; see
/// [`unavailable`]) when it is not installed.
pub fn moto() -> Option<(Moto, String)> {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = match Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            unavailable("moto_server", e, "install it with `pip install 'moto[server]'`");
            return None;
        }
    };
    let moto = Moto(child);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        if std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_ok() {
            return Some((moto, url));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("moto_server did not start within 30 s");
}

/// Makes the bucket `bucket` on the `moto_server` at `url` (one PUT; the
/// emulator takes it unsigned).
pub fn moto_bucket(url: &str, bucket: &str) {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(host).expect("moto_server answers");
    write!(c, "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "moto_server refused the bucket {bucket}: {answer}");
}

/// The lake tables' independent readers: DuckDB 1.5.5 (with its parquet,
/// json and icu built in) in a venv of their own, `.ci/venv`, which
/// `.ci/run` makes when missing (`SLUICE_LAKE_PYTHON` names another
/// Python that has them). `None`, after [`unavailable`], when there is none.
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
pub fn lake_python() -> Option<PathBuf> {
    let python = match std::env::var_os("SLUICE_LAKE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/venv/bin/python3"),
    };
    let check = std::process::Command::new(&python)
        .args(["-c", "import duckdb; assert duckdb.__version__ == '1.5.5', duckdb.__version__"])
        .output();
    match check {
        Ok(out) if out.status.success() => Some(python),
        Ok(out) => {
            let why = String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default().to_string();
            unavailable("duckdb 1.5.5 (the lake readers' venv)", why, "make it: run .ci/run");
            None
        }
        Err(e) => {
            unavailable(
                "duckdb 1.5.5 (the lake readers' venv)",
                format!("{}: {e}", python.display()),
                "make it: run .ci/run",
            );
            None
        }
    }
}

/// `n` letters that do not compress (a fixed pseudo-random sequence), so
/// that PostgreSQL stores a value of them out of line (TOAST) past 2 KB.
pub fn incompressible(n: usize) -> String {
    let mut x: u64 = 42;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            char::from(b'a' + ((x >> 33) % 26) as u8)
        })
        .collect()
}

/// `count(*)` and `count(DISTINCT id)` of `table` (`schema.table`) of the
/// DuckLake whose SQLite catalog is `catalog` and data `data`, as DuckDB
/// 1.5.5 reads it (see [`ducklake_query`]); `(0, 0)` before the table is.
pub fn ducklake_counts(
    python: &std::path::Path,
    catalog: &std::path::Path,
    data: &std::path::Path,
    table: &str,
) -> (i64, i64) {
    let sql = format!("SELECT count(*), count(DISTINCT id) FROM lake.{table}");
    let v = ducklake_query(python, catalog, data, &sql);
    let first = v.as_array().and_then(|r| r.first()).and_then(|r| r.as_array()).cloned().unwrap_or_default();
    (first.first().and_then(|c| c.as_i64()).unwrap_or(0), first.get(1).and_then(|c| c.as_i64()).unwrap_or(0))
}

/// The rows `sql` answers (a JSON array of arrays; none when a table it
/// reads is not there yet) from the DuckLake whose SQLite catalog is
/// `catalog` and data `data`, attached read-only as `lake` by DuckDB 1.5.5
/// (its ducklake, parquet and sqlite extensions loaded from their wheels).
pub fn ducklake_query(
    python: &std::path::Path,
    catalog: &std::path::Path,
    data: &std::path::Path,
    sql: &str,
) -> serde_json::Value {
    ducklake_duckdb(python, catalog, data, sql, "READ_ONLY")
}

/// Runs `sql` (statements separated by `;`, the last one's rows answered)
/// as a user's DuckDB writing to the lake would, inlining nothing into the
/// catalog (every insert and delete in files).
pub fn ducklake_exec(
    python: &std::path::Path,
    catalog: &std::path::Path,
    data: &std::path::Path,
    sql: &str,
) -> serde_json::Value {
    ducklake_duckdb(python, catalog, data, sql, "DATA_INLINING_ROW_LIMIT 0")
}

fn ducklake_duckdb(
    python: &std::path::Path,
    catalog: &std::path::Path,
    data: &std::path::Path,
    sql: &str,
    options: &str,
) -> serde_json::Value {
    let script = r#"
import glob, json, os, sys, duckdb
import duckdb_extension_ducklake, duckdb_extension_parquet, duckdb_extension_sqlite_scanner
def ext(mod, name):
    return glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", name + ".duckdb_extension"))[0]
c = duckdb.connect(config={"allow_unsigned_extensions": True, "autoinstall_known_extensions": False,
    "autoload_known_extensions": False})
for m, n in [(duckdb_extension_parquet, "parquet"), (duckdb_extension_sqlite_scanner, "sqlite_scanner"),
             (duckdb_extension_ducklake, "ducklake")]:
    c.execute(f"LOAD '{ext(m, n)}'")
c.execute(f"ATTACH 'ducklake:sqlite:{sys.argv[1]}' AS lake (DATA_PATH '{sys.argv[2]}/', {sys.argv[4]})")
*rest, last = [s for s in sys.argv[3].split(";") if s.strip()]
for s in rest:
    c.execute(s)
try:
    print(json.dumps(c.execute(last).fetchall(), default=str))
except duckdb.CatalogException:
    if sys.argv[4] != "READ_ONLY":
        raise
    print("[]")
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(catalog)
        .arg(data)
        .arg(sql)
        .arg(options)
        .output()
        .expect("the lake readers' python runs");
    assert!(out.status.success(), "DuckDB: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

/// The keys under `prefix` in `bucket` of the emulator at `url` (the
/// first 1,000; moto checks no signature).
pub fn moto_keys(url: &str, bucket: &str, prefix: &str) -> Vec<String> {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(host).expect("moto_server answers");
    write!(c, "GET /{bucket}?list-type=2&prefix={prefix} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "moto_server did not list {bucket}: {answer}");
    answer.split("<Key>").skip(1).filter_map(|k| k.split("</Key>").next()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_by_server() {
        let s = summary(&[
            ("PostgreSQL".into(), "a".into()),
            ("MariaDB".into(), "b".into()),
            ("PostgreSQL".into(), "c".into()),
        ]);
        assert!(s.starts_with("3 tests were SKIPPED"), "{s}");
        assert!(s.contains("MariaDB: 1, PostgreSQL: 2"), "{s}");
        let one_test_two_servers = summary(&[("PostgreSQL".into(), "t".into()), ("MariaDB".into(), "t".into())]);
        assert!(one_test_two_servers.starts_with("1 test was SKIPPED"), "{one_test_two_servers}");
        assert!(summary(&[("moto_server".into(), "a".into())]).starts_with("1 test was SKIPPED"));
        assert!(summary(&[]).contains("no "), "zero says so");
    }

    #[test]
    fn a_name_stays_on_its_line() {
        assert_eq!(one_line("a\tb\nc"), "a b c");
    }
}
