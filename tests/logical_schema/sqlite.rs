//! SQLite's side: `sqlite_master` and the `pragma_*` table functions.

use std::collections::BTreeMap;

use super::{Column, ForeignKey, Index, Schema, Table, normalize_default, normalize_sql};

/// The text of `sql` without `--` comments (outside string literals).
fn without_comments(sql: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            in_string = !in_string;
        } else if !in_string && c == '-' && chars.peek() == Some(&'-') {
            for c in chars.by_ref() {
                if c == '\n' {
                    break;
                }
            }
            out.push('\n');
            continue;
        }
        out.push(c);
    }
    out
}

/// The expressions of every `CHECK (...)` in a CREATE TABLE statement.
pub fn checks(create: &str) -> Vec<String> {
    let sql = without_comments(create);
    let upper = sql.to_uppercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = upper[from..].find("CHECK").map(|i| i + from) {
        from = at + "CHECK".len();
        // Only the keyword, not a name that contains it (`check_result`).
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if word(upper[..at].chars().next_back()) || word(upper[from..].chars().next()) {
            continue;
        }
        let open = from + sql[from..].find('(').expect("CHECK without (");
        let (mut depth, mut in_string) = (0, false);
        for (i, c) in sql[open..].char_indices() {
            match c {
                '\'' => in_string = !in_string,
                '(' if !in_string => depth += 1,
                ')' if !in_string => {
                    depth -= 1;
                    if depth == 0 {
                        found.push(sql[open + 1..open + i].to_string());
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

fn logical_type(declared: &str) -> String {
    match declared.to_uppercase().as_str() {
        "TEXT" => "text",
        // SQLite's INTEGER holds 64 bits.
        "INTEGER" => "int64",
        "BLOB" => "bytes",
        "REAL" => "float64",
        other => {
            panic!("a SQLite column of type {other:?}: teach tests/pg_schema.rs its logical type")
        }
    }
    .to_string()
}

pub fn schema(conn: &rusqlite::Connection) -> Schema {
    let query = |sql: &str, arg: &str| -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_map([arg], |r| (0..n).map(|i| r.get(i)).collect())
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let text = |v: &rusqlite::types::Value| match v {
        rusqlite::types::Value::Text(s) => Some(s.clone()),
        rusqlite::types::Value::Null => None,
        other => panic!("expected text, got {other:?}"),
    };
    let int = |v: &rusqlite::types::Value| match v {
        rusqlite::types::Value::Integer(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    };
    let mut schema = Schema::new();
    let tables = query(
        "SELECT name, sql FROM sqlite_master WHERE type = ?1 AND name NOT LIKE 'sqlite_%'",
        "table",
    );
    for row in tables {
        let (name, create) = (text(&row[0]).unwrap(), text(&row[1]).unwrap());
        let mut table = Table::default();
        let autoincrement = create.to_uppercase().contains("AUTOINCREMENT");
        let mut pk = Vec::new();
        for c in query(
            "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) ORDER BY cid",
            &name,
        ) {
            let (col, declared, pk_pos) = (text(&c[0]).unwrap(), text(&c[1]).unwrap(), int(&c[4]));
            if pk_pos > 0 {
                pk.push((pk_pos, col.clone()));
            }
            table.columns.push(Column {
                logical_type: logical_type(&declared),
                // PostgreSQL's key columns are NOT NULL; SQLite's non-INTEGER ones accept
                // NULL by a legacy quirk yy never relies on (it always writes the ids).
                not_null: int(&c[2]) == 1 || pk_pos > 0,
                default: text(&c[3]).map(|d| normalize_default(&d)),
                // Only an INTEGER PRIMARY KEY can be AUTOINCREMENT.
                auto_increment: autoincrement && pk_pos > 0 && declared == "INTEGER",
                name: col,
            });
        }
        pk.sort();
        table.primary_key = pk.into_iter().map(|(_, c)| c).collect();
        table.checks = checks(&create).iter().map(|c| normalize_sql(c)).collect();
        table.triggers = query(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1",
            &name,
        )
        .iter()
        .filter_map(|r| text(&r[0]))
        .collect();
        for ix in query(
            "SELECT il.name, il.\"unique\", il.origin, m.sql FROM pragma_index_list(?1) il
             LEFT JOIN sqlite_master m ON m.type = 'index' AND m.name = il.name",
            &name,
        ) {
            let index = text(&ix[0]).unwrap();
            let columns: Vec<String> = query(
                "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
                &index,
            )
            .iter()
            .map(|r| text(&r[0]).expect("an index on an expression"))
            .collect();
            match text(&ix[2]).unwrap().as_str() {
                "pk" => {}
                "u" => {
                    table.uniques.insert(columns);
                }
                _ => {
                    let sql = without_comments(&text(&ix[3]).unwrap());
                    let predicate = sql
                        .to_uppercase()
                        .find(" WHERE ")
                        .map(|at| normalize_sql(&sql[at + " WHERE ".len()..]));
                    let unique = int(&ix[1]) == 1;
                    let entry = Index {
                        columns,
                        unique,
                        predicate,
                    };
                    table.indexes.insert(index, entry);
                }
            }
        }
        let mut fks: BTreeMap<i64, ForeignKey> = BTreeMap::new();
        for fk in query(
            "SELECT id, \"table\", \"from\", \"to\", on_delete, on_update
             FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            &name,
        ) {
            let entry = fks.entry(int(&fk[0])).or_insert_with(|| ForeignKey {
                columns: Vec::new(),
                table: text(&fk[1]).unwrap(),
                references: Vec::new(),
                on_delete: text(&fk[4]).unwrap(),
                on_update: text(&fk[5]).unwrap(),
            });
            entry.columns.push(text(&fk[2]).unwrap());
            // yy names the referenced columns every time (a bare REFERENCES t would be NULL).
            entry
                .references
                .push(text(&fk[3]).expect("REFERENCES without columns"));
        }
        table.foreign_keys = fks.into_values().collect();
        schema.insert(name, table);
    }
    schema
}
