//! `yy runner run`: the Runner. It connects out to the control plane, long-polls commands,
//! re-checks each with the control plane before running it, runs commands concurrently, and
//! keeps receipts so nothing ever runs twice.

pub mod artifacts;
mod batches;
pub mod browser;
pub mod client;
pub mod computers;
pub mod config;
mod connection;
mod dispatch;
pub mod exec;
pub mod hermes_link;
pub mod host_output;
pub mod image_accept;
pub mod instance;
pub mod live_output;
pub mod model;
pub mod pauses;
pub mod receipts;
pub mod rotate;
pub mod shell;
pub mod telemetry;
pub mod tool_tap;
pub mod tools;
pub mod turns;
pub mod worker;
pub mod worker_pipe;
pub mod worker_turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::machine::RunnerStatus;
use client::MachineClient;
use config::RunnerConfig;
use hermes_link::HermesLink;
use receipts::Receipts;

use connection::lease_loop;
pub use dispatch::CommandFailure;
use dispatch::clean_spool;

/// How long a stopping Runner gives its computers to go.
const COMPUTERS_CLOSE: Duration = Duration::from_secs(10);

pub struct RunnerOptions {
    pub config: RunnerConfig,
    /// Where `config` came from: a renewed token is written back there.
    pub config_path: PathBuf,
    pub data_dir: PathBuf,
    /// Commands running at once.
    pub max_concurrent: usize,
    /// How long in-flight commands may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// Computers that may run at once (1-8).
    pub max_computers: u32,
    /// Worker processes kept started for computer agents' first turns (`--warm-workers`).
    pub warm_workers: usize,
    /// Computers kept started before any agent needs one (`--warm-computers`).
    pub warm_computers: u32,
    /// Where the egress proxy of public-web computers reaches out.
    pub egress: crate::egress::docker::EgressOptions,
    /// The container engine `--engine` named; `None`: the one that answers.
    pub engine: Option<crate::computer::engine::Engine>,
    /// Each computer workspace's size limit; `None`: unlimited.
    pub workspace_limit: Option<u64>,
    /// How long the control plane lets a computer sit idle before it stops it, and how
    /// long before a start waiting for a full pool takes an idle one's slot.
    pub computer_idle: ComputerIdle,
    /// Where the Runner's own metrics are served (`--metrics-listen`); `None`: nowhere.
    pub metrics_listener: Option<tokio::net::TcpListener>,
    /// Take over from another instance of this Runner that is online (`--replace`).
    pub replace: bool,
    /// A host agent's browser context unused this long closes (`--browser-idle`).
    pub browser_idle: Duration,
}

/// What this Runner asks of its idle computers (`--computer-idle`,
/// `--computer-reclaim-after`); the control plane acts on it.
#[derive(Debug, Clone, Copy)]
pub struct ComputerIdle {
    pub idle: Duration,
    pub reclaim_after: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// Refused for good by the control plane (disabled, unknown, replaced, wrong version).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Local(String),
    /// Another instance of this Runner is online (start with --replace to take over).
    #[error("{0}")]
    OnlineElsewhere(String),
}

struct Shared {
    client: MachineClient,
    config: RunnerConfig,
    receipts: Receipts,
    hermes: HermesLink,
    /// Starts and outcomes, several per request when the control plane offers it.
    batches: batches::Batches,
    /// The computer pool, when a Docker engine answered at start.
    computers: Option<Arc<computers::Computers>>,
    /// The managed browser of host agents, when on (runner.json `browser`) and Hermes is
    /// supervised.
    browser: Option<Arc<browser::ManagedBrowser>>,
    /// Workers for computer agents' turns, when a Worker Python is there.
    workers: Option<Arc<worker::Workers>>,
    /// The Hermes home whose profiles hold the models' settings.
    hermes_home: PathBuf,
    /// Files in transit to and from the control plane.
    spool: PathBuf,
    /// Where the instance that connected last is recorded ([`instance`]).
    data_dir: PathBuf,
    /// Commands running now, with the token that cancels each.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// Counts connects and commands started and ended ([`idle_trim_forever`]).
    activity: std::sync::atomic::AtomicU64,
    /// Fires when the grace period after SIGTERM is over.
    hard_stop: CancellationToken,
    computer_idle: ComputerIdle,
    rotation: rotate::Rotation,
}

/// Runs until `shutdown` fires (then finishes or records in-flight work) or the control
/// plane refuses this Runner for good.
pub async fn run(
    opts: RunnerOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunnerError> {
    let receipts = Receipts::open(&opts.data_dir).map_err(|e| RunnerError::Local(e.to_string()))?;
    for id in receipts
        .settle_unfinished()
        .map_err(|e| RunnerError::Local(e.to_string()))?
    {
        tracing::warn!(command = %id, "command was running when this Runner stopped; its outcome is uncertain and it will never run again");
    }
    let client = MachineClient::for_config(&opts.config)
        .map_err(|e| RunnerError::Local(e.to_string()))?
        .takeover(instance::previous(&opts.data_dir), opts.replace);
    let browser = start_browser(&opts.config, &opts.data_dir, opts.browser_idle)?;
    let hermes = HermesLink::new(&opts.config, &opts.data_dir, browser.as_ref())
        .await
        .map_err(RunnerError::Local)?;
    check_hermes(&hermes).await?;
    let computers = start_computers(
        &opts.config.runner_id,
        &opts.data_dir,
        opts.max_computers,
        opts.egress,
        opts.engine,
        opts.workspace_limit,
        opts.warm_computers,
    )
    .await?;
    let hermes_home = opts
        .config
        .hermes_home
        .clone()
        .unwrap_or_else(|| opts.data_dir.join("hermes-home"));
    log_model_settings(&hermes_home, &opts.config.allowed_profiles);
    // Spares only where a computer turn can run.
    let spares = if computers.is_some() {
        opts.warm_workers
    } else {
        0
    };
    let workers = start_workers(&opts.config, &opts.data_dir, &hermes_home, spares);
    let shared = Arc::new(Shared {
        batches: batches::Batches::new(client.clone()),
        client,
        config: opts.config,
        receipts,
        hermes,
        computers,
        browser,
        workers,
        hermes_home,
        spool: clean_spool(&opts.data_dir),
        data_dir: opts.data_dir.clone(),
        inflight: Mutex::default(),
        activity: Default::default(),
        hard_stop: CancellationToken::new(),
        computer_idle: opts.computer_idle,
        rotation: rotate::Rotation::new(opts.config_path),
    });
    telemetry::install();
    // Not in `tasks`: the shutdown waits for those, and a listener never ends by itself.
    let metrics = opts.metrics_listener.map(|l| {
        let upkeep = tokio::spawn(crate::prom::upkeep_forever());
        (tokio::spawn(telemetry::serve(l, shared.clone())), upkeep)
    });
    let tasks = TaskTracker::new();
    tasks.spawn(compact_forever(shared.clone()));
    tasks.spawn(idle_trim_forever(shared.clone()));
    if let Some(b) = &shared.browser {
        tasks.spawn(b.clone().reclaim_forever(shared.hard_stop.clone()));
    }
    if let Some(workers) = &shared.workers {
        tasks.spawn(worker_turn::reap_forever(
            workers.clone(),
            shared.hard_stop.clone(),
        ));
        let (workers, stop) = (workers.clone(), shared.hard_stop.clone());
        tasks.spawn(async move { workers.keep_spares(stop).await });
    }
    let slots = Arc::new(Semaphore::new(opts.max_concurrent));
    tokio::pin!(shutdown);
    let outcome = lease_loop(&shared, &tasks, &slots, &mut shutdown).await;

    // Stop leasing; let what runs finish within the grace period, then record the rest.
    let running = shared.inflight.lock().map(|m| m.len()).unwrap_or(0);
    if running > 0 {
        tracing::info!(running, grace = ?opts.shutdown_grace, "waiting for commands in flight");
    }
    tasks.close();
    let idle = async {
        while shared
            .inflight
            .lock()
            .map(|m| !m.is_empty())
            .unwrap_or(false)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(opts.shutdown_grace, idle)
        .await
        .is_err()
    {
        tracing::warn!("grace period over: recording unfinished commands as uncertain");
    }
    shared.hard_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await;
    // Its computers do not outlive the Runner unsupervised (nor their slots' mounts).
    if let Some(c) = &shared.computers
        && tokio::time::timeout(COMPUTERS_CLOSE, c.close())
            .await
            .is_err()
    {
        tracing::warn!(
            "computers still being removed at exit; the next start removes what is left"
        );
    }
    // Only now: outcomes above were reported within this generation.
    if let Ok(Some(generation)) = outcome
        && let Err(e) = shared.client.disconnect(generation).await
    {
        tracing::debug!(error = %e, "disconnect not acknowledged");
    }
    telemetry::connected(false);
    if let Some((server, upkeep)) = metrics {
        server.abort();
        upkeep.abort();
    }
    outcome.map(|_| ())
}

/// The Workers of computer agents' turns: there when a Worker Python is configured (or
/// found beside a supervised Hermes) and exists.
/// Says where the Hermes home is and which model each allowed profile will use, so that a
/// missing configuration is found at start, naming the file to write, not at the first turn.
fn log_model_settings(hermes_home: &std::path::Path, profiles: &[String]) {
    tracing::info!(hermes_home = %hermes_home.display(), "Hermes home");
    for profile in profiles {
        match model::resolve(hermes_home, profile) {
            Ok(m) => tracing::info!(
                profile = %profile,
                model = %m.model,
                provider = m.provider.as_deref().unwrap_or("-"),
                base_url = m.base_url.as_deref().unwrap_or("-"),
                from = %m.source.display(),
                "model settings found"
            ),
            Err(e) => tracing::warn!(profile = %profile, "no usable model settings: {e}"),
        }
    }
}

fn start_workers(
    config: &RunnerConfig,
    data_dir: &std::path::Path,
    hermes_home: &std::path::Path,
    spares: usize,
) -> Option<Arc<worker::Workers>> {
    let python = config
        .worker_python
        .clone()
        .or_else(|| worker::default_python(config.hermes_command.as_deref()))?;
    match worker::Workers::new(&python, data_dir, spares) {
        Ok(w) => {
            tracing::info!(python = %python.display(), hermes_home = %hermes_home.display(), spares, "computer agents' Worker enabled");
            Some(Arc::new(w))
        }
        Err(e) => {
            tracing::warn!(reason = %e, "computer agents' Worker disabled");
            None
        }
    }
}

/// The managed browser: on unless runner.json turns it off, and only for a Hermes this
/// Runner starts (its plugin and socket are how the model's calls arrive).
fn start_browser(
    config: &RunnerConfig,
    data_dir: &std::path::Path,
    idle: Duration,
) -> Result<Option<Arc<browser::ManagedBrowser>>, RunnerError> {
    if !browser::enabled(config.browser.as_ref()) {
        tracing::info!("managed browser off (runner.json browser.enabled is false)");
        return Ok(None);
    }
    if config.hermes_command.is_none() {
        tracing::info!("no managed browser: it needs a Hermes this Runner starts (hermesCommand)");
        return Ok(None);
    }
    browser::ManagedBrowser::start(config.browser.as_ref(), data_dir, idle)
        .map(Some)
        .map_err(|e| RunnerError::Local(format!("cannot start the managed browser: {e}")))
}

/// At start: a Hermes of the wrong version, or one that refuses our credentials, stops the
/// Runner with a clear message; one that is not up yet only warns (turns fail until it is).
async fn check_hermes(link: &HermesLink) -> Result<(), RunnerError> {
    use crate::hermes::HermesError as E;
    if !link.configured() {
        tracing::info!("no Hermes access configured: this Runner carries no session turns");
        return Ok(());
    }
    match link.client().await {
        Ok(c) => {
            tracing::info!(version = %c.status().version, "Hermes is reachable");
            Ok(())
        }
        Err(
            e @ (E::UnsupportedVersion { .. }
            | E::ContractMismatch { .. }
            | E::Unauthorized { .. }
            | E::TokenFile { .. }
            | E::Config(_)),
        ) => Err(RunnerError::Local(e.to_string())),
        Err(e) => {
            tracing::warn!(error = %e, "Hermes is not reachable yet; turns fail until it is");
            Ok(())
        }
    }
}

/// The computer pool, after removing containers an earlier run left behind; `None` when
/// this host has no usable container engine (the Runner then declares no computer
/// capability). An engine named by `--engine` that cannot run computers is an error.
async fn start_computers(
    runner_id: &str,
    data_dir: &std::path::Path,
    max: u32,
    egress: crate::egress::docker::EgressOptions,
    engine: Option<crate::computer::engine::Engine>,
    workspace_limit: Option<u64>,
    warm: u32,
) -> Result<Option<Arc<computers::Computers>>, RunnerError> {
    let made = computers::Computers::new(
        runner_id,
        data_dir,
        max,
        egress,
        engine,
        workspace_limit,
        warm,
    )
    .await;
    let pool = match made {
        Ok(p) => p,
        Err(e) => {
            if let Some(engine) = engine {
                return Err(RunnerError::Local(format!(
                    "--engine {engine}: cannot run computers: {e}"
                )));
            }
            tracing::info!(reason = %e, "computers disabled on this Runner");
            return Ok(None);
        }
    };
    // A Runner that cannot make limited workspaces says so now, not at the first start.
    pool.workspaces()
        .preflight()
        .map_err(|e| RunnerError::Local(e.to_string()))?;
    match workspace_limit {
        Some(limit) => tracing::info!(
            limit = %crate::computer::workspaces::human(limit),
            reserve = %crate::computer::workspaces::human(crate::computer::workspaces::RESERVE),
            "each computer's workspace is an image of this size"
        ),
        None => tracing::warn!(
            "--workspace-limit 0: workspaces have no size limit; a computer can fill this host's disk and stop the Runner's own databases"
        ),
    }
    let info = pool.provider().engine().clone();
    tracing::info!(engine = %info.engine, version = %info.version, api = %info.api_version, socket = %info.socket, "container engine");
    if info.engine == crate::computer::engine::Engine::Podman {
        tracing::warn!("{}", crate::computer::engine::PODMAN_NO_PUBLIC_WEB);
    }
    match pool.reconcile().await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            removed = n,
            "reconciled: removed orphan computer containers of an earlier run"
        ),
        Err(e) => tracing::warn!(error = %e, "could not reconcile computer containers"),
    }
    tracing::info!(capacity = pool.capacity(), "computers enabled");
    let pool = Arc::new(pool);
    let resumed = pool.resume_pending_stops();
    if resumed > 0 {
        tracing::warn!(
            stops = resumed,
            "retrying stops an earlier run could not confirm; their slots stay taken"
        );
    }
    Ok(Some(pool))
}

fn status(shared: &Shared) -> RunnerStatus {
    let mut capabilities: Vec<String> = exec::CAPABILITIES.iter().map(|s| s.to_string()).collect();
    if shared.hermes.configured() {
        capabilities.extend(
            hermes_link::SESSION_CAPABILITIES
                .iter()
                .map(|s| s.to_string()),
        );
    }
    if let Some(computers) = &shared.computers {
        capabilities.push(crate::api::capabilities::COMPUTER.to_string());
        if shared.workers.is_some() {
            capabilities.push(crate::api::capabilities::COMPUTER_WORKER.to_string());
            capabilities.push(crate::api::capabilities::SHARED_COMPUTER.to_string());
        }
        if computers.public_web().is_ok() {
            capabilities.push(crate::api::capabilities::EGRESS.to_string());
        }
    }
    if shared.browser.is_some() && shared.hermes.configured() {
        capabilities.push(crate::api::capabilities::BROWSER.to_string());
    }
    RunnerStatus {
        version: crate::VERSION.into(),
        capabilities,
        computers_capacity: shared.computers.as_ref().map(|c| c.capacity()).unwrap_or(0),
        hostname: crate::sys::hostname(),
        hermes_listen: shared.hermes.supervised_url(),
        engine: shared
            .computers
            .as_ref()
            .map(|c| c.provider().engine().label()),
        computer_idle_ms: shared
            .computers
            .as_ref()
            .map(|_| shared.computer_idle.idle.as_millis() as u64),
        computer_reclaim_ms: shared
            .computers
            .as_ref()
            .map(|_| shared.computer_idle.reclaim_after.as_millis() as u64),
        warm_computers: shared.computers.as_ref().map(|c| c.warm_target()),
    }
}

impl Shared {
    /// Something happened that touches code: a connect, a command started or ended.
    fn active(&self) {
        self.activity
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Once the Runner has sat idle for a second after start-up or after work (connected,
/// waiting for commands), the code and read-only data only that touched stop counting as
/// its memory ([`crate::sys::release_clean_file_pages`]): an idle Runner holds little more
/// than its own heap. What the next command needs faults back in from the page cache.
async fn idle_trim_forever(shared: Arc<Shared>) {
    use std::sync::atomic::Ordering;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut seen, mut trimmed) = (u64::MAX, u64::MAX);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.hard_stop.cancelled() => return,
        }
        let now = shared.activity.load(Ordering::Relaxed);
        let idle = shared
            .inflight
            .lock()
            .map(|m| m.is_empty())
            .unwrap_or(false);
        if now == seen && now != trimmed && idle {
            trimmed = now;
            match crate::sys::release_clean_file_pages() {
                Ok(kb) => tracing::debug!(released_kb = kb, "idle: released clean file pages"),
                Err(e) => tracing::debug!(error = %e, "idle: cannot release clean file pages"),
            }
        }
        seen = now;
    }
}

async fn compact_forever(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.hard_stop.cancelled() => return,
        }
        match shared.receipts.compact() {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                receipts = n,
                "compacted old receipts into no-replay records"
            ),
            Err(e) => tracing::warn!(error = %e, "receipt compaction failed"),
        }
    }
}
