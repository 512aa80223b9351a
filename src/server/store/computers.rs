//! Computer records and their fenced execution leases. The fence only grows for the
//! computer's whole life; every Runner operation carries it and the Runner refuses a
//! smaller one. Starting takes a new fence and a new scheduling round; stop, removal and a
//! new Runner connection end the lease by raising the fence.

use rusqlite::{Connection, TransactionBehavior, params};

use super::commands::{self, CommandRow, QueueLimits};
use super::{StoreError, agents, catalog, new_id, runners};
use crate::api::computers::{
    self as wire, COMPUTER_CAPABILITY, ComputerRef, EGRESS_CAPABILITY, ExecPayload, StartPayload,
    StartResult,
};
use crate::api::machine::kinds;
use crate::api::params::AgentEnv;
use crate::egress::NetworkMode;
use crate::timefmt::{now_ms, rfc3339};

/// Environment records (computers not removed) one Runner may hold (DESIGN.md, limits).
pub const MAX_RECORDS_PER_RUNNER: i64 = 32;
const START_TIMEOUT_MS: i64 = 120_000;
const STOP_TIMEOUT_MS: i64 = 60_000;

#[derive(Debug, Clone)]
pub struct ComputerRow {
    pub id: String,
    pub account_id: String,
    pub agent_id: String,
    pub agent: String,
    pub owner: String,
    pub runner_id: String,
    pub image_id: String,
    pub guest_cwd: String,
    pub state: String,
    pub fence: i64,
    pub container_id: Option<String>,
    pub last_command: Option<String>,
    pub last_error: Option<String>,
    pub resources: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub network: NetworkMode,
}

impl From<ComputerRow> for wire::Computer {
    fn from(r: ComputerRow) -> Self {
        wire::Computer {
            id: r.id,
            agent: r.agent,
            owner: r.owner,
            runner_id: r.runner_id,
            image_id: r.image_id,
            guest_cwd: r.guest_cwd,
            state: r.state,
            fence: r.fence,
            container_id: r.container_id,
            resources: r.resources.and_then(|s| serde_json::from_str(&s).ok()),
            last_error: r.last_error,
            last_command: r.last_command,
            created_at: rfc3339(r.created_at),
            updated_at: rfc3339(r.updated_at),
            network: r.network,
        }
    }
}

const SELECT: &str = "SELECT c.id, c.account_id, c.agent_id, g.name, a.username, c.runner_id,
        c.image_id, c.guest_cwd, c.state, c.fence, c.container_id, c.last_command, c.last_error,
        c.resources, c.created_at, c.updated_at, c.network
    FROM computers c JOIN agents g ON g.id = c.agent_id JOIN accounts a ON a.id = c.account_id";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ComputerRow> {
    Ok(ComputerRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        agent_id: r.get(2)?,
        agent: r.get(3)?,
        owner: r.get(4)?,
        runner_id: r.get(5)?,
        image_id: r.get(6)?,
        guest_cwd: r.get(7)?,
        state: r.get(8)?,
        fence: r.get(9)?,
        container_id: r.get(10)?,
        last_command: r.get(11)?,
        last_error: r.get(12)?,
        resources: r.get(13)?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
        network: NetworkMode::parse(&r.get::<_, String>(16)?).unwrap_or_default(),
    })
}

/// A computer by full id or unique id prefix (at least 4 characters).
pub fn get(conn: &Connection, id: &str) -> Result<ComputerRow, StoreError> {
    let missing = || StoreError::NotFound(format!("no computer {id:?}: see `yy computer list`"));
    if id.len() < 4 {
        return Err(missing());
    }
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE c.id = ?1 OR substr(c.id, 1, length(?1)) = ?1 LIMIT 2"
    ))?;
    let mut rows: Vec<ComputerRow> = stmt.query_map([id], row)?.collect::<Result<_, _>>()?;
    match rows.len() {
        0 => Err(missing()),
        1 => Ok(rows.remove(0)),
        _ => Err(StoreError::Invalid(format!(
            "computer id prefix {id:?} is ambiguous: give more characters"
        ))),
    }
}

pub fn list(conn: &Connection, removed: bool) -> Result<Vec<ComputerRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE ?1 OR c.state != 'removed' ORDER BY c.created_at"
    ))?;
    let rows = stmt.query_map([removed], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
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
    conn: &Connection,
    id: &str,
    state: &str,
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
    conn: &mut Connection,
    account_id: &str,
    agent_key: &str,
    limits: QueueLimits,
) -> Result<(ComputerRow, Option<CommandRow>), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
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
    let guest_cwd = profile
        .cwd
        .clone()
        .filter(|_| profile.computer_ready())
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "profile {:?} has no absolute terminal.cwd for the guest",
                profile.name
            ))
        })?;
    let source = catalog::get_source(&tx, &agent.source)?;
    let runner = runners::list(&tx)?
        .into_iter()
        .find(|r| r.source_id == source.id && r.disabled_at.is_none())
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "source {:?} has no enabled runner: register one with `yy runner register --source {}`",
                source.name, source.name
            ))
        })?;
    let (image, network) = runners::computer_settings(&tx, &runner.id)?;
    let image = image.ok_or_else(|| {
        StoreError::Invalid(format!(
            "runner {} has no computer image: `yy runner update {} --computer-image sha256:...`",
            runner.id, runner.id
        ))
    })?;
    if !runner.capabilities.iter().any(|c| c == COMPUTER_CAPABILITY) {
        return Err(StoreError::Invalid(format!(
            "runner {} cannot run computers now (it is offline, or reported no Docker engine)",
            runner.id
        )));
    }
    if network == NetworkMode::PublicWeb
        && !runner.capabilities.iter().any(|c| c == EGRESS_CAPABILITY)
    {
        return Err(StoreError::Invalid(format!(
            "runner {} has network public-web, but its yy cannot run the egress proxy: upgrade yy on the Runner, or `yy runner update {} --network none`",
            runner.id, runner.id
        )));
    }
    let existing: Option<ComputerRow> = tx
        .query_row(
            &format!("{SELECT} WHERE c.agent_id = ?1 AND c.state != 'removed'"),
            [&agent.id],
            row,
        )
        .ok();
    let computer = match existing {
        Some(c) if matches!(c.state.as_str(), "starting" | "running" | "stopping") => {
            return Ok((c, None));
        }
        Some(c) => c,
        None => {
            let records: i64 = tx.query_row(
                "SELECT count(*) FROM computers WHERE runner_id = ?1 AND state != 'removed'",
                [&runner.id],
                |r| r.get(0),
            )?;
            if records >= MAX_RECORDS_PER_RUNNER {
                return Err(StoreError::Limit(format!(
                    "runner {} already holds {records} computer records, the limit: remove one with `yy computer rm`",
                    runner.id
                )));
            }
            let id = new_id();
            let now = now_ms();
            tx.execute(
                "INSERT INTO computers (id, account_id, agent_id, runner_id, image_id, guest_cwd, state,
                     fence, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'stopped', 0, ?7, ?7)",
                params![id, agent.account_id, agent.id, runner.id, image, guest_cwd, now],
            )?;
            get(&tx, &id)?
        }
    };
    // A new lease: a greater fence and a fresh scheduling round, on the current image.
    let fence = computer.fence + 1;
    let round = new_id();
    let payload = serde_json::to_value(StartPayload {
        computer_id: computer.id.clone(),
        agent_id: agent.id.clone(),
        account_id: agent.account_id.clone(),
        owner_key: format!("{}/{}", agent.account_id, agent.id),
        image_id: image.clone(),
        guest_cwd: guest_cwd.clone(),
        fence,
        round: round.clone(),
        network,
    })
    .expect("payload serializes");
    let cmd = commands::enqueue_in(
        &tx,
        &runner.id,
        kinds::COMPUTER_START,
        &payload,
        START_TIMEOUT_MS,
        limits,
    )?;
    tx.execute(
        "UPDATE computers SET fence = ?2, lease_round = ?3, state = 'starting', runner_id = ?4,
             image_id = ?5, guest_cwd = ?6, container_id = NULL, last_command = ?7, last_error = NULL,
             updated_at = ?8, network = ?9
         WHERE id = ?1",
        params![computer.id, fence, round, runner.id, image, guest_cwd, cmd.id, now_ms(), network.as_str()],
    )?;
    let computer = get(&tx, &computer.id)?;
    tx.commit()?;
    Ok((computer, Some(cmd)))
}

/// Ends the lease (a greater fence) and asks the Runner to stop, or also to delete the
/// workspace (`remove`).
pub fn stop(
    conn: &mut Connection,
    id: &str,
    remove: bool,
) -> Result<(ComputerRow, Option<CommandRow>), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let c = get(&tx, id)?;
    if c.state == "removed" {
        return Err(StoreError::Conflict(format!("computer {id} was removed")));
    }
    if c.state == "stopped" && !remove {
        return Ok((c, None));
    }
    let fence = c.fence + 1;
    let payload = serde_json::to_value(ComputerRef {
        computer_id: c.id.clone(),
        fence,
        delete_workspace: remove,
    })
    .expect("payload serializes");
    let kind = if remove {
        kinds::COMPUTER_REMOVE
    } else {
        kinds::COMPUTER_STOP
    };
    let cmd = commands::enqueue_in(
        &tx,
        &c.runner_id,
        kind,
        &payload,
        STOP_TIMEOUT_MS,
        QueueLimits::default(),
    )?;
    tx.execute(
        "UPDATE computers SET fence = ?2, lease_round = NULL, state = 'stopping', last_command = ?3,
             updated_at = ?4 WHERE id = ?1",
        params![c.id, fence, cmd.id, now_ms()],
    )?;
    let c = get(&tx, id)?;
    tx.commit()?;
    Ok((c, Some(cmd)))
}

/// Queues an admin diagnostic in a running computer under its current fence, and audits it.
pub fn exec(
    conn: &mut Connection,
    account_id: &str,
    id: &str,
    argv: &[String],
    timeout_ms: Option<u64>,
    output_cap_bytes: Option<u64>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let c = get(&tx, id)?;
    if c.state != "running" {
        return Err(StoreError::Conflict(format!(
            "computer {id} is {}, not running: start it with `yy computer create --agent {}`",
            c.state, c.agent
        )));
    }
    let payload = serde_json::to_value(ExecPayload {
        computer_id: c.id.clone(),
        fence: c.fence,
        argv: argv.to_vec(),
        timeout_ms,
        output_cap_bytes,
    })
    .expect("payload serializes");
    let budget = timeout_ms.unwrap_or(60_000) as i64 + 30_000;
    let cmd = commands::enqueue_in(
        &tx,
        &c.runner_id,
        kinds::COMPUTER_EXEC,
        &payload,
        budget,
        limits,
    )?;
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

pub fn audit(
    conn: &Connection,
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

pub fn audit_list(conn: &Connection, limit: u32) -> Result<Vec<wire::AuditEntry>, StoreError> {
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
pub fn settle(conn: &mut Connection) -> Result<Vec<String>, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let pending: Vec<(String, String)> = {
        let mut stmt = tx.prepare(
            "SELECT m.id, m.last_command FROM computers m JOIN runner_commands c ON c.id = m.last_command
             WHERE m.state IN ('starting', 'stopping')
               AND c.state IN ('done', 'failed', 'cancelled', 'expired', 'uncertain')",
        )?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let mut runners_changed = Vec::new();
    for (id, command_id) in pending {
        let cmd = commands::get(&tx, &command_id)?;
        let error = cmd.error.clone().map(|e| format!("{}: {e}", cmd.state));
        match (cmd.kind.as_str(), cmd.state.as_str()) {
            (kinds::COMPUTER_START, "done") => {
                let r: Option<StartResult> = cmd
                    .result
                    .as_deref()
                    .and_then(|r| serde_json::from_str(r).ok());
                tx.execute(
                    "UPDATE computers SET state = 'running', container_id = ?2, resources = ?3,
                         last_error = NULL, updated_at = ?4 WHERE id = ?1",
                    params![
                        id,
                        r.as_ref().map(|r| r.container_id.clone()),
                        r.as_ref().map(|r| r.resources.to_string()),
                        now_ms()
                    ],
                )?;
            }
            (kinds::COMPUTER_START, _) => set_state(&tx, &id, "failed", None, error.as_deref())?,
            (kinds::COMPUTER_STOP, "done") => {
                set_state(&tx, &id, "stopped", None, None)?;
                tx.execute(
                    "UPDATE computers SET container_id = NULL WHERE id = ?1",
                    [&id],
                )?;
            }
            (kinds::COMPUTER_REMOVE, "done") => {
                set_state(&tx, &id, "removed", None, None)?;
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
                "failed",
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
    conn: &Connection,
    runner_id: &str,
    generation: i64,
) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE computers SET fence = fence + 1, lease_round = NULL, state = 'stopped', container_id = NULL,
             last_error = ?3, updated_at = ?4
         WHERE runner_id = ?1 AND state IN ('starting', 'running', 'stopping')",
        params![
            runner_id,
            generation,
            format!("the lease ended when the Runner connected again (generation {generation})"),
            now_ms()
        ],
    )?)
}
