//! `yy agent`: persistent identities with a profile, a source and an execution environment.

use clap::{Args, Subcommand, ValueEnum};

use super::{JsonFlag, ListArgs, context};
use crate::api::params::AgentEnv;
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EnvArg {
    /// Tools run on the Hermes host
    Host,
    /// Tools run in the agent's isolated computer
    Computer,
}

impl From<EnvArg> for AgentEnv {
    fn from(e: EnvArg) -> Self {
        match e {
            EnvArg::Host => AgentEnv::Host,
            EnvArg::Computer => AgentEnv::Computer,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// List agents
    List(ListArgs),
    /// Show one agent
    Show {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Create an agent (at most 100 active agents per account)
    Create {
        name: String,
        /// Profile the agent runs with
        #[arg(long)]
        profile: String,
        /// Where the agent's tools run
        #[arg(long, value_enum)]
        env: EnvArg,
        /// Source the agent belongs to [default: the only source, when there is one]
        #[arg(long)]
        source: Option<String>,
        /// Let the agent form and manage teams
        #[arg(long)]
        manage_team: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change an agent's profile, environment or team management (applies from its next turn)
    Update {
        name: String,
        #[arg(long)]
        profile: Option<String>,
        #[arg(long, value_enum)]
        env: Option<EnvArg>,
        /// Allow (true) or forbid (false) team management
        #[arg(long, value_name = "BOOL")]
        manage_team: Option<bool>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive an agent (frees its slot; its records stay)
    Archive {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const HEADERS: [&str; 9] = [
    "name",
    "owner",
    "source",
    "profile",
    "env",
    "manage team",
    "created",
    "archived",
    "id",
];

fn row(a: &views::Agent) -> Vec<String> {
    vec![
        a.name.clone(),
        a.owner.clone(),
        a.source.clone(),
        a.profile.clone(),
        a.env.as_str().into(),
        a.manage_team.to_string(),
        a.created_at.clone(),
        opt(&a.archived_at),
        a.id.clone(),
    ]
}

fn show(a: &views::Agent, json: bool) -> anyhow::Result<()> {
    output::record(a, json, &HEADERS, row)
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        AgentCommand::List(l) => {
            let list = client.agent_list(l.archived).await?;
            output::list(&list, l.json, &HEADERS, row)
        }
        AgentCommand::Show { name, json } => show(&client.agent_show(&name).await?, json.json),
        AgentCommand::Create {
            name,
            profile,
            env,
            source,
            manage_team,
            json,
        } => {
            names::check_name("agent", &name).map_err(CliError::usage)?;
            let a = client
                .agent_create(&params::AgentCreate {
                    name,
                    profile,
                    env: env.into(),
                    source,
                    manage_team,
                })
                .await?;
            show(&a, json.json)
        }
        AgentCommand::Update {
            name,
            profile,
            env,
            manage_team,
            json,
        } => {
            if profile.is_none() && env.is_none() && manage_team.is_none() {
                return Err(CliError::usage(
                    "nothing to change: pass --profile, --env or --manage-team",
                )
                .into());
            }
            let update = params::AgentUpdate {
                profile,
                env: env.map(Into::into),
                manage_team,
            };
            show(&client.agent_update(&name, &update).await?, json.json)
        }
        AgentCommand::Archive { name, json } => {
            show(&client.agent_archive(&name).await?, json.json)
        }
    }
}
