//! Restoring an archive into a data directory, for the control plane and for a Runner.
//!
//! 1. The caller holds the directory's lock exclusively (and, for a Runner, has stopped
//!    its computers); an interrupted earlier restore has been rolled back.
//! 2. The journal is written (phase `staging`); the archive is unpacked into the staging
//!    directory beside the data directory while every entry is verified, then synced, and
//!    its databases pass `integrity_check`. Any mismatch discards the staging directory:
//!    the data directory was never touched.
//! 3. The renames of the swap are planned and written to the journal (phase `swapping`),
//!    then made. The control plane's directory is swapped whole: `D` becomes the dated copy
//!    and the staging directory becomes `D`. A Runner's directory is swapped entry by
//!    entry, and inside each workspace root only the contents move: the roots keep their
//!    inodes, so bind mounts and file sharing of those paths stay valid.
//! 4. A control plane database is migrated (as on any start), the restore log gets a line,
//!    and the journal is deleted: that is the commit. Until then, any start rolls back.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use super::archive::{self, CHUNK, Sink};
use super::collect::{check_database_file, is_database};
use super::journal::{self, Journal, Move, Phase};
use super::manifest::{Entry, Manifest};
use super::progress::Progress;
use super::{BackupError, Kind, Result, Siblings, io_error, sync_dir};

/// The test hook: `YY_TEST_RESTORE_CRASH_AT=STEP` kills the process (SIGKILL, like
/// `kill -9`) when the restore reaches STEP, so tests can prove every step recoverable.
/// Steps: staging, staged, planned, swap-N (after the N-th rename), swapped, migrated,
/// logged.
fn crash_point(step: &str) {
    if std::env::var("YY_TEST_RESTORE_CRASH_AT").is_ok_and(|v| v == step) {
        // SAFETY: signalling this process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

pub struct Restored {
    pub manifest: Manifest,
    pub sha256: String,
    pub target: PathBuf,
    /// Where the data from before is kept (none when the directory did not exist).
    pub old_copy: Option<PathBuf>,
    pub log: PathBuf,
    /// (from, to) when the database was migrated.
    pub migrated: Option<(i64, i64)>,
    pub elapsed: Duration,
}

/// Bytes free for an unprivileged user on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = crate::sys::statvfs(dir).ok()?;
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Flushes everything written under `dir` to disk: one syncfs instead of an fsync per file.
fn sync_tree(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| io_error("syncing", dir, e))?;
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: a descriptor this File owns.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(io_error("syncing", dir, std::io::Error::last_os_error()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        drop(f);
        // SAFETY: sync(2) takes nothing and cannot fail.
        unsafe { libc::sync() };
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(|e| io_error("setting the owner of", path, e))
}

/// Unpacks verified entries under `root`.
struct Unpack<'a> {
    root: &'a Path,
    current: Option<(BufWriter<File>, PathBuf)>,
    /// Directories and their modes, applied at the end (a read-only directory must stay
    /// writable until its contents are in).
    dirs: Vec<(PathBuf, u32)>,
    done: u64,
}

impl Sink for Unpack<'_> {
    fn dir(&mut self, e: &Entry) -> Result<()> {
        let p = self.root.join(&e.path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|err| io_error("creating", &p, err))?;
        chown(&p, e.uid, e.gid)?;
        self.dirs.push((p, e.mode));
        Ok(())
    }

    fn symlink(&mut self, e: &Entry, target: &[u8]) -> Result<()> {
        let p = self.root.join(&e.path);
        std::os::unix::fs::symlink(OsStr::from_bytes(target), &p)
            .map_err(|err| io_error("creating", &p, err))?;
        chown(&p, e.uid, e.gid)
    }

    fn file_start(&mut self, e: &Entry) -> Result<()> {
        let p = self.root.join(&e.path);
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .map_err(|err| io_error("creating", &p, err))?;
        self.current = Some((BufWriter::with_capacity(CHUNK, f), p));
        Ok(())
    }

    fn file_data(&mut self, chunk: &[u8]) -> Result<()> {
        let (w, p) = self.current.as_mut().expect("a file was started");
        w.write_all(chunk).map_err(|e| io_error("writing", p, e))
    }

    fn file_end(&mut self, e: &Entry) -> Result<()> {
        let (w, p) = self.current.take().expect("a file was started");
        let f = w
            .into_inner()
            .map_err(|err| io_error("writing", &p, err.into_error()))?;
        // No set-id bits: a crafted archive must not plant a set-id file (in a workspace,
        // the guest could run it).
        f.set_permissions(std::fs::Permissions::from_mode(e.mode & 0o777))
            .map_err(|err| io_error("setting the mode of", &p, err))?;
        // Checked: a time past what the system can hold is refused, not a panic.
        let mtime = UNIX_EPOCH
            .checked_add(Duration::from_secs(e.mtime.max(0) as u64))
            .and_then(|t| t.checked_add(Duration::from_nanos(u64::from(e.mtime_nsec))))
            .ok_or_else(|| {
                BackupError::Corrupt(format!(
                    "{} has a modification time out of range; the archive cannot be used",
                    e.path
                ))
            })?;
        f.set_times(std::fs::FileTimes::new().set_modified(mtime))
            .map_err(|err| io_error("setting the time of", &p, err))?;
        chown(&p, e.uid, e.gid)?;
        self.done += 1;
        if self.done == 1 {
            crash_point("staging");
        }
        Ok(())
    }
}

impl Unpack<'_> {
    fn finish_dirs(&self) -> Result<()> {
        for (p, mode) in self.dirs.iter().rev() {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode & 0o1777))
                .map_err(|e| io_error("setting the mode of", p, e))?;
        }
        Ok(())
    }
}

/// A dated copy name that is not taken yet.
fn old_copy_path(s: &Siblings) -> PathBuf {
    let stamp = super::stamp_now();
    let mut p = s.old_copy(&stamp);
    let mut n = 2;
    while p.symlink_metadata().is_ok() {
        p = s.old_copy(&format!("{stamp}-{n}"));
        n += 1;
    }
    p
}

fn names(dir: &Path) -> Result<Vec<std::ffi::OsString>> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io_error("reading", dir, e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()
        .map_err(|e| io_error("reading", dir, e))?;
    v.sort();
    Ok(v)
}

fn is_dir(p: &Path) -> bool {
    p.symlink_metadata().is_ok_and(|m| m.is_dir())
}

fn mkdir_private(p: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| io_error("creating", p, e))
}

/// A Runner's swap, entry by entry; workspace roots stay and only their contents move.
/// Every move out comes before every move in. Creates the dated copy's directories.
fn plan_runner(dir: &Path, staging: &Path, old: &Path) -> Result<Vec<Move>> {
    const KEEP_IN_PLACE: &str = "runner.lock";
    let ws = dir.join("workspaces");
    let staged_ws = staging.join("workspaces");
    let keep_roots = is_dir(&ws);
    let mut outs = Vec::new();
    let mut ins = Vec::new();
    mkdir_private(old)?;
    for name in names(dir)? {
        if name == KEEP_IN_PLACE || (name == "workspaces" && keep_roots) {
            continue;
        }
        outs.push(Move {
            from: dir.join(&name),
            to: old.join(&name),
        });
    }
    for name in names(staging)? {
        if name == "workspaces" && keep_roots {
            continue;
        }
        ins.push(Move {
            from: staging.join(&name),
            to: dir.join(&name),
        });
    }
    if keep_roots {
        for root in names(&ws)? {
            let here = ws.join(&root);
            let away = old.join("workspaces").join(&root);
            if is_dir(&here) {
                mkdir_private(&away)?;
                for child in names(&here)? {
                    outs.push(Move {
                        from: here.join(&child),
                        to: away.join(&child),
                    });
                }
            } else {
                mkdir_private(&old.join("workspaces"))?;
                outs.push(Move {
                    from: here,
                    to: away,
                });
            }
        }
        if is_dir(&staged_ws) {
            for root in names(&staged_ws)? {
                let staged = staged_ws.join(&root);
                let here = ws.join(&root);
                if is_dir(&here) && is_dir(&staged) {
                    for child in names(&staged)? {
                        ins.push(Move {
                            from: staged.join(&child),
                            to: here.join(&child),
                        });
                    }
                } else {
                    ins.push(Move {
                        from: staged,
                        to: here,
                    });
                }
            }
        }
    }
    outs.extend(ins);
    Ok(outs)
}

/// Workspace roots kept in place take the mode and owner they had in the backup.
fn apply_root_metadata(dir: &Path, manifest: &Manifest) -> Result<()> {
    for e in &manifest.entries {
        let Some(rest) = e.path.strip_prefix("workspaces/") else {
            continue;
        };
        if rest.contains('/') {
            continue;
        }
        let p = dir.join(&e.path);
        if is_dir(&p) {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(e.mode & 0o1777))
                .map_err(|err| io_error("setting the mode of", &p, err))?;
            chown(&p, e.uid, e.gid)?;
        }
    }
    Ok(())
}

fn parent_of(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new("/"))
}

/// Locks the Runner data directories nested in a control plane's directory, which a
/// restore moves away and back: none of those Runners may run meanwhile.
pub fn lock_nested_runners(s: &Siblings) -> Result<Vec<super::lock::DirLock>> {
    let mut locks = Vec::new();
    if !is_dir(&s.dir) {
        return Ok(locks);
    }
    for name in names(&s.dir)? {
        let Some(name) = name.to_str() else { continue };
        let dir = s.dir.join(name);
        if name.starts_with("runner-") && is_dir(&dir) {
            let nested = Siblings::of(&dir)?;
            let lock = super::lock::DirLock::try_take(&nested, super::lock::Mode::Exclusive)?
                .ok_or_else(|| {
                    BackupError::Busy(format!(
                        "the Runner data directory {} inside {} is in use by yy runner run: stop that Runner first",
                        dir.display(),
                        s.dir.display()
                    ))
                })?;
            locks.push(lock);
        }
    }
    Ok(locks)
}

/// Restores `archive` into the data directory of `s`. The caller holds the lock
/// exclusively and has run the rollback of an earlier interrupted restore.
pub fn restore(
    kind: Kind,
    archive: &Path,
    s: &Siblings,
    show_progress: bool,
    from_other_server: bool,
) -> Result<Restored> {
    let started = Instant::now();
    let mut opened = archive::open(archive)?;
    let m = opened.manifest.clone();
    check_manifest(kind, archive, &m)?;
    if kind == Kind::ControlPlane && !from_other_server {
        check_same_server(archive, &m, &s.dir)?;
    }
    mkdir_private(&s.parent)?;
    if let Some(free) = free_bytes(&s.parent) {
        let need = m.total_bytes.saturating_add(64 * 1024 * 1024);
        if free < need {
            return Err(BackupError::Io(format!(
                "not enough space beside {}: the restore needs {} and {} are free; free some space first",
                s.dir.display(),
                crate::backup::bench::human_bytes(need),
                crate::backup::bench::human_bytes(free)
            )));
        }
    }
    let staging = s.staging();
    if staging.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&staging).map_err(|e| io_error("removing", &staging, e))?;
    }
    let old = old_copy_path(s);
    let mut journal = Journal {
        kind,
        target: s.dir.clone(),
        archive: std::fs::canonicalize(archive).unwrap_or_else(|_| archive.to_path_buf()),
        staging: staging.clone(),
        old_copy: old.clone(),
        phase: Phase::Staging,
        moves: vec![],
        started_at: crate::timefmt::rfc3339(crate::timefmt::now_ms()),
        pid: std::process::id(),
    };
    journal.write(s)?;
    journal::log(
        s,
        &format!(
            "restore of {} into {} started",
            journal.archive.display(),
            s.dir.display()
        ),
    )?;

    // Anything failing before the swap leaves the data directory as it was.
    let staged = stage(&mut opened, &staging, &m, kind, show_progress);
    let sha256 = match staged {
        Ok(sha) => sha,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            let _ = journal::log(s, &format!("restore refused, nothing changed: {e}"));
            Journal::commit(s)?;
            return Err(e);
        }
    };
    crash_point("staged");

    let existed = s.dir.symlink_metadata().is_ok();
    journal.moves = match (kind, existed) {
        (_, false) => vec![Move {
            from: staging.clone(),
            to: s.dir.clone(),
        }],
        (Kind::ControlPlane, true) => {
            let mut moves = vec![
                Move {
                    from: s.dir.clone(),
                    to: old.clone(),
                },
                Move {
                    from: staging.clone(),
                    to: s.dir.clone(),
                },
            ];
            // Runner data directories nested in the control plane's are not part of its
            // backup: they come back from the dated copy into the restored directory.
            for name in names(&s.dir)? {
                if name.to_str().is_some_and(super::collect::is_nested_runner) {
                    moves.push(Move {
                        from: old.join(&name),
                        to: s.dir.join(&name),
                    });
                }
            }
            moves
        }
        (Kind::Runner, true) => plan_runner(&s.dir, &staging, &old)?,
    };
    journal.phase = Phase::Swapping;
    journal.write(s)?;
    sync_dir(&s.parent)?;
    crash_point("planned");
    let swapped = swap(kind, s, &journal, &m, &sha256, existed);
    let migrated = match swapped {
        Ok(migrated) => migrated,
        Err(e) => {
            // Never leave a half swap behind: undo it now, as the next start would.
            return Err(match journal::recover(s) {
                Ok(_) => BackupError::Io(format!(
                    "{e}; the restore was rolled back and {} holds the data it had before",
                    s.dir.display()
                )),
                Err(again) => BackupError::Io(format!(
                    "{e}; rolling the restore back failed too ({again}): the next `yy serve` or `yy restore` will try again"
                )),
            });
        }
    };
    let old_copy = existed.then_some(old.clone());
    crash_point("logged");
    Journal::commit(s)?;
    // The staging directory is empty now except for a Runner's emptied workspace roots.
    if staging.symlink_metadata().is_ok() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    if !existed {
        let _ = std::fs::remove_dir(&old);
    }
    Ok(Restored {
        manifest: m,
        sha256,
        target: s.dir.clone(),
        old_copy,
        log: s.log(),
        migrated,
        elapsed: started.elapsed(),
    })
}

/// Refuses an archive of the other kind, or from a newer schema than this yy knows.
pub(super) fn check_manifest(kind: Kind, archive: &Path, m: &Manifest) -> Result<()> {
    if m.kind != kind {
        let how = match m.kind {
            Kind::ControlPlane => "yy restore",
            Kind::Runner => "yy runner restore",
        };
        return Err(BackupError::Invalid(format!(
            "{} is a {} backup: restore it with `{how}`",
            archive.display(),
            m.kind.as_str()
        )));
    }
    let known = match kind {
        Kind::ControlPlane => crate::server::store::LATEST_VERSION,
        Kind::Runner => super::RUNNER_LAYOUT_VERSION,
    };
    if m.schema_version > known {
        return Err(BackupError::Newer(format!(
            "{} was made by yy {} with schema version {}, newer than this yy knows ({known}): restore it with that yy or a later one",
            archive.display(),
            m.yy_version,
            m.schema_version
        )));
    }
    Ok(())
}

/// A control plane backup replaces every account of the server it is restored into: that
/// is refused when the archive comes from another server (or does not say which), unless
/// asked for. A directory without a database (or with one older than identities) is new.
fn check_same_server(archive: &Path, m: &Manifest, dir: &Path) -> Result<()> {
    let db = crate::server::store::db_path(dir);
    if !db.symlink_metadata().is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let here = super::collect::server_identity_of(&db);
    same_server(archive, m, here, &dir.display().to_string())
}

/// Refuses `archive` when it is not a backup of the server whose identity is `here` (in
/// `into`), unless there is none to compare with.
pub(super) fn same_server(
    archive: &Path,
    m: &Manifest,
    here: Option<String>,
    into: &str,
) -> Result<()> {
    let Some(here) = here else {
        return Ok(());
    };
    let from = match &m.server_id {
        Some(id) if *id == here => return Ok(()),
        Some(id) => format!("another server (server id {id}; this one is {here})"),
        None => "a server it does not name (made by an older yy)".to_string(),
    };
    Err(BackupError::Invalid(format!(
        "{} is a backup of {from}: restoring it into {into} replaces every account there; pass --from-other-server if that is what you want",
        archive.display(),
    )))
}

/// The renames, the migration and the log line: everything between the journal's
/// `swapping` phase and the commit. Returns the migration made, if any.
fn swap(
    kind: Kind,
    s: &Siblings,
    journal: &Journal,
    m: &Manifest,
    sha256: &str,
    existed: bool,
) -> Result<Option<(i64, i64)>> {
    for (i, mv) in journal.moves.iter().enumerate() {
        std::fs::rename(&mv.from, &mv.to).map_err(|e| io_error("moving", &mv.from, e))?;
        sync_dir(parent_of(&mv.from))?;
        sync_dir(parent_of(&mv.to))?;
        crash_point(&format!("swap-{}", i + 1));
    }
    if kind == Kind::Runner && existed {
        apply_root_metadata(&s.dir, m)?;
    }
    crash_point("swapped");
    let journal_old = existed.then_some(&journal.old_copy);
    let migrated = if kind == Kind::ControlPlane {
        migrate(&s.dir)?
    } else {
        None
    };
    crash_point("migrated");
    journal::log(
        s,
        &format!(
            "restored {} (sha256 {sha256}, made {} by yy {} from {}; {}, {}, schema {}{}) into {}; {}",
            journal.archive.display(),
            m.created_at,
            m.yy_version,
            m.source,
            crate::api::words::plural(m.file_count, "file", "files"),
            crate::api::words::plural(m.total_bytes, "byte", "bytes"),
            m.schema_version,
            migrated
                .map(|(a, b)| format!(", migrated {a} -> {b}"))
                .unwrap_or_default(),
            s.dir.display(),
            match &journal_old {
                Some(o) => format!("the data from before is kept in {}", o.display()),
                None => "the directory did not exist before".into(),
            }
        ),
    )?;
    Ok(migrated)
}

/// Unpacks and verifies into `staging`, syncs it and checks its databases.
pub(super) fn stage(
    opened: &mut archive::Opened,
    staging: &Path,
    m: &Manifest,
    kind: Kind,
    show_progress: bool,
) -> Result<String> {
    mkdir_private(staging)?;
    let progress = if show_progress {
        Progress::new("restore", m.total_bytes, m.file_count)
    } else {
        Progress::hidden()
    };
    let mut sink = Unpack {
        root: staging,
        current: None,
        dirs: vec![],
        done: 0,
    };
    let sha = opened.read_all(&mut sink, &progress)?;
    sink.finish_dirs()?;
    progress.finish();
    sync_tree(staging)?;
    for e in &m.entries {
        if is_database(&e.path) && e.kind == super::manifest::EntryType::File {
            let version = check_database_file(&staging.join(&e.path))?;
            if kind == Kind::ControlPlane && e.path == "yy.db" && version != m.schema_version {
                return Err(BackupError::Corrupt(format!(
                    "the database in the archive has schema version {version}, the manifest says {}",
                    m.schema_version
                )));
            }
        }
    }
    if kind == Kind::ControlPlane && m.entry("yy.db").is_none() {
        return Err(BackupError::Invalid(
            "the archive holds no yy.db: it is not a control plane backup".into(),
        ));
    }
    Ok(sha)
}

/// Brings a restored control plane database to this yy's schema.
pub(super) fn migrate(dir: &Path) -> Result<Option<(i64, i64)>> {
    let path = crate::server::store::db_path(dir);
    let db_err = |e: rusqlite::Error| {
        BackupError::Db(format!(
            "migrating the restored database {}: {e}",
            path.display()
        ))
    };
    let mut conn = rusqlite::Connection::open(&path).map_err(db_err)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(db_err)?;
    let before: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(db_err)?;
    crate::server::store::migrate(&mut conn)
        .map_err(|e| BackupError::Db(format!("migrating the restored database: {e}")))?;
    let after = crate::server::store::LATEST_VERSION;
    Ok((before != after).then_some((before, after)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_swap_keeps_workspace_roots_and_moves_out_before_in() {
        let t = tempfile::tempdir().unwrap();
        let (dir, staging, old) = (t.path().join("rd"), t.path().join("s"), t.path().join("o"));
        for d in [&dir, &staging] {
            std::fs::create_dir_all(d.join("workspaces/c1")).unwrap();
            std::fs::write(d.join("receipts.db"), "x").unwrap();
            std::fs::write(d.join("workspaces/c1/note"), "x").unwrap();
        }
        std::fs::write(dir.join("runner.lock"), "").unwrap();
        std::fs::create_dir_all(staging.join("workspaces/c2")).unwrap();
        let moves = plan_runner(&dir, &staging, &old).unwrap();
        let shown: Vec<(String, String)> = moves
            .iter()
            .map(|m| {
                let rel = |p: &Path| p.strip_prefix(t.path()).unwrap().display().to_string();
                (rel(&m.from), rel(&m.to))
            })
            .collect();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            shown,
            vec![
                pair("rd/receipts.db", "o/receipts.db"),
                pair("rd/workspaces/c1/note", "o/workspaces/c1/note"),
                pair("s/receipts.db", "rd/receipts.db"),
                pair("s/workspaces/c1/note", "rd/workspaces/c1/note"),
                pair("s/workspaces/c2", "rd/workspaces/c2"),
            ]
        );
        assert!(old.join("workspaces/c1").is_dir());
    }
}
