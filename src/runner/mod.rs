//! `yy runner run`: the Runner. It connects out to the control plane, long-polls commands,
//! re-checks each with the control plane before running it, runs commands concurrently, and
//! keeps receipts so nothing ever runs twice.

pub mod artifacts;
pub mod client;
pub mod computers;
pub mod config;
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
pub mod screen_tools;
pub mod shell;
pub mod team_tools;
pub mod telemetry;
pub mod tool_tap;
pub mod turns;
pub mod worker;
pub mod worker_pipe;
pub mod worker_turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::machine::{
    CompleteParams, LeasedCommand, Outcome, RunnerCommand, RunnerStatus, codes,
};
use client::{MachineClient, MachineError};
use config::RunnerConfig;
use hermes_link::HermesLink;
use receipts::{Prior, Receipts};

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
    /// The computer pool, when a Docker engine answered at start.
    computers: Option<Arc<computers::Computers>>,
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
    let client = MachineClient::new(
        &opts.config.server_url,
        opts.config.token.clone(),
        opts.config.server_cert_sha256.as_deref(),
    )
    .map_err(|e| RunnerError::Local(e.to_string()))?
    .takeover(instance::previous(&opts.data_dir), opts.replace);
    let hermes = HermesLink::new(&opts.config, &opts.data_dir)
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
    )
    .await?;
    let hermes_home = opts
        .config
        .hermes_home
        .clone()
        .unwrap_or_else(|| opts.data_dir.join("hermes-home"));
    log_model_settings(&hermes_home, &opts.config.allowed_profiles);
    let workers = start_workers(&opts.config, &opts.data_dir, &hermes_home);
    let shared = Arc::new(Shared {
        client,
        config: opts.config,
        receipts,
        hermes,
        computers,
        workers,
        hermes_home,
        spool: clean_spool(&opts.data_dir),
        data_dir: opts.data_dir.clone(),
        inflight: Mutex::default(),
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
    if let Some(workers) = &shared.workers {
        tasks.spawn(worker_turn::reap_forever(
            workers.clone(),
            shared.hard_stop.clone(),
        ));
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
) -> Option<Arc<worker::Workers>> {
    let python = config
        .worker_python
        .clone()
        .or_else(|| worker::default_python(config.hermes_command.as_deref()))?;
    match worker::Workers::new(&python, data_dir) {
        Ok(w) => {
            tracing::info!(python = %python.display(), hermes_home = %hermes_home.display(), "computer agents' Worker enabled");
            Some(Arc::new(w))
        }
        Err(e) => {
            tracing::warn!(reason = %e, "computer agents' Worker disabled");
            None
        }
    }
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
) -> Result<Option<Arc<computers::Computers>>, RunnerError> {
    let made =
        computers::Computers::new(runner_id, data_dir, max, egress, engine, workspace_limit).await;
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
        }
        if computers.public_web().is_ok() {
            capabilities.push(crate::api::capabilities::EGRESS.to_string());
        }
    }
    RunnerStatus {
        version: crate::VERSION.into(),
        capabilities,
        computers_capacity: shared.computers.as_ref().map(|c| c.capacity()).unwrap_or(0),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
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
    }
}

/// Jittered, capped exponential back-off: 250 ms doubling to 30 s, each wait drawn from
/// its upper half so a fleet does not reconnect in step.
fn backoff(attempt: u32) -> Duration {
    let cap = 250u64.saturating_mul(1 << attempt.min(7)).min(30_000);
    Duration::from_millis(rand::rng().random_range(cap / 2..=cap))
}

fn refused(e: &MachineError) -> Option<RunnerError> {
    let message = match e.code()? {
        codes::RUNNER_LIVE => {
            let message = match e {
                MachineError::Api { message, .. } => message.clone(),
                other => other.to_string(),
            };
            return Some(RunnerError::OnlineElsewhere(message));
        }
        codes::RUNNER_DISABLED
        | codes::UNKNOWN_RUNNER
        | codes::TOKEN_EXPIRED
        | codes::REPLACED
        | codes::UPGRADE_REQUIRED
        | codes::ORIGIN_REFUSED => e.to_string(),
        _ => return None,
    };
    Some(RunnerError::Refused(message))
}

async fn lease_loop(
    shared: &Arc<Shared>,
    tasks: &TaskTracker,
    slots: &Arc<Semaphore>,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<Option<i64>, RunnerError> {
    let mut attempt = 0u32;
    'connect: loop {
        let status = status(shared);
        let connected = tokio::select! {
            r = shared.client.connect(&status) => r,
            _ = &mut *shutdown => return Ok(None),
        };
        let connected = match connected {
            Ok(c) => c,
            Err(e) => {
                if let Some(fatal) = refused(&e) {
                    return Err(fatal);
                }
                if !e.is_transient() {
                    return Err(RunnerError::Refused(e.to_string()));
                }
                let wait = backoff(attempt);
                attempt += 1;
                tracing::warn!(error = %e, retry_in = ?wait, attempt, "cannot connect to the control plane; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue 'connect,
                    _ = &mut *shutdown => return Ok(None),
                }
            }
        };
        let generation = connected.generation;
        if let Err(e) = instance::record(&shared.data_dir, &shared.client.instance) {
            tracing::warn!(error = %e, "cannot record this instance in the data directory; its next start may need --replace");
        }
        if let Some(c) = &shared.computers {
            *c.generation.lock().unwrap_or_else(|e| e.into_inner()) = generation;
            // The control plane ended every lease of the earlier generation: its containers
            // are orphans now, and their pool slots free.
            match c.reconcile().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    removed = n,
                    generation,
                    "leases ended with the new connection: removed their containers"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "could not remove the containers of ended leases")
                }
            }
        }
        tracing::info!(
            runner = %connected.runner_id,
            generation,
            instance = %shared.client.instance,
            "connected to the control plane"
        );
        telemetry::connected(true);
        for id in &connected.uncertain {
            tracing::warn!(command = %id, "the control plane marked a command of an earlier connection uncertain");
        }
        shared
            .rotation
            .maybe(&shared.client, generation, connected.rotate_token)
            .await;
        attempt = 0;
        loop {
            // Lease only what can run now; wait for a free slot first.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("semaphore never closes"),
                _ = &mut *shutdown => return Ok(Some(generation)),
            };
            let max = slots.available_permits() as u32 + 1;
            drop(permit);
            let poll = telemetry::LongPoll::open();
            let leased = tokio::select! {
                r = shared.client.lease(generation, max) => r,
                _ = &mut *shutdown => return Ok(Some(generation)),
            };
            drop(poll);
            match leased {
                Ok(leased) => {
                    for cmd in leased.commands {
                        let permit = slots.clone().try_acquire_owned().ok();
                        let shared = shared.clone();
                        tasks.spawn(async move {
                            handle(&shared, generation, cmd).await;
                            drop(permit);
                        });
                    }
                    shared
                        .rotation
                        .maybe(&shared.client, generation, leased.rotate_token)
                        .await;
                }
                Err(e) => {
                    if let Some(fatal) = refused(&e) {
                        return Err(fatal);
                    }
                    telemetry::connected(false);
                    if e.code() == Some(codes::STALE_GENERATION) {
                        tracing::warn!(
                            generation,
                            "connection generation ended (control plane restart?); reconnecting"
                        );
                        continue 'connect;
                    }
                    let wait = backoff(attempt);
                    attempt += 1;
                    tracing::warn!(error = %e, retry_in = ?wait, "lost the control plane; reconnecting");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => continue 'connect,
                        _ = &mut *shutdown => return Ok(None),
                    }
                }
            }
        }
    }
}

struct Finished {
    outcome: Outcome,
    result: Option<serde_json::Value>,
    error: Option<String>,
}

impl Finished {
    fn failed(error: impl Into<String>) -> Self {
        Finished {
            outcome: Outcome::Failed,
            result: None,
            error: Some(error.into()),
        }
    }
}

async fn handle(shared: &Arc<Shared>, generation: i64, cmd: LeasedCommand) {
    let id = cmd.id.clone();
    if shared
        .inflight
        .lock()
        .map(|m| m.contains_key(&id))
        .unwrap_or(false)
    {
        tracing::debug!(command = %id, "delivered again while running; ignored");
        return;
    }
    let fp = receipts::fingerprint(&cmd.id, &cmd.kind, &cmd.payload);
    match shared.receipts.lookup(&id, &fp) {
        Ok(Prior::New) => {}
        Ok(Prior::Finished(stored)) => {
            tracing::info!(command = %id, outcome = stored.outcome.as_str(), "duplicate delivery: reporting the stored outcome, not running again");
            let f = Finished {
                outcome: stored.outcome,
                result: stored.result,
                error: stored.error,
            };
            report(shared, generation, &id, f).await;
            return;
        }
        Ok(Prior::Unfinished) => {
            report(
                shared,
                generation,
                &id,
                Finished {
                    outcome: Outcome::Uncertain,
                    result: None,
                    error: Some("started earlier without an outcome; it will not run again".into()),
                },
            )
            .await;
            return;
        }
        Ok(Prior::Mismatch) => {
            report(
                shared,
                generation,
                &id,
                Finished::failed(
                    "this command id was delivered before with different content; refused",
                ),
            )
            .await;
            return;
        }
        Err(e) => {
            tracing::error!(command = %id, error = %e, "cannot read receipts; not running the command");
            return;
        }
    }
    // The re-check: still ours, not cancelled, within its deadline.
    let granted = match shared.client.start(generation, &id).await {
        Ok(g) => g,
        Err(e) => {
            tracing::info!(command = %id, error = %e, "control plane refused to start the command");
            return;
        }
    };
    if let Err(e) = shared.receipts.begin(&id, &fp, &cmd.kind).await {
        tracing::error!(command = %id, error = %e, "cannot write the receipt; not running the command");
        return;
    }
    let token = CancellationToken::new();
    if let Ok(mut m) = shared.inflight.lock() {
        m.insert(id.clone(), token.clone());
    }
    let remaining =
        Duration::from_millis((granted.deadline_ms - crate::timefmt::now_ms()).max(0) as u64);
    tracing::debug!(command = %id, kind = %cmd.kind, "running");
    // A Worker turn ends itself when stopped (the model loop interrupted, the guest
    // commands killed); other commands are dropped where they are.
    let cooperative = cmd.kind == crate::api::machine::CommandKind::WorkerTurn.as_sql();
    let kind = cmd.kind.clone();
    let running = telemetry::Running::start();
    let finished = tokio::select! {
        f = execute(shared, generation, cmd, token.clone()) => f,
        _ = token.cancelled(), if !cooperative => Finished {
            outcome: Outcome::Cancelled,
            result: None,
            error: Some("cancelled while running".into()),
        },
        _ = tokio::time::sleep(remaining) => Finished::failed("the deadline passed while it was running"),
        _ = shared.hard_stop.cancelled() => Finished {
            outcome: Outcome::Uncertain,
            result: None,
            error: Some("the Runner stopped before the command finished".into()),
        },
    };
    if let Err(e) = shared
        .receipts
        .finish(
            &id,
            finished.outcome,
            finished.result.as_ref(),
            finished.error.as_deref(),
        )
        .await
    {
        tracing::error!(command = %id, error = %e, "cannot record the outcome");
    }
    if let Ok(mut m) = shared.inflight.lock() {
        m.remove(&id);
    }
    drop(running);
    telemetry::command_ended(&kind, finished.outcome);
    report(shared, generation, &id, finished).await;
}

/// Why a command did not end `done`: the outcome it ends with instead, and what to tell
/// the operator.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CommandFailure {
    pub outcome: Outcome,
    pub message: String,
}

impl CommandFailure {
    /// Nothing happened, or the work was refused.
    pub fn failed(message: impl Into<String>) -> Self {
        CommandFailure {
            outcome: Outcome::Failed,
            message: message.into(),
        }
    }

    /// The work may have had effects and its outcome is unknown: never replayed.
    pub fn uncertain(message: impl Into<String>) -> Self {
        CommandFailure {
            outcome: Outcome::Uncertain,
            message: message.into(),
        }
    }
}

impl From<String> for CommandFailure {
    fn from(message: String) -> Self {
        CommandFailure::failed(message)
    }
}

impl From<computers::PoolError> for CommandFailure {
    fn from(e: computers::PoolError) -> Self {
        CommandFailure::failed(e.to_string())
    }
}

/// Runs one command: its kind and payload are read once, here.
async fn execute(
    shared: &Arc<Shared>,
    generation: i64,
    cmd: LeasedCommand,
    stop: CancellationToken,
) -> Finished {
    let command = match RunnerCommand::parse(&cmd.kind, &cmd.payload) {
        // The team tool id comes with the lease, never from the payload.
        Ok(RunnerCommand::WorkerTurn(mut p)) => {
            p.team_tools = cmd.team_tools.clone();
            RunnerCommand::WorkerTurn(p)
        }
        Ok(command) => command,
        Err(e) => return Finished::failed(e),
    };
    let computer = match &command {
        RunnerCommand::ComputerStart(p) => Some(p.computer_id.clone()),
        RunnerCommand::ComputerExec(p) => Some(p.computer_id.clone()),
        RunnerCommand::WorkerTurn(p) => Some(p.computer.computer_id.clone()),
        _ => None,
    };
    let pool = || {
        shared.computers.as_ref().ok_or_else(|| {
            CommandFailure::failed(
                "this Runner cannot run computers: no container engine answered when it started",
            )
        })
    };
    let answer: Result<serde_json::Value, CommandFailure> = match command {
        RunnerCommand::Ping(p) => exec::ping(p).await.map_err(Into::into),
        RunnerCommand::Fetch(p) => exec::fetch(
            p,
            shared.config.artifact_roots.clone(),
            transfer(shared, generation, &cmd.id),
        )
        .await
        .map_err(Into::into),
        RunnerCommand::Cancel(p) => Ok(cancel_running(shared, p.command_id)),
        RunnerCommand::SessionTurn(p) => {
            let r = with_events(shared, generation, &cmd.id, |tx| {
                turns::turn(&shared.hermes, &shared.config.allowed_profiles, p, tx)
            })
            .await;
            // A Hermes this Runner started lives in its Hermes home, whatever the error
            // text says about ~/.hermes.
            match (&shared.config.hermes_command, r) {
                (Some(_), Ok(v)) => Ok(turns::name_the_home(v, &shared.hermes_home)),
                (_, r) => r,
            }
        }
        RunnerCommand::SessionStop(r) => turns::stop(&shared.hermes, r).await,
        RunnerCommand::SessionClose(r) => turns::close(&shared.hermes, r).await,
        RunnerCommand::SessionList(_) => turns::list(&shared.hermes).await,
        RunnerCommand::SessionCheck(r) => turns::check(&shared.hermes, r).await,
        RunnerCommand::ComputerStart(p) => async { Ok(pool()?.start(p).await?) }.await,
        RunnerCommand::ComputerStop(p) | RunnerCommand::ComputerRemove(p) => {
            async { Ok(pool()?.stop(p).await?) }.await
        }
        RunnerCommand::ComputerExec(p) => async { Ok(pool()?.exec(p).await?) }.await,
        RunnerCommand::ComputerScreen(p) => async { Ok(pool()?.screen(p).await?) }.await,
        RunnerCommand::ComputerPause(p) => {
            async { Ok(pool()?.pauses.pause(&p.computer_id, p.control_fence).await) }.await
        }
        RunnerCommand::ComputerResume(p) => {
            async {
                Ok(pool()?
                    .pauses
                    .resume(&p.computer_id, p.control_fence, &p.note))
            }
            .await
        }
        RunnerCommand::ComputerShell(p) => {
            async {
                let pool = pool()?.clone();
                shell::open(
                    pool,
                    &shared.client,
                    generation,
                    p,
                    shared.hard_stop.clone(),
                )
                .await
            }
            .await
        }
        RunnerCommand::WorkerTurn(p) => worker_turn(shared, generation, &cmd.id, p, stop).await,
        RunnerCommand::EgressLog(q) => async { Ok(pool()?.egress().log(q).await?) }.await,
        RunnerCommand::ComputerImageAccept(p) => {
            async { image_accept::accept(pool()?, p).await }.await
        }
    };
    // A computer's start, exec and turn tell the control plane what its workspace takes.
    let answer = match (answer, &computer, &shared.computers) {
        (Ok(mut v), Some(id), Some(pool)) if v.is_object() => {
            if let Some(usage) = pool.workspace_usage(id).await {
                v[crate::api::computers::WORKSPACE_USAGE_KEY] =
                    serde_json::to_value(usage).unwrap_or_default();
            }
            Ok(v)
        }
        (answer, _, _) => answer,
    };
    match answer {
        Ok(v) => Finished {
            outcome: Outcome::Done,
            result: Some(v),
            error: None,
        },
        Err(f) => Finished {
            outcome: f.outcome,
            result: None,
            error: Some(f.message),
        },
    }
}

/// Runs a turn whose events stream to the control plane as they come; every event is
/// delivered before the outcome is.
async fn with_events<F>(
    shared: &Arc<Shared>,
    generation: i64,
    command_id: &str,
    turn: impl FnOnce(tokio::sync::mpsc::UnboundedSender<crate::api::sessions::TurnEvent>) -> F,
) -> Result<serde_json::Value, CommandFailure>
where
    F: std::future::Future<Output = Result<serde_json::Value, CommandFailure>>,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forwarder = tokio::spawn(forward_events(
        shared.client.clone(),
        generation,
        command_id.to_string(),
        rx,
    ));
    let r = turn(tx).await;
    let _ = forwarder.await;
    r
}

/// A computer agent's turn: the Worker's model loop, every tool in its computer.
async fn worker_turn(
    shared: &Arc<Shared>,
    generation: i64,
    command_id: &str,
    p: crate::api::sessions::WorkerTurnPayload,
    stop: CancellationToken,
) -> Result<serde_json::Value, CommandFailure> {
    let (Some(pool), Some(workers)) = (&shared.computers, &shared.workers) else {
        return Err(CommandFailure::failed(
            "this Runner cannot run computer agents' turns: it needs a Docker engine and a Worker Python",
        ));
    };
    let exports = artifacts::TurnExports::new(transfer(shared, generation, command_id));
    let host = worker_turn::WorkerHost {
        pool,
        workers,
        hermes_home: &shared.hermes_home,
        allowed_profiles: &shared.config.allowed_profiles,
        exports: &exports,
        control: &shared.client,
        generation,
    };
    with_events(shared, generation, command_id, |tx| {
        worker_turn::turn(host, p, tx, stop)
    })
    .await
}

/// The transfers of one running command.
fn transfer(shared: &Shared, generation: i64, command_id: &str) -> artifacts::Transfer {
    artifacts::Transfer {
        client: shared.client.clone(),
        generation,
        command_id: command_id.to_string(),
        spool: shared.spool.clone(),
    }
}

/// The spool directory, emptied of what an earlier run left in transit.
fn clean_spool(data_dir: &std::path::Path) -> PathBuf {
    let spool = data_dir.join("spool");
    let _ = std::fs::remove_dir_all(&spool);
    spool
}

/// Cancels a command running on this Runner, if it is.
fn cancel_running(shared: &Shared, target: String) -> serde_json::Value {
    let token = shared
        .inflight
        .lock()
        .ok()
        .and_then(|m| m.get(&target).cloned());
    let found = token.is_some();
    if let Some(t) = token {
        t.cancel();
    }
    serde_json::json!({ "command_id": target, "was_running": found })
}

/// Reports an outcome, retrying through network trouble. A refusal (another outcome won,
/// or the generation ended) is final: the control plane already decided.
async fn report(shared: &Arc<Shared>, generation: i64, id: &str, f: Finished) {
    let mut params = reportable(CompleteParams {
        outcome: f.outcome,
        result: f.result,
        error: f.error,
    });
    let mut attempt = 0;
    loop {
        match shared.client.complete(generation, id, &params).await {
            Ok(()) => return,
            // Whatever the control plane cannot take, it still learns how the command ended.
            Err(e) if e.status() == Some(413) && params.result.is_some() => {
                tracing::warn!(command = %id, error = %e, "the result was refused as too large; reporting a failure instead");
                params = too_large(params.result.as_ref().map_or(0, |r| r.to_string().len()));
            }
            Err(e) if e.is_transient() && attempt < 8 && !shared.hard_stop.is_cancelled() => {
                let wait = backoff(attempt);
                attempt += 1;
                tracing::warn!(command = %id, error = %e, retry_in = ?wait, "cannot report the outcome yet");
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "outcome not accepted by the control plane");
                return;
            }
        }
    }
}

/// An outcome the control plane takes: a result over its size limit becomes a failure
/// that says so (an exec's output is capped before this; this is the last line).
fn reportable(params: CompleteParams) -> CompleteParams {
    let size = params.result.as_ref().map_or(0, |r| r.to_string().len());
    if size > crate::api::machine::MAX_RESULT_JSON_BYTES {
        too_large(size)
    } else {
        params
    }
}

fn too_large(size: usize) -> CompleteParams {
    CompleteParams {
        outcome: Outcome::Failed,
        result: None,
        error: Some(format!(
            "the result ({size} bytes as JSON) is larger than the control plane takes ({} bytes); it was dropped",
            crate::api::machine::MAX_RESULT_JSON_BYTES
        )),
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

/// Sends a turn's events in order, batching whatever queued up while a request was out.
async fn forward_events(
    client: MachineClient,
    generation: i64,
    id: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::api::sessions::TurnEvent>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        if let Err(e) = client.events(generation, &id, batch).await {
            tracing::warn!(command = %id, error = %e, "events not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_over_the_limit_is_reported_as_a_failure_that_says_so() {
        let small = reportable(CompleteParams {
            outcome: Outcome::Done,
            result: Some(serde_json::json!({ "stdout": "ok" })),
            error: None,
        });
        assert_eq!(small.outcome, Outcome::Done);
        assert!(small.result.is_some());
        let big = "\u{0}".repeat(crate::api::machine::MAX_RESULT_JSON_BYTES / 6 + 1);
        let r = reportable(CompleteParams {
            outcome: Outcome::Done,
            result: Some(serde_json::json!({ "stdout": big })),
            error: None,
        });
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(r.result.is_none());
        assert!(
            r.error
                .unwrap()
                .contains("larger than the control plane takes")
        );
    }
}
