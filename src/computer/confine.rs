//! File operations confined to the guest's workspace root.
//!
//! A path is first resolved lexically (relative to the root; an absolute path must name
//! the root or something under it; `..` may never climb above the root), then for real:
//! the canonical path (every symlink followed) must still lie under the root. Whatever
//! is opened is checked once more through `/proc/self/fd`, so a symlink swapped in between
//! the check and the open cannot lead out either.

use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};

use super::protocol::{FileKind, codes};

/// A refused or failed operation: a protocol error code and a one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    pub code: &'static str,
    pub message: String,
}

impl OpError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        OpError {
            code,
            message: message.into(),
        }
    }
    pub fn bad(message: impl Into<String>) -> Self {
        Self::new(codes::BAD_REQUEST, message)
    }
    pub fn outside(shown: &str) -> Self {
        Self::new(
            codes::OUTSIDE_WORKSPACE,
            format!("{shown} leads outside the workspace; refused"),
        )
    }
    /// An I/O error about `shown`, with not-found kept distinct.
    pub fn io(shown: &str, e: io::Error) -> Self {
        let code = match e.kind() {
            io::ErrorKind::NotFound => codes::NOT_FOUND,
            _ => codes::IO,
        };
        Self::new(code, format!("{shown}: {e}"))
    }
}

/// The workspace root of one guest agent.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// As given (absolute), for lexical checks of absolute request paths.
    given: PathBuf,
    /// Canonical.
    root: PathBuf,
}

impl Workspace {
    pub fn open(dir: &Path) -> io::Result<Workspace> {
        let given = std::path::absolute(dir)?;
        let root = fs::canonicalize(dir)?;
        if !fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(Workspace { given, root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path `path` names, without touching the file system.
    pub fn lexical(&self, path: &str) -> Result<PathBuf, OpError> {
        if path.contains('\0') {
            return Err(OpError::bad("a path may not contain NUL"));
        }
        let p = Path::new(path);
        let rel: &Path = if p.is_absolute() {
            p.strip_prefix(&self.given)
                .or_else(|_| p.strip_prefix(&self.root))
                .map_err(|_| OpError::outside(path))?
        } else {
            p
        };
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(OpError::new(
                            codes::OUTSIDE_WORKSPACE,
                            format!("{path} climbs out of the workspace with '..'; refused"),
                        ));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(OpError::outside(path)),
            }
        }
        let mut out = self.root.clone();
        out.extend(parts);
        Ok(out)
    }

    fn inside(&self, real: &Path) -> bool {
        real.starts_with(&self.root)
    }

    /// The real path of something that exists; it must lie in the workspace.
    pub fn existing(&self, path: &str) -> Result<PathBuf, OpError> {
        let lex = self.lexical(path)?;
        let real = fs::canonicalize(&lex).map_err(|e| OpError::io(path, e))?;
        if !self.inside(&real) {
            return Err(OpError::outside(path));
        }
        Ok(real)
    }

    /// Where a file named `path` may be created or replaced: its real parent directory
    /// (created if missing, inside the workspace) and its file name. An existing symlink at
    /// `path` is followed (and must stay inside); a dangling one is refused.
    pub fn creatable(&self, path: &str) -> Result<(PathBuf, OsString), OpError> {
        let lex = self.lexical(path)?;
        if lex == self.root {
            return Err(OpError::new(
                codes::WRONG_TYPE,
                format!("{path} is the workspace root, not a file"),
            ));
        }
        let target = match fs::symlink_metadata(&lex) {
            Ok(m) if m.file_type().is_symlink() => match fs::canonicalize(&lex) {
                Ok(real) if self.inside(&real) => real,
                Ok(_) => return Err(OpError::outside(path)),
                Err(_) => {
                    return Err(OpError::new(
                        codes::WRONG_TYPE,
                        format!("{path} is a dangling symlink; refused"),
                    ));
                }
            },
            _ => lex,
        };
        let name = target
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| OpError::bad(format!("{path} has no file name")))?;
        let parent = target.parent().unwrap_or(&self.root).to_path_buf();
        // The longest existing ancestor must be inside; below it nothing exists yet, so
        // nothing there can be a symlink.
        let mut existing = parent.as_path();
        while fs::symlink_metadata(existing).is_err() {
            existing = existing.parent().unwrap_or(&self.root);
        }
        let real = fs::canonicalize(existing).map_err(|e| OpError::io(path, e))?;
        if !self.inside(&real) {
            return Err(OpError::outside(path));
        }
        let rest = parent.strip_prefix(existing).unwrap_or(Path::new(""));
        let real_parent = real.join(rest);
        fs::create_dir_all(&real_parent).map_err(|e| OpError::io(path, e))?;
        let checked = fs::canonicalize(&real_parent).map_err(|e| OpError::io(path, e))?;
        if !self.inside(&checked) {
            return Err(OpError::outside(path));
        }
        Ok((checked, name))
    }

    /// Where an open descriptor really is; it must be inside the workspace.
    pub fn check_fd(&self, file: &File, shown: &str) -> Result<PathBuf, OpError> {
        let real = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| OpError::io(shown, e))?;
        if !self.inside(&real) {
            return Err(OpError::outside(shown));
        }
        Ok(real)
    }

    /// Opens an existing path for reading (never blocking on a FIFO) and re-checks it.
    pub fn open_existing(&self, path: &str) -> Result<(File, PathBuf), OpError> {
        let real = self.existing(path)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&real)
            .map_err(|e| OpError::io(path, e))?;
        let real = self.check_fd(&file, path)?;
        Ok((file, real))
    }

    /// `real` relative to the root (`.` for the root itself).
    pub fn relative(&self, real: &Path) -> String {
        match real.strip_prefix(&self.root) {
            Ok(r) if r.as_os_str().is_empty() => ".".into(),
            Ok(r) => r.display().to_string(),
            Err(_) => real.display().to_string(),
        }
    }
}

pub fn kind_of(meta: &Metadata) -> FileKind {
    let t = meta.file_type();
    if t.is_symlink() {
        FileKind::Symlink
    } else if t.is_dir() {
        FileKind::Dir
    } else if t.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

pub fn mtime_ms(meta: &Metadata) -> i64 {
    meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        fs::create_dir(&root).unwrap();
        fs::write(dir.path().join("secret"), b"no").unwrap();
        fs::write(root.join("a.txt"), b"hi").unwrap();
        fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("outdir")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("in")).unwrap();
        std::os::unix::fs::symlink("missing", root.join("dangling")).unwrap();
        let ws = Workspace::open(&root).unwrap();
        (dir, ws)
    }

    #[test]
    fn lexical_paths_stay_under_the_root() {
        let (_d, ws) = setup();
        let root = ws.root().to_path_buf();
        assert_eq!(ws.lexical("a.txt").unwrap(), root.join("a.txt"));
        assert_eq!(ws.lexical("sub/../a.txt").unwrap(), root.join("a.txt"));
        assert_eq!(ws.lexical("").unwrap(), root);
        assert_eq!(ws.lexical(".").unwrap(), root);
        let abs = root.join("sub/x");
        assert_eq!(ws.lexical(abs.to_str().unwrap()).unwrap(), abs);
        for bad in ["..", "../secret", "sub/../../secret", "/etc/passwd", "a\0b"] {
            let e = ws.lexical(bad).unwrap_err();
            assert!(
                e.code == codes::OUTSIDE_WORKSPACE || e.code == codes::BAD_REQUEST,
                "{bad}: {e:?}"
            );
        }
        // A sibling sharing the root's name as a prefix is outside.
        let sibling = format!("{}2/x", root.display());
        assert!(ws.lexical(&sibling).is_err());
    }

    #[test]
    fn symlinks_out_are_refused_and_symlinks_in_are_followed() {
        let (_d, ws) = setup();
        assert_eq!(ws.existing("in").unwrap(), ws.root().join("a.txt"));
        for (path, code) in [
            ("out", codes::OUTSIDE_WORKSPACE),
            ("outdir/secret", codes::OUTSIDE_WORKSPACE),
            ("nope", codes::NOT_FOUND),
        ] {
            assert_eq!(ws.existing(path).unwrap_err().code, code, "{path}");
        }
        assert!(ws.open_existing("out").is_err());
        let (_f, real) = ws.open_existing("in").unwrap();
        assert_eq!(ws.relative(&real), "a.txt");

        for (path, code) in [
            ("out", codes::OUTSIDE_WORKSPACE),
            ("outdir/new", codes::OUTSIDE_WORKSPACE),
            ("dangling", codes::WRONG_TYPE),
            (".", codes::WRONG_TYPE),
        ] {
            assert_eq!(ws.creatable(path).unwrap_err().code, code, "{path}");
        }
        let (parent, name) = ws.creatable("in").unwrap();
        assert_eq!(parent.join(name), ws.root().join("a.txt"));
        let (parent, name) = ws.creatable("new/deep/file").unwrap();
        assert_eq!(parent, ws.root().join("new/deep"));
        assert_eq!(name, "file");
        assert!(parent.is_dir());
    }
}
