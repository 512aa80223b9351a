//! `/api/v1/agents/{name}/browser...`: an operator's look at and takeover of a host
//! agent's managed browser (docs/browser.md), each a command on the Runner that holds it.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::browser::BrowserControl;
use crate::api::computers as wire;
use crate::api::machine;
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::store::browser_control;
use crate::server::store::commands::CommandRow;

/// Answers a control change, waking the Runner its command went to.
fn woken(state: &AppState, (c, cmd): (BrowserControl, Option<CommandRow>)) -> Json<BrowserControl> {
    if let Some(cmd) = cmd {
        state.queue.wake_runner(&cmd.runner_id);
    }
    Json(c)
}

fn queued(state: &AppState, cmd: CommandRow) -> Json<machine::Command> {
    state.queue.wake_runner(&cmd.runner_id);
    Json(cmd.view(false))
}

pub async fn browser_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<BrowserControl>, ApiError> {
    let account = caller.account.id.clone();
    Ok(Json(
        state
            .store
            .call(move |c| browser_control::show(c, &account, &name))
            .await?,
    ))
}

pub async fn browser_screen(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::ComputerScreen>,
) -> Result<Json<machine::Command>, ApiError> {
    let account = caller.account.id.clone();
    let limits = state.queue.limits();
    let cmd = state
        .store
        .call(move |c| {
            browser_control::screen(
                c,
                &account,
                &name,
                &p.action,
                p.control_fence,
                p.frame_id,
                limits,
            )
        })
        .await?;
    Ok(queued(&state, cmd))
}

pub async fn browser_control(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<BrowserControl>, ApiError> {
    let account = caller.account.id.clone();
    let limits = state.queue.limits();
    let done = state
        .store
        .call(move |c| browser_control::take(c, &account, &name, limits))
        .await?;
    Ok(woken(&state, done))
}

async fn renew_or_release(
    state: AppState,
    caller: crate::server::auth::Caller,
    name: String,
    fence: i64,
    release: bool,
) -> Result<Json<BrowserControl>, ApiError> {
    let account = caller.account.id.clone();
    let done = state
        .store
        .call(move |c| browser_control::renew_or_release(c, &account, &name, fence, release))
        .await?;
    Ok(woken(&state, done))
}

pub async fn browser_control_renew(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::ControlFence>,
) -> Result<Json<BrowserControl>, ApiError> {
    renew_or_release(state, caller, name, p.control_fence, false).await
}

pub async fn browser_control_release(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::ControlFence>,
) -> Result<Json<BrowserControl>, ApiError> {
    renew_or_release(state, caller, name, p.control_fence, true).await
}

pub async fn browser_handback(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::Handback>,
) -> Result<Json<BrowserControl>, ApiError> {
    let account = caller.account.id.clone();
    let limits = state.queue.limits();
    let done = state
        .store
        .call(move |c| browser_control::handback(c, &account, &name, &p.note, limits))
        .await?;
    Ok(woken(&state, done))
}

pub async fn browser_close(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<machine::Command>, ApiError> {
    let account = caller.account.id.clone();
    let limits = state.queue.limits();
    let cmd = state
        .store
        .call(move |c| browser_control::close(c, &account, &name, limits))
        .await?;
    Ok(queued(&state, cmd))
}
