//! `yy admin`: local administration of a data directory, without a running server.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::api::{names, views};
use crate::error::CliError;
use crate::server::auth;
use crate::server::store::accounts;

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an admin account directly in a data directory (how the first admin is made)
    Create(AdminCreateArgs),
}

#[derive(Debug, Args)]
pub struct AdminCreateArgs {
    /// Data directory of `yy serve` [default: $XDG_DATA_HOME/yy]
    #[arg(long, value_name = "DIR", env = "YY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub database: super::database::DatabaseArgs,
    /// Name of the new admin
    #[arg(long)]
    pub username: String,
    /// Read the password from stdin instead of a terminal prompt
    #[arg(long)]
    pub password_stdin: bool,
    /// Print the new account as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    match args.command {
        AdminCommand::Create(a) => create(a).await,
    }
}

async fn create(args: AdminCreateArgs) -> anyhow::Result<()> {
    names::check_name("account", &args.username).map_err(CliError::usage)?;
    let password = super::prompt::password(args.password_stdin, true)?;
    auth::check_password(&password).map_err(CliError::usage)?;
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => super::context::default_data_dir()?,
    };
    let _lock = super::backup::enter_data_dir(&data_dir)?;
    let store = args.database.open(data_dir.clone()).await?;
    let hash = tokio::task::spawn_blocking(move || auth::hash_password(&password))
        .await?
        .map_err(CliError::failure)?;
    let username = args.username.clone();
    let account = store
        .call(move |c| accounts::create(c, &username, &hash, true))
        .await
        .map_err(crate::commands::store_error)?;
    let view: views::Account = account.into();
    if args.json {
        return crate::output::json(&view);
    }
    crate::output::print(&format!(
        "created admin {} in {}",
        view.username,
        match &args.database.database {
            Some(url) => crate::server::store::pg::redacted(url),
            None => data_dir.display().to_string(),
        }
    ))?;
    Ok(())
}
