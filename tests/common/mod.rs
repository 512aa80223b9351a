//! Test harness: the real `yy` binary, a real `yy serve` on a loopback port, real SQLite
//! files in temporary directories (or, under `YY_TEST_DATABASE=postgres`, real PostgreSQL
//! databases in a throw-away cluster).
#![allow(dead_code)]

pub mod chromium;
pub mod hermes;
pub mod netns;
pub mod postgres;
pub mod waits;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_yy");
pub const PASSWORD: &str = "correct horse battery";

/// The outcome of one CLI run.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code, 0, "expected success, got {self:#?}");
        self
    }
    #[track_caller]
    pub fn fails(&self, code: i32, needle: &str) -> &Self {
        assert_eq!(self.code, code, "wrong exit code: {self:#?}");
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}: {self:#?}"
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "error must be one line: {self:#?}");
        assert!(lines[0].starts_with("error: "), "{self:#?}");
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }
}

/// A sandbox: its own config and data directories, and the commands to drive the CLI in it.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// Every yy this sandbox starts runs in this network namespace (`ip netns exec`).
    pub netns: Option<String>,
    /// Set in the environment of every yy this sandbox starts.
    pub envs: Vec<(String, String)>,
}

/// A Runner that is killed (or still running when its environment goes) leaves its
/// computers behind: remove every yy container whose workspace lies in this environment.
impl Drop for Env {
    fn drop(&mut self) {
        self.remove_containers();
        // Then the workspace images the killed Runners left mounted (`--workspace-limit`).
        let root = std::fs::canonicalize(self.dir.path()).unwrap_or(self.dir.path().into());
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| Path::new(m).starts_with(&root))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").arg(m).output();
        }
    }
}

impl Env {
    fn remove_containers(&self) {
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", "label=yy.managed=1"])
            .output();
        let Ok(ids) = ids else { return };
        let ids: Vec<String> = String::from_utf8_lossy(&ids.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if ids.is_empty() {
            return;
        }
        let root = std::fs::canonicalize(self.dir.path()).unwrap_or(self.dir.path().into());
        let Ok(out) = Command::new("docker")
            .args([
                "inspect",
                "--format",
                "{{.Id}}{{range .Mounts}} {{.Source}}{{end}}",
            ])
            .args(&ids)
            .output()
        else {
            return;
        };
        let ours: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let id = parts.next()?;
                parts
                    .any(|src| Path::new(src).starts_with(&root))
                    .then(|| id.to_string())
            })
            .collect();
        if !ours.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v"])
                .args(&ours)
                .output();
        }
    }
}

impl Env {
    /// A sandbox. Under `YY_TEST_DATABASE=postgres` its control planes keep their state in
    /// a PostgreSQL database of its own (`postgres::database_for_env`).
    pub fn new() -> Env {
        let envs = postgres::database_for_env()
            .map(|url| vec![("YY_DATABASE".to_string(), url)])
            .unwrap_or_default();
        Env {
            dir: tempfile::tempdir().expect("tempdir"),
            netns: None,
            envs,
        }
    }

    /// Runs `sql` (no parameters) on this sandbox's control-plane database, SQLite's file
    /// or PostgreSQL's, and returns every row's values as text (NULL as None): what a test
    /// reads or changes behind the server's back, the same on both backends.
    pub fn sql(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        if let Some((_, url)) = self.envs.iter().find(|(k, _)| k == "YY_DATABASE") {
            return postgres::simple_query(url, sql);
        }
        let db = rusqlite::Connection::open(self.data_dir().join("yy.db")).unwrap();
        db.busy_timeout(Duration::from_secs(10)).unwrap();
        let mut stmt = db.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let columns = stmt.column_count();
        stmt.query_map([], |r| {
            (0..columns)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => None,
                        rusqlite::types::ValueRef::Integer(n) => Some(n.to_string()),
                        rusqlite::types::ValueRef::Real(f) => Some(f.to_string()),
                        v => Some(v.as_str().unwrap_or_default().to_string()),
                    })
                })
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first value of the first row of [`Env::sql`], as a number.
    #[track_caller]
    pub fn sql_number(&self, sql: &str) -> i64 {
        let rows = self.sql(sql);
        let value = rows.first().and_then(|r| r.first().cloned().flatten());
        value
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{sql}: no number in {rows:?}"))
    }

    /// Whether this sandbox's control planes run on PostgreSQL.
    pub fn on_postgres(&self) -> bool {
        self.envs.iter().any(|(k, _)| k == "YY_DATABASE")
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub fn data_dir(&self) -> PathBuf {
        self.path("data")
    }
    pub fn config_home(&self) -> PathBuf {
        self.path("config")
    }

    /// `yy ARGS` in this sandbox. `YY_TEST_BIN` runs another yy binary instead (an older
    /// build, to see a test fail there).
    pub fn command(&self, args: &[&str]) -> Command {
        let bin = std::env::var("YY_TEST_BIN").unwrap_or_else(|_| BIN.to_string());
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &bin]);
                c
            }
            None => Command::new(bin),
        };
        // The sandbox's own database, if any, is in `envs`; never the caller's.
        cmd.env_remove("YY_DATABASE");
        cmd.envs(self.envs.iter().map(|(k, v)| (k, v)));
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_DATA_HOME", self.path("xdg-data"))
            .env("HOME", self.dir.path())
            .env_remove("YY_SERVER")
            .env_remove("YY_TOKEN")
            .env_remove("YY_DATA_DIR")
            .env_remove("YY_LOG")
            // Runners' workspace images stay small: the default (10 GiB, allocated while a
            // computer runs) would fill a test host running several at once.
            .env("YY_WORKSPACE_LIMIT", "256MiB");
        cmd
    }

    /// Runs `yy ARGS` with `stdin` and waits.
    pub fn run_with(&self, args: &[&str], stdin: &str, envs: &[(&str, &str)]) -> Out {
        let mut cmd = self.command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn yy");
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).ok();
        let out = child.wait_with_output().expect("wait yy");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Out {
        self.run_with(args, "", &[])
    }

    /// `yy computer exec ID -- sh -c SCRIPT`: a shell script in the computer.
    pub fn computer_sh(&self, id: &str, script: &str) -> Out {
        self.run(&["computer", "exec", id, "--", "sh", "-c", script])
    }

    pub fn create_admin(&self, username: &str) {
        let data = self.data_dir();
        self.run_with(
            &[
                "admin",
                "create",
                "--data-dir",
                data.to_str().unwrap(),
                "--username",
                username,
                "--password-stdin",
            ],
            PASSWORD,
            &[],
        )
        .ok();
    }

    /// `yy login` as `username`; an HTTPS server's printed fingerprint is trusted.
    pub fn login(&self, server: &Server, username: &str) {
        let mut args = vec![
            "login",
            &server.url,
            "--username",
            username,
            "--password-stdin",
        ];
        if let Some(pin) = &server.cert_sha256 {
            args.extend(["--cert-sha256", pin]);
        }
        self.run_with(&args, PASSWORD, &[]).ok();
    }

    /// The token stored by `yy login`.
    pub fn stored_token(&self) -> String {
        let text = std::fs::read_to_string(self.config_home().join("yy/login.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["token"].as_str().unwrap().to_string()
    }

    /// Starts `yy serve` on this sandbox's data directory.
    pub fn serve(&self) -> Server {
        Server::start(self, &self.data_dir())
    }

    /// A first admin `root`, a running server, and a login as root.
    pub fn bootstrap(&self) -> Server {
        self.create_admin("root");
        let server = self.serve();
        self.login(&server, "root");
        server
    }
}

/// A running `yy serve`; killed when dropped.
pub struct Server {
    pub url: String,
    /// The certificate's SHA-256 an HTTPS server printed.
    pub cert_sha256: Option<String>,
    pub child: Child,
    stderr_path: PathBuf,
}

impl Server {
    pub fn start(env: &Env, data_dir: &Path) -> Server {
        Self::start_with(env, data_dir, "127.0.0.1:0", &[])
    }

    /// Starts `yy serve --listen LISTEN --data-dir DATA_DIR EXTRA...`.
    pub fn start_with(env: &Env, data_dir: &Path, listen: &str, extra: &[&str]) -> Server {
        Server::start_shaped(env, data_dir, listen, extra, |_| {})
    }

    /// [`Server::start_with`], with `shape` applied to the command first (limits, say).
    pub fn start_shaped(
        env: &Env,
        data_dir: &Path,
        listen: &str,
        extra: &[&str],
        shape: impl FnOnce(&mut Command),
    ) -> Server {
        let stderr_path = env.path(&format!("serve-{}.log", rand_suffix()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut args = vec![
            "serve",
            "--listen",
            listen,
            "--data-dir",
            data_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut cmd = env.command(&args);
        shape(&mut cmd);
        let mut child = cmd
            .env("YY_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn yy serve");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        let cert_sha256 = first.contains("https://").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix("certificate SHA-256 ")
                .unwrap_or_else(|| panic!("no fingerprint line: {line:?}"))
                .to_string()
        });
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!(
                    "unexpected first line {first:?}; stderr: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                )
            })
            .to_string();
        let server = Server {
            url,
            cert_sha256,
            child,
            stderr_path,
        };
        // It answers once it printed its address; the probe below speaks plain HTTP from
        // this test's own network namespace.
        if env.netns.is_none() && server.cert_sha256.is_none() {
            server.wait_healthy();
        }
        server
    }

    fn wait_healthy(&self) {
        let addr = self.addr();
        wait_for(
            Duration::from_secs(10),
            "the server to answer /healthz",
            || {
                http(&addr, "GET", "/healthz", &[], "")
                    .ok()
                    .filter(|(status, _)| *status == 200)
            },
        );
    }

    pub fn addr(&self) -> String {
        self.url.trim_start_matches("http://").to_string()
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, then the exit code.
    pub fn terminate(mut self) -> i32 {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = wait_for(
            Duration::from_secs(15),
            "the server to exit on SIGTERM",
            || self.child.try_wait().unwrap(),
        );
        status.code().unwrap_or(-1)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// A raw HTTP/1.1 request, for bodies no well-behaved client would send.
/// Returns (status, body).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    // A server may answer (413) before reading a large body; a failed write is fine then.
    let _ = stream.write_all(body.as_bytes());
    let mut resp = Vec::new();
    let _ = stream.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, dechunk(&body)))
}

/// Undoes chunked transfer encoding when present (good enough for small test bodies).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size_line, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(size) = usize::from_str_radix(size_line.trim(), 16) else {
            return body.to_string();
        };
        if size == 0 {
            return out;
        }
        if after.len() < size {
            return body.to_string();
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
}

/// A registered Runner: its config file, id and token.
pub struct Registered {
    pub config: PathBuf,
    pub id: String,
    pub token: String,
}

impl Env {
    /// Registers a Runner for `source` (created if needed) with profile `default`.
    pub fn register_runner(&self, server: &Server, source: &str, extra: &[&str]) -> Registered {
        self.register_runner_at(&server.url, source, extra)
    }

    /// [`Env::register_runner`] for the server at `url`.
    pub fn register_runner_at(&self, url: &str, source: &str, extra: &[&str]) -> Registered {
        if self.run(&["source", "show", source]).code != 0 {
            self.run(&["source", "create", source]).ok();
        }
        if self.run(&["profile", "show", "default"]).code != 0 {
            self.run(&["profile", "create", "default", "--cwd", "/workspace"])
                .ok();
        }
        let config = self.path(&format!("runner-{source}.json"));
        let mut args = vec![
            "runner",
            "register",
            "--source",
            source,
            "--profile",
            "default",
            "--server-url",
            url,
            "-o",
            config.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        self.run(&args).ok();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        Registered {
            id: v["runnerId"].as_str().unwrap().to_string(),
            token: v["token"].as_str().unwrap().to_string(),
            config,
        }
    }

    /// Starts `yy runner run` with its own data directory `name`.
    pub fn start_runner(&self, reg: &Registered, name: &str) -> RunnerProc {
        self.start_runner_with(reg, name, &[])
    }

    /// [`Env::start_runner`] with `extra` arguments (`--max-computers 4`, ...).
    pub fn start_runner_with(&self, reg: &Registered, name: &str, extra: &[&str]) -> RunnerProc {
        self.start_runner_env(reg, name, extra, &[])
    }

    /// [`Env::start_runner_with`] with `envs` set for the Runner alone.
    pub fn start_runner_env(
        &self,
        reg: &Registered,
        name: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> RunnerProc {
        let log = self.path(&format!("runner-{name}-{}.log", rand_suffix()));
        let data = self.path(&format!("runner-data-{name}"));
        let mut args = vec![
            "runner",
            "run",
            "--config",
            reg.config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--shutdown-grace",
            "5s",
        ];
        // Several Runners run at once in a test: none takes the default metrics port.
        if !extra.contains(&"--metrics-listen") {
            args.extend_from_slice(&["--metrics-listen", "off"]);
        }
        args.extend_from_slice(extra);
        let child = self
            .command(&args)
            .env("YY_LOG", "info")
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn yy runner run");
        RunnerProc { child, log }
    }

    /// Runs `yy computer attach ID --control` (stdin piped, stdout as given) until it says
    /// "you have control".
    pub fn take_control(&self, id: &str, stdout: Stdio) -> Controller {
        self.control_with(&["computer", "attach", id, "--control"], stdout)
    }

    /// Runs `yy ARGS` (an `attach --control`; stdin piped, stdout as given) until it says
    /// "you have control".
    pub fn control_with(&self, args: &[&str], stdout: Stdio) -> Controller {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = lines_of(child.stderr.take().unwrap());
        let mut seen = Vec::new();
        wait_line(&err, "you have control", &mut seen);
        Controller { child, err, seen }
    }

    /// Starts `yy ARGS` against `server` as the logged-in user, in the background.
    pub fn background(&self, server: &Server, args: &[&str]) -> Bg {
        let child = self
            .command(args)
            .env("YY_SERVER", &server.url)
            .env("YY_TOKEN", self.stored_token())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn yy in the background");
        Bg(Some(child))
    }

    /// `yy ARGS --json` parsed, asserting success.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.run(&a);
        out.ok();
        out.json()
    }

    /// Waits until the Runner shows online with a generation above `after`; returns it.
    #[track_caller]
    pub fn wait_online(&self, id: &str, after: i64) -> i64 {
        let what = format!("Runner {id} online in a generation above {after}");
        // A Runner that starts Hermes first can take a while on a loaded CI machine.
        wait_for(Duration::from_secs(60), &what, || {
            let r = self.json(&["runner", "show", id]);
            let g = r["generation"].as_i64().unwrap();
            (r["online"] == true && g > after).then_some(g)
        })
    }

    /// Starts the registered Runner `reg` (data directory `name`) and waits until it is
    /// online in a generation above `after`; returns the process and that generation.
    #[track_caller]
    pub fn start_online(&self, reg: &Registered, name: &str, after: i64) -> (RunnerProc, i64) {
        self.start_online_with(reg, name, after, &[])
    }

    /// [`Env::start_online`] with `extra` arguments.
    pub fn start_online_with(
        &self,
        reg: &Registered,
        name: &str,
        after: i64,
        extra: &[&str],
    ) -> (RunnerProc, i64) {
        let runner = self.start_runner_with(reg, name, extra);
        let generation = self.wait_online(&reg.id, after);
        (runner, generation)
    }

    /// Waits until command `cmd` of `runner` is in `state`.
    #[track_caller]
    pub fn wait_state(&self, runner: &str, cmd: &str, state: &str) -> serde_json::Value {
        wait_for(
            Duration::from_secs(20),
            &format!("command {cmd} in state {state}"),
            || {
                let list = self.json(&["runner", "commands", runner]);
                list.as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["id"] == cmd && c["state"] == state)
                    .cloned()
            },
        )
    }
}

/// Polls `f` every 50 ms until it returns Some; None once `limit` passed first.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `f` until it returns Some; panics with "timed out after Ns waiting for WHAT" once
/// `limit` passed. `what` names the condition, so a failure says what never happened.
#[track_caller]
pub fn wait_for<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    match poll(limit, f) {
        Some(v) => v,
        None => timed_out(limit, what),
    }
}

/// `wait_for` for conditions that are themselves async (a guest request, a Hermes call).
pub async fn wait_for_async<T, F>(limit: Duration, what: &str, mut f: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() >= deadline {
            timed_out(limit, what);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[track_caller]
fn timed_out(limit: Duration, what: &str) -> ! {
    panic!(
        "timed out after {}s waiting for {what}",
        limit.as_secs_f64()
    )
}

/// A running `yy runner run`; killed when dropped.
pub struct RunnerProc {
    pub child: Child,
    pub log: PathBuf,
}

impl RunnerProc {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// Where it serves its own metrics (`--metrics-listen 127.0.0.1:0`): the address its
    /// log names.
    pub fn metrics_addr(&self) -> String {
        wait_for(
            Duration::from_secs(10),
            "the Runner's metrics address",
            || {
                self.log()
                    .lines()
                    .find(|l| l.contains("serving the Runner's metrics"))
                    .and_then(|l| l.split("addr=").nth(1))
                    .map(|a| a.split_whitespace().next().unwrap_or("").to_string())
            },
        )
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
    /// Waits for the process to exit; returns its exit code.
    #[track_caller]
    pub fn wait_exit(&mut self, limit: Duration) -> i32 {
        let status = wait_for(limit, "the Runner process to exit", || {
            self.child.try_wait().unwrap()
        });
        status.code().unwrap_or(-1)
    }
}

impl Drop for RunnerProc {
    /// SIGTERM first, so that the Runner removes its computers and their slots' mounts
    /// instead of leaving them on the test machine; SIGKILL if it has not exited within a
    /// few seconds.
    fn drop(&mut self) {
        self.signal(libc::SIGTERM);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw machine API request as Runner `token` / `instance`, with optional generation.
pub fn machine(
    server: &Server,
    path: &str,
    token: &str,
    instance: &str,
    generation: Option<i64>,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, serde_json::Value) {
    let auth = format!("Bearer {token}");
    let g = generation.map(|g| g.to_string());
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("yy-protocol", "1"),
        ("yy-runner-instance", instance),
    ];
    if let Some(g) = &g {
        headers.push(("yy-generation", g.as_str()));
    }
    headers.extend_from_slice(extra);
    let (status, text) = http(&server.addr(), "POST", path, &headers, body).unwrap();
    let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, v)
}

pub const STATUS: &str =
    r#"{"version":"test","capabilities":[],"computers_capacity":0,"hostname":"t"}"#;

/// Connects as Runner `token` / `instance` (the `STATUS` report) and returns the
/// connection's generation; anything but 200 fails the test.
pub fn connect_runner(server: &Server, token: &str, instance: &str) -> i64 {
    let (status, conn) = machine(
        server,
        "/runner/v1/connect",
        token,
        instance,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 200, "{conn}");
    conn["generation"].as_i64().unwrap()
}

/// Writes a lease request as Runner `token` / `instance` by hand, on a connection the test
/// holds (to see when the headers and the body of a waiting lease arrive). With `close`,
/// the server closes the connection after its answer.
pub fn send_lease(
    stream: &mut std::net::TcpStream,
    server: &Server,
    (token, instance, generation): (&str, &str, i64),
    wait_ms: u64,
    close: bool,
) {
    use std::io::Write;
    let body = format!(r#"{{"max":1,"wait_ms":{wait_ms}}}"#);
    let connection = if close { "Connection: close\r\n" } else { "" };
    write!(
        stream,
        "POST /runner/v1/lease HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nyy-protocol: 1\r\nyy-runner-instance: {instance}\r\n\
         yy-generation: {generation}\r\nContent-Length: {}\r\n{connection}\r\n{body}",
        server.addr(),
        body.len()
    )
    .unwrap();
}

/// Says on the terminal that the calling test did not run, and why. Written to the stderr
/// file itself, not through `eprintln!`: the test harness captures that (and shows it only
/// for failures), and a skip must not pass for a pass.
pub fn skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {why}");
}

/// A dependency of the calling test is missing: outside CI the test is skipped (and says
/// so); under CI (`CI` set) the test fails instead.
#[track_caller]
fn missing(what: &str, how: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is required under CI but missing: {how}");
    }
    skipped(&format!("{what} is missing ({how})"));
}

/// The Docker engine answers on its socket; else skip (or fail under CI).
#[track_caller]
pub fn require_docker() -> bool {
    if std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_ok() {
        return true;
    }
    missing("the Docker engine", "run scripts/install-docker.sh");
    false
}

/// Podman's Docker-compatible API answers on its socket (`YY_TEST_PODMAN_SOCKET`, default
/// /run/podman/podman.sock); else skip (or fail under CI).
#[track_caller]
pub fn require_podman() -> bool {
    let socket = std::env::var("YY_TEST_PODMAN_SOCKET")
        .unwrap_or_else(|_| "/run/podman/podman.sock".to_string());
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        return true;
    }
    missing("Podman's API service", "run scripts/install-podman.sh");
    false
}

/// The pinned `hermes` executable (YY_TEST_HERMES or the default venv); else skip (or fail
/// under CI).
#[track_caller]
pub fn require_hermes() -> Option<PathBuf> {
    let path = std::env::var_os("YY_TEST_HERMES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/yy/hermes-venv/bin/hermes"));
    if path.is_file() {
        return Some(path);
    }
    missing("hermes-agent 0.19.0", "run scripts/install-hermes.sh");
    None
}

/// The directory of PostgreSQL's server programs (`YY_TEST_POSTGRES_BIN`, else the newest
/// /usr/lib/postgresql/*/bin), with the `postgres` user they run as when tests run as root;
/// else skip (or fail under CI).
#[track_caller]
pub fn require_postgres() -> Option<PathBuf> {
    let newest = || {
        let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let e = e.ok()?;
                Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin")))
            })
            .collect();
        dirs.sort();
        dirs.pop().map(|(_, dir)| dir)
    };
    let bin = std::env::var_os("YY_TEST_POSTGRES_BIN")
        .map(PathBuf::from)
        .or_else(newest);
    let has_programs = bin.as_ref().is_some_and(|b| {
        ["initdb", "postgres", "pg_ctl", "pg_isready"]
            .iter()
            .all(|p| b.join(p).is_file())
    });
    // initdb refuses to run as root: a root test runs it as Debian's `postgres` user.
    let has_user = !postgres::running_as_root()
        || Command::new("id")
            .args(["-u", "postgres"])
            .output()
            .is_ok_and(|o| o.status.success());
    if has_programs && has_user {
        return bin;
    }
    missing(
        "PostgreSQL (initdb, postgres, pg_ctl)",
        "run scripts/install-postgres.sh and set YY_TEST_POSTGRES_BIN to the directory it prints",
    );
    None
}

/// A CLI process running in the background; killed and reaped when dropped.
pub struct Bg(pub Option<Child>);

impl Bg {
    /// Waits for it to end and returns its output.
    pub fn output(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Adds keys to a registered runner.json (keeping it 0600).
pub fn configure(reg: &Registered, extra: serde_json::Value) {
    use std::os::unix::fs::PermissionsExt;
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    std::fs::write(&reg.config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    std::fs::set_permissions(&reg.config, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The session `yy chat` names on its first stderr line.
pub fn session_of(chat: &Out) -> String {
    let first = chat.stderr.lines().next().unwrap_or_default();
    first.trim_start_matches("session ").to_string()
}

/// Lines of a child's stream, as they come, on a channel.
/// A `yy computer attach --control` that has control: the process, the lines of its
/// stderr, and those read so far.
pub struct Controller {
    pub child: Child,
    pub err: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

pub fn lines_of(r: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

pub fn wait_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            let hit = l.contains(needle);
            seen.push(l);
            if hit {
                return;
            }
        }
    }
    panic!("no line with {needle:?} in {seen:#?}");
}
