//! Reading a computer's files from the host, through the workspace's bind mount, without
//! trusting anything the guest controls: the bulk path of `computer_export`.
//!
//! The guest owns every name in its workspace, so a lookup from the host goes through
//! `openat2` beneath the workspace directory with symlinks, magic links and other mounts
//! refused; whatever is not a plain regular file the guest user could read is left to the
//! guest agent (which follows its own symlinks the way the guest sees them).

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::GUEST_UID;

/// A computer's workspace as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostWorkspace {
    /// The bind mount's source on the host.
    pub host_dir: PathBuf,
    /// Where the guest sees it (its working directory).
    pub guest_cwd: String,
}

/// A file copied out of the workspace while it stood still.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Relative to the workspace.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// Tries of a snapshot of a file that keeps changing.
const TRIES: u32 = 3;

impl HostWorkspace {
    /// `guest_path` relative to the workspace when it plainly lies in it (relative to the
    /// guest's working directory, or absolute under it; no `..`); `None` otherwise.
    pub fn relative(&self, guest_path: &str) -> Option<PathBuf> {
        let p = Path::new(guest_path);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.guest_cwd).ok()?
        } else {
            p
        };
        let mut out = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::CurDir => {}
                _ => return None,
            }
        }
        (!out.as_os_str().is_empty()).then_some(out)
    }

    /// Opens a regular file of the workspace that the guest user can read; `None` when the
    /// guest agent must answer instead (a symlink on the way, another mount, not a regular
    /// file, not readable by the guest user, missing, or a kernel without `openat2`).
    pub fn open_file(&self, guest_path: &str) -> Option<(File, String)> {
        let rel = self.relative(guest_path)?;
        let dir = File::open(&self.host_dir).ok()?;
        let file = openat2_beneath(&dir, &rel).ok()?;
        let meta = file.metadata().ok()?;
        let mode = meta.mode();
        let readable = (meta.uid() == GUEST_UID && mode & 0o400 != 0) || mode & 0o004 != 0;
        // One link only: a path check cannot tell where another name of the file lives.
        (meta.is_file() && readable && meta.nlink() == 1).then(|| (file, rel.display().to_string()))
    }
}

/// `openat2(dir, rel, O_RDONLY|O_NONBLOCK|O_NOCTTY)` resolved beneath `dir` only, never
/// through a symlink or into another mount.
fn openat2_beneath(dir: &File, rel: &Path) -> io::Result<File> {
    let name = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain data; zeroed is its documented "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH
        | libc::RESOLVE_NO_SYMLINKS
        | libc::RESOLVE_NO_MAGICLINKS
        | libc::RESOLVE_NO_XDEV;
    // SAFETY: valid descriptor, NUL-terminated name, and `how` with its true size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// Copies `file` into `out` (rewound and truncated before every try) while hashing it; a
/// file that changed during the copy (size, mtime or ctime) is copied again, and one that
/// keeps changing is refused, so the copy is a snapshot of one moment.
pub fn snapshot(
    file: &mut File,
    shown: &str,
    out: &mut File,
    cap: u64,
) -> Result<Snapshot, String> {
    let stamp = |f: &File| {
        f.metadata()
            .map(|m| {
                (
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                )
            })
            .map_err(|e| format!("{shown}: {e}"))
    };
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..TRIES {
        let before = stamp(file)?;
        if before.0 > cap {
            return Err(format!("{shown} is larger than {} MiB", cap >> 20));
        }
        file.rewind().map_err(|e| format!("{shown}: {e}"))?;
        out.rewind()
            .and_then(|_| out.set_len(0))
            .map_err(|e| format!("the export spool: {e}"))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|e| format!("{shown}: {e}"))?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > cap {
                return Err(format!(
                    "{shown} grew past {} MiB while exported",
                    cap >> 20
                ));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| format!("the export spool: {e}"))?;
        }
        if stamp(file)? == before && size == before.0 {
            return Ok(Snapshot {
                path: shown.to_string(),
                size,
                sha256: hex::encode(hasher.finalize()),
            });
        }
    }
    Err(format!(
        "{shown} kept changing while it was exported; export it again once it is written"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn ws(dir: &Path) -> HostWorkspace {
        HostWorkspace {
            host_dir: dir.to_path_buf(),
            guest_cwd: "/workspace".into(),
        }
    }

    #[test]
    fn relative_paths_stay_plainly_inside() {
        let w = ws(Path::new("/x"));
        let rel = |p: &str| w.relative(p).map(|p| p.display().to_string());
        assert_eq!(rel("a/b.txt").as_deref(), Some("a/b.txt"));
        assert_eq!(rel("./a").as_deref(), Some("a"));
        assert_eq!(rel("/workspace/a").as_deref(), Some("a"));
        for outside in [
            "../a",
            "a/../../b",
            "a/../b",
            "/etc/passwd",
            "/workspacex/a",
            ".",
            "/workspace",
            "",
        ] {
            assert_eq!(rel(outside), None, "{outside}");
        }
    }

    #[test]
    fn only_plain_files_the_guest_can_read_open_from_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(dir.path().join("secret"), b"host").unwrap();
        std::fs::write(root.join("sub/ok.txt"), b"hi").unwrap();
        std::fs::set_permissions(root.join("sub/ok.txt"), PermissionsExt::from_mode(0o644))
            .unwrap();
        std::fs::write(root.join("private"), b"x").unwrap();
        std::fs::set_permissions(root.join("private"), PermissionsExt::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/ok.txt", root.join("in")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("outdir")).unwrap();
        let w = ws(&root);
        let (mut f, shown) = w.open_file("sub/ok.txt").expect("a plain file opens");
        assert_eq!(shown, "sub/ok.txt");
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hi");
        // Symlinks (even ones that stay inside) are the guest's to follow; missing files,
        // directories and files only another user may read are the guest's to refuse.
        for p in ["out", "in", "outdir/secret", "missing", "sub", "../secret"] {
            assert!(w.open_file(p).is_none(), "{p}");
        }
        // Owned by the test's user, not uid 1000, and not world-readable.
        if std::fs::metadata(root.join("private")).unwrap().uid() != GUEST_UID {
            assert!(w.open_file("private").is_none());
        }
    }

    #[test]
    fn a_snapshot_is_the_file_with_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a.bin");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let mut out = tempfile::tempfile().unwrap();
        out.write_all(b"stale bytes from an earlier try that are longer")
            .unwrap();
        let snap = snapshot(&mut File::open(&src).unwrap(), "a.bin", &mut out, 25 << 20).unwrap();
        assert_eq!(snap.size, data.len() as u64);
        assert_eq!(snap.sha256, hex::encode(Sha256::digest(&data)));
        let mut copied = Vec::new();
        out.rewind().unwrap();
        out.read_to_end(&mut copied).unwrap();
        assert_eq!(copied, data);
        let err = snapshot(&mut File::open(&src).unwrap(), "a.bin", &mut out, 1 << 20).unwrap_err();
        assert!(err.contains("larger than 1 MiB"), "{err}");
    }
}
