//! `yy chat`: one conversation turn with an agent, streamed as it happens.

use std::io::Write;

use clap::Args;

use super::context;
use super::progress::Waiting;
use super::tool_output::LiveLines;
use crate::api::artifacts::MAX_ATTACHMENTS;
use crate::api::sessions::{ChatParams, SessionEvent, TurnEvent};
use crate::api::states::TurnState;
use crate::client::Client;
use crate::client::LONG_POLL_MS;
use crate::error::{CliError, Exit};
use crate::output;

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The agent (its source needs an enabled Runner; a computer agent's Runner needs
    /// computers and the Worker)
    pub agent: String,
    /// The message
    pub message: String,
    /// Continue this session instead of starting a new one
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Put FILE into a computer agent's workspace before the turn (repeatable; at most
    /// 16 MiB each, 8 files; the model is told where it is). Paths in the message itself
    /// are never read from this machine.
    #[arg(long, value_name = "FILE")]
    pub attach: Vec<std::path::PathBuf>,
    /// Print events as JSON lines (NDJSON) instead of text
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: ChatArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    if args.attach.len() > MAX_ATTACHMENTS {
        return Err(CliError::usage(format!(
            "{} files given with --attach; a turn takes at most {MAX_ATTACHMENTS}",
            args.attach.len()
        ))
        .into());
    }
    let mut attachments = Vec::new();
    for path in &args.attach {
        attachments.push(super::artifact::attach(&client, path).await?);
    }
    let started = client
        .chat(&ChatParams {
            agent: args.agent,
            message: args.message,
            session: args.session,
            attachments,
        })
        .await?;
    let session_id = started.session.id.clone();
    let turn_id = started.turn.id.clone();
    if args.json {
        output::print(&serde_json::to_string(&serde_json::json!({
            "type": "turn.start", "session": started.session, "turn": started.turn,
            "queued": started.queued,
        }))?)?;
    } else {
        eprintln!("session {session_id}");
        // Said at once: the turn waits, how many go first and why.
        if let Some(q) = &started.queued {
            eprintln!("[{}; Ctrl-C cancels it]", output::clean(&q.line()));
        }
    }
    // Ctrl-C cancels this turn: taken out of the queue while it waits, else stopped
    // (confirmed by the Runner) instead of left running.
    tokio::select! {
        r = stream(&client, &session_id, &turn_id, args.json) => r,
        _ = tokio::signal::ctrl_c() => {
            let _ = client.turn_cancel(&session_id, &turn_id).await;
            Err(CliError::new(Exit::Cancelled, format!("interrupted; cancelling turn {turn_id} of session {session_id} (see `yy session show {session_id}`)")).into())
        }
    }
}

async fn stream(
    client: &Client,
    session_id: &str,
    turn_id: &str,
    json: bool,
) -> anyhow::Result<()> {
    let mut after = 0;
    let mut printed_text = false;
    // The first look comes back within a second, so that waiting is never silent.
    let mut wait_ms = super::progress::FIRST_LOOK_MS;
    let mut waiting = Waiting::new("Ctrl-C cancels the turn");
    let mut queued = false;
    let mut told_json: Option<String> = None;
    let mut live = LiveLines::default();
    loop {
        let page = client
            .session_events(session_id, after, wait_ms, Some(turn_id))
            .await?;
        wait_ms = LONG_POLL_MS;
        // In --json mode a program gets each new reason as a line of its own.
        if json && page.waiting.is_some() && page.waiting != told_json {
            output::print(&serde_json::to_string(&serde_json::json!({
                "type": "turn.waiting", "reason": page.waiting,
            }))?)?;
            told_json = page.waiting.clone();
        }
        if !json && (page.waiting.is_some() || queued) {
            waiting.say(page.waiting.as_deref());
            queued = page.waiting.is_some();
        }
        // While queued, look again soon: whether its Runner is there can change.
        if page.waiting.is_some() {
            wait_ms = super::progress::QUEUED_LOOK_MS;
        }
        for event in page.events.iter().filter(|e| e.turn_id == turn_id) {
            if json {
                output::print(&serde_json::to_string(event)?)?;
            } else if let TurnEvent::Waiting(w) = &event.event {
                // The Worker waits too (a full pool, a slow Hermes): said like the queue.
                waiting.say_now(&w.message);
            } else {
                waiting.clear();
                printed_text |= show_event(event, &mut live)?;
            }
        }
        after = page.events.last().map(|e| e.seq).unwrap_or(after);
        let Some(turn) = page.turn.filter(|t| t.is_final()) else {
            continue;
        };
        waiting.clear();
        if json {
            output::print(&serde_json::to_string(
                &serde_json::json!({ "type": "turn.end", "turn": turn }),
            )?)?;
        } else if printed_text {
            output::print("")?;
        } else if let Some(text) = turn.final_text.as_deref().filter(|t| !t.is_empty()) {
            output::print(&output::clean_text(text))?;
        }
        let error = turn.error.as_deref().unwrap_or("no reason given");
        return match turn.state {
            TurnState::Complete => Ok(()),
            TurnState::Error => Err(CliError::failure(format!("the turn failed: {error}")).into()),
            TurnState::Interrupted => {
                Err(CliError::failure(format!("the turn was interrupted: {error}")).into())
            }
            state => Err(CliError::failure(format!(
                "the turn ended without a certain outcome ({state}): {error}"
            ))
            .into()),
        };
    }
}

/// Prints one event for a person (what is not the reply goes to stderr); returns true
/// when it printed reply text.
fn show_event(e: &SessionEvent, live: &mut LiveLines) -> anyhow::Result<bool> {
    if let TurnEvent::ToolOutput(piece) = &e.event {
        live.show(&mut std::io::stderr().lock(), piece)?;
        return Ok(false);
    }
    live.end_line(&mut std::io::stderr().lock())?;
    match &e.event {
        TurnEvent::TextDelta(d) => {
            let mut out = std::io::stdout().lock();
            out.write_all(output::clean_text(&d.text).as_bytes())?;
            out.flush()?;
            return Ok(true);
        }
        TurnEvent::ToolStart(t) => eprintln!("[tool {} started]", output::clean(&t.name)),
        TurnEvent::ToolComplete(t) => eprintln!("[tool {} done]", output::clean(&t.name)),
        // JSON text escapes control characters itself.
        TurnEvent::ApprovalRequest(a) => {
            eprintln!("[Hermes asks for approval: {}]", serde_json::to_string(a)?)
        }
        TurnEvent::Error(m) => eprintln!("[error: {}]", output::clean(&m.message)),
        TurnEvent::ComputerReady(c) => {
            eprintln!("[computer {} ready]", output::clean(&c.computer_id))
        }
        TurnEvent::SessionCreated(_) | TurnEvent::ToolOutput(_) | TurnEvent::Waiting(_) => {}
    }
    Ok(false)
}
