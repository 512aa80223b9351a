//! The control plane on PostgreSQL (issue 27), for deployments with several `yy serve`
//! replicas on one database: the schema in PostgreSQL's dialect (`schema_pg.sql`) and the
//! runner that creates and migrates it. The store's operations on PostgreSQL build on these.

pub mod migrate;

pub use migrate::{MIGRATION_LOCK, migrate, schema_version};

use super::StoreError;

/// What an operation on a PostgreSQL store fails with.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The same refusals as the SQLite store's (a database of a newer yy, a conflict, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("postgresql: {}", describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
}

/// One line: what the server said and its SQLSTATE (without the multi-line DETAIL and
/// HINT), or the client's own error with its cause (the bare Display says only "db error").
fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}
