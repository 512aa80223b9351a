//! An operator's control of a computer (takeover): take (raises the control fence, pauses
//! the model at its next tool call through a `computer.pause` Runner command), renew within
//! [`CONTROL_TTL_MS`], release, and hand back (a `computer.resume` with the note). Control
//! that is not renewed simply ends at `expires_at`; the model stays paused until a handback.

use super::db::Db;
use rusqlite::{OptionalExtension, params};

use super::StoreError;
use super::commands::{self, CommandRow, QueueLimits};
use super::computer_idle::used_until;
use super::computers::{audit, get};
use crate::api::computers::{CONTROL_TTL_MS, Control, MAX_NOTE_CHARS, PausePayload};
use crate::api::machine::RunnerCommand;
use crate::api::states::ComputerState;
use crate::timefmt::{now_ms, rfc3339};

/// An operator's control of a screen: a computer's (`computer_controls`) or an agent's
/// managed browser's (`browser_controls`).
pub(super) struct Row {
    pub fence: i64,
    pub holder: Option<String>,
    pub expires_at: Option<i64>,
    pub paused: bool,
}

impl Row {
    /// When the control ends, if it is live at `now`.
    pub fn live_expiry(&self, now: i64) -> Option<String> {
        self.live_holder(now).and(self.expires_at).map(rfc3339)
    }

    /// The holder, if their control has not expired at `now`.
    pub fn live_holder(&self, now: i64) -> Option<&str> {
        match (&self.holder, self.expires_at) {
            (Some(h), Some(e)) if e > now => Some(h),
            _ => None,
        }
    }
}

fn row(conn: &Db, id: &str) -> Result<Option<Row>, StoreError> {
    row_in(conn, "computer_controls", "computer_id", id)
}

/// The control row of `id` in `table`, keyed by `key`.
pub(super) fn row_in(
    conn: &Db,
    table: &str,
    key: &str,
    id: &str,
) -> Result<Option<Row>, StoreError> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT control_fence, holder, expires_at, paused FROM {table} WHERE {key} = ?1"
            ),
            [id],
            |r| {
                Ok(Row {
                    fence: r.get(0)?,
                    holder: r.get(1)?,
                    expires_at: r.get(2)?,
                    paused: r.get::<_, i64>(3)? == 1,
                })
            },
        )
        .optional()?)
}

/// What screen input needs of the control `r` of `what` (`computer C`, `agent A's
/// browser`): the caller's live control under its current fence, and a frame id. Looking
/// needs neither; a fence that is given must be the current one and live, whatever the
/// action. `attach` is the command that takes control.
pub(super) fn check_fence(
    r: Option<Row>,
    account_id: &str,
    what: &str,
    attach: &str,
    looking: bool,
    control_fence: Option<i64>,
    frame_id: Option<&str>,
) -> Result<(), StoreError> {
    let live = r
        .as_ref()
        .and_then(|r| r.live_holder(now_ms()).map(str::to_string));
    match (control_fence, r, live) {
        (Some(f), Some(r), Some(h)) if f == r.fence && h == account_id => {}
        (Some(f), r, _) => {
            return Err(StoreError::Conflict(format!(
                "control fence {f} of {what} is stale or no longer held (current {}): take control again",
                r.map(|r| r.fence).unwrap_or(0)
            )));
        }
        (None, _, _) if looking => {}
        (None, _, Some(_)) => {
            return Err(StoreError::Conflict(format!(
                "{what} is under an operator's control: input needs the current control fence (--fence)"
            )));
        }
        (None, _, None) => {
            return Err(StoreError::Conflict(format!(
                "screen input needs control of {what} (the model may be acting): take it with `{attach}` and pass its control fence (--fence)"
            )));
        }
    }
    if !looking && frame_id.is_none_or(str::is_empty) {
        return Err(StoreError::Conflict(format!(
            "screen input needs the id of the frame it aims at (--frame, from the latest screenshot of {what})"
        )));
    }
    Ok(())
}

/// Whether `action` only looks (no control needed).
pub(super) fn looking(action: &crate::computer::screen::ScreenAction) -> bool {
    use crate::computer::screen::ScreenAction as A;
    matches!(
        action,
        A::Screenshot | A::GetScreenSize | A::GetCursorPosition
    )
}

fn view(id: &str, r: &Row, now: i64, command_id: Option<String>) -> Control {
    let live = r.live_holder(now).is_some();
    Control {
        computer_id: id.into(),
        control_fence: r.fence,
        holder: if live { r.holder.clone() } else { None },
        expires_at: r.live_expiry(now),
        paused: r.paused,
        command_id,
    }
}

/// Screen input (anything but looking) needs control: the caller's live control under
/// its current fence, and the id of the frame the input aims at (the guest refuses one
/// that is no longer the latest). Looking needs neither; a fence that is given must be
/// the current one and live, whatever the action.
pub fn check_input(
    conn: &Db,
    account_id: &str,
    id: &str,
    action: &crate::computer::screen::ScreenAction,
    control_fence: Option<i64>,
    frame_id: Option<&str>,
) -> Result<(), StoreError> {
    let looking = looking(action);
    let c = get(conn, id)?;
    check_fence(
        row(conn, &c.id)?,
        account_id,
        &format!("computer {id}"),
        &format!("yy computer attach {id} --control"),
        looking,
        control_fence,
        frame_id,
    )?;
    if !looking {
        used_until(conn, &c.id, now_ms())?;
    }
    Ok(())
}

/// The computer's control as it stands (nobody, fence 0, when never taken).
pub fn show(conn: &Db, id: &str) -> Result<Control, StoreError> {
    let c = get(conn, id)?;
    let r = row(conn, &c.id)?.unwrap_or(Row {
        fence: 0,
        holder: None,
        expires_at: None,
        paused: false,
    });
    let mut v = view(&c.id, &r, now_ms(), None);
    // People read this: the holder by name.
    if let Some(h) = &v.holder {
        v.holder = conn
            .query_row("SELECT username FROM accounts WHERE id = ?1", [h], |r| {
                r.get(0)
            })
            .optional()?
            .or(v.holder.take());
    }
    Ok(v)
}

/// Takes control: refused while another operator's control is live. Raises the control
/// fence, marks the model paused and queues the pause on the computer's Runner.
pub fn take(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    limits: QueueLimits,
) -> Result<(Control, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let c = get(&tx, id)?;
    if c.state != ComputerState::Running {
        return Err(StoreError::Conflict(format!(
            "computer {id} is {}, not running: there is nothing to take over",
            c.state
        )));
    }
    let now = now_ms();
    let old = row(&tx, &c.id)?;
    check_free(old.as_ref(), account_id, &format!("computer {id}"))?;
    let fence = old.as_ref().map(|r| r.fence).unwrap_or(0) + 1;
    let expires = now + CONTROL_TTL_MS;
    tx.execute(
        "INSERT INTO computer_controls (computer_id, control_fence, holder, expires_at, paused)
         VALUES (?1, ?2, ?3, ?4, 1)
         ON CONFLICT(computer_id) DO UPDATE SET control_fence = ?2, holder = ?3,
             expires_at = ?4, paused = 1",
        params![c.id, fence, account_id, expires],
    )?;
    used_until(&tx, &c.id, now)?;
    let command = RunnerCommand::ComputerPause(PausePayload {
        computer_id: c.id.to_string(),
        control_fence: fence,
        note: String::new(),
    });
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "computer.control",
        &c.id,
        &serde_json::json!({ "control_fence": fence, "command_id": cmd.id }),
    )?;
    let r = row(&tx, &c.id)?.expect("just written");
    tx.commit()?;
    Ok((view(&c.id, &r, now, Some(cmd.id.to_string())), Some(cmd)))
}

/// Renews (`release` false) or releases the caller's control under `fence`.
pub fn renew_or_release(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    fence: i64,
    release: bool,
) -> Result<(Control, Option<CommandRow>), StoreError> {
    let tx = conn.savepoint()?;
    let c = get(&tx, id)?;
    let now = now_ms();
    // A disabled account renews nothing (its controls also ended when it was disabled).
    if !release && let Some(name) = super::accounts::disabled_name(&tx, account_id)? {
        return Err(StoreError::Forbidden(format!(
            "account {name:?} is disabled: its control of computer {id} is not renewed"
        )));
    }
    let r = row(&tx, &c.id)?.ok_or_else(|| {
        StoreError::Conflict(format!("nobody has taken control of computer {id}"))
    })?;
    if r.fence != fence {
        return Err(StoreError::Conflict(format!(
            "control fence {fence} of computer {id} is stale (now {}): control was taken again",
            r.fence
        )));
    }
    if r.live_holder(now) != Some(account_id) {
        return Err(StoreError::Conflict(format!(
            "your control of computer {id} ended (not renewed within {} s, or released); the model stays paused until `yy computer handback`",
            CONTROL_TTL_MS / 1000
        )));
    }
    if release {
        tx.execute(
            "UPDATE computer_controls SET holder = NULL, expires_at = NULL WHERE computer_id = ?1",
            [&c.id],
        )?;
    } else {
        tx.execute(
            "UPDATE computer_controls SET expires_at = ?2 WHERE computer_id = ?1",
            params![c.id, now + CONTROL_TTL_MS],
        )?;
    }
    // Control held is use; its end starts the idle time.
    used_until(&tx, &c.id, now)?;
    let r = row(&tx, &c.id)?.expect("exists");
    tx.commit()?;
    Ok((view(&c.id, &r, now, None), None))
}

/// Taking control of `what` is refused while another operator's control is live.
pub(super) fn check_free(
    old: Option<&Row>,
    account_id: &str,
    what: &str,
) -> Result<(), StoreError> {
    let now = now_ms();
    if let Some(r) = old
        && let Some(h) = r.live_holder(now)
        && h != account_id
    {
        return Err(StoreError::Conflict(format!(
            "{what} is controlled by another operator until {}",
            rfc3339(r.expires_at.unwrap_or(now))
        )));
    }
    Ok(())
}

/// A handback note's length, checked before anything changes.
pub(super) fn check_note(note: &str) -> Result<(), StoreError> {
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(StoreError::Invalid(format!(
            "a handback note is at most {MAX_NOTE_CHARS} characters"
        )));
    }
    Ok(())
}

/// The control row a handback of `what` ends: it must be paused, and not under another
/// operator's live control.
pub(super) fn handed_back(r: Option<Row>, account_id: &str, what: &str) -> Result<Row, StoreError> {
    let r = r.filter(|r| r.paused).ok_or_else(|| {
        StoreError::Conflict(format!(
            "{what} is not paused: nothing to hand back (take control first)"
        ))
    })?;
    if let Some(h) = r.live_holder(now_ms())
        && h != account_id
    {
        return Err(StoreError::Conflict(format!(
            "{what} is controlled by another operator; only they can hand it back now"
        )));
    }
    Ok(r)
}

/// Hands the computer back: the paused model resumes with `note` in its next segment.
/// Refused while another operator's control is live, and when nothing is paused.
pub fn handback(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    note: &str,
    limits: QueueLimits,
) -> Result<(Control, Option<CommandRow>), StoreError> {
    check_note(note)?;
    let tx = conn.savepoint()?;
    let c = get(&tx, id)?;
    let now = now_ms();
    let r = handed_back(row(&tx, &c.id)?, account_id, &format!("computer {id}"))?;
    tx.execute(
        "UPDATE computer_controls SET holder = NULL, expires_at = NULL, paused = 0
         WHERE computer_id = ?1",
        [&c.id],
    )?;
    let command = RunnerCommand::ComputerResume(PausePayload {
        computer_id: c.id.to_string(),
        control_fence: r.fence,
        note: note.to_string(),
    });
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "computer.handback",
        &c.id,
        &serde_json::json!({ "control_fence": r.fence, "note_chars": note.chars().count(), "command_id": cmd.id }),
    )?;
    let r = row(&tx, &c.id)?.expect("exists");
    tx.commit()?;
    Ok((view(&c.id, &r, now, Some(cmd.id.to_string())), Some(cmd)))
}

/// Refused unless `account_id` holds the live control of the computer under `fence`.
pub fn check_holder(
    conn: &Db,
    account_id: &str,
    id: &str,
    fence: i64,
) -> Result<super::computers::ComputerRow, StoreError> {
    let c = get(conn, id)?;
    let r = row(conn, &c.id)?;
    let current = r.as_ref().map(|r| r.fence).unwrap_or(0);
    match r {
        Some(r) if r.fence == fence && r.live_holder(now_ms()) == Some(account_id) => Ok(c),
        Some(r) if r.fence == fence => Err(StoreError::Conflict(format!(
            "your control of computer {id} ended (not renewed within {} s, or released): take control again with `yy computer attach {id} --control`",
            CONTROL_TTL_MS / 1000
        ))),
        _ => Err(StoreError::Conflict(format!(
            "control fence {fence} of computer {id} is stale or not held (current {current}): take control again with `yy computer attach {id} --control`"
        ))),
    }
}

/// Opens an operator's shell: under the caller's live control, queues `computer.shell`
/// on the computer's Runner (under the computer's fence) and audits it.
pub fn shell(
    conn: &mut Db,
    account_id: &str,
    id: &str,
    q: &crate::api::shell::ShellQuery,
    relay_id: &str,
    limits: QueueLimits,
) -> Result<CommandRow, StoreError> {
    let tx = conn.savepoint()?;
    let c = check_holder(&tx, account_id, id, q.control_fence)?;
    if c.state != ComputerState::Running {
        return Err(StoreError::Conflict(format!(
            "computer {id} is {}, not running: there is no container to open a shell in",
            c.state
        )));
    }
    let (cols, rows) = crate::api::shell::window(q.cols, q.rows);
    let command = RunnerCommand::ComputerShell(crate::api::shell::ShellPayload {
        computer_id: c.id.to_string(),
        fence: c.fence.get(),
        control_fence: q.control_fence,
        relay_id: relay_id.to_string(),
        cols,
        rows,
    });
    let cmd = commands::enqueue_in(&tx, &c.runner_id, &command, None, limits)?;
    audit(
        &tx,
        account_id,
        "computer.shell",
        &c.id,
        &serde_json::json!({ "control_fence": q.control_fence, "fence": c.fence, "command_id": cmd.id }),
    )?;
    tx.commit()?;
    Ok(cmd)
}
