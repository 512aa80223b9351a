//! `yy runner`: register and manage Runners.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::{ById, Columns, JsonFlag, context, print_list};
use crate::api::{names, params, views};
use crate::egress::NetworkMode;
use crate::error::CliError;
use crate::output::{self, opt};
use crate::timefmt::duration_words;

#[derive(Debug, Args)]
pub struct RunnerArgs {
    #[command(subcommand)]
    pub command: RunnerCommand,
}

#[derive(Debug, Subcommand)]
pub enum RunnerCommand {
    /// Run this machine's Runner: connect out to the control plane and execute its commands
    Run(RunArgs),
    /// Back up a Runner's data directory: receipts, Hermes sessions, computer records and
    /// workspaces (takes the maintenance lock: the Runner must be stopped; its computers
    /// are stopped and that is confirmed)
    Backup(super::backup::RunnerBackupArgs),
    /// Restore a Runner's data directory from `yy runner backup` (takes the maintenance
    /// lock; workspace roots stay in place and get the backup's contents)
    Restore(super::backup::RunnerRestoreArgs),
    /// Register a Runner for a source and write its private runner.json (mode 0600)
    Register(RegisterArgs),
    /// List Runners (tokens are never shown)
    #[command(visible_alias = "ls")]
    List(JsonFlag),
    /// Show one Runner by id or unique id prefix
    Show(ById),
    /// Send pings through the Runner's command queue and show each round trip
    Ping {
        /// Runner id or unique id prefix
        runner: String,
        /// How many pings
        #[arg(long, short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10000))]
        count: u32,
        /// Hold each ping on the Runner this long (e.g. 2s) to try a slow command
        #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
        hold: std::time::Duration,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Export a file from the Runner's machine (it must lie inside the Runner's artifactRoots)
    Fetch {
        /// Runner id or unique id prefix
        runner: String,
        /// Absolute path on the Runner's machine
        path: String,
        /// Where to write the file ('-' for stdout)
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Overwrite FILE if it exists
        #[arg(long)]
        force: bool,
    },
    /// List the live Hermes sessions of a Runner's own channel
    Sessions {
        /// Runner id or unique id prefix
        runner: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List a Runner's recent commands and their states
    Commands {
        /// Runner id or unique id prefix
        runner: String,
        /// How many, newest first
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Cancel a command: a queued one never runs; a running one is stopped on the Runner
    Cancel {
        /// Command id
        command: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Change how a Runner's computers start: a new image (checked first), a rollback,
    /// and/or the network mode
    ///
    /// A new image is pending until the Runner accepted it: it checks the image on its
    /// Docker engine (`yy image verify`'s checks) and starts a throw-away acceptance computer
    /// from it for a guest round trip. An accepted image becomes current when the Runner is
    /// idle (no computer agent's turn and no computer start, exec or screen action queued or
    /// running); the image it replaces is kept as the previous one. Running computers keep
    /// their image and move to the current one when they are started again, workspace kept.
    /// A refused image is dropped and the current one stays. Waits for the outcome unless
    /// --no-wait. The network mode changes at once.
    #[command(group = clap::ArgGroup::new("change").required(true).multiple(true).args(["computer_image", "rollback", "network"]))]
    Update {
        /// Runner id or unique id prefix
        id: String,
        /// The full image id (sha256:...) computers are created from
        #[arg(long, value_name = "IMAGE_ID", conflicts_with = "rollback")]
        computer_image: Option<String>,
        /// Go back to the previous image (accepted and switched the same way)
        #[arg(long)]
        rollback: bool,
        /// How computers reach the network
        #[arg(long, value_name = "MODE")]
        network: Option<NetworkMode>,
        /// Return once the update is recorded, without waiting for acceptance and switch
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show the egress proxy's recent decisions on a Runner (newest first)
    ///
    /// Each line is one request of a public-web computer: host, port, the address checked,
    /// the verdict and its reason. The Runner keeps the last 1000 decisions in memory.
    EgressLog {
        /// Runner id or unique id prefix
        runner: String,
        /// Only this computer's decisions (id or unique id prefix)
        #[arg(long, value_name = "COMPUTER")]
        computer: Option<String>,
        /// How many, newest first
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Renew a Runner's token: the Runner asks for a new one at its next contact
    ///
    /// The Runner gets a new token over the machine API, saves it in its runner.json and
    /// uses it; the old token works until the new one is first used, then never again. A
    /// Runner renews by itself at 75 % of the token lifetime (`yy serve
    /// --runner-token-lifetime`, default 30 days); this asks for it now. With --now the
    /// current token is revoked at once (a leaked token): the Runner is disabled, is refused
    /// from its next request, and must be registered again with `yy runner register`.
    RotateToken {
        /// Runner id or unique id prefix
        id: String,
        /// Revoke the current token at once and disable the Runner; register it again
        /// afterwards
        #[arg(long)]
        now: bool,
        /// Do not ask for confirmation (--now)
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Disable a Runner: its token stops working at once and for good
    Disable {
        id: String,
        /// Do not ask for confirmation
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
}

pub use super::runner_run::RunArgs;

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// Source whose Bots this Runner executes (one enabled Runner per source)
    #[arg(long)]
    pub source: String,
    /// A profile the Runner may execute; repeat for several
    #[arg(long = "profile", value_name = "PROFILE", required = true)]
    pub profiles: Vec<String>,
    /// The control plane's URL as the Runner's machine reaches it; repeat it for each
    /// replica (one database, one certificate): the Runner moves to the next when its
    /// replica stops answering [default: the server this CLI talks to]
    #[arg(long = "server-url", value_name = "URL")]
    pub server_urls: Vec<String>,
    /// The local Hermes on the Runner's machine
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9119")]
    pub hermes_url: String,
    /// A host directory files may be exported from; repeat for several (none: no exports)
    #[arg(long = "artifact-root", value_name = "DIR")]
    pub artifact_roots: Vec<String>,
    /// Where to write runner.json ('-' for stdout)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Overwrite FILE if it exists
    #[arg(long)]
    pub force: bool,
    /// Enable computers, created from this full image id (the sha256:... `yy image build`
    /// printed)
    #[arg(long, value_name = "IMAGE_ID")]
    pub computer_image: Option<String>,
    /// How computers reach the network
    #[arg(long, value_name = "MODE", default_value = "none")]
    pub network: NetworkMode,
    /// Let the Runner start Hermes itself with this command line (shell words), e.g.
    /// "/opt/yy/hermes-venv/bin/hermes serve" (written as hermesCommand)
    #[arg(long, value_name = "COMMAND", conflicts_with = "hermes_token_file")]
    pub hermes_command: Option<String>,
    /// The file holding the session token of a Hermes on 127.0.0.1 that runs on its own
    /// (written as hermesTokenFile)
    #[arg(long, value_name = "FILE")]
    pub hermes_token_file: Option<PathBuf>,
    /// HERMES_HOME of the Hermes the Runner starts, where its model settings live
    /// (config.yaml, .env) [default: DATA_DIR/hermes-home] (written as hermesHome)
    #[arg(long, value_name = "DIR", requires = "hermes_command")]
    pub hermes_home: Option<PathBuf>,
}

impl Columns for views::Runner {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "source",
        "state",
        "online",
        "last seen",
        "generation",
        "version",
        "profiles",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.source.clone(),
            self.state.to_string(),
            self.online.to_string(),
            opt(&self.last_seen_at),
            self.generation.to_string(),
            opt(&self.version),
            self.allowed_profiles.join(","),
        ]
    }
}

fn show(r: &views::Runner, json: bool) -> anyhow::Result<()> {
    let fields = vec![
        ("id", r.id.to_string()),
        ("source", r.source.clone()),
        ("state", r.state.to_string()),
        ("online", r.online.to_string()),
        ("last seen", opt(&r.last_seen_at)),
        ("generation", r.generation.to_string()),
        ("instance", opt(&r.instance_id)),
        ("version", opt(&r.version)),
        ("capabilities", r.capabilities.join(",")),
        (
            "computers",
            r.computers_capacity
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        (
            "idle computers",
            match (r.computer_idle_ms, r.computer_reclaim_ms) {
                (Some(idle), Some(reclaim)) => format!(
                    "stopped after {}; a waiting start takes a slot idle for {}",
                    duration_words(idle as i64),
                    duration_words(reclaim as i64)
                ),
                _ => "-".into(),
            },
        ),
        (
            "warm computers",
            r.warm_computers
                .map(|n| {
                    format!(
                        "{n} kept ready (holding pool slots, given up first when the pool is full)"
                    )
                })
                .unwrap_or_else(|| "-".into()),
        ),
        ("hostname", opt(&r.hostname)),
        ("engine", opt(&r.engine)),
        ("computer image", opt(&r.computer_image)),
        (
            "pending image",
            match (&r.pending_image, &r.pending_reason) {
                (Some(image), Some(why)) => format!("{image} ({why})"),
                (Some(image), None) => image.clone(),
                _ => "-".into(),
            },
        ),
        ("previous image", opt(&r.previous_image)),
        ("image note", opt(&r.image_note)),
        ("network", r.network.to_string()),
        ("profiles", r.allowed_profiles.join(",")),
        ("artifact roots", r.artifact_roots.join(",")),
        ("server url", r.server_url.clone()),
        (
            "hermes url",
            match &r.hermes_listen {
                Some(listen) => format!(
                    "{listen} (the Hermes this Runner started; registered: {})",
                    r.hermes_url
                ),
                None => r.hermes_url.clone(),
            },
        ),
        ("token", token_words(r)),
        ("created", r.created_at.clone()),
        ("disabled", opt(&r.disabled_at)),
    ];
    output::show(r, json, fields)
}

/// Milliseconds from `ts` (RFC 3339) to now; negative for a time to come.
fn since(ts: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339(ts).ok()?;
    let ms = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
    Some(crate::timefmt::now_ms() - ms)
}

/// `3d4h`, `5h20m`: a token's age reads in days once it is long.
fn age_words(ms: i64) -> String {
    let day = 24 * 3600 * 1000;
    if ms >= 2 * day {
        let hours = (ms % day) / 3_600_000;
        format!(
            "{}d{}",
            ms / day,
            if hours > 0 {
                format!("{hours}h")
            } else {
                String::new()
            }
        )
    } else {
        duration_words(ms)
    }
}

/// "issued 2025-.. (age 3d), expires 2025-.. (in 26d); rotation pending".
fn token_words(r: &views::Runner) -> String {
    let Some(issued) = &r.token_issued_at else {
        return "-".into();
    };
    let mut out = format!("issued {issued}");
    if let Some(age) = since(issued) {
        out.push_str(&format!(" (age {})", age_words(age)));
    }
    match &r.token_expires_at {
        Some(expires) => {
            out.push_str(&format!(", expires {expires}"));
            match since(expires) {
                Some(left) if left >= 0 => out.push_str(" (expired: register the Runner again)"),
                Some(left) => out.push_str(&format!(" (in {})", age_words(-left))),
                None => {}
            }
        }
        None => out.push_str(", revoked"),
    }
    match r.token_rotation {
        Some(views::TokenRotation::Requested) => {
            out.push_str("; renewal requested for the next contact")
        }
        Some(views::TokenRotation::Pending) => {
            out.push_str("; a new token was issued and is not used yet")
        }
        None => {}
    }
    out
}

pub async fn run(args: RunnerArgs) -> anyhow::Result<()> {
    match args.command {
        RunnerCommand::Run(a) => super::runner_run::run(a).await,
        RunnerCommand::Backup(a) => super::backup::runner_backup(a).await,
        RunnerCommand::Restore(a) => super::backup::runner_restore(a).await,
        RunnerCommand::Ping {
            runner,
            count,
            hold,
            json,
        } => super::runner_ops::ping(&runner, count, hold, json.json).await,
        RunnerCommand::Fetch {
            runner,
            path,
            output,
            force,
        } => super::runner_ops::fetch(&runner, &path, &output, force).await,
        RunnerCommand::Commands {
            runner,
            limit,
            json,
        } => super::runner_ops::commands(&runner, limit, json.json).await,
        RunnerCommand::Sessions { runner, json } => {
            super::runner_ops::sessions(&runner, json.json).await
        }
        RunnerCommand::Cancel { command, json } => {
            super::runner_ops::cancel(&command, json.json).await
        }
        RunnerCommand::Register(a) => register(a).await,
        RunnerCommand::Update {
            id,
            computer_image,
            rollback,
            network,
            no_wait,
            json,
        } => {
            let update = params::RunnerUpdate {
                computer_image,
                network,
                rollback,
            };
            super::runner_ops::update(&id, &update, no_wait, |r| show(r, json.json)).await
        }
        RunnerCommand::EgressLog {
            runner,
            computer,
            limit,
            json,
        } => super::egress::log(&runner, computer, limit, json.json).await,
        RunnerCommand::List(f) => {
            let list = context::client()?.runner_list().await?;
            print_list(&list, f.json)
        }
        RunnerCommand::Show(ById { id, json }) => {
            show(&context::client()?.runner_show(&id).await?, json.json)
        }
        RunnerCommand::RotateToken { id, now, yes, json } => {
            let client = context::client()?;
            let r = client.runner_show(&id).await?;
            if now {
                super::prompt::confirm(
                    &format!(
                        "revoke the token of runner {} of source {} now? The Runner is disabled and must be registered again",
                        r.id, r.source
                    ),
                    yes,
                )?;
            }
            let p = params::RunnerRotateToken { now };
            let after = client.runner_rotate_token(&r.id, &p).await?;
            if !json.json {
                let note = if now {
                    format!(
                        "runner {}: token revoked and runner disabled; register it again with `yy runner register --source {}` and give the Runner the new runner.json",
                        after.id, after.source
                    )
                } else {
                    format!(
                        "runner {}: it renews its token at its next contact (its old token works until the new one is used)",
                        after.id
                    )
                };
                eprintln!("{note}");
            }
            show(&after, json.json)
        }
        RunnerCommand::Disable { id, yes, json } => {
            let client = context::client()?;
            let r = client.runner_show(&id).await?;
            super::prompt::confirm(
                &format!(
                    "disable runner {} of source {}? Its token will never work again",
                    r.id, r.source
                ),
                yes,
            )?;
            show(&client.runner_disable(&r.id).await?, json.json)
        }
    }
}

async fn register(a: RegisterArgs) -> anyhow::Result<()> {
    let to_stdout = a.output.as_os_str() == "-";
    // Check the destination before registering: a token that cannot be saved is lost.
    if !to_stdout {
        if a.output.exists() && !a.force {
            return Err(CliError::usage(format!(
                "{} already exists: choose another -o FILE, or pass --force to overwrite it",
                a.output.display()
            ))
            .into());
        }
        let dir = match a.output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(
                CliError::usage(format!("the directory {} does not exist", dir.display())).into(),
            );
        }
    }
    let client = context::client()?;
    let mut server_urls: Vec<String> = Vec::new();
    for url in a.server_urls {
        let url = url.trim_end_matches('/').to_string();
        if !server_urls.contains(&url) {
            server_urls.push(url);
        }
    }
    if server_urls.is_empty() {
        server_urls.push(client.base_url().to_string());
    }
    for url in &server_urls {
        names::check_http_url("--server-url", url, names::SERVER_URL_EXAMPLE)
            .map_err(CliError::usage)?;
    }
    let scheme = |u: &str| u.split("://").next().unwrap_or_default().to_string();
    if let Some(odd) = server_urls
        .iter()
        .find(|u| scheme(u) != scheme(&server_urls[0]))
    {
        return Err(CliError::usage(format!(
            "--server-url {odd} and {} differ in scheme: reach every replica over https://, or every one over http://",
            server_urls[0]
        ))
        .into());
    }
    let server_url = server_urls[0].clone();
    names::check_http_url("--hermes-url", &a.hermes_url, names::HERMES_URL_EXAMPLE)
        .map_err(CliError::usage)?;
    for root in &a.artifact_roots {
        names::check_absolute_path("--artifact-root", root).map_err(CliError::usage)?;
    }
    let hermes_command = match &a.hermes_command {
        Some(line) => {
            let argv = shell_words::split(line).map_err(|e| {
                CliError::usage(format!(
                    "--hermes-command {line:?} is not a command line: {e}"
                ))
            })?;
            if argv.is_empty() {
                return Err(CliError::usage("--hermes-command is empty").into());
            }
            Some(argv)
        }
        None => None,
    };
    for (flag, path) in [
        ("--hermes-token-file", &a.hermes_token_file),
        ("--hermes-home", &a.hermes_home),
    ] {
        if let Some(p) = path.as_ref().filter(|p| !p.is_absolute()) {
            return Err(CliError::usage(format!(
                "{flag} {} must be an absolute path (the Runner may run from another directory)",
                p.display()
            ))
            .into());
        }
    }
    let mut reg = client
        .runner_register(&params::RunnerRegister {
            source: a.source,
            profiles: a.profiles,
            server_url,
            hermes_url: a.hermes_url,
            artifact_roots: a.artifact_roots,
            computer_image: a.computer_image,
            network: Some(a.network),
        })
        .await?;
    // How the Runner reaches Hermes stays on this side: the control plane never sees it.
    reg.config.hermes_command = hermes_command;
    reg.config.hermes_token_file = a.hermes_token_file;
    reg.config.hermes_home = a.hermes_home;
    if server_urls.len() > 1 {
        reg.config.server_urls = server_urls;
    }
    let mut data = serde_json::to_vec_pretty(&reg.config)?;
    data.push(b'\n');
    if to_stdout {
        return Ok(output::print(std::str::from_utf8(&data)?)?);
    }
    crate::fsutil::write_atomic(&a.output, &data, 0o600).with_context(|| {
        format!(
            "runner {id} was registered, but writing {} failed; disable it with `yy runner disable {id}` and register again",
            a.output.display(),
            id = reg.runner.id
        )
    })?;
    output::print(&format!(
        "registered runner {} for source {}; its config is in {} (mode 0600). Start it on the Hermes machine with: yy runner run --config {}",
        reg.runner.id,
        reg.runner.source,
        a.output.display(),
        a.output.display()
    ))?;
    Ok(())
}
