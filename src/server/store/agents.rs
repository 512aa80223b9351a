//! Agents: persistent identities with a profile, a source and an execution environment.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::catalog::{self, ProfileRow, conflict_on_unique};
use super::{StoreError, new_id, not_found};
use crate::api::ids::RunnerId;
use crate::api::params::AgentEnv;
use crate::api::views;
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Active agents one account may have (the design limit).
pub const MAX_ACTIVE_AGENTS: i64 = 100;

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub id: String,
    pub name: String,
    pub account_id: String,
    pub owner: String,
    pub source: String,
    pub profile: String,
    pub env: AgentEnv,
    pub manage_team: bool,
    /// The managed browser is on (host agents only).
    pub browser: bool,
    pub created_at: i64,
    pub archived_at: Option<i64>,
}

impl From<AgentRow> for views::Agent {
    fn from(r: AgentRow) -> Self {
        views::Agent {
            id: r.id,
            name: r.name,
            owner: r.owner,
            source: r.source,
            profile: r.profile,
            env: r.env,
            manage_team: r.manage_team,
            browser: r.browser,
            created_at: rfc3339(r.created_at),
            archived_at: rfc3339_opt(r.archived_at),
        }
    }
}

const SELECT: &str = "SELECT g.id, g.name, g.account_id, a.username, s.name, p.name, g.env,
        g.manage_team, g.created_at, g.archived_at, g.browser
    FROM agents g
    JOIN accounts a ON a.id = g.account_id
    JOIN sources s ON s.id = g.source_id
    JOIN profiles p ON p.id = g.profile_id";

fn row(r: &Row<'_>) -> rusqlite::Result<AgentRow> {
    let env: String = r.get(6)?;
    Ok(AgentRow {
        id: r.get(0)?,
        name: r.get(1)?,
        account_id: r.get(2)?,
        owner: r.get(3)?,
        source: r.get(4)?,
        profile: r.get(5)?,
        env: AgentEnv::parse(&env).unwrap_or(AgentEnv::Host),
        manage_team: r.get(7)?,
        created_at: r.get(8)?,
        archived_at: r.get(9)?,
        browser: r.get(10)?,
    })
}

pub struct NewAgent<'a> {
    pub account_id: &'a str,
    pub name: &'a str,
    pub profile: &'a str,
    pub source: Option<&'a str>,
    pub env: AgentEnv,
    pub manage_team: bool,
    pub browser: bool,
}

/// The managed browser is a host agent's: a computer agent has its computer's desktop.
fn check_browser(name: &str, env: AgentEnv, browser: bool) -> Result<(), StoreError> {
    if browser && env == AgentEnv::Computer {
        return Err(StoreError::Invalid(format!(
            "agent {name:?} is a computer agent: it browses with its computer's desktop browser (a desktop image), and the managed browser is for host agents: leave out --browser, or use --env host"
        )));
    }
    Ok(())
}

/// Asks every Runner of `agent`'s source that serves managed browsers to close the agent's
/// context (and with `remove_profile`, to delete its profile): its browser was turned off
/// or the agent archived. A Runner that is offline closes every context when it connects
/// again, so a command it never leases loses nothing.
pub fn close_browser_in(
    tx: &Db,
    agent: &AgentRow,
    remove_profile: bool,
) -> Result<Vec<RunnerId>, StoreError> {
    use crate::api::browser::BrowserClosePayload;
    use crate::api::machine::RunnerCommand;
    let runners: Vec<(String, String)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT r.id, r.capabilities FROM runners r JOIN sources s ON s.id = r.source_id
             WHERE s.name = ?1 AND r.disabled_at IS NULL",
        )?;
        stmt.query_map([&agent.source], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let mut asked = Vec::new();
    for (id, capabilities) in runners {
        let declared: Vec<String> = serde_json::from_str(&capabilities).unwrap_or_default();
        if !declared
            .iter()
            .any(|c| c == crate::api::capabilities::BROWSER)
        {
            continue;
        }
        let id = RunnerId::from(id);
        let close = RunnerCommand::BrowserClose(BrowserClosePayload {
            agent_id: agent.id.clone(),
            remove_profile,
        });
        super::commands::enqueue_in(
            tx,
            &id,
            &close,
            None,
            super::commands::QueueLimits::default(),
        )?;
        asked.push(id);
    }
    Ok(asked)
}

/// An agent that manages a team runs in a computer: its team tools reach only the isolated
/// Worker's model. Hermes 0.19 on the host offers no channel that could carry them safely
/// (docs/teams.md, "Host admins are refused").
fn check_manage_team(name: &str, env: AgentEnv, manage_team: bool) -> Result<(), StoreError> {
    if manage_team && env == AgentEnv::Host {
        return Err(StoreError::Invalid(format!(
            "agent {name:?} runs on the host, and an agent that manages a team must be a computer agent in this version (team tools reach only the isolated Worker; no channel to a host Hermes can carry them safely): use --env computer, or leave out --manage-team"
        )));
    }
    Ok(())
}

fn check_env(profile: &ProfileRow, env: AgentEnv) -> Result<(), StoreError> {
    if env == AgentEnv::Computer && !profile.computer_ready() {
        return Err(StoreError::Invalid(format!(
            "profile {:?} has terminal.cwd {}; a computer agent needs an absolute guest path: `yy profile update {} --cwd /workspace`",
            profile.name,
            profile
                .cwd
                .as_deref()
                .map(|c| format!("{c:?}"))
                .unwrap_or_else(|| "unset".into()),
            profile.name
        )));
    }
    Ok(())
}

/// Creates an agent; the per-account limit is checked and the row inserted in one
/// savepoint, which holds the write lock (the batch's IMMEDIATE transaction, or its own
/// first write), so concurrent creators cannot pass the limit together.
pub fn create(conn: &mut Db, new: NewAgent<'_>) -> Result<AgentRow, StoreError> {
    let tx = conn.savepoint()?;
    let agent = create_in(&tx, new)?;
    tx.commit()?;
    Ok(agent)
}

/// [`create`] inside the caller's transaction (team tools create members this way).
pub fn create_in(tx: &Db, new: NewAgent<'_>) -> Result<AgentRow, StoreError> {
    let source = match new.source {
        Some(s) => catalog::get_source(tx, s)?,
        None => {
            let mut active = catalog::list_sources(tx, false)?;
            match active.len() {
                1 => active.remove(0),
                0 => {
                    return Err(StoreError::Invalid(
                        "there is no source yet: create one with `yy source create NAME`".into(),
                    ));
                }
                _ => {
                    return Err(StoreError::Invalid(
                        "there are several sources: say which with --source NAME".into(),
                    ));
                }
            }
        }
    };
    if source.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "source {:?} is archived",
            source.name
        )));
    }
    let profile = catalog::get_profile(tx, new.profile)?;
    if profile.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "profile {:?} is archived",
            profile.name
        )));
    }
    check_env(&profile, new.env)?;
    check_manage_team(new.name, new.env, new.manage_team)?;
    check_browser(new.name, new.env, new.browser)?;
    let active: i64 = tx.query_row(
        "SELECT count(*) FROM agents WHERE account_id = ?1 AND archived_at IS NULL",
        [new.account_id],
        |r| r.get(0),
    )?;
    if active >= MAX_ACTIVE_AGENTS {
        return Err(StoreError::Limit(format!(
            "this account already has {MAX_ACTIVE_AGENTS} active agents, the limit: archive one first with `yy agent archive NAME`"
        )));
    }
    let id = new_id();
    tx.execute(
        "INSERT INTO agents (id, account_id, name, source_id, profile_id, env, manage_team, created_at, browser)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            id,
            new.account_id,
            new.name,
            source.id,
            profile.id,
            new.env.as_str(),
            new.manage_team,
            now_ms(),
            new.browser
        ],
    )
    .map_err(|e| conflict_on_unique(e, "agent", new.name))?;
    get(tx, new.account_id, &id)
}

pub fn list(conn: &Db, archived: bool) -> Result<Vec<AgentRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE ?1 = 1 OR g.archived_at IS NULL ORDER BY a.username, g.name, g.created_at"
    ))?;
    let rows = stmt.query_map([archived], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// An active agent of `account_id` by name, or any agent by id.
pub fn get(conn: &Db, account_id: &str, key: &str) -> Result<AgentRow, StoreError> {
    not_found(
        conn.query_row(
            &format!(
                "{SELECT} WHERE (g.name = ?2 AND g.account_id = ?1 AND g.archived_at IS NULL) OR g.id = ?2"
            ),
            params![account_id, key],
            row,
        ),
        || format!("no agent named {key:?}: see `yy agent list`"),
    )
}

pub struct AgentChange<'a> {
    pub profile: Option<&'a str>,
    pub env: Option<AgentEnv>,
    pub manage_team: Option<bool>,
    pub browser: Option<bool>,
}

/// Changes an agent; also returns the Runners asked to close its browser (turned off).
pub fn update(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    change: AgentChange<'_>,
) -> Result<(AgentRow, Vec<RunnerId>), StoreError> {
    let tx = conn.savepoint()?;
    let agent = get(&tx, account_id, key)?;
    if agent.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "agent {:?} is archived; archived agents cannot change",
            agent.name
        )));
    }
    let profile = catalog::get_profile(&tx, change.profile.unwrap_or(&agent.profile))?;
    if profile.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "profile {:?} is archived",
            profile.name
        )));
    }
    let env = change.env.unwrap_or(agent.env);
    check_env(&profile, env)?;
    check_manage_team(
        &agent.name,
        env,
        change.manage_team.unwrap_or(agent.manage_team),
    )?;
    let browser = change.browser.unwrap_or(agent.browser);
    check_browser(&agent.name, env, browser)?;
    if env == AgentEnv::Host && agent.env != AgentEnv::Host {
        let isolated: bool = tx
            .query_row(
                "SELECT isolated FROM agent_origins WHERE agent_id = ?1",
                [&agent.id],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(false);
        if isolated {
            return Err(StoreError::Forbidden(format!(
                "agent {:?} was created by an isolated team admin (or is a temporary helper): it stays in its computer and never runs on the host",
                agent.name
            )));
        }
    }
    if env != agent.env
        && let Some(session) = super::sessions::running_session(&tx, &agent.id)?
    {
        return Err(StoreError::Conflict(format!(
            "agent {:?} is in a turn (session {session}): its execution environment cannot change while it executes; wait for the turn or stop it with `yy session stop {session}`",
            agent.name
        )));
    }

    tx.execute(
        "UPDATE agents SET profile_id = ?1, env = ?2, manage_team = ?3, browser = ?4 WHERE id = ?5",
        params![
            profile.id,
            env.as_str(),
            change.manage_team.unwrap_or(agent.manage_team),
            browser,
            agent.id
        ],
    )?;
    // A revoked permission closes the context (its profile stays).
    let asked = if agent.browser && !browser {
        close_browser_in(&tx, &agent, false)?
    } else {
        Vec::new()
    };
    let agent = get(&tx, account_id, &agent.id)?;
    tx.commit()?;
    Ok((agent, asked))
}

/// Archives an agent; also returns the Runners asked to remove its browser.
pub fn archive(
    conn: &mut Db,
    account_id: &str,
    key: &str,
) -> Result<(AgentRow, Vec<RunnerId>), StoreError> {
    let tx = conn.savepoint()?;
    let agent = get(&tx, account_id, key)?;
    let mut asked = Vec::new();
    if agent.archived_at.is_none() {
        tx.execute(
            "UPDATE agents SET archived_at = ?1 WHERE id = ?2",
            params![now_ms(), agent.id],
        )?;
        // The agent is gone: its browser context closes and its profile goes.
        asked = close_browser_in(&tx, &agent, true)?;
    }
    let agent = get(&tx, account_id, &agent.id)?;
    tx.commit()?;
    Ok((agent, asked))
}
