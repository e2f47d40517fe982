//! Path confinement for file-based connections: every path resolves
//! inside its organization's own directory.

use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use std::path::{Component, Path, PathBuf};

/// A path of a file-based connection, resolved inside its organization's
/// own directory.
#[derive(Debug, Clone)]
pub struct Confined {
    /// The organization's directory, canonical (symbolic links resolved).
    pub base: PathBuf,
    /// The path inside it.
    pub path: PathBuf,
    /// The path as the user wrote it: what messages show, never `path`.
    pub label: String,
}

impl Confined {
    /// Checks that `p` (a file inside this path) still resolves inside the
    /// organization's directory once symbolic links are followed; of a file
    /// that does not exist yet, the nearest folder that does must (a link
    /// planted as a folder on its way would lead the file out).
    pub fn check_inside(&self, p: &Path) -> ConnectorResult<()> {
        let mut at = Some(p);
        while let Some(here) = at {
            match std::fs::canonicalize(here) {
                Ok(real) if real.starts_with(&self.base) => return Ok(()),
                Ok(_) => return Err(outside(&self.label)),
                // A link to nowhere would be followed when the file is created.
                Err(_) if std::fs::symlink_metadata(here).is_ok() => return Err(outside(&self.label)),
                Err(_) => at = here.parent(),
            }
        }
        Ok(())
    }
}

/// Opens a file of an organization's directory to write in place (append
/// to it, cut it back, lock and mark it), with `options`: never through a
/// symbolic link (`O_NOFOLLOW`), and only a regular file with exactly one
/// link, checked on the handle opened (so a file swapped in meanwhile is
/// checked too). A hard link planted in the directory names another file,
/// perhaps another organization's: writing through it would change that
/// file, so it is refused (`InvalidInput`, saying so).
///
/// # Errors
/// The open's error, or `InvalidInput` for a link or a file that is not
/// regular.
pub fn open_in_place(path: &Path, options: &std::fs::OpenOptions) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut options = options.clone();
    options.custom_flags(libc::O_NOFOLLOW);
    let file = options
        .open(path)
        .map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { linked("is a symbolic link") } else { e })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(linked("is not a regular file"));
    }
    if meta.nlink() != 1 {
        return Err(linked("has more than one link (a hard link to it was made)"));
    }
    Ok(file)
}

/// Whether `file` (opened by [`open_in_place`]) is still the file at `path`:
/// the same device and inode. A lock taken on a file that was then
/// replaced under its name locks nothing that others open.
pub fn still_at(file: &std::fs::File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (held, named) = (file.metadata()?, std::fs::symlink_metadata(path)?);
    Ok(held.dev() == named.dev() && held.ino() == named.ino() && named.nlink() == 1)
}

fn linked(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("the file {what}: refused, since a file written in place must be this directory's own"),
    )
}

fn outside(label: &str) -> ConnectorError {
    ConnectorError::InvalidConfig(format!("path '{label}' leads outside the organization's directory"))
}

/// The rule for a path as written: relative, without `..`, without NUL,
/// not empty. `Err` holds the reason.
pub fn check_relative(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.trim().is_empty() {
        Err("must not be empty".into())
    } else if path.contains('\0') {
        Err("must not contain a NUL character".into())
    } else if p.is_absolute() || path.starts_with('~') || p.components().any(|c| matches!(c, Component::Prefix(_))) {
        Err("must be relative to the organization's directory, not absolute".into())
    } else if p.components().any(|c| matches!(c, Component::ParentDir)) {
        Err("must not contain '..'".into())
    } else {
        Ok(())
    }
}

/// Resolves `path` inside `dir` (the organization's directory, created if
/// missing): the path must be relative without `..`, and what of it exists
/// must resolve inside `dir` once symbolic links are followed, so that no
/// connection reads or writes another organization's files or the
/// server's own. Messages name `path` as written, never a server path.
pub fn confine(dir: &Path, path: &str) -> ConnectorResult<Confined> {
    check_relative(path).map_err(|m| ConnectorError::InvalidConfig(format!("path {m}")))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| ConnectorError::Other(format!("cannot create the organization's directory: {}", e.kind())))?;
    let base = std::fs::canonicalize(dir)
        .map_err(|e| ConnectorError::Other(format!("cannot open the organization's directory: {}", e.kind())))?;
    let placed = Confined { path: base.join(path), base, label: path.to_string() };
    // The longest part of the path that exists (a dangling link counts:
    // where it points is unknown) must resolve inside; the rest does not
    // exist yet, so holds no link.
    if let Some(existing) = placed.path.ancestors().find(|p| std::fs::symlink_metadata(p).is_ok()) {
        placed.check_inside(existing)?;
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_organization_directory() {
        let top = std::env::temp_dir().join(format!("sluice-confine-{}", uuid::Uuid::new_v4().simple()));
        let org = top.join("org-a");
        let other = top.join("org-b");
        std::fs::create_dir_all(other.join("data")).unwrap();
        std::fs::write(other.join("warehouse.db"), b"theirs").unwrap();
        let placed = confine(&org, "x/y.db").unwrap();
        assert!(placed.path.ends_with("org-a/x/y.db") && placed.label == "x/y.db", "{placed:?}");
        for bad in ["../org-b/warehouse.db", "/etc/passwd", "a/../../b", "", "~/x", "a\0b"] {
            let e = confine(&org, bad).unwrap_err().to_string();
            assert!(!e.contains(top.to_str().unwrap()), "no server path in '{e}'");
        }
        // Symbolic links that lead out are refused, wherever they sit on
        // the path, and so is a dangling one.
        std::os::unix::fs::symlink(&other, org.join("escape")).unwrap();
        std::os::unix::fs::symlink(other.join("warehouse.db"), org.join("theirs.db")).unwrap();
        std::os::unix::fs::symlink(top.join("nowhere"), org.join("dangling")).unwrap();
        for bad in ["escape", "escape/warehouse.db", "escape/new/file.db", "theirs.db", "dangling"] {
            let e = confine(&org, bad).unwrap_err().to_string();
            assert!(e.contains("outside the organization's directory"), "{bad}: {e}");
            assert!(!e.contains(top.to_str().unwrap()), "{e}");
        }
        // A link that stays inside is fine.
        std::fs::create_dir_all(org.join("real")).unwrap();
        std::os::unix::fs::symlink(org.join("real"), org.join("alias")).unwrap();
        let inside = confine(&org, "alias/t.db").unwrap();
        inside.check_inside(&inside.path).unwrap();
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn a_file_written_in_place_is_the_directorys_own() {
        let top = std::env::temp_dir().join(format!("sluice-inplace-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&top).unwrap();
        let theirs = top.join("theirs.jsonl");
        std::fs::write(&theirs, b"theirs\n").unwrap();
        let mut append = std::fs::OpenOptions::new();
        append.append(true);
        // A hard link to another file, and a symbolic one, are refused; the
        // file linked to is left as it was.
        std::fs::hard_link(&theirs, top.join("planted.jsonl")).unwrap();
        std::os::unix::fs::symlink(&theirs, top.join("soft.jsonl")).unwrap();
        for name in ["planted.jsonl", "soft.jsonl"] {
            let e = open_in_place(&top.join(name), &append).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name}: {e}");
            assert!(e.to_string().contains("refused"), "{e}");
        }
        assert!(open_in_place(&theirs, &append).is_err(), "two links now: the original is refused too");
        std::fs::remove_file(top.join("planted.jsonl")).unwrap();
        let own = open_in_place(&theirs, &append).unwrap();
        assert!(still_at(&own, &theirs).unwrap());
        // Replaced under its name: the handle no longer is the file there.
        std::fs::rename(&theirs, top.join("moved.jsonl")).unwrap();
        std::fs::write(&theirs, b"new").unwrap();
        assert!(!still_at(&own, &theirs).unwrap());
        assert_eq!(std::fs::read(top.join("moved.jsonl")).unwrap(), b"theirs\n");
        std::fs::remove_dir_all(&top).unwrap();
    }
}
