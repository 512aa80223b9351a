//! Isolated computers: a hardened Docker container per owner, reached only through the
//! guest agent (`yy guest serve`, the same binary) over its attached stdio: the container's
//! own main process on a cold launch, an attached `docker exec` otherwise ([`launch`]).
//!
//! * [`protocol`]: the JSON-lines protocol between host and guest.
//! * [`guest`] and [`confine`]: the guest agent and its workspace confinement.
//! * [`session`]: the host side of the protocol ([`session::GuestSession`]).
//! * [`docker`]: the provider over bollard (create, verify, start, stop, remove, list).
//! * [`main_process`]: what a computer's container runs as its main process.
//! * [`launch`]: a computer's launch and its guest sessions.
//! * [`verify`]: the drift check of a container against its [`ComputerSpec`].
//! * [`rootfs`], [`image`], [`tarball`], [`image_verify`]: building, listing and verifying
//!   the image; [`package_lock`] and [`dpkg_status`]: what a build installed, compared with
//!   the recipe's lock and its dependency closure.

pub mod browser;
pub mod confine;
pub mod desktop_look;
pub mod desktop_verify;
pub mod docker;
pub mod dpkg_status;
pub mod engine;
pub mod guest;
pub mod host_read;
pub mod identity;
pub mod image;
pub mod image_rm;
pub mod image_verify;
pub mod keys;
pub mod launch;
pub mod loopback;
pub mod main_process;
pub mod package_lock;
pub mod protocol;
pub mod recipes;
pub mod rootfs;
pub mod screen;
pub mod session;
pub mod tarball;
pub mod verify;
pub mod verify_record;
pub mod workspaces;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The guest's user and group, in the container and as owner of the workspace.
pub const GUEST_UID: u32 = 1000;
pub const GUEST_USER: &str = "1000:1000";
/// The guest agent's own user and group (`yy-guest`): not root, not the guest user, and
/// outside the ranges Debian hands out (system 100-999, people 1000-59999). The agent's
/// real and saved ids are this one and its effective id the guest user's, so it works on
/// the workspace as the guest user while no command of that user can signal it, trace it
/// or open its `/proc` entries (docs/computer-notes.md, "The guest agent's identity").
pub const GUEST_AGENT_UID: u32 = 60999;
/// The user the guest agent starts as (its exec, or on Docker the container itself when
/// the agent is its main process, see [`launch`]): root, with only the capabilities it
/// needs to take its identity ([`GUEST_AGENT_CAPS`]). Every command of the agent and every
/// plain exec ([`without_capabilities`]) runs as [`GUEST_USER`] with no capability at all;
/// see [`engine::Engine::container_user`] for the container's user on each engine.
pub const GUEST_AGENT_START_USER: &str = "0:0";
/// The only capabilities a computer keeps (`CapAdd` after `CapDrop ALL`): to set the
/// agent's ids and to empty the bounding set it passes on.
pub const GUEST_AGENT_CAPS: [&str; 3] = ["SETUID", "SETGID", "SETPCAP"];
/// Where the image carries the guest agent.
pub const GUEST_BINARY: &str = "/usr/local/bin/yy";

/// `argv` as a plain exec in a computer runs it: through `yy guest run`, which leaves it
/// no capability (Podman gives a non-root exec the container's added ones).
pub fn without_capabilities<S: AsRef<str>>(argv: &[S]) -> Vec<String> {
    [GUEST_BINARY, "guest", "run", "--"]
        .into_iter()
        .map(String::from)
        .chain(argv.iter().map(|a| a.as_ref().to_string()))
        .collect()
}
/// The guest user's home: a tmpfs, since the root is read-only.
pub const GUEST_HOME: &str = "/home/yy";
/// Where an image keeps the lock of the packages it was built with.
pub const PACKAGE_LOCK_PATH: &str = "/etc/yy/packages.lock";

/// Container labels (`yy.managed=1` marks every container yy created).
pub mod labels {
    pub const ACCOUNT: &str = "yy.account";
    pub const RUNNER: &str = "yy.runner";
    pub const COMPUTER: &str = "yy.computer";
    pub const AGENT: &str = "yy.agent";
    pub const IMAGE: &str = "yy.image";
    pub const GENERATION: &str = "yy.generation";
    pub const MANAGED: &str = "yy.managed";
    /// Image labels.
    pub const VERSION: &str = "yy.version";
    /// The packages the image was built with, as [`super::package_lock::to_label`] writes
    /// them; the same lock is the file [`super::PACKAGE_LOCK_PATH`] in the image.
    pub const PACKAGES: &str = "yy.packages";
    pub const RECIPE: &str = "yy.recipe";
    pub const BINARY: &str = "yy.binary";
    pub const BASE: &str = "yy.base";
    /// The built-in recipe an image was made from (`base`, `desktop`).
    pub const RECIPE_NAME: &str = "yy.recipe.name";
    /// `1` when the image's guest agent can be the container's main process (`yy guest
    /// serve --main-process`); set by `yy image build` for an agent that takes the flag.
    pub const GUEST_MAIN_PROCESS: &str = "yy.guest.main-process";
}

#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    /// A request that can never work as given (bad image id, bad path, bad limits).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// The owner's container name is taken (by a container to remove or adopt first).
    #[error("container name {name} is already used by container {existing}")]
    NameInUse { name: String, existing: String },
    #[error("container {container} differs from what was asked for and was {action}: {}", drift_list(.drifts))]
    Drifted {
        container: String,
        action: &'static str,
        drifts: Vec<verify::Drift>,
    },
    #[error("docker: {0}")]
    Docker(String),
    /// The guest agent cannot be reached or broke the protocol.
    #[error("guest agent: {0}")]
    Guest(String),
    /// The guest agent refused or failed one operation (`code` from `protocol::codes`).
    #[error("{message}")]
    Op { code: String, message: String },
    #[error("{0}")]
    Io(String),
    /// The installed packages are not what the lock or the recipe allows.
    #[error("{0}")]
    Lock(String),
}

fn drift_list(drifts: &[verify::Drift]) -> String {
    drifts
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<bollard::errors::Error> for ComputerError {
    fn from(e: bollard::errors::Error) -> Self {
        use bollard::errors::Error as E;
        match e {
            E::DockerResponseServerError {
                status_code: 404,
                message,
            } => ComputerError::NotFound(message),
            E::DockerResponseServerError { message, .. } => ComputerError::Docker(message),
            other => ComputerError::Docker(other.to_string().replace('\n', " ")),
        }
    }
}

/// Resources of one computer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_bytes: i64,
    /// CPU in billionths of a CPU (1e9 = one CPU).
    pub nano_cpus: i64,
    pub pids: i64,
    /// Size of the `/tmp` tmpfs (charged to the memory limit when used).
    pub tmp_bytes: i64,
    /// Size of the home tmpfs.
    pub home_bytes: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 1 << 30,
            nano_cpus: 1_000_000_000,
            pids: 256,
            tmp_bytes: 512 << 20,
            home_bytes: 128 << 20,
        }
    }
}

/// Everything that decides how a computer's container looks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComputerSpec {
    /// Stable ids of the owner, e.g. `account/agent`; the container name derives from it.
    pub owner_key: String,
    pub runner_id: String,
    pub computer_id: String,
    pub agent_id: String,
    pub account_id: String,
    /// Full image id: `sha256:` and 64 hex digits.
    pub image_id: String,
    pub generation: u64,
    /// The private host directory mounted as the workspace (created 0700, owned by 1000).
    pub workspace_host_dir: PathBuf,
    /// Where the workspace appears in the guest (absolute; the Profile's `terminal.cwd`).
    pub guest_cwd: String,
    pub limits: Limits,
    /// Loopback only, or the computer's own internal network with the egress proxy.
    #[serde(default)]
    pub network: GuestNetwork,
}

/// How a computer reaches the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GuestNetwork {
    /// No interface but loopback (`NetworkMode none`).
    #[default]
    None,
    /// Only `network`: an internal Docker network of its own (no route out, no address on
    /// the host) whose one other member is the egress proxy at `proxy`.
    Egress {
        network: String,
        proxy: std::net::SocketAddr,
    },
}

/// `yy-` and the first 32 hex digits (128 bits) of SHA-256 of the owner key: stable,
/// unique per owner, and free of display names.
pub fn container_name(owner_key: &str) -> String {
    let digest = hex::encode(Sha256::digest(owner_key.as_bytes()));
    format!("yy-{}", &digest[..32])
}

/// Refuses anything but a full image id (tags and short ids can move or collide).
pub fn validate_image_id(image: &str) -> Result<(), ComputerError> {
    let ok = image.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    });
    if ok {
        Ok(())
    } else {
        Err(ComputerError::Invalid(format!(
            "{image:?} is not a full image ID: give sha256: and 64 hex digits (a tag or short ID can change what it points to; see `yy image list`)"
        )))
    }
}

/// System paths a workspace may never be mounted over (or above).
const RESERVED_GUEST_DIRS: [&str; 15] = [
    "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/boot", "/run", "/var", "/tmp",
];

/// The guest working directory: absolute, normalized, not a system directory, and not
/// above or at a tmpfs mount point.
pub fn validate_guest_cwd(cwd: &str) -> Result<(), ComputerError> {
    let bad = |why: &str| {
        Err(ComputerError::Invalid(format!(
            "guest working directory {cwd:?} {why}"
        )))
    };
    let p = Path::new(cwd);
    if !p.is_absolute() {
        return bad("must be an absolute path");
    }
    if cwd.len() > 1024 || cwd.chars().any(|c| c.is_control()) {
        return bad("is too long or has control characters");
    }
    if cwd.ends_with('/') || cwd.contains("//") {
        return bad("must be normalized (no trailing or double slash)");
    }
    // Path::components() hides inner '.' segments, so look at the text.
    if cwd.split('/').any(|seg| seg == "." || seg == "..") {
        return bad("must not contain '.' or '..'");
    }
    if cwd == "/" {
        return bad("cannot be the root directory");
    }
    for reserved in RESERVED_GUEST_DIRS {
        if p.starts_with(reserved) {
            return bad(&format!("lies in the system directory {reserved}"));
        }
    }
    if Path::new(GUEST_HOME).starts_with(p) {
        return bad(&format!("would hide {GUEST_HOME}"));
    }
    Ok(())
}

fn validate_label(what: &str, v: &str) -> Result<(), ComputerError> {
    let ok = !v.is_empty()
        && v.len() <= 200
        && v.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/' | b'@')
        });
    if ok {
        Ok(())
    } else {
        Err(ComputerError::Invalid(format!(
            "{what} {v:?} must be 1-200 characters of letters, digits and - _ . : / @"
        )))
    }
}

impl Limits {
    /// Limits a desktop computer needs: a browser has many processes and threads (which
    /// count against the pids limit) and caches in the home directory.
    pub fn desktop() -> Limits {
        Limits {
            memory_bytes: 2 << 30,
            nano_cpus: 1_000_000_000,
            pids: 1024,
            tmp_bytes: 512 << 20,
            home_bytes: 256 << 20,
        }
    }

    pub fn validate(&self) -> Result<(), ComputerError> {
        let bad = |m: String| Err(ComputerError::Invalid(m));
        if self.memory_bytes < 64 << 20 {
            return bad(format!(
                "memory limit {} is below 64 MiB",
                self.memory_bytes
            ));
        }
        if self.nano_cpus < 10_000_000 {
            return bad(format!("CPU limit {} is below 0.01 CPU", self.nano_cpus));
        }
        if !(16..=1_000_000).contains(&self.pids) {
            return bad(format!("pids limit {} is not within 16-1000000", self.pids));
        }
        for (what, v) in [("/tmp", self.tmp_bytes), ("home", self.home_bytes)] {
            if v < 1 << 20 || v > self.memory_bytes {
                return bad(format!(
                    "{what} tmpfs size {v} must be at least 1 MiB and at most the memory limit"
                ));
            }
        }
        Ok(())
    }
}

impl ComputerSpec {
    pub fn name(&self) -> String {
        container_name(&self.owner_key)
    }

    /// Checks everything that does not need the file system or Docker.
    pub fn validate(&self) -> Result<(), ComputerError> {
        validate_image_id(&self.image_id)?;
        validate_label("owner key", &self.owner_key)?;
        validate_label("runner id", &self.runner_id)?;
        validate_label("computer id", &self.computer_id)?;
        validate_label("agent id", &self.agent_id)?;
        validate_label("account id", &self.account_id)?;
        validate_guest_cwd(&self.guest_cwd)?;
        if !self.workspace_host_dir.is_absolute() {
            return Err(ComputerError::Invalid(format!(
                "workspace host directory {} must be absolute",
                self.workspace_host_dir.display()
            )));
        }
        self.limits.validate()
    }

    /// The labels the container is created with (the image adds its own on top).
    pub fn labels(&self) -> BTreeMap<String, String> {
        [
            (labels::ACCOUNT, self.account_id.clone()),
            (labels::RUNNER, self.runner_id.clone()),
            (labels::COMPUTER, self.computer_id.clone()),
            (labels::AGENT, self.agent_id.clone()),
            (labels::IMAGE, self.image_id.clone()),
            (labels::GENERATION, self.generation.to_string()),
            (labels::MANAGED, "1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Docker's `NetworkMode`: `none`, or the computer's own internal network.
    pub fn network_mode(&self) -> &str {
        match &self.network {
            GuestNetwork::None => "none",
            GuestNetwork::Egress { network, .. } => network,
        }
    }

    /// The container's environment: for `public-web`, the proxy for commands and browsers
    /// (both spellings, since tools read one or the other).
    pub fn env(&self) -> Vec<String> {
        match &self.network {
            GuestNetwork::None => Vec::new(),
            GuestNetwork::Egress { proxy, .. } => {
                let url = format!("http://{proxy}");
                let no_proxy = "localhost,127.0.0.1,::1";
                vec![
                    format!("HTTPS_PROXY={url}"),
                    format!("HTTP_PROXY={url}"),
                    format!("NO_PROXY={no_proxy}"),
                    format!("http_proxy={url}"),
                    format!("https_proxy={url}"),
                    format!("no_proxy={no_proxy}"),
                ]
            }
        }
    }

    /// Kernel settings of the container's network namespace. With a network: no IPv6 at
    /// all, so no link-local address can reach the host's bridge (whose IPv4 address the
    /// internal network withholds).
    pub fn sysctls(&self) -> BTreeMap<String, String> {
        match &self.network {
            GuestNetwork::None => BTreeMap::new(),
            GuestNetwork::Egress { .. } => BTreeMap::from([
                (
                    "net.ipv6.conf.all.disable_ipv6".to_string(),
                    "1".to_string(),
                ),
                (
                    "net.ipv6.conf.default.disable_ipv6".to_string(),
                    "1".to_string(),
                ),
            ]),
        }
    }

    /// The tmpfs mounts, exactly as given to (and echoed by) Docker.
    pub fn tmpfs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "/tmp".to_string(),
                format!("rw,exec,nosuid,nodev,size={}", self.limits.tmp_bytes),
            ),
            (
                GUEST_HOME.to_string(),
                format!(
                    "rw,nosuid,nodev,size={},uid={GUEST_UID},gid={GUEST_UID},mode=0700",
                    self.limits.home_bytes
                ),
            ),
        ])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn spec() -> ComputerSpec {
        ComputerSpec {
            owner_key: "acct1/agent1".into(),
            runner_id: "run1".into(),
            computer_id: "comp1".into(),
            agent_id: "agent1".into(),
            account_id: "acct1".into(),
            image_id: format!("sha256:{}", "ab".repeat(32)),
            generation: 3,
            workspace_host_dir: "/var/tmp/yy/ws/x".into(),
            guest_cwd: "/workspace".into(),
            limits: Limits::default(),
            network: GuestNetwork::None,
        }
    }

    #[test]
    fn names_are_digests_of_the_owner() {
        let a = container_name("acct1/agent1");
        assert_eq!(a, container_name("acct1/agent1"));
        assert_ne!(a, container_name("acct1/agent2"));
        assert_eq!(a.len(), 3 + 32);
        assert!(a.starts_with("yy-"));
        assert!(a[3..].bytes().all(|b| b.is_ascii_hexdigit()));
        // sha256("acct1/agent1") starts with these digits.
        let full = hex::encode(Sha256::digest(b"acct1/agent1"));
        assert_eq!(&a[3..], &full[..32]);
    }

    #[test]
    fn only_full_image_ids_are_accepted() {
        validate_image_id(&format!("sha256:{}", "0a".repeat(32))).unwrap();
        for bad in [
            "yy-computer:test",
            "bccb8148217c",
            "sha256:bccb8148217c",
            &format!("sha256:{}", "AB".repeat(32)),
            &"ab".repeat(32),
            &format!("sha256:{}0", "ab".repeat(32)),
        ] {
            let e = validate_image_id(bad).unwrap_err();
            assert!(e.to_string().contains("not a full image ID"), "{e}");
        }
    }

    #[test]
    fn guest_cwd_must_be_a_plain_absolute_dir() {
        for ok in ["/workspace", "/home/yy/work", "/srv/agent", "/data/x-1"] {
            validate_guest_cwd(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "workspace",
            "/",
            "/tmp",
            "/tmp/x",
            "/etc",
            "/usr/local/w",
            "/home",
            "/home/yy",
            "/proc/1",
            "/a/../etc",
            "/a/./b",
            "/a/",
            "//a",
            "/var/run",
        ] {
            assert!(validate_guest_cwd(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn specs_are_validated() {
        spec().validate().unwrap();
        let mut s = spec();
        s.image_id = "yy-computer:test".into();
        assert!(s.validate().is_err());
        let mut s = spec();
        s.owner_key = "Alice's agent".into();
        assert!(s.validate().is_err());
        let mut s = spec();
        s.limits.pids = 1;
        assert!(s.validate().is_err());
        let mut s = spec();
        s.limits.tmp_bytes = s.limits.memory_bytes * 2;
        assert!(s.validate().is_err());
        let mut s = spec();
        s.workspace_host_dir = "rel/dir".into();
        assert!(s.validate().is_err());
        let labels = spec().labels();
        assert_eq!(labels["yy.generation"], "3");
        assert_eq!(labels["yy.managed"], "1");
        assert_eq!(labels.len(), 7);
    }
}
