//! Where artifact bytes are kept ([`Blobs`]) and how they are read back ([`Source`]):
//! files in a directory (see `part`), or rows of the database's `artifact_chunks`
//! (PostgreSQL without `--blob-dir`, issue 27), so that every replica serves every
//! artifact with nothing shared but the database. In the database each verified chunk is
//! stored in the same transaction as the upload's progress, and the finish reads the
//! chunks back to check the whole file's size and SHA-256 before the row becomes ready.
//! Reading holds one chunk (at most 4 MiB) at a time, and the next one while it is sent.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::upload::{ChunkCheck, ChunkId, Stored, receive};
use super::{ApiError, blocking_failed};
use crate::server::store::Store;
use crate::server::store::artifact_chunks::{self as chunks, Put};

/// Where a control plane keeps artifact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blobs {
    /// Files in a directory: `ID.part` while uploading, `ID` once sealed (SQLite always;
    /// PostgreSQL with `--blob-dir`, a directory every replica mounts).
    Dir(PathBuf),
    /// Rows of `artifact_chunks` in the PostgreSQL database (without `--blob-dir`).
    Database,
}

impl Blobs {
    /// Where the bytes are, for the log and `yy status`.
    pub fn describe(&self) -> String {
        match self {
            Blobs::Dir(dir) => format!("files in {}", dir.display()),
            Blobs::Database => "the database (table artifact_chunks)".into(),
        }
    }
}

/// Bytes read per blocking step while a file is sent.
const SEND_PIECE: usize = 1 << 20;

/// An artifact's bytes being read: an open file, or its chunks in the database.
#[derive(Clone)]
pub(super) enum Source {
    File(Arc<std::fs::File>),
    Chunks {
        store: Store,
        id: Arc<str>,
        chunk_size: u64,
    },
}

impl Source {
    /// How many bytes the read at `at` takes, short of `end`: a piece of a file, or the
    /// rest of the chunk `at` lies in (so that each chunk is read once).
    pub(super) fn piece(&self, at: u64, end: u64) -> usize {
        let most = match self {
            Source::File(_) => SEND_PIECE as u64,
            Source::Chunks { chunk_size, .. } => {
                let chunk_size = (*chunk_size).max(1);
                chunk_size - at % chunk_size
            }
        };
        end.saturating_sub(at).min(most) as usize
    }

    /// Up to `len` bytes at `at` (fewer at the end), read on a blocking thread or through
    /// the store; none past the end.
    pub(super) fn read(
        &self,
        at: u64,
        len: usize,
    ) -> tokio::task::JoinHandle<std::io::Result<Bytes>> {
        match self {
            Source::File(file) => read_file(file.clone(), at, len),
            Source::Chunks {
                store,
                id,
                chunk_size,
            } => {
                let (store, id, chunk_size) = (store.clone(), id.clone(), (*chunk_size).max(1));
                tokio::spawn(async move {
                    let (n, within) = (at / chunk_size, (at % chunk_size) as usize);
                    let data = store
                        .call(move |c| chunks::chunk(c, &id, n))
                        .await
                        .map_err(std::io::Error::other)?;
                    let data = Bytes::from(data.unwrap_or_default());
                    let end = within.saturating_add(len).min(data.len());
                    Ok(data.slice(within.min(end)..end))
                })
            }
        }
    }
}

/// Up to `len` bytes of `file` at `at`, read on a blocking thread (fewer at its end).
fn read_file(
    file: Arc<std::fs::File>,
    at: u64,
    len: usize,
) -> tokio::task::JoinHandle<std::io::Result<Bytes>> {
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut buf[filled..], at + filled as u64)? {
                0 => break,
                n => filled += n,
            }
        }
        buf.truncate(filled);
        Ok(Bytes::from(buf))
    })
}

/// The first `size` bytes of `source` as a response body, read one piece ahead of the
/// connection: the next read overlaps the send, and nothing waits on a slow receiver
/// but the piece in hand. A source shorter than `size` ends the body early (the receiver
/// sees fewer bytes than its Content-Length).
pub(super) fn body(source: Source, size: u64) -> axum::body::Body {
    let first = (size > 0).then(|| source.read(0, source.piece(0, size)));
    let stream = futures_util::stream::try_unfold(
        (source, 0u64, first),
        move |(source, at, ahead)| async move {
            let Some(reading) = ahead else {
                return Ok(None);
            };
            let bytes = reading.await.map_err(std::io::Error::other)??;
            if bytes.is_empty() {
                return Ok(None);
            }
            let next = at + bytes.len() as u64;
            let ahead = (next < size).then(|| source.read(next, source.piece(next, size)));
            Ok::<_, std::io::Error>(Some((bytes, (source, next, ahead))))
        },
    );
    axum::body::Body::from_stream(stream)
}

/// Receives chunk `chunk` (at `offset`) into memory, checks it against its checksum, and
/// stores it with the upload's progress in one store call; a chunk sent again is compared
/// with the stored one. A refused chunk stores nothing.
pub(super) async fn store_chunk(
    store: &Store,
    body: axum::body::Body,
    check: ChunkCheck,
    chunk: &ChunkId<'_>,
    offset: u64,
) -> Result<Stored, ApiError> {
    let data = receive(body, &check, chunk).await?;
    let (id, n) = (chunk.artifact.to_string(), chunk.n);
    let put = store
        .call(move |c| chunks::put(c, &id, n, offset, &data))
        .await?;
    Ok(match put {
        Put::Stored(at) => Stored::Recorded(at),
        Put::Repeated => Stored::Repeated,
        Put::Differs => Stored::Differs,
        Put::OutOfOrder(at) => Stored::OutOfOrder(at),
        Put::Ready => Stored::Sealed,
        Put::Lost => Stored::Lost,
    })
}

/// Reads the chunks of artifact `id` back from the database and checks their size and
/// SHA-256 against `size` and `sha`. The inner error says why they are not the file
/// announced.
pub(super) async fn check_whole(
    store: &Store,
    id: &str,
    (size, chunk_size): (u64, u64),
    sha: &str,
) -> Result<Result<(), String>, ApiError> {
    let count = chunks::chunks_of(size, chunk_size);
    let (got_size, got_sha) = hash_chunks(store, id, count).await?;
    if got_size != size || got_sha != sha {
        return Ok(Err(format!(
            "{} with SHA-256 {got_sha}, announced {} with {sha}",
            crate::api::words::plural(got_size, "byte", "bytes"),
            crate::api::words::plural(size, "byte", "bytes")
        )));
    }
    Ok(Ok(()))
}

/// The size and SHA-256 of the first `count` chunks of artifact `id` (up to the first
/// missing one), read one at a time, the next while the one before is hashed.
async fn hash_chunks(store: &Store, id: &str, count: u64) -> Result<(u64, String), ApiError> {
    let read = |n: u64| {
        let (store, id) = (store.clone(), id.to_string());
        tokio::spawn(async move { store.call(move |c| chunks::chunk(c, &id, n)).await })
    };
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut next = (count > 0).then(|| read(0));
    let mut n = 0;
    while let Some(reading) = next.take() {
        let Some(data) = reading.await.map_err(blocking_failed)?? else {
            break;
        };
        n += 1;
        next = (n < count).then(|| read(n));
        size += data.len() as u64;
        hasher = tokio::task::spawn_blocking(move || {
            hasher.update(&data);
            hasher
        })
        .await
        .map_err(blocking_failed)?;
    }
    Ok((size, hex::encode(hasher.finalize())))
}
