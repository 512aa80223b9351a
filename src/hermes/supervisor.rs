//! Supervised mode (runner.json `hermesCommand`): the Runner starts `hermes serve` itself,
//! on 127.0.0.1 and a free port, with a session token it generates and hands over only
//! through the child's environment, and stops it again.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rand::RngCore;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::access::{HermesAuth, Secret};
use super::rest::HermesRest;
use super::{HermesAccess, HermesError, PINNED_VERSION};

/// What `hermes serve` prints first, once it listens.
const READY_PREFIX: &str = "HERMES_BACKEND_READY port=";
/// Hermes's update-check cache, dated in 2100 so that it always counts as fresh: with it
/// Hermes never asks PyPI for a newer version (the version is pinned anyway).
const UPDATE_CHECK: &str = r#"{"ts": 4102444800, "behind": 0, "rev": null, "ver": "VERSION"}"#;

/// Settings of a supervised Hermes beyond its command and home.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// More environment for Hermes (tests use this). The variables the supervisor sets
    /// itself (HERMES_HOME, the token, HERMES_DISABLE_LAZY_INSTALLS) always win.
    pub env: Vec<(String, String)>,
    /// Hermes's working directory; default: its home.
    pub cwd: Option<PathBuf>,
    /// Write `HERMES_HOME/.update_check` so Hermes makes no update check (default true).
    pub seed_update_check: bool,
    /// How long Hermes may take to print its ready line and answer `/api/status`.
    pub ready_timeout: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            env: Vec::new(),
            cwd: None,
            seed_update_check: true,
            ready_timeout: Duration::from_secs(60),
        }
    }
}

/// A `hermes serve` started by the Runner. Dropping it stops Hermes (SIGTERM to its
/// process group, SIGKILL after 3 s); [`Supervisor::stop`] does the same without blocking.
#[derive(Debug)]
pub struct Supervisor {
    child: Child,
    pid: u32,
    port: u16,
    stderr_log: PathBuf,
    reaped: bool,
}

fn fail(message: impl Into<String>) -> HermesError {
    HermesError::Supervisor(message.into())
}

fn signal_group(pid: u32, sig: i32) {
    // Hermes leads its own process group (it and the shells its tools start). Gone
    // already is fine.
    let _ = crate::sys::kill(-(pid as i32), sig);
}

fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| "no output on stderr".into())
}

impl Supervisor {
    /// Starts `HERMES_COMMAND --host 127.0.0.1 --port 0` (e.g. `["/opt/yy/hermes-venv/bin/hermes",
    /// "serve"]`) with `HERMES_HOME=hermes_home`; returns the access for it once it answers.
    pub async fn start(
        hermes_command: Vec<String>,
        hermes_home: PathBuf,
    ) -> Result<(HermesAccess, Supervisor), HermesError> {
        Self::start_with(hermes_command, hermes_home, SupervisorOptions::default()).await
    }

    pub async fn start_with(
        hermes_command: Vec<String>,
        hermes_home: PathBuf,
        options: SupervisorOptions,
    ) -> Result<(HermesAccess, Supervisor), HermesError> {
        let Some((program, args)) = hermes_command.split_first() else {
            return Err(fail("hermesCommand is empty"));
        };
        if args
            .iter()
            .any(|a| a.starts_with("--host") || a.starts_with("--port"))
        {
            return Err(fail(
                "hermesCommand must not set --host or --port: the Runner binds Hermes to 127.0.0.1 on a free port",
            ));
        }
        if !hermes_home.is_absolute() {
            return Err(fail(format!(
                "the Hermes home {} is not an absolute path",
                hermes_home.display()
            )));
        }
        let logs = hermes_home.join("logs");
        crate::fsutil::create_private_dir(&hermes_home)
            .and_then(|_| std::fs::create_dir_all(&logs))
            .map_err(|e| fail(format!("cannot create {}: {e}", hermes_home.display())))?;
        if options.seed_update_check {
            let text = UPDATE_CHECK.replace("VERSION", PINNED_VERSION);
            std::fs::write(hermes_home.join(".update_check"), text)
                .map_err(|e| fail(format!("cannot write .update_check: {e}")))?;
        }
        let stderr_log = logs.join("yy-serve.stderr");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_log)
            .map_err(|e| fail(format!("cannot open {}: {e}", stderr_log.display())))?;

        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let token = Secret::new(hex::encode(bytes));

        let mut cmd = Command::new(program);
        cmd.args(args)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .env("HERMES_HOME", &hermes_home)
            .env("HERMES_DASHBOARD_SESSION_TOKEN", token.expose())
            .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
            .current_dir(options.cwd.as_deref().unwrap_or(&hermes_home))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(true);
        // Hermes must not outlive a Runner that is killed outright (SIGKILL skips Drop).
        crate::sys::die_with_parent(cmd.as_std_mut(), libc::SIGTERM);
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot run {program}: {e}")))?;
        let pid = child.id().unwrap_or(0);
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut sup = Supervisor {
            child,
            pid,
            port: 0,
            stderr_log,
            reaped: false,
        };

        let mut lines = BufReader::new(stdout).lines();
        let ready = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(port) = line.trim().strip_prefix(READY_PREFIX) {
                    return port.trim().parse::<u16>().ok();
                }
                tracing::debug!(line = %line, "hermes serve");
            }
            None
        };
        let deadline = tokio::time::Instant::now() + options.ready_timeout;
        let port = match tokio::time::timeout_at(deadline, ready).await {
            Ok(Some(port)) => port,
            Ok(None) => {
                let status = sup.child.wait().await.ok();
                sup.reaped = true;
                return Err(fail(format!(
                    "{program} exited ({}) before it was ready: {}",
                    status.map(|s| s.to_string()).unwrap_or_default(),
                    last_line(&sup.stderr_log)
                )));
            }
            Err(_) => {
                return Err(fail(format!(
                    "{program} printed no ready line within {:?}: {}",
                    options.ready_timeout,
                    last_line(&sup.stderr_log)
                )));
            }
        };
        sup.port = port;
        // Keep reading stdout so that Hermes never blocks on a full pipe.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(line = %line, "hermes serve");
            }
        });

        let access = HermesAccess::new(
            &format!("http://127.0.0.1:{port}"),
            HermesAuth::Token(token),
            false,
        )?;
        let rest = HermesRest::new(&access)?;
        loop {
            match rest.status().await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(fail(format!("Hermes never answered /api/status: {e}")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        tracing::info!(pid, port, "started Hermes");
        Ok((access, sup))
    }

    /// Hermes's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where Hermes's stderr goes (`HERMES_HOME/logs/yy-serve.stderr`).
    pub fn stderr_log(&self) -> &Path {
        &self.stderr_log
    }

    /// `Some` once Hermes has exited.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().ok().flatten();
        self.reaped |= status.is_some();
        status
    }

    /// Stops Hermes: SIGTERM to its process group, SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        signal_group(self.pid, libc::SIGTERM);
        let status = match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                signal_group(self.pid, libc::SIGKILL);
                self.child.wait().await.ok()
            }
        };
        self.reaped = true;
        status
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.reaped || self.try_exited().is_some() {
            return;
        }
        signal_group(self.pid, libc::SIGTERM);
        for _ in 0..60 {
            if self.try_exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_group(self.pid, libc::SIGKILL);
        let _ = self.child.start_kill();
        for _ in 0..40 {
            if self.try_exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
