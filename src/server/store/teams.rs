//! Teams: 2-8 agents of one account, one of them the admin (an agent with `manage_team`).
//! Created by an operator or by the admin agent's own team tools.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::agents::{self, AgentRow};
use super::catalog::conflict_on_unique;
use super::{StoreError, new_id, not_found};
use crate::api::names;
use crate::api::params::AgentEnv;
use crate::api::teams::{self as wire, GoalState};
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Members of a team, its admin included (the design limit).
pub const MIN_TEAM_SIZE: usize = 2;
pub const MAX_TEAM_SIZE: usize = 8;
/// Active teams one account may have.
pub const MAX_ACTIVE_TEAMS: i64 = 20;

#[derive(Debug, Clone)]
pub struct TeamRow {
    pub id: String,
    pub account_id: String,
    pub name: String,
    pub owner: String,
    pub created_by: String,
    pub created_at: i64,
    pub archived_at: Option<i64>,
}

const SELECT: &str = "SELECT t.id, t.account_id, t.name, a.username, t.created_by, t.created_at,
        t.archived_at FROM teams t JOIN accounts a ON a.id = t.account_id";

fn row(r: &Row<'_>) -> rusqlite::Result<TeamRow> {
    Ok(TeamRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        owner: r.get(3)?,
        created_by: r.get(4)?,
        created_at: r.get(5)?,
        archived_at: r.get(6)?,
    })
}

/// Who asks: an operator (with the account it acts for) or an admin agent's team tool.
#[derive(Debug, Clone)]
pub enum Actor {
    Operator {
        account_id: String,
        admin: bool,
    },
    Agent {
        account_id: String,
        agent_id: String,
    },
}

impl Actor {
    pub fn account_id(&self) -> &str {
        match self {
            Actor::Operator { account_id, .. } | Actor::Agent { account_id, .. } => account_id,
        }
    }
    /// What `created_by` records.
    pub fn label(&self) -> String {
        match self {
            Actor::Operator { .. } => "operator".into(),
            Actor::Agent { agent_id, .. } => agent_id.clone(),
        }
    }
    /// May act on an object of `account_id`.
    /// The account whose rows an id prefix may match: `None` for an admin, who sees all.
    pub fn scope(&self) -> Option<&str> {
        match self {
            Actor::Operator { admin: true, .. } => None,
            other => Some(other.account_id()),
        }
    }

    pub fn may_see(&self, account_id: &str) -> bool {
        match self {
            Actor::Operator { admin: true, .. } => true,
            other => other.account_id() == account_id,
        }
    }
}

/// An active agent of the actor's account by name (or id).
pub fn agent_of(conn: &Db, actor: &Actor, key: &str) -> Result<AgentRow, StoreError> {
    let agent = agents::get(conn, actor.account_id(), key)?;
    if !actor.may_see(&agent.account_id) || agent.account_id != actor.account_id() {
        return Err(StoreError::NotFound(format!(
            "no agent named {key:?} in this account: see `yy agent list`"
        )));
    }
    if agent.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "agent {:?} is archived",
            agent.name
        )));
    }
    Ok(agent)
}

/// A team by name (active, in the actor's account) or by id.
pub fn get(conn: &Db, actor: &Actor, key: &str) -> Result<TeamRow, StoreError> {
    let team = not_found(
        conn.query_row(
            &format!(
                "{SELECT} WHERE (t.name = ?2 AND t.account_id = ?1 AND t.archived_at IS NULL) OR t.id = ?2"
            ),
            params![actor.account_id(), key],
            row,
        ),
        || format!("no team {key:?}: see `yy team list`"),
    )?;
    if !actor.may_see(&team.account_id) {
        return Err(StoreError::NotFound(format!(
            "no team {key:?}: see `yy team list`"
        )));
    }
    Ok(team)
}

pub fn get_by_id(conn: &Db, id: &str) -> Result<TeamRow, StoreError> {
    not_found(
        conn.query_row(&format!("{SELECT} WHERE t.id = ?1"), [id], row),
        || format!("no team {id:?}"),
    )
}

/// A team member: (agent id, name, role, helper).
pub type Member = (String, String, String, bool);

/// Every member, the admin first.
pub fn members(conn: &Db, team_id: &str) -> Result<Vec<Member>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.agent_id, g.name, m.role, EXISTS (SELECT 1 FROM helpers h WHERE h.agent_id = m.agent_id)
         FROM team_members m JOIN agents g ON g.id = m.agent_id
         WHERE m.team_id = ?1 ORDER BY m.role = 'member', g.name",
    )?;
    let rows = stmt
        .query_map([team_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The team's admin agent.
pub fn admin_of(conn: &Db, team_id: &str) -> Result<AgentRow, StoreError> {
    let id: String = conn.query_row(
        "SELECT agent_id FROM team_members WHERE team_id = ?1 AND role = 'admin'",
        [team_id],
        |r| r.get(0),
    )?;
    agents::get(conn, "", &id)
}

pub fn view(conn: &Db, t: TeamRow) -> Result<wire::Team, StoreError> {
    let members: Vec<wire::TeamMember> = members(conn, &t.id)?
        .into_iter()
        .map(|(agent_id, agent, role, helper)| wire::TeamMember {
            agent,
            agent_id,
            role,
            helper,
        })
        .collect();
    let admin = members
        .iter()
        .find(|m| m.role == "admin")
        .map(|m| m.agent.clone())
        .unwrap_or_default();
    Ok(wire::Team {
        id: t.id,
        name: t.name,
        owner: t.owner,
        admin,
        members,
        created_by: t.created_by,
        created_at: rfc3339(t.created_at),
        archived_at: rfc3339_opt(t.archived_at),
    })
}

pub fn list(conn: &Db, actor: &Actor, archived: bool) -> Result<Vec<TeamRow>, StoreError> {
    let all = matches!(actor, Actor::Operator { admin: true, .. });
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE (?1 = 1 OR t.archived_at IS NULL) AND (?2 = 1 OR t.account_id = ?3)
         ORDER BY a.username, t.name, t.created_at"
    ))?;
    let rows = stmt
        .query_map(params![archived, all, actor.account_id()], row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn check_admin(admin: &AgentRow) -> Result<(), StoreError> {
    if !admin.manage_team {
        return Err(StoreError::Forbidden(format!(
            "agent {:?} may not manage a team: allow it with `yy agent update {} --manage-team`",
            admin.name, admin.name
        )));
    }
    Ok(())
}

/// Creates a team (inside the caller's transaction).
pub fn create(
    conn: &Db,
    actor: &Actor,
    name: &str,
    admin: &str,
    members: &[String],
) -> Result<TeamRow, StoreError> {
    names::check_name("team", name).map_err(StoreError::Invalid)?;
    let admin = agent_of(conn, actor, admin)?;
    check_admin(&admin)?;
    if let Actor::Agent { agent_id, .. } = actor
        && *agent_id != admin.id
    {
        return Err(StoreError::Forbidden(
            "an admin agent creates teams it administers itself".into(),
        ));
    }
    let mut agents: Vec<AgentRow> = Vec::new();
    for key in members {
        let m = agent_of(conn, actor, key)?;
        if m.id == admin.id || agents.iter().any(|a| a.id == m.id) {
            continue;
        }
        agents.push(m);
    }
    let size = agents.len() + 1;
    if !(MIN_TEAM_SIZE..=MAX_TEAM_SIZE).contains(&size) {
        return Err(StoreError::Limit(format!(
            "a team has {MIN_TEAM_SIZE}-{MAX_TEAM_SIZE} members, its admin included (the team size limit); this one would have {size}"
        )));
    }
    let active: i64 = conn.query_row(
        "SELECT count(*) FROM teams WHERE account_id = ?1 AND archived_at IS NULL",
        [actor.account_id()],
        |r| r.get(0),
    )?;
    if active >= MAX_ACTIVE_TEAMS {
        return Err(StoreError::Limit(format!(
            "this account already has {MAX_ACTIVE_TEAMS} active teams, the limit: archive one first with `yy team archive NAME`"
        )));
    }
    let id = new_id();
    let now = now_ms();
    conn.execute(
        "INSERT INTO teams (id, account_id, name, created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, actor.account_id(), name, actor.label(), now],
    )
    .map_err(|e| conflict_on_unique(e, "team", name))?;
    insert_member(conn, &id, &admin.id, "admin", now)?;
    for m in &agents {
        insert_member(conn, &id, &m.id, "member", now)?;
    }
    get_by_id(conn, &id)
}

fn insert_member(
    conn: &Db,
    team: &str,
    agent: &str,
    role: &str,
    now: i64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO team_members (team_id, agent_id, role, added_at) VALUES (?1, ?2, ?3, ?4)",
        params![team, agent, role, now],
    )?;
    Ok(())
}

fn active(team: &TeamRow) -> Result<(), StoreError> {
    if team.archived_at.is_some() {
        return Err(StoreError::Conflict(format!(
            "team {:?} is archived: archived teams never change",
            team.name
        )));
    }
    Ok(())
}

/// What a member change starts from: the team (refused when archived), the agent as
/// `lookup` finds it, and the members now.
fn member_change(
    conn: &Db,
    actor: &Actor,
    team: &str,
    agent: &str,
    lookup: impl FnOnce(&Db, &Actor, &str) -> Result<AgentRow, StoreError>,
) -> Result<(TeamRow, AgentRow, Vec<Member>), StoreError> {
    let team = get(conn, actor, team)?;
    active(&team)?;
    let agent = lookup(conn, actor, agent)?;
    let members = members(conn, &team.id)?;
    Ok((team, agent, members))
}

pub fn add_member(
    conn: &Db,
    actor: &Actor,
    team: &str,
    agent: &str,
) -> Result<TeamRow, StoreError> {
    let (team, agent, members) = member_change(conn, actor, team, agent, agent_of)?;
    if members.iter().any(|m| m.0 == agent.id) {
        return Err(StoreError::Conflict(format!(
            "agent {:?} is already in team {:?}",
            agent.name, team.name
        )));
    }
    if members.len() + 1 > MAX_TEAM_SIZE {
        return Err(StoreError::Limit(format!(
            "team {:?} already has {MAX_TEAM_SIZE} members, the team size limit",
            team.name
        )));
    }
    insert_member(conn, &team.id, &agent.id, "member", now_ms())?;
    Ok(team)
}

pub fn remove_member(
    conn: &Db,
    actor: &Actor,
    team: &str,
    agent: &str,
) -> Result<TeamRow, StoreError> {
    let (team, agent, members) = member_change(conn, actor, team, agent, |c, a, k| {
        agents::get(c, a.account_id(), k)
    })?;
    let Some(m) = members.iter().find(|m| m.0 == agent.id) else {
        return Err(StoreError::NotFound(format!(
            "agent {:?} is not in team {:?}",
            agent.name, team.name
        )));
    };
    if m.2 == "admin" {
        return Err(StoreError::Invalid(format!(
            "agent {:?} is the admin of team {:?}; a team keeps its admin (archive the team instead)",
            agent.name, team.name
        )));
    }
    if members.len() - 1 < MIN_TEAM_SIZE {
        return Err(StoreError::Limit(format!(
            "team {:?} would have fewer than {MIN_TEAM_SIZE} members, the team size limit",
            team.name
        )));
    }
    let owning: Option<String> = conn
        .query_row(
            "SELECT s.title FROM subtasks s JOIN goals g ON g.id = s.goal_id
             WHERE g.team_id = ?1 AND s.owner_id = ?2 AND g.state IN ('active', 'waiting_user', 'stopped')
               AND s.state NOT IN ('accepted', 'cancelled') LIMIT 1",
            params![team.id, agent.id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(title) = owning {
        return Err(StoreError::Conflict(format!(
            "agent {:?} owns subtask {title:?} of an unfinished goal of team {:?}: let the admin reassign or finish it first",
            agent.name, team.name
        )));
    }
    conn.execute(
        "DELETE FROM team_members WHERE team_id = ?1 AND agent_id = ?2",
        params![team.id, agent.id],
    )?;
    Ok(team)
}

/// Archives a team: final. Its unfinished goals are cancelled (their running turns are
/// stopped by the scheduler) and never come back.
pub fn archive(conn: &Db, actor: &Actor, key: &str) -> Result<TeamRow, StoreError> {
    let team = get(conn, actor, key)?;
    if team.archived_at.is_some() {
        return Ok(team);
    }
    let now = now_ms();
    conn.execute(
        "UPDATE teams SET archived_at = ?2 WHERE id = ?1",
        params![team.id, now],
    )?;
    let open: Vec<String> = {
        let mut stmt = conn.prepare(
            "SELECT id FROM goals WHERE team_id = ?1 AND state IN ('active', 'waiting_user', 'stopped')",
        )?;
        stmt.query_map([&team.id], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    for goal in open {
        super::goals::end(
            conn,
            &goal,
            GoalState::Cancelled,
            "its team was archived",
            None,
        )?;
    }
    get_by_id(conn, &team.id)
}

/// True when an isolated admin asks for a host member (never allowed).
pub fn member_env(admin: &AgentRow, asked: Option<AgentEnv>) -> Result<AgentEnv, StoreError> {
    match (admin.env, asked) {
        (AgentEnv::Computer, Some(AgentEnv::Host)) => Err(StoreError::Forbidden(format!(
            "agent {:?} runs in a computer: the members it creates run in computers too, never on the host",
            admin.name
        ))),
        (_, Some(env)) => Ok(env),
        (env, None) => Ok(env),
    }
}
