//! The machine API's uploads: a Runner begins an upload, sends it in chunks (each checked
//! with its CRC-32 as it arrives) and finishes it; the whole file's size and SHA-256 are
//! checked against the announced ones before it becomes an artifact. Where the bytes go is
//! [`super::Blobs`]'s: a part file (`part`) or rows of the database (`blobs`).

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::{ApiError, AppState, Blobs, Busy, blobs, corrupt, part};
use crate::api::artifacts::{
    self as wire, HEADER_CRC32, HEADER_SHA256, UploadBegin, UploadFinish, UploadState,
};
use crate::server::extract::Body;
use crate::server::machine::Current;
use crate::server::store::artifact_chunks as chunks;
use crate::server::store::artifacts::{self as rows, ArtifactRow};

/// Takes an upload's write slot (one writer at a time) and reads it for this Runner.
async fn writable(
    state: &AppState,
    current: &Current,
    id: &str,
) -> Result<(Busy, ArtifactRow), ApiError> {
    let busy = state.artifacts.hold(id)?;
    let (runner, generation, key) = (
        current.runner_id.clone(),
        current.generation,
        id.to_string(),
    );
    let row = state
        .store
        .call(move |c| rows::for_transfer(c, &runner, generation, &key))
        .await?;
    Ok((busy, row))
}

/// Wakes the fetches that follow the upload of `command`'s artifact, here and on the other
/// replicas (`true`: it started over).
fn moved(state: &AppState, command: Option<&str>, restarted: bool) {
    let Some(command) = command else { return };
    state.artifacts.followers.touch(command, restarted);
    state.queue.upload_moved(command, restarted);
}

pub async fn upload_begin(
    State(state): State<AppState>,
    current: Current,
    Body(b): Body<UploadBegin>,
) -> Result<Json<UploadState>, ApiError> {
    let row = state
        .store
        .call(move |c| rows::begin(c, &current.runner_id, current.generation, &b))
        .await?;
    moved(&state, row.command_id.as_deref(), false);
    Ok(Json(row.upload_state()))
}

/// How a chunk's bytes are checked: CRC-32 (this Runner), or SHA-256 (older Runners).
pub(super) enum ChunkCheck {
    Crc32(u32),
    Sha256(String),
}

impl ChunkCheck {
    fn from_headers(headers: &HeaderMap) -> Result<ChunkCheck, ApiError> {
        let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(v) = text(HEADER_CRC32) {
            return (v.len() == 8)
                .then(|| u32::from_str_radix(v, 16).ok())
                .flatten()
                .map(ChunkCheck::Crc32)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("malformed {HEADER_CRC32} header (8 hex digits)"))
                });
        }
        match text(HEADER_SHA256) {
            Some(v) if wire::is_sha256(v) => Ok(ChunkCheck::Sha256(v.to_string())),
            _ => Err(ApiError::bad_request(format!(
                "missing or malformed {HEADER_CRC32} header (the chunk's CRC-32, 8 hex digits)"
            ))),
        }
    }

    pub(super) fn claimed(&self) -> String {
        match self {
            ChunkCheck::Crc32(c) => format!("{c:08x}"),
            ChunkCheck::Sha256(s) => s.clone(),
        }
    }

    pub(super) fn start(&self) -> RunningCheck {
        match self {
            ChunkCheck::Crc32(_) => RunningCheck::Crc32(crc32fast::Hasher::new()),
            ChunkCheck::Sha256(_) => RunningCheck::Sha256(Sha256::new()),
        }
    }
}

/// A chunk's checksum, computed as its bytes go by.
pub(super) enum RunningCheck {
    Crc32(crc32fast::Hasher),
    Sha256(Sha256),
}

impl RunningCheck {
    pub(super) fn update(&mut self, bytes: &[u8]) {
        match self {
            RunningCheck::Crc32(h) => h.update(bytes),
            RunningCheck::Sha256(h) => h.update(bytes),
        }
    }

    pub(super) fn hex(self) -> String {
        match self {
            RunningCheck::Crc32(h) => format!("{:08x}", h.finalize()),
            RunningCheck::Sha256(h) => hex::encode(h.finalize()),
        }
    }
}

/// How a chunk is named in errors, and how large it must be.
pub(super) struct ChunkId<'a> {
    pub(super) artifact: &'a str,
    pub(super) n: u64,
    pub(super) expected: u64,
}

impl ChunkId<'_> {
    pub(super) fn wrong_size(&self, got: u64) -> ApiError {
        ApiError::bad_request(format!(
            "chunk {} of artifact {} must be {} bytes, not {got}",
            self.n, self.artifact, self.expected
        ))
    }

    pub(super) fn corrupt(&self, actual: &str, claimed: &str) -> ApiError {
        corrupt(format!(
            "chunk {} of artifact {} is corrupt (its checksum is {actual}, the header says {claimed}); nothing was stored",
            self.n, self.artifact
        ))
    }

    pub(super) fn unreadable(&self, e: impl std::fmt::Display) -> ApiError {
        ApiError::bad_request(format!("reading chunk {}: {e}", self.n))
    }
}

/// Reads a chunk's body (exactly `expected` bytes) into memory and checks it: a chunk sent
/// again (compared with what is stored), or one stored in the database.
pub(super) async fn receive(
    body: axum::body::Body,
    check: &ChunkCheck,
    chunk: &ChunkId<'_>,
) -> Result<Vec<u8>, ApiError> {
    let mut data = Vec::with_capacity(chunk.expected as usize);
    let mut running = check.start();
    let mut stream = body.into_data_stream();
    while let Some(frame) = stream.next().await {
        let frame = frame.map_err(|e| chunk.unreadable(e))?;
        if (data.len() + frame.len()) as u64 > chunk.expected {
            return Err(chunk.wrong_size((data.len() + frame.len()) as u64));
        }
        running.update(&frame);
        data.extend_from_slice(&frame);
    }
    if data.len() as u64 != chunk.expected {
        return Err(chunk.wrong_size(data.len() as u64));
    }
    let (actual, claimed) = (running.hex(), check.claimed());
    if actual != claimed {
        return Err(chunk.corrupt(&actual, &claimed));
    }
    Ok(data)
}

pub async fn upload_chunk(
    State(state): State<AppState>,
    current: Current,
    UrlPath((id, n)): UrlPath<(String, u64)>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<UploadState>, ApiError> {
    let check = ChunkCheck::from_headers(&headers)?;
    let (_busy, row) = writable(&state, &current, &id).await?;
    if row.is_ready() {
        return Ok(Json(row.upload_state()));
    }
    let files = state.artifacts.clone();
    let (size, chunk_size, received) =
        (row.size as u64, row.chunk_size as u64, row.received as u64);
    let offset = n.checked_mul(chunk_size).filter(|o| *o < size.max(1));
    let Some(offset) = offset else {
        return Err(ApiError::bad_request(format!(
            "chunk {n} lies past the end of artifact {id} ({})",
            crate::api::words::plural(size, "byte", "bytes")
        )));
    };
    let out_of_order = |received: u64| {
        ApiError::conflict(format!(
            "chunk {n} of artifact {id} is out of order: the next one is {}",
            received / chunk_size
        ))
    };
    if offset > received {
        return Err(out_of_order(received));
    }
    let chunk = ChunkId {
        artifact: &id,
        n,
        expected: chunk_size.min(size - offset),
    };
    let stored = match &files.blobs {
        Blobs::Dir(dir) => {
            part::store_chunk(&files, dir, body, check, &chunk, (offset, received)).await?
        }
        Blobs::Database => blobs::store_chunk(&state.store, body, check, &chunk, offset).await?,
    };
    let new_received = match stored {
        Stored::Appended => {
            let (key, at) = (id.clone(), (received + chunk.expected) as i64);
            state
                .store
                .call(move |c| rows::record_received(c, &key, at))
                .await?;
            received + chunk.expected
        }
        Stored::Recorded(at) => at,
        Stored::Repeated => received,
        Stored::OutOfOrder(at) => return Err(out_of_order(at)),
        Stored::Sealed => {
            let key = id.clone();
            let row = state.store.call(move |c| rows::get(c, &key)).await?;
            return Ok(Json(row.upload_state()));
        }
        Stored::Differs => {
            return Err(ApiError::conflict(format!(
                "chunk {n} of artifact {id} was received before with other bytes; begin the upload again"
            )));
        }
        Stored::Lost => {
            // Fewer bytes are stored than recorded (a part lost on a crash): start over.
            let key = id.clone();
            state.store.call(move |c| rows::restart(c, &key)).await?;
            moved(&state, row.command_id.as_deref(), true);
            let mut restarted = row.upload_state();
            restarted.received = 0;
            return Ok(Json(restarted));
        }
    };
    moved(&state, row.command_id.as_deref(), false);
    let mut answer = row.upload_state();
    answer.received = new_received;
    Ok(Json(answer))
}

/// What became of a chunk.
pub(super) enum Stored {
    /// Appended to the part file; its progress is to be recorded.
    Appended,
    /// Stored in the database together with the progress: the bytes now reach this far.
    Recorded(u64),
    /// Already received with the same bytes (a retry whose answer was lost).
    Repeated,
    Differs,
    /// Past the next expected chunk, which another request stored meanwhile (at this).
    OutOfOrder(u64),
    /// The upload was sealed meanwhile.
    Sealed,
    /// Fewer bytes are stored than were recorded as received.
    Lost,
}

pub async fn upload_finish(
    State(state): State<AppState>,
    current: Current,
    UrlPath(id): UrlPath<String>,
    Body(finish): Body<UploadFinish>,
) -> Result<Json<UploadState>, ApiError> {
    if finish
        .sha256
        .as_deref()
        .is_some_and(|s| !wire::is_sha256(s))
    {
        return Err(ApiError::bad_request(
            "sha256 must be 64 lowercase hex digits",
        ));
    }
    let (_busy, row) = writable(&state, &current, &id).await?;
    if row.is_ready() {
        return Ok(Json(row.upload_state()));
    }
    let files = state.artifacts.clone();
    if row.received != row.size {
        return Err(ApiError::conflict(format!(
            "artifact {id}: {} of {} arrived; send the rest before finishing",
            row.received,
            crate::api::words::plural(row.size, "byte", "bytes")
        )));
    }
    let size = row.size as u64;
    let sha = match (row.sha256.as_str(), finish.sha256) {
        ("", None) => {
            return Err(ApiError::bad_request(format!(
                "artifact {id}: its SHA-256 was announced neither at the begin nor at the finish; send it with the finish"
            )));
        }
        ("", Some(s)) => s,
        (begun, Some(s)) if begun != s => {
            let key = id.clone();
            state.store.call(move |c| rows::restart(c, &key)).await?;
            moved(&state, row.command_id.as_deref(), true);
            files.hashing.forget(&id);
            if let Blobs::Dir(dir) = &files.blobs {
                let _ = std::fs::remove_file(part::part_path(dir, &id));
            }
            return Err(corrupt(format!(
                "artifact {id}: the finish's SHA-256 {s} is not the begin's {begun}; nothing was kept, upload it again from the start"
            )));
        }
        (begun, _) => begun.to_string(),
    };
    let checked = match &files.blobs {
        Blobs::Dir(dir) => part::finish(&files, dir, &id, size, sha.clone()).await?,
        Blobs::Database => {
            let shape = (size, row.chunk_size as u64);
            blobs::check_whole(&state.store, &id, shape, &sha).await?
        }
    };
    if let Err(why) = checked {
        let key = id.clone();
        state.store.call(move |c| rows::restart(c, &key)).await?;
        moved(&state, row.command_id.as_deref(), true);
        return Err(corrupt(format!(
            "artifact {id} is corrupt ({why}); nothing was kept, upload it again from the start"
        )));
    }
    let (key, in_database) = (id.clone(), matches!(files.blobs, Blobs::Database));
    let row = state
        .store
        .call(move |c| {
            if in_database {
                // Ready only if the rows still hold what was checked.
                chunks::seal(c, &key, size, &sha)
            } else {
                rows::mark_ready(c, &key, &sha)
            }
        })
        .await?;
    moved(&state, row.command_id.as_deref(), false);
    crate::server::telemetry::artifact_bytes("in", row.size as u64);
    tracing::info!(artifact = %row.id, name = %row.name, size = row.size, "artifact stored");
    Ok(Json(row.upload_state()))
}
