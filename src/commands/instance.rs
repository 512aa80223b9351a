//! One process per data directory: `yy serve` and `yy runner run` each hold a lock file in
//! theirs for as long as they run (two servers would both schedule and sweep one
//! database; two Runners would share receipts and could both run a command). Who holds it
//! is written inside, so that the one refused can name it.
//!
//! flock(2) locks belong to the open file and end with the process, even on kill -9, so a
//! crashed holder never leaves a stale lock behind.

use std::fs::File;
use std::io::{Seek, Write};
use std::path::Path;

use crate::error::{CliError, Exit};

/// The lock file of `yy serve` in its data directory.
pub const SERVE_LOCK: &str = "serve.lock";
/// The lock file of `yy runner run` in its data directory.
pub const RUNNER_LOCK: &str = "runner.lock";

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct InstanceLock {
    file: File,
}

/// Takes `data_dir/name` without waiting, for `what` ("yy serve", "yy runner"). When
/// another process holds it: exit 6 naming that process as it described itself.
pub fn hold(data_dir: &Path, name: &str, what: &str) -> anyhow::Result<InstanceLock> {
    let path = data_dir.join(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| CliError::failure(format!("cannot open {}: {e}", path.display())))?;
    let held = match file.try_lock() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(CliError::failure(format!("cannot lock {}: {e}", path.display())).into());
        }
    };
    if held {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        // Written by another yy, but bounded and cleaned all the same.
        let holder: String = holder.trim().chars().take(200).collect();
        let holder = crate::output::clean(&holder);
        let named = if holder.is_empty() {
            String::new()
        } else {
            format!(" ({holder})")
        };
        return Err(CliError::new(
            Exit::Conflict,
            format!(
                "another {what}{named} is already running with {}; stop it first",
                data_dir.display()
            ),
        )
        .into());
    }
    let mut lock = InstanceLock { file };
    lock.describe("")?;
    Ok(lock)
}

impl InstanceLock {
    /// Writes who holds the lock: this process's pid, and `more` (e.g. the address it
    /// listens on) when not empty.
    pub fn describe(&mut self, more: &str) -> anyhow::Result<()> {
        let mut text = format!("pid {}", std::process::id());
        if !more.is_empty() {
            text.push_str(", ");
            text.push_str(more);
        }
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())?;
        Ok(())
    }
}
