use axum::Json;
use axum::extract::{Path, State};

use super::{ListQuery, check_name, many, one};
use crate::api::{params, views};
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::agents::{self, AgentChange, NewAgent};

pub async fn agent_list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<views::Agent>>, ApiError> {
    many(&state, move |c| agents::list(c, q.archived)).await
}

pub async fn agent_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Agent>, ApiError> {
    one(&state, move |c| agents::get(c, &caller.account.id, &name)).await
}

pub async fn agent_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<params::AgentCreate>,
) -> Result<Json<views::Agent>, ApiError> {
    check_name("agent", &p.name)?;
    one(&state, move |c| {
        agents::create(
            c,
            NewAgent {
                account_id: &caller.account.id,
                name: &p.name,
                profile: &p.profile,
                source: p.source.as_deref(),
                env: p.env,
                manage_team: p.manage_team,
                browser: p.browser,
            },
        )
    })
    .await
}

pub async fn agent_update(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<params::AgentUpdate>,
) -> Result<Json<views::Agent>, ApiError> {
    let (agent, browsers) = state
        .store
        .call(move |c| {
            let change = AgentChange {
                profile: p.profile.as_deref(),
                env: p.env,
                manage_team: p.manage_team,
                browser: p.browser,
            };
            agents::update(c, &caller.account.id, &name, change)
        })
        .await?;
    for runner in &browsers {
        state.queue.wake_runner(runner);
    }
    Ok(Json(agent.into()))
}

pub async fn agent_archive(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Agent>, ApiError> {
    let agent = state
        .queue
        .agent_archive(caller.account.id.clone(), name)
        .await?;
    Ok(Json(agent.into()))
}
