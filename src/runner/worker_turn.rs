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
use super::worker::{WorkerError, Workers};
use super::worker_pipe::{FromWorker, HistoryLine, ToWorker};
use crate::api::sessions::{
    ComputerReady, TextDelta, ToolComplete, ToolStart, TurnEvent, TurnResult, WorkerTurnPayload,
};
use crate::computer::protocol::ExecParams;
use crate::computer::session::GuestSession;

/// How long a stopped turn's Worker gets to end its model loop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Output kept of each stream of a `terminal` call: what a model can use.
const TERMINAL_OUTPUT_CAP: u64 = 64 * 1024;
/// Largest file `read_file` returns.
const READ_CAP: u64 = 256 * 1024;

/// What a Worker turn needs from the Runner.
pub struct WorkerHost<'a> {
    pub pool: &'a Arc<Computers>,
    pub workers: &'a Workers,
    pub hermes_home: &'a Path,
    pub allowed_profiles: &'a [String],
    /// `computer_export` and the turn's attachments.
    pub exports: &'a TurnExports,
    /// The control plane, for team-tool calls of an admin agent's turn.
    pub control: &'a super::client::MachineClient,
    pub generation: i64,
}

/// The tools of a computer agent's turn, and nothing else; a desktop computer adds the
/// screen tools.
pub fn tool_schemas(desktop: bool) -> Value {
    let tool = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": { "type": "object", "properties": properties, "required": required },
            }
        })
    };
    let mut tools = json!([
        tool(
            "terminal",
            "Run a shell command in your computer (Linux), in your working directory. Returns the exit code, stdout and stderr.",
            json!({
                "command": { "type": "string", "description": "The command line for /bin/sh -c" },
                "timeout": { "type": "integer", "description": "Seconds before it is killed (default 60)" }
            }),
            &["command"],
        ),
        tool(
            "read_file",
            "Read a text file of your computer's workspace.",
            json!({ "path": { "type": "string", "description": "Path relative to the workspace" } }),
            &["path"],
        ),
        tool(
            "write_file",
            "Write (create or replace) a file in your computer's workspace.",
            json!({
                "path": { "type": "string", "description": "Path relative to the workspace" },
                "content": { "type": "string" }
            }),
            &["path", "content"],
        ),
        tool(
            "list_files",
            "List a directory of your computer's workspace.",
            json!({ "path": { "type": "string", "description": "Directory relative to the workspace (default: the workspace)" } }),
            &[],
        ),
    ]);
    tools
        .as_array_mut()
        .expect("an array")
        .push(TurnExports::schema());
    if desktop {
        tools
            .as_array_mut()
            .expect("an array")
            .extend(super::screen_tools::schemas());
    }
    tools
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
    let settings = model::resolve(host.hermes_home, &p.profile).map_err(CommandFailure::failed)?;
    let waiting = |message: String| send(TurnEvent::waiting(message));
    let (started, mut guest) = tokio::select! {
        r = host.pool.ensure(&p.computer, true, &waiting) => r?,
        _ = stop.cancelled() => return interrupted(&p, "stopped before the computer was ready"),
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
    let desktop = host.pool.is_desktop(&p.computer.image_id).await;
    let agent = p.computer.agent_id.clone();
    let mut worker = host
        .workers
        .take(&agent)
        .await
        .map_err(|e| CommandFailure::failed(e.to_string()))?;
    let mut tools = tool_schemas(desktop);
    let mut system = system_prompt(&p.computer.guest_cwd, desktop);
    if p.team_tools.is_some() {
        let list = tools.as_array_mut().expect("an array");
        list.extend(super::team_tools::schemas());
        system.push_str(super::team_tools::SYSTEM_NOTE);
    }
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
            model: settings.to_wire(),
            tools: &tools,
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
                            let r = match (&p.team_tools, super::team_tools::is_team_tool(&name)) {
                                (Some(id), true) => {
                                    super::team_tools::forward(
                                        host.control,
                                        host.generation,
                                        id,
                                        &name,
                                        &args,
                                    )
                                    .await
                                }
                                _ => {
                                    // A guest session that ended (its agent died, or broke
                                    // the protocol) is replaced by a fresh one.
                                    if guest.is_closed()
                                        && let Ok(fresh) =
                                            host.pool.guest_under(computer, p.computer.fence).await
                                    {
                                        guest = fresh;
                                    }
                                    run_tool(&guest, &name, &args, &stop, host.exports, &live).await
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
                    result: super::screen_tools::for_event(&result),
                }));
                // A multimodal envelope (a screenshot) goes over as it is: the Worker hands
                // it to Hermes, which gives the image to vision models.
                // A stop that came while the tool ran reaches the Worker before the result,
                // so its model loop ends instead of asking the model again.
                if stop.is_cancelled() && stopping.is_none() {
                    stopping = Some(tokio::time::Instant::now() + STOP_GRACE);
                    let _ = worker.send(&ToWorker::Interrupt).await;
                }
                let content = if result["_multimodal"] == json!(true) {
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
            } => {
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

/// Runs one tool call in the guest. Every failure is an answer to the model, not an error
/// of the turn.
async fn run_tool(
    guest: &GuestSession,
    name: &str,
    args: &Value,
    stop: &CancellationToken,
    exports: &TurnExports,
    live: &LiveOutput,
) -> Value {
    if name == "computer_export" {
        return exports.export(guest, args).await;
    }
    if super::screen_tools::is_screen_tool(name) {
        return super::screen_tools::run(guest, name, args).await;
    }
    let text = |key: &str| args[key].as_str().map(str::to_string);
    let outcome: Result<Value, String> = match name {
        "terminal" => match text("command") {
            None => Err("terminal needs a command".into()),
            Some(command) => {
                let seconds = args["timeout"].as_u64().unwrap_or(60).clamp(1, 3600);
                let params = ExecParams {
                    shell: Some(command),
                    timeout_ms: Some(seconds * 1000),
                    output_cap_bytes: Some(TERMINAL_OUTPUT_CAP),
                    ..ExecParams::default()
                };
                guest
                    .exec_live(params, Some(stop), &mut |stream, text| {
                        live.push(stream, text)
                    })
                    .await
                    .map_err(|e| e.to_string())
                    .map(|r| {
                        json!({
                            "exit_code": r.exit_code,
                            "stdout": r.stdout,
                            "stderr": r.stderr,
                            "timed_out": r.timed_out,
                            "truncated": r.truncated,
                        })
                    })
            }
        },
        "read_file" => match text("path") {
            None => Err("read_file needs a path".into()),
            Some(path) => guest
                .read(&path, Some(READ_CAP))
                .await
                .map_err(|e| e.to_string())
                .map(|(r, data)| {
                    json!({
                        "path": r.path,
                        "size": r.size,
                        "truncated": r.truncated,
                        "content": String::from_utf8_lossy(&data),
                    })
                }),
        },
        "write_file" => match (text("path"), text("content")) {
            (Some(path), Some(content)) => guest
                .write(&path, content.as_bytes(), None)
                .await
                .map_err(|e| e.to_string())
                .map(|r| json!({ "path": r.path, "size": r.size, "sha256": r.sha256 })),
            _ => Err("write_file needs a path and content".into()),
        },
        "list_files" => guest
            .list(&text("path").unwrap_or_else(|| ".".into()))
            .await
            .map_err(|e| e.to_string())
            .map(|r| serde_json::to_value(r).unwrap_or_default()),
        other => Err(format!("tool {other:?} is not available in this computer")),
    };
    outcome.unwrap_or_else(|e| json!({ "error": e }))
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
