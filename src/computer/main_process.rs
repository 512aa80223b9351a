//! What a computer's container runs as its main process (under tini, `HostConfig.Init`):
//! the guest agent itself where the image says it can, `sleep infinity` elsewhere
//! ([`super::launch`] starts it and opens its sessions).

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfigLogConfig};

use super::engine::Engine;
use super::{GUEST_BINARY, GUEST_USER, labels};

/// The main process of a computer that is not its guest agent; `Init` (tini) is PID 1
/// above it and reaps orphans.
pub const SLEEP_CMD: [&str; 2] = ["sleep", "infinity"];

/// The guest agent's flag for running as the container's main process.
pub const MAIN_PROCESS_FLAG: &str = "--main-process";

/// What a computer's container runs as its main process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MainProcess {
    /// `sleep infinity`; every guest session is an attached exec.
    Sleep,
    /// The guest agent, attached at the start for the first session; later sessions are
    /// attached execs.
    GuestAgent,
}

impl MainProcess {
    /// The main process for `image_labels` on `engine`: the guest agent on Docker when the
    /// image says its agent can be one (an image of an older `yy image build`, or of
    /// `scripts/build-image.sh`, has no such label); `sleep infinity` otherwise. Podman keeps
    /// the exec path: its attach and stdin settings were not checked (docs/computer-notes.md).
    pub fn of_image(engine: Engine, image_labels: &HashMap<String, String>) -> MainProcess {
        let can = image_labels
            .get(labels::GUEST_MAIN_PROCESS)
            .is_some_and(|v| v == "1");
        match engine {
            Engine::Docker if can => MainProcess::GuestAgent,
            _ => MainProcess::Sleep,
        }
    }

    /// The container's `Cmd` for a workspace at `guest_cwd`.
    pub fn cmd(self, guest_cwd: &str) -> Vec<String> {
        match self {
            MainProcess::Sleep => SLEEP_CMD.iter().map(|s| s.to_string()).collect(),
            MainProcess::GuestAgent => {
                let mut argv = serve_argv(guest_cwd);
                argv.push(MAIN_PROCESS_FLAG.into());
                argv
            }
        }
    }

    /// Whether the main process has a stdin (open until the first attach detaches) and
    /// its stdio attached, with no TTY.
    pub fn attached(self) -> bool {
        self == MainProcess::GuestAgent
    }

    /// The container's logging driver, when it must be one: the guest agent's output is
    /// the session itself (file contents, command output), which no log may keep.
    pub fn log_driver(self) -> Option<&'static str> {
        match self {
            MainProcess::Sleep => None,
            MainProcess::GuestAgent => Some("none"),
        }
    }

    /// Sets `body`'s command, stdio and logging for this main process.
    pub fn set_up(self, body: &mut ContainerCreateBody, guest_cwd: &str) {
        body.cmd = Some(self.cmd(guest_cwd));
        if self.attached() {
            body.open_stdin = Some(true);
            body.stdin_once = Some(true);
            body.attach_stdin = Some(true);
            body.attach_stdout = Some(true);
            body.attach_stderr = Some(true);
            body.tty = Some(false);
        }
        if let (Some(driver), Some(host)) = (self.log_driver(), body.host_config.as_mut()) {
            host.log_config = Some(HostConfigLogConfig {
                typ: Some(driver.into()),
                config: None,
            });
        }
    }
}

/// `yy guest serve` for a workspace at `guest_cwd`, running commands as the guest user.
pub(super) fn serve_argv(guest_cwd: &str) -> Vec<String> {
    [
        GUEST_BINARY,
        "guest",
        "serve",
        "--workspace",
        guest_cwd,
        "--user",
        GUEST_USER,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(value: Option<&str>) -> HashMap<String, String> {
        let mut l = HashMap::from([(labels::VERSION.to_string(), crate::VERSION.to_string())]);
        if let Some(v) = value {
            l.insert(labels::GUEST_MAIN_PROCESS.into(), v.into());
        }
        l
    }

    #[test]
    fn only_an_image_that_says_so_gets_its_guest_agent_as_main_process_and_only_on_docker() {
        let yes = labelled(Some("1"));
        assert_eq!(
            MainProcess::of_image(Engine::Docker, &yes),
            MainProcess::GuestAgent
        );
        // Podman keeps the exec path.
        assert_eq!(
            MainProcess::of_image(Engine::Podman, &yes),
            MainProcess::Sleep
        );
        // An image of an older yy (same yy.version: the label, not the version, decides),
        // or a label that says anything else.
        for other in [labelled(None), labelled(Some("")), labelled(Some("0"))] {
            assert_eq!(
                MainProcess::of_image(Engine::Docker, &other),
                MainProcess::Sleep
            );
        }
    }

    #[test]
    fn each_main_process_asks_for_its_command_stdio_and_logging() {
        let spec = super::super::tests::spec();
        let ws = std::path::Path::new("/var/tmp/yy/ws/x");
        let loopback = super::super::loopback::Loopback::Engine;
        let body =
            |main| super::super::docker::create_body(&spec, ws, Engine::Docker, main, &loopback);
        let sleep = body(MainProcess::Sleep);
        assert_eq!(sleep.cmd, Some(vec!["sleep".into(), "infinity".into()]));
        assert_eq!((sleep.open_stdin, sleep.stdin_once), (None, None));
        assert_eq!(sleep.host_config.unwrap().log_config, None);

        let agent = body(MainProcess::GuestAgent);
        assert_eq!(
            agent.cmd.unwrap().join(" "),
            "/usr/local/bin/yy guest serve --workspace /workspace --user 1000:1000 --main-process"
        );
        for flag in [
            agent.open_stdin,
            agent.stdin_once,
            agent.attach_stdin,
            agent.attach_stdout,
            agent.attach_stderr,
        ] {
            assert_eq!(flag, Some(true));
        }
        assert_eq!(agent.tty, Some(false));
        let log = agent.host_config.unwrap().log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("none"));
        // No variable is added for it: the agent's commands inherit its environment.
        assert_eq!(agent.env, None);
    }
}
