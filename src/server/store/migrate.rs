//! Schema versions tracked with `PRAGMA user_version`. A fresh database gets the current
//! schema in one step; an older one runs each missing migration in its own transaction.
//! A database from a newer yy is refused, never touched.

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Every migration, in order; migration `i` (0-based) brings the schema to version `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/0001_init.sql"),
    include_str!("../../../migrations/0002_runner_commands.sql"),
    include_str!("../../../migrations/0003_sessions.sql"),
    include_str!("../../../migrations/0004_computers.sql"),
    include_str!("../../../migrations/0005_egress.sql"),
    include_str!("../../../migrations/0006_accounts_tokens.sql"),
    include_str!("../../../migrations/0007_artifacts.sql"),
    include_str!("../../../migrations/0008_teams.sql"),
    include_str!("../../../migrations/0009_computer_control.sql"),
    include_str!("../../../migrations/0010_runner_image_history.sql"),
    include_str!("../../../migrations/0011_server_identity.sql"),
    include_str!("../../../migrations/0012_team_tool_ids_at_rest.sql"),
    include_str!("../../../migrations/0013_workspace_usage.sql"),
    include_str!("../../../migrations/0014_computer_idle.sql"),
    include_str!("../../../migrations/0015_turn_waits.sql"),
    include_str!("../../../migrations/0016_runner_token_rotation.sql"),
    include_str!("../../../migrations/0017_scrape_tokens.sql"),
    include_str!("../../../migrations/0018_computer_grants.sql"),
    include_str!("../../../migrations/0019_agent_browser.sql"),
    include_str!("../../../migrations/0020_browser_controls.sql"),
    include_str!("../../../migrations/0021_turn_wait_order.sql"),
    include_str!("../../../migrations/0022_replicas.sql"),
    include_str!("../../../migrations/0023_replica_peers.sql"),
    include_str!("../../../migrations/0024_artifact_chunks.sql"),
    include_str!("../../../migrations/0025_pending_counts.sql"),
];

/// The current schema, equal to what all migrations produce from an empty database.
const SCHEMA: &str = include_str!("schema.sql");

pub const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

fn version(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

fn newer(found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: String::new(),
        found,
        known: LATEST_VERSION,
    }
}

/// Brings the database to [`LATEST_VERSION`].
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    // Check before taking the write lock: a newer database must not even be locked.
    let found = version(conn)?;
    if found > LATEST_VERSION {
        return Err(newer(found));
    }
    // IMMEDIATE: two processes opening the same new database cannot both migrate it.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = version(&tx)?;
    if found > LATEST_VERSION {
        return Err(newer(found));
    }
    let empty: bool = tx.query_row(
        "SELECT count(*) = 0 FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
        [],
        |r| r.get(0),
    )?;
    if found == 0 && empty {
        tx.execute_batch(SCHEMA)?;
        tx.pragma_update(None, "user_version", LATEST_VERSION)?;
        tx.commit()?;
        return Ok(());
    }
    tx.commit()?;
    migrate_stepwise(conn)
}

/// Runs the missing migrations one by one, each in its own transaction.
pub fn migrate_stepwise(conn: &mut Connection) -> Result<(), StoreError> {
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = version(&tx)?;
        if found > LATEST_VERSION {
            return Err(newer(found));
        }
        if found == LATEST_VERSION {
            return Ok(());
        }
        tx.execute_batch(MIGRATIONS[found as usize])?;
        tx.pragma_update(None, "user_version", found + 1)?;
        tx.commit()?;
    }
}

/// Creates the current schema directly (for comparing with the migrated one).
pub fn fresh_schema(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    tx.execute_batch(SCHEMA)?;
    tx.pragma_update(None, "user_version", LATEST_VERSION)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_of(conn: &Connection) -> Vec<(String, String, String)> {
        let mut stmt = conn
            .prepare(
                "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
            )
            .unwrap();
        stmt.query_map([], |r| {
            let sql: Option<String> = r.get(2)?;
            // Compare the statements, not their comments or spacing (ALTER TABLE splices
            // added columns into the stored text with its own spacing).
            let sql: String = sql
                .unwrap_or_default()
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<String>()
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            Ok((r.get(0)?, r.get(1)?, sql))
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
    }

    #[test]
    fn migrations_from_empty_match_fresh_schema() {
        let mut migrated = Connection::open_in_memory().unwrap();
        migrate_stepwise(&mut migrated).unwrap();
        let mut fresh = Connection::open_in_memory().unwrap();
        fresh_schema(&mut fresh).unwrap();
        assert_eq!(schema_of(&migrated), schema_of(&fresh));
        assert_eq!(version(&migrated).unwrap(), LATEST_VERSION);
        assert!(!schema_of(&fresh).is_empty());
    }

    #[test]
    fn migrating_twice_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let before = schema_of(&conn);
        migrate(&mut conn).unwrap();
        migrate_stepwise(&mut conn).unwrap();
        assert_eq!(before, schema_of(&conn));
    }

    #[test]
    fn newer_database_is_refused_and_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", LATEST_VERSION + 1)
            .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert!(
            matches!(err, StoreError::NewerSchema { found, .. } if found == LATEST_VERSION + 1)
        );
        assert!(schema_of(&conn).is_empty());
    }
}
