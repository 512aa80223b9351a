//! `yy token`: API tokens (never the tokens themselves: the server keeps only hashes).

use clap::{Args, Subcommand};

use super::{ById, Columns, JsonFlag, context, print_list, print_one};
use crate::api::views;

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// List live API tokens (yours; an admin's lists every account's)
    #[command(visible_alias = "ls")]
    List {
        /// Only the tokens of this account
        #[arg(long, value_name = "USERNAME")]
        account: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Revoke a token by id: it stops working at once
    Revoke(ById),
}

impl Columns for views::Token {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "account",
        "created",
        "last used",
        "expires",
        "revoked",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.account.clone(),
            self.created_at.clone(),
            crate::output::opt(&self.last_used_at),
            self.expires_at.clone(),
            crate::output::opt(&self.revoked_at),
        ]
    }
}

pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.command {
        TokenCommand::List { account, json } => {
            let list = context::client()?.token_list(account.as_deref()).await?;
            print_list(&list, json.json)
        }
        TokenCommand::Revoke(ById { id, json }) => {
            print_one(&context::client()?.token_revoke(&id).await?, json.json)
        }
    }
}
