//! Teams, goals and subtasks (the operator's side; admin agents use team tools).

use axum::Json;
use axum::extract::{Path, State};

use super::ListQuery;
use crate::api::teams as wire;
use crate::server::AppState;
use crate::server::auth::{Admin, Caller};
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::goals::{self, NewGoal};
use crate::server::store::teams::{self, Actor, TeamRow};
use crate::server::store::{StoreError, schedule};

fn actor(caller: &Caller) -> Actor {
    Actor::Operator {
        account_id: caller.account.id.clone(),
        admin: caller.account.admin,
    }
}

/// Runs one change in one IMMEDIATE transaction.
fn in_tx<R>(
    c: &mut rusqlite::Connection,
    f: impl FnOnce(&rusqlite::Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let r = f(&tx)?;
    tx.commit()?;
    Ok(r)
}

pub async fn team_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<wire::Team>>, ApiError> {
    let actor = actor(&caller);
    let teams = state
        .store
        .call(move |c| {
            teams::list(c, &actor, q.archived)?
                .into_iter()
                .map(|t| teams::view(c, t))
                .collect()
        })
        .await?;
    Ok(Json(teams))
}

pub async fn team_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<wire::Team>, ApiError> {
    let actor = actor(&caller);
    let team = state
        .store
        .call(move |c| teams::view(c, teams::get(c, &actor, &name)?))
        .await?;
    Ok(Json(team))
}

/// One change to a team, in one transaction; answers the team as the change left it.
async fn team_change(
    state: &AppState,
    caller: &Caller,
    change: impl FnOnce(&rusqlite::Connection, &Actor) -> Result<TeamRow, StoreError> + Send + 'static,
) -> Result<Json<wire::Team>, ApiError> {
    let actor = actor(caller);
    let team = state
        .store
        .call(move |c| in_tx(c, |tx| teams::view(tx, change(tx, &actor)?)))
        .await?;
    Ok(Json(team))
}

pub async fn team_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::TeamCreate>,
) -> Result<Json<wire::Team>, ApiError> {
    team_change(&state, &caller, move |tx, actor| {
        teams::create(tx, actor, &p.name, &p.admin, &p.members)
    })
    .await
}

pub async fn team_add(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::TeamMemberChange>,
) -> Result<Json<wire::Team>, ApiError> {
    team_change(&state, &caller, move |tx, actor| {
        teams::add_member(tx, actor, &name, &p.agent)
    })
    .await
}

pub async fn team_remove(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::TeamMemberChange>,
) -> Result<Json<wire::Team>, ApiError> {
    team_change(&state, &caller, move |tx, actor| {
        teams::remove_member(tx, actor, &name, &p.agent)
    })
    .await
}

pub async fn team_archive(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<wire::Team>, ApiError> {
    let team = team_change(&state, &caller, move |tx, actor| {
        teams::archive(tx, actor, &name)
    })
    .await?;
    state.queue.kick();
    Ok(team)
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalQuery {
    #[serde(default)]
    pub team: Option<String>,
}

pub async fn goal_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Q(q): Q<GoalQuery>,
) -> Result<Json<Vec<wire::Goal>>, ApiError> {
    let actor = actor(&caller);
    let goals = state
        .store
        .call(move |c| {
            goals::list(c, &actor, q.team.as_deref())?
                .into_iter()
                .map(|g| goals::view(c, g, false))
                .collect()
        })
        .await?;
    Ok(Json(goals))
}

pub async fn goal_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Goal>, ApiError> {
    let actor = actor(&caller);
    let goal = state
        .store
        .call(move |c| goals::view(c, goals::get_for(c, &actor, &id)?, true))
        .await?;
    Ok(Json(goal))
}

pub async fn goal_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::GoalCreate>,
) -> Result<Json<wire::Goal>, ApiError> {
    let actor = actor(&caller);
    let goal = state
        .store
        .call(move |c| {
            in_tx(c, |tx| {
                let g = goals::create(
                    tx,
                    &actor,
                    NewGoal {
                        team: &p.team,
                        title: &p.title,
                        criteria: &p.criteria,
                        session: p.session.as_deref(),
                    },
                )?;
                goals::view(tx, g, true)
            })
        })
        .await?;
    state.queue.kick();
    Ok(Json(goal))
}

pub async fn goal_stop(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Goal>, ApiError> {
    let actor = actor(&caller);
    let goal = state
        .store
        .call(move |c| in_tx(c, |tx| goals::view(tx, goals::stop(tx, &actor, &id)?, true)))
        .await?;
    state.queue.kick();
    Ok(Json(goal))
}

pub async fn goal_resume(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Goal>, ApiError> {
    let actor = actor(&caller);
    let goal = state
        .store
        .call(move |c| {
            in_tx(c, |tx| {
                goals::view(tx, goals::resume(tx, &actor, &id)?, true)
            })
        })
        .await?;
    state.queue.kick();
    Ok(Json(goal))
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtaskQuery {
    pub goal: String,
}

pub async fn subtask_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Q(q): Q<SubtaskQuery>,
) -> Result<Json<Vec<wire::Subtask>>, ApiError> {
    let actor = actor(&caller);
    let subs = state
        .store
        .call(move |c| {
            let goal = goals::get_for(c, &actor, &q.goal)?;
            goals::subtasks(c, &goal.id)?
                .into_iter()
                .map(|s| goals::subtask_view(c, s))
                .collect()
        })
        .await?;
    Ok(Json(subs))
}

pub async fn subtask_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Subtask>, ApiError> {
    let actor = actor(&caller);
    let sub = state
        .store
        .call(move |c| goals::subtask_view(c, schedule::subtask_for(c, &actor, &id)?))
        .await?;
    Ok(Json(sub))
}
