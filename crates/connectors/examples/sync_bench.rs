//! The sync engine against its targets (docs/benchmarks.md): on a table of
//! mixed types (bigint key, bigint, text, jsonb, numeric(12,2), two
//! timestamptz) in PostgreSQL, measures in one run:
//!  (1) the physical limit: psql binary COPY pipe into an empty table with its key;
//!  (2) the raw incremental: the 1% changed rows copied in binary into a
//!      staging table and merged with one INSERT … ON CONFLICT;
//!  (3) Sluice full refresh PostgreSQL → PostgreSQL; (3b) the first
//!      incremental load with no target (loaded like a full refresh) and (3c)
//!      into an existing empty table (staged and merged);
//!  (4) Sluice incremental_deduped after 1% of the rows changed;
//!  (5) Sluice full refresh PostgreSQL → MariaDB and → SQLite;
//! and the peak memory of the process running the syncs. Every timed step
//! starts after a CHECKPOINT, so that none pays for its predecessor's dirty
//! pages; (2) and (4) are the median of three rounds, for 1% of the rows
//! spread evenly (every 100th key: about every other page) and for the
//! newest 1% (the highest keys: a few pages). psql connects without TLS,
//! as the syncs do.
//!
//!   cargo run --release -p sluice-connectors --example sync_bench [ROWS]

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::Capability;
use sluice_domain::connect::service::NewConnection;
use sluice_domain::identity::Principal;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::SystemClock;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::flow::{FlowConfig, Run, Trigger};
use sluice_domain::sync::service::NewFlow;
use sluice_testkit::{FakeSecrets, FakeTokens, InMemoryStore, in_memory_ports};
use sqlx::Connection;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

fn rss_mb(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn psql(sql: &str) {
    let ok = Command::new("psql")
        .env("PGSSLMODE", "disable")
        .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c", sql])
        .status()
        .unwrap()
        .success();
    assert!(ok, "{sql}");
}

fn psql_value(sql: &str) -> String {
    let out = Command::new("psql")
        .env("PGSSLMODE", "disable")
        .args(["-q", "-A", "-t", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c", sql])
        .output()
        .unwrap();
    assert!(out.status.success(), "{sql}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Rounds of each incremental measurement.
const ROUNDS: usize = 3;

fn shell(cmd: &str) -> f64 {
    let t = Instant::now();
    assert!(Command::new("bash").env("PGSSLMODE", "disable").arg("-c").arg(cmd).status().unwrap().success(), "{cmd}");
    t.elapsed().as_secs_f64()
}

struct Bench {
    sluice: Sluice,
    p: Principal,
    org: OrgId,
}

impl Bench {
    async fn conn(&self, name: &str, t: &str, config: serde_json::Value) -> ConnectionId {
        self.sluice
            .connect
            .create_connection(
                &self.p,
                self.org,
                NewConnection {
                    name: name.into(),
                    integration_id: None,
                    connector_type: t.into(),
                    capability: Capability::Both,
                    config: serde_json::from_value(config).unwrap(),
                },
            )
            .await
            .unwrap()
            .id
    }

    async fn sync(
        &self,
        name: &str,
        src: ConnectionId,
        dst: ConnectionId,
        mapping: serde_json::Value,
    ) -> (sluice_domain::shared::ids::FlowId, f64, Run) {
        let config: FlowConfig = serde_json::from_value(json!({"mappings": [mapping]})).unwrap();
        let f = self.sluice.sync.create_flow(&self.p, self.org, NewFlow::active(name, src, dst, config)).await.unwrap();
        let (secs, run) = self.run(f.id).await;
        (f.id, secs, run)
    }

    async fn run(&self, flow: sluice_domain::shared::ids::FlowId) -> (f64, Run) {
        self.sluice.sync.trigger_run(&self.p, self.org, flow, Trigger::Manual).await.unwrap();
        let r = self.sluice.engine.claim_run("bench").await.unwrap().unwrap();
        let t = Instant::now();
        let done = self.sluice.engine.execute_run(r).await;
        assert_eq!(done.status, sluice_domain::sync::flow::RunStatus::Succeeded, "{:?}", done.error);
        (t.elapsed().as_secs_f64(), done)
    }
}

#[tokio::main]
async fn main() {
    let rows: i64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let changed = rows / 100;
    let tag = sluice_domain::shared::secret::random_base62(6).to_lowercase();
    let (src, dst) = (format!("sb_src_{tag}"), format!("sb_dst_{tag}"));
    psql(&format!(
        "CREATE SCHEMA {src}; CREATE SCHEMA {dst};
         CREATE TABLE {src}.t (id bigint PRIMARY KEY, a bigint NOT NULL, s text, j jsonb, n numeric(12,2), ts1 timestamptz, updated timestamptz NOT NULL);
         INSERT INTO {src}.t SELECT g, g * 7, 'row ' || g || ' some text of moderate length', jsonb_build_object('k', g, 'tag', 'x' || (g % 100)),
             (g % 100000) / 100.0, timestamptz '2025-01-01' + g * interval '1 minute', timestamptz '2026-01-01' + g * interval '1 millisecond'
           FROM generate_series(1, {rows}) g;
         CREATE INDEX ON {src}.t (updated);
         CREATE TABLE {dst}.pipe (LIKE {src}.t INCLUDING ALL);"
    ));
    psql(&format!("VACUUM ANALYZE {src}.t"));
    let q = |sql: String| format!("psql -q -h 127.0.0.1 -U postgres -d test -c \"{sql}\"");
    let checkpoint = || psql("CHECKPOINT");
    println!(
        "table: {rows} rows of (bigint key, bigint, text, jsonb, numeric(12,2), timestamptz, timestamptz); 1% = {changed} rows\n"
    );

    // (1) The physical limit.
    checkpoint();
    let pipe = shell(&format!(
        "{} | {}",
        q(format!("COPY {src}.t TO STDOUT (FORMAT binary)")),
        q(format!("COPY {dst}.pipe FROM STDIN (FORMAT binary)"))
    ));

    let store = InMemoryStore::new();
    let root = std::env::temp_dir().join(format!("sluice-syncbench-{tag}"));
    std::fs::create_dir_all(&root).unwrap();
    let mut ports = in_memory_ports(&store, Arc::new(SystemClock));
    ports.connectors = Arc::new(Registry::new(root.clone()));
    ports.secrets = Arc::new(FakeSecrets::default());
    let sluice = Sluice::new(ports);
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("bench", "bench@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Bench".into(), slug: None }).await.unwrap().id;
    let b = Bench { sluice, p, org };
    let pg = |schema: &str| json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"});
    let s = b.conn("src", "postgres", pg(&src)).await;
    let d = b.conn("dst", "postgres", pg(&dst)).await;
    let rss_before = rss_mb("VmRSS");

    // (3) Full refresh PostgreSQL → PostgreSQL.
    checkpoint();
    let (_, full, _) = b
        .sync("full", s, d, json!({"source_entity": "t", "dest_entity": "full", "sync_mode": "full_refresh_overwrite"}))
        .await;
    // (3b) The first incremental load: no cursor and no target table, so it
    // loads like a full refresh; then the same into an existing empty table,
    // which stages and merges checkpoint by checkpoint (the only path every
    // first load took before).
    checkpoint();
    let (inc_flow, first_inc, _) = b
        .sync("inc", s, d, json!({"source_entity": "t", "dest_entity": "inc", "sync_mode": "incremental_deduped", "cursor_field": "updated", "cursor_lookback": "0", "primary_key": "id"}))
        .await;
    psql(&format!("CREATE TABLE {dst}.inc_staged (LIKE {src}.t INCLUDING ALL)"));
    checkpoint();
    let (_, first_staged, _) = b
        .sync("inc-staged", s, d, json!({"source_entity": "t", "dest_entity": "inc_staged", "sync_mode": "incremental_deduped", "cursor_field": "updated", "cursor_lookback": "0", "primary_key": "id"}))
        .await;
    // (2) and (4): rounds of 1% changed, each merged raw (into the pipe's
    // table) and by Sluice (into its own). Changed rows move past the newest
    // cursor value. No lookback (the default re-reads a minute behind the
    // cursor, 60,000 rows of this table): the raw incremental takes none.
    let mut incrementals = Vec::new();
    for (pattern, filter) in [("spread", "id % 100 = 0".to_string()), ("newest", format!("id > {}", rows - changed))] {
        let (mut raw, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let from = psql_value(&format!("SELECT max(updated) FROM {src}.t"));
            psql(&format!(
                "UPDATE {src}.t SET a = a + 1, updated = timestamptz '{from}' + interval '1 second' + id * interval '1 microsecond' WHERE {filter}"
            ));
            checkpoint();
            raw.push(shell(&format!(
                "psql -q -h 127.0.0.1 -U postgres -d test -c \"COPY (SELECT * FROM {src}.t WHERE updated > timestamptz '{from}') TO STDOUT (FORMAT binary)\" > /tmp/sluice-stage-{tag}.bin && \
                 psql -q -h 127.0.0.1 -U postgres -d test -v ON_ERROR_STOP=1 \
                   -c 'CREATE TEMP TABLE stage (LIKE {src}.t)' \
                   -c \"\\\\copy stage FROM '/tmp/sluice-stage-{tag}.bin' (FORMAT binary)\" \
                   -c 'INSERT INTO {dst}.pipe SELECT * FROM stage ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a, updated = EXCLUDED.updated'"
            )));
            checkpoint();
            let (secs, run) = b.run(inc_flow).await;
            let written = run.entities[0].rows_written as i64;
            assert!((changed..=changed + 1).contains(&written), "{written} rows written, {changed} changed");
            ours.push(secs);
        }
        incrementals.push((pattern, median(raw), median(ours)));
    }
    let _ = std::fs::remove_file(format!("/tmp/sluice-stage-{tag}.bin"));
    let dupes = psql_value(&format!("SELECT count(*) - count(DISTINCT id) FROM {dst}.inc"));
    let same = psql_value(&format!("SELECT count(*) FROM ((TABLE {src}.t) EXCEPT (TABLE {dst}.inc)) x"));
    assert_eq!((dupes.as_str(), same.as_str()), ("0", "0"), "the incremental destination equals the source");

    // (5) Other destinations.
    let my_db = format!("sb_{tag}");
    let mut my = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {my_db}"))).execute(&mut my).await.unwrap();
    let m = b.conn("mysql", "mysql", json!({"host": "127.0.0.1", "database": my_db, "user": "root"})).await;
    let l = b.conn("sqlite", "sqlite", json!({"path": "bench.db"})).await;
    checkpoint();
    let (_, to_my, _) =
        b.sync("to-mysql", s, m, json!({"source_entity": "t", "sync_mode": "full_refresh_overwrite"})).await;
    checkpoint();
    let (_, to_lite, _) =
        b.sync("to-sqlite", s, l, json!({"source_entity": "t", "sync_mode": "full_refresh_overwrite"})).await;
    let peak = rss_mb("VmHWM");

    let rate = |secs: f64, n: i64| n as f64 / secs;
    let pipe_rate = rate(pipe, rows);
    println!("{:<56} {:>9} {:>11} {:>9}", "step", "seconds", "rows/s", "ratio");
    println!("{:<56} {:>9.2} {:>11.0} {:>9}", "(1) psql binary COPY pipe (table with key)", pipe, pipe_rate, "1.00×");
    println!(
        "{:<56} {:>9.2} {:>11.0} {:>8.2}×",
        "(3) sluice full refresh postgres → postgres",
        full,
        rate(full, rows),
        rate(full, rows) / pipe_rate
    );
    for (what, secs) in [
        ("(3b) sluice first incremental load, no target", first_inc),
        ("(3c) … into an existing empty table (staged)", first_staged),
    ] {
        println!("{:<56} {:>9.2} {:>11.0} {:>8.2}×", what, secs, rate(secs, rows), rate(secs, rows) / pipe_rate);
    }
    for (pattern, raw, ours) in &incrementals {
        println!(
            "{:<56} {:>9.3} {:>11.0} {:>9}",
            format!("(2) raw incremental, 1% {pattern} (binary COPY + ON CONFLICT)"),
            raw,
            rate(*raw, changed),
            ""
        );
        println!(
            "{:<56} {:>9.3} {:>11.0} {:>8.2}×",
            format!("(4) sluice incremental_deduped, 1% {pattern} (vs raw)"),
            ours,
            rate(*ours, changed),
            ours / raw
        );
        println!(
            "{:<56} {:>9} {:>11} {:>8.1}%",
            "    … as a share of the full refresh's time",
            "",
            "",
            ours / full * 100.0
        );
    }
    println!(
        "{:<56} {:>9.2} {:>11.0} {:>8.2}×",
        "(5) sluice full refresh postgres → mariadb",
        to_my,
        rate(to_my, rows),
        rate(to_my, rows) / pipe_rate
    );
    println!(
        "{:<56} {:>9.2} {:>11.0} {:>8.2}×",
        "(5) sluice full refresh postgres → sqlite",
        to_lite,
        rate(to_lite, rows),
        rate(to_lite, rows) / pipe_rate
    );
    println!("\nRSS before the syncs {rss_before:.0} MiB; peak RSS of the process over all syncs {peak:.0} MiB");

    psql(&format!("DROP SCHEMA {src} CASCADE; DROP SCHEMA {dst} CASCADE"));
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {my_db}"))).execute(&mut my).await.unwrap();
    let _ = std::fs::remove_dir_all(root);
}
