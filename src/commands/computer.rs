//! `yy computer`: the isolated computers of computer agents, and the audit log.

use clap::{Args, Subcommand};

use super::{JsonFlag, context, seg};
use crate::api::client::Client;
use crate::api::computers::{AuditEntry, Computer, ComputerCreate, ComputerExec};
use crate::api::machine;
use crate::error::CliError;
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct ComputerArgs {
    #[command(subcommand)]
    pub command: ComputerCommand,
}

#[derive(Debug, Subcommand)]
pub enum ComputerCommand {
    /// Provision (or return) the private computer of a computer agent, and wait until it runs
    Create {
        /// A --env computer agent
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List computers
    List {
        /// Include removed computers
        #[arg(long)]
        removed: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show one computer (id or unique id prefix)
    Show {
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Stop a computer: its container is removed, its workspace kept; the next create
    /// recreates it
    Stop {
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Remove a computer and delete its workspace
    Rm {
        id: String,
        /// Do not ask for confirmation
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Run a diagnostic command in a running computer (audited; exit 1 when it fails)
    Exec {
        id: String,
        /// Kill the command's process tree after this long
        #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
        timeout: std::time::Duration,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
        /// The command and its arguments (after --)
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Show the audit log of operator actions on computers, newest first
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
}

const HEADERS: [&str; 7] = [
    "id",
    "agent",
    "state",
    "fence",
    "runner",
    "container",
    "updated",
];

fn row(c: &Computer) -> Vec<String> {
    vec![
        c.id.clone(),
        c.agent.clone(),
        c.state.clone(),
        c.fence.to_string(),
        c.runner_id.clone(),
        c.container_id
            .as_deref()
            .map(|s| s.chars().take(12).collect())
            .unwrap_or_else(|| "-".into()),
        c.updated_at.clone(),
    ]
}

/// The network mode, and for `public-web` what it means.
fn network_shown(c: &Computer) -> String {
    match c.network {
        crate::egress::NetworkMode::None => "none (loopback only)".into(),
        crate::egress::NetworkMode::PublicWeb => {
            "public-web (ports 80/443 of public addresses, through the Runner's egress proxy only)"
                .into()
        }
    }
}

fn show(c: &Computer, json: bool) -> anyhow::Result<()> {
    let fields = vec![
        ("id", c.id.clone()),
        ("agent", format!("{} (owner {})", c.agent, c.owner)),
        ("state", c.state.clone()),
        ("fence", c.fence.to_string()),
        ("runner", c.runner_id.clone()),
        ("image", c.image_id.clone()),
        ("network", network_shown(c)),
        ("workspace", c.guest_cwd.clone()),
        ("container", opt(&c.container_id)),
        (
            "resources",
            c.resources
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        ("last error", opt(&c.last_error)),
        ("created", c.created_at.clone()),
        ("updated", c.updated_at.clone()),
    ];
    output::show(c, json, fields)
}

/// Waits until no Runner command is in flight for the computer.
async fn settled(client: &Client, mut c: Computer) -> anyhow::Result<Computer> {
    while !c.is_settled() {
        if let Some(cmd) = &c.last_command {
            let _: machine::Command = client
                .get(&format!("api/v1/commands/{}?wait_ms=25000", seg(cmd)))
                .await?;
        }
        c = client
            .get(&format!("api/v1/computers/{}", seg(&c.id)))
            .await?;
    }
    Ok(c)
}

fn failed_unless(c: &Computer, state: &str) -> anyhow::Result<()> {
    if c.state == state {
        return Ok(());
    }
    Err(CliError::failure(format!(
        "computer {} is {}: {}",
        c.id,
        c.state,
        c.last_error.as_deref().unwrap_or("no reason given")
    ))
    .into())
}

pub async fn run(args: ComputerArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        ComputerCommand::Create { agent, json } => {
            let c: Computer = client
                .post("api/v1/computers", &ComputerCreate { agent })
                .await?;
            let c = settled(&client, c).await?;
            show(&c, json.json)?;
            failed_unless(&c, "running")
        }
        ComputerCommand::List { removed, json } => {
            let path = if removed {
                "api/v1/computers?removed=true"
            } else {
                "api/v1/computers"
            };
            let list: Vec<Computer> = client.get(path).await?;
            output::list(&list, json.json, &HEADERS, row)
        }
        ComputerCommand::Show { id, json } => {
            let c: Computer = client
                .get(&format!("api/v1/computers/{}", seg(&id)))
                .await?;
            show(&c, json.json)
        }
        ComputerCommand::Stop { id, json } => {
            let c: Computer = client
                .post(
                    &format!("api/v1/computers/{}/stop", seg(&id)),
                    &serde_json::json!({}),
                )
                .await?;
            let c = settled(&client, c).await?;
            show(&c, json.json)?;
            failed_unless(&c, "stopped")
        }
        ComputerCommand::Rm { id, yes, json } => {
            super::prompt::confirm(
                &format!("remove computer {id} and delete its workspace?"),
                yes,
            )?;
            let c: Computer = client
                .post(
                    &format!("api/v1/computers/{}/remove", seg(&id)),
                    &serde_json::json!({}),
                )
                .await?;
            let c = settled(&client, c).await?;
            show(&c, json.json)?;
            failed_unless(&c, "removed")
        }
        ComputerCommand::Exec {
            id,
            timeout,
            json,
            argv,
        } => exec(&client, &id, timeout, json, argv).await,
        ComputerCommand::Audit { limit, json } => {
            let list: Vec<AuditEntry> = client.get(&format!("api/v1/audit?limit={limit}")).await?;
            output::list(
                &list,
                json.json,
                &["seq", "at", "account", "action", "target", "detail"],
                |e| {
                    vec![
                        e.seq.to_string(),
                        e.at.clone(),
                        e.account.clone(),
                        e.action.clone(),
                        e.target.clone(),
                        e.detail.to_string(),
                    ]
                },
            )
        }
    }
}

async fn exec(
    client: &Client,
    id: &str,
    timeout: std::time::Duration,
    json: bool,
    argv: Vec<String>,
) -> anyhow::Result<()> {
    let cmd: machine::Command = client
        .post(
            &format!("api/v1/computers/{}/exec", seg(id)),
            &ComputerExec {
                argv,
                timeout_ms: Some(timeout.as_millis() as u64),
                output_cap_bytes: None,
            },
        )
        .await?;
    let cmd = super::runner_ops::wait(client, &cmd.id).await?;
    if cmd.state != "done" {
        return Err(CliError::failure(format!(
            "exec {}: {}",
            cmd.state,
            cmd.error.as_deref().unwrap_or("no reason given")
        ))
        .into());
    }
    let result = cmd.result.unwrap_or_default();
    if json {
        output::json(&result)?;
    } else {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(result["stdout"].as_str().unwrap_or_default().as_bytes())?;
        out.flush()?;
        eprint!("{}", result["stderr"].as_str().unwrap_or_default());
    }
    if result["timed_out"] == true {
        return Err(CliError::failure(format!(
            "the command timed out after {timeout:?}; its process tree was killed"
        ))
        .into());
    }
    match result["exit_code"].as_i64() {
        Some(0) => Ok(()),
        Some(code) => {
            Err(CliError::failure(format!("the command exited with status {code}")).into())
        }
        None => Err(CliError::failure(format!(
            "the command was killed by signal {}",
            result["signal"].as_i64().unwrap_or(0)
        ))
        .into()),
    }
}
