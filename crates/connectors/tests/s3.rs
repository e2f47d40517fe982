//! A dataset in an S3 bucket: `moto_server` in server mode (each test its
//! own bucket), the files read back by DuckDB 1.5.5's `httpfs` (loaded from
//! its PyPI wheel) globbing `s3://bucket/prefix/<entity>/*.parquet`. Files
//! appear whole (a large one through a multipart upload), a writer stopped
//! before its commit leaves nothing visible, a commit whose intent another
//! writer holds is refused, and each failure to reach a bucket says what
//! failed in one line.

use sluice_clients::s3::{S3, S3Config};
use sluice_connectors::dataset::objects::Objects;
use sluice_connectors::dataset::s3::S3Objects;
use sluice_connectors::dataset::{DatasetConnector, FileFormat, commit};
use sluice_connectors::parquet::Codec;
use sluice_domain::connect::connector::*;
use sluice_testkit::services::{duckdb_counts, lake_python, moto};
use std::sync::Arc;

fn config(endpoint: &str, bucket: &str) -> S3Config {
    S3Config {
        bucket: bucket.into(),
        region: "us-east-1".into(),
        endpoint: Some(endpoint.into()),
        path_style: true,
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "test-secret".into(),
        session_token: None,
    }
}

fn schema() -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.nullable = false;
    EntitySchema { name: "events".into(), fields: vec![id, Field::new("note", FieldType::String)] }
}

fn batch(from: i64, to: i64) -> RecordBatch {
    let rows = (from..to)
        .map(|i| {
            let noise = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            vec![Value::Int(i), Value::String(format!("{noise:016x}{:016x}", noise.rotate_left(17)))]
        })
        .collect();
    RecordBatch { fields: Arc::new(schema().fields), rows }
}

/// A bucket of its own on `endpoint` and a dataset under `lake/v1` in it.
async fn dataset(endpoint: &str, file_bytes: u64) -> (String, Arc<S3Objects>, DatasetConnector) {
    let bucket = format!("b{}", uuid::Uuid::new_v4().simple());
    S3::new(config(endpoint, &bucket)).create_bucket().await.unwrap();
    let spool = std::env::temp_dir().join(format!("sluice-spool-{}", uuid::Uuid::new_v4().simple()));
    let objects = Arc::new(S3Objects::new(S3::new(config(endpoint, &bucket)), "/lake/v1/", spool));
    let dest = DatasetConnector::new(objects.clone(), FileFormat::Parquet(Codec::Zstd), file_bytes);
    (bucket, objects, dest)
}

/// What DuckDB sees of `s3://<bucket>/lake/v1/events/*.parquet`: rows and
/// distinct ids.
fn duckdb(endpoint: &str, bucket: &str) -> (i64, i64) {
    let python = lake_python().expect("the lake readers' venv");
    duckdb_counts(&python, &format!("s3://{bucket}/lake/v1/events/*.parquet"), Some(endpoint))
}

#[tokio::test]
async fn a_dataset_in_a_bucket_is_written_whole_and_duckdb_reads_each_row_once() {
    let Some(_python) = lake_python() else { return };
    let Some((_moto, url)) = moto() else { return };
    let (bucket, objects, dest) = dataset(&url, 64 << 10).await;
    Destination::check(&dest).await.unwrap();
    let run = uuid::Uuid::now_v7();
    let mut w = dest.open_for(&schema(), WriteMode::Append, Some(&Attempt { run, number: 1 })).await.unwrap();
    for from in (0..20_000).step_by(5_000) {
        w.write(&batch(from, from + 5_000)).await.unwrap();
    }
    w.hold_position("stream", "at 20000").await.unwrap();
    w.checkpoint().await.unwrap();
    w.write(&batch(20_000, 30_000)).await.unwrap();
    // Staged, not yet committed: a reader sees the checkpoint's rows only.
    assert_eq!(duckdb(&url, &bucket), (20_000, 20_000));
    w.finish().await.unwrap();
    assert_eq!(duckdb(&url, &bucket), (30_000, 30_000));
    let files: Vec<String> = objects.list("events").await.unwrap().into_iter().map(|o| o.key).collect();
    assert!(files.len() >= 3, "cut into several files: {files:?}");
    assert!(files.iter().all(|k| k.starts_with(&format!("events/{}-", run.simple())) && k.ends_with(".parquet")));
    assert_eq!(dest.positions("stream").await.unwrap(), [("events".to_string(), "at 20000".to_string())]);
    assert!(objects.list("_sluice/events/staging").await.unwrap().is_empty());

    // Read back as a source.
    let found = Source::discover(&dest).await.unwrap();
    assert_eq!(found.len(), 1);
    let mut r =
        dest.read(ReadRequest { entity: "events".into(), limit: Some(10), ..Default::default() }).await.unwrap();
    let mut n = 0;
    while let Some(b) = r.next_batch().await.unwrap() {
        n += b.len();
    }
    assert_eq!(n, 10, "a preview reads its first rows");
}

#[tokio::test]
async fn a_large_file_goes_up_in_parts_and_a_stopped_writer_leaves_nothing_visible() {
    let Some(_python) = lake_python() else { return };
    let Some((_moto, url)) = moto() else { return };
    // One file over 16 MiB: a multipart upload.
    let (bucket, objects, dest) = dataset(&url, 64 << 20).await;
    let mut w = dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    let mut from = 0;
    while from < 1_000_000 {
        w.write(&batch(from, from + 50_000)).await.unwrap();
        from += 50_000;
    }
    w.finish().await.unwrap();
    let files = objects.list("events").await.unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].size > 16 << 20, "a file past one part: {} bytes", files[0].size);
    assert_eq!(duckdb(&url, &bucket), (1_000_000, 1_000_000));

    // A writer stopped before its commit: staged files, none visible.
    let (bucket, objects, dest) = dataset(&url, 64 << 10).await;
    let mut w = dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    w.write(&batch(0, 5_000)).await.unwrap();
    w.finish().await.unwrap();
    let mut w = dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    for from in (5_000..30_000).step_by(5_000) {
        w.write(&batch(from, from + 5_000)).await.unwrap();
    }
    drop(w);
    assert!(!objects.list("_sluice/events/staging").await.unwrap().is_empty());
    assert_eq!(duckdb(&url, &bucket), (5_000, 5_000));
    // A bucket has no lock: a later writer keeps what may be a live
    // writer's (younger than an hour), and commits its own beside it.
    let mut w = dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    w.write(&batch(30_000, 31_000)).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(duckdb(&url, &bucket), (6_000, 6_000));

    // A commit whose intent is another writer's (put while this one
    // wrote) is refused, and nothing of it appears.
    let mut w = dest.open_for(&schema(), WriteMode::Append, None).await.unwrap();
    w.write(&batch(40_000, 41_000)).await.unwrap();
    let theirs = serde_json::to_vec(&commit::Commit::default()).unwrap();
    assert!(objects.put_new(&commit::commit_key("events"), theirs.clone()).await.unwrap());
    assert!(!objects.put_new(&commit::commit_key("events"), theirs).await.unwrap(), "If-None-Match holds");
    let said = w.finish().await.expect_err("a commit beside another's intent is refused").to_string();
    assert!(said.contains("events is being committed by another writer"), "{said}");
    assert_eq!(duckdb(&url, &bucket), (6_000, 6_000));
}

#[tokio::test]
async fn each_failure_to_reach_a_bucket_says_what_failed() {
    let Some((_moto, url)) = moto() else { return };
    let missing = S3Objects::new(S3::new(config(&url, "no-such-bucket")), "", std::env::temp_dir());
    let e = missing.check_writable().await.unwrap_err();
    assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
    assert_eq!(e.to_string().lines().count(), 1);
    assert!(e.to_string().contains("s3://no-such-bucket does not exist"), "{e}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nowhere = S3Objects::new(S3::new(config(&format!("http://127.0.0.1:{closed}"), "b")), "", std::env::temp_dir());
    let e = nowhere.check_readable().await.unwrap_err();
    assert!(matches!(e, ConnectorError::Unreachable(_)), "{e:?}");
    assert_eq!(e.to_string(), format!("cannot reach the S3 endpoint http://127.0.0.1:{closed}"));
    assert!(!e.to_string().contains("test-secret"));
}

/// A writer frozen past its lease wakes after the attempt that took its
/// run over committed: its commit is void (the manifest moved on), drops
/// what it staged, publishes nothing, and readers see each row once.
#[tokio::test]
async fn a_frozen_writer_woken_after_a_take_over_commits_nothing() {
    let Some(_python) = lake_python() else { return };
    let Some((_moto, url)) = moto() else { return };
    let (bucket, objects, dest) = dataset(&url, 64 << 10).await;
    let run = uuid::Uuid::now_v7();
    let mut first = dest.open_for(&schema(), WriteMode::Append, Some(&Attempt { run, number: 1 })).await.unwrap();
    first.write(&batch(0, 10_000)).await.unwrap();
    first.hold_position("stream", "at 10000").await.unwrap();
    first.checkpoint().await.unwrap();
    // Frozen here, with rows written past its checkpoint; the run is taken
    // over from the checkpoint and finished.
    first.write(&batch(10_000, 20_000)).await.unwrap();
    let mut second = dest.open_for(&schema(), WriteMode::Append, Some(&Attempt { run, number: 2 })).await.unwrap();
    second.write(&batch(10_000, 20_000)).await.unwrap();
    second.hold_position("stream", "at 20000").await.unwrap();
    second.finish().await.unwrap();
    assert_eq!(duckdb(&url, &bucket), (20_000, 20_000));
    let committed = commit::manifest(&*objects, "events").await.unwrap().unwrap();
    // Woken: its commit is refused, and changes nothing.
    let e = first.finish().await.unwrap_err().to_string();
    assert!(e.contains("committed by another attempt"), "{e}");
    assert_eq!(duckdb(&url, &bucket), (20_000, 20_000), "each row once");
    assert_eq!(commit::manifest(&*objects, "events").await.unwrap().unwrap(), committed);
    assert_eq!(dest.position_of("stream", "events").await.unwrap().as_deref(), Some("at 20000"));
    let left: Vec<String> = objects.list("_sluice/events").await.unwrap().into_iter().map(|o| o.key).collect();
    assert_eq!(left, ["_sluice/events/manifest.json"], "no intent, nothing staged");

    // An intent made on an old manifest and left by a writer killed
    // mid-commit is dropped by the next reader of the marks, not applied.
    let stale = commit::Commit {
        publish: vec![],
        remove: committed.files.clone(),
        manifest: commit::Manifest { version: committed.version, ..Default::default() },
        base: Some(committed.version - 1),
    };
    objects.put(&commit::commit_key("events"), serde_json::to_vec(&stale).unwrap()).await.unwrap();
    assert_eq!(dest.position_of("stream", "events").await.unwrap().as_deref(), Some("at 20000"));
    assert_eq!(duckdb(&url, &bucket), (20_000, 20_000), "its removals were not made");
}
