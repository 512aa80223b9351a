//! `yy agent`: persistent identities with a profile, a source and an execution environment.

use clap::{Args, Subcommand, ValueEnum};

use super::{ByName, Columns, JsonFlag, ListArgs, context, print_list, print_one};
use crate::api::params::AgentEnv;
use crate::api::{names, params, views};
use crate::error::CliError;
use crate::output::opt;

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
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Show one agent
    Show(ByName),
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
        /// Give a host agent the Runner's managed browser (docs/browser.md)
        #[arg(long)]
        browser: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change an agent's profile, environment, team management or browser (applies from its next turn)
    Update {
        name: String,
        #[arg(long)]
        profile: Option<String>,
        #[arg(long, value_enum)]
        env: Option<EnvArg>,
        /// Allow team management: team tools from the agent's next turn
        #[arg(long, conflicts_with = "no_manage_team")]
        manage_team: bool,
        /// Forbid team management: its goals stop and do not come back by themselves
        #[arg(long)]
        no_manage_team: bool,
        /// Give a host agent the managed browser: its turns may use it from the next one
        #[arg(long, conflicts_with = "no_browser")]
        browser: bool,
        /// Take the managed browser away: its open browser closes (its profile stays)
        #[arg(long)]
        no_browser: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive an agent (frees its slot; its records stay)
    Archive(ByName),
}

impl Columns for views::Agent {
    const HEADERS: &'static [&'static str] = &[
        "name",
        "owner",
        "source",
        "profile",
        "env",
        "manage team",
        "browser",
        "created",
        "archived",
        "id",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.owner.clone(),
            self.source.clone(),
            self.profile.clone(),
            self.env.as_str().into(),
            self.manage_team.to_string(),
            self.browser.to_string(),
            self.created_at.clone(),
            opt(&self.archived_at),
            self.id.clone(),
        ]
    }
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        AgentCommand::List(l) => {
            let list = client.agent_list(l.archived).await?;
            print_list(&list, l.json)
        }
        AgentCommand::Show(ByName { name, json }) => {
            print_one(&client.agent_show(&name).await?, json.json)
        }
        AgentCommand::Create {
            name,
            profile,
            env,
            source,
            manage_team,
            browser,
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
                    browser,
                })
                .await?;
            print_one(&a, json.json)
        }
        AgentCommand::Update {
            name,
            profile,
            env,
            manage_team,
            no_manage_team,
            browser,
            no_browser,
            json,
        } => {
            let flag = |on: bool, off: bool| match (on, off) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let (manage_team, browser) =
                (flag(manage_team, no_manage_team), flag(browser, no_browser));
            if profile.is_none() && env.is_none() && manage_team.is_none() && browser.is_none() {
                return Err(CliError::usage(
                    "nothing to change: pass --profile, --env, --manage-team, --no-manage-team, --browser or --no-browser",
                )
                .into());
            }
            let update = params::AgentUpdate {
                profile,
                env: env.map(Into::into),
                manage_team,
                browser,
            };
            print_one(&client.agent_update(&name, &update).await?, json.json)
        }
        AgentCommand::Archive(ByName { name, json }) => {
            print_one(&client.agent_archive(&name).await?, json.json)
        }
    }
}
