//! `yy bench`: the benchmark commands. `dispatch` runs [`crate::bench::dispatch`] (the
//! command path with real processes on loopback); `computer` runs [`crate::bench::computer`].

use clap::{Args, Subcommand};

use crate::bench::DispatchArgs;
use crate::bench::artifacts::ArtifactBenchArgs;
use crate::bench::computer::ComputerBenchArgs;
use std::path::PathBuf;

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
    /// Measure verified artifacts side by side with plain copies: a 25 MiB
    /// `computer_export` against `docker cp` + `sha256sum`, and `yy runner fetch` of an 8 MB
    /// file against `cp` + `sha256sum` (whole processes)
    ///
    /// Starts its own control plane, Runner and computer in temporary directories and
    /// removes them when done; missed targets are reported, not failed.
    Artifacts(ArtifactBenchArgs),
    /// Measure `yy backup create` plus `yy backup verify` of a generated data directory
    /// (a database and many artifact files) against `tar -cf` plus `sha256sum` of every
    /// file of the same tree, alternating rounds in the same run
    Backup(BackupBenchArgs),
    /// Measure a computer agent's turn (the isolated Worker, its tool in the agent's
    /// computer) against a host agent's turn with the same scripted model: one tool call,
    /// then the answer
    ///
    /// Starts its own control plane, Runner, Hermes and scripted model server in a
    /// temporary directory and stops them when done; needs the Docker engine and the Hermes
    /// venv (scripts/install-hermes.sh).
    Turn(crate::bench::turn::TurnBenchArgs),
    /// Measure the team scheduler: from a subtask becoming ready (the admin accepted the
    /// one it depends on) to its prompt reaching Hermes, and on to Hermes's model call, with
    /// a scripted model that answers at once; and the slot use of 4 warmed teams x 8
    /// subtasks at once
    ///
    /// Starts its own control plane, Runner, Worker and scripted model server in a temporary
    /// directory and stops them when done; needs the Docker engine and the Hermes venv.
    Teams(crate::bench::teams::TeamsBenchArgs),
    /// Measure the egress proxy on loopback: added connect latency (CONNECT and its answer
    /// against a direct connect) and bulk throughput through the tunnel against direct
    ///
    /// The proxy, a target server (on 127.0.0.2) and the clients run in this process; no
    /// Docker engine or network beyond loopback is used.
    Egress(EgressBenchArgs),
    /// Measure a desktop computer's screen through the guest agent: the screenshot round
    /// trip (1280x800 PNG, decoded) and the input latency (a pointer move until the cursor
    /// is read back there); then the operator's path through a control plane and a Runner:
    /// the screenshot round trip, the `attach --web` server's frame rate and a click until
    /// the cursor is read back
    ///
    /// Starts its own computer from the desktop IMAGE, then its own control plane, Runner
    /// and desktop computer (loopback, a temporary directory), and removes them when done;
    /// missed targets are reported, not failed.
    Screen(crate::bench::screen::ScreenBenchArgs),
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
pub struct BackupBenchArgs {
    /// Size of the generated data directory in MiB
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub size_mib: u64,
    /// Artifact files the data is spread over
    #[arg(long, value_name = "N", default_value_t = 2048,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub files: u64,
    /// Rounds of each side; the medians are reported
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Where to make the scratch directory (it needs about three times --size-mib free)
    /// [default: the system's temporary directory]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print the figures and the target as one JSON object
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Computer(a) => crate::bench::computer::run(a).await,
        BenchCommand::Artifacts(a) => crate::bench::artifacts::run(a).await,
        BenchCommand::Backup(a) => backup(a).await,
        BenchCommand::Turn(a) => crate::bench::turn::run(a).await,
        BenchCommand::Teams(a) => crate::bench::teams::run(a).await,
        BenchCommand::Screen(a) => crate::bench::screen::run(a).await,
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
async fn backup(args: BackupBenchArgs) -> anyhow::Result<()> {
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let say = |m: &str| eprintln!("bench: {m}");
    let figures = tokio::task::spawn_blocking(move || {
        crate::backup::bench::run(
            &base,
            args.size_mib * 1024 * 1024,
            args.files,
            args.rounds,
            &say,
        )
    })
    .await?
    .map_err(|e| CliError::new(crate::error::backup_exit(&e), e.to_string()))?;
    if args.json {
        return output::json(&figures);
    }
    let s = |v: f64| format!("{v:.2} s");
    let f = &figures;
    let rows = vec![
        vec![
            "data".into(),
            format!(
                "{} in {}",
                crate::backup::bench::human_bytes(f.data_bytes),
                crate::api::words::plural(f.files, "file", "files")
            ),
            "-".into(),
            "-".into(),
        ],
        vec![
            "yy backup create".into(),
            s(f.yy_create_s),
            "-".into(),
            "-".into(),
        ],
        vec![
            "yy backup verify".into(),
            s(f.yy_verify_s),
            "-".into(),
            "-".into(),
        ],
        vec!["tar -cf".into(), s(f.tar_s), "-".into(), "-".into()],
        vec![
            "sha256sum of every file".into(),
            s(f.sha256sum_s),
            "-".into(),
            "-".into(),
        ],
        vec![
            "ratio yy / (tar + sha256sum)".into(),
            format!(
                "{:.2} ({:.0} vs {:.0} MiB/s)",
                f.ratio, f.yy_mib_per_s, f.baseline_mib_per_s
            ),
            format!("<= {:.1}", f.target_ratio),
            if f.target_met { "pass" } else { "MISSED" }.into(),
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
