//! Moving a control plane's state from one database to another (issue 27): SQLite to
//! PostgreSQL, PostgreSQL to SQLite, or between two of a kind; `yy store migrate`, and the
//! backup and restore of a PostgreSQL database, build on it.
//!
//! * The source is read in one transaction (on PostgreSQL `REPEATABLE READ READ ONLY`: one
//!   snapshot) and never written; it must be at this yy's schema version.
//! * The target is a [`Store`] opened the normal way, which creates or migrates its schema,
//!   so both are at one version. Its tables must be the source's, with the same columns and
//!   keys, as each database's catalog lists them.
//! * Every table is copied in foreign key order ([`tables`]) in one transaction on the
//!   target, through the store's one connection interface ([`Db`]); the counters
//!   (AUTOINCREMENT, identity columns) are set so that new rows do not collide.
//! * After the commit the target is read back: every table's row count and checksum
//!   ([`rows`]) must equal the source's.
//! * The artifact files go from one blob directory to the other, each checked ([`blobs`]).

pub mod blobs;
pub mod rows;
pub mod tables;

use std::path::{Path, PathBuf};

use rusqlite::OpenFlags;

use super::replicas::{self, ReplicaRow};
use super::{Db, Dialect, LATEST_VERSION, Store, StoreError, pg};
pub use rows::Sum;

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Not usable as given (a malformed endpoint, a blob directory missing).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// In use: a `yy serve` replica is up on the database.
    #[error("{0}")]
    Busy(String),
    /// The target holds data already; nothing was written.
    #[error("{0}")]
    NotEmpty(String),
    /// The source's schema is not this yy's (another version, or not yy's at all).
    #[error("{0}")]
    Schema(String),
    /// What was written does not read back as what was read.
    #[error("{0}")]
    Mismatch(String),
    #[error("{0}")]
    Db(String),
    #[error("{0}")]
    Io(String),
}

pub type Result<T, E = TransferError> = std::result::Result<T, E>;

impl From<StoreError> for TransferError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) | StoreError::Invalid(m) => TransferError::Db(m),
            other => TransferError::Db(other.to_string()),
        }
    }
}

pub(crate) fn db_error(doing: &str, e: rusqlite::Error) -> TransferError {
    TransferError::Db(format!("{doing}: {e}"))
}

/// One side of a transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The SQLite file `yy.db` in this data directory.
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://...` or key-value); may hold a password.
    Postgres(String),
}

impl Endpoint {
    /// `sqlite:PATH` (a data directory, or the `yy.db` in one) or a PostgreSQL URL or
    /// key-value string. Whether a password may be in it is the caller's business.
    pub fn parse(spec: &str) -> Result<Endpoint> {
        if let Some(path) = spec.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(TransferError::Invalid(
                    "sqlite: names no path: give sqlite:DATA_DIR or sqlite:DATA_DIR/yy.db".into(),
                ));
            }
            let path = PathBuf::from(path);
            if path.file_name().is_some_and(|n| n == "yy.db") {
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                return Ok(Endpoint::Sqlite(dir));
            }
            if path.is_file() {
                return Err(TransferError::Invalid(format!(
                    "sqlite:{} is a file but not a yy.db: give the data directory, or the yy.db in it",
                    path.display()
                )));
            }
            return Ok(Endpoint::Sqlite(path));
        }
        if pg::looks_like_url(spec) && spec.parse::<tokio_postgres::Config>().is_ok() {
            return Ok(Endpoint::Postgres(spec.to_string()));
        }
        Err(TransferError::Invalid(format!(
            "{}: give sqlite:DATA_DIR (or sqlite:DATA_DIR/yy.db) or a PostgreSQL URL postgres://USER@HOST:PORT/NAME",
            pg::redacted(spec)
        )))
    }

    /// What to call it in messages: the database file, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Sqlite(dir) => super::db_path(dir).display().to_string(),
            Endpoint::Postgres(url) => pg::redacted(url),
        }
    }

    /// Opens it as a target: the normal store open, which creates or migrates its schema.
    pub fn open_target(&self) -> Result<Store> {
        match self {
            Endpoint::Sqlite(dir) => Store::open(dir),
            Endpoint::Postgres(url) => Store::open_postgres(url),
        }
        .map_err(|e| match e {
            StoreError::NewerSchema { .. } => TransferError::Schema(e.to_string()),
            other => TransferError::Db(format!("opening {}: {other}", self.describe())),
        })
    }

    /// Opens it as a source: connected, inside one reading transaction, never migrated.
    pub fn open_source(&self) -> Result<Db> {
        let shown = self.describe();
        match self {
            Endpoint::Sqlite(dir) => {
                let path = super::db_path(dir);
                if !path.is_file() {
                    return Err(TransferError::NotFound(format!(
                        "{shown} does not exist: give the data directory of a yy control plane"
                    )));
                }
                let fail = |e| db_error(&format!("opening {shown}"), e);
                // Read-write but never written (query_only): a read-only open of a WAL
                // database needs its -shm file to exist.
                let conn = rusqlite::Connection::open_with_flags(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(fail)?;
                conn.busy_timeout(std::time::Duration::from_secs(5))
                    .map_err(fail)?;
                conn.pragma_update(None, "query_only", true).map_err(fail)?;
                conn.execute_batch("BEGIN").map_err(fail)?;
                Ok(Db::Sqlite(conn))
            }
            Endpoint::Postgres(url) => {
                let conn = pg::conn::PgConn::connect(url).map_err(|e| {
                    TransferError::Db(format!("cannot connect to {shown}: {}", pg::describe(&e)))
                })?;
                conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .map_err(|e| db_error(&format!("reading {shown}"), e))?;
                Ok(Db::Postgres(Box::new(conn)))
            }
        }
    }
}

/// The schema version of `db`: SQLite's `user_version`, PostgreSQL's `schema_version` row
/// (0 for a database yy never made).
pub fn schema_version(db: &Db) -> Result<i64> {
    let fail = |e| db_error("reading the schema version", e);
    match db.dialect() {
        Dialect::Sqlite => db.query_row("PRAGMA user_version", [], |r| r.get(0)),
        Dialect::Postgres => {
            let exists: bool = db
                .query_row(
                    "SELECT to_regclass('schema_version') IS NOT NULL",
                    [],
                    |r| r.get(0),
                )
                .map_err(fail)?;
            if !exists {
                return Ok(0);
            }
            match db.query_row(
                "SELECT version FROM schema_version WHERE singleton = 1",
                [],
                |r| r.get(0),
            ) {
                Err(rusqlite::Error::QueryReturnedNoRows) => Ok(0),
                other => other,
            }
        }
    }
    .map_err(fail)
}

/// Refuses a source not at this yy's schema version, saying what to do.
pub fn check_version(db: &Db, shown: &str) -> Result<i64> {
    let found = schema_version(db)?;
    match found {
        v if v == LATEST_VERSION => Ok(v),
        0 => Err(TransferError::Schema(format!(
            "{shown} holds no yy control plane (it has no schema version)"
        ))),
        v if v > LATEST_VERSION => Err(TransferError::Schema(format!(
            "{shown} is at schema version {v}, newer than this yy's ({LATEST_VERSION}): move it with the yy that wrote it"
        ))),
        v => Err(TransferError::Schema(format!(
            "{shown} is at schema version {v} and this yy's is {LATEST_VERSION}: start this yy's `yy serve` on it once (it migrates the database), stop it, then move it"
        ))),
    }
}

/// Refuses while a `yy serve` replica is up on `db` (its heartbeat row is recent).
pub fn check_no_replica(db: &Db, shown: &str) -> Result<()> {
    let now = crate::timefmt::now_ms();
    let up: Vec<ReplicaRow> = replicas::list(db)?
        .into_iter()
        .filter(|r| r.up(now))
        .collect();
    let Some(first) = up.first() else {
        return Ok(());
    };
    let others = match up.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    Err(TransferError::Busy(format!(
        "the yy serve replica {} on {} (listening on {}){others} is using {shown} (seen {} s ago): stop every replica first",
        first.id,
        first.hostname,
        first.listen,
        (now - first.seen_at).max(0) / 1000
    )))
}

/// What to do with the target's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Refuse a target with any row in a data table (`yy store migrate`).
    Empty,
    /// Delete the target's rows first, in the same transaction (a restore).
    Replace,
}

/// Where one side keeps its artifact bytes: files in a directory (SQLite, `yy serve
/// --blob-dir`), or chunks in its database's `artifact_chunks` (PostgreSQL without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobPlace {
    Dir(PathBuf),
    Database,
}

/// Where the artifact bytes are read and written.
#[derive(Debug, Clone)]
pub struct BlobDirs {
    pub from: BlobPlace,
    pub to: BlobPlace,
}

impl BlobDirs {
    /// The bytes stay rows of `artifact_chunks` on both sides: that table is copied (and
    /// checked) like any other. Otherwise they are moved between files and chunks, and the
    /// table is left to that.
    fn chunks_as_rows(dirs: Option<&BlobDirs>) -> bool {
        dirs.is_none_or(|d| d.from == BlobPlace::Database && d.to == BlobPlace::Database)
    }
}

/// What a transfer did, read back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub schema_version: i64,
    /// Every table, in the order copied, as read back from the target.
    pub tables: Vec<Sum>,
    pub rows: u64,
    /// Rows deleted from the target first ([`Mode::Replace`]).
    pub replaced_rows: u64,
    pub artifacts: Option<blobs::Copied>,
}

/// The data tables of `tables` that hold a row in `db`, with their counts.
fn tables_with_rows(db: &Db, tables: &[tables::Table]) -> Result<Vec<(String, u64)>> {
    let mut found = Vec::new();
    for t in tables {
        if tables::MADE_WITH_SCHEMA.contains(&t.name.as_str()) {
            continue;
        }
        let n = rows::count(db, t)?;
        if n > 0 {
            found.push((t.name.clone(), n));
        }
    }
    Ok(found)
}

/// The data tables of `db` that hold rows, with their counts (none: a fresh database).
pub fn filled_tables(db: &Db) -> Result<Vec<(String, u64)>> {
    tables_with_rows(db, &tables::read(db)?)
}

/// Copies everything `source` holds into `target` (see the module's description); the
/// artifacts' files too when `blob_dirs` says where. `source` is an [`Endpoint::open_source`]
/// connection already checked with [`check_version`] and [`check_no_replica`].
pub fn transfer(
    source: &Db,
    target: &Store,
    target_shown: &str,
    mode: Mode,
    blob_dirs: Option<&BlobDirs>,
) -> Result<Report> {
    let source_tables = tables::read(source)?;
    let chunks_as_rows = BlobDirs::chunks_as_rows(blob_dirs);
    let artifacts = match blob_dirs {
        Some(_) => blobs::ready(source)?,
        None => vec![],
    };
    let (sums, target_tables, replaced, copied) = target.transaction(|db| {
        check_no_replica(db, target_shown)?;
        if schema_version(db)? != LATEST_VERSION {
            return Err(TransferError::Schema(format!(
                "{target_shown} is not at this yy's schema version after its migration"
            )));
        }
        let target_tables = tables::read(db)?;
        tables::same_schema(&source_tables, &target_tables)?;
        let filled = tables_with_rows(db, &target_tables)?;
        let mut replaced = 0;
        match mode {
            Mode::Empty if !filled.is_empty() => {
                let listed: Vec<String> = filled
                    .iter()
                    .map(|(t, n)| format!("{t} ({n})"))
                    .collect();
                return Err(TransferError::NotEmpty(format!(
                    "{target_shown} is not empty: it has rows in {}; give an empty database (nothing was written)",
                    listed.join(", ")
                )));
            }
            Mode::Empty => {}
            Mode::Replace => replaced = filled.iter().map(|(_, n)| n).sum(),
        }
        for t in target_tables.iter().rev() {
            if mode == Mode::Replace || tables::MADE_WITH_SCHEMA.contains(&t.name.as_str()) {
                db.execute(&format!("DELETE FROM {}", tables::quoted(&t.name)), [])
                    .map_err(|e| db_error(&format!("emptying table {}", t.name), e))?;
            }
        }
        // Files before the rows: a missing or damaged one refuses the whole transfer.
        let mut copied = match blob_dirs.map(|d| (&d.from, &d.to)) {
            Some((BlobPlace::Dir(from), BlobPlace::Dir(to))) => {
                Some(blobs::copy(&artifacts, from, to)?)
            }
            Some((BlobPlace::Database, BlobPlace::Dir(to))) => {
                Some(blobs::chunks_to_files(source, &artifacts, to)?)
            }
            _ => None,
        };
        let mut sums = Vec::new();
        for t in &source_tables {
            if t.name == blobs::CHUNKS_TABLE && !chunks_as_rows {
                continue;
            }
            let into = target_tables
                .iter()
                .find(|x| x.name == t.name)
                .expect("same tables");
            let writer = rows::Writer::new(into);
            let counter_at = t.counter.as_ref().and_then(|c| t.position(c));
            let mut highest = 0i64;
            let mut sum = rows::scan(source, t, |row| {
                if let Some(rusqlite::types::Value::Integer(n)) = counter_at.map(|i| &row[i]) {
                    highest = highest.max(*n);
                }
                writer.write(db, row)
            })?;
            let counted = rows::count(source, t)?;
            if counted != sum.rows {
                return Err(TransferError::Mismatch(format!(
                    "table {} of the source has {counted} rows but {} were read in key order",
                    t.name, sum.rows
                )));
            }
            if into.counter.is_some() {
                let last = rows::counter(source, t)?.unwrap_or(0).max(highest);
                rows::set_counter(db, into, last)?;
                sum.counter = Some(last);
            }
            sums.push(sum);
        }
        // The rows of runner_commands were counted by its triggers on top of the counts
        // copied with the runners: set them from the rows, as the source has them.
        super::commands::recount_pending(db)
            .map_err(|e| db_error("counting the Runners' pending commands", e))?;
        // Chunks after the rows: they refer to their artifact's.
        if let Some(BlobDirs {
            from: BlobPlace::Dir(from),
            to: BlobPlace::Database,
        }) = blob_dirs
        {
            copied = Some(blobs::files_to_chunks(&artifacts, from, db)?);
        }
        Ok((sums, target_tables, replaced, copied))
    })?;
    // Read back what was committed.
    let read_back = target.transaction(|db| {
        target_tables
            .iter()
            .filter(|t| chunks_as_rows || t.name != blobs::CHUNKS_TABLE)
            .map(|t| {
                let mut sum = rows::scan(db, t, |_| Ok(()))?;
                sum.counter = rows::counter(db, t)?;
                Ok(sum)
            })
            .collect::<Result<Vec<Sum>>>()
    })?;
    for want in &sums {
        let got = read_back.iter().find(|s| s.table == want.table);
        if got != Some(want) {
            return Err(TransferError::Mismatch(format!(
                "{target_shown} was written but does not read back as the source: table {} has {} in the source and {} in the target; do not use the target",
                want.table,
                figures(Some(want)),
                figures(got)
            )));
        }
    }
    Ok(Report {
        schema_version: LATEST_VERSION,
        rows: sums.iter().map(|s| s.rows).sum(),
        tables: sums,
        replaced_rows: replaced,
        artifacts: copied,
    })
}

fn figures(s: Option<&Sum>) -> String {
    match s {
        Some(s) => format!(
            "{} rows (SHA-256 {}, counter {:?})",
            s.rows,
            &s.sha256[..12],
            s.counter
        ),
        None => "no such table".into(),
    }
}

/// The directory a data directory's artifact files are in by default.
pub fn default_blob_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("artifacts")
}

#[cfg(test)]
mod tests;
