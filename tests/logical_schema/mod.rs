//! One neutral description of a database schema, read from SQLite's and from PostgreSQL's
//! catalogs, and the readable differences between two of them (tests/pg_schema.rs: both
//! backends must give the same logical schema).

pub mod postgres;
pub mod sqlite;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A column as both databases can say it: the logical type (`text`, `int64`), not-null,
/// the default as written (casts removed), and whether it numbers itself (SQLite's
/// AUTOINCREMENT, PostgreSQL's identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub logical_type: String,
    pub not_null: bool,
    pub default: Option<String>,
    pub auto_increment: bool,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.logical_type)?;
        if self.not_null {
            write!(f, " NOT NULL")?;
        }
        if let Some(d) = &self.default {
            write!(f, " DEFAULT {d}")?;
        }
        if self.auto_increment {
            write!(f, " AUTOINCREMENT")?;
        }
        Ok(())
    }
}

/// A created index (not one a key or UNIQUE constraint made: those are compared as keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub columns: Vec<String>,
    pub unique: bool,
    /// A partial index's predicate, normalized (see [`normalize_sql`]).
    pub predicate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForeignKey {
    pub columns: Vec<String>,
    pub table: String,
    pub references: Vec<String>,
    pub on_delete: String,
    pub on_update: String,
}

/// One table. Constraint names are not compared: SQLite's keys and UNIQUE constraints
/// have none of their own (`sqlite_autoindex_*`), PostgreSQL makes up `*_key`/`*_check`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub primary_key: Vec<String>,
    pub uniques: BTreeSet<Vec<String>>,
    /// CHECK expressions, normalized (see [`normalize_sql`]).
    pub checks: BTreeSet<String>,
    pub foreign_keys: BTreeSet<ForeignKey>,
    pub indexes: BTreeMap<String, Index>,
    /// Trigger names (the bodies are in each dialect's own language).
    pub triggers: BTreeSet<String>,
}

pub type Schema = BTreeMap<String, Table>;

/// Every difference between two descriptions, one readable line each; empty when equal.
pub fn differences(
    left_name: &str,
    left: &Schema,
    right_name: &str,
    right: &Schema,
) -> Vec<String> {
    let mut out = Vec::new();
    for name in left.keys().chain(right.keys()).collect::<BTreeSet<_>>() {
        let (l, r) = match (left.get(name), right.get(name)) {
            (Some(l), Some(r)) => (l, r),
            (Some(_), None) => {
                out.push(format!("table {name}: only in {left_name}"));
                continue;
            }
            _ => {
                out.push(format!("table {name}: only in {right_name}"));
                continue;
            }
        };
        let at = |what: String| format!("table {name}: {what}");
        let l_cols: BTreeMap<_, _> = l.columns.iter().map(|c| (&c.name, c)).collect();
        let r_cols: BTreeMap<_, _> = r.columns.iter().map(|c| (&c.name, c)).collect();
        for col in l_cols.keys().chain(r_cols.keys()).collect::<BTreeSet<_>>() {
            match (l_cols.get(col), r_cols.get(col)) {
                (Some(a), Some(b)) if a != b => out.push(at(format!(
                    "column {col}: {left_name} {a}, {right_name} {b}"
                ))),
                (Some(_), None) => out.push(at(format!("column {col}: only in {left_name}"))),
                (None, Some(_)) => out.push(at(format!("column {col}: only in {right_name}"))),
                _ => {}
            }
        }
        let order = |t: &Table| t.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        if l_cols.keys().eq(r_cols.keys()) && order(l) != order(r) {
            out.push(at(format!(
                "column order: {left_name} {:?}, {right_name} {:?}",
                order(l),
                order(r)
            )));
        }
        if l.primary_key != r.primary_key {
            out.push(at(format!(
                "primary key: {left_name} {:?}, {right_name} {:?}",
                l.primary_key, r.primary_key
            )));
        }
        one_sided(
            &mut out, &at, "unique", &l.uniques, &r.uniques, left_name, right_name,
        );
        one_sided(
            &mut out, &at, "check", &l.checks, &r.checks, left_name, right_name,
        );
        let (l_fks, r_fks) = (&l.foreign_keys, &r.foreign_keys);
        one_sided(
            &mut out,
            &at,
            "foreign key",
            l_fks,
            r_fks,
            left_name,
            right_name,
        );
        one_sided(
            &mut out,
            &at,
            "trigger",
            &l.triggers,
            &r.triggers,
            left_name,
            right_name,
        );
        for index in l
            .indexes
            .keys()
            .chain(r.indexes.keys())
            .collect::<BTreeSet<_>>()
        {
            match (l.indexes.get(index), r.indexes.get(index)) {
                (Some(a), Some(b)) if a != b => out.push(at(format!(
                    "index {index}: {left_name} {a:?}, {right_name} {b:?}"
                ))),
                (Some(_), None) => out.push(at(format!("index {index}: only in {left_name}"))),
                (None, Some(_)) => out.push(at(format!("index {index}: only in {right_name}"))),
                _ => {}
            }
        }
    }
    out
}

fn one_sided<T: fmt::Debug + Ord>(
    out: &mut Vec<String>,
    at: &dyn Fn(String) -> String,
    what: &str,
    left: &BTreeSet<T>,
    right: &BTreeSet<T>,
    left_name: &str,
    right_name: &str,
) {
    for item in left.difference(right) {
        out.push(at(format!("{what} {item:?}: only in {left_name}")));
    }
    for item in right.difference(left) {
        out.push(at(format!("{what} {item:?}: only in {right_name}")));
    }
}

/// One spelling of a CHECK expression or index predicate for both dialects: PostgreSQL
/// stores `(state = ANY (ARRAY['a'::text, 'b'::text]))` for SQLite's `state IN ('a', 'b')`,
/// and `<>` for `!=`. Casts, parentheses and spacing go, keywords are lowercased; string
/// literals are kept as they are.
pub fn normalize_sql(expr: &str) -> String {
    let expr = expr
        .replace("::text", "")
        .replace("::bigint", "")
        .replace("= ANY (ARRAY[", " IN (")
        .replace("])", ")")
        .replace("!=", "<>");
    let mut out = String::new();
    let mut in_string = false;
    for c in expr.chars() {
        if c == '\'' {
            in_string = !in_string;
        }
        if in_string || c == '\'' {
            out.push(c);
        } else if !c.is_whitespace() && c != '(' && c != ')' {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// A default as written, without PostgreSQL's cast (`'none'::text` is SQLite's `'none'`).
pub fn normalize_default(default: &str) -> String {
    default
        .trim_end_matches("::text")
        .trim_end_matches("::bigint")
        .to_string()
}

#[test]
fn the_comparison_names_each_difference() {
    let column = |name: &str, logical_type: &str| Column {
        name: name.into(),
        logical_type: logical_type.into(),
        not_null: true,
        default: None,
        auto_increment: false,
    };
    let mut left = Schema::new();
    left.insert(
        "t".into(),
        Table {
            columns: vec![column("a", "text"), column("b", "int64")],
            primary_key: vec!["a".into()],
            ..Table::default()
        },
    );
    left.insert("gone".into(), Table::default());
    assert!(differences("l", &left, "r", &left.clone()).is_empty());

    let mut right = left.clone();
    right.remove("gone");
    let t = right.get_mut("t").unwrap();
    t.columns = vec![column("b", "text"), column("a", "text")];
    t.primary_key = vec!["b".into()];
    t.checks.insert("b>0".into());
    t.foreign_keys.insert(ForeignKey {
        columns: vec!["b".into()],
        table: "u".into(),
        references: vec!["id".into()],
        on_delete: "NO ACTION".into(),
        on_update: "NO ACTION".into(),
    });
    t.indexes.insert(
        "t_b".into(),
        Index {
            columns: vec!["b".into()],
            unique: false,
            predicate: None,
        },
    );
    let found = differences("l", &left, "r", &right);
    let expected = [
        "table gone: only in l",
        "table t: column b: l int64 NOT NULL, r text NOT NULL",
        "table t: column order: l [\"a\", \"b\"], r [\"b\", \"a\"]",
        "table t: primary key: l [\"a\"], r [\"b\"]",
        "table t: check \"b>0\": only in r",
        "table t: foreign key ForeignKey { columns: [\"b\"], table: \"u\", references: [\"id\"], on_delete: \"NO ACTION\", on_update: \"NO ACTION\" }: only in r",
        "table t: index t_b: only in r",
    ];
    assert_eq!(found, expected, "{}", found.join("\n"));
}

#[test]
fn both_dialects_normalize_to_one_spelling() {
    assert_eq!(
        normalize_sql("state IN\n        ('pending', 'leased')"),
        normalize_sql("(state = ANY (ARRAY['pending'::text, 'leased'::text]))")
    );
    assert_eq!(
        normalize_sql("admin IN (0, 1)"),
        normalize_sql("(admin = ANY (ARRAY[(0)::bigint, (1)::bigint]))")
    );
    assert_eq!(
        normalize_sql("state != 'removed'"),
        normalize_sql("(state <> 'removed'::text)")
    );
    assert_ne!(normalize_sql("x IS NULL"), normalize_sql("x IS NOT NULL"));
    // String literals keep their case and spaces.
    assert_ne!(normalize_sql("x = 'A b'"), normalize_sql("x = 'ab'"));
    assert_eq!(
        sqlite::checks(
            "CREATE TABLE t (a TEXT CHECK (a IN ('x', 'y')), -- CHECK (no)\n check_b INTEGER CHECK (check_b = 1))"
        ),
        ["a IN ('x', 'y')", "check_b = 1"]
    );
}
