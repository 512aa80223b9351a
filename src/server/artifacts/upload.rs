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
    state
        .artifacts
        .followers
        .touch(row.command_id.as_deref(), false);
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

    fn claimed(&self) -> String {
        match self {
            ChunkCheck::Crc32(c) => format!("{c:08x}"),
            ChunkCheck::Sha256(s) => s.clone(),
        }
    }

    fn start(&self) -> RunningCheck {
        match self {
            ChunkCheck::Crc32(_) => RunningCheck::Crc32(crc32fast::Hasher::new()),
            ChunkCheck::Sha256(_) => RunningCheck::Sha256(Sha256::new()),
        }
    }
}

/// A chunk's checksum, computed as its bytes go by.
enum RunningCheck {
    Crc32(crc32fast::Hasher),
    Sha256(Sha256),
}

impl RunningCheck {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            RunningCheck::Crc32(h) => h.update(bytes),
            RunningCheck::Sha256(h) => h.update(bytes),
        }
    }

    fn hex(self) -> String {
        match self {
            RunningCheck::Crc32(h) => format!("{:08x}", h.finalize()),
            RunningCheck::Sha256(h) => hex::encode(h.finalize()),
        }
    }
}

/// How a chunk is named in errors, and how large it must be.
struct ChunkId<'a> {
    artifact: &'a str,
    n: u64,
    expected: u64,
}

impl ChunkId<'_> {
    fn wrong_size(&self, got: u64) -> ApiError {
        ApiError::bad_request(format!(
            "chunk {} of artifact {} must be {} bytes, not {got}",
            self.n, self.artifact, self.expected
        ))
    }

    fn corrupt(&self, actual: &str, claimed: &str) -> ApiError {
        corrupt(format!(
            "chunk {} of artifact {} is corrupt (its checksum is {actual}, the header says {claimed}); nothing was stored",
            self.n, self.artifact
        ))
    }

    fn unreadable(&self, e: impl std::fmt::Display) -> ApiError {
        ApiError::bad_request(format!("reading chunk {}: {e}", self.n))
    }
}

/// Reads a chunk's body (exactly `expected` bytes) into memory and checks it: for a chunk
/// sent again, which is compared with what the part file holds.
async fn receive(
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

/// A chunk that extends the part file, received.
enum Appended {
    /// Written and checked; the whole file's hash advanced over it.
    Stored(Option<Sha256>),
    /// The part file holds less than was recorded as received.
    Lost,
}

/// Receives the chunk that extends the part file at `received`. Each frame is checked,
/// hashed and written on a blocking thread while the next one arrives, so the chunk is
/// never held whole in memory and the disk write overlaps the transfer; no thread waits on
/// a slow sender. Unless the whole chunk arrived intact, what was written past `received`
/// is cut off again.
async fn receive_appended(
    body: axum::body::Body,
    check: ChunkCheck,
    chunk: &ChunkId<'_>,
    (part, received): (std::path::PathBuf, u64),
    whole: Option<Sha256>,
) -> Result<Appended, ApiError> {
    let claimed = check.claimed();
    let opened =
        tokio::task::spawn_blocking(move || PartWriter::open(&part, received, check, whole));
    let Some(writer) = joined(opened.await)? else {
        return Ok(Appended::Lost);
    };
    let mut slot = Slot::Idle(Box::new(writer));
    let mut seen = 0u64;
    let mut failure = None;
    let mut stream = body.into_data_stream();
    while let Some(frame) = stream.next().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                failure = Some(chunk.unreadable(e));
                break;
            }
        };
        seen += frame.len() as u64;
        if seen > chunk.expected {
            failure = Some(chunk.wrong_size(seen));
            break;
        }
        let w = slot.idle().await?;
        slot = Slot::Busy(tokio::task::spawn_blocking(move || w.write(&frame)));
    }
    let w = slot.idle().await?;
    let (complete, expected) = (failure.is_none(), chunk.expected);
    let finished = tokio::task::spawn_blocking(move || w.finish(complete, expected));
    let (written, actual, whole) = joined(finished.await)?;
    if let Some(e) = failure {
        return Err(e);
    }
    if written != chunk.expected {
        return Err(chunk.wrong_size(written));
    }
    if actual != claimed {
        return Err(chunk.corrupt(&actual, &claimed));
    }
    Ok(Appended::Stored(whole))
}

/// The part file's writer: idle, or busy writing the frame before.
enum Slot {
    Idle(Box<PartWriter>),
    Busy(tokio::task::JoinHandle<std::io::Result<PartWriter>>),
}

impl Slot {
    /// The writer once it is done with what it was given.
    async fn idle(self) -> Result<PartWriter, ApiError> {
        match self {
            Slot::Idle(w) => Ok(*w),
            Slot::Busy(h) => joined(h.await),
        }
    }
}

/// The answer of a blocking part-file step.
fn joined<T>(r: Result<std::io::Result<T>, tokio::task::JoinError>) -> Result<T, ApiError> {
    r.map_err(blocking_failed)?
        .map_err(|e| io_error("writing an artifact chunk", e))
}

/// The part file open at the end of what was received, with the checksums of what was
/// written since.
struct PartWriter {
    file: File,
    received: u64,
    written: u64,
    expected_check: String,
    running: RunningCheck,
    whole: Option<Sha256>,
}

impl PartWriter {
    /// `None` when the part file holds less than was recorded (it is emptied).
    fn open(
        part: &Path,
        received: u64,
        check: ChunkCheck,
        whole: Option<Sha256>,
    ) -> std::io::Result<Option<PartWriter>> {
        let mut file = open_part(part)?;
        if file.metadata()?.len() < received {
            file.set_len(0)?;
            return Ok(None);
        }
        // Anything past `received` is an unrecorded write of an interrupted request.
        file.set_len(received)?;
        file.seek(SeekFrom::Start(received))?;
        Ok(Some(PartWriter {
            file,
            received,
            written: 0,
            expected_check: check.claimed(),
            running: check.start(),
            whole,
        }))
    }

    fn write(mut self, frame: &[u8]) -> std::io::Result<PartWriter> {
        self.running.update(frame);
        if let Some(w) = self.whole.as_mut() {
            w.update(frame);
        }
        self.file.write_all(frame)?;
        self.written += frame.len() as u64;
        Ok(self)
    }

    /// Keeps the chunk when it is `complete`, `expected` bytes long and its checksum is
    /// the one claimed (and starts writing it out); cuts it off otherwise. Returns the
    /// bytes written, their checksum, and the whole file's hash advanced over them.
    fn finish(
        self,
        complete: bool,
        expected: u64,
    ) -> std::io::Result<(u64, String, Option<Sha256>)> {
        let actual = self.running.hex();
        if !complete || self.written != expected || actual != self.expected_check {
            self.file.set_len(self.received)?;
            return Ok((self.written, actual, None));
        }
        // Start writing the chunk out now (without waiting), so the finish's fsync finds
        // little left to do. Not fsynced here: the finish checks the whole part and fsyncs
        // it before it becomes an artifact, so a chunk lost in a crash shows as a short
        // part (`Lost`) or a mismatch at the finish, and the upload starts over; never as
        // a partial artifact.
        // SAFETY: a range of our own open file; the call only schedules writeback.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                self.received as i64,
                self.written as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        Ok((self.written, actual, self.whole))
    }
}

fn open_part(part: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(part)
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
    if offset > received {
        return Err(ApiError::conflict(format!(
            "chunk {n} of artifact {id} is out of order: the next one is {}",
            received / chunk_size
        )));
    }
    let chunk = ChunkId {
        artifact: &id,
        n,
        expected: chunk_size.min(size - offset),
    };
    let part = files.part(&id);
    let stored = if offset == received {
        // Only a chunk appended right where the hash stands extends the whole file's hash;
        // it is put back as it was when the chunk is refused.
        let whole = files.hashing.take(&id, received);
        let kept = whole.clone();
        let appended = receive_appended(body, check, &chunk, (part, received), whole).await;
        if appended.is_err()
            && let Some(h) = kept
        {
            files.hashing.put(&id, received, h);
        }
        match appended? {
            Appended::Stored(whole) => {
                if let Some(h) = whole {
                    files.hashing.put(&id, received + chunk.expected, h);
                }
                Stored::Appended
            }
            Appended::Lost => Stored::Lost,
        }
    } else {
        let data = receive(body, &check, &chunk).await?;
        tokio::task::spawn_blocking(move || compare_chunk(&part, offset, received, &data))
            .await
            .map_err(blocking_failed)?
            .map_err(|e| io_error("reading an artifact chunk", e))?
    };
    let new_received = match stored {
        Stored::Appended => received + chunk.expected,
        Stored::Repeated => received,
        Stored::Differs => {
            return Err(ApiError::conflict(format!(
                "chunk {n} of artifact {id} was received before with other bytes; begin the upload again"
            )));
        }
        Stored::Lost => {
            // The part file is shorter than recorded (lost on a crash): start over.
            let key = id.clone();
            state.store.call(move |c| rows::restart(c, &key)).await?;
            files.followers.touch(row.command_id.as_deref(), true);
            let mut restarted = row.upload_state();
            restarted.received = 0;
            return Ok(Json(restarted));
        }
    };
    let key = id.clone();
    state
        .store
        .call(move |c| rows::record_received(c, &key, new_received as i64))
        .await?;
    files.followers.touch(row.command_id.as_deref(), false);
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

/// Compares a chunk sent again (at `offset`, before `received`) with the part file.
fn compare_chunk(part: &Path, offset: u64, received: u64, data: &[u8]) -> std::io::Result<Stored> {
    let mut f = open_part(part)?;
    if f.metadata()?.len() < received {
        f.set_len(0)?;
        return Ok(Stored::Lost);
    }
    let mut have = vec![0u8; data.len()];
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(&mut have)?;
    Ok(if have == data {
        Stored::Repeated
    } else {
        Stored::Differs
    })
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
            files.followers.touch(row.command_id.as_deref(), true);
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
        files.followers.touch(row.command_id.as_deref(), true);
        return Err(corrupt(format!(
            "artifact {id} is corrupt ({why}); nothing was kept, upload it again from the start"
        )));
    }
    let key = id.clone();
    let row = state
        .store
        .call(move |c| rows::mark_ready(c, &key, &announced))
        .await?;
    files.followers.touch(row.command_id.as_deref(), false);
    crate::server::telemetry::artifact_bytes("in", row.size as u64);
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
    // An empty file sends no chunk, so nothing created its part file: opening creates it
    // (a missing part of a non-empty file is then caught as 0 bytes, not the size).
    let file = open_part(part)?;
    let (got_size, got_sha) = match hashed {
        Some(h) => (file.metadata()?.len(), h),
        None => crate::fsutil::sha256_file(part)?,
    };
    if got_size != size || got_sha != sha {
        let _ = std::fs::remove_file(part);
        return Ok(Err(format!(
            "{} with SHA-256 {got_sha}, announced {} with {sha}",
            crate::api::words::plural(got_size, "byte", "bytes"),
            crate::api::words::plural(size, "byte", "bytes")
        )));
    }
    file.sync_all()?;
    std::fs::rename(part, dest)?;
    if let Some(dir) = dest.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(Ok(()))
}
