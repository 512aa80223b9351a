//! `yy source`: the Hermes connections Bots come from.

use clap::{Args, Subcommand};

use super::{JsonFlag, ListArgs, context};
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct SourceArgs {
    #[command(subcommand)]
    pub command: SourceCommand,
}

#[derive(Debug, Subcommand)]
pub enum SourceCommand {
    /// List sources
    List(ListArgs),
    /// Show one source
    Show {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Create a source
    Create {
        name: String,
        /// A one-line description
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change a source's description
    Update {
        name: String,
        #[arg(long)]
        description: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive a source that no active agent or enabled Runner uses
    Archive {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const HEADERS: [&str; 5] = ["name", "description", "created", "archived", "id"];

fn row(s: &views::Source) -> Vec<String> {
    vec![
        s.name.clone(),
        s.description.clone(),
        s.created_at.clone(),
        opt(&s.archived_at),
        s.id.clone(),
    ]
}

fn show(s: &views::Source, json: bool) -> anyhow::Result<()> {
    output::record(s, json, &HEADERS, row)
}

pub async fn run(args: SourceArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        SourceCommand::List(l) => {
            let list = client.source_list(l.archived).await?;
            output::list(&list, l.json, &HEADERS, row)
        }
        SourceCommand::Show { name, json } => show(&client.source_show(&name).await?, json.json),
        SourceCommand::Create {
            name,
            description,
            json,
        } => {
            names::check_name("source", &name).map_err(CliError::usage)?;
            let s = client
                .source_create(&params::SourceCreate { name, description })
                .await?;
            show(&s, json.json)
        }
        SourceCommand::Update {
            name,
            description,
            json,
        } => {
            let update = params::SourceUpdate {
                description: Some(description),
            };
            show(&client.source_update(&name, &update).await?, json.json)
        }
        SourceCommand::Archive { name, json } => {
            show(&client.source_archive(&name).await?, json.json)
        }
    }
}
