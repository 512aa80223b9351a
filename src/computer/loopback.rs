//! How a computer without a network gets its loopback.
//!
//! Docker's `none` network is a libnetwork sandbox that the engine wires up through an OCI
//! prestart hook: runc runs the engine's own binary (`dockerd libnetwork-setkey`) during
//! every start, and on the project's machine that hook alone took half of the engine's
//! start (docs/benchmarks.md, "The loopback of runc's own"). A container created with
//! `NetworkDisabled` gets no sandbox and no hook: runc makes its network namespace with
//! nothing but `lo`, up, which is all a computer without a network has either way. What it
//! also does not get is the engine's `/etc/hosts` (the file stays the empty one the engine
//! puts over the image's), so `localhost` would not resolve: a hosts file of yy's, the
//! same lines as the engine's for `none`, is bind-mounted read-only in its place.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, Mount, MountType};

/// Where the hosts file lives: `/run` is writable by root only, so nobody else can put
/// a file of theirs there first.
pub const HOSTS_FILE: &str = "/run/yy/computer-hosts";

/// Where it is mounted in a computer.
pub const HOSTS_TARGET: &str = "/etc/hosts";

/// The lines the engine writes for a container on its `none` network.
const HOSTS: &str = "127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
ff00::0\tip6-mcastprefix\n\
ff02::1\tip6-allnodes\n\
ff02::2\tip6-allrouters\n";

/// The loopback a computer without a network gets on this engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loopback {
    /// The engine's `none` network (Podman, or where yy cannot write its hosts file).
    Engine,
    /// A network namespace of runc's own (`NetworkDisabled`), with `hosts` mounted
    /// read-only on `/etc/hosts`.
    Own { hosts: PathBuf },
}

impl Loopback {
    /// [`Loopback::Own`] with [`HOSTS_FILE`] when yy can make sure of that file, else the
    /// engine's (a Runner that is not root): slower to start, as isolated.
    pub fn for_docker() -> Loopback {
        let hosts = PathBuf::from(HOSTS_FILE);
        match ensure_hosts_file(&hosts) {
            Ok(()) => Loopback::Own { hosts },
            Err(e) => {
                tracing::info!(file = HOSTS_FILE, error = %e, "computers without a network use the engine's none network, which starts slower");
                Loopback::Engine
            }
        }
    }

    /// Makes sure the hosts file is still there (a create after `/run` was emptied).
    pub fn ensure(&self) -> std::io::Result<()> {
        match self {
            Loopback::Engine => Ok(()),
            Loopback::Own { hosts } => ensure_hosts_file(hosts),
        }
    }

    /// The create request's part: `NetworkDisabled` and the hosts file's mount.
    pub fn apply(&self, body: &mut ContainerCreateBody) {
        let Loopback::Own { hosts } = self else {
            return;
        };
        body.network_disabled = Some(true);
        if let Some(host) = body.host_config.as_mut() {
            host.mounts.get_or_insert_with(Vec::new).push(Mount {
                typ: Some(MountType::BIND),
                source: Some(hosts.display().to_string()),
                target: Some(HOSTS_TARGET.into()),
                read_only: Some(true),
                ..Default::default()
            });
        }
    }

    /// The hosts file's mount as (source, target), if any.
    pub fn hosts_mount(&self) -> Option<(String, String)> {
        match self {
            Loopback::Engine => None,
            Loopback::Own { hosts } => Some((hosts.display().to_string(), HOSTS_TARGET.into())),
        }
    }
}

/// Writes `path` with [`HOSTS`] unless it already holds them, in a directory that only
/// this user may change (checked, not assumed), through a temporary file and a rename so
/// that a computer never mounts half a file.
pub fn ensure_hosts_file(path: &Path) -> std::io::Result<()> {
    // Computers are created concurrently: one writer at a time in this process (another
    // process writes through a temporary file of its own pid).
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the hosts file needs a directory"))?;
    match std::fs::create_dir(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let d = std::fs::symlink_metadata(dir)?;
    if !d.is_dir() || d.uid() != me || d.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of uid {me} that only it may change",
            dir.display()
        )));
    }
    if let Ok(f) = std::fs::symlink_metadata(path)
        && f.is_file()
        && f.uid() == me
        && f.mode() & 0o022 == 0
        && std::fs::read(path).is_ok_and(|b| b == HOSTS.as_bytes())
    {
        return Ok(());
    }
    let tmp = dir.join(format!(".computer-hosts.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    f.write_all(HOSTS.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_file_is_written_once_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("run").join("computer-hosts");
        ensure_hosts_file(&hosts).unwrap();
        let text = std::fs::read_to_string(&hosts).unwrap();
        assert!(
            text.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost"),
            "{text}"
        );
        assert_eq!(std::fs::metadata(&hosts).unwrap().mode() & 0o777, 0o644);
        // Something else in it is put right.
        std::fs::write(&hosts, "10.0.0.1 localhost\n").unwrap();
        ensure_hosts_file(&hosts).unwrap();
        assert_eq!(std::fs::read_to_string(&hosts).unwrap(), HOSTS);
        // A directory others may write to is refused.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_hosts_file(&open.join("computer-hosts")).unwrap_err();
        assert!(err.to_string().contains("only it may change"), "{err}");
    }

    #[test]
    fn only_the_own_loopback_changes_the_request() {
        let mut body = ContainerCreateBody {
            host_config: Some(Default::default()),
            ..Default::default()
        };
        Loopback::Engine.apply(&mut body);
        assert_eq!(body.network_disabled, None);
        let own = Loopback::Own {
            hosts: "/run/yy/computer-hosts".into(),
        };
        own.apply(&mut body);
        assert_eq!(body.network_disabled, Some(true));
        let m = &body.host_config.unwrap().mounts.unwrap()[0];
        assert_eq!(m.target.as_deref(), Some("/etc/hosts"));
        assert_eq!(m.read_only, Some(true));
    }
}
