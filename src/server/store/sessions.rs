//! Bot sessions: admission of a turn, the events a Runner streams, and the transcript.
//! How turns, stops and checks end is in `session_ends`.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::commands::{self, QueueLimits};
use super::ids::Kind;
use super::{
    StoreError, agents, artifacts, catalog, computer_grants, computers, get_by_id, new_id,
    not_found, runners,
};
use crate::api::browser::BrowserUse;
use crate::api::capabilities;
use crate::api::ids::{CommandId, Generation, RunnerId, SessionId};
use crate::api::machine::{CommandState, RunnerCommand};
use crate::api::params::AgentEnv;
use crate::api::sessions::{
    self as wire, HistoryMessage, TurnEvent, TurnPayload, WorkerTurnPayload,
};

use crate::api::states::{SessionState, TurnState};
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Turns running at once over the whole control plane (the design limit: 4 execution slots).
pub const MAX_RUNNING_TURNS: i64 = 4;
/// Text messages carried along when a session continues on another Runner.
pub const HISTORY_MESSAGES: usize = 20;

#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: SessionId,
    pub account_id: String,
    pub agent_id: String,
    pub agent: String,
    pub owner: String,
    pub runner_id: Option<RunnerId>,
    pub hermes_session_id: Option<String>,
    pub state: SessionState,
    pub stop_command_id: Option<CommandId>,
    pub cleanup_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The state of its newest turn, if any.
    pub last_turn: Option<TurnState>,
}

impl SessionRow {
    pub fn view(self, turns: Option<Vec<wire::Turn>>) -> wire::Session {
        wire::Session {
            id: self.id,
            agent: self.agent,
            owner: self.owner,
            runner_id: self.runner_id,
            hermes_session_id: self.hermes_session_id,
            state: self.state,
            stopping: self.stop_command_id.is_some(),
            cleanup_reason: self.cleanup_reason,
            created_at: rfc3339(self.created_at),
            updated_at: rfc3339(self.updated_at),
            last_turn: self.last_turn,
            turns,
        }
    }
}

const SESSION_SELECT: &str = "SELECT s.id, s.account_id, s.agent_id, g.name, a.username, s.runner_id,
        s.hermes_session_id, s.state, s.stop_command_id, s.cleanup_reason, s.created_at, s.updated_at,
        (SELECT t.state FROM session_turns t WHERE t.session_id = s.id ORDER BY t.seq DESC LIMIT 1)
    FROM sessions s JOIN agents g ON g.id = s.agent_id JOIN accounts a ON a.id = s.account_id";

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    from_columns!(r => SessionRow {
        id, account_id, agent_id, agent, owner, runner_id, hermes_session_id, state,
        stop_command_id, cleanup_reason, created_at, updated_at, last_turn,
    })
}

pub fn get(conn: &Db, id: &SessionId) -> Result<SessionRow, StoreError> {
    let sql = format!("{SESSION_SELECT} WHERE s.id = ?1");
    get_by_id(conn, Kind::Session, &sql, id.as_str(), session_row)
}

pub fn list(conn: &Db, agent_id: Option<&str>) -> Result<Vec<SessionRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "{SESSION_SELECT} WHERE ?1 IS NULL OR s.agent_id = ?1 ORDER BY s.updated_at DESC LIMIT 200"
    ))?;
    let rows = stmt
        .query_map([agent_id], session_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

#[derive(Debug, Clone)]
pub struct TurnRow {
    pub id: String,
    pub session_id: SessionId,
    pub seq: i64,
    pub runner_id: RunnerId,
    pub command_id: CommandId,
    pub message: String,
    pub state: TurnState,
    pub final_text: Option<String>,
    pub usage: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub check_result: Option<String>,
}

impl TurnRow {
    pub fn view(self, tools: Vec<wire::ToolCall>) -> wire::Turn {
        wire::Turn {
            id: self.id,
            seq: self.seq,
            runner_id: Some(self.runner_id),
            command_id: Some(self.command_id),
            message: self.message,
            state: self.state,
            final_text: self.final_text,
            usage: self.usage.and_then(|u| serde_json::from_str(&u).ok()),
            error: self.error,
            created_at: rfc3339(self.created_at),
            finished_at: rfc3339_opt(self.finished_at),
            check: self
                .check_result
                .and_then(|c| serde_json::from_str(&c).ok()),
            tools,
        }
    }
}

pub(super) const TURN_COLUMNS: &str =
    "id, session_id, seq, runner_id, command_id, message, state, final_text,
    usage, error, created_at, finished_at, check_result";

pub(super) fn turn_row(r: &Row<'_>) -> rusqlite::Result<TurnRow> {
    Ok(TurnRow {
        id: r.get(0)?,
        session_id: r.get(1)?,
        seq: r.get(2)?,
        runner_id: r.get(3)?,
        command_id: r.get(4)?,
        message: r.get(5)?,
        state: r.get(6)?,
        final_text: r.get(7)?,
        usage: r.get(8)?,
        error: r.get(9)?,
        created_at: r.get(10)?,
        finished_at: r.get(11)?,
        check_result: r.get(12)?,
    })
}

pub fn turns(conn: &Db, session_id: &SessionId) -> Result<Vec<TurnRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {TURN_COLUMNS} FROM session_turns WHERE session_id = ?1 ORDER BY seq"
    ))?;
    let rows = stmt
        .query_map([session_id], turn_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn get_turn(conn: &Db, turn_id: &str) -> Result<TurnRow, StoreError> {
    not_found(
        conn.query_row(
            &format!("SELECT {TURN_COLUMNS} FROM session_turns WHERE id = ?1"),
            [turn_id],
            turn_row,
        ),
        || format!("no turn {turn_id:?}"),
    )
}

/// Tool calls of a turn, from its events.
pub fn tool_calls(conn: &Db, turn_id: &str) -> Result<Vec<wire::ToolCall>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT type, payload FROM session_events
         WHERE turn_id = ?1 AND type IN ('tool.start', 'tool.complete') ORDER BY seq",
    )?;
    let mut calls: Vec<wire::ToolCall> = Vec::new();
    for row in stmt.query_map([turn_id], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })? {
        let (kind, payload) = row?;
        let payload = serde_json::from_str(&payload).unwrap_or_default();
        let (tool_id, name, done) = match TurnEvent::from_parts(&kind, payload) {
            Ok(TurnEvent::ToolStart(t)) => (t.tool_id, t.name, None),
            Ok(TurnEvent::ToolComplete(t)) => (t.tool_id, t.name, Some((t.args, t.result))),
            _ => continue,
        };
        match calls.iter_mut().find(|c| c.tool_id == tool_id) {
            Some(call) => {
                if let Some((args, result)) = done {
                    call.args = Some(args);
                    call.result = Some(result);
                }
            }
            None => {
                let (args, result) = done.unzip();
                calls.push(wire::ToolCall {
                    tool_id,
                    name,
                    args,
                    result,
                })
            }
        }
    }
    Ok(calls)
}

/// A turn asked for by `account_id`; names resolve within that account, and an agent of
/// another account (given by id) is only usable by an admin.
pub struct Admission {
    pub account_id: String,
    pub admin: bool,
    pub agent: String,
    pub session: Option<SessionId>,
    pub message: String,
    /// Uploaded files (artifact ids) to put into a computer agent's workspace first.
    pub attachments: Vec<String>,
    /// Artifacts to put into a computer agent's workspace first (the scheduler's turns: a
    /// subtask's inputs and its dependencies' results, the results an admin reviews).
    pub inputs: Vec<artifacts::InputFile>,
}

/// Why a turn cannot start now although it may later: it waits in the chat queue
/// (`turn_waits`), or the scheduler's work item stays queued.
#[derive(Debug, Clone)]
pub struct Busy {
    /// The agent the turn is for.
    pub agent_id: String,
    /// Said to the person waiting.
    pub reason: String,
    /// Every slot of the control plane is taken (not only this agent busy).
    pub slots: bool,
}

/// What an admission did.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // short-lived, returned once per admission
pub enum Admitted {
    Now(SessionRow, TurnRow),
    Busy(Busy),
}

/// Admits a turn: agent, Runner, profile permission and slots are checked, and the session,
/// turn and Runner command are written, in one transaction.
pub fn admit_turn(
    conn: &mut Db,
    a: &Admission,
    limits: QueueLimits,
) -> Result<(SessionRow, TurnRow), StoreError> {
    let tx = conn.savepoint()?;
    let admitted = admit_in(&tx, a, limits)?;
    tx.commit()?;
    Ok(admitted)
}

/// [`admit_turn`] inside the caller's transaction (the scheduler records what it admitted
/// in the same one). A busy agent or a full control plane is refused (`Conflict`, `Limit`).
pub fn admit_in(
    tx: &Db,
    a: &Admission,
    limits: QueueLimits,
) -> Result<(SessionRow, TurnRow), StoreError> {
    match admit_or_wait(tx, a, limits, None)? {
        Admitted::Now(session, turn) => Ok((session, turn)),
        Admitted::Busy(b) if b.slots => Err(StoreError::Limit(format!(
            "{}; try again when one ends",
            b.reason
        ))),
        Admitted::Busy(b) => Err(StoreError::Conflict(b.reason)),
    }
}

/// The checks of an admission that do not depend on what runs now: the asker and the
/// agent's owner are enabled accounts, the agent is active and the asker may use it.
pub fn check_asker(
    tx: &Db,
    account_id: &str,
    admin: bool,
    agent: &agents::AgentRow,
) -> Result<(), StoreError> {
    if agent.account_id != account_id && !admin {
        return Err(StoreError::NotFound(format!(
            "no agent named {:?}: see `yy agent list`",
            agent.name
        )));
    }
    for id in [account_id, agent.account_id.as_str()] {
        if let Some(name) = super::accounts::disabled_name(tx, id)? {
            return Err(StoreError::Forbidden(format!(
                "account {name:?} is disabled: its turns are refused (an admin may enable it with `yy account enable {name}`)"
            )));
        }
    }
    if agent.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "agent {:?} is archived",
            agent.name
        )));
    }
    Ok(())
}

/// [`admit_in`], but a turn that may start later is answered with [`Admitted::Busy`]
/// instead of an error: its agent is in a turn, an earlier turn of the agent waits in the
/// chat queue, every slot is taken, or its computer is settling. Everything else that
/// would refuse it is checked first. `wait`: the waiting turn being admitted now (its id
/// becomes the turn's id; only turns queued before it go first).
pub fn admit_or_wait(
    tx: &Db,
    a: &Admission,
    limits: QueueLimits,
    wait: Option<&str>,
) -> Result<Admitted, StoreError> {
    let agent = agents::get(tx, &a.account_id, &a.agent)?;
    check_asker(tx, &a.account_id, a.admin, &agent)?;
    let isolated = agent.env == AgentEnv::Computer;
    if !isolated && !a.attachments.is_empty() {
        return Err(StoreError::Invalid(format!(
            "agent {:?} runs on the host: attachments go only into a computer agent's workspace",
            agent.name
        )));
    }
    let source = catalog::get_source(tx, &agent.source)?;
    let runner = runners::enabled_for_source(tx, &source)?;
    if !runner.allowed_profiles.contains(&agent.profile) {
        return Err(StoreError::Forbidden(format!(
            "profile {:?} of agent {:?} is not among runner {}'s allowedProfiles ({}); register the runner with --profile {}",
            agent.profile,
            agent.name,
            runner.id,
            runner.allowed_profiles.join(", "),
            agent.profile
        )));
    }
    let declared = |c: &str| runner.capabilities.iter().any(|d| d == c);
    // A computer agent's turn never runs on the host Hermes: only a Runner with the Worker
    // takes it.
    if isolated && !declared(capabilities::COMPUTER_WORKER) {
        return Err(StoreError::Invalid(format!(
            "runner {} cannot run computer agents' turns: it has not declared {} (it is offline, older than this control plane, or has no Docker engine or Hermes Python); agent {:?} never runs on the host",
            runner.id,
            capabilities::COMPUTER_WORKER,
            agent.name
        )));
    }
    if !isolated && !declared(capabilities::SESSION_TURN) {
        return Err(StoreError::Invalid(format!(
            "runner {} has not declared session turns: start it with Hermes access configured (see docs/hermes.md)",
            runner.id
        )));
    }
    let profile = catalog::get_profile(tx, &agent.profile)?;
    // A session named: it must be this agent's and open (a new one is made once admitted).
    let named = match a.session.as_deref() {
        Some(key) => Some(open_session_of(tx, key, &agent)?),
        None => None,
    };
    let busy = |reason: String, slots: bool| {
        Ok(Admitted::Busy(Busy {
            agent_id: agent.id.clone(),
            reason,
            slots,
        }))
    };
    if let Some(earlier) = super::turn_waits::earlier_waiting(tx, &agent.id, wait)? {
        return busy(
            format!(
                "an earlier turn of agent {:?} waits to start (session {earlier})",
                agent.name
            ),
            false,
        );
    }
    if let Some(running) = running_session(tx, &agent.id)? {
        return busy(
            format!(
                "agent {:?} is already in a turn (session {running}); wait for it or stop it with `yy session stop {running}`",
                agent.name
            ),
            false,
        );
    }
    let running: i64 = tx.query_row(
        "SELECT count(*) FROM session_turns WHERE state IN (?1, ?2)",
        params![TurnState::Queued, TurnState::Running],
        |r| r.get(0),
    )?;
    if running >= MAX_RUNNING_TURNS {
        return busy(
            format!("{running} turns are running, the limit of the control plane"),
            true,
        );
    }
    let now = now_ms();
    let session = match named {
        Some(s) => s,
        None => new_session(tx, &agent)?,
    };
    // A session continued on another Runner starts a new Hermes session there and takes
    // its recent text history along.
    let same_runner = session.runner_id.as_deref() == Some(runner.id.as_str());
    let hermes_session_id = if same_runner {
        session.hermes_session_id.clone()
    } else {
        None
    };
    // Also carried on the same Runner: Hermes forgets sessions when its connection drops
    // (a Runner restart), and the Runner then starts a new one seeded with this history.
    let history = history(tx, &session.id)?;
    let turn_id = wait.map_or_else(new_id, str::to_string);
    let command = if isolated {
        let (image, network) = runners::computer_for_start(tx, &runner.id)?;
        // A computer shared with the agent runs its turns in place of its own: under its
        // owner's lease (profile path, container), one turn at a time in it.
        let (owner, shared) = computer_grants::place_of(tx, &agent)?;
        // An older Runner refuses a payload with `acting_agent_id`: say so now, not there.
        if shared && !declared(capabilities::SHARED_COMPUTER) {
            return Err(StoreError::Invalid(format!(
                "runner {} cannot run turns in a shared computer: it has not declared {} (it is older than this control plane); upgrade it, or unshare agent {:?}'s computer with `yy computer unshare`",
                runner.id,
                capabilities::SHARED_COMPUTER,
                owner.name
            )));
        }
        let cwd = if shared {
            catalog::get_profile(tx, &owner.profile)?.guest_cwd()?
        } else {
            profile.guest_cwd()?
        };
        let computer = computers::record(tx, &owner, &runner.id, &image, &cwd)?;
        if let Some((acting, session)) = computer_grants::turn_in(tx, &computer)? {
            return busy(
                format!(
                    "computer {} is shared (`yy computer show {}`): agent {acting:?} is in a turn in it (session {session}); this turn takes the computer when that one ends",
                    computer.id, computer.id
                ),
                false,
            );
        }
        if computer.state.is_busy() {
            return busy(
                format!(
                    "computer {} of agent {:?} is {} (`yy computer show {}`)",
                    computer.id, computer.agent, computer.state, computer.id
                ),
                false,
            );
        }
        // A running computer keeps its image; a stopped one starts from the current image.
        let image = super::runner_images::lease_image(&computer, &image).to_string();
        let lease = computers::next_lease(&computer, &owner, &image, &cwd, network);
        // Team tools: their id is minted when the command is leased (never stored here).
        // A session that moved to another Runner finds the files attached earlier in it
        // there again (under attachments/), each downloaded and checked once more: the
        // paths its history names are not taken on trust.
        let mut inputs = a.inputs.clone();
        if session.runner_id.is_some() && !same_runner {
            inputs.extend(artifacts::session_uploads(tx, &session.id)?);
        }
        let payload = WorkerTurnPayload {
            team_tools: None,
            session_id: session.id.to_string(),
            turn_id: turn_id.clone(),
            profile: profile.name.clone(),
            message: a.message.clone(),
            history,
            computer: lease.clone(),
            attachments: artifacts::attachable(tx, &a.account_id, &a.attachments)?,
            inputs: artifacts::turn_inputs(tx, &a.account_id, &inputs)?,
            acting_agent_id: shared.then(|| agent.id.clone()),
        };
        let turn = RunnerCommand::WorkerTurn(payload.clone());
        let command = commands::enqueue_in(tx, &runner.id, &turn, None, limits)?;
        artifacts::link(tx, &command, &payload)?;
        computers::hold(tx, &lease, &runner.id, &command.id)?;
        command
    } else {
        let turn = RunnerCommand::SessionTurn(TurnPayload {
            session_id: session.id.to_string(),
            turn_id: turn_id.clone(),
            hermes_session_id: hermes_session_id.clone(),
            profile: profile.name.clone(),
            cwd: profile
                .computer_ready()
                .then(|| profile.cwd.clone())
                .flatten(),
            message: a.message.clone(),
            history,
            // Only a Runner that declared the managed browser is told of it; on another
            // the agent's turns run without one (its tools say so).
            browser: (agent.browser && declared(capabilities::BROWSER)).then(|| BrowserUse {
                agent_id: agent.id.clone(),
            }),
        });
        commands::enqueue_in(tx, &runner.id, &turn, None, limits)?
    };
    let seq: i64 = tx.query_row(
        "SELECT coalesce(max(seq), 0) + 1 FROM session_turns WHERE session_id = ?1",
        [&session.id],
        |r| r.get(0),
    )?;
    tx.execute(
        "INSERT INTO session_turns (id, session_id, seq, runner_id, command_id, message, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            turn_id,
            session.id,
            seq,
            runner.id,
            command.id,
            a.message,
            TurnState::Queued,
            now
        ],
    )?;
    tx.execute(
        "UPDATE sessions SET state = ?5, runner_id = ?2, hermes_session_id = ?3, updated_at = ?4
         WHERE id = ?1",
        params![
            session.id,
            runner.id,
            hermes_session_id,
            now,
            SessionState::Running
        ],
    )?;
    let session = get(tx, &session.id)?;
    let turn = get_turn(tx, &turn_id)?;
    Ok(Admitted::Now(session, turn))
}

/// The session `key` when it belongs to `agent` and may take another turn.
pub fn open_session_of(
    tx: &Db,
    key: &str,
    agent: &agents::AgentRow,
) -> Result<SessionRow, StoreError> {
    let s = get(tx, &SessionId::new(key))?;
    if s.agent_id != agent.id {
        return Err(StoreError::Invalid(format!(
            "session {} belongs to agent {:?}, not {:?}",
            s.id, s.agent, agent.name
        )));
    }
    match s.state {
        SessionState::PendingCleanup => Err(StoreError::Conflict(format!(
            "session {} is pending cleanup (its stop could not be confirmed) and is never reused: start a new session",
            s.id
        ))),
        SessionState::Closed => Err(StoreError::Conflict(format!(
            "session {} is closed: start a new session",
            s.id
        ))),
        _ => Ok(s),
    }
}

/// A new, idle session of `agent`.
pub fn new_session(tx: &Db, agent: &agents::AgentRow) -> Result<SessionRow, StoreError> {
    let id = new_id();
    tx.execute(
        "INSERT INTO sessions (id, account_id, agent_id, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
        params![id, agent.account_id, agent.id, SessionState::Idle, now_ms()],
    )?;
    get(tx, &SessionId::new(id))
}

/// The session in which the agent is in a turn now, if any (one turn at a time per agent).
pub fn running_session(conn: &Db, agent_id: &str) -> Result<Option<SessionId>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT id FROM sessions WHERE agent_id = ?1 AND state = ?2",
            params![agent_id, SessionState::Running],
            |r| r.get(0),
        )
        .optional()?)
}

fn history(conn: &Db, session_id: &SessionId) -> Result<Vec<HistoryMessage>, StoreError> {
    let mut out = Vec::new();
    for t in turns(conn, session_id)? {
        out.push(HistoryMessage {
            role: "user".into(),
            text: t.message,
        });
        if let Some(text) = t.final_text.filter(|t| !t.is_empty()) {
            out.push(HistoryMessage {
                role: "assistant".into(),
                text,
            });
        }
    }
    let skip = out.len().saturating_sub(HISTORY_MESSAGES);
    Ok(out.split_off(skip))
}

/// Appends what a Runner streamed for the turn behind `command_id`.
pub fn append_events(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    command_id: &CommandId,
    events: &[TurnEvent],
) -> Result<SessionId, StoreError> {
    let tx = conn.savepoint()?;
    let cmd = commands::get(&tx, command_id)?;
    if cmd.runner_id != runner_id {
        return Err(StoreError::NotFound(format!("no command {command_id:?}")));
    }
    if cmd.lease_generation != Some(generation) || cmd.state != CommandState::Running {
        return Err(StoreError::Conflict(format!(
            "command {command_id} is not running in this connection generation"
        )));
    }
    let turn: TurnRow = not_found(
        tx.query_row(
            &format!("SELECT {TURN_COLUMNS} FROM session_turns WHERE command_id = ?1"),
            [command_id],
            turn_row,
        ),
        || format!("command {command_id} is not a session turn"),
    )?;
    let mut seq: i64 = tx.query_row(
        "SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = ?1",
        [&turn.session_id],
        |r| r.get(0),
    )?;
    let now = now_ms();
    for e in events {
        match e {
            TurnEvent::ComputerReady(ready) => computers::mark_ready(&tx, ready)?,
            TurnEvent::SessionCreated(created) => {
                tx.execute(
                    "UPDATE sessions SET hermes_session_id = ?2, updated_at = ?3 WHERE id = ?1",
                    params![turn.session_id, created.hermes_session_id, now],
                )?;
            }
            _ => {}
        }
        let (kind, payload) = e.to_parts();
        seq += 1;
        tx.execute(
            "INSERT INTO session_events (session_id, seq, turn_id, type, payload, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                turn.session_id,
                seq,
                turn.id,
                kind,
                payload.to_string(),
                now
            ],
        )?;
    }
    tx.execute(
        "UPDATE session_turns SET state = ?2 WHERE id = ?1 AND state = ?3",
        params![turn.id, TurnState::Running, TurnState::Queued],
    )?;
    tx.commit()?;
    Ok(turn.session_id)
}

pub fn events_after(
    conn: &Db,
    session_id: &SessionId,
    after: i64,
) -> Result<Vec<wire::SessionEvent>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT seq, turn_id, type, payload, created_at FROM session_events
         WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT 1000",
    )?;
    let rows = stmt
        .query_map(params![session_id, after], |r| {
            let (seq, kind, payload): (i64, String, String) = (r.get(0)?, r.get(2)?, r.get(3)?);
            let event = TurnEvent::from_parts(&kind, serde_json::from_str(&payload).unwrap_or_default());
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    // Every stored event was checked on its way in; one that no longer
                    // reads (a row of an older yy) is skipped, not the whole page.
                    tracing::warn!(session = %session_id, seq, error = %e, "an unreadable stored event is skipped");
                    return Ok(None);
                }
            };
            Ok(Some(wire::SessionEvent {
                seq,
                turn_id: r.get(1)?,
                event,
                at: rfc3339(r.get(4)?),
            }))
        })?
        .filter_map(Result::transpose)
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub use super::session_ends::{cancel_turn, close, settle, stop, stop_all};
