//! Where the CLI finds its server and token: `YY_SERVER` / `YY_TOKEN`, else the login stored
//! by `yy login` in `$XDG_CONFIG_HOME/yy/login.json` (mode 0600).

use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::{CliError, Exit};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredLogin {
    pub server: String,
    pub username: String,
    pub token: String,
    /// The server's self-signed certificate, trusted at login (SHA-256, hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
    /// Other replicas of the same server (one database, one certificate), tried in order
    /// when `server` cannot be reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
}

impl StoredLogin {
    /// The login's server, then its replicas, without a final `/`.
    fn servers(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.server)
            .chain(&self.replicas)
            .map(|s| s.trim_end_matches('/'))
    }

    /// True when `server` is this login's server or one of its replicas.
    pub fn serves(&self, server: &str) -> bool {
        let server = server.trim_end_matches('/');
        self.servers().any(|s| s == server)
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn xdg(var: &str, fallback: &str) -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(var).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    home()
        .map(|h| h.join(fallback))
        .ok_or_else(|| CliError::failure(format!("neither {var} nor HOME is set")).into())
}

pub fn config_dir() -> anyhow::Result<PathBuf> {
    Ok(xdg("XDG_CONFIG_HOME", ".config")?.join("yy"))
}

pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    Ok(xdg("XDG_DATA_HOME", ".local/share")?.join("yy"))
}

pub fn login_path() -> anyhow::Result<PathBuf> {
    Ok(config_dir()?.join("login.json"))
}

pub fn load_login() -> anyhow::Result<Option<StoredLogin>> {
    let path = login_path()?;
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{} is damaged; remove it and run `yy login` again",
                path.display()
            )
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

pub fn save_login(login: &StoredLogin) -> anyhow::Result<PathBuf> {
    let dir = config_dir()?;
    crate::fsutil::create_private_dir(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = login_path()?;
    let data = serde_json::to_vec_pretty(login)?;
    crate::fsutil::write_atomic(&path, &data, 0o600)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

pub fn forget_login() -> anyhow::Result<()> {
    let path = login_path()?;
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

static SERVER_FLAG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Records `--server`, which wins over `YY_SERVER` and the stored login.
pub fn set_server_flag(server: Option<String>) {
    let _ = SERVER_FLAG.set(server);
}

/// Where the server came from and what login there is, for errors that say what to do.
struct Resolved {
    server: String,
    token: Option<String>,
    /// The certificate pinned for the server: `YY_CERT_SHA256`, else the stored login's.
    pin: Option<String>,
    /// `--server` or `YY_SERVER` named the server (not the stored login).
    from: Option<&'static str>,
    /// The server the stored login is for, if any.
    stored_server: Option<String>,
    /// The stored login's other replicas, when it serves `server`.
    replicas: Vec<String>,
}

fn resolve() -> anyhow::Result<Resolved> {
    let stored = load_login()?;
    let flag = SERVER_FLAG.get().cloned().flatten();
    let (server, from) = match (flag, env("YY_SERVER")) {
        (Some(s), _) => (Some(s), Some("--server")),
        (None, Some(s)) => (Some(s), Some("YY_SERVER")),
        (None, None) => (stored.as_ref().map(|l| l.server.clone()), None),
    };
    let Some(server) = server else {
        return Err(not_logged_in().into());
    };
    let server = server.trim_end_matches('/').to_string();
    let stored_server = stored
        .as_ref()
        .map(|l| l.server.trim_end_matches('/').to_string());
    // A stored token (and pin) only ever serves the server it was issued by (any of its
    // replicas).
    let same = stored.filter(|l| l.serves(&server));
    let replicas = same
        .iter()
        .flat_map(StoredLogin::servers)
        .filter(|s| *s != server)
        .map(str::to_string)
        .collect();
    let pin = match env("YY_CERT_SHA256") {
        Some(p) => Some(
            crate::api::tls::parse_fingerprint(&p)
                .map_err(|e| CliError::usage(format!("YY_CERT_SHA256: {e}")))?,
        ),
        None => same.as_ref().and_then(|l| l.cert_sha256.clone()),
    };
    let token = env("YY_TOKEN").or_else(|| same.map(|l| l.token));
    Ok(Resolved {
        server,
        token,
        pin,
        from,
        stored_server,
        replicas,
    })
}

fn not_logged_in() -> CliError {
    CliError::new(
        Exit::Auth,
        "not logged in: run `yy login URL --username NAME`, or set YY_SERVER and YY_TOKEN",
    )
}

/// No token for a server named by `--server` or `YY_SERVER`: say which server, and that
/// the stored login (if any) is for another one.
fn no_login_for(r: &Resolved, from: &str) -> CliError {
    let server = &r.server;
    let stored = match &r.stored_server {
        Some(other) => format!("; the stored login is for {other}"),
        None => String::new(),
    };
    CliError::new(
        Exit::Auth,
        format!(
            "no login for {server} (from {from}){stored}: run `yy login {server} --username NAME`, or set YY_TOKEN"
        ),
    )
}

/// The server the CLI talks to, with its token and pin, as [`client`] would use them.
pub struct Target {
    pub server: String,
    pub token: Option<String>,
    pub pin: Option<String>,
    /// `--server`, `YY_SERVER` or `the stored login`.
    pub from: &'static str,
}

/// The current [`Target`], or none when no server is named anywhere (`yy doctor`).
pub fn target() -> anyhow::Result<Option<Target>> {
    let named = SERVER_FLAG.get().cloned().flatten().is_some() || env("YY_SERVER").is_some();
    if !named && load_login()?.is_none() {
        return Ok(None);
    }
    let r = resolve()?;
    Ok(Some(Target {
        server: r.server,
        token: r.token,
        pin: r.pin,
        from: r.from.unwrap_or("the stored login"),
    }))
}

/// A client for the admin API with the current credentials; fails when there is no token.
pub fn client() -> anyhow::Result<Client> {
    let r = resolve()?;
    if r.token.is_none() {
        return Err(match r.from {
            Some(from) => no_login_for(&r, from),
            None => not_logged_in(),
        }
        .into());
    }
    Ok(Client::pinned(&r.server, r.token, r.pin.as_deref())?.with_replicas(&r.replicas)?)
}
