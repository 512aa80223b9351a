//! Goals and their subtasks: creation, the subtask state machine, reviews, and how a goal
//! ends (only by its admin completing it with every subtask accepted, by a block, a stop
//! or its team's archive). Scheduling is in `schedule`.

use super::db::{Db, Row};
use rusqlite::params;

use super::agents::AgentRow;
use super::ids::Kind;
use super::teams::{self, Actor, TeamRow};
use super::{StoreError, get_by_id, new_id, sessions};
use crate::api::ids::SessionId;
use crate::api::params::AgentEnv;
use crate::api::states::SessionState;
use crate::api::teams::{self as wire, GoalState, SubtaskResult, SubtaskState as S};
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

pub use super::subtasks::{
    Decision, NewSubtask, Step, SubtaskRow, add_subtask, deps, find_subtask, get_subtask, review,
    step, subtasks, subtasks_where, transition,
};

/// Subtasks one goal may have.
pub const MAX_SUBTASKS: i64 = 32;
/// Turns a subtask may start per authorization (its first run and its reworks).
pub const MAX_ATTEMPTS: i64 = 3;
/// Admin turns the scheduler may start by itself per authorization.
pub const MAX_WAKEUPS: i64 = 8;

#[derive(Debug, Clone)]
pub struct GoalRow {
    pub id: String,
    pub account_id: String,
    pub team_id: String,
    pub title: String,
    pub criteria: String,
    pub state: GoalState,
    pub reason: Option<String>,
    pub origin_session_id: Option<String>,
    pub admin_session_id: Option<String>,
    pub created_by: String,
    pub generation: i64,
    pub wakeups: i64,
    pub attention: i64,
    pub seen: i64,
    pub admin_turn_id: Option<String>,
    pub summary: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub ended_at: Option<i64>,
}

const GOAL_SELECT: &str = "SELECT id, account_id, team_id, title, criteria, state, reason,
    origin_session_id, admin_session_id, created_by, generation, wakeups, attention, seen,
    admin_turn_id, summary, created_at, updated_at, ended_at FROM goals";

fn goal_row(r: &Row<'_>) -> rusqlite::Result<GoalRow> {
    Ok(GoalRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        team_id: r.get(2)?,
        title: r.get(3)?,
        criteria: r.get(4)?,
        state: r.get(5)?,
        reason: r.get(6)?,
        origin_session_id: r.get(7)?,
        admin_session_id: r.get(8)?,
        created_by: r.get(9)?,
        generation: r.get(10)?,
        wakeups: r.get(11)?,
        attention: r.get(12)?,
        seen: r.get(13)?,
        admin_turn_id: r.get(14)?,
        summary: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        ended_at: r.get(18)?,
    })
}

pub fn get(conn: &Db, id: &str) -> Result<GoalRow, StoreError> {
    let sql = format!("{GOAL_SELECT} WHERE id = ?1");
    get_by_id(conn, Kind::Goal, &sql, id, goal_row)
}

/// A goal the actor may see.
pub fn get_for(conn: &Db, actor: &Actor, key: &str) -> Result<GoalRow, StoreError> {
    let id = super::ids::resolve_for(conn, super::ids::Kind::Goal, key, actor.scope())?;
    let g = get(conn, &id)?;
    if !actor.may_see(&g.account_id) {
        return Err(StoreError::NotFound(format!(
            "no goal {key:?}: see `yy goal list`"
        )));
    }
    Ok(g)
}

pub fn goals_where(
    conn: &Db,
    filter: &str,
    args: impl super::db::Params,
) -> Result<Vec<GoalRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{GOAL_SELECT} WHERE {filter}"))?;
    let rows = stmt.query_map(args, goal_row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn list(conn: &Db, actor: &Actor, team: Option<&str>) -> Result<Vec<GoalRow>, StoreError> {
    let team_id = team
        .map(|t| teams::get(conn, actor, t).map(|t| t.id))
        .transpose()?;
    let all = matches!(actor, Actor::Operator { admin: true, .. });
    goals_where(
        conn,
        "(?1 = 1 OR account_id = ?2) AND (?3 IS NULL OR team_id = ?3)
         ORDER BY created_at DESC LIMIT 500",
        params![all, actor.account_id(), team_id],
    )
}

/// The admin agent may use team tools on this goal's team.
fn admin_gate(conn: &Db, actor: &Actor, team: &TeamRow) -> Result<AgentRow, StoreError> {
    let admin = teams::admin_of(conn, &team.id)?;
    if let Actor::Agent { agent_id, .. } = actor
        && *agent_id != admin.id
    {
        return Err(StoreError::Forbidden(format!(
            "only team {:?}'s admin {:?} manages its goals",
            team.name, admin.name
        )));
    }
    Ok(admin)
}

/// Host admins are refused: their model would need the team tools over a host channel,
/// which this version does not have (docs/teams.md).
pub fn check_admin_can_run(admin: &AgentRow) -> Result<(), StoreError> {
    if admin.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "team admin {:?} is archived",
            admin.name
        )));
    }
    if !admin.manage_team {
        return Err(StoreError::Forbidden(format!(
            "team admin {:?} may not manage a team: allow it with `yy agent update {} --manage-team`",
            admin.name, admin.name
        )));
    }
    if admin.env == AgentEnv::Host {
        return Err(StoreError::Invalid(format!(
            "team admin {:?} runs on the host: team tools reach only computer agents' models in this version (no host channel to Hermes is safe yet); make it a computer agent with `yy agent update {} --env computer`",
            admin.name, admin.name
        )));
    }
    Ok(())
}

pub struct NewGoal<'a> {
    pub team: &'a str,
    pub title: &'a str,
    pub criteria: &'a str,
    /// The admin's session the goal belongs to (an operator's `--session`, or the session
    /// of the admin turn that called the tool).
    pub session: Option<&'a str>,
}

pub fn create(conn: &Db, actor: &Actor, new: NewGoal<'_>) -> Result<GoalRow, StoreError> {
    let team = teams::get(conn, actor, new.team)?;
    if team.archived_at.is_some() {
        return Err(StoreError::Conflict(format!(
            "team {:?} is archived",
            team.name
        )));
    }
    let admin = admin_gate(conn, actor, &team)?;
    check_admin_can_run(&admin)?;
    for (what, v) in [("title", new.title), ("criteria", new.criteria)] {
        if v.trim().is_empty() || v.len() > 4000 {
            return Err(StoreError::Invalid(format!(
                "a goal needs a {what} of 1-4000 characters"
            )));
        }
    }
    if let Some(s) = new.session {
        let s = sessions::get(conn, &SessionId::new(s))?;
        if s.agent_id != admin.id {
            return Err(StoreError::Invalid(format!(
                "session {} belongs to agent {:?}, not to team {:?}'s admin {:?}",
                s.id, s.agent, team.name, admin.name
            )));
        }
        if matches!(s.state, SessionState::Closed | SessionState::PendingCleanup) {
            return Err(StoreError::Conflict(format!(
                "session {} is {}: a goal needs a session that can take turns",
                s.id, s.state
            )));
        }
    }
    // A goal an admin creates in its own turn is being planned right now; one an operator
    // hands over wakes the admin to plan it.
    let seen = i64::from(matches!(actor, Actor::Agent { .. }));
    let id = new_id();
    let now = now_ms();
    conn.execute(
        "INSERT INTO goals (id, account_id, team_id, title, criteria, state, origin_session_id,
             admin_session_id, created_by, attention, seen, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, 1, ?9, ?10, ?10)",
        params![
            id,
            team.account_id,
            team.id,
            new.title.trim(),
            new.criteria.trim(),
            GoalState::Active,
            new.session,
            actor.label(),
            seen,
            now
        ],
    )?;
    get(conn, &id)
}

pub(super) fn open_goal(
    conn: &Db,
    actor: &Actor,
    id: &str,
) -> Result<(GoalRow, TeamRow), StoreError> {
    let goal = get_for(conn, actor, id)?;
    let team = teams::get_by_id(conn, &goal.team_id)?;
    admin_gate(conn, actor, &team)?;
    Ok((goal, team))
}

pub(super) fn check_active(goal: &GoalRow) -> Result<(), StoreError> {
    if goal.state != GoalState::Active {
        return Err(StoreError::Conflict(format!(
            "goal {} is {}{}: only an active goal changes (a user resumes it with `yy goal resume {}`)",
            goal.id,
            goal.state,
            goal.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            goal.id
        )));
    }
    Ok(())
}

pub fn complete(
    conn: &Db,
    actor: &Actor,
    goal: &str,
    summary: &str,
) -> Result<GoalRow, StoreError> {
    let (goal, _) = open_goal(conn, actor, goal)?;
    check_active(&goal)?;
    let subs = subtasks(conn, &goal.id)?;
    if !subs.iter().any(|s| s.state == S::Accepted) {
        return Err(StoreError::Conflict(format!(
            "goal {} has no accepted subtask yet: add subtasks and accept their results first",
            goal.id
        )));
    }
    if let Some(open) = subs
        .iter()
        .find(|s| !matches!(s.state, S::Accepted | S::Cancelled))
    {
        return Err(StoreError::Conflict(format!(
            "subtask #{} {:?} is {}: a goal completes only when every subtask is accepted",
            open.seq, open.title, open.state
        )));
    }
    end(
        conn,
        &goal.id,
        GoalState::Completed,
        "completed by its admin",
        Some(summary),
    )?;
    get(conn, &goal.id)
}

/// The admin gives up on its goal with a reason.
pub fn block(conn: &Db, actor: &Actor, goal: &str, reason: &str) -> Result<GoalRow, StoreError> {
    let (goal, _) = open_goal(conn, actor, goal)?;
    check_active(&goal)?;
    end(conn, &goal.id, GoalState::Blocked, reason, Some(reason))?;
    get(conn, &goal.id)
}

/// Ends (or stops) a goal: open subtasks that are not running are cancelled (a running
/// one is stopped by the scheduler), helpers retire, and the result is queued for delivery
/// to the origin session.
pub fn end(
    conn: &Db,
    goal_id: &str,
    state: GoalState,
    reason: &str,
    summary: Option<&str>,
) -> Result<(), StoreError> {
    let goal = get(conn, goal_id)?;
    let now = now_ms();
    let ended = state.is_ended().then_some(now);
    conn.execute(
        "UPDATE goals SET state = ?2, reason = ?3, summary = coalesce(?4, summary),
             ended_at = ?5, updated_at = ?6 WHERE id = ?1",
        params![goal.id, state, reason, summary, ended, now],
    )?;
    if state.is_ended() {
        conn.execute(
            "UPDATE subtasks SET state = 'cancelled', updated_at = ?2
             WHERE goal_id = ?1 AND state IN ('queued', 'waiting_user', 'blocked', 'review')",
            params![goal.id, now],
        )?;
    }
    super::schedule::retire_helpers(conn, Some(&goal.id))?;
    if let Some(session) = &goal.origin_session_id {
        let payload = delivery_payload(conn, &goal.id)?;
        conn.execute(
            "INSERT INTO deliveries (id, goal_id, generation, session_id, state, payload, created_at)
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6) ON CONFLICT DO NOTHING",
            params![new_id(), goal.id, goal.generation, session, payload.to_string(), now],
        )?;
    }
    Ok(())
}

/// The structured result of a goal: its state, the admin's summary, and every subtask's
/// result with its artifacts.
pub fn delivery_payload(conn: &Db, goal_id: &str) -> Result<serde_json::Value, StoreError> {
    let goal = get(conn, goal_id)?;
    let subs: Vec<serde_json::Value> = subtasks(conn, goal_id)?
        .into_iter()
        .map(|s| {
            let result: Option<SubtaskResult> = s
                .result
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok());
            serde_json::json!({
                "seq": s.seq, "title": s.title, "owner": s.owner, "state": s.state,
                "result": result.as_ref().map(|r| r.text.clone()),
                "artifacts": result.map(|r| r.artifacts).unwrap_or_default(),
            })
        })
        .collect();
    Ok(serde_json::json!({
        "goal_id": goal.id, "title": goal.title, "state": goal.state,
        "reason": goal.reason, "summary": goal.summary, "subtasks": subs,
    }))
}

/// An operator stops a goal: no further turn runs until `yy goal resume`.
pub fn stop(conn: &Db, actor: &Actor, id: &str) -> Result<GoalRow, StoreError> {
    let goal = get_for(conn, actor, id)?;
    match goal.state {
        GoalState::Active | GoalState::WaitingUser => {
            end(
                conn,
                &goal.id,
                GoalState::Stopped,
                "stopped by an operator",
                None,
            )?;
        }
        GoalState::Stopped => {}
        other => {
            return Err(StoreError::Conflict(format!(
                "goal {} is {other}: nothing to stop",
                goal.id
            )));
        }
    }
    get(conn, &goal.id)
}

/// A new user instruction: a stopped, waiting or blocked goal becomes active again in a
/// new authorization (attempts and wake-ups count from zero; helpers of the old one retire).
pub fn resume(conn: &Db, actor: &Actor, id: &str) -> Result<GoalRow, StoreError> {
    let goal = get_for(conn, actor, id)?;
    match goal.state {
        GoalState::Stopped | GoalState::WaitingUser | GoalState::Blocked => {}
        GoalState::Active => return Ok(goal),
        other => {
            return Err(StoreError::Conflict(format!(
                "goal {} is {other}, which is final",
                goal.id
            )));
        }
    }
    let team = teams::get_by_id(conn, &goal.team_id)?;
    if team.archived_at.is_some() {
        return Err(StoreError::Conflict(format!(
            "team {:?} is archived: its goals never resume",
            team.name
        )));
    }
    check_admin_can_run(&teams::admin_of(conn, &team.id)?)?;
    let now = now_ms();
    conn.execute(
        "UPDATE goals SET state = 'active', reason = 'resumed by a user', generation = generation + 1,
             wakeups = 0, attention = attention + 1, ended_at = NULL, updated_at = ?2 WHERE id = ?1",
        params![goal.id, now],
    )?;
    conn.execute(
        "UPDATE subtasks SET attempts = 0, updated_at = ?2 WHERE goal_id = ?1",
        params![goal.id, now],
    )?;
    // Subtasks cancelled by a block come back to the queue.
    conn.execute(
        "UPDATE subtasks SET state = 'queued', updated_at = ?2 WHERE goal_id = ?1 AND state = 'cancelled'",
        params![goal.id, now],
    )?;
    super::schedule::retire_helpers(conn, Some(&goal.id))?;
    get(conn, &goal.id)
}

// ---- views ----

pub use super::subtasks::subtask_view;

pub fn deliveries(conn: &Db, goal_id: &str) -> Result<Vec<wire::Delivery>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, session_id, generation, state, turn_id, error, created_at, delivered_at
         FROM deliveries WHERE goal_id = ?1 ORDER BY generation",
    )?;
    let rows = stmt
        .query_map([goal_id], |r| {
            Ok(wire::Delivery {
                id: r.get(0)?,
                session_id: r.get(1)?,
                generation: r.get(2)?,
                state: r.get(3)?,
                turn_id: r.get(4)?,
                error: r.get(5)?,
                created_at: rfc3339(r.get(6)?),
                delivered_at: rfc3339_opt(r.get(7)?),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn view(conn: &Db, g: GoalRow, full: bool) -> Result<wire::Goal, StoreError> {
    let team = teams::get_by_id(conn, &g.team_id)?;
    let admin = teams::admin_of(conn, &g.team_id)?;
    let subs = subtasks(conn, &g.id)?;
    let accepted = subs.iter().filter(|s| s.state == S::Accepted).count() as i64;
    let total = subs.len() as i64;
    let waits_for = super::goal_waits::waits_for(conn, &g, &subs)?;
    let subtasks = if full {
        Some(
            subs.into_iter()
                .map(|s| subtask_view(conn, s))
                .collect::<Result<_, _>>()?,
        )
    } else {
        None
    };
    Ok(wire::Goal {
        deliveries: if full {
            deliveries(conn, &g.id)?
        } else {
            Vec::new()
        },
        id: g.id,
        team: team.name,
        team_id: team.id,
        admin: admin.name,
        title: g.title,
        criteria: g.criteria,
        state: g.state,
        reason: g.reason,
        origin_session_id: g.origin_session_id,
        admin_session_id: g.admin_session_id,
        created_by: g.created_by,
        generation: g.generation,
        wakeups: g.wakeups,
        waits_for,
        summary: g.summary,
        accepted,
        total,
        created_at: rfc3339(g.created_at),
        updated_at: rfc3339(g.updated_at),
        ended_at: rfc3339_opt(g.ended_at),
        subtasks,
    })
}

/// A user's new message in a goal's origin session is a new instruction: the goals that
/// came from that session and are stopped, waiting or blocked resume (a new authorization).
/// A goal whose admin may no longer run stays as it is. Returns the resumed goals.
pub fn resume_by_chat(conn: &mut Db, session_id: &SessionId) -> Result<Vec<String>, StoreError> {
    let tx = conn.savepoint()?;
    let waiting = goals_where(
        &tx,
        "origin_session_id = ?1 AND state IN ('stopped', 'waiting_user', 'blocked')",
        [session_id],
    )?;
    let mut resumed = Vec::new();
    for g in waiting {
        let actor = Actor::Operator {
            account_id: g.account_id.clone(),
            admin: true,
        };
        match resume(&tx, &actor, &g.id) {
            Ok(_) => resumed.push(g.id),
            Err(StoreError::Sqlite(e)) => return Err(e.into()),
            Err(_) => {}
        }
    }
    tx.commit()?;
    Ok(resumed)
}
