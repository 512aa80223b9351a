//! `yy computer`: the isolated computers of computer agents, and the audit log.

use clap::{Args, Subcommand};

use std::sync::LazyLock;
use std::time::Duration;

use super::{ById, Columns, JsonFlag, context, print_list};
use crate::api::computers::{
    Computer, ComputerCreate, ComputerExec, EXEC_DEFAULT_TIMEOUT_MS, ExecResult,
};
use crate::api::states::ComputerState;
use crate::client::Client;
use crate::error::{CliError, PassThrough};
use crate::output::{self, opt};

/// `--timeout`'s default in whole seconds, as `--help` shows it ("60s").
static EXEC_TIMEOUT: LazyLock<String> =
    LazyLock::new(|| format!("{}s", EXEC_DEFAULT_TIMEOUT_MS / 1000));

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
    #[command(visible_alias = "ls")]
    List {
        /// Include removed computers
        #[arg(long)]
        removed: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show one computer (id or unique id prefix)
    Show(ById),
    /// Share a computer with other computer agents of its account: their turns then run
    /// in it (its files, browser logins and desktop), one turn at a time; each keeps its
    /// own model history. Asks first unless --yes; temporary helpers are refused
    Share(ShareArgs),
    /// Stop sharing a computer with the named agents: their next turns run in their own
    /// computers again
    Unshare(UnshareArgs),
    /// Stop a computer: its container is removed, its workspace kept; the next create
    /// recreates it
    Stop(ById),
    /// Remove a computer and delete its workspace
    Rm {
        id: String,
        /// Do not ask for confirmation
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Run a diagnostic command in a running computer (audited); exits with the command's
    /// status (124 on timeout, 128+N for signal N), yy's own failures print `error:`
    Exec {
        id: String,
        /// Kill the command's process tree after this long
        #[arg(long, value_parser = humantime::parse_duration, default_value = EXEC_TIMEOUT.as_str())]
        timeout: Duration,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
        /// The command and its arguments (after --)
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Watch what the computer's agent does, read-only: the running turn's tool calls and
    /// their outputs as they happen, turn after turn, until Ctrl-C; with --control, take
    /// the computer over
    Attach(super::computer_attach::AttachArgs),
    /// Hand a computer taken over with `attach --control` back to its model, with a note
    /// that enters the model's next segment
    Handback(super::computer_attach::HandbackArgs),
    /// Save a screenshot of a desktop computer's display as PNG (audited)
    Screenshot(super::computer_screen::ScreenshotArgs),
    /// Send one screen action (click, type, key, ...) to a desktop computer (audited);
    /// prints the cursor position and the current frame id
    Screen(super::computer_screen::ScreenArgs),
    /// Show the audit log of operator actions on computers, newest first
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Args)]
pub struct ShareArgs {
    /// The computer (id or unique id prefix)
    pub id: String,
    /// The agents (names or ids, of the computer's account)
    #[arg(long = "with", value_name = "AGENT", num_args = 1.., required = true)]
    pub agents: Vec<String>,
    /// Do not ask for confirmation
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Debug, Args)]
pub struct UnshareArgs {
    /// The computer (id or unique id prefix)
    pub id: String,
    /// The agents whose grants end (names or ids)
    #[arg(long = "with", value_name = "AGENT", num_args = 1.., required = true)]
    pub agents: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// The question `share` asks: what the agents will share, said before anything changes.
fn share_question(c: &Computer, agents: &[String]) -> String {
    let names = agents
        .iter()
        .map(|a| output::clean(a))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "share computer {} (agent {}) with {names}? They will share its workspace files, its browser logins and its one desktop; their turns take it one at a time, each with its own model history",
        c.id,
        output::clean(&c.agent)
    )
}

/// Who shares the computer: "a (granted by ADMIN at TIME), ...", or that it is private.
fn shared_shown(c: &Computer) -> String {
    if c.shared_with.is_empty() {
        return "- (private to its agent)".into();
    }
    c.shared_with
        .iter()
        .map(|g| {
            format!(
                "{} (granted by {} at {})",
                output::clean(&g.agent),
                output::clean(&g.granted_by),
                g.granted_at
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Columns for Computer {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "agent",
        "state",
        "fence",
        "runner",
        "container",
        "updated",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.agent.clone(),
            self.state.to_string(),
            self.fence.to_string(),
            self.runner_id.to_string(),
            self.container_id
                .as_deref()
                .map(|s| s.chars().take(12).collect())
                .unwrap_or_else(|| "-".into()),
            self.updated_at.clone(),
        ]
    }
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
        ("id", c.id.to_string()),
        ("agent", format!("{} (owner {})", c.agent, c.owner)),
        (
            "state",
            match &c.stop_reason {
                // Why yy stopped it by itself, while it has not started again.
                Some(reason)
                    if matches!(c.state, ComputerState::Stopping | ComputerState::Stopped) =>
                {
                    format!("{} ({reason})", c.state)
                }
                _ => c.state.to_string(),
            },
        ),
        ("fence", c.fence.to_string()),
        ("runner", c.runner_id.to_string()),
        (
            "image",
            match &c.next_image {
                Some(next) => format!(
                    "{} (moves to its Runner's current image {next} when it is started again)",
                    c.image_id
                ),
                None => c.image_id.clone(),
            },
        ),
        ("network", network_shown(c)),
        ("shared with", shared_shown(c)),
        ("workspace", c.guest_cwd.clone()),
        ("workspace usage", usage_shown(c.workspace_usage.as_ref())),
        ("container", opt(&c.container_id)),
        (
            "resources",
            c.resources
                .as_ref()
                .map(resources_shown)
                .unwrap_or_else(|| "-".into()),
        ),
        ("last error", opt(&c.last_error)),
        ("why", why(c)),
        ("control", control_shown(c)),
        ("last used", opt(&c.last_used_at)),
        ("created", c.created_at.clone()),
        ("updated", c.updated_at.clone()),
    ];
    output::show(c, json, fields)
}

/// What the workspace takes: "28.1 MiB used of 32.0 MiB (1.2 MiB free), reported ...".
fn usage_shown(u: Option<&crate::api::computers::WorkspaceUsage>) -> String {
    let size = super::progress::human_bytes;
    let Some(u) = u else {
        return "- (reported with the computer's next start, exec or turn)".into();
    };
    let at = u
        .reported_at
        .as_deref()
        .map(|t| format!(", reported {t}"))
        .unwrap_or_default();
    match (u.used_bytes, u.limit_bytes) {
        (Some(used), Some(limit)) => format!(
            "{} used of {}{}{at}",
            size(used),
            size(limit),
            u.free_bytes
                .map(|f| format!(" ({} free)", size(f)))
                .unwrap_or_default()
        ),
        (Some(used), None) => format!("{} used, no limit{at}", size(used)),
        _ => format!("no limit (its Runner runs with --workspace-limit 0){at}"),
    }
}

/// Who controls the computer and whether its model is paused.
fn control_shown(c: &Computer) -> String {
    let Some(k) = &c.control else {
        return "-".into();
    };
    let held = match (&k.holder, &k.expires_at) {
        (Some(h), Some(until)) => format!("held by {h} until {until}"),
        _ => "nobody".into(),
    };
    let paused = if k.paused {
        "; the model is paused until `yy computer handback`"
    } else {
        ""
    };
    format!("fence {}, {held}{paused}", k.control_fence)
}

/// A computer's limits in units people read ("memory 1 GiB, 1 CPU, 256 processes, ...").
fn resources_shown(r: &serde_json::Value) -> String {
    let Ok(l) = serde_json::from_value::<crate::computer::Limits>(r.clone()) else {
        return output::plain(r);
    };
    let size = |n: i64| super::progress::human_bytes(n.max(0) as u64);
    format!(
        "memory {}, {}, {}, /tmp {}, home {}",
        size(l.memory_bytes),
        crate::api::words::plural(l.nano_cpus as f64 / 1e9, "CPU", "CPUs"),
        crate::api::words::plural(l.pids, "process", "processes"),
        size(l.tmp_bytes),
        size(l.home_bytes)
    )
}

/// What the state means for the next step, when it is not obvious: a lease that a new
/// connection generation ended means the container is gone and the next start is a new one.
fn why(c: &Computer) -> String {
    let lease_ended = c
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("lease ended when the Runner connected again"));
    match c.state {
        ComputerState::Stopped if lease_ended => "its Runner connected again (a new generation), which ends every lease; the Runner removed the container, and `yy computer create` makes a new one (the workspace stays)".into(),
        ComputerState::Stopped | ComputerState::Failed => "`yy computer create` makes a new container (the workspace stays)".into(),
        _ => "-".into(),
    }
}

/// Waits until no Runner command is in flight for the computer, prints it, and fails
/// unless it ended in `state`.
async fn settle(
    client: &Client,
    c: Computer,
    state: ComputerState,
    json: JsonFlag,
) -> anyhow::Result<()> {
    let mut c = c;
    while !c.is_settled() {
        if let Some(cmd) = &c.last_command {
            super::runner_ops::wait(client, cmd).await?;
        }
        c = client.computer_show(&c.id).await?;
    }
    show(&c, json.json)?;
    if c.state == state {
        return Ok(());
    }
    let why = c.last_error.as_deref().unwrap_or("no reason given");
    Err(CliError::failure(match c.state {
        ComputerState::Failed => format!("computer {} failed: {why}", c.id),
        now => format!("computer {} ended up {now}, not {state}: {why}", c.id),
    })
    .into())
}

pub async fn run(args: ComputerArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        ComputerCommand::Create { agent, json } => {
            let c = client.computer_create(&ComputerCreate { agent }).await?;
            settle(&client, c, ComputerState::Running, json).await
        }
        ComputerCommand::List { removed, json } => {
            let list = client.computer_list(removed).await?;
            print_list(&list, json.json)
        }
        ComputerCommand::Show(ById { id, json }) => {
            show(&client.computer_show(&id).await?, json.json)
        }
        ComputerCommand::Share(a) => {
            // Shown first, so that the question names the computer's agent.
            let c = client.computer_show(&a.id).await?;
            super::prompt::confirm(&share_question(&c, &a.agents), a.yes)?;
            let c = client.computer_share(&c.id, &a.agents).await?;
            show(&c, a.json.json)
        }
        ComputerCommand::Unshare(a) => {
            let c = client.computer_unshare(&a.id, &a.agents).await?;
            show(&c, a.json.json)
        }
        ComputerCommand::Stop(ById { id, json }) => {
            let c = client.computer_stop(&id).await?;
            settle(&client, c, ComputerState::Stopped, json).await
        }
        ComputerCommand::Rm { id, yes, json } => {
            super::prompt::confirm(
                &format!("remove computer {id} and delete its workspace?"),
                yes,
            )?;
            let c = client.computer_remove(&id).await?;
            settle(&client, c, ComputerState::Removed, json).await
        }
        ComputerCommand::Exec {
            id,
            timeout,
            json,
            argv,
        } => exec(&client, &id, timeout, json, argv).await,
        ComputerCommand::Screenshot(a) => super::computer_screen::screenshot(&client, a).await,
        ComputerCommand::Attach(a) => super::computer_attach::attach(&client, a).await,
        ComputerCommand::Handback(a) => super::computer_attach::handback(&client, a).await,
        ComputerCommand::Screen(a) => super::computer_screen::screen(&client, a).await,
        ComputerCommand::Audit { limit, json } => {
            let list = client.audit_list(limit).await?;
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
                        output::cut(&output::plain(&e.detail), 60),
                    ]
                },
            )
        }
    }
}

async fn exec(
    client: &Client,
    id: &str,
    timeout: Duration,
    json: bool,
    argv: Vec<String>,
) -> anyhow::Result<()> {
    let params = ComputerExec {
        argv,
        timeout_ms: Some(timeout.as_millis() as u64),
        output_cap_bytes: None,
    };
    let cmd = client.computer_exec(id, &params).await?;
    let cmd = super::runner_ops::wait(client, &cmd.id).await?;
    let result: ExecResult = super::runner_ops::result_of(cmd, "exec")?;
    if json {
        output::json(&result)?;
    } else {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(result.stdout.as_bytes())?;
        out.flush()?;
        eprint!("{}", result.stderr);
    }
    Err(command_status(&result, timeout).into())
}

/// How `yy computer exec` ends: with the command's own status, like `docker exec` and
/// `ssh`; a timeout as 124 (as `timeout` does) and a signal as 128+N (as shells do).
fn command_status(result: &ExecResult, timeout: Duration) -> PassThrough {
    if result.timed_out {
        return PassThrough {
            code: 124,
            note: Some(format!(
                "the command timed out after {timeout:?}; its process tree was killed"
            )),
        };
    }
    match (result.exit_code, result.signal) {
        (Some(code), _) => PassThrough {
            code: code.clamp(0, 255),
            note: None,
        },
        (None, signal) => {
            let signal = signal.unwrap_or(0);
            PassThrough {
                code: 128 + signal.clamp(0, 127),
                note: Some(format!("the command was killed by signal {signal}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_usage_reads_as_used_of_limit() {
        use crate::api::computers::WorkspaceUsage;
        let u = WorkspaceUsage {
            used_bytes: Some(29 << 20),
            free_bytes: Some(0),
            limit_bytes: Some(32 << 20),
            reported_at: Some("2026-01-01T00:00:00Z".into()),
        };
        assert_eq!(
            usage_shown(Some(&u)),
            "29.0 MiB used of 32.0 MiB (0 B free), reported 2026-01-01T00:00:00Z"
        );
        let none = WorkspaceUsage::default();
        assert!(usage_shown(Some(&none)).starts_with("no limit"));
        assert!(usage_shown(None).starts_with("- "));
    }

    #[test]
    fn show_says_why_a_computer_is_recreated() {
        let mut c: Computer = serde_json::from_value(serde_json::json!({
            "id": "c", "agent": "a", "owner": "o", "runner_id": "r", "image_id": "i",
            "guest_cwd": "/w", "state": "stopped", "fence": 3, "container_id": null,
            "resources": null, "last_command": null, "created_at": "t", "updated_at": "t",
            "last_error": "the lease ended when the Runner connected again (generation 7)"
        }))
        .unwrap();
        assert!(why(&c).contains("connected again (a new generation)"));
        assert!(why(&c).contains("makes a new one"));
        c.last_error = None;
        assert!(why(&c).contains("makes a new container"));
        c.state = ComputerState::Running;
        assert_eq!(why(&c), "-");
    }

    #[test]
    fn the_timeout_default_is_the_exec_default() {
        let parsed = humantime::parse_duration(&EXEC_TIMEOUT).unwrap();
        assert_eq!(parsed, Duration::from_millis(EXEC_DEFAULT_TIMEOUT_MS));
    }
}
