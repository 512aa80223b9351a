//! The benchmarks anyone can run (`yy bench ...`): [`computer`] measures computers against
//! the docker CLI; the rest of this module is `yy bench dispatch`, which measures the command
//! path with real processes on loopback.
//!
//! It starts a private control plane (`yy serve`) and a Runner (`yy runner run`) from this
//! executable in a temporary directory, drives them through the admin API and the machine
//! API like any client would, and reports pickup latency, throughput, the Runner's idle
//! memory and the control plane's memory while it holds many idle long-polls. Every child is
//! stopped and the directory removed on every path out, errors and Ctrl-C included.

pub mod artifacts;
pub mod computer;
mod computer_warm;
pub mod egress;
mod harness;
mod measure;
mod replicas;
mod report;
pub mod screen;
pub mod screen_operator;
mod serve;
mod tls;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::error::CliError;
use crate::output;

use harness::{rss_mb, setup};

pub mod teams;
pub mod turn;
use measure::{Run, latency, long_poll_rss, raise_fd_limit, throughput};
use report::{Figures, print_human, report};

/// Untimed pings before the latency samples (connections, caches, first allocations).
const WARMUP_PINGS: u32 = 20;
/// How long a latency ping may live; none should come near it.
const PING_TIMEOUT_MS: u64 = 30_000;
/// Commands the benchmark's Runner runs at once (`yy runner run`'s default).
const RUNNER_MAX_CONCURRENT: u32 = 64;
/// How long each benchmark long-poll asks to wait (the server caps it at 25 s).
const LONG_POLL_WAIT_MS: u64 = 20_000;

#[derive(Debug, clap::Args)]
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
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(0..=20_000))]
    pub long_polls: u32,
    /// Concurrent enqueuers in the throughput run (enough that they enqueue faster than one
    /// Runner's dispatch, so the run measures the dispatch)
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub enqueuers: u32,
    /// The yy executable to run as control plane and Runner [default: this one]
    #[arg(long, value_name = "PATH")]
    pub bin: Option<PathBuf>,
    /// Compare HTTPS (`yy serve --tls self-signed`, pinned) with plain HTTP instead: pickup
    /// latency and throughput of two setups side by side, in alternating rounds (the
    /// long-poll and memory figures are not taken)
    #[arg(long)]
    pub tls: bool,
    /// Compare the control plane on this empty PostgreSQL database (several replicas, see
    /// --replicas) with the embedded SQLite file: pickup through another replica than the
    /// Runner's, and throughput with the enqueuers spread over the replicas. The database
    /// is filled with the benchmark's admin, Runner and commands. A password only in
    /// $YY_BENCH_DATABASE
    #[arg(
        long,
        value_name = "URL",
        env = "YY_BENCH_DATABASE",
        hide_env_values = true
    )]
    pub database: Option<String>,
    /// `yy serve` replicas on --database
    #[arg(long, value_name = "N", default_value_t = 2, requires = "database",
          value_parser = clap::value_parser!(u32).range(1..=4))]
    pub replicas: u32,
}

/// The dispatch targets (docs/benchmarks.md): issue 29's, with `synchronous=FULL`.
pub mod targets {
    pub const PICKUP_P50_MS: f64 = 1.0;
    pub const PICKUP_P99_MS: f64 = 5.0;
    pub const THROUGHPUT_PER_S: f64 = 5000.0;
    pub const RUNNER_IDLE_RSS_MB: f64 = 12.0;
    pub const LONG_POLLS_RSS_MB: f64 = 150.0;
    /// The long-poll target is stated for this many long-polls.
    pub const LONG_POLLS: u32 = 10_000;
}

/// stdout is the report; progress goes to stderr in both modes.
fn progress(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "bench: {text}");
}

// ---- the benchmark ----

pub async fn dispatch(args: DispatchArgs) -> anyhow::Result<()> {
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("finding this executable")?,
    };
    if !bin.is_file() {
        return Err(CliError::usage(format!("{} is not an executable file", bin.display())).into());
    }
    if args.tls {
        raise_fd_limit(1024)?;
        return tls::compare(&args, bin).await;
    }
    if let Some(url) = &args.database {
        let from_env = std::env::var("YY_BENCH_DATABASE").ok().as_deref() == Some(url);
        crate::server::store::pg::check_url("--database", "YY_BENCH_DATABASE", url, from_env)
            .map_err(CliError::usage)?;
        raise_fd_limit(1024)?;
        return replicas::compare(&args, bin, url).await;
    }
    // 1 listener + the long-polls + a margin for the admin clients, on both sides (the
    // children inherit the limit).
    raise_fd_limit(args.long_polls as u64 + 256)?;
    let opts = harness::Options {
        max_pending: args.commands as u64 + 1000,
        ..Default::default()
    };
    let mut s = setup(harness::harness(bin)?, opts).await?;

    // Idle memory: connected, long-polling, nothing to do. The Runner gives back the pages
    // only start-up touched after a second without work (it looks once a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runner_pid = s.runner_pid().expect("the Runner runs");
    let runner_idle_rss_mb = rss_mb(runner_pid)?;
    let runner_idle_private_mb = harness::private_rss_mb(runner_pid)?;
    let control_plane_rss_mb_idle = rss_mb(s.serve_pid())?;

    let pickup_latency = if args.latency_samples > 0 {
        progress(&format!(
            "pickup latency: {} one at a time (after {WARMUP_PINGS} untimed)",
            crate::api::words::plural(args.latency_samples, "ping", "pings")
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
            "throughput: {} from {}",
            crate::api::words::plural(args.commands, "ping", "pings"),
            crate::api::words::plural(
                args.enqueuers,
                "concurrent enqueuer",
                "concurrent enqueuers"
            )
        ));
        let run = Run::of(&s, vec![s.admin.clone()]);
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
            "long-polls: registering {} and holding one long-poll each",
            crate::api::words::plural(args.long_polls, "Runner", "Runners")
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
        Figures {
            pickup_latency,
            throughput,
            runner_idle_rss_mb,
            runner_idle_private_mb,
            runner_rss_mb_after_throughput,
            control_plane_rss_mb_idle,
            long_polls,
        },
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
