//! Computers over the admin API: provision, inspect, stop, remove, and the audited
//! diagnostic exec.

use axum::Json;
use axum::extract::{Path, State};

use super::many;

use crate::api::computers::{
    self as wire, EXEC_DEFAULT_TIMEOUT_MS, EXEC_MAX_OUTPUT_CAP, EXEC_MAX_TIMEOUT_MS,
};
use crate::api::machine;
use crate::server::AppState;
use crate::server::auth::{Admin, Caller};
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::computer_grants::{self, GrantChange};
use crate::server::store::computers;

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
    // With whom each is shared.
    many(&state, move |c| {
        computers::list(c, q.removed)?
            .into_iter()
            .map(|row| {
                let shared_with = computer_grants::members(c, &row.id)?;
                Ok(wire::Computer {
                    shared_with,
                    ..row.into()
                })
            })
            .collect::<Result<Vec<wire::Computer>, _>>()
    })
    .await
}

pub async fn computer_show(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    // With the control of a computer ever taken over (paused or not).
    let shown = state
        .store
        .call(move |c| {
            let row = computers::get(c, &id)?;
            let control = crate::server::store::control::show(c, &row.id)?;
            let shared_with = computer_grants::members(c, &row.id)?;
            let mut view = wire::Computer::from(row);
            view.control = (control.control_fence > 0).then_some(control);
            view.shared_with = shared_with;
            Ok(view)
        })
        .await?;
    Ok(Json(shown))
}

pub async fn computer_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::ComputerCreate>,
) -> Result<Json<wire::Computer>, ApiError> {
    let row = state
        .queue
        .computer_create(caller.account.id.clone(), p.agent)
        .await?;
    Ok(Json(row.into()))
}

/// Shares a computer with agents of its account, or revokes their grants.
async fn grants_change(
    state: AppState,
    caller: Caller,
    id: String,
    p: wire::ComputerShare,
    how: GrantChange,
) -> Result<Json<wire::Computer>, ApiError> {
    let account = caller.account.id.clone();
    let shown = state
        .store
        .call(move |c| {
            let (row, members) = computer_grants::change(how, c, &account, &id, &p.agents)?;
            let mut view = wire::Computer::from(computers::get(c, &row.id)?);
            view.shared_with = members;
            Ok(view)
        })
        .await?;
    Ok(Json(shown))
}

pub async fn computer_share(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ComputerShare>,
) -> Result<Json<wire::Computer>, ApiError> {
    grants_change(state, caller, id, p, GrantChange::Share).await
}

pub async fn computer_unshare(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ComputerShare>,
) -> Result<Json<wire::Computer>, ApiError> {
    grants_change(state, caller, id, p, GrantChange::Unshare).await
}

pub async fn computer_stop(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    Ok(Json(state.queue.computer_stop(id, false).await?.into()))
}

pub async fn computer_remove(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Computer>, ApiError> {
    Ok(Json(state.queue.computer_stop(id, true).await?.into()))
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
    let timeout_ms = p.timeout_ms.unwrap_or(EXEC_DEFAULT_TIMEOUT_MS);
    if !(1..=EXEC_MAX_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(ApiError::bad_request(format!(
            "timeout_ms must be between 1 and {EXEC_MAX_TIMEOUT_MS}"
        )));
    }
    let cap = p.output_cap_bytes.unwrap_or(EXEC_MAX_OUTPUT_CAP);
    if !(1..=EXEC_MAX_OUTPUT_CAP).contains(&cap) {
        return Err(ApiError::bad_request(format!(
            "output_cap_bytes must be between 1 and {EXEC_MAX_OUTPUT_CAP}"
        )));
    }
    let account = caller.account.id.clone();
    let cmd = state
        .queue
        .computer_exec(account, id, p.argv, timeout_ms, cap)
        .await?;
    Ok(Json(cmd.view(false)))
}

pub async fn computer_screen(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ComputerScreen>,
) -> Result<Json<machine::Command>, ApiError> {
    let account = caller.account.id.clone();
    let cmd = state
        .queue
        .computer_screen(account, id, p.action, p.control_fence, p.frame_id)
        .await?;
    Ok(Json(cmd.view(false)))
}

pub async fn computer_control(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Control>, ApiError> {
    let account = caller.account.id.clone();
    Ok(Json(state.queue.control_take(account, id).await?))
}

pub async fn computer_control_renew(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ControlFence>,
) -> Result<Json<wire::Control>, ApiError> {
    control_fenced(state, caller, id, p, false).await
}

pub async fn computer_control_release(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::ControlFence>,
) -> Result<Json<wire::Control>, ApiError> {
    control_fenced(state, caller, id, p, true).await
}

/// Renews the control lease, or with `release` gives it back, under the caller's fence.
async fn control_fenced(
    state: AppState,
    caller: Caller,
    id: String,
    p: wire::ControlFence,
    release: bool,
) -> Result<Json<wire::Control>, ApiError> {
    let account = caller.account.id.clone();
    let c = state
        .queue
        .control_renew(account, id, p.control_fence, release)
        .await?;
    Ok(Json(c))
}

pub async fn computer_handback(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Body(p): Body<wire::Handback>,
) -> Result<Json<wire::Control>, ApiError> {
    let account = caller.account.id.clone();
    Ok(Json(
        state.queue.control_handback(account, id, p.note).await?,
    ))
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
