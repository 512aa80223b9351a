//! The artifact bytes of a transfer: every finished artifact the source's table lists,
//! copied from one blob directory (`yy serve --blob-dir`) to another, or between files and
//! the chunks a PostgreSQL control plane keeps in `artifact_chunks`; each checked against
//! its recorded size and SHA-256, a file written through a temporary file, fsynced, renamed.
//!
//! An upload still in progress (`uploading`) is not copied: its part file has no checksum
//! to check yet, and the control plane begins such an upload again when its part file is
//! missing.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{Result, TransferError, db_error};
use crate::server::store::Db;

/// One artifact's file as the database records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactFile {
    pub id: String,
    pub size: u64,
    pub sha256: String,
    /// Chunk `n` of its bytes in `artifact_chunks` starts at `n * chunk_size`.
    pub chunk_size: u64,
}

/// The table of artifact bytes kept in the database.
pub const CHUNKS_TABLE: &str = "artifact_chunks";

/// What [`copy`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Copied {
    /// Files copied and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Source and target are one directory: nothing was copied.
    pub same_directory: bool,
    /// Where the bytes came from and went: a directory, or [`IN_DATABASE`].
    pub from: String,
    pub to: String,
}

/// [`Copied`]'s words for bytes kept as chunks in the database.
pub const IN_DATABASE: &str = "the database (artifact_chunks)";

/// The finished artifacts `db` lists, by id.
pub fn ready(db: &Db) -> Result<Vec<ArtifactFile>> {
    let fail = |e| db_error("listing the artifacts", e);
    let mut stmt = db
        .prepare(
            "SELECT id, size, sha256, chunk_size FROM artifacts WHERE state = 'ready' ORDER BY id",
        )
        .map_err(fail)?;
    let rows: Vec<(String, i64, String, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .map_err(fail)?
        .collect::<rusqlite::Result<_>>()
        .map_err(fail)?;
    rows.into_iter()
        .map(|(id, size, sha256, chunk_size)| {
            // The id names a file: nothing that could point outside the directory.
            let plain = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !plain || size < 0 || chunk_size <= 0 {
                return Err(TransferError::Db(format!(
                    "the artifacts table lists an artifact {:?} of {size} bytes, which no yy made: the database is damaged",
                    crate::output::cut(&id, 80)
                )));
            }
            Ok(ArtifactFile {
                id,
                size: size as u64,
                sha256,
                chunk_size: chunk_size as u64,
            })
        })
        .collect()
}

fn io(doing: &str, path: &Path, e: std::io::Error) -> TransferError {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            TransferError::Io(format!(
                "disk full while {doing} {}: free some space and run the migration again",
                path.display()
            ))
        }
        _ => TransferError::Io(format!("{doing} {}: {e}", path.display())),
    }
}

/// Copies the file of every artifact in `files` from `from` to `to` (created private when
/// missing), checking each; nothing when both name one directory.
pub fn copy(files: &[ArtifactFile], from: &Path, to: &Path) -> Result<Copied> {
    let mut done = Copied {
        from: from.display().to_string(),
        to: to.display().to_string(),
        ..Copied::default()
    };
    if files.is_empty() {
        return Ok(done);
    }
    if !from.is_dir() {
        return Err(TransferError::NotFound(format!(
            "the blob directory {} does not exist, and the source lists {} finished artifacts whose files it should hold",
            from.display(),
            files.len()
        )));
    }
    crate::fsutil::create_private_dir(to).map_err(|e| io("creating", to, e))?;
    let (a, b) = (std::fs::canonicalize(from), std::fs::canonicalize(to));
    if let (Ok(a), Ok(b)) = (a, b)
        && a == b
    {
        done.same_directory = true;
        return Ok(done);
    }
    for f in files {
        copy_one(f, from, to)?;
        done.files += 1;
        done.bytes += f.size;
    }
    sync_dir(to)?;
    Ok(done)
}

/// Makes the renames into `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing", dir, e))
}

/// A temporary file removed when dropped, unless it was renamed into place.
struct Temp(Option<PathBuf>);

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The file of `f` in `from`, open, and its path.
fn open_file(f: &ArtifactFile, from: &Path) -> Result<(File, PathBuf)> {
    let src = from.join(&f.id);
    match File::open(&src) {
        Ok(file) => Ok((file, src)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(TransferError::NotFound(format!(
                "the file of artifact {} is missing: {} does not exist",
                f.id,
                src.display()
            )))
        }
        Err(e) => Err(io("reading", &src, e)),
    }
}

fn copy_one(f: &ArtifactFile, from: &Path, to: &Path) -> Result<()> {
    let (mut input, src) = open_file(f, from)?;
    let mut buf = vec![0u8; 1 << 20];
    write_checked(f, to, &src.display().to_string(), || {
        let n = input.read(&mut buf).map_err(|e| io("reading", &src, e))?;
        Ok((n > 0).then(|| buf[..n].to_vec()))
    })
}

/// Writes the pieces `next` gives (None: the end) as the file of `f` in `to`, checked
/// against `f`'s size and SHA-256 before it is renamed into place; `shown` names where
/// they came from.
fn write_checked(
    f: &ArtifactFile,
    to: &Path,
    shown: &str,
    mut next: impl FnMut() -> Result<Option<Vec<u8>>>,
) -> Result<()> {
    let dest = to.join(&f.id);
    let tmp_path = to.join(format!(".{}.copy-{}", f.id, std::process::id()));
    let _ = std::fs::remove_file(&tmp_path);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp_path)
        .map_err(|e| io("creating", &tmp_path, e))?;
    let mut tmp = Temp(Some(tmp_path.clone()));
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(piece) = next()? {
        hasher.update(&piece);
        out.write_all(&piece)
            .map_err(|e| io("writing", &tmp_path, e))?;
        size += piece.len() as u64;
    }
    let sha256 = hex::encode(hasher.finalize());
    if size != f.size || sha256 != f.sha256 {
        return Err(mismatch(f, shown, size, &sha256));
    }
    out.sync_all().map_err(|e| io("syncing", &tmp_path, e))?;
    drop(out);
    std::fs::rename(&tmp_path, &dest).map_err(|e| io("renaming into", &dest, e))?;
    tmp.0 = None;
    Ok(())
}

fn mismatch(f: &ArtifactFile, shown: &str, size: u64, sha256: &str) -> TransferError {
    TransferError::Mismatch(format!(
        "the bytes of artifact {} ({shown}) do not match its record: {size} bytes with SHA-256 {sha256}, the database says {} bytes with {}",
        f.id, f.size, f.sha256
    ))
}

/// Chunk `n` of artifact `id` in `db`, if stored.
fn chunk(db: &Db, id: &str, n: u64) -> Result<Option<Vec<u8>>> {
    db.prepare_cached("SELECT data FROM artifact_chunks WHERE artifact_id = ?1 AND n = ?2")
        .and_then(|mut s| {
            s.query_map(rusqlite::params![id, n as i64], |r| r.get(0))?
                .next()
                .transpose()
        })
        .map_err(|e| db_error("reading an artifact's chunk", e))
}

/// Writes the bytes `source` keeps as chunks into files in `to` (created private), each
/// checked.
pub fn chunks_to_files(source: &Db, files: &[ArtifactFile], to: &Path) -> Result<Copied> {
    let mut done = Copied {
        from: IN_DATABASE.into(),
        to: to.display().to_string(),
        ..Copied::default()
    };
    if files.is_empty() {
        return Ok(done);
    }
    crate::fsutil::create_private_dir(to).map_err(|e| io("creating", to, e))?;
    for f in files {
        let mut n = 0;
        let count = crate::server::store::artifact_chunks::chunks_of(f.size, f.chunk_size);
        write_checked(f, to, "its chunks in the source's database", || {
            if n == count {
                return Ok(None);
            }
            let piece = chunk(source, &f.id, n)?.ok_or_else(|| {
                TransferError::NotFound(format!(
                    "chunk {n} of artifact {} is missing from the source's artifact_chunks",
                    f.id
                ))
            })?;
            n += 1;
            Ok(Some(piece))
        })?;
        done.files += 1;
        done.bytes += f.size;
    }
    sync_dir(to)?;
    Ok(done)
}

/// Stores the files in `from` as chunks of their artifacts in `target` (inside the
/// transfer's transaction, after the artifacts' rows), each file checked as it is read and
/// read back from the target once stored.
pub fn files_to_chunks(files: &[ArtifactFile], from: &Path, target: &Db) -> Result<Copied> {
    let mut done = Copied {
        from: from.display().to_string(),
        to: IN_DATABASE.into(),
        ..Copied::default()
    };
    let fail = |e| db_error("storing an artifact's chunk", e);
    for f in files {
        let (input, src) = open_file(f, from)?;
        // At most one byte past the record: a longer file is refused below, unread.
        let limit = f.size.min(crate::api::artifacts::MAX_ARTIFACT_BYTES) + 1;
        let mut bytes = Vec::new();
        input
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| io("reading", &src, e))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if bytes.len() as u64 != f.size || sha256 != f.sha256 {
            return Err(mismatch(
                f,
                &src.display().to_string(),
                bytes.len() as u64,
                &sha256,
            ));
        }
        let mut insert = target
            .prepare_cached(
                "INSERT INTO artifact_chunks (artifact_id, n, data) VALUES (?1, ?2, ?3)",
            )
            .map_err(fail)?;
        for (n, piece) in bytes.chunks(f.chunk_size as usize).enumerate() {
            insert
                .execute(rusqlite::params![f.id, n as i64, piece])
                .map_err(fail)?;
        }
        drop(insert);
        // Read back: what the target holds is what the record says.
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let count = crate::server::store::artifact_chunks::chunks_of(f.size, f.chunk_size);
        for n in 0..count {
            let piece = chunk(target, &f.id, n)?.unwrap_or_default();
            size += piece.len() as u64;
            hasher.update(&piece);
        }
        let read_back = hex::encode(hasher.finalize());
        if size != f.size || read_back != f.sha256 {
            return Err(mismatch(f, "its chunks in the target", size, &read_back));
        }
        done.files += 1;
        done.bytes += f.size;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(dir: &Path, id: &str, bytes: &[u8]) -> ArtifactFile {
        std::fs::write(dir.join(id), bytes).unwrap();
        ArtifactFile {
            id: id.into(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
            chunk_size: 4,
        }
    }

    #[test]
    fn files_are_checked_as_they_are_copied() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir(&from).unwrap();
        let good = artifact(&from, "one", b"hello");
        let done = copy(std::slice::from_ref(&good), &from, &to).unwrap();
        assert_eq!((done.files, done.bytes, done.same_directory), (1, 5, false));
        assert_eq!(std::fs::read(to.join("one")).unwrap(), b"hello");

        let mut bad = artifact(&from, "two", b"world");
        bad.sha256 = good.sha256.clone();
        let e = copy(&[bad], &from, &to).unwrap_err();
        assert!(matches!(e, TransferError::Mismatch(_)), "{e}");
        assert!(!to.join("two").exists());
        assert_eq!(
            std::fs::read_dir(&to).unwrap().count(),
            1,
            "no temporary left"
        );

        let missing = ArtifactFile {
            id: "three".into(),
            ..good.clone()
        };
        let e = copy(&[missing], &from, &to).unwrap_err();
        assert!(matches!(e, TransferError::NotFound(_)), "{e}");

        let same = copy(&[good], &from, &from).unwrap();
        assert!(same.same_directory && same.files == 0);
    }
}
