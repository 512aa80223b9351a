//! Worker processes: the Hermes Python running the entry that ships in this binary
//! (`worker_entry.py`), one per agent, kept warm between turns for a while.
//!
//! A Worker gets an empty environment but for a private `HERMES_HOME` of its own (made for
//! the process, removed with it); the model's settings and key arrive on its stdin, and it
//! dies with the Runner (parent-death signal), so a Runner killed mid-turn never leaves a
//! model loop running.
//!
//! Importing Hermes takes most of a second of CPU, so a few Workers are started before any
//! agent needs one (spares: Hermes imported, no agent, no credentials, never a turn). An
//! agent without a warm Worker claims a spare, which from then on is that agent's alone
//! (its log moves to the agent's), and another spare is started in its place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::worker_pipe::{FromWorker, ToWorker};

/// The Python entry, written to the data directory when it is missing or different.
const ENTRY: &str = include_str!("worker_entry.py");
/// How long a Worker may take to import Hermes and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// A Worker unused this long is stopped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Spares kept started unless the Runner is told otherwise (`--warm-workers`).
pub const DEFAULT_SPARES: u32 = 1;
/// After a spare fails to start, the next try waits this long (a broken Python is not
/// started in a loop).
const SPARE_RETRY: Duration = Duration::from_secs(30);
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
    /// This process's own Hermes home: nobody else's files, removed with it.
    home: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SIGKILL first: a process that gets it never runs again, so nothing is written
        // into the home after it is removed.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.home);
    }
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

/// Where Workers come from: the warm ones of each agent, and the spares.
pub struct Workers {
    python: PathBuf,
    entry: PathBuf,
    homes: PathBuf,
    logs: PathBuf,
    warm: Mutex<HashMap<String, (Worker, Instant)>>,
    spares: Mutex<Vec<Worker>>,
    spare_target: usize,
    /// Wakes [`Workers::keep_spares`] when a spare was claimed.
    claimed: Notify,
    /// Context windows Workers found, for the next Workers of the same model.
    pub windows: super::model::ContextWindows,
}

impl Workers {
    /// Writes the entry (mode 0700) under `data_dir/worker/` and checks that `python` exists.
    /// Homes of Workers of an earlier run (killed with the Runner) are removed.
    pub fn new(python: &Path, data_dir: &Path, spare_target: usize) -> Result<Workers, String> {
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
        if homes.exists() {
            std::fs::remove_dir_all(&homes)
                .map_err(|e| format!("cannot remove old Worker homes {}: {e}", homes.display()))?;
        }
        let logs = dir.join("logs");
        for d in [&homes, &logs] {
            crate::fsutil::create_private_dir(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        Ok(Workers {
            python: python.to_path_buf(),
            entry,
            homes,
            logs,
            warm: Mutex::default(),
            spares: Mutex::default(),
            spare_target,
            claimed: Notify::new(),
            windows: Default::default(),
        })
    }

    /// The Hermes log of `agent`'s Worker.
    fn log_of(&self, agent: &str) -> PathBuf {
        self.logs.join(format!("{}.log", sanitize(agent)))
    }

    /// The warm Worker of `agent`, else a spare claimed for it, else a new one.
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
        let spare = self.take_spare();
        let pre_started = spare.is_some();
        let mut worker = match spare {
            Some(w) => w,
            None => self.spawn(false).await?,
        };
        let log = self.log_of(agent);
        worker
            .send(&ToWorker::Claim {
                log: &log.to_string_lossy(),
            })
            .await?;
        tracing::info!(%agent, pre_started, "worker claimed");
        Ok(worker)
    }

    /// A live spare, if there is one; the keeper starts another in its place.
    fn take_spare(&self) -> Option<Worker> {
        let mut spares = self.spares.lock().unwrap_or_else(|p| p.into_inner());
        spares.retain_mut(Worker::alive);
        let spare = spares.pop();
        drop(spares);
        if self.spare_target > 0 {
            self.claimed.notify_one();
        }
        spare
    }

    /// Spares started now.
    pub fn spares(&self) -> usize {
        let mut spares = self.spares.lock().unwrap_or_else(|p| p.into_inner());
        spares.retain_mut(Worker::alive);
        spares.len()
    }

    /// Keeps `spare_target` spares started, one at a time, until `stop`.
    pub async fn keep_spares(&self, stop: CancellationToken) {
        if self.spare_target == 0 {
            return;
        }
        loop {
            while self.spares() < self.spare_target {
                let started = tokio::select! {
                    w = self.spawn(true) => w,
                    _ = stop.cancelled() => return,
                };
                match started {
                    Ok(w) => self
                        .spares
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(w),
                    Err(e) => {
                        tracing::warn!(
                            "cannot start a spare Worker (retrying in {SPARE_RETRY:?}): {e}"
                        );
                        tokio::select! {
                            _ = tokio::time::sleep(SPARE_RETRY) => {}
                            _ = stop.cancelled() => return,
                        }
                    }
                }
            }
            tokio::select! {
                _ = self.claimed.notified() => {}
                _ = stop.cancelled() => return,
            }
        }
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

    /// Starts a Worker with a new, empty home; it serves no agent until claimed. A spare
    /// also warms up before it says it is ready (`worker_entry.py`, `warm_up`).
    async fn spawn(&self, spare: bool) -> Result<Worker, WorkerError> {
        let home = self.homes.join(uuid::Uuid::new_v4().to_string());
        crate::fsutil::create_private_dir(&home)?;
        // Until it is claimed, its Hermes log is in its home (and goes with it).
        let log = home.join("worker.log");
        let mut cmd = Command::new(&self.python);
        cmd.arg("-u").arg(&self.entry);
        if spare {
            cmd.arg("--spare");
        }
        cmd.env_clear()
            .env("HERMES_HOME", &home)
            .env("HOME", &home)
            .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(&home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&log)?))
            .kill_on_drop(true);
        // The Worker must not outlive a Runner that is killed outright (SIGKILL skips Drop).
        crate::sys::die_with_parent(cmd.as_std_mut(), libc::SIGKILL);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&home);
                return Err(WorkerError::Spawn {
                    python: self.python.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut worker = Worker {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            hermes_version: String::new(),
            home,
        };
        let ready = tokio::time::timeout(READY_TIMEOUT, worker.recv())
            .await
            .map_err(|_| WorkerError::NotReady(format!("no answer in {READY_TIMEOUT:?}")))?
            .map_err(|e| {
                // The home goes with the Worker: keep the end of what it said.
                WorkerError::NotReady(format!("{e}; it said: {}", last_words(&log)))
            })?;
        match ready {
            FromWorker::Ready { hermes_version } => worker.hermes_version = hermes_version,
            other => {
                return Err(WorkerError::Protocol(format!(
                    "expected ready, got {other:?}"
                )));
            }
        }
        tracing::info!(hermes = %worker.hermes_version, "worker started");
        Ok(worker)
    }
}

/// The end of a Worker's log on one line, without control characters.
fn last_words(log: &Path) -> String {
    let said = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("; ");
    let tail: String = tail.chars().filter(|c| !c.is_control()).collect();
    let skip = tail.chars().count().saturating_sub(400);
    match tail.chars().skip(skip).collect::<String>() {
        t if t.is_empty() => "nothing".into(),
        t => t,
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
