//! Copies in chunks, against the real servers: PostgreSQL reads a table's
//! chunks in the order of its key's bytes (whatever the database's
//! collation), and every destination clears exactly the key range the
//! source drew, so that a chunk's keys the source no longer has go and no
//! others.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_connectors::postgres::{PgConnector, PgSettings};
use sluice_domain::connect::changes::ChangeSource;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use std::sync::Arc;

mod common;
use common::*;

/// Keys whose order differs between a language's collation and their
/// bytes (case, accents, digits as text, a space).
const KEYS: [&str; 10] = ["B", "a", "aa", "ab", "Z", "é", "e", "10", "9", "a b"];

fn key_field(native: Option<&str>) -> Field {
    Field {
        name: "code".into(),
        field_type: FieldType::String,
        nullable: false,
        primary_key: true,
        native_type: native.map(Into::into),
    }
}

fn schema() -> EntitySchema {
    EntitySchema {
        name: "chunky".into(),
        fields: vec![key_field(Some("postgres:text")), Field::new("n", FieldType::Integer)],
    }
}

fn by_bytes() -> Vec<String> {
    let mut keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

/// The keys a destination holds, in byte order.
async fn held_keys(registry: &Registry, cfg: &ResolvedConfig) -> Vec<String> {
    let src = registry.source(cfg).await.unwrap();
    let mut r = src.read(ReadRequest { entity: "chunky".into(), batch_size: 100, ..Default::default() }).await.unwrap();
    let at = r.fields().iter().position(|f| f.name == "code").unwrap();
    let mut keys = Vec::new();
    while let Some(b) = r.next_batch().await.unwrap() {
        keys.extend(b.rows.into_iter().map(|row| match &row[at] {
            Value::String(s) => s.clone(),
            other => panic!("{other:?}"),
        }));
    }
    keys.sort();
    keys
}

/// Every key written, then the range after the third key up to the seventh
/// cleared (and, softly, the range after the eighth): exactly those go.
async fn clears_the_range(name: &str, registry: &Registry, cfg: &ResolvedConfig) {
    let dst = registry.destination(cfg).await.unwrap();
    let s = schema();
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    let rows = KEYS.iter().enumerate().map(|(i, k)| vec![Value::String(k.to_string()), Value::Int(i as i64)]).collect();
    w.write(&RecordBatch { fields: Arc::new(s.fields.clone()), rows }).await.unwrap();
    w.finish().await.unwrap();
    let sorted = by_bytes();
    let range = KeyRange {
        fields: vec![key_field(Some("postgres:text"))],
        after: Some(vec![Value::String(sorted[2].clone())]),
        upto: Some(vec![Value::String(sorted[6].clone())]),
    };
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    w.clear(&range, None).await.unwrap();
    w.finish().await.unwrap();
    let mut left = sorted.clone();
    left.drain(3..=6);
    assert_eq!(held_keys(registry, cfg).await, left, "{name}: the range ({}, {}]", sorted[2], sorted[6]);
    // An open end: everything after the key.
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    w.clear(&KeyRange { upto: None, after: Some(vec![Value::String(sorted[7].clone())]), ..range }, None)
        .await
        .unwrap();
    w.finish().await.unwrap();
    left.retain(|k| *k <= sorted[7]);
    assert_eq!(held_keys(registry, cfg).await, left, "{name}: after {}", sorted[7]);
}

#[tokio::test]
async fn chunks_follow_the_bytes_of_text_keys_and_every_destination_clears_the_same_range() {
    use sqlx::Connection;
    let mut c = match sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(c) => c,
        Err(e) => {
            unavailable("PostgreSQL", e.to_string(), "start it");
            return;
        }
    };
    let t = tag();
    let schema_name = format!("chunks_{t}");
    // The key's own collation orders by language (lower case first,
    // accents beside their letter); chunks still go by bytes.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {schema_name}; \
         CREATE TABLE {schema_name}.chunky (code text COLLATE \"und-x-icu\" PRIMARY KEY, n int); \
         INSERT INTO {schema_name}.chunky SELECT k, i FROM unnest(ARRAY['{}']) WITH ORDINALITY AS u(k, i); \
         CREATE TABLE {schema_name}.pairs (a int, b text COLLATE \"und-x-icu\", v int, PRIMARY KEY (a, b)); \
         INSERT INTO {schema_name}.pairs VALUES (2, 'b', 1), (1, 'Z', 2), (1, 'a', 3), (2, 'A', 4), (1, 'é', 5);",
        KEYS.join("','")
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let by_language: Vec<String> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT code FROM {schema_name}.chunky ORDER BY code")))
            .fetch_all(&mut c)
            .await
            .unwrap();
    assert_ne!(by_language, by_bytes(), "the table's collation orders otherwise than bytes");
    let pg = PgConnector::new(PgSettings {
        host: "127.0.0.1".into(),
        port: 5432,
        database: "test".into(),
        user: "postgres".into(),
        password: None,
        schema: schema_name.clone(),
        sslmode: "disable".into(),
        ssl_ca: None,
        allow_cleartext_password: false,
        guard: None,
        publication: None,
    })
    .unwrap();

    // Chunks of three, each after the last key of the one before.
    let key = [key_field(Some("postgres:text"))];
    let (mut seen, mut after) = (Vec::new(), None::<Vec<Value>>);
    loop {
        let chunk = pg.read_chunk("chunky", &key, after.as_deref(), 3).await.unwrap();
        assert!(chunk.position.as_str().contains('/'), "{}", chunk.position);
        let at = chunk.fields.iter().position(|f| f.name == "code").unwrap();
        let keys: Vec<String> = chunk.rows.iter().map(|r| sluice_domain::sync::transform::display(&r[at])).collect();
        seen.extend(keys.clone());
        if chunk.rows.len() < 3 {
            break;
        }
        after = chunk.rows.last().map(|r| vec![r[at].clone()]);
    }
    assert_eq!(seen, by_bytes(), "the chunks in the order of the key's bytes");

    // A key of two fields: compared as a row, the text by its bytes.
    let pair = [
        Field {
            name: "a".into(),
            field_type: FieldType::Integer,
            nullable: false,
            primary_key: true,
            native_type: None,
        },
        Field { name: "b".into(), ..key_field(Some("postgres:text")) },
    ];
    let first = pg.read_chunk("pairs", &pair, None, 2).await.unwrap();
    let rest = pg.read_chunk("pairs", &pair, Some(&first.rows[1][..2]), 10).await.unwrap();
    let order: Vec<i64> =
        first.rows.iter().chain(&rest.rows).map(|r| if let Value::Int(v) = r[2] { v } else { 0 }).collect();
    assert_eq!(order, [2, 3, 5, 4, 1], "(1,Z) (1,a) (1,é) (2,A) (2,b)");

    let root = std::env::temp_dir().join(format!("sluice-chunks-{t}"));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    clears_the_range("sqlite", &registry, &config("sqlite", json!({"path": "c.db"}))).await;
    let pg_cfg = config(
        "postgres",
        json!({"host": "127.0.0.1", "database": "test", "user": "postgres", "schema": format!("{schema_name}_dst"), "sslmode": "disable"}),
    );
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema_name}_dst"))).execute(&mut c).await.unwrap();
    clears_the_range("postgres", &registry, &pg_cfg).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA {schema_name} CASCADE; DROP SCHEMA {schema_name}_dst CASCADE"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    match sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test").await {
        Ok(mut m) => {
            let db = format!("chunks_{t}");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut m).await.unwrap();
            let cfg = config("mysql", json!({"host": "127.0.0.1", "database": db, "user": "root"}));
            let r = tokio::spawn({
                let registry = registry.clone();
                async move { clears_the_range("mysql", &registry, &cfg).await }
            })
            .await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&mut m).await.unwrap();
            r.unwrap();
        }
        Err(e) => unavailable("MariaDB", e.to_string(), "start it"),
    }
    std::fs::remove_dir_all(root).unwrap();
}
