//! Schema versions of a PostgreSQL database, kept in the one-row table `schema_version`
//! (SQLite keeps them in `PRAGMA user_version`). The numbers are SQLite's: a PostgreSQL
//! database at version N has the logical schema of a SQLite database at version N.
//!
//! A fresh database gets the current schema (`schema_pg.sql`) in one transaction; an older
//! one runs each missing migration in its own; one from a newer yy is refused, untouched.
//! Every change runs under a transaction-scoped advisory lock: replicas that start at once
//! migrate one after another, and the later ones find the work done.

use tokio_postgres::{Client, GenericClient};

use super::PgError;
use crate::server::store::{LATEST_VERSION, StoreError};

/// The current schema in PostgreSQL's dialect: SQLite's `schema.sql`, table for table.
const SCHEMA: &str = include_str!("../schema_pg.sql");

/// The version of the first PostgreSQL databases: PostgreSQL support began with it, so
/// there are no PostgreSQL migrations to versions before it.
pub const FIRST_VERSION: i64 = 17;

/// PostgreSQL's migrations after [`FIRST_VERSION`], in order: `MIGRATIONS[i]` brings a
/// database from `FIRST_VERSION + i` to `FIRST_VERSION + i + 1`, the change SQLite's
/// migration of that number makes. Each new SQLite migration needs its entry here (and
/// `schema_pg.sql` the change); they live in `migrations/postgres/`. A unit test and
/// tests/pg_schema.rs check both.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../../migrations/postgres/0018_computer_grants.sql"),
    include_str!("../../../../migrations/postgres/0019_agent_browser.sql"),
    include_str!("../../../../migrations/postgres/0020_browser_controls.sql"),
    include_str!("../../../../migrations/postgres/0021_turn_wait_order.sql"),
    include_str!("../../../../migrations/postgres/0022_replicas.sql"),
    include_str!("../../../../migrations/postgres/0023_replica_peers.sql"),
    include_str!("../../../../migrations/postgres/0024_artifact_chunks.sql"),
    include_str!("../../../../migrations/postgres/0025_pending_counts.sql"),
];

/// The advisory lock (`pg_advisory_xact_lock`) held while the schema changes: the ASCII
/// of "yy_schem". Other once-only work takes keys of its own.
pub const MIGRATION_LOCK: i64 = 0x7979_5f73_6368_656d;

/// Where the version lives; created with the schema, in the same transaction.
const VERSION_TABLE: &str = "CREATE TABLE schema_version (
    singleton bigint PRIMARY KEY CHECK (singleton = 1),
    version   bigint NOT NULL
)";

fn newer(found: i64) -> PgError {
    // The caller names the database: only it knows how to say which without its password.
    PgError::Store(StoreError::NewerSchema {
        path: String::new(),
        found,
        known: LATEST_VERSION,
    })
}

/// The database's schema version; 0 when it has none (a fresh database).
pub async fn schema_version(client: &impl GenericClient) -> Result<i64, PgError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_opt(
            "SELECT version FROM schema_version WHERE singleton = 1",
            &[],
        )
        .await?;
    Ok(row.map_or(0, |r| r.get(0)))
}

/// Whether the database's current schema has no relation yet (tables, views, sequences).
async fn is_empty(client: &impl GenericClient) -> Result<bool, PgError> {
    let row = client
        .query_one(
            "SELECT count(*) = 0 FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// SQLite's functions that the store's SQL uses, in PostgreSQL (`functions.sql`).
const FUNCTIONS: &str = include_str!("functions.sql");

/// Brings the database to [`LATEST_VERSION`] and (re)makes the store's SQL functions.
pub async fn migrate(client: &mut Client) -> Result<(), PgError> {
    migrate_schema(client).await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(FUNCTIONS).await?;
    tx.commit().await?;
    Ok(())
}

async fn migrate_schema(client: &mut Client) -> Result<(), PgError> {
    // Without the lock first: a replica starting on a current database (the usual case)
    // waits for nobody, and a newer database is not even locked.
    let found = schema_version(client).await?;
    if found > LATEST_VERSION {
        return Err(newer(found));
    }
    if found == LATEST_VERSION {
        return Ok(());
    }
    loop {
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        // Read again under the lock: another replica may have migrated meanwhile.
        let found = schema_version(&tx).await?;
        if found > LATEST_VERSION {
            return Err(newer(found));
        }
        if found == LATEST_VERSION {
            tx.commit().await?;
            return Ok(());
        }
        if found == 0 {
            if !is_empty(&tx).await? {
                return Err(StoreError::Invalid(
                    "the database has tables but no yy schema version: give yy an empty database of its own".into(),
                )
                .into());
            }
            tx.batch_execute(VERSION_TABLE).await?;
            tx.batch_execute(SCHEMA).await?;
            tx.execute(
                "INSERT INTO schema_version (singleton, version) VALUES (1, $1)",
                &[&LATEST_VERSION],
            )
            .await?;
            tx.commit().await?;
            return Ok(());
        }
        let Some(step) = found
            .checked_sub(FIRST_VERSION)
            .and_then(|i| MIGRATIONS.get(usize::try_from(i).ok()?))
        else {
            return Err(StoreError::Invalid(format!(
                "the database is at schema version {found}, which no PostgreSQL migration of this yy starts from: restore a backup made by yy at version {FIRST_VERSION} or later"
            ))
            .into());
        };
        tx.batch_execute(step).await?;
        tx.execute(
            "UPDATE schema_version SET version = $1 WHERE singleton = 1",
            &[&(found + 1)],
        )
        .await?;
        tx.commit().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_versions_end_at_sqlites() {
        assert_eq!(
            FIRST_VERSION + MIGRATIONS.len() as i64,
            LATEST_VERSION,
            "a SQLite migration has no PostgreSQL counterpart in pg/migrate.rs's MIGRATIONS"
        );
    }
}
