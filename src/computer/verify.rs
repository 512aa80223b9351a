//! Drift: how a container differs from the [`ComputerSpec`] it should embody. Checked right
//! after create and before adopting a container found on the engine.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use bollard::models::ContainerInspectResponse;

use super::docker::{MAIN_CMD, tmpfs_for, ulimits};
use super::engine::Engine;
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
/// as `view`'s engine presents it. Podman shows some settings differently from Docker;
/// each such place below says why its reading is the same property.
pub fn drifts(
    c: &ContainerInspectResponse,
    spec: &ComputerSpec,
    workspace: &Path,
    view: &EngineView,
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
    let cmd: Vec<String> = MAIN_CMD.iter().map(|s| s.to_string()).collect();
    k.eq("Config.Cmd", Some(&cmd), config.cmd.as_ref());
    k.empty("Config.Entrypoint", &config.entrypoint);
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
    k.eq(
        "HostConfig.Mounts",
        vec![(
            "bind".to_string(),
            ws.clone(),
            spec.guest_cwd.clone(),
            false,
        )],
        host_mounts,
    );

    // What is really mounted: exactly the workspace, read-write.
    let mounts: Vec<MountRow> = c
        .mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| mount_row(m.typ, m.source, m.destination, m.rw))
        .collect();
    k.eq(
        "Mounts",
        vec![("bind".to_string(), ws, spec.guest_cwd.clone(), true)],
        mounts,
    );

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
mod tests {
    use std::collections::HashMap;

    use bollard::models::{ContainerConfig, MountPoint, NetworkSettings};

    use super::*;

    /// A drift: the container is on Docker's default bridge too.
    fn join_bridge(c: &mut ContainerInspectResponse) {
        let settings = c.network_settings.as_mut().unwrap();
        let networks = settings.networks.as_mut().unwrap();
        networks.insert("bridge".into(), Default::default());
    }

    fn matching() -> (ComputerSpec, ContainerInspectResponse) {
        matching_spec(super::super::tests::spec())
    }

    fn matching_spec(spec: ComputerSpec) -> (ComputerSpec, ContainerInspectResponse) {
        matching_on(spec, Engine::Docker)
    }

    fn matching_on(spec: ComputerSpec, engine: Engine) -> (ComputerSpec, ContainerInspectResponse) {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let body = super::super::docker::create_body(&spec, ws, engine);
        let mut labels: HashMap<String, String> = body.labels.clone().unwrap();
        labels.insert("yy.version".into(), "0.1.0".into()); // merged in from the image
        let inspect = ContainerInspectResponse {
            name: Some(format!("/{}", spec.name())),
            image: Some(spec.image_id.clone()),
            config: Some(ContainerConfig {
                image: body.image.clone(),
                user: body.user.clone(),
                working_dir: body.working_dir.clone(),
                cmd: body.cmd.clone(),
                labels: Some(labels),
                env: Some(
                    [
                        vec!["PATH=/usr/bin".to_string()],
                        body.env.clone().unwrap_or_default(),
                    ]
                    .concat(),
                ),
                ..Default::default()
            }),
            host_config: body.host_config.clone(),
            mounts: Some(vec![MountPoint {
                typ: Some("bind".into()),
                source: Some(ws.display().to_string()),
                destination: Some(spec.guest_cwd.clone()),
                rw: Some(true),
                ..Default::default()
            }]),
            network_settings: Some(NetworkSettings {
                networks: Some(HashMap::from([(
                    spec.network_mode().to_string(),
                    Default::default(),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        };
        (spec, inspect)
    }

    #[test]
    fn a_faithful_container_has_no_drift() {
        let (spec, inspect) = matching();
        assert_eq!(
            drifts(
                &inspect,
                &spec,
                Path::new("/var/tmp/yy/ws/x"),
                &EngineView::Docker
            ),
            vec![]
        );
    }

    type Mutation = Box<dyn Fn(&mut ContainerInspectResponse)>;

    fn host(c: &mut ContainerInspectResponse) -> &mut bollard::models::HostConfig {
        c.host_config.as_mut().unwrap()
    }

    /// A container of another image than the one asked for.
    fn other_image() -> (&'static str, Mutation) {
        (
            "Image",
            Box::new(|c| c.image = Some(format!("sha256:{}", "cd".repeat(32)))),
        )
    }

    /// Each mutation, applied to its own copy of `base`, is named by its field.
    fn assert_each_detected(
        base: &ContainerInspectResponse,
        spec: &ComputerSpec,
        view: &EngineView,
        cases: Vec<(&str, Mutation)>,
    ) {
        for (field, mutate) in cases {
            let mut c = base.clone();
            mutate(&mut c);
            let d = drifts(&c, spec, Path::new("/var/tmp/yy/ws/x"), view);
            assert!(
                d.iter().any(|d| d.field == field),
                "{field} not detected: {d:?}"
            );
        }
    }

    #[test]
    fn each_kind_of_drift_is_named() {
        let (spec, base) = matching();
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "HostConfig.NetworkMode",
                Box::new(|c| host(c).network_mode = Some("bridge".into())),
            ),
            ("NetworkSettings.Networks", Box::new(join_bridge)),
            (
                "Config.User",
                Box::new(|c| c.config.as_mut().unwrap().user = None),
            ),
            (
                "HostConfig.CapAdd",
                Box::new(|c| host(c).cap_add = Some(vec!["NET_ADMIN".into()])),
            ),
            (
                "HostConfig.ReadonlyRootfs",
                Box::new(|c| host(c).readonly_rootfs = Some(false)),
            ),
            (
                "HostConfig.MemorySwap",
                Box::new(|c| host(c).memory_swap = Some(-1)),
            ),
            (
                "HostConfig.PidsLimit",
                Box::new(|c| host(c).pids_limit = None),
            ),
            (
                "Config.Labels[yy.generation]",
                Box::new(|c| {
                    let labels = c.config.as_mut().unwrap().labels.as_mut().unwrap();
                    labels.insert("yy.generation".into(), "2".into());
                }),
            ),
            (
                "Mounts",
                Box::new(|c| {
                    c.mounts.as_mut().unwrap().push(MountPoint {
                        typ: Some("bind".into()),
                        source: Some("/var/run/docker.sock".into()),
                        destination: Some("/var/run/docker.sock".into()),
                        rw: Some(true),
                        ..Default::default()
                    })
                }),
            ),
            other_image(),
            (
                "HostConfig.Privileged",
                Box::new(|c| host(c).privileged = Some(true)),
            ),
        ];
        assert_each_detected(&base, &spec, &EngineView::Docker, cases);
        let d = drifts(&base, &spec, Path::new("/elsewhere"), &EngineView::Docker);
        assert!(d.iter().any(|d| d.field == "Mounts"), "{d:?}");
        assert!(d[0].to_string().contains("expected"), "{}", d[0]);
    }

    #[test]
    fn a_public_web_computer_must_have_its_network_proxy_and_no_ipv6() {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let mut spec = super::super::tests::spec();
        spec.network = GuestNetwork::Egress {
            network: "yy-egress-net-comp1".into(),
            proxy: "172.19.0.3:3128".parse().unwrap(),
        };
        let (spec, base) = matching_spec(spec);
        assert_eq!(drifts(&base, &spec, ws, &EngineView::Docker), vec![]);
        let h = base.host_config.as_ref().unwrap();
        assert_eq!(h.network_mode.as_deref(), Some("yy-egress-net-comp1"));
        assert_eq!(h.sysctls.as_ref().unwrap().len(), 2);
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "Config.Env[HTTPS_PROXY]",
                Box::new(|c| {
                    let env = c.config.as_mut().unwrap().env.as_mut().unwrap();
                    env.retain(|e| !e.starts_with("HTTPS_PROXY="));
                }),
            ),
            (
                "Config.Env[HTTP_PROXY]",
                Box::new(|c| {
                    let env = c.config.as_mut().unwrap().env.as_mut().unwrap();
                    for e in env.iter_mut().filter(|e| e.starts_with("HTTP_PROXY=")) {
                        *e = "HTTP_PROXY=http://10.0.0.1:3128".into();
                    }
                }),
            ),
            ("HostConfig.Sysctls", Box::new(|c| host(c).sysctls = None)),
            ("NetworkSettings.Networks", Box::new(join_bridge)),
            (
                "HostConfig.NetworkMode",
                Box::new(|c| host(c).network_mode = Some("none".into())),
            ),
        ];
        assert_each_detected(&base, &spec, &EngineView::Docker, cases);
        // A none computer with sysctls drifted too.
        let (spec, mut c) = matching();
        host(&mut c).sysctls = Some(HashMap::from([(
            "net.ipv4.ip_forward".to_string(),
            "1".to_string(),
        )]));
        assert!(
            drifts(&c, &spec, ws, &EngineView::Docker)
                .iter()
                .any(|d| d.field == "HostConfig.Sysctls")
        );
    }

    /// A container as Podman 4.3's compat inspect shows it (seen on the build machine):
    /// every setting as asked, spelled Podman's way.
    fn as_podman_shows_it() -> (ComputerSpec, ContainerInspectResponse) {
        let (spec, mut c) = matching_on(super::super::tests::spec(), Engine::Podman);
        let config = c.config.as_mut().unwrap();
        config.image = Some(spec.image_id.trim_start_matches("sha256:").to_string());
        config.entrypoint = Some(vec![]);
        let h = host(&mut c);
        h.cap_drop = Some(
            [
                "CAP_AUDIT_WRITE",
                "CAP_CHOWN",
                "CAP_KILL",
                "CAP_SETUID",
                "CAP_SYS_CHROOT",
            ]
            .map(String::from)
            .to_vec(),
        );
        h.cap_add = Some(vec![]);
        h.tmpfs = Some(
            tmpfs_for(&spec, Engine::Podman)
                .into_iter()
                .map(|(path, o)| (path, format!("{o},rprivate,tmpcopyup")))
                .collect(),
        );
        h.binds = Some(vec![format!(
            "/var/tmp/yy/ws/x:{}:rw,rprivate,rbind",
            spec.guest_cwd
        )]);
        h.mounts = None;
        h.pid_mode = Some("private".into());
        h.uts_mode = Some("private".into());
        h.ipc_mode = Some("shareable".into());
        for u in h.ulimits.as_mut().unwrap() {
            u.name = Some(format!(
                "RLIMIT_{}",
                u.name.as_deref().unwrap().to_uppercase()
            ));
        }
        c.network_settings.as_mut().unwrap().networks = Some(HashMap::new());
        (spec, c)
    }

    /// What Podman's own inspect says a computer's process keeps: the agent's three.
    fn podman_caps() -> EngineView {
        let three: Vec<String> = ["CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"]
            .into_iter()
            .map(String::from)
            .collect();
        EngineView::Podman {
            bounding_caps: three.clone(),
            effective_caps: three,
        }
    }

    #[test]
    fn a_workspace_mount_of_its_own_passes_on_podman_and_another_source_not() {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let (spec, mut c) = as_podman_shows_it();
        let binds = |c: &mut ContainerInspectResponse, b: &str| {
            host(c).binds = Some(vec![b.to_string()]);
        };
        // The image mounted at the workspace (`nosuid,nodev`) shows through.
        binds(
            &mut c,
            "/var/tmp/yy/ws/x:/workspace:rw,rprivate,nosuid,nodev,rbind",
        );
        assert_eq!(drifts(&c, &spec, ws, &podman_caps()), vec![]);
        for bad in [
            "/var/tmp/yy/ws/y:/workspace:rw,rprivate,nosuid,nodev,rbind",
            "/var/tmp/yy/ws/x:/workspace:rw,rshared,nosuid,rbind",
            "/var/tmp/yy/ws/x:/workspace:rw,rprivate,suid,rbind",
        ] {
            binds(&mut c, bad);
            let d = drifts(&c, &spec, ws, &podman_caps());
            assert!(d.iter().any(|d| d.field == "HostConfig.Binds"), "{bad}");
        }
    }

    #[test]
    fn podman_shows_the_same_hardening_its_own_way() {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let (spec, c) = as_podman_shows_it();
        assert_eq!(drifts(&c, &spec, ws, &podman_caps()), vec![]);
        // Before the start it shows the owner as asked: `U`.
        let mut created = c.clone();
        for o in host(&mut created).tmpfs.as_mut().unwrap().values_mut() {
            *o = o.replace("uid=1000,gid=1000", "U");
        }
        assert_ne!(created, c);
        assert_eq!(drifts(&created, &spec, ws, &podman_caps()), vec![]);
        // Read as Docker's, the same answer is refused (no `ALL` in CapDrop, Binds, ...).
        let d = drifts(&c, &spec, ws, &EngineView::Docker);
        for field in ["HostConfig.CapDrop", "HostConfig.Binds", "HostConfig.Tmpfs"] {
            assert!(d.iter().any(|d| d.field == field), "{field}: {d:?}");
        }
        // What Podman keeps for the process is what counts.
        let EngineView::Podman { effective_caps, .. } = podman_caps() else {
            unreachable!()
        };
        let kept = EngineView::Podman {
            bounding_caps: vec!["CAP_KILL".into()],
            effective_caps,
        };
        let d = drifts(&c, &spec, ws, &kept);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].field, "BoundingCaps (podman)");
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "HostConfig.Tmpfs",
                Box::new(|c| {
                    let tmpfs = host(c).tmpfs.as_mut().unwrap();
                    tmpfs.insert("/run".into(), "rw,rprivate,nosuid,nodev,tmpcopyup".into());
                }),
            ),
            (
                "HostConfig.Binds",
                Box::new(|c| {
                    host(c).binds.as_mut().unwrap()[0] = "/:/workspace:rw,rprivate,rbind".into()
                }),
            ),
            ("HostConfig.Ulimits", Box::new(|c| host(c).ulimits = None)),
            (
                "HostConfig.PidMode",
                Box::new(|c| host(c).pid_mode = Some("host".into())),
            ),
            (
                "HostConfig.IpcMode",
                Box::new(|c| host(c).ipc_mode = Some("host".into())),
            ),
            other_image(),
            (
                "HostConfig.CapAdd",
                Box::new(|c| host(c).cap_add = Some(vec!["SYS_ADMIN".into()])),
            ),
        ];
        assert_each_detected(&c, &spec, &podman_caps(), cases);
    }
}
