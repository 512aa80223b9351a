//! What a backup takes from a data directory, and writing the archive.
//!
//! Everything under the directory is taken, with these rules:
//! * a top-level `NAME.db` that is a SQLite database is copied through SQLite's online
//!   backup API (a consistent snapshot even while `yy serve` writes to it); its `-wal`,
//!   `-shm` and `-journal` files are not taken (the snapshot contains what they hold);
//! * a Runner's `runner.lock` and the control plane's `serve.lock` are not taken (locks,
//!   not data), nor a Runner's workspace disk images (`workspaces/ID.img`, and a
//!   migration's `workspaces/.ID...` leftovers): the workspace's files are taken through
//!   its mount;
//! * in the control plane's directory, top-level names starting with `runner-` or
//!   `.runner-` are not taken: Runner data directories nested there (the default layout,
//!   `$XDG_DATA_HOME/yy/runner-ID`) and their locks and restore files belong to the
//!   Runner, which has its own backup (`yy runner backup`);
//! * regular files and directories are taken as they are; symlinks only inside a Runner's
//!   workspaces (the guest's files, stored as links, never followed), elsewhere they are
//!   skipped with a warning, as are sockets, FIFOs and devices.
//!
//! The lock, journal, staging directory, log and dated copies of a restore live beside the
//! data directory, not in it, so they are never part of a backup.

use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::archive::{ArchiveWriter, Written};
use super::manifest::{Entry, EntryType, FORMAT, Manifest};
use super::progress::Progress;
use super::{BackupError, Kind, Result, io_error};

/// True for a path (relative to the data directory) that names a database snapshot.
pub fn is_database(path: &str) -> bool {
    !path.contains('/') && path.ends_with(".db")
}

/// True for a top-level name of the control plane's directory that belongs to a Runner
/// data directory nested in it (the directory itself, its lock and restore files).
pub fn is_nested_runner(name: &str) -> bool {
    name.starts_with("runner-") || name.starts_with(".runner-")
}

/// True for a top-level name the backup leaves out.
fn left_out(kind: Kind, name: &str) -> bool {
    let sidecar = ["-wal", "-shm", "-journal"]
        .iter()
        .any(|s| name.strip_suffix(s).is_some_and(|db| db.ends_with(".db")));
    sidecar
        || match kind {
            Kind::Runner => name == "runner.lock",
            Kind::ControlPlane => is_nested_runner(name) || name == "serve.lock",
        }
}

pub(super) enum Item {
    Dir(Entry),
    File(Entry, PathBuf),
    Symlink(Entry, Vec<u8>),
    Database(Entry, PathBuf),
    /// A file whose content must have this SHA-256 (an artifact's, as its row records it).
    Checked(Entry, PathBuf, String),
}

pub(super) fn entry(path: String, meta: &std::fs::Metadata) -> Entry {
    Entry {
        path,
        kind: EntryType::File,
        size: 0,
        sha256: None,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec() as u32,
    }
}

fn has_sqlite_header(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// Lists everything to take, parents before children, names sorted.
fn scan(kind: Kind, root: &Path) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    walk(kind, root, root, &mut items)?;
    Ok(items)
}

fn walk(kind: Kind, root: &Path, dir: &Path, items: &mut Vec<Item>) -> Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io_error("reading", dir, e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()
        .map_err(|e| io_error("reading", dir, e))?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let rel = path.strip_prefix(root).expect("under root");
        let Some(rel_str) = rel.to_str() else {
            return Err(BackupError::Invalid(format!(
                "{} has a name that is not UTF-8; rename it and run the backup again",
                path.display()
            )));
        };
        let top = dir == root;
        let name = name.to_string_lossy();
        if top && left_out(kind, &name) {
            continue;
        }
        // A workspace's disk image is not its data: the files are read through its mount
        // (`yy runner backup` mounts the images first), never the sparse image.
        if kind == Kind::Runner
            && dir == root.join("workspaces")
            && crate::computer::workspaces::is_image_entry(&name)
        {
            continue;
        }
        let meta = match path.symlink_metadata() {
            Ok(m) => m,
            // Removed between listing and looking (a temp file, say): not part of the data.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_error("reading", &path, e)),
        };
        let e = entry(rel_str.to_string(), &meta);
        let ft = meta.file_type();
        if ft.is_dir() {
            items.push(Item::Dir(e));
            walk(kind, root, &path, items)?;
        } else if ft.is_symlink() {
            if !super::manifest::link_allowed(kind, rel_str) {
                // A restore writes no link there (it could point anywhere): left out, said.
                tracing::warn!(path = %path.display(),
                    "skipping a symlink: a restore writes only files and directories outside a Runner's workspaces");
                continue;
            }
            let target = std::fs::read_link(&path).map_err(|e| io_error("reading", &path, e))?;
            items.push(Item::Symlink(e, target.as_os_str().as_bytes().to_vec()));
        } else if ft.is_file() {
            if top && is_database(rel_str) && has_sqlite_header(&path) {
                items.push(Item::Database(e, path));
            } else {
                let mut e = e;
                e.size = meta.len();
                items.push(Item::File(e, path));
            }
        } else {
            tracing::warn!(path = %path.display(), "skipping a socket, FIFO or device");
        }
    }
    Ok(())
}

/// Snapshots the database at `src` into `dst` with the online backup API: one step copies
/// every page under one read transaction, so writers (WAL) go on and the copy is one
/// consistent state. Returns its `user_version`.
fn snapshot(src: &Path, dst: &Path) -> Result<i64> {
    let db_err = |e: rusqlite::Error| {
        BackupError::Db(format!("snapshotting the database {}: {e}", src.display()))
    };
    let source = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db_err)?;
    source
        .busy_timeout(Duration::from_secs(10))
        .map_err(db_err)?;
    let mut target = Connection::open(dst).map_err(db_err)?;
    {
        let backup = rusqlite::backup::Backup::new(&source, &mut target).map_err(db_err)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match backup.step(-1).map_err(db_err)? {
                rusqlite::backup::StepResult::Done => break,
                _ if Instant::now() > deadline => {
                    return Err(BackupError::Db(format!(
                        "the database {} stayed locked for a minute; try again",
                        src.display()
                    )));
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    let version = check_database(&target, dst)?;
    target.close().map_err(|(_, e)| db_err(e))?;
    Ok(version)
}

/// `PRAGMA integrity_check` must say ok; returns `PRAGMA user_version`.
pub fn check_database(conn: &Connection, shown: &Path) -> Result<i64> {
    let bad = |e: rusqlite::Error| {
        BackupError::Corrupt(format!(
            "the database {} cannot be read: {e}",
            shown.display()
        ))
    };
    let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(bad)?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .map_err(bad)?
        .collect::<rusqlite::Result<_>>()
        .map_err(bad)?;
    if lines != ["ok"] {
        return Err(BackupError::Corrupt(format!(
            "the database {} fails its integrity check: {}",
            shown.display(),
            lines.join("; ")
        )));
    }
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(bad)
}

/// Opens `path` read-only and checks it (see [`check_database`]).
pub fn check_database_file(path: &Path) -> Result<i64> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| {
        BackupError::Corrupt(format!(
            "the database {} cannot be opened: {e}",
            path.display()
        ))
    })?;
    check_database(&conn, path)
}

/// The identity recorded in the control plane database at `path`, if it has one.
pub fn server_identity_of(path: &Path) -> Option<String> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    crate::server::store::server_identity(&crate::server::store::Db::Sqlite(conn))
}

/// A file removed when dropped (temporary snapshots and half-written archives).
pub struct TempPath(pub PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What [`create`] made.
pub struct Created {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    pub manifest: Manifest,
    pub elapsed: Duration,
}

/// Checks `output` before any work: not inside the data directory, not an existing file
/// unless `force`, in a directory that exists.
pub fn check_output(data_dir: &Path, output: &Path, force: bool) -> Result<PathBuf> {
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(name) = output.file_name() else {
        return Err(BackupError::Invalid(format!(
            "-o {} names no file",
            output.display()
        )));
    };
    let dir = std::fs::canonicalize(&dir).map_err(|_| {
        BackupError::Invalid(format!("the directory {} does not exist", dir.display()))
    })?;
    let out = dir.join(name);
    if let Ok(data) = std::fs::canonicalize(data_dir)
        && out.starts_with(&data)
    {
        return Err(BackupError::Invalid(format!(
            "-o {} lies inside the data directory {}: write the backup somewhere else",
            output.display(),
            data.display()
        )));
    }
    if out.symlink_metadata().is_ok() && !force {
        return Err(BackupError::Invalid(format!(
            "{} already exists: choose another -o FILE, or pass --force to replace it",
            output.display()
        )));
    }
    Ok(out)
}

/// Writes a backup of `data_dir` to `output` (already checked by [`check_output`]):
/// a temporary file beside it, fsynced, then renamed into place.
pub fn create(
    kind: Kind,
    data_dir: &Path,
    output: &Path,
    stopped_computers: Vec<String>,
    show_progress: bool,
) -> Result<Created> {
    let started = Instant::now();
    let meta = std::fs::metadata(data_dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => BackupError::NotFound(format!(
            "the data directory {} does not exist",
            data_dir.display()
        )),
        _ => io_error("reading", data_dir, e),
    })?;
    if !meta.is_dir() {
        return Err(BackupError::Invalid(format!(
            "{} is not a directory",
            data_dir.display()
        )));
    }
    let items = scan(kind, data_dir)?;
    let has_db = |name: &str| {
        items
            .iter()
            .any(|i| matches!(i, Item::Database(e, _) if e.path == name))
    };
    if kind == Kind::ControlPlane && !has_db("yy.db") {
        return Err(BackupError::NotFound(format!(
            "{} holds no yy.db: it is not a yy data directory (run `yy serve` or `yy admin create` to make one)",
            data_dir.display()
        )));
    }
    write(
        kind,
        items,
        data_dir.display().to_string(),
        output,
        stopped_computers,
        show_progress,
        started,
    )
}

/// Writes `items` as an archive to `output` (already checked by [`check_output`]): a
/// temporary file beside it, fsynced, then renamed into place. `source` is what the
/// manifest says the backup was taken from.
pub(super) fn write(
    kind: Kind,
    items: Vec<Item>,
    source: String,
    output: &Path,
    stopped_computers: Vec<String>,
    show_progress: bool,
    started: Instant,
) -> Result<Created> {
    let dir = output.parent().expect("checked output");
    let name = output
        .file_name()
        .expect("checked output")
        .to_string_lossy()
        .to_string();
    let pid = std::process::id();
    let tmp = TempPath(dir.join(format!(".{name}.tmp-{pid}")));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp.0)
        .map_err(|e| io_error("creating", &tmp.0, e))?;

    // Databases first, so the progress totals include their snapshot sizes.
    let mut schema_version = super::RUNNER_LAYOUT_VERSION;
    let mut server_id = None;
    let mut snapshots = Vec::new();
    for item in &items {
        if let Item::Database(e, src) = item {
            let snap = TempPath(dir.join(format!(".{name}.{}.snapshot-{pid}", e.path)));
            let version = snapshot(src, &snap.0)?;
            if kind == Kind::ControlPlane && e.path == "yy.db" {
                schema_version = version;
                server_id = server_identity_of(&snap.0);
            }
            snapshots.push((e.path.clone(), snap));
        }
    }
    let snapshot_of = |path: &str| {
        snapshots
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.0.clone())
            .expect("snapshotted")
    };
    let mut total_bytes = 0;
    let mut total_files = 0;
    for item in &items {
        match item {
            Item::Dir(_) => {}
            Item::File(e, _) | Item::Checked(e, _, _) => {
                total_bytes += e.size;
                total_files += 1;
            }
            Item::Symlink(_, t) => {
                total_bytes += t.len() as u64;
                total_files += 1;
            }
            Item::Database(e, _) => {
                total_bytes += std::fs::metadata(snapshot_of(&e.path)).map_or(0, |m| m.len());
                total_files += 1;
            }
        }
    }
    let progress = if show_progress {
        Progress::new("backup", total_bytes, total_files)
    } else {
        Progress::hidden()
    };
    let mut w = ArchiveWriter::new(file, output, &progress)?;
    for item in items {
        match item {
            Item::Dir(e) => w.dir(e)?,
            Item::Symlink(e, target) => w.symlink(e, &target)?,
            Item::File(e, src) => {
                let mut f = match File::open(&src) {
                    Ok(f) => f,
                    // Removed since the scan: a temporary file that came and went.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(io_error("reading", &src, err)),
                };
                w.file(e, &mut f, &src)?;
            }
            Item::Checked(e, src, want) => {
                let mut f = File::open(&src).map_err(|err| match err.kind() {
                    std::io::ErrorKind::NotFound => BackupError::NotFound(format!(
                        "{} is gone since the database's snapshot listed it (removed by retention?); run the backup again",
                        src.display()
                    )),
                    _ => io_error("reading", &src, err),
                })?;
                let path = e.path.clone();
                w.file(e, &mut f, &src)?;
                if w.last_sha256() != Some(want.as_str()) {
                    return Err(BackupError::Corrupt(format!(
                        "{} does not match the SHA-256 its database row records ({want}); it is not backed up (as {path})",
                        src.display()
                    )));
                }
            }
            Item::Database(mut e, _) => {
                let snap = snapshot_of(&e.path);
                let mut f = File::open(&snap).map_err(|err| io_error("reading", &snap, err))?;
                e.size = f
                    .metadata()
                    .map_err(|err| io_error("reading", &snap, err))?
                    .len();
                w.file(e, &mut f, &snap)?;
            }
        }
    }
    let manifest = Manifest {
        format: FORMAT,
        kind,
        yy_version: crate::VERSION.to_string(),
        schema_version,
        created_at: crate::timefmt::rfc3339(crate::timefmt::now_ms()),
        hostname: crate::sys::hostname(),
        source,
        file_count: 0,
        total_bytes: 0,
        stopped_computers,
        server_id,
        entries: vec![],
    };
    let Written {
        file,
        sha256,
        bytes,
        manifest,
    } = w.finish(manifest)?;
    drop(file);
    progress.finish();
    std::fs::rename(&tmp.0, output).map_err(|e| io_error("renaming into", output, e))?;
    std::mem::forget(tmp);
    super::sync_dir(dir)?;
    Ok(Created {
        path: output.to_path_buf(),
        sha256,
        bytes,
        manifest,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_and_the_runner_lock_are_left_out() {
        assert!(left_out(Kind::ControlPlane, "yy.db-wal"));
        assert!(left_out(Kind::ControlPlane, "yy.db-shm"));
        assert!(left_out(Kind::Runner, "receipts.db-journal"));
        assert!(left_out(Kind::Runner, "runner.lock"));
        assert!(!left_out(Kind::ControlPlane, "runner.lock"));
        assert!(left_out(Kind::ControlPlane, "serve.lock"));
        assert!(left_out(Kind::ControlPlane, "runner-abc"));
        assert!(left_out(Kind::ControlPlane, ".runner-abc.lock"));
        assert!(!left_out(Kind::Runner, "runner-abc"));
        assert!(!left_out(Kind::ControlPlane, "notes-wal"));
        assert!(is_database("yy.db") && !is_database("artifacts/x.db"));
    }
}
