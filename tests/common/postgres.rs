//! A throw-away PostgreSQL cluster for one test: `initdb` in a temp dir, `postgres` on a free
//! 127.0.0.1 port with its unix socket in the same dir, stopped and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The database every cluster is made with; more with [`Cluster::create_database`].
pub const DATABASE: &str = "yy";
/// The cluster's superuser (trusted: only this machine's loopback can reach it).
pub const USER: &str = "yy";

/// How long `postgres` may take to accept connections on a loaded 2-core machine.
const READY_WITHIN: Duration = Duration::from_secs(60);

pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `program` from `bin`, run as the `postgres` user when we are root (initdb and postgres
/// refuse to run as root), else as ourselves.
fn as_postgres(bin: &Path, program: &str) -> Command {
    let path = bin.join(program);
    if running_as_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(path);
        cmd
    } else {
        Command::new(path)
    }
}

#[track_caller]
fn run(mut cmd: Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    server: Child,
}

impl Cluster {
    /// A running cluster with the database [`DATABASE`]; None when PostgreSQL is missing
    /// (the test is skipped, or fails under CI: see `require_postgres`).
    #[track_caller]
    pub fn start() -> Option<Cluster> {
        let bin = super::require_postgres()?;
        Some(Cluster::start_in(bin))
    }

    #[track_caller]
    fn start_in(bin: PathBuf) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("yy-pg-")
            .tempdir()
            .expect("tempdir");
        let sockets = dir.path().join("sockets");
        std::fs::create_dir(&sockets).unwrap();
        if running_as_root() {
            let mut chown = Command::new("chown");
            chown.args(["-R", "postgres:"]).arg(dir.path());
            run(chown, "chown of the cluster directory to postgres");
        }
        let data = dir.path().join("data");
        let mut initdb = as_postgres(&bin, "initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", USER, "-E", "UTF8", "--locale=C"])
            // A test's cluster dies with the test: no fsync.
            .arg("--no-sync");
        run(initdb, "initdb");
        // Another process may take the free port before postgres binds it: try a few.
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let log_path = dir.path().join(format!("postgres-{port}.log"));
            let mut server = spawn_postgres(&bin, dir.path(), port, &log_path);
            if wait_ready(&bin, port, &mut server) {
                let cluster = Cluster {
                    dir,
                    bin,
                    port,
                    server,
                };
                cluster.create_database(DATABASE);
                return cluster;
            }
            stop(&bin, &data, &mut server);
            last_log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if !last_log.contains("could not bind") {
                panic!(
                    "postgres did not accept connections on 127.0.0.1:{port} within {}s: {last_log}",
                    READY_WITHIN.as_secs()
                );
            }
        }
        panic!("postgres found no free port in 5 tries: {last_log}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of the cluster's unix socket (`.s.PGSQL.PORT`).
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sockets")
    }

    /// The URL of [`DATABASE`]: `postgres://yy@127.0.0.1:PORT/yy`.
    pub fn url(&self) -> String {
        self.url_of(DATABASE)
    }

    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server at once (as a crash would), waits `down`, and starts it again on
    /// the same port and data.
    pub fn restart_after(&mut self, down: Duration) {
        stop(&self.bin, &self.dir.path().join("data"), &mut self.server);
        std::thread::sleep(down);
        let log_path = self
            .dir
            .path()
            .join(format!("postgres-{}-again.log", self.port));
        self.server = spawn_postgres(&self.bin, self.dir.path(), self.port, &log_path);
        assert!(
            wait_ready(&self.bin, self.port, &mut self.server),
            "postgres did not come back on port {}: {}",
            self.port,
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }

    /// Creates another empty database (a scratch one for a test case) and returns its URL.
    #[track_caller]
    pub fn create_database(&self, name: &str) -> String {
        let mut createdb = Command::new(self.bin.join("createdb"));
        createdb
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .arg(name);
        run(createdb, &format!("createdb {name}"));
        self.url_of(name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop(&self.bin, &self.dir.path().join("data"), &mut self.server);
        // The TempDir removes the directory (root may remove the postgres user's files).
    }
}

fn spawn_postgres(bin: &Path, dir: &Path, port: u16, log_path: &Path) -> Child {
    let log = std::fs::File::create(log_path).unwrap();
    let mut postgres = as_postgres(bin, "postgres");
    postgres
        .arg("-D")
        .arg(dir.join("data"))
        // Only loopback, and the unix socket in the cluster's own directory.
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k"])
        .arg(dir.join("sockets"))
        // A test's cluster dies with the test: nothing needs to reach the disk. Commits
        // still reach the operating system before they are acknowledged (the default
        // synchronous_commit), so a crash of postgres alone loses nothing, as in production.
        .args(["-c", "fsync=off"])
        .args(["-c", "full_page_writes=off"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    postgres.spawn().expect("spawn postgres")
}

/// Whether postgres accepts connections before [`READY_WITHIN`]; false when it exited
/// first (the log says why) or never answered.
fn wait_ready(bin: &Path, port: u16, server: &mut Child) -> bool {
    let deadline = Instant::now() + READY_WITHIN;
    while Instant::now() < deadline {
        if server.try_wait().unwrap().is_some() {
            return false;
        }
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", USER, "-d", "postgres"])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Stops postgres at once (its data is thrown away anyway) and reaps it.
fn stop(bin: &Path, data: &Path, server: &mut Child) {
    let stopped = as_postgres(bin, "pg_ctl")
        .arg("-D")
        .arg(data)
        .args(["-m", "immediate", "-w", "stop"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !stopped {
        // No pid file (it never came up) or pg_ctl failed: end it ourselves.
        let _ = server.kill();
    }
    let _ = server.wait();
}

/// The environment variable that runs a test binary's control planes on PostgreSQL:
/// `YY_TEST_DATABASE=postgres` gives every [`super::Env`] a database of its own in one
/// cluster per test process, and every yy it starts gets it as `YY_DATABASE`.
pub const BACKEND_ENV: &str = "YY_TEST_DATABASE";

/// Whether this test process runs its control planes on PostgreSQL.
pub fn backend_is_postgres() -> bool {
    match std::env::var(BACKEND_ENV).as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Ok("") | Err(_) => false,
        Ok(other) => panic!("{BACKEND_ENV}={other}: give postgres or sqlite"),
    }
}

static SHARED: std::sync::OnceLock<std::sync::Mutex<Option<Cluster>>> = std::sync::OnceLock::new();

extern "C" fn stop_shared_cluster() {
    if let Some(shared) = SHARED.get() {
        // Dropping stops postgres and removes its directory.
        drop(shared.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

/// A new empty database in this process's shared cluster (started at the first call and
/// stopped when the process exits), when [`backend_is_postgres`]; else None.
#[track_caller]
pub fn database_for_env() -> Option<String> {
    if !backend_is_postgres() {
        return None;
    }
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let shared = SHARED.get_or_init(|| {
        let bin = super::require_postgres().unwrap_or_else(|| {
            panic!("{BACKEND_ENV}=postgres needs PostgreSQL: run scripts/install-postgres.sh")
        });
        // SAFETY: registers a plain function without arguments to run at exit.
        unsafe { libc::atexit(stop_shared_cluster) };
        std::sync::Mutex::new(Some(Cluster::start_in(bin)))
    });
    let guard = shared.lock().unwrap_or_else(|p| p.into_inner());
    let cluster = guard.as_ref().expect("the shared cluster is running");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("env{n}");
    cluster.create_database(&name);
    // Over the unix socket: a sandbox may run its yy in a network namespace of its own,
    // where 127.0.0.1 is not this host's.
    Some(format!(
        "host={} port={} user={USER} dbname={name}",
        cluster.socket_dir().display(),
        cluster.port()
    ))
}

/// Runs `sql` on the database at `url` with the simple query protocol (every value comes
/// back as text) and returns the rows.
pub fn simple_query(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        tokio::spawn(connection);
        let messages = client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    })
}
