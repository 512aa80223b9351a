//! Files written so that a crash or a full disk never leaves half a file, and secrets are
//! never readable by others, not even for a moment.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The size and SHA-256 (hex) of the file at `path`, read in 1 MiB pieces.
pub fn sha256_file(path: &Path) -> io::Result<(u64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok((n, hex::encode(hasher.finalize())));
        }
        hasher.update(&buf[..got]);
        n += got as u64;
    }
}

/// Writes `data` to `path` through a temporary file in the same directory: created with
/// `mode`, fsynced, renamed over the target, and the directory fsynced.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed the mode; never widen it, but make it exact.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (and parents) and makes it private to the owner. An existing directory
/// that others may write to (a shared one such as /tmp, mode 1777) or that another user
/// owns is refused: making it private would take it from them.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(dir) {
        Ok(meta) => {
            let shared = meta.mode() & 0o1002 != 0;
            // SAFETY: geteuid has no preconditions.
            let foreign = meta.uid() != unsafe { libc::geteuid() };
            if !meta.is_dir() || shared || foreign {
                let why = if !meta.is_dir() {
                    "is not a directory"
                } else if foreign {
                    "belongs to another user"
                } else {
                    "is shared with other users (others may write to it)"
                };
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} {why}; use a directory of its own, e.g. {}",
                        dir.display(),
                        dir.join("yy").display()
                    ),
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir)?,
        Err(e) => return Err(e),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Makes a SQLite database file private before SQLite opens it: created 0600 when missing,
/// narrowed to 0600 (with its `-wal` and `-shm`) when it exists. SQLite creates the `-wal`
/// and `-shm` files with the database file's mode.
pub fn private_db_file(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match fs::set_permissions(Path::new(&name), fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// True when a file's mode lets group or others read or write it.
pub fn is_shared(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// sun_path holds 108 bytes; a longer socket path goes to a private temp directory.
const SOCKET_PATH_MAX: usize = 100;

/// Where a unix socket of a private directory is bound: `dir/name`, or, when that path is
/// too long for a socket, `name` in a fresh private directory under the system's temp
/// directory (never someone else's: created anew). A socket left there by an earlier run
/// is removed. Dropping it removes the socket (and that temp directory).
pub struct SocketPath {
    path: std::path::PathBuf,
    temp_dir: Option<std::path::PathBuf>,
}

impl SocketPath {
    /// `prefix` names the temp directory (`PREFIX-RANDOM`) when one is needed.
    pub fn new(dir: &Path, name: &str, prefix: &str) -> io::Result<SocketPath> {
        let mut path = dir.join(name);
        let mut temp_dir = None;
        if path.as_os_str().len() > SOCKET_PATH_MAX {
            let mut bytes = [0u8; 8];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
            let t = std::env::temp_dir().join(format!("{prefix}-{}", hex::encode(bytes)));
            // A fresh name: create_dir fails rather than reuse someone else's directory.
            fs::create_dir(&t)?;
            fs::set_permissions(&t, fs::Permissions::from_mode(0o700))?;
            path = t.join(name);
            temp_dir = Some(t);
        }
        // A socket left by an earlier run (one Runner per data directory).
        let _ = fs::remove_file(&path);
        Ok(SocketPath { path, temp_dir })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        if let Some(t) = &self.temp_dir {
            let _ = fs::remove_dir(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_directories_are_refused_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let e = create_private_dir(&shared).unwrap_err();
        assert!(e.to_string().contains("use a directory of its own"), "{e}");
        let mode = fs::metadata(&shared).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o1777, "left as it was");

        let mine = dir.path().join("a/b");
        create_private_dir(&mine).unwrap();
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&mine).unwrap();
        assert_eq!(
            fs::metadata(&mine).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn database_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        fs::write(dir.path().join("x.db-wal"), b"").unwrap();
        fs::set_permissions(
            dir.path().join("x.db-wal"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        private_db_file(&db).unwrap();
        for f in ["x.db", "x.db-wal"] {
            let mode = fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }
}
