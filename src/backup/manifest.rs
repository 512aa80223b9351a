//! The manifest: the archive's table of contents and its promise. Every entry's bytes are
//! checked against it, and its own SHA-256 sits in the archive's trailer.

use serde::{Deserialize, Serialize};

use super::{BackupError, Kind, Result};

/// The archive format this yy writes and reads.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
}

impl EntryType {
    pub fn code(self) -> u8 {
        match self {
            EntryType::File => 0,
            EntryType::Dir => 1,
            EntryType::Symlink => 2,
        }
    }
}

/// One file, directory or symlink, by its path relative to the data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative, `/`-separated, no `.` or `..` components.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// Bytes of content (a symlink's content is its target).
    pub size: u64,
    /// SHA-256 of the content, hex (none for directories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Modification time: seconds and nanoseconds since the Unix epoch.
    pub mtime: i64,
    pub mtime_nsec: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub kind: Kind,
    pub yy_version: String,
    /// The control plane's `PRAGMA user_version`, or [`super::RUNNER_LAYOUT_VERSION`].
    pub schema_version: i64,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub hostname: String,
    /// The data directory the backup was taken from.
    pub source: String,
    pub file_count: u64,
    pub total_bytes: u64,
    /// Computers (container ids) stopped for a Runner backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped_computers: Vec<String>,
    /// The identity of the control plane the backup was taken from (its database's
    /// `server_identity`); none from a Runner, or from a yy that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
    pub entries: Vec<Entry>,
}

/// Longest symlink target an archive may hold (Linux's PATH_MAX).
pub const MAX_LINK: u64 = 4096;

/// True where a restore may create a symlink: inside a workspace of a Runner backup
/// (`workspaces/ID/...`), the guest's own files. The guest can make such links at any
/// time; the host reads workspaces only through `openat2` refusing links
/// (`computer::host_read`) and the container resolves them in its own view. Nowhere else
/// does a restore create anything but regular files and directories.
pub fn link_allowed(kind: Kind, path: &str) -> bool {
    kind == Kind::Runner
        && path
            .strip_prefix("workspaces/")
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(root, inside)| !root.is_empty() && !inside.is_empty())
}

impl Manifest {
    /// Refuses manifests that could write outside the target or repeat a path: every path
    /// is relative and clean, unique, and its parent is a directory listed before it; a
    /// symlink only where [`link_allowed`]; sizes and times that fit their arithmetic.
    pub fn check(&self) -> Result<()> {
        if self.format != FORMAT {
            return Err(BackupError::Newer(format!(
                "the archive has format {} and this yy reads format {FORMAT}: use the yy that wrote it",
                self.format
            )));
        }
        let mut dirs = std::collections::HashSet::new();
        let mut seen = std::collections::HashSet::new();
        for e in &self.entries {
            check_path(&e.path)?;
            if !seen.insert(e.path.as_str()) {
                return Err(corrupt(format!("the path {} is listed twice", e.path)));
            }
            if let Some((parent, _)) = e.path.rsplit_once('/')
                && !dirs.contains(parent)
            {
                return Err(corrupt(format!(
                    "{} is listed before its directory {parent}",
                    e.path
                )));
            }
            match e.kind {
                EntryType::Dir => {
                    dirs.insert(e.path.as_str());
                    if e.size != 0 || e.sha256.is_some() {
                        return Err(corrupt(format!("directory {} has content", e.path)));
                    }
                }
                EntryType::File | EntryType::Symlink => {
                    if e.kind == EntryType::Symlink {
                        if !link_allowed(self.kind, &e.path) {
                            return Err(BackupError::Invalid(format!(
                                "the archive holds {} as a symlink: a restore writes only regular files and directories (links only inside a Runner's workspaces); this archive was altered or made by an older yy, and cannot be restored",
                                e.path
                            )));
                        }
                        if e.size > MAX_LINK {
                            return Err(corrupt(format!(
                                "the symlink {} has a {}-byte target",
                                e.path, e.size
                            )));
                        }
                    }
                    let ok = e
                        .sha256
                        .as_deref()
                        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
                    if !ok {
                        return Err(corrupt(format!("{} has no valid SHA-256", e.path)));
                    }
                }
            }
            if e.mtime_nsec >= 1_000_000_000 {
                return Err(corrupt(format!("{} has an impossible time", e.path)));
            }
        }
        let files = self
            .entries
            .iter()
            .filter(|e| e.kind != EntryType::Dir)
            .count() as u64;
        let bytes = self
            .entries
            .iter()
            .try_fold(0u64, |sum, e| sum.checked_add(e.size))
            .ok_or_else(|| {
                corrupt("the sizes of its entries add up to more than 2^64 bytes".to_string())
            })?;
        if files != self.file_count || bytes != self.total_bytes {
            return Err(corrupt(
                "the manifest's totals do not match its entries".to_string(),
            ));
        }
        Ok(())
    }

    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.path == path)
    }
}

fn corrupt(m: String) -> BackupError {
    BackupError::Corrupt(format!("the archive's manifest is invalid: {m}"))
}

/// A relative path that stays inside the directory it is unpacked into.
pub fn check_path(p: &str) -> Result<()> {
    let bad = p.is_empty()
        || p.starts_with('/')
        || p.contains('\0')
        || p.split('/').any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(corrupt(format!(
            "the path {p:?} is not a clean relative path"
        )));
    }
    Ok(())
}

/// A manifest of `entries` for tests.
#[cfg(test)]
pub(crate) fn test_manifest(entries: Vec<Entry>) -> Manifest {
    Manifest {
        format: FORMAT,
        kind: crate::backup::Kind::ControlPlane,
        yy_version: "t".into(),
        schema_version: 1,
        created_at: "t".into(),
        hostname: "h".into(),
        source: "/d".into(),
        file_count: entries.iter().filter(|e| e.kind != EntryType::Dir).count() as u64,
        total_bytes: 0,
        stopped_computers: vec![],
        server_id: None,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: EntryType) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size: 0,
            sha256: (kind != EntryType::Dir).then(|| "0".repeat(64)),
            mode: 0o600,
            uid: 0,
            gid: 0,
            mtime: 0,
            mtime_nsec: 0,
        }
    }

    #[test]
    fn paths_must_stay_inside() {
        for bad in ["", "/etc/passwd", "a/../../b", "./a", "a//b", "a/"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        check_path("artifacts/x/y.bin").unwrap();
    }

    #[test]
    fn parents_come_first_and_paths_are_unique() {
        let ok = test_manifest(vec![
            entry("a", EntryType::Dir),
            entry("a/f", EntryType::File),
            entry("g", EntryType::File),
        ]);
        ok.check().unwrap();
        let orphan = test_manifest(vec![entry("a/f", EntryType::File)]);
        assert!(orphan.check().is_err());
        // A symlink is no directory: nothing may be unpacked through it.
        let through_link = test_manifest(vec![
            entry("a", EntryType::Symlink),
            entry("a/f", EntryType::File),
        ]);
        assert!(through_link.check().is_err());
        let twice = test_manifest(vec![
            entry("g", EntryType::File),
            entry("g", EntryType::File),
        ]);
        assert!(twice.check().is_err());
    }

    #[test]
    fn links_only_inside_a_runner_workspace() {
        for (kind, path, ok) in [
            (Kind::Runner, "workspaces/c1/venv/bin/python", true),
            (Kind::Runner, "workspaces/c1/x", true),
            (Kind::Runner, "workspaces/c1", false),
            (Kind::Runner, "workspaces", false),
            (Kind::Runner, "receipts.db", false),
            (Kind::Runner, "hermes-home/config.yaml", false),
            (Kind::ControlPlane, "workspaces/c1/x", false),
            (Kind::ControlPlane, "yy.db", false),
            (Kind::ControlPlane, "artifacts", false),
        ] {
            assert_eq!(link_allowed(kind, path), ok, "{kind:?} {path}");
        }
        let mut m = test_manifest(vec![entry("yy.db", EntryType::Symlink)]);
        assert!(matches!(m.check(), Err(BackupError::Invalid(_))));
        m.kind = Kind::Runner;
        m.entries = vec![
            entry("workspaces", EntryType::Dir),
            entry("workspaces/c1", EntryType::Dir),
            entry("workspaces/c1/l", EntryType::Symlink),
        ];
        m.file_count = 1;
        m.check().unwrap();
        m.entries[2].size = MAX_LINK + 1;
        m.total_bytes = MAX_LINK + 1;
        assert!(matches!(m.check(), Err(BackupError::Corrupt(_))));
    }

    #[test]
    fn sizes_that_overflow_are_refused_not_a_panic() {
        let mut a = entry("a", EntryType::File);
        let mut b = entry("b", EntryType::File);
        a.size = u64::MAX;
        b.size = 2;
        let mut m = test_manifest(vec![a, b]);
        m.total_bytes = 1; // what the sum wraps to
        assert!(matches!(m.check(), Err(BackupError::Corrupt(_))));
        let mut t = entry("t", EntryType::File);
        t.mtime_nsec = 1_000_000_000;
        assert!(test_manifest(vec![t]).check().is_err());
    }

    #[test]
    fn a_newer_format_is_refused() {
        let mut m = test_manifest(vec![]);
        m.format = FORMAT + 1;
        assert!(matches!(m.check(), Err(BackupError::Newer(_))));
    }
}
