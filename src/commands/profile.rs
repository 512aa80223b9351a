//! `yy profile`: a Hermes profile name and the guest `terminal.cwd` its tools run in.

use clap::{Args, Subcommand};

use super::{JsonFlag, ListArgs, context};
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub command: ProfileCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List profiles
    List(ListArgs),
    /// Show one profile
    Show {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Create a profile (NAME is the Hermes profile name)
    Create {
        name: String,
        /// The guest terminal.cwd: an absolute path (needed by computer agents), or
        /// '.', 'auto' or 'cwd' for a profile used only by host agents
        #[arg(long, value_name = "PATH")]
        cwd: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change a profile's guest terminal.cwd
    Update {
        name: String,
        #[arg(long, value_name = "PATH")]
        cwd: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive a profile that no active agent uses
    Archive {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const HEADERS: [&str; 6] = ["name", "cwd", "computer ready", "created", "archived", "id"];

fn row(p: &views::Profile) -> Vec<String> {
    vec![
        p.name.clone(),
        opt(&p.cwd),
        p.computer_ready.to_string(),
        p.created_at.clone(),
        opt(&p.archived_at),
        p.id.clone(),
    ]
}

fn show(p: &views::Profile, json: bool) -> anyhow::Result<()> {
    output::record(p, json, &HEADERS, row)
}

pub async fn run(args: ProfileArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        ProfileCommand::List(l) => {
            let list = client.profile_list(l.archived).await?;
            output::list(&list, l.json, &HEADERS, row)
        }
        ProfileCommand::Show { name, json } => show(&client.profile_show(&name).await?, json.json),
        ProfileCommand::Create { name, cwd, json } => {
            names::check_name("profile", &name).map_err(CliError::usage)?;
            let p = client
                .profile_create(&params::ProfileCreate { name, cwd })
                .await?;
            show(&p, json.json)
        }
        ProfileCommand::Update { name, cwd, json } => {
            let update = params::ProfileUpdate { cwd: Some(cwd) };
            show(&client.profile_update(&name, &update).await?, json.json)
        }
        ProfileCommand::Archive { name, json } => {
            show(&client.profile_archive(&name).await?, json.json)
        }
    }
}
