//! The database's flush off the database thread. The store's connection commits without
//! waiting for the disk (SQLite: `synchronous=NORMAL`, the commit writes its WAL frames;
//! PostgreSQL: `synchronous_commit` off), and the calls whose answers must wait for the
//! disk are handed to this thread, which makes the write-ahead log durable and only then
//! answers them. So the database thread goes on with the next batch (a Runner's lease of
//! the command just enqueued) while the disk works, and one flush takes every commit that
//! came before it, also those that arrived while the previous one ran. Both logs are
//! written in order, so what is durable is always a prefix of what was committed.
//!
//! The thread counts the commits that changed something and how many of them are synced.
//! A call waits only while a change it could have seen is not synced yet: a read when
//! nothing is pending, or a change that changed nothing, is answered at once, as a plain
//! COMMIT of a read would have been.
//!
//! SQLite: an fsync of the WAL file. In WAL mode a commit is its frames in that file;
//! `synchronous=FULL` means exactly "sync the WAL at each commit". A checkpoint (under
//! NORMAL too) syncs the WAL before it copies pages into the database file and syncs that
//! file after, so what a checkpoint moved is on disk already; a WAL that starts over after
//! one is the same file (its inode is checked at every sync, and a file that was replaced is
//! opened again).
//!
//! PostgreSQL: a barrier, on a connection of its own: a transaction that writes a little
//! WAL (a transactional logical message, which any user may emit and which changes no
//! table) commits with the database's own `synchronous_commit`, and so waits until the WAL
//! up to its commit, every earlier commit included, is flushed (and replicated, where the
//! operator set that up). A commit that wrote nothing but its commit record would not wait.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};

use super::StoreError;
use super::batch::Job;
use super::pg::conn::PgConn;

/// How a sync is made: the WAL's fsync or PostgreSQL's barrier; a unit test may hold it.
pub(super) type SyncFn = Box<dyn FnMut() -> Result<(), SyncFailed> + Send>;

/// Why a sync did not confirm the changes before it.
#[derive(Debug, Clone)]
pub(super) struct SyncFailed {
    why: String,
    /// The database is out of reach (PostgreSQL): 503, as other calls get then.
    unreachable: bool,
}

impl SyncFailed {
    fn error(&self) -> StoreError {
        let message = format!(
            "the change was committed but the database did not confirm that it is on disk ({}); it may or may not be kept: check before doing it again",
            self.why
        );
        if self.unreachable {
            StoreError::Unavailable(message)
        } else {
            StoreError::Task(message)
        }
    }
}

impl From<std::io::Error> for SyncFailed {
    fn from(e: std::io::Error) -> Self {
        SyncFailed {
            why: format!("{e}; check the disk of the data directory"),
            unreachable: false,
        }
    }
}

/// The handle of the syncing thread: committed calls that wait for the disk go here.
pub(super) struct WalSync {
    /// Calls and the count of changing commits they wait for.
    jobs: Sender<(u64, Vec<Box<dyn Job>>)>,
    progress: Arc<Progress>,
}

/// Commits that changed something, counted by the database thread, and how many of them
/// the last finished sync covered.
#[derive(Default)]
struct Progress {
    committed: AtomicU64,
    synced: AtomicU64,
}

impl WalSync {
    /// Starts the thread that syncs the WAL of the SQLite database at `db_path`.
    pub(super) fn start(db_path: &Path) -> std::io::Result<WalSync> {
        let mut wal = WalFile::new(db_path);
        WalSync::with(Box::new(move || Ok(wal.sync()?)))
    }

    /// Starts the thread that flushes the PostgreSQL database's WAL through `barrier`, a
    /// connection of its own.
    pub(super) fn postgres(mut barrier: PgConn) -> std::io::Result<WalSync> {
        WalSync::with(Box::new(move || {
            let failed = |why: String, conn: &PgConn| SyncFailed {
                why,
                unreachable: conn.is_closed(),
            };
            barrier.revive().map_err(|e| SyncFailed {
                why: e.to_string(),
                unreachable: true,
            })?;
            barrier
                .batch_execute("SELECT pg_logical_emit_message(true, 'yy-sync', '')")
                .map_err(|e| failed(e.to_string(), &barrier))
        }))
    }

    /// Starts the thread with `sync` as the way to reach the disk.
    pub(super) fn with(mut sync: SyncFn) -> std::io::Result<WalSync> {
        let (jobs, queue) = std::sync::mpsc::channel();
        let progress = Arc::new(Progress::default());
        let counts = progress.clone();
        std::thread::Builder::new()
            .name("yy-store-sync".into())
            .spawn(move || answer_after_syncs(&mut sync, &queue, &counts))?;
        Ok(WalSync { jobs, progress })
    }

    /// Counts a COMMIT that just ended (`wrote`: it changed something) and returns how
    /// many changing commits a call answered now could have seen.
    pub(super) fn committed(&self, wrote: bool) -> u64 {
        if wrote {
            self.progress.committed.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            self.progress.committed.load(Ordering::Acquire)
        }
    }

    /// Answers `jobs`, committed already, once the first `upto` changing commits are
    /// synced: at once when they are.
    pub(super) fn answer_when_synced(&self, jobs: Vec<Box<dyn Job>>, upto: u64) {
        if jobs.is_empty() {
            return;
        }
        if self.progress.synced.load(Ordering::Acquire) >= upto {
            for job in jobs {
                job.answer(None);
            }
            return;
        }
        if let Err(unsent) = self.jobs.send((upto, jobs)) {
            // The thread is gone (it never exits while this handle lives, but a panic
            // could end it): never answer as if synced.
            let mut gone = || {
                Err(SyncFailed {
                    why: "the database's sync thread has stopped".into(),
                    unreachable: false,
                })
            };
            answer_after_one_sync(&mut gone, unsent.0.1);
        }
    }
}

/// The thread: takes everything waiting, syncs once (unless a sync since covered it),
/// answers it all.
fn answer_after_syncs(
    sync: &mut SyncFn,
    queue: &Receiver<(u64, Vec<Box<dyn Job>>)>,
    progress: &Progress,
) {
    while let Ok((mut upto, mut jobs)) = queue.recv() {
        while let Ok((more_upto, more)) = queue.try_recv() {
            upto = upto.max(more_upto);
            jobs.extend(more);
        }
        if progress.synced.load(Ordering::Acquire) >= upto {
            for job in jobs {
                job.answer(None);
            }
            continue;
        }
        // Every commit counted by now has written its log: the sync covers them all.
        let target = progress.committed.load(Ordering::Acquire);
        let mut counted = || {
            sync()?;
            progress.synced.fetch_max(target, Ordering::AcqRel);
            Ok(())
        };
        answer_after_one_sync(&mut counted, jobs);
    }
}

fn answer_after_one_sync(
    sync: &mut dyn FnMut() -> Result<(), SyncFailed>,
    jobs: Vec<Box<dyn Job>>,
) {
    match sync() {
        Ok(()) => {
            for job in jobs {
                job.answer(None);
            }
        }
        Err(failed) => {
            // Committed, so readable, but not confirmed on disk: the caller must not hear
            // that it is kept.
            tracing::error!(why = %failed.why, "the database's write-ahead log was not confirmed on disk");
            for mut job in jobs {
                job.fail(failed.error());
                job.answer(None);
            }
        }
    }
}

/// The WAL file of a database, opened when first synced and again when replaced.
struct WalFile {
    db: PathBuf,
    wal: PathBuf,
    open: Option<(File, u64, u64)>,
    dir_synced: bool,
}

impl WalFile {
    fn new(db: &Path) -> WalFile {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        WalFile {
            db: db.to_path_buf(),
            wal: PathBuf::from(wal),
            open: None,
            dir_synced: false,
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        let current = match std::fs::metadata(&self.wal) {
            Ok(m) => Some((m.dev(), m.ino())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let Some((dev, ino)) = current else {
            // No WAL: everything is in the database file (a checkpoint synced it; sync it
            // once more for whatever wrote it otherwise).
            self.open = None;
            return File::open(&self.db)?.sync_all();
        };
        if !matches!(&self.open, Some((_, d, i)) if (*d, *i) == (dev, ino)) {
            // A new WAL file: its name must be on disk too, or recovery could not find it.
            self.open = Some((File::open(&self.wal)?, dev, ino));
            self.dir_synced = false;
        }
        if !self.dir_synced {
            if let Some(dir) = self.wal.parent() {
                File::open(dir)?.sync_all()?;
            }
            self.dir_synced = true;
        }
        match &self.open {
            Some((file, ..)) => file.sync_data(),
            None => Ok(()),
        }
    }
}
