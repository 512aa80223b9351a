//! The scheduler's steps over the database. The control plane's SQLite holds every work
//! item (queued subtasks, goals that need their admin, pending deliveries); a step reads
//! them and admits turns through the ordinary session machinery, one transaction per
//! admission together with the record of what it admitted. Nothing here resubmits a turn
//! that ran: an `uncertain` turn goes to review as what it is.

use super::db::Db;
use rusqlite::params;

use super::artifacts::InputFile;
use super::commands::{self, QueueLimits};
use super::goals::{self, GoalRow, MAX_ATTEMPTS, MAX_WAKEUPS, Step, SubtaskRow};
use super::prompts::{admin_prompt, delivery_message, member_prompt};
use super::sessions::{self, Admission, MAX_RUNNING_TURNS};
use super::{StoreError, agents, teams};
use crate::api::ids::{RunnerId, SessionId};
use crate::api::machine::CommandState;
use crate::api::states::{SessionState, TurnState};
use crate::api::teams::{ArtifactRef, GoalState, SubtaskResult, SubtaskState as S};
use crate::timefmt::now_ms;

/// Longest wait between two looks at an uncertain turn whose check has not answered.
const MAX_LOOK_BACKOFF_MS: i64 = 60_000;

/// What a scheduler pass did: Runners to wake (turns queued on them), sessions whose
/// turns must be stopped, and computers of retired helpers to remove.
#[derive(Debug, Default)]
pub struct Pass {
    pub runners: Vec<RunnerId>,
    pub stop_sessions: Vec<SessionId>,
    pub remove_computers: Vec<String>,
    pub admitted: usize,
}

/// One pass: settle what ended, then admit what is ready while slots are free.
pub fn pass(conn: &mut Db, limits: QueueLimits) -> Result<Pass, StoreError> {
    let mut out = Pass::default();
    // Most passes of a control plane without team work end here, without a write lock.
    if !any_work(conn)? {
        return Ok(out);
    }
    {
        let tx = conn.savepoint()?;
        settle(&tx, &mut out)?;
        tx.commit()?;
    }
    // People's chats first: they wait in the chat queue, in order.
    let runners = super::turn_waits::dispatch(conn, limits)?;
    out.admitted += runners.len();
    out.runners.extend(runners);
    dispatch(conn, limits, &mut out)?;
    out.runners.sort();
    out.runners.dedup();
    Ok(out)
}

fn exported(conn: &Db, turn_id: &str) -> Result<Vec<ArtifactRef>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, name, size, sha256 FROM artifacts
         WHERE turn_id = ?1 AND kind = 'export' AND state = 'ready' ORDER BY created_at",
    )?;
    let rows = stmt
        .query_map([turn_id], |r| {
            Ok(ArtifactRef {
                id: r.get(0)?,
                name: r.get(1)?,
                size: r.get(2)?,
                sha256: r.get(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn bump_attention(conn: &Db, goal_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE goals SET attention = CASE WHEN attention > seen THEN attention ELSE seen END + 1, updated_at = ?2 WHERE id = ?1",
        params![goal_id, now_ms()],
    )?;
    Ok(())
}

/// Running subtasks whose turns ended go to review (or back to the queue when the turn
/// never ran); admin turns that ended leave work behind them noticed.
fn settle(conn: &Db, out: &mut Pass) -> Result<(), StoreError> {
    let now = now_ms();
    let running = goals::subtasks_where(conn, "s.state = 'running'", [])?;
    for sub in running {
        let goal = goals::get(conn, &sub.goal_id)?;
        let Some(turn_id) = sub.turn_id.clone() else {
            goals::step(conn, &sub, Step::Requeue)?;
            continue;
        };
        let turn = sessions::get_turn(conn, &turn_id)?;
        if matches!(turn.state, TurnState::Queued | TurnState::Running) {
            if goal.state != GoalState::Active
                && sessions::get(conn, &turn.session_id)?
                    .stop_command_id
                    .is_none()
            {
                out.stop_sessions.push(turn.session_id.clone());
            }
            continue;
        }
        // A turn that never started spent nothing: waiting is not an attempt. (A command
        // the retention already deleted had long ended: it counts as run.)
        let never_ran = commands::get(conn, &turn.command_id).is_ok_and(|cmd| {
            cmd.started_at.is_none()
                && matches!(
                    cmd.state,
                    CommandState::Expired | CommandState::Cancelled | CommandState::Failed
                )
        });
        if never_ran || goal.state != GoalState::Active {
            goals::step(conn, &sub, Step::Requeue)?;
            let back = if never_ran { 1 } else { 0 };
            conn.execute(
                "UPDATE subtasks SET attempts = CASE WHEN attempts > ?2 THEN attempts - ?2 ELSE 0 END WHERE id = ?1",
                params![sub.id, back],
            )?;
            if goal.state.is_ended() {
                let sub = goals::get_subtask(conn, &sub.id)?;
                goals::step(conn, &sub, Step::Cancel)?;
            }
            continue;
        }
        if turn.state == TurnState::Uncertain {
            let pending_check: bool = conn.query_row(
                "SELECT t.check_command_id IS NOT NULL AND t.check_result IS NULL
                 FROM session_turns t WHERE t.id = ?1",
                [&turn.id],
                |r| r.get(0),
            )?;
            if pending_check {
                if now >= sub.next_look_at {
                    // Capped exponential back-off between looks; the check itself is the
                    // session machinery's read-only look at the original Hermes session.
                    let wait = (1000i64 << sub.looks.min(6)).min(MAX_LOOK_BACKOFF_MS);
                    conn.execute(
                        "UPDATE subtasks SET looks = looks + 1, next_look_at = ?2 WHERE id = ?1",
                        params![sub.id, now + wait],
                    )?;
                }
                continue;
            }
        }
        let text = match turn.state {
            TurnState::Complete => turn.final_text.clone().unwrap_or_default(),
            TurnState::Uncertain => format!(
                "The turn's outcome is uncertain ({}); it was not replayed.{}",
                turn.error.clone().unwrap_or_default(),
                turn.check_result
                    .as_deref()
                    .map(|c| format!(" What its session showed: {c}"))
                    .unwrap_or_default()
            ),
            other => format!(
                "The turn ended {other}: {}{}",
                turn.error.clone().unwrap_or_default(),
                turn.final_text
                    .as_deref()
                    .map(|t| format!("\n{t}"))
                    .unwrap_or_default()
            ),
        };
        let result = SubtaskResult {
            text,
            turn_state: turn.state,
            artifacts: exported(conn, &turn.id)?,
            attempt: sub.attempts,
        };
        goals::step(conn, &sub, Step::Finish)?;
        conn.execute(
            "UPDATE subtasks SET result = ?2 WHERE id = ?1",
            params![sub.id, serde_json::to_string(&result).expect("serializes")],
        )?;
        bump_attention(conn, &sub.goal_id)?;
    }
    // Admin turns of goals that ended: work still waiting for the admin needs another.
    let waiting = goals::goals_where(conn, "admin_turn_id IS NOT NULL", [])?;
    for goal in waiting {
        let turn = sessions::get_turn(conn, goal.admin_turn_id.as_deref().unwrap_or_default())?;
        if matches!(turn.state, TurnState::Queued | TurnState::Running) {
            continue;
        }
        conn.execute(
            "UPDATE goals SET admin_turn_id = NULL WHERE id = ?1",
            [&goal.id],
        )?;
        if goal.state == GoalState::Active && needs_admin(conn, &goal)? {
            bump_attention(conn, &goal.id)?;
        }
    }
    // Revoke and archive are final for old work.
    for goal in goals::goals_where(conn, "state = 'active'", [])? {
        let admin = teams::admin_of(conn, &goal.team_id)?;
        if let Err(e) = goals::check_admin_can_run(&admin) {
            goals::end(conn, &goal.id, GoalState::Stopped, &e.to_string(), None)?;
        }
    }
    out.remove_computers.extend(retired_computers(conn)?);
    Ok(())
}

/// Work the admin has not dealt with: a goal not planned yet (no subtask), a result to
/// review, or every subtask accepted.
fn needs_admin(conn: &Db, goal: &GoalRow) -> Result<bool, StoreError> {
    let subs = goals::subtasks(conn, &goal.id)?;
    Ok(subs.is_empty()
        || subs.iter().any(|s| s.state == S::Review)
        || subs
            .iter()
            .all(|s| matches!(s.state, S::Accepted | S::Cancelled)))
}

/// Retires helpers whose goal ended, stopped or moved to another authorization (their
/// agents are archived; the scheduler removes their computers). Sessions and exported
/// artifacts stay.
pub fn retire_helpers(conn: &Db, goal: Option<&str>) -> Result<(), StoreError> {
    let now = now_ms();
    let retired: Vec<String> = {
        let mut stmt = conn.prepare_cached(
            "SELECT h.agent_id FROM helpers h JOIN goals g ON g.id = h.goal_id
             WHERE h.retired_at IS NULL AND (?1 IS NULL OR h.goal_id = ?1)
               AND (g.state != 'active' OR h.generation != g.generation)",
        )?;
        stmt.query_map([goal], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    for agent in retired {
        conn.execute(
            "UPDATE helpers SET retired_at = ?2 WHERE agent_id = ?1",
            params![agent, now],
        )?;
        conn.execute(
            "UPDATE agents SET archived_at = ?2 WHERE id = ?1 AND archived_at IS NULL",
            params![agent, now],
        )?;
    }
    Ok(())
}

/// Computers of retired helpers that still exist.
fn retired_computers(conn: &Db) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.id FROM computers c JOIN helpers h ON h.agent_id = c.agent_id
         WHERE h.retired_at IS NOT NULL AND c.state NOT IN ('removed', 'stopping')",
    )?;
    let rows = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn running_turns(conn: &Db) -> Result<i64, StoreError> {
    Ok(conn.query_row(
        "SELECT count(*) FROM session_turns WHERE state IN (?1, ?2)",
        params![TurnState::Queued, TurnState::Running],
        |r| r.get(0),
    )?)
}

fn idle(conn: &Db, agent_id: &str) -> Result<bool, StoreError> {
    Ok(sessions::running_session(conn, agent_id)?.is_none())
}

fn session_free(conn: &Db, session: Option<&str>) -> Result<bool, StoreError> {
    match session {
        None => Ok(true),
        Some(s) => Ok(sessions::get(conn, &SessionId::new(s))?.state != SessionState::Running),
    }
}

/// One unit of work the scheduler may admit now.
enum Work {
    Delivery {
        id: String,
        session: SessionId,
        payload: String,
    },
    Admin(GoalRow),
    Subtask(SubtaskRow),
}

/// The next admissible work item, oldest first within each kind: deliveries, then admin
/// turns, then ready subtasks. `skip` holds items that failed admission in this pass.
fn next_work(conn: &Db, skip: &[String]) -> Result<Option<Work>, StoreError> {
    let deliveries: Vec<(String, SessionId, String)> = {
        let mut stmt = conn.prepare_cached(
            "SELECT id, session_id, payload FROM deliveries WHERE state = 'pending' ORDER BY created_at",
        )?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?
    };
    for (id, session, payload) in deliveries {
        if skip.contains(&id) {
            continue;
        }
        let s = sessions::get(conn, &session)?;
        if s.state == SessionState::Running || !idle(conn, &s.agent_id)? {
            continue;
        }
        return Ok(Some(Work::Delivery {
            id,
            session,
            payload,
        }));
    }
    for goal in goals::goals_where(
        conn,
        "state = 'active' AND attention > seen ORDER BY created_at",
        [],
    )? {
        if skip.contains(&goal.id) {
            continue;
        }
        let admin = teams::admin_of(conn, &goal.team_id)?;
        if idle(conn, &admin.id)? && session_free(conn, goal.admin_session_id.as_deref())? {
            return Ok(Some(Work::Admin(goal)));
        }
    }
    let now = now_ms();
    let queued = goals::subtasks_where(
        conn,
        "s.state = 'queued' AND s.next_look_at <= ?1
           AND (SELECT state FROM goals WHERE id = s.goal_id) = 'active'
           AND NOT EXISTS (SELECT 1 FROM subtask_deps d JOIN subtasks p ON p.id = d.depends_on
                           WHERE d.subtask_id = s.id AND p.state != 'accepted')
         ORDER BY s.created_at",
        [now],
    )?;
    for sub in queued {
        if skip.contains(&sub.id) {
            continue;
        }
        if idle(conn, &sub.owner_id)? && session_free(conn, sub.session_id.as_deref())? {
            return Ok(Some(Work::Subtask(sub)));
        }
    }
    Ok(None)
}

fn dispatch(conn: &mut Db, limits: QueueLimits, out: &mut Pass) -> Result<(), StoreError> {
    let mut skip: Vec<String> = Vec::new();
    loop {
        let tx = conn.savepoint()?;
        if running_turns(&tx)? >= MAX_RUNNING_TURNS {
            return Ok(());
        }
        let Some(work) = next_work(&tx, &skip)? else {
            return Ok(());
        };
        let key = match &work {
            Work::Delivery { id, .. } => id.clone(),
            Work::Admin(g) => g.id.clone(),
            Work::Subtask(s) => s.id.clone(),
        };
        match admit(&tx, work, limits) {
            Ok(Some(runner)) => {
                tx.commit()?;
                out.runners.push(runner);
                out.admitted += 1;
            }
            Ok(None) => {
                // Recorded a decision without a turn (a limit reached, a closed session).
                tx.commit()?;
            }
            Err(e) => {
                drop(tx);
                // Waiting for a Runner, a computer or a slot spends nothing: the item
                // stays queued and says why.
                note_waiting(conn, &key, &e.to_string())?;
                skip.push(key);
            }
        }
    }
}

fn note_waiting(conn: &Db, key: &str, why: &str) -> Result<(), StoreError> {
    let reason = format!("waiting: {why}");
    conn.execute(
        "UPDATE goals SET reason = ?2 WHERE (id = ?1 OR id = (SELECT goal_id FROM subtasks WHERE id = ?1))
           AND state = 'active' AND coalesce(reason, '') != ?2",
        params![key, reason],
    )?;
    conn.execute(
        "UPDATE deliveries SET error = ?2 WHERE id = ?1",
        params![key, why],
    )?;
    Ok(())
}

/// Admits one work item inside `tx`; the Runner to wake, or None when no turn was due.
fn admit(tx: &Db, work: Work, limits: QueueLimits) -> Result<Option<RunnerId>, StoreError> {
    let now = now_ms();
    match work {
        Work::Delivery {
            id,
            session,
            payload,
        } => {
            let s = sessions::get(tx, &session)?;
            if matches!(s.state, SessionState::Closed | SessionState::PendingCleanup) {
                tx.execute(
                    "UPDATE deliveries SET state = 'failed', error = ?2 WHERE id = ?1",
                    params![id, format!("session {} is {}", s.id, s.state)],
                )?;
                return Ok(None);
            }
            let message = delivery_message(&payload);
            let (_, turn) = sessions::admit_in(
                tx,
                &Admission {
                    account_id: s.account_id.clone(),
                    admin: false,
                    agent: s.agent_id.clone(),
                    session: Some(s.id.clone()),
                    message,
                    attachments: Vec::new(),
                    // The accepted results' files go along (into a computer agent's
                    // workspace, under results/#N/).
                    inputs: delivered_files(&payload),
                },
                limits,
            )?;
            tx.execute(
                "UPDATE deliveries SET state = 'delivered', turn_id = ?2, error = NULL, delivered_at = ?3
                 WHERE id = ?1",
                params![id, turn.id, now],
            )?;
            Ok(Some(turn.runner_id))
        }
        Work::Admin(goal) => {
            if goal.wakeups >= MAX_WAKEUPS {
                goals::end(
                    tx,
                    &goal.id,
                    GoalState::WaitingUser,
                    &format!(
                        "its admin was woken {MAX_WAKEUPS} times, the limit of automatic wake-ups per authorization: `yy goal resume {}` authorizes more",
                        goal.id
                    ),
                    None,
                )?;
                return Ok(None);
            }
            let admin = teams::admin_of(tx, &goal.team_id)?;
            let message = admin_prompt(tx, &goal)?;
            // The files of each result under review go into its computer.
            let inputs = result_files(tx, &goal.id, "review", None, "reviews")?;
            let (session, turn) = sessions::admit_in(
                tx,
                &Admission {
                    account_id: goal.account_id.clone(),
                    admin: false,
                    agent: admin.id.clone(),
                    session: goal.admin_session_id.clone().map(SessionId::from),
                    message,
                    attachments: Vec::new(),
                    inputs,
                },
                limits,
            )?;
            tx.execute(
                "UPDATE goals SET wakeups = wakeups + 1, seen = attention, admin_turn_id = ?2,
                     admin_session_id = ?3, origin_session_id = coalesce(origin_session_id, ?3),
                     reason = NULL, updated_at = ?4 WHERE id = ?1",
                params![goal.id, turn.id, session.id, now],
            )?;
            Ok(Some(turn.runner_id))
        }
        Work::Subtask(sub) => {
            let owner = agents::get(tx, "", &sub.owner_id)?;
            if owner.archived_at.is_some() || sub.attempts >= MAX_ATTEMPTS {
                let note = if owner.archived_at.is_some() {
                    format!("its owner {:?} is archived", owner.name)
                } else {
                    format!("it used {MAX_ATTEMPTS} attempts, the limit per authorization")
                };
                goals::step(tx, &sub, Step::Block)?;
                tx.execute(
                    "UPDATE subtasks SET note = ?2 WHERE id = ?1",
                    params![sub.id, note],
                )?;
                bump_attention(tx, &sub.goal_id)?;
                return Ok(None);
            }
            let goal = goals::get(tx, &sub.goal_id)?;
            let message = member_prompt(tx, &goal, &sub)?;
            let (session, turn) = sessions::admit_in(
                tx,
                &Admission {
                    account_id: goal.account_id.clone(),
                    admin: false,
                    agent: owner.id.clone(),
                    session: sub.session_id.clone(),
                    message,
                    attachments: Vec::new(),
                    // Its input artifacts go into a computer member's workspace, and the
                    // accepted results of the subtasks it depends on.
                    inputs: InputFile::inputs(
                        serde_json::from_str::<crate::api::teams::SubtaskInputs>(&sub.inputs)
                            .unwrap_or_default()
                            .artifacts,
                    )
                    .into_iter()
                    .chain(result_files(
                        tx,
                        &sub.goal_id,
                        "accepted",
                        Some(&sub.id),
                        "inputs/deps",
                    )?)
                    .collect(),
                },
                limits,
            )?;
            goals::step(tx, &sub, Step::Start)?;
            tx.execute(
                "UPDATE subtasks SET attempts = attempts + 1, session_id = ?2, turn_id = ?3,
                     looks = 0, next_look_at = 0 WHERE id = ?1",
                params![sub.id, session.id, turn.id],
            )?;
            tx.execute(
                "UPDATE goals SET reason = NULL, updated_at = ?2 WHERE id = ?1 AND reason LIKE 'waiting: %'",
                params![goal.id, now],
            )?;
            Ok(Some(turn.runner_id))
        }
    }
}

/// The files of the accepted results in a goal's delivery, each under `results/#SEQ/`.
fn delivered_files(payload: &str) -> Vec<InputFile> {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let mut files = Vec::new();
    for s in v["subtasks"].as_array().into_iter().flatten() {
        if s["state"] != "accepted" {
            continue;
        }
        for a in s["artifacts"].as_array().into_iter().flatten() {
            if let Some(id) = a["id"].as_str() {
                files.push(InputFile {
                    artifact_id: id.to_string(),
                    dir: Some(format!("results/#{}", s["seq"])),
                });
            }
        }
    }
    files
}

/// The artifacts of the results of a goal's subtasks in `state` (only those `dependent`
/// depends on, when given), each under `under/#SEQ/`.
fn result_files(
    conn: &Db,
    goal_id: &str,
    state: &str,
    dependent: Option<&str>,
    under: &str,
) -> Result<Vec<InputFile>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.seq, s.result FROM subtasks s
         WHERE s.goal_id = ?1 AND s.state = ?2 AND s.result IS NOT NULL
             AND (?3 IS NULL OR s.id IN (SELECT depends_on FROM subtask_deps WHERE subtask_id = ?3))
         ORDER BY s.seq",
    )?;
    let rows: Vec<(i64, String)> = stmt
        .query_map(params![goal_id, state, dependent], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut files = Vec::new();
    for (seq, result) in rows {
        let Ok(result) = serde_json::from_str::<SubtaskResult>(&result) else {
            continue;
        };
        files.extend(result.artifacts.into_iter().map(|a| InputFile {
            artifact_id: a.id,
            dir: Some(format!("{under}/#{seq}")),
        }));
    }
    Ok(files)
}

/// A subtask for `yy subtask show`, with the goal's account checked.
pub fn subtask_for(conn: &Db, actor: &teams::Actor, id: &str) -> Result<SubtaskRow, StoreError> {
    let id = super::ids::resolve_for(conn, super::ids::Kind::Subtask, id, actor.scope())?;
    let sub = goals::get_subtask(conn, &id)?;
    goals::get_for(conn, actor, &sub.goal_id)?;
    Ok(sub)
}

/// Whether anything may need a pass: an open goal, a running subtask, a pending
/// delivery, an admin turn to settle, a retired helper's computer to remove, or a chat
/// turn waiting to start.
pub fn any_work(conn: &Db) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM goals WHERE state = 'active' OR admin_turn_id IS NOT NULL)
                 OR EXISTS (SELECT 1 FROM subtasks WHERE state = 'running')
                 OR EXISTS (SELECT 1 FROM deliveries WHERE state = 'pending')
                 OR EXISTS (SELECT 1 FROM turn_waits WHERE state = 'waiting')
                 OR EXISTS (SELECT 1 FROM helpers h JOIN computers c ON c.agent_id = h.agent_id
                            WHERE h.retired_at IS NOT NULL AND c.state NOT IN ('removed', 'stopping'))",
        )?
        .query_row([], |r| r.get(0))?)
}
