//! Routes. Handlers are thin: parse, check, call the store, shape the view.

mod accounts;
mod agents;
mod browser;
mod catalog;
mod commands;
mod computers;
mod egress;
mod runners;
mod sessions;
mod status;
mod teams;

use crate::server::store::Db;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::AppState;
use super::error::ApiError;
use super::store::StoreError;
use crate::api::views;

pub fn health() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(crate::server::telemetry::metrics_handler))
}

async fn healthz() -> Json<views::Health> {
    Json(views::Health {
        status: "ok".into(),
        version: crate::VERSION.into(),
    })
}

pub fn admin() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/login", post(accounts::auth_login))
        .route("/api/v1/auth/logout", post(accounts::auth_logout))
        .route("/api/v1/whoami", get(accounts::whoami))
        .route(
            "/api/v1/accounts",
            get(accounts::account_list).post(accounts::account_create),
        )
        .route("/api/v1/accounts/{name}", get(accounts::account_show))
        .route(
            "/api/v1/accounts/{name}/disable",
            post(accounts::account_disable),
        )
        .route(
            "/api/v1/accounts/{name}/enable",
            post(accounts::account_enable),
        )
        .route(
            "/api/v1/accounts/{name}/password",
            post(accounts::account_password),
        )
        .route("/api/v1/tokens", get(accounts::token_list))
        .route("/api/v1/tokens/{id}/revoke", post(accounts::token_revoke))
        .route(
            "/api/v1/sources",
            get(catalog::source_list).post(catalog::source_create),
        )
        .route(
            "/api/v1/sources/{name}",
            get(catalog::source_show).patch(catalog::source_update),
        )
        .route(
            "/api/v1/sources/{name}/archive",
            post(catalog::source_archive),
        )
        .route(
            "/api/v1/profiles",
            get(catalog::profile_list).post(catalog::profile_create),
        )
        .route(
            "/api/v1/profiles/{name}",
            get(catalog::profile_show).patch(catalog::profile_update),
        )
        .route(
            "/api/v1/profiles/{name}/archive",
            post(catalog::profile_archive),
        )
        .route(
            "/api/v1/agents",
            get(agents::agent_list).post(agents::agent_create),
        )
        .route(
            "/api/v1/agents/{name}",
            get(agents::agent_show).patch(agents::agent_update),
        )
        .route("/api/v1/agents/{name}/archive", post(agents::agent_archive))
        .route("/api/v1/agents/{name}/browser", get(browser::browser_show))
        .route(
            "/api/v1/agents/{name}/browser/screen",
            post(browser::browser_screen),
        )
        .route(
            "/api/v1/agents/{name}/browser/control",
            post(browser::browser_control),
        )
        .route(
            "/api/v1/agents/{name}/browser/control/renew",
            post(browser::browser_control_renew),
        )
        .route(
            "/api/v1/agents/{name}/browser/control/release",
            post(browser::browser_control_release),
        )
        .route(
            "/api/v1/agents/{name}/browser/handback",
            post(browser::browser_handback),
        )
        .route(
            "/api/v1/agents/{name}/browser/close",
            post(browser::browser_close),
        )
        .route(
            "/api/v1/runners",
            get(runners::runner_list).post(runners::runner_register),
        )
        .route(
            "/api/v1/runners/{id}",
            get(runners::runner_show).patch(runners::runner_update),
        )
        .route(
            "/api/v1/runners/{id}/disable",
            post(runners::runner_disable),
        )
        .route(
            "/api/v1/runners/{id}/rotate-token",
            post(runners::runner_rotate_token),
        )
        .route("/api/v1/runners/{id}/ping", post(commands::runner_ping))
        .route(
            "/api/v1/runners/{id}/egress-log",
            post(egress::runner_egress_log),
        )
        .route("/api/v1/runners/{id}/fetch", post(commands::runner_fetch))
        .route(
            "/api/v1/runners/{id}/sessions",
            post(commands::runner_sessions),
        )
        .route(
            "/api/v1/runners/{id}/commands",
            get(commands::runner_commands),
        )
        .route("/api/v1/commands/{id}", get(commands::command_show))
        .route(
            "/api/v1/commands/{id}/cancel",
            post(commands::command_cancel),
        )
        .route("/api/v1/chat", post(sessions::chat_create))
        .route(
            "/api/v1/computers",
            get(computers::computer_list).post(computers::computer_create),
        )
        .route("/api/v1/computers/{id}", get(computers::computer_show))
        .route(
            "/api/v1/computers/{id}/share",
            post(computers::computer_share),
        )
        .route(
            "/api/v1/computers/{id}/unshare",
            post(computers::computer_unshare),
        )
        .route(
            "/api/v1/computers/{id}/stop",
            post(computers::computer_stop),
        )
        .route(
            "/api/v1/computers/{id}/remove",
            post(computers::computer_remove),
        )
        .route(
            "/api/v1/computers/{id}/exec",
            post(computers::computer_exec),
        )
        .route(
            "/api/v1/computers/{id}/screen",
            post(computers::computer_screen),
        )
        .route(
            "/api/v1/computers/{id}/control",
            post(computers::computer_control),
        )
        .route(
            "/api/v1/computers/{id}/control/renew",
            post(computers::computer_control_renew),
        )
        .route(
            "/api/v1/computers/{id}/control/release",
            post(computers::computer_control_release),
        )
        .route(
            "/api/v1/computers/{id}/shell",
            get(super::shell_relay::computer_shell),
        )
        .route(
            "/api/v1/computers/{id}/handback",
            post(computers::computer_handback),
        )
        .route("/api/v1/audit", get(computers::audit_list))
        .route("/api/v1/sessions", get(sessions::session_list))
        .route("/api/v1/sessions/{id}", get(sessions::session_show))
        .route(
            "/api/v1/sessions/{id}/events",
            get(sessions::session_events),
        )
        .route("/api/v1/sessions/{id}/stop", post(sessions::session_stop))
        .route(
            "/api/v1/sessions/{id}/turns/{turn}/cancel",
            post(sessions::turn_cancel),
        )
        .route("/api/v1/sessions/{id}/close", post(sessions::session_close))
        .route(
            "/api/v1/teams",
            get(teams::team_list).post(teams::team_create),
        )
        .route("/api/v1/teams/{name}", get(teams::team_show))
        .route(
            "/api/v1/teams/{name}/members",
            post(teams::team_member::<true>),
        )
        .route(
            "/api/v1/teams/{name}/members/remove",
            post(teams::team_member::<false>),
        )
        .route("/api/v1/teams/{name}/archive", post(teams::team_archive))
        .route(
            "/api/v1/goals",
            get(teams::goal_list).post(teams::goal_create),
        )
        .route("/api/v1/goals/{id}", get(teams::goal_show))
        .route("/api/v1/goals/{id}/stop", post(teams::goal_run::<false>))
        .route("/api/v1/goals/{id}/resume", post(teams::goal_run::<true>))
        .route("/api/v1/subtasks", get(teams::subtask_list))
        .route("/api/v1/subtasks/{id}", get(teams::subtask_show))
        .route("/api/v1/status", get(status::status))
        .route(
            "/api/v1/metrics/tokens",
            get(status::scrape_token_list).post(status::scrape_token_create),
        )
        .route(
            "/api/v1/metrics/tokens/{id}/revoke",
            post(status::scrape_token_revoke),
        )
}

/// `?archived=true` includes archived rows in a list.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    pub archived: bool,
}

fn check_name(kind: &str, name: &str) -> Result<(), ApiError> {
    crate::api::names::check_name(kind, name).map_err(ApiError::bad_request)
}

/// Answers with the view of what one store call returns.
async fn one<R, V>(
    state: &AppState,
    f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
) -> Result<Json<V>, ApiError>
where
    R: Into<V> + Send + 'static,
{
    Ok(Json(state.store.call(f).await?.into()))
}

/// Answers with the views of the rows one store call returns.
async fn many<R, V>(
    state: &AppState,
    f: impl FnOnce(&mut Db) -> Result<Vec<R>, StoreError> + Send + 'static,
) -> Result<Json<Vec<V>>, ApiError>
where
    R: Into<V> + Send + 'static,
{
    let rows = state.store.call(f).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}
