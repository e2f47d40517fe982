//! Each connector against the real servers on this machine: write a table
//! holding every type of the vocabulary, discover it, read it back, copy it
//! to every other connector, and compare values: NULLs, unicode, large
//! text, extreme numbers and time zones included.
//!
//! PostgreSQL (127.0.0.1:5432) and MariaDB (127.0.0.1:3306) tests use a
//! schema or database of their own, dropped afterwards. An unreachable
//! server is skipped loudly, or fails the run with CI=true.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use std::sync::Arc;

mod common;
use common::*;

/// A live database for one test, removed on drop.
struct Db {
    config: ResolvedConfig,
    cleanup: Option<Box<dyn FnOnce() + Send>>,
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(f) = self.cleanup.take() {
            f();
        }
    }
}

fn skip(what: &str, why: &str) -> Option<Db> {
    unavailable(what, why, "start it");
    None
}

/// Runs `work` to its end on a runtime of its own (a drop may happen on a
/// runtime's thread, where blocking on another future is not allowed).
fn run_blocking(work: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(work);
    })
    .join();
}

async fn postgres() -> Option<Db> {
    use sqlx::Connection;
    let url = "postgres://postgres@127.0.0.1:5432/test";
    let mut conn = match sqlx::PgConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => return skip("PostgreSQL at 127.0.0.1:5432", &e.to_string()),
    };
    let schema = format!("rt_{}", tag());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
    let config = config(
        "postgres",
        json!({"host": "127.0.0.1", "port": 5432, "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
    );
    Some(Db {
        config,
        cleanup: Some(Box::new(move || {
            run_blocking(async move {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                    .execute(&mut c)
                    .await
                    .unwrap();
            })
        })),
    })
}

async fn mariadb() -> Option<Db> {
    use sqlx::Connection;
    let url = "mysql://root@127.0.0.1:3306/test";
    let mut conn = match sqlx::MySqlConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => return skip("MariaDB at 127.0.0.1:3306", &e.to_string()),
    };
    let db = format!("rt_{}", tag());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db} CHARACTER SET utf8mb4")))
        .execute(&mut conn)
        .await
        .unwrap();
    let config = config("mysql", json!({"host": "127.0.0.1", "port": 3306, "database": db, "user": "root"}));
    Some(Db {
        config,
        cleanup: Some(Box::new(move || {
            run_blocking(async move {
                let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut c).await.unwrap();
            })
        })),
    })
}

fn sqlite(root: &std::path::Path) -> Db {
    Db { config: config("sqlite", json!({"path": format!("rt-{}.db", tag())})), cleanup: None }.with_root(root)
}

impl Db {
    fn with_root(self, _root: &std::path::Path) -> Self {
        self
    }
}

fn field(name: &str, t: FieldType, pk: bool) -> Field {
    Field { name: name.into(), field_type: t, nullable: !pk, primary_key: pk, native_type: None }
}

fn fixture() -> (EntitySchema, Vec<Vec<Value>>) {
    let schema = EntitySchema {
        name: "every_type".into(),
        fields: vec![
            field("id", FieldType::Integer, true),
            field("s", FieldType::String, false),
            field("i", FieldType::Integer, false),
            field("n", FieldType::Number, false),
            field("d", FieldType::Decimal, false),
            field("b", FieldType::Boolean, false),
            field("ts", FieldType::Timestamp, false),
            field("dt", FieldType::Date, false),
            field("obj", FieldType::Object, false),
            field("arr", FieldType::Array, false),
            field("bin", FieldType::Binary, false),
        ],
    };
    let ts = |s: &str| Value::Timestamp(parse_timestamp(s).unwrap());
    let date = |s: &str| Value::Date(parse_date(s).unwrap());
    let rows = vec![
        vec![
            Value::Int(1),
            Value::String("héllo, 世界 🎉 \"quoted\", comma\nnewline\ttab\\backslash".into()),
            Value::Int(42),
            Value::Float(3.25),
            Value::Decimal("1234.56".into()),
            Value::Bool(true),
            ts("2026-03-01T12:00:00.123456+05:30"),
            date("2026-02-28"),
            Value::Json(json!({"a": 1, "nested": {"b": [true, null, "ü"]}})),
            Value::Json(json!([1, "two", {"three": 3}])),
            Value::Bytes(vec![0, 1, 2, 254, 255]),
        ],
        vec![
            Value::Int(2),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
        ],
        vec![
            Value::Int(3),
            Value::String("x".repeat(100_000)),
            Value::Int(i64::MAX),
            Value::Float(1e308),
            Value::Decimal("-9999999999.99".into()),
            Value::Bool(false),
            ts("1970-01-01T00:00:00Z"),
            date("9999-12-31"),
            Value::Json(json!({})),
            Value::Json(json!([])),
            Value::Bytes(vec![]),
        ],
        vec![
            Value::Int(4),
            Value::String(String::new()),
            Value::Int(i64::MIN),
            Value::Float(-2.2250738585072014e-308),
            Value::Decimal("0.01".into()),
            Value::Bool(true),
            ts("2038-01-19T03:14:08Z"),
            date("1970-01-01"),
            Value::Json(json!({"k": "v"})),
            Value::Json(json!([[1, 2], [3]])),
            Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
        ],
    ];
    (schema, rows)
}

/// Values compare by meaning: decimals numerically, timestamps as instants.
/// CSV cannot tell an empty string or empty bytes from null (documented),
/// so through CSV they are the same.
fn same(a: &Value, b: &Value, csv: bool) -> bool {
    match (a, b) {
        (Value::Null, Value::String(s)) | (Value::String(s), Value::Null) if csv => s.is_empty(),
        (Value::Null, Value::Bytes(b)) | (Value::Bytes(b), Value::Null) if csv => b.is_empty(),
        (Value::Decimal(x), Value::Decimal(y)) => norm_decimal(x) == norm_decimal(y),
        _ => a == b,
    }
}

fn norm_decimal(s: &str) -> String {
    let s = s.trim();
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.to_string() }
}

async fn read_all(src: &Arc<dyn Source>, entity: &str) -> (Arc<Vec<Field>>, Vec<Vec<Value>>) {
    let mut reader = src
        .read(ReadRequest {
            entity: entity.into(),
            cursor: Some(CursorBound { field: "id".into(), from: None }),
            limit: None,
            batch_size: 2,
            ranges: 1,
            snapshot: None,
        })
        .await
        .unwrap();
    let fields = reader.fields();
    let mut rows = Vec::new();
    while let Some(b) = reader.next_batch().await.unwrap() {
        assert!(b.len() <= 2, "batches respect the batch size");
        rows.extend(b.rows);
    }
    (fields, rows)
}

fn assert_rows(what: &str, fields: &[Field], got: &[Vec<Value>], want: &[Vec<Value>], names: &[String]) {
    let csv = what.contains("csv");
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        for (c, name) in names.iter().enumerate() {
            let gi =
                fields.iter().position(|f| &f.name == name).unwrap_or_else(|| panic!("{what}: column {name} missing"));
            assert!(
                same(&g[gi], &w[c], csv),
                "{what}: row {r} column {name}: got {:?}, want {:?}",
                trunc(&g[gi]),
                trunc(&w[c])
            );
        }
    }
}

fn trunc(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.len() > 120 { format!("{}…", &s[..120]) } else { s }
}

async fn write(dst: &Arc<dyn Destination>, schema: &EntitySchema, rows: &[Vec<Value>], mode: WriteMode) {
    let mut w = dst.open(schema, mode).await.unwrap();
    let fields = Arc::new(schema.fields.clone());
    for chunk in rows.chunks(3) {
        w.write(&RecordBatch { fields: fields.clone(), rows: chunk.to_vec() }).await.unwrap();
    }
    let stats = w.finish().await.unwrap();
    assert_eq!(stats.rows_written, rows.len() as u64);
}

async fn round_trip(name: &str, source: &Db, others: &[(&str, &Db)], registry: &Registry) {
    let (schema, rows) = fixture();
    let names: Vec<String> = schema.fields.iter().map(|f| f.name.clone()).collect();
    let dst = registry.destination(&source.config).await.unwrap();
    dst.check().await.unwrap();
    write(&dst, &schema, &rows, WriteMode::Overwrite).await;

    let src = registry.source(&source.config).await.unwrap();
    let found = src.discover().await.unwrap().into_iter().find(|e| e.name == "every_type").expect("discovered");
    for f in &schema.fields {
        let d = found.field(&f.name).unwrap();
        assert_eq!(d.field_type, f.field_type, "{name}: type of {}", f.name);
        assert_eq!(d.primary_key, f.primary_key, "{name}: key flag of {}", f.name);
    }
    let (fields, got) = read_all(&src, "every_type").await;
    assert_rows(&format!("{name} → {name}"), &fields, &got, &rows, &names);

    for (other_name, other) in others {
        let target = registry.destination(&other.config).await.unwrap();
        let copy = EntitySchema { name: format!("from_{name}"), fields: found.fields.clone() };
        write(&target, &copy, &got, WriteMode::Overwrite).await;
        let back = registry.source(&other.config).await.unwrap();
        let (f2, rows2) = read_all(&back, &copy.name).await;
        assert_rows(&format!("{name} → {other_name}"), &f2, &rows2, &rows, &names);
    }
}

#[tokio::test]
async fn every_connector_round_trips_every_type_to_every_other() {
    let root = std::env::temp_dir().join(format!("sluice-rt-{}", tag()));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    let lite = sqlite(&root);
    let pg = postgres().await;
    let my = mariadb().await;
    let jsonl = Db { config: config("file", json!({"path": "jsonl-dir", "format": "jsonl"})), cleanup: None };
    let csv = Db { config: config("file", json!({"path": "csv-dir", "format": "csv"})), cleanup: None };
    let mut all: Vec<(&str, &Db)> = vec![("sqlite", &lite), ("jsonl", &jsonl), ("csv", &csv)];
    if let Some(p) = &pg {
        all.push(("postgres", p));
    }
    if let Some(m) = &my {
        all.push(("mysql", m));
    }
    if services_required() {
        assert_eq!(all.len(), 5, "CI runs every connector");
    }
    for (name, db) in &all {
        eprintln!("round trip from {name} to {} other connector(s)", all.len() - 1);
        let others: Vec<(&str, &Db)> = all.iter().filter(|(n, _)| n != name).copied().collect();
        round_trip(name, db, &others, &registry).await;
    }
    std::fs::remove_dir_all(root).unwrap();
}

/// The destination's declared column types of `table`, as its engine names
/// them (`numeric(12,2)`, `timestamp without time zone`, `datetime(6)`).
async fn column_types(db: &Db, table: &str) -> Vec<(String, String)> {
    use sqlx::Connection;
    match db.config.connector_type.as_str() {
        "postgres" => {
            let schema = db.config.str("schema").unwrap().to_string();
            let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
            sqlx::query_as(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
                 JOIN pg_class t ON t.oid = a.attrelid JOIN pg_namespace n ON n.oid = t.relnamespace \
                 WHERE n.nspname = $1 AND t.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            )
            .bind(schema)
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap()
        }
        _ => {
            let database = db.config.str("database").unwrap().to_string();
            let mut c = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await.unwrap();
            sqlx::query_as(
                "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
            )
            .bind(database)
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap()
        }
    }
}

#[tokio::test]
async fn exact_decimals_and_zoneless_timestamps_keep_their_types_between_databases() {
    use sqlx::Connection;
    let (Some(pg), Some(my)) = (postgres().await, mariadb().await) else { return };
    let registry = Registry::new(std::env::temp_dir());
    let schema = pg.config.str("schema").unwrap().to_string();
    let database = my.config.str("database").unwrap().to_string();
    let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {schema}.money (id bigint PRIMARY KEY, amount numeric(12,2), at_local timestamp, at_zone timestamptz);
         INSERT INTO {schema}.money VALUES (1, 1234.50, '2026-01-02 03:04:05', '2026-01-02 03:04:05+02');"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let mut m = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {database}.money (id bigint PRIMARY KEY, amount decimal(12,2), at_local datetime(6), at_zone timestamp(6) NULL);
         INSERT INTO {database}.money VALUES (1, 1234.50, '2026-01-02 03:04:05', '2026-01-02 01:04:05');"
    )))
    .execute(&mut m)
    .await
    .unwrap();
    let dbs = [("postgres", &pg), ("mysql", &my)];
    for (from, src_db) in dbs {
        let src = registry.source(&src_db.config).await.unwrap();
        let found = src.discover().await.unwrap().into_iter().find(|s| s.name == "money").unwrap();
        let (_, rows) = read_all(&src, "money").await;
        for (to, dst_db) in dbs {
            let copy = EntitySchema { name: format!("money_from_{from}"), fields: found.fields.clone() };
            let dst = registry.destination(&dst_db.config).await.unwrap();
            write(&dst, &copy, &rows, WriteMode::Overwrite).await;
            let types = column_types(dst_db, &copy.name).await;
            let of = |c: &str| types.iter().find(|(n, _)| n == c).map(|(_, t)| t.to_ascii_lowercase()).unwrap();
            let want_amount = if to == "postgres" { "numeric(12,2)" } else { "decimal(12,2)" };
            assert_eq!(of("amount"), want_amount, "{from} → {to}: {types:?}");
            match to {
                "postgres" => {
                    assert_eq!(of("at_local"), "timestamp without time zone", "{from} → {to}: {types:?}");
                    // MySQL's TIMESTAMP holds an instant: it arrives with a zone.
                    assert_eq!(of("at_zone"), "timestamp with time zone", "{from} → {to}: {types:?}");
                }
                _ => {
                    assert!(of("at_local").starts_with("datetime"), "{from} → {to}: {types:?}");
                    assert!(
                        of("at_zone").starts_with("datetime") || of("at_zone").starts_with("timestamp"),
                        "{types:?}"
                    );
                }
            }
            // The values arrive as they left: the same instant, the same digits.
            let back = registry.source(&dst_db.config).await.unwrap();
            let (_, got) = read_all(&back, &copy.name).await;
            assert_eq!(got, rows, "{from} → {to}");
        }
    }
}

/// Runs `statements` in order on one session of `db`'s MariaDB database.
async fn in_mariadb(db: &Db, statements: &[&str]) {
    use sqlx::Connection;
    let name = db.config.str("database").unwrap();
    let mut c = sqlx::MySqlConnection::connect(&format!("mysql://root@127.0.0.1:3306/{name}")).await.unwrap();
    for sql in statements {
        sqlx::query(sqlx::AssertSqlSafe(*sql)).execute(&mut c).await.unwrap();
    }
}

/// MySQL's zero dates (kept by non-strict modes, common in old schemas)
/// read as NULL instead of failing the run at the destination.
#[tokio::test]
async fn mysql_zero_dates_read_as_null() {
    let Some(db) = mariadb().await else { return };
    in_mariadb(&db, &[
        "SET SESSION sql_mode = ''",
        "CREATE TABLE z (id int PRIMARY KEY, d date, t datetime(6))",
        "INSERT INTO z VALUES (1, '0000-00-00', '0000-00-00 00:00:00'), (2, '2024-00-10', '2024-05-01 10:00:00.25'), (3, '2024-05-01', NULL)",
    ])
    .await;
    let root = std::env::temp_dir().join(format!("sluice-zero-{}", tag()));
    let registry = Registry::new(root);
    let src = registry.source(&db.config).await.unwrap();
    let (fields, rows) = read_all(&src, "z").await;
    let at = |n: &str| fields.iter().position(|f| f.name == n).unwrap();
    let (d, t) = (at("d"), at("t"));
    assert_eq!((&rows[0][d], &rows[0][t]), (&Value::Null, &Value::Null), "zero date and zero datetime");
    assert_eq!(rows[1][d], Value::Null, "a zero month");
    assert_eq!(rows[1][t], Value::Timestamp(time::macros::datetime!(2024-05-01 10:00:00.25 UTC)));
    assert_eq!(rows[2][d], Value::Date(time::macros::date!(2024 - 05 - 01)));
}

/// Temporal, decimal, text and JSON columns are read as MySQL sends them
/// (no server-side cast): every length of a binary `DATETIME` (midnight,
/// seconds, microseconds), `TIMESTAMP`, `DATE` extremes, a wide decimal,
/// padded `CHAR`, unicode, a latin1 column, MariaDB's JSON, an `ENUM` (still cast), and
/// dates no calendar has, as `DATE_FORMAT` and `CAST` printed them.
#[tokio::test]
async fn mysql_columns_read_as_the_server_sends_them() {
    use time::macros::{date, datetime};
    let Some(db) = mariadb().await else { return };
    in_mariadb(&db, &[
        "SET time_zone = '+00:00'",
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "CREATE TABLE n (id int PRIMARY KEY, dt0 datetime, dt6 datetime(6), ts3 timestamp(3) NULL, d date, \
         x decimal(38,10), ch char(5), vc varchar(20), tx text, j json, e enum('red','green'), \
         l1 varchar(10) CHARACTER SET latin1)",
        "INSERT INTO n VALUES \
         (1, '2024-05-01 00:00:00', '2024-05-01 10:11:12.000001', '2024-05-01 23:59:59.125', '1000-01-01', \
          '-1234567890123456789012345678.0123456789', 'ab', 'ünï ✓', 'line\nbreak', '{\"a\": [1, 2.5, null]}', 'green', 'café'), \
         (2, '2024-05-01 10:11:12', '9999-12-31 23:59:59.999999', NULL, '9999-12-31', '0.0000000001', '', '', '', '[]', NULL, ''), \
         (3, '2024-02-31 10:00:00', '2024-02-30 10:00:00.5', NULL, '2023-02-29', NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    ])
    .await;
    let registry = Registry::new(std::env::temp_dir().join(format!("sluice-native-{}", tag())));
    let src = registry.source(&db.config).await.unwrap();
    let (fields, rows) = read_all(&src, "n").await;
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    let row = |i: usize| -> std::collections::HashMap<&str, Value> {
        names.iter().copied().zip(rows[i].iter().cloned()).collect()
    };
    let (a, b) = (row(0), row(1));
    assert_eq!(a["dt0"], Value::Timestamp(datetime!(2024-05-01 00:00:00 UTC)), "a midnight: date only");
    assert_eq!(b["dt0"], Value::Timestamp(datetime!(2024-05-01 10:11:12 UTC)), "seconds, no fraction");
    assert_eq!(a["dt6"], Value::Timestamp(datetime!(2024-05-01 10:11:12.000001 UTC)));
    assert_eq!(b["dt6"], Value::Timestamp(datetime!(9999-12-31 23:59:59.999999 UTC)));
    assert_eq!(a["ts3"], Value::Timestamp(datetime!(2024-05-01 23:59:59.125 UTC)));
    assert_eq!(b["ts3"], Value::Null);
    assert_eq!((&a["d"], &b["d"]), (&Value::Date(date!(1000 - 01 - 01)), &Value::Date(date!(9999 - 12 - 31))));
    assert_eq!(a["x"], Value::Decimal("-1234567890123456789012345678.0123456789".into()));
    assert_eq!(b["x"], Value::Decimal("0.0000000001".into()));
    assert_eq!((&a["ch"], &b["ch"]), (&Value::String("ab".into()), &Value::String("".into())));
    assert_eq!(a["vc"], Value::String("ünï ✓".into()));
    assert_eq!(a["tx"], Value::String("line\nbreak".into()));
    assert_eq!(a["j"], Value::Json(json!({"a": [1, 2.5, null]})));
    assert_eq!(b["j"], Value::Json(json!([])));
    assert_eq!((&a["e"], &b["e"]), (&Value::String("green".into()), &Value::Null));
    assert_eq!(a["l1"], Value::String("café".into()), "a latin1 column arrives as UTF-8");
    // Dates no calendar has (ALLOW_INVALID_DATES) come as the server prints them.
    let c = row(2);
    assert_eq!(c["dt0"], Value::String("2024-02-31T10:00:00.000000Z".into()));
    assert_eq!(c["dt6"], Value::String("2024-02-30T10:00:00.500000Z".into()));
    assert_eq!(c["d"], Value::String("2023-02-29".into()));
}

/// A PostgreSQL table overwritten into a CSV file takes PostgreSQL's own
/// CSV (no record decoded), and reads back as the records the decoded path
/// writes: every type, NULLs, unicode and extremes.
#[tokio::test]
async fn postgres_to_csv_in_bulk_reads_back_as_the_records() {
    let Some(pg) = postgres().await else { return };
    let root = std::env::temp_dir().join(format!("sluice-csv-bulk-{}", tag()));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    let (schema, rows) = fixture();
    let names: Vec<String> = schema.fields.iter().map(|f| f.name.clone()).collect();
    write(&registry.destination(&pg.config).await.unwrap(), &schema, &rows, WriteMode::Overwrite).await;
    let src = registry.source(&pg.config).await.unwrap();
    let fields = src.entity_fields("every_type").await.unwrap();

    let csv = config("file", json!({"path": "bulk-csv", "format": "csv"}));
    let dst = registry.destination(&csv).await.unwrap();
    let copy = EntitySchema { name: "bulk".into(), fields: fields.to_vec() };
    let mut w = dst.open(&copy, WriteMode::Overwrite).await.unwrap();
    let format = w.bulk_format().expect("a CSV overwrite takes a bulk format");
    let mut stream = src.bulk_out("every_type", format, &fields, None, 1).await.unwrap().expect("PostgreSQL makes it");
    assert_eq!(w.write_bulk(&mut *stream, None).await.unwrap(), rows.len() as u64);
    assert_eq!(w.finish().await.unwrap().rows_written, rows.len() as u64);

    let back = registry.source(&csv).await.unwrap();
    let (f2, got) = read_all(&back, "bulk").await;
    assert_rows("postgres → csv in bulk", &f2, &got, &rows, &names);
    // Appends and upserts take records: only an overwrite is in bulk.
    assert!(dst.open(&copy, WriteMode::Append).await.unwrap().bulk_format().is_none());
    std::fs::remove_dir_all(root).unwrap();
}

/// One batch of large rows goes to MySQL in statements under the server's
/// `max_allowed_packet` (16 MB here): 1,200 rows of 20 KB were one 24 MB
/// `INSERT`, which the server refused.
#[tokio::test]
async fn mysql_takes_a_batch_of_large_rows_in_statements_it_accepts() {
    let Some(db) = mariadb().await else { return };
    let registry = Registry::new(std::env::temp_dir().join(format!("sluice-large-{}", tag())));
    let schema = EntitySchema {
        name: "large".into(),
        fields: vec![field("id", FieldType::Integer, true), field("body", FieldType::String, false)],
    };
    let text = "é".repeat(10_000); // 20,000 bytes
    let rows: Vec<Vec<Value>> = (0..1_200).map(|i| vec![Value::Int(i), Value::String(text.clone())]).collect();
    let dst = registry.destination(&db.config).await.unwrap();
    let mut w = dst.open(&schema, WriteMode::Overwrite).await.unwrap();
    w.write(&RecordBatch { fields: Arc::new(schema.fields.clone()), rows: rows.clone() }).await.unwrap();
    assert_eq!(w.finish().await.unwrap().rows_written, 1_200);
    let (_, back) = read_all(&registry.source(&db.config).await.unwrap(), "large").await;
    assert_eq!(back.len(), 1_200);
    assert!(back.iter().all(|r| r[1] == Value::String(text.clone())));
}
