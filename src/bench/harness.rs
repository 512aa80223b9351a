//! The dispatch benchmark's processes: temporary directory, children, setup and /proc readings.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{RUNNER_MAX_CONCURRENT, progress};
use crate::api::{params, views};
use crate::client::Client;
use crate::error::CliError;

// ---- processes and the temporary directory ----

/// A private temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("yy-bench-{}", uuid::Uuid::new_v4()));
        crate::fsutil::create_private_dir(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, stopped (SIGTERM, then SIGKILL) when dropped.
pub(super) struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its piped stdout, once.
    pub(super) fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Its whole log.
    pub(super) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Fails when the process has exited (with its last log lines).
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(CliError::failure(format!(
                "the benchmark's {} exited ({status}); its last log lines: {}",
                self.name,
                self.log_tail()
            ))
            .into());
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after `grace`. Returns the exit code if it exited by itself.
    pub(super) fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return status.code();
        }
        let _ = crate::sys::kill(self.child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Everything the benchmark started. Fields drop in order: children first, then the
/// directory they used.
pub(super) struct Harness {
    pub(super) runner: Option<Proc>,
    serve: Option<Proc>,
    /// The other `yy serve` replicas on the same PostgreSQL database.
    replicas: Vec<Proc>,
    /// The PostgreSQL database of every yy this benchmark starts (`YY_DATABASE`).
    database: Option<String>,
    /// Other helpers a benchmark starts (a scripted model server).
    pub(super) helpers: Vec<Proc>,
    dir: TempDir,
    bin: PathBuf,
}

impl Harness {
    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.dir.0.join(rel)
    }

    /// Starts `program ARGS` as a helper that is stopped with the benchmark; its stdout
    /// is piped.
    pub(super) fn spawn_helper(
        &self,
        name: &'static str,
        program: &str,
        args: &[&str],
    ) -> anyhow::Result<Proc> {
        let log = self.path(&format!("{name}.log"));
        let mut cmd = Process::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?);
        crate::sys::die_with_parent(&mut cmd, libc::SIGTERM);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {program} {}", args.join(" ")))?;
        Ok(Proc { name, child, log })
    }

    pub(super) fn command(&self, args: &[&str]) -> Process {
        let mut cmd = Process::new(&self.bin);
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_DATA_HOME", self.path("xdg-data"))
            .env("YY_LOG", "info")
            .env_remove("YY_SERVER")
            .env_remove("YY_TOKEN")
            .env_remove("YY_DATA_DIR")
            .env_remove("YY_DATABASE")
            .stdin(Stdio::null());
        if let Some(url) = &self.database {
            cmd.env("YY_DATABASE", url);
        }
        // Should the benchmark die without cleaning up (SIGKILL), its children go too. The
        // signal follows the thread that spawned them: the one running the benchmark's
        // future (the main thread or a runtime worker), which lives as long as it does.
        crate::sys::die_with_parent(&mut cmd, libc::SIGTERM);
        cmd
    }

    pub(super) fn spawn(
        &self,
        name: &'static str,
        args: &[&str],
        stdout: Stdio,
    ) -> anyhow::Result<Proc> {
        let log = self.path(&format!("{name}.log"));
        let stderr = std::fs::File::create(&log)?;
        let child = self
            .command(args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} {}", self.bin.display(), args.join(" ")))?;
        Ok(Proc { name, child, log })
    }
}

/// The control plane and the Runner the benchmark drives, ready.
pub(super) struct Setup {
    pub(super) h: Harness,
    pub(super) url: String,
    pub(super) admin: Client,
    /// The admin client of each other replica ([`Options::replicas`]), the same token.
    pub(super) replica_admins: Vec<Client>,
    pub(super) runner_id: String,
    /// The control plane's database (read-only use: final states and outcome times).
    pub(super) db: PathBuf,
    /// The PostgreSQL database instead, when [`Options::database`].
    pub(super) database: Option<String>,
    /// The admin's API token (for CLI processes the benchmark runs).
    pub(super) token: String,
    /// The Runner's runner.json.
    pub(super) runner_config: PathBuf,
    /// The Runner's artifact root (`yy runner fetch` exports from here).
    pub(super) export_root: PathBuf,
    /// `http://127.0.0.1:PORT/metrics` of the Runner, when [`Options::runner_metrics`].
    pub(super) runner_metrics: Option<String>,
}

/// A killed Runner's computers stay by design (the next Runner adopts them); a benchmark's
/// must not outlive it.
impl Drop for Setup {
    fn drop(&mut self) {
        let runner = self.runner_id.clone();
        let runner_data = self.h.path("runner/data");
        // Its own thread and runtime: this may run inside the benchmark's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let provider = crate::computer::docker::Provider::connect().await.ok()?;
                for c in provider.list_for_runner(&runner).await.ok()? {
                    let _ = provider.remove(&c.id).await;
                }
                Some(())
            })
        })
        .join();
        // The Runner was killed with its workspace images mounted (and fully allocated):
        // unmounted, the temporary directory can go, and its space with it.
        crate::computer::workspaces::Workspaces::new(&runner_data, None).release_all();
    }
}

impl Setup {
    pub(super) fn serve_pid(&self) -> u32 {
        self.h.serve.as_ref().expect("the control plane runs").pid()
    }

    /// Every replica's process.
    pub(super) fn control_plane_pids(&self) -> Vec<u32> {
        self.h
            .serve
            .iter()
            .chain(&self.h.replicas)
            .map(Proc::pid)
            .collect()
    }

    pub(super) fn runner_pid(&self) -> Option<u32> {
        self.h.runner.as_ref().map(Proc::pid)
    }

    /// The children still run (else an error with the last lines of the dead one's log).
    pub(super) fn check_children(&mut self) -> anyhow::Result<()> {
        for p in [self.h.serve.as_mut(), self.h.runner.as_mut()]
            .into_iter()
            .flatten()
            .chain(self.h.replicas.iter_mut())
        {
            p.check_alive()?;
        }
        Ok(())
    }

    /// Runs `work`, or fails as soon as a child exits (the work would only wait for
    /// deadlines then).
    pub(super) async fn while_alive<T>(
        &mut self,
        work: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let pids: Vec<u32> = self
            .control_plane_pids()
            .into_iter()
            .chain(self.runner_pid())
            .collect();
        let watch = async {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !pids.iter().all(|&p| running(p)) {
                    return;
                }
            }
        };
        let result = tokio::select! {
            r = work => r,
            _ = watch => Err(CliError::failure("a child process exited during the run").into()),
        };
        if result.is_err() {
            // Say which child died, with its log, rather than what that broke.
            self.check_children()?;
        }
        result
    }
}

/// What a benchmark's control plane and Runner are set up with.
#[derive(Default)]
pub(super) struct Options {
    /// Room in the queue.
    pub max_pending: u64,
    /// The `bench` profile's guest terminal.cwd.
    pub profile_cwd: Option<String>,
    /// Computers on the Runner, from this image.
    pub computer_image: Option<String>,
    /// Keys added to runner.json (Hermes access, the Worker's Python).
    pub runner_config: serde_json::Map<String, serde_json::Value>,
    /// `yy runner run --max-computers` (default: the Runner's own).
    pub max_computers: Option<u32>,
    /// `yy serve --tls self-signed`; the admin client and the Runner pin its certificate.
    pub tls: bool,
    /// Serve the Runner's own metrics on a free loopback port ([`Setup::runner_metrics`]).
    pub runner_metrics: bool,
    /// Keep the state in this PostgreSQL database (empty) instead of a SQLite file.
    pub database: Option<String>,
    /// `yy serve` processes on that database besides the first (the Runner uses the first).
    pub replicas: usize,
}

/// The temporary directory and nothing started yet (for helpers to go first).
pub(super) fn harness(bin: PathBuf) -> anyhow::Result<Harness> {
    Ok(Harness {
        runner: None,
        serve: None,
        replicas: Vec::new(),
        database: None,
        helpers: Vec::new(),
        dir: TempDir::new()?,
        bin,
    })
}

/// Creates the data directory and its admin, starts the control plane, registers and
/// starts the Runner, and waits until the Runner is online.
pub(super) async fn setup(mut h: Harness, opts: Options) -> anyhow::Result<Setup> {
    h.database = opts.database.clone();
    let db_dir = h.path("serve-data");
    let data = db_dir.display().to_string();

    // The first admin, straight into the data directory.
    progress("creating the control plane's data directory");
    let password = hex::encode(rand::random::<[u8; 16]>());
    let mut create = h
        .command(&[
            "admin",
            "create",
            "--data-dir",
            &data,
            "--username",
            "bench",
            "--password-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running yy admin create")?;
    // A child that exits without reading says why on stderr; its status tells below (a
    // broken pipe here would otherwise pass for a closed stdout and exit 0).
    let _ = create
        .stdin
        .take()
        .expect("piped")
        .write_all(password.as_bytes());
    let out = create.wait_with_output()?;
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "yy admin create failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }

    // The control plane, with room in the queue for the whole throughput run.
    progress("starting the control plane");
    let max_pending = opts.max_pending.max(1000).to_string();
    let (serve, url, pin) =
        super::serve::start(&h, "control plane", &data, &max_pending, opts.tls).await?;
    h.serve = Some(serve);
    let mut replica_urls = Vec::new();
    for (i, name) in super::serve::REPLICA_NAMES
        .iter()
        .take(opts.replicas)
        .enumerate()
    {
        progress(&format!("starting {name}"));
        let dir = h.path(&format!("replica-{}", i + 2)).display().to_string();
        let (proc, url, _) = super::serve::start(&h, name, &dir, &max_pending, opts.tls).await?;
        h.replicas.push(proc);
        replica_urls.push(url);
    }

    let login = Client::pinned(&url, None, pin.as_deref())?
        .login(&params::LoginParams {
            username: "bench".into(),
            password,
        })
        .await
        .context("logging in to the benchmark's control plane")?;
    let token = login.token.clone();
    let admin = Client::pinned(&url, Some(login.token.clone()), pin.as_deref())?;
    let replica_admins = replica_urls
        .iter()
        .map(|u| Client::pinned(u, Some(login.token.clone()), pin.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    admin
        .source_create(&params::SourceCreate {
            name: "bench".into(),
            description: "yy bench dispatch".into(),
        })
        .await?;
    admin
        .profile_create(&params::ProfileCreate {
            name: "bench".into(),
            cwd: opts.profile_cwd.clone(),
        })
        .await?;
    let export_root = h.path("export");
    crate::fsutil::create_private_dir(&export_root)?;
    let export_root = std::fs::canonicalize(&export_root)?;
    let mut reg = register(
        &admin,
        &url,
        "bench",
        opts.computer_image.clone(),
        vec![export_root.display().to_string()],
    )
    .await?;
    let runner_id = reg.runner.id.clone();
    crate::fsutil::create_private_dir(&h.path("runner"))?;
    let config_path = h.path("runner/runner.json");
    let mut config = serde_json::to_value(&reg.config)?;
    if let Some(map) = config.as_object_mut() {
        map.extend(opts.runner_config.clone());
    }
    reg.config =
        serde_json::from_value(config).context("the benchmark's runner.json keys are not valid")?;
    let mut config = serde_json::to_vec_pretty(&reg.config)?;
    config.push(b'\n');
    crate::fsutil::write_atomic(&config_path, &config, 0o600)?;

    progress("starting the Runner");
    let runner_data = h.path("runner/data").display().to_string();
    let config_arg = config_path.display().to_string();
    let concurrent = RUNNER_MAX_CONCURRENT.to_string();
    let computers = opts.max_computers.map(|n| n.to_string());
    // A bench Runner must not take (or fail on) the default metrics port of a real one.
    let metrics_listen = if opts.runner_metrics {
        let free = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        free.to_string()
    } else {
        "off".to_string()
    };
    let mut args = vec![
        "runner",
        "run",
        "--config",
        &config_arg,
        "--data-dir",
        &runner_data,
        "--max-concurrent",
        &concurrent,
        "--metrics-listen",
        &metrics_listen,
        // Each running computer's workspace image is fully allocated: the default 10 GiB
        // times a benchmark's computers would fill a test machine's disk.
        "--workspace-limit",
        "1GiB",
    ];
    if let Some(n) = &computers {
        args.extend(["--max-computers", n.as_str()]);
    }
    let runner = h.spawn("Runner", &args, Stdio::null())?;
    h.runner = Some(runner);
    let database = h.database.clone();
    let mut s = Setup {
        h,
        url,
        admin,
        replica_admins,
        runner_id: runner_id.into(),
        db: crate::server::store::db_path(&db_dir),
        database,
        token,
        runner_config: config_path,
        export_root,
        runner_metrics: opts
            .runner_metrics
            .then(|| format!("http://{metrics_listen}/metrics")),
    };
    let (admin, runner_id) = (s.admin.clone(), s.runner_id.clone());
    s.while_alive(wait_online(&admin, &runner_id)).await?;
    Ok(s)
}

pub(super) async fn register(
    admin: &Client,
    url: &str,
    source: &str,
    computer_image: Option<String>,
    artifact_roots: Vec<String>,
) -> anyhow::Result<views::RunnerRegistration> {
    Ok(admin
        .runner_register(&params::RunnerRegister {
            source: source.into(),
            profiles: vec!["bench".into()],
            server_url: url.into(),
            hermes_url: "http://127.0.0.1:9119".into(),
            artifact_roots,
            computer_image,
            network: None,
        })
        .await?)
}

async fn wait_online(admin: &Client, runner_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if admin.runner_show(runner_id).await?.online {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::failure(
                "the benchmark's Runner did not come online within 20 s",
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- the process's limits and the machine ----

/// CPU seconds (user and system) a process has used so far.
pub(super) fn process_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may itself hold spaces and parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / clock_ticks()
}

/// CPU seconds of the whole machine so far, summed over every CPU: (busy, total, stolen).
/// Stolen time (the hypervisor ran another guest on a CPU this one wanted) counts as busy.
pub(super) fn machine_cpu_s() -> (f64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let (busy, total, stolen) = cpu_ticks(&stat);
    let hz = clock_ticks();
    (busy as f64 / hz, total as f64 / hz, stolen as f64 / hz)
}

/// The first line of `/proc/stat` in clock ticks: (busy, total, stolen).
fn cpu_ticks(stat: &str) -> (u64, u64, u64) {
    let values: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle: u64 = values.iter().skip(3).take(2).sum();
    let stolen = values.get(7).copied().unwrap_or(0);
    (total - idle, total, stolen)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf(3) takes a constant and touches no memory of ours.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as f64,
        _ => 100.0,
    }
}

/// True while a process exists and has not exited (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// VmRSS of a process, in MB (10^6 bytes).
pub(super) fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    status_mb(pid, "VmRSS")
}

/// The part of VmRSS that is the process's own memory (heap, stacks: `RssAnon`), in MB.
/// The rest is mostly pages of the mapped `yy` executable, which every yy process shares
/// and the kernel can drop at any time.
pub(super) fn private_rss_mb(pid: u32) -> anyhow::Result<f64> {
    status_mb(pid, "RssAnon")
}

fn status_mb(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| CliError::failure(format!("/proc/{pid}/status has no {field}")))?;
    Ok(kib as f64 * 1024.0 / 1e6)
}

pub(super) fn socket_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy().starts_with("socket:"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits until the Runner's gauge `name` (its `/metrics` at `metrics`) is at least 1;
/// after 120 s fails, saying `missing`.
pub(super) async fn wait_gauge(metrics: &str, name: &str, missing: &str) -> anyhow::Result<()> {
    let client = crate::api::http::http_builder(&metrics.parse()?).build()?;
    let since = Instant::now();
    let prefix = format!("{name} ");
    loop {
        let text = client.get(metrics).send().await?.text().await?;
        let ready = text
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|n| n >= 1.0);
        if ready {
            return Ok(());
        }
        if since.elapsed() > Duration::from_secs(120) {
            return Err(CliError::failure(format!("{missing} in 120 s: see its log")).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent of the benchmarks' source and profile (`bench`).
pub fn bench_agent(name: impl Into<String>, env: params::AgentEnv) -> params::AgentCreate {
    params::AgentCreate {
        name: name.into(),
        profile: "bench".into(),
        env,
        source: Some("bench".into()),
        manage_team: false,
        browser: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_of_this_process() {
        let mb = rss_mb(std::process::id()).unwrap();
        assert!(mb > 0.1 && mb < 10_000.0, "{mb}");
    }

    #[test]
    fn the_machine_s_ticks_count_stolen_time_as_busy() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 1 20 500 7 0 3 40 9 0\ncpu0 50 0 10 250 3 0 1 20 0 0\n";
        assert_eq!(cpu_ticks(stat), (164, 671, 40));
        assert_eq!(cpu_ticks("intr 1 2 3\n"), (0, 0, 0));
    }
}
