//! `yy bench dispatch`: measures the command path with real processes on loopback.
//!
//! It starts a private control plane (`yy serve`) and a Runner (`yy runner run`) from this
//! executable in a temporary directory, drives them through the admin API and the machine
//! API like any client would, and reports pickup latency, throughput, the Runner's idle
//! memory and the control plane's memory while it holds many idle long-polls. Every child is
//! stopped and the directory removed on every path out, errors and Ctrl-C included.

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command as Process, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde::Serialize;

use crate::api::client::Client;
use crate::api::machine::{
    self, Connected, HEADER_GENERATION, HEADER_INSTANCE, HEADER_PROTOCOL, LeaseParams,
    PROTOCOL_VERSION, PingParams, PingResult, RunnerStatus,
};
use crate::api::{params, views};
use crate::error::{CliError, Exit};
use crate::output;
use crate::timefmt::now_us;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Measure command dispatch on this machine: pickup latency, throughput, Runner memory
    /// when idle and control plane memory under idle long-polls
    ///
    /// Starts its own control plane and Runner from this executable in a temporary
    /// directory (nothing else is touched), and stops them when done. Exits non-zero only
    /// when the benchmark cannot run; missed targets are reported, not failed.
    Dispatch(DispatchArgs),
    /// Measure computers side by side with the docker CLI: cold start (create to guest agent
    /// ready) against `docker run --rm IMAGE true`, and a tool round trip (`exec true` through
    /// the guest agent) against `docker exec CONTAINER true`
    Computer(ComputerBenchArgs),
}

#[derive(Debug, Args)]
pub struct ComputerBenchArgs {
    /// The full image id (sha256:...) of a computer image (`yy image build` prints it)
    pub image: String,
    /// Samples of each figure
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// Print the figures and targets as one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DispatchArgs {
    /// Print the figures and targets as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Pings in the throughput run (0 skips it)
    #[arg(long, value_name = "N", default_value_t = 5000,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub commands: u32,
    /// Pings timed one at a time for the pickup latency (0 skips it)
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub latency_samples: u32,
    /// Idle long-polls held against the control plane, one registered Runner each (0 skips
    /// it)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(0..=20_000))]
    pub long_polls: u32,
    /// Concurrent enqueuers in the throughput run
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub enqueuers: u32,
    /// The yy executable to run as control plane and Runner [default: this one]
    #[arg(long, value_name = "PATH")]
    pub bin: Option<PathBuf>,
}

/// The targets of issue 3 (docs/benchmarks.md).
pub mod targets {
    pub const PICKUP_P50_MS: f64 = 5.0;
    pub const PICKUP_P99_MS: f64 = 25.0;
    pub const THROUGHPUT_PER_S: f64 = 2000.0;
    pub const RUNNER_IDLE_RSS_MB: f64 = 20.0;
    pub const LONG_POLLS_RSS_MB: f64 = 150.0;
    /// The long-poll target is stated for this many long-polls.
    pub const LONG_POLLS: u32 = 1000;
}

/// Untimed pings before the latency samples (connections, caches, first allocations).
const WARMUP_PINGS: u32 = 20;
/// How long a latency ping may live; none should come near it.
const PING_TIMEOUT_MS: u64 = 30_000;
/// Commands the benchmark's Runner runs at once (`yy runner run`'s default).
const RUNNER_MAX_CONCURRENT: u32 = 64;
/// How long each benchmark long-poll asks to wait (the server caps it at 25 s).
const LONG_POLL_WAIT_MS: u64 = 20_000;

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Computer(a) => computer(a).await,
        BenchCommand::Dispatch(a) => {
            // Ctrl-C or SIGTERM drops the benchmark, whose guards stop the children and
            // clean up.
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = dispatch(a) => r,
                _ = tokio::signal::ctrl_c() => Err(interrupted()),
                _ = term.recv() => Err(interrupted()),
            }
        }
    }
}

fn interrupted() -> anyhow::Error {
    CliError::new(
        Exit::Cancelled,
        "interrupted; the benchmark's control plane and Runner were stopped",
    )
    .into()
}

// ---- the report ----

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    cpu_model: Option<String>,
    kernel: Option<String>,
    memory_mb: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Parameters {
    commands: u32,
    latency_samples: u32,
    warmup_pings: u32,
    long_polls: u32,
    enqueuers: u32,
    runner_max_concurrent: u32,
}

#[derive(Debug, Serialize)]
struct Latency {
    samples: usize,
    min_ms: f64,
    mean_ms: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Enqueue to outcome seen by the client (includes reporting and the client's wait).
    round_trip_p50_ms: f64,
    round_trip_p99_ms: f64,
}

#[derive(Debug, Serialize)]
struct Throughput {
    commands: u32,
    /// From the first enqueue request to the last outcome stored by the control plane.
    seconds: f64,
    commands_per_s: f64,
    /// Enqueue requests answered per second (all enqueuers together).
    enqueue_per_s: f64,
    /// Final states of the run's commands; all must be `done`.
    states: std::collections::BTreeMap<String, u64>,
    /// CPU time per command during the run, by process, in milliseconds.
    cpu_ms_per_command: CpuPerCommand,
    /// How busy the whole machine was during the run (100 = every CPU), and how much of
    /// that was not the benchmark's three processes (other load skews every figure).
    machine_busy_percent: f64,
    other_processes_percent: f64,
}

#[derive(Debug, Serialize)]
struct CpuPerCommand {
    control_plane: f64,
    runner: f64,
    /// The benchmark's own enqueuers (an admin API client).
    client: f64,
}

#[derive(Debug, Serialize)]
struct LongPolls {
    long_polls: u32,
    control_plane_rss_mb_before: f64,
    control_plane_rss_mb: f64,
    /// Open sockets of the control plane while they were held.
    control_plane_sockets: usize,
}

#[derive(Debug, Serialize)]
struct Targets {
    pickup_p50_ms_max: f64,
    pickup_p99_ms_max: f64,
    throughput_commands_per_s_min: f64,
    runner_idle_rss_mb_max: f64,
    long_polls_control_plane_rss_mb_max: f64,
    long_polls_count: u32,
}

#[derive(Debug, Serialize)]
struct Check {
    figure: &'static str,
    value: f64,
    unit: &'static str,
    /// `<=` or `>=`.
    comparison: &'static str,
    target: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    benchmark: &'static str,
    version: &'static str,
    machine: Machine,
    parameters: Parameters,
    pickup_latency: Option<Latency>,
    throughput: Option<Throughput>,
    /// MB are 10^6 bytes of VmRSS.
    runner_idle_rss_mb: f64,
    runner_rss_mb_after_throughput: Option<f64>,
    control_plane_rss_mb_idle: f64,
    long_polls: Option<LongPolls>,
    targets: Targets,
    checks: Vec<Check>,
    all_targets_met: bool,
    missed: Vec<String>,
}

// ---- processes and the temporary directory ----

/// A private temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("yy-bench-{}", uuid::Uuid::new_v4()));
        crate::fsutil::create_private_dir(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, stopped (SIGTERM, then SIGKILL) when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Fails when the process has exited (with its last log lines).
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(CliError::failure(format!(
                "the benchmark's {} exited ({status}); its last log lines: {}",
                self.name,
                self.log_tail()
            ))
            .into());
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after `grace`. Returns the exit code if it exited by itself.
    fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return status.code();
        }
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Everything the benchmark started. Fields drop in order: children first, then the
/// directory they used.
struct Harness {
    runner: Option<Proc>,
    serve: Option<Proc>,
    dir: TempDir,
    bin: PathBuf,
}

impl Harness {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.0.join(rel)
    }

    fn command(&self, args: &[&str]) -> Process {
        let mut cmd = Process::new(&self.bin);
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_DATA_HOME", self.path("xdg-data"))
            .env("YY_LOG", "info")
            .env_remove("YY_SERVER")
            .env_remove("YY_TOKEN")
            .env_remove("YY_DATA_DIR")
            .stdin(Stdio::null());
        // Should the benchmark die without cleaning up (SIGKILL), its children go too. The
        // signal follows the thread that spawned them: the one running the benchmark's
        // future (the main thread or a runtime worker), which lives as long as it does.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        cmd
    }

    fn spawn(&self, name: &'static str, args: &[&str], stdout: Stdio) -> anyhow::Result<Proc> {
        let log = self.path(&format!("{name}.log"));
        let stderr = std::fs::File::create(&log)?;
        let child = self
            .command(args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} {}", self.bin.display(), args.join(" ")))?;
        Ok(Proc { name, child, log })
    }
}

/// stdout is the report; progress goes to stderr in both modes.
fn progress(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "bench: {text}");
}

// ---- the benchmark ----

/// The control plane and the Runner the benchmark drives, ready.
struct Setup {
    h: Harness,
    url: String,
    admin: Client,
    runner_id: String,
    /// The control plane's database (read-only use: final states and outcome times).
    db: PathBuf,
}

impl Setup {
    fn serve_pid(&self) -> u32 {
        self.h.serve.as_ref().expect("the control plane runs").pid()
    }

    fn runner_pid(&self) -> Option<u32> {
        self.h.runner.as_ref().map(Proc::pid)
    }

    /// The children still run (else an error with the last lines of the dead one's log).
    fn check_children(&mut self) -> anyhow::Result<()> {
        for p in [self.h.serve.as_mut(), self.h.runner.as_mut()]
            .into_iter()
            .flatten()
        {
            p.check_alive()?;
        }
        Ok(())
    }

    /// Runs `work`, or fails as soon as a child exits (the work would only wait for
    /// deadlines then).
    async fn while_alive<T>(
        &mut self,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let pids: Vec<u32> = [Some(self.serve_pid()), self.runner_pid()]
            .into_iter()
            .flatten()
            .collect();
        let watch = async {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !pids.iter().all(|&p| running(p)) {
                    return;
                }
            }
        };
        let result = tokio::select! {
            r = work => r,
            _ = watch => Err(CliError::failure("a child process exited during the run").into()),
        };
        if result.is_err() {
            // Say which child died, with its log, rather than what that broke.
            self.check_children()?;
        }
        result
    }
}

async fn dispatch(args: DispatchArgs) -> anyhow::Result<()> {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("finding this executable")?,
    };
    if !bin.is_file() {
        return Err(CliError::usage(format!("{} is not an executable file", bin.display())).into());
    }
    // 1 listener + the long-polls + a margin for the admin clients, on both sides (the
    // children inherit the limit).
    raise_fd_limit(args.long_polls as u64 + 256)?;
    let mut s = setup(bin, &args).await?;

    // Idle memory: connected, long-polling, nothing to do.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runner_pid = s.runner_pid().expect("the Runner runs");
    let runner_idle_rss_mb = rss_mb(runner_pid)?;
    let control_plane_rss_mb_idle = rss_mb(s.serve_pid())?;

    let pickup_latency = if args.latency_samples > 0 {
        progress(&format!(
            "pickup latency: {} pings one at a time (after {WARMUP_PINGS} untimed)",
            args.latency_samples
        ));
        let (admin, runner_id) = (s.admin.clone(), s.runner_id.clone());
        Some(
            s.while_alive(latency(&admin, &runner_id, args.latency_samples))
                .await?,
        )
    } else {
        None
    };

    let (throughput, runner_rss_mb_after_throughput) = if args.commands > 0 {
        progress(&format!(
            "throughput: {} pings from {} concurrent enqueuers",
            args.commands, args.enqueuers
        ));
        let run = Run {
            admin: s.admin.clone(),
            runner_id: s.runner_id.clone(),
            db: s.db.clone(),
            pids: [s.serve_pid(), runner_pid, std::process::id()],
        };
        let t = s
            .while_alive(throughput(&run, args.commands, args.enqueuers))
            .await?;
        (Some(t), Some(rss_mb(runner_pid)?))
    } else {
        (None, None)
    };

    let long_polls = if args.long_polls > 0 {
        // Only the benchmark's long-polls: the Runner goes (a clean SIGTERM stop).
        if let Some(mut runner) = s.h.runner.take() {
            let code = runner.stop(Duration::from_secs(15));
            if code != Some(0) {
                progress(&format!(
                    "warning: the Runner did not exit 0 on SIGTERM ({code:?}); its log: {}",
                    runner.log_tail()
                ));
            }
        }
        progress(&format!(
            "long-polls: registering {} Runners and holding one long-poll each",
            args.long_polls
        ));
        let (admin, url, pid) = (s.admin.clone(), s.url.clone(), s.serve_pid());
        Some(
            s.while_alive(long_poll_rss(&admin, &url, pid, args.long_polls))
                .await?,
        )
    } else {
        None
    };
    s.check_children()?;
    drop(s);

    let report = report(
        &args,
        pickup_latency,
        throughput,
        runner_idle_rss_mb,
        runner_rss_mb_after_throughput,
        control_plane_rss_mb_idle,
        long_polls,
    );
    if !report.missed.is_empty() {
        progress(&format!(
            "missed {} target(s): {}",
            report.missed.len(),
            report.missed.join("; ")
        ));
    }
    if args.json {
        output::json(&report)
    } else {
        print_human(&report)
    }
}

/// Creates the data directory and its admin, starts the control plane, registers and
/// starts the Runner, and waits until the Runner is online.
async fn setup(bin: PathBuf, args: &DispatchArgs) -> anyhow::Result<Setup> {
    let mut h = Harness {
        runner: None,
        serve: None,
        dir: TempDir::new()?,
        bin,
    };
    let db_dir = h.path("serve-data");
    let data = db_dir.display().to_string();

    // The first admin, straight into the data directory.
    progress("creating the control plane's data directory");
    let password = hex::encode(rand::random::<[u8; 16]>());
    let mut create = h
        .command(&[
            "admin",
            "create",
            "--data-dir",
            &data,
            "--username",
            "bench",
            "--password-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running yy admin create")?;
    // A child that exits without reading says why on stderr; its status tells below (a
    // broken pipe here would otherwise pass for a closed stdout and exit 0).
    let _ = create
        .stdin
        .take()
        .expect("piped")
        .write_all(password.as_bytes());
    let out = create.wait_with_output()?;
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "yy admin create failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }

    // The control plane, with room in the queue for the whole throughput run.
    progress("starting the control plane");
    let max_pending = (args.commands as u64 + 1000).to_string();
    let mut serve = h.spawn(
        "control plane",
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &data,
            "--max-pending-commands",
            &max_pending,
        ],
        Stdio::piped(),
    )?;
    let stdout = serve.child.stdout.take().expect("piped");
    h.serve = Some(serve);
    let first = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        }),
    )
    .await;
    let line = match first {
        Ok(Ok(Ok(line))) => line,
        _ => String::new(),
    };
    let Some(url) = line
        .trim()
        .strip_prefix("listening on ")
        .map(str::to_string)
    else {
        let serve = h.serve.as_mut().expect("started");
        serve.check_alive()?;
        return Err(CliError::failure(format!(
            "the control plane did not say where it listens (first line {:?}); its log: {}",
            line.trim(),
            serve.log_tail()
        ))
        .into());
    };

    let login: views::LoginResult = Client::new(&url, None)?
        .post(
            "api/v1/auth/login",
            &params::LoginParams {
                username: "bench".into(),
                password,
            },
        )
        .await
        .context("logging in to the benchmark's control plane")?;
    let admin = Client::new(&url, Some(login.token))?;
    let _: views::Source = admin
        .post(
            "api/v1/sources",
            &params::SourceCreate {
                name: "bench".into(),
                description: "yy bench dispatch".into(),
            },
        )
        .await?;
    let _: views::Profile = admin
        .post(
            "api/v1/profiles",
            &params::ProfileCreate {
                name: "bench".into(),
                cwd: None,
            },
        )
        .await?;
    let reg = register(&admin, &url, "bench").await?;
    let runner_id = reg.runner.id.clone();
    crate::fsutil::create_private_dir(&h.path("runner"))?;
    let config_path = h.path("runner/runner.json");
    let mut config = serde_json::to_vec_pretty(&reg.config)?;
    config.push(b'\n');
    crate::fsutil::write_atomic(&config_path, &config, 0o600)?;

    progress("starting the Runner");
    let runner_data = h.path("runner/data").display().to_string();
    let runner = h.spawn(
        "Runner",
        &[
            "runner",
            "run",
            "--config",
            &config_path.display().to_string(),
            "--data-dir",
            &runner_data,
            "--max-concurrent",
            &RUNNER_MAX_CONCURRENT.to_string(),
        ],
        Stdio::null(),
    )?;
    h.runner = Some(runner);
    let mut s = Setup {
        h,
        url,
        admin,
        runner_id,
        db: crate::server::store::db_path(&db_dir),
    };
    let (admin, runner_id) = (s.admin.clone(), s.runner_id.clone());
    s.while_alive(wait_online(&admin, &runner_id)).await?;
    Ok(s)
}

fn report(
    args: &DispatchArgs,
    pickup_latency: Option<Latency>,
    throughput: Option<Throughput>,
    runner_idle_rss_mb: f64,
    runner_rss_mb_after_throughput: Option<f64>,
    control_plane_rss_mb_idle: f64,
    long_polls: Option<LongPolls>,
) -> Report {
    let mut checks = Vec::new();
    if let Some(l) = &pickup_latency {
        checks.push(at_most(
            "pickup latency p50",
            l.p50_ms,
            "ms",
            targets::PICKUP_P50_MS,
        ));
        checks.push(at_most(
            "pickup latency p99",
            l.p99_ms,
            "ms",
            targets::PICKUP_P99_MS,
        ));
    }
    if let Some(t) = &throughput {
        checks.push(Check {
            figure: "throughput",
            value: t.commands_per_s,
            unit: "commands/s",
            comparison: ">=",
            target: targets::THROUGHPUT_PER_S,
            pass: t.commands_per_s >= targets::THROUGHPUT_PER_S,
        });
    }
    checks.push(at_most(
        "Runner RSS, idle",
        runner_idle_rss_mb,
        "MB",
        targets::RUNNER_IDLE_RSS_MB,
    ));
    if let Some(lp) = &long_polls {
        // The target is for 1,000 long-polls; other counts are reported, not judged.
        if lp.long_polls == targets::LONG_POLLS {
            checks.push(at_most(
                "control plane RSS, 1000 long-polls",
                lp.control_plane_rss_mb,
                "MB",
                targets::LONG_POLLS_RSS_MB,
            ));
        }
    }
    let missed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| {
            format!(
                "{}: {} {} (target {} {} {})",
                c.figure,
                fmt_value(c.value),
                c.unit,
                c.comparison,
                fmt_value(c.target),
                c.unit
            )
        })
        .collect();
    Report {
        benchmark: "dispatch",
        version: crate::VERSION,
        machine: machine(),
        parameters: Parameters {
            commands: args.commands,
            latency_samples: args.latency_samples,
            warmup_pings: if args.latency_samples > 0 {
                WARMUP_PINGS
            } else {
                0
            },
            long_polls: args.long_polls,
            enqueuers: args.enqueuers,
            runner_max_concurrent: RUNNER_MAX_CONCURRENT,
        },
        pickup_latency,
        throughput,
        runner_idle_rss_mb: round2(runner_idle_rss_mb),
        runner_rss_mb_after_throughput: runner_rss_mb_after_throughput.map(round2),
        control_plane_rss_mb_idle: round2(control_plane_rss_mb_idle),
        long_polls,
        targets: Targets {
            pickup_p50_ms_max: targets::PICKUP_P50_MS,
            pickup_p99_ms_max: targets::PICKUP_P99_MS,
            throughput_commands_per_s_min: targets::THROUGHPUT_PER_S,
            runner_idle_rss_mb_max: targets::RUNNER_IDLE_RSS_MB,
            long_polls_control_plane_rss_mb_max: targets::LONG_POLLS_RSS_MB,
            long_polls_count: targets::LONG_POLLS,
        },
        all_targets_met: missed.is_empty(),
        missed,
        checks,
    }
}

fn at_most(figure: &'static str, value: f64, unit: &'static str, target: f64) -> Check {
    Check {
        figure,
        value,
        unit,
        comparison: "<=",
        target,
        pass: value <= target,
    }
}

async fn register(
    admin: &Client,
    url: &str,
    source: &str,
) -> anyhow::Result<views::RunnerRegistration> {
    Ok(admin
        .post(
            "api/v1/runners",
            &params::RunnerRegister {
                source: source.into(),
                profiles: vec!["bench".into()],
                server_url: url.into(),
                hermes_url: "http://127.0.0.1:9119".into(),
                artifact_roots: vec![],
                computer_image: None,
            },
        )
        .await?)
}

async fn wait_online(admin: &Client, runner_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r: views::Runner = admin.get(&format!("api/v1/runners/{runner_id}")).await?;
        if r.online {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::failure(
                "the benchmark's Runner did not come online within 20 s",
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until a command is final.
async fn wait_final(admin: &Client, id: &str) -> anyhow::Result<machine::Command> {
    loop {
        let cmd: machine::Command = admin
            .get(&format!("api/v1/commands/{id}?wait_ms=25000"))
            .await?;
        if cmd.is_final() {
            return Ok(cmd);
        }
    }
}

async fn enqueue_ping(
    admin: &Client,
    runner_id: &str,
    timeout_ms: u64,
) -> anyhow::Result<machine::Command> {
    Ok(admin
        .post(
            &format!("api/v1/runners/{runner_id}/ping"),
            &PingParams {
                hold_ms: 0,
                timeout_ms: Some(timeout_ms),
            },
        )
        .await?)
}

/// Pings one at a time: execution start (stamped by the Runner) minus the instant just
/// before the enqueue request was sent. Both clocks are this machine's.
async fn latency(admin: &Client, runner_id: &str, samples: u32) -> anyhow::Result<Latency> {
    let mut pickup = Vec::with_capacity(samples as usize);
    let mut round_trip = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP_PINGS + samples {
        let sent_us = now_us();
        let cmd = enqueue_ping(admin, runner_id, PING_TIMEOUT_MS).await?;
        let cmd = wait_final(admin, &cmd.id).await?;
        let seen_us = now_us();
        if cmd.state != "done" {
            return Err(CliError::failure(format!(
                "ping {} ended {}: {}",
                cmd.id,
                cmd.state,
                cmd.error.unwrap_or_default()
            ))
            .into());
        }
        let result: PingResult = serde_json::from_value(cmd.result.unwrap_or_default())
            .context("the ping's result is not a ping result")?;
        if result.started_at_us == 0 {
            return Err(CliError::failure(
                "the Runner's ping result has no started_at_us: run the same yy version as the benchmark (--bin)",
            )
            .into());
        }
        if i >= WARMUP_PINGS {
            pickup.push((result.started_at_us - sent_us) as f64 / 1000.0);
            round_trip.push((seen_us - sent_us) as f64 / 1000.0);
        }
    }
    pickup.sort_by(f64::total_cmp);
    round_trip.sort_by(f64::total_cmp);
    Ok(Latency {
        samples: pickup.len(),
        min_ms: round3(pickup[0]),
        mean_ms: round3(pickup.iter().sum::<f64>() / pickup.len() as f64),
        p50_ms: round3(percentile(&pickup, 0.50)),
        p90_ms: round3(percentile(&pickup, 0.90)),
        p99_ms: round3(percentile(&pickup, 0.99)),
        max_ms: round3(pickup[pickup.len() - 1]),
        round_trip_p50_ms: round3(percentile(&round_trip, 0.50)),
        round_trip_p99_ms: round3(percentile(&round_trip, 0.99)),
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// N pings from several concurrent enqueuers; the run ends when the control plane has
/// stored the last outcome. The control plane's own database (opened read-only, which WAL
/// allows beside the writer) gives exact final states and the millisecond each outcome was
/// stored, without loading the server with thousands of status requests.
/// What the throughput run works with.
struct Run {
    admin: Client,
    runner_id: String,
    db: PathBuf,
    /// Control plane, Runner, this process.
    pids: [u32; 3],
}

async fn throughput(run: &Run, n: u32, enqueuers: u32) -> anyhow::Result<Throughput> {
    let (admin, runner_id, pids) = (&run.admin, run.runner_id.as_str(), run.pids);
    // The last command waits for all before it: a minute plus 10 ms each is ample.
    let timeout_ms = (60_000 + n as u64 * 10).min(3_600_000);
    let db_path = run.db.clone();
    let open = move || {
        rusqlite::Connection::open_with_flags(
            &db_path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    };
    let conn = tokio::task::spawn_blocking(open.clone()).await??;
    let before: i64 = conn.query_row(
        "SELECT coalesce(max(seq), 0) FROM runner_commands",
        [],
        |r| r.get(0),
    )?;
    drop(conn);

    let cpu_before = pids.map(process_cpu_s);
    let machine_before = machine_cpu_s();
    let next = Arc::new(AtomicU32::new(0));
    let last_id = Arc::new(std::sync::Mutex::new((0u32, String::new())));
    let started_us = now_us();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..enqueuers {
        let (admin, runner_id, next, last_id) = (
            admin.clone(),
            runner_id.to_string(),
            next.clone(),
            last_id.clone(),
        );
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                let cmd = enqueue_ping(&admin, &runner_id, timeout_ms).await?;
                let mut last = last_id.lock().unwrap_or_else(|p| p.into_inner());
                if i >= last.0 {
                    *last = (i, cmd.id);
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let enqueued_us = now_us();
    let last = last_id.lock().unwrap_or_else(|p| p.into_inner()).1.clone();
    // The queue is leased oldest first: when the last one is final, the rest nearly are.
    wait_final(admin, &last).await?;
    let cpu_after = pids.map(process_cpu_s);
    let machine_after = machine_cpu_s();

    let count = move |conn: &rusqlite::Connection| -> rusqlite::Result<(Vec<(String, u64)>, i64)> {
        let mut stmt = conn.prepare(
            "SELECT state, count(*), coalesce(max(finished_at), 0) FROM runner_commands
             WHERE seq > ?1 AND kind = 'ping' GROUP BY state",
        )?;
        let rows: Vec<(String, u64, i64)> = stmt
            .query_map([before], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        let last = rows.iter().map(|r| r.2).max().unwrap_or(0);
        Ok((rows.into_iter().map(|r| (r.0, r.1)).collect(), last))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (states, last_ms) = loop {
        let o = open.clone();
        let (states, last_ms) = tokio::task::spawn_blocking(move || count(&o()?)).await??;
        let open_states = ["pending", "leased", "running"];
        let unfinished: u64 = states
            .iter()
            .filter(|(s, _)| open_states.contains(&s.as_str()))
            .map(|(_, c)| c)
            .sum();
        if unfinished == 0 {
            break (states, last_ms);
        }
        if Instant::now() > deadline {
            return Err(CliError::failure(format!(
                "{unfinished} of {n} pings were still not final a minute after the last one ended"
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let total: u64 = states.iter().map(|(_, c)| c).sum();
    let done = states
        .iter()
        .find(|(s, _)| s == "done")
        .map(|(_, c)| *c)
        .unwrap_or(0);
    if total != n as u64 || done != n as u64 {
        return Err(CliError::failure(format!(
            "of {n} pings, {done} ended done (states: {states:?}); a benchmark command must never fail"
        ))
        .into());
    }
    let seconds = ((last_ms * 1000 - started_us) as f64 / 1e6).max(1e-3);
    let used: Vec<f64> = (0..3).map(|i| cpu_after[i] - cpu_before[i]).collect();
    let per_command = |s: f64| round3(s * 1000.0 / n as f64);
    let (busy, total) = (
        machine_after.0 - machine_before.0,
        (machine_after.1 - machine_before.1).max(1e-9),
    );
    Ok(Throughput {
        cpu_ms_per_command: CpuPerCommand {
            control_plane: per_command(used[0]),
            runner: per_command(used[1]),
            client: per_command(used[2]),
        },
        machine_busy_percent: round2(100.0 * busy / total),
        other_processes_percent: round2(
            (100.0 * (busy - used.iter().sum::<f64>()) / total).max(0.0),
        ),
        commands: n,
        seconds: round3(seconds),
        commands_per_s: (n as f64 / seconds).round(),
        enqueue_per_s: (n as f64 / ((enqueued_us - started_us) as f64 / 1e6)).round(),
        states: states.into_iter().collect(),
    })
}

/// Registers `count` Runners (one source each: one enabled Runner per source), connects
/// each as the Runner would, holds one long-poll per Runner and reads the control plane's
/// memory while they wait. The long-polls end by themselves (bounded wait) and are dropped
/// right after the measurement.
async fn long_poll_rss(
    admin: &Client,
    url: &str,
    pid: u32,
    count: u32,
) -> anyhow::Result<LongPolls> {
    let before = rss_mb(pid)?;
    let tokens: Vec<String> = futures_util::stream::iter(0..count)
        .map(|i| async move {
            let name = format!("bench-lp-{i:05}");
            let _: views::Source = admin
                .post(
                    "api/v1/sources",
                    &params::SourceCreate {
                        name: name.clone(),
                        description: String::new(),
                    },
                )
                .await?;
            Ok::<_, anyhow::Error>(register(admin, url, &name).await?.config.token)
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;

    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(LONG_POLL_WAIT_MS + 30_000))
        .pool_max_idle_per_host(usize::MAX)
        .build()?;
    let base = url.trim_end_matches('/').to_string();
    let post = {
        let (http, base) = (http.clone(), base.clone());
        move |path: &str, token: &str, instance: &str, generation: Option<i64>| {
            let mut req = http
                .post(format!("{base}/runner/v1/{path}"))
                .bearer_auth(token)
                .header(HEADER_PROTOCOL, PROTOCOL_VERSION.to_string())
                .header(HEADER_INSTANCE, instance);
            if let Some(g) = generation {
                req = req.header(HEADER_GENERATION, g.to_string());
            }
            req
        }
    };
    let status = RunnerStatus {
        version: crate::VERSION.into(),
        capabilities: vec![],
        computers_capacity: 0,
        hostname: "bench".into(),
    };
    let connected: Vec<(String, String, i64)> = futures_util::stream::iter(tokens)
        .map(|token| {
            let (post, status) = (post.clone(), status.clone());
            async move {
                let instance = uuid::Uuid::new_v4().to_string();
                let resp = post("connect", &token, &instance, None)
                    .json(&status)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    return Err(CliError::failure(format!(
                        "a benchmark Runner could not connect: HTTP {}: {}",
                        resp.status(),
                        resp.text().await.unwrap_or_default()
                    ))
                    .into());
                }
                let c: Connected = resp.json().await?;
                Ok::<_, anyhow::Error>((token, instance, c.generation))
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;

    let returned = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut polls = tokio::task::JoinSet::new();
    for (token, instance, generation) in connected {
        let (post, returned, first_error) = (post.clone(), returned.clone(), first_error.clone());
        polls.spawn(async move {
            let r = post("lease", &token, &instance, Some(generation))
                .json(&LeaseParams {
                    max: 1,
                    wait_ms: Some(LONG_POLL_WAIT_MS),
                })
                .send()
                .await;
            let problem = match r {
                Ok(resp) if resp.status().is_success() => None,
                Ok(resp) => Some(format!(
                    "HTTP {}: {}",
                    resp.status(),
                    resp.text().await.unwrap_or_default()
                )),
                Err(e) => Some(e.to_string()),
            };
            returned.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = problem {
                first_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(p);
            }
        });
    }
    let launched = Instant::now();

    // Held: the control plane has a socket per long-poll and none has been answered.
    let deadline = launched + Duration::from_secs(10);
    let sockets = loop {
        let sockets = socket_count(pid);
        if sockets > count as usize {
            break sockets;
        }
        if returned.load(Ordering::Relaxed) > 0 || Instant::now() > deadline {
            let why = first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Err(CliError::failure(format!(
                "the control plane held only {sockets} connections for {count} long-polls ({} answered early{})",
                returned.load(Ordering::Relaxed),
                why.map(|w| format!("; first problem: {w}")).unwrap_or_default()
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Let every request reach its handler, then take the peak over a short window.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut peak = 0f64;
    for _ in 0..15 {
        peak = peak.max(rss_mb(pid)?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let early = returned.load(Ordering::Relaxed);
    if early > 0 {
        let why = first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        return Err(CliError::failure(format!(
            "{early} of {count} long-polls ended before the measurement was over{}",
            why.map(|w| format!(": {w}")).unwrap_or_default()
        ))
        .into());
    }
    if launched.elapsed() >= Duration::from_millis(LONG_POLL_WAIT_MS) {
        return Err(
            CliError::failure("the long-polls outlived their wait during the measurement").into(),
        );
    }
    polls.abort_all();
    while polls.join_next().await.is_some() {}
    Ok(LongPolls {
        long_polls: count,
        control_plane_rss_mb_before: round2(before),
        control_plane_rss_mb: round2(peak),
        control_plane_sockets: sockets,
    })
}

// ---- the process's limits and the machine ----

/// Raises the soft open-file limit to the hard one when `need` exceeds it; children
/// inherit it, so the control plane can hold the long-polls too.
fn raise_fd_limit(need: u64) -> anyhow::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading the open-file limit");
    }
    let need = need as libc::rlim_t;
    if lim.rlim_cur >= need {
        return Ok(());
    }
    if lim.rlim_max < need {
        return Err(CliError::usage(format!(
            "the open-file limit is {} (hard), and {need} are needed: raise it (ulimit -Hn) or pass a smaller --long-polls",
            lim.rlim_max
        ))
        .into());
    }
    lim.rlim_cur = lim.rlim_max;
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error()).context("raising the open-file limit");
    }
    Ok(())
}

/// CPU seconds (user and system) a process has used so far.
fn process_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may itself hold spaces and parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / clock_ticks()
}

/// CPU seconds of the whole machine so far: (busy, total), summed over every CPU.
fn machine_cpu_s() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle: u64 = values.iter().skip(3).take(2).sum();
    let hz = clock_ticks();
    ((total - idle) as f64 / hz, total as f64 / hz)
}

fn clock_ticks() -> f64 {
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as f64,
        _ => 100.0,
    }
}

/// True while a process exists and has not exited (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// VmRSS of a process, in MB (10^6 bytes).
fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| CliError::failure(format!("/proc/{pid}/status has no VmRSS")))?;
    Ok(kib as f64 * 1024.0 / 1e6)
}

fn socket_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy().starts_with("socket:"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_mb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| (kib * 1024.0 / 1e6).round());
    Machine {
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        memory_mb,
    }
}

// ---- output ----

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn print_human(r: &Report) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let judged = |figure: &str| r.checks.iter().find(|c| c.figure == figure);
    let mut row = |figure: &str, value: String, check: Option<&Check>| {
        let (target, result) = match check {
            Some(c) => (
                format!("{} {} {}", c.comparison, fmt_value(c.target), c.unit),
                if c.pass { "pass" } else { "MISSED" }.to_string(),
            ),
            None => ("-".into(), "-".into()),
        };
        rows.push(vec![figure.to_string(), value, target, result]);
    };
    if let Some(l) = &r.pickup_latency {
        let p50 = "pickup latency p50";
        let p99 = "pickup latency p99";
        row(p50, format!("{:.2} ms", l.p50_ms), judged(p50));
        row(p99, format!("{:.2} ms", l.p99_ms), judged(p99));
        row("pickup latency max", format!("{:.2} ms", l.max_ms), None);
        row(
            "round trip p50 (enqueue to outcome seen)",
            format!("{:.2} ms", l.round_trip_p50_ms),
            None,
        );
    }
    if let Some(t) = &r.throughput {
        row(
            "throughput",
            format!("{:.0} commands/s", t.commands_per_s),
            judged("throughput"),
        );
        row(
            "enqueue rate",
            format!("{:.0} requests/s", t.enqueue_per_s),
            None,
        );
        let c = &t.cpu_ms_per_command;
        row(
            "CPU per command: control plane / Runner / client",
            format!(
                "{:.3} / {:.3} / {:.3} ms",
                c.control_plane, c.runner, c.client
            ),
            None,
        );
        row(
            "machine busy during throughput (other processes)",
            format!(
                "{:.0}% ({:.0}%)",
                t.machine_busy_percent, t.other_processes_percent
            ),
            None,
        );
    }
    let idle = "Runner RSS, idle";
    row(
        idle,
        format!("{:.1} MB", r.runner_idle_rss_mb),
        judged(idle),
    );
    if let Some(v) = r.runner_rss_mb_after_throughput {
        row("Runner RSS, after throughput", format!("{v:.1} MB"), None);
    }
    row(
        "control plane RSS, idle",
        format!("{:.1} MB", r.control_plane_rss_mb_idle),
        None,
    );
    if let Some(lp) = &r.long_polls {
        let figure = format!("control plane RSS, {} long-polls", lp.long_polls);
        row(
            &figure,
            format!("{:.1} MB", lp.control_plane_rss_mb),
            judged("control plane RSS, 1000 long-polls"),
        );
    }
    let mut text = output::table(&["figure", "value", "target", "result"], rows);
    let m = &r.machine;
    text.push_str(&format!(
        "\n\nyy {} on {} CPUs ({}), Linux {}; {} latency samples, {} throughput pings, {} long-polls",
        r.version,
        m.cpus,
        m.cpu_model.as_deref().unwrap_or("unknown CPU"),
        m.kernel.as_deref().unwrap_or("?"),
        r.parameters.latency_samples,
        r.parameters.commands,
        r.parameters.long_polls,
    ));
    if r.missed.is_empty() {
        text.push_str("\nall targets met");
    } else {
        text.push_str(&format!(
            "\nMISSED {} target(s): {}",
            r.missed.len(),
            r.missed.join("; ")
        ));
    }
    output::print(&text)?;
    Ok(())
}

async fn computer(args: ComputerBenchArgs) -> anyhow::Result<()> {
    let figures = crate::computer::bench::bench_computer(&args.image, args.samples as usize)
        .await
        .map_err(|e| CliError::new(e.exit(), e.to_string()))?;
    if args.json {
        return output::json(&figures);
    }
    let ms = |v: &serde_json::Value, k: &str| format!("{:.1} ms", v[k].as_f64().unwrap_or(0.0));
    let pass = |b: &serde_json::Value| if b == true { "pass" } else { "MISSED" }.to_string();
    let c = &figures["cold_start"];
    let r = &figures["round_trip"];
    let rows = vec![
        vec![
            "cold start p50 (yy)".into(),
            ms(&c["yy"], "p50_ms"),
            "<= 1000 ms".into(),
            pass(&c["target_p50_le_1s"]),
        ],
        vec![
            "cold start p50 (docker run --rm)".into(),
            ms(&c["docker_run_rm_true"], "p50_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "cold start ratio yy/docker".into(),
            format!("{:.2}", c["ratio_p50"].as_f64().unwrap_or(0.0)),
            "<= 1.2".into(),
            pass(&c["target_within_1_2x_cli"]),
        ],
        vec![
            "round trip p50 (yy guest)".into(),
            ms(&r["yy"], "p50_ms"),
            "<= 60 ms".into(),
            pass(&r["target_p50_le_60ms"]),
        ],
        vec![
            "round trip p50 (docker exec)".into(),
            ms(&r["docker_exec_true"], "p50_ms"),
            "slower than yy".into(),
            pass(&r["target_faster_than_cli"]),
        ],
    ];
    output::print(&output::table(
        &["figure", "value", "target", "result"],
        rows,
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.50), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn rss_of_this_process() {
        let mb = rss_mb(std::process::id()).unwrap();
        assert!(mb > 0.1 && mb < 10_000.0, "{mb}");
    }
}
