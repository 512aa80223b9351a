//! Computers shared by the user's explicit grant. A computer is private to its agent
//! unless shared: a member's turns then run in the shared computer instead of its own (the
//! same container, workspace, browser profile and desktop), one turn at a time in it, and
//! every member keeps its own sessions (model history). Only agents of the computer's
//! account may be granted it, never a temporary helper, and an agent joins at most one
//! shared computer. Every grant and revoke is in the audit log.

use super::db::Db;
use rusqlite::{OptionalExtension, params};

use super::computers::{self, ComputerRow};
use super::{StoreError, agents};
use crate::api::computers::ComputerGrant;
use crate::api::machine::{CommandKind, CommandState};
use crate::api::params::AgentEnv;
use crate::api::states::ComputerState;
use crate::timefmt::{now_ms, rfc3339};

/// Agents one `share` or `unshare` may name at once.
pub const MAX_AGENTS_PER_CHANGE: usize = 32;

/// The agents computer `computer_id` is shared with, in the order they were granted.
pub fn members(conn: &Db, computer_id: &str) -> Result<Vec<ComputerGrant>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT g.name, k.agent_id, coalesce(a.username, k.granted_by), k.created_at
         FROM computer_grants k JOIN agents g ON g.id = k.agent_id
         LEFT JOIN accounts a ON a.id = k.granted_by
         WHERE k.computer_id = ?1 ORDER BY k.created_at, g.name",
    )?;
    let rows = stmt
        .query_map([computer_id], |r| {
            Ok(ComputerGrant {
                agent: r.get(0)?,
                agent_id: r.get(1)?,
                granted_by: r.get(2)?,
                granted_at: rfc3339(r.get(3)?),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The computer shared with `agent_id` that its turns run in: granted, not removed, and
/// its own agent not archived. `None`: the agent uses its own computer.
pub fn shared_computer_of(conn: &Db, agent_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT c.id FROM computer_grants k JOIN computers c ON c.id = k.computer_id
             JOIN agents o ON o.id = c.agent_id
             WHERE k.agent_id = ?1 AND c.state != ?2 AND o.archived_at IS NULL",
        )?
        .query_row(params![agent_id, ComputerState::Removed], |r| r.get(0))
        .optional()?)
}

/// Where a computer agent's turn runs: the agent whose computer it is (the agent itself,
/// or the owner of the computer shared with it), and whether it is shared with the agent.
pub fn place_of(
    conn: &Db,
    agent: &agents::AgentRow,
) -> Result<(agents::AgentRow, bool), StoreError> {
    match shared_computer_of(conn, &agent.id)? {
        Some(id) => {
            let c = computers::get(conn, &id)?;
            Ok((agents::get(conn, &c.account_id, &c.agent_id)?, true))
        }
        None => Ok((agent.clone(), false)),
    }
}

/// The turn acting in computer `c` now, as (agent name, session id): the turn whose
/// command holds its lease, while that command has not ended.
pub fn turn_in(conn: &Db, c: &ComputerRow) -> Result<Option<(String, String)>, StoreError> {
    let Some(command) = &c.last_command else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached(&format!(
            "SELECT g.name, s.id FROM runner_commands m
             JOIN session_turns t ON t.command_id = m.id
             JOIN sessions s ON s.id = t.session_id JOIN agents g ON g.id = s.agent_id
             WHERE m.id = ?1 AND m.kind = ?2 AND m.state NOT IN {}",
            CommandState::final_sql()
        ))?
        .query_row(params![command, CommandKind::WorkerTurn.as_sql()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?)
}

fn is_helper(conn: &Db, agent_id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM helpers WHERE agent_id = ?1)")?
        .query_row([agent_id], |r| r.get(0))?)
}

/// One to [`MAX_AGENTS_PER_CHANGE`] agents named.
fn check_names(agent_keys: &[String]) -> Result<(), StoreError> {
    if agent_keys.is_empty() {
        return Err(StoreError::Invalid(
            "name at least one agent with --with".into(),
        ));
    }
    if agent_keys.len() > MAX_AGENTS_PER_CHANGE {
        return Err(StoreError::Limit(format!(
            "{} agents named; at most {MAX_AGENTS_PER_CHANGE} at once",
            agent_keys.len()
        )));
    }
    Ok(())
}

/// A named agent of the computer's account (by name or id): an agent of another account
/// is not found, as if it did not exist.
fn member_of_account(
    conn: &Db,
    c: &ComputerRow,
    key: &str,
) -> Result<agents::AgentRow, StoreError> {
    let agent = agents::get(conn, &c.account_id, key)?;
    if agent.account_id != c.account_id {
        return Err(StoreError::NotFound(format!(
            "no agent named {key:?} in account {:?}, which owns computer {}: a computer is shared only with agents of its own account",
            c.owner, c.id
        )));
    }
    Ok(agent)
}

/// What [`change`] does to a computer's grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantChange {
    /// Shares the computer with the named agents: all of them or none. Each must be an
    /// active computer agent of the computer's account and source, not a temporary helper,
    /// not its own agent, not sharing its own computer with others, and in no other shared
    /// computer. An agent already granted this computer is left as it is.
    Share,
    /// Revokes the named agents' grants: all of them or none (each must have one). Their
    /// next turns run in their own computers again; a turn of theirs already in the shared
    /// computer ends there. Grants of a removed computer may still be revoked.
    Unshare,
}

/// Changes computer `computer`'s grants for the named agents in one savepoint; returns the
/// computer and its members as they are now.
pub fn change(
    how: GrantChange,
    conn: &mut Db,
    account_id: &str,
    computer: &str,
    agent_keys: &[String],
) -> Result<(ComputerRow, Vec<ComputerGrant>), StoreError> {
    let tx = conn.savepoint()?;
    check_names(agent_keys)?;
    let c = computers::get(&tx, computer)?;
    match how {
        GrantChange::Share => grant_all(&tx, account_id, &c, agent_keys)?,
        GrantChange::Unshare => revoke_all(&tx, account_id, &c, agent_keys)?,
    }
    let members = members(&tx, &c.id)?;
    tx.commit()?;
    Ok((c, members))
}

fn grant_all(
    tx: &Db,
    account_id: &str,
    c: &ComputerRow,
    agent_keys: &[String],
) -> Result<(), StoreError> {
    if c.state == ComputerState::Removed {
        return Err(StoreError::Conflict(format!(
            "computer {} was removed",
            c.id
        )));
    }
    let owner = agents::get(tx, &c.account_id, &c.agent_id)?;
    if is_helper(tx, &owner.id)? {
        return Err(StoreError::Forbidden(format!(
            "computer {} belongs to agent {:?}, a temporary helper: a helper's computer is never shared",
            c.id, owner.name
        )));
    }
    if owner.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "agent {:?}, whose computer {} is, is archived",
            owner.name, c.id
        )));
    }
    if let Some(other) = shared_computer_of(tx, &owner.id)? {
        return Err(StoreError::Conflict(format!(
            "agent {:?} works in computer {other}, shared with it, not in its own computer {}: share {other} instead, or first `yy computer unshare {other} --with {}`",
            owner.name, c.id, owner.name
        )));
    }
    let now = now_ms();
    for key in agent_keys {
        let agent = member_of_account(tx, c, key)?;
        let name = &agent.name;
        if is_helper(tx, &agent.id)? {
            return Err(StoreError::Forbidden(format!(
                "agent {name:?} is a temporary helper: helpers always work in a computer of their own and can never join a shared computer"
            )));
        }
        if agent.id == owner.id {
            return Err(StoreError::Invalid(format!(
                "computer {} is agent {name:?}'s own computer: name other agents to share it with",
                c.id
            )));
        }
        if agent.archived_at.is_some() {
            return Err(StoreError::Invalid(format!("agent {name:?} is archived")));
        }
        if agent.env != AgentEnv::Computer {
            return Err(StoreError::Invalid(format!(
                "agent {name:?} runs its tools on the host (--env host); only computer agents can share a computer"
            )));
        }
        if agent.source != owner.source {
            return Err(StoreError::Invalid(format!(
                "agent {name:?} comes from source {:?} and computer {} from {:?}: only agents of the same source (the same Runner) can share a computer",
                agent.source, c.id, owner.source
            )));
        }
        let granted: Option<String> = tx
            .prepare_cached("SELECT computer_id FROM computer_grants WHERE agent_id = ?1")?
            .query_row([&agent.id], |r| r.get(0))
            .optional()?;
        match granted {
            Some(id) if id == c.id.as_str() => continue,
            Some(other) => {
                return Err(StoreError::Conflict(format!(
                    "agent {name:?} already shares computer {other}; an agent joins one shared computer: first `yy computer unshare {other} --with {name}`"
                )));
            }
            None => {}
        }
        let members: i64 = tx.query_row(
            "SELECT count(*) FROM computer_grants k JOIN computers c ON c.id = k.computer_id
             WHERE c.agent_id = ?1",
            [&agent.id],
            |r| r.get(0),
        )?;
        if members > 0 {
            return Err(StoreError::Conflict(format!(
                "agent {name:?} shares its own computer with {members} other agent(s): it cannot also join computer {}",
                c.id
            )));
        }
        tx.execute(
            "INSERT INTO computer_grants (agent_id, computer_id, granted_by, created_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![agent.id, c.id, account_id, now],
        )?;
        computers::audit(
            tx,
            account_id,
            "computer.share",
            &c.id,
            &serde_json::json!({
                "agent": agent.name, "agent_id": agent.id, "owner_agent": owner.name,
                "shares": ["workspace files", "browser logins", "desktop"],
            }),
        )?;
    }
    Ok(())
}

fn revoke_all(
    tx: &Db,
    account_id: &str,
    c: &ComputerRow,
    agent_keys: &[String],
) -> Result<(), StoreError> {
    for key in agent_keys {
        let agent = member_of_account(tx, c, key)?;
        let removed = tx.execute(
            "DELETE FROM computer_grants WHERE agent_id = ?1 AND computer_id = ?2",
            params![agent.id, c.id],
        )?;
        if removed == 0 {
            return Err(StoreError::NotFound(format!(
                "computer {} is not shared with agent {:?} (see `yy computer show {}`)",
                c.id, agent.name, c.id
            )));
        }
        computers::audit(
            tx,
            account_id,
            "computer.unshare",
            &c.id,
            &serde_json::json!({ "agent": agent.name, "agent_id": agent.id }),
        )?;
    }
    Ok(())
}

/// The re-check before a member's turn starts in a shared computer: the grant still
/// stands. `Some(why)` refuses. A computer agent's turn in its own computer passes.
pub fn still_granted(
    conn: &Db,
    p: &crate::api::sessions::WorkerTurnPayload,
) -> Result<Option<String>, StoreError> {
    let Some(member) = &p.acting_agent_id else {
        return Ok(None);
    };
    let granted: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM computer_grants WHERE agent_id = ?1 AND computer_id = ?2)",
        )?
        .query_row(params![member, p.computer.computer_id], |r| r.get(0))?;
    Ok((!granted).then(|| {
        format!(
            "no longer authorized: computer {} is no longer shared with this agent (its next turn runs in its own computer)",
            p.computer.computer_id
        )
    }))
}

/// The agents whose turns take one computer one at a time with `agent_id`'s: the owner and
/// members of the computer it works in when that one is shared, else just `agent_id`.
pub fn co_users(conn: &Db, agent_id: &str) -> Result<Vec<String>, StoreError> {
    let computer: Option<String> = match shared_computer_of(conn, agent_id)? {
        Some(id) => Some(id),
        None => conn
            .prepare_cached("SELECT id FROM computers WHERE agent_id = ?1 AND state != ?2")?
            .query_row(params![agent_id, ComputerState::Removed], |r| r.get(0))
            .optional()?,
    };
    let Some(computer) = computer else {
        return Ok(vec![agent_id.to_string()]);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT agent_id FROM computers WHERE id = ?1
         UNION SELECT agent_id FROM computer_grants WHERE computer_id = ?1",
    )?;
    let mut agents: Vec<String> = stmt
        .query_map([&computer], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if !agents.iter().any(|a| a == agent_id) {
        agents.push(agent_id.to_string());
    }
    Ok(agents)
}
