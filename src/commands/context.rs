//! Where the CLI finds its server and token: `YY_SERVER` / `YY_TOKEN`, else the login stored
//! by `yy login` in `$XDG_CONFIG_HOME/yy/login.json` (mode 0600).

use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::api::client::Client;
use crate::error::{CliError, Exit};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredLogin {
    pub server: String,
    pub username: String,
    pub token: String,
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

/// The server URL and token the CLI should use: flags, then environment, then the login.
pub fn credentials() -> anyhow::Result<(String, Option<String>)> {
    let stored = load_login()?;
    let server = SERVER_FLAG
        .get()
        .cloned()
        .flatten()
        .or_else(|| env("YY_SERVER"))
        .or_else(|| stored.as_ref().map(|l| l.server.clone()));
    let Some(server) = server else {
        return Err(not_logged_in().into());
    };
    let server = server.trim_end_matches('/').to_string();
    // A stored token is only sent to the server it was issued by.
    let token = env("YY_TOKEN").or_else(|| {
        stored
            .filter(|l| l.server.trim_end_matches('/') == server)
            .map(|l| l.token)
    });
    Ok((server, token))
}

fn not_logged_in() -> CliError {
    CliError::new(
        Exit::Auth,
        "not logged in: run `yy login URL --username NAME`, or set YY_SERVER and YY_TOKEN",
    )
}

/// A client for the admin API with the current credentials; fails when there is no token.
pub fn client() -> anyhow::Result<Client> {
    let (server, token) = credentials()?;
    if token.is_none() {
        return Err(not_logged_in().into());
    }
    Ok(Client::new(&server, token)?)
}
