//! Artifact bytes kept in the database (`artifact_chunks`, issue 27): with PostgreSQL and
//! no `yy serve --blob-dir`, every verified chunk of an upload is a row, so that every
//! replica serves every artifact. Chunk `n` holds the bytes from `n * chunk_size` (the
//! artifact's); a chunk is stored in the same savepoint that advances the upload's
//! `received`, so the database never records progress without its bytes. The rows go with
//! their artifact's (`ON DELETE CASCADE`: retention and discarded uploads take them along).
//! SQLite's control plane keeps files instead and leaves the table empty.

use rusqlite::{OptionalExtension, params};

use super::StoreError;
use super::artifacts::{self, ArtifactKind, ArtifactRow, ArtifactState};
use super::db::Db;
use crate::timefmt::now_ms;

/// What became of a chunk offered to [`put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Stored: the upload's verified bytes now reach this far.
    Stored(u64),
    /// Received before with the same bytes (a retry whose answer was lost).
    Repeated,
    /// Received before with other bytes.
    Differs,
    /// It lies past the next expected chunk: the upload's bytes reach only this far.
    OutOfOrder(u64),
    /// The upload was sealed meanwhile.
    Ready,
    /// The chunk is recorded as received but has no row (removed behind the store's back).
    Lost,
}

/// Stores chunk `n` (at byte `offset`) of the upload `id`, already checked against its
/// checksum, and advances the upload's `received` over it, in one savepoint; a chunk sent
/// again is compared with the stored one instead.
pub fn put(conn: &Db, id: &str, n: u64, offset: u64, data: &[u8]) -> Result<Put, StoreError> {
    let tx = conn.savepoint()?;
    let found: Option<(ArtifactState, i64)> = tx
        .query_row(
            "SELECT state, received FROM artifacts WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((state, received)) = found else {
        return Err(StoreError::NotFound(format!("no artifact {id:?}")));
    };
    let received = received as u64;
    if state == ArtifactState::Ready {
        return Ok(Put::Ready);
    }
    if offset > received {
        return Ok(Put::OutOfOrder(received));
    }
    if offset < received {
        let same: Option<bool> = tx
            .query_row(
                "SELECT data = ?3 FROM artifact_chunks WHERE artifact_id = ?1 AND n = ?2",
                params![id, n as i64, data],
                |r| r.get(0),
            )
            .optional()?;
        return Ok(match same {
            Some(true) => Put::Repeated,
            Some(false) => Put::Differs,
            None => Put::Lost,
        });
    }
    // A row left over from before a restart of the upload (which removes them) is
    // replaced, never appended to.
    tx.execute(
        "INSERT INTO artifact_chunks (artifact_id, n, data) VALUES (?1, ?2, ?3)
         ON CONFLICT (artifact_id, n) DO UPDATE SET data = excluded.data",
        params![id, n as i64, data],
    )?;
    let now_received = received + data.len() as u64;
    tx.execute(
        "UPDATE artifacts SET received = ?2, updated_at = ?3 WHERE id = ?1",
        params![id, now_received as i64, now_ms()],
    )?;
    tx.commit()?;
    Ok(Put::Stored(now_received))
}

/// Chunk `n` of artifact `id`, if it is stored.
pub fn chunk(conn: &Db, id: &str, n: u64) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT data FROM artifact_chunks WHERE artifact_id = ?1 AND n = ?2")?
        .query_row(params![id, n as i64], |r| r.get(0))
        .optional()?)
}

/// How many chunks of `chunk_size` bytes hold `size` bytes.
pub fn chunks_of(size: u64, chunk_size: u64) -> u64 {
    size.div_ceil(chunk_size.max(1))
}

/// Makes the upload `id` ready as `size` bytes with the SHA-256 `sha256` (both checked over
/// the stored chunks by the caller), once its rows hold exactly those bytes: as many
/// chunks as `size` needs and `size` bytes in all. Otherwise nothing changes and the
/// error says what the rows hold.
pub fn seal(conn: &Db, id: &str, size: u64, sha256: &str) -> Result<ArtifactRow, StoreError> {
    let tx = conn.savepoint()?;
    let row = artifacts::get(&tx, id)?;
    if row.is_ready() {
        return Ok(row);
    }
    let (count, bytes): (i64, i64) = tx.query_row(
        "SELECT count(*), coalesce(sum(length(data)), 0) FROM artifact_chunks
         WHERE artifact_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let chunks = chunks_of(size, row.chunk_size as u64);
    if row.received as u64 != size || count as u64 != chunks || bytes as u64 != size {
        return Err(StoreError::Conflict(format!(
            "artifact {id} holds {} in {} (recorded as received: {}), not the {} announced; upload it again",
            crate::api::words::plural(bytes, "byte", "bytes"),
            crate::api::words::plural(count, "chunk", "chunks"),
            row.received,
            size
        )));
    }
    let now = now_ms();
    tx.execute(
        "UPDATE artifacts SET state = ?2, size = ?3, received = ?3, sha256 = ?4,
             finished_at = ?5, updated_at = ?5 WHERE id = ?1",
        params![id, ArtifactState::Ready, size as i64, sha256, now],
    )?;
    let sealed = artifacts::get(&tx, id)?;
    tx.commit()?;
    Ok(sealed)
}

/// Begins a file a user attaches (`POST /api/v1/uploads`) whose bytes go into the
/// database: an `uploading` input of `account_id`, its chunks `chunk_size` bytes, sealed
/// by [`seal`] once the whole body arrived and was checked (`size`: what the request
/// announced, if it did).
pub fn begin_input(
    conn: &Db,
    id: &str,
    account_id: &str,
    name: &str,
    size: u64,
    chunk_size: u64,
) -> Result<(), StoreError> {
    let now = now_ms();
    conn.execute(
        "INSERT INTO artifacts (id, kind, name, size, sha256, chunk_size, received, state,
             account_id, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, '', ?5, 0, ?6, ?7, ?8, ?8)",
        params![
            id,
            ArtifactKind::Input,
            name,
            size as i64,
            chunk_size as i64,
            ArtifactState::Uploading,
            account_id,
            now
        ],
    )?;
    Ok(())
}

/// Removes an upload that will not be finished (an attached file that arrived damaged),
/// with its chunks; a ready artifact stays.
pub fn discard(conn: &Db, id: &str) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM artifacts WHERE id = ?1 AND state = ?2",
        params![id, ArtifactState::Uploading],
    )?;
    Ok(())
}

/// Bytes stored in the database for artifact `id`.
#[cfg(test)]
pub fn stored_bytes(conn: &Db, id: &str) -> Result<u64, StoreError> {
    let bytes: i64 = conn.query_row(
        "SELECT coalesce(sum(length(data)), 0) FROM artifact_chunks WHERE artifact_id = ?1",
        [id],
        |r| r.get(0),
    )?;
    Ok(bytes as u64)
}
