//! Connector throughput on a table of mixed types (bigint key, bigint,
//! text, jsonb, numeric(12,2), two timestamptz), next to the physical limit
//! `psql COPY … TO STDOUT (binary) | psql COPY … FROM STDIN (binary)` on the
//! same table. See docs/benchmarks.md.
//!
//!   cargo run --release -p sluice-connectors --example throughput [ROWS]
//!
//! Needs PostgreSQL (127.0.0.1:5432, database `test`) and MariaDB
//! (127.0.0.1:3306, database `test`) and `psql`; works in a schema and
//! databases of its own, dropped at the end.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use sqlx::Connection;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

fn config(t: &str, v: serde_json::Value) -> ResolvedConfig {
    let values: BTreeMap<String, serde_json::Value> = serde_json::from_value(v).unwrap();
    ResolvedConfig { connector_type: t.into(), values, credential_keys: vec![], org: None }
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

async fn read_all(src: &Arc<dyn Source>, entity: &str) -> (Vec<RecordBatch>, f64) {
    let t = Instant::now();
    let mut r =
        src.read(ReadRequest { entity: entity.into(), batch_size: 10_000, ..Default::default() }).await.unwrap();
    let mut out = Vec::new();
    while let Some(b) = r.next_batch().await.unwrap() {
        out.push(b);
    }
    (out, t.elapsed().as_secs_f64())
}

async fn write_all(dst: &Arc<dyn Destination>, schema: &EntitySchema, batches: &[RecordBatch]) -> f64 {
    let t = Instant::now();
    let mut w = dst.open(schema, WriteMode::Overwrite).await.unwrap();
    for b in batches {
        w.write(b).await.unwrap();
    }
    w.finish().await.unwrap();
    t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let rows: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let tag = sluice_domain::shared::secret::random_base62(6).to_lowercase();
    let schema = format!("bench_{tag}");
    let pg_url = "postgres://postgres@127.0.0.1:5432/test";
    let mut pg = sqlx::PgConnection::connect(pg_url).await.expect("PostgreSQL at 127.0.0.1:5432");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.src (id bigint PRIMARY KEY, a bigint NOT NULL, t text, j jsonb, n numeric(12,2), ts1 timestamptz, ts2 timestamptz);
         INSERT INTO {schema}.src SELECT g, g * 7, 'row ' || g || ' some text of moderate length', jsonb_build_object('k', g, 'tag', 'x' || (g % 100)),
             (g % 100000) / 100.0, timestamptz '2026-01-01' + g * interval '1 second', timestamptz '2025-01-01' + g * interval '1 minute'
           FROM generate_series(1, {rows}) g;
         CREATE TABLE {schema}.pipe (LIKE {schema}.src INCLUDING ALL);
         ANALYZE {schema}.src;"
    )))
    .execute(&mut pg)
    .await
    .unwrap();
    println!("table: {rows} rows of (bigint key, bigint, text, jsonb, numeric(12,2), timestamptz, timestamptz)\n");

    // (1) The physical limit: a binary COPY pipe between two psql processes.
    let t = Instant::now();
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "psql -q -h 127.0.0.1 -U postgres -d test -c 'COPY {schema}.src TO STDOUT (FORMAT binary)' | \
             psql -q -h 127.0.0.1 -U postgres -d test -c 'COPY {schema}.pipe FROM STDIN (FORMAT binary)'"
        ))
        .status()
        .expect("psql");
    assert!(status.success());
    let pipe = t.elapsed().as_secs_f64();
    let pipe_rate = rows as f64 / pipe;
    println!("{:<34} {:>10} {:>12} {:>8}", "step", "seconds", "rows/s", "× pipe");
    println!("{:<34} {:>10.2} {:>12.0} {:>8.2}", "psql COPY binary pipe", pipe, pipe_rate, 1.0);

    let root = std::env::temp_dir().join(format!("sluice-bench-{tag}"));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    let pg_cfg = config(
        "postgres",
        json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
    );
    let src = registry.source(&pg_cfg).await.unwrap();
    let (batches, secs) = read_all(&src, "src").await;
    let n: usize = batches.iter().map(RecordBatch::len).sum();
    assert_eq!(n as u64, rows);
    println!(
        "{:<34} {:>10.2} {:>12.0} {:>8.2}",
        "postgres read",
        secs,
        rows as f64 / secs,
        rows as f64 / secs / pipe_rate
    );
    let entity = src.discover().await.unwrap().into_iter().find(|e| e.name == "src").unwrap();

    let mut my =
        sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await.expect("MariaDB at 127.0.0.1:3306");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE bench_{tag}"))).execute(&mut my).await.unwrap();
    let targets = [
        ("postgres", pg_cfg.clone()),
        ("mysql", config("mysql", json!({"host": "127.0.0.1", "database": format!("bench_{tag}"), "user": "root"}))),
        ("sqlite", config("sqlite", json!({"path": "bench.db"}))),
        ("file jsonl", config("file", json!({"path": "jsonl", "format": "jsonl"}))),
        ("file csv", config("file", json!({"path": "csv", "format": "csv"}))),
    ];
    for (name, cfg) in &targets {
        let dst = registry.destination(cfg).await.unwrap();
        let out = EntitySchema { name: "copy".into(), fields: entity.fields.clone() };
        let secs = write_all(&dst, &out, &batches).await;
        println!(
            "{:<34} {:>10.2} {:>12.0} {:>8.2}",
            format!("{name} write"),
            secs,
            rows as f64 / secs,
            rows as f64 / secs / pipe_rate
        );
        if *name != "postgres" {
            let back = registry.source(cfg).await.unwrap();
            let (b2, secs) = read_all(&back, "copy").await;
            assert_eq!(b2.iter().map(RecordBatch::len).sum::<usize>() as u64, rows);
            println!(
                "{:<34} {:>10.2} {:>12.0} {:>8.2}",
                format!("{name} read"),
                secs,
                rows as f64 / secs,
                rows as f64 / secs / pipe_rate
            );
        }
    }
    println!(
        "\npeak RSS of this process: {:.0} MiB (it holds all {rows} rows in memory between read and write)",
        peak_rss_mb()
    );

    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut pg).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE bench_{tag}"))).execute(&mut my).await.unwrap();
    std::fs::remove_dir_all(root).unwrap();
}
