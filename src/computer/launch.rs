//! Launching a computer and opening its guest agent's sessions.
//!
//! A computer's main process (under tini, `HostConfig.Init`) is one of two
//! ([`MainProcess`]). On Docker, with an image whose guest agent says it can (the label
//! [`super::labels::GUEST_MAIN_PROCESS`], which `yy image build` sets), it is the guest agent
//! itself: `yy guest serve ... --main-process`, its stdin open for one attach. A launch
//! attaches before it starts the container and takes the first session from that attach,
//! so a cold start costs no exec (docs/benchmarks.md, "Where the cold start goes"). When
//! that session ends (its stdin closes: the Runner dropped it, restarted or died) the agent
//! stops what the session still ran, as for any session, and then stays, idle, so that the
//! container keeps running as it did with `sleep infinity`. Elsewhere (Podman, an image
//! without the label) the main process is `sleep infinity` and the first session is an
//! attached exec. Every later session (a re-attach, a warm computer's claim, `yy image
//! verify`) is an attached exec on both.

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::AttachContainerOptionsBuilder;
use futures_util::{Stream, StreamExt};

use super::docker::{Created, Provider};
use super::host_read::HostWorkspace;
use super::main_process::{MainProcess, serve_argv};
use super::session::{GuestSession, InputSink, Output};
use super::{
    ComputerError, ComputerSpec, GUEST_AGENT_START_USER, GUEST_AGENT_UID, GUEST_HOME, GUEST_UID,
};

/// An attached stream of the engine's as the session reads it.
fn output_of(
    output: impl Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send + 'static,
) -> super::session::OutputStream {
    Box::pin(output.filter_map(|item| async move {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                Some(Ok(Output::Stdout(message.to_vec())))
            }
            Ok(LogOutput::StdErr { message }) => Some(Ok(Output::Stderr(message.to_vec()))),
            Ok(LogOutput::StdIn { .. }) => None,
            Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
        }
    }))
}

/// A session over a guest agent's attached stdio, once its hello shows it runs apart from
/// its commands: itself as [`GUEST_AGENT_UID`], its commands as [`GUEST_UID`].
async fn session_of(
    output: super::session::OutputStream,
    input: InputSink,
) -> Result<GuestSession, ComputerError> {
    let session = match GuestSession::start(output, input, None).await {
        Err(ComputerError::Guest(why)) if why.contains("'--user'") => {
            return Err(ComputerError::Guest(format!(
                "the image's guest agent is older than this yy (it cannot run apart from its commands): rebuild the image with `yy image build`; {why}"
            )));
        }
        other => other?,
    };
    let hello = session.hello();
    if hello.agent_uid != Some(GUEST_AGENT_UID) || hello.uid != GUEST_UID {
        return Err(ComputerError::Guest(format!(
            "the guest agent runs as uid {:?} with commands as uid {}, not apart as uid {GUEST_AGENT_UID} with commands as uid {GUEST_UID}; refused",
            hello.agent_uid, hello.uid
        )));
    }
    Ok(session)
}

impl Provider {
    /// The main process a computer of `image` gets on this engine.
    pub async fn main_process_for(&self, image: &str) -> Result<MainProcess, ComputerError> {
        let inspected = self
            .docker()
            .inspect_image(image)
            .await
            .map_err(|e| self.image_error(image, e))?;
        let image_labels = inspected.config.and_then(|c| c.labels).unwrap_or_default();
        Ok(MainProcess::of_image(self.engine().engine, &image_labels))
    }

    /// Opens a guest session on a running computer, its workspace being the container's
    /// working directory (one inspect; use [`Provider::guest_at`] when it is known). The
    /// session knows the workspace's bind mount on the host, for bulk reads.
    pub async fn guest(&self, container: &str) -> Result<GuestSession, ComputerError> {
        let inspect = self.inspect(container).await?;
        let cwd = inspect
            .config
            .and_then(|c| c.working_dir)
            .filter(|w| w.starts_with('/'))
            .ok_or_else(|| {
                ComputerError::Invalid(format!("container {container} has no working directory"))
            })?;
        let bind =
            inspect.mounts.unwrap_or_default().into_iter().find(|m| {
                m.typ.as_deref() == Some("bind") && m.destination.as_deref() == Some(&cwd)
            });
        let session = self.guest_at(container, &cwd).await?;
        Ok(match bind.and_then(|m| m.source) {
            Some(source) => session.with_host_workspace(HostWorkspace {
                host_dir: source.into(),
                guest_cwd: cwd,
            }),
            None => session,
        })
    }

    /// Opens a guest session: `yy guest serve --workspace GUEST_CWD --user 1000:1000` by an
    /// attached exec that starts as root (with the container's few capabilities); the agent
    /// takes its own identity at once and runs every command as uid 1000 (see
    /// [`GUEST_AGENT_UID`]). Keep it open for the computer's life: a request is then one
    /// line each way.
    pub async fn guest_at(
        &self,
        container: &str,
        guest_cwd: &str,
    ) -> Result<GuestSession, ComputerError> {
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            user: Some(GUEST_AGENT_START_USER.into()),
            working_dir: Some(guest_cwd.into()),
            env: Some(vec!["YY_LOG=warn".into(), format!("HOME={GUEST_HOME}")]),
            cmd: Some(serve_argv(guest_cwd)),
            ..Default::default()
        };
        let exec = self.docker().create_exec(container, config).await?.id;
        let opts = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(1 << 20),
        };
        match self.docker().start_exec(&exec, Some(opts)).await? {
            StartExecResults::Attached { output, input } => {
                session_of(output_of(output), input).await
            }
            StartExecResults::Detached => Err(ComputerError::Guest(
                "docker started the exec detached".into(),
            )),
        }
    }

    /// Starts a created computer and opens its first guest session: from the main
    /// process's attach (attached before the start, so no output is missed) when the
    /// guest agent is the main process, else by [`Provider::guest_at`] after the start.
    pub async fn start_with_guest(
        &self,
        created: &Created,
        guest_cwd: &str,
    ) -> Result<GuestSession, ComputerError> {
        if created.main_process != MainProcess::GuestAgent {
            self.start(&created.id).await?;
            return self.guest_at(&created.id, guest_cwd).await;
        }
        let opts = AttachContainerOptionsBuilder::new()
            .stream(true)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .logs(false)
            .build();
        let attached = self
            .docker()
            .attach_container(&created.id, Some(opts))
            .await?;
        self.start(&created.id).await?;
        session_of(output_of(attached.output), attached.input).await
    }

    /// Create, start and open the guest session: a computer ready for tools.
    pub async fn launch(
        &self,
        spec: &ComputerSpec,
    ) -> Result<(Created, GuestSession), ComputerError> {
        self.launch_as(spec, false).await
    }

    /// [`Provider::launch`] of a warm computer: its workspace mount a slot (see
    /// [`Provider::create_as`]) that a claim fills later.
    pub async fn launch_warm(
        &self,
        spec: &ComputerSpec,
    ) -> Result<(Created, GuestSession), ComputerError> {
        self.launch_as(spec, true).await
    }

    async fn launch_as(
        &self,
        spec: &ComputerSpec,
        slot: bool,
    ) -> Result<(Created, GuestSession), ComputerError> {
        let created = self.create_as(spec, slot).await?;
        let ready = async {
            let session = self.start_with_guest(&created, &spec.guest_cwd).await?;
            Ok(session.with_host_workspace(HostWorkspace {
                host_dir: std::fs::canonicalize(&spec.workspace_host_dir)
                    .unwrap_or_else(|_| spec.workspace_host_dir.clone()),
                guest_cwd: spec.guest_cwd.clone(),
            }))
        }
        .await;
        match ready {
            Ok(session) => Ok((created, session)),
            Err(e) => {
                let _ = self.remove(&created.id).await;
                Err(e)
            }
        }
    }
}
