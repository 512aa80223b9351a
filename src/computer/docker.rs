//! The Docker provider (bollard): create a hardened container for a [`ComputerSpec`],
//! verify it, start, stop, remove and list a Runner's containers. Launching one and its
//! guest sessions are in [`super::launch`].

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::exec::StartExecResults;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ExecConfig, HostConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, RenameContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::engine::{self, Engine, EngineInfo};
use super::loopback::Loopback;
use super::main_process::MainProcess;
use super::verify::{self, Drift, EngineView};
use super::{
    ComputerError, ComputerSpec, GUEST_AGENT_CAPS, GUEST_UID, GUEST_USER, GuestNetwork, labels,
    without_capabilities,
};

/// A computer container as listed for reconcile.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ManagedContainer {
    pub id: String,
    pub name: String,
    /// Docker's state: `created`, `running`, `exited`, ...
    pub state: String,
    pub image: String,
    pub labels: HashMap<String, String>,
}

/// The outcome of [`Provider::exec_raw`].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RawExec {
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Created {
    pub id: String,
    pub name: String,
    /// What it runs as its main process (so how its first guest session opens).
    pub main_process: MainProcess,
}

#[derive(Clone)]
pub struct Provider {
    docker: Docker,
    engine: EngineInfo,
    /// How its computers without a network get their loopback.
    loopback: Loopback,
}

impl Provider {
    /// Connects to the local engine (`DOCKER_HOST`, else the first default socket that
    /// answers) and negotiates the API version down to what it speaks.
    pub async fn connect() -> Result<Provider, ComputerError> {
        Self::connect_to(None).await
    }

    /// Connects to the engine `choice` names (see [`engine`] for which socket), or as
    /// [`Provider::connect`] does when it is `None`.
    pub async fn connect_to(choice: Option<Engine>) -> Result<Provider, ComputerError> {
        let host = std::env::var("DOCKER_HOST").ok();
        let tried = engine::candidates(choice, host.as_deref())?;
        let mut last = None;
        for c in &tried {
            if !engine::socket_answers(&c.socket) {
                continue;
            }
            match Self::open(c).await {
                Ok(p) => return Ok(p),
                Err(e) if c.want.is_some() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| engine::not_answering(&tried, choice)))
    }

    async fn open(c: &engine::Candidate) -> Result<Provider, ComputerError> {
        let install = c.want.map_or(
            "scripts/install-docker.sh or scripts/install-podman.sh",
            |e| e.install_script(),
        );
        let docker = Docker::connect_with_unix(&c.socket, 600, bollard::API_DEFAULT_VERSION)
            .map_err(|e| {
                ComputerError::Docker(format!("cannot connect to the engine on {}: {e}", c.socket))
            })?;
        let docker = docker.negotiate_version().await.map_err(|e| {
            ComputerError::Docker(format!(
                "the engine does not answer on {} ({e}); start it with {install}",
                c.socket
            ))
        })?;
        let v = docker.version().await.map_err(|e| {
            ComputerError::Docker(format!(
                "the engine on {} does not say its version: {e}",
                c.socket
            ))
        })?;
        let (found, version) = engine::identify(&v);
        if let Some(want) = c.want
            && want != found
        {
            return Err(ComputerError::Invalid(format!(
                "the engine on {} (from {}) is {} {version}, not {}; point DOCKER_HOST at {}'s socket or leave it unset",
                c.socket,
                c.from,
                found.title(),
                want.title(),
                want.title()
            )));
        }
        let info = EngineInfo {
            engine: found,
            version,
            api_version: docker.client_version().to_string(),
            socket: c.socket.clone(),
        };
        let loopback = match found {
            Engine::Docker => Loopback::for_docker(),
            Engine::Podman => Loopback::Engine,
        };
        Ok(Provider {
            docker,
            engine: info,
            loopback,
        })
    }

    /// Refuses an engine that would run weaker computers than yy asks for, naming the
    /// missing property: no seccomp, or a rootless engine (whose uid 1000 is not the
    /// host's, so the workspace would not be the computer's).
    pub async fn check_engine(&self) -> Result<(), ComputerError> {
        let info = self.docker.info().await?;
        let options = info.security_options.unwrap_or_default();
        let name = self.engine.engine.title();
        if !options.iter().any(|o| o.starts_with("name=seccomp")) {
            return Err(ComputerError::Invalid(format!(
                "{name} on {} runs containers without seccomp (its SecurityOptions are {options:?}); yy refuses to start computers there",
                self.engine.socket
            )));
        }
        if options.iter().any(|o| o.starts_with("name=rootless")) {
            return Err(ComputerError::Invalid(format!(
                "{name} on {} is rootless: its uid 1000 is not the host's, so workspaces would not belong to the computer; run the rootful service ({})",
                self.engine.socket,
                self.engine.engine.install_script()
            )));
        }
        Ok(())
    }

    /// The engine this provider drives, as it said itself.
    pub fn engine(&self) -> &EngineInfo {
        &self.engine
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Whether `image` was built from the desktop recipe (its `yy.recipe.name` label);
    /// `None` when it cannot be inspected.
    pub async fn is_desktop_image(&self, image: &str) -> Option<bool> {
        let inspected = self.docker.inspect_image(image).await.ok()?;
        Some(
            inspected
                .config
                .and_then(|c| c.labels)
                .and_then(|l| l.get(labels::RECIPE_NAME).cloned())
                .is_some_and(|n| n == "desktop"),
        )
    }

    /// An engine's answer about `image` as yy tells it: a missing image names the engine
    /// it is missing from and how to build it there.
    pub fn image_error(&self, image: &str, e: bollard::errors::Error) -> ComputerError {
        match ComputerError::from(e) {
            ComputerError::NotFound(_) => ComputerError::NotFound(format!(
                "image {image} is not on this {} engine; build it with `yy image build --engine {}`",
                self.engine.engine.title(),
                self.engine.engine
            )),
            other => other,
        }
    }

    /// Creates (not starts) the computer, then inspects it and removes it again if it
    /// differs from the request in any checked way.
    pub async fn create(&self, spec: &ComputerSpec) -> Result<Created, ComputerError> {
        self.create_as(spec, false).await
    }

    /// [`Provider::create`]; with `slot`, the workspace mount is a slave of the host
    /// directory's (`rslave`): a workspace mounted there later appears in the container (a
    /// warm computer's, claimed by an agent). The directory must be a shared mount point.
    pub(super) async fn create_as(
        &self,
        spec: &ComputerSpec,
        slot: bool,
    ) -> Result<Created, ComputerError> {
        spec.validate()?;
        let workspace = prepare_workspace(&spec.workspace_host_dir)?;
        let main_process = self.main_process_for(&spec.image_id).await?;
        let name = spec.name();
        self.loopback.ensure().map_err(|e| {
            ComputerError::Io(format!(
                "cannot write the computers' hosts file {}: {e}",
                super::loopback::HOSTS_FILE
            ))
        })?;
        let mut body = create_body(
            spec,
            &workspace,
            self.engine.engine,
            main_process,
            &self.loopback,
        );
        if slot
            && let Some(m) = body
                .host_config
                .as_mut()
                .and_then(|h| h.mounts.as_mut())
                .and_then(|m| m.first_mut())
        {
            m.bind_options = Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RSLAVE),
                ..Default::default()
            });
        }
        let opts = CreateContainerOptionsBuilder::new().name(&name).build();
        let id = match self.docker.create_container(Some(opts), body).await {
            Ok(r) => r.id,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {
                let existing = self
                    .inspect(&name)
                    .await
                    .ok()
                    .and_then(|c| c.id)
                    .unwrap_or_default();
                return Err(ComputerError::NameInUse { name, existing });
            }
            Err(e) => return Err(e.into()),
        };
        let drifts = match self.verify_as(&id, spec, main_process).await {
            Ok(d) => d,
            Err(e) => {
                let _ = self.remove(&id).await;
                return Err(e);
            }
        };
        if !drifts.is_empty() {
            let _ = self.remove(&id).await;
            return Err(ComputerError::Drifted {
                container: id,
                action: "removed",
                drifts,
            });
        }
        Ok(Created {
            id,
            name,
            main_process,
        })
    }

    pub async fn inspect(
        &self,
        container: &str,
    ) -> Result<ContainerInspectResponse, ComputerError> {
        Ok(self
            .docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await?)
    }

    /// Every way the container differs from `spec` (empty: it matches), its main process
    /// being the one a computer of its image gets ([`Provider::main_process_for`]).
    pub async fn verify(
        &self,
        container: &str,
        spec: &ComputerSpec,
    ) -> Result<Vec<Drift>, ComputerError> {
        let main_process = self.main_process_for(&spec.image_id).await?;
        self.verify_as(container, spec, main_process).await
    }

    async fn verify_as(
        &self,
        container: &str,
        spec: &ComputerSpec,
        main_process: MainProcess,
    ) -> Result<Vec<Drift>, ComputerError> {
        let inspect = self.inspect(container).await?;
        let workspace = std::fs::canonicalize(&spec.workspace_host_dir)
            .unwrap_or_else(|_| spec.workspace_host_dir.clone());
        let view = self
            .engine_view(inspect.id.as_deref().unwrap_or(container))
            .await?;
        Ok(verify::drifts(
            &inspect,
            spec,
            &workspace,
            &view,
            main_process,
            &self.loopback,
        ))
    }

    /// What the engine shows of the container beyond Docker's inspect: on Podman, its
    /// capability sets from its own (libpod) inspect.
    pub async fn engine_view(&self, container: &str) -> Result<EngineView, ComputerError> {
        if self.engine.engine == Engine::Docker {
            return Ok(EngineView::Docker);
        }
        if !container
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(ComputerError::Invalid(format!(
                "not a container name or ID: {container:?}"
            )));
        }
        let v = engine::get_json(
            &self.engine.socket,
            &format!("/v4.0.0/libpod/containers/{container}/json"),
        )
        .await?;
        // Podman writes an empty set as null.
        let caps = |key: &str| -> Vec<String> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| c.as_str().unwrap_or("?").to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        if v.get("BoundingCaps").is_none() || v.get("EffectiveCaps").is_none() {
            return Err(ComputerError::Docker(format!(
                "Podman's inspect of {container} does not say its capabilities (BoundingCaps, EffectiveCaps); this Podman cannot be checked"
            )));
        }
        Ok(EngineView::Podman {
            bounding_caps: caps("BoundingCaps"),
            effective_caps: caps("EffectiveCaps"),
        })
    }

    pub async fn start(&self, container: &str) -> Result<(), ComputerError> {
        match self.docker.start_container(container, None).await {
            Ok(()) => Ok(()),
            // 304: already running.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops with SIGTERM, then SIGKILL after `timeout`. Stopping a stopped one is fine.
    pub async fn stop(&self, container: &str, timeout: Duration) -> Result<(), ComputerError> {
        let opts = StopContainerOptionsBuilder::new()
            .t(timeout.as_secs().min(3600) as i32)
            .build();
        match self.docker.stop_container(container, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the container (killing it if it runs). The workspace stays on the host.
    pub async fn remove(&self, container: &str) -> Result<(), ComputerError> {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(container, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// All containers (any state) labelled as yy's and as this Runner's.
    pub async fn list_for_runner(
        &self,
        runner_id: &str,
    ) -> Result<Vec<ManagedContainer>, ComputerError> {
        let filters: HashMap<&str, Vec<String>> = HashMap::from([(
            "label",
            vec![
                format!("{}=1", labels::MANAGED),
                format!("{}={runner_id}", labels::RUNNER),
            ],
        )]);
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let list = self.docker.list_containers(Some(opts)).await?;
        Ok(list
            .into_iter()
            .map(|c| ManagedContainer {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                image: c.image_id.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
            })
            .collect())
    }

    /// Runs one command as uid 1000 with no capability by a plain exec (no guest agent)
    /// and collects it. For diagnostics and checks; tools go through [`Provider::guest`].
    pub async fn exec_raw(&self, container: &str, argv: &[&str]) -> Result<RawExec, ComputerError> {
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: Some(GUEST_USER.into()),
            cmd: Some(without_capabilities(argv)),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, config).await?.id;
        let mut out = RawExec::default();
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec, None).await?
        {
            while let Some(item) = output.next().await {
                match item? {
                    bollard::container::LogOutput::StdErr { message } => {
                        out.stderr.push_str(&String::from_utf8_lossy(&message))
                    }
                    other => out
                        .stdout
                        .push_str(&String::from_utf8_lossy(&other.into_bytes())),
                }
            }
        }
        out.exit_code = self.docker.inspect_exec(&exec).await?.exit_code;
        Ok(out)
    }

    /// Renames a container (a claimed warm computer takes its computer's name).
    pub async fn rename(&self, container: &str, name: &str) -> Result<(), ComputerError> {
        let opts = RenameContainerOptionsBuilder::new().name(name).build();
        Ok(self.docker.rename_container(container, opts).await?)
    }
}

/// Every computer's `nofile` and `nproc` limits (see [`engine::NOFILE`]).
pub fn ulimits() -> Vec<ResourcesUlimits> {
    [("nofile", engine::NOFILE), ("nproc", engine::NPROC)]
        .into_iter()
        .map(|(name, n)| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(n),
            hard: Some(n),
        })
        .collect()
}

/// Podman's tmpfs over `/run` and `/var/tmp` (what it mounts writable in every read-only
/// container) replaced by tiny read-only ones, so the writable places are Docker's.
const PODMAN_READ_ONLY_TMPFS: &str = "ro,nosuid,nodev,noexec,size=64k";

/// The tmpfs mounts of `spec` on `engine`, as the engine echoes them in its inspect
/// (without the options Podman adds to each, see [`verify`]).
pub fn tmpfs_for(
    spec: &ComputerSpec,
    engine: Engine,
) -> std::collections::BTreeMap<String, String> {
    let mut tmpfs = spec.tmpfs();
    if engine == Engine::Podman {
        for path in ["/run", "/var/tmp"] {
            tmpfs.insert(path.into(), PODMAN_READ_ONLY_TMPFS.into());
        }
    }
    tmpfs
}

/// The tmpfs mounts to ask `engine` for. Podman 4.3 refuses `uid=`/`gid=` ("unknown mount
/// option"); its `U` gives the tmpfs to the container's user (1000:1000) and it then
/// reports `uid=1000,gid=1000` as Docker does. `notmpcopyup` keeps the image's files out
/// (Docker's tmpfs starts empty too).
fn tmpfs_request(spec: &ComputerSpec, engine: Engine) -> HashMap<String, String> {
    let owner = format!("uid={GUEST_UID},gid={GUEST_UID}");
    tmpfs_for(spec, engine)
        .into_iter()
        .map(|(path, o)| match engine {
            Engine::Podman if o.contains(&owner) => {
                let o = o.replace(&owner, "U");
                (path, format!("{o},notmpcopyup"))
            }
            _ => (path, o),
        })
        .collect()
}

/// The create request for `spec` on `engine`, with the workspace at its real host path,
/// `main` as its main process and, without a network, `loopback`.
pub fn create_body(
    spec: &ComputerSpec,
    workspace: &Path,
    engine: Engine,
    main: MainProcess,
    loopback: &Loopback,
) -> ContainerCreateBody {
    let limits = &spec.limits;
    let host = HostConfig {
        network_mode: Some(spec.network_mode().into()),
        sysctls: Some(spec.sysctls().into_iter().collect())
            .filter(|s: &HashMap<_, _>| !s.is_empty()),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: Some(GUEST_AGENT_CAPS.iter().map(|c| c.to_string()).collect()),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        privileged: Some(false),
        tmpfs: Some(tmpfs_request(spec, engine)),
        ulimits: Some(ulimits()),
        memory: Some(limits.memory_bytes),
        memory_swap: Some(limits.memory_bytes),
        nano_cpus: Some(limits.nano_cpus),
        pids_limit: Some(limits.pids),
        init: Some(true),
        mounts: Some(vec![Mount {
            typ: Some(MountType::BIND),
            source: Some(workspace.display().to_string()),
            target: Some(spec.guest_cwd.clone()),
            read_only: Some(false),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let mut body = ContainerCreateBody {
        image: Some(spec.image_id.clone()),
        user: Some(engine.container_user().into()),
        working_dir: Some(spec.guest_cwd.clone()),
        labels: Some(spec.labels().into_iter().collect()),
        env: Some(spec.env()).filter(|e| !e.is_empty()),
        host_config: Some(host),
        ..Default::default()
    };
    main.set_up(&mut body, &spec.guest_cwd);
    if spec.network == GuestNetwork::None {
        loopback.apply(&mut body);
    }
    body
}

/// Host paths a workspace may never be, nor contain.
fn forbidden_workspace(real: &Path) -> Option<String> {
    let mut guarded: Vec<PathBuf> = vec![
        "/".into(),
        "/run".into(),
        "/var/run".into(),
        "/var/run/docker.sock".into(),
        "/var/lib/docker".into(),
        "/etc".into(),
    ];
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        guarded.push(home.join(".hermes"));
        guarded.push(home);
    }
    for g in guarded {
        let g = std::fs::canonicalize(&g).unwrap_or(g);
        if g.starts_with(real) {
            return Some(format!("it contains {}", g.display()));
        }
    }
    for sys in ["/proc", "/sys", "/dev"] {
        if real.starts_with(sys) {
            return Some(format!("it lies in {sys}"));
        }
    }
    None
}

/// Creates the workspace directory if needed, owned by uid 1000 with mode 0700, and returns
/// its real path. Refuses directories that would expose the host (/, HOME, the socket).
pub fn prepare_workspace(dir: &Path) -> Result<PathBuf, ComputerError> {
    let shown = dir.display();
    std::fs::create_dir_all(dir)
        .map_err(|e| ComputerError::Io(format!("cannot create workspace {shown}: {e}")))?;
    let real = std::fs::canonicalize(dir)
        .map_err(|e| ComputerError::Io(format!("workspace {shown}: {e}")))?;
    if let Some(why) = forbidden_workspace(&real) {
        return Err(ComputerError::Invalid(format!(
            "workspace {} cannot be mounted into a computer: {why}",
            real.display()
        )));
    }
    let meta = std::fs::metadata(&real)
        .map_err(|e| ComputerError::Io(format!("workspace {shown}: {e}")))?;
    if !meta.is_dir() {
        return Err(ComputerError::Invalid(format!(
            "workspace {shown} is not a directory"
        )));
    }
    if meta.uid() != GUEST_UID || meta.gid() != GUEST_UID {
        std::os::unix::fs::chown(&real, Some(GUEST_UID), Some(GUEST_UID)).map_err(|e| {
            ComputerError::Io(format!(
                "cannot give workspace {shown} to uid {GUEST_UID} ({e}); run the Runner as root or as uid {GUEST_UID}"
            ))
        })?;
    }
    if meta.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            ComputerError::Io(format!("cannot make workspace {shown} private: {e}"))
        })?;
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_that_expose_the_host_are_refused() {
        assert!(forbidden_workspace(Path::new("/")).is_some());
        assert!(forbidden_workspace(Path::new("/var")).is_some());
        assert!(forbidden_workspace(Path::new("/proc/1")).is_some());
        if let Some(home) = std::env::var_os("HOME") {
            let home = std::fs::canonicalize(home).unwrap();
            assert!(forbidden_workspace(&home).is_some());
            if let Some(parent) = home.parent() {
                assert!(forbidden_workspace(parent).is_some());
            }
        }
        assert!(forbidden_workspace(Path::new("/var/tmp/yy/ws/abc")).is_none());
    }

    #[test]
    fn the_create_request_carries_the_hardening() {
        let spec = super::super::tests::spec();
        let own = Loopback::Own {
            hosts: super::super::loopback::HOSTS_FILE.into(),
        };
        let body = create_body(
            &spec,
            Path::new("/var/tmp/yy/ws/x"),
            Engine::Docker,
            MainProcess::GuestAgent,
            &own,
        );
        assert_eq!(body.network_disabled, Some(true));
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.memory, host.memory_swap);
        let mounts = host.mounts.as_ref().unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].target.as_deref(), Some("/etc/hosts"));
        assert_eq!(mounts[1].read_only, Some(true));
        assert_eq!(host.binds, None);
        assert_eq!(body.user.as_deref(), Some("0:0"));
        assert_eq!(
            host.cap_add,
            Some(vec!["SETUID".into(), "SETGID".into(), "SETPCAP".into()])
        );
        assert_eq!(body.labels.unwrap().len(), 7);
        let limits = host.ulimits.unwrap();
        assert_eq!(limits.len(), 2);
        assert!(
            limits
                .iter()
                .all(|u| u.soft == u.hard && u.hard > Some(1024))
        );
    }

    #[test]
    fn podman_is_asked_for_the_same_computer_in_its_words() {
        let spec = super::super::tests::spec();
        let ws = Path::new("/var/tmp/yy/ws/x");
        let (docker, podman) = (
            create_body(
                &spec,
                ws,
                Engine::Docker,
                MainProcess::Sleep,
                &Loopback::Engine,
            ),
            create_body(
                &spec,
                ws,
                Engine::Podman,
                MainProcess::Sleep,
                &Loopback::Engine,
            ),
        );
        // The container's user follows each engine's rule for an exec's capabilities.
        assert_eq!(docker.user.as_deref(), Some("0:0"));
        assert_eq!(podman.user.as_deref(), Some("1000:1000"));
        let (docker, podman) = (docker.host_config.unwrap(), podman.host_config.unwrap());
        let tmpfs = podman.tmpfs.clone().unwrap();
        let home = &tmpfs["/home/yy"];
        assert!(home.ends_with(",U,mode=0700,notmpcopyup"), "{home}");
        assert!(!home.contains("uid="), "{home}");
        assert_eq!(tmpfs["/tmp"], docker.tmpfs.as_ref().unwrap()["/tmp"]);
        for path in ["/run", "/var/tmp"] {
            assert!(tmpfs[path].starts_with("ro,"), "{tmpfs:?}");
        }
        // Everything else is asked for alike.
        let strip = |mut h: HostConfig| {
            h.tmpfs = None;
            h
        };
        assert_eq!(strip(docker), strip(podman));
    }
}
