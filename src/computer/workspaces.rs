//! Each computer's workspace with a size limit the file system enforces: a sparse ext4
//! image `workspaces/ID.img`, loop-mounted at `workspaces/ID` (the directory bind-mounted
//! into the container, as without a limit). The guest gets ENOSPC at its limit.
//!
//! The host's free space is never shared with a guest: while a computer runs, its image is
//! fully allocated (fallocate), so the guest writes only into space already taken, and a
//! start is refused unless the host keeps [`RESERVE`] free beyond it for the Runner's own
//! databases. When the computer stops, the free blocks are trimmed back to the host and
//! the image is unmounted (a stopped workspace costs its data plus the file system's
//! metadata). See docs/computer-notes.md, "Workspace limits".

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::api::computers::WorkspaceUsage;

/// A workspace's limit unless the Runner is told otherwise.
pub const DEFAULT_LIMIT: u64 = 10 << 30;
/// The smallest limit: ext4 and its journal need some room of their own.
pub const MIN_LIMIT: u64 = 16 << 20;
/// The largest limit (ext4 with 4 KiB blocks goes further; nobody needs more here).
pub const MAX_LIMIT: u64 = 64 << 40;
/// Host free space a computer start must leave for the Runner's own files.
pub const RESERVE: u64 = 256 << 20;

/// The hint in every error that a host cannot make limited workspaces.
const NEEDS: &str = "workspace limits need root and mkfs.ext4 (e2fsprogs) and mount (util-linux); run the Runner as root or pass --workspace-limit 0 (no limit, unsafe)";

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{0}")]
    Setup(String),
    #[error("workspace {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(
        "the host's disk has {free} free; this computer's workspace needs {need} more and the Runner keeps {reserve} for itself: free disk space or lower --workspace-limit"
    )]
    HostFull {
        free: String,
        need: String,
        reserve: String,
    },
    #[error(
        "workspace {id} holds more than its limit of {limit} (it was made without one or with a larger one): raise --workspace-limit, or remove files from {dir}"
    )]
    TooBig {
        id: String,
        limit: String,
        dir: String,
    },
}

fn io(what: impl std::fmt::Display, source: std::io::Error) -> WorkspaceError {
    WorkspaceError::Io {
        what: what.to_string(),
        source,
    }
}

/// Parses `--workspace-limit`: `0` or `none` (no limit), or a size with a binary unit
/// (`64MiB`, `10GiB`, `1TiB`; `K`/`M`/`G`/`T` and `KB`... read as the same units).
pub fn parse_limit(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let bad = || {
        format!(
            "{s:?} is not a size: give e.g. 64MiB or 10GiB (between {} and {}), or 0 for no limit",
            human(MIN_LIMIT),
            human(MAX_LIMIT)
        )
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(bad)?;
    if !(MIN_LIMIT..=MAX_LIMIT).contains(&bytes) {
        return Err(bad());
    }
    Ok(Some(bytes))
}

/// `--workspace-limit` as clap reads it: `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub Option<u64>);

/// [`parse_limit`] for clap.
pub fn parse_limit_arg(s: &str) -> Result<Limit, String> {
    parse_limit(s).map(Limit)
}

pub fn human(n: u64) -> String {
    crate::api::artifacts::human_size(n)
}

/// Whether `dir` is a mount point: it lies on another device than its parent.
pub fn is_mountpoint(dir: &Path) -> bool {
    let (Ok(here), Some(Ok(up))) = (
        dir.symlink_metadata(),
        dir.parent().map(|p| p.symlink_metadata()),
    ) else {
        return false;
    };
    here.is_dir() && here.dev() != up.dev()
}

/// Bytes an unprivileged writer can still write on the file system holding `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = crate::sys::statvfs(dir)?;
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Used and usable bytes of the file system mounted at `dir`.
fn fs_usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    let st = crate::sys::statvfs(dir)?;
    let f = st.f_frsize as u64;
    let used = (st.f_blocks as u64).saturating_sub(st.f_bfree as u64);
    Ok((
        used.saturating_mul(f),
        (st.f_bavail as u64).saturating_mul(f),
    ))
}

/// Runs a tool (argv only, never a shell); a missing tool or a failure is one line.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), WorkspaceError> {
    let out = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                WorkspaceError::Setup(format!("{program} was not found: {NEEDS}"))
            }
            _ => WorkspaceError::Setup(format!("cannot run {program}: {e}")),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said: String = said
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect();
    Err(WorkspaceError::Setup(format!(
        "{program} failed ({}): {said}",
        out.status
    )))
}

fn mkdir_private(dir: &Path) -> Result<(), WorkspaceError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(format!("cannot create {}", dir.display()), e))
}

/// Makes an empty ext4 image of `size` bytes at `img` (sparse until allocated).
fn make_image(img: &Path, size: u64) -> Result<(), WorkspaceError> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(img)
        .map_err(|e| io(format!("cannot create {}", img.display()), e))?;
    f.set_len(size)
        .map_err(|e| io(format!("cannot size {}", img.display()), e))?;
    drop(f);
    // nodiscard: the new file is all holes already, and discarding would punch them again.
    // -m 0: no blocks reserved for root (the guest is never root). The root directory
    // belongs to the guest's uid from the start.
    let made = run(
        "mkfs.ext4",
        &[
            "-q".as_ref(),
            "-F".as_ref(),
            "-m".as_ref(),
            "0".as_ref(),
            "-E".as_ref(),
            "nodiscard,root_owner=1000:1000".as_ref(),
            img.as_os_str(),
        ],
    );
    if made.is_err() {
        let _ = std::fs::remove_file(img);
    }
    made
}

/// Loop-mounts `img` at `dir` without devices, set-id or atime updates.
fn mount(img: &Path, dir: &Path) -> Result<(), WorkspaceError> {
    mount_once(img, dir, "loop,nodev,nosuid,noatime")
}

/// Whether a loop device still reads `img` (a mount of it, maybe only inside a container
/// that outlived the host's mount): mounting it a second time would corrupt it.
fn in_use(img: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(img) else {
        return false;
    };
    let Ok(list) = std::fs::read_dir("/sys/block") else {
        return false;
    };
    list.flatten().any(|e| {
        e.file_name().as_bytes().starts_with(b"loop")
            && std::fs::read(e.path().join("loop/backing_file")).is_ok_and(|b| {
                let b = b.strip_suffix(b"\n").unwrap_or(&b);
                b == real.as_os_str().as_bytes()
            })
    })
}

/// How long a loop device may take to let its image go after the unmount (the kernel
/// clears an autoclear device after the last close, not within `umount`, and flushes it
/// first: seconds on a host busy writing).
const LOOP_RELEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// Mounts `img` at `dir` unless a loop device still has it after [`LOOP_RELEASE`].
fn mount_once(img: &Path, dir: &Path, options: &str) -> Result<(), WorkspaceError> {
    let since = std::time::Instant::now();
    let mut said = false;
    while in_use(img) && since.elapsed() < LOOP_RELEASE {
        if !said && since.elapsed() > std::time::Duration::from_secs(2) {
            tracing::info!(image = %img.display(), "waiting for the kernel to release the workspace image's previous loop device");
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if in_use(img) {
        return Err(WorkspaceError::Setup(format!(
            "workspace image {} is still in use (a container or mount that outlived its computer); remove it and start again",
            img.display()
        )));
    }
    run(
        "mount",
        &[
            "-t".as_ref(),
            "ext4".as_ref(),
            "-o".as_ref(),
            options.as_ref(),
            img.as_os_str(),
            dir.as_os_str(),
        ],
    )
}

/// Unmounts `dir` (the loop device goes with it: mount sets autoclear).
fn unmount(dir: &Path) -> Result<(), WorkspaceError> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| WorkspaceError::Setup(format!("bad path {}", dir.display())))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        return Err(io(
            format!("cannot unmount {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Gives the free blocks of the file system at `dir` back to the host (they become holes
/// in its image again).
fn trim(dir: &Path) -> std::io::Result<()> {
    #[repr(C)]
    struct FstrimRange {
        start: u64,
        len: u64,
        minlen: u64,
    }
    // _IOWR('X', 121, struct fstrim_range)
    const FITRIM: libc::c_ulong = 0xC018_5879;
    let f = std::fs::File::open(dir)?;
    // Blocks freed by a transaction not yet committed are not trimmed: commit first.
    // SAFETY: a valid fd.
    unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&f)) };
    let mut range = FstrimRange {
        start: 0,
        len: u64::MAX,
        minlen: 0,
    };
    // SAFETY: FITRIM reads and writes the range struct, which outlives the call.
    let r = unsafe {
        libc::ioctl(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            FITRIM as _,
            &mut range,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Removes what ext4 makes in a new file system's root: the guest sees an empty workspace.
fn drop_lost_found(dir: &Path) {
    let _ = std::fs::remove_dir(dir.join("lost+found"));
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// One Runner's workspaces, all under `DATA_DIR/workspaces`.
pub struct Workspaces {
    root: PathBuf,
    limit: Option<u64>,
    /// Mounting, migrating and unmounting one at a time.
    busy: std::sync::Mutex<()>,
}

impl Workspaces {
    pub fn new(data_dir: &Path, limit: Option<u64>) -> Workspaces {
        Workspaces {
            root: data_dir.join("workspaces"),
            limit,
            busy: std::sync::Mutex::new(()),
        }
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The directory mounted into the computer.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    fn image(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.img"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At the Runner's start: with a limit, this host must be able to make workspaces.
    pub fn preflight(&self) -> Result<(), WorkspaceError> {
        if self.limit.is_none() {
            return Ok(());
        }
        // SAFETY: no arguments, no side effects.
        if unsafe { libc::geteuid() } != 0 {
            return Err(WorkspaceError::Setup(format!(
                "this Runner does not run as root: {NEEDS}"
            )));
        }
        for tool in ["mkfs.ext4", "mount"] {
            let found = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
                .unwrap_or(false)
                || ["/sbin", "/usr/sbin"]
                    .iter()
                    .any(|d| Path::new(d).join(tool).is_file());
            if !found {
                return Err(WorkspaceError::Setup(format!(
                    "{tool} was not found: {NEEDS}"
                )));
            }
        }
        Ok(())
    }

    /// Before the computer's container is made: the workspace exists, and with a limit it
    /// is its mounted image with its whole size allocated. A plain directory left by a
    /// Runner without limits (or by a restore) is copied into a new image first.
    pub fn prepare(&self, id: &str) -> Result<(), WorkspaceError> {
        let _busy = self.lock();
        mkdir_private(&self.root)?;
        let dir = self.dir(id);
        let Some(limit) = self.limit else {
            return Ok(());
        };
        self.recover(id)?;
        let img = self.image(id);
        if !img.exists() {
            if dir.is_dir() && !is_mountpoint(&dir) && !is_empty_dir(&dir) {
                self.migrate(id, limit)?;
            } else {
                let new = self.root.join(format!(".{id}.img.new"));
                make_image(&new, limit)?;
                std::fs::rename(&new, &img)
                    .map_err(|e| io(format!("cannot rename {}", new.display()), e))?;
            }
        }
        mkdir_private(&dir)?;
        if !is_mountpoint(&dir) {
            if !is_empty_dir(&dir) {
                // Files written into the bare mount point (not by a computer): hidden by
                // the mount, never deleted.
                tracing::warn!(workspace = %dir.display(), "files in an unmounted workspace directory are hidden under its image");
            }
            mount(&img, &dir)?;
            drop_lost_found(&dir);
        }
        self.allocate(&img, limit)
    }

    /// Allocates the whole image (the guest's writes then never take host space), if the
    /// host keeps [`RESERVE`] free beyond it.
    fn allocate(&self, img: &Path, limit: u64) -> Result<(), WorkspaceError> {
        let meta = img
            .metadata()
            .map_err(|e| io(format!("cannot read {}", img.display()), e))?;
        let size = meta.len().max(limit);
        let need = size.saturating_sub(meta.blocks().saturating_mul(512));
        let free = free_bytes(&self.root).map_err(|e| {
            io(
                format!("cannot read the free space of {}", self.root.display()),
                e,
            )
        })?;
        if free < need.saturating_add(RESERVE) {
            return Err(WorkspaceError::HostFull {
                free: human(free),
                need: human(need),
                reserve: human(RESERVE),
            });
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(img)
            .map_err(|e| io(format!("cannot open {}", img.display()), e))?;
        // SAFETY: a valid fd; mode 0 allocates without changing the content.
        let r = unsafe {
            libc::fallocate(
                std::os::unix::io::AsRawFd::as_raw_fd(&f),
                0,
                0,
                size as libc::off_t,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOSPC) {
                return Err(WorkspaceError::HostFull {
                    free: human(free_bytes(&self.root).unwrap_or(0)),
                    need: human(need),
                    reserve: human(RESERVE),
                });
            }
            return Err(io(format!("cannot allocate {}", img.display()), e));
        }
        Ok(())
    }

    /// Finishes or undoes a migration a crash interrupted; the data is always in one piece
    /// at one of the two places.
    fn recover(&self, id: &str) -> Result<(), WorkspaceError> {
        let staging = self.root.join(format!(".{id}.migrate"));
        if is_mountpoint(&staging) {
            unmount(&staging)?;
        }
        let _ = std::fs::remove_dir(&staging);
        let _ = std::fs::remove_file(self.root.join(format!(".{id}.img.new")));
        let before = self.root.join(format!(".{id}.pre-image"));
        if before.is_dir() {
            let dir = self.dir(id);
            if self.image(id).exists() {
                // The image was complete when it got its name: the copy it was made from goes.
                std::fs::remove_dir_all(&before)
                    .map_err(|e| io(format!("cannot remove {}", before.display()), e))?;
            } else {
                if dir.is_dir() && is_empty_dir(&dir) && !is_mountpoint(&dir) {
                    let _ = std::fs::remove_dir(&dir);
                }
                std::fs::rename(&before, &dir)
                    .map_err(|e| io(format!("cannot move back {}", before.display()), e))?;
            }
        }
        Ok(())
    }

    /// Copies a plain workspace directory into a new image, which then takes its place.
    /// Order: copy into `.ID.img.new`; move the directory to `.ID.pre-image`; name the
    /// image `ID.img` (the commit); mount it; delete the old directory.
    fn migrate(&self, id: &str, limit: u64) -> Result<(), WorkspaceError> {
        let dir = self.dir(id);
        let new = self.root.join(format!(".{id}.img.new"));
        let staging = self.root.join(format!(".{id}.migrate"));
        tracing::info!(workspace = %dir.display(), limit = %human(limit), "moving a workspace without a limit into an image");
        make_image(&new, limit)?;
        let copied = (|| {
            mkdir_private(&staging)?;
            mount(&new, &staging)?;
            drop_lost_found(&staging);
            let mut src = dir.clone().into_os_string();
            src.push("/.");
            // cp -a keeps owners, modes, times and links, and never follows a link.
            let copy = run(
                "cp",
                &[
                    "-a".as_ref(),
                    "--".as_ref(),
                    src.as_os_str(),
                    staging.as_os_str(),
                ],
            );
            let full = fs_usage(&staging)
                .map(|(_, free)| free == 0)
                .unwrap_or(false);
            let unmounted = unmount(&staging);
            copy.map_err(|e| {
                if full {
                    WorkspaceError::TooBig {
                        id: id.to_string(),
                        limit: human(limit),
                        dir: dir.display().to_string(),
                    }
                } else {
                    e
                }
            })?;
            unmounted
        })();
        if let Err(e) = copied {
            if is_mountpoint(&staging) {
                let _ = unmount(&staging);
            }
            let _ = std::fs::remove_dir(&staging);
            let _ = std::fs::remove_file(&new);
            return Err(e);
        }
        let _ = std::fs::remove_dir(&staging);
        let before = self.root.join(format!(".{id}.pre-image"));
        std::fs::rename(&dir, &before)
            .map_err(|e| io(format!("cannot move {}", dir.display()), e))?;
        std::fs::rename(&new, self.image(id))
            .map_err(|e| io(format!("cannot rename {}", new.display()), e))?;
        std::fs::remove_dir_all(&before)
            .map_err(|e| io(format!("cannot remove {}", before.display()), e))?;
        Ok(())
    }

    /// After the computer's container is gone: free blocks go back to the host and the
    /// image is unmounted (it stays, with the data).
    pub fn release(&self, id: &str) {
        let _busy = self.lock();
        release_dir(&self.dir(id));
    }

    /// Every mounted workspace released (after a restart removed the containers).
    pub fn release_all(&self) -> usize {
        let _busy = self.lock();
        mounted_roots(&self.root)
            .into_iter()
            .filter(|d| release_dir(d))
            .count()
    }

    /// Deletes the workspace: unmounted, its image and directory removed.
    pub fn delete(&self, id: &str) -> Result<(), WorkspaceError> {
        let _busy = self.lock();
        let dir = self.dir(id);
        if is_mountpoint(&dir) {
            unmount(&dir)?;
        }
        let img = self.image(id);
        if img.exists() {
            std::fs::remove_file(&img)
                .map_err(|e| io(format!("cannot delete {}", img.display()), e))?;
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| io(format!("cannot delete {}", dir.display()), e))?;
        }
        Ok(())
    }

    /// What the workspace takes now, for the control plane (none before its first start).
    pub fn usage(&self, id: &str) -> Option<WorkspaceUsage> {
        let dir = self.dir(id);
        if is_mountpoint(&dir) {
            let (used, free) = fs_usage(&dir).ok()?;
            return Some(WorkspaceUsage {
                used_bytes: Some(used),
                free_bytes: Some(free),
                limit_bytes: self
                    .image(id)
                    .metadata()
                    .ok()
                    .map(|m| m.len())
                    .or(self.limit),
                reported_at: None,
            });
        }
        // No limit: what it holds is not measured (that would walk the guest's files).
        (self.limit.is_none() && dir.is_dir()).then_some(WorkspaceUsage {
            used_bytes: None,
            free_bytes: None,
            limit_bytes: None,
            reported_at: None,
        })
    }
}

/// Trims and unmounts `dir` if it is mounted; true when it was.
fn release_dir(dir: &Path) -> bool {
    if !is_mountpoint(dir) {
        return false;
    }
    if let Err(e) = trim(dir) {
        tracing::debug!(workspace = %dir.display(), error = %e, "trim not done");
    }
    match unmount(dir) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(workspace = %dir.display(), error = %e, "workspace left mounted");
            false
        }
    }
}

/// The workspace directories under `root` that are mount points.
fn mounted_roots(root: &Path) -> Vec<PathBuf> {
    let Ok(list) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    list.flatten()
        .map(|e| e.path())
        .filter(|p| is_mountpoint(p))
        .collect()
}

/// True for a name directly under `workspaces/` that is no workspace's files: an image, or
/// a migration's leftovers (a backup leaves them out).
pub fn is_image_entry(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".img")
}

/// Before a backup reads a Runner's data directory (the Runner is stopped): every image
/// whose directory is not mounted is mounted read-only, so the files are read, never the
/// images. Returns what was mounted, for [`unmount_all`] after.
pub fn mount_for_backup(data_dir: &Path) -> Result<Vec<PathBuf>, WorkspaceError> {
    let root = data_dir.join("workspaces");
    let Ok(list) = std::fs::read_dir(&root) else {
        return Ok(Vec::new());
    };
    let mut mounted = Vec::new();
    let mut images: Vec<PathBuf> = list
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "img")
                && !p
                    .file_name()
                    .is_some_and(|n| n.as_bytes().starts_with(b"."))
                && p.symlink_metadata().is_ok_and(|m| m.is_file())
        })
        .collect();
    images.sort();
    for img in images {
        let dir = img.with_extension("");
        if is_mountpoint(&dir) {
            continue;
        }
        let done = mkdir_private(&dir)
            .and_then(|()| mount_once(&img, &dir, "loop,ro,nodev,nosuid,noexec,noatime"));
        if let Err(e) = done {
            unmount_all(&mounted);
            return Err(WorkspaceError::Setup(format!(
                "cannot read workspace image {}: {e}",
                img.display()
            )));
        }
        mounted.push(dir);
    }
    Ok(mounted)
}

/// Unmounts the directories [`mount_for_backup`] mounted.
/// Mount points at or under `root`, the latest first (`/proc/self/mountinfo` lists them in
/// the order they were made; its octal escapes undone). Not [`is_mountpoint`]: a bind of
/// a directory onto itself stays on its device, and mounts stacked on one point count once
/// each.
fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(root))
        .collect();
    found.reverse();
    found
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\')
            .then(|| s.get(i + 1..i + 4))
            .flatten()
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything at or under `root` (latest first; lazily when busy) and removes the
/// directories left empty right under it: the warm computers' slots once their containers
/// are gone.
pub fn unmount_under(root: &Path) {
    for m in mounts_under(root) {
        let done = std::process::Command::new("umount")
            .arg(&m)
            .output()
            .is_ok_and(|o| o.status.success());
        if !done {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&m)
                .output();
        }
    }
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

pub fn unmount_all(dirs: &[PathBuf]) {
    for d in dirs {
        if let Err(e) = unmount(d) {
            tracing::warn!(workspace = %d.display(), error = %e, "workspace left mounted");
        }
    }
}

/// Before a restore replaces a Runner's workspaces (its computers are stopped): every
/// mounted workspace is unmounted, so a restore moves plain directories (the images go to
/// the copy of the data from before; the Runner moves restored directories into new images
/// at their next start). Errors when one stays mounted.
pub fn unmount_for_restore(data_dir: &Path) -> Result<usize, WorkspaceError> {
    let root = data_dir.join("workspaces");
    let mut n = 0;
    for dir in mounted_roots(&root) {
        unmount(&dir).map_err(|e| {
            WorkspaceError::Setup(format!(
                "{e}: something still uses it; stop it and run the restore again"
            ))
        })?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_in_binary_units() {
        assert_eq!(parse_limit("64MiB"), Ok(Some(64 << 20)));
        assert_eq!(parse_limit("10GiB"), Ok(Some(10 << 30)));
        assert_eq!(parse_limit("10G"), Ok(Some(10 << 30)));
        assert_eq!(parse_limit("1tib"), Ok(Some(1 << 40)));
        assert_eq!(parse_limit("16777216"), Ok(Some(16 << 20)));
        assert_eq!(parse_limit("0"), Ok(None));
        assert_eq!(parse_limit("none"), Ok(None));
        assert_eq!(parse_limit("NONE"), Ok(None));
    }

    #[test]
    fn bad_limits_say_what_to_give() {
        for bad in [
            "",
            "-1",
            "1.5GiB",
            "10GB2",
            "10 XB",
            "1MiB",
            "15MiB",
            "65TiB",
            "99999999999999999999",
            "18446744073709551615TiB",
            "GiB",
        ] {
            let e = parse_limit(bad).unwrap_err();
            assert!(
                e.contains("64MiB or 10GiB") && e.contains("0 for no limit"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn images_and_leftovers_are_not_workspace_files() {
        assert!(is_image_entry("c1.img"));
        assert!(is_image_entry(".c1.pre-image"));
        assert!(is_image_entry(".c1.img.new"));
        assert!(!is_image_entry("c1"));
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/end\"), r"/end\");
    }

    #[test]
    fn a_directory_is_no_mount_point_on_its_parents_device() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("ws");
        std::fs::create_dir(&sub).unwrap();
        assert!(!is_mountpoint(&sub));
        assert!(!is_mountpoint(&d.path().join("missing")));
    }
}
