//! Shell completion of names and ids (agents, Runners, computers, sessions) from the server.
//!
//! `yy completions SHELL` prints a small registration script; at each <TAB> the shell runs
//! `COMPLETE=SHELL yy -- yy ...` (clap_complete's dynamic completion), which completes
//! subcommands and flags from the clap definitions, and the values below by asking the
//! server of the current login. Without a login or server, values complete to nothing.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::Shells;

use super::context;

/// The environment variable the registration scripts set.
pub const VAR: &str = "COMPLETE";

/// How long a <TAB> may wait for the server.
const TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Agent,
    Runner,
    Computer,
    Session,
}

/// Answers a completion request and exits, when the shell asked for one.
pub fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(crate::cli::command)
        .var(VAR)
        .completer("yy")
        .complete();
}

/// The registration script for `shell` (`bash`, `zsh`, `fish`).
pub fn registration(shell: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(s) = Shells::builtins().completer(shell) {
        // Writing to a Vec cannot fail.
        let _ = s.write_registration(VAR, "yy", "yy", "yy", &mut out);
    }
    out
}

/// Adds the value completers to the command line: by argument id, and by the noun for the
/// positional NAME/ID of `yy agent|runner|computer|session ...`.
pub fn with_value_completers(cmd: clap::Command) -> clap::Command {
    // mut_subcommands and mut_args keep the order (mut_arg would move a positional last).
    cmd.mut_subcommands(|sub| {
        let noun = sub.get_name().to_string();
        annotate(sub, &noun)
    })
}

fn annotate(cmd: clap::Command, noun: &str) -> clap::Command {
    let positional = match noun {
        "agent" => Some(Kind::Agent),
        "runner" => Some(Kind::Runner),
        "computer" => Some(Kind::Computer),
        "session" => Some(Kind::Session),
        _ => None,
    };
    let creates = matches!(cmd.get_name(), "create" | "register");
    let cmd = cmd.mut_args(|a| {
        let kind = match a.get_id().as_str() {
            "agent" => Some(Kind::Agent),
            "runner" => Some(Kind::Runner),
            "computer" => Some(Kind::Computer),
            "session" => Some(Kind::Session),
            "name" | "id" if a.is_positional() && !creates => positional,
            _ => None,
        };
        match kind {
            Some(kind) => a.add(ArgValueCandidates::new(move || candidates(kind))),
            None => a,
        }
    });
    cmd.mut_subcommands(|sub| annotate(sub, noun))
}

fn candidates(kind: Kind) -> Vec<CompletionCandidate> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    rt.block_on(async {
        tokio::time::timeout(TIMEOUT, fetch(kind))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    })
}

async fn fetch(kind: Kind) -> anyhow::Result<Vec<CompletionCandidate>> {
    let client = context::client()?;
    let one = |value: &str, help: String| {
        CompletionCandidate::new(OsStr::new(value)).help(Some(help.into()))
    };
    Ok(match kind {
        Kind::Agent => client
            .agent_list(false)
            .await?
            .iter()
            .map(|a| {
                one(
                    &a.name,
                    format!("{} agent, profile {}", a.env.as_str(), a.profile),
                )
            })
            .collect(),
        Kind::Runner => client
            .runner_list()
            .await?
            .iter()
            .map(|r| {
                let online = if r.online { "online" } else { "offline" };
                one(&r.id, format!("source {}, {}, {online}", r.source, r.state))
            })
            .collect(),
        Kind::Computer => client
            .computer_list(false)
            .await?
            .iter()
            .map(|c| one(&c.id, format!("agent {}, {}", c.agent, c.state)))
            .collect(),
        Kind::Session => client
            .session_list(None)
            .await?
            .iter()
            .map(|s| one(&s.id, format!("agent {}, {}", s.agent, s.state)))
            .collect(),
    })
}
