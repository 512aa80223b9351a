//! Reading a table's rows in key order, page by page; writing them; and the checksum of a
//! table: SHA-256 over a canonical encoding of every row, the same on both databases.
//!
//! The encoding, version 1: `yy-rows-1\0`, the table's name and its column names (each a
//! u64 length, big-endian, and the bytes), then every row in primary key order, each value
//! in the columns' name order as one tag byte and its payload: 0 NULL; 1 an integer (i64,
//! big-endian); 2 a real (the f64's bits, big-endian); 3 text and 4 a blob (a u64 length,
//! big-endian, then the bytes). So 1 and '1' differ, as do NULL and ''.
//!
//! Key order is SQLite's: integers by value, text byte by byte (PostgreSQL reads text keys
//! in the "C" collation, which is that order). Every page is checked to arrive in it.

use std::cmp::Ordering;

use rusqlite::types::{ToSql, Value};
use sha2::{Digest, Sha256};

use super::tables::{Table, quoted};
use super::{Result, TransferError, db_error};
use crate::server::store::{Db, Dialect};

/// Rows read per query: a page of big rows (a command's result may hold 8 MiB) stays
/// bounded, and a page of small ones is still few round trips.
const PAGE: usize = 256;

/// A table's figures: how many rows, their checksum, and its counter's value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sum {
    pub table: String,
    pub rows: u64,
    pub sha256: String,
    /// The last value its counter handed out (AUTOINCREMENT, identity); None without one.
    pub counter: Option<i64>,
}

/// The checksum's header: what the rows that follow are.
fn header(h: &mut Sha256, t: &Table) {
    h.update(b"yy-rows-1\0");
    let mut put = |s: &str| {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    };
    put(&t.name);
    for c in &t.columns {
        put(&c.name);
    }
}

/// Appends one value's canonical encoding to `out`.
pub fn encode(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(0),
        Value::Integer(i) => {
            out.push(1);
            out.extend(i.to_be_bytes());
        }
        Value::Real(f) => {
            out.push(2);
            out.extend(f.to_bits().to_be_bytes());
        }
        Value::Text(s) => {
            out.push(3);
            out.extend((s.len() as u64).to_be_bytes());
            out.extend(s.as_bytes());
        }
        Value::Blob(b) => {
            out.push(4);
            out.extend((b.len() as u64).to_be_bytes());
            out.extend(b);
        }
    }
}

/// SQLite's order of two values: NULL, then numbers by value, then text and blobs byte by
/// byte.
fn compare(a: &Value, b: &Value) -> Ordering {
    fn class(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Integer(_) | Value::Real(_) => 1,
            Value::Text(_) => 2,
            Value::Blob(_) => 3,
        }
    }
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x.cmp(y),
        (Value::Integer(x), Value::Real(y)) => (*x as f64).total_cmp(y),
        (Value::Real(x), Value::Integer(y)) => x.total_cmp(&(*y as f64)),
        (Value::Real(x), Value::Real(y)) => x.total_cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Blob(x), Value::Blob(y)) => x.cmp(y),
        _ => class(a).cmp(&class(b)),
    }
}

/// Compares two keys value by value.
pub fn compare_keys(a: &[Value], b: &[Value]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| compare(x, y))
        .find(|o| o.is_ne())
        .unwrap_or(a.len().cmp(&b.len()))
}

/// The SELECT of one page: every column in the table's order, keys after `?1...` when
/// `after` (keyset paging), in key order.
fn page_sql(db: &Db, t: &Table, after: bool) -> String {
    let columns: Vec<String> = t.columns.iter().map(|c| quoted(&c.name)).collect();
    let key: Vec<String> = t
        .key
        .iter()
        .map(|k| match db.dialect() {
            Dialect::Postgres if t.is_text(k) => format!("{} COLLATE \"C\"", quoted(k)),
            _ => quoted(k),
        })
        .collect();
    let mut sql = format!("SELECT {} FROM {}", columns.join(", "), quoted(&t.name));
    if after {
        let params: Vec<String> = (1..=t.key.len()).map(|i| format!("?{i}")).collect();
        sql.push_str(&format!(
            " WHERE ({}) > ({})",
            key.join(", "),
            params.join(", ")
        ));
    }
    sql.push_str(&format!(" ORDER BY {} LIMIT {PAGE}", key.join(", ")));
    sql
}

fn as_params(values: &[Value]) -> Vec<&dyn ToSql> {
    values.iter().map(|v| v as &dyn ToSql).collect()
}

/// Reads every row of `t` from `db` in key order, hands each to `each`, and returns the
/// table's figures (its counter left out: see [`counter`]).
pub fn scan(db: &Db, t: &Table, mut each: impl FnMut(&[Value]) -> Result<()>) -> Result<Sum> {
    let fail = |e| db_error(&format!("reading table {}", t.name), e);
    let key_at: Vec<usize> = t
        .key
        .iter()
        .map(|k| t.position(k).expect("a key column is a column"))
        .collect();
    let width = t.columns.len();
    let mut hasher = Sha256::new();
    header(&mut hasher, t);
    let mut rows = 0u64;
    let mut last: Option<Vec<Value>> = None;
    let mut buf = Vec::new();
    loop {
        let sql = page_sql(db, t, last.is_some());
        let mut stmt = db.prepare_cached(&sql).map_err(fail)?;
        let read = |r: &crate::server::store::Row<'_>| {
            (0..width)
                .map(|i| r.get::<_, Value>(i))
                .collect::<rusqlite::Result<Vec<Value>>>()
        };
        let page: Vec<Vec<Value>> = match &last {
            Some(key) => stmt.query_map(&as_params(key)[..], read),
            None => stmt.query_map([], read),
        }
        .map_err(fail)?
        .collect::<rusqlite::Result<_>>()
        .map_err(fail)?;
        drop(stmt);
        let full = page.len() == PAGE;
        for row in page {
            let key: Vec<Value> = key_at.iter().map(|&i| row[i].clone()).collect();
            if let Some(before) = &last
                && compare_keys(before, &key) != Ordering::Less
            {
                return Err(TransferError::Db(format!(
                    "table {} gave its rows out of key order (({}) after ({})): the database's ordering is not the one yy compares in",
                    t.name,
                    shown(&key),
                    shown(before)
                )));
            }
            buf.clear();
            for v in &row {
                encode(v, &mut buf);
            }
            hasher.update(&buf);
            each(&row)?;
            rows += 1;
            last = Some(key);
        }
        if !full {
            break;
        }
    }
    Ok(Sum {
        table: t.name.clone(),
        rows,
        sha256: hex::encode(hasher.finalize()),
        counter: None,
    })
}

fn shown(key: &[Value]) -> String {
    key.iter()
        .map(|v| match v {
            Value::Null => "NULL".to_string(),
            Value::Integer(i) => i.to_string(),
            Value::Real(f) => f.to_string(),
            Value::Text(s) => format!("{:?}", crate::output::cut(s, 40)),
            Value::Blob(b) => format!("{} bytes", b.len()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The number of rows in `t`, counted by the database.
pub fn count(db: &Db, t: &Table) -> Result<u64> {
    let n: i64 = db
        .query_row(
            &format!("SELECT count(*) FROM {}", quoted(&t.name)),
            [],
            |r| r.get(0),
        )
        .map_err(|e| db_error(&format!("counting the rows of {}", t.name), e))?;
    Ok(n as u64)
}

/// Writes rows of `t` (in its columns' order) into `db`.
pub struct Writer {
    sql: String,
    table: String,
}

impl Writer {
    pub fn new(t: &Table) -> Writer {
        let columns: Vec<String> = t.columns.iter().map(|c| quoted(&c.name)).collect();
        let params: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        Writer {
            sql: format!(
                "INSERT INTO {} ({}) VALUES ({})",
                quoted(&t.name),
                columns.join(", "),
                params.join(", ")
            ),
            table: t.name.clone(),
        }
    }

    pub fn write(&self, db: &Db, row: &[Value]) -> Result<()> {
        db.prepare_cached(&self.sql)
            .and_then(|mut s| s.execute(&as_params(row)[..]))
            .map_err(|e| db_error(&format!("writing a row of {}", self.table), e))?;
        Ok(())
    }
}

/// The last value `t`'s counter handed out in `db` (0 when it never did), or None when
/// the table has no counter.
pub fn counter(db: &Db, t: &Table) -> Result<Option<i64>> {
    let Some(column) = &t.counter else {
        return Ok(None);
    };
    let fail = |e| db_error(&format!("reading the counter of {}", t.name), e);
    let value: Option<i64> = match db.dialect() {
        Dialect::Sqlite => match db.query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            [&t.name],
            |r| r.get(0),
        ) {
            Err(rusqlite::Error::QueryReturnedNoRows) => None,
            other => other.map_err(fail)?,
        },
        Dialect::Postgres => db
            .query_row(
                "SELECT pg_sequence_last_value(pg_get_serial_sequence(quote_ident(?1), ?2)::regclass)",
                [t.name.as_str(), column.as_str()],
                |r| r.get(0),
            )
            .map_err(fail)?,
    };
    Ok(Some(value.unwrap_or(0)))
}

/// Sets `t`'s counter in `db` so that the next row gets `last + 1` (0: as if it had never
/// counted).
pub fn set_counter(db: &Db, t: &Table, last: i64) -> Result<()> {
    let Some(column) = &t.counter else {
        return Ok(());
    };
    let fail = |e| db_error(&format!("setting the counter of {}", t.name), e);
    match db.dialect() {
        Dialect::Sqlite => {
            db.execute("DELETE FROM sqlite_sequence WHERE name = ?1", [&t.name])
                .map_err(fail)?;
            if last > 0 {
                db.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
                    rusqlite::params![t.name, last],
                )
                .map_err(fail)?;
            }
        }
        Dialect::Postgres => {
            let sequence = "pg_get_serial_sequence(quote_ident(?1), ?2)::regclass";
            let set = if last > 0 {
                db.query_row(
                    &format!("SELECT setval({sequence}, ?3, true)"),
                    rusqlite::params![t.name, column, last],
                    |r| r.get::<_, i64>(0),
                )
            } else {
                db.query_row(
                    &format!("SELECT setval({sequence}, 1, false)"),
                    rusqlite::params![t.name, column],
                    |r| r.get::<_, i64>(0),
                )
            };
            set.map_err(fail)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(values: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in values {
            encode(v, &mut out);
        }
        out
    }

    #[test]
    fn the_encoding_keeps_types_and_boundaries_apart() {
        let one = encoded(&[Value::Integer(1)]);
        let text_one = encoded(&[Value::Text("1".into())]);
        assert_ne!(one, text_one);
        assert_ne!(
            encoded(&[Value::Null]),
            encoded(&[Value::Text(String::new())])
        );
        assert_ne!(
            encoded(&[Value::Text("ab".into()), Value::Text("c".into())]),
            encoded(&[Value::Text("a".into()), Value::Text("bc".into())])
        );
        assert_ne!(
            encoded(&[Value::Blob(b"x".to_vec())]),
            encoded(&[Value::Text("x".into())])
        );
        assert_ne!(encoded(&[Value::Real(1.0)]), one);
        assert_eq!(one, [1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            encoded(&[Value::Text("é".into())]),
            [3, 0, 0, 0, 0, 0, 0, 0, 2, 0xc3, 0xa9]
        );
    }

    #[test]
    fn keys_compare_in_sqlites_order() {
        let t = |s: &str| Value::Text(s.into());
        assert_eq!(compare_keys(&[t("B")], &[t("a")]), Ordering::Less);
        assert_eq!(compare_keys(&[t("a")], &[t("ab")]), Ordering::Less);
        assert_eq!(compare_keys(&[t("é")], &[t("z")]), Ordering::Greater);
        assert_eq!(
            compare_keys(&[Value::Integer(9)], &[Value::Integer(10)]),
            Ordering::Less
        );
        assert_eq!(
            compare_keys(&[Value::Integer(10)], &[t("1")]),
            Ordering::Less
        );
        assert_eq!(
            compare_keys(&[t("s"), Value::Integer(2)], &[t("s"), Value::Integer(10)]),
            Ordering::Less
        );
        assert_eq!(
            compare_keys(&[Value::Null], &[Value::Integer(0)]),
            Ordering::Less
        );
    }
}
