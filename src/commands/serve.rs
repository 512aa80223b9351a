//! `yy serve`: the control plane.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::error::CliError;
use crate::server::store::commands::QueueLimits;
use crate::server::tls::{ServerTls, TlsSource};
use crate::server::{self, AppState, ConnLimits, ServerConfig};

#[derive(Debug, Args)]
#[command(after_help = "\
Data retention: finished Runner commands (with their results) and the events of finished \
turns are deleted once they are older than --retention; a turn keeps its final text, usage \
and error. Results larger than 64 KiB are dropped a minute after they were first delivered. \
The database file gives the freed space back as it goes.")]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the first stdout line tells which)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8420")]
    pub listen: SocketAddr,
    /// Data directory holding the database [default: $XDG_DATA_HOME/yy]
    #[arg(long, value_name = "DIR", env = "YY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub database: super::database::DatabaseArgs,
    /// Keep artifact bytes as files in DIR [default: with --database, in the PostgreSQL
    /// database, which every replica serves from; else DATA_DIR/artifacts]. With several
    /// replicas, a directory they all mount (NFS, a shared volume)
    #[arg(long, value_name = "DIR", env = "YY_BLOB_DIR")]
    pub blob_dir: Option<PathBuf>,
    /// With --database: how the other replicas reach this one (an operator's shell relay
    /// crosses from the replica a Runner is connected to into this one) [default: the
    /// listen address, or this host's name when listening on every address]
    #[arg(long, value_name = "URL", env = "YY_PEER_URL")]
    pub peer_url: Option<String>,
    /// Most commands that may wait in one Runner's queue
    #[arg(long, value_name = "N", default_value_t = QueueLimits::default().max_pending,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_commands: u32,
    /// Most bytes of payload that may wait in one Runner's queue
    #[arg(long, value_name = "BYTES", default_value_t = QueueLimits::default().max_pending_bytes,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_pending_bytes: u64,
    /// A host name the server answers to besides its listen address (repeatable); requests
    /// naming another host, and admin requests from another origin, are refused
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// Longest wait for a request's headers; also closes a keep-alive connection idle
    /// this long
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = positive_duration)]
    pub header_timeout: Duration,
    /// Longest time a request body may take to arrive
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = positive_duration)]
    pub body_timeout: Duration,
    /// Most connections open at once [default: from the open-file limit, raised to its
    /// hard limit at start; never more than that limit leaves room for]. At the cap the
    /// connection idle longest is closed for a new one
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Longest wait for requests in flight on SIGTERM before they are cut
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// An API token unused for this long stops working; each use extends it
    #[arg(long, value_name = "DURATION", default_value = "30days", value_parser = positive_duration)]
    pub token_lifetime: Duration,
    /// How long finished commands and the events of finished turns are kept
    #[arg(long, value_name = "DURATION", default_value = "30days", value_parser = positive_duration)]
    pub retention: Duration,
    /// A Runner token works this long after it was issued; the Runner renews it over the
    /// machine API at 75 % of it (a Runner offline past the whole lifetime must be
    /// registered again)
    #[arg(long, value_name = "DURATION", default_value = "30days", value_parser = positive_duration)]
    pub runner_token_lifetime: Duration,
    /// Serve HTTPS with this certificate (PEM, the server's first, then its chain); with
    /// --tls-key. SIGHUP reads both files again
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, SEC1 or PKCS#1)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// `self-signed`: serve HTTPS with a certificate made on first start and kept in
    /// DATA_DIR/tls (mode 0600); its SHA-256 fingerprint is printed at every start, and
    /// `yy runner register` pins it in runner.json
    #[arg(long, value_name = "MODE", value_enum)]
    pub tls: Option<TlsMode>,
    /// Allow plain HTTP on an address other than loopback (tokens and passwords then cross
    /// the network readable; a warning is logged at every start and shown by `yy status`)
    #[arg(long)]
    pub insecure_http: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    /// A certificate made by the server for itself
    SelfSigned,
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be longer than zero".into()),
        Ok(d) if d > Duration::from_secs(100 * 365 * 24 * 3600) => {
            Err("must be at most 100 years".into())
        }
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let data_dir = match args.data_dir.clone() {
        Some(d) => d,
        None => super::context::default_data_dir()?,
    };
    // Held until the server stops: a restore of this directory is refused meanwhile.
    let _lock = super::backup::enter_data_dir(&data_dir)?;
    crate::fsutil::create_private_dir(&data_dir)
        .map_err(|e| CliError::failure(format!("cannot create {}: {e}", data_dir.display())))?;
    // One server per data directory: two would both schedule, sweep and settle one
    // database. Exit 6 names the one running.
    let mut instance = super::instance::hold(&data_dir, super::instance::SERVE_LOCK, "yy serve")?;
    limit_retained_memory();
    let nofile = server::conn::raise_nofile_limit()
        .map_err(|e| CliError::failure(format!("cannot read the open-file limit: {e}")))?;
    let (tls, warnings) = tls_setup(&args, &data_dir)?;
    let store = args.database.open(data_dir.clone()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::failure(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    instance.describe(&format!("listening on {scheme}://{addr}"))?;
    let shutdown = shutdown_signal()?;
    crate::output::print(&format!("listening on {scheme}://{addr}"))?;
    if let Some(tls) = &tls {
        let fingerprint = tls.fingerprint();
        crate::output::print(&format!("certificate SHA-256 {fingerprint}"))?;
        tracing::info!(sha256 = %fingerprint, "serving HTTPS");
        tokio::spawn(reload_on_hangup(tls.clone())?);
    }

    // Never more than the open-file limit allows: a connection past it would fail to be
    // accepted (EMFILE) and take the server's own files down with it.
    let fits = server::conn::connections_for(nofile);
    let max_connections = match args.max_connections {
        Some(n) if n as usize > fits => {
            tracing::warn!(
                asked = n,
                using = fits,
                nofile,
                "--max-connections is more than the open-file limit leaves room for; using the most that fits"
            );
            fits
        }
        Some(n) => n as usize,
        None => fits,
    };
    let peer_url = match args.database.database {
        Some(_) => Some(peer_url(args.peer_url.as_deref(), scheme, addr)?),
        None => None,
    };
    // The other replicas name this one as its peer URL says.
    let mut allowed_hosts = args.allowed_hosts.clone();
    if let Some(host) = peer_url
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_string))
    {
        allowed_hosts.push(host);
    }
    tracing::info!(%addr, data_dir = %data_dir.display(), version = crate::VERSION,
        database = %args.database.describe(&data_dir), max_connections, nofile, "serving");
    let config = ServerConfig {
        queue: QueueLimits {
            max_pending: args.max_pending_commands,
            max_pending_bytes: args.max_pending_bytes,
        },
        conn: ConnLimits {
            header_timeout: args.header_timeout,
            body_timeout: args.body_timeout,
            max_connections,
            shutdown_grace: args.shutdown_grace,
        },
        allowed_hosts: server::hosts::AllowedHosts::new(addr, &allowed_hosts),
        token_lifetime: args.token_lifetime,
        retention: args.retention,
        tls,
        warnings,
        runner_token_lifetime: args.runner_token_lifetime,
        database_url: args.database.postgres_url()?.map(str::to_owned),
        peer_url,
    };
    let files = artifact_files(&args, &data_dir)?;
    tracing::info!("artifact bytes are kept in {}", files.blobs().describe());
    let (state, stop) = AppState::new(store, config, files);
    server::serve(listener, state, stop, shutdown)
        .await
        .context("serving")?;
    tracing::info!("stopped");
    drop(instance);
    Ok(())
}

/// Where artifact bytes are kept: `--blob-dir` when given; else in the PostgreSQL database
/// (every replica then serves every artifact), or with SQLite in `DATA_DIR/artifacts`.
fn artifact_files(
    args: &ServeArgs,
    data_dir: &std::path::Path,
) -> Result<server::artifacts::ArtifactFiles, CliError> {
    let dir = match (&args.blob_dir, args.database.database.is_some()) {
        (Some(dir), _) => dir.clone(),
        (None, true) => {
            let old = data_dir.join("artifacts");
            let left = std::fs::read_dir(&old).map_or(0, |d| d.count());
            if left > 0 {
                tracing::warn!(
                    "{} holds {left} artifact files from before: artifact bytes are kept in the database now, and those are not served; start with --blob-dir {} to serve them",
                    old.display(),
                    old.display()
                );
            }
            return Ok(server::artifacts::ArtifactFiles::in_database());
        }
        (None, false) => data_dir.join("artifacts"),
    };
    server::artifacts::ArtifactFiles::open_at(dir.clone()).map_err(|e| {
        CliError::failure(format!(
            "cannot create the artifact directory {}: {e}",
            dir.display()
        ))
    })
}

/// How the other replicas reach this one: `--peer-url` (checked), else the listen address
/// (this host's name in place of a wildcard address).
fn peer_url(given: Option<&str>, scheme: &str, addr: SocketAddr) -> Result<String, CliError> {
    if let Some(url) = given {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| CliError::usage(format!("--peer-url {url:?}: {e}")))?;
        if parsed.scheme() != scheme || parsed.host().is_none() || parsed.path() != "/" {
            return Err(CliError::usage(format!(
                "--peer-url {url} must be {scheme}://HOST:PORT (this replica serves {scheme})"
            )));
        }
        return Ok(url.trim_end_matches('/').to_string());
    }
    let host = match addr.ip() {
        ip if ip.is_unspecified() => crate::sys::hostname(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    Ok(format!("{scheme}://{host}:{}", addr.port()))
}

/// The certificate to serve with, if any, and the warnings of an insecure setup. Plain
/// HTTP on an address other than loopback is refused without --insecure-http.
fn tls_setup(
    args: &ServeArgs,
    data_dir: &std::path::Path,
) -> anyhow::Result<(Option<Arc<ServerTls>>, Vec<String>)> {
    let source = match (&args.tls_cert, &args.tls_key, args.tls) {
        (Some(cert), Some(key), _) => Some(TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (_, _, Some(TlsMode::SelfSigned)) => Some(TlsSource::SelfSigned {
            dir: data_dir.join("tls"),
            names: server::tls::self_signed_names(args.listen, &args.allowed_hosts),
        }),
        _ => None,
    };
    let mut warnings = Vec::new();
    let Some(source) = source else {
        if !args.listen.ip().is_loopback() {
            if !args.insecure_http {
                return Err(CliError::usage(format!(
                    "--listen {} is not a loopback address and no TLS is set: passwords and tokens would cross the network readable; add --tls self-signed (or --tls-cert FILE --tls-key FILE), or --insecure-http if this network is trusted",
                    args.listen
                ))
                .into());
            }
            warnings.push(format!(
                "serving plain HTTP on {} (--insecure-http): passwords and tokens cross the network readable",
                args.listen
            ));
        }
        return Ok((None, warnings));
    };
    if args.insecure_http {
        return Err(CliError::usage("--insecure-http and TLS exclude each other: drop one").into());
    }
    let tls = ServerTls::load(&source).map_err(|e| CliError::usage(e.to_string()))?;
    Ok((Some(tls), warnings))
}

/// Reads the certificate files again at each SIGHUP; a bad file is logged and the
/// certificate in use stays.
fn reload_on_hangup(
    tls: Arc<ServerTls>,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    Ok(async move {
        while hup.recv().await.is_some() {
            match tls.reload() {
                Ok(sha256) => tracing::info!(%sha256, "certificate reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "certificate not reloaded; the one in use stays")
                }
            }
        }
    })
}

/// Large blocks (a password check takes 19 MiB) go straight back to the system when freed.
/// glibc otherwise raises its mmap threshold after the first such free and keeps later
/// blocks in per-thread arenas, so a burst of logins left gigabytes resident.
fn limit_retained_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any other thread
    // allocates large blocks.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Completes on SIGINT or SIGTERM. The handlers are in place once this returns (call it
/// before telling anyone the process is ready), so an early signal is never fatal.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down: finishing requests in flight");
    })
}
