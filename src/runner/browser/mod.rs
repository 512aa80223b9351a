//! The managed browser of host agents on the Runner (docs/browser.md). A host agent's model
//! calls Hermes's browser tools; in the Hermes this Runner starts, a plugin
//! ([`hermes_plugin`]) sends each call over a unix socket ([`tap`]) with the Hermes session
//! it belongs to. A call is served only while a turn of that session runs here and the
//! control plane granted that turn its agent's browser (`TurnPayload::browser`): then the
//! agent's context ([`crate::browser::contexts`]) opens, or its network resumes, and the
//! action runs ([`tools`]). When the turn ends the network pauses; an ended turn's grant
//! never carries over.

mod hermes_plugin;
mod takeover;
mod tap;
mod tools;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api::views::{BrowserConfig, BrowserInstall};
use crate::browser::contexts::{Context, Contexts, Settings};
use crate::browser::{BrowserError, LaunchOptions};
use crate::egress::proxy::{ProxyConfig, SystemResolver};

pub use hermes_plugin::install as install_hermes_plugin;
pub use tap::SOCKET_ENV;

/// Where Debian's package puts Chromium.
const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";
/// An install of Chromium may take this long.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(15 * 60);

pub struct ManagedBrowser {
    contexts: Contexts,
    exe: PathBuf,
    install: BrowserInstall,
    /// Hermes session ids (live and stored) of the turns running now with a browser
    /// grant, and the agent whose browser each may use.
    grants: Mutex<HashMap<String, String>>,
    /// The supervised Hermes: the only process the socket serves.
    hermes_pid: OnceLock<u32>,
    /// One install at a time.
    installing: tokio::sync::Mutex<()>,
    socket: tap::Socket,
    /// Per agent: the model's browser calls pass it shared, an operator's takeover holds
    /// it ([`takeover`]).
    gates: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
    holds: Mutex<HashMap<String, takeover::Hold>>,
    /// Handback notes for the agent's next browser call.
    notes: Mutex<HashMap<String, String>>,
    screens: Mutex<HashMap<String, takeover::Screen>>,
}

/// Whether runner.json keeps the managed browser on.
pub fn enabled(config: Option<&BrowserConfig>) -> bool {
    config.and_then(|c| c.enabled).unwrap_or(true)
}

/// The first `chromium` on PATH, else Debian's path (where an install puts it).
pub fn find_chromium() -> PathBuf {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("chromium"))
        .find(|p| p.is_absolute() && p.is_file())
        .unwrap_or_else(|| PathBuf::from(DEBIAN_CHROMIUM))
}

impl ManagedBrowser {
    /// The service and its socket under `data_dir/browser`; contexts close after `idle`
    /// unused.
    pub fn start(
        config: Option<&BrowserConfig>,
        data_dir: &Path,
        idle: Duration,
    ) -> std::io::Result<Arc<ManagedBrowser>> {
        let exe = find_chromium();
        let settings = Settings {
            enabled: true,
            launch: LaunchOptions::new(exe.clone()),
            // The host's own addresses are refused by the proxy itself.
            proxy: ProxyConfig::default(),
            resolver: Arc::new(SystemResolver),
            data_dir: data_dir.to_path_buf(),
            idle,
        };
        let socket = tap::Socket::bind(data_dir)?;
        let browser = Arc::new(ManagedBrowser {
            contexts: Contexts::new(settings),
            exe,
            install: config
                .and_then(|c| c.install)
                .unwrap_or(BrowserInstall::Auto),
            grants: Mutex::default(),
            hermes_pid: OnceLock::new(),
            installing: tokio::sync::Mutex::new(()),
            socket,
            gates: Mutex::default(),
            holds: Mutex::default(),
            notes: Mutex::default(),
            screens: Mutex::default(),
        });
        tap::listen(browser.clone());
        tracing::info!(chromium = %browser.exe.display(), idle = ?idle, "managed browser ready");
        Ok(browser)
    }

    /// The socket's path, for Hermes's environment.
    pub fn socket_path(&self) -> &Path {
        self.socket.path()
    }

    /// The supervised Hermes's process: from now on the socket serves it alone.
    pub fn serve_hermes(&self, pid: u32) {
        let _ = self.hermes_pid.set(pid);
    }

    /// A turn of the Hermes session known by `ids` may use `agent`'s browser until the
    /// grant is dropped; then the context's network pauses.
    pub fn grant(self: &Arc<Self>, ids: &[&str], agent: &str) -> TurnGrant {
        let ids: Vec<String> = ids
            .iter()
            .filter(|i| !i.is_empty())
            .map(|i| i.to_string())
            .collect();
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        for id in &ids {
            grants.insert(id.clone(), agent.to_string());
        }
        TurnGrant {
            browser: self.clone(),
            ids,
            agent: agent.to_string(),
        }
    }

    /// The agent a call of these Hermes session ids may use the browser of.
    fn granted(&self, session: &str, session_key: &str) -> Option<String> {
        let grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        [session, session_key]
            .into_iter()
            .filter(|k| !k.is_empty())
            .find_map(|k| grants.get(k).cloned())
    }

    /// `agent`'s context for a granted call: Chromium installed when missing (and
    /// allowed), the context opened, its network open.
    async fn authorize(&self, agent: &str) -> Result<Arc<Context>, BrowserError> {
        self.ensure_chromium().await?;
        self.contexts.authorize(agent).await
    }

    async fn ensure_chromium(&self) -> Result<(), BrowserError> {
        if self.exe.is_file() {
            return Ok(());
        }
        let _one = self.installing.lock().await;
        if self.exe.is_file() {
            return Ok(());
        }
        // SAFETY: geteuid(2) has no arguments and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let apt = Path::new("/usr/bin/apt-get").is_file();
        may_install(self.install, root, apt).map_err(|why| missing(&self.exe, why))?;
        tracing::warn!(
            "Chromium is missing: installing Debian's chromium package (browser.install is auto)"
        );
        install_chromium().await.map_err(BrowserError::Page)?;
        if !self.exe.is_file() {
            return Err(BrowserError::Page(format!(
                "the chromium package installed, but {} is still missing",
                self.exe.display()
            )));
        }
        tracing::info!(chromium = %self.exe.display(), "Chromium installed");
        Ok(())
    }

    /// Closes `agent`'s context (`browser.close`); with `remove_profile` its profile goes
    /// too. Whether a context was open.
    pub async fn close(&self, agent: &str, remove_profile: bool) -> std::io::Result<bool> {
        if remove_profile {
            let open = self.contexts.peek(agent).await.is_some();
            self.contexts.remove_agent(agent).await?;
            Ok(open)
        } else {
            Ok(self.contexts.close(agent).await)
        }
    }

    /// The connection to the control plane was lost: every context closes (their grants
    /// came through it).
    pub async fn close_all(&self) -> usize {
        self.contexts.close_all().await
    }

    /// Closes contexts unused for the idle time, until `stop`.
    pub async fn reclaim_forever(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            self.contexts.reclaim_idle().await;
        }
    }

    /// Agents whose context is open now.
    pub async fn open_contexts(&self) -> usize {
        self.contexts.open_count().await
    }
}

/// Whether a missing Chromium may be installed on this host, or why not.
pub fn may_install(install: BrowserInstall, root: bool, apt: bool) -> Result<(), &'static str> {
    match (install, root, apt) {
        (BrowserInstall::Never, _, _) => {
            Err("runner.json has \"browser\": {\"install\": \"never\"}")
        }
        (_, false, _) => Err("the Runner does not run as root"),
        (_, _, false) => Err("this host has no apt-get"),
        (BrowserInstall::Auto, true, true) => Ok(()),
    }
}

/// The refusal of a first use when Chromium is missing and cannot be installed.
fn missing(exe: &Path, why: &str) -> BrowserError {
    BrowserError::Page(format!(
        "Chromium is not installed on this Runner's host ({} is missing) and {why}: run `apt-get install chromium` there as root",
        exe.display()
    ))
}

async fn install_chromium() -> Result<(), String> {
    let run = |args: &'static [&'static str]| async move {
        let out = tokio::time::timeout(
            INSTALL_TIMEOUT,
            tokio::process::Command::new("/usr/bin/apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(std::process::Stdio::null())
                .output(),
        )
        .await
        .map_err(|_| format!("apt-get {} took longer than {INSTALL_TIMEOUT:?}", args[0]))?
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(format!(
            "apt-get {} failed ({}): {}",
            args[0],
            out.status,
            crate::browser::printable(last, 300)
        ))
    };
    if run(&["install", "-y", "--no-install-recommends", "chromium"])
        .await
        .is_err()
    {
        // Package lists may be missing or stale on a fresh host.
        run(&["update"]).await?;
        run(&["install", "-y", "--no-install-recommends", "chromium"]).await?;
    }
    Ok(())
}

/// A running turn's use of its agent's browser; ends with it.
pub struct TurnGrant {
    browser: Arc<ManagedBrowser>,
    ids: Vec<String>,
    agent: String,
}

impl Drop for TurnGrant {
    fn drop(&mut self) {
        {
            let mut grants = self
                .browser
                .grants
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for id in &self.ids {
                if grants.get(id) == Some(&self.agent) {
                    grants.remove(id);
                }
            }
        }
        // The network pauses now; the context stays for the next turn.
        let (browser, agent) = (self.browser.clone(), std::mem::take(&mut self.agent));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { browser.contexts.end_use(&agent).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_chromium_is_installed_only_when_allowed_and_possible() {
        assert_eq!(may_install(BrowserInstall::Auto, true, true), Ok(()));
        for (install, root, apt, why) in [
            (BrowserInstall::Never, true, true, "install\": \"never"),
            (BrowserInstall::Auto, false, true, "not run as root"),
            (BrowserInstall::Auto, true, false, "no apt-get"),
        ] {
            let e = may_install(install, root, apt).unwrap_err();
            assert!(e.contains(why), "{e}");
            let shown = missing(Path::new("/usr/bin/chromium"), e).to_string();
            assert!(
                shown.contains("/usr/bin/chromium is missing")
                    && shown.contains("run `apt-get install chromium`"),
                "{shown}"
            );
        }
    }

    #[test]
    fn the_browser_is_on_unless_runner_json_turns_it_off() {
        assert!(enabled(None));
        assert!(enabled(Some(&BrowserConfig::default())));
        let off = BrowserConfig {
            enabled: Some(false),
            install: None,
        };
        assert!(!enabled(Some(&off)));
        let parsed: BrowserConfig =
            serde_json::from_str(r#"{"enabled": true, "install": "never"}"#).unwrap();
        assert_eq!(parsed.install, Some(BrowserInstall::Never));
        assert!(serde_json::from_str::<BrowserConfig>(r#"{"install": "sometimes"}"#).is_err());
    }
}
