//! Group commit on the database thread. The calls that wait while one runs are taken
//! together: one IMMEDIATE transaction for the batch, a savepoint per call, one COMMIT, and
//! only then the answers. So a caller never hears "done" for a change that is not on disk
//! yet, and concurrent callers share the fsync.
//!
//! The flush is not the database thread's: the connection commits without waiting for the
//! disk (SQLite `synchronous=NORMAL`, PostgreSQL `synchronous_commit` off), and the durable
//! calls of a batch are answered by the sync thread ([`super::wal_sync`]) once a flush of
//! the write-ahead log that began after their COMMIT has ended. The database thread
//! meanwhile runs the next batch, so the Runner's lease of a command just enqueued does
//! not wait for the enqueue's flush (the lease cannot outlive the enqueue: the log is
//! written in order), and on PostgreSQL the store's lock is not held during a flush.
//!
//! A relaxed call ([`super::Store::call_relaxed`]) is answered once committed, without
//! waiting for the disk. A power loss (on PostgreSQL also a crash of the database) may lose
//! relaxed commits that no durable one followed, which the protocol recovers from
//! (docs/protocol.md, "Durability").
//!
//! A call may ask to hear of its commit before its answer ([`super::Store::call_on_commit`]):
//! a wake-up of the Runner whose work it queued goes out then, not after the fsync.
//!
//! A call that returns an error keeps what its store functions committed (their savepoints
//! released), exactly as when each committed alone: some record a refusal and then return
//! it (a `start` of a cancelled command). Its uncommitted changes were rolled back by the
//! savepoints themselves. A call that panics loses everything it did, and its caller gets
//! an error; the other calls of the batch are not touched.

use std::sync::Mutex;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::StoreError;
use super::db::{Db, Dialect};
use super::wal_sync::WalSync;

/// At most this many calls share a commit, so the first of them is not kept waiting
/// behind a long queue.
pub(super) const MAX_BATCH_CALLS: usize = 64;
/// A batch takes no more calls after running this long, for the same reason.
pub(super) const MAX_BATCH_TIME: Duration = Duration::from_millis(2);

/// A call for the database thread: run first, answered after its batch's commit.
pub(super) trait Job: Send {
    /// Whether it must run outside a batch ([`super::Store::call_alone`]).
    fn alone(&self) -> bool;
    /// Whether its answer waits until every change it could have seen is on disk (all but
    /// [`super::Store::call_relaxed`] and [`super::Store::call_unlocked_relaxed`]).
    fn durable(&self) -> bool;
    /// Whether it needs the store's lock on PostgreSQL (all but
    /// [`super::Store::call_unlocked`] and [`super::Store::call_apart_relaxed`]).
    fn locks(&self) -> bool;
    /// Tells its hook, if it has one, that its change is committed (not yet synced).
    fn committed(&mut self);
    /// Runs the work and keeps its result for [`Job::answer`].
    fn run(&mut self, conn: &mut Db);
    /// Whether it ran and returned an error.
    fn failed(&self) -> bool;
    /// Replaces the result with an error (the savepoint around it failed).
    fn fail(&mut self, e: StoreError);
    /// Sends the result, or `lost` when the batch was not committed. A call that panicked
    /// has no result: its caller sees the reply channel close.
    fn answer(self: Box<Self>, lost: Option<Lost<'_>>);
}

/// [`super::Store::call`]'s job: the closure, then its result until the answer.
pub(super) struct Call<F, R> {
    work: Option<F>,
    result: Option<Result<R, StoreError>>,
    reply: tokio::sync::oneshot::Sender<Result<R, StoreError>>,
    on_commit: Option<OnCommit<R>>,
    alone: bool,
    durable: bool,
    locks: bool,
}

/// What a call runs with its result once committed ([`super::Store::call_on_commit`]).
pub(super) type OnCommit<R> = Box<dyn FnOnce(&R) + Send>;

type Reply<R> = tokio::sync::oneshot::Receiver<Result<R, StoreError>>;

impl<F, R> Call<F, R> {
    pub(super) fn new(
        work: F,
        on_commit: Option<OnCommit<R>>,
        alone: bool,
        durable: bool,
        locks: bool,
    ) -> (Call<F, R>, Reply<R>) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let call = Call {
            work: Some(work),
            result: None,
            reply,
            on_commit,
            alone,
            durable,
            locks,
        };
        (call, answer)
    }
}

impl<F, R> Job for Call<F, R>
where
    R: Send + 'static,
    F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
{
    fn alone(&self) -> bool {
        self.alone
    }

    fn durable(&self) -> bool {
        self.durable
    }

    fn locks(&self) -> bool {
        self.locks
    }

    fn committed(&mut self) {
        if let (Some(hook), Some(Ok(result))) = (self.on_commit.take(), &self.result) {
            hook(result);
        }
    }

    fn run(&mut self, conn: &mut Db) {
        if let Some(work) = self.work.take() {
            self.result = Some(work(conn));
        }
    }

    fn failed(&self) -> bool {
        matches!(self.result, Some(Err(_)))
    }

    fn fail(&mut self, e: StoreError) {
        self.result = Some(Err(e));
    }

    fn answer(self: Box<Self>, lost: Option<Lost<'_>>) {
        let Call {
            work,
            result,
            reply,
            ..
        } = *self;
        let result = match (lost, result) {
            // It panicked: the closed reply channel tells its caller.
            (_, None) if work.is_none() => return,
            // Run or not (the batch could not even begin), nothing of it is kept.
            (Some(Lost { why, unreachable }), _) => {
                let message = format!(
                    "the database did not commit this change ({why}); nothing of it was kept, retry it"
                );
                Err(if unreachable {
                    StoreError::Unavailable(message)
                } else {
                    StoreError::Task(message)
                })
            }
            (None, Some(r)) => r,
            (None, None) => return,
        };
        let _ = reply.send(result);
    }
}

/// Why a batch's calls were not kept, and whether the database is out of reach (then they
/// may be retried once it is back: 503).
#[derive(Clone, Copy)]
pub(super) struct Lost<'a> {
    why: &'a str,
    unreachable: bool,
}

fn lost<'a>(conn: &Db, why: &'a str) -> Lost<'a> {
    Lost {
        why,
        unreachable: conn.unreachable(),
    }
}

/// The database thread: runs jobs until every [`super::Store`] is gone. Jobs that arrive
/// while a batch runs are taken under the same lock, without a wake-up in between. Every
/// commit is made without waiting for the disk; the durable answers wait for `wal`.
pub(super) fn run_jobs(conn: &Mutex<Db>, queue: &Receiver<Box<dyn Job>>, wal: WalSync) {
    // The connection starts durable (migrations); from here on `wal` syncs.
    if let Err(e) = conn
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .set_durable(false)
    {
        tracing::error!(error = %e, "cannot leave the syncing to the sync thread");
    }
    while let Ok(first) = queue.recv() {
        let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = Some(first);
        while let Some(mut job) = next {
            // A PostgreSQL connection that was lost is made again first; while the database
            // is out of reach, calls are refused at once (503 with Retry-After).
            if let Err(e) = guard.revive() {
                job.fail(e);
                job.answer(None);
                next = queue.try_recv().ok();
                continue;
            }
            next = if job.alone() {
                run_alone(&mut guard, job, &wal);
                queue.try_recv().ok()
            } else {
                run_batch(&mut guard, job, queue, &wal)
            };
        }
    }
}

fn run_alone(conn: &mut Db, mut job: Box<dyn Job>, wal: &WalSync) {
    if conn.dialect() == Dialect::Postgres {
        // Only SQLite has an autocommit mode the store uses (checkpoints); on PostgreSQL
        // the store's savepoints need a transaction around them.
        return run_in_transaction(conn, job, wal);
    }
    // A panicking job drops its reply channel (the caller gets an error) and must not take
    // the thread, and so the whole server, down with it.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(conn)));
    // Its own commits may change what no row count shows (a vacuum): counted as a change.
    committed(vec![job], true, wal);
}

/// One job in a transaction of its own, with the store's lock if it asks for it.
fn run_in_transaction(conn: &mut Db, mut job: Box<dyn Job>, wal: &WalSync) {
    let changes = conn.total_changes();
    if let Err(e) = conn.begin(job.locks()) {
        return job.answer(Some(lost(conn, &e.to_string())));
    }
    run_in_savepoint(conn, job.as_mut());
    match conn.commit(changes) {
        Ok(wrote) => committed(vec![job], wrote, wal),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            job.answer(Some(lost(conn, &e.to_string())));
        }
    }
}

/// After the COMMIT of `jobs` (`wrote`: it changed something): their hooks now, the
/// relaxed answers now, the others once every change they could have seen is synced.
fn committed(mut jobs: Vec<Box<dyn Job>>, wrote: bool, wal: &WalSync) {
    let upto = wal.committed(wrote);
    for job in &mut jobs {
        job.committed();
    }
    let (durable, relaxed): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| j.durable());
    wal.answer_when_synced(durable, upto);
    answer_all(relaxed, None);
}

/// Runs `first` and whatever arrives meanwhile (up to the bounds) in one transaction,
/// commits it and answers each (see [`committed`]). Returns the next job to run: one that
/// must run alone, one that needs the store's lock when the batch runs without it, or the
/// first that arrived after the batch closed.
///
/// On PostgreSQL a batch without the lock (its first call is
/// [`super::Store::call_unlocked`]) takes only such calls: were it to take the lock after
/// one of them changed a row, it could wait for a replica whose transaction waits for that
/// row.
fn run_batch(
    conn: &mut Db,
    first: Box<dyn Job>,
    queue: &Receiver<Box<dyn Job>>,
    wal: &WalSync,
) -> Option<Box<dyn Job>> {
    let started = Instant::now();
    let changes = conn.total_changes();
    // SQLite has one writer and no store lock: every batch there takes every call.
    let locked = first.locks() || conn.dialect() == Dialect::Sqlite;
    if let Err(e) = conn.begin(locked) {
        first.answer(Some(lost(conn, &e.to_string())));
        return queue.try_recv().ok();
    }
    let mut ran: Vec<Box<dyn Job>> = Vec::new();
    let mut next = Some(first);
    let mut after = None;
    while let Some(mut job) = next.take() {
        if job.alone() || (job.locks() && !locked) {
            after = Some(job);
            break;
        }
        run_in_savepoint(conn, job.as_mut());
        ran.push(job);
        if conn.is_autocommit() {
            // The database ended the whole transaction (disk full, I/O error, a lost
            // connection): nothing of the batch is kept, so no call of it may say otherwise.
            answer_all(
                ran,
                Some(lost(conn, "the database rolled the transaction back")),
            );
            return queue.try_recv().ok();
        }
        if ran.len() < MAX_BATCH_CALLS && started.elapsed() < MAX_BATCH_TIME {
            next = queue.try_recv().ok();
        }
    }
    match conn.commit(changes) {
        Ok(wrote) => committed(ran, wrote, wal),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            let why = e.to_string();
            answer_all(ran, Some(lost(conn, &why)));
        }
    }
    after.or_else(|| queue.try_recv().ok())
}

fn answer_all(jobs: Vec<Box<dyn Job>>, lost: Option<Lost<'_>>) {
    for job in jobs {
        job.answer(lost);
    }
}

/// Runs one job inside the batch, in a savepoint of its own: released when it returns
/// (also with an error, see the module's comment), rolled back when it panics.
fn run_in_savepoint(conn: &mut Db, job: &mut dyn Job) {
    if let Err(e) = savepoint(conn, "SAVEPOINT yy_call") {
        job.fail(e.into());
        return;
    }
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(conn)));
    if conn.is_autocommit() {
        return;
    }
    let ended = match ran {
        // PostgreSQL: a statement of it failed and it went on (or returned without undoing
        // its own savepoint): nothing of it can be kept. Its own error, if it returned
        // one, says why better than the refused RELEASE would.
        Ok(()) if conn.aborted() => {
            let _ = conn.execute_batch("ROLLBACK TO yy_call; RELEASE yy_call");
            if !job.failed() {
                job.fail(StoreError::Task(
                    "a statement of this change failed; nothing of it was kept".into(),
                ));
            }
            return;
        }
        Ok(()) => savepoint(conn, "RELEASE yy_call"),
        Err(_) => conn.execute_batch("ROLLBACK TO yy_call; RELEASE yy_call"),
    };
    if let Err(e) = ended {
        // Not kept: undo whatever can be undone, and say so.
        let _ = conn.execute_batch("ROLLBACK TO yy_call; RELEASE yy_call");
        job.fail(e.into());
    }
}

/// A savepoint statement, prepared once (two per call on the hot path).
fn savepoint(conn: &Db, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
