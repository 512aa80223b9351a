//! Artifact records: provenance, size, SHA-256 and how much of an upload is verified. The
//! bytes are files or rows of `artifact_chunks` (see `server::artifacts`); a row is `ready`
//! only once the whole file was checked and sealed.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::{StoreError, agents, commands, runners, sessions};
use crate::api::artifacts::{
    self as wire, MAX_ARTIFACT_BYTES, MAX_CHUNK_BYTES, MAX_EXPORTS_PER_TURN, MIN_CHUNK_BYTES,
    UploadBegin,
};
use crate::api::ids::{CommandId, ComputerId, Generation, RunnerId, SessionId};
use crate::api::machine::{CommandKind, CommandState, RunnerCommand};
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

pub use super::artifact_inputs::{
    InputFile, MAX_TURN_INPUTS, attachable, check_subtask_inputs, for_download, link,
    session_uploads, turn_inputs,
};
pub use crate::api::artifacts::{ArtifactKind, ArtifactState};

#[derive(Debug, Clone)]
pub struct ArtifactRow {
    pub id: String,
    pub kind: ArtifactKind,
    pub name: String,
    pub size: i64,
    pub sha256: String,
    pub chunk_size: i64,
    pub received: i64,
    pub state: ArtifactState,
    pub account_id: Option<String>,
    pub owner: Option<String>,
    pub runner_id: Option<RunnerId>,
    pub command_id: Option<CommandId>,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<String>,
    pub turn_seq: Option<i64>,
    pub agent: Option<String>,
    pub profile: Option<String>,
    pub computer_id: Option<ComputerId>,
    pub source_path: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

impl ArtifactRow {
    pub fn is_ready(&self) -> bool {
        self.state == ArtifactState::Ready
    }

    pub fn upload_state(&self) -> wire::UploadState {
        wire::UploadState {
            id: self.id.clone(),
            state: self.state,
            size: self.size as u64,
            chunk_size: self.chunk_size as u64,
            received: self.received as u64,
        }
    }
}

impl From<ArtifactRow> for wire::Artifact {
    fn from(r: ArtifactRow) -> Self {
        wire::Artifact {
            id: r.id,
            kind: r.kind,
            name: r.name,
            size: r.size as u64,
            sha256: r.sha256,
            state: r.state,
            received: r.received as u64,
            owner: r.owner,
            runner_id: r.runner_id,
            command_id: r.command_id,
            session_id: r.session_id,
            turn_id: r.turn_id,
            turn_seq: r.turn_seq,
            agent: r.agent,
            profile: r.profile,
            computer_id: r.computer_id,
            source_path: r.source_path,
            created_at: rfc3339(r.created_at),
            finished_at: rfc3339_opt(r.finished_at),
        }
    }
}

const SELECT: &str = "SELECT f.id, f.kind, f.name, f.size, f.sha256, f.chunk_size, f.received,
        f.state, f.account_id, a.username, f.runner_id, f.command_id, f.session_id, f.turn_id,
        t.seq, g.name, f.profile, f.computer_id, f.source_path, f.created_at, f.finished_at
    FROM artifacts f
    LEFT JOIN accounts a ON a.id = f.account_id
    LEFT JOIN agents g ON g.id = f.agent_id
    LEFT JOIN session_turns t ON t.id = f.turn_id";

fn row(r: &Row<'_>) -> rusqlite::Result<ArtifactRow> {
    Ok(ArtifactRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        name: r.get(2)?,
        size: r.get(3)?,
        sha256: r.get(4)?,
        chunk_size: r.get(5)?,
        received: r.get(6)?,
        state: r.get(7)?,
        account_id: r.get(8)?,
        owner: r.get(9)?,
        runner_id: r.get(10)?,
        command_id: r.get(11)?,
        session_id: r.get(12)?,
        turn_id: r.get(13)?,
        turn_seq: r.get(14)?,
        agent: r.get(15)?,
        profile: r.get(16)?,
        computer_id: r.get(17)?,
        source_path: r.get(18)?,
        created_at: r.get(19)?,
        finished_at: r.get(20)?,
    })
}

pub(super) fn no_artifact(key: &str) -> StoreError {
    StoreError::NotFound(format!("no artifact {key:?}: see `yy artifact list`"))
}

/// An artifact by id or unique id prefix.
pub fn get(conn: &Db, key: &str) -> Result<ArtifactRow, StoreError> {
    let id = super::ids::resolve(conn, super::ids::Kind::Artifact, key)?;
    conn.prepare_cached(&format!("{SELECT} WHERE f.id = ?1"))?
        .query_row([&id], row)
        .optional()?
        .ok_or_else(|| no_artifact(key))
}

/// The newest artifact a command uploads (a fetch has at most one), if it began.
pub fn for_command(conn: &Db, command_id: &CommandId) -> Result<Option<ArtifactRow>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "{SELECT} WHERE f.command_id = ?1 ORDER BY f.created_at DESC LIMIT 1"
        ))?
        .query_row([command_id], row)
        .optional()?)
}

/// Artifacts, newest first: one session's, or all; only `account_id`'s unless `None`.
pub fn list(
    conn: &Db,
    session_id: Option<&SessionId>,
    account_id: Option<&str>,
) -> Result<Vec<ArtifactRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE (?1 IS NULL OR f.session_id = ?1) AND (?2 IS NULL OR f.account_id = ?2)
         ORDER BY f.created_at DESC, f.id LIMIT 500"
    ))?;
    let rows = stmt
        .query_map(params![session_id, account_id], row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Who and what an upload belongs to, as the command running it tells.
#[derive(Debug, Clone)]
pub struct Provenance {
    pub kind: ArtifactKind,
    pub account_id: Option<String>,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<String>,
    pub agent_id: Option<String>,
    pub profile: Option<String>,
    pub computer_id: Option<ComputerId>,
}

/// The check at every artifact transfer: the command is this Runner's, running in its live
/// generation; for a turn, its agent is active, its session open, and its profile still
/// among the Runner's allowedProfiles.
pub fn authorize(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
    command_id: &CommandId,
) -> Result<Provenance, StoreError> {
    let cmd = commands::get(conn, command_id)?;
    if cmd.runner_id != *runner_id {
        return Err(StoreError::NotFound(format!("no command {command_id:?}")));
    }
    if cmd.state != CommandState::Running || cmd.lease_generation != Some(generation) {
        return Err(StoreError::Conflict(format!(
            "command {command_id} is not running in this connection generation; no transfer for it"
        )));
    }
    match cmd.kind {
        CommandKind::Fetch => Ok(Provenance {
            kind: ArtifactKind::Fetch,
            account_id: None,
            session_id: None,
            turn_id: None,
            agent_id: None,
            profile: None,
            computer_id: None,
        }),
        CommandKind::WorkerTurn => {
            let payload: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap_or_default();
            let RunnerCommand::WorkerTurn(p) =
                RunnerCommand::parse(cmd.kind.as_sql(), &payload).map_err(StoreError::Invalid)?
            else {
                unreachable!("parsed by its own kind")
            };
            let session = sessions::get(conn, &SessionId::new(p.session_id.as_str()))?;
            let agent = agents::get(conn, &session.account_id, &session.agent_id)?;
            if agent.archived_at.is_some() {
                return Err(StoreError::Forbidden(format!(
                    "agent {:?} was archived; its turn may not transfer files",
                    agent.name
                )));
            }
            if session.state != crate::api::states::SessionState::Running {
                return Err(StoreError::Forbidden(format!(
                    "session {} is {}; its turn may not transfer files",
                    session.id, session.state
                )));
            }
            let runner = runners::get(conn, runner_id)?;
            if !runner.allowed_profiles.contains(&p.profile) {
                return Err(StoreError::Forbidden(format!(
                    "profile {:?} is no longer among runner {runner_id}'s allowedProfiles",
                    p.profile
                )));
            }
            Ok(Provenance {
                kind: ArtifactKind::Export,
                account_id: Some(session.account_id),
                session_id: Some(session.id),
                turn_id: Some(p.turn_id),
                agent_id: Some(agent.id),
                profile: Some(p.profile),
                computer_id: Some(p.computer.computer_id.into()),
            })
        }
        other => Err(StoreError::Forbidden(format!(
            "{} command does not upload artifacts",
            crate::api::words::a(other.as_sql())
        ))),
    }
}

fn check_begin(b: &UploadBegin) -> Result<String, StoreError> {
    let name = wire::sanitize_name(&b.name)
        .filter(|n| *n == b.name)
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "artifact name {:?} is not a plain file name",
                b.name
            ))
        })?;
    if b.size > MAX_ARTIFACT_BYTES {
        return Err(StoreError::Limit(format!(
            "{} is {} bytes; an artifact is at most {} MiB",
            b.name,
            b.size,
            MAX_ARTIFACT_BYTES >> 20
        )));
    }
    if b.sha256.as_deref().is_some_and(|s| !wire::is_sha256(s)) {
        return Err(StoreError::Invalid(
            "sha256 must be 64 lowercase hex digits".into(),
        ));
    }
    if !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&b.chunk_size) {
        return Err(StoreError::Invalid(format!(
            "chunk_size must be between {} KiB and {} MiB",
            MIN_CHUNK_BYTES >> 10,
            MAX_CHUNK_BYTES >> 20
        )));
    }
    Ok(name)
}

/// Begins an upload, or resumes the one of the same command, name, size and SHA-256 (an
/// interrupted transfer goes on from its last verified chunk).
pub fn begin(
    conn: &mut Db,
    runner_id: &RunnerId,
    generation: Generation,
    b: &UploadBegin,
) -> Result<ArtifactRow, StoreError> {
    let name = check_begin(b)?;
    let tx = conn.savepoint()?;
    let prov = authorize(
        &tx,
        runner_id,
        generation,
        &CommandId::new(b.command_id.as_str()),
    )?;
    let existing: Option<String> = tx
        .query_row(
            "SELECT id FROM artifacts WHERE command_id = ?1 AND name = ?2 AND sha256 = ?3
             AND size = ?4 AND chunk_size = ?5 ORDER BY created_at DESC LIMIT 1",
            params![
                b.command_id,
                name,
                b.sha256.as_deref().unwrap_or_default(),
                b.size as i64,
                b.chunk_size as i64
            ],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = existing {
        let found = get(&tx, &id)?;
        tx.commit()?;
        return Ok(found);
    }
    let count: u32 = tx.query_row(
        "SELECT count(*) FROM artifacts WHERE command_id = ?1",
        [&b.command_id],
        |r| r.get(0),
    )?;
    let (most, per) = if prov.kind == ArtifactKind::Fetch {
        (1, "fetch")
    } else {
        (MAX_EXPORTS_PER_TURN, "turn")
    };
    if count >= most {
        return Err(StoreError::Limit(format!(
            "this {per} already exported {}, the limit of {most} per {per}",
            crate::api::words::plural(count, "file", "files")
        )));
    }
    let id = super::new_id();
    let now = now_ms();
    tx.execute(
        "INSERT INTO artifacts (id, kind, name, size, sha256, chunk_size, received, state,
             account_id, runner_id, command_id, session_id, turn_id, agent_id, profile,
             computer_id, source_path, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?17)",
        params![
            id,
            prov.kind,
            name,
            b.size as i64,
            b.sha256.as_deref().unwrap_or_default(),
            b.chunk_size as i64,
            ArtifactState::Uploading,
            prov.account_id,
            runner_id,
            b.command_id,
            prov.session_id,
            prov.turn_id,
            prov.agent_id,
            prov.profile,
            prov.computer_id,
            b.source_path,
            now
        ],
    )?;
    let row = get(&tx, &id)?;
    tx.commit()?;
    Ok(row)
}

/// An upload of this Runner's running command, re-authorized: what a chunk or finish
/// request may act on.
pub fn for_transfer(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
    id: &str,
) -> Result<ArtifactRow, StoreError> {
    let found = conn
        .query_row(&format!("{SELECT} WHERE f.id = ?1"), [id], row)
        .optional()?
        .filter(|r| r.runner_id.as_deref() == Some(runner_id))
        .ok_or_else(|| no_artifact(id))?;
    let command = found.command_id.clone().unwrap_or_default();
    authorize(conn, runner_id, generation, &command)?;
    Ok(found)
}

/// Records that the bytes up to `received` are verified and on disk.
pub fn record_received(conn: &Db, id: &str, received: i64) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE artifacts SET received = ?2, updated_at = ?3 WHERE id = ?1 AND state = ?4",
        params![id, received, now_ms(), ArtifactState::Uploading],
    )?;
    Ok(())
}

/// Back to the start: the stored part did not match what was recorded. Chunks kept in the
/// database (`artifact_chunks`) go too.
pub fn restart(conn: &Db, id: &str) -> Result<(), StoreError> {
    let tx = conn.savepoint()?;
    record_received(&tx, id, 0)?;
    tx.execute("DELETE FROM artifact_chunks WHERE artifact_id = ?1", [id])?;
    tx.commit()?;
    Ok(())
}

/// The whole file was verified (its SHA-256 `sha256`) and renamed into place.
pub fn mark_ready(conn: &Db, id: &str, sha256: &str) -> Result<ArtifactRow, StoreError> {
    let now = now_ms();
    conn.execute(
        "UPDATE artifacts SET state = ?2, received = size, sha256 = ?4, finished_at = ?3,
             updated_at = ?3 WHERE id = ?1",
        params![id, ArtifactState::Ready, now, sha256],
    )?;
    get(conn, id)
}

/// A verified file a user uploaded for a turn (`yy chat --attach`); the file is in place.
pub fn create_input(
    conn: &Db,
    id: &str,
    account_id: &str,
    name: &str,
    size: u64,
    sha256: &str,
) -> Result<ArtifactRow, StoreError> {
    let now = now_ms();
    conn.execute(
        "INSERT INTO artifacts (id, kind, name, size, sha256, chunk_size, received, state,
             account_id, created_at, updated_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?4, ?4, ?6, ?7, ?8, ?8, ?8)",
        params![
            id,
            ArtifactKind::Input,
            name,
            size as i64,
            sha256,
            ArtifactState::Ready,
            account_id,
            now
        ],
    )?;
    get(conn, id)
}

/// Ids of uploads that never finished and whose command has ended: their parts can go.
pub fn abandoned(conn: &Db) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT f.id FROM artifacts f JOIN runner_commands c ON c.id = f.command_id
         WHERE f.state = ?1 AND c.state NOT IN ('pending', 'leased', 'running')",
    )?;
    let ids = stmt
        .query_map([ArtifactState::Uploading], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}

pub fn delete(conn: &Db, id: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM artifacts WHERE id = ?1", [id])?;
    Ok(())
}
