//! An operator's takeover of a host agent's managed browser (`yy browser attach`), as a
//! computer's ([`super::control`]): take (raises the control fence, marks the model paused
//! and queues `browser.pause` on the Runner that holds the browser), renew within
//! [`CONTROL_TTL_MS`], release, hand back (`browser.resume` with the note), and the
//! operator's looks and input (`browser.screen`) under that fence.

use super::db::Db;
use rusqlite::{OptionalExtension, params};

use super::StoreError;
use super::agents::{self, AgentRow};
use super::commands::{self, CommandRow, QueueLimits};
use super::computers::audit;
use super::control::{Row, check_fence, check_free, check_note, handed_back, looking, row_in};
use crate::api::browser::{BrowserControl, BrowserPausePayload, BrowserScreenPayload};
use crate::api::capabilities;
use crate::api::computers::CONTROL_TTL_MS;
use crate::api::ids::RunnerId;
use crate::api::machine::RunnerCommand;
use crate::api::params::AgentEnv;
use crate::computer::screen::ScreenAction;
use crate::timefmt::now_ms;

fn row(conn: &Db, agent_id: &str) -> Result<Option<Row>, StoreError> {
    row_in(conn, "browser_controls", "agent_id", agent_id)
}

/// The Runner the agent's control row names.
fn held_by(conn: &Db, agent: &AgentRow) -> Result<RunnerId, StoreError> {
    let runner: String = conn.query_row(
        "SELECT runner_id FROM browser_controls WHERE agent_id = ?1",
        [&agent.id],
        |r| r.get(0),
    )?;
    Ok(RunnerId::from(runner))
}

fn what(agent: &AgentRow) -> String {
    format!("agent {:?}'s browser", agent.name)
}

fn attach(agent: &AgentRow) -> String {
    format!("yy browser attach {} --control", agent.name)
}

/// A host agent of the caller's account with the managed browser on.
fn browsing_agent(conn: &Db, account_id: &str, key: &str) -> Result<AgentRow, StoreError> {
    let agent = agents::get(conn, account_id, key)?;
    match (agent.env, agent.browser) {
        (AgentEnv::Computer, _) => Err(StoreError::Invalid(format!(
            "agent {:?} is a computer agent: its browser is its computer's desktop (`yy computer attach`)",
            agent.name
        ))),
        (_, false) => Err(StoreError::Forbidden(format!(
            "agent {:?} has no managed browser: an admin turns it on with `yy agent update {} --browser`",
            agent.name, agent.name
        ))),
        (AgentEnv::Host, true) => Ok(agent),
    }
}

/// The Runner that holds (or will hold) `agent`'s browser: the one a control names, else
/// the Runner of its latest session, else the first of its source; each only if it
/// serves managed browsers (`browser-v1`) and is enabled.
fn runner_of(conn: &Db, agent: &AgentRow) -> Result<RunnerId, StoreError> {
    let serving = |id: &str| -> Result<bool, StoreError> {
        let caps: Option<String> = conn
            .query_row(
                "SELECT capabilities FROM runners WHERE id = ?1 AND disabled_at IS NULL",
                [id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(caps
            .and_then(|c| serde_json::from_str::<Vec<String>>(&c).ok())
            .is_some_and(|c| c.iter().any(|c| c == capabilities::BROWSER)))
    };
    let held: Option<String> = conn
        .query_row(
            "SELECT runner_id FROM browser_controls WHERE agent_id = ?1",
            [&agent.id],
            |r| r.get(0),
        )
        .optional()?;
    let latest: Option<String> = conn
        .query_row(
            "SELECT runner_id FROM sessions WHERE agent_id = ?1 AND runner_id IS NOT NULL
             ORDER BY updated_at DESC LIMIT 1",
            [&agent.id],
            |r| r.get(0),
        )
        .optional()?;
    let of_source: Vec<String> = {
        let mut stmt = conn.prepare_cached(
            "SELECT r.id FROM runners r JOIN sources s ON s.id = r.source_id
             WHERE s.name = ?1 ORDER BY r.created_at, r.id",
        )?;
        stmt.query_map([&agent.source], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    for id in held.into_iter().chain(latest).chain(of_source) {
        if serving(&id)? {
            return Ok(RunnerId::from(id));
        }
    }
    Err(StoreError::Invalid(format!(
        "no enabled Runner of source {:?} serves managed browsers (it needs a Runner that declared {}: a supervised Hermes and browser.enabled not false)",
        agent.source,
        capabilities::BROWSER
    )))
}

fn view(
    conn: &Db,
    agent: &AgentRow,
    runner: &RunnerId,
    r: &Row,
    command_id: Option<String>,
) -> Result<BrowserControl, StoreError> {
    let live = r.live_holder(now_ms()).is_some();
    let holder = match (live, &r.holder) {
        // People read this: the holder by name.
        (true, Some(h)) => Some(
            conn.query_row("SELECT username FROM accounts WHERE id = ?1", [h], |r| {
                r.get(0)
            })
            .optional()?
            .unwrap_or_else(|| h.clone()),
        ),
        _ => None,
    };
    Ok(BrowserControl {
        agent: agent.name.clone(),
        agent_id: agent.id.clone(),
        runner_id: runner.to_string(),
        control_fence: r.fence,
        holder,
        expires_at: r.live_expiry(now_ms()),
        paused: r.paused,
        command_id,
    })
}

/// The browser's control as it stands (fence 0, nobody, when never taken).
pub fn show(conn: &Db, account_id: &str, key: &str) -> Result<BrowserControl, StoreError> {
    let agent = browsing_agent(conn, account_id, key)?;
    let runner = runner_of(conn, &agent)?;
    let r = row(conn, &agent.id)?.unwrap_or(Row {
        fence: 0,
        holder: None,
        expires_at: None,
        paused: false,
    });
    view(conn, &agent, &runner, &r, None)
}

/// Takes control: refused while another operator's control is live. Raises the fence,
/// marks the model paused and queues `browser.pause` (which also opens the browser, its
/// network open for the operator).
pub fn take(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    limits: QueueLimits,
) -> Result<(BrowserControl, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let agent = browsing_agent(&tx, account_id, key)?;
    let now = now_ms();
    let old = row(&tx, &agent.id)?;
    check_free(old.as_ref(), account_id, &what(&agent))?;
    let runner = runner_of(&tx, &agent)?;
    let fence = old.as_ref().map(|r| r.fence).unwrap_or(0) + 1;
    tx.execute(
        "INSERT INTO browser_controls (agent_id, runner_id, control_fence, holder, expires_at, paused)
         VALUES (?1, ?2, ?3, ?4, ?5, 1)
         ON CONFLICT(agent_id) DO UPDATE SET runner_id = ?2, control_fence = ?3, holder = ?4,
             expires_at = ?5, paused = 1",
        params![agent.id, runner, fence, account_id, now + CONTROL_TTL_MS],
    )?;
    let command = RunnerCommand::BrowserPause(BrowserPausePayload {
        agent_id: agent.id.clone(),
        control_fence: fence,
        note: String::new(),
    });
    let cmd = commands::enqueue_in(&tx, &runner, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "browser.control",
        &agent.id,
        &serde_json::json!({ "control_fence": fence, "runner_id": runner, "command_id": cmd.id }),
    )?;
    let r = row(&tx, &agent.id)?.expect("just written");
    let v = view(&tx, &agent, &runner, &r, Some(cmd.id.to_string()))?;
    tx.commit()?;
    Ok((v, Some(cmd)))
}

/// Renews (`release` false) or releases the caller's control under `fence`.
pub fn renew_or_release(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    fence: i64,
    release: bool,
) -> Result<(BrowserControl, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let agent = agents::get(&tx, account_id, key)?;
    let now = now_ms();
    if !release && let Some(name) = super::accounts::disabled_name(&tx, account_id)? {
        return Err(StoreError::Forbidden(format!(
            "account {name:?} is disabled: its control of {} is not renewed",
            what(&agent)
        )));
    }
    let r = row(&tx, &agent.id)?.ok_or_else(|| {
        StoreError::Conflict(format!("nobody has taken control of {}", what(&agent)))
    })?;
    if r.fence != fence {
        return Err(StoreError::Conflict(format!(
            "control fence {fence} of {} is stale (now {}): control was taken again",
            what(&agent),
            r.fence
        )));
    }
    if r.live_holder(now) != Some(account_id) {
        return Err(StoreError::Conflict(format!(
            "your control of {} ended (not renewed within {} s, or released); the model stays paused until `yy browser handback {}`",
            what(&agent),
            CONTROL_TTL_MS / 1000,
            agent.name
        )));
    }
    let expires = (!release).then_some(now + CONTROL_TTL_MS);
    tx.execute(
        "UPDATE browser_controls SET holder = CASE WHEN ?2 IS NULL THEN NULL ELSE holder END,
             expires_at = ?2 WHERE agent_id = ?1",
        params![agent.id, expires],
    )?;
    let r = row(&tx, &agent.id)?.expect("exists");
    let v = view(&tx, &agent, &held_by(&tx, &agent)?, &r, None)?;
    tx.commit()?;
    Ok((v, None))
}

/// Hands the browser back: the model's browser calls go on, the first with `note`.
/// Refused while another operator's control is live, and when nothing is paused.
pub fn handback(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    note: &str,
    limits: QueueLimits,
) -> Result<(BrowserControl, Option<CommandRow>), StoreError> {
    check_note(note)?;
    let tx = conn.savepoint()?;
    let agent = agents::get(&tx, account_id, key)?;
    let r = handed_back(row(&tx, &agent.id)?, account_id, &what(&agent))?;
    tx.execute(
        "UPDATE browser_controls SET holder = NULL, expires_at = NULL, paused = 0
         WHERE agent_id = ?1",
        [&agent.id],
    )?;
    let runner = held_by(&tx, &agent)?;
    let command = RunnerCommand::BrowserResume(BrowserPausePayload {
        agent_id: agent.id.clone(),
        control_fence: r.fence,
        note: note.to_string(),
    });
    let cmd = commands::enqueue_in(&tx, &runner, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "browser.handback",
        &agent.id,
        &serde_json::json!({ "control_fence": r.fence, "note_chars": note.chars().count(), "command_id": cmd.id }),
    )?;
    let r = row(&tx, &agent.id)?.expect("exists");
    let v = view(&tx, &agent, &runner, &r, Some(cmd.id.to_string()))?;
    tx.commit()?;
    Ok((v, Some(cmd)))
}

/// An operator's look at (any admin) or input to (the holder of the live control, aiming
/// at the latest frame) the agent's browser: `browser.screen` on its Runner. Input is
/// audited.
pub fn screen(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    action: &ScreenAction,
    control_fence: Option<i64>,
    frame_id: Option<String>,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let tx = conn.savepoint()?;
    let agent = browsing_agent(&tx, account_id, key)?;
    let looking = looking(action);
    check_fence(
        row(&tx, &agent.id)?,
        account_id,
        &what(&agent),
        &attach(&agent),
        looking,
        control_fence,
        frame_id.as_deref(),
    )?;
    let runner = runner_of(&tx, &agent)?;
    let command = RunnerCommand::BrowserScreen(BrowserScreenPayload {
        agent_id: agent.id.clone(),
        action: action.clone(),
        control_fence,
        frame_id,
    });
    let cmd = commands::enqueue_in(&tx, &runner, &command, None, limits)?;
    if !looking {
        audit(
            &tx,
            account_id,
            "browser.screen",
            &agent.id,
            &serde_json::json!({ "action": action.name(), "control_fence": control_fence, "command_id": cmd.id }),
        )?;
    }
    tx.commit()?;
    Ok(cmd)
}

/// Asks the agent's Runner to close its browser now (`yy browser close`); the profile
/// stays.
pub fn close(
    conn: &mut Db,
    account_id: &str,
    key: &str,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let tx = conn.savepoint()?;
    let agent = browsing_agent(&tx, account_id, key)?;
    let runner = runner_of(&tx, &agent)?;
    let command = RunnerCommand::BrowserClose(crate::api::browser::BrowserClosePayload {
        agent_id: agent.id.clone(),
        remove_profile: false,
    });
    let cmd = commands::enqueue_in(&tx, &runner, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "browser.close",
        &agent.id,
        &serde_json::json!({ "runner_id": runner, "command_id": cmd.id }),
    )?;
    tx.commit()?;
    Ok(cmd)
}
