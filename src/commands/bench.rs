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
                "{} in {} files",
                crate::backup::bench::human_bytes(f.data_bytes),
                f.files
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
