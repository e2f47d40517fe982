//! A dataset in an S3-compatible bucket, under a prefix: the `Objects` of
//! the `s3` connection type, over `sluice_clients::s3`.
//!
//! A file is spooled on local disk while it is written, then put whole
//! (one PUT up to 16 MiB; past that, a multipart upload of 16 MiB parts, so
//! memory holds one part), and is visible only once that completes. A
//! bucket has no lock a killed process frees: a commit's intent is put only
//! if none is there (`If-None-Match`), so two writers never commit an
//! entity at once, and what a writer staged, or an upload it began, is
//! removed by a later run once an hour old (a live writer's are younger).

use super::objects::{Fetched, Held, ObjectInfo, Objects};
use sluice_clients::s3::{Put, S3};
use sluice_domain::connect::connector::{Attempt, ConnectorError, ConnectorResult};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The size of an upload's parts, and of the largest single PUT.
const PART: usize = 16 << 20;

/// How old a killed writer's leftovers are before a later run removes them.
pub const STALE: Duration = Duration::from_secs(3600);

pub struct S3Objects {
    pub s3: S3,
    /// The prefix, without slashes at either end (empty: the bucket).
    pub prefix: String,
    /// `s3://bucket/prefix`.
    pub label: String,
    /// Where files are spooled before they are put.
    pub spool: PathBuf,
}

impl S3Objects {
    pub fn new(s3: S3, prefix: &str, spool: PathBuf) -> Self {
        let prefix = prefix.trim_matches('/').to_string();
        let label = if prefix.is_empty() { s3.bucket_label() } else { format!("{}/{prefix}", s3.bucket_label()) };
        S3Objects { s3, prefix, label, spool }
    }

    fn key(&self, key: &str) -> String {
        if self.prefix.is_empty() { key.to_string() } else { format!("{}/{key}", self.prefix) }
    }

    fn folder(&self, folder: &str) -> String {
        match (self.prefix.is_empty(), folder.is_empty()) {
            (true, true) => String::new(),
            (true, false) => format!("{folder}/"),
            (false, true) => format!("{}/", self.prefix),
            (false, false) => format!("{}/{folder}/", self.prefix),
        }
    }

    /// Removes, under `folder`, the objects and the uploads begun more than
    /// [`STALE`] ago.
    pub async fn sweep(&self, folder: &str) -> ConnectorResult<()> {
        let cutoff = time::OffsetDateTime::now_utc() - STALE;
        for o in self.s3.list(&self.folder(folder)).await? {
            if o.modified.is_some_and(|m| m < cutoff) {
                self.s3.delete(&o.key).await?;
            }
        }
        for u in self.s3.uploads(&self.folder(folder)).await? {
            if u.initiated.is_none_or(|at| at < cutoff) {
                self.s3.abort_upload(&u.key, &u.id).await?;
            }
        }
        Ok(())
    }
}

fn io(what: &str, e: std::io::Error) -> ConnectorError {
    ConnectorError::Other(format!("{what}: {}", e.kind()))
}

#[async_trait::async_trait]
impl Objects for S3Objects {
    fn label(&self) -> &str {
        &self.label
    }

    async fn check_writable(&self) -> ConnectorResult<()> {
        let probe = self.key(&format!("_sluice/probe-{}", uuid::Uuid::new_v4().simple()));
        self.s3.put(&probe, Vec::new(), Put::Always).await?;
        self.s3.delete(&probe).await
    }

    async fn check_readable(&self) -> ConnectorResult<()> {
        self.s3.probe().await
    }

    async fn fetch(&self, key: &str) -> ConnectorResult<Fetched> {
        let (path, mut f) = self.spool("", "fetched")?;
        let fetched = Fetched::temporary(path);
        if !self.s3.download(&self.key(key), &mut f).await? {
            return Err(ConnectorError::EntityNotFound(format!("{}/{key} does not exist", self.label)));
        }
        Ok(fetched)
    }

    async fn get(&self, key: &str) -> ConnectorResult<Option<Vec<u8>>> {
        Ok(self.s3.get(&self.key(key)).await?.map(|(b, _)| b))
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> ConnectorResult<()> {
        self.s3.put(&self.key(key), bytes, Put::Always).await.map(|_| ())
    }

    async fn get_tagged(&self, key: &str) -> ConnectorResult<Option<(Vec<u8>, String)>> {
        self.s3.get(&self.key(key)).await
    }

    async fn replace(&self, key: &str, bytes: Vec<u8>, tag: Option<&str>) -> ConnectorResult<bool> {
        let mode = match tag {
            Some(t) => Put::IfMatch(t),
            None => Put::IfAbsent,
        };
        Ok(self.s3.put(&self.key(key), bytes, mode).await?.is_some())
    }

    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> ConnectorResult<bool> {
        Ok(self.s3.put(&self.key(key), bytes, Put::IfAbsent).await?.is_some())
    }

    fn spool(&self, _entity: &str, name: &str) -> ConnectorResult<(PathBuf, std::fs::File)> {
        std::fs::create_dir_all(&self.spool).map_err(|e| io("spool folder", e))?;
        let p = self.spool.join(format!("{}-{name}", uuid::Uuid::new_v4().simple()));
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&p).map_err(|e| io("spool file", e))?;
        Ok((p, f))
    }

    async fn upload(&self, spooled: &Path, key: &str) -> ConnectorResult<()> {
        let key = self.key(key);
        let done = put_file(&self.s3, spooled, &key).await;
        let _ = std::fs::remove_file(spooled);
        done
    }

    async fn promote(&self, from: &str, to: &str) -> ConnectorResult<bool> {
        if !self.s3.copy(&self.key(from), &self.key(to)).await? {
            return if self.s3.exists(&self.key(to)).await? { Ok(false) } else { Err(super::objects::missing(from)) };
        }
        self.s3.delete(&self.key(from)).await?;
        Ok(true)
    }

    async fn list(&self, folder: &str) -> ConnectorResult<Vec<ObjectInfo>> {
        let base = self.folder("");
        let mut out: Vec<ObjectInfo> = self
            .s3
            .list(&self.folder(folder))
            .await?
            .into_iter()
            .filter_map(|o| {
                let key = o.key.strip_prefix(&base)?.to_string();
                let modified = o.modified.map(std::time::SystemTime::from);
                Some(ObjectInfo { key, size: o.size, modified })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> ConnectorResult<()> {
        self.s3.delete(&self.key(key)).await
    }

    /// A bucket holds no lock: commits are kept apart by their intent's
    /// conditional put (see the module).
    async fn lock(&self, _entity: &str, _attempt: Option<&Attempt>) -> ConnectorResult<Held> {
        Ok(Box::new(()))
    }

    fn try_lock(&self, _entity: &str) -> ConnectorResult<Option<Held>> {
        Ok(Some(Box::new(())))
    }

    async fn wait_for_earlier(&self, _entities: &[String], _attempt: &Attempt) -> ConnectorResult<u64> {
        Ok(0)
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn clean(&self, folder: &str) -> ConnectorResult<()> {
        self.sweep(folder).await
    }
}

/// Puts the file at `path` as `key`: whole up to [`PART`], else in parts
/// (an upload that fails is aborted).
async fn put_file(s3: &S3, path: &Path, key: &str) -> ConnectorResult<()> {
    let mut f = std::fs::File::open(path).map_err(|e| io("spooled file", e))?;
    let size = f.metadata().map_err(|e| io("spooled file", e))?.len();
    let read_part = |f: &mut std::fs::File| -> ConnectorResult<Vec<u8>> {
        let mut buf = Vec::with_capacity(PART);
        f.by_ref().take(PART as u64).read_to_end(&mut buf).map_err(|e| io("spooled file", e))?;
        Ok(buf)
    };
    if size <= PART as u64 {
        let body = read_part(&mut f)?;
        return s3.put(key, body, Put::Always).await.map(|_| ());
    }
    let id = s3.start_upload(key).await?;
    let mut etags = Vec::new();
    let uploaded: ConnectorResult<()> = async {
        loop {
            let part = read_part(&mut f)?;
            if part.is_empty() {
                break;
            }
            etags.push(s3.upload_part(key, &id, etags.len() as u32 + 1, part).await?);
        }
        s3.complete_upload(key, &id, &etags).await
    }
    .await;
    if uploaded.is_err() {
        let _ = s3.abort_upload(key, &id).await;
    }
    uploaded
}
