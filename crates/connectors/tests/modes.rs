//! Write modes, schema evolution, cursor reads and failure classes of every
//! connector, against the real servers (skipped loudly when unreachable
//! outside CI).

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use std::collections::BTreeMap;
use std::sync::Arc;

mod common;
use common::*;

async fn reachable(what: &str, ok: bool, why: String) -> bool {
    if !ok {
        unavailable(what, why, "start it");
    }
    ok
}

fn ts(s: &str) -> Value {
    Value::Timestamp(parse_timestamp(s).unwrap())
}

fn schema(extra: bool) -> EntitySchema {
    let mut fields = vec![
        Field {
            name: "id".into(),
            field_type: FieldType::Integer,
            nullable: false,
            primary_key: true,
            native_type: None,
        },
        Field::new("v", FieldType::String),
        Field::new("updated", FieldType::Timestamp),
    ];
    if extra {
        fields.push(Field::new("extra", FieldType::String));
    }
    EntitySchema { name: "modes".into(), fields }
}

fn batch(s: &EntitySchema, rows: Vec<Vec<Value>>) -> RecordBatch {
    RecordBatch { fields: Arc::new(s.fields.clone()), rows }
}

fn row(id: i64, v: &str, t: &str) -> Vec<Value> {
    vec![Value::Int(id), Value::String(v.into()), ts(t)]
}

async fn read(src: &Arc<dyn Source>, cursor: Option<CursorBound>) -> Vec<BTreeMap<String, Value>> {
    let mut r =
        src.read(ReadRequest { entity: "modes".into(), cursor, batch_size: 100, ..Default::default() }).await.unwrap();
    let fields = r.fields();
    let mut out = Vec::new();
    while let Some(b) = r.next_batch().await.unwrap() {
        for row in b.rows {
            out.push(fields.iter().map(|f| f.name.clone()).zip(row).collect());
        }
    }
    out
}

fn ids(rows: &[BTreeMap<String, Value>]) -> Vec<i64> {
    let mut v: Vec<i64> =
        rows.iter().map(|r| if let Value::Int(i) = r["id"] { i } else { panic!("{:?}", r["id"]) }).collect();
    v.sort();
    v
}

fn value_of(rows: &[BTreeMap<String, Value>], id: i64, col: &str) -> Value {
    rows.iter().find(|r| r["id"] == Value::Int(id)).unwrap()[col].clone()
}

async fn exercise(name: &str, cfg: &ResolvedConfig, registry: &Registry) {
    let dst = registry.destination(cfg).await.unwrap();
    let s = schema(false);

    // Upsert: checkpoints commit; of two versions of one key in a batch the last wins.
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    w.write(&batch(&s, vec![row(1, "a", "2026-01-01T00:00:00Z"), row(2, "b", "2026-01-01T00:00:00Z")])).await.unwrap();
    assert_eq!(w.checkpoint().await.unwrap().rows_written, 2);
    w.write(&batch(
        &s,
        vec![
            row(2, "b2", "2026-01-02T00:00:00Z"),
            row(3, "c", "2026-01-02T00:00:00Z"),
            row(3, "c2", "2026-01-03T00:00:00Z"),
        ],
    ))
    .await
    .unwrap();
    w.finish().await.unwrap();
    let src = registry.source(cfg).await.unwrap();
    let rows = read(&src, None).await;
    assert_eq!(ids(&rows), [1, 2, 3], "{name}: upsert keeps one row per key");
    assert_eq!(value_of(&rows, 2, "v"), Value::String("b2".into()), "{name}");
    assert_eq!(value_of(&rows, 3, "v"), Value::String("c2".into()), "{name}: the last version in a batch wins");

    // Append, and a new source column carried to the destination.
    let s2 = schema(true);
    let mut w = dst.open(&s2, WriteMode::Append).await.unwrap();
    w.write(&batch(
        &s2,
        vec![vec![Value::Int(4), Value::String("d".into()), ts("2026-01-04T00:00:00Z"), Value::String("x".into())]],
    ))
    .await
    .unwrap();
    w.finish().await.unwrap();
    let described = dst.describe("modes").await.unwrap().unwrap();
    assert!(described.field("extra").is_some(), "{name}: the new column exists");
    let rows = read(&src, None).await;
    assert_eq!(ids(&rows), [1, 2, 3, 4], "{name}: append adds");
    assert_eq!(value_of(&rows, 4, "extra"), Value::String("x".into()), "{name}");
    assert_eq!(value_of(&rows, 1, "extra"), Value::Null, "{name}: old rows have null in the new column");

    // Cursor reads: at or past the value, ordered by it.
    let rows = read(&src, Some(CursorBound { field: "updated".into(), from: Some(ts("2026-01-02T00:00:00Z")) })).await;
    let seen: Vec<Value> = rows.iter().map(|r| r["updated"].clone()).collect();
    assert_eq!(
        seen,
        vec![ts("2026-01-02T00:00:00Z"), ts("2026-01-03T00:00:00Z"), ts("2026-01-04T00:00:00Z")],
        "{name}: boundary included, ordered"
    );

    // Aborted writes leave nothing.
    let mut w = dst.open(&s2, WriteMode::Append).await.unwrap();
    w.write(&batch(&s2, vec![vec![Value::Int(99), Value::Null, Value::Null, Value::Null]])).await.unwrap();
    w.abort().await;
    assert_eq!(ids(&read(&src, None).await), [1, 2, 3, 4], "{name}: abort rolls back");

    // Overwrite: readers see the old table until finish, then only the new one.
    let mut w = dst.open(&s2, WriteMode::Overwrite).await.unwrap();
    w.write(&batch(&s2, vec![vec![Value::Int(9), Value::String("z".into()), ts("2026-02-01T00:00:00Z"), Value::Null]]))
        .await
        .unwrap();
    w.checkpoint().await.unwrap();
    assert_eq!(ids(&read(&src, None).await), [1, 2, 3, 4], "{name}: the old table stays visible during an overwrite");
    w.finish().await.unwrap();
    assert_eq!(ids(&read(&src, None).await), [9], "{name}: overwrite replaces");
    let after = dst.describe("modes").await.unwrap().unwrap();
    assert!(after.field("id").unwrap().primary_key, "{name}: the key survives the swap");

    // A missing entity is told apart.
    let e = src
        .read(ReadRequest { entity: "no_such_table".into(), batch_size: 10, ..Default::default() })
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectorError::EntityNotFound(_)), "{name}: {e:?}");
}

#[tokio::test]
async fn write_modes_evolution_and_cursors_work_on_every_connector() {
    let root = std::env::temp_dir().join(format!("sluice-modes-{}", tag()));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    exercise("sqlite", &config("sqlite", json!({"path": "m.db"})), &registry).await;
    exercise("jsonl", &config("file", json!({"path": "j", "format": "jsonl"})), &registry).await;
    exercise("csv", &config("file", json!({"path": "c", "format": "csv"})), &registry).await;

    use sqlx::Connection;
    let t = tag();
    match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(mut c) => {
            reachable("PostgreSQL", true, String::new()).await;
            let schema = format!("modes_{t}");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut c).await.unwrap();
            let cfg = config(
                "postgres",
                json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
            );
            let r = tokio::spawn({
                let registry = registry.clone();
                async move { exercise("postgres", &cfg, &registry).await }
            })
            .await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut c).await.unwrap();
            r.unwrap();
        }
        Err(e) => {
            reachable("PostgreSQL", false, e.to_string()).await;
        }
    }
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(mut c) => {
            let db = format!("modes_{t}");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut c).await.unwrap();
            let cfg = config("mysql", json!({"host": "127.0.0.1", "database": db, "user": "root"}));
            let r = tokio::spawn({
                let registry = registry.clone();
                async move { exercise("mysql", &cfg, &registry).await }
            })
            .await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut c).await.unwrap();
            r.unwrap();
        }
        Err(e) => {
            reachable("MariaDB", false, e.to_string()).await;
        }
    }
    std::fs::remove_dir_all(root).unwrap();
}

async fn check_err(registry: &Registry, cfg: serde_json::Value, t: &str) -> ConnectorError {
    let c = config(t, cfg);
    // A connector may refuse at once or when checked.
    let e = match registry.source(&c).await {
        Err(e) => e,
        Ok(src) => src.check().await.unwrap_err(),
    };
    assert!(!e.to_string().contains("hunter2"), "the password leaked: {e}");
    e
}

#[tokio::test]
async fn failures_are_told_apart_and_never_show_the_password() {
    let root = std::env::temp_dir();
    let registry = Registry::new(root.clone());
    for (t, port) in [("postgres", 1), ("mysql", 1)] {
        let e = check_err(&registry, json!({"host": "127.0.0.1", "port": port, "database": "x", "user": "u", "password": "hunter2", "sslmode": "disable"}), t).await;
        assert!(matches!(e, ConnectorError::Refused(_)), "{t}: {e:?}");
    }
    let e = check_err(&registry, json!({"host": "127.0.0.1", "database": "test", "user": "no_such_role", "password": "hunter2", "sslmode": "disable"}), "postgres").await;
    assert!(matches!(e, ConnectorError::AuthFailed(_)), "{e:?}");
    let e = check_err(&registry, json!({"host": "127.0.0.1", "database": "no_such_db", "user": "postgres", "password": "hunter2", "sslmode": "disable"}), "postgres").await;
    assert!(matches!(e, ConnectorError::DatabaseNotFound(_)), "{e:?}");
    let e = check_err(
        &registry,
        json!({"host": "127.0.0.1", "database": "test", "user": "root", "password": "hunter2"}),
        "mysql",
    )
    .await;
    assert!(matches!(e, ConnectorError::AuthFailed(_)), "{e:?}");
    let e = check_err(&registry, json!({"host": "127.0.0.1", "database": "no_such_db", "user": "root"}), "mysql").await;
    assert!(matches!(e, ConnectorError::DatabaseNotFound(_)), "{e:?}");
    let e = check_err(&registry, json!({"path": format!("missing-{}.db", tag())}), "sqlite").await;
    assert!(matches!(e, ConnectorError::DatabaseNotFound(_)), "{e:?}");
    let e = registry.source(&config("sqlite", json!({"path": "../etc/passwd"}))).await.err().unwrap();
    assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
    // A server that accepts and never answers (on loopback): the check ends
    // with a timeout instead of hanging.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let e = check_err(&registry, json!({"host": "127.0.0.1", "port": port, "database": "x", "user": "u", "password": "hunter2", "sslmode": "disable"}), "postgres").await;
    assert!(matches!(e, ConnectorError::Timeout(_)), "{e:?}");
    holder.abort();
}

/// The greatest cursor a first incremental load stores, for the cursor
/// types PostgreSQL orders (uuid has no `max()`), and none for an empty
/// table.
#[tokio::test]
async fn postgres_tells_the_greatest_cursor_of_any_ordered_type() {
    use sqlx::Connection;
    let mut c = match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(c) => c,
        Err(e) => {
            reachable("PostgreSQL", false, e.to_string()).await;
            return;
        }
    };
    let schema = format!("maxc_{}", tag());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.t (id bigint PRIMARY KEY, u uuid, ts timestamptz, s text);
         INSERT INTO {schema}.t VALUES
           (1, '01a209ab-0000-7000-8000-000000000001', '2026-01-01T00:00:00Z', 'a'),
           (2, '01a209ab-0000-7000-8000-000000000009', '2026-01-03T00:00:00Z', 'c'),
           (3, NULL, NULL, NULL);
         CREATE TABLE {schema}.empty (id bigint PRIMARY KEY, u uuid);"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let registry = Registry::new(std::env::temp_dir());
    let cfg = config(
        "postgres",
        json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
    );
    let src = registry.source(&cfg).await.unwrap();
    let fields = src.entity_fields("t").await.unwrap();
    let field = |n: &str| fields.iter().find(|f| f.name == n).unwrap().clone();
    let max = |e: &'static str, f: Field| {
        let src = src.clone();
        async move { src.max_cursor(e, &f).await.unwrap() }
    };
    assert_eq!(max("t", field("u")).await, Some(Value::String("01a209ab-0000-7000-8000-000000000009".into())));
    assert_eq!(max("t", field("ts")).await, Some(ts("2026-01-03T00:00:00Z")));
    assert_eq!(max("t", field("s")).await, Some(Value::String("c".into())));
    let empty = src.entity_fields("empty").await.unwrap();
    assert_eq!(max("empty", empty[1].clone()).await, None, "no rows, no cursor");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut c).await.unwrap();
}

/// Reads `entity` whole with up to `ranges` key ranges: its ids as they
/// came, and the sum of the lengths of `v`. `reading` answers, once the
/// first batch is in (the reader's channel full, so every range it reads
/// at once is still being read), how many reads of the table the server
/// is running.
async fn read_ids<F: std::future::Future<Output = usize>>(
    src: &Arc<dyn Source>,
    entity: &str,
    ranges: usize,
    reading: impl Fn() -> F,
) -> (Vec<i64>, usize, usize) {
    let mut r =
        src.read(ReadRequest { entity: entity.into(), batch_size: 5_000, ranges, ..Default::default() }).await.unwrap();
    let (mut ids, mut len, mut at_once) = (Vec::new(), 0, 0);
    while let Some(b) = r.next_batch().await.unwrap() {
        if ids.is_empty() {
            // The ranges' queries start as their tasks run: wait for them.
            for _ in 0..100 {
                at_once = reading().await;
                if at_once >= ranges {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        for row in b.rows {
            let (Value::Int(id), Value::String(v)) = (&row[0], &row[1]) else { panic!("{row:?}") };
            ids.push(*id);
            len += v.len();
        }
    }
    (ids, len, at_once)
}

/// 300,000 rows (about 45 MB) keyed -499,997, -499,994, … : read in three
/// key ranges at once, every row arrives exactly once.
async fn splits_a_large_table<F: std::future::Future<Output = usize>>(
    what: &str,
    src: Arc<dyn Source>,
    reading: impl Fn() -> F,
) {
    let want: Vec<i64> = (1..=300_000).map(|g| g * 3 - 500_000).collect();
    let (mut ids, len, at_once) = read_ids(&src, "big", 3, &reading).await;
    assert_eq!(at_once, 3, "{what}: three ranges read at once");
    ids.sort_unstable();
    assert_eq!(ids.len(), want.len(), "{what}");
    assert!(ids == want, "{what}: every key exactly once");
    assert_eq!(len, 300_000 * 120, "{what}");
    // Told to read in one piece, it does.
    let (mut ids, _, at_once) = read_ids(&src, "big", 1, &reading).await;
    assert_eq!(at_once, 1, "{what}: one read");
    ids.sort_unstable();
    assert!(ids == want, "{what}: one read");
}

/// The same table as PostgreSQL's CSV for a file (the bulk path of a full
/// refresh into CSV) in three key ranges at once: every piece ends on a
/// record's end, every key comes once.
async fn splits_a_large_csv<F: std::future::Future<Output = usize>>(src: Arc<dyn Source>, reading: impl Fn() -> F) {
    let fields = src.entity_fields("big").await.unwrap();
    let format = sluice_connectors::common::SLUICE_CSV;
    let mut stream = src.bulk_out("big", format, &fields, None, 3).await.unwrap().expect("PostgreSQL makes it");
    let (mut ids, mut at_once) = (Vec::new(), 0);
    while let Some(chunk) = stream.next_chunk().await.unwrap() {
        if ids.is_empty() {
            for _ in 0..100 {
                at_once = reading().await;
                if at_once >= 3 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        assert_eq!(chunk.last(), Some(&b'\n'), "a piece ends on a record's end");
        for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line = std::str::from_utf8(line).unwrap();
            let (id, v) = line.split_once(',').unwrap();
            assert_eq!(v.len(), 120, "{line}");
            ids.push(id.parse::<i64>().unwrap());
        }
    }
    assert_eq!(at_once, 3, "three COPYs at once");
    ids.sort_unstable();
    let want: Vec<i64> = (1..=300_000).map(|g| g * 3 - 500_000).collect();
    assert!(ids == want, "every key exactly once ({} keys)", ids.len());
}

#[tokio::test]
async fn large_tables_are_read_in_key_ranges_at_once_every_row_once() {
    use sqlx::Connection;
    let registry = Registry::new(std::env::temp_dir());
    let t = tag();
    match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(mut c) => {
            let schema = format!("split_{t}");
            for sql in [
                format!("CREATE SCHEMA {schema}"),
                format!("CREATE TABLE {schema}.big (id bigint PRIMARY KEY, v text NOT NULL)"),
                format!(
                    "INSERT INTO {schema}.big SELECT g * 3 - 500000, repeat('x', 120) FROM generate_series(1, 300000) g"
                ),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
            }
            let cfg = config(
                "postgres",
                json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
            );
            let src = registry.source(&cfg).await.unwrap();
            let watch = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/test").await.unwrap();
            // Only this test's reads: the server is shared (another client
            // may read a table named big of its own meanwhile).
            let mine = format!("COPY (SELECT%\"{schema}\".\"big\"%");
            let reading = move || {
                let (watch, mine) = (watch.clone(), mine.clone());
                async move {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1 AND state = 'active' \
                         AND datname = 'test'",
                    )
                    .bind(mine)
                    .fetch_one(&watch)
                    .await
                    .unwrap();
                    n as usize
                }
            };
            let r = tokio::spawn(async move {
                splits_a_large_table("postgres", src.clone(), &reading).await;
                splits_a_large_csv(src, &reading).await
            })
            .await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut c).await.unwrap();
            r.unwrap();
        }
        Err(e) => {
            reachable("PostgreSQL", false, e.to_string()).await;
        }
    }
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(mut c) => {
            let db = format!("split_{t}");
            for sql in [
                format!("CREATE DATABASE {db}"),
                format!("CREATE TABLE {db}.big (id bigint PRIMARY KEY, v text NOT NULL)"),
                format!(
                    "INSERT INTO {db}.big SELECT CAST(seq AS SIGNED) * 3 - 500000, repeat('x', 120) FROM seq_1_to_300000"
                ),
                format!("ANALYZE TABLE {db}.big"),
                // The same rows in an engine that keeps no snapshot.
                format!("CREATE TABLE {db}.flat (id bigint PRIMARY KEY, v text NOT NULL) ENGINE=MyISAM"),
                format!("INSERT INTO {db}.flat SELECT id, v FROM {db}.big"),
                format!("ANALYZE TABLE {db}.flat"),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap();
            }
            let cfg = config("mysql", json!({"host": "127.0.0.1", "database": db, "user": "root"}));
            let src = registry.source(&cfg).await.unwrap();
            let watch = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/test").await.unwrap();
            let watch_flat = watch.clone();
            let watched = db.clone();
            let reading = move || {
                let (watch, db) = (watch.clone(), watched.clone());
                async move {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'SELECT%big%'",
                    )
                    .bind(db)
                    .fetch_one(&watch)
                    .await
                    .unwrap();
                    n as usize
                }
            };
            let flat = {
                let (watch, db) = (watch_flat, db.clone());
                move || {
                    let (watch, db) = (watch.clone(), db.clone());
                    async move {
                        let n: i64 = sqlx::query_scalar(
                            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'SELECT%flat%'",
                        )
                        .bind(db)
                        .fetch_one(&watch)
                        .await
                        .unwrap();
                        n as usize
                    }
                }
            };
            let r = tokio::spawn(async move {
                let (ids, _, at_once) = read_ids(&src, "flat", 3, flat).await;
                assert_eq!((ids.len(), at_once), (300_000, 1), "a MyISAM table is read in one piece");
                splits_a_large_table("mysql", src, reading).await
            })
            .await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut c).await.unwrap();
            r.unwrap();
        }
        Err(e) => {
            reachable("MariaDB", false, e.to_string()).await;
        }
    }
}

/// A take-over: attempt 1 of a run is frozen holding its open transaction
/// (PostgreSQL: the fresh table of a full refresh; MySQL: an upserted row),
/// on which attempt 2 would wait as long as it stays frozen; attempt 2 ends
/// attempt 1's session and writes at once; attempt 1 commits nothing.
async fn take_over(name: &str, dest: Arc<dyn Destination>, mode: WriteMode) {
    use std::time::Duration;
    let s = schema(false);
    let run = uuid::Uuid::now_v7();
    let (first, second) = (Attempt { run, number: 1 }, Attempt { run, number: 2 });
    let rows = |v: &str| batch(&s, vec![row(1, v, "2026-01-01T00:00:00Z")]);
    let mut seed = dest.open(&s, WriteMode::Upsert).await.unwrap();
    seed.write(&rows("seed")).await.unwrap();
    seed.finish().await.unwrap();
    let mut frozen = dest.open_for(&s, mode, Some(&first)).await.unwrap();
    for _ in 0..3 {
        // The third write waits for the first to have run.
        frozen.write(&rows("first")).await.unwrap();
    }
    // Attempt 1 wrote another entity at the same time, in a session of its own.
    let other = EntitySchema { name: "modes_other".into(), ..schema(false) };
    let mut frozen_too = dest.open_for(&other, mode, Some(&first)).await.unwrap();
    for _ in 0..3 {
        frozen_too.write(&batch(&other, vec![row(1, "first", "2026-01-01T00:00:00Z")])).await.unwrap();
    }
    let write_second = || async {
        let mut w = dest.open_for(&s, mode, Some(&second)).await?;
        w.write(&rows("second")).await?;
        w.finish().await
    };
    let waited = tokio::time::timeout(Duration::from_secs(2), write_second()).await;
    assert!(waited.is_err(), "{name}: the second attempt waits on the frozen one: {waited:?}");
    assert_eq!(dest.end_earlier_attempts(&second).await.unwrap(), 2, "{name}: both frozen sessions are ended");
    let written = tokio::time::timeout(Duration::from_secs(10), write_second()).await;
    assert!(matches!(written, Ok(Ok(_))), "{name}: then it writes at once: {written:?}");
    frozen_too.finish().await.expect_err("the ended attempt commits nothing in the other entity either");
    let gone = frozen.finish().await.expect_err("the ended attempt commits nothing").to_string();
    if name == "postgres" {
        // What the frozen worker reports when it wakes: what happened.
        assert!(gone.contains("ended the session"), "{name}: {gone}");
    }
    assert_eq!(dest.end_earlier_attempts(&second).await.unwrap(), 0, "{name}: nothing left to end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_ends_the_earlier_attempts_sessions() {
    use sqlx::Connection;
    let registry = Registry::new(std::env::temp_dir());
    let t = tag();
    match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(mut c) => {
            let schema = format!("takeover_{t}");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut c).await.unwrap();
            let cfg = config(
                "postgres",
                json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": schema, "sslmode": "disable"}),
            );
            take_over("postgres", registry.destination(&cfg).await.unwrap(), WriteMode::Overwrite).await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut c).await.unwrap();
        }
        Err(e) => {
            reachable("PostgreSQL", false, e.to_string()).await;
        }
    }
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(mut c) => {
            let db = format!("takeover_{t}");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut c).await.unwrap();
            let cfg =
                config("mysql", json!({"host": "127.0.0.1", "database": db, "user": "root", "ssl_mode": "disabled"}));
            take_over("mysql", registry.destination(&cfg).await.unwrap(), WriteMode::Upsert).await;
            let (v,): (String,) = sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT v FROM {db}.modes WHERE id = 1")))
                .fetch_one(&mut c)
                .await
                .unwrap();
            assert_eq!(v, "second");
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut c).await.unwrap();
        }
        Err(e) => {
            reachable("MariaDB", false, e.to_string()).await;
        }
    }
}
