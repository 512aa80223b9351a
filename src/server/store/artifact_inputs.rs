//! Artifacts going into turns: the files a user attaches, a subtask's inputs, the results
//! a reviewing or depending turn is given, and which Runner may download which of them
//! (`GET /runner/v1/artifacts/{id}/content`).

use rusqlite::{OptionalExtension, params};

use super::artifacts::{ArtifactKind, ArtifactRow, ArtifactState, authorize, get, no_artifact};
use super::db::Db;
use super::{StoreError, commands};
use crate::api::artifacts::{self as wire, MAX_ATTACHMENTS};
use crate::api::ids::{CommandId, Generation, RunnerId, SessionId};
use crate::timefmt::now_ms;

/// The attached inputs a turn asks for (inside the admission transaction): each must be
/// the caller's, ready, and not attached to another turn.
pub fn attachable(
    conn: &Db,
    account_id: &str,
    keys: &[String],
) -> Result<Vec<wire::AttachmentRef>, StoreError> {
    if keys.len() > MAX_ATTACHMENTS {
        return Err(StoreError::Limit(format!(
            "{} attachments; a turn takes at most {MAX_ATTACHMENTS}",
            keys.len()
        )));
    }
    let mut out: Vec<wire::AttachmentRef> = Vec::new();
    for key in keys {
        let a = get(conn, key)?;
        // Not while it uploads (an attached file whose bytes go into the database).
        if a.kind != ArtifactKind::Input
            || a.account_id.as_deref() != Some(account_id)
            || !a.is_ready()
        {
            return Err(no_artifact(key));
        }
        if a.turn_id.is_some() || out.iter().any(|o| o.artifact_id == a.id) {
            return Err(StoreError::Conflict(format!(
                "upload {} is already attached to a turn; attach the file again",
                a.id
            )));
        }
        out.push(wire::AttachmentRef {
            artifact_id: a.id,
            name: a.name,
            size: a.size as u64,
            sha256: a.sha256,
            dir: None,
        });
    }
    Ok(out)
}

/// An artifact to put into a computer agent's workspace before its turn, and where
/// (`None`: `inputs/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    pub artifact_id: String,
    pub dir: Option<String>,
}

impl InputFile {
    pub fn inputs(ids: impl IntoIterator<Item = String>) -> Vec<InputFile> {
        ids.into_iter()
            .map(|artifact_id| InputFile {
                artifact_id,
                dir: None,
            })
            .collect()
    }
}

/// The files attached to earlier turns of a session that are still kept (the newest
/// [`MAX_ATTACHMENTS`]), to go under `attachments/` again when it moves to another Runner.
pub fn session_uploads(conn: &Db, session_id: &SessionId) -> Result<Vec<InputFile>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM artifacts WHERE session_id = ?1 AND kind = ?2 AND state = ?3
         ORDER BY created_at DESC LIMIT ?4",
    )?;
    let ids: Vec<String> = stmt
        .query_map(
            params![
                session_id,
                ArtifactKind::Input,
                ArtifactState::Ready,
                MAX_ATTACHMENTS as i64
            ],
            |r| r.get(0),
        )?
        .collect::<Result<_, _>>()?;
    Ok(ids
        .into_iter()
        .rev()
        .map(|artifact_id| InputFile {
            artifact_id,
            dir: Some("attachments".into()),
        })
        .collect())
}

/// Most input files one turn gets: a subtask's own (8), its dependencies' results and the
/// results an admin reviews.
pub const MAX_TURN_INPUTS: usize = 32;

/// The input files of a scheduler's turn that still exist, are ready, belong to the
/// account and fit what one guest write carries; the rest are left out (at most
/// [`MAX_TURN_INPUTS`], each artifact once).
pub fn turn_inputs(
    conn: &Db,
    account_id: &str,
    files: &[InputFile],
) -> Result<Vec<wire::AttachmentRef>, StoreError> {
    let mut out: Vec<wire::AttachmentRef> = Vec::new();
    for f in files {
        if out.len() >= MAX_TURN_INPUTS {
            break;
        }
        let Ok(a) = get(conn, &f.artifact_id) else {
            continue;
        };
        if a.account_id.as_deref() != Some(account_id)
            || !a.is_ready()
            || a.size as u64 > wire::MAX_ATTACH_BYTES
            || out.iter().any(|o| o.artifact_id == a.id)
        {
            continue;
        }
        out.push(wire::AttachmentRef {
            artifact_id: a.id,
            name: a.name,
            size: a.size as u64,
            sha256: a.sha256,
            dir: f.dir.clone(),
        });
    }
    Ok(out)
}

/// Checks the input artifacts given to a new subtask: ready, of the goal's account, at
/// most [`MAX_ATTACHMENTS`], each at most what one guest write carries (the limits of
/// `yy chat --attach`). Returns their full ids.
pub fn check_subtask_inputs(
    conn: &Db,
    account_id: &str,
    keys: &[String],
) -> Result<Vec<String>, StoreError> {
    if keys.len() > MAX_ATTACHMENTS {
        return Err(StoreError::Limit(format!(
            "{} input artifacts; a subtask takes at most {MAX_ATTACHMENTS}",
            keys.len()
        )));
    }
    let mut ids = Vec::new();
    for key in keys {
        let a = get(conn, key)?;
        if a.account_id.as_deref() != Some(account_id) || !a.is_ready() {
            return Err(no_artifact(key));
        }
        if a.size as u64 > wire::MAX_ATTACH_BYTES {
            return Err(StoreError::Limit(format!(
                "artifact {} is {} bytes; an input goes into the computer in one write of at most {} bytes",
                a.id,
                a.size,
                wire::MAX_ATTACH_BYTES
            )));
        }
        if !ids.contains(&a.id) {
            ids.push(a.id);
        }
    }
    Ok(ids)
}

/// Ties the attached inputs to the turn's command: from now on only that command's Runner
/// may download them, while the command runs.
pub fn link(
    conn: &Db,
    command: &commands::CommandRow,
    payload: &crate::api::sessions::WorkerTurnPayload,
) -> Result<(), StoreError> {
    for a in &payload.attachments {
        conn.execute(
            "UPDATE artifacts SET command_id = ?2, session_id = ?3, turn_id = ?4,
                 agent_id = ?5, profile = ?6, computer_id = ?7, runner_id = ?8, updated_at = ?9
             WHERE id = ?1",
            params![
                a.artifact_id,
                command.id,
                payload.session_id,
                payload.turn_id,
                payload.agent_id(),
                payload.profile,
                payload.computer.computer_id,
                command.runner_id,
                now_ms()
            ],
        )?;
    }
    Ok(())
}

/// An attachment a Runner may download: attached to its running command.
///
/// Or a subtask's input: named in the `inputs` of a `worker.turn` of this Runner running
/// now in this generation, whose turn works on a subtask that lists the artifact, of a goal
/// of the artifact's account (so: that Runner, that account and that goal's team only).
pub fn for_download(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
    id: &str,
) -> Result<ArtifactRow, StoreError> {
    let a = get(conn, id)?;
    if !a.is_ready() {
        return Err(no_artifact(id));
    }
    // An attachment of a turn; when that is not it, an upload may still be a subtask's input.
    let mut refused = None;
    if a.kind == ArtifactKind::Input
        && let Some(command) = a.command_id.clone()
        && a.runner_id.as_deref() == Some(runner_id)
    {
        match authorize(conn, runner_id, generation, &command) {
            Ok(_) => return Ok(a),
            Err(e) => refused = Some(e),
        }
    }
    let command: Option<CommandId> = conn
        .prepare_cached(
            "SELECT c.id FROM runner_commands c
             JOIN subtasks s ON s.turn_id = json_extract(c.payload, '$.turn_id')
             JOIN goals g ON g.id = s.goal_id
             WHERE c.runner_id = ?1 AND c.lease_generation = ?2 AND c.state = 'running'
                 AND c.kind = 'worker.turn' AND g.account_id = ?3
                 AND EXISTS (SELECT 1 FROM json_each(c.payload, '$.inputs')
                             WHERE json_extract(value, '$.artifact_id') = ?4)
                 AND EXISTS (SELECT 1 FROM json_each(s.inputs, '$.artifacts') WHERE value = ?4)
             LIMIT 1",
        )?
        .query_row(params![runner_id, generation, a.account_id, a.id], |r| {
            r.get(0)
        })
        .optional()?;
    // Or a file attached earlier in the session, put again into the workspace of a turn
    // of that session on another Runner.
    let command = match command {
        Some(c) => Some(c),
        None if a.kind == ArtifactKind::Input && a.session_id.is_some() => conn
            .prepare_cached(
                "SELECT c.id FROM runner_commands c
                 WHERE c.runner_id = ?1 AND c.lease_generation = ?2 AND c.state = 'running'
                     AND c.kind = 'worker.turn' AND json_extract(c.payload, '$.session_id') = ?3
                     AND EXISTS (SELECT 1 FROM json_each(c.payload, '$.inputs')
                                 WHERE json_extract(value, '$.artifact_id') = ?4)
                 LIMIT 1",
            )?
            .query_row(params![runner_id, generation, a.session_id, a.id], |r| {
                r.get(0)
            })
            .optional()?,
        None => None,
    };
    // Or a result of a subtask of the goal the turn works for (the admin reviewing it, a
    // member whose subtask depends on it, the session the goal's result is delivered to),
    // named in that turn's inputs.
    let command = match command {
        Some(c) => Some(c),
        None => conn
            .prepare_cached(
                "SELECT c.id FROM runner_commands c JOIN goals g ON g.account_id = ?3
                 WHERE c.runner_id = ?1 AND c.lease_generation = ?2 AND c.state = 'running'
                     AND c.kind = 'worker.turn'
                     AND EXISTS (SELECT 1 FROM json_each(c.payload, '$.inputs')
                                 WHERE json_extract(value, '$.artifact_id') = ?4)
                     AND (g.admin_turn_id = json_extract(c.payload, '$.turn_id')
                          OR EXISTS (SELECT 1 FROM subtasks t WHERE t.goal_id = g.id
                                     AND t.turn_id = json_extract(c.payload, '$.turn_id'))
                          OR EXISTS (SELECT 1 FROM deliveries d WHERE d.goal_id = g.id
                                     AND d.turn_id = json_extract(c.payload, '$.turn_id')))
                     AND EXISTS (SELECT 1 FROM subtasks r, json_each(r.result, '$.artifacts') v
                                 WHERE r.goal_id = g.id AND r.result IS NOT NULL
                                   AND json_extract(v.value, '$.id') = ?4)
                 LIMIT 1",
            )?
            .query_row(params![runner_id, generation, a.account_id, a.id], |r| {
                r.get(0)
            })
            .optional()?,
    };
    let command = command.ok_or_else(|| refused.unwrap_or_else(|| no_artifact(id)))?;
    authorize(conn, runner_id, generation, &command)?;
    Ok(a)
}
