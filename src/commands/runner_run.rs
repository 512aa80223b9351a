//! `yy runner run`: the Runner process.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::computer::engine::{Engine, EngineArgs};
use crate::error::{CliError, Exit};
use crate::runner::{self, RunnerError, RunnerOptions, config};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// runner.json written by `yy runner register` (must be mode 0600)
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Directory for the Runner's receipts [default: $XDG_DATA_HOME/yy/runner-RUNNER_ID]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Commands that may run at once
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_concurrent: u32,
    /// After SIGTERM, how long commands in flight may finish before they are recorded as
    /// uncertain
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// Computers that may run at once on this host (a start beyond waits for a slot)
    #[arg(long, value_name = "N", default_value_t = crate::runner::computers::DEFAULT_MAX_RUNNING,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub max_computers: u32,
    /// Worker processes kept started (Hermes imported, no agent and no credentials yet)
    /// so that a computer agent's first turn need not wait for one; each holds about
    /// 100 MB. 0: start a Worker when a turn needs it
    #[arg(long, value_name = "N", default_value_t = crate::runner::worker::DEFAULT_SPARES,
          value_parser = clap::value_parser!(u32).range(0..=8))]
    pub warm_workers: u32,
    /// Computers kept created, checked and started before any agent needs one (Docker;
    /// computers without network of the current image): a start only attaches the agent's
    /// workspace. They hold pool slots and give them up first when the pool is full
    #[arg(long, value_name = "N", default_value_t = crate::runner::computers::DEFAULT_WARM,
          value_parser = clap::value_parser!(u32).range(0..=crate::runner::computers::MAX_WARM as i64))]
    pub warm_computers: u32,
    /// How long a computer may sit idle (no turn, exec, takeover or screen input; reading
    /// its state or screen does not count) before it is stopped; its workspace stays and
    /// its next use starts it again
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = idle_duration)]
    pub computer_idle: Duration,
    /// How long a computer must have sat idle before a start that waits for a full pool
    /// stops it and takes its slot
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = idle_duration)]
    pub computer_reclaim_after: Duration,
    /// How long a host agent's managed browser may sit unused (no turn or takeover using
    /// it; reading its state or a screenshot does not count) before it is closed; its
    /// profile stays
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = idle_duration)]
    pub browser_idle: Duration,
    /// The Docker network the egress proxy of public-web computers reaches out through (it
    /// must exist) [default: a bridge network the Runner creates, yy-egress-out-RUNNER_ID]
    #[arg(long, value_name = "NETWORK")]
    pub egress_network: Option<String>,
    /// A DNS server for the egress proxy; repeat for several [default: the Docker engine's]
    #[arg(long = "egress-dns", value_name = "IP")]
    pub egress_dns: Vec<std::net::IpAddr>,
    /// Size limit of each computer's workspace, e.g. 64MiB or 10GiB: an ext4 image per
    /// workspace, so the guest gets "No space left on device" at the limit (needs root and
    /// mkfs.ext4). `0` or `none`: no limit (unsafe: a computer can fill the host's disk)
    #[arg(long, value_name = "SIZE", default_value = "10GiB", env = "YY_WORKSPACE_LIMIT",
          value_parser = crate::computer::workspaces::parse_limit_arg)]
    pub workspace_limit: crate::computer::workspaces::Limit,
    /// Where to serve this Runner's own Prometheus metrics (GET /metrics, no auth):
    /// `HOST:PORT` on a loopback address, `off` for nowhere. Any other address must be
    /// allowed with --metrics-listen-public (it is readable by anyone who reaches it)
    #[arg(long, value_name = "ADDR|off", default_value = DEFAULT_METRICS_LISTEN,
          value_parser = parse_metrics_listen)]
    pub metrics_listen: MetricsListen,
    /// Allow --metrics-listen on an address that is not loopback
    #[arg(long)]
    pub metrics_listen_public: bool,
    /// Take over when another instance of this Runner (same runner.json, another data
    /// directory or host) is online: that one stops and its computers are removed. Without
    /// it, a terminal is asked and anything else is refused (exit 6)
    #[arg(long)]
    pub replace: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9469";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    Off,
    At(std::net::SocketAddr),
}

fn parse_metrics_listen(s: &str) -> Result<MetricsListen, String> {
    if s == "off" {
        return Ok(MetricsListen::Off);
    }
    s.parse()
        .map(MetricsListen::At)
        .map_err(|_| format!("{s:?} is not HOST:PORT (e.g. 127.0.0.1:9469) or `off`"))
}

/// A duration of at least a second (the control plane checks once a second).
fn idle_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(d)
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.engine.engine == Some(Engine::Podman)
        && (args.egress_network.is_some() || !args.egress_dns.is_empty())
    {
        return Err(CliError::usage(format!(
            "--egress-network and --egress-dns are for public-web computers, and {}",
            crate::computer::engine::PODMAN_NO_PUBLIC_WEB
        ))
        .into());
    }
    if let MetricsListen::At(addr) = args.metrics_listen
        && !addr.ip().is_loopback()
        && !args.metrics_listen_public
    {
        return Err(CliError::usage(format!(
            "--metrics-listen {addr} is not a loopback address and the metrics have no auth: add --metrics-listen-public to allow it, or use 127.0.0.1:PORT"
        ))
        .into());
    }
    let config = config::load(&args.config).map_err(|e| CliError::usage(e.to_string()))?;
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => super::context::default_data_dir()?.join(format!("runner-{}", config.runner_id)),
    };
    // First: an interrupted restore is rolled back, and maintenance (which holds the lock
    // exclusively) keeps this Runner from starting.
    let _maintenance = super::backup::enter_data_dir(&data_dir)?;
    crate::fsutil::create_private_dir(&data_dir)
        .map_err(|e| CliError::failure(format!("cannot create {}: {e}", data_dir.display())))?;
    // One process per data directory: two would share receipts and could both run a command.
    let lock = super::instance::hold(&data_dir, super::instance::RUNNER_LOCK, "yy runner")?;
    // Before anything here touches containers: starting removes this Runner's leftovers,
    // which would be another live instance's computers on a shared engine.
    let replace = args.replace || take_over(&config, &data_dir).await?;
    let metrics_listener = match args.metrics_listen {
        MetricsListen::Off => None,
        MetricsListen::At(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                CliError::failure(format!(
                    "cannot listen on {addr} for metrics: {e} (pick another --metrics-listen, or `off`)"
                ))
            })?;
            // The port chosen for `:0` is only known now.
            tracing::info!(addr = %l.local_addr().unwrap_or(addr), "serving the Runner's metrics");
            Some(l)
        }
    };
    tracing::info!(
        runner = %config.runner_id,
        server = %config.server_url,
        data_dir = %data_dir.display(),
        version = crate::VERSION,
        "runner starting"
    );
    let opts = RunnerOptions {
        config,
        config_path: args.config.clone(),
        data_dir,
        max_concurrent: args.max_concurrent as usize,
        shutdown_grace: args.shutdown_grace,
        max_computers: args.max_computers,
        warm_workers: args.warm_workers as usize,
        warm_computers: args.warm_computers,
        egress: crate::egress::docker::EgressOptions {
            network: args.egress_network,
            dns: args.egress_dns,
        },
        engine: args.engine.engine,
        workspace_limit: args.workspace_limit.0,
        computer_idle: runner::ComputerIdle {
            idle: args.computer_idle,
            reclaim_after: args.computer_reclaim_after,
        },
        metrics_listener,
        replace,
        browser_idle: args.browser_idle,
    };
    let result = runner::run(opts, super::serve::shutdown_signal()?).await;
    drop(lock);
    match result {
        Ok(()) => {
            tracing::info!("runner stopped");
            Ok(())
        }
        Err(RunnerError::Refused(m)) => Err(CliError::new(Exit::Auth, m).into()),
        Err(RunnerError::Local(m)) => Err(CliError::failure(m).into()),
        Err(RunnerError::OnlineElsewhere(m)) => Err(CliError::new(Exit::Conflict, m).into()),
    }
}

/// Whether to take over from another instance of this Runner that is online: asked on a
/// terminal, refused (exit 6) otherwise. Nobody online (or no answer: the connect checks
/// again) needs no takeover.
async fn take_over(
    config: &config::RunnerConfig,
    data_dir: &std::path::Path,
) -> anyhow::Result<bool> {
    let previous = runner::instance::previous(data_dir);
    let refusal = match runner::instance::online_elsewhere(config, previous.as_deref()).await {
        Ok(Some(refusal)) => refusal,
        Ok(None) => return Ok(false),
        Err(e) => {
            tracing::warn!(error = %e, "cannot ask the control plane whether another instance of this Runner is online; the connect will");
            return Ok(false);
        }
    };
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(CliError::new(Exit::Conflict, refusal).into());
    }
    eprintln!("{refusal}");
    super::prompt::confirm(
        "Take over? The other instance stops and its computers are removed",
        false,
    )?;
    Ok(true)
}
