//! `--database`: which database the control plane keeps its state in, for `yy serve` and the
//! commands that open the store themselves.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;
use crate::server::Store;
use crate::server::store::pg;

/// The environment variable that may carry the URL (with its password).
pub const DATABASE_ENV: &str = "YY_DATABASE";

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// The control plane's database: PostgreSQL at URL (postgres://USER@HOST:PORT/NAME, or
    /// `host=... user=... dbname=...`), which several `yy serve` replicas may share.
    /// Without it, the embedded SQLite file in the data directory. A password goes in
    /// $YY_DATABASE, never on the command line
    #[arg(long, value_name = "URL", env = DATABASE_ENV, hide_env_values = true)]
    pub database: Option<String>,
}

impl DatabaseArgs {
    /// The PostgreSQL URL, checked; None for the embedded SQLite file.
    pub fn postgres_url(&self) -> Result<Option<&str>, CliError> {
        let Some(url) = self.database.as_deref() else {
            return Ok(None);
        };
        check_url(
            url,
            std::env::var(DATABASE_ENV).ok().as_deref() == Some(url),
        )?;
        Ok(Some(url))
    }

    /// What to call the database in messages (no password).
    pub fn describe(&self, data_dir: &std::path::Path) -> String {
        match &self.database {
            Some(url) => pg::redacted(url),
            None => crate::server::store::db_path(data_dir)
                .display()
                .to_string(),
        }
    }

    /// Opens (creating and migrating) the store: PostgreSQL, or the SQLite file in
    /// `data_dir`.
    pub async fn open(&self, data_dir: PathBuf) -> anyhow::Result<Store> {
        let url = self.postgres_url()?.map(str::to_owned);
        tokio::task::spawn_blocking(move || match url {
            Some(url) => Store::open_postgres(&url),
            None => Store::open(&data_dir),
        })
        .await?
        .map_err(|e| CliError::failure(e.to_string()).into())
    }
}

/// A PostgreSQL URL or key-value string; one from the command line must not hold a
/// password (argv is readable by every user of the host).
fn check_url(url: &str, from_env: bool) -> Result<(), CliError> {
    pg::check_url("--database", DATABASE_ENV, url, from_env).map_err(CliError::usage)
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn urls_are_checked_and_passwords_kept_off_the_command_line() {
        assert!(check_url("postgres://yy@127.0.0.1:5432/yy", false).is_ok());
        assert!(check_url("host=/run/postgresql dbname=yy", false).is_ok());
        let e = check_url("postgres://yy:pw@127.0.0.1/yy", false).unwrap_err();
        assert!(e.to_string().contains("YY_DATABASE"), "{e}");
        assert!(!e.to_string().contains("pw"), "{e}");
        assert!(check_url("postgres://yy:pw@127.0.0.1/yy", true).is_ok());
        let e = check_url("mysql://db/yy", false).unwrap_err();
        assert!(e.to_string().contains("not a PostgreSQL URL"), "{e}");
    }
}
