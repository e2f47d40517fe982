//! An entity's manifest: what of its data file is committed, and the change
//! stream positions committed with it.
//!
//! A file cannot commit rows and a position in one transaction, so the
//! manifest (`.<entity>.<ext>.manifest.json`, replaced by a rename) is the
//! commit point of every write that holds a position or appends in place:
//!
//! - **In place** (appends): the writer marks the manifest `writing`, then
//!   each commit syncs the rows and records the file's new length. A writer
//!   killed before a commit leaves a tail past the recorded length, under a
//!   manifest still marked `writing`; the next writer, or the next read of
//!   the positions, cuts it off ([`EntityFiles::recover`]). A file changed
//!   by hand while no writer was at it is taken as it is.
//! - **By a rename** (overwrite, upsert, a CSV whose header grows): the new
//!   file is written and synced under a name of its own, the manifest names
//!   it as the rename to redo, then it is renamed over the data file. A
//!   writer killed between the two leaves the new file and a manifest that
//!   says to rename it; [`EntityFiles::recover`] does.
//!
//! One writer at a time holds an entity: a lock on `.<entity>.<ext>.lock`,
//! taken for the writer's life (and to move the positions) and freed by the
//! kernel when its process dies; the lock file names the run attempt that
//! holds it. A frozen process keeps it, so the attempt that takes its run
//! over waits for it before anything else (and fails, to be retried, when
//! it does not wake) rather than read a position the frozen one may still
//! move, or write beside it.

use super::{FileConnector, io};
use crate::common::Confined;
use sluice_domain::connect::connector::*;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Manifest {
    /// The position of each change stream the entity's data holds.
    #[serde(default)]
    pub positions: BTreeMap<String, String>,
    /// The data file's committed length.
    #[serde(default)]
    pub length: u64,
    /// A writer appends in place: past `length` is not committed.
    #[serde(default)]
    pub writing: bool,
    /// A file (in the entity's directory) to rename over the data file,
    /// when it still exists: a commit by a rename, cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo: Option<String>,
}

/// The files of one entity of a file connection that a writer commits
/// through: its data file, manifest and lock, checked to resolve inside the
/// organization's directory when made.
#[derive(Debug, Clone)]
pub(super) struct EntityFiles {
    place: Confined,
    /// `<entity>.<ext>`: the data file's name, which the others begin with.
    name: String,
    pub data: PathBuf,
}

impl FileConnector {
    pub(super) fn files(&self, entity: &str) -> ConnectorResult<EntityFiles> {
        super::check_entity(entity)?;
        let name = format!("{entity}.{}", self.format.ext());
        let f = EntityFiles { place: self.place.clone(), data: self.place.path.join(&name), name };
        for p in [&f.data, &f.manifest_path(), &f.hidden("manifest.json.tmp"), &f.hidden("lock")] {
            self.place.check_inside(p)?;
        }
        Ok(f)
    }

    /// Waits until no earlier attempt of `attempt`'s run holds an entity of
    /// this directory (a frozen process's writer; see the module doc):
    /// answers how many it waited for, or a timeout.
    pub(super) async fn wait_for_earlier_attempts(&self, attempt: &Attempt) -> ConnectorResult<u64> {
        let Ok(entities) = self.hidden_entities("lock") else { return Ok(0) };
        let mut waited = 0;
        for entity in entities {
            if self.files(&entity)?.lock_file().wait_if_earlier(attempt).await? {
                waited += 1;
            }
        }
        Ok(waited)
    }

    /// The entities of this directory (in this connection's format) that
    /// have a manifest.
    pub(super) fn manifested(&self) -> ConnectorResult<Vec<String>> {
        self.hidden_entities("manifest.json").map_err(|e| io(&format!("directory {}", self.place.label), e))
    }

    /// The entities of this directory (in this connection's format) that
    /// have a file `.<entity>.<ext>.<what>`, sorted.
    fn hidden_entities(&self, what: &str) -> std::io::Result<Vec<String>> {
        let suffix = format!(".{}.{what}", self.format.ext());
        let mut out: Vec<String> = fs::read_dir(&self.place.path)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix('.')?.strip_suffix(&suffix).map(str::to_string))
            .filter(|n| super::check_entity(n).is_ok())
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Creates `path` afresh for writing: whatever was there (a link planted
/// to lead elsewhere too) is removed first, and the file is made new.
pub(super) fn create_new(path: &Path) -> std::io::Result<File> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new().write(true).create_new(true).open(path)
}

impl EntityFiles {
    /// `.<entity>.<ext>.<what>`.
    fn hidden(&self, what: &str) -> PathBuf {
        self.place.path.join(format!(".{}.{what}", self.name))
    }

    fn manifest_path(&self) -> PathBuf {
        self.hidden("manifest.json")
    }

    /// The entity's manifest, if it has one.
    pub fn manifest(&self) -> ConnectorResult<Option<Manifest>> {
        match fs::read(self.manifest_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| ConnectorError::Other(format!("the manifest of {} is not readable: {e}", self.name))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("manifest", e)),
        }
    }

    /// Replaces the entity's manifest (synced, then renamed into place; the
    /// directory synced after, so that the rename survives a crash).
    pub fn write_manifest(&self, m: &Manifest) -> ConnectorResult<()> {
        let tmp = self.hidden("manifest.json.tmp");
        let bytes = serde_json::to_vec(m).map_err(|e| ConnectorError::Other(e.to_string()))?;
        let mut f = create_new(&tmp).map_err(|e| io("manifest", e))?;
        f.write_all(&bytes).map_err(|e| io("manifest", e))?;
        f.sync_all().map_err(|e| io("manifest", e))?;
        fs::rename(&tmp, self.manifest_path()).map_err(|e| io("manifest", e))?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> ConnectorResult<()> {
        File::open(&self.place.path).and_then(|d| d.sync_all()).map_err(|e| io("directory", e))
    }

    fn lock_file(&self) -> crate::common::LockFile {
        crate::common::LockFile { path: self.hidden("lock"), name: self.name.clone() }
    }

    /// Takes the entity's lock, waiting up to [`crate::common::LOCK_WAIT`]
    /// for the writer that holds it.
    pub async fn lock(&self) -> ConnectorResult<File> {
        self.lock_file().lock().await
    }

    /// The entity's lock, if no writer holds it.
    pub fn try_lock(&self) -> ConnectorResult<Option<File>> {
        self.lock_file().try_lock()
    }

    /// Writes `attempt`'s mark into the lock file (its lock held), for
    /// [`FileConnector::wait_for_earlier_attempts`].
    pub fn mark(&self, lock: &mut File, attempt: &Attempt) -> ConnectorResult<()> {
        crate::common::LockFile::mark(lock, attempt)
    }

    /// The name of a file staged for a commit by a rename.
    fn staged_name(&self) -> String {
        format!(".{}.{}.commit", self.name, uuid::Uuid::new_v4().simple())
    }

    fn is_staged_name(&self, n: &str) -> bool {
        n.strip_prefix(&format!(".{}.", self.name))
            .and_then(|rest| rest.strip_suffix(".commit"))
            .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// Finishes what a writer killed mid-commit left (call with the lock
    /// held): the rename the manifest names, the data file cut back to its
    /// committed length when a writer was appending, staged files of
    /// commits that never happened removed. Answers the manifest, no
    /// writer marked.
    pub fn recover(&self) -> ConnectorResult<Option<Manifest>> {
        let Some(mut m) = self.manifest()? else { return Ok(None) };
        let before = m.clone();
        if let Some(redo) = m.redo.take()
            && self.is_staged_name(&redo)
        {
            let from = self.place.path.join(&redo);
            // A regular file of this directory, not a link planted there.
            if fs::symlink_metadata(&from).is_ok_and(|meta| meta.file_type().is_file()) {
                fs::rename(&from, &self.data).map_err(|e| io("file", e))?;
                self.sync_dir()?;
            }
        }
        if m.writing
            && let Ok(meta) = fs::metadata(&self.data)
            && meta.len() > m.length
        {
            let f =
                crate::common::open_in_place(&self.data, OpenOptions::new().write(true)).map_err(|e| io("file", e))?;
            f.set_len(m.length).map_err(|e| io("file", e))?;
            f.sync_all().map_err(|e| io("file", e))?;
        }
        m.writing = false;
        if let Ok(entries) = fs::read_dir(&self.place.path) {
            for e in entries.filter_map(|e| e.ok()) {
                if e.file_name().to_str().is_some_and(|n| self.is_staged_name(n)) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        if m != before {
            self.write_manifest(&m)?;
        }
        Ok(Some(m))
    }

    /// Starts appending in place (the lock held, recovered): the data
    /// file's length as it is now (changed by hand, it is taken as it is)
    /// committed, and the manifest marked `writing`.
    pub fn start_appending(&self, length: u64) -> ConnectorResult<()> {
        self.commit_length(length, &BTreeMap::new(), true)
    }

    /// Commits `file` (written and synced, in the entity's directory) as the
    /// entity's data by a rename, with `positions` over the manifest's:
    /// through the manifest when the entity has one or positions are held.
    pub fn commit_rename(&self, file: &Path, positions: &BTreeMap<String, String>) -> ConnectorResult<()> {
        let manifest = self.manifest()?;
        if manifest.is_none() && positions.is_empty() {
            fs::rename(file, &self.data).map_err(|e| io("file", e))?;
            return self.sync_dir();
        }
        let mut m = manifest.unwrap_or_default();
        m.positions.extend(positions.iter().map(|(k, v)| (k.clone(), v.clone())));
        m.length = fs::metadata(file).map_err(|e| io("file", e))?.len();
        m.writing = false;
        // A name of this commit alone: a later recovery renames it only if
        // this commit's rename did not happen.
        let redo = self.staged_name();
        let staged = self.place.path.join(&redo);
        fs::rename(file, &staged).map_err(|e| io("file", e))?;
        m.redo = Some(redo);
        if let Err(e) = self.write_manifest(&m) {
            // Committed all the same if the manifest got to its place; left
            // for the next recovery to tell when that cannot be read.
            match self.manifest() {
                Ok(now) if now.as_ref().and_then(|n| n.redo.as_ref()) == m.redo.as_ref() => {}
                Ok(_) => {
                    let _ = fs::remove_file(&staged);
                    return Err(e);
                }
                Err(_) => return Err(e),
            }
        }
        fs::rename(&staged, &self.data).map_err(|e| io("file", e))?;
        self.sync_dir()
    }

    /// Commits the data file's first `length` bytes (written and synced in
    /// place), with `positions` over the manifest's; `writing` says whether
    /// the writer goes on appending.
    pub fn commit_length(
        &self,
        length: u64,
        positions: &BTreeMap<String, String>,
        writing: bool,
    ) -> ConnectorResult<()> {
        let mut m = self.manifest()?.unwrap_or_default();
        m.positions.extend(positions.iter().map(|(k, v)| (k.clone(), v.clone())));
        m.length = length;
        m.writing = writing;
        m.redo = None;
        self.write_manifest(&m)
    }
}
