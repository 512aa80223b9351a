//! Unit tests of [`super`]: containers as each engine's inspect shows them.

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

/// The main process each engine's computers get in these tests (Podman keeps `sleep`).
fn main_of(view: &EngineView) -> MainProcess {
    match view {
        EngineView::Docker => MainProcess::GuestAgent,
        EngineView::Podman { .. } => MainProcess::Sleep,
    }
}

/// The loopback each engine's computers get in these tests: yy's own on Docker (as when
/// the Runner is root), the engine's `none` network on Podman.
fn loopback_of(engine: Engine) -> Loopback {
    match engine {
        Engine::Docker => Loopback::Own {
            hosts: super::super::loopback::HOSTS_FILE.into(),
        },
        Engine::Podman => Loopback::Engine,
    }
}

/// [`drifts`] with the main process and the loopback of `view`'s engine.
fn check(
    c: &ContainerInspectResponse,
    spec: &ComputerSpec,
    ws: &Path,
    view: &EngineView,
) -> Vec<Drift> {
    drifts(
        c,
        spec,
        ws,
        view,
        main_of(view),
        &loopback_of(view.engine()),
    )
}

fn matching_on(spec: ComputerSpec, engine: Engine) -> (ComputerSpec, ContainerInspectResponse) {
    let main = match engine {
        Engine::Docker => MainProcess::GuestAgent,
        Engine::Podman => MainProcess::Sleep,
    };
    matching_as(spec, engine, main)
}

fn matching_as(
    spec: ComputerSpec,
    engine: Engine,
    main: MainProcess,
) -> (ComputerSpec, ContainerInspectResponse) {
    let ws = Path::new("/var/tmp/yy/ws/x");
    let loopback = loopback_of(engine);
    let body = super::super::docker::create_body(&spec, ws, engine, main, &loopback);
    let mut mounts = vec![MountPoint {
        typ: Some("bind".into()),
        source: Some(ws.display().to_string()),
        destination: Some(spec.guest_cwd.clone()),
        rw: Some(true),
        ..Default::default()
    }];
    if spec.network == GuestNetwork::None
        && let Some((source, target)) = loopback.hosts_mount()
    {
        mounts.push(MountPoint {
            typ: Some("bind".into()),
            source: Some(source),
            destination: Some(target),
            rw: Some(false),
            ..Default::default()
        });
    }
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
            tty: Some(false),
            open_stdin: Some(body.open_stdin.unwrap_or(false)),
            stdin_once: Some(body.stdin_once.unwrap_or(false)),
            attach_stdin: Some(body.attach_stdin.unwrap_or(false)),
            attach_stdout: Some(body.attach_stdout.unwrap_or(false)),
            attach_stderr: Some(body.attach_stderr.unwrap_or(false)),
            labels: Some(labels),
            env: Some(
                [
                    vec!["PATH=/usr/bin".to_string()],
                    body.env.clone().unwrap_or_default(),
                ]
                .concat(),
            ),
            network_disabled: body.network_disabled,
            ..Default::default()
        }),
        host_config: body.host_config.clone(),
        mounts: Some(mounts),
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
        check(
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
        let d = check(&c, spec, Path::new("/var/tmp/yy/ws/x"), view);
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
        // The engine's sandbox instead of runc's own namespace.
        (
            "Config.NetworkDisabled",
            Box::new(|c| c.config.as_mut().unwrap().network_disabled = None),
        ),
        // The hosts file writable, in the request or as mounted.
        (
            "HostConfig.Mounts",
            Box::new(|c| host(c).mounts.as_mut().unwrap()[1].read_only = Some(false)),
        ),
        (
            "Mounts",
            Box::new(|c| c.mounts.as_mut().unwrap()[1].rw = Some(true)),
        ),
        // Another file over /etc/hosts.
        (
            "Mounts",
            Box::new(|c| c.mounts.as_mut().unwrap()[1].source = Some("/tmp/hosts".into())),
        ),
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
    let d = check(&base, &spec, Path::new("/elsewhere"), &EngineView::Docker);
    assert!(d.iter().any(|d| d.field == "Mounts"), "{d:?}");
    assert!(d[0].to_string().contains("expected"), "{}", d[0]);
}

/// The main process is checked exactly: its command, its stdin (open for one attach of
/// the guest agent's, none for `sleep`), and for the agent that no log keeps its output.
/// Each container passes as what it was made for, and not as the other.
#[test]
fn the_main_process_is_the_one_asked_for_with_its_stdio() {
    let ws = Path::new("/var/tmp/yy/ws/x");
    let spec = super::super::tests::spec();
    let (_, agent) = matching_as(spec.clone(), Engine::Docker, MainProcess::GuestAgent);
    let (_, sleep) = matching_as(spec.clone(), Engine::Docker, MainProcess::Sleep);
    let docker = &EngineView::Docker;
    let fields = |c: &ContainerInspectResponse, main| {
        drifts(c, &spec, ws, docker, main, &loopback_of(Engine::Docker))
            .into_iter()
            .map(|d| d.field)
            .collect::<Vec<_>>()
    };
    assert!(fields(&agent, MainProcess::GuestAgent).is_empty());
    assert!(fields(&sleep, MainProcess::Sleep).is_empty());
    assert_eq!(
        fields(&sleep, MainProcess::GuestAgent),
        [
            "Config.Cmd",
            "Config.OpenStdin",
            "Config.StdinOnce",
            "Config.AttachStdin",
            "Config.AttachStdout",
            "Config.AttachStderr",
            "HostConfig.LogConfig.Type"
        ]
    );
    assert_eq!(
        fields(&agent, MainProcess::Sleep),
        ["Config.Cmd", "Config.OpenStdin", "Config.StdinOnce"]
    );
    fn config(c: &mut ContainerInspectResponse) -> &mut ContainerConfig {
        c.config.as_mut().unwrap()
    }
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "Config.Cmd",
            Box::new(|c| {
                let cmd = config(c).cmd.as_mut().unwrap();
                cmd.retain(|a| a != "--main-process");
            }),
        ),
        (
            "Config.Cmd",
            Box::new(|c| {
                let cmd = config(c).cmd.as_mut().unwrap();
                cmd[4] = "/".into(); // --workspace /
            }),
        ),
        ("Config.Tty", Box::new(|c| config(c).tty = Some(true))),
        // A stdin that stays open for a second attach.
        (
            "Config.StdinOnce",
            Box::new(|c| config(c).stdin_once = Some(false)),
        ),
        (
            "Config.OpenStdin",
            Box::new(|c| config(c).open_stdin = None),
        ),
        (
            "Config.AttachStdout",
            Box::new(|c| config(c).attach_stdout = Some(false)),
        ),
        (
            "HostConfig.LogConfig.Type",
            Box::new(|c| host(c).log_config.as_mut().unwrap().typ = Some("json-file".into())),
        ),
        (
            "HostConfig.LogConfig.Type",
            Box::new(|c| host(c).log_config = None),
        ),
    ];
    assert_each_detected(&agent, &spec, docker, cases);
    // `sleep` with a stdin someone could attach to.
    let mut open = sleep.clone();
    config(&mut open).open_stdin = Some(true);
    assert_eq!(fields(&open, MainProcess::Sleep), ["Config.OpenStdin"]);
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
    assert_eq!(check(&base, &spec, ws, &EngineView::Docker), vec![]);
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
        check(&c, &spec, ws, &EngineView::Docker)
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
    assert_eq!(check(&c, &spec, ws, &podman_caps()), vec![]);
    for bad in [
        "/var/tmp/yy/ws/y:/workspace:rw,rprivate,nosuid,nodev,rbind",
        "/var/tmp/yy/ws/x:/workspace:rw,rshared,nosuid,rbind",
        "/var/tmp/yy/ws/x:/workspace:rw,rprivate,suid,rbind",
    ] {
        binds(&mut c, bad);
        let d = check(&c, &spec, ws, &podman_caps());
        assert!(d.iter().any(|d| d.field == "HostConfig.Binds"), "{bad}");
    }
}

#[test]
fn podman_shows_the_same_hardening_its_own_way() {
    let ws = Path::new("/var/tmp/yy/ws/x");
    let (spec, c) = as_podman_shows_it();
    assert_eq!(check(&c, &spec, ws, &podman_caps()), vec![]);
    // Before the start it shows the owner as asked: `U`.
    let mut created = c.clone();
    for o in host(&mut created).tmpfs.as_mut().unwrap().values_mut() {
        *o = o.replace("uid=1000,gid=1000", "U");
    }
    assert_ne!(created, c);
    assert_eq!(check(&created, &spec, ws, &podman_caps()), vec![]);
    // Read as Docker's, the same answer is refused (no `ALL` in CapDrop, Binds, ...).
    let d = check(&c, &spec, ws, &EngineView::Docker);
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
    let d = check(&c, &spec, ws, &kept);
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
