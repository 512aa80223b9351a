//! Teams, goals and subtasks (the operator's side; admin agents use team tools).

use crate::server::store::Db;
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

/// Runs one change in one savepoint (it nests in the store's batch transaction).
fn in_tx<R>(c: &mut Db, f: impl FnOnce(&Db) -> Result<R, StoreError>) -> Result<R, StoreError> {
    let tx = c.savepoint()?;
    let r = f(&tx)?;
    tx.commit()?;
    Ok(r)
}

/// One read, outside a transaction, as the caller's actor.
async fn read<R: Send + 'static>(
    state: &AppState,
    caller: &Caller,
    f: impl FnOnce(&Db, &Actor) -> Result<R, StoreError> + Send + 'static,
) -> Result<Json<R>, ApiError> {
    let actor = actor(caller);
    Ok(Json(state.store.call(move |c| f(c, &actor)).await?))
}

/// One change in one transaction, as the caller's actor; `kick` wakes the scheduler after.
async fn change<R: Send + 'static>(
    state: &AppState,
    caller: &Caller,
    kick: bool,
    f: impl FnOnce(&Db, &Actor) -> Result<R, StoreError> + Send + 'static,
) -> Result<Json<R>, ApiError> {
    let actor = actor(caller);
    let r = state
        .store
        .call(move |c| in_tx(c, |tx| f(tx, &actor)))
        .await?;
    if kick {
        state.queue.kick();
    }
    Ok(Json(r))
}

pub async fn team_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<wire::Team>>, ApiError> {
    read(&state, &caller, move |c, actor| {
        teams::list(c, actor, q.archived)?
            .into_iter()
            .map(|t| teams::view(c, t))
            .collect()
    })
    .await
}

pub async fn team_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<wire::Team>, ApiError> {
    read(&state, &caller, move |c, actor| {
        teams::view(c, teams::get(c, actor, &name)?)
    })
    .await
}

/// One change to a team, in one transaction; answers the team as the change left it.
async fn team_change(
    state: &AppState,
    caller: &Caller,
    kick: bool,
    f: impl FnOnce(&Db, &Actor) -> Result<TeamRow, StoreError> + Send + 'static,
) -> Result<Json<wire::Team>, ApiError> {
    change(state, caller, kick, move |tx, actor| {
        teams::view(tx, f(tx, actor)?)
    })
    .await
}

pub async fn team_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::TeamCreate>,
) -> Result<Json<wire::Team>, ApiError> {
    team_change(&state, &caller, false, move |tx, actor| {
        teams::create(tx, actor, &p.name, &p.admin, &p.members)
    })
    .await
}

/// Adds (`ADD`) or removes an agent; one handler for the two routes.
pub async fn team_member<const ADD: bool>(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    Body(p): Body<wire::TeamMemberChange>,
) -> Result<Json<wire::Team>, ApiError> {
    let f = if ADD {
        teams::add_member
    } else {
        teams::remove_member
    };
    team_change(&state, &caller, false, move |tx, actor| {
        f(tx, actor, &name, &p.agent)
    })
    .await
}

pub async fn team_archive(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<wire::Team>, ApiError> {
    team_change(&state, &caller, true, move |tx, actor| {
        teams::archive(tx, actor, &name)
    })
    .await
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
    read(&state, &caller, move |c, actor| {
        goals::list(c, actor, q.team.as_deref())?
            .into_iter()
            .map(|g| goals::view(c, g, false))
            .collect()
    })
    .await
}

pub async fn goal_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Goal>, ApiError> {
    read(&state, &caller, move |c, actor| {
        goals::view(c, goals::get_for(c, actor, &id)?, true)
    })
    .await
}

pub async fn goal_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<wire::GoalCreate>,
) -> Result<Json<wire::Goal>, ApiError> {
    change(&state, &caller, true, move |tx, actor| {
        let g = goals::create(
            tx,
            actor,
            NewGoal {
                team: &p.team,
                title: &p.title,
                criteria: &p.criteria,
                session: p.session.as_deref(),
            },
        )?;
        goals::view(tx, g, true)
    })
    .await
}

/// Resumes (`RESUME`) or stops a goal; one handler for the two routes.
pub async fn goal_run<const RESUME: bool>(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Goal>, ApiError> {
    let f = if RESUME { goals::resume } else { goals::stop };
    change(&state, &caller, true, move |tx, actor| {
        goals::view(tx, f(tx, actor, &id)?, true)
    })
    .await
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
    read(&state, &caller, move |c, actor| {
        let goal = goals::get_for(c, actor, &q.goal)?;
        goals::subtasks(c, &goal.id)?
            .into_iter()
            .map(|s| goals::subtask_view(c, s))
            .collect()
    })
    .await
}

pub async fn subtask_show(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<wire::Subtask>, ApiError> {
    read(&state, &caller, move |c, actor| {
        goals::subtask_view(c, schedule::subtask_for(c, actor, &id)?)
    })
    .await
}
