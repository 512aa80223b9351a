//! The control plane on PostgreSQL (issue 27), for deployments with several `yy serve`
//! replicas on one database: the schema in PostgreSQL's dialect (`schema_pg.sql`) and the
//! runner that creates and migrates it. The store's operations on PostgreSQL build on these.

pub mod conn;
pub mod migrate;
mod values;

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
pub fn describe(error: &tokio_postgres::Error) -> String {
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

/// `url` without its password, for messages and logs: `postgres://user@host/db`, or
/// `password=...` left out of a key-value string.
pub fn redacted(url: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(url)
        && matches!(parsed.scheme(), "postgres" | "postgresql")
    {
        if parsed.password().is_some() {
            let _ = parsed.set_password(None);
        }
        return parsed.to_string();
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        // A URL the parser refused (a bad port, say) may still hold a password: keep only
        // the user of its `user:password@`.
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        return match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                let user = userinfo.split(':').next().unwrap_or_default();
                format!("{scheme}://{user}@{host}{tail}")
            }
            None => url.to_string(),
        };
    }
    url.split_whitespace()
        .filter(|kv| !kv.to_ascii_lowercase().starts_with("password="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `postgres://...` (or `postgresql://`), or PostgreSQL's key-value form.
pub fn looks_like_url(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    lower.starts_with("postgres://")
        || lower.starts_with("postgresql://")
        || (lower.contains('=') && !lower.contains("://"))
}

/// A PostgreSQL URL or key-value string given as `flag`; one from the command line
/// (not from `env`) must not hold a password: argv is readable by every user of the host.
pub fn check_url(flag: &str, env: &str, url: &str, from_env: bool) -> Result<(), String> {
    if !looks_like_url(url) {
        return Err(format!(
            "{flag} {}: not a PostgreSQL URL; give postgres://USER@HOST:PORT/NAME (or leave {flag} out for the embedded SQLite file)",
            redacted(url)
        ));
    }
    if url.parse::<tokio_postgres::Config>().is_err() {
        return Err(format!(
            "{flag} {}: PostgreSQL cannot read this URL; give postgres://USER@HOST:PORT/NAME",
            redacted(url)
        ));
    }
    if redacted(url) != url && !from_env {
        return Err(format!(
            "{flag} holds a password, which every user of this host can read in the process list: set {env} to the URL instead"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn passwords_are_left_out_of_what_is_shown() {
        assert_eq!(
            redacted("postgres://yy:s3cret@db.example:5432/yy"),
            "postgres://yy@db.example:5432/yy"
        );
        assert_eq!(
            redacted("host=/run/pg user=yy password=s3cret dbname=yy"),
            "host=/run/pg user=yy dbname=yy"
        );
        assert_eq!(
            redacted("postgres://yy:s3cret@db.example:bad/yy?x=1"),
            "postgres://yy@db.example:bad/yy?x=1"
        );
        assert_eq!(
            redacted("postgres://127.0.0.1/yy"),
            "postgres://127.0.0.1/yy"
        );
    }
}
