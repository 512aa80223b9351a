//! Admin endpoints over a Runner's command queue.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};

use crate::api::ids::{CommandId, RunnerId};
use crate::api::machine::MAX_COMMAND_TIMEOUT_MS;
use crate::api::machine::RunnerCommand;
use crate::api::machine::{self, FetchParams, FetchPayload, NoPayload, PingParams, PingPayload};
use crate::api::states::CommandState;
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::runners;
use crate::server::store::{commands, ids};

/// Time a ping gets beyond its hold to be delivered and answered.
const PING_SLACK_MS: u64 = 10_000;

/// Longest an admin may wait for a command in one request.
const MAX_WAIT_MS: u64 = 60_000;

pub async fn runner_ping(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<PingParams>,
) -> Result<Json<machine::Command>, ApiError> {
    // Checked: a hold near u64::MAX must be refused, not wrapped or saturated into range.
    let max_hold = MAX_COMMAND_TIMEOUT_MS - PING_SLACK_MS;
    if p.hold_ms > max_hold {
        return Err(ApiError::bad_request(format!(
            "hold_ms {} is too long: a ping may hold at most {max_hold} ms",
            p.hold_ms
        )));
    }
    let timeout = match p.timeout_ms {
        Some(t) => t,
        None => p
            .hold_ms
            .checked_add(PING_SLACK_MS)
            .ok_or_else(|| ApiError::bad_request("hold_ms is out of range"))?,
    };
    if timeout <= p.hold_ms {
        return Err(ApiError::bad_request(format!(
            "timeout_ms {timeout} must be longer than hold_ms {}",
            p.hold_ms
        )));
    }
    let ping = RunnerCommand::Ping(PingPayload { hold_ms: p.hold_ms });
    let row = state.queue.enqueue(id, ping, Some(timeout)).await?;
    Ok(Json(row.view(false)))
}

pub async fn runner_fetch(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<FetchParams>,
) -> Result<Json<machine::Command>, ApiError> {
    if !p.path.starts_with('/') || p.path.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{:?} is not an absolute path on the Runner's machine",
            p.path
        )));
    }
    let key = id.clone();
    let runner = state.store.call(move |c| runners::get(c, &key)).await?;
    let fetch = RunnerCommand::Fetch(FetchPayload {
        path: p.path,
        artifact_roots: runner.artifact_roots,
    });
    let row = state.queue.enqueue(id, fetch, p.timeout_ms).await?;
    Ok(Json(row.view(false)))
}

/// The live Hermes sessions of the Runner's own channel.
pub async fn runner_sessions(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<machine::Command>, ApiError> {
    let list = RunnerCommand::SessionList(NoPayload {});
    let row = state.queue.enqueue(id, list, None).await?;
    Ok(Json(row.view(false)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandListQuery {
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    50
}

pub async fn runner_commands(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Q(q): Q<CommandListQuery>,
) -> Result<Json<Vec<machine::Command>>, ApiError> {
    let limit = q.limit.clamp(1, 1000);
    let rows = state
        .store
        .call(move |c| {
            let runner = runners::get(c, &id)?;
            commands::list(c, &runner.id, limit)
        })
        .await?;
    Ok(Json(rows.into_iter().map(|r| r.view(false)).collect()))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Wait up to this long for the command to end before answering.
    #[serde(default)]
    pub wait_ms: u64,
}

pub async fn command_show(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Q(q): Q<WaitQuery>,
) -> Result<Json<machine::Command>, ApiError> {
    let wait = Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let id = resolve(&state, id).await?;
    let row = state.queue.wait_command(id, wait).await?;
    let (id, is_final) = (row.id.clone(), row.is_final());
    let mut view = row.view(true);
    if view.state == CommandState::Pending {
        view.waiting = Some(runner_wait(&state, &view.runner_id, "the command"));
    }
    if is_final && view.result.is_some() {
        state.queue.delivered(id).await?;
    }
    Ok(Json(view))
}

pub async fn command_cancel(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<machine::Command>, ApiError> {
    let id = resolve(&state, id).await?;
    let row = state.queue.cancel(id).await?;
    Ok(Json(row.view(false)))
}

/// Why work queued for `runner_id` has not started: the same words for commands and turns.
pub fn runner_wait(state: &AppState, runner_id: &RunnerId, what: &str) -> String {
    if state.queue.is_live(runner_id) {
        format!("queued: waiting for runner {runner_id} to take {what}")
    } else {
        format!("queued: runner {runner_id} is offline; {what} starts when it connects")
    }
}

/// A command id typed by a person: full, or a unique prefix.
async fn resolve(state: &AppState, key: String) -> Result<CommandId, ApiError> {
    Ok(state
        .store
        .call_unlocked(move |c| ids::resolve(c, ids::Kind::Command, &key).map(CommandId::from))
        .await?)
}
