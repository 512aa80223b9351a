//! The control plane's SQLite database: one file in the data directory, WAL mode, every
//! state change in one savepoint. Handlers call [`Store::call`] with a closure over the
//! connection; the domain functions live in the submodules. Their changes take
//! `conn.savepoint()`, never `conn.savepoint()`: a call runs inside its batch's
//! transaction ([`batch`]), and only savepoints nest (outside a batch a savepoint is a
//! transaction of its own).

/// `Ok(Type { a: r.get(0)?, b: r.get(1)?, ... })`: a row struct from a query's columns,
/// taken in the order the fields are named; `field: f` passes the column through `f`.
macro_rules! from_columns {
    ($r:ident => $ty:ident { $($field:ident $(: $conv:path)?),* $(,)? }) => {{
        let mut _col = 0usize;
        Ok($ty {
            $($field: {
                let v = from_columns!(@get $r, _col $(, $conv)?);
                _col += 1;
                v
            }),*
        })
    }};
    (@get $r:ident, $col:ident) => { $r.get($col)? };
    (@get $r:ident, $col:ident, $conv:path) => { $conv($r.get($col)?) };
}

pub mod accounts;
pub mod agents;
pub mod artifact_chunks;
mod artifact_inputs;
#[cfg(test)]
mod artifact_tests;
pub mod artifacts;
mod batch;
#[cfg(test)]
mod batch_tests;
pub mod browser_control;
#[cfg(test)]
mod browser_tests;
pub mod catalog;
pub mod commands;
pub mod computer_grants;
pub mod computer_idle;
pub mod computers;
pub mod control;
pub mod db;
pub mod goal_waits;
pub mod goals;
#[cfg(test)]
mod grant_tests;
pub mod ids;
#[cfg(test)]
mod lease_tests;
mod migrate;
pub mod overview;
pub mod pg;
pub mod prompts;
pub mod replicas;
pub mod retention;
pub mod runner_images;
pub mod runner_tokens;
pub mod runners;
pub mod schedule;
pub mod scrape_tokens;
mod session_ends;
pub mod sessions;
pub mod subtasks;
#[cfg(test)]
mod team_tests;
pub mod team_tools;
pub mod teams;
#[cfg(test)]
mod tests;
pub mod transfer;
pub mod turn_waits;
#[cfg(test)]
mod wait_tests;
mod wal_sync;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub use db::{Db, Dialect, Row, Savepoint};

pub use migrate::{LATEST_VERSION, fresh_schema, migrate, migrate_stepwise};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Forbidden(String),
    /// Another instance of the Runner is online (the machine API's `runner_online_elsewhere`).
    #[error("{0}")]
    RunnerOnline(String),
    #[error(
        "the database {path} was written by a newer yy (schema version {found}; this yy knows up to {known}): upgrade yy, or restore a backup made by this version"
    )]
    NewerSchema {
        path: String,
        found: i64,
        known: i64,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database task failed: {0}")]
    Task(String),
    /// The database cannot be reached now (PostgreSQL down or its connection lost): retry.
    #[error("{0}")]
    Unavailable(String),
}

/// The database file inside a data directory.
pub fn db_path(data_dir: &Path) -> PathBuf {
    data_dir.join("yy.db")
}

/// The server's identity (schema 11 and later); none in an older database. A backup
/// records it, a restore compares it.
pub fn server_identity(conn: &Db) -> Option<String> {
    conn.query_row(
        "SELECT id FROM server_identity WHERE singleton = 1",
        [],
        |r| r.get(0),
    )
    .ok()
}

#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Db>>,
    /// Which database it is (some changes run differently on PostgreSQL).
    dialect: Dialect,
    /// Work for the database thread, which runs [`Store::call`]s in batches.
    jobs: std::sync::mpsc::Sender<Box<dyn batch::Job>>,
    /// PostgreSQL: the backend pid of the store's connection ([`Store::backend_pid`]).
    backend_pid: Arc<std::sync::atomic::AtomicI32>,
}

impl Store {
    /// Opens (creating if needed) and migrates the database in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        Store::open_syncing(data_dir, wal_sync::WalSync::start)
    }

    /// [`Store::open`] whose durable answers wait for `sync` instead of the WAL's fsync.
    #[cfg(test)]
    pub(in crate::server::store) fn open_with_sync(
        data_dir: &Path,
        sync: wal_sync::SyncFn,
    ) -> Result<Store, StoreError> {
        Store::open_syncing(data_dir, |_| wal_sync::WalSync::with(sync))
    }

    fn open_syncing(
        data_dir: &Path,
        start_sync: impl FnOnce(&Path) -> std::io::Result<wal_sync::WalSync>,
    ) -> Result<Store, StoreError> {
        crate::fsutil::create_private_dir(data_dir).map_err(|e| {
            StoreError::Invalid(format!(
                "cannot create the data directory {}: {e}",
                data_dir.display()
            ))
        })?;
        let path = db_path(data_dir);
        crate::fsutil::private_db_file(&path)
            .map_err(|e| StoreError::Invalid(format!("cannot create {}: {e}", path.display())))?;
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&conn)?;
        migrate(&mut conn).map_err(|e| match e {
            StoreError::NewerSchema { found, known, .. } => StoreError::NewerSchema {
                path: path.display().to_string(),
                found,
                known,
            },
            other => other,
        })?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let wal = start_sync(&path).map_err(|e| {
            StoreError::Task(format!("cannot start the database's sync thread: {e}"))
        })?;
        Store::serve(Db::Sqlite(conn), wal)
    }

    /// Connects to the PostgreSQL database at `url` and migrates it (issue 27). Several
    /// `yy serve` replicas may share it: every transaction of the store holds one advisory
    /// lock ([`pg::conn::STORE_LOCK`]), so their changes run one at a time.
    pub fn open_postgres(url: &str) -> Result<Store, StoreError> {
        let mut conn = pg::conn::PgConn::connect(url).map_err(|e| {
            StoreError::Invalid(format!(
                "cannot connect to the PostgreSQL database {}: {}",
                pg::redacted(url),
                pg::describe(&e)
            ))
        })?;
        conn.block_on(async |client| pg::migrate(client).await)
            .map_err(|e| match e {
                pg::PgError::Store(StoreError::NewerSchema { found, known, .. }) => {
                    StoreError::NewerSchema {
                        path: pg::redacted(url),
                        found,
                        known,
                    }
                }
                pg::PgError::Store(e) => e,
                other => StoreError::Invalid(format!(
                    "cannot migrate the PostgreSQL database {}: {other}",
                    pg::redacted(url)
                )),
            })?;
        let backend_pid = conn.backend_pid();
        let db = Db::Postgres(Box::new(conn));
        let synchronous: String = db
            .query_row("SHOW synchronous_commit", [], |r| r.get(0))
            .unwrap_or_default();
        if synchronous == "off" {
            tracing::warn!(
                "PostgreSQL's synchronous_commit is off: a crash of the database can lose changes yy already acknowledged; set it to on (or local) for yy's database"
            );
        }
        // The barrier that makes commits durable runs on a connection of its own.
        let barrier = pg::conn::PgConn::connect(url).map_err(|e| {
            StoreError::Invalid(format!(
                "cannot connect to the PostgreSQL database {}: {}",
                pg::redacted(url),
                pg::describe(&e)
            ))
        })?;
        let wal = wal_sync::WalSync::postgres(barrier).map_err(|e| {
            StoreError::Task(format!("cannot start the database's sync thread: {e}"))
        })?;
        let mut store = Store::serve(db, wal)?;
        store.backend_pid = backend_pid;
        Ok(store)
    }

    /// Where the backend pid of the store's PostgreSQL connection is kept (0 on SQLite): its
    /// commits notify the replicas ([`Db::notify_peers`]), and this replica's listener
    /// skips what it sent itself.
    pub fn backend_pid(&self) -> Arc<std::sync::atomic::AtomicI32> {
        self.backend_pid.clone()
    }

    /// Starts the database thread on `conn`; its durable answers wait for `wal`'s syncs.
    fn serve(conn: Db, wal: wal_sync::WalSync) -> Result<Store, StoreError> {
        let dialect = conn.dialect();
        let conn = Arc::new(Mutex::new(conn));
        let (jobs, queue) = std::sync::mpsc::channel();
        let worker = conn.clone();
        std::thread::Builder::new()
            .name("yy-store".into())
            .spawn(move || batch::run_jobs(&worker, &queue, wal))
            .map_err(|e| StoreError::Task(format!("cannot start the database thread: {e}")))?;
        Ok(Store {
            conn,
            dialect,
            jobs,
            backend_pid: Arc::default(),
        })
    }

    /// Runs `f` on the connection off the async threads, and answers once its changes are
    /// durable.
    ///
    /// One long-lived thread runs every call in turn. The connection allows one user at a
    /// time anyway; a thread per call (spawn_blocking) made concurrent requests queue on
    /// the mutex and pay a thread wake-up per hand-over, which cost more than the queries.
    /// The calls that wait meanwhile run together in one transaction, each in its own
    /// savepoint, and share its commit (one fsync): see [`batch`].
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, None, false, true, true).await
    }

    /// [`Store::call`] that also runs `on_commit` with its result as soon as its change is
    /// committed, before the disk has confirmed it and so before the answer: for a wake-up
    /// of a Runner whose work it queued (the lease that follows commits after it, so a
    /// power loss cannot keep the lease and lose the work). Never for telling a person.
    pub async fn call_on_commit<R, F, H>(&self, f: F, on_commit: H) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
        H: FnOnce(&R) + Send + 'static,
    {
        self.send(f, Some(Box::new(on_commit)), false, true, true)
            .await
    }

    /// [`Store::call`] without the store's lock on PostgreSQL ([`pg::conn::STORE_LOCK`]), so
    /// that it neither waits for nor holds up other replicas' transactions: only for calls
    /// that are right without it, whose every statement stands on its own (one read, or a
    /// change whose condition is in its own WHERE): reading one command. On SQLite it is
    /// otherwise [`Store::call`].
    pub async fn call_unlocked<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, None, false, true, false).await
    }

    /// [`Store::call_unlocked`] answered once committed, without waiting for any change to
    /// reach the disk: for checks whose answer tells nothing a power loss could take back.
    /// An authentication: a token is presented only after the answer that handed it out,
    /// which waited for the disk; what the check itself may change (a token promoted, its
    /// last use) is as safe to lose as a lease.
    pub async fn call_unlocked_relaxed<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, None, false, false, false).await
    }

    /// [`Store::call`], answered once committed without waiting for the disk: for changes
    /// whose loss in a power failure the protocol recovers from (a lease, a start: see
    /// [`batch`] and docs/protocol.md, "Durability"). Never for what a caller is told is
    /// kept (an enqueue, an outcome).
    pub async fn call_relaxed<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, None, false, false, true).await
    }

    /// [`Store::call_relaxed`] for a change that may run beside the other replicas'
    /// transactions on PostgreSQL: a transaction of its own without the store's lock. Only
    /// for a change that waits for at most one row, first, and takes every other row it
    /// changes with `FOR UPDATE SKIP LOCKED` (a Runner's lease:
    /// [`commands::lease_skipping_locked`]): it then never waits while it holds a row that
    /// another transaction may be waiting for. On SQLite it is [`Store::call_relaxed`].
    pub async fn call_apart_relaxed<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        let apart = self.dialect == Dialect::Postgres;
        self.send(f, None, apart, false, !apart).await
    }

    /// [`Store::call`] outside any batch, in SQLite's autocommit mode: for work SQLite
    /// refuses inside a transaction (a WAL checkpoint). Its own transactions commit one
    /// by one.
    pub async fn call_alone<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.send(f, None, true, true, true).await
    }

    async fn send<R, F>(
        &self,
        f: F,
        on_commit: Option<batch::OnCommit<R>>,
        alone: bool,
        durable: bool,
        locks: bool,
    ) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        let (job, reply) = batch::Call::new(f, on_commit, alone, durable, locks);
        self.jobs
            .send(Box::new(job))
            .map_err(|_| StoreError::Task("the database thread has stopped".into()))?;
        reply
            .await
            .map_err(|_| StoreError::Task("a database call panicked".into()))?
    }

    /// Runs `f` on the calling thread (for commands that are not async servers), between
    /// the database thread's batches and outside them: the store's functions then commit
    /// their changes one by one.
    pub fn call_blocking<R>(
        &self,
        f: impl FnOnce(&mut Db) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        self.durably(|db| {
            if db.dialect() == Dialect::Sqlite {
                f(db)
            } else {
                // PostgreSQL has no autocommit mode for savepoints: one transaction around it.
                in_transaction(db, f)
            }
        })
    }

    /// Runs `f` in one transaction of its own on the calling thread (between the database
    /// thread's batches), committed when it returns Ok and rolled back otherwise: for work
    /// on the whole database ([`transfer`]). On PostgreSQL it holds the store's lock.
    pub fn transaction<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Db) -> Result<R, E>,
    ) -> Result<R, E> {
        self.durably(|db| in_transaction(db, |db| f(db)))
    }

    /// `f` on the calling thread with the store's connection, between the database
    /// thread's batches; its commits are answered by returning, so each waits for the disk
    /// itself (the database thread's leave that to the sync thread).
    fn durably<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut Db) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        guard.set_durable(true).map_err(StoreError::from)?;
        let result = f(&mut guard);
        guard.set_durable(false).map_err(StoreError::from)?;
        result
    }
}

/// `f` in a transaction that holds the store's lock, committed when it returns Ok and
/// rolled back otherwise (its error is the one returned).
fn in_transaction<R, E: From<StoreError>>(
    db: &mut Db,
    f: impl FnOnce(&mut Db) -> Result<R, E>,
) -> Result<R, E> {
    db.begin(true).map_err(StoreError::from)?;
    let result = f(db);
    if result.is_err() {
        let _ = db.execute_batch("ROLLBACK");
        return result;
    }
    db.execute_batch("COMMIT").map_err(StoreError::from)?;
    result
}

/// Prepared statements kept per connection (the hot paths use `prepare_cached`).
const STATEMENT_CACHE: usize = 64;

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_secs(5))?;
    // Freed pages can be given back to the file system (retention::give_back_space). A
    // database made before this setting is rebuilt once, at open, before anyone waits.
    let auto_vacuum: i64 = conn.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?;
    if auto_vacuum != 2 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.execute_batch("VACUUM")?;
    }
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // A burst of big writes must not leave a big WAL behind after its checkpoint.
    conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
    // FULL while migrating. The database thread then commits under NORMAL and its durable
    // answers wait for the sync thread's fsync of the WAL, one for all the commits before it
    // (batch.rs, wal_sync.rs; docs/benchmarks.md, "Durability").
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Plans that do not depend on bound values: otherwise SQLite prepares a statement with
    // `LIMIT ?` (the lease) again at every use, because the statement cache clears its
    // bindings, which marks it for re-preparing. Every partial index here is matched by
    // literals in the SQL, never by a bound value.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// The word types of `crate::api` stored as TEXT columns.
macro_rules! sql_words {
    ($($t:ty),+) => {$(
        impl rusqlite::types::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_sql().into())
            }
        }
        impl rusqlite::types::FromSql for $t {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let word = v.as_str()?;
                <$t>::parse(word).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(
                        format!("unknown {} {word:?} in the database", stringify!($t)).into(),
                    )
                })
            }
        }
    )+};
}
sql_words!(
    crate::api::states::CommandState,
    crate::api::states::ComputerState,
    crate::api::states::SessionState,
    crate::api::states::TurnState,
    crate::api::machine::CommandKind,
    crate::api::teams::GoalState,
    crate::api::teams::SubtaskState,
    crate::api::artifacts::ArtifactKind,
    crate::api::artifacts::ArtifactState,
    crate::api::views::PendingImageState,
    crate::api::teams::DeliveryState
);

/// The id types of `crate::api::ids`: string ids as TEXT, counters as INTEGER.
macro_rules! sql_ids {
    (text: $($t:ty),+; integer: $($n:ty),+) => {
        $(
            impl rusqlite::types::ToSql for $t {
                fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                    Ok(self.as_str().into())
                }
            }
            impl rusqlite::types::FromSql for $t {
                fn column_result(
                    v: rusqlite::types::ValueRef<'_>,
                ) -> rusqlite::types::FromSqlResult<Self> {
                    Ok(<$t>::new(v.as_str()?))
                }
            }
        )+
        $(
            impl rusqlite::types::ToSql for $n {
                fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                    Ok(self.get().into())
                }
            }
            impl rusqlite::types::FromSql for $n {
                fn column_result(
                    v: rusqlite::types::ValueRef<'_>,
                ) -> rusqlite::types::FromSqlResult<Self> {
                    Ok(<$n>::from(v.as_i64()?))
                }
            }
        )+
    };
}
sql_ids!(
    text: crate::api::ids::RunnerId,
    crate::api::ids::CommandId,
    crate::api::ids::SessionId,
    crate::api::ids::ComputerId;
    integer: crate::api::ids::Generation,
    crate::api::ids::Fence
);

/// A new random id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// True when `e` is a UNIQUE constraint violation.
pub fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

/// The row `sql` selects by its one parameter, the id of a `kind`; when there is none, a
/// NotFound that names the kind and the command listing them.
pub(crate) fn get_by_id<T>(
    conn: &Db,
    kind: ids::Kind,
    sql: &str,
    id: &str,
    row: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    match conn.prepare_cached(sql)?.query_row([id], row) {
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(kind.not_found(id)),
        other => other.map_err(StoreError::from),
    }
}

/// Maps "no rows" to a NotFound with `what` as the message.
pub(crate) fn not_found<T>(
    r: Result<T, rusqlite::Error>,
    what: impl FnOnce() -> String,
) -> Result<T, StoreError> {
    match r {
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(StoreError::NotFound(what())),
        other => other.map_err(StoreError::from),
    }
}
