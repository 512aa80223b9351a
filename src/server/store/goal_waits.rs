//! What an open goal waits for, said in `yy goal show` and `yy goal watch`: its admin's
//! turn, a member's turn, a Runner or a slot (the scheduler's last word on why it could
//! not admit the next turn), or the user. Nothing is left to wait without saying so.

use super::db::Db;
use super::goals::{GoalRow, SubtaskRow};
use super::{StoreError, sessions, teams};
use crate::api::teams::{GoalState, SubtaskState as S};

/// One line, or None for a goal that ended.
pub fn waits_for(
    conn: &Db,
    g: &GoalRow,
    subs: &[SubtaskRow],
) -> Result<Option<String>, StoreError> {
    let resume = format!("`yy goal resume {}`", g.id);
    match g.state {
        GoalState::Active => {}
        GoalState::WaitingUser | GoalState::Stopped => {
            return Ok(Some(format!(
                "the user: {} ({resume})",
                g.reason.as_deref().unwrap_or("it was stopped")
            )));
        }
        _ => return Ok(None),
    }
    let admin = teams::admin_of(conn, &g.team_id)?;
    // The scheduler's note when it could not admit the next turn (no Runner, no slot).
    let blocked = g
        .reason
        .as_deref()
        .and_then(|r| r.strip_prefix("waiting: "))
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    if let Some(turn) = &g.admin_turn_id {
        let t = sessions::get_turn(conn, turn)?;
        if !t.state.is_final() {
            return Ok(Some(format!(
                "its admin's turn ({:?}, session {}, {})",
                admin.name, t.session_id, t.state
            )));
        }
    }
    if let Some(s) = subs.iter().find(|s| s.state == S::Running) {
        return Ok(Some(format!(
            "a member's turn (subtask #{} of {:?})",
            s.seq, s.owner
        )));
    }
    if g.attention > g.seen {
        return Ok(Some(format!(
            "its admin's turn ({:?}), to start{}",
            admin.name,
            if blocked.is_empty() {
                " as soon as the agent and a slot are free".to_string()
            } else {
                blocked.clone()
            }
        )));
    }
    if let Some(s) = subs.iter().find(|s| s.state == S::Queued) {
        return Ok(Some(format!(
            "a member's turn (subtask #{} of {:?}), to start{}",
            s.seq,
            s.owner,
            if blocked.is_empty() {
                " when its dependencies are accepted and the agent and a slot are free".to_string()
            } else {
                blocked
            }
        )));
    }
    if let Some(s) = subs.iter().find(|s| s.state == S::WaitingUser) {
        return Ok(Some(format!(
            "the user: subtask #{} waits for the user ({resume})",
            s.seq
        )));
    }
    Ok(Some(format!(
        "its admin's turn ({:?}), when the scheduler next looks",
        admin.name
    )))
}
