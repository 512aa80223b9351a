//! How turns, stops and checks of Bot sessions end: turns settle from their Runner
//! commands, stops must be confirmed (else the session is pending cleanup and never reused),
//! and an uncertain turn is checked later through its original Hermes session.

use super::db::{Db, Savepoint};
use rusqlite::params;

use super::commands::{self, CommandRow, QueueLimits};
use super::sessions::{SessionRow, TURN_COLUMNS, TurnRow, get, turn_row};
use super::{StoreError, runners, turn_waits};
use crate::api::ids::{CommandId, SessionId};
use crate::api::machine::{CommandState, RunnerCommand};
use crate::api::sessions::{SessionRef, TurnResult};
use crate::api::states::{SessionState, TurnState};
use crate::timefmt::now_ms;

/// Brings turns and stops in line with their commands once those ended. Returns the
/// sessions that changed.
pub fn settle(conn: &mut Db) -> Result<Vec<SessionId>, StoreError> {
    let tx = conn.savepoint()?;
    let now = now_ms();
    let mut changed = Vec::new();
    let finals = CommandState::final_sql();
    let open: Vec<(String, SessionId, CommandId)> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT t.id, t.session_id, t.command_id FROM session_turns t
             JOIN runner_commands c ON c.id = t.command_id
             WHERE t.state IN (?1, ?2) AND c.state IN {finals}"
        ))?;
        stmt.query_map(params![TurnState::Queued, TurnState::Running], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<Result<_, _>>()?
    };
    for (turn_id, session_id, command_id) in open {
        let cmd = commands::get(&tx, &command_id)?;
        let (state, text, usage, error) = turn_outcome(&cmd);
        tx.execute(
            "UPDATE session_turns SET state = ?2, final_text = ?3, usage = ?4, error = ?5, finished_at = ?6
             WHERE id = ?1",
            params![turn_id, state, text, usage, error, now],
        )?;
        tx.execute(
            "UPDATE sessions SET state = ?3, updated_at = ?2 WHERE id = ?1 AND state = ?4",
            params![session_id, now, SessionState::Idle, SessionState::Running],
        )?;
        if state == TurnState::Uncertain {
            enqueue_check(&tx, &turn_id, &session_id)?;
        }
        changed.push(session_id);
    }
    let checks: Vec<(String, SessionId, CommandId)> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT t.id, t.session_id, t.check_command_id FROM session_turns t
             JOIN runner_commands c ON c.id = t.check_command_id
             WHERE t.check_result IS NULL AND c.state IN {finals}"
        ))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?
    };
    for (turn_id, session_id, command_id) in checks {
        let cmd = commands::get(&tx, &command_id)?;
        let result = match (cmd.state, cmd.result) {
            (CommandState::Done, Some(r)) => r,
            (state, _) => serde_json::json!({
                "checked": false,
                "reason": format!("{state}: {}", cmd.error.unwrap_or_default()),
            })
            .to_string(),
        };
        tx.execute(
            "UPDATE session_turns SET check_result = ?2 WHERE id = ?1",
            params![turn_id, result],
        )?;
        changed.push(session_id);
    }
    let stops: Vec<(SessionId, CommandId)> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT s.id, s.stop_command_id FROM sessions s
             JOIN runner_commands c ON c.id = s.stop_command_id
             WHERE c.state IN {finals}"
        ))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    for (session_id, command_id) in stops {
        let cmd = commands::get(&tx, &command_id)?;
        if cmd.state == CommandState::Done {
            tx.execute(
                "UPDATE sessions SET stop_command_id = NULL, updated_at = ?2 WHERE id = ?1",
                params![session_id, now],
            )?;
        } else {
            let reason = format!(
                "the stop could not be confirmed ({}: {})",
                cmd.state,
                cmd.error.as_deref().unwrap_or("no answer")
            );
            tx.execute(
                "UPDATE sessions SET state = ?4, cleanup_reason = ?2,
                     stop_command_id = NULL, updated_at = ?3 WHERE id = ?1 AND state != ?5",
                params![
                    session_id,
                    reason,
                    now,
                    SessionState::PendingCleanup,
                    SessionState::Closed
                ],
            )?;
        }
        changed.push(session_id);
    }
    tx.commit()?;
    changed.sort();
    changed.dedup();
    Ok(changed)
}

type TurnOutcome = (TurnState, Option<String>, Option<String>, Option<String>);

fn turn_outcome(cmd: &CommandRow) -> TurnOutcome {
    match cmd.state {
        CommandState::Done => {
            let result: Option<TurnResult> = cmd.result_as();
            match result {
                Some(r) => {
                    let state = match r.status.as_str() {
                        "complete" => TurnState::Complete,
                        "interrupted" => TurnState::Interrupted,
                        _ => TurnState::Error,
                    };
                    // Hermes's own words, from an error event or else its final text.
                    let error = (state == TurnState::Error).then(|| {
                        r.error
                            .clone()
                            .or_else(|| Some(r.text.trim().to_string()).filter(|t| !t.is_empty()))
                            .unwrap_or_else(|| "Hermes ended the turn with an error".into())
                    });

                    (state, Some(r.text), r.usage.map(|u| u.to_string()), error)
                }
                None => (
                    TurnState::Error,
                    None,
                    None,
                    Some("the Runner's answer was not a turn result".into()),
                ),
            }
        }
        CommandState::Cancelled => (TurnState::Interrupted, None, None, cmd.error.clone()),
        CommandState::Uncertain => (
            TurnState::Uncertain,
            None,
            None,
            Some(format!(
                "{}; it is never replayed",
                cmd.error.as_deref().unwrap_or("the outcome is unknown")
            )),
        ),
        _ => (TurnState::Error, None, None, cmd.error.clone()),
    }
}

/// Opens the savepoint of one change to a session, with the session as it is.
fn begin<'c>(
    conn: &'c mut Db,
    session_id: &SessionId,
) -> Result<(Savepoint<'c>, SessionRow), StoreError> {
    let tx = conn.savepoint()?;
    let session = get(&tx, session_id)?;
    Ok((tx, session))
}

/// What a stop needs: the command to send, or nothing when the turn had not reached a
/// Runner (then it is cancelled in the queue).
pub fn stop(
    conn: &mut Db,
    session_id: &SessionId,
    limits: QueueLimits,
) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
    let (tx, session) = begin(conn, session_id)?;
    if session.state != SessionState::Running {
        return Err(StoreError::Conflict(format!(
            "session {} is {}, not running: nothing to stop",
            session.id, session.state
        )));
    }
    let turn: TurnRow = tx.query_row(
        &format!(
            "SELECT {TURN_COLUMNS} FROM session_turns WHERE session_id = ?1 AND state IN (?2, ?3)"
        ),
        params![session.id, TurnState::Queued, TurnState::Running],
        turn_row,
    )?;
    let cmd = commands::get(&tx, &turn.command_id)?;
    if cmd.state == CommandState::Pending {
        tx.commit()?;
        commands::cancel(conn, &cmd.id)?;
        settle(conn)?;
        return Ok((get(conn, session_id)?, None));
    }
    let runner = runners::get(&tx, &turn.runner_id)?;
    let now = now_ms();
    let Some(hermes_session_id) = session.hermes_session_id.clone() else {
        // Running on the Runner but no Hermes session yet: cancel the command itself.
        tx.commit()?;
        commands::cancel(conn, &cmd.id)?;
        return Ok((get(conn, session_id)?, None));
    };
    if !runner
        .capabilities
        .iter()
        .any(|c| c == crate::api::capabilities::SESSION_STOP)
    {
        tx.execute(
            "UPDATE sessions SET state = ?3, updated_at = ?2,
                 cleanup_reason = 'the Runner cannot confirm stops (it lacks session-stop-v1): upgrade it'
             WHERE id = ?1",
            params![session.id, now, SessionState::PendingCleanup],
        )?;
        let session = get(&tx, session_id)?;
        tx.commit()?;
        return Ok((session, None));
    }
    let command = RunnerCommand::SessionStop(SessionRef {
        session_id: session.id.to_string(),
        hermes_session_id,
    });
    let stop = commands::enqueue_in(&tx, &runner.id, &command, None, limits)?;
    tx.execute(
        "UPDATE sessions SET stop_command_id = ?2, updated_at = ?3 WHERE id = ?1",
        params![session.id, stop.id, now],
    )?;
    let session = get(&tx, session_id)?;
    tx.commit()?;
    Ok((session, Some(stop)))
}

/// `yy session stop`: cancels the turns waiting in the session, then stops its running
/// turn (when only waiting turns were there, that is all).
pub fn stop_all(
    conn: &mut Db,
    session_id: &SessionId,
    limits: QueueLimits,
) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
    let cancelled = {
        let tx = conn.savepoint()?;
        get(&tx, session_id)?;
        let n = turn_waits::cancel_session(&tx, session_id, "cancelled: its session was stopped")?;
        tx.commit()?;
        n
    };
    match stop(conn, session_id, limits) {
        Err(StoreError::Conflict(_)) if cancelled > 0 => Ok((get(conn, session_id)?, None)),
        other => other,
    }
}

/// Cancels one turn (Ctrl-C in `yy chat`): a waiting one is cancelled at once; an admitted
/// one that has not ended is stopped like `yy session stop`, without touching the turns
/// waiting behind it.
pub fn cancel_turn(
    conn: &mut Db,
    session_id: &SessionId,
    turn_id: &str,
    limits: QueueLimits,
) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
    {
        let (tx, session) = begin(conn, session_id)?;
        if let Some(w) = turn_waits::find(&tx, turn_id)? {
            if w.session_id != session.id {
                return Err(StoreError::NotFound(format!(
                    "no turn {turn_id:?} in session {}",
                    session.id
                )));
            }
            if turn_waits::cancel(&tx, turn_id, "cancelled before it started")? {
                tx.commit()?;
                return Ok((session, None));
            }
        }
    }
    let turn = super::sessions::get_turn(conn, turn_id)?;
    if turn.session_id != session_id {
        return Err(StoreError::NotFound(format!(
            "no turn {turn_id:?} in session {session_id}"
        )));
    }
    if turn.state.is_final() {
        return Ok((get(conn, session_id)?, None));
    }
    stop(conn, session_id, limits)
}

/// Closes a session for good; its Hermes session is closed on the Runner when it has one.
pub fn close(
    conn: &mut Db,
    session_id: &SessionId,
    limits: QueueLimits,
) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
    let (tx, session) = begin(conn, session_id)?;
    if session.state == SessionState::Closed {
        return Ok((session, None));
    }
    if session.state == SessionState::Running {
        return Err(StoreError::Conflict(format!(
            "session {} is in a turn: stop it first with `yy session stop {}`",
            session.id, session.id
        )));
    }
    turn_waits::cancel_session(&tx, session_id, "cancelled: its session was closed")?;
    let mut command = None;
    if let (Some(runner_id), Some(hermes)) = (&session.runner_id, &session.hermes_session_id) {
        let close = RunnerCommand::SessionClose(SessionRef {
            session_id: session.id.to_string(),
            hermes_session_id: hermes.clone(),
        });
        command = Some(commands::enqueue_in(&tx, runner_id, &close, None, limits)?);
    }
    tx.execute(
        "UPDATE sessions SET state = ?3, updated_at = ?2 WHERE id = ?1",
        params![session.id, now_ms(), SessionState::Closed],
    )?;
    let session = get(&tx, session_id)?;
    tx.commit()?;
    Ok((session, command))
}

/// Queues a read-only look at an uncertain turn's original Hermes session. It runs when the
/// Runner is back; nothing is ever run again.
fn enqueue_check(conn: &Db, turn_id: &str, session_id: &SessionId) -> Result<(), StoreError> {
    let session = get(conn, session_id)?;
    let (Some(runner_id), Some(hermes)) = (session.runner_id, session.hermes_session_id) else {
        return Ok(());
    };
    let check = RunnerCommand::SessionCheck(SessionRef {
        session_id: session.id.into_string(),
        hermes_session_id: hermes,
    });
    match commands::enqueue_in(conn, &runner_id, &check, None, QueueLimits::default()) {
        Ok(cmd) => {
            conn.execute(
                "UPDATE session_turns SET check_command_id = ?2 WHERE id = ?1",
                params![turn_id, cmd.id],
            )?;
            Ok(())
        }
        // A full queue or a disabled Runner: the turn stays uncertain, unchecked.
        Err(StoreError::Limit(_) | StoreError::Conflict(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
