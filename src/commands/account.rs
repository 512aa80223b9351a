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
    #[command(visible_alias = "ls")]
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
    /// Disable an account: it can no longer log in, and its old work ends at once: its
    /// tokens are revoked, its waiting turns refused, its goals stopped, and its running
    /// turns stopped (each stop confirmed by its Runner)
    Disable {
        username: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Enable a disabled account (its old tokens stay revoked)
    Enable {
        username: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Set a password (yours by default; admins may set any account's). Every other token
    /// of the account is revoked
    Passwd {
        /// The account [default: the logged-in one]
        username: Option<String>,
        /// Read the new password from stdin instead of a terminal prompt (an account that
        /// is not an admin gives its current password on the first line, the new one on
        /// the second)
        #[arg(long)]
        password_stdin: bool,
    },
}

impl Columns for views::Account {
    const HEADERS: &'static [&'static str] = &["username", "admin", "state", "created", "id"];

    fn row(&self) -> Vec<String> {
        let state = match &self.disabled_at {
            Some(at) => format!("disabled {at}"),
            None => "enabled".into(),
        };
        vec![
            self.username.clone(),
            self.admin.to_string(),
            state,
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
        AccountCommand::Disable { username, json } => {
            let a = context::client()?
                .account_set_disabled(&username, true)
                .await?;
            print_one(&a, json.json)
        }
        AccountCommand::Enable { username, json } => {
            let a = context::client()?
                .account_set_disabled(&username, false)
                .await?;
            print_one(&a, json.json)
        }
        AccountCommand::Passwd {
            username,
            password_stdin,
        } => {
            let client = context::client()?;
            let me = client.whoami().await?.account;
            let username = username.unwrap_or_else(|| me.username.clone());
            let needs_current = !me.admin;
            let (current_password, password) = if password_stdin {
                super::prompt::passwords_stdin(needs_current)?
            } else {
                let current = if needs_current {
                    Some(super::prompt::password_prompt("Current password: ")?)
                } else {
                    None
                };
                (current, super::prompt::password(false, true)?)
            };
            let a = client
                .account_password(
                    &username,
                    &params::PasswordChange {
                        password,
                        current_password,
                    },
                )
                .await?;
            crate::output::print(&format!(
                "password of {} changed; its other tokens are revoked",
                crate::output::clean(&a.username)
            ))?;
            Ok(())
        }
    }
}
