//! Worker processes: the Hermes Python running the entry that ships in this binary
//! (`worker_entry.py`), one per agent, kept warm between turns for a while.
//!
//! A Worker gets an empty environment but for a private `HERMES_HOME`; the model's settings
//! and key arrive on its stdin, and it dies with the Runner (parent-death signal), so a
//! Runner killed mid-turn never leaves a model loop running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::worker_pipe::{FromWorker, ToWorker};

/// The Python entry, written to the data directory when it is missing or different.
const ENTRY: &str = include_str!("worker_entry.py");
/// How long a Worker may take to import Hermes and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// A Worker unused this long is stopped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest line a Worker may send (a tool call with its arguments).
const MAX_LINE: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot start the Worker ({python}): {reason}")]
    Spawn { python: String, reason: String },
    #[error("the Worker did not become ready: {0}")]
    NotReady(String),
    #[error("the Worker exited unexpectedly")]
    Gone,
    #[error("the Worker broke the protocol: {0}")]
    Protocol(String),
    #[error("cannot talk to the Worker: {0}")]
    Io(#[from] std::io::Error),
}

/// One running Worker.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pub hermes_version: String,
}

impl Worker {
    pub async fn send(&mut self, message: &ToWorker<'_>) -> Result<(), WorkerError> {
        let mut line = serde_json::to_vec(message).expect("messages serialize");
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// The next message; cancel-safe (a line is never half consumed).
    pub async fn recv(&mut self) -> Result<FromWorker, WorkerError> {
        match self.lines.next_line().await? {
            None => Err(WorkerError::Gone),
            Some(line) if line.len() > MAX_LINE => Err(WorkerError::Protocol(format!(
                "a line of {} bytes (limit {MAX_LINE})",
                line.len()
            ))),
            Some(line) => serde_json::from_str(&line)
                .map_err(|e| WorkerError::Protocol(format!("not a message: {e}"))),
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Where Workers come from, and the warm ones.
pub struct Workers {
    python: PathBuf,
    entry: PathBuf,
    homes: PathBuf,
    warm: Mutex<HashMap<String, (Worker, Instant)>>,
}

impl Workers {
    /// Writes the entry (mode 0700) under `data_dir/worker/` and checks that `python` exists.
    pub fn new(python: &Path, data_dir: &Path) -> Result<Workers, String> {
        if !python.is_file() {
            return Err(format!(
                "the Worker's Python {} does not exist: set workerPython in runner.json to the Hermes venv's python",
                python.display()
            ));
        }
        let dir = data_dir.join("worker");
        crate::fsutil::create_private_dir(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let entry = dir.join(format!("worker_entry-{}.py", crate::VERSION));
        if std::fs::read_to_string(&entry).ok().as_deref() != Some(ENTRY) {
            crate::fsutil::write_atomic(&entry, ENTRY.as_bytes(), 0o700)
                .map_err(|e| format!("cannot write {}: {e}", entry.display()))?;
        }
        let homes = dir.join("homes");
        crate::fsutil::create_private_dir(&homes)
            .map_err(|e| format!("cannot create {}: {e}", homes.display()))?;
        Ok(Workers {
            python: python.to_path_buf(),
            entry,
            homes,
            warm: Mutex::default(),
        })
    }

    /// The warm Worker of `agent`, or a new one.
    pub async fn take(&self, agent: &str) -> Result<Worker, WorkerError> {
        let warm = self
            .warm
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent);
        if let Some((mut w, _)) = warm
            && w.alive()
        {
            return Ok(w);
        }
        self.spawn(agent).await
    }

    /// Keeps a Worker that ended its turn cleanly for the agent's next turn.
    pub fn put_back(&self, agent: &str, worker: Worker) {
        let mut warm = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        warm.insert(agent.to_string(), (worker, Instant::now()));
    }

    /// Stops Workers idle for longer than `idle` (dropping one kills it).
    pub fn reap(&self, idle: Duration) -> usize {
        let mut warm = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        let before = warm.len();
        warm.retain(|_, (_, since)| since.elapsed() < idle);
        before - warm.len()
    }

    async fn spawn(&self, agent: &str) -> Result<Worker, WorkerError> {
        let home = self.homes.join(sanitize(agent));
        crate::fsutil::create_private_dir(&home)?;
        let mut cmd = Command::new(&self.python);
        cmd.arg("-u")
            .arg(&self.entry)
            .env_clear()
            .env("HERMES_HOME", &home)
            .env("HOME", &home)
            .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(&home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(home.join("worker.log"))?))
            .kill_on_drop(true);
        // The Worker must not outlive a Runner that is killed outright (SIGKILL skips Drop).
        crate::sys::die_with_parent(cmd.as_std_mut(), libc::SIGKILL);
        let mut child = cmd.spawn().map_err(|e| WorkerError::Spawn {
            python: self.python.display().to_string(),
            reason: e.to_string(),
        })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut worker = Worker {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            hermes_version: String::new(),
        };
        let ready = tokio::time::timeout(READY_TIMEOUT, worker.recv())
            .await
            .map_err(|_| WorkerError::NotReady(format!("no answer in {READY_TIMEOUT:?}")))?
            .map_err(|e| {
                WorkerError::NotReady(format!("{e}; see {}", home.join("worker.log").display()))
            })?;
        match ready {
            FromWorker::Ready { hermes_version } => worker.hermes_version = hermes_version,
            other => {
                return Err(WorkerError::Protocol(format!(
                    "expected ready, got {other:?}"
                )));
            }
        }
        tracing::info!(%agent, hermes = %worker.hermes_version, "worker started");
        Ok(worker)
    }
}

/// A directory name from an id (ids are UUIDs; anything else is made safe).
fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The Worker's Python: the configured one, else the `python` beside a supervised Hermes.
pub fn default_python(hermes_command: Option<&[String]>) -> Option<PathBuf> {
    let hermes = Path::new(hermes_command?.first()?);
    Some(hermes.parent()?.join("python"))
}
