//! `yy metrics token`: the scrape tokens a Prometheus server reads `/metrics` with (admins
//! only). A token is printed once, when made; the server keeps only its hash.

use clap::{Args, Subcommand};

use super::{ById, Columns, JsonFlag, context, print_list, print_one};
use crate::api::status::ScrapeToken;

#[derive(Debug, Args)]
pub struct MetricsArgs {
    #[command(subcommand)]
    pub command: MetricsCommand,
}

#[derive(Debug, Subcommand)]
pub enum MetricsCommand {
    /// Scrape tokens: they read /metrics and nothing else
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a scrape token and print it once on stdout (give it to Prometheus as a bearer
    /// token)
    Create {
        /// A name for it (letters, digits, `.`, `_`, `-`), unique among live ones
        name: String,
        /// Print JSON (with the token) instead of the token alone
        #[arg(long)]
        json: bool,
    },
    /// List live scrape tokens (never the tokens themselves)
    #[command(visible_alias = "ls")]
    List {
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Revoke a scrape token by id, id prefix or name: it stops working at once
    Revoke(ById),
}

impl Columns for ScrapeToken {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "name",
        "created by",
        "created",
        "last used",
        "revoked",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.created_by.clone(),
            self.created_at.clone(),
            crate::output::opt(&self.last_used_at),
            crate::output::opt(&self.revoked_at),
        ]
    }
}

pub async fn run(args: MetricsArgs) -> anyhow::Result<()> {
    let MetricsCommand::Token { command } = args.command;
    match command {
        TokenCommand::Create { name, json } => {
            let made = context::client()?.scrape_token_create(&name).await?;
            if json {
                crate::output::json(&made)
            } else {
                // stdout is the token alone, so `yy metrics token create prom > file` works.
                eprintln!(
                    "scrape token {} ({}) made; it is shown only now:",
                    made.info.name, made.info.id
                );
                Ok(crate::output::print(&made.token)?)
            }
        }
        TokenCommand::List { json } => {
            print_list(&context::client()?.scrape_token_list().await?, json.json)
        }
        TokenCommand::Revoke(ById { id, json }) => print_one(
            &context::client()?.scrape_token_revoke(&id).await?,
            json.json,
        ),
    }
}
