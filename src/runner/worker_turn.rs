//! A computer agent's turn: the model loop runs in a Worker on this host, every tool it
//! calls runs in the agent's computer under the turn's lease, and every step is streamed
//! to the control plane as the same events a host turn has.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::CommandFailure;
use super::artifacts::TurnExports;
use super::computers::Computers;
use super::live_output::LiveOutput;
use super::model;
use super::pauses::Gate;
use super::tools::{self, TurnKind, TurnTools};
use super::worker::{WorkerError, Workers};
use super::worker_pipe::{FromWorker, HistoryLine, ToWorker};
use crate::api::sessions::{
    ComputerReady, TextDelta, ToolComplete, ToolStart, TurnEvent, TurnResult, WorkerTurnPayload,
};

/// How long a stopped turn's Worker gets to end its model loop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What a Worker turn needs from the Runner.
pub struct WorkerHost<'a> {
    pub pool: &'a Arc<Computers>,
    pub workers: &'a Workers,
    pub hermes_home: &'a Path,
    pub allowed_profiles: &'a [String],
    /// The turn's attachments and inputs, and `computer_export`.
    pub exports: &'a TurnExports,
    /// The control plane, for team-tool calls of an admin agent's turn.
    pub control: &'a super::client::MachineClient,
    pub generation: i64,
}

/// Runs one turn; every event goes to `events` as it happens. `stop` interrupts the model
/// loop and kills the guest command tree that runs.
pub async fn turn(
    host: WorkerHost<'_>,
    p: WorkerTurnPayload,
    events: UnboundedSender<TurnEvent>,
    stop: CancellationToken,
) -> Result<Value, CommandFailure> {
    let send = |event: TurnEvent| {
        let _ = events.send(event);
    };
    if !host.allowed_profiles.contains(&p.profile) {
        return Err(CommandFailure::failed(format!(
            "profile {:?} is not in this Runner's allowedProfiles",
            p.profile
        )));
    }
    let mut settings =
        model::resolve(host.hermes_home, &p.profile).map_err(CommandFailure::failed)?;
    host.workers.windows.fill(&mut settings);
    let model = settings.to_wire();
    let desktop = host.pool.is_desktop(&p.computer.image_id).await;
    let offered = TurnTools::new(TurnKind {
        desktop,
        team: p.team_tools.is_some(),
    });
    let schemas = offered.schemas();
    let mut system = system_prompt(&p.computer.guest_cwd, desktop);
    if p.team_tools.is_some() {
        system.push_str(tools::team::SYSTEM_NOTE);
    }
    // A shared computer's member has its own Worker (Hermes home, model history). It
    // builds Hermes's agent for this turn while the computer starts.
    let agent = p.agent_id().to_string();
    let prepared = async {
        let mut worker = host
            .workers
            .take(&agent)
            .await
            .map_err(|e| CommandFailure::failed(e.to_string()))?;
        worker
            .send(&ToWorker::Prepare {
                session: &p.session_id,
                model: model.clone(),
                tools: &schemas,
                system: &system,
            })
            .await
            .map_err(|e| CommandFailure::failed(e.to_string()))?;
        Ok::<_, CommandFailure>(worker)
    };
    let waiting = |message: String| send(TurnEvent::waiting(message));
    let computer = async {
        host.pool
            .ensure(&p.computer, true, &waiting)
            .await
            .map_err(CommandFailure::from)
    };
    let (worker, computer) = tokio::select! {
        both = async { tokio::join!(prepared, computer) } => both,
        _ = stop.cancelled() => return interrupted(&p, "stopped before the computer was ready"),
    };
    let mut worker = worker?;
    let (started, mut guest) = match computer {
        Ok(c) => c,
        Err(e) => {
            host.workers.put_back(&agent, worker);
            return Err(e);
        }
    };
    let ready = ComputerReady {
        computer_id: p.computer.computer_id.clone(),
        fence: p.computer.fence,
        container_id: started.container_id.clone(),
        resources: started.resources.clone(),
    };
    send(TurnEvent::ComputerReady(ready));
    // Attached files go into the guest before the model starts; it is told where.
    let attached = tokio::select! {
        r = host.exports.attach(&guest, &p.attachments, &p.computer.guest_cwd) => r.map_err(CommandFailure::failed)?,
        _ = stop.cancelled() => return interrupted(&p, "stopped before the turn began"),
    };
    let inputs = tokio::select! {
        r = host.exports.inputs(&guest, &p.inputs, &p.computer.guest_cwd) => r.map_err(CommandFailure::failed)?,
        _ = stop.cancelled() => return interrupted(&p, "stopped before the turn began"),
    };
    let notes: Vec<String> = [attached, inputs].into_iter().flatten().collect();
    let message = if notes.is_empty() {
        p.message.clone()
    } else {
        format!("{}\n\n{}", notes.join("\n"), p.message)
    };
    let history = p
        .history
        .iter()
        .map(|m| HistoryLine {
            role: &m.role,
            content: &m.text,
        })
        .collect();
    worker
        .send(&ToWorker::Turn {
            session: &p.session_id,
            model,
            tools: &schemas,
            message: &message,
            history,
            system: &system,
        })
        .await
        .map_err(|e| CommandFailure::failed(e.to_string()))?;
    tracing::info!(session = %p.session_id, turn = %p.turn_id, "prompt handed to Hermes");
    // From here on the model may be working: losing the Worker leaves the outcome unknown.
    let mut stopping: Option<tokio::time::Instant> = None;
    loop {
        let next = tokio::select! {
            m = worker.recv() => m,
            _ = stop.cancelled(), if stopping.is_none() => {
                stopping = Some(tokio::time::Instant::now() + STOP_GRACE);
                let _ = worker.send(&ToWorker::Interrupt).await;
                continue;
            }
            _ = tokio::time::sleep_until(stopping.unwrap_or_else(far_future)), if stopping.is_some() => {
                // The model loop did not end in time: the Worker goes, and nothing it
                // could still do reaches the computer.
                drop(worker);
                return interrupted(&p, "the Worker did not stop in time and was killed");
            }
        };
        let message = match next {
            Ok(m) => m,
            Err(WorkerError::Gone) if stopping.is_some() => {
                return interrupted(&p, "stopped");
            }
            Err(e) => {
                return Err(CommandFailure::uncertain(format!(
                    "{e} during the turn; its outcome is unknown and it is not replayed"
                )));
            }
        };
        match message {
            FromWorker::Delta { text } => send(TurnEvent::TextDelta(TextDelta { text })),
            FromWorker::ToolCall {
                call_id,
                name,
                args,
            } => {
                send(TurnEvent::ToolStart(ToolStart {
                    tool_id: call_id.clone(),
                    name: name.clone(),
                }));
                let live = LiveOutput::start(&call_id, &name, events.clone());
                let computer = &p.computer.computer_id;
                let paused = || {
                    send(TurnEvent::waiting(
                        "paused: an operator has control of the computer; the model waits for `yy computer handback`",
                    ))
                };
                // Every tool call, team tools included, passes the pause gate: while an
                // operator has the computer the turn does nothing at all until the handback.
                let result = if stop.is_cancelled() {
                    json!({ "error": "not run: the turn was stopped" })
                } else {
                    match host.pool.pauses.enter(computer, &stop, paused).await {
                        Gate::Run => {
                            let r = match offered.find(&name) {
                                None => tools::not_offered(&name),
                                Some(tool) => {
                                    // A guest session that ended (its agent died, or broke
                                    // the protocol) is replaced by a fresh one.
                                    if tool.family().in_guest()
                                        && guest.is_closed()
                                        && let Ok(fresh) =
                                            host.pool.guest_under(computer, p.computer.fence).await
                                    {
                                        guest = fresh;
                                    }
                                    let call = tools::Call {
                                        guest: &guest,
                                        stop: &stop,
                                        live: &live,
                                        exports: host.exports,
                                        control: host.control,
                                        generation: host.generation,
                                        team: p.team_tools.as_deref(),
                                    };
                                    tool.call(&args, &call).await
                                }
                            };
                            host.pool.pauses.leave(computer);
                            r
                        }
                        Gate::HandedBack(note) => json!({
                            "not_run": "an operator took control of the computer before this tool ran and has handed it back; the computer may have changed, so look again before you go on",
                            "operator_note": note,
                        }),
                        Gate::Stopped => json!({ "error": "not run: the turn was stopped" }),
                    }
                };
                live.finish().await;
                send(TurnEvent::ToolComplete(ToolComplete {
                    tool_id: call_id.clone(),
                    name,
                    args,
                    result: tools::screen::for_event(&result),
                }));
                // A multimodal envelope (a screenshot) goes over as it is: the Worker hands
                // it to Hermes, which gives the image to vision models.
                // A stop that came while the tool ran reaches the Worker before the result,
                // so its model loop ends instead of asking the model again.
                if stop.is_cancelled() && stopping.is_none() {
                    stopping = Some(tokio::time::Instant::now() + STOP_GRACE);
                    let _ = worker.send(&ToWorker::Interrupt).await;
                }
                let content = if tools::screen::is_multimodal(&result) {
                    result
                } else {
                    Value::String(serde_json::to_string(&result).expect("serializes"))
                };
                if let Err(e) = worker
                    .send(&ToWorker::ToolResult {
                        call_id: &call_id,
                        content,
                    })
                    .await
                {
                    return Err(CommandFailure::uncertain(format!(
                        "{e} during the turn; its outcome is unknown and it is not replayed"
                    )));
                }
            }
            FromWorker::Refused { name, reason } => {
                let id = format!("refused-{}", uuid::Uuid::new_v4());
                send(TurnEvent::ToolStart(ToolStart {
                    tool_id: id.clone(),
                    name: name.clone(),
                }));
                send(TurnEvent::ToolComplete(ToolComplete {
                    tool_id: id,
                    name,
                    args: Value::Null,
                    result: json!({ "refused": reason }),
                }));
            }
            FromWorker::Done {
                status,
                text,
                error,
                context_length,
            } => {
                // Settings that named no window: the Worker probed, and later ones need not.
                if let Some(window) = context_length {
                    host.workers.windows.learn(&settings, window);
                }
                let status = match status.as_str() {
                    s @ ("complete" | "interrupted") => s,
                    _ => "error",
                };
                let status = if stopping.is_some() {
                    "interrupted"
                } else {
                    status
                };
                if let Some(e) = &error {
                    send(TurnEvent::error(e.clone()));
                }
                if stopping.is_none() {
                    host.workers.put_back(&agent, worker);
                }
                return Ok(result(status, &text, error));
            }
            other @ (FromWorker::Ready { .. } | FromWorker::Unknown) => {
                tracing::warn!(message = ?other, "unexpected message from the Worker; ignored");
            }
        }
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400)
}

fn result(status: &str, text: &str, error: Option<String>) -> Value {
    serde_json::to_value(TurnResult {
        hermes_session_id: String::new(),
        status: status.into(),
        text: text.into(),
        usage: None,
        error,
    })
    .expect("serializes")
}

fn interrupted(p: &WorkerTurnPayload, why: &str) -> Result<Value, CommandFailure> {
    tracing::info!(session = %p.session_id, turn = %p.turn_id, "{why}");
    Ok(result("interrupted", "", None))
}

fn system_prompt(cwd: &str, desktop: bool) -> String {
    let mut text = format!(
        "You work in your own isolated Linux computer. Your tools run there, in your working directory {cwd}; nothing on any other machine is reachable through them. Files you write stay in that directory."
    );
    if desktop {
        text.push_str(&format!(
            " It has a {}x{} desktop: take a screenshot to see it, then click, type and press keys; commands you run show their windows there (DISPLAY={}). Firefox ESR (`firefox-esr --profile {cwd}/{}`) keeps its profile in your working directory.",
            crate::computer::screen::WIDTH,
            crate::computer::screen::HEIGHT,
            crate::computer::screen::DISPLAY,
            crate::computer::screen::BROWSER_PROFILE,
        ));
    }
    text
}

/// Stops Workers that were idle too long, until the Runner stops.
pub async fn reap_forever(workers: Arc<Workers>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let n = workers.reap(super::worker::IDLE_TIMEOUT);
        if n > 0 {
            tracing::info!(workers = n, "stopped idle Workers");
        }
    }
}
