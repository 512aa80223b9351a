//! Each agent's browser context: its Chromium (on the agent's persistent profile) behind
//! its own paused-or-open proxy, opened on first use and given back by itself. A turn (or
//! a takeover) opens the network for its duration; when it ends, the network pauses. A
//! context nobody used for the idle time is closed; looking at it (its state, a screenshot
//! for a watcher) does not count as use. Closing never removes the profile; removing the
//! agent does.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::network::Network;
use super::{Browser, BrowserError, LaunchOptions, profile_dir};
use crate::egress::proxy::{ProxyConfig, Resolver};

/// A context unused this long is closed.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);
/// Contexts open at once on one Runner; opening one more is refused, saying why.
pub const MAX_OPEN: usize = 16;

/// One agent's open context.
pub struct Context {
    pub browser: Browser,
    pub network: Network,
    last_used: Mutex<Instant>,
}

impl Context {
    /// Counts as use: the idle clock starts again.
    pub fn used(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// When it was last used.
    pub fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a Runner's contexts are made.
pub struct Settings {
    /// `false`: the managed browser is off on this Runner.
    pub enabled: bool,
    pub launch: LaunchOptions,
    pub proxy: ProxyConfig,
    pub resolver: Arc<dyn Resolver>,
    /// The Runner's data directory: profiles live under `browser/profiles/`.
    pub data_dir: PathBuf,
    pub idle: Duration,
}

pub struct Contexts {
    settings: Settings,
    open: tokio::sync::Mutex<HashMap<String, Arc<Context>>>,
}

impl Contexts {
    pub fn new(settings: Settings) -> Contexts {
        Contexts {
            settings,
            open: tokio::sync::Mutex::default(),
        }
    }

    /// `agent`'s context, opened (network paused) when it has none. Counts as use.
    pub async fn get_or_open(&self, agent: &str) -> Result<Arc<Context>, BrowserError> {
        if !self.settings.enabled {
            return Err(BrowserError::Page(
                "the managed browser is off on this Runner (browser.enabled is false)".into(),
            ));
        }
        let mut open = self.open.lock().await;
        if let Some(c) = open.get(agent) {
            c.used();
            return Ok(c.clone());
        }
        if open.len() >= MAX_OPEN {
            return Err(BrowserError::Page(format!(
                "this Runner has {MAX_OPEN} browser contexts open, its limit; one closes after {:?} unused",
                self.settings.idle
            )));
        }
        let network = Network::start(self.settings.proxy.clone(), self.settings.resolver.clone())
            .await
            .map_err(|e| BrowserError::Page(format!("cannot start the browser's proxy: {e}")))?;
        network.pause();
        let mut launch = self.settings.launch.clone();
        launch.proxy = Some(network.proxy_url().to_string());
        let profile = profile_dir(&self.settings.data_dir, agent);
        let browser = Browser::launch(&launch, &profile).await?;
        let context = Arc::new(Context {
            browser,
            network,
            last_used: Mutex::new(Instant::now()),
        });
        open.insert(agent.to_string(), context.clone());
        tracing::info!(%agent, "browser context opened");
        Ok(context)
    }

    /// A turn or takeover of `agent` begins: its network opens.
    pub async fn authorize(&self, agent: &str) -> Result<Arc<Context>, BrowserError> {
        let context = self.get_or_open(agent).await?;
        context.network.resume();
        Ok(context)
    }

    /// The turn or takeover ended: the network pauses (the context stays).
    pub async fn end_use(&self, agent: &str) {
        if let Some(c) = self.open.lock().await.get(agent) {
            c.network.pause();
        }
    }

    /// `agent`'s context if open, without counting as use (state, a watcher's screenshot).
    pub async fn peek(&self, agent: &str) -> Option<Arc<Context>> {
        self.open.lock().await.get(agent).cloned()
    }

    /// Closes `agent`'s context (explicit close, a temporary session's end, a lost
    /// connection, a revoked permission); its profile stays. Whether one was open.
    pub async fn close(&self, agent: &str) -> bool {
        let closed = self.open.lock().await.remove(agent);
        if let Some(c) = &closed {
            c.browser.kill();
            tracing::info!(%agent, "browser context closed");
        }
        closed.is_some()
    }

    /// Closes every context (the Runner lost its control plane); how many were open.
    pub async fn close_all(&self) -> usize {
        let closed: Vec<(String, Arc<Context>)> = self.open.lock().await.drain().collect();
        for (agent, c) in &closed {
            c.browser.kill();
            tracing::info!(%agent, "browser context closed");
        }
        closed.len()
    }

    /// How many contexts are open.
    pub async fn open_count(&self) -> usize {
        self.open.lock().await.len()
    }

    /// Closes every context unused for the idle time; returns their agents.
    pub async fn reclaim_idle(&self) -> Vec<String> {
        self.reclaim_idle_at(Instant::now()).await
    }

    /// [`Contexts::reclaim_idle`] as if it were `now`.
    pub async fn reclaim_idle_at(&self, now: Instant) -> Vec<String> {
        let mut open = self.open.lock().await;
        let idle: Vec<String> = open
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.last_used()) >= self.settings.idle)
            .map(|(a, _)| a.clone())
            .collect();
        for agent in &idle {
            if let Some(c) = open.remove(agent) {
                c.browser.kill();
            }
            tracing::info!(%agent, idle = ?self.settings.idle, "browser context reclaimed");
        }
        idle
    }

    /// The agent is removed: its context closes and its profile goes.
    pub async fn remove_agent(&self, agent: &str) -> std::io::Result<()> {
        self.close(agent).await;
        let profile = profile_dir(&self.settings.data_dir, agent);
        // Chromium's processes were killed; the kernel may still be ending them, and a
        // file they had open can reappear once: a few tries.
        let mut tries = 0;
        loop {
            match std::fs::remove_dir_all(&profile) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(_) if tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                r => return r,
            }
        }
    }
}
