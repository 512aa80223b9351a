//! The machine API's uploads: a Runner begins an upload, sends it in chunks (each checked
//! with its CRC-32 as it arrives) and finishes it; the whole file's SHA-256 is computed as
//! the chunks are appended and compared with the announced one before the part file is
//! renamed into place.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Mutex;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::{ApiError, AppState, Busy, blocking_failed, corrupt, io_error};
use crate::api::artifacts::{
    self as wire, HEADER_CRC32, HEADER_SHA256, UploadBegin, UploadFinish, UploadState,
};
use crate::server::extract::Body;
use crate::server::machine::Current;
use crate::server::store::artifacts::{self as rows, ArtifactRow};

/// Uploads whose running SHA-256 is kept between chunks; past this many, a finish
/// re-reads the part file instead (the same check, slower).
const MAX_HASHING: usize = 256;

/// The SHA-256 of an upload's first `at` bytes, kept while its chunks arrive in order.
pub struct WholeHash {
    at: u64,
    hasher: Sha256,
}

/// Running whole-file hashes by upload id.
#[derive(Default)]
pub struct Hashing(Mutex<HashMap<String, WholeHash>>);

impl Hashing {
    /// The running hash of upload `id` if it covers exactly its first `at` bytes (a new
    /// one at 0); taken out so that a failed chunk cannot leave it half-updated.
    fn take(&self, id: &str, at: u64) -> Option<Sha256> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match map.remove(id) {
            Some(h) if h.at == at => Some(h.hasher),
            _ if at == 0 => Some(Sha256::new()),
            _ => None,
        }
    }

    fn put(&self, id: &str, at: u64, hasher: Sha256) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() < MAX_HASHING || map.contains_key(id) {
            map.insert(id.to_string(), WholeHash { at, hasher });
        }
    }

    pub fn forget(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
}

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

pub async fn upload_begin(
    State(state): State<AppState>,
    current: Current,
    Body(b): Body<UploadBegin>,
) -> Result<Json<UploadState>, ApiError> {
    let row = state
        .store
        .call(move |c| rows::begin(c, &current.runner_id, current.generation, &b))
        .await?;
    Ok(Json(row.upload_state()))
}

/// How a chunk's bytes are checked: CRC-32 (this Runner), or SHA-256 (older Runners).
enum ChunkCheck {
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
}

/// Reads a chunk's body (exactly `expected` bytes) and checks it, feeding `whole` as it
/// arrives so the whole file's hash costs no extra pass.
async fn receive(
    body: axum::body::Body,
    expected: u64,
    check: &ChunkCheck,
    whole: Option<&mut Sha256>,
    (id, n): (&str, u64),
) -> Result<Vec<u8>, ApiError> {
    let wrong_size = |got: u64| {
        ApiError::bad_request(format!(
            "chunk {n} of artifact {id} must be {expected} bytes, not {got}"
        ))
    };
    let mut data = Vec::with_capacity(expected as usize);
    let (mut crc, mut sha) = (crc32fast::Hasher::new(), Sha256::new());
    let mut whole = whole;
    let mut stream = body.into_data_stream();
    while let Some(frame) = stream.next().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("reading chunk {n}: {e}")))?;
        if (data.len() + frame.len()) as u64 > expected {
            return Err(wrong_size((data.len() + frame.len()) as u64));
        }
        match check {
            ChunkCheck::Crc32(_) => crc.update(&frame),
            ChunkCheck::Sha256(_) => sha.update(&frame),
        }
        if let Some(w) = whole.as_deref_mut() {
            w.update(&frame);
        }
        data.extend_from_slice(&frame);
    }
    if data.len() as u64 != expected {
        return Err(wrong_size(data.len() as u64));
    }
    let (actual, claimed) = match check {
        ChunkCheck::Crc32(c) => (format!("{:08x}", crc.finalize()), format!("{c:08x}")),
        ChunkCheck::Sha256(s) => (hex::encode(sha.finalize()), s.clone()),
    };
    if actual != claimed {
        return Err(corrupt(format!(
            "chunk {n} of artifact {id} is corrupt (its checksum is {actual}, the header says {claimed}); nothing was stored"
        )));
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
    let (size, chunk, received) = (row.size as u64, row.chunk_size as u64, row.received as u64);
    let offset = n.checked_mul(chunk).filter(|o| *o < size.max(1));
    let Some(offset) = offset else {
        return Err(ApiError::bad_request(format!(
            "chunk {n} lies past the end of artifact {id} ({size} bytes)"
        )));
    };
    if offset > received {
        return Err(ApiError::conflict(format!(
            "chunk {n} of artifact {id} is out of order: the next one is {}",
            received / chunk
        )));
    }
    let expected = chunk.min(size - offset);
    // Only a chunk appended right where the hash stands extends the whole file's hash.
    let mut whole = if offset == received {
        files.hashing.take(&id, received)
    } else {
        None
    };
    let data = receive(body, expected, &check, whole.as_mut(), (&id, n)).await?;
    let part = files.part(&id);
    let stored = tokio::task::spawn_blocking(move || store_chunk(&part, offset, received, &data))
        .await
        .map_err(blocking_failed)?;
    let new_received = match stored {
        Ok(Stored::Appended) => {
            if let Some(h) = whole {
                files.hashing.put(&id, offset + expected, h);
            }
            offset + expected
        }
        Ok(Stored::Repeated) => received,
        Ok(Stored::Differs) => {
            return Err(ApiError::conflict(format!(
                "chunk {n} of artifact {id} was received before with other bytes; begin the upload again"
            )));
        }
        Ok(Stored::Lost) => {
            // The part file is shorter than recorded (lost on a crash): start over.
            let key = id.clone();
            state.store.call(move |c| rows::restart(c, &key)).await?;
            let mut restarted = row.upload_state();
            restarted.received = 0;
            return Ok(Json(restarted));
        }
        Err(e) => return Err(io_error("writing an artifact chunk", e)),
    };
    let key = id.clone();
    state
        .store
        .call(move |c| rows::record_received(c, &key, new_received as i64))
        .await?;
    let mut answer = row.upload_state();
    answer.received = new_received;
    Ok(Json(answer))
}

enum Stored {
    Appended,
    /// Already received with the same bytes (a retry whose answer was lost).
    Repeated,
    Differs,
    /// The part file holds less than was recorded as received.
    Lost,
}

/// Writes a chunk at `offset` of the part file (or compares it with what is there). It is
/// not fsynced here: the finish checks the whole part and fsyncs it before it becomes an
/// artifact, so a chunk lost in a crash shows as a short part (`Lost`) or a mismatch at the
/// finish, and the upload starts over; never as a partial artifact.
fn store_chunk(part: &Path, offset: u64, received: u64, data: &[u8]) -> std::io::Result<Stored> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(part)?;
    let len = f.metadata()?.len();
    if len < received {
        f.set_len(0)?;
        return Ok(Stored::Lost);
    }
    if offset < received {
        let mut have = vec![0u8; data.len()];
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(&mut have)?;
        return Ok(if have == data {
            Stored::Repeated
        } else {
            Stored::Differs
        });
    }
    // Anything past `received` is an unrecorded write of an interrupted request.
    f.set_len(received)?;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(data)?;
    // Start writing the chunk out now (without waiting), so the finish's fsync finds
    // little left to do.
    // SAFETY: a range of our own open file; the call only schedules writeback.
    unsafe {
        libc::sync_file_range(
            f.as_raw_fd(),
            offset as i64,
            data.len() as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    Ok(Stored::Appended)
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
            "artifact {id}: {} of {} bytes arrived; send the rest before finishing",
            row.received, row.size
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
            files.hashing.forget(&id);
            let _ = std::fs::remove_file(files.part(&id));
            return Err(corrupt(format!(
                "artifact {id}: the finish's SHA-256 {s} is not the begin's {begun}; nothing was kept, upload it again from the start"
            )));
        }
        (begun, _) => begun.to_string(),
    };
    // The hash kept while the chunks arrived, when it covers the whole file (not after a
    // restart of this control plane): then the part is not read again.
    let hashed = files
        .hashing
        .take(&id, size)
        .filter(|_| size > 0)
        .map(|h| hex::encode(h.finalize()));
    let (part, dest) = (files.part(&id), files.path(&id));
    let announced = sha.clone();
    let checked = tokio::task::spawn_blocking(move || seal(&part, &dest, size, &sha, hashed))
        .await
        .map_err(blocking_failed)?
        .map_err(|e| io_error("sealing an artifact", e))?;
    if let Err(why) = checked {
        let key = id.clone();
        state.store.call(move |c| rows::restart(c, &key)).await?;
        return Err(corrupt(format!(
            "artifact {id} is corrupt ({why}); nothing was kept, upload it again from the start"
        )));
    }
    let key = id.clone();
    let row = state
        .store
        .call(move |c| rows::mark_ready(c, &key, &announced))
        .await?;
    tracing::info!(artifact = %row.id, name = %row.name, size = row.size, "artifact stored");
    Ok(Json(row.upload_state()))
}

/// Checks the whole part file (size and SHA-256; the hash from `hashed` when the chunks'
/// arrival computed it), then renames it into place durably. The inner error says why the
/// file is not the one announced (the part is then removed).
fn seal(
    part: &Path,
    dest: &Path,
    size: u64,
    sha: &str,
    hashed: Option<String>,
) -> std::io::Result<Result<(), String>> {
    let file = File::open(part)?;
    let (got_size, got_sha) = match hashed {
        Some(h) => (file.metadata()?.len(), h),
        None => crate::fsutil::sha256_file(part)?,
    };
    if got_size != size || got_sha != sha {
        let _ = std::fs::remove_file(part);
        return Ok(Err(format!(
            "{got_size} bytes with SHA-256 {got_sha}, announced {size} bytes with {sha}"
        )));
    }
    file.sync_all()?;
    std::fs::rename(part, dest)?;
    if let Some(dir) = dest.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(Ok(()))
}
