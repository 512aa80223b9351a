//! PostgreSQL's side: `information_schema.columns` and `pg_catalog`.

use tokio_postgres::Client;

use super::{Column, ForeignKey, Index, Schema, Table, normalize_default, normalize_sql};

/// The migration runner's version table: PostgreSQL's counterpart of SQLite's
/// `PRAGMA user_version`, outside the logical schema.
const VERSION_TABLE: &str = "schema_version";

fn logical_type(data_type: &str) -> String {
    match data_type {
        "text" => "text",
        "bigint" => "int64",
        "bytea" => "bytes",
        "double precision" => "float64",
        // Anything else (a 32-bit `integer`, varchar) differs from SQLite's and shows as is.
        other => other,
    }
    .to_string()
}

fn action(code: &str) -> String {
    match code {
        "a" => "NO ACTION",
        "r" => "RESTRICT",
        "c" => "CASCADE",
        "n" => "SET NULL",
        "d" => "SET DEFAULT",
        other => panic!("unknown foreign key action {other:?}"),
    }
    .to_string()
}

/// `ARRAY(...)` of a key's column names in key order; `KEYS` is the attnum array, `REL` its table.
const KEY_NAMES: &str = "ARRAY(SELECT a.attname::text FROM unnest(KEYS) WITH ORDINALITY k(n, o)
    JOIN pg_catalog.pg_attribute a ON a.attrelid = REL AND a.attnum = k.n ORDER BY k.o)";

pub async fn schema(client: &Client) -> Schema {
    let mut schema = Schema::new();
    let tables = client
        .query(
            "SELECT c.relname::text FROM pg_catalog.pg_class c
             WHERE c.relnamespace = to_regnamespace(current_schema()) AND c.relkind IN ('r', 'p')
               AND c.relname <> $1",
            &[&VERSION_TABLE],
        )
        .await
        .unwrap();
    for row in tables {
        let name: String = row.get(0);
        let mut table = Table::default();
        for c in client
            .query(
                "SELECT column_name::text, data_type::text, is_nullable::text,
                        column_default::text, is_identity::text
                 FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = $1
                 ORDER BY ordinal_position",
                &[&name],
            )
            .await
            .unwrap()
        {
            table.columns.push(Column {
                name: c.get(0),
                logical_type: logical_type(c.get(1)),
                not_null: c.get::<_, String>(2) == "NO",
                default: c.get::<_, Option<String>>(3).map(|d| normalize_default(&d)),
                auto_increment: c.get::<_, String>(4) == "YES",
            });
        }
        let constraints = format!(
            "SELECT con.contype::text, pg_get_constraintdef(con.oid), {}, \
                    CASE WHEN con.confrelid = 0 THEN NULL ELSE con.confrelid::regclass::text END, \
                    {}, con.confdeltype::text, con.confupdtype::text \
             FROM pg_catalog.pg_constraint con WHERE con.conrelid = to_regclass($1)",
            KEY_NAMES
                .replace("KEYS", "con.conkey")
                .replace("REL", "con.conrelid"),
            KEY_NAMES
                .replace("KEYS", "con.confkey")
                .replace("REL", "con.confrelid"),
        );
        for con in client.query(&constraints, &[&name]).await.unwrap() {
            let columns: Vec<String> = con.get(2);
            match con.get::<_, String>(0).as_str() {
                "p" => table.primary_key = columns,
                "u" => {
                    table.uniques.insert(columns);
                }
                "c" => {
                    let def: String = con.get(1);
                    let expr = def.strip_prefix("CHECK ").expect("CHECK definition");
                    table.checks.insert(normalize_sql(expr));
                }
                "f" => {
                    table.foreign_keys.insert(ForeignKey {
                        columns,
                        table: con.get(3),
                        references: con.get(4),
                        on_delete: action(con.get(5)),
                        on_update: action(con.get(6)),
                    });
                }
                other => panic!("table {name}: a constraint of kind {other:?}: teach the test it"),
            }
        }
        let indexes = format!(
            "SELECT i.relname::text, ix.indisunique, pg_get_expr(ix.indpred, ix.indrelid), {}
             FROM pg_catalog.pg_index ix JOIN pg_catalog.pg_class i ON i.oid = ix.indexrelid
             WHERE ix.indrelid = to_regclass($1) AND NOT EXISTS (
                 SELECT 1 FROM pg_catalog.pg_constraint con
                 WHERE con.conrelid = ix.indrelid AND con.conindid = ix.indexrelid)",
            KEY_NAMES
                .replace("KEYS", "ix.indkey::int2[]")
                .replace("REL", "ix.indrelid"),
        );
        for ix in client.query(&indexes, &[&name]).await.unwrap() {
            let predicate: Option<String> = ix.get(2);
            let entry = Index {
                unique: ix.get(1),
                predicate: predicate.map(|p| normalize_sql(&p)),
                columns: ix.get(3),
            };
            table.indexes.insert(ix.get(0), entry);
        }
        let triggers = "SELECT tgname::text FROM pg_catalog.pg_trigger
                        WHERE tgrelid = to_regclass($1) AND NOT tgisinternal";
        for t in client.query(triggers, &[&name]).await.unwrap() {
            table.triggers.insert(t.get(0));
        }
        schema.insert(name, table);
    }
    schema
}
