//! The command line: one `yy` with a subcommand per noun. Each noun's arguments live in its
//! file under `commands/`.

use clap::{Parser, Subcommand};

use crate::commands::{
    account, admin, agent, artifact, backup, bench, chat, computer, egress, generate, guest, image,
    login, profile, runner, serve, session, source, token,
};
use crate::commands::{goal, subtask, team};

#[derive(Debug, Parser)]
#[command(
    name = "yy",
    version,
    about = "Run and administer a platform of Hermes agents",
    long_about = "Run and administer a platform of Hermes agents.\n\n\
        One binary is the control plane (`yy serve`), the Runner on each execution host \
        (`yy runner run`) and the operator's CLI over the admin API.\n\n\
        Exit codes: 0 ok, 1 failure, 2 usage or invalid input, 3 cancelled, \
        4 not authenticated or not allowed, 5 not found, 6 conflict or limit reached.\n\n\
        Environment: YY_SERVER and YY_TOKEN override the stored login; YY_LOG sets the log \
        filter (e.g. YY_LOG=debug); logs go to stderr.",
    propagate_version = true
)]
pub struct Cli {
    /// The yy server to talk to (overrides YY_SERVER and the stored login's server)
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane: the admin API and the machine API for Runners
    Serve(serve::ServeArgs),
    /// Administer a data directory locally (e.g. create the first admin)
    Admin(admin::AdminArgs),
    /// Log in to a yy server and store an API token for later commands
    Login(login::LoginArgs),
    /// Revoke the stored API token on the server and forget it
    Logout,
    /// Show the account behind the current login
    Whoami(login::WhoamiArgs),
    /// Manage accounts (admins only)
    Account(account::AccountArgs),
    /// API tokens: list, revoke
    Token(token::TokenArgs),
    /// Manage sources: the Hermes connections Bots come from
    Source(source::SourceArgs),
    /// Manage profiles: a Hermes profile and its guest working directory
    Profile(profile::ProfileArgs),
    /// Manage agents: persistent identities with a profile and an execution environment
    Agent(agent::AgentArgs),
    /// Register and manage Runners, the execution hosts next to Hermes
    Runner(runner::RunnerArgs),
    /// Send a message to an agent and stream its reply
    Chat(chat::ChatArgs),
    /// Isolated computers of computer agents: create, list, show, stop, rm, exec, audit
    Computer(computer::ComputerArgs),
    /// Bot sessions: list, show the transcript, stop, close
    Session(session::SessionArgs),
    /// Teams of agents: an admin agent (with manage_team) and 1-7 members
    Team(team::TeamArgs),
    /// Goals handed to a team's admin: create, list, show, stop, resume, watch
    Goal(goal::GoalArgs),
    /// The subtasks of a goal: list, show
    Subtask(subtask::SubtaskArgs),
    /// Files exported from computers and fetched from Runners: list, show, get
    Artifact(artifact::ArtifactArgs),
    /// Back up the control plane's data directory, and verify backups
    Backup(backup::BackupArgs),
    /// Restore the control plane's data directory from a backup (`yy serve` must be stopped)
    Restore(backup::RestoreArgs),
    /// Benchmarks on this machine: command dispatch, computers, the egress proxy, backup,
    /// computer agents' turns and artifacts
    Bench(bench::BenchArgs),
    /// Build, verify and list the computer image (on the local Docker engine)
    Image(image::ImageArgs),
    /// The guest agent inside a computer (run by the Runner, not by hand)
    Guest(guest::GuestArgs),
    /// The egress proxy of public-web computers (run by the Runner, not by hand)
    Egress(egress::EgressArgs),
    /// Print a shell completion script
    Completions(generate::CompletionsArgs),
    /// Write man pages
    Man(generate::ManArgs),
}
