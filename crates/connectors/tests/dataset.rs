//! A dataset of Parquet files on local disk, written through the
//! `Destination` port and read back by an independent reader (DuckDB 1.5.5
//! from the lake readers' venv) globbing `<entity>/*.parquet` as any user
//! would: files appear whole, are cut at their size, carry names fixed by
//! the run, and a writer stopped at any step of its commit leaves each row
//! exactly once.

use sluice_connectors::dataset::objects::{LocalObjects, Objects};
use sluice_connectors::dataset::{DatasetConnector, FileFormat, commit};
use sluice_connectors::parquet::Codec;
use sluice_domain::connect::connector::*;
use sluice_testkit::services::lake_python;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const STREAM: &str = "0192flowstream";

fn schema() -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.nullable = false;
    EntitySchema {
        name: "events".into(),
        fields: vec![id, Field::new("note", FieldType::String), Field::new("at", FieldType::Timestamp)],
    }
}

/// Rows `from..to`, with notes that do not compress away.
fn batch(from: i64, to: i64) -> RecordBatch {
    let fields = Arc::new(schema().fields);
    let rows = (from..to)
        .map(|i| {
            let noise = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            vec![
                Value::Int(i),
                Value::String(format!("{noise:016x}{:016x}", noise.rotate_left(17))),
                Value::Timestamp(time::OffsetDateTime::from_unix_timestamp(1_767_225_600 + i).unwrap()),
            ]
        })
        .collect();
    RecordBatch { fields, rows }
}

struct Lake {
    dir: PathBuf,
    objects: Arc<LocalObjects>,
    dest: DatasetConnector,
}

impl Lake {
    fn new() -> Lake {
        let dir = std::env::temp_dir().join(format!("sluice-dataset-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let place = sluice_connectors::common::confine(&dir, "lake").unwrap();
        let objects = Arc::new(LocalObjects { place });
        // Small files: a few thousand rows each.
        let dest = DatasetConnector::new(objects.clone(), FileFormat::Parquet(Codec::Zstd), 64 << 10);
        Lake { dir, objects, dest }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("lake")
    }

    /// The names in a folder of the lake, sorted.
    fn names(&self, folder: &str) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.root().join(folder))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }
}

impl Drop for Lake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What DuckDB sees of `glob`: rows, distinct ids, least and greatest id.
fn duckdb(python: &Path, glob: &Path) -> (i64, i64, i64, i64) {
    let script = r#"
import json, sys, duckdb
g = sys.argv[1]
print(json.dumps(duckdb.connect().execute(
    f"SELECT count(*), count(DISTINCT id), coalesce(min(id), -1), coalesce(max(id), -1) FROM read_parquet('{g}')"
).fetchone()))
"#;
    let out = Command::new(python).arg("-c").arg(script).arg(glob).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<i64> = serde_json::from_slice(&out.stdout).unwrap();
    (v[0], v[1], v[2], v[3])
}

fn attempt(run: uuid::Uuid, number: u32) -> Attempt {
    Attempt { run, number }
}

#[tokio::test]
async fn appends_land_as_whole_files_cut_at_their_size_named_by_the_run_and_read_once() {
    let Some(python) = lake_python() else { return };
    let lake = Lake::new();
    let run = uuid::Uuid::now_v7();
    let mut w = lake.dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 1))).await.unwrap();
    for i in 0..4 {
        w.write(&batch(i * 5_000, (i + 1) * 5_000)).await.unwrap();
    }
    w.hold_position(STREAM, "first").await.unwrap();
    let stats = w.checkpoint().await.unwrap();
    assert_eq!(stats.rows_written, 20_000);
    let committed = lake.names("events");
    assert!(committed.len() >= 3, "cut at 64 KiB into several files: {committed:?}");
    w.write(&batch(20_000, 30_000)).await.unwrap();
    w.hold_position(STREAM, "second").await.unwrap();
    // Before the commit, a reader sees what the checkpoint committed only.
    assert_eq!(duckdb(&python, &lake.root().join("events/*.parquet")), (20_000, 20_000, 0, 19_999));
    let stats = w.finish().await.unwrap();
    assert_eq!(stats.rows_written, 30_000);

    let files = lake.names("events");
    let expect: Vec<String> = (0..files.len()).map(|n| format!("{}-{n:05}.parquet", run.simple())).collect();
    assert_eq!(files, expect, "named by the run and their place in it, and nothing else in the folder");
    assert_eq!(duckdb(&python, &lake.root().join("events/*.parquet")), (30_000, 30_000, 0, 29_999));
    let m = commit::manifest(&*lake.objects, "events").await.unwrap().unwrap();
    assert_eq!(m.files, files);
    assert!(lake.names("_sluice/events/staging").is_empty() && lake.names("_sluice/events/spool").is_empty());
    assert_eq!(lake.dest.positions(STREAM).await.unwrap(), [("events".to_string(), "second".to_string())]);
    assert_eq!(lake.dest.describe("events").await.unwrap().unwrap().fields.len(), 3);

    // Read back as a source: the committed files, every row.
    let found = Source::discover(&lake.dest).await.unwrap();
    assert_eq!(found.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["events"]);
    let mut r = lake.dest.read(ReadRequest { entity: "events".into(), ..Default::default() }).await.unwrap();
    let mut ids = Vec::new();
    while let Some(b) = r.next_batch().await.unwrap() {
        ids.extend(b.rows.iter().map(|row| row[0].clone()));
    }
    assert_eq!(ids.len(), 30_000);
    assert_eq!(ids[12_345], Value::Int(12_345), "files are read in the order they were written");
}

#[tokio::test]
async fn a_writer_stopped_at_any_step_of_its_commit_leaves_each_row_once() {
    let Some(python) = lake_python() else { return };
    let lake = Lake::new();
    let glob = lake.root().join("events/*.parquet");
    let run = uuid::Uuid::now_v7();
    let mut w = lake.dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 1))).await.unwrap();
    w.write(&batch(0, 10_000)).await.unwrap();
    w.checkpoint().await.unwrap();
    let first = lake.names("events");

    // Killed before its commit: files staged, one being written. Nothing
    // of them is visible, and the next writer removes them.
    for from in (10_000..20_000).step_by(2_500) {
        w.write(&batch(from, from + 2_500)).await.unwrap();
    }
    assert!(!lake.names("_sluice/events/staging").is_empty(), "files staged before their commit");
    drop(w);
    assert_eq!(duckdb(&python, &glob), (10_000, 10_000, 0, 9_999));
    let w = lake.dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 2))).await.unwrap();
    assert!(lake.names("_sluice/events/staging").is_empty(), "what no commit names is removed");
    drop(w);

    // Killed after its intent, one file published of several: whoever
    // comes next (a read of the positions here) finishes the commit.
    let mut w = lake.dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 3))).await.unwrap();
    for from in (10_000..40_000).step_by(5_000) {
        w.write(&batch(from, from + 5_000)).await.unwrap();
    }
    drop(w);
    let staged: Vec<String> = lake.names("_sluice/events/staging");
    assert!(staged.len() >= 2, "{staged:?}");
    let staged_rows = duckdb(&python, &lake.root().join("_sluice/events/staging/*.staged")).0;
    let names: Vec<String> = staged.iter().map(|s| commit::published_name(s).unwrap().to_string()).collect();
    assert!(
        names.iter().all(|n| !first.contains(n)),
        "a later attempt of the run goes on after the files the run committed: {names:?} {first:?}"
    );
    let mut manifest = commit::manifest(&*lake.objects, "events").await.unwrap().unwrap();
    manifest.files.extend(names.iter().cloned());
    manifest.held.insert(STREAM.into(), "after the second commit".into());
    let base = Some(manifest.version);
    manifest.version += 1;
    let intent = commit::Commit { publish: staged.clone(), remove: vec![], manifest, base };
    lake.objects.put(&commit::commit_key("events"), serde_json::to_vec(&intent).unwrap()).await.unwrap();
    assert!(
        lake.objects.promote(&commit::staged_key("events", &staged[0]), &format!("events/{}", names[0])).await.unwrap()
    );
    let held = lake.dest.positions(STREAM).await.unwrap();
    assert_eq!(held, [("events".to_string(), "after the second commit".to_string())]);
    let seen = duckdb(&python, &glob);
    assert_eq!(seen.0, 10_000 + staged_rows);
    assert_eq!(seen.0, seen.1, "every row once");
    assert!(!lake.names("_sluice/events").contains(&"commit.json".to_string()), "the intent is carried out and gone");
    assert!(lake.names("_sluice/events/staging").is_empty());
}

#[tokio::test]
async fn an_overwrite_publishes_its_new_set_then_removes_the_old() {
    let Some(python) = lake_python() else { return };
    let lake = Lake::new();
    let glob = lake.root().join("events/*.parquet");
    let mut w = lake.dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    w.write(&batch(0, 8_000)).await.unwrap();
    w.finish().await.unwrap();
    let old = lake.names("events");
    let mut w = lake.dest.open_for(&schema(), WriteMode::Overwrite, None).await.unwrap();
    w.write(&batch(100_000, 103_000)).await.unwrap();
    // An overwrite's checkpoint commits nothing: the old set stays whole.
    w.checkpoint().await.unwrap();
    assert_eq!(lake.names("events"), old);
    w.write(&batch(103_000, 106_000)).await.unwrap();
    w.finish().await.unwrap();
    let new = lake.names("events");
    assert!(new.iter().all(|n| !old.contains(n)), "{new:?} {old:?}");
    assert_eq!(duckdb(&python, &glob), (6_000, 6_000, 100_000, 105_999));
}

#[tokio::test]
async fn upserts_are_refused_naming_the_lake_tables_and_links_out_are_refused() {
    let lake = Lake::new();
    let mut keyed = schema();
    keyed.fields[0].primary_key = true;
    let e = lake.dest.open_for(&keyed, WriteMode::Upsert, None).await.err().unwrap().to_string();
    assert!(e.contains("ducklake") && e.contains("iceberg"), "{e}");
    let e = lake.dest.open_for(&EntitySchema { name: "_sluice".into(), ..schema() }, WriteMode::Append, None).await;
    assert!(e.err().unwrap().to_string().contains("not a valid entity name"));
    // A link planted where the commits live must not lead out.
    let outside = std::env::temp_dir().join(format!("sluice-elsewhere-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(lake.root()).unwrap();
    std::os::unix::fs::symlink(&outside, lake.root().join("_sluice")).unwrap();
    let e = lake.dest.open_for(&schema(), WriteMode::Append, None).await.err().unwrap().to_string();
    assert!(e.contains("leads outside"), "{e}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing written through the link");
    std::fs::remove_dir_all(&outside).unwrap();
}

/// What DuckDB reads of a text dataset through `reader` (`read_csv`,
/// `read_json`): rows, distinct ids, and the sum of the ids.
fn duckdb_text(python: &Path, reader: &str, glob: &Path) -> (i64, i64, i64) {
    let script = r#"
import json, sys, duckdb
r, g = sys.argv[1], sys.argv[2]
print(json.dumps(duckdb.connect().execute(
    f"SELECT count(*), count(DISTINCT id), coalesce(sum(id), -1)::BIGINT FROM {r}('{g}')"
).fetchone()))
"#;
    let out = Command::new(python).arg("-c").arg(script).arg(reader).arg(glob).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<i64> = serde_json::from_slice(&out.stdout).unwrap();
    (v[0], v[1], v[2])
}

#[tokio::test]
async fn csv_and_json_lines_datasets_gzipped_or_not_are_cut_into_whole_files_and_read_back() {
    use sluice_connectors::file::Format;
    let Some(python) = lake_python() else { return };
    for (format, gzip, reader, ext) in [
        (Format::Csv, true, "read_csv", "csv.gz"),
        (Format::Jsonl, false, "read_json", "jsonl"),
        (Format::Jsonl, true, "read_json", "jsonl.gz"),
        (Format::Csv, false, "read_csv", "csv"),
    ] {
        let lake = Lake::new();
        let dest = DatasetConnector::new(lake.objects.clone(), FileFormat::Text { format, gzip }, 96 << 10);
        let run = uuid::Uuid::now_v7();
        let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&attempt(run, 1))).await.unwrap();
        for i in 0..3 {
            w.write(&batch(i * 4_000, (i + 1) * 4_000)).await.unwrap();
        }
        w.finish().await.unwrap();
        let files = lake.names("events");
        assert!(files.len() >= 2, "{ext}: cut at 96 KiB: {files:?}");
        assert!(files.iter().all(|f| f.starts_with(&run.simple().to_string()) && f.ends_with(&format!(".{ext}"))));
        let glob = lake.root().join(format!("events/*.{ext}"));
        let sum: i64 = (0..12_000).sum();
        assert_eq!(duckdb_text(&python, reader, &glob), (12_000, 12_000, sum), "{ext}: DuckDB reads each row once");

        // Read back as a source, typed by the manifest's schema.
        let mut r = dest.read(ReadRequest { entity: "events".into(), ..Default::default() }).await.unwrap();
        let mut rows = Vec::new();
        while let Some(b) = r.next_batch().await.unwrap() {
            rows.extend(b.rows);
        }
        assert_eq!(rows.len(), 12_000, "{ext}");
        assert_eq!(rows[7_777][..3], batch(7_777, 7_778).rows[0], "{ext}: every value as written");
        let Value::String(place) = &rows[7_777][3] else { panic!("{:?}", rows[7_777]) };
        assert!(place.contains(&format!(" events/{}-", run.simple())), "the file's key: {place}");
    }
}

#[tokio::test]
async fn a_folder_of_csv_files_from_elsewhere_is_an_entity_typed_across_its_files() {
    use sluice_connectors::file::Format;
    let lake = Lake::new();
    let folder = lake.root().join("prices");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("a.csv"), "sku,price\n1,10\n2,11\n").unwrap();
    // A second file, gzipped, whose prices have cents.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"sku,price\n3,12.50\n").unwrap();
    std::fs::write(folder.join("b.csv.gz"), gz.finish().unwrap()).unwrap();
    std::fs::write(folder.join("notes.txt"), "not data").unwrap();
    let src =
        DatasetConnector::new(lake.objects.clone(), FileFormat::Text { format: Format::Csv, gzip: false }, 1 << 20);
    let found = Source::discover(&src).await.unwrap();
    assert_eq!(found.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["prices"]);
    let fields = src.entity_fields("prices").await.unwrap();
    assert_eq!(
        fields.iter().map(|f| (f.name.as_str(), f.field_type)).collect::<Vec<_>>(),
        [("sku", FieldType::Integer), ("price", FieldType::Decimal), ("_sluice_object", FieldType::String)]
    );
    let read = |from: Option<&str>| {
        let src = &src;
        let cursor = CursorBound { field: "_sluice_object".into(), from: from.map(|f| Value::String(f.into())) };
        async move {
            let req = ReadRequest { entity: "prices".into(), cursor: Some(cursor), ..Default::default() };
            let mut r = src.read(req).await.unwrap();
            let mut rows = Vec::new();
            while let Some(b) = r.next_batch().await.unwrap() {
                rows.extend(b.rows);
            }
            rows
        }
    };
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => panic!("{other:?}"),
    };
    // Two files of one modification time go by their keys.
    let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600);
    for f in ["a.csv", "b.csv.gz"] {
        std::fs::File::options().write(true).open(folder.join(f)).unwrap().set_modified(t).unwrap();
    }
    let rows = read(None).await;
    let values: Vec<Vec<Value>> = rows.iter().map(|r| r[..2].to_vec()).collect();
    assert_eq!(
        values,
        [
            vec![Value::Int(1), Value::Decimal("10".into())],
            vec![Value::Int(2), Value::Decimal("11".into())],
            vec![Value::Int(3), Value::Decimal("12.50".into())],
        ]
    );
    assert_eq!(text(&rows[1][2]), "2026-01-01T00:00:00.000000Z prices/a.csv#000000000001");
    assert_eq!(text(&rows[2][2]), "2026-01-01T00:00:00.000000Z prices/b.csv.gz#000000000000");
    // Strictly after the cursor: the rest of a file, then the files after.
    let after: Vec<Value> = read(Some(&text(&rows[0][2]))).await.iter().map(|r| r[0].clone()).collect();
    assert_eq!(after, [Value::Int(2), Value::Int(3)]);
    let last = text(&rows[2][2]);
    assert!(read(Some(&last)).await.is_empty(), "nothing new");
    // A new file, and a file changed since (a new time): read whole.
    std::fs::write(folder.join("c.csv"), "sku,price\n4,1\n").unwrap();
    std::fs::write(folder.join("a.csv"), "sku,price\n1,10\n2,11\n5,13\n").unwrap();
    // Too new to be read by place for a few seconds (SETTLE): a file just
    // put stops the read before it.
    assert!(read(Some(&last)).await.is_empty(), "new files settle first");
    let later = t + std::time::Duration::from_secs(2 * 86_400);
    for f in ["a.csv", "c.csv"] {
        std::fs::File::options().write(true).open(folder.join(f)).unwrap().set_modified(later).unwrap();
    }
    let mut again: Vec<i64> =
        read(Some(&last)).await.iter().map(|r| if let Value::Int(i) = r[0] { i } else { -1 }).collect();
    again.sort();
    assert_eq!(again, [1, 2, 4, 5]);
    // A cursor set by hand to a day: the objects changed from then on.
    assert_eq!(read(Some("2026-01-01")).await.len(), 5);
    assert_eq!(read(Some("2026-01-02")).await.len(), 4);
}
