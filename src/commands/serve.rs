//! `yy serve`: the control plane.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::error::CliError;
use crate::server::store::commands::QueueLimits;
use crate::server::{self, AppState, Store};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the first stdout line tells which)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8420")]
    pub listen: SocketAddr,
    /// Data directory holding the database [default: $XDG_DATA_HOME/yy]
    #[arg(long, value_name = "DIR", env = "YY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Most commands that may wait in one Runner's queue
    #[arg(long, value_name = "N", default_value_t = QueueLimits::default().max_pending,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_commands: u32,
    /// Most bytes of payload that may wait in one Runner's queue
    #[arg(long, value_name = "BYTES", default_value_t = QueueLimits::default().max_pending_bytes,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_pending_bytes: u64,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let data_dir = match args.data_dir {
        Some(d) => d,
        None => super::context::default_data_dir()?,
    };
    // Held until the server stops: a restore of this directory is refused meanwhile.
    let _lock = super::backup::enter_data_dir(&data_dir)?;
    let store = open_store(data_dir.clone()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    crate::output::print(&format!("listening on http://{addr}"))?;
    tracing::info!(%addr, data_dir = %data_dir.display(), version = crate::VERSION, "serving");
    let limits = QueueLimits {
        max_pending: args.max_pending_commands,
        max_pending_bytes: args.max_pending_bytes,
    };
    let files = server::artifacts::ArtifactFiles::open(&data_dir).map_err(|e| {
        CliError::failure(format!(
            "cannot create the artifact directory in {}: {e}",
            data_dir.display()
        ))
    })?;
    let (state, stop) = AppState::new(store, limits, files);
    server::serve(listener, state, stop, shutdown_signal())
        .await
        .context("serving")?;
    tracing::info!("stopped");
    Ok(())
}

/// Opens the store in a data directory (creating and migrating it).
pub async fn open_store(data_dir: PathBuf) -> anyhow::Result<Store> {
    tokio::task::spawn_blocking(move || Store::open(&data_dir))
        .await?
        .map_err(|e| CliError::failure(e.to_string()).into())
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}
