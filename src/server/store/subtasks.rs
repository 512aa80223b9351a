//! Subtasks of a goal: the state machine, adding them, and the admin's reviews.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::goals::{MAX_ATTEMPTS, MAX_SUBTASKS, check_active, open_goal};
use super::ids::Kind;
use super::teams::{self, Actor};
use super::{StoreError, artifacts, get_by_id, new_id, not_found};
use crate::api::ids::SessionId;
use crate::api::teams::{self as wire, SubtaskInputs, SubtaskResult, SubtaskState as S};
use crate::timefmt::{now_ms, rfc3339};

/// What may happen to a subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The scheduler submits its owner's turn.
    Start,
    /// The owner's turn ended: the result goes to review.
    Finish,
    Accept,
    /// Back to the queue with the admin's note (one more attempt).
    Rework,
    WaitUser,
    Block,
    /// A turn that never ran (no Runner, no slot) goes back without spending an attempt.
    Requeue,
    Cancel,
}

impl Step {
    fn word(self) -> &'static str {
        match self {
            Step::Start => "start",
            Step::Finish => "finish",
            Step::Accept => "accept",
            Step::Rework => "rework",
            Step::WaitUser => "wait for the user",
            Step::Block => "block",
            Step::Requeue => "requeue",
            Step::Cancel => "cancel",
        }
    }
}

/// The subtask state machine: the next state, or why the step is refused.
pub fn transition(from: S, step: Step) -> Result<S, String> {
    let to = match (from, step) {
        (S::Queued, Step::Start) => S::Running,
        (S::Running, Step::Finish) => S::Review,
        (S::Running, Step::Requeue) => S::Queued,
        (S::Review, Step::Accept) => S::Accepted,
        (S::Review | S::WaitingUser | S::Blocked, Step::Rework) => S::Queued,
        (S::Review | S::Blocked, Step::WaitUser) => S::WaitingUser,
        (S::Review | S::WaitingUser | S::Queued, Step::Block) => S::Blocked,
        (S::Queued | S::Running | S::Review | S::WaitingUser | S::Blocked, Step::Cancel) => {
            S::Cancelled
        }
        (from, step) => {
            return Err(format!("a subtask that is {from} cannot {}", step.word()));
        }
    };
    Ok(to)
}

// ---- subtasks ----

#[derive(Debug, Clone)]
pub struct SubtaskRow {
    pub id: String,
    pub goal_id: String,
    pub seq: i64,
    pub title: String,
    pub owner_id: String,
    pub owner: String,
    pub criteria: String,
    pub inputs: String,
    pub state: S,
    pub attempts: i64,
    pub note: Option<String>,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<String>,
    pub result: Option<String>,
    pub next_look_at: i64,
    pub looks: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

const SUB_SELECT: &str = "SELECT s.id, s.goal_id, s.seq, s.title, s.owner_id, g.name, s.criteria,
    s.inputs, s.state, s.attempts, s.note, s.session_id, s.turn_id, s.result, s.next_look_at,
    s.looks, s.created_at, s.updated_at FROM subtasks s JOIN agents g ON g.id = s.owner_id";

fn sub_row(r: &Row<'_>) -> rusqlite::Result<SubtaskRow> {
    Ok(SubtaskRow {
        id: r.get(0)?,
        goal_id: r.get(1)?,
        seq: r.get(2)?,
        title: r.get(3)?,
        owner_id: r.get(4)?,
        owner: r.get(5)?,
        criteria: r.get(6)?,
        inputs: r.get(7)?,
        state: r.get(8)?,
        attempts: r.get(9)?,
        note: r.get(10)?,
        session_id: r.get(11)?,
        turn_id: r.get(12)?,
        result: r.get(13)?,
        next_look_at: r.get(14)?,
        looks: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
    })
}

pub fn subtasks(conn: &Db, goal_id: &str) -> Result<Vec<SubtaskRow>, StoreError> {
    subtasks_where(conn, "s.goal_id = ?1 ORDER BY s.seq", [goal_id])
}

pub fn subtasks_where(
    conn: &Db,
    filter: &str,
    args: impl super::db::Params,
) -> Result<Vec<SubtaskRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{SUB_SELECT} WHERE {filter}"))?;
    let rows = stmt.query_map(args, sub_row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn get_subtask(conn: &Db, id: &str) -> Result<SubtaskRow, StoreError> {
    let sql = format!("{SUB_SELECT} WHERE s.id = ?1");
    get_by_id(conn, Kind::Subtask, &sql, id, sub_row)
}

/// A subtask of `goal` by id, `#seq`, seq or exact title.
pub fn find_subtask(conn: &Db, goal: &str, key: &str) -> Result<SubtaskRow, StoreError> {
    let seq = key.trim_start_matches('#').parse::<i64>().ok();
    not_found(
        conn.query_row(
            &format!(
                "{SUB_SELECT} WHERE s.goal_id = ?1 AND (s.id = ?2 OR s.seq = ?3 OR s.title = ?2)
                 ORDER BY s.id = ?2 DESC, s.seq = ?3 DESC LIMIT 1"
            ),
            params![goal, key, seq],
            sub_row,
        ),
        || format!("goal {goal} has no subtask {key:?}"),
    )
}

pub fn deps(conn: &Db, subtask_id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT d.depends_on FROM subtask_deps d JOIN subtasks s ON s.id = d.depends_on
         WHERE d.subtask_id = ?1 ORDER BY s.seq",
    )?;
    let rows = stmt
        .query_map([subtask_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub struct NewSubtask<'a> {
    pub goal: &'a str,
    pub title: &'a str,
    pub owner: &'a str,
    pub criteria: &'a str,
    /// Earlier subtasks of the goal (ids, `#seq` or titles).
    pub deps: &'a [String],
    pub inputs: SubtaskInputs,
}

pub fn add_subtask(
    conn: &Db,
    actor: &Actor,
    new: NewSubtask<'_>,
) -> Result<SubtaskRow, StoreError> {
    let (goal, team) = open_goal(conn, actor, new.goal)?;
    check_active(&goal)?;
    for (what, v) in [("title", new.title), ("criteria", new.criteria)] {
        if v.trim().is_empty() || v.len() > 4000 {
            return Err(StoreError::Invalid(format!(
                "a subtask needs a {what} of 1-4000 characters (acceptance criteria say when it is done)"
            )));
        }
    }
    let count: i64 = conn.query_row(
        "SELECT count(*) FROM subtasks WHERE goal_id = ?1",
        [&goal.id],
        |r| r.get(0),
    )?;
    if count >= MAX_SUBTASKS {
        return Err(StoreError::Limit(format!(
            "goal {} already has {MAX_SUBTASKS} subtasks, the limit per goal",
            goal.id
        )));
    }
    let owner = teams::agent_of(
        conn,
        &Actor::Operator {
            account_id: goal.account_id.clone(),
            admin: false,
        },
        new.owner,
    )?;
    let member: Option<String> = conn
        .query_row(
            "SELECT role FROM team_members WHERE team_id = ?1 AND agent_id = ?2",
            params![team.id, owner.id],
            |r| r.get(0),
        )
        .optional()?;
    let helper: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM helpers WHERE agent_id = ?1 AND goal_id = ?2 AND retired_at IS NULL)",
        params![owner.id, goal.id],
        |r| r.get(0),
    )?;
    match member.as_deref() {
        Some("member") => {}
        Some(_) => {
            return Err(StoreError::Invalid(format!(
                "agent {:?} is the team's admin: it reviews subtasks, members do them",
                owner.name
            )));
        }
        None if helper => {}
        None => {
            return Err(StoreError::Invalid(format!(
                "agent {:?} is not a member of team {:?} (nor a helper of this goal)",
                owner.name, team.name
            )));
        }
    }
    let mut dep_ids = Vec::new();
    for d in new.deps {
        let dep = find_subtask(conn, &goal.id, d)?;
        if !dep_ids.contains(&dep.id) {
            dep_ids.push(dep.id);
        }
    }
    let mut new = new;
    new.inputs.artifacts =
        artifacts::check_subtask_inputs(conn, &goal.account_id, &new.inputs.artifacts)?;
    let id = new_id();
    let now = now_ms();
    conn.execute(
        "INSERT INTO subtasks (id, goal_id, seq, title, owner_id, criteria, inputs, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
        params![
            id,
            goal.id,
            count + 1,
            new.title.trim(),
            owner.id,
            new.criteria.trim(),
            serde_json::to_string(&new.inputs).expect("serializes"),
            S::Queued,
            now
        ],
    )?;
    for d in dep_ids {
        conn.execute(
            "INSERT INTO subtask_deps (subtask_id, depends_on) VALUES (?1, ?2)",
            params![id, d],
        )?;
    }
    touch(conn, &goal.id)?;
    get_subtask(conn, &id)
}

/// Moves a subtask one step of the state machine (refusing illegal steps).
pub fn step(conn: &Db, sub: &SubtaskRow, step: Step) -> Result<S, StoreError> {
    let to = transition(sub.state, step)
        .map_err(|e| StoreError::Conflict(format!("subtask #{} {:?}: {e}", sub.seq, sub.title)))?;
    conn.execute(
        "UPDATE subtasks SET state = ?2, updated_at = ?3 WHERE id = ?1",
        params![sub.id, to, now_ms()],
    )?;
    Ok(to)
}

fn touch(conn: &Db, goal: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE goals SET updated_at = ?2 WHERE id = ?1",
        params![goal, now_ms()],
    )?;
    Ok(())
}

/// A review decision of the admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Rework,
    WaitUser,
    Blocked,
}

impl Decision {
    pub fn parse(word: &str) -> Option<Decision> {
        Some(match word {
            "accept" | "accepted" => Decision::Accept,
            "rework" => Decision::Rework,
            "wait_user" | "waiting_user" => Decision::WaitUser,
            "blocked" | "block" => Decision::Blocked,
            _ => return None,
        })
    }
}

pub fn review(
    conn: &Db,
    actor: &Actor,
    goal: &str,
    subtask: &str,
    decision: Decision,
    note: Option<&str>,
) -> Result<SubtaskRow, StoreError> {
    let (goal, _) = open_goal(conn, actor, goal)?;
    check_active(&goal)?;
    let sub = find_subtask(conn, &goal.id, subtask)?;
    let step_of = match decision {
        Decision::Accept => Step::Accept,
        Decision::Rework => Step::Rework,
        Decision::WaitUser => Step::WaitUser,
        Decision::Blocked => Step::Block,
    };
    transition(sub.state, step_of)
        .map_err(|e| StoreError::Conflict(format!("subtask #{} {:?}: {e}", sub.seq, sub.title)))?;
    if decision == Decision::Rework {
        if note.is_none_or(|n| n.trim().is_empty()) {
            return Err(StoreError::Invalid(
                "a rework needs a note saying what to change".into(),
            ));
        }
        if sub.attempts >= MAX_ATTEMPTS {
            return Err(StoreError::Limit(format!(
                "subtask #{} {:?} has used {MAX_ATTEMPTS} attempts, the limit per authorization: accept it, mark it blocked, or ask the user",
                sub.seq, sub.title
            )));
        }
    }
    step(conn, &sub, step_of)?;
    if let Some(n) = note {
        conn.execute(
            "UPDATE subtasks SET note = ?2 WHERE id = ?1",
            params![sub.id, n],
        )?;
    }
    touch(conn, &goal.id)?;
    get_subtask(conn, &sub.id)
}

/// The admin completes its goal: every subtask (but cancelled ones) must be accepted.
pub fn subtask_view(conn: &Db, s: SubtaskRow) -> Result<wire::Subtask, StoreError> {
    let deps = deps(conn, &s.id)?;
    let inputs: SubtaskInputs = serde_json::from_str(&s.inputs).unwrap_or_default();
    let result: Option<SubtaskResult> = s
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok());
    Ok(wire::Subtask {
        id: s.id,
        goal_id: s.goal_id,
        seq: s.seq,
        title: s.title,
        owner: s.owner,
        criteria: s.criteria,
        inputs,
        deps,
        state: s.state,
        attempts: s.attempts,
        note: s.note,
        session_id: s.session_id.map(String::from),
        turn_id: s.turn_id,
        result,
        created_at: rfc3339(s.created_at),
        updated_at: rfc3339(s.updated_at),
    })
}
