//! `yy bench`: the benchmark commands. `dispatch` runs [`crate::bench`] (the command path
//! with real processes on loopback); `computer` runs [`crate::computer::bench`].

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::{CliError, Exit};
use crate::output;

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
    /// Measure the egress proxy on loopback: added connect latency (CONNECT and its answer
    /// against a direct connect) and bulk throughput through the tunnel against direct
    ///
    /// The proxy, a target server (on 127.0.0.2) and the clients run in this process; no
    /// Docker engine or network beyond loopback is used.
    Egress(EgressBenchArgs),
}

#[derive(Debug, Args)]
pub struct EgressBenchArgs {
    /// Connections timed each way for the latency
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
    /// Bulk transfers each way
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// MiB per bulk transfer
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub mib: u64,
    /// Print the figures and targets as one JSON object
    #[arg(long)]
    pub json: bool,
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

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Computer(a) => computer(a).await,
        BenchCommand::Egress(a) => egress(a).await,
        BenchCommand::Dispatch(a) => {
            // Ctrl-C or SIGTERM drops the benchmark, whose guards stop the children and
            // clean up.
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = crate::bench::dispatch(a) => r,
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

async fn egress(args: EgressBenchArgs) -> anyhow::Result<()> {
    use crate::bench::egress::{TARGET_ADDED_P50_MS, TARGET_THROUGHPUT_RATIO, bench_egress};
    let f = bench_egress(args.samples as usize, args.rounds as usize, args.mib)
        .await
        .map_err(|e| CliError::failure(format!("the egress benchmark failed: {e:#}")))?;
    if args.json {
        return output::json(&f);
    }
    let pass = |ok: bool| if ok { "pass" } else { "MISSED" }.to_string();
    let (l, t) = (&f.latency, &f.throughput);
    let rows = vec![
        vec![
            "connect p50, direct".into(),
            format!("{:.3} ms", l.direct_p50_ms),
            "-".into(),
            "-".into(),
        ],
        vec![
            "connect p50, through the proxy".into(),
            format!("{:.3} ms", l.proxy_p50_ms),
            "-".into(),
            "-".into(),
        ],
        vec![
            "added connect latency p50".into(),
            format!("{:.3} ms", l.added_p50_ms),
            format!("<= {TARGET_ADDED_P50_MS} ms"),
            pass(l.target_added_p50_le_2ms),
        ],
        vec![
            "bulk throughput, direct".into(),
            format!("{} MiB/s", t.direct_mib_s),
            "-".into(),
            "-".into(),
        ],
        vec![
            "bulk throughput, through the proxy".into(),
            format!("{} MiB/s", t.proxy_mib_s),
            "-".into(),
            "-".into(),
        ],
        vec![
            "CPU per GiB, direct / through the proxy".into(),
            format!(
                "{:.3} / {:.3} s",
                t.direct_cpu_s_per_gib, t.proxy_cpu_s_per_gib
            ),
            "-".into(),
            "-".into(),
        ],
        vec![
            "throughput ratio proxy/direct".into(),
            format!("{:.3}", t.ratio),
            format!(">= {TARGET_THROUGHPUT_RATIO}"),
            pass(t.target_ratio_ge_0_8),
        ],
    ];
    output::print(&output::table(
        &["figure", "value", "target", "result"],
        rows,
    ))?;
    if f.missed.is_empty() {
        eprintln!("all targets met");
    } else {
        eprintln!(
            "MISSED {} target(s): {}",
            f.missed.len(),
            f.missed.join("; ")
        );
    }
    Ok(())
}
