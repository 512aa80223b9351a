//! The tables a transfer copies, read from each database's own catalog (SQLite's
//! `sqlite_schema` and pragmas, PostgreSQL's `pg_catalog`), and the order that satisfies
//! their foreign keys.

use std::collections::{BTreeMap, BTreeSet};

use super::{Result, TransferError, db_error};
use crate::server::store::{Db, Dialect};

/// Tables that are not copied, compared or counted: bookkeeping of the database or of its
/// processes, not the deployment's data. `schema_version` is PostgreSQL's version row (each
/// side keeps its own); `replicas` are the heartbeats of the `yy serve` processes on the
/// source, which are stopped. SQLite's own `sqlite_*` tables are never listed.
pub const NOT_COPIED: &[&str] = &["schema_version", "replicas"];

/// Tables the store fills when it creates the schema: a fresh target has rows there, which
/// the copy replaces with the source's (the server's identity moves with its data).
pub const MADE_WITH_SCHEMA: &[&str] = &["server_identity"];

/// One table as a database's catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    /// Every column, sorted by name: the order rows are read, written and encoded in.
    pub columns: Vec<Column>,
    /// The primary key's columns in the key's order: the order rows are read in.
    pub key: Vec<String>,
    /// The tables its foreign keys point to (itself left out).
    pub parents: BTreeSet<String>,
    /// The column a counter numbers (SQLite's AUTOINCREMENT, a PostgreSQL identity).
    pub counter: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// Holds text: PostgreSQL orders it in the "C" collation, byte by byte as SQLite does.
    pub text: bool,
}

impl Table {
    pub fn is_text(&self, column: &str) -> bool {
        self.columns.iter().any(|c| c.name == column && c.text)
    }

    pub fn position(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == column)
    }
}

/// `name` quoted as an SQL identifier (the same on both databases).
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every table of `db` that a transfer copies, parents before children.
pub fn read(db: &Db) -> Result<Vec<Table>> {
    let mut tables = Vec::new();
    for name in table_names(db)? {
        if NOT_COPIED.contains(&name.as_str()) {
            continue;
        }
        tables.push(describe(db, &name)?);
    }
    in_dependency_order(tables)
}

fn strings(db: &Db, sql: &str, param: Option<&str>) -> Result<Vec<String>> {
    let read = |sql: &str| -> rusqlite::Result<Vec<String>> {
        let mut stmt = db.prepare(sql)?;
        let rows = match param {
            Some(p) => stmt.query_map([p], |r| r.get(0))?,
            None => stmt.query_map([], |r| r.get(0))?,
        };
        rows.collect()
    };
    read(sql).map_err(|e| db_error("reading the catalog", e))
}

fn table_names(db: &Db) -> Result<Vec<String>> {
    let sql = match db.dialect() {
        Dialect::Sqlite => {
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        }
        Dialect::Postgres => {
            "SELECT c.relname::text FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
        }
    };
    let mut names = strings(db, sql, None)?;
    names.sort();
    Ok(names)
}

fn describe(db: &Db, name: &str) -> Result<Table> {
    let fail = |e| db_error(&format!("reading the catalog of table {name}"), e);
    let (mut columns, key, parents, counter) = match db.dialect() {
        Dialect::Sqlite => {
            let mut stmt = db
                .prepare("SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid")
                .map_err(fail)?;
            let rows: Vec<(String, String, i64)> = stmt
                .query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(fail)?
                .collect::<rusqlite::Result<_>>()
                .map_err(fail)?;
            let mut keyed: Vec<(i64, String)> = rows
                .iter()
                .filter(|(_, _, pk)| *pk > 0)
                .map(|(n, _, pk)| (*pk, n.clone()))
                .collect();
            keyed.sort();
            let key: Vec<String> = keyed.into_iter().map(|(_, n)| n).collect();
            let columns: Vec<Column> = rows
                .iter()
                .map(|(n, ty, _)| Column {
                    name: n.clone(),
                    text: ty.to_ascii_uppercase().contains("TEXT"),
                })
                .collect();
            let parents = strings(
                db,
                "SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?1)",
                Some(name),
            )?;
            let sql = strings(
                db,
                "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                Some(name),
            )?;
            let autoincrement = sql
                .first()
                .is_some_and(|s| s.to_ascii_uppercase().contains("AUTOINCREMENT"));
            let counter = (autoincrement && key.len() == 1).then(|| key[0].clone());
            (columns, key, parents, counter)
        }
        Dialect::Postgres => {
            let mut stmt = db
                .prepare(
                    "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attidentity <> ''
                     FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = quote_ident(?1)::regclass AND a.attnum > 0 AND NOT a.attisdropped
                     ORDER BY a.attnum",
                )
                .map_err(fail)?;
            let rows: Vec<(String, String, bool)> = stmt
                .query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(fail)?
                .collect::<rusqlite::Result<_>>()
                .map_err(fail)?;
            let columns: Vec<Column> = rows
                .iter()
                .map(|(n, ty, _)| Column {
                    name: n.clone(),
                    text: ty == "text" || ty.starts_with("character"),
                })
                .collect();
            let counter = rows
                .iter()
                .find(|(_, _, identity)| *identity)
                .map(|(n, _, _)| n.clone());
            let key = strings(
                db,
                "SELECT a.attname::text FROM pg_catalog.pg_index i
                 JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                 WHERE i.indrelid = quote_ident(?1)::regclass AND i.indisprimary
                 ORDER BY array_position(i.indkey::int2[], a.attnum)",
                Some(name),
            )?;
            let parents = strings(
                db,
                "SELECT DISTINCT r.relname::text FROM pg_catalog.pg_constraint k
                 JOIN pg_catalog.pg_class r ON r.oid = k.confrelid
                 WHERE k.contype = 'f' AND k.conrelid = quote_ident(?1)::regclass",
                Some(name),
            )?;
            (columns, key, parents, counter)
        }
    };
    if key.is_empty() {
        return Err(TransferError::Schema(format!(
            "table {name} has no primary key, so its rows have no order to copy and compare in"
        )));
    }
    columns.sort_by(|a: &Column, b: &Column| a.name.cmp(&b.name));
    Ok(Table {
        name: name.to_string(),
        columns,
        key,
        parents: parents.into_iter().filter(|p| p != name).collect(),
        counter,
    })
}

/// `tables` ordered so that every table comes after the tables its foreign keys point to
/// (among those listed), the alphabetically first of the ready ones next: the same order
/// from the same schema. A cycle of foreign keys is refused.
pub fn in_dependency_order(tables: Vec<Table>) -> Result<Vec<Table>> {
    let names: BTreeSet<String> = tables.iter().map(|t| t.name.clone()).collect();
    let mut waiting: BTreeMap<String, Table> =
        tables.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut placed = BTreeSet::new();
    let mut ordered = Vec::with_capacity(waiting.len());
    while !waiting.is_empty() {
        let ready = waiting
            .values()
            .find(|t| {
                t.parents
                    .iter()
                    .all(|p| placed.contains(p) || !names.contains(p))
            })
            .map(|t| t.name.clone());
        let Some(ready) = ready else {
            let stuck: Vec<&str> = waiting.keys().map(String::as_str).collect();
            return Err(TransferError::Schema(format!(
                "the foreign keys of tables {} form a cycle: no order copies them",
                stuck.join(", ")
            )));
        };
        let table = waiting.remove(&ready).expect("listed");
        placed.insert(ready);
        ordered.push(table);
    }
    Ok(ordered)
}

/// Checks that `target` has the tables of `source`, each with the same columns and key;
/// says what differs otherwise.
pub fn same_schema(source: &[Table], target: &[Table]) -> Result<()> {
    let by_name = |ts: &[Table]| -> BTreeMap<String, Table> {
        ts.iter().map(|t| (t.name.clone(), t.clone())).collect()
    };
    let (s, t) = (by_name(source), by_name(target));
    let mut differences = Vec::new();
    for name in s.keys().filter(|n| !t.contains_key(*n)) {
        differences.push(format!("table {name} is missing"));
    }
    for name in t.keys().filter(|n| !s.contains_key(*n)) {
        differences.push(format!("table {name} is extra"));
    }
    for (name, a) in &s {
        let Some(b) = t.get(name) else { continue };
        let cols = |x: &Table| x.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        if cols(a) != cols(b) {
            differences.push(format!(
                "table {name} has columns ({}) in the source and ({}) in the target",
                cols(a).join(", "),
                cols(b).join(", ")
            ));
        }
        if a.key != b.key {
            differences.push(format!(
                "table {name} has the key ({}) in the source and ({}) in the target",
                a.key.join(", "),
                b.key.join(", ")
            ));
        }
    }
    if differences.is_empty() {
        return Ok(());
    }
    Err(TransferError::Schema(format!(
        "the target's tables are not the source's, although both are at the same schema version: {}",
        differences.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, parents: &[&str]) -> Table {
        Table {
            name: name.into(),
            columns: vec![],
            key: vec!["id".into()],
            parents: parents.iter().map(|p| p.to_string()).collect(),
            counter: None,
        }
    }

    fn names(ts: &[Table]) -> Vec<&str> {
        ts.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn parents_come_before_children_and_ties_go_alphabetically() {
        let ordered = in_dependency_order(vec![
            table("sessions", &["agents", "accounts"]),
            table("agents", &["accounts", "profiles"]),
            table("profiles", &[]),
            table("accounts", &[]),
            table("audit_log", &[]),
            // A parent outside the copied set does not hold anything back.
            table("notes", &["replicas"]),
        ])
        .unwrap();
        assert_eq!(
            names(&ordered),
            [
                "accounts",
                "audit_log",
                "notes",
                "profiles",
                "agents",
                "sessions"
            ]
        );
    }

    #[test]
    fn a_cycle_of_foreign_keys_is_refused_with_its_tables() {
        let e = in_dependency_order(vec![
            table("a", &["b"]),
            table("b", &["a"]),
            table("c", &[]),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("a, b"), "{e}");
    }

    #[test]
    fn the_schema_of_this_yy_has_keys_and_an_order() {
        let mut conn = Db::open_in_memory().unwrap();
        crate::server::store::migrate(conn.sqlite_mut().unwrap()).unwrap();
        let tables = read(&conn).unwrap();
        let order = names(&tables);
        let at = |n: &str| order.iter().position(|t| *t == n).unwrap();
        assert!(at("accounts") < at("agents") && at("agents") < at("sessions"));
        assert!(at("subtasks") < at("subtask_deps"));
        assert!(!order.contains(&"replicas") && order.contains(&"server_identity"));
        let counters: Vec<(&str, &str)> = tables
            .iter()
            .filter_map(|t| Some((t.name.as_str(), t.counter.as_deref()?)))
            .collect();
        assert_eq!(counters, [("audit_log", "seq"), ("runner_commands", "seq")]);
        same_schema(&tables, &tables).unwrap();
        let mut other = tables.clone();
        other.retain(|t| t.name != "goals");
        let e = same_schema(&tables, &other).unwrap_err();
        assert!(e.to_string().contains("table goals is missing"), "{e}");
    }
}
