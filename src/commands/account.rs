//! `yy account`: accounts, administered by admins.

use clap::{Args, Subcommand};

use super::{Columns, JsonFlag, context, print_list, print_one};
use crate::api::{names, params, views};
use crate::error::CliError;

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

impl Columns for views::Account {
    const HEADERS: &'static [&'static str] = &["username", "admin", "created", "id"];

    fn row(&self) -> Vec<String> {
        vec![
            self.username.clone(),
            self.admin.to_string(),
            self.created_at.clone(),
            self.id.clone(),
        ]
    }
}

pub async fn run(args: AccountArgs) -> anyhow::Result<()> {
    match args.command {
        AccountCommand::List(f) => {
            let list = context::client()?.account_list().await?;
            print_list(&list, f.json)
        }
        AccountCommand::Show { username, json } => print_one(
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
            print_one(&a, json.json)
        }
    }
}
