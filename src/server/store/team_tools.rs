//! Team tools of an admin agent's model. Each turn of an agent with `manage_team` gets an
//! opaque id bound to its account, source, session, agent and turn; a call is admitted
//! only with that id, from the Runner running that turn, while the turn runs and while the
//! agent still has `manage_team`. Every call is one transaction.

use super::db::Db;
use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};

use super::agents::{self, AgentRow, NewAgent};
use super::goals::{self, Decision, NewGoal, NewSubtask};
use super::teams::{self, Actor};
use super::{StoreError, commands, sessions};
use crate::api::ids::{Generation, RunnerId, SessionId};
use crate::api::machine::CommandState;
use crate::api::params::AgentEnv;
use crate::api::states::TurnState;
use crate::api::teams::{GoalState, SubtaskInputs};
use crate::server::auth::token_hash;
use crate::timefmt::now_ms;

/// Temporary helpers one account may have at once, and in all.
pub const MAX_ACTIVE_HELPERS: i64 = 8;
pub const MAX_HELPERS_TOTAL: i64 = 32;

/// Mints the tool id of a `worker.turn` as it is leased (inside the lease's transaction),
/// while its agent may manage a team. A new lease of the same turn (a Runner that
/// reconnected) replaces the id: only the latest works. Anything odd about the turn means
/// no team tools, never a failed lease.
pub fn grant_for_lease(conn: &Db, payload: &Value) -> Result<Option<String>, StoreError> {
    /// The one field of a `worker.turn` payload this needs.
    #[derive(serde::Deserialize)]
    struct TurnOf {
        turn_id: String,
    }
    let Ok(TurnOf { turn_id }) = serde::Deserialize::deserialize(payload) else {
        return Ok(None);
    };
    let turn_id = turn_id.as_str();
    conn.execute("DELETE FROM tool_grants WHERE turn_id = ?1", [turn_id])?;
    let found: Option<(SessionId, String, String)> = conn
        .query_row(
            "SELECT t.session_id, s.account_id, s.agent_id
             FROM session_turns t JOIN sessions s ON s.id = t.session_id WHERE t.id = ?1",
            [turn_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((session_id, account_id, agent_id)) = found else {
        return Ok(None);
    };
    let Ok(agent) = agents::get(conn, &account_id, &agent_id) else {
        return Ok(None);
    };
    if !agent.manage_team || agent.archived_at.is_some() {
        return Ok(None);
    }
    let Ok(source) = super::catalog::get_source(conn, &agent.source) else {
        return Ok(None);
    };
    grant(conn, &agent, &source.id, &session_id, turn_id).map(Some)
}

/// Writes a new tool id for a turn (inside the caller's transaction); like every
/// credential, only its SHA-256 is stored.
fn grant(
    conn: &Db,
    agent: &AgentRow,
    source_id: &str,
    session_id: &SessionId,
    turn_id: &str,
) -> Result<String, StoreError> {
    let id = format!(
        "yytt_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    conn.execute(
        "INSERT INTO tool_grants (id, turn_id, account_id, source_id, session_id, agent_id, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            token_hash(&id),
            turn_id,
            agent.account_id,
            source_id,
            session_id,
            agent.id,
            now_ms()
        ],
    )?;
    Ok(id)
}

/// Who is calling, as the id binds it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account_id: String,
    pub session_id: SessionId,
    pub turn_id: String,
    pub agent: AgentRow,
}

/// Checks a tool id against the calling Runner connection and the turn's state.
pub fn check(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
    tool_id: &str,
) -> Result<Caller, StoreError> {
    let refused = || {
        StoreError::Forbidden(
            "unknown team tool id: team tools work only with the id of the running turn".into(),
        )
    };
    let found: Option<(String, String, String, SessionId, String)> = conn
        .query_row(
            "SELECT g.turn_id, g.account_id, g.source_id, g.session_id, g.agent_id
             FROM tool_grants g WHERE g.id = ?1",
            [token_hash(tool_id)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let (turn_id, account_id, source_id, session_id, agent_id) = found.ok_or_else(refused)?;
    let turn = sessions::get_turn(conn, &turn_id)?;
    if !matches!(turn.state, TurnState::Queued | TurnState::Running)
        || turn.session_id != session_id
    {
        return Err(StoreError::Forbidden(format!(
            "this team tool id belongs to turn {turn_id}, which has ended ({}): an id is valid only during its own turn",
            turn.state
        )));
    }
    let cmd = commands::get(conn, &turn.command_id)?;
    if cmd.runner_id != runner_id
        || cmd.lease_generation != Some(generation)
        || cmd.state != CommandState::Running
    {
        return Err(refused());
    }
    let agent = agents::get(conn, &account_id, &agent_id)?;
    let source = super::catalog::get_source(conn, &agent.source)?;
    if agent.archived_at.is_some() || source.id != source_id || agent.account_id != account_id {
        return Err(refused());
    }
    if !agent.manage_team {
        return Err(StoreError::Forbidden(format!(
            "agent {:?} no longer may manage a team: a user revoked manage_team",
            agent.name
        )));
    }
    Ok(Caller {
        account_id,
        session_id,
        turn_id,
        agent,
    })
}

/// Runs one call in one transaction; the answer goes back to the model.
pub fn call(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    tool_id: &str,
    name: &str,
    args: &Value,
) -> Result<Value, StoreError> {
    let tx = conn.savepoint()?;
    let caller = check(&tx, runner_id, generation, tool_id)?;
    let answer = dispatch(&tx, &caller, name, args)?;
    tx.commit()?;
    Ok(answer)
}

fn text<'a>(args: &'a Value, key: &str) -> Result<&'a str, StoreError> {
    args[key]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| StoreError::Invalid(format!("missing argument {key:?} (a string)")))
}

fn list(args: &Value, key: &str) -> Vec<String> {
    match &args[key] {
        Value::Array(a) => a
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect(),
        Value::String(s) if !s.is_empty() => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// A goal of a team the caller administers, by id or by the title of an open one (a model
/// may only remember the title it gave). Other teams' goals, even of the same account,
/// are not there for team tools: the answer is the same as for a goal that does not exist.
fn goal_id(conn: &Db, caller: &Caller, args: &Value) -> Result<String, StoreError> {
    let key = text(args, "goal")?;
    let mine = "SELECT g.id FROM goals g
         JOIN team_members m ON m.team_id = g.team_id AND m.role = 'admin' AND m.agent_id = ?1";
    let by_id = conn
        .query_row(
            &format!("{mine} WHERE g.id = ?2"),
            params![caller.agent.id, key],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = by_id {
        return Ok(id);
    }
    conn.query_row(
        &format!(
            "{mine} WHERE g.title = ?2 AND g.state IN ('active', 'waiting_user', 'stopped')
             ORDER BY g.created_at DESC LIMIT 1"
        ),
        params![caller.agent.id, key],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("no open goal {key:?} of your teams")))
}

/// A team the caller administers, by name or id (for `goal_create`); others are unknown.
fn team_of_caller(conn: &Db, caller: &Caller, args: &Value) -> Result<String, StoreError> {
    let key = text(args, "team")?;
    conn.query_row(
        "SELECT t.id FROM teams t
         JOIN team_members m ON m.team_id = t.id AND m.role = 'admin' AND m.agent_id = ?1
         WHERE t.id = ?2 OR t.name = ?2 ORDER BY t.archived_at IS NOT NULL LIMIT 1",
        params![caller.agent.id, key],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("no team {key:?} of yours")))
}

fn dispatch(conn: &Db, caller: &Caller, name: &str, args: &Value) -> Result<Value, StoreError> {
    let actor = Actor::Agent {
        account_id: caller.account_id.clone(),
        agent_id: caller.agent.id.clone(),
    };
    match name {
        "team_create_member" => {
            let env = teams::member_env(
                &caller.agent,
                args["env"].as_str().and_then(AgentEnv::parse),
            )?;
            let profile = args["profile"].as_str().unwrap_or(&caller.agent.profile);
            let agent = agents::create_in(
                conn,
                NewAgent {
                    account_id: &caller.account_id,
                    name: text(args, "name")?,
                    profile,
                    source: Some(&caller.agent.source),
                    env,
                    // Members never inherit manage_team.
                    browser: false,
                    manage_team: false,
                },
            )?;
            record_origin(conn, &agent, &caller.agent)?;
            Ok(json!({ "agent": agent.name, "id": agent.id, "env": agent.env.as_str() }))
        }
        "team_create" => {
            let team = teams::create(
                conn,
                &actor,
                text(args, "name")?,
                &caller.agent.id,
                &list(args, "members"),
            )?;
            let view = teams::view(conn, team)?;
            Ok(serde_json::to_value(view).expect("serializes"))
        }
        "goal_create" => {
            let goal = goals::create(
                conn,
                &actor,
                NewGoal {
                    team: &team_of_caller(conn, caller, args)?,
                    title: text(args, "title")?,
                    criteria: text(args, "criteria")?,
                    session: Some(&caller.session_id),
                },
            )?;
            // The admin plans it in this turn; once the turn ends the scheduler looks
            // whether it did (a goal left without subtasks wakes its admin again).
            conn.execute(
                "UPDATE goals SET admin_turn_id = ?2 WHERE id = ?1",
                params![goal.id, caller.turn_id],
            )?;
            Ok(json!({ "goal_id": goal.id, "state": goal.state }))
        }
        "subtask_add" => {
            let sub = goals::add_subtask(
                conn,
                &actor,
                NewSubtask {
                    goal: &goal_id(conn, caller, args)?,
                    title: text(args, "title")?,
                    owner: text(args, "owner")?,
                    criteria: text(args, "criteria")?,
                    deps: &list(args, "deps"),
                    inputs: SubtaskInputs {
                        text: args["inputs"].as_str().unwrap_or_default().to_string(),
                        artifacts: list(args, "artifacts"),
                    },
                },
            )?;
            Ok(json!({ "subtask_id": sub.id, "seq": sub.seq, "state": sub.state }))
        }
        "subtask_review" => {
            let decision = text(args, "decision")?;
            let decision = Decision::parse(decision).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "decision {decision:?}: say accept, rework, wait_user or blocked"
                ))
            })?;
            let sub = goals::review(
                conn,
                &actor,
                &goal_id(conn, caller, args)?,
                text(args, "subtask")?,
                decision,
                args["note"].as_str(),
            )?;
            Ok(json!({ "subtask_id": sub.id, "state": sub.state, "attempts": sub.attempts }))
        }
        "goal_complete" => {
            let g = goals::complete(
                conn,
                &actor,
                &goal_id(conn, caller, args)?,
                text(args, "summary")?,
            )?;
            Ok(json!({ "goal_id": g.id, "state": g.state }))
        }
        "goal_block" => {
            let g = goals::block(
                conn,
                &actor,
                &goal_id(conn, caller, args)?,
                text(args, "reason")?,
            )?;
            Ok(json!({ "goal_id": g.id, "state": g.state }))
        }
        "ask_user" => {
            let goal = goals::get_for(conn, &actor, &goal_id(conn, caller, args)?)?;
            let team = teams::get_by_id(conn, &goal.team_id)?;
            if teams::admin_of(conn, &team.id)?.id != caller.agent.id {
                return Err(StoreError::Forbidden(
                    "only the goal's team admin asks its user".into(),
                ));
            }
            if goal.state != GoalState::Active {
                return Err(StoreError::Conflict(format!(
                    "goal {} is {}",
                    goal.id, goal.state
                )));
            }
            let question = text(args, "question")?;
            goals::end(
                conn,
                &goal.id,
                GoalState::WaitingUser,
                &format!("the admin asks: {question}"),
                None,
            )?;
            Ok(json!({ "goal_id": goal.id, "state": "waiting_user" }))
        }
        "goal_status" => {
            let goal = goals::get_for(conn, &actor, &goal_id(conn, caller, args)?)?;
            let view = goals::view(conn, goal, true)?;
            Ok(serde_json::to_value(view).expect("serializes"))
        }
        "helper_create" => helper_create(conn, caller, &actor, args),
        other => Err(StoreError::Invalid(format!("no team tool named {other:?}"))),
    }
}

/// A temporary helper: a new computer agent bound to the goal and its authorization.
fn helper_create(
    conn: &Db,
    caller: &Caller,
    actor: &Actor,
    args: &Value,
) -> Result<Value, StoreError> {
    let goal = goals::get_for(conn, actor, &goal_id(conn, caller, args)?)?;
    if teams::admin_of(conn, &goal.team_id)?.id != caller.agent.id {
        return Err(StoreError::Forbidden(
            "only the goal's team admin creates its helpers".into(),
        ));
    }
    if goal.state != GoalState::Active {
        return Err(StoreError::Conflict(format!(
            "goal {} is {}: helpers are created for active goals",
            goal.id, goal.state
        )));
    }
    let (active, total): (i64, i64) = conn.query_row(
        "SELECT count(*) FILTER (WHERE retired_at IS NULL), count(*) FROM helpers WHERE account_id = ?1",
        [&caller.account_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if active >= MAX_ACTIVE_HELPERS {
        return Err(StoreError::Limit(format!(
            "{MAX_ACTIVE_HELPERS} temporary helpers are active, the limit at once: wait until a goal ends"
        )));
    }
    if total >= MAX_HELPERS_TOTAL {
        return Err(StoreError::Limit(format!(
            "this account has created {MAX_HELPERS_TOTAL} temporary helpers, the limit in all"
        )));
    }
    // Helpers always run in their own computer, whatever the admin is.
    let agent = agents::create_in(
        conn,
        NewAgent {
            account_id: &caller.account_id,
            name: text(args, "name")?,
            profile: args["profile"].as_str().unwrap_or(&caller.agent.profile),
            source: Some(&caller.agent.source),
            env: AgentEnv::Computer,
            manage_team: false,
            browser: false,
        },
    )?;
    record_origin(conn, &agent, &caller.agent)?;
    conn.execute(
        "INSERT INTO helpers (agent_id, goal_id, account_id, generation, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            agent.id,
            goal.id,
            caller.account_id,
            goal.generation,
            now_ms()
        ],
    )?;
    Ok(json!({ "agent": agent.name, "id": agent.id, "goal_id": goal.id, "helper": true }))
}

/// Records who created `agent`; members of an isolated admin, and helpers, stay isolated.
fn record_origin(conn: &Db, agent: &AgentRow, admin: &AgentRow) -> Result<(), StoreError> {
    let isolated = admin.env == AgentEnv::Computer || agent.env == AgentEnv::Computer;
    conn.execute(
        "INSERT INTO agent_origins (agent_id, created_by, isolated) VALUES (?1, ?2, ?3)",
        params![agent.id, admin.id, isolated],
    )?;
    Ok(())
}
