//! `yy account`: accounts, administered by admins.

use clap::{Args, Subcommand};

use super::{JsonFlag, context};
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output;

#[derive(Debug, Args)]
pub struct AccountArgs {
    #[command(subcommand)]
    pub command: AccountCommand,
}

#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// List accounts
    List(JsonFlag),
    /// Show one account
    Show {
        username: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Create an account (password from a terminal prompt or --password-stdin)
    Create {
        username: String,
        /// Make the account an admin
        #[arg(long)]
        admin: bool,
        /// Read the password from stdin instead of a terminal prompt
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const HEADERS: [&str; 4] = ["username", "admin", "created", "id"];

fn row(a: &views::Account) -> Vec<String> {
    vec![
        a.username.clone(),
        a.admin.to_string(),
        a.created_at.clone(),
        a.id.clone(),
    ]
}

fn show(a: &views::Account, json: bool) -> anyhow::Result<()> {
    output::record(a, json, &HEADERS, row)
}

pub async fn run(args: AccountArgs) -> anyhow::Result<()> {
    match args.command {
        AccountCommand::List(f) => {
            let list = context::client()?.account_list().await?;
            output::list(&list, f.json, &HEADERS, row)
        }
        AccountCommand::Show { username, json } => show(
            &context::client()?.account_show(&username).await?,
            json.json,
        ),
        AccountCommand::Create {
            username,
            admin,
            password_stdin,
            json,
        } => {
            names::check_name("account", &username).map_err(CliError::usage)?;
            let client = context::client()?;
            let password = super::prompt::password(password_stdin, true)?;
            let a = client
                .account_create(&params::AccountCreate {
                    username,
                    password,
                    admin,
                })
                .await?;
            show(&a, json.json)
        }
    }
}
