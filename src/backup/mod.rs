//! Backup and restore of a data directory: the control plane's (`yy serve`) or a Runner's.
//!
//! * [`manifest`]: what an archive holds (every file's size and SHA-256, versions).
//! * [`archive`]: the archive format, its writer and its verifying reader.
//! * [`collect`]: what is taken from a data directory (databases through SQLite's online
//!   backup, every other regular file, directory and symlink as it is).
//! * [`lock`]: the lock beside a data directory (`yy serve` and `yy runner run` share it,
//!   maintenance takes it alone).
//! * [`journal`]: the restore journal, and the rollback every start runs first.
//! * [`restore`]: verify while staging, keep the old data, swap by rename, log.
//! * [`postgres`]: the same archives of a control plane on PostgreSQL (its database as
//!   `yy.db`, its blob directory's files), and their restore into such a database.
//! * [`computers`]: a Runner's computers stopped and confirmed before maintenance.
//! * [`progress`]: bars on a terminal, nothing otherwise.
//! * [`bench`]: `yy bench backup` against `tar` and `sha256sum`.
//!
//! docs/backup.md describes the format and the rules for people.

pub mod archive;
pub mod bench;
pub mod collect;
pub mod computers;
pub mod journal;
pub mod lock;
pub mod manifest;
pub mod postgres;
pub mod progress;
pub mod restore;

use std::io;
use std::path::{Path, PathBuf};

/// Which kind of data directory an archive came from; a restore refuses the other kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    ControlPlane,
    Runner,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ControlPlane => "control-plane",
            Kind::Runner => "runner",
        }
    }
}

/// The layout version of a Runner's data directory (its databases carry no
/// `user_version`); bumped when a Runner database changes incompatibly.
pub const RUNNER_LAYOUT_VERSION: i64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Not usable as given: not an archive, the wrong kind, a bad path.
    #[error("{0}")]
    Invalid(String),
    /// The archive does not match its manifest, or its database is damaged.
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    NotFound(String),
    /// The data directory is in use (a server or Runner runs, or a restore is in progress).
    #[error("{0}")]
    Busy(String),
    /// The archive comes from a newer yy.
    #[error("{0}")]
    Newer(String),
    #[error("{0}")]
    Io(String),
    /// A SQLite error while snapshotting or checking a database.
    #[error("{0}")]
    Db(String),
}

pub type Result<T, E = BackupError> = std::result::Result<T, E>;

/// An I/O error as one line that says what failed and what to do about it.
pub fn io_error(doing: &str, path: &Path, e: io::Error) -> BackupError {
    let shown = path.display();
    match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => BackupError::Io(format!(
            "disk full while {doing} {shown}: free some space or choose another place"
        )),
        io::ErrorKind::PermissionDenied => BackupError::Io(format!(
            "permission denied while {doing} {shown}: run as the owner of the data, or choose another place"
        )),
        io::ErrorKind::NotFound => BackupError::NotFound(format!("{shown} does not exist")),
        io::ErrorKind::ReadOnlyFilesystem => {
            BackupError::Io(format!("read-only file system while {doing} {shown}"))
        }
        _ => BackupError::Io(format!("{doing} {shown}: {e}")),
    }
}

/// The places beside a data directory `D` that maintenance uses. They are siblings of `D`
/// so that they survive `D` being renamed away by a restore.
#[derive(Debug, Clone)]
pub struct Siblings {
    pub dir: PathBuf,
    pub parent: PathBuf,
    pub name: String,
}

impl Siblings {
    /// Resolves `dir` to an absolute path (it need not exist; its parent is created).
    pub fn of(dir: &Path) -> Result<Siblings> {
        let abs = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| BackupError::Io(format!("cannot find the current directory: {e}")))?
                .join(dir)
        };
        let abs = normalize(&abs);
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(BackupError::Invalid(format!(
                "{} cannot be a data directory: it has no parent directory",
                dir.display()
            )));
        };
        let name = name.to_str().ok_or_else(|| {
            BackupError::Invalid(format!("{} is not a UTF-8 path", dir.display()))
        })?;
        Ok(Siblings {
            dir: abs.clone(),
            parent: parent.to_path_buf(),
            name: name.to_string(),
        })
    }

    /// The lock file (see [`lock`]).
    pub fn lock(&self) -> PathBuf {
        self.parent.join(format!(".{}.lock", self.name))
    }
    /// The journal of an unfinished restore.
    pub fn journal(&self) -> PathBuf {
        self.parent.join(format!(".{}.restore-journal", self.name))
    }
    /// Where a restore unpacks the archive.
    pub fn staging(&self) -> PathBuf {
        self.parent.join(format!(".{}.restore-staging", self.name))
    }
    /// The restore log, one line per event, appended.
    pub fn log(&self) -> PathBuf {
        self.parent.join(format!("{}.restore.log", self.name))
    }
    /// A dated copy of the data before a restore (`stamp` like 20260102T030405Z).
    pub fn old_copy(&self, stamp: &str) -> PathBuf {
        self.parent
            .join(format!("{}.before-restore-{stamp}", self.name))
    }
}

/// `a/./b/../c` → `a/c` without touching the file system (the directory may not exist).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A compact UTC time stamp for names: 20260102T030405Z.
pub fn stamp_now() -> String {
    let t = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    t.replace(['-', ':'], "")
}

/// Fsyncs a directory so renames and creations inside it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error("syncing", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_sit_beside_the_directory() {
        let s = Siblings::of(Path::new("/var/lib/./yy/")).unwrap();
        assert_eq!(s.dir, Path::new("/var/lib/yy"));
        assert_eq!(s.lock(), Path::new("/var/lib/.yy.lock"));
        assert_eq!(s.journal(), Path::new("/var/lib/.yy.restore-journal"));
        assert_eq!(s.staging(), Path::new("/var/lib/.yy.restore-staging"));
        assert_eq!(
            s.old_copy("20260102T030405Z"),
            Path::new("/var/lib/yy.before-restore-20260102T030405Z")
        );
        assert!(Siblings::of(Path::new("/")).is_err());
    }

    #[test]
    fn stamps_have_no_separators() {
        let s = stamp_now();
        assert_eq!(s.len(), 16, "{s}");
        assert!(s.ends_with('Z') && s.contains('T'));
    }
}
