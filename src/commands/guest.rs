//! `yy guest`: the guest agent, run inside a computer through `docker exec` with attached
//! stdio. It is not meant to be typed by hand.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct GuestArgs {
    #[command(subcommand)]
    pub command: GuestCommand,
}

#[derive(Debug, Subcommand)]
pub enum GuestCommand {
    /// Speak the guest protocol (JSON lines) on stdin/stdout until stdin closes
    Serve {
        /// The workspace root that file operations are confined to (default: the current
        /// directory)
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

pub async fn run(args: GuestArgs) -> anyhow::Result<()> {
    match args.command {
        GuestCommand::Serve { workspace } => {
            let workspace = match workspace {
                Some(w) => w,
                None => std::env::current_dir().context("the current directory")?,
            };
            crate::computer::guest::serve(&workspace, tokio::io::stdin(), tokio::io::stdout())
                .await
                .context("guest agent")
        }
    }
}
