//! Computer records and their fenced execution leases. The fence only grows for the
//! computer's whole life; every Runner operation carries it and the Runner refuses a
//! smaller one. Starting takes a new fence and a new scheduling round; stop, removal and a
//! new Runner connection end the lease by raising the fence.

use super::db::{Db, Row, Savepoint};
use rusqlite::{OptionalExtension, params};

use super::commands::{self, CommandRow, QueueLimits};
use super::computer_idle::used_until;
use super::{StoreError, agents, catalog, new_id, runners};
use crate::api::computers::{
    self as wire, ComputerRef, ExecPayload, NetworkMode, StartPayload, StartResult,
};
use crate::api::ids::{CommandId, ComputerId, Fence, Generation, RunnerId};
use crate::api::machine::{CommandKind, CommandState, RunnerCommand};
use crate::api::params::AgentEnv;
use crate::api::sessions::ComputerReady;
use crate::api::states::ComputerState;
use crate::timefmt::{now_ms, rfc3339};

/// Environment records (computers not removed) one Runner may hold (the design limit).
pub const MAX_RECORDS_PER_RUNNER: i64 = 32;

#[derive(Debug, Clone)]
pub struct ComputerRow {
    pub id: ComputerId,
    pub account_id: String,
    pub agent_id: String,
    pub agent: String,
    pub owner: String,
    pub runner_id: RunnerId,
    pub image_id: String,
    pub guest_cwd: String,
    pub state: ComputerState,
    pub fence: Fence,
    pub container_id: Option<String>,
    pub last_command: Option<CommandId>,
    pub last_error: Option<String>,
    pub resources: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub network: NetworkMode,
    /// Its Runner's current computer image.
    pub runner_image: Option<String>,
    /// JSON: what its workspace takes, as last reported.
    pub workspace_usage: Option<String>,
    pub last_used_at: Option<i64>,
    pub stop_reason: Option<String>,
}

impl From<ComputerRow> for wire::Computer {
    fn from(r: ComputerRow) -> Self {
        wire::Computer {
            id: r.id,
            agent: r.agent,
            owner: r.owner,
            runner_id: r.runner_id,
            guest_cwd: r.guest_cwd,
            state: r.state,
            fence: r.fence,
            container_id: r.container_id,
            resources: r.resources.and_then(|s| serde_json::from_str(&s).ok()),
            last_error: r.last_error,
            last_command: r.last_command,
            created_at: rfc3339(r.created_at),
            updated_at: rfc3339(r.updated_at),
            // Its Runner's current image, when this computer will start from another one.
            next_image: r.runner_image.filter(|i| *i != r.image_id),
            image_id: r.image_id,
            network: r.network,
            control: None,
            workspace_usage: r
                .workspace_usage
                .and_then(|s| serde_json::from_str(&s).ok()),
            last_used_at: r.last_used_at.map(rfc3339),
            stop_reason: r.stop_reason,
            // Filled in where grants are read (`computer_grants::members`).
            shared_with: Vec::new(),
        }
    }
}

const SELECT: &str = "SELECT c.id, c.account_id, c.agent_id, g.name, a.username, c.runner_id,
        c.image_id, c.guest_cwd, c.state, c.fence, c.container_id, c.last_command, c.last_error,
        c.resources, c.created_at, c.updated_at, c.network,
        (SELECT computer_image FROM runners WHERE id = c.runner_id), c.workspace_usage,
        c.last_used_at, c.stop_reason
    FROM computers c JOIN agents g ON g.id = c.agent_id JOIN accounts a ON a.id = c.account_id";

fn row(r: &Row<'_>) -> rusqlite::Result<ComputerRow> {
    from_columns!(r => ComputerRow {
        id, account_id, agent_id, agent, owner, runner_id, image_id, guest_cwd, state,
        fence, container_id, last_command, last_error, resources, created_at, updated_at,
        network: network_mode, runner_image, workspace_usage, last_used_at, stop_reason,
    })
}

/// The stored network mode; one this build does not know reads as the default.
fn network_mode(s: String) -> NetworkMode {
    NetworkMode::parse(&s).unwrap_or_default()
}

/// A computer by full id or unique id prefix (at least 4 characters).
pub fn get(conn: &Db, id: &str) -> Result<ComputerRow, StoreError> {
    let id = super::ids::resolve(conn, super::ids::Kind::Computer, id)?;
    let mut stmt = conn.prepare_cached(&format!("{SELECT} WHERE c.id = ?1"))?;
    stmt.query_row([&id], row)
        .optional()?
        .ok_or_else(|| super::ids::Kind::Computer.not_found(&id))
}

pub fn list(conn: &Db, removed: bool) -> Result<Vec<ComputerRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE ?1 = 1 OR c.state != ?2 ORDER BY c.created_at"
    ))?;
    let rows = stmt
        .query_map(params![removed, ComputerState::Removed], row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Keeps what a Runner reported of a computer's workspace with the result of a start, an
/// exec or a turn of that computer (on that Runner). A result without it changes nothing.
pub fn record_workspace_usage(conn: &Db, cmd: &CommandRow, result: &str) -> Result<(), StoreError> {
    if !matches!(
        cmd.kind,
        CommandKind::ComputerStart | CommandKind::ComputerExec | CommandKind::WorkerTurn
    ) {
        return Ok(());
    }
    let Ok(result) = serde_json::from_str::<serde_json::Value>(result) else {
        return Ok(());
    };
    let Some(Ok(mut usage)) = result
        .get(wire::WORKSPACE_USAGE_KEY)
        .map(|u| serde_json::from_value::<wire::WorkspaceUsage>(u.clone()))
    else {
        return Ok(());
    };
    usage.reported_at = Some(rfc3339(now_ms()));
    let payload: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap_or_default();
    let computer = match RunnerCommand::parse(cmd.kind.as_sql(), &payload) {
        Ok(RunnerCommand::ComputerStart(p)) => p.computer_id,
        Ok(RunnerCommand::ComputerExec(p)) => p.computer_id,
        Ok(RunnerCommand::WorkerTurn(p)) => p.computer.computer_id,
        _ => return Ok(()),
    };
    let usage = serde_json::to_string(&usage).unwrap_or_default();
    conn.execute(
        "UPDATE computers SET workspace_usage = ?3 WHERE id = ?1 AND runner_id = ?2",
        params![computer, cmd.runner_id, usage],
    )?;
    Ok(())
}

/// A full image id: `sha256:` and 64 lowercase hex digits.
pub fn check_image_id(image: &str) -> Result<(), String> {
    let ok = image.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{image:?} is not a full image id: give the sha256:... id that `yy image build` printed (tags and short ids are refused)"
        ))
    }
}

fn set_state(
    conn: &Db,
    id: &str,
    state: ComputerState,
    command: Option<&str>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE computers SET state = ?2, last_command = coalesce(?3, last_command), last_error = ?4,
             updated_at = ?5 WHERE id = ?1",
        params![id, state, command, error, now_ms()],
    )?;
    Ok(())
}

/// Provisions the private computer of a computer agent, or returns the one it has. A
/// stopped or failed one is recreated (never resumed) under a new fence.
pub fn create(
    conn: &mut Db,
    account_id: &str,
    agent_key: &str,
    limits: QueueLimits,
) -> Result<(ComputerRow, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let agent = agents::get(&tx, account_id, agent_key)?;
    if agent.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "agent {:?} is archived",
            agent.name
        )));
    }
    if agent.env != AgentEnv::Computer {
        return Err(StoreError::Invalid(format!(
            "agent {:?} runs its tools on the host (--env host); only computer agents get a computer",
            agent.name
        )));
    }
    let profile = catalog::get_profile(&tx, &agent.profile)?;
    let guest_cwd = profile.guest_cwd()?;
    let source = catalog::get_source(&tx, &agent.source)?;
    let runner = runners::enabled_for_source(&tx, &source)?;
    let (image, network) = runners::computer_for_start(&tx, &runner.id)?;
    if !runner
        .capabilities
        .iter()
        .any(|c| c == crate::api::capabilities::COMPUTER)
    {
        return Err(StoreError::Invalid(format!(
            "runner {} cannot run computers now (it is offline, or reported no Docker engine)",
            runner.id
        )));
    }
    if network == NetworkMode::PublicWeb
        && !runner
            .capabilities
            .iter()
            .any(|c| c == crate::api::capabilities::EGRESS)
    {
        return Err(StoreError::Invalid(format!(
            "runner {} has network public-web, but it cannot run the egress proxy (an older yy, or computers on Podman, where public-web is not available): upgrade yy or run the Runner with --engine docker, or `yy runner update {} --network none`",
            runner.id, runner.id
        )));
    }
    let computer = record(&tx, &agent, &runner.id, &image, &guest_cwd)?;
    if computer.state.is_busy() || computer.state == ComputerState::Running {
        return Ok((computer, None));
    }
    let lease = next_lease(&computer, &agent, &image, &guest_cwd, network);
    let start = RunnerCommand::ComputerStart(lease.clone());
    let cmd = commands::enqueue_in(&tx, &runner.id, &start, None, limits)?;
    hold(&tx, &lease, &runner.id, &cmd.id)?;
    let computer = get(&tx, &computer.id)?;
    tx.commit()?;
    Ok((computer, Some(cmd)))
}

/// The computer record of an agent: the one it has (not removed), or a new, stopped one
/// within the Runner's record limit.
pub fn record(
    conn: &Db,
    agent: &agents::AgentRow,
    runner_id: &RunnerId,
    image: &str,
    guest_cwd: &str,
) -> Result<ComputerRow, StoreError> {
    let existing: Option<ComputerRow> = conn
        .query_row(
            &format!("{SELECT} WHERE c.agent_id = ?1 AND c.state != ?2"),
            params![agent.id, ComputerState::Removed],
            row,
        )
        .optional()?;
    if let Some(c) = existing {
        return Ok(c);
    }
    let records: i64 = conn.query_row(
        "SELECT count(*) FROM computers WHERE runner_id = ?1 AND state != ?2",
        params![runner_id, ComputerState::Removed],
        |r| r.get(0),
    )?;
    if records >= MAX_RECORDS_PER_RUNNER {
        return Err(StoreError::Limit(format!(
            "runner {runner_id} already holds {records} computer records, the limit: remove one with `yy computer rm`"
        )));
    }
    let id = new_id();
    let now = now_ms();
    conn.execute(
        "INSERT INTO computers (id, account_id, agent_id, runner_id, image_id, guest_cwd, state,
             fence, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?8)",
        params![
            id,
            agent.account_id,
            agent.id,
            runner_id,
            image,
            guest_cwd,
            ComputerState::Stopped,
            now
        ],
    )?;
    get(conn, &id)
}

/// A new lease: a greater fence and a fresh scheduling round, on the Runner's current image
/// and the profile's current cwd.
pub fn next_lease(
    computer: &ComputerRow,
    agent: &agents::AgentRow,
    image: &str,
    guest_cwd: &str,
    network: NetworkMode,
) -> StartPayload {
    StartPayload {
        computer_id: computer.id.to_string(),
        agent_id: agent.id.clone(),
        account_id: agent.account_id.clone(),
        owner_key: format!("{}/{}", agent.account_id, agent.id),
        image_id: image.into(),
        guest_cwd: guest_cwd.into(),
        fence: computer.fence.next().get(),
        round: new_id(),
        network,
    }
}

/// Records that `command` holds `lease`: the computer is starting under it until the
/// Runner says it runs.
pub fn hold(
    conn: &Db,
    lease: &StartPayload,
    runner_id: &RunnerId,
    command: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE computers SET fence = ?2, lease_round = ?3, state = ?4, runner_id = ?5,
             image_id = ?6, guest_cwd = ?7, container_id = NULL, last_command = ?8, last_error = NULL,
             updated_at = ?9, network = ?10, last_used_at = ?9, stop_reason = NULL
         WHERE id = ?1",
        params![
            lease.computer_id,
            lease.fence,
            lease.round,
            ComputerState::Starting,
            runner_id,
            lease.image_id,
            lease.guest_cwd,
            command,
            now_ms(),
            lease.network.as_str()
        ],
    )?;
    Ok(())
}

/// The computer named by a `computer.ready` event runs: under the turn's fence only.
pub fn mark_ready(conn: &Db, ready: &ComputerReady) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE computers SET state = ?4, container_id = ?3, resources = ?5, last_error = NULL,
             updated_at = ?6
         WHERE id = ?1 AND fence = ?2 AND state = ?7",
        params![
            ready.computer_id,
            ready.fence,
            ready.container_id,
            ComputerState::Running,
            ready.resources.to_string(),
            now_ms(),
            ComputerState::Starting
        ],
    )?;
    Ok(())
}

/// Ends the lease (a greater fence) and asks the Runner to stop, or also to delete the
/// workspace (`remove`).
pub fn stop(
    conn: &mut Db,
    id: &str,
    remove: bool,
) -> Result<(ComputerRow, Option<CommandRow>), StoreError> {
    stop_because(conn, id, remove, None)
}

/// [`stop`], saying why when yy stops it by itself (`idle 30m`).
pub fn stop_because(
    conn: &mut Db,
    id: &str,
    remove: bool,
    reason: Option<&str>,
) -> Result<(ComputerRow, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let c = get(&tx, id)?;
    if c.state == ComputerState::Removed {
        return Err(StoreError::Conflict(format!("computer {id} was removed")));
    }
    if c.state == ComputerState::Stopped && !remove {
        return Ok((c, None));
    }
    let fence = c.fence.next();
    let target = ComputerRef {
        computer_id: c.id.to_string(),
        fence: fence.get(),
        delete_workspace: remove,
    };
    let command = if remove {
        RunnerCommand::ComputerRemove(target)
    } else {
        RunnerCommand::ComputerStop(target)
    };
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, None, QueueLimits::default())?;
    tx.execute(
        "UPDATE computers SET fence = ?2, lease_round = NULL, state = ?3, last_command = ?4,
             updated_at = ?5, stop_reason = ?6 WHERE id = ?1",
        params![
            c.id,
            fence,
            ComputerState::Stopping,
            cmd.id,
            now_ms(),
            reason
        ],
    )?;
    let c = get(&tx, id)?;
    tx.commit()?;
    Ok((c, Some(cmd)))
}

/// Opens the savepoint of a command to computer `id`, refused unless it runs.
fn running_in<'c>(conn: &'c mut Db, id: &str) -> Result<(Savepoint<'c>, ComputerRow), StoreError> {
    let tx = conn.savepoint()?;
    let c = get(&tx, id)?;
    if c.state != ComputerState::Running {
        return Err(StoreError::Conflict(format!(
            "computer {id} is {}, not running: start it with `yy computer create --agent {}`",
            c.state, c.agent
        )));
    }
    Ok((tx, c))
}

/// Queues an admin diagnostic in a running computer under its current fence, and audits it.
pub fn exec(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    argv: &[String],
    timeout_ms: Option<u64>,
    output_cap_bytes: Option<u64>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let (tx, c) = running_in(conn, id)?;
    let command = RunnerCommand::ComputerExec(ExecPayload {
        computer_id: c.id.to_string(),
        fence: c.fence.get(),
        argv: argv.to_vec(),
        timeout_ms,
        output_cap_bytes,
    });
    let budget = timeout_ms.map(|t| t + crate::api::machine::EXEC_SLACK_MS);
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, budget, limits)?;
    // In use from now until it ends (`computer_idle::command_ended`).
    used_until(&tx, &c.id, now_ms())?;
    audit(
        &tx,
        account_id,
        "computer.exec",
        &c.id,
        &serde_json::json!({ "argv": argv, "fence": c.fence, "command_id": cmd.id }),
    )?;
    tx.commit()?;
    Ok(cmd)
}

/// Queues an operator's screen action in a running computer under its current fence,
/// and audits it (typed text is audited by length only).
pub fn screen(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    action: &crate::computer::screen::ScreenAction,
    frame_id: Option<String>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let (tx, c) = running_in(conn, id)?;
    let command = RunnerCommand::ComputerScreen(crate::api::computers::ScreenPayload {
        computer_id: c.id.to_string(),
        fence: c.fence.get(),
        frame_id: frame_id.clone(),
        action: action.clone(),
    });
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, None, limits)?;
    let detail = match action {
        crate::computer::screen::ScreenAction::TypeText { text } => {
            serde_json::json!({ "action": "type_text", "chars": text.chars().count() })
        }
        other => serde_json::to_value(other).unwrap_or_default(),
    };
    audit(
        &tx,
        account_id,
        "computer.screen",
        &c.id,
        &serde_json::json!({ "action": detail, "fence": c.fence, "frame_id": frame_id, "command_id": cmd.id }),
    )?;
    tx.commit()?;
    Ok(cmd)
}

pub fn audit(
    conn: &Db,
    account_id: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO audit_log (at, account_id, action, target, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![now_ms(), account_id, action, target, detail.to_string()],
    )?;
    Ok(())
}

pub fn audit_list(conn: &Db, limit: u32) -> Result<Vec<wire::AuditEntry>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT l.seq, l.at, coalesce(a.username, l.account_id), l.action, l.target, l.detail
         FROM audit_log l LEFT JOIN accounts a ON a.id = l.account_id ORDER BY l.seq DESC LIMIT ?1",
    )?;
    let rows = stmt
        .query_map([limit], |r| {
            let detail: String = r.get(5)?;
            Ok(wire::AuditEntry {
                seq: r.get(0)?,
                at: rfc3339(r.get(1)?),
                account: r.get(2)?,
                action: r.get(3)?,
                target: r.get(4)?,
                detail: serde_json::from_str(&detail).unwrap_or_default(),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Brings computers in line with the Runner commands that drive them once those ended.
pub fn settle(conn: &mut Db) -> Result<Vec<RunnerId>, StoreError> {
    let tx = conn.savepoint()?;
    let pending: Vec<(ComputerId, CommandId)> = {
        let mut stmt = tx.prepare(&format!(
            "SELECT m.id, m.last_command FROM computers m JOIN runner_commands c ON c.id = m.last_command
             WHERE m.state IN (?1, ?2) AND c.state IN {}",
            CommandState::final_sql()
        ))?;
        stmt.query_map(
            params![ComputerState::Starting, ComputerState::Stopping],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .collect::<Result<_, _>>()?
    };
    let mut runners_changed = Vec::new();
    for (id, command_id) in pending {
        let cmd = commands::get(&tx, &command_id)?;
        let error = cmd.error.clone().map(|e| format!("{}: {e}", cmd.state));
        match (cmd.kind, cmd.state) {
            (CommandKind::ComputerStart, CommandState::Done) => {
                let r: Option<StartResult> = cmd.result_as();
                tx.execute(
                    "UPDATE computers SET state = ?5, container_id = ?2, resources = ?3,
                         last_error = NULL, updated_at = ?4 WHERE id = ?1",
                    params![
                        id,
                        r.as_ref().map(|r| r.container_id.clone()),
                        r.as_ref().map(|r| r.resources.to_string()),
                        now_ms(),
                        ComputerState::Running
                    ],
                )?;
            }
            (CommandKind::ComputerStart, _) => {
                set_state(&tx, &id, ComputerState::Failed, None, error.as_deref())?
            }
            // A turn that ended before its computer was ready.
            (CommandKind::WorkerTurn, _) => set_state(
                &tx,
                &id,
                ComputerState::Failed,
                None,
                Some(
                    error
                        .as_deref()
                        .unwrap_or("the turn ended before its computer was ready"),
                ),
            )?,
            (CommandKind::ComputerStop | CommandKind::ComputerRemove, CommandState::Done) => {
                let state = if cmd.kind == CommandKind::ComputerRemove {
                    ComputerState::Removed
                } else {
                    ComputerState::Stopped
                };
                set_state(&tx, &id, state, None, None)?;
                tx.execute(
                    "UPDATE computers SET container_id = NULL WHERE id = ?1",
                    [&id],
                )?;
            }
            // A stop that failed or could not be confirmed (the Runner then keeps the
            // reservation and retries); a new stop may be asked for.
            (_, _) => set_state(
                &tx,
                &id,
                ComputerState::Failed,
                None,
                Some(&format!(
                    "the stop did not complete ({})",
                    error.as_deref().unwrap_or("no answer")
                )),
            )?,
        }
        runners_changed.push(cmd.runner_id);
    }
    tx.commit()?;
    Ok(runners_changed)
}

/// A new connection generation ends every lease the Runner held: the fence grows, and the
/// next start recreates the computer in a new container.
pub fn end_leases(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE computers SET fence = fence + 1, lease_round = NULL, state = ?5, container_id = NULL,
             last_error = ?3, updated_at = ?4
         WHERE runner_id = ?1 AND state IN (?6, ?7, ?8)",
        params![
            runner_id,
            generation,
            format!("the lease ended when the Runner connected again (generation {generation})"),
            now_ms(),
            ComputerState::Stopped,
            ComputerState::Starting,
            ComputerState::Running,
            ComputerState::Stopping
        ],
    )?)
}

/// Stops the computer of an agent that may no longer use it (archived): `None` when it has
/// none running.
pub fn stop_for_agent(
    conn: &mut Db,
    agent_id: &str,
) -> Result<Option<(ComputerRow, Option<CommandRow>)>, StoreError> {
    let running: Option<String> = conn
        .query_row(
            "SELECT id FROM computers WHERE agent_id = ?1 AND state IN (?2, ?3)",
            params![agent_id, ComputerState::Starting, ComputerState::Running],
            |r| r.get(0),
        )
        .optional()?;
    match running {
        Some(id) => stop(conn, &id, false).map(Some),
        None => Ok(None),
    }
}
