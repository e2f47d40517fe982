//! Checksums of key ranges computed in PostgreSQL and in MariaDB, against
//! the real servers: equal rows in two tables (column order, key width and
//! declared scale aside) sum alike bucket by bucket, and one changed value,
//! a missing row or a soft-deleted one changes exactly its bucket.

use sluice_connectors::postgres::{PgConnector, PgSettings};
use sluice_domain::connect::connector::*;
use sqlx::Connection;

mod common;
use common::*;

fn connector(schema: &str) -> PgConnector {
    PgConnector::new(PgSettings {
        host: "127.0.0.1".into(),
        port: 5432,
        database: "test".into(),
        user: "postgres".into(),
        password: None,
        schema: schema.into(),
        sslmode: "disable".into(),
        ssl_ca: None,
        allow_cleartext_password: false,
        guard: None,
        publication: None,
    })
    .unwrap()
}

const COLUMNS: [&str; 8] = ["name", "score", "meta", "at", "day", "ok", "raw", "ratio"];

fn request(entity: &str, unless: Option<&str>, lo: i64, hi: i64) -> DigestRequest {
    DigestRequest {
        entity: entity.into(),
        key: "id".into(),
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        unless: unless.map(Into::into),
        lo,
        hi,
        width: 10,
    }
}

/// The digests of `entity` from 1 to 95, by bucket.
async fn sums(p: &dyn Source, entity: &str, unless: Option<&str>) -> Vec<Digest> {
    let mut d = p.digests(&request(entity, unless, 1, 95)).await.unwrap().expect("the engine sums");
    d.sort_by_key(|d| d.bucket);
    d
}

/// Keys 25 (a changed value: bucket 2), 61 (a missing row: bucket 6) and
/// 90 (soft-deleted: bucket 8) differ between `left` and `right`.
fn three_buckets_differ(left: &[Digest], right: &[Digest]) {
    let differing: Vec<i64> = left.iter().zip(right).filter(|(l, r)| l != r).map(|(l, _)| l.bucket).collect();
    assert_eq!(differing, [2, 6, 8], "{left:?}\n{right:?}");
    assert_eq!((right[6].rows, right[8].rows), (9, 9));
}

#[tokio::test]
async fn mariadb_sums_alike_what_it_holds_alike() {
    let mut m = match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(m) => m,
        Err(e) => {
            unavailable("MariaDB", e.to_string(), "start it");
            return;
        }
    };
    let db = format!("digests_{}", tag());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {db};
         CREATE TABLE {db}.ta (id int PRIMARY KEY, name text, score decimal(10,2), meta json, at timestamp(6) NULL,
           day date, ok tinyint(1), raw blob, ratio double) ENGINE = InnoDB;
         INSERT INTO {db}.ta SELECT seq, IF(seq % 7 = 0, NULL, CONCAT('n ', seq)), seq * 1.25,
           JSON_OBJECT('k', seq, 'l', JSON_ARRAY(1, 'x')), TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND,
           DATE '2000-01-01' + INTERVAL seq DAY, seq % 2 = 0, UNHEX(MD5(seq)), seq / 3 FROM seq_1_to_95;
         CREATE TABLE {db}.tb (ratio double, raw blob, ok tinyint(1), day date, at timestamp(6) NULL, meta json,
           score decimal(12,2), name text, id bigint PRIMARY KEY, _sluice_deleted_at datetime(6) NULL) ENGINE = InnoDB;
         INSERT INTO {db}.tb (id, name, score, meta, at, day, ok, raw, ratio) SELECT * FROM {db}.ta;"
    )))
    .execute(&mut m)
    .await
    .unwrap();
    let registry = sluice_connectors::Registry::new(std::env::temp_dir());
    let cfg = config("mysql", serde_json::json!({"host": "127.0.0.1", "database": db, "user": "root"}));
    let my = sluice_domain::connect::registry::ConnectorRegistry::source(&registry, &cfg).await.unwrap();
    assert_eq!(my.key_span("ta", "id").await.unwrap(), Some((1, 95)));
    let left = sums(my.as_ref(), "ta", None).await;
    assert_eq!(left.len(), 10, "{left:?}");
    assert_eq!(left.iter().map(|d| d.rows).sum::<u64>(), 95);
    assert_eq!(sums(my.as_ref(), "tb", Some("_sluice_deleted_at")).await, left, "equal rows sum alike");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {db}.tb SET meta = JSON_SET(meta, '$.k', 0) WHERE id = 25; DELETE FROM {db}.tb WHERE id = 61;
         UPDATE {db}.tb SET _sluice_deleted_at = NOW(6) WHERE id = 90;"
    )))
    .execute(&mut m)
    .await
    .unwrap();
    three_buckets_differ(&left, &sums(my.as_ref(), "tb", Some("_sluice_deleted_at")).await);
    // Two rows of one bucket swapping a value (keys 33 and 34: bucket 3).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {db}.tb SET name = IF(id = 33, 'n 34', 'n 33') WHERE id IN (33, 34)"
    )))
    .execute(&mut m)
    .await
    .unwrap();
    let right = sums(my.as_ref(), "tb", Some("_sluice_deleted_at")).await;
    assert_ne!(left[3], right[3], "a swap inside a bucket shows");

    // Values that print alike in a careless concatenation differ: a
    // separator moved between columns, a null against a zero byte, two
    // FLOATs alike in six digits, text in two character sets.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {db}.ea (id int PRIMARY KEY, a varbinary(10), b varbinary(10), f float,
           t text CHARACTER SET latin1) ENGINE = InnoDB;
         CREATE TABLE {db}.eb (id int PRIMARY KEY, a varbinary(10), b varbinary(10), f float,
           t text CHARACTER SET utf8mb4) ENGINE = InnoDB;
         INSERT INTO {db}.ea VALUES (1, CONCAT('x', ','), 'y', 0, 'e'), (2, NULL, 'y', 0, 'e'),
           (3, 'x', 'y', 1.0000001, 'e'), (4, 'x', 'y', 0, 'é'), (5, 'x', 'y', 0.5, 'é');
         INSERT INTO {db}.eb VALUES (1, 'x', CONCAT(',', 'y'), 0, 'e'), (2, X'00', 'y', 0, 'e'),
           (3, 'x', 'y', 1.0000002, 'e'), (4, 'x', 'y', 0, 'Ã©'), (5, 'x', 'y', 0.5, 'é');"
    )))
    .execute(&mut m)
    .await
    .unwrap();
    let edge = |entity: &str| DigestRequest {
        entity: entity.into(),
        key: "id".into(),
        columns: ["a", "b", "f", "t"].iter().map(|c| c.to_string()).collect(),
        unless: None,
        lo: 1,
        hi: 5,
        width: 1,
    };
    let mut ea = my.digests(&edge("ea")).await.unwrap().unwrap();
    let mut eb = my.digests(&edge("eb")).await.unwrap().unwrap();
    ea.sort_by_key(|d| d.bucket);
    eb.sort_by_key(|d| d.bucket);
    let differing: Vec<i64> = ea.iter().zip(&eb).filter(|(l, r)| l != r).map(|(l, _)| l.bucket).collect();
    assert_eq!(differing, [0, 1, 2, 3], "keys 1 to 4 differ, key 5 is equal: {ea:?}\n{eb:?}");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut m).await.unwrap();
}

#[tokio::test]
async fn equal_rows_sum_alike_and_a_difference_changes_its_bucket_alone() {
    let mut c = match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(c) => c,
        Err(e) => {
            unavailable("PostgreSQL", e.to_string(), "start it");
            return;
        }
    };
    let (a, b) = (format!("digest_a_{}", tag()), format!("digest_b_{}", tag()));
    // The same rows; the copy's columns in another order, its key wider,
    // a soft-delete column of its own, and its numbers with a different
    // declared scale.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {a}; CREATE SCHEMA {b};
         CREATE TABLE {a}.t (id int PRIMARY KEY, name text, score numeric(10,2), meta jsonb, at timestamptz,
           day date, ok boolean, raw bytea, ratio float8);
         INSERT INTO {a}.t SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE 'n ' || i END, i * 1.25,
           jsonb_build_object('k', i, 'l', jsonb_build_array(1, 'x')), TIMESTAMPTZ '2026-01-01Z' + i * INTERVAL '1 s',
           DATE '2000-01-01' + i, i % 2 = 0, decode(md5(i::text), 'hex'), i / 3.0
           FROM generate_series(1, 95) i;
         CREATE TABLE {b}.t (ratio float8, raw bytea, ok boolean, day date, at timestamptz, meta jsonb,
           score numeric, name text, id bigint PRIMARY KEY, _sluice_deleted_at timestamptz);
         INSERT INTO {b}.t (id, name, score, meta, at, day, ok, raw, ratio) SELECT * FROM {a}.t;"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let (pa, pb) = (connector(&a), connector(&b));
    assert_eq!(pa.key_span("t", "id").await.unwrap(), Some((1, 95)));
    assert_eq!(pb.key_span("t", "id").await.unwrap(), Some((1, 95)));
    let left = sums(&pa, "t", None).await;
    assert_eq!(left.len(), 10, "95 keys from 1 in buckets of 10: {left:?}");
    assert_eq!(left.iter().map(|d| d.rows).sum::<u64>(), 95);
    assert_eq!(left[0].rows, 10);
    assert_eq!(sums(&pb, "t", Some("_sluice_deleted_at")).await, left, "equal rows sum alike");

    // A changed value (key 25: bucket 2), a missing row (key 61: bucket 6)
    // and a soft-deleted row (key 90: bucket 8).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {b}.t SET meta = jsonb_set(meta, '{{k}}', '0') WHERE id = 25; DELETE FROM {b}.t WHERE id = 61;
         UPDATE {b}.t SET _sluice_deleted_at = now() WHERE id = 90;"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    three_buckets_differ(&left, &sums(&pb, "t", Some("_sluice_deleted_at")).await);
    // Two rows of one bucket swapping a value (keys 33 and 34: bucket 3):
    // each row's hash is mixed whole, so the sum sees it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {b}.t SET name = CASE id WHEN 33 THEN 'n 34' ELSE 'n 33' END WHERE id IN (33, 34)"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    assert_ne!(left[3], sums(&pb, "t", Some("_sluice_deleted_at")).await[3], "a swap inside a bucket shows");
    // Text compares by its bytes, whatever the column's collation says
    // (here one that calls 'A' and 'a' equal), in arrays too.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE COLLATION {a}.nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
         CREATE TABLE {a}.ci (id int PRIMARY KEY, v text COLLATE {a}.nocase, tags text[] COLLATE {a}.nocase);
         CREATE TABLE {b}.ci (id int PRIMARY KEY, v text COLLATE {a}.nocase, tags text[] COLLATE {a}.nocase);
         INSERT INTO {a}.ci VALUES (1, 'A', '{{x}}'), (2, 'b', '{{X}}'), (3, 'c', '{{y}}');
         INSERT INTO {b}.ci VALUES (1, 'a', '{{x}}'), (2, 'b', '{{x}}'), (3, 'c', '{{y}}');"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let mut ci = request("ci", None, 1, 3);
    ci.columns = vec!["v".into(), "tags".into()];
    ci.width = 1;
    let (mut ca, mut cb) = (pa.digests(&ci).await.unwrap().unwrap(), pb.digests(&ci).await.unwrap().unwrap());
    ca.sort_by_key(|d| d.bucket);
    cb.sort_by_key(|d| d.bucket);
    let differing: Vec<i64> = ca.iter().zip(&cb).filter(|(l, r)| l != r).map(|(l, _)| l.bucket).collect();
    assert_eq!(differing, [0, 1], "{ca:?}\n{cb:?}");
    // Without the soft-delete condition, key 90's row counts again.
    assert_eq!(sums(&pb, "t", None).await[8], left[8]);
    // A type without a hash function of its own (point) is summed by its
    // text instead.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {a}.geo (id int PRIMARY KEY, p point, j json); CREATE TABLE {b}.geo (id int PRIMARY KEY, p point, j json);
         INSERT INTO {a}.geo SELECT i, point(i, 1), '{{\"a\": 1}}' FROM generate_series(1, 30) i;
         INSERT INTO {b}.geo SELECT * FROM {a}.geo; UPDATE {b}.geo SET p = point(0, 0) WHERE id = 12;"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let mut geo = request("geo", None, 1, 30);
    geo.columns = vec!["p".into(), "j".into()];
    let (mut ga, mut gb) = (pa.digests(&geo).await.unwrap().unwrap(), pb.digests(&geo).await.unwrap().unwrap());
    ga.sort_by_key(|d| d.bucket);
    gb.sort_by_key(|d| d.bucket);
    let differing: Vec<i64> = ga.iter().zip(&gb).filter(|(l, r)| l != r).map(|(l, _)| l.bucket).collect();
    assert_eq!((ga.len(), differing), (3, vec![1]), "{ga:?}\n{gb:?}");
    // Keys outside the span are left out; an empty table has none.
    let inner = pa.digests(&request("t", None, 11, 20)).await.unwrap().unwrap();
    assert_eq!(inner.iter().map(|d| (d.bucket, d.rows)).collect::<Vec<_>>(), [(0, 10)]);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE TABLE {a}.empty (id int PRIMARY KEY)")))
        .execute(&mut c)
        .await
        .unwrap();
    assert_eq!(pa.key_span("empty", "id").await.unwrap(), None);
    assert!(matches!(pa.key_span("nope", "id").await, Err(ConnectorError::EntityNotFound(_))));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {a} CASCADE; DROP SCHEMA {b} CASCADE")))
        .execute(&mut c)
        .await
        .unwrap();
}
