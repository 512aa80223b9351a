//! The artifact files of a transfer: every finished artifact the source's table lists,
//! copied from one blob directory (`yy serve --blob-dir`) to another, each checked against
//! its recorded size and SHA-256 and written through a temporary file, fsynced, renamed.
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
}

/// What [`copy`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Copied {
    /// Files copied and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Source and target are one directory: nothing was copied.
    pub same_directory: bool,
    pub from: PathBuf,
    pub to: PathBuf,
}

/// The finished artifacts `db` lists, by id.
pub fn ready(db: &Db) -> Result<Vec<ArtifactFile>> {
    let fail = |e| db_error("listing the artifacts", e);
    let mut stmt = db
        .prepare("SELECT id, size, sha256 FROM artifacts WHERE state = 'ready' ORDER BY id")
        .map_err(fail)?;
    let rows: Vec<(String, i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(fail)?
        .collect::<rusqlite::Result<_>>()
        .map_err(fail)?;
    rows.into_iter()
        .map(|(id, size, sha256)| {
            // The id names a file: nothing that could point outside the directory.
            let plain = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !plain || size < 0 {
                return Err(TransferError::Db(format!(
                    "the artifacts table lists an artifact {:?} of {size} bytes, which no yy made: the database is damaged",
                    crate::output::cut(&id, 80)
                )));
            }
            Ok(ArtifactFile {
                id,
                size: size as u64,
                sha256,
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
        from: from.to_path_buf(),
        to: to.to_path_buf(),
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
    File::open(to)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing", to, e))?;
    Ok(done)
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

fn copy_one(f: &ArtifactFile, from: &Path, to: &Path) -> Result<()> {
    let src = from.join(&f.id);
    let mut input = match File::open(&src) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TransferError::NotFound(format!(
                "the file of artifact {} is missing: {} does not exist",
                f.id,
                src.display()
            )));
        }
        Err(e) => return Err(io("reading", &src, e)),
    };
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
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = input.read(&mut buf).map_err(|e| io("reading", &src, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| io("writing", &tmp_path, e))?;
        size += n as u64;
    }
    let sha256 = hex::encode(hasher.finalize());
    if size != f.size || sha256 != f.sha256 {
        return Err(TransferError::Mismatch(format!(
            "the file of artifact {} ({}) does not match its record: it has {size} bytes with SHA-256 {sha256}, the database says {} bytes with {}",
            f.id,
            src.display(),
            f.size,
            f.sha256
        )));
    }
    out.sync_all().map_err(|e| io("syncing", &tmp_path, e))?;
    drop(out);
    std::fs::rename(&tmp_path, &dest).map_err(|e| io("renaming into", &dest, e))?;
    tmp.0 = None;
    Ok(())
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
