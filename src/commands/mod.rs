//! One file per noun. `main` parses, runs and maps the outcome to an exit code.

pub mod account;
pub mod admin;
pub mod agent;
pub mod artifact;
pub mod backup;
pub mod bench;
pub mod chat;
pub mod computer;
pub mod computer_attach;
pub mod computer_screen;
pub mod context;
pub mod egress;
pub mod generate;
pub mod goal;
pub mod guest;
pub mod image;
pub mod login;
pub mod profile;
pub mod prompt;
pub mod runner;
pub mod runner_ops;
pub mod runner_run;
pub mod serve;
pub mod session;
pub mod source;
pub mod subtask;
pub mod team;
pub mod token;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{self, CliError, Exit};
use crate::output;

/// Runs the process and returns its exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    init_logging(&cli.command);
    context::set_server_flag(cli.server.clone());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Failure.code();
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => Exit::Ok.code(),
        Err(err) => match error::exit_code(&err) {
            None => Exit::Ok.code(),
            Some(exit) => {
                // Messages may quote what a Runner or Hermes reported: one clean line.
                eprintln!("error: {}", output::clean(&error::message(&err)));
                exit.code()
            }
        },
    }
}

/// Logs go to stderr; `YY_LOG` is an env-filter (`info`, `yy=debug`, ...).
fn init_logging(command: &Command) {
    let default = match command {
        Command::Serve(_) => "info",
        Command::Runner(r) if matches!(r.command, runner::RunnerCommand::Run(_)) => "info",
        Command::Egress(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("YY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Admin(args) => admin::run(args).await,
        Command::Login(args) => login::login(args).await,
        Command::Logout => login::logout().await,
        Command::Whoami(args) => login::whoami(args).await,
        Command::Account(args) => account::run(args).await,
        Command::Token(args) => token::run(args).await,
        Command::Source(args) => source::run(args).await,
        Command::Profile(args) => profile::run(args).await,
        Command::Agent(args) => agent::run(args).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Chat(args) => chat::run(args).await,
        Command::Computer(args) => computer::run(args).await,
        Command::Session(args) => session::run(args).await,
        Command::Team(args) => team::run(args).await,
        Command::Goal(args) => goal::run(args).await,
        Command::Subtask(args) => subtask::run(args).await,
        Command::Artifact(args) => artifact::run(args).await,
        Command::Backup(args) => backup::run(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Image(args) => image::run(args).await,
        Command::Guest(args) => guest::run(args).await,
        Command::Egress(args) => egress::run(args).await,
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(args),
    }
}

/// `--json` on every list and show.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct JsonFlag {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// A thing shown by its positional NAME, with `--json`.
#[derive(Debug, Clone, clap::Args)]
pub struct ByName {
    pub name: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// A thing shown by its positional ID (or unique id prefix), with `--json`.
#[derive(Debug, Clone, clap::Args)]
pub struct ById {
    pub id: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// How a listed thing prints: the columns of its table, which also label its fields when
/// one is shown.
pub trait Columns: serde::Serialize {
    const HEADERS: &'static [&'static str];
    fn row(&self) -> Vec<String>;
}

/// Prints a list as a table of its [`Columns`], or as JSON.
pub fn print_list<T: Columns>(items: &[T], json: bool) -> anyhow::Result<()> {
    output::list(items, json, T::HEADERS, T::row)
}

/// Prints one thing as `column: value` lines, or as JSON.
pub fn print_one<T: Columns>(item: &T, json: bool) -> anyhow::Result<()> {
    output::record(item, json, T::HEADERS, T::row)
}

/// `--archived` on lists of archivable things.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ListArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Include archived entries
    #[arg(long)]
    pub archived: bool,
}

/// A store error met by a local command, with the exit code its kind deserves.
pub fn store_error(e: crate::server::store::StoreError) -> CliError {
    use crate::server::store::StoreError as E;
    let exit = match &e {
        E::NotFound(_) => Exit::NotFound,
        E::Conflict(_) | E::Limit(_) => Exit::Conflict,
        E::Invalid(_) => Exit::Usage,
        E::Forbidden(_) => Exit::Auth,
        _ => Exit::Failure,
    };
    CliError::new(exit, e.to_string())
}
