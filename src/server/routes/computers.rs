//! Computers over the admin API: provision, inspect, stop, remove, and the audited
//! diagnostic exec.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::computers as wire;
use crate::api::machine;
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::computers;

const DEFAULT_EXEC_TIMEOUT_MS: u64 = 60_000;
const MAX_EXEC_TIMEOUT_MS: u64 = 3_600_000;
const MAX_OUTPUT_CAP: u64 = 1024 * 1024;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerListQuery {
    #[serde(default)]
    pub removed: bool,
}

pub async fn computer_list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ComputerListQuery>,
) -> Result<Json<Vec<wire::Computer>>, ApiError> {
    let rows = state
        .store
        .call(move |c| computers::list(c, q.removed))
        .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

pub async fn computer_show(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    let row = state.store.call(move |c| computers::get(c, &id)).await?;
    Ok(Json(row.into()))
}

pub async fn computer_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::ComputerCreate>,
) -> Result<Json<wire::Computer>, ApiError> {
    let limits = state.limits;
    let account = caller.account.id.clone();
    let (row, cmd) = state
        .store
        .call(move |c| computers::create(c, &account, &p.agent, limits))
        .await?;
    if cmd.is_some() {
        state.hub.signals(&row.runner_id).work.notify_waiters();
    }
    Ok(Json(row.into()))
}

async fn stop_or_remove(
    state: AppState,
    id: String,
    remove: bool,
) -> Result<Json<wire::Computer>, ApiError> {
    let (row, cmd) = state
        .store
        .call(move |c| computers::stop(c, &id, remove))
        .await?;
    if cmd.is_some() {
        state.hub.signals(&row.runner_id).work.notify_waiters();
    }
    Ok(Json(row.into()))
}

pub async fn computer_stop(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    stop_or_remove(state, id, false).await
}

pub async fn computer_remove(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    stop_or_remove(state, id, true).await
}

pub async fn computer_exec(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ComputerExec>,
) -> Result<Json<machine::Command>, ApiError> {
    if p.argv.is_empty() || p.argv[0].is_empty() {
        return Err(ApiError::bad_request(
            "nothing to run: give the command after --",
        ));
    }
    let timeout_ms = p.timeout_ms.unwrap_or(DEFAULT_EXEC_TIMEOUT_MS);
    if !(1..=MAX_EXEC_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(ApiError::bad_request(format!(
            "timeout_ms must be between 1 and {MAX_EXEC_TIMEOUT_MS}"
        )));
    }
    // Both streams at their cap must fit in one 8 MiB result.
    let cap = p.output_cap_bytes.unwrap_or(MAX_OUTPUT_CAP);
    if !(1..=MAX_OUTPUT_CAP).contains(&cap) {
        return Err(ApiError::bad_request(format!(
            "output_cap_bytes must be between 1 and {MAX_OUTPUT_CAP}"
        )));
    }
    let limits = state.limits;
    let account = caller.account.id.clone();
    let cmd = state
        .store
        .call(move |c| {
            computers::exec(
                c,
                &account,
                &id,
                &p.argv,
                Some(timeout_ms),
                Some(cap),
                limits,
            )
        })
        .await?;
    state.hub.signals(&cmd.runner_id).work.notify_waiters();
    Ok(Json(cmd.view(false)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    100
}

pub async fn audit_list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<AuditQuery>,
) -> Result<Json<Vec<wire::AuditEntry>>, ApiError> {
    let limit = q.limit.clamp(1, 1000);
    let rows = state
        .store
        .call(move |c| computers::audit_list(c, limit))
        .await?;
    Ok(Json(rows))
}
