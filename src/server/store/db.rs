//! One connection interface over the control plane's two databases: the embedded SQLite
//! file and PostgreSQL (issue 27). The store's functions take a [`Db`] and run the same SQL
//! on either; the few statements whose dialects differ branch on [`Db::dialect`].
//!
//! The interface keeps rusqlite's shapes on purpose, so that the store's code did not have to
//! change: parameters are rusqlite [`ToSql`] values (`params![...]`, arrays), rows are read
//! with rusqlite's [`FromSql`], and errors are [`rusqlite::Error`]s. On PostgreSQL the SQL's
//! `?N` placeholders become `$N`, values travel as SQLite's five storage classes, and a
//! constraint violation comes back as the SQLite error the store already recognises
//! (`pg::conn`).

use std::cell::Cell;

use rusqlite::types::{FromSql, ToSql, Value, ValueRef};

use super::pg::conn::PgConn;

/// Which SQL a [`Db`] speaks, for the statements that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A connection to the control plane's database.
pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<PgConn>),
}

impl Db {
    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, the WAL, vacuum).
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Db::Sqlite(c) => Some(c),
            Db::Postgres(_) => None,
        }
    }

    /// A private SQLite database in memory (tests).
    #[cfg(test)]
    pub fn open_in_memory() -> rusqlite::Result<Db> {
        rusqlite::Connection::open_in_memory().map(Db::Sqlite)
    }

    /// The SQLite connection, to change it (migrations, pragmas).
    pub fn sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match self {
            Db::Sqlite(c) => Some(c),
            Db::Postgres(_) => None,
        }
    }

    /// Runs `sql` (no parameters; several statements allowed).
    pub fn execute_batch(&self, sql: &str) -> rusqlite::Result<()> {
        match self {
            Db::Sqlite(c) => c.execute_batch(sql),
            Db::Postgres(c) => c.batch_execute(sql),
        }
    }

    /// A statement prepared again at every call.
    pub fn prepare(&self, sql: &str) -> rusqlite::Result<Statement<'_>> {
        Ok(Statement(match self {
            Db::Sqlite(c) => Stmt::Sqlite(c.prepare(sql)?),
            Db::Postgres(c) => Stmt::Postgres(c, c.statement(sql)?),
        }))
    }

    /// A statement kept prepared for the next call with the same SQL.
    pub fn prepare_cached(&self, sql: &str) -> rusqlite::Result<Statement<'_>> {
        Ok(Statement(match self {
            Db::Sqlite(c) => Stmt::SqliteCached(c.prepare_cached(sql)?),
            Db::Postgres(c) => Stmt::Postgres(c, c.statement(sql)?),
        }))
    }

    /// Rows changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// The first row's value of `f`; [`rusqlite::Error::QueryReturnedNoRows`] without one.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare(sql)?.query_row(params, f)
    }

    /// A savepoint: released by [`Savepoint::commit`], rolled back when dropped without.
    /// Outside a transaction it is one (SQLite); on PostgreSQL the store runs every call
    /// in a transaction, so it always nests.
    pub fn savepoint(&self) -> rusqlite::Result<Savepoint<'_>> {
        self.prepare_cached("SAVEPOINT yy_sp")?.execute([])?;
        Ok(Savepoint {
            db: self,
            open: Cell::new(true),
        })
    }

    /// Tells the other replicas `payload` when the open transaction commits (PostgreSQL's
    /// `NOTIFY`, sent with the COMMIT); nothing on SQLite, which has no replicas.
    pub fn notify_peers(&self, payload: &str) {
        if let Db::Postgres(c) = self {
            c.notify(payload);
        }
    }

    /// Rows changed on this connection so far (SQLite; 0 on PostgreSQL): what [`Db::commit`]
    /// compares with.
    pub fn total_changes(&self) -> u64 {
        match self {
            Db::Sqlite(c) => c.total_changes(),
            Db::Postgres(_) => 0,
        }
    }

    /// COMMIT, and whether the transaction changed anything: rows on SQLite (against
    /// `changes_before`, [`Db::total_changes`] at its BEGIN, triggers' changes included), an
    /// id assigned to it on PostgreSQL.
    pub fn commit(&self, changes_before: u64) -> rusqlite::Result<bool> {
        match self {
            Db::Sqlite(c) => {
                c.execute_batch("COMMIT")?;
                Ok(c.total_changes() != changes_before)
            }
            Db::Postgres(c) => c.commit_reporting_writes(),
        }
    }

    /// Whether the next transactions' commits wait for the disk: SQLite's `synchronous`
    /// (FULL or NORMAL; it cannot change inside a transaction), PostgreSQL's
    /// `synchronous_commit` for each transaction [`Db::begin`] opens.
    pub fn set_durable(&self, durable: bool) -> rusqlite::Result<()> {
        match self {
            Db::Sqlite(c) => {
                c.pragma_update(None, "synchronous", if durable { "FULL" } else { "NORMAL" })
            }
            Db::Postgres(c) => {
                c.set_durable(durable);
                Ok(())
            }
        }
    }

    /// Opens a writing transaction. On PostgreSQL it first takes the store's advisory
    /// lock when `locked`, so that the transactions of every replica run one at a time, as
    /// SQLite's do (see [`super::Store::call_unlocked`] for those that need not).
    pub fn begin(&self, locked: bool) -> rusqlite::Result<()> {
        match self {
            Db::Sqlite(c) => c.execute_batch("BEGIN IMMEDIATE"),
            Db::Postgres(c) => c.begin(locked),
        }
    }

    /// Whether a failed statement left the transaction unusable until a rollback (to a
    /// savepoint): PostgreSQL's rule; SQLite goes on after a failed statement.
    pub fn aborted(&self) -> bool {
        match self {
            Db::Sqlite(_) => false,
            Db::Postgres(c) => c.aborted(),
        }
    }

    /// Connects again when a PostgreSQL connection was lost (not more often than its
    /// back-off allows); [`StoreError::Unavailable`] while the database is out of reach.
    pub fn revive(&mut self) -> Result<(), super::StoreError> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Postgres(c) => c.revive(),
        }
    }

    /// Whether the database cannot be reached now (a lost PostgreSQL connection).
    pub fn unreachable(&self) -> bool {
        match self {
            Db::Sqlite(_) => false,
            Db::Postgres(c) => c.is_closed(),
        }
    }

    /// Whether no transaction is open (SQLite ends one by itself on some errors).
    pub fn is_autocommit(&self) -> bool {
        match self {
            Db::Sqlite(c) => c.is_autocommit(),
            Db::Postgres(c) => !c.in_transaction(),
        }
    }
}

/// A savepoint of [`Db::savepoint`]; it reads and writes through the [`Db`] it derefs to.
pub struct Savepoint<'a> {
    db: &'a Db,
    open: Cell<bool>,
}

impl Savepoint<'_> {
    /// Keeps the changes (in the enclosing transaction, if any).
    pub fn commit(self) -> rusqlite::Result<()> {
        self.open.set(false);
        self.db.prepare_cached("RELEASE yy_sp")?.execute([])?;
        Ok(())
    }
}

impl std::ops::Deref for Savepoint<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        self.db
    }
}

impl Drop for Savepoint<'_> {
    fn drop(&mut self) {
        if self.open.get() {
            // Nothing to do about a failure here: the enclosing transaction's end says it.
            let _ = self.db.execute_batch("ROLLBACK TO yy_sp; RELEASE yy_sp");
        }
    }
}

/// The parameters of a statement: `()`, `[]`, arrays of one type, `params![...]`, or a
/// slice of `&dyn ToSql`. They bind to `?1`, `?2`, ... in order.
pub trait Params {
    fn each(
        &self,
        bind: &mut dyn FnMut(&dyn ToSql) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()>;
}

impl Params for () {
    fn each(&self, _: &mut dyn FnMut(&dyn ToSql) -> rusqlite::Result<()>) -> rusqlite::Result<()> {
        Ok(())
    }
}

/// `[]`: the empty array literal (its element type could not be inferred otherwise).
impl Params for [&(dyn ToSql + Send + Sync); 0] {
    fn each(&self, _: &mut dyn FnMut(&dyn ToSql) -> rusqlite::Result<()>) -> rusqlite::Result<()> {
        Ok(())
    }
}

impl Params for &[&dyn ToSql] {
    fn each(
        &self,
        bind: &mut dyn FnMut(&dyn ToSql) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        self.iter().try_for_each(|v| bind(*v))
    }
}

macro_rules! params_for_arrays {
    ($($n:literal)+) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn each(
                &self,
                bind: &mut dyn FnMut(&dyn ToSql) -> rusqlite::Result<()>,
            ) -> rusqlite::Result<()> {
                self.iter().try_for_each(|v| bind(v))
            }
        }
    )+};
}
params_for_arrays!(1 2 3 4 5 6 7 8);

/// A prepared statement of either database.
pub struct Statement<'a>(Stmt<'a>);

enum Stmt<'a> {
    Sqlite(rusqlite::Statement<'a>),
    SqliteCached(rusqlite::CachedStatement<'a>),
    Postgres(&'a PgConn, super::pg::conn::Prepared),
}

/// Binds `params` to `?1`, `?2`, ... of a SQLite statement, checking their number.
fn bind_sqlite(stmt: &mut rusqlite::Statement<'_>, params: &dyn Params) -> rusqlite::Result<()> {
    let mut index = 0;
    params.each(&mut |v| {
        index += 1;
        stmt.raw_bind_parameter(index, v)
    })?;
    if index != stmt.parameter_count() {
        return Err(rusqlite::Error::InvalidParameterCount(
            index,
            stmt.parameter_count(),
        ));
    }
    Ok(())
}

/// The values of `params`, as SQLite's storage classes.
pub(super) fn values(params: &dyn Params) -> rusqlite::Result<Vec<Value>> {
    let mut out = Vec::new();
    params.each(&mut |v| {
        out.push(match v.to_sql()? {
            rusqlite::types::ToSqlOutput::Borrowed(r) => owned(r),
            rusqlite::types::ToSqlOutput::Owned(v) => v,
            other => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    format!("a parameter of a kind PostgreSQL cannot take: {other:?}").into(),
                ));
            }
        });
        Ok(())
    })?;
    Ok(out)
}

fn owned(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

impl<'a> Statement<'a> {
    fn sqlite(&mut self) -> Option<&mut rusqlite::Statement<'a>> {
        match &mut self.0 {
            Stmt::Sqlite(s) => Some(s),
            Stmt::SqliteCached(s) => Some(s),
            Stmt::Postgres(..) => None,
        }
    }

    /// Rows changed.
    pub fn execute<P: Params>(&mut self, params: P) -> rusqlite::Result<usize> {
        if let Some(stmt) = self.sqlite() {
            bind_sqlite(stmt, &params)?;
            return stmt.raw_execute();
        }
        let Stmt::Postgres(conn, prepared) = &self.0 else {
            unreachable!()
        };
        conn.execute(prepared, &values(&params)?)
    }

    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> rusqlite::Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        let mut f = Some(f);
        let mut out = None;
        self.for_each_row(&params, &mut |row| {
            if let Some(f) = f.take() {
                out = Some(f(row));
            }
            Ok(false)
        })?;
        out.unwrap_or(Err(rusqlite::Error::QueryReturnedNoRows))
    }

    /// Every row through `f`, collected (the store's lists are bounded by their SQL).
    pub fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> rusqlite::Result<std::vec::IntoIter<rusqlite::Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> rusqlite::Result<T>,
    {
        let mut out = Vec::new();
        self.for_each_row(&params, &mut |row| {
            out.push(f(row));
            Ok(true)
        })?;
        Ok(out.into_iter())
    }

    /// Runs the query and hands each row to `f` until it returns false.
    fn for_each_row(
        &mut self,
        params: &dyn Params,
        f: &mut dyn FnMut(&Row<'_>) -> rusqlite::Result<bool>,
    ) -> rusqlite::Result<()> {
        if let Some(stmt) = self.sqlite() {
            bind_sqlite(stmt, params)?;
            let mut rows = stmt.raw_query();
            while let Some(row) = rows.next()? {
                if !f(&Row::Sqlite(row))? {
                    break;
                }
            }
            return Ok(());
        }
        let Stmt::Postgres(conn, prepared) = &self.0 else {
            unreachable!()
        };
        let (names, rows) = conn.query(prepared, &values(params)?)?;
        for row in rows {
            if !f(&Row::Postgres(&row, &names))? {
                break;
            }
        }
        Ok(())
    }
}

/// A row of a query's result.
pub enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a [Value], &'a [String]),
}

/// A column by its position (from 0) or its name.
pub trait ColumnIndex: rusqlite::RowIndex + Copy + std::fmt::Debug {
    fn position(self, names: &[String]) -> Option<usize>;
}

impl ColumnIndex for usize {
    fn position(self, names: &[String]) -> Option<usize> {
        (self < names.len()).then_some(self)
    }
}

impl ColumnIndex for &str {
    fn position(self, names: &[String]) -> Option<usize> {
        names.iter().position(|n| n.eq_ignore_ascii_case(self))
    }
}

impl Row<'_> {
    /// The column as `T`.
    pub fn get<I: ColumnIndex, T: FromSql>(&self, column: I) -> rusqlite::Result<T> {
        match self {
            Row::Sqlite(r) => r.get(column),
            Row::Postgres(values, names) => {
                let index = column
                    .position(names)
                    .ok_or_else(|| rusqlite::Error::InvalidColumnName(format!("{column:?}")))?;
                let value = ValueRef::from(&values[index]);
                T::column_result(value).map_err(|e| match e {
                    rusqlite::types::FromSqlError::InvalidType => {
                        rusqlite::Error::InvalidColumnType(
                            index,
                            names[index].clone(),
                            value.data_type(),
                        )
                    }
                    other => rusqlite::Error::FromSqlConversionFailure(
                        index,
                        value.data_type(),
                        Box::new(other),
                    ),
                })
            }
        }
    }
}
