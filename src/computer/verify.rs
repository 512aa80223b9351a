//! Drift: how a container differs from the [`ComputerSpec`] it should embody. Checked right
//! after create and before adopting a container found on the engine.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use bollard::models::ContainerInspectResponse;

use super::docker::MAIN_CMD;
use super::{ComputerSpec, GUEST_AGENT_CAPS, GuestNetwork, MAIN_USER};

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

/// Every difference between `c` and `spec`, whose workspace is at `workspace` (real path).
pub fn drifts(c: &ContainerInspectResponse, spec: &ComputerSpec, workspace: &Path) -> Vec<Drift> {
    let mut k = Checker(Vec::new());
    let want_name = format!("/{}", spec.name());
    k.eq("Name", Some(want_name.as_str()), c.name.as_deref());
    k.eq("Image", Some(spec.image_id.as_str()), c.image.as_deref());

    let config = c.config.clone().unwrap_or_default();
    k.eq(
        "Config.Image",
        Some(spec.image_id.as_str()),
        config.image.as_deref(),
    );
    k.eq("Config.User", Some(MAIN_USER), config.user.as_deref());
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
    let caps = h.cap_drop.clone().unwrap_or_default();
    k.eq(
        "HostConfig.CapDrop",
        vec!["ALL".to_string()],
        caps.iter().map(|c| c.to_uppercase()).collect::<Vec<_>>(),
    );
    // The guest agent's few (docs/computer-notes.md); "CAP_SETUID" and "setuid" alike.
    let mut added: Vec<String> = h
        .cap_add
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|c| c.to_uppercase().trim_start_matches("CAP_").to_string())
        .collect();
    added.sort();
    let mut want: Vec<String> = GUEST_AGENT_CAPS.iter().map(|c| c.to_string()).collect();
    want.sort();
    k.eq("HostConfig.CapAdd", want, added);
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
    let tmpfs: BTreeMap<String, String> = h.tmpfs.clone().unwrap_or_default().into_iter().collect();
    k.eq("HostConfig.Tmpfs", spec.tmpfs(), tmpfs);
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
    k.empty("HostConfig.Binds", &h.binds);
    k.empty("HostConfig.VolumesFrom", &h.volumes_from);
    k.empty("HostConfig.Devices", &h.devices);
    k.empty("HostConfig.DeviceRequests", &h.device_requests);
    for (field, v) in [
        ("HostConfig.PidMode", &h.pid_mode),
        ("HostConfig.UTSMode", &h.uts_mode),
        ("HostConfig.UsernsMode", &h.userns_mode),
    ] {
        k.eq(field, "", v.as_deref().unwrap_or(""));
    }
    let ipc = h.ipc_mode.as_deref().unwrap_or("");
    if !matches!(ipc, "" | "private") {
        k.eq("HostConfig.IpcMode", "private", ipc);
    }
    let sysctls: BTreeMap<String, String> =
        h.sysctls.clone().unwrap_or_default().into_iter().collect();
    k.eq("HostConfig.Sysctls", spec.sysctls(), sysctls);
    let host_mounts: Vec<(String, String, String, bool)> = h
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.typ.map(|t| t.to_string()).unwrap_or_default(),
                m.source.unwrap_or_default(),
                m.target.unwrap_or_default(),
                m.read_only.unwrap_or(false),
            )
        })
        .collect();
    let ws = workspace.display().to_string();
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
    let mounts: Vec<(String, String, String, bool)> = c
        .mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.typ.map(|t| t.to_string()).unwrap_or_default(),
                m.source.unwrap_or_default(),
                m.destination.unwrap_or_default(),
                m.rw.unwrap_or(false),
            )
        })
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

    fn matching() -> (ComputerSpec, ContainerInspectResponse) {
        matching_spec(super::super::tests::spec())
    }

    fn matching_spec(spec: ComputerSpec) -> (ComputerSpec, ContainerInspectResponse) {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let body = super::super::docker::create_body(&spec, ws);
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
            drifts(&inspect, &spec, Path::new("/var/tmp/yy/ws/x")),
            vec![]
        );
    }

    #[test]
    fn each_kind_of_drift_is_named() {
        let ws = Path::new("/var/tmp/yy/ws/x");
        let (spec, base) = matching();
        type Mutation = Box<dyn Fn(&mut ContainerInspectResponse)>;
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "HostConfig.NetworkMode",
                Box::new(|c| c.host_config.as_mut().unwrap().network_mode = Some("bridge".into())),
            ),
            (
                "NetworkSettings.Networks",
                Box::new(|c| {
                    c.network_settings
                        .as_mut()
                        .unwrap()
                        .networks
                        .as_mut()
                        .unwrap()
                        .insert("bridge".into(), Default::default());
                }),
            ),
            (
                "Config.User",
                Box::new(|c| c.config.as_mut().unwrap().user = None),
            ),
            (
                "HostConfig.CapAdd",
                Box::new(|c| {
                    c.host_config.as_mut().unwrap().cap_add = Some(vec!["NET_ADMIN".into()])
                }),
            ),
            (
                "HostConfig.ReadonlyRootfs",
                Box::new(|c| c.host_config.as_mut().unwrap().readonly_rootfs = Some(false)),
            ),
            (
                "HostConfig.MemorySwap",
                Box::new(|c| c.host_config.as_mut().unwrap().memory_swap = Some(-1)),
            ),
            (
                "HostConfig.PidsLimit",
                Box::new(|c| c.host_config.as_mut().unwrap().pids_limit = None),
            ),
            (
                "Config.Labels[yy.generation]",
                Box::new(|c| {
                    c.config
                        .as_mut()
                        .unwrap()
                        .labels
                        .as_mut()
                        .unwrap()
                        .insert("yy.generation".into(), "2".into());
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
            (
                "Image",
                Box::new(|c| c.image = Some(format!("sha256:{}", "cd".repeat(32)))),
            ),
            (
                "HostConfig.Privileged",
                Box::new(|c| c.host_config.as_mut().unwrap().privileged = Some(true)),
            ),
        ];
        for (field, mutate) in cases {
            let mut c = base.clone();
            mutate(&mut c);
            let d = drifts(&c, &spec, ws);
            assert!(
                d.iter().any(|d| d.field == field),
                "{field} not detected: {d:?}"
            );
        }
        let d = drifts(&base, &spec, Path::new("/elsewhere"));
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
        assert_eq!(drifts(&base, &spec, ws), vec![]);
        let h = base.host_config.as_ref().unwrap();
        assert_eq!(h.network_mode.as_deref(), Some("yy-egress-net-comp1"));
        assert_eq!(h.sysctls.as_ref().unwrap().len(), 2);
        type Mutation = Box<dyn Fn(&mut ContainerInspectResponse)>;
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
            (
                "HostConfig.Sysctls",
                Box::new(|c| c.host_config.as_mut().unwrap().sysctls = None),
            ),
            (
                "NetworkSettings.Networks",
                Box::new(|c| {
                    c.network_settings
                        .as_mut()
                        .unwrap()
                        .networks
                        .as_mut()
                        .unwrap()
                        .insert("bridge".into(), Default::default());
                }),
            ),
            (
                "HostConfig.NetworkMode",
                Box::new(|c| c.host_config.as_mut().unwrap().network_mode = Some("none".into())),
            ),
        ];
        for (field, mutate) in cases {
            let mut c = base.clone();
            mutate(&mut c);
            let d = drifts(&c, &spec, ws);
            assert!(
                d.iter().any(|d| d.field == field),
                "{field} not detected: {d:?}"
            );
        }
        // A none computer with sysctls drifted too.
        let (spec, mut c) = matching();
        c.host_config.as_mut().unwrap().sysctls = Some(HashMap::from([(
            "net.ipv4.ip_forward".to_string(),
            "1".to_string(),
        )]));
        assert!(
            drifts(&c, &spec, ws)
                .iter()
                .any(|d| d.field == "HostConfig.Sysctls")
        );
    }
}
