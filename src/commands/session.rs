//! `yy session`: Bot sessions and their transcripts.

use clap::{Args, Subcommand};

use super::{ById, Columns, JsonFlag, context, print_list};
use crate::api::sessions::Session;
use crate::api::states::SessionState;
use crate::client::Client;
use crate::error::CliError;
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    pub command: SessionCommand,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List sessions, newest first
    #[command(visible_alias = "ls")]
    List {
        /// Only this agent's sessions
        #[arg(long)]
        agent: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show a session and its transcript
    Show(ById),
    /// Interrupt a session's turn and confirm on the Runner that it is idle or gone
    Stop(ById),
    /// Close a session for good (its Hermes session is closed; nothing else is touched)
    Close(ById),
}

impl Columns for Session {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "agent",
        "state",
        "last turn",
        "runner",
        "updated",
        "hermes session",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.agent.clone(),
            self.state.to_string(),
            self.last_turn.map_or_else(|| "-".into(), |t| t.to_string()),
            opt(&self.runner_id),
            self.updated_at.clone(),
            opt(&self.hermes_session_id),
        ]
    }
}

pub async fn run(args: SessionArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        SessionCommand::List { agent, json } => {
            let list = client.session_list(agent.as_deref()).await?;
            print_list(&list, json.json)
        }
        SessionCommand::Show(ById { id, json }) => {
            let s = client.session_show(&id).await?;
            if json.json {
                return output::json(&s);
            }
            // Turn texts come from models and tools: escaped, lines kept.
            output::print(&output::clean_text(&transcript(&s)))?;
            Ok(())
        }
        SessionCommand::Stop(ById { id, json }) => stop(&client, &id, json.json).await,
        SessionCommand::Close(ById { id, json }) => {
            let s = client.session_close(&id).await?;
            output::record(&s, json.json, Session::HEADERS, |s| s.session.row())
        }
    }
}

fn transcript(s: &Session) -> String {
    let mut out = format!(
        "session:  {}\nagent:    {} (owner {})\nstate:    {}\nrunner:   {}\nhermes:   {}\n",
        s.id,
        s.agent,
        s.owner,
        s.state,
        opt(&s.runner_id),
        opt(&s.hermes_session_id)
    );
    if let Some(reason) = &s.cleanup_reason {
        out.push_str(&format!("cleanup:  {reason}\n"));
    }
    for t in s.turns.iter().flatten() {
        out.push_str(&format!(
            "\n#{} {} ({})\n> {}\n",
            t.seq, t.state, t.created_at, t.message
        ));
        for tool in &t.tools {
            out.push_str(&format!(
                "[tool {}] {} -> {}\n",
                tool.name,
                tool.args
                    .as_ref()
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
                tool.result
                    .as_ref()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "(no result)".into())
            ));
        }
        if let Some(text) = &t.final_text {
            out.push_str(text.trim_start());
            out.push('\n');
        }
        if let Some(e) = &t.error {
            out.push_str(&format!("error: {e}\n"));
        }
        if let Some(c) = &t.check {
            out.push_str(&format!("checked later: {c}\n"));
        }
    }
    out
}

async fn stop(client: &Client, id: &str, json: bool) -> anyhow::Result<()> {
    let started = client.session_stop(id).await?;
    // Follow the session itself (the command queue is for admins) until the stop is
    // confirmed and the turn ended, or it is pending cleanup. The control plane ends the
    // stop command by its deadline, so this ends too.
    let mut s: Session = started.session;
    while s.state == SessionState::Running || s.stopping {
        if s.state == SessionState::Running {
            // Wakes when the turn ends (no event comes after the last possible one).
            client.session_events(id, i64::MAX, 5_000, None).await?;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        s = client.session_show(id).await?;
    }
    if json {
        output::json(&s)?;
    }
    if s.state == SessionState::PendingCleanup {
        return Err(CliError::failure(format!(
            "session {id} is pending cleanup: {}; it will not be reused",
            s.cleanup_reason
                .as_deref()
                .unwrap_or("the stop could not be confirmed")
        ))
        .into());
    }
    if !json {
        output::print(&format!("session {id} stopped ({})", s.state))?;
    }
    Ok(())
}
