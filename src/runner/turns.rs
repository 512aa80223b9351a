//! Session commands on the Runner: a turn through Hermes with its events streamed back,
//! confirmed stops, closes and the channel's session list. Only sessions of this Runner's
//! own channel are ever touched.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;

use super::CommandFailure;
use super::browser::ManagedBrowser;
use super::hermes_link::HermesLink;
use super::host_output::{LiveOutput, Piece};
use super::tool_tap::Subscription;
use crate::api::sessions::{
    ApprovalRequest, LiveSession, SessionCreated, SessionListResult, SessionRef, StopResult,
    TextDelta, ToolComplete, ToolOutput, ToolStart, TurnEvent as Event, TurnPayload, TurnResult,
};
use crate::hermes::{StopConfirmation, TurnEvent};

/// How long a stop may take to be confirmed through `session.active_list`.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed session command: `Failed` when nothing happened in Hermes or it refused,
/// `Uncertain` when Hermes may have acted and the outcome is unknown.
pub type SessionOutcome = Result<serde_json::Value, CommandFailure>;

fn failed(m: impl Into<String>) -> CommandFailure {
    CommandFailure::failed(m)
}

fn owned(link: &HermesLink, r: &SessionRef) -> Result<(), CommandFailure> {
    match link.channel.owner(&r.hermes_session_id) {
        Some(s) if s == r.session_id => Ok(()),
        _ => Err(failed(format!(
            "Hermes session {} does not belong to this Runner's channel; refused",
            r.hermes_session_id
        ))),
    }
}

/// Runs one turn; every event goes to `events` as it arrives.
pub async fn turn(
    link: &HermesLink,
    allowed_profiles: &[String],
    browser: Option<&Arc<ManagedBrowser>>,
    p: TurnPayload,
    events: mpsc::UnboundedSender<Event>,
) -> SessionOutcome {
    link.turn_started(&p.session_id);
    let outcome = run_turn(link, allowed_profiles, browser, &p, events).await;
    link.turn_ended(&p.session_id);
    outcome
}

async fn run_turn(
    link: &HermesLink,
    allowed_profiles: &[String],
    browser: Option<&Arc<ManagedBrowser>>,
    p: &TurnPayload,
    events: mpsc::UnboundedSender<Event>,
) -> SessionOutcome {
    if !allowed_profiles.contains(&p.profile) {
        return Err(failed(format!(
            "profile {:?} is not among this Runner's allowedProfiles",
            p.profile
        )));
    }
    let client = link.client().await.map_err(|e| failed(e.to_string()))?;
    let send = |event: Event| {
        let _ = events.send(event);
    };
    // A session this channel holds and Hermes still has; else a new one, seeded with the
    // recent history (a session moved here, or one Hermes forgot when a connection dropped).
    let live = match &p.hermes_session_id {
        Some(sid) => {
            owned(
                link,
                &SessionRef {
                    session_id: p.session_id.clone(),
                    hermes_session_id: sid.clone(),
                },
            )?;
            let active = client
                .active_list()
                .await
                .map_err(|e| failed(e.to_string()))?;
            active.iter().any(|s| &s.id == sid).then(|| sid.clone())
        }
        None => None,
    };
    let hermes_session_id = match live {
        Some(sid) => sid,
        None => {
            let cwd = match &p.cwd {
                Some(c) => c.clone(),
                None => std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .map_err(|e| failed(format!("no working directory for the session: {e}")))?,
            };
            let history: Vec<(String, String)> = p
                .history
                .iter()
                .map(|m| (m.role.clone(), m.text.clone()))
                .collect();
            let title: String = p.message.chars().take(60).collect();
            // Hermes reaches its model before the session exists, which can take seconds:
            // say so, rather than show nothing.
            send(Event::waiting(format!(
                "starting a Hermes session (profile {}); Hermes checks its model first",
                p.profile
            )));
            let info = client
                .create_session_seeded(&cwd, Some(&p.profile), Some(&title), &history)
                .await
                .map_err(|e| failed(e.to_string()))?;
            link.channel
                .add(&info.session_id, &p.session_id, &info.stored_session_id)
                .map_err(|e| failed(format!("channel store: {e}")))?;
            send(Event::SessionCreated(SessionCreated {
                hermes_session_id: info.session_id.clone(),
                stored_session_id: info.stored_session_id.clone(),
            }));
            info.session_id
        }
    };
    // A stop that came before the prompt reached Hermes: never submit it.
    if link.stop_requested(&p.session_id) {
        return serde_json::to_value(TurnResult {
            hermes_session_id,
            status: "interrupted".into(),
            text: String::new(),
            usage: None,
            error: None,
        })
        .map_err(|e| failed(e.to_string()));
    }
    // Subscribed before the prompt goes in: the first command's output may come first.
    let mut tap = link.tap_output(&hermes_session_id);
    // The agent's browser, for this turn only: the grant ends (and the browser's network
    // pauses) when the turn does.
    let _browser = match (browser, &p.browser) {
        (Some(b), Some(u)) => {
            let stored = link.stored_id(&hermes_session_id);
            Some(b.grant(&[&hermes_session_id, &stored], &u.agent_id))
        }
        _ => None,
    };
    let mut stream = client
        .submit(&hermes_session_id, &p.message)
        .await
        .map_err(|e| failed(e.to_string()))?;
    // ... or one that came while it was being submitted.
    if link.stop_requested(&p.session_id) {
        let _ = client.interrupt(&hermes_session_id).await;
    }
    // From here on Hermes is working: a lost connection leaves the outcome unknown.
    let mut last_error = None;
    let mut live = LiveOutput::new();
    loop {
        let due = live.due();
        let event = tokio::select! {
            event = stream.next() => match event {
                Some(event) => event,
                None => break,
            },
            Some(piece) = recv_piece(&mut tap) => {
                live.push(piece, Instant::now());
                continue;
            }
            () = sleep_until(due), if due.is_some() => {
                send_output(&send, live.flush(Instant::now()));
                continue;
            }
        };
        match event {
            TurnEvent::Started => {}
            TurnEvent::TextDelta(text) => send(Event::TextDelta(TextDelta { text })),
            TurnEvent::ToolStart { tool_id, name } => {
                live.tool_started(&tool_id, &name, Instant::now());
                send(Event::ToolStart(ToolStart { tool_id, name }))
            }
            TurnEvent::ToolComplete {
                tool_id,
                name,
                args,
                result,
            } => {
                // What the tap sent is in before Hermes read it: take it all first.
                if let Some(t) = &mut tap {
                    while let Ok(piece) = t.rx.try_recv() {
                        live.push(piece, Instant::now());
                    }
                }
                send_output(&send, live.tool_completed(&tool_id, Instant::now()));
                // A screenshot's image went to the model; the event keeps its size only.
                let result = super::tools::screen::for_event(&result);
                send(Event::ToolComplete(ToolComplete {
                    tool_id,
                    name,
                    args,
                    result,
                }))
            }
            TurnEvent::Approval(req) => send(Event::ApprovalRequest(ApprovalRequest {
                command: req.command,
                description: req.description,
                choices: req.choices,
            })),
            TurnEvent::Error(message) => {
                send(Event::error(message.clone()));
                last_error = Some(message);
            }
            TurnEvent::Complete {
                text,
                status,
                usage,
            } => {
                let result = TurnResult {
                    hermes_session_id,
                    status: status.as_str().to_string(),
                    text,
                    usage: Some(json!({
                        "model": usage.model,
                        "input": usage.input,
                        "output": usage.output,
                        "total": usage.total,
                        "calls": usage.calls,
                    })),
                    error: last_error,
                };

                return serde_json::to_value(result).map_err(|e| failed(e.to_string()));
            }
        }
    }
    Err(CommandFailure::uncertain(
        "the connection to Hermes was lost during the turn; its outcome is unknown and it is not replayed",
    ))
}

/// The next piece of live output; never ready without a tap.
async fn recv_piece(tap: &mut Option<Subscription>) -> Option<Piece> {
    match tap {
        Some(t) => t.rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(d) = due {
        tokio::time::sleep_until(d.into()).await;
    }
}

fn send_output(send: &impl Fn(Event), outputs: Vec<ToolOutput>) {
    for o in outputs {
        send(Event::ToolOutput(o));
    }
}

/// Rewrites Hermes's `~/.hermes` in a failed turn's error to the Hermes home it really
/// reads (a supervised Hermes runs with HERMES_HOME set, so `~/.hermes` sends the operator
/// to the wrong file).
pub fn name_the_home(
    mut result: serde_json::Value,
    hermes_home: &std::path::Path,
) -> serde_json::Value {
    let home = hermes_home.display().to_string();
    if let Some(e) = result.get_mut("error")
        && let Some(text) = e.as_str()
        && text.contains("~/.hermes")
    {
        *e = serde_json::Value::String(text.replace("~/.hermes", &home));
    }
    result
}

/// Interrupts, then confirms through `session.active_list` that the session is idle or gone.
pub async fn stop(link: &HermesLink, r: SessionRef) -> SessionOutcome {
    owned(link, &r)?;
    link.request_stop(&r.session_id);
    let client = link.client().await.map_err(|e| failed(e.to_string()))?;
    match client
        .confirm_stopped(&r.hermes_session_id, CONFIRM_TIMEOUT)
        .await
    {
        Ok(c) => {
            let confirmed = match c {
                StopConfirmation::Idle => "idle",
                StopConfirmation::Gone => "gone",
            };
            serde_json::to_value(StopResult {
                confirmed: confirmed.into(),
            })
            .map_err(|e| failed(e.to_string()))
        }
        Err(not) => Err(failed(not.to_string())),
    }
}

/// Closes one session of the channel; nothing else is touched.
pub async fn close(link: &HermesLink, r: SessionRef) -> SessionOutcome {
    owned(link, &r)?;
    let client = link.client().await.map_err(|e| failed(e.to_string()))?;
    let closed = client
        .close(&r.hermes_session_id)
        .await
        .map_err(|e| failed(e.to_string()))?;
    link.channel.mark_closed(&r.hermes_session_id);
    Ok(json!({ "closed": closed }))
}

/// The live Hermes sessions of this channel (others are invisible).
pub async fn list(link: &HermesLink) -> SessionOutcome {
    let client = link.client().await.map_err(|e| failed(e.to_string()))?;
    let active = client
        .active_list()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let sessions = active
        .into_iter()
        .filter_map(|s| {
            link.channel.owner(&s.id).map(|owner| LiveSession {
                hermes_session_id: s.id,
                session_id: owner,
                status: s.status,
            })
        })
        .collect();
    serde_json::to_value(SessionListResult { sessions }).map_err(|e| failed(e.to_string()))
}

/// A read-only look at a session whose turn is uncertain: is it still working, and what
/// did Hermes last answer? Never submits anything.
pub async fn check(link: &HermesLink, r: SessionRef) -> SessionOutcome {
    owned(link, &r)?;
    let client = link.client().await.map_err(|e| failed(e.to_string()))?;
    let active = client
        .active_list()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = active
        .iter()
        .find(|s| s.id == r.hermes_session_id)
        .map(|s| s.status.clone())
        .unwrap_or_else(|| "gone".into());
    let last_reply = match link.channel.stored_id(&r.hermes_session_id) {
        Some(stored) => client
            .rest()
            .session_messages(&stored)
            .await
            .ok()
            .and_then(|v| {
                v["messages"].as_array().and_then(|m| {
                    m.iter()
                        .rev()
                        .find(|m| m["role"] == "assistant" && m["content"].is_string())
                        .and_then(|m| m["content"].as_str().map(str::to_string))
                })
            }),
        None => None,
    };
    Ok(json!({ "checked": true, "status": status, "last_reply": last_reply }))
}

#[cfg(test)]
mod home_tests {
    #[test]
    fn a_supervised_hermes_error_names_the_real_home() {
        let r = serde_json::json!({"status": "error", "error": "No model set: edit ~/.hermes/config.yaml"});
        let r = super::name_the_home(r, std::path::Path::new("/srv/runner/hermes-home"));
        assert_eq!(
            r["error"],
            "No model set: edit /srv/runner/hermes-home/config.yaml"
        );
    }
}
