//! A blocking PostgreSQL connection for the store's database thread: tokio-postgres driven
//! by a runtime of its own (the thread is not async), SQLite's `?N` placeholders turned into
//! `$N`, values carried as SQLite's storage classes both ways, and PostgreSQL's errors given
//! the SQLite codes the store recognises (a unique violation is a conflict either way).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use tokio_postgres::types::{ToSql, Type};

use super::values::{PgValue, kind_letter, param_type, params};

use crate::server::store::StoreError;

/// Statements kept prepared per connection (each SQL once per kind of its parameters).
const STATEMENT_CACHE: usize = 256;

/// An open connection (one per database thread).
pub struct PgConn {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    statements: RefCell<HashMap<String, tokio_postgres::Statement>>,
    in_transaction: Cell<bool>,
    /// An error ended the transaction's work: PostgreSQL refuses everything but a
    /// rollback (to a savepoint) until then, and would turn a COMMIT into a ROLLBACK.
    aborted: Cell<bool>,
    /// What failed first in an aborted transaction (the errors after it only say
    /// "aborted").
    abort_cause: RefCell<Option<String>>,
    /// Whether [`PgConn::begin`]'s transactions wait for the disk at their commit.
    durable: Cell<bool>,
    /// SAVEPOINT and RELEASE statements not sent yet: they go out in the same round trip
    /// as the next statement (the connection keeps their order), which halves the round
    /// trips of a store call (its batch's savepoint and its own, each taken and released).
    deferred: RefCell<String>,
    /// Where it connects again after losing its connection ([`PgConn::revive`]).
    url: String,
    /// When it may try again after a failed attempt, and the wait after the next failure.
    retry_at: Option<Instant>,
    retry_wait: Duration,
    /// The server's process for this connection (0 until known): the replica's listener
    /// skips the notifications this connection's commits send.
    backend_pid: Arc<AtomicI32>,
}

/// The first and the longest wait between attempts to connect again.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_LAST: Duration = Duration::from_secs(5);
/// How long an attempt may take (a database host that drops packets).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The channel on which replicas wake each other (`server::peers`).
pub const WAKE_CHANNEL: &str = "yy_wake";

/// The advisory lock every writing transaction of the store holds: the replicas' changes
/// then run one at a time, as SQLite's do, and the store's read-then-write logic holds
/// unchanged. (The key is "yy" and "st" in ASCII.)
pub const STORE_LOCK: i64 = 0x7979_7374;

/// A statement's SQL in PostgreSQL's placeholders; it is prepared at its first execution,
/// when the kinds of its values are known.
pub struct Prepared(Rc<str>);

impl PgConn {
    /// Connects to `url` (`postgres://...` or `host=... dbname=...`).
    pub fn connect(url: &str) -> Result<PgConn, tokio_postgres::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        let client = open(&runtime, url)?;
        let backend_pid = Arc::new(AtomicI32::new(0));
        backend_pid.store(pid_of(&runtime, &client)?, Ordering::Relaxed);
        Ok(PgConn {
            backend_pid,
            url: url.to_owned(),
            retry_at: None,
            retry_wait: RETRY_FIRST,
            runtime,
            client,
            statements: RefCell::new(HashMap::new()),
            in_transaction: Cell::new(false),
            aborted: Cell::new(false),
            abort_cause: RefCell::new(None),
            durable: Cell::new(true),
            deferred: RefCell::new(String::new()),
        })
    }

    /// The async client, for work written against tokio-postgres (the migrations), run to
    /// its end on this connection's runtime.
    pub fn block_on<T>(&mut self, work: impl AsyncFnOnce(&mut tokio_postgres::Client) -> T) -> T {
        let PgConn {
            runtime, client, ..
        } = self;
        runtime.block_on(work(client))
    }

    pub fn set_durable(&self, durable: bool) {
        self.durable.set(durable);
    }

    /// BEGIN, the store's lock (see [`STORE_LOCK`]) when `locked`, and the durability
    /// asked for, all sent with the transaction's first statement: nothing reads their
    /// answers, and were one refused (the database gone), that statement fails too and
    /// says so.
    pub fn begin(&self, locked: bool) -> rusqlite::Result<()> {
        let relaxed = if self.durable.get() {
            ""
        } else {
            "SET LOCAL synchronous_commit TO off; "
        };
        let lock = if locked {
            format!("SELECT pg_advisory_xact_lock({STORE_LOCK}); ")
        } else {
            String::new()
        };
        let mut deferred = self.deferred.borrow_mut();
        deferred.clear();
        deferred.push_str(&format!("BEGIN; {relaxed}{lock}"));
        self.in_transaction.set(true);
        Ok(())
    }

    /// Where this connection's backend pid is kept (it changes when it connects again).
    pub fn backend_pid(&self) -> Arc<AtomicI32> {
        self.backend_pid.clone()
    }

    /// `NOTIFY` on [`WAKE_CHANNEL`] with `payload` in the open transaction, sent with its
    /// next statement (its COMMIT, as a rule): PostgreSQL delivers it when the transaction
    /// commits, and never if it is rolled back.
    pub fn notify(&self, payload: &str) {
        let quoted = payload.replace('\'', "''");
        self.deferred
            .borrow_mut()
            .push_str(&format!("SELECT pg_notify('{WAKE_CHANNEL}', '{quoted}'); "));
    }

    pub fn aborted(&self) -> bool {
        self.aborted.get()
    }

    /// Connects again if the connection was lost, at most once per back-off step.
    pub fn revive(&mut self) -> Result<(), StoreError> {
        if !self.client.is_closed() {
            return Ok(());
        }
        let unreachable = |why: &str| {
            StoreError::Unavailable(format!(
                "the PostgreSQL database {} is out of reach ({why})",
                super::redacted(&self.url)
            ))
        };
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return Err(unreachable("waiting before the next attempt"));
        }
        match open(&self.runtime, &self.url) {
            Ok(client) => {
                tracing::info!("connected to PostgreSQL again");
                let pid = pid_of(&self.runtime, &client).unwrap_or(0);
                self.backend_pid.store(pid, Ordering::Relaxed);
                self.client = client;
                self.statements.borrow_mut().clear();
                self.end_transaction();
                self.retry_at = None;
                self.retry_wait = RETRY_FIRST;
                Ok(())
            }
            Err(e) => {
                self.retry_at = Some(Instant::now() + self.retry_wait);
                self.retry_wait = (self.retry_wait * 2).min(RETRY_LAST);
                Err(unreachable(&super::describe(&e)))
            }
        }
    }

    pub fn in_transaction(&self) -> bool {
        self.in_transaction.get()
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub(in crate::server::store) fn statement(&self, sql: &str) -> rusqlite::Result<Prepared> {
        Ok(Prepared(translate(sql).into()))
    }

    /// Statements without parameters; BEGIN, COMMIT and ROLLBACK keep the transaction
    /// state that [`PgConn::in_transaction`] tells.
    pub fn batch_execute(&self, sql: &str) -> rusqlite::Result<()> {
        let word = sql.trim_start().to_ascii_uppercase();
        let ends = (word.starts_with("COMMIT") || word.starts_with("ROLLBACK"))
            && !word.starts_with("ROLLBACK TO");
        if word.starts_with("COMMIT") && self.aborted.get() {
            self.deferred.borrow_mut().clear();
            let _ = self.runtime.block_on(self.client.batch_execute("ROLLBACK"));
            self.end_transaction();
            return Err(failure(
                "the transaction was rolled back: a statement in it had failed".into(),
            ));
        }
        if self.defers(sql) {
            return Ok(());
        }
        // What was deferred goes first, in the same simple query.
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        let result = if deferred.is_empty() {
            self.runtime.block_on(self.client.batch_execute(sql))
        } else {
            self.runtime
                .block_on(self.client.batch_execute(&format!("{deferred}{sql}")))
        };
        if word.starts_with("BEGIN") || word.starts_with("START TRANSACTION") {
            self.in_transaction.set(result.is_ok());
        } else if ends {
            self.end_transaction();
        } else if word.starts_with("ROLLBACK TO") && result.is_ok() {
            self.aborted.set(false);
            self.abort_cause.borrow_mut().take();
        }
        self.checked(result, sql)
    }

    /// COMMIT, and whether the transaction wrote anything (PostgreSQL gave it an id): only
    /// such a commit needs a flush before it is answered. One round trip, as a plain COMMIT.
    pub fn commit_reporting_writes(&self) -> rusqlite::Result<bool> {
        if self.aborted.get() {
            // Rolled back and refused, as a plain COMMIT would be.
            return self.batch_execute("COMMIT").map(|()| false);
        }
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        let sql = format!("{deferred}SELECT txid_current_if_assigned() IS NOT NULL; COMMIT");
        let result = self.runtime.block_on(self.client.simple_query(&sql));
        self.end_transaction();
        let messages = self.checked(result, "COMMIT")?;
        Ok(messages.iter().any(|m| {
            matches!(m, tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("t"))
        }))
    }

    /// Keeps `sql` for the next round trip when it is a savepoint's start or release in a
    /// healthy transaction (nothing reads its answer; were it refused, the statement it
    /// goes with fails too and says so).
    fn defers(&self, sql: &str) -> bool {
        let plain = sql.starts_with("SAVEPOINT ") || sql.starts_with("RELEASE ");
        if !plain || sql.contains(';') || !self.in_transaction.get() || self.aborted.get() {
            return false;
        }
        let mut deferred = self.deferred.borrow_mut();
        deferred.push_str(sql);
        deferred.push_str("; ");
        true
    }

    /// Runs `work` after whatever was deferred, both sent before either answer is read.
    fn after_deferred<T>(
        &self,
        work: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, tokio_postgres::Error> {
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        if deferred.is_empty() {
            return self.runtime.block_on(work);
        }
        self.runtime.block_on(async {
            // join polls in order: the deferred statements are queued on the connection
            // before the work's, and PostgreSQL runs them in that order.
            let (before, result) = futures_util::join!(self.client.batch_execute(&deferred), work);
            before?;
            result
        })
    }

    fn end_transaction(&self) {
        self.deferred.borrow_mut().clear();
        self.in_transaction.set(false);
        self.aborted.set(false);
        self.abort_cause.borrow_mut().take();
    }

    pub(in crate::server::store) fn execute(
        &self,
        prepared: &Prepared,
        values: &[Value],
    ) -> rusqlite::Result<usize> {
        if values.is_empty() && self.defers(&prepared.0) {
            return Ok(0);
        }
        let statement = self.prepared(&prepared.0, values)?;
        let params = params(values);
        let result = self.after_deferred(
            self.client
                .execute_raw(&statement, params.iter().map(|p| p as &dyn ToSql)),
        );
        self.checked(result, &prepared.0).map(|n| n as usize)
    }

    pub(in crate::server::store) fn query(
        &self,
        prepared: &Prepared,
        values: &[Value],
    ) -> rusqlite::Result<(Vec<String>, Vec<Vec<Value>>)> {
        let statement = self.prepared(&prepared.0, values)?;
        let names = statement
            .columns()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        let params = params(values);
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = self.after_deferred(self.client.query(&statement, &refs));
        let rows = self.checked(rows, &prepared.0)?;
        let rows = rows
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.try_get::<_, PgValue>(i)
                            .map(|v| v.0)
                            .map_err(|e| failure(super::describe(&e)))
                    })
                    .collect()
            })
            .collect::<rusqlite::Result<_>>()?;
        Ok((names, rows))
    }

    /// The statement for `sql` with parameters of the kinds of `values`, prepared once.
    /// A NULL leaves its parameter's type to the server; where the SQL says nothing about
    /// it either (`?2 IS NULL`), it is text.
    fn prepared(&self, sql: &str, values: &[Value]) -> rusqlite::Result<tokio_postgres::Statement> {
        let kinds: String = values.iter().map(kind_letter).collect();
        let key = format!("{kinds}:{sql}");
        if let Some(statement) = self.statements.borrow().get(&key) {
            return Ok(statement.clone());
        }
        // Preparing is a round trip of its own: what was deferred goes first.
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        if !deferred.is_empty() {
            self.checked(
                self.runtime.block_on(self.client.batch_execute(&deferred)),
                &deferred,
            )?;
        }
        let types: Vec<Type> = values.iter().map(param_type).collect();
        let guessing = types.iter().any(|t| t.oid() == 0) && self.in_transaction.get();
        // A refused prepare would abort the transaction: guess inside a savepoint.
        if guessing {
            self.checked(
                self.runtime
                    .block_on(self.client.batch_execute("SAVEPOINT yy_prepare")),
                "SAVEPOINT yy_prepare",
            )?;
        }
        let mut prepared = self
            .runtime
            .block_on(self.client.prepare_typed(sql, &types));
        if let Err(e) = &prepared
            && [
                tokio_postgres::error::SqlState::INDETERMINATE_DATATYPE,
                tokio_postgres::error::SqlState::AMBIGUOUS_PARAMETER,
            ]
            .iter()
            .any(|c| e.code() == Some(c))
        {
            if guessing {
                let undo = "ROLLBACK TO yy_prepare";
                self.checked(self.runtime.block_on(self.client.batch_execute(undo)), undo)?;
            }
            let types: Vec<Type> = types
                .into_iter()
                .map(|t| if t.oid() == 0 { Type::TEXT } else { t })
                .collect();
            prepared = self
                .runtime
                .block_on(self.client.prepare_typed(sql, &types));
        }
        if guessing && prepared.is_ok() {
            let done = "RELEASE yy_prepare";
            self.checked(self.runtime.block_on(self.client.batch_execute(done)), done)?;
        }
        let statement = self.checked(prepared, sql)?;
        let mut statements = self.statements.borrow_mut();
        if statements.len() >= STATEMENT_CACHE {
            statements.clear();
        }
        statements.insert(key, statement.clone());
        Ok(statement)
    }

    /// `result` of `sql` as rusqlite's, noting that an error inside a transaction aborted
    /// it; a refusal because of that names the statement that failed first.
    fn checked<T>(
        &self,
        result: Result<T, tokio_postgres::Error>,
        sql: &str,
    ) -> rusqlite::Result<T> {
        result.map_err(|e| {
            if !self.in_transaction.get() {
                return to_sqlite_error(&e, None);
            }
            self.aborted.set(true);
            let mut cause = self.abort_cause.borrow_mut();
            if e.code() == Some(&tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) {
                return to_sqlite_error(&e, cause.as_deref());
            }
            cause.get_or_insert_with(|| format!("{} in: {}", super::describe(&e), one_line(sql)));
            to_sqlite_error(&e, None)
        })
    }
}

/// The backend pid of `client`'s connection.
fn pid_of(
    runtime: &tokio::runtime::Runtime,
    client: &tokio_postgres::Client,
) -> Result<i32, tokio_postgres::Error> {
    let row = runtime.block_on(client.query_one("SELECT pg_backend_pid()", &[]))?;
    Ok(row.get(0))
}

/// A client on `url`, its connection driven by `runtime` (while it runs a call).
fn open(
    runtime: &tokio::runtime::Runtime,
    url: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config: tokio_postgres::Config = url.parse()?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let (client, connection) = runtime.block_on(config.connect(tokio_postgres::NoTls))?;
    runtime.spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %super::describe(&e), "the PostgreSQL connection ended");
        }
    });
    Ok(client)
}

fn failure(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        Some(message),
    )
}

/// PostgreSQL's error as the SQLite error the store recognises: the constraint violations
/// by their SQLite codes, the rest as a plain failure with PostgreSQL's message.
fn to_sqlite_error(e: &tokio_postgres::Error, cause: Option<&str>) -> rusqlite::Error {
    use tokio_postgres::error::SqlState;
    let code = match e.code() {
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE,
        Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => {
            rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY
        }
        Some(c) if *c == SqlState::CHECK_VIOLATION => rusqlite::ffi::SQLITE_CONSTRAINT_CHECK,
        Some(c) if *c == SqlState::NOT_NULL_VIOLATION => rusqlite::ffi::SQLITE_CONSTRAINT_NOTNULL,
        _ => rusqlite::ffi::SQLITE_ERROR,
    };
    let message = match cause {
        Some(cause) => format!("{}; what failed first: {cause}", super::describe(e)),
        None => super::describe(e),
    };
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(message))
}

/// A statement on one line, at most 300 characters of it.
fn one_line(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line,
    }
}

/// SQLite's placeholders (`?N`, and `?` for the one after the highest so far) as
/// PostgreSQL's `$N`, leaving string literals, quoted names and comments alone.
pub(crate) fn translate(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut highest = 0u32;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = digits.parse().unwrap_or(highest + 1);
                highest = highest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_literals() {
        assert_eq!(
            translate(
                "SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d IN (?, ?3) -- ?4\n AND e = ?"
            ),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d IN ($2, $3) -- ?4\n AND e = $4"
        );
        assert_eq!(translate("\"x?\" = ?12"), "\"x?\" = $12");
    }
}
