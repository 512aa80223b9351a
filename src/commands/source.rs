//! `yy source`: the Hermes connections Bots come from.

use clap::{Args, Subcommand};

use super::{ByName, Columns, JsonFlag, ListArgs, context, print_list, print_one};
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::opt;

#[derive(Debug, Args)]
pub struct SourceArgs {
    #[command(subcommand)]
    pub command: SourceCommand,
}

#[derive(Debug, Subcommand)]
pub enum SourceCommand {
    /// List sources
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Show one source
    Show(ByName),
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
    Archive(ByName),
}

impl Columns for views::Source {
    const HEADERS: &'static [&'static str] = &["name", "description", "created", "archived", "id"];

    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.description.clone(),
            self.created_at.clone(),
            opt(&self.archived_at),
            self.id.clone(),
        ]
    }
}

pub async fn run(args: SourceArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        SourceCommand::List(l) => {
            let list = client.source_list(l.archived).await?;
            print_list(&list, l.json)
        }
        SourceCommand::Show(ByName { name, json }) => {
            print_one(&client.source_show(&name).await?, json.json)
        }
        SourceCommand::Create {
            name,
            description,
            json,
        } => {
            names::check_name("source", &name).map_err(CliError::usage)?;
            let s = client
                .source_create(&params::SourceCreate { name, description })
                .await?;
            print_one(&s, json.json)
        }
        SourceCommand::Update {
            name,
            description,
            json,
        } => {
            let update = params::SourceUpdate {
                description: Some(description),
            };
            print_one(&client.source_update(&name, &update).await?, json.json)
        }
        SourceCommand::Archive(ByName { name, json }) => {
            print_one(&client.source_archive(&name).await?, json.json)
        }
    }
}
