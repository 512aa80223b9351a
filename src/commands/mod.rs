//! One file per noun. `main` parses, runs and maps the outcome to an exit code.

pub mod account;
pub mod admin;
pub mod agent;
pub mod artifact;
pub mod backup;
pub mod bench;
pub mod browser;
pub mod chat;
pub mod complete;
pub mod computer;
pub mod computer_attach;
pub mod computer_screen;
pub mod computer_shell;
pub mod computer_web;
pub mod context;
pub mod database;
pub mod doctor;
pub mod egress;
pub mod generate;
pub mod goal;
pub mod guest;
pub mod image;
pub mod instance;
pub mod login;
pub mod metrics;
pub mod profile;
pub mod progress;
pub mod prompt;
pub mod runner;
pub mod runner_ops;
pub mod runner_run;
pub mod serve;
pub mod service;
pub mod session;
pub mod source;
pub mod status;
pub mod store;
pub mod subtask;
pub mod team;
pub mod token;
pub mod tool_output;
pub mod tool_tap;

use clap::FromArgMatches;

use crate::cli::{Cli, Command};
use crate::error::{self, CliError, Exit};
use crate::output;

/// glibc serves blocks of 128 KiB and more as fresh mappings and unmaps them on free, so
/// every transfer buffer (an HTTP frame, a file chunk) faults its pages in again, which in a
/// VM costs more than copying the bytes (docs/benchmarks.md, `yy bench artifacts`). Blocks
/// up to 16 MiB stay in the heap instead, with at most 32 MiB free kept at its top and four
/// arenas: a bounded amount of resident memory for that.
fn keep_large_blocks_in_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables (it takes the allocator's lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
}

/// Runs the process and returns its exit code.
pub fn main() -> i32 {
    // The tool tap sits in front of every command of a host agent: no parsing, no runtime.
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = tool_tap::intercept(&args) {
        return code;
    }
    keep_large_blocks_in_the_heap();
    // A <TAB> in a shell with yy's completions runs `COMPLETE=SHELL yy -- ...`.
    complete::answer_if_asked();
    let parsed = crate::cli::command()
        .try_get_matches()
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, crate::cli::server_flag(&m))));
    let (cli, server) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let e = close_suggestions_only(e);
            let rendered = e.render();
            let plain = rendered.to_string();
            if !plain.starts_with("error:") {
                // Help and version (asked for, or shown for a missing subcommand).
                let _ = e.print();
            } else if colour() {
                eprint!("{}", one_line_error(&rendered.ansi().to_string(), &plain));
            } else {
                eprint!("{}", one_line_error(&plain, &plain));
            }
            return e.exit_code();
        }
    };
    init_logging(&cli.command);
    context::set_server_flag(server);
    if let Command::Guest(args) = &cli.command
        && let Err(e) = guest::before_runtime(args)
    {
        let line = error::message(&e);
        eprintln!("error: {}", output::clean(&line));
        return Exit::Failure.code();
    }
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
    let command = match cli.command {
        Command::Guest(args) if args.is_main_process() => {
            guest::serve_as_main_process(runtime, args)
        }
        other => other,
    };
    match runtime.block_on(run(command)) {
        Ok(()) => Exit::Ok.code(),
        Err(err) if err.downcast_ref::<error::PassThrough>().is_some() => {
            let pass = err.downcast_ref::<error::PassThrough>().expect("checked");
            if let Some(note) = &pass.note {
                eprintln!("yy: {}", output::clean(note));
            }
            pass.code
        }
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

/// clap suggests any subcommand that looks a little alike (`yy agnet` got `guest`); keep
/// only the ones a slip of the fingers away: an edit distance (with transpositions) of one,
/// or two for words of six letters and more.
fn close_suggestions_only(e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand {
        return e;
    }
    let (Some(ContextValue::String(typed)), Some(ContextValue::Strings(suggested))) = (
        e.get(ContextKind::InvalidSubcommand),
        e.get(ContextKind::SuggestedSubcommand),
    ) else {
        return e;
    };
    let close: Vec<String> = suggested
        .iter()
        .filter(|s| is_close(typed, s))
        .cloned()
        .collect();
    let mut out = clap::Error::new(ErrorKind::InvalidSubcommand).with_cmd(&crate::cli::command());
    out.insert(
        ContextKind::InvalidSubcommand,
        ContextValue::String(typed.clone()),
    );
    if !close.is_empty() {
        out.insert(
            ContextKind::SuggestedSubcommand,
            ContextValue::Strings(close),
        );
    }
    for kind in [ContextKind::Suggested, ContextKind::Usage] {
        if let Some(v) = e.get(kind) {
            out.insert(kind, v.clone());
        }
    }
    out
}

/// clap lists part of what is wrong on the lines under `error:` (the missing arguments, the
/// possible values); yy's errors are one line, so they join it. The usage and tips after
/// the blank line stay as they are. `plain` is `text` without colours.
fn one_line_error(text: &str, plain: &str) -> String {
    let joint = match plain.lines().next() {
        Some(first) if first.trim_end().ends_with(':') => ", ",
        _ => " ",
    };
    let (head, rest) = match text.split_once("\n\n") {
        Some((head, rest)) => (head, Some(rest)),
        None => (text.trim_end(), None),
    };
    let mut lines = head.lines();
    let mut line = lines.next().unwrap_or_default().trim_end().to_string();
    let more: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    if !more.is_empty() {
        line.push(' ');
        line.push_str(&more.join(joint));
    }
    match rest {
        Some(rest) => format!("{line}\n\n{rest}"),
        None => format!("{line}\n"),
    }
}

fn is_close(typed: &str, candidate: &str) -> bool {
    let allowed = if typed.chars().count() >= 6 { 2 } else { 1 };
    edit_distance(typed, candidate) <= allowed
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
/// neighbours each cost one.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
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
        .with_ansi(colour())
        .with_target(false)
        .try_init();
}

/// Colour only on a terminal, and never with `NO_COLOR` set (no-color.org).
pub fn colour() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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
        Command::Status(args) => status::run(args).await,
        Command::Metrics(args) => metrics::run(args).await,
        Command::Source(args) => source::run(args).await,
        Command::Profile(args) => profile::run(args).await,
        Command::Agent(args) => agent::run(args).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Chat(args) => chat::run(args).await,
        Command::Computer(args) => computer::run(args).await,
        Command::Browser(args) => browser::run(args).await,
        Command::Session(args) => session::run(args).await,
        Command::Team(args) => team::run(args).await,
        Command::Goal(args) => goal::run(args).await,
        Command::Subtask(args) => subtask::run(args).await,
        Command::Artifact(args) => artifact::run(args).await,
        Command::Backup(args) => backup::run(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Store(args) => store::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Image(args) => image::run(args).await,
        Command::Service(args) => service::run(args).await,
        Command::Guest(args) => guest::run(args).await,
        Command::Egress(args) => egress::run(args).await,
        Command::Doctor(args) => doctor::run(args).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_close_typos_are_suggested() {
        assert!(is_close("agnet", "agent"));
        assert!(!is_close("agnet", "guest"));
        assert!(is_close("sesion", "session"));
        assert!(is_close("lst", "list"));
        assert!(is_close("lst", "ls"));
        assert!(!is_close("lst", "stop"));
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    fn parse_error(args: &[&str]) -> String {
        let e = crate::cli::command()
            .try_get_matches_from(args)
            .unwrap_err();
        let plain = e.render().to_string();
        one_line_error(&plain, &plain)
    }

    #[test]
    fn clap_errors_say_what_is_wrong_on_the_error_line() {
        let missing = parse_error(&["yy", "runner", "fetch", "r1", "/srv/a.txt"]);
        let first = missing.lines().next().unwrap();
        assert_eq!(
            first,
            "error: the following required arguments were not provided: --output <FILE>"
        );
        assert!(missing.contains("\n\nUsage: yy runner fetch"), "{missing}");
        let two = parse_error(&["yy", "runner", "fetch"]);
        assert!(
            two.starts_with("error: the following required arguments were not provided: --output <FILE>, <RUNNER>, <PATH>\n\n"),
            "{two}"
        );
        let value = parse_error(&["yy", "agent", "create", "a", "--env", "moon"]);
        let first = value.lines().next().unwrap();
        assert!(
            first.starts_with("error: invalid value 'moon' for '--env"),
            "{value}"
        );
        assert!(first.contains("[possible values: "), "{value}");
        // Already one line: unchanged.
        let text = "error: unexpected argument '--x' found\n\n  tip: ...\n";
        assert_eq!(one_line_error(text, text), text);
    }
}
