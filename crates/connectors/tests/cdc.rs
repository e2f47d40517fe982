//! Change data capture from PostgreSQL against a server of the test's own
//! with `wal_level = logical` (the shared server keeps `replica`): what the
//! connection test says, the slot's exported snapshot, inserts, updates
//! (a large value left unchanged) and deletes in commit order, a position
//! held and confirmed, and nothing left behind once the stream is dropped.

use sluice_connectors::postgres::{PgConnector, PgSettings};
use sluice_domain::connect::changes::{ChangeEvent, ChangeOp, ChangeSource, Position};
use sluice_domain::connect::connector::Value;
use sluice_testkit::services::OwnPostgres;
use sqlx::Connection;

mod common;

fn settings(port: u16, database: &str) -> PgSettings {
    PgSettings {
        host: "127.0.0.1".into(),
        port,
        database: database.into(),
        user: "postgres".into(),
        password: None,
        schema: "public".into(),
        sslmode: "disable".into(),
        ssl_ca: None,
        allow_cleartext_password: false,
        guard: None,
        publication: None,
    }
}

fn connector(port: u16, database: &str) -> PgConnector {
    PgConnector::new(settings(port, database)).unwrap()
}

async fn exec(c: &mut sqlx::PgConnection, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(c).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Every event up to the end the stream was opened up to.
async fn read_all(pg: &PgConnector, after: &Position, until: &Position) -> Vec<ChangeEvent> {
    let from = [("people".to_string(), after.clone())];
    let mut reader = pg.changes("t1", &from, until).await.unwrap();
    let mut all = Vec::new();
    loop {
        let got = reader.next(3).await.unwrap();
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

/// The (op, id) of each change and the position of each commit.
fn summary(events: &[ChangeEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ChangeEvent::Change(c) => Some(format!("{} {:?}", c.op.as_str(), c.values[0])),
            ChangeEvent::Commit { .. } => Some("commit".into()),
            ChangeEvent::Schema(_) | ChangeEvent::Begin { .. } | ChangeEvent::Halt { .. } => None,
        })
        .collect()
}

fn commits(events: &[ChangeEvent]) -> Vec<Position> {
    events
        .iter()
        .filter_map(|e| match e {
            ChangeEvent::Commit { position, .. } => Some(position.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_gives_every_change_once_from_the_snapshots_point() {
    // The shared server says why it cannot.
    if let Ok(mut c) = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await {
        let wal: String = sqlx::query_scalar("SHOW wal_level").fetch_one(&mut c).await.unwrap();
        if wal != "logical" {
            let reasons = connector(5432, "test").readiness(&["no_such_table".into()]).await.unwrap();
            assert!(reasons.iter().any(|r| r.starts_with("wal_level is")), "{reasons:?}");
            assert!(reasons.iter().any(|r| r.contains("is not a table")), "{reasons:?}");
        }
    }
    let Some((server, mut c)) = logical_server().await else { return };
    exec(
        &mut c,
        "CREATE TABLE people (id int PRIMARY KEY, name text, bio text, born date, seen timestamptz, score numeric);
         CREATE TABLE keyless (v text);
         INSERT INTO people VALUES (1, 'ann', 'short', '1990-01-02', '2026-01-01 10:00:00+00', 1.50),
                                   (2, 'bob', NULL, NULL, NULL, NULL), (3, 'cy', NULL, NULL, NULL, NULL);",
    )
    .await;
    let pg = connector(server.port, "postgres");
    assert_eq!(pg.readiness(&["people".into()]).await.unwrap(), Vec::<String>::new());
    let reasons = pg.readiness(&["keyless".into()]).await.unwrap();
    assert_eq!(reasons, ["table \"public\".\"keyless\" has no primary key"]);
    // A connection's own test names no table: every table is looked at.
    assert_eq!(pg.readiness(&[]).await.unwrap(), reasons);

    // A new stream exports the snapshot its position starts from.
    let entities = ["people".to_string()];
    let start = pg.open_stream("t1", &entities).await.unwrap();
    let snapshot = start.snapshot.clone().expect("a new slot exports its snapshot");
    // A large value, stored out of line (TOAST), that later updates leave as it is.
    // Incompressible, so that it is stored out of line (TOAST).
    let big = sluice_testkit::services::incompressible(4000);
    exec(&mut c, &format!("INSERT INTO people (id, name, bio) VALUES (4, 'dee', '{big}')")).await;
    exec(&mut c, "BEGIN; UPDATE people SET name = 'bobby' WHERE id = 2; DELETE FROM people WHERE id = 3; COMMIT;")
        .await;
    exec(&mut c, "UPDATE people SET name = 'deedee' WHERE id = 4").await;
    exec(&mut c, "INSERT INTO keyless VALUES ('not in the publication')").await;
    // The snapshot sees the tables as of the stream's start.
    let mut reader = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    exec(&mut reader, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
    exec(&mut reader, &format!("SET TRANSACTION SNAPSHOT '{snapshot}'")).await;
    let seen: Vec<(i32, String)> =
        sqlx::query_as("SELECT id, name FROM people ORDER BY id").fetch_all(&mut reader).await.unwrap();
    assert_eq!(seen, [(1, "ann".into()), (2, "bob".into()), (3, "cy".into())]);
    exec(&mut reader, "COMMIT").await;
    drop(start);

    // Every change after it, each once, transactions whole, in commit order.
    let end = pg.end_position().await.unwrap();
    let events = read_all(&pg, &start_position(&pg).await, &end).await;
    assert_eq!(
        summary(&events),
        ["insert Int(4)", "commit", "update Int(2)", "delete Int(3)", "commit", "update Int(4)", "commit"]
    );
    let changes: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ChangeEvent::Change(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(changes[0].values[2], Value::String(big.clone()));
    assert_eq!(changes[1].values[1], Value::String("bobby".into()));
    assert_eq!(changes[2].op, ChangeOp::Delete);
    assert_eq!(changes[2].values[1], Value::Null, "a delete carries the key");
    // The large value the last update left alone is not sent: kept as is.
    assert_eq!(changes[3].unchanged, [2]);
    let Some(ChangeEvent::Schema(schema)) = events.iter().find(|e| matches!(e, ChangeEvent::Schema(_))) else {
        panic!("no schema event")
    };
    let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["id", "name", "bio", "born", "seen", "score"]);
    assert!(schema.fields[0].primary_key);

    // Values keep their types.
    exec(&mut c, "UPDATE people SET score = 2.25 WHERE id = 1").await;
    let end2 = pg.end_position().await.unwrap();
    let positions = commits(&events);
    let later = read_all(&pg, &positions[2], &end2).await;
    let Some(ChangeEvent::Change(ann)) = later.iter().find(|e| matches!(e, ChangeEvent::Change(_))) else {
        panic!("{:?}", summary(&later))
    };
    assert_eq!(summary(&later), ["commit", "commit", "commit", "update Int(1)", "commit"], "held commits pass by");
    assert_eq!(ann.values[3], Value::Date(time::macros::date!(1990 - 01 - 02)));
    assert_eq!(ann.values[4], Value::Timestamp(time::macros::datetime!(2026-01-01 10:00 UTC)));
    assert_eq!(ann.values[5], Value::Decimal("2.25".into()));

    // From a held position: only what comes after it.
    let held = read_all(&pg, &positions[0], &end).await;
    assert_eq!(summary(&held), ["commit", "update Int(2)", "delete Int(3)", "commit", "update Int(4)", "commit"]);
    // Confirmed: the slot forgets what came before; reopened, it starts there.
    pg.confirm("t1", &positions[1]).await.unwrap();
    assert_eq!(pg.retained_from("t1").await.unwrap().as_ref(), Some(&positions[1]));
    let reopened = pg.open_stream("t1", &entities).await.unwrap();
    assert!(reopened.snapshot.is_none());
    assert_eq!(reopened.position, positions[1]);
    assert_eq!(summary(&read_all(&pg, &positions[1], &end).await), ["update Int(4)", "commit"]);
    // Confirming an earlier position changes nothing.
    pg.confirm("t1", &positions[0]).await.unwrap();
    assert_eq!(pg.retained_from("t1").await.unwrap().as_ref(), Some(&positions[1]));
    assert!(positions[1].after(&positions[0]));
    // A stored position reads back as the one the stream gave.
    assert_eq!(pg.position(positions[1].as_str()).unwrap(), positions[1]);
    assert!(pg.position("x").is_err());

    // Dropped: no slot, no publication left on the source.
    pg.drop_stream("t1").await.unwrap();
    pg.drop_stream("t1").await.unwrap();
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

/// The slot's confirmed position (where a new stream starts).
async fn start_position(pg: &PgConnector) -> Position {
    pg.retained_from("t1").await.unwrap().expect("the slot exists")
}

/// The changes of `entity` in stream `stream` after `after`, up to the
/// source's end now.
async fn changes_of(pg: &PgConnector, stream: &str, entity: &str, after: &Position) -> Vec<String> {
    let until = pg.end_position().await.unwrap();
    let from = [(entity.to_string(), after.clone())];
    let mut reader = pg.changes(stream, &from, &until).await.unwrap();
    let mut all = Vec::new();
    loop {
        let got = reader.next(100).await.unwrap();
        if got.is_empty() {
            break;
        }
        all.extend(got);
    }
    all.iter()
        .filter_map(|e| match e {
            ChangeEvent::Change(c) => Some(format!("{} {} {:?}", c.entity, c.op.as_str(), c.values[0])),
            _ => None,
        })
        .collect()
}

/// A throwaway cluster with `wal_level = logical`, and a session on its
/// `postgres` database (`None` where a cluster cannot be started here).
async fn logical_server() -> Option<(OwnPostgres, sqlx::PgConnection)> {
    let server = tokio::task::spawn_blocking(|| {
        OwnPostgres::start(|_| {}, |_| vec!["wal_level=logical".into(), "max_replication_slots=4".into()])
    })
    .await
    .unwrap()?;
    let c = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    Some((server, c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_joining_a_running_stream_is_copied_in_a_snapshot_of_its_own() {
    let Some((server, mut c)) = logical_server().await else { return };
    exec(
        &mut c,
        "CREATE TABLE people (id int PRIMARY KEY, name text);
         CREATE TABLE keyless (v text);
         CREATE TABLE parts (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
         CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (0) TO (100);
         CREATE TABLE parts_high PARTITION OF parts FOR VALUES FROM (100) TO (200);
         INSERT INTO people VALUES (1, 'ann');",
    )
    .await;
    let pg = connector(server.port, "postgres");

    // A table without a key is refused before it joins a publication:
    // published, the source's own updates of it would fail.
    let refused = pg.open_stream("t2", &["keyless".into()]).await.err().expect("refused");
    assert!(refused.to_string().contains("has no primary key"), "{refused}");
    let publications: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_publication").fetch_one(&mut c).await.unwrap();
    assert_eq!(publications, 0);
    exec(&mut c, "UPDATE keyless SET v = 'still writable'").await;

    // A partitioned table's changes arrive as the table's.
    let start = pg.open_stream("t2", &["parts".into()]).await.unwrap();
    let from = start.position.clone();
    drop(start);
    exec(&mut c, "INSERT INTO parts VALUES (5, 'low'), (150, 'high'); DELETE FROM parts WHERE id = 5").await;
    assert_eq!(
        changes_of(&pg, "t2", "parts", &from).await,
        ["parts insert Int(5)", "parts insert Int(150)", "parts delete Int(5)"]
    );

    // Arrays arrive as JSON, as a copy reads them.
    exec(&mut c, "CREATE TABLE tagged (id int PRIMARY KEY, tags int[], names text[])").await;
    let from = pg.open_stream("t2", &["parts".into(), "tagged".into()]).await.unwrap().position;
    exec(&mut c, r#"INSERT INTO tagged VALUES (1, '{1,NULL,3}', '{"a b",c}')"#).await;
    let until = pg.end_position().await.unwrap();
    let mut reader = pg.changes("t2", &[("tagged".to_string(), from)], &until).await.unwrap();
    let mut values = None;
    loop {
        let got = reader.next(100).await.unwrap();
        if got.is_empty() {
            break;
        }
        for e in got {
            if let ChangeEvent::Change(ch) = e {
                values = Some(ch.values);
            }
        }
    }
    let values = values.expect("the insert");
    assert_eq!(values[1], Value::Json(serde_json::json!([1, null, 3])));
    assert_eq!(values[2], Value::Json(serde_json::json!(["a b", "c"])));

    // A table joining the stream later: copied in a snapshot of its own,
    // the stream going on for it from exactly that snapshot's position.
    pg.open_stream("t2", &["parts".into(), "people".into()]).await.unwrap();
    exec(&mut c, "INSERT INTO people VALUES (2, 'before')").await;
    let snap = pg.fresh_snapshot("t2").await.unwrap();
    exec(&mut c, "INSERT INTO people VALUES (3, 'after')").await;
    let mut reader = sqlx::PgConnection::connect(&server.url("postgres")).await.unwrap();
    exec(&mut reader, "BEGIN ISOLATION LEVEL REPEATABLE READ").await;
    exec(&mut reader, &format!("SET TRANSACTION SNAPSHOT '{}'", snap.snapshot.clone().unwrap())).await;
    let seen: Vec<i32> = sqlx::query_scalar("SELECT id FROM people ORDER BY id").fetch_all(&mut reader).await.unwrap();
    assert_eq!(seen, [1, 2]);
    exec(&mut reader, "COMMIT").await;
    assert_eq!(changes_of(&pg, "t2", "people", &snap.position).await, ["people insert Int(3)"]);
    // Its temporary slot goes with the snapshot; the stream's stays.
    drop(snap);
    let mut slots = 0;
    for _ in 0..100 {
        slots =
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_replication_slots").fetch_one(&mut c).await.unwrap();
        if slots == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(slots, 1);
    pg.drop_stream("t2").await.unwrap();
}

/// A role that owns none of the tables cannot make a publication of them;
/// a connection naming the administrator's publication reads through it,
/// says which tables it lacks, and leaves it when the stream is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_the_connection_names_serves_a_role_that_cannot_make_one() {
    let Some((server, mut c)) = logical_server().await else { return };
    exec(
        &mut c,
        "CREATE TABLE people (id int PRIMARY KEY, name text);
         CREATE TABLE pets (id int PRIMARY KEY, name text);
         CREATE ROLE capturer LOGIN REPLICATION;
         GRANT SELECT ON people, pets TO capturer;
         CREATE PUBLICATION shop FOR TABLE people;",
    )
    .await;
    let as_capturer = |publication: Option<&str>| {
        let publication = publication.map(str::to_string);
        PgConnector::new(PgSettings { user: "capturer".into(), publication, ..settings(server.port, "postgres") })
            .unwrap()
    };
    let own = as_capturer(None);
    let reasons = own.readiness(&["people".into()]).await.unwrap();
    // Making its own publication takes CREATE on the database, and owning
    // the tables: both are said.
    assert_eq!(
        reasons,
        [
            "the role capturer may not create in database postgres, which its publication needs: GRANT CREATE ON \
             DATABASE \"postgres\" TO \"capturer\" (or name a publication an administrator made in the \
             connection's publication setting)",
            "cannot create a publication: the role capturer does not own table \"public\".\"people\""
        ]
    );
    assert!(own.open_stream("c1", &["people".into()]).await.is_err());

    let named = as_capturer(Some("shop"));
    assert!(named.readiness(&["people".into()]).await.unwrap().is_empty());
    assert_eq!(
        named.readiness(&["people".into(), "pets".into()]).await.unwrap(),
        ["table \"public\".\"pets\" is not in the publication shop"]
    );
    let refused = named.open_stream("c1", &["people".into(), "pets".into()]).await.err().expect("refused");
    assert!(refused.to_string().contains("ALTER PUBLICATION \"shop\" ADD TABLE \"public\".\"pets\""), "{refused}");
    let start = named.open_stream("c1", &["people".into()]).await.unwrap().position;
    exec(&mut c, "INSERT INTO people VALUES (1, 'ann'); INSERT INTO pets VALUES (1, 'rex'); DELETE FROM people").await;
    assert_eq!(changes_of(&named, "c1", "people", &start).await, ["people insert Int(1)", "people delete Int(1)"]);
    named.drop_stream("c1").await.unwrap();
    let (slots, publications): (i64, Vec<String>) = (
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots").fetch_one(&mut c).await.unwrap(),
        sqlx::query_scalar("SELECT pubname::text FROM pg_publication").fetch_all(&mut c).await.unwrap(),
    );
    assert_eq!((slots, publications), (0, vec!["shop".to_string()]));
    let readiness = named.readiness(&[]).await.unwrap();
    assert_eq!(readiness, ["table \"public\".\"pets\" is not in the publication shop"]);
    let gone = as_capturer(Some("nowhere"));
    assert_eq!(
        gone.readiness(&["people".into()]).await.unwrap(),
        ["the publication nowhere the connection names does not exist"]
    );
}
