//! DuckLake tables written through the `Destination` port (no DuckDB in
//! Sluice) and read back by an independent reader: DuckDB 1.5.5 with its
//! `ducklake` extension, loaded from the PyPI wheel, attaching the catalog
//! as any user would. Each mode's table equals what was written, each
//! commit is one snapshot, a user's own DuckDB writes (a table of its own,
//! a compaction) between commits are kept, and a writer killed or fenced
//! leaves each row once.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use sluice_testkit::services::lake_python;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const STREAM: &str = "0192flowstream";

fn schema() -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.nullable = false;
    id.primary_key = true;
    let mut amount = Field::new("amount", FieldType::Decimal);
    amount.native_type = Some("postgres:numeric(12,2)".into());
    EntitySchema {
        name: "orders".into(),
        fields: vec![
            id,
            Field::new("note", FieldType::String),
            amount,
            Field::new("at", FieldType::Timestamp),
            Field::new("doc", FieldType::Object),
        ],
    }
}

fn batch(from: i64, to: i64) -> RecordBatch {
    let fields = Arc::new(schema().fields);
    let rows = (from..to)
        .map(|i| {
            vec![
                Value::Int(i),
                if i % 7 == 0 { Value::Null } else { Value::String(format!("note {i}")) },
                Value::Decimal(format!("{}.{:02}", i, i % 100)),
                Value::Timestamp(time::OffsetDateTime::from_unix_timestamp(1_767_225_600 + i).unwrap()),
                Value::Json(json!({"i": i})),
            ]
        })
        .collect();
    RecordBatch { fields, rows }
}

struct Lake {
    dir: PathBuf,
    registry: Registry,
    config: ResolvedConfig,
    /// The catalog's schema in the test database, on PostgreSQL.
    pg_schema: Option<String>,
}

/// The database the tests' PostgreSQL catalogs are schemas of.
const PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Where a test's catalog is.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Sqlite,
    Postgres,
}

impl Lake {
    /// A lake whose catalog is on `engine` (`None` when PostgreSQL is not
    /// there: said, and the test skipped).
    async fn on(engine: Engine, file_size_mb: f64) -> Option<Lake> {
        let mut lake = Lake::new(file_size_mb);
        if engine == Engine::Postgres {
            use sqlx::Connection;
            let mut c = match sqlx::PgConnection::connect(PG_URL).await {
                Ok(c) => c,
                Err(e) => {
                    sluice_testkit::services::unavailable("PostgreSQL on 127.0.0.1:5432", e, "start it");
                    return None;
                }
            };
            let schema = format!("lake_{}", uuid::Uuid::new_v4().simple());
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut c).await.unwrap();
            lake.config.values.insert(
                "catalog".into(),
                json!({"type": "postgres", "host": "127.0.0.1", "port": 5432, "database": "test", "user": "postgres",
                    "sslmode": "disable", "schema": schema}),
            );
            lake.pg_schema = Some(schema);
        }
        Some(lake)
    }

    /// Checks the catalog is where the engine keeps it: a SQLite file, or
    /// the tables of the schema on PostgreSQL (and no file).
    fn assert_catalog_engine(&self) {
        match &self.pg_schema {
            Some(schema) => {
                assert!(!self.catalog().exists(), "no SQLite catalog beside a PostgreSQL one");
                let out = Command::new("psql")
                    .args([
                        PG_URL,
                        "-tAc",
                        &format!("SELECT count(*) FROM {schema}.ducklake_snapshot_changes WHERE author = 'sluice'"),
                    ])
                    .output()
                    .unwrap();
                let n: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
                assert!(n > 0, "Sluice's snapshots are in the PostgreSQL catalog");
            }
            None => assert!(self.catalog().exists()),
        }
    }

    /// What DuckDB's ATTACH names the catalog by, and its options.
    fn attach(&self) -> String {
        match &self.pg_schema {
            Some(schema) => {
                format!("ducklake:postgres:dbname=test host=127.0.0.1 user=postgres|, METADATA_SCHEMA '{schema}'")
            }
            None => format!("ducklake:sqlite:{}|", self.catalog().display()),
        }
    }

    fn new(file_size_mb: f64) -> Lake {
        let dir = std::env::temp_dir().join(format!("sluice-ducklake-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = ResolvedConfig {
            connector_type: "ducklake".into(),
            values: [
                ("catalog", json!({"type": "sqlite", "path": "lake/catalog.sqlite"})),
                ("data_path", json!("lake/data")),
                ("file_size_mb", json!(file_size_mb)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            credential_keys: vec![],
            org: None,
        };
        Lake { registry: Registry::new(dir.clone()), dir, config, pg_schema: None }
    }

    async fn dest(&self) -> Arc<dyn Destination> {
        self.registry.destination(&self.config).await.unwrap()
    }

    fn catalog(&self) -> PathBuf {
        self.dir.join("lake/catalog.sqlite")
    }

    fn data(&self) -> PathBuf {
        std::fs::canonicalize(&self.dir).unwrap().join("lake/data")
    }

    /// What DuckDB answers to `sql` (one JSON value per line of output)
    /// with the lake attached as `lake`.
    fn duckdb(&self, python: &Path, sql: &str) -> serde_json::Value {
        duckdb_at(python, &self.attach(), &format!("{}/", self.data().display()), sql, "")
    }

    /// Every file under the table's folder.
    fn files(&self) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.data().join("main/orders"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }
}

impl Drop for Lake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(schema) = self.pg_schema.take() {
            let _ = Command::new("psql").args([PG_URL, "-qc", &format!("DROP SCHEMA {schema} CASCADE")]).output();
        }
    }
}

/// Runs `sql` (statements separated by `;`, the last one's rows printed as
/// JSON) in DuckDB with the ducklake, parquet, sqlite and postgres
/// extensions loaded from their wheels and the catalog (`attach`: what
/// ATTACH names, `|`, its options) attached as `lake`, its data at `data`
/// (a folder or an `s3://` URL of the emulator at `endpoint`).
fn duckdb_at(python: &Path, attach: &str, data: &str, sql: &str, endpoint: &str) -> serde_json::Value {
    let script = r#"
import glob, json, os, sys, duckdb
import duckdb_extension_ducklake, duckdb_extension_parquet, duckdb_extension_sqlite_scanner, duckdb_extension_httpfs
import duckdb_extension_postgres_scanner
def ext(mod, name):
    return glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", name + ".duckdb_extension"))[0]
c = duckdb.connect(config={"allow_unsigned_extensions": True, "autoinstall_known_extensions": False,
    "autoload_known_extensions": False})
for m, n in [(duckdb_extension_parquet, "parquet"), (duckdb_extension_sqlite_scanner, "sqlite_scanner"),
             (duckdb_extension_postgres_scanner, "postgres_scanner"), (duckdb_extension_ducklake, "ducklake")]:
    c.execute(f"LOAD '{ext(m, n)}'")
if sys.argv[4]:
    c.execute(f"LOAD '{ext(duckdb_extension_httpfs, 'httpfs')}'")
    c.execute(f"""CREATE SECRET (TYPE s3, KEY_ID 'AKIDEXAMPLE', SECRET 'test-secret', REGION 'us-east-1',
        ENDPOINT '{sys.argv[4].split('://')[1]}', URL_STYLE 'path', USE_SSL false)""")
target, options = sys.argv[1].split("|", 1)
c.execute(f"ATTACH '{target}' AS lake (DATA_PATH '{sys.argv[2]}'{options})")
*rest, last = [s for s in sys.argv[3].split(";") if s.strip()]
for s in rest:
    c.execute(s)
print(json.dumps(c.execute(last).fetchall(), default=str))
"#;
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(attach)
        .arg(data)
        .arg(sql)
        .arg(endpoint)
        .output()
        .expect("the lake readers' python runs");
    assert!(out.status.success(), "DuckDB: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

fn attempt(run: uuid::Uuid, number: u32) -> Attempt {
    Attempt { run, number }
}

#[tokio::test]
async fn appends_and_overwrites_are_snapshots_duckdb_reads_with_their_types_and_marks() {
    appends_and_overwrites_are_snapshots_duckdb_reads_with_their_types_and_marks_on(Engine::Sqlite).await;
}

#[tokio::test]
async fn appends_and_overwrites_are_snapshots_duckdb_reads_with_their_types_and_marks_with_a_postgres_catalog() {
    appends_and_overwrites_are_snapshots_duckdb_reads_with_their_types_and_marks_on(Engine::Postgres).await;
}

async fn appends_and_overwrites_are_snapshots_duckdb_reads_with_their_types_and_marks_on(engine: Engine) {
    let Some(python) = lake_python() else { return };
    let Some(lake) = Lake::on(engine, 0.05).await else { return };
    let dest = lake.dest().await;
    dest.check().await.unwrap();

    // An append of 3,000 rows in two commits (files cut at about 50 KB),
    // the stream's mark committed with the second.
    let run = uuid::Uuid::now_v7();
    let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 1))).await.unwrap();
    w.write(&batch(0, 1_000)).await.unwrap();
    w.checkpoint().await.unwrap();
    w.write(&batch(1_000, 3_000)).await.unwrap();
    w.hold_position(STREAM, "cursor-3000").await.unwrap();
    assert_eq!(w.finish().await.unwrap().rows_written, 3_000);
    assert_eq!(dest.position_of(STREAM, "orders").await.unwrap().as_deref(), Some("cursor-3000"));
    assert_eq!(dest.positions(STREAM).await.unwrap(), vec![("orders".to_string(), "cursor-3000".to_string())]);

    let seen = lake.duckdb(
        &python,
        "SELECT count(*), count(DISTINCT id), sum(amount)::VARCHAR, min(\"at\")::VARCHAR, count(note), \
         max(doc->>'i')::VARCHAR FROM lake.main.orders",
    );
    let sum: i64 = (0..3_000).map(|i| i * 100 + i % 100).sum();
    let sum = format!("{}.{:02}", sum / 100, sum % 100);
    assert_eq!(seen, json!([[3000, 3000, sum, "2026-01-01 00:00:00+00", 3000 - 429, "999"]]), "{seen}");
    // DuckDB's own types: a decimal of its precision, a timestamp with time
    // zone, JSON; the key not null.
    let types = lake.duckdb(
        &python,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns \
         WHERE table_catalog = 'lake' AND table_name = 'orders' ORDER BY ordinal_position",
    );
    assert_eq!(
        types,
        json!([
            ["id", "BIGINT", "NO"],
            ["note", "VARCHAR", "YES"],
            ["amount", "DECIMAL(12,2)", "YES"],
            ["at", "TIMESTAMP WITH TIME ZONE", "YES"],
            ["doc", "JSON", "YES"]
        ]),
        "{types}"
    );
    // A filter on a column without statistics reads right.
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders WHERE id BETWEEN 10 AND 19"), json!([[10]]));
    // Two commits, two snapshots (after the catalog's first), by Sluice.
    let snaps = lake.duckdb(&python, "SELECT snapshot_id, author, commit_message FROM lake.snapshots() ORDER BY 1");
    assert_eq!(snaps.as_array().unwrap().len(), 3, "{snaps}");
    assert_eq!(snaps[2][1], "sluice", "{snaps}");
    assert_eq!(snaps[2][2], format!("sluice run {run}"), "{snaps}");
    // Time travel sees the first commit alone.
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders AT (VERSION => 1)"), json!([[1000]]));

    // An overwrite: invisible until it finishes, then the new set alone.
    let mut w = dest.open_for(&schema(), WriteMode::Overwrite, Some(&attempt(uuid::Uuid::now_v7(), 1))).await.unwrap();
    w.write(&batch(5_000, 6_000)).await.unwrap();
    w.checkpoint().await.unwrap();
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders"), json!([[3000]]), "not yet");
    w.finish().await.unwrap();
    assert_eq!(
        lake.duckdb(&python, "SELECT count(*), min(id), max(id) FROM lake.main.orders"),
        json!([[1000, 5000, 5999]])
    );

    // A new column is added through the catalog; old rows read it null.
    let mut wider = schema();
    wider.fields.push(Field::new("extra", FieldType::String));
    let mut b = batch(6_000, 6_010);
    b.fields = Arc::new(wider.fields.clone());
    for r in &mut b.rows {
        r.push(Value::String("x".into()));
    }
    let mut w = dest.open_for(&wider, WriteMode::Append, None).await.unwrap();
    w.write(&b).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(lake.duckdb(&python, "SELECT count(*), count(extra) FROM lake.main.orders"), json!([[1010, 10]]));
    let described = dest.describe("orders").await.unwrap().unwrap();
    let names: Vec<&str> = described.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["id", "note", "amount", "at", "doc", "extra"]);
    assert_eq!(described.fields[2].field_type, FieldType::Decimal);
}

#[tokio::test]
async fn a_users_duckdb_writes_between_commits_are_kept_and_a_compaction_is_met() {
    a_users_duckdb_writes_between_commits_are_kept_and_a_compaction_is_met_on(Engine::Sqlite).await;
}

#[tokio::test]
async fn a_users_duckdb_writes_between_commits_are_kept_and_a_compaction_is_met_with_a_postgres_catalog() {
    a_users_duckdb_writes_between_commits_are_kept_and_a_compaction_is_met_on(Engine::Postgres).await;
}

async fn a_users_duckdb_writes_between_commits_are_kept_and_a_compaction_is_met_on(engine: Engine) {
    let Some(python) = lake_python() else { return };
    let Some(lake) = Lake::on(engine, 0.05).await else { return };
    let dest = lake.dest().await;
    let mut w = dest.open(&schema(), WriteMode::Append).await.unwrap();
    w.write(&batch(0, 500)).await.unwrap();
    w.finish().await.unwrap();
    // The user's DuckDB: a table of its own, rows of its own into Sluice's
    // table, then adjacent files merged and old snapshots' files cleaned.
    lake.duckdb(
        &python,
        "CREATE TABLE lake.main.mine (x INTEGER); INSERT INTO lake.main.mine VALUES (1), (2); \
         INSERT INTO lake.main.orders (id, note) VALUES (100000, 'by duckdb'); \
         CALL ducklake_merge_adjacent_files('lake'); SELECT 1",
    );
    let mut w = dest.open(&schema(), WriteMode::Append).await.unwrap();
    w.write(&batch(500, 1_000)).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(
        lake.duckdb(&python, "SELECT count(*), count(DISTINCT id) FROM lake.main.orders"),
        json!([[1001, 1001]])
    );
    assert_eq!(lake.duckdb(&python, "SELECT sum(x) FROM lake.main.mine"), json!([[3]]));
    // DuckDB goes on writing after Sluice: its next commit lands too.
    assert_eq!(
        lake.duckdb(
            &python,
            "INSERT INTO lake.main.orders (id) VALUES (100001); SELECT count(*) FROM lake.main.orders"
        ),
        json!([[1002]])
    );
}

#[tokio::test]
async fn a_killed_writers_files_are_removed_and_a_replaced_writer_commits_nothing() {
    let Some(python) = lake_python() else { return };
    let lake = Lake::new(0.02);
    let dest = lake.dest().await;
    let run = uuid::Uuid::now_v7();
    let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 1))).await.unwrap();
    w.write(&batch(0, 300)).await.unwrap();
    w.finish().await.unwrap();
    let committed = lake.files();

    // A writer that put files and was killed before its commit (dropped,
    // as a killed process's state is gone).
    let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 2))).await.unwrap();
    w.write(&batch(300, 3_000)).await.unwrap();
    let orphans: Vec<String> = lake.files().into_iter().filter(|f| !committed.contains(f)).collect();
    assert!(!orphans.is_empty(), "files were cut and put before the commit");
    drop(w);
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders"), json!([[300]]), "never named");

    // The next writer removes them, and a frozen writer it replaced (the
    // same run's earlier attempt, fenced) commits nothing.
    let mut frozen = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 3))).await.unwrap();
    assert!(lake.files().iter().all(|f| !orphans.contains(f)), "the killed attempt's files are gone");
    frozen.write(&batch(300, 400)).await.unwrap();
    assert!(dest.end_earlier_attempts(&attempt(run, 4)).await.unwrap() >= 1);
    let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 4))).await.unwrap();
    w.write(&batch(300, 400)).await.unwrap();
    w.hold_position(STREAM, "after-400").await.unwrap();
    w.finish().await.unwrap();
    let refused = frozen.finish().await.unwrap_err();
    assert!(refused.to_string().contains("took over"), "{refused}");
    assert_eq!(lake.duckdb(&python, "SELECT count(*), count(DISTINCT id) FROM lake.main.orders"), json!([[400, 400]]));
    assert_eq!(dest.position_of(STREAM, "orders").await.unwrap().as_deref(), Some("after-400"));
    // The fenced writer's file goes with the next writer.
    let _ = dest.open(&schema(), WriteMode::Append).await.unwrap();
    let named = lake.duckdb(&python, "SELECT count(*) FROM ducklake_list_files('lake', 'orders')");
    assert_eq!(named[0][0].as_i64().unwrap() as usize, lake.files().len(), "every file left is named: {named}");
}

#[tokio::test]
async fn data_in_a_bucket_is_read_by_duckdb_over_s3_and_a_killed_writers_objects_are_removed() {
    let Some(python) = lake_python() else { return };
    let Some((_moto, url)) = sluice_testkit::services::moto() else { return };
    sluice_testkit::services::moto_bucket(&url, "lake");
    let mut lake = Lake::new(0.02);
    for (k, v) in [
        ("data_path", json!("s3://lake/tables/")),
        ("endpoint_url", json!(url)),
        ("access_key_id", json!("AKIDEXAMPLE")),
        ("secret_access_key", json!("test-secret")),
    ] {
        lake.config.values.insert(k.into(), v);
    }
    let dest = lake.dest().await;
    dest.check().await.unwrap();
    let mut w = dest.open(&schema(), WriteMode::Append).await.unwrap();
    w.write(&batch(0, 2_000)).await.unwrap();
    w.finish().await.unwrap();
    // A killed writer's objects, then the next writer.
    let mut w = dest.open(&schema(), WriteMode::Append).await.unwrap();
    w.write(&batch(2_000, 4_000)).await.unwrap();
    drop(w);
    let put = sluice_testkit::services::moto_keys(&url, "lake", "tables/main/orders/");
    let mut w = dest.open(&schema(), WriteMode::Append).await.unwrap();
    let left = sluice_testkit::services::moto_keys(&url, "lake", "tables/main/orders/");
    assert!(left.len() < put.len(), "the killed writer's objects are removed: {put:?} then {left:?}");
    w.write(&batch(2_000, 2_500)).await.unwrap();
    w.finish().await.unwrap();
    let seen = duckdb_at(
        &python,
        &lake.attach(),
        "s3://lake/tables/",
        "SELECT count(*), count(DISTINCT id) FROM lake.main.orders",
        &url,
    );
    assert_eq!(seen, json!([[2500, 2500]]));
    let paths = duckdb_at(
        &python,
        &lake.attach(),
        "s3://lake/tables/",
        "SELECT data_file FROM ducklake_list_files('lake', 'orders')",
        &url,
    );
    assert!(
        paths
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p[0].as_str().unwrap().starts_with("s3://lake/tables/main/orders/sluice-")),
        "{paths}"
    );
}

#[tokio::test]
async fn a_catalog_that_is_not_a_ducklake_or_of_another_version_is_named_in_one_line() {
    let lake = Lake::new(1.0);
    std::fs::create_dir_all(lake.dir.join("lake")).unwrap();
    let db = rusqlite_like(&lake.catalog(), "CREATE TABLE customers (id INTEGER)").await;
    drop(db);
    let err = lake.dest().await.check().await.unwrap_err().to_string();
    assert!(err.contains("not a DuckLake catalog") && err.contains("customers"), "{err}");

    let other = Lake::new(1.0);
    other.dest().await.check().await.unwrap();
    rusqlite_like(&other.catalog(), "UPDATE ducklake_metadata SET value = '0.3' WHERE key = 'version'").await;
    let fresh = Registry::new(other.dir.clone());
    let err = fresh.destination(&other.config).await.unwrap().check().await.unwrap_err().to_string();
    assert!(err.contains("DuckLake format 0.3") && err.contains("1.0"), "{err}");

    let mut bad = other.config.clone();
    bad.values.insert("catalog".into(), json!({"type": "oracle"}));
    let errors = fresh.check_config(&bad).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "config.catalog", "{errors:?}");
}

/// Runs one statement on a SQLite file.
async fn rusqlite_like(path: &Path, sql: &str) -> sqlx::SqliteConnection {
    use sqlx::Connection;
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path).create_if_missing(true);
    let mut c = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut c).await.unwrap();
    c
}

/// [`schema`] with the column a soft delete sets.
fn keyed_schema() -> EntitySchema {
    let mut s = schema();
    s.fields.push(Field::new("_sluice_deleted_at", FieldType::Timestamp));
    s
}

/// [`batch`]'s rows in [`keyed_schema`], their note `note`.
fn keyed_batch(from: i64, to: i64, note: &str) -> RecordBatch {
    let mut b = batch(from, to);
    b.fields = Arc::new(keyed_schema().fields);
    for r in &mut b.rows {
        r[1] = Value::String(note.into());
        r.push(Value::Null);
    }
    b
}

fn keys(ids: impl Iterator<Item = i64>) -> RecordBatch {
    RecordBatch { fields: Arc::new(vec![schema().fields[0].clone()]), rows: ids.map(|i| vec![Value::Int(i)]).collect() }
}

fn int_range(after: Option<i64>, upto: Option<i64>) -> KeyRange {
    KeyRange {
        fields: vec![schema().fields[0].clone()],
        after: after.map(|a| vec![Value::Int(a)]),
        upto: upto.map(|u| vec![Value::Int(u)]),
    }
}

/// What DuckDB sees of the keyed table: rows, distinct keys, and the count
/// of each note.
fn notes(lake: &Lake, python: &Path) -> (serde_json::Value, serde_json::Value) {
    let counts = lake.duckdb(python, "SELECT count(*), count(DISTINCT id) FROM lake.main.orders");
    let notes = lake.duckdb(python, "SELECT note, count(*) FROM lake.main.orders GROUP BY note ORDER BY note");
    (counts, notes)
}

#[tokio::test]
async fn rows_by_key_are_replaced_deleted_and_updated_through_delete_files_duckdb_applies() {
    rows_by_key_are_replaced_deleted_and_updated_through_delete_files_duckdb_applies_on(Engine::Sqlite).await;
}

#[tokio::test]
async fn rows_by_key_are_replaced_deleted_and_updated_through_delete_files_duckdb_applies_with_a_postgres_catalog() {
    rows_by_key_are_replaced_deleted_and_updated_through_delete_files_duckdb_applies_on(Engine::Postgres).await;
}

async fn rows_by_key_are_replaced_deleted_and_updated_through_delete_files_duckdb_applies_on(engine: Engine) {
    let Some(python) = lake_python() else { return };
    let Some(lake) = Lake::on(engine, 0.02).await else { return };
    let dest = lake.dest().await;
    let s = keyed_schema();

    // The first commit: 2,000 rows in several files.
    let mut w = dest.open_for(&s, WriteMode::Upsert, Some(&attempt(uuid::Uuid::now_v7(), 1))).await.unwrap();
    w.write(&keyed_batch(0, 2_000, "v1")).await.unwrap();
    w.checkpoint().await.unwrap();
    // The second: 500 replaced, 100 deleted (one put back in the same
    // commit), one key written twice (the later wins), ten updated in part
    // (the note alone: the rest of each row kept), five soft-deleted.
    w.write(&keyed_batch(1_000, 1_500, "v2")).await.unwrap();
    w.delete(&keys(0..100)).await.unwrap();
    w.write(&keyed_batch(5, 6, "back")).await.unwrap();
    w.write(&keyed_batch(1_700, 1_701, "first")).await.unwrap();
    w.write(&keyed_batch(1_700, 1_701, "twice")).await.unwrap();
    let note = RecordBatch {
        fields: Arc::new(vec![s.fields[0].clone(), s.fields[1].clone()]),
        rows: (1_500..1_510).map(|i| vec![Value::Int(i), Value::String("updated".into())]).collect(),
    };
    w.update(&note).await.unwrap();
    w.clear(&int_range(Some(1_800), Some(1_805)), Some("_sluice_deleted_at")).await.unwrap();
    w.hold_position(STREAM, "lsn-2").await.unwrap();
    w.finish().await.unwrap();

    let (counts, seen) = notes(&lake, &python);
    assert_eq!(counts, json!([[1901, 1901]]), "each key once");
    assert_eq!(seen, json!([["back", 1], ["twice", 1], ["updated", 10], ["v1", 1389], ["v2", 500]]), "{seen}");
    // An update in part keeps the fields it does not set.
    let kept = lake.duckdb(
        &python,
        "SELECT sum(amount)::VARCHAR, count(doc) FROM lake.main.orders WHERE id BETWEEN 1500 AND 1509",
    );
    let sum: i64 = (1_500..1_510).map(|i| i * 100 + i % 100).sum();
    assert_eq!(kept, json!([[format!("{}.{:02}", sum / 100, sum % 100), 10]]), "{kept}");
    let soft = lake.duckdb(
        &python,
        "SELECT min(id), max(id), count(*) FROM lake.main.orders WHERE _sluice_deleted_at IS NOT NULL",
    );
    assert_eq!(soft, json!([[1801, 1805, 5]]), "{soft}");
    assert_eq!(dest.position_of(STREAM, "orders").await.unwrap().as_deref(), Some("lsn-2"));
    // The replaced rows are hidden by delete files, one live per data file.
    let live = lake.duckdb(
        &python,
        "SELECT count(*), count(DISTINCT data_file) FROM ducklake_list_files('lake', 'orders') \
         WHERE delete_file IS NOT NULL",
    );
    assert_eq!(live[0][0], live[0][1], "one delete file per data file: {live}");
    // Two commits: the second one snapshot that both inserted and deleted.
    let snaps = lake.duckdb(&python, "SELECT changes::VARCHAR FROM lake.snapshots() ORDER BY snapshot_id");
    assert_eq!(snaps.as_array().unwrap().len(), 3, "{snaps}");
    let last = snaps[2][0].as_str().unwrap();
    assert!(last.contains("tables_inserted_into") && last.contains("tables_deleted_from"), "{snaps}");

    // The next writer: rows already replaced once are replaced again (a
    // delete file replacing the live one), a range cleared for good.
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(1_000, 1_100, "v3")).await.unwrap();
    w.clear(&int_range(Some(1_900), None), None).await.unwrap();
    w.finish().await.unwrap();
    let (counts, seen) = notes(&lake, &python);
    assert_eq!(counts, json!([[1802, 1802]]), "{seen}");
    assert_eq!(seen, json!([["back", 1], ["twice", 1], ["updated", 10], ["v1", 1290], ["v2", 400], ["v3", 100]]));
    // Time travel: the first commit's table, whole.
    assert_eq!(
        lake.duckdb(&python, "SELECT count(*), count(DISTINCT note) FROM lake.main.orders AT (VERSION => 1)"),
        json!([[2000, 1]])
    );

    // A clear of every key, then rows: the table is those rows alone.
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.clear(&KeyRange::all(), None).await.unwrap();
    w.write(&keyed_batch(10, 20, "fresh")).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(notes(&lake, &python), (json!([[10, 10]]), json!([["fresh", 10]])));
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(15, 25, "after")).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(notes(&lake, &python), (json!([[15, 15]]), json!([["after", 10], ["fresh", 5]])));
    lake.assert_catalog_engine();
}

#[tokio::test]
async fn a_users_duckdb_writes_to_a_keyed_table_are_indexed_before_the_next_rows_by_key() {
    a_users_duckdb_writes_to_a_keyed_table_are_indexed_before_the_next_rows_by_key_on(Engine::Sqlite).await;
}

#[tokio::test]
async fn a_users_duckdb_writes_to_a_keyed_table_are_indexed_before_the_next_rows_by_key_with_a_postgres_catalog() {
    a_users_duckdb_writes_to_a_keyed_table_are_indexed_before_the_next_rows_by_key_on(Engine::Postgres).await;
}

async fn a_users_duckdb_writes_to_a_keyed_table_are_indexed_before_the_next_rows_by_key_on(engine: Engine) {
    let Some(python) = lake_python() else { return };
    let Some(lake) = Lake::on(engine, 0.02).await else { return };
    let dest = lake.dest().await;
    let s = keyed_schema();
    // The table appended first (no index), twice over for some keys.
    let mut w = dest.open_for(&s, WriteMode::Append, None).await.unwrap();
    w.write(&keyed_batch(0, 1_000, "appended")).await.unwrap();
    w.write(&keyed_batch(0, 10, "appended")).await.unwrap();
    w.finish().await.unwrap();
    // The user's DuckDB: adjacent files merged, a row deleted, rows of its
    // own added and put in a file.
    lake.duckdb(
        &python,
        "CALL ducklake_merge_adjacent_files('lake'); DELETE FROM lake.main.orders WHERE id IN (500, 600); \
         INSERT INTO lake.main.orders (id, note) SELECT i, 'duckdb' FROM range(5000, 5010) r(i); \
         CALL ducklake_flush_inlined_data('lake'); SELECT 1",
    );
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders"), json!([[1018]]));
    // Rows by key now: the index is built from the files, so that each
    // key (those appended twice too) ends once.
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(0, 20, "keyed")).await.unwrap();
    w.write(&keyed_batch(500, 501, "keyed")).await.unwrap();
    w.write(&keyed_batch(5_000, 5_005, "keyed")).await.unwrap();
    // An update of a row DuckDB deleted (kept in its catalog) finds none.
    w.update(&RecordBatch {
        fields: Arc::new(vec![s.fields[0].clone(), s.fields[1].clone()]),
        rows: vec![vec![Value::Int(600), Value::String("ghost".into())]],
    })
    .await
    .unwrap();
    w.finish().await.unwrap();
    let (counts, seen) = notes(&lake, &python);
    assert_eq!(counts, json!([[1009, 1009]]), "{seen}");
    assert_eq!(seen, json!([["appended", 978], ["duckdb", 5], ["keyed", 26]]));
    // The user's DuckDB writes while a writer by key is open (between two
    // of its commits): the writer's next commit finds the index stale,
    // builds it again and plans anew, so each key still ends once.
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(700, 710, "keyed")).await.unwrap();
    w.checkpoint().await.unwrap();
    lake.duckdb(
        &python,
        "UPDATE lake.main.orders SET note = 'by duckdb' WHERE id = 705; \
         INSERT INTO lake.main.orders (id, note) VALUES (6000, 'duckdb'); \
         CALL ducklake_flush_inlined_data('lake'); SELECT 1",
    );
    w.write(&keyed_batch(705, 706, "keyed")).await.unwrap();
    w.write(&keyed_batch(6_000, 6_001, "keyed")).await.unwrap();
    w.finish().await.unwrap();
    let (counts, _) = notes(&lake, &python);
    assert_eq!(counts, json!([[1010, 1010]]), "each key once after DuckDB wrote in the middle");
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.delete(&keys(std::iter::once(6_000))).await.unwrap();
    w.finish().await.unwrap();

    // A merge between keyed commits keeps the row ids: no rebuild needed,
    // and the rows still replaced right.
    lake.duckdb(&python, "CALL ducklake_merge_adjacent_files('lake'); SELECT 1");
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(0, 1_000, "all")).await.unwrap();
    w.finish().await.unwrap();
    let (counts, seen) = notes(&lake, &python);
    assert_eq!(counts, json!([[1010, 1010]]), "{seen}");
    assert_eq!(seen, json!([["all", 1000], ["duckdb", 5], ["keyed", 5]]));
}

#[tokio::test]
async fn a_killed_keyed_writers_delete_files_are_removed_and_the_table_is_untouched() {
    let Some(python) = lake_python() else { return };
    let lake = Lake::new(0.02);
    let dest = lake.dest().await;
    let s = keyed_schema();
    let run = uuid::Uuid::now_v7();
    let mut w = dest.open_for(&s, WriteMode::Upsert, Some(&attempt(run, 1))).await.unwrap();
    w.write(&keyed_batch(0, 1_000, "v1")).await.unwrap();
    w.finish().await.unwrap();
    let committed = lake.files();
    // Killed in its commit: files and delete files put, the catalog's
    // transaction never run.
    let mut w = dest.open_for(&s, WriteMode::Upsert, Some(&attempt(run, 2))).await.unwrap();
    w.write(&keyed_batch(0, 600, "v2")).await.unwrap();
    w.delete(&keys(900..950)).await.unwrap();
    w.update(&RecordBatch {
        fields: Arc::new(vec![s.fields[0].clone(), s.fields[1].clone()]),
        rows: vec![vec![Value::Int(0), Value::String("v3".into())]],
    })
    .await
    .unwrap();
    drop(w);
    assert_eq!(notes(&lake, &python), (json!([[1000, 1000]]), json!([["v1", 1000]])), "nothing of it shows");
    let mut w = dest.open_for(&s, WriteMode::Upsert, Some(&attempt(run, 3))).await.unwrap();
    assert_eq!(lake.files(), committed, "the killed attempt's files are gone");
    w.write(&keyed_batch(0, 600, "v2")).await.unwrap();
    w.delete(&keys(900..950)).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(notes(&lake, &python), (json!([[950, 950]]), json!([["v1", 350], ["v2", 600]])));
}

#[tokio::test]
async fn a_table_committed_to_often_has_its_small_files_merged_and_old_snapshots_expired() {
    a_table_committed_to_often_has_its_small_files_merged_and_old_snapshots_expired_on(Engine::Sqlite).await;
}

#[tokio::test]
async fn a_table_committed_to_often_has_its_small_files_merged_and_old_snapshots_expired_with_a_postgres_catalog() {
    a_table_committed_to_often_has_its_small_files_merged_and_old_snapshots_expired_on(Engine::Postgres).await;
}

async fn a_table_committed_to_often_has_its_small_files_merged_and_old_snapshots_expired_on(engine: Engine) {
    let Some(python) = lake_python() else { return };
    let Some(mut lake) = Lake::on(engine, 1.0).await else { return };
    lake.config.values.insert("snapshot_retention_hours".into(), json!(24));
    let dest = lake.dest().await;
    let s = keyed_schema();
    // A change stream's minute commits: 40 commits of 50 rows, each
    // replacing 10 rows of the one before (files far under a quarter MB).
    let mut w = dest.open_for(&s, WriteMode::Upsert, Some(&attempt(uuid::Uuid::now_v7(), 1))).await.unwrap();
    for c in 0..40i64 {
        w.write(&keyed_batch(c * 40, c * 40 + 50, &format!("c{c}"))).await.unwrap();
        w.delete(&keys(std::iter::once(c * 40 + 1))).await.unwrap();
        w.hold_position(STREAM, &format!("lsn-{c}")).await.unwrap();
        w.checkpoint().await.unwrap();
    }
    w.finish().await.unwrap();
    // 1,610 keys (0..1610), less the 40 deleted, each once.
    let (counts, _) = notes(&lake, &python);
    assert_eq!(counts, json!([[1570, 1570]]), "each key once after the merges");
    let live = lake.duckdb(&python, "SELECT count(*) FROM ducklake_list_files('lake', 'orders')");
    assert!(live[0][0].as_i64().unwrap() < 16, "the small files were merged: {live}");
    let merges =
        lake.duckdb(&python, "SELECT count(*) FROM lake.snapshots() WHERE commit_message LIKE '%small files merged'");
    assert!(merges[0][0].as_i64().unwrap() >= 1, "{merges}");
    // Time travel still sees an early commit whole (its files ended, kept).
    assert_eq!(lake.duckdb(&python, "SELECT count(*) FROM lake.main.orders AT (VERSION => 1)"), json!([[49]]));
    assert_eq!(dest.position_of(STREAM, "orders").await.unwrap().as_deref(), Some("lsn-39"));
    let on_disk_before = lake.files().len();

    // A day and more later (the snapshots made older by hand): the next
    // writer's commit expires them, and the files only they named go.
    let old = "UPDATE ducklake_snapshot SET snapshot_time = '2020-01-01 00:00:00.000000+00'";
    match &lake.pg_schema {
        Some(schema) => {
            let out =
                Command::new("psql").args([PG_URL, "-qc", &format!("SET search_path TO {schema}; {old}")]).output();
            assert!(out.unwrap().status.success());
        }
        None => drop(rusqlite_like(&lake.catalog(), old).await),
    }
    let fresh = Registry::new(lake.dir.clone());
    let dest = fresh.destination(&lake.config).await.unwrap();
    let mut w = dest.open_for(&s, WriteMode::Upsert, None).await.unwrap();
    w.write(&keyed_batch(0, 1, "last")).await.unwrap();
    w.finish().await.unwrap();
    let snaps = lake.duckdb(&python, "SELECT count(*), min(snapshot_id) FROM lake.snapshots()");
    assert_eq!(snaps[0][0], 1, "the latest snapshot alone is kept: {snaps}");
    let (counts, _) = notes(&lake, &python);
    assert_eq!(counts, json!([[1570, 1570]]));
    let named = lake.duckdb(&python, "SELECT count(*) + count(delete_file) FROM ducklake_list_files('lake', 'orders')");
    let on_disk = lake.files().len();
    assert_eq!(named[0][0].as_i64().unwrap() as usize, on_disk, "every file left is named: {named}");
    assert!(on_disk < on_disk_before, "the expired snapshots' files are gone ({on_disk_before} then {on_disk})");
    assert_eq!(dest.position_of(STREAM, "orders").await.unwrap().as_deref(), Some("lsn-39"));
}
