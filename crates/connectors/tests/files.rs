//! A file destination as change data capture writes it: deletes, partial
//! updates and range clears on a mirror, positions committed with the rows
//! through the entity's manifest, what a writer killed mid-commit leaves
//! finished or cut off by the next writer, and one writer per entity.

use serde_json::json;
use sluice_connectors::Registry;
use sluice_domain::connect::connector::*;
use sluice_domain::connect::registry::ConnectorRegistry;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::*;

fn schema(name: &str) -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    EntitySchema {
        name: name.into(),
        fields: vec![id, Field::new("v", FieldType::String), Field::new("_sluice_deleted_at", FieldType::Timestamp)],
    }
}

fn batch(s: &EntitySchema, rows: &[(i64, &str)]) -> RecordBatch {
    let rows = rows.iter().map(|(id, v)| vec![Value::Int(*id), Value::String(v.to_string()), Value::Null]).collect();
    RecordBatch { fields: Arc::new(s.fields.clone()), rows }
}

fn key(id: i64) -> Vec<Value> {
    vec![Value::Int(id)]
}

/// `id:v` of each line of the entity's file, `:deleted` when it is marked.
fn lines(dir: &Path, entity: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(format!("{entity}.jsonl"))).unwrap();
    text.lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let deleted = if r["_sluice_deleted_at"].is_null() { "" } else { ":deleted" };
            format!("{}:{}{deleted}", r["id"], r["v"].as_str().unwrap_or("null"))
        })
        .collect()
}

async fn setup() -> (PathBuf, Arc<dyn Destination>) {
    let root = std::env::temp_dir().join(format!("sluice-files-{}", tag()));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    let dst = registry.destination(&config("file", json!({"path": "lake"}))).await.unwrap();
    (root, dst)
}

#[tokio::test]
async fn a_mirror_takes_deletes_updates_and_clears_with_its_position() {
    let (root, dst) = setup().await;
    let dir = root.join("lake");
    // A mirror of an empty table exists once its writer finished.
    dst.open(&schema("none"), WriteMode::Upsert).await.unwrap().finish().await.unwrap();
    assert!(lines(&dir, "none").is_empty());
    let s = schema("m");
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    w.write(&batch(&s, &[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")])).await.unwrap();
    w.hold_position("s1", "0/10").await.unwrap();
    w.checkpoint().await.unwrap();
    assert_eq!(dst.positions("s1").await.unwrap(), [("m".to_string(), "0/10".to_string())]);

    // Deletes by key; an update sets only the fields it carries.
    let keys = RecordBatch { fields: Arc::new(vec![s.fields[0].clone()]), rows: vec![key(2), key(9)] };
    w.delete(&keys).await.unwrap();
    let set = RecordBatch {
        fields: Arc::new(vec![s.fields[0].clone(), Field::new("v", FieldType::String)]),
        rows: vec![vec![Value::Int(3), Value::String("C".into())]],
    };
    w.update(&set).await.unwrap();
    // Not committed: the file and the position are as the last commit left them.
    assert_eq!(lines(&dir, "m"), ["1:a", "2:b", "3:c", "4:d", "5:e"]);
    w.hold_position("s1", "0/20").await.unwrap();
    w.checkpoint().await.unwrap();
    assert_eq!(lines(&dir, "m"), ["1:a", "3:C", "4:d", "5:e"]);
    assert_eq!(dst.positions("s1").await.unwrap(), [("m".to_string(), "0/20".to_string())]);

    // A range cleared: softly marks the live rows in it, else removes them.
    let range = KeyRange { fields: vec![s.fields[0].clone()], after: Some(key(1)), upto: Some(key(4)) };
    w.clear(&range, Some("_sluice_deleted_at")).await.unwrap();
    w.checkpoint().await.unwrap();
    assert_eq!(lines(&dir, "m"), ["1:a", "3:C:deleted", "4:d:deleted", "5:e"]);
    w.clear(&KeyRange { after: Some(key(3)), ..range }, None).await.unwrap();
    w.hold_position("s2", "7").await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(lines(&dir, "m"), ["1:a", "3:C:deleted", "5:e"]);
    assert_eq!(dst.positions("s2").await.unwrap(), [("m".to_string(), "7".to_string())]);

    // Moved and forgotten through the destination.
    dst.move_position("s1", "m", Some("0/30")).await.unwrap();
    assert_eq!(dst.positions("s1").await.unwrap(), [("m".to_string(), "0/30".to_string())]);
    dst.move_position("s1", "m", None).await.unwrap();
    assert!(dst.positions("s1").await.unwrap().is_empty());
    assert_eq!(dst.positions("s2").await.unwrap().len(), 1);

    // An aborted writer leaves the last commit.
    let mut w = dst.open(&s, WriteMode::Upsert).await.unwrap();
    w.write(&batch(&s, &[(8, "h")])).await.unwrap();
    w.hold_position("s2", "8").await.unwrap();
    w.abort().await;
    assert_eq!(lines(&dir, "m"), ["1:a", "3:C:deleted", "5:e"]);
    assert_eq!(dst.positions("s2").await.unwrap(), [("m".to_string(), "7".to_string())]);
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn what_a_killed_writer_left_is_finished_or_cut_off() {
    let (root, dst) = setup().await;
    let dir = root.join("lake");
    let s = schema("log");

    // An append killed after writing past its last commit (the manifest
    // still marked as being written): the tail goes.
    let mut w = dst.open(&s, WriteMode::Append).await.unwrap();
    w.write(&batch(&s, &[(1, "a"), (2, "b")])).await.unwrap();
    w.hold_position("s", "1").await.unwrap();
    w.finish().await.unwrap();
    let data = dir.join("log.jsonl");
    let manifest = dir.join(".log.jsonl.manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let committed = std::fs::metadata(&data).unwrap().len();
    assert_eq!((m["writing"].clone(), m["length"].as_u64()), (json!(false), Some(committed)));
    m["writing"] = json!(true);
    std::fs::write(&manifest, m.to_string()).unwrap();
    let mut torn = std::fs::read(&data).unwrap();
    torn.extend_from_slice(b"{\"id\":3,\"v\":\"c\",\"_sluice_deleted_at\":null}\n{\"id\":4,\"v\"");
    std::fs::write(&data, torn).unwrap();
    assert_eq!(dst.positions("s").await.unwrap(), [("log".to_string(), "1".to_string())]);
    assert_eq!(lines(&dir, "log"), ["1:a", "2:b"]);
    // Rows added by hand while no writer is at it are taken as they are.
    let mut more = std::fs::read(&data).unwrap();
    more.extend_from_slice(b"{\"id\":9,\"v\":\"by hand\",\"_sluice_deleted_at\":null}\n");
    std::fs::write(&data, more).unwrap();
    assert_eq!(dst.positions("s").await.unwrap().len(), 1);
    dst.open(&s, WriteMode::Append).await.unwrap().finish().await.unwrap();
    assert_eq!(lines(&dir, "log"), ["1:a", "2:b", "9:by hand"]);
    std::fs::write(&data, &std::fs::read(&data).unwrap()[..committed as usize]).unwrap();
    // The next append goes on from the commit.
    let mut w = dst.open(&s, WriteMode::Append).await.unwrap();
    w.write(&batch(&s, &[(3, "c")])).await.unwrap();
    w.hold_position("s", "2").await.unwrap();
    w.checkpoint().await.unwrap();
    // Dropped (a run that failed) with rows written after its commit: they go.
    w.write(&batch(&s, &[(4, "d")])).await.unwrap();
    drop(w);
    let w = dst.open(&s, WriteMode::Append).await.unwrap();
    assert_eq!(lines(&dir, "log"), ["1:a", "2:b", "3:c"]);
    w.abort().await;

    // A commit by a rename killed after the manifest named the new file and
    // before the rename: finished by the next reader of the positions.
    let m = schema("m");
    let mut w = dst.open(&m, WriteMode::Upsert).await.unwrap();
    w.write(&batch(&m, &[(1, "old")])).await.unwrap();
    w.hold_position("s", "1").await.unwrap();
    w.finish().await.unwrap();
    let staged = ".m.jsonl.0123456789abcdef0123456789abcdef.commit";
    std::fs::write(dir.join(staged), "{\"id\":1,\"v\":\"new\",\"_sluice_deleted_at\":null}\n").unwrap();
    let len = std::fs::metadata(dir.join(staged)).unwrap().len();
    let manifest = json!({"positions": {"s": "2"}, "length": len, "redo": staged});
    std::fs::write(dir.join(".m.jsonl.manifest.json"), manifest.to_string()).unwrap();
    // A staged file of a commit that never got to the manifest goes.
    let orphan = ".m.jsonl.ffffffffffffffffffffffffffffffff.commit";
    std::fs::write(dir.join(orphan), "{}\n").unwrap();
    let want = [("log".to_string(), "2".to_string()), ("m".to_string(), "2".to_string())];
    assert_eq!(dst.positions("s").await.unwrap(), want);
    assert_eq!(lines(&dir, "m"), ["1:new"]);
    assert!(!dir.join(staged).exists() && !dir.join(orphan).exists());

    // A manifest naming a link planted to lead outside: nothing is renamed
    // or cut through it.
    let outside = root.join("outside.txt");
    std::fs::write(&outside, "keep me").unwrap();
    let planted = ".m.jsonl.00000000000000000000000000000000.commit";
    std::os::unix::fs::symlink(&outside, dir.join(planted)).unwrap();
    let manifest = json!({"positions": {"s": "3"}, "length": 0, "writing": true, "redo": planted});
    std::fs::write(dir.join(".m.jsonl.manifest.json"), manifest.to_string()).unwrap();
    dst.positions("s").await.unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
    assert!(!std::fs::symlink_metadata(dir.join("m.jsonl")).unwrap().file_type().is_symlink());
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn one_writer_holds_an_entity_at_a_time() {
    let (root, dst) = setup().await;
    let s = schema("e");
    let first = dst.open(&s, WriteMode::Append).await.unwrap();
    let second = tokio::spawn({
        let dst = dst.clone();
        let s = s.clone();
        async move { dst.open(&s, WriteMode::Append).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "the second writer waits for the first");
    // Another entity is not held.
    dst.open(&schema("other"), WriteMode::Append).await.unwrap().abort().await;
    first.abort().await;
    tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap().unwrap();

    // The attempt that takes a run over waits for the entities an earlier
    // attempt of it still holds (a frozen process), and for no other.
    let run = uuid::Uuid::new_v4();
    let (one, two) = (Attempt { run, number: 1 }, Attempt { run, number: 2 });
    let other = Attempt { run: uuid::Uuid::new_v4(), number: 1 };
    let frozen = dst.open_for(&s, WriteMode::Append, Some(&one)).await.unwrap();
    let unrelated = dst.open_for(&schema("other"), WriteMode::Append, Some(&other)).await.unwrap();
    let taking_over = tokio::spawn({
        let dst = dst.clone();
        async move { dst.end_earlier_attempts(&two).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!taking_over.is_finished(), "the attempt that takes over waits for the frozen one");
    frozen.abort().await;
    let waited = tokio::time::timeout(Duration::from_secs(5), taking_over).await.unwrap().unwrap().unwrap();
    assert_eq!(waited, 1);
    unrelated.abort().await;
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_csv_header_left_narrower_than_its_schema_file_is_written_again() {
    let root = std::env::temp_dir().join(format!("sluice-files-{}", tag()));
    std::fs::create_dir_all(&root).unwrap();
    let registry = Registry::new(root.clone());
    let dst = registry.destination(&config("file", json!({"path": "sheets", "format": "csv"}))).await.unwrap();
    let wide = schema("c");
    let narrow = EntitySchema { name: "c".into(), fields: wide.fields[..2].to_vec() };
    let mut w = dst.open(&narrow, WriteMode::Append).await.unwrap();
    w.write(&RecordBatch {
        fields: Arc::new(narrow.fields.clone()),
        rows: vec![vec![Value::Int(1), Value::String("a".into())]],
    })
    .await
    .unwrap();
    w.finish().await.unwrap();
    // A writer killed after widening the schema file, before its rewrite
    // of the file committed.
    let dir = root.join("sheets");
    std::fs::write(dir.join("c.schema.json"), serde_json::to_vec(&wide).unwrap()).unwrap();
    let mut w = dst.open(&wide, WriteMode::Append).await.unwrap();
    w.write(&batch(&wide, &[(2, "b")])).await.unwrap();
    w.finish().await.unwrap();
    let text = std::fs::read_to_string(dir.join("c.csv")).unwrap();
    assert_eq!(text.lines().collect::<Vec<_>>(), ["id,v,_sluice_deleted_at", "1,a,", "2,b,"]);
    std::fs::remove_dir_all(root).unwrap();
}
