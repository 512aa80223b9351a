//! `yy bench`: the benchmark commands. `dispatch` runs [`crate::bench::dispatch`] (the
//! command path with real processes on loopback); `computer` runs [`crate::bench::computer`].

use clap::{Args, Subcommand};

use crate::bench::DispatchArgs;
use crate::bench::artifacts::ArtifactBenchArgs;
use crate::bench::computer::ComputerBenchArgs;
use crate::error::{CliError, Exit};

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
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Computer(a) => crate::bench::computer::run(a).await,
        BenchCommand::Artifacts(a) => crate::bench::artifacts::run(a).await,
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
