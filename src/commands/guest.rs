//! `yy guest`: the guest agent, run inside a computer with attached stdio, through `docker
//! exec` or as the container's main process (`--main-process`). It is not meant to be
//! typed by hand.

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
        /// Run as the container's main process: when stdin closes, end the session as
        /// usual (what it still runs is stopped), then stay, idle, until the container
        /// stops, instead of exiting (which would stop it); a failed or panicking session
        /// ends the same way
        #[arg(long)]
        main_process: bool,
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

impl GuestArgs {
    /// Whether this is `yy guest serve --main-process`.
    pub fn is_main_process(&self) -> bool {
        matches!(
            self.command,
            GuestCommand::Serve {
                main_process: true,
                ..
            }
        )
    }
}

/// `yy guest serve --main-process` on `runtime`: serves the session, then stays idle.
pub fn serve_as_main_process(runtime: tokio::runtime::Runtime, args: GuestArgs) -> ! {
    let served =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(run(args))));
    match served {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("error: {e:#}"),
        // The panic hook said what it was.
        Err(_) => eprintln!("error: the guest agent's session panicked"),
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    idle()
}

/// The guest agent as the container's main process once its session ended: it stays, so
/// the container keeps running (as `sleep infinity` did), until the container stops (tini
/// forwards the stop's SIGTERM, whose default action ends it). No CPU: it waits in the
/// kernel, reaping the children the session left (a display server) as they end.
fn idle() -> ! {
    use std::os::fd::AsRawFd;
    // Nothing is read or written any more; the standard descriptors let go of the session.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..=2 {
            // SAFETY: dup2(2) on descriptors this process owns; no memory involved.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes only `status`, a local that outlives the call.
        let reaped = unsafe { libc::waitpid(-1, &mut status, 0) };
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            // No child left, and none can come: wait for the signal that ends it.
            // SAFETY: pause(2) only waits.
            unsafe { libc::pause() };
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
