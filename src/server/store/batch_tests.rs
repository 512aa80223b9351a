//! Group commit on the database thread (batch.rs), against a real database file: what a
//! batch keeps when one of its calls fails, panics or its COMMIT fails, and that an answer
//! comes only once its change is committed.

use super::db::Db;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::OpenFlags;

use super::{Store, StoreError, db_path};

/// A store on a fresh data directory, with a table `t` of test rows.
async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .call(|c| Ok(c.execute_batch("CREATE TABLE t (v TEXT NOT NULL)")?))
        .await
        .unwrap();
    (dir, store)
}

/// The rows of `t` as a second connection sees them: only what is committed.
fn committed_rows(dir: &tempfile::TempDir) -> Vec<String> {
    let other = rusqlite::Connection::open_with_flags(
        db_path(dir.path()),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut stmt = other.prepare("SELECT v FROM t ORDER BY v").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn insert(c: &Db, v: &str) -> Result<(), StoreError> {
    c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
    Ok(())
}

/// Occupies the database thread until the returned sender is used (or dropped), so the
/// calls made meanwhile queue up and run as one batch after it.
async fn hold_the_thread(store: &Store) -> mpsc::Sender<()> {
    let (release, held) = mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel();
    let blocker = store.clone();
    tokio::spawn(async move {
        blocker
            .call(move |_| {
                let _ = started.send(());
                let _ = held.recv();
                Ok(())
            })
            .await
    });
    running.await.unwrap();
    release
}

/// Calls `store.call(f)` in a task of its own and returns its handle, once the call is
/// queued (a yield is not enough on a multi-threaded runtime, so the queue is not
/// inspected: the calls are spawned in order on a current-thread runtime).
fn spawn_call<R: Send + 'static>(
    store: &Store,
    f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
) -> tokio::task::JoinHandle<Result<R, StoreError>> {
    let store = store.clone();
    tokio::spawn(async move { store.call(f).await })
}

/// Lets every spawned task run up to its first await (its call sent to the thread).
async fn let_them_queue() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_failing_call_in_a_batch_fails_alone_and_the_others_are_committed() {
    let (dir, store) = store().await;
    let release = hold_the_thread(&store).await;
    let before = spawn_call(&store, |c| insert(c, "a-before"));
    let refused = spawn_call(&store, |c| -> Result<(), StoreError> {
        // A store function's change: a savepoint that is not committed when it fails.
        let sp = c.savepoint()?;
        insert(&sp, "refused")?;
        Err(StoreError::Conflict("refused on purpose".into()))
    });
    let panicked = spawn_call(&store, |c| -> Result<(), StoreError> {
        insert(c, "panicked")?;
        panic!("a call that panics after writing");
    });
    let after = spawn_call(&store, |c| insert(c, "b-after"));
    let_them_queue().await;
    release.send(()).unwrap();

    before.await.unwrap().unwrap();
    match refused.await.unwrap() {
        Err(StoreError::Conflict(m)) => assert_eq!(m, "refused on purpose"),
        other => panic!("the refused call must get its own error, got {other:?}"),
    }
    match panicked.await.unwrap() {
        Err(StoreError::Task(m)) => assert!(m.contains("panicked"), "{m}"),
        other => panic!("the panicking call must get an error, got {other:?}"),
    }
    after.await.unwrap().unwrap();
    assert_eq!(committed_rows(&dir), ["a-before", "b-after"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_that_committed_then_failed_keeps_what_it_committed() {
    // As when every call committed alone: `commands::start` records a refusal, then
    // returns it.
    let (dir, store) = store().await;
    let release = hold_the_thread(&store).await;
    let recorded = spawn_call(&store, |c| -> Result<(), StoreError> {
        let sp = c.savepoint()?;
        insert(&sp, "recorded")?;
        sp.commit()?;
        Err(StoreError::Conflict("recorded, then refused".into()))
    });
    let_them_queue().await;
    drop(release);
    assert!(matches!(
        recorded.await.unwrap(),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(committed_rows(&dir), ["recorded"]);
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_comes_only_after_its_batch_is_committed() {
    let (dir, store) = store().await;
    let release = hold_the_thread(&store).await;
    let slow_ms = 300;
    let (finished_tx, finished_rx) = mpsc::channel::<Instant>();
    let first = spawn_call(&store, |c| insert(c, "first"));
    // Same batch, after it: the batch cannot commit before this one is done.
    let slow = spawn_call(&store, move |c| {
        insert(c, "slow")?;
        std::thread::sleep(Duration::from_millis(slow_ms));
        let _ = finished_tx.send(Instant::now());
        Ok(())
    });
    let_them_queue().await;
    release.send(()).unwrap();

    first.await.unwrap().unwrap();
    let answered = Instant::now();
    // What a second connection sees the moment the answer arrived: committed, and the
    // slow call (same transaction) with it.
    assert_eq!(committed_rows(&dir), ["first", "slow"]);
    let slow_finished = finished_rx.recv().unwrap();
    assert!(
        answered >= slow_finished,
        "the first call was answered before its batch finished"
    );
    slow.await.unwrap().unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_commit_fails_every_call_of_the_batch() {
    let (dir, store) = store().await;
    store
        .call(|c| {
            Ok(c.execute_batch(
                "CREATE TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE child (parent INTEGER REFERENCES parent (id)
                     DEFERRABLE INITIALLY DEFERRED)",
            )?)
        })
        .await
        .unwrap();
    let release = hold_the_thread(&store).await;
    let innocent = spawn_call(&store, |c| insert(c, "innocent"));
    // Checked only at COMMIT: the whole batch's COMMIT fails.
    let orphan = spawn_call(&store, |c| {
        c.execute("INSERT INTO child (parent) VALUES (42)", [])?;
        Ok(())
    });
    let_them_queue().await;
    release.send(()).unwrap();
    for (name, answer) in [("innocent", innocent), ("orphan", orphan)] {
        match answer.await.unwrap() {
            Err(StoreError::Task(m)) => assert!(m.contains("did not commit"), "{name}: {m}"),
            other => panic!("{name}: a call of a failed batch must fail, got {other:?}"),
        }
    }
    assert!(committed_rows(&dir).is_empty());
    // The thread goes on: the next batch commits.
    store.call(|c| insert(c, "next")).await.unwrap();
    assert_eq!(committed_rows(&dir), ["next"]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_takes_no_more_than_its_bound() {
    let (dir, store) = store().await;
    // A second connection's data_version changes at each commit of the store's: calls
    // that read the same value ran in the same batch.
    let other = rusqlite::Connection::open_with_flags(
        db_path(dir.path()),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let other = std::sync::Arc::new(std::sync::Mutex::new(other));
    let release = hold_the_thread(&store).await;
    let calls = 3 * super::batch::MAX_BATCH_CALLS;
    let handles: Vec<_> = (0..calls)
        .map(|i| {
            let other = other.clone();
            spawn_call(&store, move |c| {
                insert(c, &format!("{i:03}"))?;
                let version: i64 =
                    other
                        .lock()
                        .unwrap()
                        .pragma_query_value(None, "data_version", |r| r.get(0))?;
                Ok(version)
            })
        })
        .collect();
    let_them_queue().await;
    release.send(()).unwrap();
    let mut batches: Vec<(i64, usize)> = Vec::new();
    for h in handles {
        let version = h.await.unwrap().unwrap();
        match batches.last_mut() {
            Some((v, n)) if *v == version => *n += 1,
            _ => batches.push((version, 1)),
        }
    }
    let sizes: Vec<usize> = batches.iter().map(|(_, n)| *n).collect();
    assert!(
        sizes.iter().all(|&n| n <= super::batch::MAX_BATCH_CALLS),
        "no batch beyond {} calls: {sizes:?}",
        super::batch::MAX_BATCH_CALLS
    );
    assert!(
        sizes.len() >= 3,
        "{calls} calls in at least 3 batches: {sizes:?}"
    );
    assert_eq!(committed_rows(&dir).len(), calls);
}

#[tokio::test(flavor = "current_thread")]
async fn a_checkpoint_runs_alone_not_in_a_batch() {
    let (_dir, store) = store().await;
    let checkpoint = |c: &mut Db| -> Result<i64, StoreError> {
        Ok(c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?)
    };
    assert!(
        store.call(checkpoint).await.is_err(),
        "inside a batch's transaction SQLite refuses a checkpoint"
    );
    assert_eq!(store.call_alone(checkpoint).await.unwrap(), 0);
}

/// The database thread commits without an fsync (NORMAL); the sync thread makes the
/// durable answers wait for the disk (see the gated tests below); a blocking call outside
/// the thread syncs its own commits (FULL), and leaves the connection as it found it.
#[tokio::test(flavor = "current_thread")]
async fn the_database_thread_commits_without_syncing_and_blocking_calls_sync() {
    let (_dir, store) = store().await;
    assert_eq!(store.call(synchronous).await.unwrap(), 1, "NORMAL");
    assert_eq!(store.call_blocking(synchronous).unwrap(), 2, "FULL");
    assert_eq!(store.call_relaxed(synchronous).await.unwrap(), 1, "NORMAL");
}

/// A cached statement whose plan could depend on a bound value (`LIMIT ?`, as the lease
/// has) is prepared once, not again at every use: the statement cache clears the bindings
/// of every statement it takes back, and without the planner's stability guarantee SQLite
/// marks such a statement for re-preparing whenever its bindings are cleared.
#[tokio::test(flavor = "current_thread")]
async fn a_cached_statement_is_not_prepared_again_at_each_use() {
    let (_dir, store) = store().await;
    let reprepared = store
        .call(|c| {
            let sql = "SELECT v FROM t WHERE v > ?1 ORDER BY v LIMIT ?2";
            for limit in [1, 2, 3, 4] {
                let mut stmt = c.prepare_cached(sql)?;
                let rows: Vec<String> = stmt
                    .query_map(rusqlite::params!["", limit], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                assert!(rows.is_empty());
            }
            let stmt = c.sqlite().unwrap().prepare_cached(sql)?;
            Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
        })
        .await
        .unwrap();
    assert_eq!(reprepared, 0);
}

/// A batch that cannot even begin (another process holds the write lock past the busy
/// timeout) answers each call that it could not run, saying nothing was kept.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_that_cannot_begin_says_so() {
    let (dir, store) = store().await;
    let other = rusqlite::Connection::open(db_path(dir.path())).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let refused = store.call(|c| insert(c, "x")).await.unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("did not commit"), "{message}");
    assert!(message.contains("locked"), "{message}");
    other.execute_batch("ROLLBACK").unwrap();
    assert!(committed_rows(&dir).is_empty());
}

fn synchronous(c: &mut Db) -> Result<i64, StoreError> {
    Ok(c.sqlite()
        .unwrap()
        .pragma_query_value(None, "synchronous", |r| r.get(0))?)
}

/// A store whose durable answers wait for a sync that the test lets through: each sync
/// sends its number on the returned receiver and waits for the sender's word (`false`: fail).
async fn gated_store() -> (
    tempfile::TempDir,
    Store,
    mpsc::Receiver<u32>,
    mpsc::Sender<bool>,
) {
    let dir = tempfile::tempdir().unwrap();
    let (began, syncs) = mpsc::channel();
    let (let_through, gate) = mpsc::channel::<bool>();
    let mut count = 0;
    let sync: super::wal_sync::SyncFn = Box::new(move || {
        count += 1;
        let _ = began.send(count);
        match gate.recv() {
            Ok(true) => Ok(()),
            _ => Err(std::io::Error::other("the test's disk failed").into()),
        }
    });
    let store = Store::open_with_sync(dir.path(), sync).unwrap();
    // A schema change counts no row: answered without a sync.
    store
        .call(|c| Ok(c.execute_batch("CREATE TABLE t (v TEXT NOT NULL)")?))
        .await
        .unwrap();
    (dir, store, syncs, let_through)
}

/// Waits up to 2 s for `task` to end; None if it is still running.
async fn within<R>(task: &mut tokio::task::JoinHandle<R>) -> Option<R> {
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .ok()
        .map(|r| r.unwrap())
}

fn count_rows(c: &mut Db) -> Result<i64, StoreError> {
    Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)
}

/// A durable call's change is committed (others can read it, its commit hook has run)
/// while its answer waits for a sync that began after the commit; a relaxed call and an
/// authentication are answered meanwhile, a read that could see the change is not; a
/// later change needs a sync of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_answer_waits_for_the_sync_and_nothing_else_does() {
    let (dir, store, syncs, let_through) = gated_store().await;
    let (hooked, committed) = tokio::sync::oneshot::channel();
    let hook_store = store.clone();
    let mut durable = tokio::spawn(async move {
        hook_store
            .call_on_commit(
                |c| insert(c, "d1").map(|_| 7),
                move |r: &i32| {
                    let _ = hooked.send(*r);
                },
            )
            .await
    });
    assert_eq!(
        committed.await.unwrap(),
        7,
        "the hook sees the result at the commit"
    );
    assert_eq!(syncs.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
    assert_eq!(committed_rows(&dir), ["d1"], "committed before the sync");
    // The database thread goes on while the disk works.
    store.call_relaxed(|c| insert(c, "r1")).await.unwrap();
    assert_eq!(store.call_unlocked_relaxed(count_rows).await.unwrap(), 2);
    let mut read = {
        let store = store.clone();
        tokio::spawn(async move { store.call_unlocked(count_rows).await })
    };
    assert!(
        within(&mut durable).await.is_none(),
        "answered before its sync ended"
    );
    assert!(
        within(&mut read).await.is_none(),
        "a read answered with what is not on disk yet"
    );
    // A second change, committed while the first sync runs.
    let (hooked, committed) = tokio::sync::oneshot::channel();
    let hook_store = store.clone();
    let mut second = tokio::spawn(async move {
        hook_store
            .call_on_commit(
                |c| insert(c, "d2"),
                move |_: &()| {
                    let _ = hooked.send(());
                },
            )
            .await
    });
    committed.await.unwrap();
    let_through.send(true).unwrap();
    durable.await.unwrap().unwrap();
    // The read saw r1 and the second change came after the first sync began: one more
    // sync covers both.
    assert_eq!(syncs.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
    assert!(within(&mut second).await.is_none());
    assert!(within(&mut read).await.is_none());
    let_through.send(true).unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(read.await.unwrap().unwrap(), 2);
    assert_eq!(committed_rows(&dir), ["d1", "d2", "r1"]);
    // Nothing pending: a read, and a change that changes no row, need no sync.
    assert_eq!(store.call(count_rows).await.unwrap(), 3);
    store
        .call(|c| Ok(c.execute("DELETE FROM t WHERE v = 'none'", [])?))
        .await
        .unwrap();
    assert!(syncs.try_recv().is_err(), "no sync was needed");
}

/// A sync that fails: the caller hears that the disk did not confirm the change, never
/// that it is kept; the next sync serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_is_an_error_for_the_calls_that_waited_for_it() {
    let (_dir, store, syncs, let_through) = gated_store().await;
    let call = spawn_call(&store, |c| insert(c, "x"));
    assert_eq!(syncs.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
    let_through.send(false).unwrap();
    let message = call.await.unwrap().unwrap_err().to_string();
    assert!(
        message.contains("did not confirm that it is on disk"),
        "{message}"
    );
    assert!(message.contains("the test's disk failed"), "{message}");
    let next = spawn_call(&store, |c| insert(c, "y"));
    assert_eq!(syncs.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
    let_through.send(true).unwrap();
    next.await.unwrap().unwrap();
}

/// Relaxed and durable calls share one batch: a durable call no longer starts a batch of
/// its own.
#[tokio::test(flavor = "current_thread")]
async fn relaxed_and_durable_calls_share_a_batch() {
    let (dir, store) = store().await;
    let release = hold_the_thread(&store).await;
    let batch_of = |c: &mut Db, v: &str| -> Result<i64, StoreError> {
        insert(c, v)?;
        // The batch's transaction: every call of one batch sees the same data version.
        Ok(c.sqlite()
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))?)
    };
    let relaxed = {
        let store = store.clone();
        tokio::spawn(async move { store.call_relaxed(move |c| batch_of(c, "r")).await })
    };
    let durable = spawn_call(&store, move |c| batch_of(c, "d"));
    let_them_queue().await;
    drop(release);
    assert_eq!(relaxed.await.unwrap().unwrap(), 1);
    assert_eq!(
        durable.await.unwrap().unwrap(),
        2,
        "in the same transaction"
    );
    assert_eq!(committed_rows(&dir), ["d", "r"]);
}

/// On PostgreSQL (the store tests' database, see `tests::POSTGRES_ENV`): a call made with
/// `call_unlocked` goes on while another session holds the store's lock, and an ordinary
/// call waits for it; an unlocked batch does not take a locking call in.
#[test]
fn on_postgres_an_unlocked_call_does_not_wait_for_the_store_lock() {
    use super::pg::conn::{PgConn, STORE_LOCK};
    let Ok(url) = std::env::var(super::tests::POSTGRES_ENV) else {
        return;
    };
    let schema = format!("w_{}", uuid::Uuid::new_v4().simple());
    PgConn::connect(&url)
        .unwrap()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}options=-csearch_path%3D{schema}");
    let store = Store::open_postgres(&url).unwrap();
    let holder = PgConn::connect(&url).unwrap();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({STORE_LOCK})"
        ))
        .unwrap();
    let count =
        |c: &mut Db| Ok(c.query_row("SELECT count(*) FROM runners", [], |r| r.get::<_, i64>(0))?);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let unlocked = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), store.call_unlocked(count)).await
    });
    assert_eq!(unlocked.expect("not held up by the lock").unwrap(), 0);
    let locked = runtime.spawn({
        let store = store.clone();
        async move { store.call(count).await }
    });
    // Queued behind the locking call: it runs in a batch of its own after it.
    let behind = runtime.spawn({
        let store = store.clone();
        async move { store.call_unlocked(count).await }
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!locked.is_finished(), "a locking call waits for the lock");
    holder.batch_execute("COMMIT").unwrap();
    runtime.block_on(async {
        let done = tokio::time::timeout(Duration::from_secs(5), locked).await;
        assert_eq!(
            done.expect("runs once the lock is free").unwrap().unwrap(),
            0
        );
        assert_eq!(behind.await.unwrap().unwrap(), 0);
    });
}

/// A COMMIT says whether its transaction changed anything, on both backends: a sync is
/// owed only for those (`Db::commit`).
#[test]
fn a_commit_says_whether_it_changed_anything() {
    fn check(db: &Db) {
        db.execute_batch("CREATE TABLE c (v TEXT)").unwrap();
        let cases = [
            ("SELECT count(*) FROM c", false),
            ("INSERT INTO c (v) VALUES ('x')", true),
            ("UPDATE c SET v = 'y' WHERE v = 'none'", false),
            ("DELETE FROM c", true),
        ];
        for (sql, changes) in cases {
            let before = db.total_changes();
            db.begin(true).unwrap();
            db.execute_batch(sql).unwrap();
            assert_eq!(db.commit(before).unwrap(), changes, "{sql}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    check(&Db::Sqlite(
        rusqlite::Connection::open(dir.path().join("c.db")).unwrap(),
    ));
    if let Ok(url) = std::env::var(super::tests::POSTGRES_ENV) {
        let pg = super::pg::conn::PgConn::connect(&url).unwrap();
        let schema = format!("c_{}", uuid::Uuid::new_v4().simple());
        pg.batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema}"
        ))
        .unwrap();
        check(&Db::Postgres(Box::new(pg)));
    }
}
