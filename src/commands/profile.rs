//! `yy profile`: a Hermes profile name and the guest `terminal.cwd` its tools run in.

use clap::{Args, Subcommand};

use super::{ByName, Columns, JsonFlag, ListArgs, context, print_list, print_one};
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::opt;

#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub command: ProfileCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// List profiles
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Show one profile
    Show(ByName),
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
    Archive(ByName),
}

impl Columns for views::Profile {
    const HEADERS: &'static [&'static str] =
        &["name", "cwd", "computer ready", "created", "archived", "id"];

    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            opt(&self.cwd),
            self.computer_ready.to_string(),
            self.created_at.clone(),
            opt(&self.archived_at),
            self.id.clone(),
        ]
    }
}

pub async fn run(args: ProfileArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        ProfileCommand::List(l) => {
            let list = client.profile_list(l.archived).await?;
            print_list(&list, l.json)
        }
        ProfileCommand::Show(ByName { name, json }) => {
            print_one(&client.profile_show(&name).await?, json.json)
        }
        ProfileCommand::Create { name, cwd, json } => {
            names::check_name("profile", &name).map_err(CliError::usage)?;
            let p = client
                .profile_create(&params::ProfileCreate { name, cwd })
                .await?;
            print_one(&p, json.json)
        }
        ProfileCommand::Update { name, cwd, json } => {
            let update = params::ProfileUpdate { cwd: Some(cwd) };
            print_one(&client.profile_update(&name, &update).await?, json.json)
        }
        ProfileCommand::Archive(ByName { name, json }) => {
            print_one(&client.profile_archive(&name).await?, json.json)
        }
    }
}
