//! The durable per-Runner command queue and the connection generations that fence it.
//!
//! States: pending -> leased -> running -> done | failed | cancelled, plus expired (never
//! started before its deadline) and uncertain (started, and its Runner's generation ended
//! without an outcome). Final states never change again, and nothing is ever replayed.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::ids::Kind;
use super::{StoreError, get_by_id, new_id, not_found};
use crate::api::ids::{CommandId, Generation, RunnerId};
use crate::api::machine::{
    self, CommandKind, CommandState, LeasedCommand, Outcome, RunnerCommand, RunnerStatus, Settles,
};
use crate::server::telemetry;
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Bounds on what may wait in one Runner's queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    pub max_pending: u32,
    pub max_pending_bytes: u64,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            max_pending: 1000,
            max_pending_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A running command whose deadline passed this long ago without an outcome is `uncertain`.
pub const OVERDUE_GRACE_MS: i64 = 30_000;

#[derive(Debug, Clone)]
pub struct CommandRow {
    pub id: CommandId,
    pub runner_id: RunnerId,
    pub kind: CommandKind,
    pub payload: String,
    pub state: CommandState,
    pub created_at: i64,
    pub deadline_at: i64,
    pub leased_at: Option<i64>,
    pub lease_generation: Option<Generation>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub cancel_requested_at: Option<i64>,
    pub result: Option<String>,
    pub error: Option<String>,
}

impl CommandRow {
    pub fn is_final(&self) -> bool {
        self.state.is_final()
    }

    /// The result as its kind's type; none when there is none, it is another kind's, or
    /// it does not read.
    pub fn result_as<T: machine::CommandResult>(&self) -> Option<T> {
        if !T::KINDS.contains(&self.kind) {
            return None;
        }
        serde_json::from_str(self.result.as_deref()?).ok()
    }

    pub fn view(self, with_result: bool) -> machine::Command {
        machine::Command {
            id: self.id,
            runner_id: self.runner_id,
            kind: self.kind,
            state: self.state,
            created_at: rfc3339(self.created_at),
            deadline_at: rfc3339(self.deadline_at),
            leased_at: rfc3339_opt(self.leased_at),
            generation: self.lease_generation,
            started_at: rfc3339_opt(self.started_at),
            finished_at: rfc3339_opt(self.finished_at),
            cancel_requested: self.cancel_requested_at.is_some(),
            error: self.error,
            result: if with_result {
                self.result.and_then(|r| serde_json::from_str(&r).ok())
            } else {
                None
            },
            waiting: None,
        }
    }
}

const COLUMNS: &str = "id, runner_id, kind, payload, state, created_at, deadline_at, leased_at,
    lease_generation, started_at, finished_at, cancel_requested_at, result, error";

fn row(r: &Row<'_>) -> rusqlite::Result<CommandRow> {
    Ok(CommandRow {
        id: r.get(0)?,
        runner_id: r.get(1)?,
        kind: r.get(2)?,
        payload: r.get(3)?,
        state: r.get(4)?,
        created_at: r.get(5)?,
        deadline_at: r.get(6)?,
        leased_at: r.get(7)?,
        lease_generation: r.get(8)?,
        started_at: r.get(9)?,
        finished_at: r.get(10)?,
        cancel_requested_at: r.get(11)?,
        result: r.get(12)?,
        error: r.get(13)?,
    })
}

pub fn get(conn: &Db, id: &CommandId) -> Result<CommandRow, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM runner_commands WHERE id = ?1");
    get_by_id(conn, Kind::Command, &sql, id.as_str(), row)
}

/// A command as seen by its Runner: another Runner's command does not exist for it.
fn get_for_runner(
    conn: &Db,
    runner_id: &RunnerId,
    id: &CommandId,
) -> Result<CommandRow, StoreError> {
    let found = get(conn, id)?;
    if found.runner_id != *runner_id {
        return Err(StoreError::NotFound(format!("no command {id:?}")));
    }
    Ok(found)
}

pub fn list(conn: &Db, runner_id: &RunnerId, limit: u32) -> Result<Vec<CommandRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM runner_commands WHERE runner_id = ?1 ORDER BY seq DESC LIMIT ?2"
    ))?;
    let rows = stmt
        .query_map(params![runner_id, limit], row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Adds a command to an enabled Runner's queue, within the queue's bounds (which a
/// `cancel` ignores: stopping work must never be refused for lack of room).
pub fn enqueue(
    conn: &mut Db,
    runner_id: &RunnerId,
    command: &RunnerCommand,
    timeout_ms: Option<u64>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let tx = conn.savepoint()?;
    let row = enqueue_in(&tx, runner_id, command, timeout_ms, limits)?;
    tx.commit()?;
    Ok(row)
}

/// Sets every Runner's pending counts from its rows, for a copy whose rows arrived with
/// their counts already (`yy store migrate`, a restore): the triggers counted them again.
pub fn recount_pending(conn: &Db) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE runners SET
             pending_commands = (SELECT count(*) FROM runner_commands c
                                 WHERE c.runner_id = runners.id AND c.state = 'pending'),
             pending_bytes = (SELECT coalesce(sum(c.payload_bytes), 0) FROM runner_commands c
                              WHERE c.runner_id = runners.id AND c.state = 'pending')",
        [],
    )
}

/// [`enqueue`] inside the caller's transaction. The deadline is the kind's
/// ([`CommandKind::deadline`]); `timeout_ms` only for a kind whose caller chooses it.
pub(crate) fn enqueue_in(
    conn: &Db,
    runner_id: &RunnerId,
    command: &RunnerCommand,
    timeout_ms: Option<u64>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let kind = command.kind();
    let timeout_ms = kind
        .deadline()
        .resolve(timeout_ms)
        .map_err(StoreError::Invalid)? as i64;
    // What waits already is kept beside the Runner (migration 25's triggers): counting the
    // pending rows here would cost time in proportion to the backlog.
    let (disabled, count, bytes): (Option<i64>, u32, i64) = not_found(
        conn.prepare_cached(
            "SELECT disabled_at, pending_commands, pending_bytes FROM runners WHERE id = ?1",
        )?
        .query_row([runner_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))),
        || format!("no runner {runner_id:?}"),
    )?;
    if disabled.is_some() {
        return Err(StoreError::Conflict(format!(
            "runner {runner_id} is disabled; register a new runner for its source"
        )));
    }
    let payload = command.payload().to_string();
    // Stopping work must never be refused for lack of room.
    if !kind.is_stop() {
        if count >= limits.max_pending {
            return Err(StoreError::Limit(format!(
                "runner {runner_id} already has {}, the limit: wait until it catches up (is it online? `yy runner show {runner_id}`)",
                crate::api::words::plural(count, "pending command", "pending commands")
            )));
        }
        if (bytes + payload.len() as i64) as u64 > limits.max_pending_bytes {
            return Err(StoreError::Limit(format!(
                "runner {runner_id}'s pending commands would exceed {} bytes, the limit: wait until it catches up",
                limits.max_pending_bytes
            )));
        }
    }
    let now = now_ms();
    let id = new_id();
    conn.prepare_cached(
        "INSERT INTO runner_commands (id, runner_id, kind, payload, payload_bytes, state, created_at, deadline_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7)",
    )?
    .execute(params![
        id,
        runner_id,
        kind,
        payload,
        payload.len() as i64,
        now,
        now + timeout_ms
    ])?;
    // What was just inserted (not read back: enqueueing is on every request's path).
    Ok(CommandRow {
        id: id.into(),
        runner_id: runner_id.clone(),
        kind,
        payload,
        state: CommandState::Pending,
        created_at: now,
        deadline_at: now + timeout_ms,
        leased_at: None,
        lease_generation: None,
        started_at: None,
        finished_at: None,
        cancel_requested_at: None,
        result: None,
        error: None,
    })
}

/// How a connecting instance relates to the one that may be online.
#[derive(Debug, Clone, Default)]
pub struct Takeover {
    /// The instance that last connected from the same data directory.
    pub previous: Option<String>,
    /// Take over from any instance online (`yy runner run --replace`).
    pub replace: bool,
}

/// Starts a new generation for a Runner instance. Work leased to an earlier generation and
/// never started goes back to the queue; work that had started becomes `uncertain`.
/// Refused while another instance is online, unless it is this one's predecessor in the
/// same data directory or `takeover.replace`.
pub fn connect(
    conn: &mut Db,
    runner_id: &RunnerId,
    instance: &str,
    status: &RunnerStatus,
    takeover: &Takeover,
) -> Result<machine::Connected, StoreError> {
    let tx = conn.savepoint()?;
    if !takeover.replace
        && let Some(online) = super::runners::online_instance(&tx, runner_id)?
        && online.instance != instance
        && takeover.previous.as_deref() != Some(online.instance.as_str())
    {
        return Err(StoreError::RunnerOnline(online.refusal(runner_id)));
    }
    let now = now_ms();
    let generation: Generation = tx
        .prepare_cached(
            "UPDATE runners SET generation = generation + 1, instance_id = ?2, last_seen_at = ?3,
             version = ?4, capabilities = ?5, status = ?6
         WHERE id = ?1 AND disabled_at IS NULL RETURNING generation",
        )?
        .query_row(
            params![
                runner_id,
                instance,
                now,
                status.version,
                serde_json::to_string(&status.capabilities).expect("strings serialize"),
                serde_json::to_string(status).expect("status serializes"),
            ],
            |r| r.get(0),
        )?;
    let uncertain: Vec<(String, CommandKind)> = {
        let mut stmt = tx.prepare_cached(
            "UPDATE runner_commands SET state = 'uncertain', finished_at = ?3,
             error = 'the Runner connection that was running it ended before an outcome was reported; it will not run again'
         WHERE runner_id = ?1 AND state = 'running' AND lease_generation < ?2 RETURNING id, kind",
        )?;
        stmt.query_map(params![runner_id, generation, now], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?
    };
    let requeued = ids(
        &tx,
        "UPDATE runner_commands SET state = 'pending', leased_at = NULL, lease_generation = NULL
         WHERE runner_id = ?1 AND state = 'leased' AND lease_generation < ?2 RETURNING id",
        params![runner_id, generation],
    )?;
    tx.commit()?;
    for (_, kind) in &uncertain {
        telemetry::command_ended(kind.as_sql(), CommandState::Uncertain.as_sql());
    }
    Ok(machine::Connected {
        runner_id: runner_id.clone(),
        generation,
        uncertain: uncertain.into_iter().map(|(id, _)| id).collect(),
        requeued,
        // The machine API fills these in from the token it authenticated.
        token_expires_at_ms: None,
        rotate_token: false,
        features: vec![machine::features::COMMAND_BATCHES.to_string()],
    })
}

/// The kinds of the commands a statement ended (`RETURNING kind`).
fn kinds(conn: &Db, sql: &str, p: impl super::db::Params) -> Result<Vec<CommandKind>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let kinds = stmt
        .query_map(p, |r| r.get::<_, CommandKind>(0))?
        .collect::<Result<_, _>>()?;
    Ok(kinds)
}

fn ids(conn: &Db, sql: &str, p: impl super::db::Params) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let ids = stmt
        .query_map(p, |r| r.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Leases up to `max` pending commands to `generation`, oldest first.
pub fn lease(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    max: u32,
) -> Result<Vec<LeasedCommand>, StoreError> {
    let tx = conn.savepoint()?;
    let now = now_ms();
    let expired = kinds(
        &tx,
        "UPDATE runner_commands SET state = 'expired', finished_at = ?2,
             error = 'the deadline passed before the Runner took the command'
         WHERE runner_id = ?1 AND state = 'pending' AND deadline_at <= ?2 RETURNING kind",
        params![runner_id, now],
    )?;
    let mut stmt = tx.prepare_cached(
        "UPDATE runner_commands SET state = 'leased', leased_at = ?3, lease_generation = ?4
         WHERE seq IN (SELECT seq FROM runner_commands
                       WHERE runner_id = ?1 AND state = 'pending' ORDER BY seq LIMIT ?2)
         RETURNING id, kind, payload, deadline_at, seq, created_at",
    )?;
    let mut waited = Vec::new();
    let mut leased: Vec<(i64, LeasedCommand)> = stmt
        .query_map(params![runner_id, max, now, generation], |r| {
            waited.push(now - r.get::<_, i64>(5)?);
            Ok((r.get(4)?, leased_command(r)?))
        })?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    // A worker turn's team tool id is minted here, for this lease only: it travels in the
    // answer and is never stored (only its SHA-256 is).
    for (_, c) in &mut leased {
        if c.kind == CommandKind::WorkerTurn.as_sql() {
            c.team_tools = super::team_tools::grant_for_lease(&tx, &c.payload)?;
        }
    }
    tx.commit()?;
    Ok(committed_lease(expired, waited, leased))
}

/// A committed lease's commands in queue order, once its expiries and pickups are counted.
fn committed_lease(
    expired: Vec<CommandKind>,
    waited: Vec<i64>,
    mut leased: Vec<(i64, LeasedCommand)>,
) -> Vec<LeasedCommand> {
    for kind in expired {
        telemetry::command_ended(kind.as_sql(), CommandState::Expired.as_sql());
    }
    for ms in waited {
        telemetry::command_picked_up(ms);
    }
    leased.sort_by_key(|(seq, _)| *seq);
    leased.into_iter().map(|(_, c)| c).collect()
}

/// [`lease`] beside the other replicas' transactions (PostgreSQL, in a transaction of its
/// own without the store's lock, see [`super::Store::call_apart_relaxed`]): the pending
/// commands it expires or leases are taken with `FOR UPDATE SKIP LOCKED`, so it waits for
/// none that another transaction holds (a cancel, a sweep); the one row it waits for is
/// the Runner's, taken first by [`super::runners::fence`]. `None` when a worker turn is
/// among them: its lease writes a team tool grant, which may wait, so it is leased by
/// [`lease`] under the store's lock. On SQLite it is [`lease`].
pub fn lease_skipping_locked(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    max: u32,
) -> Result<Option<Vec<LeasedCommand>>, StoreError> {
    if conn.dialect() == super::Dialect::Sqlite {
        return lease(conn, runner_id, generation, max).map(Some);
    }
    let tx = conn.savepoint()?;
    let now = now_ms();
    let expired = kinds(
        &tx,
        "UPDATE runner_commands SET state = 'expired', finished_at = ?2,
             error = 'the deadline passed before the Runner took the command'
         WHERE seq IN (SELECT seq FROM runner_commands
                       WHERE runner_id = ?1 AND state = 'pending' AND deadline_at <= ?2
                       FOR UPDATE SKIP LOCKED)
         RETURNING kind",
        params![runner_id, now],
    )?;
    // The oldest `max` that nobody else holds; none if a worker turn is among them.
    let mut stmt = tx.prepare_cached(
        "WITH picked AS (SELECT seq, kind FROM runner_commands
                         WHERE runner_id = ?1 AND state = 'pending' ORDER BY seq LIMIT ?2
                         FOR UPDATE SKIP LOCKED)
         UPDATE runner_commands c SET state = 'leased', leased_at = ?3, lease_generation = ?4
         FROM picked
         WHERE c.seq = picked.seq
           AND NOT EXISTS (SELECT 1 FROM picked WHERE picked.kind = ?5)
         RETURNING c.id, c.kind, c.payload, c.deadline_at, c.seq, c.created_at",
    )?;
    let mut waited = Vec::new();
    let leased: Vec<(i64, LeasedCommand)> = stmt
        .query_map(
            params![
                runner_id,
                max,
                now,
                generation,
                CommandKind::WorkerTurn.as_sql()
            ],
            |r| {
                waited.push(now - r.get::<_, i64>(5)?);
                Ok((r.get(4)?, leased_command(r)?))
            },
        )?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    let turn_waiting = leased.is_empty()
        && tx
            .prepare_cached(
                "SELECT 1 FROM runner_commands
                 WHERE runner_id = ?1 AND state = 'pending' AND kind = ?2 LIMIT 1",
            )?
            .query_row(params![runner_id, CommandKind::WorkerTurn.as_sql()], |_| {
                Ok(())
            })
            .optional()?
            .is_some();
    tx.commit()?;
    // Nothing was leased when a turn is waiting.
    let leased = committed_lease(expired, waited, leased);
    Ok((!turn_waiting).then_some(leased))
}

/// A leased command from a lease's `RETURNING id, kind, payload, deadline_at`.
fn leased_command(r: &Row<'_>) -> rusqlite::Result<LeasedCommand> {
    let payload: String = r.get(2)?;
    Ok(LeasedCommand {
        id: r.get(0)?,
        kind: r.get::<_, CommandKind>(1)?.as_sql().into(),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        deadline_ms: r.get(3)?,
        team_tools: None,
    })
}

/// Why a Runner may not start a command.
#[derive(Debug, thiserror::Error)]
pub enum StartRefused {
    #[error("command {0} was cancelled; do not run it")]
    Cancelled(String),
    #[error("command {0} passed its deadline; do not run it")]
    Expired(String),
    /// Not leased to this generation, or already past starting.
    #[error("{0}")]
    NotLeased(String),
    /// Its agent, profile or Runner no longer allows it.
    #[error("{0}")]
    Unauthorized(String),

    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for StartRefused {
    fn from(e: rusqlite::Error) -> Self {
        StartRefused::Store(e.into())
    }
}

/// The re-check before execution: the command is still leased to this generation, not
/// cancelled, and within its deadline. Granting it marks the command running and returns
/// its deadline.
pub fn start(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    id: &CommandId,
) -> Result<i64, StartRefused> {
    let tx = conn.savepoint()?;
    let cmd = get_for_runner(&tx, runner_id, id)?;
    let now = now_ms();
    if cmd.lease_generation != Some(generation) {
        return Err(StartRefused::NotLeased(format!(
            "command {id} is not leased to this connection generation"
        )));
    }
    match cmd.state {
        // A retried start whose first answer was lost.
        CommandState::Running => return Ok(cmd.deadline_at),
        CommandState::Leased => {}
        other => {
            return Err(StartRefused::NotLeased(format!("command {id} is {other}")));
        }
    }
    let refusal = if cmd.cancel_requested_at.is_some() {
        Some((
            CommandState::Cancelled,
            StartRefused::Cancelled(id.to_string()),
            "cancelled before it started".to_string(),
        ))
    } else if cmd.deadline_at <= now {
        Some((
            CommandState::Expired,
            StartRefused::Expired(id.to_string()),
            "the deadline passed before it started".to_string(),
        ))
    } else {
        None
    };
    let refusal = match refusal {
        Some(r) => Some(r),
        None => still_authorized(&tx, &cmd)?.map(|why| {
            (
                CommandState::Failed,
                StartRefused::Unauthorized(why.clone()),
                why,
            )
        }),
    };
    if let Some((state, refusal, error)) = refusal {
        tx.prepare_cached(
            "UPDATE runner_commands SET state = ?2, finished_at = ?3, error = ?4 WHERE id = ?1",
        )?
        .execute(params![id, state, now, error])?;
        tx.commit()?;
        return Err(refusal);
    }
    tx.prepare_cached("UPDATE runner_commands SET state = ?2, started_at = ?3 WHERE id = ?1")?
        .execute(params![id, CommandState::Running, now])?;
    tx.commit()?;
    Ok(cmd.deadline_at)
}

/// Records a command's outcome. Exactly one outcome wins: a second, different one is a
/// conflict; the same one again (a retried report) is accepted.
pub fn complete(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    id: &CommandId,
    outcome: Outcome,
    result: Option<&str>,
    error: Option<&str>,
) -> Result<CommandRow, StoreError> {
    let tx = conn.savepoint()?;
    let cmd = get_for_runner(&tx, runner_id, id)?;
    if cmd.is_final() {
        if cmd.state == outcome.state() {
            return Ok(cmd);
        }
        return Err(StoreError::Conflict(format!(
            "command {id} already ended as {}",
            cmd.state
        )));
    }
    if cmd.lease_generation != Some(generation) {
        return Err(StoreError::Conflict(format!(
            "command {id} is not leased to this connection generation"
        )));
    }
    if outcome == Outcome::Cancelled && cmd.cancel_requested_at.is_none() {
        return Err(StoreError::Invalid(format!(
            "command {id} was not cancelled; report done, failed or uncertain"
        )));
    }
    let now = now_ms();
    tx.prepare_cached(
        "UPDATE runner_commands SET state = ?2, finished_at = ?3, result = ?4, error = ?5 WHERE id = ?1",
    )?
    .execute(params![id, outcome.state(), now, result, error])?;
    if let (Outcome::Done, Some(result)) = (outcome, result) {
        super::computers::record_workspace_usage(&tx, &cmd, result)?;
    }
    super::computer_idle::command_ended(&tx, &cmd, now)?;
    tx.commit()?;
    telemetry::command_ended(cmd.kind.as_sql(), outcome.state().as_sql());
    // The row as just written (not read back: completing is on every command's path).
    Ok(CommandRow {
        state: outcome.state(),
        finished_at: Some(now),
        result: result.map(str::to_string),
        error: error.map(str::to_string),
        ..cmd
    })
}

/// What cancelling did.
pub enum Cancelled {
    /// It had not been leased: it is cancelled and will never run.
    Dequeued(CommandRow),
    /// It is with the Runner: a `cancel` command was queued; the outcome comes from there.
    Requested(CommandRow),
}

pub fn cancel(conn: &mut Db, id: &CommandId) -> Result<Cancelled, StoreError> {
    let tx = conn.savepoint()?;
    let mut cmd = get(&tx, id)?;
    let now = now_ms();
    // A lease on PostgreSQL does not wait for the store's lock: only a command that is
    // still pending when the change is made is cancelled in place; one leased meanwhile
    // is asked to stop as any leased one.
    if cmd.state == CommandState::Pending
        && tx
            .prepare_cached(
                "UPDATE runner_commands SET state = 'cancelled', finished_at = ?2,
                     cancel_requested_at = ?2, error = 'cancelled before it was delivered'
                 WHERE id = ?1 AND state = 'pending'",
            )?
            .execute(params![id, now])?
            == 0
    {
        cmd = get(&tx, id)?;
    }
    let outcome = match cmd.state {
        CommandState::Pending => Cancelled::Dequeued(get(&tx, id)?),
        CommandState::Leased | CommandState::Running => {
            if cmd.cancel_requested_at.is_none() {
                tx.prepare_cached(
                    "UPDATE runner_commands SET cancel_requested_at = ?2 WHERE id = ?1",
                )?
                .execute(params![id, now])?;
                let cancel = RunnerCommand::Cancel(machine::CancelPayload {
                    command_id: id.to_string(),
                });
                enqueue_in(&tx, &cmd.runner_id, &cancel, None, QueueLimits::default())?;
            }
            Cancelled::Requested(get(&tx, id)?)
        }
        state => {
            return Err(StoreError::Conflict(format!(
                "command {id} already ended as {state}; nothing to cancel"
            )));
        }
    };
    tx.commit()?;
    if let Cancelled::Dequeued(row) = &outcome {
        telemetry::command_ended(row.kind.as_sql(), CommandState::Cancelled.as_sql());
    }
    Ok(outcome)
}

/// Ends what can no longer happen: pending past its deadline -> expired; leased and never
/// started past its deadline -> expired; running long past its deadline -> uncertain.
/// Returns the Runners whose commands changed.
pub fn sweep(conn: &mut Db) -> Result<Vec<RunnerId>, StoreError> {
    let tx = conn.savepoint()?;
    let now = now_ms();
    let ended = |sql: &str,
                 p: &[&dyn rusqlite::ToSql]|
     -> Result<Vec<(RunnerId, CommandKind)>, StoreError> {
        let mut stmt = tx.prepare_cached(sql)?;
        let rows = stmt
            .query_map(p, |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    };
    let expired = ended(
        "UPDATE runner_commands SET state = 'expired', finished_at = ?1,
             error = 'the deadline passed before the command started'
         WHERE state IN ('pending', 'leased') AND deadline_at <= ?1 RETURNING runner_id, kind",
        &[&now],
    )?;
    let overdue = ended(
        "UPDATE runner_commands SET state = 'uncertain', finished_at = ?1,
             error = 'no outcome was reported by the deadline; it will not run again'
         WHERE state = 'running' AND deadline_at <= ?2 RETURNING runner_id, kind",
        &[&now, &(now - OVERDUE_GRACE_MS)],
    )?;
    tx.commit()?;
    for (state, list) in [
        (CommandState::Expired, &expired),
        (CommandState::Uncertain, &overdue),
    ] {
        for (_, kind) in list {
            telemetry::command_ended(kind.as_sql(), state.as_sql());
        }
    }
    let mut runners: Vec<RunnerId> = expired
        .into_iter()
        .chain(overdue)
        .map(|(runner, _)| runner)
        .collect();
    runners.sort();
    runners.dedup();
    Ok(runners)
}

/// The one settle path: once commands end, the objects they drive (turns, stops and checks
/// of sessions; computers) follow their outcomes. `ended`: the kind of the command that
/// just ended, so that only what it drives is looked at (a ping changes nothing, and
/// settling everything on every outcome cost a transaction or two per command); `None`
/// after a sweep or a new generation, which may have ended commands of any kind.
pub fn settle(conn: &mut Db, ended: Option<CommandKind>) -> Result<(), StoreError> {
    let scope = ended.map(CommandKind::settles);
    if matches!(scope, None | Some(Settles::Session | Settles::Both)) {
        super::sessions::settle(conn)?;
    }
    if matches!(scope, None | Some(Settles::Computer | Settles::Both)) {
        super::computers::settle(conn)?;
    }
    // An image waits for its acceptance, then for the last computer command to end.
    if matches!(
        scope,
        None | Some(Settles::Computer | Settles::Both | Settles::Image)
    ) {
        super::runner_images::settle(conn)?;
    }
    Ok(())
}

/// The re-check of authorization before work starts: the agent a turn or computer
/// operation acts for is still active, its profile is still allowed on this Runner, and
/// the Runner still serves the agent's source. Stops are never refused. `Some(why)` refuses.
fn still_authorized(conn: &Db, cmd: &CommandRow) -> Result<Option<String>, StoreError> {
    let payload: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap_or_default();
    let Ok(command) = RunnerCommand::parse(cmd.kind.as_sql(), &payload) else {
        return Ok(None);
    };
    let agent_sql = "SELECT agent_id FROM sessions WHERE id = ?1";
    let computer_sql = "SELECT agent_id FROM computers WHERE id = ?1";
    let agent: Option<String> = match &command {
        RunnerCommand::SessionTurn(p) => conn
            .query_row(agent_sql, [&p.session_id], |r| r.get(0))
            .optional()?,
        // A shared computer's member: its own grant is checked too (`computer_grants`).
        RunnerCommand::WorkerTurn(p) => {
            if let Some(why) = super::computer_grants::still_granted(conn, p)? {
                return Ok(Some(why));
            }
            Some(p.agent_id().to_string())
        }
        RunnerCommand::ComputerStart(p) => Some(p.agent_id.clone()),
        RunnerCommand::ComputerExec(p) => conn
            .query_row(computer_sql, [&p.computer_id], |r| r.get(0))
            .optional()?,
        RunnerCommand::ComputerScreen(p) => conn
            .query_row(computer_sql, [&p.computer_id], |r| r.get(0))
            .optional()?,
        // Stops are never refused; the rest act for no agent (diagnostics, the operator's
        // own control of a computer, image checks).
        RunnerCommand::Ping(_)
        | RunnerCommand::Fetch(_)
        | RunnerCommand::Cancel(_)
        | RunnerCommand::SessionStop(_)
        | RunnerCommand::SessionClose(_)
        | RunnerCommand::SessionList(_)
        | RunnerCommand::SessionCheck(_)
        | RunnerCommand::ComputerStop(_)
        | RunnerCommand::ComputerRemove(_)
        | RunnerCommand::ComputerPause(_)
        | RunnerCommand::ComputerResume(_)
        | RunnerCommand::ComputerShell(_)
        | RunnerCommand::EgressLog(_)
        | RunnerCommand::BrowserClose(_)
        | RunnerCommand::BrowserScreen(_)
        | RunnerCommand::BrowserPause(_)
        | RunnerCommand::BrowserResume(_)
        | RunnerCommand::ComputerImageAccept(_) => None,
    };
    let Some(agent) = agent else {
        return Ok(None);
    };
    struct Grant {
        name: String,
        archived: bool,
        profile: String,
        allowed: String,
        disabled: bool,
        /// The owner's name when its account is disabled.
        owner_disabled: Option<String>,
    }
    let found = conn
        .query_row(
            "SELECT g.name, g.archived_at IS NOT NULL, p.name, r.allowed_profiles,
                    r.disabled_at IS NOT NULL,
                    CASE WHEN a.disabled_at IS NOT NULL THEN a.username END
             FROM agents g JOIN profiles p ON p.id = g.profile_id
             JOIN runners r ON r.id = ?2 AND r.source_id = g.source_id
             JOIN accounts a ON a.id = g.account_id
             WHERE g.id = ?1",
            params![agent, cmd.runner_id],
            |r| {
                Ok(Grant {
                    name: r.get(0)?,
                    archived: r.get(1)?,
                    profile: r.get(2)?,
                    allowed: r.get(3)?,
                    disabled: r.get(4)?,
                    owner_disabled: r.get(5)?,
                })
            },
        )
        .optional()?;
    let Some(Grant {
        name,
        archived,
        profile,
        allowed,
        disabled,
        owner_disabled,
    }) = found
    else {
        return Ok(Some(
            "no longer authorized: the agent's source is no longer served by this Runner".into(),
        ));
    };
    let allowed: Vec<String> = serde_json::from_str(&allowed).unwrap_or_default();
    Ok(if let Some(owner) = owner_disabled {
        Some(format!(
            "no longer authorized: account {owner:?}, which owns agent {name:?}, was disabled"
        ))
    } else if archived {
        Some(format!("no longer authorized: agent {name:?} was archived"))
    } else if disabled {
        Some("no longer authorized: the Runner was disabled".into())
    } else if !allowed.contains(&profile) {
        Some(format!(
            "no longer authorized: profile {profile:?} of agent {name:?} is not among the Runner's allowedProfiles"
        ))
    } else {
        None
    })
}
