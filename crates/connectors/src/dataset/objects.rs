//! Where a dataset's objects live, behind one small interface: a folder
//! under the organization's file root now, an S3-compatible bucket next.
//! Keys are `/`-separated, relative to the connection's root, and made by
//! the dataset's own code (entity names checked, never user paths).
//!
//! Every object appears whole or not at all: the local store writes a file
//! beside its name and renames it over (synced, then the folder synced);
//! S3 makes an object visible only when its PUT or multipart upload
//! completes.

use crate::common::{Confined, LockFile};
use sluice_domain::connect::connector::{Attempt, ConnectorError, ConnectorResult};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// An object's key, size and modification time.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    pub modified: Option<std::time::SystemTime>,
}

/// A local file holding an object's bytes, to read: the file itself where
/// the store is local, else a copy fetched, removed when dropped.
pub struct Fetched {
    pub path: PathBuf,
    temporary: bool,
}

impl Fetched {
    /// A copy fetched into `path`, removed when dropped.
    pub fn temporary(path: PathBuf) -> Self {
        Fetched { path, temporary: true }
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        if self.temporary {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The held lock of one entity's writer: dropped, it is freed.
pub type Held = Box<dyn std::any::Any + Send>;

#[async_trait::async_trait]
pub trait Objects: Send + Sync {
    /// The root as messages name it (the path or URL the user wrote).
    fn label(&self) -> &str;
    /// Makes sure the root exists and can be written.
    async fn check_writable(&self) -> ConnectorResult<()>;
    /// Makes sure the root exists and can be read.
    async fn check_readable(&self) -> ConnectorResult<()>;
    /// `key`'s bytes in a local file.
    async fn fetch(&self, key: &str) -> ConnectorResult<Fetched>;
    async fn get(&self, key: &str) -> ConnectorResult<Option<Vec<u8>>>;
    /// `key`'s bytes and a tag that changes whenever they do. A store whose
    /// writers hold the entity's lock (local disk) tags nothing.
    async fn get_tagged(&self, key: &str) -> ConnectorResult<Option<(Vec<u8>, String)>> {
        Ok(self.get(key).await?.map(|b| (b, String::new())))
    }
    /// Replaces `key` only while its tag is still `tag` (`None`: only while
    /// there is no such object); answers whether it did. A store whose
    /// writers hold the entity's lock replaces it.
    async fn replace(&self, key: &str, bytes: Vec<u8>, _tag: Option<&str>) -> ConnectorResult<bool> {
        self.put(key, bytes).await.map(|_| true)
    }
    /// Writes `bytes` as `key`, whole.
    async fn put(&self, key: &str, bytes: Vec<u8>) -> ConnectorResult<()>;
    /// Writes `bytes` as `key` only if nothing has that key: `false` when
    /// something had. Where the entity's lock keeps writers apart, a put.
    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> ConnectorResult<bool> {
        self.put(key, bytes).await.map(|_| true)
    }
    /// A local file for `entity` to write an object into before
    /// [`Objects::upload`]: a new name, made here (never one that was).
    fn spool(&self, entity: &str, name: &str) -> ConnectorResult<(PathBuf, File)>;
    /// Puts the finished file `spooled` (from [`Objects::spool`]) as `key`,
    /// whole; the local file is gone after.
    async fn upload(&self, spooled: &Path, key: &str) -> ConnectorResult<()>;
    /// Moves `from` to `to`; `false` when `from` is not there (moved
    /// already).
    async fn promote(&self, from: &str, to: &str) -> ConnectorResult<bool>;
    /// Every object under `folder` (the root: empty), at any depth, by key.
    async fn list(&self, folder: &str) -> ConnectorResult<Vec<ObjectInfo>>;
    /// Removes `key`; one not there is fine.
    async fn delete(&self, key: &str) -> ConnectorResult<()>;
    /// Takes the writer's lock of `entity` (waiting for the writer holding
    /// it), marked with `attempt`.
    async fn lock(&self, entity: &str, attempt: Option<&Attempt>) -> ConnectorResult<Held>;
    /// The lock of `entity` if no writer holds it.
    fn try_lock(&self, entity: &str) -> ConnectorResult<Option<Held>>;
    /// Waits for an earlier attempt of `attempt`'s run that holds an
    /// entity's lock (a frozen process); answers how many it waited for.
    async fn wait_for_earlier(&self, entities: &[String], attempt: &Attempt) -> ConnectorResult<u64>;
    /// Whether an entity's lock keeps every other writer out (a lock file
    /// a dead process frees): then what is under its staging folder is a
    /// dead writer's, removed whole.
    fn exclusive(&self) -> bool {
        true
    }
    /// Removes a dead writer's leftovers under `folder`: everything, where
    /// the lock is exclusive; else what is old enough to be no live
    /// writer's.
    async fn clean(&self, folder: &str) -> ConnectorResult<()> {
        for o in self.list(folder).await? {
            self.delete(&o.key).await?;
        }
        Ok(())
    }
}

fn io(what: &str, e: std::io::Error) -> ConnectorError {
    ConnectorError::Other(format!("{what}: {}", e.kind()))
}

/// A folder under the organization's file root.
pub struct LocalObjects {
    pub place: Confined,
}

impl LocalObjects {
    /// `key` as a path of this folder, checked to stay inside the
    /// organization's directory (a link planted there must not lead out).
    fn path(&self, key: &str) -> ConnectorResult<PathBuf> {
        if key.is_empty() || key.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
            return Err(ConnectorError::Other(format!("'{key}' is not an object key")));
        }
        let p = self.place.path.join(key);
        self.place.check_inside(&p)?;
        if let Some(parent) = p.parent() {
            self.place.check_inside(parent)?;
        }
        Ok(p)
    }

    fn lock_file(&self, entity: &str) -> ConnectorResult<LockFile> {
        let path = self.path(&format!("_sluice/{entity}/lock"))?;
        fs::create_dir_all(path.parent().expect("a lock file has a folder")).map_err(|e| io("folder", e))?;
        Ok(LockFile { path, name: format!("{}/{entity}", self.place.label.trim_end_matches('/')) })
    }
}

fn sync_dir(dir: &Path) -> ConnectorResult<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("folder", e))
}

/// A regular file of this folder, not a link planted there.
fn regular(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

/// A regular file of this folder with no other name: a hard link planted
/// here names another file, perhaps another organization's, which must not
/// be read as this folder's.
fn own(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file() && m.nlink() == 1)
}

/// A staged file a commit names that is neither staged nor published.
pub fn missing(key: &str) -> ConnectorError {
    ConnectorError::Other(format!("{key} is missing: the commit that names it cannot be carried out"))
}

#[async_trait::async_trait]
impl Objects for LocalObjects {
    fn label(&self) -> &str {
        &self.place.label
    }

    async fn check_writable(&self) -> ConnectorResult<()> {
        let dir = self.place.path.clone();
        fs::create_dir_all(&dir).map_err(|e| io(&format!("directory '{}'", self.place.label), e))?;
        let probe = dir.join(format!(".sluice-probe-{}", uuid::Uuid::new_v4().simple()));
        fs::write(&probe, b"").map_err(|e| {
            ConnectorError::InvalidConfig(format!("'{}' is not writable: {}", self.place.label, e.kind()))
        })?;
        let _ = fs::remove_file(probe);
        Ok(())
    }

    async fn check_readable(&self) -> ConnectorResult<()> {
        match fs::metadata(&self.place.path) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(ConnectorError::InvalidConfig(format!("'{}' is not a directory", self.place.label))),
            Err(_) => Err(ConnectorError::DatabaseNotFound(format!("directory '{}' does not exist", self.place.label))),
        }
    }

    async fn fetch(&self, key: &str) -> ConnectorResult<Fetched> {
        let p = self.path(key)?;
        if !own(&p) {
            return Err(ConnectorError::EntityNotFound(format!(
                "{key} is not a file of this folder (a link, or a file with more than one link)"
            )));
        }
        Ok(Fetched { path: p, temporary: false })
    }

    async fn get(&self, key: &str) -> ConnectorResult<Option<Vec<u8>>> {
        let p = self.path(key)?;
        if fs::symlink_metadata(&p).is_ok() && !own(&p) {
            return Err(ConnectorError::Other(format!("{key} is not a regular file of its own (a link); refused")));
        }
        match fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(key, e)),
        }
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> ConnectorResult<()> {
        let p = self.path(key)?;
        let dir = p.parent().expect("a key names a file in a folder").to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io("folder", e))?;
        let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
        let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(|e| io(key, e))?;
        f.write_all(&bytes).and_then(|_| f.sync_all()).map_err(|e| io(key, e))?;
        fs::rename(&tmp, &p).map_err(|e| io(key, e))?;
        sync_dir(&dir)
    }

    fn spool(&self, entity: &str, name: &str) -> ConnectorResult<(PathBuf, File)> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let p = self.path(&format!("_sluice/{entity}/spool/{name}.{}.part", &token[..12]))?;
        fs::create_dir_all(p.parent().expect("spool folder")).map_err(|e| io("folder", e))?;
        // A new file: nothing planted under the name (a link) is opened.
        let f = fs::OpenOptions::new().write(true).create_new(true).open(&p).map_err(|e| io("spool file", e))?;
        Ok((p, f))
    }

    async fn upload(&self, spooled: &Path, key: &str) -> ConnectorResult<()> {
        let p = self.path(key)?;
        let dir = p.parent().expect("a key names a file in a folder").to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io("folder", e))?;
        File::open(spooled).and_then(|f| f.sync_all()).map_err(|e| io(key, e))?;
        fs::rename(spooled, &p).map_err(|e| io(key, e))?;
        sync_dir(&dir)
    }

    async fn promote(&self, from: &str, to: &str) -> ConnectorResult<bool> {
        let (src, dst) = (self.path(from)?, self.path(to)?);
        if !regular(&src) {
            return if regular(&dst) { Ok(false) } else { Err(missing(from)) };
        }
        let dir = dst.parent().expect("a key names a file in a folder").to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io("folder", e))?;
        fs::rename(&src, &dst).map_err(|e| io(to, e))?;
        sync_dir(&dir)?;
        Ok(true)
    }

    async fn list(&self, folder: &str) -> ConnectorResult<Vec<ObjectInfo>> {
        let top = if folder.is_empty() { self.place.path.clone() } else { self.path(folder)? };
        let base = if folder.is_empty() { String::new() } else { format!("{folder}/") };
        let mut out = Vec::new();
        let mut stack = vec![(top, base)];
        while let Some((dir, keyed)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io("folder", e)),
            };
            for e in entries.filter_map(|e| e.ok()) {
                let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
                if name.starts_with('.') {
                    continue;
                }
                let key = format!("{keyed}{name}");
                // Links are not followed: what is listed is this folder's own.
                let Ok(meta) = fs::symlink_metadata(e.path()) else { continue };
                if meta.is_dir() {
                    stack.push((e.path(), format!("{key}/")));
                } else if meta.is_file() {
                    out.push(ObjectInfo { key, size: meta.len(), modified: meta.modified().ok() });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> ConnectorResult<()> {
        match fs::remove_file(self.path(key)?) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(key, e)),
        }
    }

    async fn lock(&self, entity: &str, attempt: Option<&Attempt>) -> ConnectorResult<Held> {
        let mut f = self.lock_file(entity)?.lock().await?;
        if let Some(a) = attempt {
            LockFile::mark(&mut f, a)?;
        }
        Ok(Box::new(f))
    }

    fn try_lock(&self, entity: &str) -> ConnectorResult<Option<Held>> {
        Ok(self.lock_file(entity)?.try_lock()?.map(|f| Box::new(f) as Held))
    }

    async fn wait_for_earlier(&self, entities: &[String], attempt: &Attempt) -> ConnectorResult<u64> {
        let mut waited = 0;
        for e in entities {
            if self.lock_file(e)?.wait_if_earlier(attempt).await? {
                waited += 1;
            }
        }
        Ok(waited)
    }
}
