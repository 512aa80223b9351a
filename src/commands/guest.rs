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
        /// Run every command (and work on files) as UID:GID while the agent itself takes
        /// its own identity that they cannot reach; needs the agent to start as root
        #[arg(long, value_name = "UID:GID", value_parser = parse_user)]
        user: Option<(u32, u32)>,
    },
    /// Run COMMAND with no capability at all (how the Runner's plain execs start in a
    /// computer)
    Run {
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
}

fn parse_user(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
    let n = |v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("{v:?} is not a number"))
    };
    Ok((n(u)?, n(g)?))
}

/// What must happen before the async runtime starts its threads (capabilities belong to
/// a thread, so there must be only one): the agent's identity, or all of `yy guest run`.
pub fn before_runtime(args: &GuestArgs) -> anyhow::Result<()> {
    match &args.command {
        GuestCommand::Serve {
            user: Some((uid, gid)),
            ..
        } => crate::computer::identity::take_identity(*uid, *gid)
            .context("the guest agent cannot take its identity"),
        GuestCommand::Serve { user: None, .. } => Ok(()),
        GuestCommand::Run { command } => {
            use std::os::unix::process::CommandExt;
            crate::computer::identity::drop_capabilities()
                .context("yy guest run cannot drop its capabilities")?;
            // `exec` returns only when it failed.
            let e = std::process::Command::new(&command[0])
                .args(&command[1..])
                .exec();
            Err(e).with_context(|| format!("cannot run {:?}", command[0]))
        }
    }
}

pub async fn run(args: GuestArgs) -> anyhow::Result<()> {
    match args.command {
        GuestCommand::Run { .. } => anyhow::bail!("yy guest run ends before the runtime starts"),
        GuestCommand::Serve { workspace, .. } => {
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
