//! `yy team`: teams of 2-8 agents, one of them the admin (an agent with `manage_team`).

use clap::{Args, Subcommand};

use super::{ByName, Columns, JsonFlag, ListArgs, context, print_list, print_one};
use crate::api::teams::{Team, TeamCreate};
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct TeamArgs {
    #[command(subcommand)]
    pub command: TeamCommand,
}

#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// List teams
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Show a team and its members
    Show(ByName),
    /// Create a team: an admin agent (with manage_team) and 1-7 members (at most 20 active teams per account)
    Create {
        name: String,
        /// The admin agent: it plans, reviews and completes the team's goals
        #[arg(long)]
        admin: String,
        /// A member agent (repeat for more)
        #[arg(long = "member", required = true)]
        members: Vec<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Add a member to a team (at most 8 members)
    Add {
        team: String,
        agent: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Remove a member from a team (not its admin; not while it owns unfinished work)
    Remove {
        team: String,
        agent: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive a team: final; its unfinished goals are cancelled
    Archive(ByName),
}

impl Columns for Team {
    const HEADERS: &'static [&'static str] = &[
        "name",
        "admin",
        "members",
        "owner",
        "created by",
        "created",
        "archived",
        "id",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.admin.clone(),
            self.members
                .iter()
                .filter(|m| m.role != "admin")
                .map(|m| m.agent.clone())
                .collect::<Vec<_>>()
                .join(","),
            self.owner.clone(),
            self.created_by.clone(),
            self.created_at.clone(),
            opt(&self.archived_at),
            self.id.clone(),
        ]
    }
}

/// A create prints the new id (the whole object with --json).
pub fn print_created<T: serde::Serialize>(item: &T, id: &str, json: bool) -> anyhow::Result<()> {
    if json {
        return output::json(item);
    }
    Ok(output::print(id)?)
}

pub async fn run(args: TeamArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        TeamCommand::List(l) => print_list(&client.team_list(l.archived).await?, l.json),
        TeamCommand::Show(ByName { name, json }) => {
            print_one(&client.team_show(&name).await?, json.json)
        }
        TeamCommand::Create {
            name,
            admin,
            members,
            json,
        } => {
            let team = client
                .team_create(&TeamCreate {
                    name,
                    admin,
                    members,
                })
                .await?;
            print_created(&team, &team.id, json.json)
        }
        TeamCommand::Add { team, agent, json } => {
            print_one(&client.team_add(&team, &agent).await?, json.json)
        }
        TeamCommand::Remove { team, agent, json } => {
            print_one(&client.team_remove(&team, &agent).await?, json.json)
        }
        TeamCommand::Archive(ByName { name, json }) => {
            print_one(&client.team_archive(&name).await?, json.json)
        }
    }
}
