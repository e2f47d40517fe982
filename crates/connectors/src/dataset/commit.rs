//! An entity's commits: what of its folder is committed, and the marks
//! (change stream positions, cursors, the run that committed) committed
//! with it.
//!
//! Data files never change once they carry their name. A writer writes
//! each file locally (spooled), then puts it whole under
//! `_sluice/<entity>/staging/<name>.staged`, where no reader of
//! `<entity>/` looks. A commit is one object written whole, its intent
//! `_sluice/<entity>/commit.json`: the staged files to publish, the files
//! to remove (an overwrite's old set), and the manifest after. Once it is
//! there, the commit happens: the files are moved into `<entity>/`, the
//! manifest (`_sluice/<entity>/manifest.json`) replaced, the old files
//! removed, the intent deleted. A writer killed anywhere in between leaves
//! the intent, and the next writer of the entity (or the next read of its
//! marks) carries it out before anything else ([`recover`]); killed before
//! the intent, it leaves staged files that no commit names, which
//! [`recover`] removes. Every step can be done twice.
//!
//! Every manifest has a version, and an intent names the version it was
//! made on. A writer frozen past its lease, whose run another attempt took
//! over and went on committing, may wake and commit what it holds: its
//! intent is then void (the manifest moved on), and whoever carries it out
//! drops it and its staged files without publishing anything. The manifest
//! is replaced only if it is still the one the intent was checked against
//! (a conditional put in a bucket; on disk, the entity's lock keeps
//! writers apart).

use super::objects::Objects;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult, EntitySchema};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// The fields every data file holds (the latest, when they grew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<EntitySchema>,
    /// The committed data files, by name, in the order committed.
    #[serde(default)]
    pub files: Vec<String>,
    /// The marks committed with the data, by stream.
    #[serde(default)]
    pub held: BTreeMap<String, String>,
    /// One more at every commit (0: none yet).
    #[serde(default)]
    pub version: u64,
}

/// A commit's intent.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Commit {
    /// Staged files to publish, by their staged names (see [`staged_key`]).
    pub publish: Vec<String>,
    /// Data file names to remove once the manifest is replaced.
    pub remove: Vec<String>,
    pub manifest: Manifest,
    /// The version of the manifest the commit was made on (`None`: an
    /// intent written before versions, carried out as it says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
}

pub fn manifest_key(entity: &str) -> String {
    format!("_sluice/{entity}/manifest.json")
}

pub fn commit_key(entity: &str) -> String {
    format!("_sluice/{entity}/commit.json")
}

pub fn staging(entity: &str) -> String {
    format!("_sluice/{entity}/staging")
}

/// A file staged by one writer: `<name>.<writer>.staged`, so that two
/// writers of one name (a frozen attempt woken, and the one that took its
/// run over) never stage over each other.
pub fn staged_name(name: &str, writer: &str) -> String {
    format!("{name}.{writer}.staged")
}

/// The name a staged file is published under.
pub fn published_name(staged: &str) -> Option<&str> {
    staged.strip_suffix(".staged")?.rsplit_once('.').map(|(name, _)| name)
}

pub fn staged_key(entity: &str, staged: &str) -> String {
    format!("{}/{staged}", staging(entity))
}

pub fn data_key(entity: &str, name: &str) -> String {
    format!("{entity}/{name}")
}

fn unreadable(what: &str, entity: &str, e: serde_json::Error) -> ConnectorError {
    ConnectorError::Other(format!("the {what} of {entity} under _sluice/ is not readable: {e}"))
}

/// The entity's committed manifest, if it has one.
pub async fn manifest(objects: &dyn Objects, entity: &str) -> ConnectorResult<Option<Manifest>> {
    match objects.get(&manifest_key(entity)).await? {
        Some(b) => serde_json::from_slice(&b).map(Some).map_err(|e| unreadable("manifest", entity, e)),
        None => Ok(None),
    }
}

/// Commits `commit` (its files staged): the intent first, put only if no
/// other writer's is there, then its steps. Refused when the manifest
/// moved on since the commit's base (another attempt committed).
pub async fn commit(objects: &dyn Objects, entity: &str, commit: &Commit) -> ConnectorResult<()> {
    let bytes = serde_json::to_vec(commit).map_err(|e| ConnectorError::Other(e.to_string()))?;
    if !objects.put_new(&commit_key(entity), bytes).await? {
        return Err(ConnectorError::Timeout(format!(
            "{entity} is being committed by another writer (or one that died mid-commit, whose commit the next \
             attempt finishes)"
        )));
    }
    if carry_out(objects, entity, commit).await? {
        Ok(())
    } else {
        Err(ConnectorError::Other(format!(
            "{entity} was committed by another attempt since this writer began: its files are dropped"
        )))
    }
}

/// Carries out an intent; answers `false` when it was void (see the
/// module), and is dropped.
async fn carry_out(objects: &dyn Objects, entity: &str, c: &Commit) -> ConnectorResult<bool> {
    let current = objects.get_tagged(&manifest_key(entity)).await?;
    let (now, tag) = match current {
        Some((b, tag)) => {
            (Some(serde_json::from_slice::<Manifest>(&b).map_err(|e| unreadable("manifest", entity, e))?), Some(tag))
        }
        None => (None, None),
    };
    let applied = now.as_ref() == Some(&c.manifest);
    if let Some(base) = c.base
        && !applied
        && now.as_ref().map_or(0, |m| m.version) != base
    {
        for staged in &c.publish {
            objects.delete(&staged_key(entity, staged)).await?;
        }
        objects.delete(&commit_key(entity)).await?;
        return Ok(false);
    }
    if !applied {
        for staged in &c.publish {
            let name = published_name(staged).ok_or_else(|| {
                ConnectorError::Other(format!("the commit of {entity} names '{staged}', not a staged file"))
            })?;
            objects.promote(&staged_key(entity, staged), &data_key(entity, name)).await?;
        }
        let bytes = serde_json::to_vec(&c.manifest).map_err(|e| ConnectorError::Other(e.to_string()))?;
        if c.base.is_none() {
            objects.put(&manifest_key(entity), bytes).await?;
        } else if !objects.replace(&manifest_key(entity), bytes, tag.as_deref()).await? {
            // Moved on since the check: whoever moved it carried this
            // intent out first (one intent at a time), and went on.
            return Ok(false);
        }
    }
    for name in c.remove.iter().filter(|n| !c.manifest.files.contains(n)) {
        objects.delete(&data_key(entity, name)).await?;
    }
    objects.delete(&commit_key(entity)).await?;
    Ok(true)
}

/// Finishes what a writer killed mid-commit left, and removes what it
/// staged or spooled for commits that never happened (call with the
/// entity's lock held). Answers the manifest.
pub async fn recover(objects: &dyn Objects, entity: &str) -> ConnectorResult<Option<Manifest>> {
    if let Some(b) = objects.get(&commit_key(entity)).await? {
        let c: Commit = serde_json::from_slice(&b).map_err(|e| unreadable("commit", entity, e))?;
        carry_out(objects, entity, &c).await?;
        // (A void intent is dropped: what it staged was never published.)
    }
    for folder in [staging(entity), format!("_sluice/{entity}/spool")] {
        objects.clean(&folder).await?;
    }
    manifest(objects, entity).await
}

/// The entity's manifest as its pending intent will leave it (the
/// intent's, unless void), read without carrying the intent out: what a
/// reader of the marks goes by where a live writer may be committing.
pub async fn settled(objects: &dyn Objects, entity: &str) -> ConnectorResult<Option<Manifest>> {
    let current = manifest(objects, entity).await?;
    let Some(b) = objects.get(&commit_key(entity)).await? else { return Ok(current) };
    let c: Commit = serde_json::from_slice(&b).map_err(|e| unreadable("commit", entity, e))?;
    let version = current.as_ref().map_or(0, |m| m.version);
    Ok(match c.base {
        Some(base) if base != version && current.as_ref() != Some(&c.manifest) => current,
        _ => Some(c.manifest),
    })
}

/// The entities of the root that have a manifest, sorted.
pub async fn manifested(objects: &dyn Objects) -> ConnectorResult<Vec<String>> {
    entities_with(objects, "manifest.json").await
}

/// The entities of the root that a writer ever locked (their first commit
/// perhaps not made yet), sorted.
pub async fn locked(objects: &dyn Objects) -> ConnectorResult<Vec<String>> {
    entities_with(objects, "lock").await
}

async fn entities_with(objects: &dyn Objects, file: &str) -> ConnectorResult<Vec<String>> {
    let suffix = format!("/{file}");
    let mut out: Vec<String> = objects
        .list("_sluice")
        .await?
        .into_iter()
        .filter_map(|o| o.key.strip_prefix("_sluice/")?.strip_suffix(&suffix).map(str::to_string))
        .filter(|e| !e.contains('/'))
        .collect();
    out.sort();
    Ok(out)
}
