//! The command line: one `yy` with a subcommand per noun. Each noun's arguments live in its
//! file under `commands/`.

use clap::{CommandFactory, Parser, Subcommand};

use crate::commands::{
    account, admin, agent, artifact, backup, bench, browser, chat, computer, doctor, egress,
    generate, guest, image, login, metrics, profile, runner, serve, service, session, source,
    status, store, token,
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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane: the admin API and the machine API for Runners
    Serve(serve::ServeArgs),
    /// Print or install the systemd unit of `yy serve` or `yy runner run`
    Service(service::ServiceArgs),
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
    /// The control plane on one screen: Runners, computers, turns, goals, recent failures
    /// (admins only)
    Status(status::StatusArgs),
    /// Prometheus metrics on /metrics: the scrape tokens that read them (admins only)
    Metrics(metrics::MetricsArgs),
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
    /// Isolated computers of computer agents: create, list, show, stop, rm, exec, attach,
    /// handback, screenshot, screen, audit
    Computer(computer::ComputerArgs),
    /// The managed browser of host agents: show, attach (watch or take over), handback,
    /// screenshot, screen, close
    Browser(browser::BrowserArgs),
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
    /// The control plane's database: migrate it between SQLite and PostgreSQL (`yy serve`
    /// stopped)
    Store(store::StoreArgs),
    /// Benchmarks on this machine: command dispatch, computers, the egress proxy, backup,
    /// computer agents' turns, artifacts, team scheduling and desktop screens
    Bench(bench::BenchArgs),
    /// Computer images on the local Docker engine: build, prepare, verify, list, rm, prune
    Image(image::ImageArgs),
    /// The guest agent inside a computer (run by the Runner, not by hand)
    Guest(guest::GuestArgs),
    /// The egress proxy of public-web computers (run by the Runner, not by hand)
    Egress(egress::EgressArgs),
    /// Check this host's setup in order (server, TLS, clock, login; with --runner-config the
    /// Runner's token, engine, image, Hermes, model, disk and file modes), with a fix for each
    /// failure
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script
    Completions(generate::CompletionsArgs),
    /// Write man pages
    Man(generate::ManArgs),
}

/// The nouns whose commands talk to a yy server, and so take `--server`. `runner run` reads
/// its server from its runner.json and is left out.
const SERVER_NOUNS: &[&str] = &[
    "logout", "whoami", "account", "token", "status", "metrics", "source", "profile", "agent",
    "runner", "chat", "computer", "session", "artifact", "team", "goal", "subtask", "doctor",
];

/// The id of `--server` in the parsed matches.
pub const SERVER_ARG: &str = "server";

/// The full command line: the derived one, with `--server` on the commands that talk to a
/// server only (a global flag would show it on `yy serve` and `yy image build` too).
pub fn command() -> clap::Command {
    let server = clap::Arg::new(SERVER_ARG)
        .long("server")
        .value_name("URL")
        .help("The yy server to talk to (overrides YY_SERVER and the stored login's server)");
    // mut_subcommands keeps the order of --help (mut_subcommand would move each last).
    let cmd = Cli::command().mut_subcommands(|sub| {
        if !SERVER_NOUNS.contains(&sub.get_name()) {
            return sub;
        }
        if sub.get_name() != "runner" {
            return sub.arg(server.clone().global(true));
        }
        sub.mut_subcommands(|c| match c.get_name() {
            "run" => c,
            _ => c.arg(server.clone()),
        })
    });
    crate::commands::complete::with_value_completers(cmd)
}

/// `--server` as given on the command line, wherever it was placed.
pub fn server_flag(matches: &clap::ArgMatches) -> Option<String> {
    let mut m = matches;
    loop {
        if let Ok(Some(v)) = m.try_get_one::<String>(SERVER_ARG) {
            return Some(v.clone());
        }
        match m.subcommand() {
            Some((_, sub)) => m = sub,
            None => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::FromArgMatches;

    use super::*;

    fn parse(args: &[&str]) -> Result<(Cli, Option<String>), clap::Error> {
        let m = command().try_get_matches_from(args)?;
        Ok((Cli::from_arg_matches(&m)?, server_flag(&m)))
    }

    #[test]
    fn added_flags_and_completers_keep_positionals_in_their_order() {
        let (cli, server) = parse(&["yy", "chat", "box", "hello", "--server", "http://s"]).unwrap();
        match cli.command {
            Command::Chat(c) => {
                assert_eq!((c.agent.as_str(), c.message.as_str()), ("box", "hello"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(server.as_deref(), Some("http://s"));
        let (_, server) = parse(&["yy", "session", "--server", "http://t", "list"]).unwrap();
        assert_eq!(server.as_deref(), Some("http://t"));
    }

    #[test]
    fn server_is_offered_only_where_a_server_is_talked_to() {
        for args in [
            &["yy", "serve", "--server", "http://s"][..],
            &["yy", "image", "list", "--server", "http://s"],
            &[
                "yy", "runner", "run", "--config", "r.json", "--server", "http://s",
            ],
            &["yy", "--server", "http://s", "agent", "list"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
        assert!(parse(&["yy", "runner", "list", "--server", "http://s"]).is_ok());
    }
}
