//! Drift: how a container differs from the [`ComputerSpec`] it should embody. Checked right
//! after create and before adopting a container found on the engine.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use bollard::models::ContainerInspectResponse;

use super::docker::{tmpfs_for, ulimits};
use super::engine::Engine;
use super::loopback::Loopback;
use super::main_process::MainProcess;
use super::{ComputerSpec, GUEST_AGENT_CAPS, GUEST_UID, GuestNetwork};

/// What the engine shows beyond Docker's inspect answer, for the checks it presents
/// differently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EngineView {
    #[default]
    Docker,
    /// Podman: its own (libpod) inspect's capability sets, the truth behind a `CapDrop`
    /// that Podman's compat answer spells out capability by capability.
    Podman {
        bounding_caps: Vec<String>,
        effective_caps: Vec<String>,
    },
}

impl EngineView {
    pub fn engine(&self) -> Engine {
        match self {
            EngineView::Docker => Engine::Docker,
            EngineView::Podman { .. } => Engine::Podman,
        }
    }
}

/// Options Podman appends to every tmpfs it reports (mount propagation, and copying the
/// image's content in); they change neither size, exec nor ownership.
const PODMAN_TMPFS_ADDED: [&str; 2] = ["rprivate", "tmpcopyup"];

/// A Podman bind (`SRC:DST:OPTIONS`) without the options that only restrict it.
fn without_restrictions(bind: &str) -> String {
    let Some((head, options)) = bind.rsplit_once(':') else {
        return bind.to_string();
    };
    let kept: Vec<&str> = options
        .split(',')
        .filter(|o| !matches!(*o, "nosuid" | "nodev" | "noexec"))
        .collect();
    format!("{head}:{}", kept.join(","))
}

/// Podman's tmpfs options without its additions, in a fixed order. yy asks Podman for the
/// owner with `U` (the container's user, whose `Config.User` is checked to be 1000:1000),
/// which Podman reports as `U` until the start and as `uid=1000,gid=1000` after it.
fn podman_tmpfs_options(options: &str) -> String {
    let owner = [format!("uid={GUEST_UID}"), format!("gid={GUEST_UID}")];
    let mut o: Vec<String> = options
        .split(',')
        .filter(|o| !PODMAN_TMPFS_ADDED.contains(o))
        .flat_map(|o| match o {
            "U" => owner.to_vec(),
            other => vec![other.to_string()],
        })
        .collect();
    o.sort_unstable();
    o.dedup();
    o.join(",")
}

/// Capability names as one spelling, sorted: "CAP_SETUID" and "setuid" alike.
fn agent_caps<S: AsRef<str>>(caps: impl Iterator<Item = S>) -> Vec<String> {
    let mut caps: Vec<String> = caps
        .map(|c| {
            c.as_ref()
                .to_uppercase()
                .trim_start_matches("CAP_")
                .to_string()
        })
        .collect();
    caps.sort();
    caps
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Drift {
    /// The inspect field, e.g. `HostConfig.NetworkMode`.
    pub field: String,
    pub expected: String,
    pub actual: String,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, found {}",
            self.field, self.expected, self.actual
        )
    }
}

struct Checker(Vec<Drift>);

impl Checker {
    fn eq<T: PartialEq + fmt::Debug>(&mut self, field: &str, expected: T, actual: T) {
        if expected != actual {
            self.0.push(Drift {
                field: field.into(),
                expected: show(&expected),
                actual: show(&actual),
            });
        }
    }
    /// An optional list that must be empty or missing.
    fn empty<T: fmt::Debug>(&mut self, field: &str, actual: &Option<Vec<T>>) {
        if actual.as_ref().is_some_and(|v| !v.is_empty()) {
            self.0.push(Drift {
                field: field.into(),
                expected: "none".into(),
                actual: show(actual),
            });
        }
    }
}

/// `Some("x")` reads as `"x"`, `None` as `nothing`.
fn show<T: fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s == "None" {
        return "nothing".into();
    }
    match s.strip_prefix("Some(").and_then(|r| r.strip_suffix(')')) {
        Some(inner) => inner.to_string(),
        None => s,
    }
}

/// A mount as compared: its type, source, target and one flag (read-only as asked for,
/// writable as mounted).
type MountRow = (String, String, String, bool);

fn mount_row(
    typ: Option<impl ToString>,
    source: Option<String>,
    target: Option<String>,
    flag: Option<bool>,
) -> MountRow {
    (
        typ.map(|t| t.to_string()).unwrap_or_default(),
        source.unwrap_or_default(),
        target.unwrap_or_default(),
        flag.unwrap_or(false),
    )
}

/// Every difference between `c` and `spec`, whose workspace is at `workspace` (real path),
/// whose main process is `main` and whose loopback (without a network) is `loopback`, as
/// `view`'s engine presents it. Podman shows some settings differently from Docker; each
/// such place below says why its reading is the same property.
pub fn drifts(
    c: &ContainerInspectResponse,
    spec: &ComputerSpec,
    workspace: &Path,
    view: &EngineView,
    main: MainProcess,
    loopback: &Loopback,
) -> Vec<Drift> {
    let podman = view.engine() == Engine::Podman;
    let mut k = Checker(Vec::new());
    let want_name = format!("/{}", spec.name());
    k.eq("Name", Some(want_name.as_str()), c.name.as_deref());
    k.eq("Image", Some(spec.image_id.as_str()), c.image.as_deref());

    let config = c.config.clone().unwrap_or_default();
    // Podman's `Config.Image` is not an echo of the request: the bare hex ID, or a name of
    // the image when it has one (`docker.io/library/yy-computer:dev`). What the container
    // runs is the top-level `Image`, checked above on both engines.
    if !podman {
        k.eq(
            "Config.Image",
            Some(spec.image_id.as_str()),
            config.image.as_deref(),
        );
    }
    k.eq(
        "Config.User",
        Some(view.engine().container_user()),
        config.user.as_deref(),
    );
    k.eq(
        "Config.WorkingDir",
        Some(spec.guest_cwd.as_str()),
        config.working_dir.as_deref(),
    );
    k.eq(
        "Config.Cmd",
        Some(main.cmd(&spec.guest_cwd)),
        config.cmd.clone(),
    );
    k.empty("Config.Entrypoint", &config.entrypoint);
    // The main process's stdio: the guest agent's stdin is open for its one attach (closed
    // when that detaches), with no TTY; `sleep` has none. Docker's flags of the attach
    // itself are checked where they mean something (Podman's are not, it keeps `sleep`).
    let attached = main.attached();
    k.eq("Config.Tty", false, config.tty.unwrap_or(false));
    k.eq(
        "Config.OpenStdin",
        attached,
        config.open_stdin.unwrap_or(false),
    );
    k.eq(
        "Config.StdinOnce",
        attached,
        config.stdin_once.unwrap_or(false),
    );
    if attached {
        for (field, v) in [
            ("Config.AttachStdin", config.attach_stdin),
            ("Config.AttachStdout", config.attach_stdout),
            ("Config.AttachStderr", config.attach_stderr),
        ] {
            k.eq(field, true, v.unwrap_or(false));
        }
    }
    let have = config.labels.unwrap_or_default();
    for (key, want) in spec.labels() {
        k.eq(
            &format!("Config.Labels[{key}]"),
            Some(want.as_str()),
            have.get(&key).map(|s| s.as_str()),
        );
    }

    let h = c.host_config.clone().unwrap_or_default();
    k.eq(
        "HostConfig.NetworkMode",
        Some(spec.network_mode()),
        h.network_mode.as_deref(),
    );
    let hosts = match spec.network {
        GuestNetwork::None => loopback.hosts_mount(),
        GuestNetwork::Egress { .. } => None,
    };
    k.eq(
        "Config.NetworkDisabled",
        hosts.is_some(),
        config.network_disabled.unwrap_or(false),
    );
    // The proxy settings must be there (the image may add variables of its own).
    let env = config.env.clone().unwrap_or_default();
    for want in spec.env() {
        let key = want.split('=').next().unwrap_or_default();
        let found = env.iter().find(|e| e.split('=').next() == Some(key));
        k.eq(&format!("Config.Env[{key}]"), Some(&want), found);
    }
    // Beyond `CapDrop ALL`, the guest agent's few (docs/computer-notes.md, "The guest
    // agent's identity").
    let want_caps = agent_caps(GUEST_AGENT_CAPS.iter());
    match view {
        EngineView::Docker => {
            let caps = h.cap_drop.clone().unwrap_or_default();
            k.eq(
                "HostConfig.CapDrop",
                vec!["ALL".to_string()],
                caps.iter().map(|c| c.to_uppercase()).collect::<Vec<_>>(),
            );
            k.eq(
                "HostConfig.CapAdd",
                &want_caps,
                &agent_caps(h.cap_add.iter().flatten()),
            );
        }
        // Podman's compat answer lists the capabilities of its default set one by one
        // instead of `ALL`, and an empty `CapAdd` for the ones yy adds; its own inspect
        // says what the process keeps.
        EngineView::Podman {
            bounding_caps,
            effective_caps,
        } => {
            let added = agent_caps(h.cap_add.iter().flatten());
            if !added.is_empty() {
                k.eq("HostConfig.CapAdd", &want_caps, &added);
            }
            k.eq(
                "BoundingCaps (podman)",
                &want_caps,
                &agent_caps(bounding_caps.iter()),
            );
            k.eq(
                "EffectiveCaps (podman)",
                &want_caps,
                &agent_caps(effective_caps.iter()),
            );
        }
    }
    k.eq(
        "HostConfig.SecurityOpt",
        Some(vec!["no-new-privileges".to_string()]),
        h.security_opt.clone(),
    );
    k.eq("HostConfig.ReadonlyRootfs", Some(true), h.readonly_rootfs);
    k.eq(
        "HostConfig.Privileged",
        false,
        h.privileged.unwrap_or(false),
    );
    k.eq("HostConfig.Init", Some(true), h.init);
    // The guest agent's output is its session: no log may keep it.
    if let Some(driver) = main.log_driver() {
        k.eq(
            "HostConfig.LogConfig.Type",
            Some(driver),
            h.log_config.as_ref().and_then(|l| l.typ.as_deref()),
        );
    }
    let tmpfs: BTreeMap<String, String> = h
        .tmpfs
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(path, o)| match podman {
            true => (path, podman_tmpfs_options(&o)),
            false => (path, o),
        })
        .collect();
    let want_tmpfs: BTreeMap<String, String> = tmpfs_for(spec, view.engine())
        .into_iter()
        .map(|(path, o)| match podman {
            true => (path, podman_tmpfs_options(&o)),
            false => (path, o),
        })
        .collect();
    k.eq("HostConfig.Tmpfs", want_tmpfs, tmpfs);
    let mut limits: Vec<(String, i64, i64)> = h
        .ulimits
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|u| {
            // Podman names them as setrlimit does (`RLIMIT_NOFILE`).
            let name = u.name.unwrap_or_default().to_ascii_lowercase();
            let name = name.strip_prefix("rlimit_").unwrap_or(&name).to_string();
            (name, u.soft.unwrap_or(-1), u.hard.unwrap_or(-1))
        })
        .collect();
    limits.sort();
    let want_limits: Vec<(String, i64, i64)> = ulimits()
        .into_iter()
        .map(|u| {
            (
                u.name.unwrap_or_default(),
                u.soft.unwrap_or(-1),
                u.hard.unwrap_or(-1),
            )
        })
        .collect();
    k.eq("HostConfig.Ulimits", want_limits, limits);
    let l = &spec.limits;
    k.eq("HostConfig.Memory", Some(l.memory_bytes), h.memory);
    k.eq("HostConfig.MemorySwap", Some(l.memory_bytes), h.memory_swap);
    k.eq("HostConfig.NanoCpus", Some(l.nano_cpus), h.nano_cpus);
    k.eq("HostConfig.PidsLimit", Some(l.pids), h.pids_limit);
    k.eq(
        "HostConfig.OomKillDisable",
        false,
        h.oom_kill_disable.unwrap_or(false),
    );
    let ws = workspace.display().to_string();
    if podman {
        // Podman reports the requested bind mount in `Binds` (and no `HostConfig.Mounts`);
        // the top-level `Mounts` below is checked as on Docker.
        // A workspace that is a mount of its own (its image, `--workspace-limit`) comes
        // with that mount's `nosuid,nodev`: Podman lists them, and they only restrict.
        let binds: Vec<String> = h
            .binds
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|b| without_restrictions(&b))
            .collect();
        k.eq(
            "HostConfig.Binds",
            vec![format!("{ws}:{}:rw,rprivate,rbind", spec.guest_cwd)],
            binds,
        );
    } else {
        k.empty("HostConfig.Binds", &h.binds);
    }
    k.empty("HostConfig.VolumesFrom", &h.volumes_from);
    k.empty("HostConfig.Devices", &h.devices);
    k.empty("HostConfig.DeviceRequests", &h.device_requests);
    // Podman says `private` where Docker says nothing: the container's own namespace.
    let own = |v: &Option<String>| match v.as_deref() {
        Some("private") if podman => String::new(),
        other => other.unwrap_or("").to_string(),
    };
    for (field, v) in [
        ("HostConfig.PidMode", &h.pid_mode),
        ("HostConfig.UTSMode", &h.uts_mode),
        ("HostConfig.UsernsMode", &h.userns_mode),
    ] {
        k.eq(field, String::new(), own(v));
    }
    // `shareable` (Podman's default) is a namespace of its own too, which another
    // container could join only if created to (yy never does).
    let ipc = h.ipc_mode.as_deref().unwrap_or("");
    let own_ipc = matches!(ipc, "" | "private") || (podman && ipc == "shareable");
    if !own_ipc {
        k.eq("HostConfig.IpcMode", "private", ipc);
    }
    let sysctls: BTreeMap<String, String> =
        h.sysctls.clone().unwrap_or_default().into_iter().collect();
    k.eq("HostConfig.Sysctls", spec.sysctls(), sysctls);
    let mut host_mounts: Vec<MountRow> = h
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| mount_row(m.typ, m.source, m.target, m.read_only))
        .collect();
    if podman && host_mounts.is_empty() {
        host_mounts.push(("bind".into(), ws.clone(), spec.guest_cwd.clone(), false));
    }
    host_mounts.sort();
    // Asked for: the workspace read-write, and yy's hosts file read-only.
    let mut want_mounts = vec![(
        "bind".to_string(),
        ws.clone(),
        spec.guest_cwd.clone(),
        false,
    )];
    want_mounts.extend(
        hosts
            .clone()
            .map(|(source, target)| ("bind".to_string(), source, target, true)),
    );
    want_mounts.sort();
    k.eq("HostConfig.Mounts", want_mounts, host_mounts);

    // What is really mounted: exactly the workspace, read-write (and the hosts file, not).
    let mut mounts: Vec<MountRow> = c
        .mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| mount_row(m.typ, m.source, m.destination, m.rw))
        .collect();
    mounts.sort();
    let mut want_mounts = vec![("bind".to_string(), ws, spec.guest_cwd.clone(), true)];
    want_mounts.extend(hosts.map(|(source, target)| ("bind".to_string(), source, target, false)));
    want_mounts.sort();
    k.eq("Mounts", want_mounts, mounts);

    let networks: Vec<String> = c
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|n| n.keys().filter(|k| *k != "none").cloned().collect())
        .unwrap_or_default();
    let want: Vec<String> = match &spec.network {
        GuestNetwork::None => Vec::new(),
        GuestNetwork::Egress { network, .. } => vec![network.clone()],
    };
    k.eq("NetworkSettings.Networks", want, networks);
    k.0
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
