//! What each command kind does on the Runner's machine.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::artifacts::Transfer;
use crate::api::artifacts::MAX_ARTIFACT_BYTES;
use crate::api::machine::{CommandKind, FetchPayload, FetchResult, PingPayload, PingResult};
use crate::timefmt::now_us;

/// Command kinds this Runner carries (reported as capabilities).
pub const CAPABILITIES: [CommandKind; 3] =
    [CommandKind::Ping, CommandKind::Fetch, CommandKind::Cancel];

/// A command's result, or why it failed.
pub type Answer = Result<serde_json::Value, String>;

pub async fn ping(p: PingPayload) -> Answer {
    let started_at_us = now_us();
    if p.hold_ms > 0 {
        tokio::time::sleep(Duration::from_millis(p.hold_ms)).await;
    }
    to_value(PingResult {
        execution_id: uuid::Uuid::new_v4().to_string(),
        runner_version: crate::VERSION.into(),
        started_at_ms: started_at_us / 1000,
        started_at_us,
    })
}

/// Exports a file under the artifact roots: it travels to the control plane as an
/// artifact through the verified, chunked upload; the result names the artifact.
pub async fn fetch(p: FetchPayload, local_roots: Vec<String>, transfer: Transfer) -> Answer {
    // Both sides must agree: an edited runner.json cannot widen what the control plane
    // registered, nor the reverse.
    let roots: Vec<String> = local_roots
        .into_iter()
        .filter(|r| p.artifact_roots.contains(r))
        .collect();
    let asked = p.path.clone();
    let (file, real, _) =
        tokio::task::spawn_blocking(move || open_export(&roots, Path::new(&asked)))
            .await
            .map_err(|e| e.to_string())??;
    // Read through the descriptor that passed the root checks: a path swapped meanwhile
    // cannot change which file is sent.
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let name = crate::api::artifacts::sanitize_name(&real.display().to_string())
        .unwrap_or_else(|| "fetched".into());
    let stored = transfer
        .upload(&by_fd, &name, Some(real.display().to_string()))
        .await?;
    drop(file);
    to_value(FetchResult {
        path: real.display().to_string(),
        size: stored.size,
        sha256: stored.sha256,
        artifact_id: stored.artifact_id,
    })
}

fn to_value<T: serde::Serialize>(v: T) -> Answer {
    serde_json::to_value(v).map_err(|e| e.to_string())
}

fn inside(real: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| real.starts_with(r))
}

/// Opens a file for export. Its real path (symlinks and `..` resolved, and checked again on
/// the opened descriptor so a swapped symlink cannot escape) must lie in an artifact root,
/// and it must be a regular file within the artifact size limit. Returns the open file,
/// its real path and its size.
pub fn open_export(roots: &[String], path: &Path) -> Result<(File, PathBuf, u64), String> {
    if roots.is_empty() {
        return Err(
            "this Runner has no artifactRoots, so it exports nothing: register it with --artifact-root DIR"
                .into(),
        );
    }
    let roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    let shown = path.display();
    // Never say where it leads: the caller may not know what lies outside the roots (a
    // symlink's target, /proc/PID paths).
    let outside = |_: &Path| format!("{shown} is outside the Runner's artifactRoots; refused");
    let real = std::fs::canonicalize(path).map_err(|e| format!("cannot export {shown}: {e}"))?;
    if !inside(&real, &roots) {
        return Err(outside(&real));
    }
    // O_NONBLOCK: opening a FIFO must not hang; it is refused below as not a regular file.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&real)
        .map_err(|e| format!("cannot export {shown}: {e}"))?;
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| format!("cannot check {shown}: {e}"))?;
    if !inside(&opened, &roots) {
        return Err(outside(&opened));
    }
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot export {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    // A hard link inside a root may be the same file as one outside it; no path check
    // can tell, so files with more than one link are not exported.
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(format!(
            "{shown} has more than one hard link; hard-linked files are not exported (copy it into the root instead)"
        ));
    }
    if meta.len() > MAX_ARTIFACT_BYTES {
        return Err(format!(
            "{shown} is {} bytes; an exported file is at most {} MiB",
            meta.len(),
            MAX_ARTIFACT_BYTES >> 20
        ));
    }
    Ok((file, opened, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_stay_inside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("ok.txt"), b"hello").unwrap();
        std::fs::write(dir.path().join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        let roots = vec![root.display().to_string()];

        let (_, real, size) = open_export(&roots, &root.join("ok.txt")).unwrap();
        assert_eq!(size, 5);
        assert!(real.ends_with("root/ok.txt"), "{}", real.display());

        let e = open_export(&roots, &root.join("../secret")).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        let e = open_export(&roots, &root.join("link")).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        let e = open_export(&[], &root.join("ok.txt")).unwrap_err();
        assert!(e.contains("no artifactRoots"), "{e}");
        let e = open_export(&roots, &root).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A sibling whose name merely starts with the root's name is outside.
        let sibling = dir.path().join("root2");
        std::fs::create_dir(&sibling).unwrap();
        std::fs::write(sibling.join("x"), b"x").unwrap();
        let e = open_export(&roots, &sibling.join("x")).unwrap_err();
        assert!(e.contains("outside"), "{e}");
    }

    #[test]
    fn hard_links_are_refused_and_refusals_reveal_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let secret = dir.path().join("secret-outside");
        std::fs::write(&secret, b"no").unwrap();
        std::fs::hard_link(&secret, root.join("innocent")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("link")).unwrap();
        let roots = vec![root.display().to_string()];

        let e = open_export(&roots, &root.join("innocent")).unwrap_err();
        assert!(e.contains("hard link"), "{e}");
        let e = open_export(&roots, &root.join("link")).unwrap_err();
        assert!(
            e.contains("outside") && !e.contains("secret-outside"),
            "{e}"
        );
        // /proc/self resolves to /proc/PID: the PID must not show.
        let e = open_export(&roots, Path::new("/proc/self/status")).unwrap_err();
        let pid = std::process::id().to_string();
        assert!(e.contains("outside") && !e.contains(&pid), "{e}");
    }
}
