//! Artifact bytes as files in a directory (`yy serve --blob-dir`, default
//! `DATA_DIR/artifacts`; SQLite's control plane always): an upload is written to `ID.part`,
//! which grows only by verified chunks, and renamed to `ID` only after the whole file's size
//! and SHA-256 were checked. The whole file's SHA-256 is computed as the chunks are
//! appended, so that a finish need not read the part again.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::upload::{ChunkCheck, ChunkId, RunningCheck, Stored, receive};
use super::{ApiError, ArtifactFiles, blocking_failed, io_error};

/// The file of a sealed artifact.
pub(super) fn sealed_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(id)
}

/// The part file of an upload.
pub(super) fn part_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.part"))
}

/// Removes the files (finished or partial) of artifacts whose rows are gone.
pub(super) fn remove(dir: &Path, ids: &[String]) {
    for id in ids {
        for path in [sealed_path(dir, id), part_path(dir, id)] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(artifact = %id, error = %e, "cannot remove an artifact file")
                }
            }
        }
    }
}

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

/// Stores chunk `chunk` (at `offset`) of the upload `id` in its part file, which holds
/// `received` verified bytes: appended when it extends the part, compared with the part
/// when it was received before.
pub(super) async fn store_chunk(
    files: &ArtifactFiles,
    dir: &Path,
    body: axum::body::Body,
    check: ChunkCheck,
    chunk: &ChunkId<'_>,
    (offset, received): (u64, u64),
) -> Result<Stored, ApiError> {
    let id = chunk.artifact;
    let part = part_path(dir, id);
    if offset != received {
        let data = receive(body, &check, chunk).await?;
        return tokio::task::spawn_blocking(move || compare_chunk(&part, offset, received, &data))
            .await
            .map_err(blocking_failed)?
            .map_err(|e| io_error("reading an artifact chunk", e));
    }
    // Only a chunk appended right where the hash stands extends the whole file's hash; it
    // is put back as it was when the chunk is refused.
    let whole = files.hashing.take(id, received);
    let kept = whole.clone();
    let appended = receive_appended(body, check, chunk, (part, received), whole).await;
    if appended.is_err()
        && let Some(h) = kept
    {
        files.hashing.put(id, received, h);
    }
    Ok(match appended? {
        Appended::Stored(whole) => {
            if let Some(h) = whole {
                files.hashing.put(id, received + chunk.expected, h);
            }
            Stored::Appended
        }
        Appended::Lost => Stored::Lost,
    })
}

/// Checks the whole part file of upload `id` (`size` bytes with the SHA-256 `sha`) and
/// renames it into place. The inner error says why it is not the file announced (the part
/// is then removed).
pub(super) async fn finish(
    files: &ArtifactFiles,
    dir: &Path,
    id: &str,
    size: u64,
    sha: String,
) -> Result<Result<(), String>, ApiError> {
    // The hash kept while the chunks arrived, when it covers the whole file (not after a
    // restart of this control plane): then the part is not read again.
    let hashed = files
        .hashing
        .take(id, size)
        .filter(|_| size > 0)
        .map(|h| hex::encode(h.finalize()));
    let (part, dest) = (part_path(dir, id), sealed_path(dir, id));
    tokio::task::spawn_blocking(move || seal(&part, &dest, size, &sha, hashed))
        .await
        .map_err(blocking_failed)?
        .map_err(|e| io_error("sealing an artifact", e))
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
