//! `yy computer attach`: watch what a computer's agent does, read-only: the running turn's
//! tool calls and their outputs as they happen, turn after turn, until Ctrl-C.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::api::sessions::{SessionEvent, TurnEvent};
use crate::api::states::SessionState;
use crate::client::Client;
use crate::client::LONG_POLL_MS;
use crate::error::{CliError, Exit};
use crate::output;
use crate::web_view::Screen;

use super::tool_output::LiveLines;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Computer id (or unique prefix)
    pub id: String,
    /// Print events as JSON lines (NDJSON) instead of text
    #[arg(long, conflicts_with_all = ["control", "web"])]
    pub json: bool,
    /// Take control: the model is paused at its next tool call (the tool in flight
    /// finishes first), then you get an interactive shell (a pty) in the computer's
    /// container; Ctrl-] detaches. Control is renewed while attached and ends on detach,
    /// shell exit or a lost connection; the model stays paused until `yy computer handback`
    #[arg(long)]
    pub control: bool,
    #[command(flatten)]
    pub view: WebFlags,
}

/// `--web` and `--open` of `attach` (computers and browsers).
#[derive(Debug, Args)]
pub struct WebFlags {
    /// Show the live screen in a browser: serve a page on 127.0.0.1 and print its link
    /// (with a one-time token); with --control the page also sends mouse and keyboard
    /// input. Ctrl-C stops it (and releases control)
    #[arg(long)]
    pub web: bool,
    /// Open the page's link in the default browser (xdg-open)
    #[arg(long, requires = "web")]
    pub open: bool,
}

#[derive(Debug, Args)]
pub struct HandbackArgs {
    /// Computer id (or unique prefix)
    pub id: String,
    /// What the model should know about what you did (enters its next model segment)
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub note: String,
    #[command(flatten)]
    pub json: super::JsonFlag,
}

/// How often control is renewed while attached (it lasts 30 s).
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// The longest tool output shown per call (the rest is cut, saying so).
const SHOWN_OUTPUT: usize = 2000;

/// A tool result for a person: its `stdout`/`stderr`/`error` if it has them, else JSON;
/// cut at [`SHOWN_OUTPUT`] and escaped (it comes from the model and the guest).
pub fn result_text(result: &serde_json::Value) -> String {
    let mut text = String::new();
    for key in ["error", "stdout", "stderr", "text"] {
        if let Some(s) = result[key].as_str().filter(|s| !s.is_empty()) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(s);
        }
    }
    if text.is_empty() {
        text = result.to_string();
    }
    let mut shown: String = text.chars().take(SHOWN_OUTPUT).collect();
    if shown.len() < text.len() {
        let more = crate::api::words::plural(text.len() - shown.len(), "more byte", "more bytes");
        shown.push_str(&format!(" [... {more}]"));
    }
    output::clean_text(&shown).into_owned()
}

/// How a tool whose output was shown live ended: its error, or its exit code and flags.
fn ending_text(result: &serde_json::Value) -> String {
    if let Some(error) = result["error"].as_str() {
        return output::clean(error).into_owned();
    }
    let mut text = match result["exit_code"].as_i64() {
        Some(code) => format!("exit {code}"),
        None => "ended".to_string(),
    };
    for flag in ["timed_out", "truncated"] {
        if result[flag] == serde_json::json!(true) {
            text.push_str(&format!(" ({})", flag.replace('_', " ")));
        }
    }
    text
}

fn show(e: &SessionEvent, live: &mut LiveLines) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if let TurnEvent::ToolOutput(piece) = &e.event {
        live.show(&mut out, piece)?;
        return Ok(());
    }
    live.end_line(&mut out)?;
    match &e.event {
        TurnEvent::TextDelta(d) => out.write_all(output::clean_text(&d.text).as_bytes())?,
        TurnEvent::ToolStart(t) => writeln!(out, "\n[tool {} started]", output::clean(&t.name))?,
        TurnEvent::ToolComplete(t) => {
            let args = output::clean(&t.args.to_string()).into_owned();
            writeln!(out, "[tool {} {args}]", output::clean(&t.name))?;
            if live.showed(&t.tool_id) {
                // The output was shown as it came: the result adds only how it ended.
                writeln!(out, "{}", ending_text(&t.result))?;
            } else {
                writeln!(out, "{}", result_text(&t.result))?;
            }
        }
        TurnEvent::Error(m) => writeln!(out, "[error: {}]", output::clean(&m.message))?,
        TurnEvent::Waiting(m) => writeln!(out, "[{}]", output::clean(&m.message))?,
        TurnEvent::SessionCreated(_)
        | TurnEvent::ToolOutput(_)
        | TurnEvent::ApprovalRequest(_)
        | TurnEvent::ComputerReady(_) => {}
    }
    out.flush()?;
    Ok(())
}

/// The agents whose turns `screen` shows: a computer's agent and, when it is shared, its
/// members (read again each time: a grant may change while attached); a browser's agent.
async fn agents_of(client: &Client, screen: &Screen) -> anyhow::Result<Vec<String>> {
    Ok(match screen {
        Screen::Computer(id) => {
            let c = client.computer_show(id).await?;
            let mut agents = vec![c.agent.clone()];
            agents.extend(c.shared_with.into_iter().map(|g| g.agent_id));
            agents
        }
        Screen::Browser(agent) => vec![agent.clone()],
    })
}

/// Prints the running turns' events of `screen`'s agents until Ctrl-C.
pub(super) async fn follow(client: &Client, screen: &Screen, json: bool) -> anyhow::Result<()> {
    match screen {
        Screen::Computer(id) => {
            let c = client.computer_show(id).await?;
            eprintln!(
                "attached to computer {} (agent {}), read-only: its turns' tool calls and outputs (a desktop's screen: `yy computer attach {} --web`); Ctrl-C detaches",
                c.id,
                output::clean(&c.agent),
                c.id
            );
        }
        Screen::Browser(agent) => eprintln!(
            "attached to agent {}'s browser, read-only: its turns' tool calls and outputs (the page itself: `yy browser attach {} --web`); Ctrl-C detaches",
            output::clean(agent),
            output::clean(agent)
        ),
    }
    let mut agents = agents_of(client, screen).await?;
    // (session, last event seq) of the turn being followed.
    let mut current: Option<(String, i64)> = None;
    let mut told_idle = false;
    let mut live = LiveLines::default();
    loop {
        let Some((session, after)) = current.clone() else {
            // A look that fails (the control plane restarting) keeps the agents known.
            if let Ok(now) = agents_of(client, screen).await {
                agents = now;
            }
            let mut running = None;
            for agent in &agents {
                let newest = client
                    .session_list(Some(agent))
                    .await?
                    .into_iter()
                    .filter(|s| s.state == SessionState::Running)
                    .max_by(|a, b| a.updated_at.cmp(&b.updated_at));
                running = running
                    .into_iter()
                    .chain(newest)
                    .max_by(|a: &crate::api::sessions::Session, b| a.updated_at.cmp(&b.updated_at));
            }
            match running {
                Some(s) => {
                    eprintln!("[session {} is running]", s.id);
                    // Start at its newest turn's first event: what happened so far in it.
                    current = Some((s.id.into(), 0));
                    told_idle = false;
                }
                None => {
                    if !told_idle {
                        eprintln!("[no turn is running; waiting for one]");
                        told_idle = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            continue;
        };
        let page = client
            .session_events(&session, after, LONG_POLL_MS, None)
            .await?;
        let turn_id = page.turn.as_ref().map(|t| t.id.clone());
        for e in &page.events {
            if after == 0 && Some(&e.turn_id) != turn_id.as_ref() {
                continue; // an earlier turn of the session
            }
            if json {
                output::print(&serde_json::to_string(e)?)?;
            } else {
                show(e, &mut live)?;
            }
        }
        let last = page.events.last().map(|e| e.seq).unwrap_or(after);
        match page.turn.filter(|t| t.is_final()) {
            Some(t) if last == after || page.events.is_empty() => {
                if json {
                    output::print(&serde_json::to_string(
                        &serde_json::json!({ "type": "turn.end", "turn": t }),
                    )?)?;
                } else {
                    output::print(&format!("\n[turn {} ended {}]", t.id, t.state))?;
                }
                current = None;
            }
            _ => current = Some((session, last)),
        }
    }
}

/// Takes control of `screen` and waits, renewing it, until the model is paused (the tool
/// in flight finished); Ctrl-C meanwhile releases it. The fence held, and the timer that
/// keeps renewing it.
pub(super) async fn take_control(
    client: &Client,
    screen: &Screen,
) -> anyhow::Result<(i64, tokio::time::Interval)> {
    let (fence, pause) = screen.take_control(client).await?;
    let next = match screen {
        Screen::Computer(_) => "tool call",
        Screen::Browser(_) => "browser call",
    };
    eprintln!(
        "[control fence {fence}: the model pauses at its next {next}; waiting for the one in flight to finish]"
    );
    let mut renew = tokio::time::interval(RENEW_EVERY);
    renew.tick().await;
    let pause = pause.unwrap_or_default();
    let waited = async {
        let cmd = client.wait_command(&pause, None).await?;
        super::runner_ops::result_of::<crate::api::computers::PauseResult>(cmd, "pause")
    };
    tokio::pin!(waited);
    loop {
        tokio::select! {
            r = &mut waited => { r?; return Ok((fence, renew)); }
            _ = renew.tick() => { screen.renew_control(client, fence, false).await?; }
            _ = tokio::signal::ctrl_c() => {
                let _ = screen.renew_control(client, fence, true).await;
                return Err(CliError::new(
                    Exit::Cancelled,
                    format!(
                        "interrupted; control released, and the model stays paused until `yy {} handback {}`",
                        screen.noun(),
                        screen.name()
                    ),
                )
                .into());
            }
        }
    }
}

async fn control(client: &Client, id: &str) -> anyhow::Result<()> {
    let (fence, mut renew) = take_control(client, &Screen::Computer(id.to_string())).await?;
    eprintln!(
        "[you have control of computer {id} (control fence {fence}); the model is paused. Opening a shell in its container]"
    );
    let ended = super::computer_shell::run(client, id, fence, &mut renew).await;
    // Detaching ends control; nothing resumes by itself.
    let _ = client.computer_control_renew(id, fence, true).await;
    use std::io::IsTerminal;
    // On a terminal, leaving the shell offers the handback.
    if ended.is_ok() && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        eprint!(
            "[control released] hand computer {id} back now? Type a note for the model and Enter (empty: leave it paused): "
        );
        let note = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await??;
        let note = note.trim();
        if !note.is_empty() {
            let c = client.computer_handback(id, note).await?;
            eprintln!(
                "[handed back (control fence {}); the model resumes with your note]",
                c.control_fence
            );
            return Ok(());
        }
    }
    eprintln!(
        "[control released; the model stays paused until `yy computer handback {id} --note ...`]"
    );
    ended.map(|_| ())
}

pub async fn handback(client: &Client, a: HandbackArgs) -> anyhow::Result<()> {
    let c = client.computer_handback(&a.id, &a.note).await?;
    if a.json.json {
        return output::json(&c);
    }
    Ok(output::print(&format!(
        "handed computer {} back (control fence {}); the model resumes with your note",
        c.computer_id, c.control_fence
    ))?)
}

pub async fn attach(client: &Client, a: AttachArgs) -> anyhow::Result<()> {
    if a.view.web {
        let id = client.computer_show(&a.id).await?.id.into_string();
        return super::computer_web::run(client, Screen::Computer(id), a.control, a.view.open)
            .await;
    }
    if a.control {
        return control(client, &a.id).await;
    }
    let screen = Screen::Computer(a.id.clone());
    tokio::select! {
        r = follow(client, &screen, a.json) => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("detached");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_shown_cut_and_escaped() {
        let r = serde_json::json!({"exit_code": 0, "stdout": "hi\n", "stderr": ""});
        assert_eq!(result_text(&r), "hi\n");
        let r = serde_json::json!({"error": "no \u{1b}[31mcolour"});
        assert!(!result_text(&r).contains('\u{1b}'));
        let long = serde_json::json!({"stdout": "x".repeat(5000)});
        let t = result_text(&long);
        assert!(
            t.ends_with("[... 3000 more bytes]"),
            "{}",
            &t[t.len() - 40..]
        );
        assert_eq!(result_text(&serde_json::json!({"x": 1})), r#"{"x":1}"#);
    }
}
