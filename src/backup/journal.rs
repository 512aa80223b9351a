//! The restore journal (`.NAME.restore-journal` beside the data directory) and rollback.
//!
//! A restore writes the journal before it creates anything, listing every rename it will
//! make, and deletes it as its very last step (the commit). Any process that opens the data
//! directory reads it first: a journal left behind means a restore was interrupted, and its
//! renames are undone in reverse order before anything else runs. A rename is atomic, so
//! whether one happened is read from the disk: its destination exists and its source
//! does not. A partial restore is therefore never used.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::lock::{DirLock, Mode};
use super::{BackupError, Kind, Result, Siblings, io_error, sync_dir};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Unpacking into the staging directory; the data directory is untouched.
    Staging,
    /// Renaming: some of `moves` may have happened.
    Swapping,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Move {
    pub from: PathBuf,
    pub to: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub kind: Kind,
    pub target: PathBuf,
    pub archive: PathBuf,
    pub staging: PathBuf,
    pub old_copy: PathBuf,
    pub phase: Phase,
    /// Every rename of the swap, in order.
    pub moves: Vec<Move>,
    pub started_at: String,
    pub pid: u32,
}

impl Journal {
    pub fn write(&self, s: &Siblings) -> Result<()> {
        let data = serde_json::to_vec_pretty(self)
            .map_err(|e| BackupError::Io(format!("encoding the restore journal: {e}")))?;
        let path = s.journal();
        crate::fsutil::write_atomic(&path, &data, 0o600)
            .map_err(|e| io_error("writing the restore journal", &path, e))
    }

    fn load(s: &Siblings) -> Result<Option<Journal>> {
        let path = s.journal();
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("reading the restore journal", &path, e)),
        };
        serde_json::from_slice(&data).map(Some).map_err(|e| {
            BackupError::Io(format!(
                "the restore journal {} cannot be read ({e}); move it away and check {} by hand",
                path.display(),
                s.dir.display()
            ))
        })
    }

    /// Deletes the journal: the restore is committed.
    pub fn commit(s: &Siblings) -> Result<()> {
        let path = s.journal();
        std::fs::remove_file(&path).map_err(|e| io_error("removing", &path, e))?;
        sync_dir(&s.parent)
    }
}

fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

fn parent_of(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new("/"))
}

/// Undoes an interrupted restore. The caller holds the exclusive lock.
fn rollback(s: &Siblings, j: &Journal) -> Result<usize> {
    let mut undone = 0;
    // In reverse order, when move k is looked at every later one is undone: it happened
    // exactly when its source is gone and its destination is there. A source still there
    // means it did not happen, even if the destination's name is taken (by what an earlier
    // move that did not happen either would have moved away).
    for m in j.moves.iter().rev() {
        if !exists(&m.from) && exists(&m.to) {
            std::fs::rename(&m.to, &m.from).map_err(|e| io_error("moving back", &m.to, e))?;
            sync_dir(parent_of(&m.from))?;
            sync_dir(parent_of(&m.to))?;
            undone += 1;
        }
    }
    if exists(&j.staging) {
        std::fs::remove_dir_all(&j.staging).map_err(|e| io_error("removing", &j.staging, e))?;
    }
    // What the rollback emptied of the dated copy (directories made for the moves).
    remove_empty_dirs(&j.old_copy);
    sync_dir(&s.parent)?;
    Ok(undone)
}

/// Removes `dir` and its subdirectories if they hold no files.
fn remove_empty_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_empty_dirs(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Appends one line to the restore log beside the data directory.
pub fn log(s: &Siblings, line: &str) -> Result<()> {
    let path = s.log();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| io_error("opening the restore log", &path, e))?;
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    writeln!(f, "{stamp} {line}")
        .and_then(|_| f.sync_all())
        .map_err(|e| io_error("writing the restore log", &path, e))
}

/// Rolls back an interrupted restore if its journal is there; the caller holds the lock
/// exclusively. Returns what was done, to be said to the operator.
pub fn recover(s: &Siblings) -> Result<Option<String>> {
    let Some(j) = Journal::load(s)? else {
        return Ok(None);
    };
    let undone = rollback(s, &j)?;
    let message = format!(
        "rolled back an unfinished restore of {} from {} (started {}, interrupted while {}; {undone} rename(s) undone): {} holds the data it had before",
        s.dir.display(),
        j.archive.display(),
        j.started_at,
        match j.phase {
            Phase::Staging => "staging",
            Phase::Swapping => "swapping",
        },
        s.dir.display()
    );
    log(s, &message)?;
    Journal::commit(s)?;
    Ok(Some(message))
}

/// How long a starting process waits for another one's rollback at start to finish.
const START_WAIT: Duration = Duration::from_secs(3);

/// Opens a data directory for use (`yy serve`, `yy admin`, `yy runner run`): rolls back an
/// interrupted restore first, then holds the lock shared. Refused while a restore or
/// maintenance holds it. Returns the lock and what the rollback did, if anything.
pub fn enter(dir: &Path) -> Result<(DirLock, Option<String>)> {
    let s = Siblings::of(dir)?;
    let deadline = std::time::Instant::now() + START_WAIT;
    loop {
        if let Some(lock) = DirLock::try_take(&s, Mode::Exclusive)? {
            let said = recover(&s)?;
            return Ok((lock.downgrade()?, said));
        }
        if let Some(lock) = DirLock::try_take(&s, Mode::Shared)? {
            if !exists(&s.journal()) {
                return Ok((lock, None));
            }
            drop(lock);
        }
        if std::time::Instant::now() >= deadline {
            return Err(BackupError::Busy(format!(
                "{} is being restored or maintained (another process holds {}); wait for it to finish",
                s.dir.display(),
                s.lock().display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Takes the data directory for maintenance (a restore, a Runner backup): exclusively,
/// then rolls back an interrupted restore. `busy` says who is in the way.
pub fn maintain(s: &Siblings, busy: &str) -> Result<(DirLock, Option<String>)> {
    let Some(lock) = DirLock::try_take(s, Mode::Exclusive)? else {
        return Err(BackupError::Busy(busy.to_string()));
    };
    let said = recover(s)?;
    Ok((lock, said))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_undoes_only_the_renames_that_happened() {
        let t = tempfile::tempdir().unwrap();
        let s = Siblings::of(&t.path().join("d")).unwrap();
        std::fs::create_dir(&s.dir).unwrap();
        std::fs::write(s.dir.join("old"), "old").unwrap();
        std::fs::create_dir(s.staging()).unwrap();
        std::fs::write(s.staging().join("new"), "new").unwrap();
        let old = s.old_copy("x");
        let j = Journal {
            kind: Kind::ControlPlane,
            target: s.dir.clone(),
            archive: "a".into(),
            staging: s.staging(),
            old_copy: old.clone(),
            phase: Phase::Swapping,
            moves: vec![
                Move {
                    from: s.dir.clone(),
                    to: old.clone(),
                },
                Move {
                    from: s.staging(),
                    to: s.dir.clone(),
                },
            ],
            started_at: "t".into(),
            pid: 1,
        };
        j.write(&s).unwrap();
        // Interrupted between the two renames.
        std::fs::rename(&s.dir, &old).unwrap();
        let said = recover(&s).unwrap().unwrap();
        assert!(said.contains("1 rename(s) undone"), "{said}");
        assert_eq!(std::fs::read_to_string(s.dir.join("old")).unwrap(), "old");
        assert!(!s.staging().exists() && !old.exists() && !s.journal().exists());
        assert!(
            std::fs::read_to_string(s.log())
                .unwrap()
                .contains("rolled back")
        );
        assert!(recover(&s).unwrap().is_none());
    }

    #[test]
    fn the_lock_keeps_maintenance_and_users_apart() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        let s = Siblings::of(&d).unwrap();
        let (user, said) = enter(&d).unwrap();
        assert!(said.is_none());
        let (_second, _) = enter(&d).unwrap();
        assert!(matches!(maintain(&s, "busy"), Err(BackupError::Busy(_))));
        drop(user);
        drop(_second);
        let (_m, _) = maintain(&s, "busy").unwrap();
    }
}
