//! The chat queue: a chat turn that cannot start yet (its agent is in another turn, an
//! earlier turn of the agent waits, every slot of the control plane is taken, its computer
//! is settling) waits here instead of being refused. Turns of one agent start first in,
//! first out (and so those of one session); the scheduler's pass admits them
//! ([`dispatch`]), and an admitted turn keeps the id it had while it waited.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::commands::QueueLimits;
use super::sessions::{self, Admission, Admitted, SessionRow, TurnRow};
use super::{StoreError, agents, artifacts, not_found};
use crate::api::ids::{RunnerId, SessionId};
use crate::api::sessions as wire;
use crate::api::states::TurnState;
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Most turns one account may have waiting at once.
pub const MAX_QUEUED_PER_ACCOUNT: i64 = 32;

/// The words of a waiting turn's state on the wire (never stored in `session_turns`).
pub const WAITING: &str = "waiting";

#[derive(Debug, Clone)]
pub struct WaitRow {
    pub id: String,
    pub session_id: SessionId,
    pub account_id: String,
    pub admin: bool,
    pub agent_id: String,
    pub message: String,
    pub attachments: Vec<String>,
    /// waiting, cancelled or refused.
    pub state: String,
    pub reason: String,
    pub created_at: i64,
    pub ended_at: Option<i64>,
}

impl WaitRow {
    pub fn is_waiting(&self) -> bool {
        self.state == WAITING
    }

    /// As a turn: `waiting`, or how it ended without starting (`interrupted` when
    /// cancelled, `error` when refused, with the reason as its error).
    pub fn view(self) -> wire::Turn {
        let (state, error) = match self.state.as_str() {
            WAITING => (TurnState::Waiting, None),
            "cancelled" => (TurnState::Interrupted, Some(self.reason)),
            _ => (TurnState::Error, Some(self.reason)),
        };
        wire::Turn {
            id: self.id,
            seq: 0,
            runner_id: None,
            command_id: None,
            message: self.message,
            state,
            final_text: None,
            usage: None,
            error,
            created_at: rfc3339(self.created_at),
            finished_at: rfc3339_opt(self.ended_at),
            check: None,
            tools: Vec::new(),
        }
    }
}

const COLUMNS: &str = "id, session_id, account_id, admin, agent_id, message, attachments, state,
    reason, created_at, ended_at";

fn row(r: &Row<'_>) -> rusqlite::Result<WaitRow> {
    let attachments: String = r.get(6)?;
    Ok(WaitRow {
        id: r.get(0)?,
        session_id: r.get(1)?,
        account_id: r.get(2)?,
        admin: r.get(3)?,
        agent_id: r.get(4)?,
        message: r.get(5)?,
        attachments: serde_json::from_str(&attachments).unwrap_or_default(),
        state: r.get(7)?,
        reason: r.get(8)?,
        created_at: r.get(9)?,
        ended_at: r.get(10)?,
    })
}

/// A waiting (or never started) turn by id, if there is one.
pub fn find(conn: &Db, id: &str) -> Result<Option<WaitRow>, StoreError> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM turn_waits WHERE id = ?1"))?
        .query_row([id], row)
        .optional()?)
}

pub fn get(conn: &Db, id: &str) -> Result<WaitRow, StoreError> {
    not_found(
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM turn_waits WHERE id = ?1"))?
            .query_row([id], row),
        || format!("no turn {id:?}"),
    )
}

/// The turns of a session that have not started: waiting, or ended without starting
/// (cancelled, refused), oldest first.
pub fn of_session(conn: &Db, session_id: &SessionId) -> Result<Vec<WaitRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM turn_waits WHERE session_id = ?1 ORDER BY seq LIMIT 100"
    ))?;
    let rows = stmt
        .query_map([session_id], row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The session of the oldest turn of `agent_id` that waits and was queued before `wait`
/// (before any, when `wait` is None): such a turn starts first.
pub fn earlier_waiting(
    conn: &Db,
    agent_id: &str,
    wait: Option<&str>,
) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT session_id FROM turn_waits
             WHERE state = 'waiting' AND agent_id = ?1
               AND (?2 IS NULL OR seq < (SELECT seq FROM turn_waits WHERE id = ?2))
             ORDER BY seq LIMIT 1",
        )?
        .query_row(params![agent_id, wait], |r| r.get(0))
        .optional()?)
}

/// How many turns start before this one: those of its agent queued earlier, and the one
/// the agent is in now; for a shared computer, those of every agent sharing it.
pub fn ahead(conn: &Db, w: &WaitRow) -> Result<u32, StoreError> {
    let (mut earlier, mut running) = (0, false);
    for agent in super::computer_grants::co_users(conn, &w.agent_id)? {
        earlier += conn
            .prepare_cached(
                "SELECT count(*) FROM turn_waits WHERE state = 'waiting' AND agent_id = ?1
                   AND seq < (SELECT seq FROM turn_waits WHERE id = ?2)",
            )?
            .query_row(params![agent, w.id], |r| r.get::<_, u32>(0))?;
        running |= sessions::running_session(conn, &agent)?.is_some();
    }
    Ok(earlier + u32::from(running))
}

/// What a chat did: its turn started, or it waits.
#[derive(Debug)]
pub enum Chat {
    Started(SessionRow, TurnRow),
    /// With how many turns start before it.
    Queued(SessionRow, WaitRow, u32),
}

/// A chat: admitted at once when it can start, else queued (refused only when it could
/// never start, or the account already has [`MAX_QUEUED_PER_ACCOUNT`] turns waiting).
pub fn chat(conn: &mut Db, a: &Admission, limits: QueueLimits) -> Result<Chat, StoreError> {
    let tx = conn.savepoint()?;
    // What an admission wrote before it found the turn must wait is rolled back.
    let sp = tx.savepoint()?;
    let busy = match sessions::admit_or_wait(&sp, a, limits, None)? {
        Admitted::Now(session, turn) => {
            sp.commit()?;
            tx.commit()?;
            return Ok(Chat::Started(session, turn));
        }
        Admitted::Busy(busy) => busy,
    };
    drop(sp);
    let queued: i64 = tx.query_row(
        "SELECT count(*) FROM turn_waits WHERE state = 'waiting' AND account_id = ?1",
        [&a.account_id],
        |r| r.get(0),
    )?;
    if queued >= MAX_QUEUED_PER_ACCOUNT {
        return Err(StoreError::Limit(format!(
            "{queued} turns of this account wait to start, the limit of {MAX_QUEUED_PER_ACCOUNT} queued turns per account; wait for one to start, or cancel one (Ctrl-C in its `yy chat`, or `yy session stop SESSION`); now: {}",
            busy.reason
        )));
    }
    let agent = agents::get(&tx, &a.account_id, &busy.agent_id)?;
    let session = match a.session.as_deref() {
        Some(key) => sessions::open_session_of(&tx, key, &agent)?,
        None => sessions::new_session(&tx, &agent)?,
    };
    // Checked now so that a bad attachment is refused at once, and again when it starts.
    artifacts::attachable(&tx, &a.account_id, &a.attachments)?;
    let id = super::new_id();
    tx.execute(
        "INSERT INTO turn_waits (id, session_id, account_id, admin, agent_id, message,
             attachments, state, reason, created_at, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'waiting', ?8, ?9,
                 (SELECT coalesce(max(seq), 0) + 1 FROM turn_waits))",
        params![
            id,
            session.id,
            a.account_id,
            a.admin,
            agent.id,
            a.message,
            serde_json::to_string(&a.attachments).expect("strings serialize"),
            busy.reason,
            now_ms()
        ],
    )?;
    let wait = get(&tx, &id)?;
    let ahead = ahead(&tx, &wait)?;
    tx.commit()?;
    Ok(Chat::Queued(session, wait, ahead))
}

/// Ends waiting turns without starting them: `state` is `cancelled` or `refused`.
fn end_where(
    conn: &Db,
    filter: &str,
    key: &str,
    state: &str,
    reason: &str,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "UPDATE turn_waits SET state = ?2, reason = ?3, ended_at = ?4
         WHERE state = 'waiting' AND {filter} RETURNING id"
    ))?;
    let ids = stmt
        .query_map(params![key, state, reason, now_ms()], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Cancels one waiting turn; false when it no longer waits.
pub fn cancel(conn: &Db, id: &str, reason: &str) -> Result<bool, StoreError> {
    Ok(!end_where(conn, "id = ?1", id, "cancelled", reason)?.is_empty())
}

/// Cancels every turn waiting in a session (it is stopped or closed).
pub fn cancel_session(
    conn: &Db,
    session_id: &SessionId,
    reason: &str,
) -> Result<usize, StoreError> {
    Ok(end_where(conn, "session_id = ?1", session_id, "cancelled", reason)?.len())
}

/// Refuses every waiting turn an account asked for or whose agent it owns (it was
/// disabled).
pub fn refuse_account(conn: &Db, account_id: &str, reason: &str) -> Result<usize, StoreError> {
    let filter = "(account_id = ?1 OR agent_id IN (SELECT id FROM agents WHERE account_id = ?1))";
    Ok(end_where(conn, filter, account_id, "refused", reason)?.len())
}

/// Admits, oldest first, the first waiting turn of each agent that can start now; one
/// transaction each. A turn that could never start (its agent archived, its account
/// disabled, its session closed) is refused with the reason; one that still cannot start
/// keeps waiting with the reason brought up to date. Returns the Runners to wake.
pub fn dispatch(conn: &mut Db, limits: QueueLimits) -> Result<Vec<RunnerId>, StoreError> {
    let heads: Vec<String> = {
        let mut stmt = conn.prepare_cached(
            "SELECT id FROM turn_waits w WHERE state = 'waiting'
               AND NOT EXISTS (SELECT 1 FROM turn_waits e WHERE e.state = 'waiting'
                               AND e.agent_id = w.agent_id AND e.seq < w.seq)
             ORDER BY seq",
        )?;
        stmt.query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut runners = Vec::new();
    for id in heads {
        let tx = conn.savepoint()?;
        let w = get(&tx, &id)?;
        if !w.is_waiting() {
            continue;
        }
        let admission = Admission {
            account_id: w.account_id.clone(),
            admin: w.admin,
            agent: w.agent_id.clone(),
            session: Some(w.session_id.clone()),
            message: w.message.clone(),
            attachments: w.attachments.clone(),
            inputs: Vec::new(),
        };
        let sp = tx.savepoint()?;
        match sessions::admit_or_wait(&sp, &admission, limits, Some(&w.id)) {
            Ok(Admitted::Now(_, turn)) => {
                sp.execute("DELETE FROM turn_waits WHERE id = ?1", [&w.id])?;
                sp.commit()?;
                runners.push(turn.runner_id);
            }
            Ok(Admitted::Busy(busy)) => {
                drop(sp);
                if busy.reason != w.reason {
                    tx.execute(
                        "UPDATE turn_waits SET reason = ?2 WHERE id = ?1",
                        params![w.id, busy.reason],
                    )?;
                }
            }
            Err(e @ (StoreError::Sqlite(_) | StoreError::Task(_))) => return Err(e),
            Err(e) => {
                drop(sp);
                end_where(
                    &tx,
                    "id = ?1",
                    &w.id,
                    "refused",
                    &format!("refused when it was to start: {e}"),
                )?;
            }
        }
        tx.commit()?;
    }
    Ok(runners)
}

/// Deletes turns that ended without starting once they are older than `cutoff`.
pub fn compact(conn: &Db, cutoff: i64) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "DELETE FROM turn_waits WHERE state != 'waiting' AND ended_at < ?1",
        [cutoff],
    )?)
}
