//! Admin endpoints over a Runner's command queue.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};

use crate::api::machine::{self, FetchParams, PingParams, kinds};
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::commands::{self, Cancelled};
use crate::server::store::runners;

/// Longest a command may be given, from enqueue to outcome.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

pub(super) async fn enqueue(
    state: &AppState,
    runner_key: String,
    kind: &'static str,
    payload: serde_json::Value,
    timeout_ms: u64,
) -> Result<Json<machine::Command>, ApiError> {
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(ApiError::bad_request(format!(
            "the timeout must be between 1 ms and {} s",
            MAX_TIMEOUT_MS / 1000
        )));
    }
    let limits = state.limits;
    let row = state
        .store
        .call(move |c| {
            let runner_id = runners::resolve(c, &runner_key)?;
            commands::enqueue(c, &runner_id, kind, &payload, timeout_ms as i64, limits)
        })
        .await?;
    state.hub.signals(&row.runner_id).work.notify_waiters();
    Ok(Json(row.view(false)))
}

pub async fn runner_ping(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<PingParams>,
) -> Result<Json<machine::Command>, ApiError> {
    let timeout = p.timeout_ms.unwrap_or(10_000 + p.hold_ms);
    let payload = serde_json::json!({ "hold_ms": p.hold_ms });
    enqueue(&state, id, kinds::PING, payload, timeout).await
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
    let payload = serde_json::json!({ "path": p.path, "artifact_roots": runner.artifact_roots });
    enqueue(
        &state,
        id,
        kinds::FETCH,
        payload,
        p.timeout_ms.unwrap_or(60_000),
    )
    .await
}

/// The live Hermes sessions of the Runner's own channel.
pub async fn runner_sessions(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<machine::Command>, ApiError> {
    enqueue(
        &state,
        id,
        kinds::SESSION_LIST,
        serde_json::json!({}),
        30_000,
    )
    .await
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
    let deadline = tokio::time::Instant::now() + Duration::from_millis(q.wait_ms.min(60_000));
    let cid = id.clone();
    let first = state.store.call(move |c| commands::get(c, &cid)).await?;
    let signals = state.hub.signals(&first.runner_id);
    let mut shutdown = state.shutdown.clone();
    loop {
        // Register for wake-ups before looking, so an outcome in between is not missed.
        let notified = signals.done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let cid = id.clone();
        let row = state.store.call(move |c| commands::get(c, &cid)).await?;
        if row.is_final() || tokio::time::Instant::now() >= deadline || *shutdown.borrow() {
            return Ok(Json(row.view(true)));
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.changed() => {}
        }
    }
}

pub async fn command_cancel(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<machine::Command>, ApiError> {
    let outcome = state.store.call(move |c| commands::cancel(c, &id)).await?;
    let row = match outcome {
        Cancelled::Dequeued(row) => row,
        Cancelled::Requested(row) => {
            state.hub.signals(&row.runner_id).work.notify_waiters();
            row
        }
    };
    state.hub.signals(&row.runner_id).done.notify_waiters();
    Ok(Json(row.view(false)))
}
