//! The lock beside a data directory (`.NAME.lock` next to `NAME`). Every process that uses
//! the directory holds it shared for its lifetime (`yy serve`, `yy admin`, `yy runner run`,
//! a control plane backup); a restore and a Runner's maintenance hold it exclusively. It
//! lives beside the directory, not inside, because a restore renames the directory away.
//!
//! flock(2) locks belong to the open file and end with the process, even on kill -9, so a
//! crashed holder never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;

use super::{BackupError, Result, Siblings, io_error};

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    file: File,
    exclusive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

fn open(s: &Siblings) -> Result<File> {
    std::fs::create_dir_all(&s.parent).map_err(|e| io_error("creating", &s.parent, e))?;
    let path = s.lock();
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| io_error("opening the lock", &path, e))
}

/// Takes (or, held already, converts: flock(2) on Linux) the lock without waiting.
fn flock(file: &File, mode: Mode) -> bool {
    match mode {
        Mode::Shared => file.try_lock_shared().is_ok(),
        Mode::Exclusive => file.try_lock().is_ok(),
    }
}

impl DirLock {
    /// Takes the lock without waiting; `None` when another process holds it in a way that
    /// conflicts.
    pub fn try_take(s: &Siblings, mode: Mode) -> Result<Option<DirLock>> {
        let file = open(s)?;
        Ok(flock(&file, mode).then_some(DirLock {
            file,
            exclusive: mode == Mode::Exclusive,
        }))
    }

    /// Turns an exclusive lock into a shared one (after a rollback at start).
    pub fn downgrade(self) -> Result<DirLock> {
        if !self.exclusive {
            return Ok(self);
        }
        if flock(&self.file, Mode::Shared) {
            Ok(DirLock {
                file: self.file,
                exclusive: false,
            })
        } else {
            Err(BackupError::Busy(
                "lost the data directory's lock while switching it to shared".into(),
            ))
        }
    }
}
