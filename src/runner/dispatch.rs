//! What the Runner does with a leased command: check it with the control plane (never run
//! twice: receipts), parse it once, run it by kind, stream a turn's events, and report the
//! outcome.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::client::MachineClient;
use super::connection::backoff;
use super::receipts::{self, Prior};
use super::{
    Shared, artifacts, computers, exec, image_accept, shell, telemetry, turns, worker_turn,
};
use crate::api::machine::{CompleteParams, LeasedCommand, Outcome, RunnerCommand, Stopping};

struct Finished {
    outcome: Outcome,
    result: Option<serde_json::Value>,
    error: Option<String>,
}

impl Finished {
    fn failed(error: impl Into<String>) -> Self {
        Finished {
            outcome: Outcome::Failed,
            result: None,
            error: Some(error.into()),
        }
    }
}

pub(super) async fn handle(shared: &Arc<Shared>, generation: i64, cmd: LeasedCommand) {
    let id = cmd.id.clone();
    if shared
        .inflight
        .lock()
        .map(|m| m.contains_key(&id))
        .unwrap_or(false)
    {
        tracing::debug!(command = %id, "delivered again while running; ignored");
        return;
    }
    let fp = receipts::fingerprint(&cmd.id, &cmd.kind, &cmd.payload);
    match shared.receipts.lookup(&id, &fp) {
        Ok(Prior::New) => {}
        Ok(Prior::Finished(stored)) => {
            tracing::info!(command = %id, outcome = stored.outcome.as_str(), "duplicate delivery: reporting the stored outcome, not running again");
            let f = Finished {
                outcome: stored.outcome,
                result: stored.result,
                error: stored.error,
            };
            report(shared, generation, &id, f).await;
            return;
        }
        Ok(Prior::Unfinished) => {
            report(
                shared,
                generation,
                &id,
                Finished {
                    outcome: Outcome::Uncertain,
                    result: None,
                    error: Some("started earlier without an outcome; it will not run again".into()),
                },
            )
            .await;
            return;
        }
        Ok(Prior::Mismatch) => {
            report(
                shared,
                generation,
                &id,
                Finished::failed(
                    "this command id was delivered before with different content; refused",
                ),
            )
            .await;
            return;
        }
        Err(e) => {
            tracing::error!(command = %id, error = %e, "cannot read receipts; not running the command");
            return;
        }
    }
    // Parsed once, here: a kind this Runner does not know, or a payload of the wrong shape,
    // is refused before it starts.
    let command = match RunnerCommand::parse(&cmd.kind, &cmd.payload) {
        // The team tool id comes with the lease, never from the payload.
        Ok(RunnerCommand::WorkerTurn(mut p)) => {
            p.team_tools = cmd.team_tools.clone();
            RunnerCommand::WorkerTurn(p)
        }
        Ok(command) => command,
        Err(e) => {
            report(shared, generation, &id, Finished::failed(e)).await;
            return;
        }
    };
    let kind = command.kind();
    // The re-check (still ours, not cancelled, within its deadline) and the receipt (on
    // disk before anything runs) side by side: each waits for a disk of its own. A receipt
    // of a command that is refused is taken back.
    let (granted, receipt) = tokio::join!(
        shared.batches.start(generation, &id),
        shared.receipts.begin(&id, &fp, kind.as_sql())
    );
    let granted = match (granted, receipt) {
        (Ok(g), Ok(())) => g,
        (Err(e), receipt) => {
            tracing::info!(command = %id, error = %e, "control plane refused to start the command");
            if receipt.is_ok()
                && let Err(e) = shared.receipts.forget(&id).await
            {
                tracing::warn!(command = %id, error = %e, "cannot take back the receipt of a command that did not start");
            }
            return;
        }
        (Ok(_), Err(e)) => {
            tracing::error!(command = %id, error = %e, "cannot write the receipt; not running the command");
            return;
        }
    };
    let token = CancellationToken::new();
    shared.active();
    if let Ok(mut m) = shared.inflight.lock() {
        m.insert(id.clone(), token.clone());
    }
    let remaining =
        Duration::from_millis((granted.deadline_ms - crate::timefmt::now_ms()).max(0) as u64);
    tracing::debug!(command = %id, %kind, "running");
    let cooperative = kind.stopping() == Stopping::Cooperative;
    let running = telemetry::Running::start();
    let finished = tokio::select! {
        f = execute(shared, generation, &id, command, token.clone()) => f,
        _ = token.cancelled(), if !cooperative => Finished {
            outcome: Outcome::Cancelled,
            result: None,
            error: Some("cancelled while running".into()),
        },
        _ = tokio::time::sleep(remaining) => Finished::failed("the deadline passed while it was running"),
        _ = shared.hard_stop.cancelled() => Finished {
            outcome: Outcome::Uncertain,
            result: None,
            error: Some("the Runner stopped before the command finished".into()),
        },
    };
    if let Err(e) = shared
        .receipts
        .finish(
            &id,
            finished.outcome,
            finished.result.as_ref(),
            finished.error.as_deref(),
        )
        .await
    {
        tracing::error!(command = %id, error = %e, "cannot record the outcome");
    }
    if let Ok(mut m) = shared.inflight.lock() {
        m.remove(&id);
    }
    drop(running);
    telemetry::command_ended(kind, finished.outcome);
    report(shared, generation, &id, finished).await;
    shared.active();
}

/// Why a command did not end `done`: the outcome it ends with instead, and what to tell
/// the operator.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CommandFailure {
    pub outcome: Outcome,
    pub message: String,
}

impl CommandFailure {
    /// Nothing happened, or the work was refused.
    pub fn failed(message: impl Into<String>) -> Self {
        CommandFailure {
            outcome: Outcome::Failed,
            message: message.into(),
        }
    }

    /// The work may have had effects and its outcome is unknown: never replayed.
    pub fn uncertain(message: impl Into<String>) -> Self {
        CommandFailure {
            outcome: Outcome::Uncertain,
            message: message.into(),
        }
    }
}

impl From<String> for CommandFailure {
    fn from(message: String) -> Self {
        CommandFailure::failed(message)
    }
}

impl From<computers::PoolError> for CommandFailure {
    fn from(e: computers::PoolError) -> Self {
        CommandFailure::failed(e.to_string())
    }
}

/// Runs one command by its kind.
async fn execute(
    shared: &Arc<Shared>,
    generation: i64,
    id: &str,
    command: RunnerCommand,
    stop: CancellationToken,
) -> Finished {
    let computer = match &command {
        RunnerCommand::ComputerStart(p) => Some(p.computer_id.clone()),
        RunnerCommand::ComputerExec(p) => Some(p.computer_id.clone()),
        RunnerCommand::WorkerTurn(p) => Some(p.computer.computer_id.clone()),
        // Every other kind either names no computer or acts on one it does not start.
        RunnerCommand::Ping(_)
        | RunnerCommand::Fetch(_)
        | RunnerCommand::Cancel(_)
        | RunnerCommand::SessionTurn(_)
        | RunnerCommand::SessionStop(_)
        | RunnerCommand::SessionClose(_)
        | RunnerCommand::SessionList(_)
        | RunnerCommand::SessionCheck(_)
        | RunnerCommand::ComputerStop(_)
        | RunnerCommand::ComputerRemove(_)
        | RunnerCommand::ComputerScreen(_)
        | RunnerCommand::ComputerPause(_)
        | RunnerCommand::ComputerResume(_)
        | RunnerCommand::ComputerShell(_)
        | RunnerCommand::EgressLog(_)
        | RunnerCommand::BrowserClose(_)
        | RunnerCommand::BrowserScreen(_)
        | RunnerCommand::BrowserPause(_)
        | RunnerCommand::BrowserResume(_)
        | RunnerCommand::ComputerImageAccept(_) => None,
    };
    let pool = || {
        shared.computers.as_ref().ok_or_else(|| {
            CommandFailure::failed(
                "this Runner cannot run computers: no container engine answered when it started",
            )
        })
    };
    let browser = || {
        shared.browser.as_ref().ok_or_else(|| {
            CommandFailure::failed(
                "this Runner has no managed browser (runner.json browser.enabled is false, or its Hermes is not one it starts)",
            )
        })
    };
    let answer: Result<serde_json::Value, CommandFailure> = match command {
        RunnerCommand::Ping(p) => exec::ping(p).await.map_err(Into::into),
        RunnerCommand::Fetch(p) => exec::fetch(
            p,
            shared.config.artifact_roots.clone(),
            transfer(shared, generation, id),
        )
        .await
        .map_err(Into::into),
        RunnerCommand::Cancel(p) => Ok(cancel_running(shared, p.command_id)),
        RunnerCommand::SessionTurn(p) => {
            let r = with_events(shared, generation, id, |tx| {
                turns::turn(
                    &shared.hermes,
                    &shared.config.allowed_profiles,
                    shared.browser.as_ref(),
                    p,
                    tx,
                )
            })
            .await;
            // A Hermes this Runner started lives in its Hermes home, whatever the error
            // text says about ~/.hermes.
            match (&shared.config.hermes_command, r) {
                (Some(_), Ok(v)) => Ok(turns::name_the_home(v, &shared.hermes_home)),
                (_, r) => r,
            }
        }
        RunnerCommand::SessionStop(r) => turns::stop(&shared.hermes, r).await,
        RunnerCommand::SessionClose(r) => turns::close(&shared.hermes, r).await,
        RunnerCommand::SessionList(_) => turns::list(&shared.hermes).await,
        RunnerCommand::SessionCheck(r) => turns::check(&shared.hermes, r).await,
        RunnerCommand::ComputerStart(p) => async { Ok(pool()?.start(p).await?) }.await,
        RunnerCommand::ComputerStop(p) | RunnerCommand::ComputerRemove(p) => {
            async { Ok(pool()?.stop(p).await?) }.await
        }
        RunnerCommand::ComputerExec(p) => async { Ok(pool()?.exec(p).await?) }.await,
        RunnerCommand::ComputerScreen(p) => async { Ok(pool()?.screen(p).await?) }.await,
        RunnerCommand::ComputerPause(p) => {
            async { Ok(pool()?.pauses.pause(&p.computer_id, p.control_fence).await) }.await
        }
        RunnerCommand::ComputerResume(p) => {
            async {
                Ok(pool()?
                    .pauses
                    .resume(&p.computer_id, p.control_fence, &p.note))
            }
            .await
        }
        RunnerCommand::ComputerShell(p) => {
            async {
                let pool = pool()?.clone();
                shell::open(
                    pool,
                    &shared.client,
                    generation,
                    p,
                    shared.hard_stop.clone(),
                )
                .await
            }
            .await
        }
        RunnerCommand::WorkerTurn(p) => worker_turn(shared, generation, id, p, stop).await,
        RunnerCommand::EgressLog(q) => async { Ok(pool()?.egress().log(q).await?) }.await,
        RunnerCommand::ComputerImageAccept(p) => {
            async { image_accept::accept(pool()?, p).await }.await
        }
        RunnerCommand::BrowserClose(p) => match browser() {
            Err(e) => Err(e),
            Ok(b) => b
                .close(&p.agent_id, p.remove_profile)
                .await
                .map(|closed| serde_json::json!(crate::api::browser::BrowserCloseResult { closed }))
                .map_err(|e| {
                    CommandFailure::failed(format!("cannot remove the browser profile: {e}"))
                }),
        },
        RunnerCommand::BrowserScreen(p) => {
            async {
                let r = browser()?.screen(&p).await;
                r.map(|r| serde_json::json!(r))
                    .map_err(|e| CommandFailure::failed(e.to_string()))
            }
            .await
        }
        RunnerCommand::BrowserPause(p) => {
            async {
                let r = browser()?.pause(&p).await;
                r.map(|r| serde_json::json!(r))
                    .map_err(|e| CommandFailure::failed(e.to_string()))
            }
            .await
        }
        RunnerCommand::BrowserResume(p) => {
            async { Ok(serde_json::json!(browser()?.resume(&p).await)) }.await
        }
    };
    // A computer's start, exec and turn tell the control plane what its workspace takes.
    let answer = match (answer, &computer, &shared.computers) {
        (Ok(mut v), Some(id), Some(pool)) if v.is_object() => {
            if let Some(usage) = pool.workspace_usage(id).await {
                v[crate::api::computers::WORKSPACE_USAGE_KEY] =
                    serde_json::to_value(usage).unwrap_or_default();
            }
            Ok(v)
        }
        (answer, _, _) => answer,
    };
    match answer {
        Ok(v) => Finished {
            outcome: Outcome::Done,
            result: Some(v),
            error: None,
        },
        Err(f) => Finished {
            outcome: f.outcome,
            result: None,
            error: Some(f.message),
        },
    }
}

/// Runs a turn whose events stream to the control plane as they come; every event is
/// delivered before the outcome is.
async fn with_events<F>(
    shared: &Arc<Shared>,
    generation: i64,
    command_id: &str,
    turn: impl FnOnce(tokio::sync::mpsc::UnboundedSender<crate::api::sessions::TurnEvent>) -> F,
) -> Result<serde_json::Value, CommandFailure>
where
    F: std::future::Future<Output = Result<serde_json::Value, CommandFailure>>,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forwarder = tokio::spawn(forward_events(
        shared.client.clone(),
        generation,
        command_id.to_string(),
        rx,
    ));
    let r = turn(tx).await;
    let _ = forwarder.await;
    r
}

/// A computer agent's turn: the Worker's model loop, every tool in its computer.
async fn worker_turn(
    shared: &Arc<Shared>,
    generation: i64,
    command_id: &str,
    p: crate::api::sessions::WorkerTurnPayload,
    stop: CancellationToken,
) -> Result<serde_json::Value, CommandFailure> {
    let (Some(pool), Some(workers)) = (&shared.computers, &shared.workers) else {
        return Err(CommandFailure::failed(
            "this Runner cannot run computer agents' turns: it needs a Docker engine and a Worker Python",
        ));
    };
    let exports = artifacts::TurnExports::new(transfer(shared, generation, command_id));
    let host = worker_turn::WorkerHost {
        pool,
        workers,
        hermes_home: &shared.hermes_home,
        allowed_profiles: &shared.config.allowed_profiles,
        exports: &exports,
        control: &shared.client,
        generation,
    };
    with_events(shared, generation, command_id, |tx| {
        worker_turn::turn(host, p, tx, stop)
    })
    .await
}

/// The transfers of one running command.
fn transfer(shared: &Shared, generation: i64, command_id: &str) -> artifacts::Transfer {
    artifacts::Transfer {
        client: shared.client.clone(),
        generation,
        command_id: command_id.to_string(),
        spool: shared.spool.clone(),
    }
}

/// The spool directory, emptied of what an earlier run left in transit.
pub(super) fn clean_spool(data_dir: &std::path::Path) -> PathBuf {
    let spool = data_dir.join("spool");
    let _ = std::fs::remove_dir_all(&spool);
    spool
}

/// Cancels a command running on this Runner, if it is.
fn cancel_running(shared: &Shared, target: String) -> serde_json::Value {
    let token = shared
        .inflight
        .lock()
        .ok()
        .and_then(|m| m.get(&target).cloned());
    let found = token.is_some();
    if let Some(t) = token {
        t.cancel();
    }
    serde_json::json!({ "command_id": target, "was_running": found })
}

/// Reports an outcome, retrying through network trouble. A refusal (another outcome won,
/// or the generation ended) is final: the control plane already decided.
async fn report(shared: &Arc<Shared>, generation: i64, id: &str, f: Finished) {
    let mut params = reportable(CompleteParams {
        outcome: f.outcome,
        result: f.result,
        error: f.error,
    });
    let mut attempt = 0;
    loop {
        match shared.batches.complete(generation, id, &params).await {
            Ok(()) => return,
            // Whatever the control plane cannot take, it still learns how the command ended.
            Err(e) if e.status() == Some(413) && params.result.is_some() => {
                tracing::warn!(command = %id, error = %e, "the result was refused as too large; reporting a failure instead");
                params = too_large(params.result.as_ref().map_or(0, |r| r.to_string().len()));
            }
            Err(e) if e.is_transient() && attempt < 8 && !shared.hard_stop.is_cancelled() => {
                let wait = backoff(attempt);
                attempt += 1;
                tracing::warn!(command = %id, error = %e, retry_in = ?wait, "cannot report the outcome yet");
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "outcome not accepted by the control plane");
                return;
            }
        }
    }
}

/// An outcome the control plane takes: a result over its size limit becomes a failure
/// that says so (an exec's output is capped before this; this is the last line).
fn reportable(params: CompleteParams) -> CompleteParams {
    let size = params.result.as_ref().map_or(0, |r| r.to_string().len());
    if size > crate::api::machine::MAX_RESULT_JSON_BYTES {
        too_large(size)
    } else {
        params
    }
}

fn too_large(size: usize) -> CompleteParams {
    CompleteParams {
        outcome: Outcome::Failed,
        result: None,
        error: Some(format!(
            "the result ({size} bytes as JSON) is larger than the control plane takes ({} bytes); it was dropped",
            crate::api::machine::MAX_RESULT_JSON_BYTES
        )),
    }
}

/// Sends a turn's events in order, batching whatever queued up while a request was out.
async fn forward_events(
    client: MachineClient,
    generation: i64,
    id: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::api::sessions::TurnEvent>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        if let Err(e) = client.events(generation, &id, batch).await {
            tracing::warn!(command = %id, error = %e, "events not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_over_the_limit_is_reported_as_a_failure_that_says_so() {
        let small = reportable(CompleteParams {
            outcome: Outcome::Done,
            result: Some(serde_json::json!({ "stdout": "ok" })),
            error: None,
        });
        assert_eq!(small.outcome, Outcome::Done);
        assert!(small.result.is_some());
        let big = "\u{0}".repeat(crate::api::machine::MAX_RESULT_JSON_BYTES / 6 + 1);
        let r = reportable(CompleteParams {
            outcome: Outcome::Done,
            result: Some(serde_json::json!({ "stdout": big })),
            error: None,
        });
        assert_eq!(r.outcome, Outcome::Failed);
        assert!(r.result.is_none());
        assert!(
            r.error
                .unwrap()
                .contains("larger than the control plane takes")
        );
    }
}
