//! The Runner's link to the Hermes on its machine: how to reach it (runner.json), a lazily
//! (re)connected gateway client, and the channel: the Hermes sessions this Runner created,
//! the only ones it lists or operates.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use super::browser::ManagedBrowser;
use super::config::RunnerConfig;
use super::tool_tap::{Subscription, ToolTap};
use crate::api::capabilities;
use crate::hermes::{
    HermesAccess, HermesAuth, HermesClient, HermesError, Supervisor, SupervisorOptions,
};
use crate::timefmt::now_ms;

/// Capabilities a Runner with a usable Hermes declares.
pub const SESSION_CAPABILITIES: [&str; 2] =
    [capabilities::SESSION_TURN, capabilities::SESSION_STOP];

pub struct HermesLink {
    access: Result<HermesAccess, String>,
    client: tokio::sync::Mutex<Option<Arc<HermesClient>>>,
    /// A Hermes this Runner started itself (runner.json `hermesCommand`); stopped on drop.
    _supervisor: Option<Supervisor>,
    /// Live output of the supervised Hermes's commands (none for a Hermes of its own).
    tool_tap: Option<ToolTap>,
    pub channel: Channel,
    /// Sessions with a turn running here, and whether a stop was asked for meanwhile.
    turns: Mutex<std::collections::HashMap<String, bool>>,
}

impl HermesLink {
    /// Builds the link from runner.json; in supervised mode, starts Hermes now.
    pub async fn new(
        config: &RunnerConfig,
        data_dir: &Path,
        browser: Option<&Arc<ManagedBrowser>>,
    ) -> Result<HermesLink, String> {
        let channel = Channel::open(data_dir).map_err(|e| format!("channel store: {e}"))?;
        let mut supervisor = None;
        let mut tool_tap = None;
        let access = if let Some(command) = &config.hermes_command {
            let home = config
                .hermes_home
                .clone()
                .unwrap_or_else(|| data_dir.join("hermes-home"));
            crate::fsutil::create_private_dir(&home)
                .map_err(|e| format!("cannot create {}: {e}", home.display()))?;
            // Without the tap, commands still run; only their live output is missing.
            tool_tap = ToolTap::start(data_dir)
                .inspect_err(|e| tracing::warn!(error = %e, "no live tool output: the tool tap did not start"))
                .ok();
            let mut env = tool_tap
                .as_ref()
                .map(ToolTap::hermes_env)
                .unwrap_or_default();
            // Installed with the browser off too: its tools then say so, and Hermes's own
            // browser tools (which would browse around yy's egress proxy) stay replaced.
            super::browser::install_hermes_plugin(&home)?;
            if let Some(b) = browser {
                env.push((
                    super::browser::SOCKET_ENV.into(),
                    b.socket_path().display().to_string(),
                ));
            }
            let options = SupervisorOptions {
                env,
                ..SupervisorOptions::default()
            };
            let (access, sup) = Supervisor::start_with(command.clone(), home, options)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(b) = browser {
                b.serve_hermes(sup.pid());
            }
            tracing::info!(
                pid = sup.pid(),
                port = sup.port(),
                "started a supervised Hermes"
            );
            supervisor = Some(sup);
            Ok(access)
        } else {
            let auth = if let Some(file) = &config.hermes_token_file {
                Some(HermesAuth::TokenFile(file.clone()))
            } else {
                config
                    .hermes_credentials
                    .clone()
                    .map(HermesAuth::Credentials)
            };
            match auth {
                Some(auth) => Ok(HermesAccess::new(
                    &config.hermes_url,
                    auth,
                    config.allow_insecure_lan,
                )
                .map_err(|e| e.to_string())?),
                None => Err(
                    "runner.json names no way to reach Hermes: set hermesTokenFile (loopback), hermesCommand (supervised) or hermesCredentials (see docs/hermes.md)"
                        .to_string(),
                ),
            }
        };
        Ok(HermesLink {
            access,
            client: tokio::sync::Mutex::new(None),
            _supervisor: supervisor,
            tool_tap,
            channel,
            turns: Mutex::default(),
        })
    }

    /// Marks a turn of `session` as running here.
    pub fn turn_started(&self, session: &str) {
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string(), false);
    }

    pub fn turn_ended(&self, session: &str) {
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }

    /// Records a stop for `session`'s running turn (one that may not have reached Hermes yet).
    pub fn request_stop(&self, session: &str) {
        if let Some(flag) = self
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(session)
        {
            *flag = true;
        }
    }

    pub fn stop_requested(&self, session: &str) -> bool {
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .copied()
            .unwrap_or(false)
    }

    /// Hermes's stored id of live session `hermes_session_id` (empty when unknown).
    pub fn stored_id(&self, hermes_session_id: &str) -> String {
        self.channel
            .stored_id(hermes_session_id)
            .unwrap_or_default()
    }

    /// The live output of the commands of Hermes session `hermes_session_id` (and its
    /// stored id), while the subscription lives; `None` for a Hermes the Runner did not
    /// start.
    pub fn tap_output(&self, hermes_session_id: &str) -> Option<Subscription> {
        let tap = self.tool_tap.as_ref()?;
        let stored = self
            .channel
            .stored_id(hermes_session_id)
            .unwrap_or_default();
        Some(tap.subscribe(&[hermes_session_id, &stored]))
    }

    /// Where the Hermes this Runner started listens (none: Hermes runs on its own).
    pub fn supervised_url(&self) -> Option<String> {
        self._supervisor
            .as_ref()
            .map(|s| format!("http://127.0.0.1:{}", s.port()))
    }

    pub fn configured(&self) -> bool {
        self.access.is_ok()
    }

    /// A connected client, connecting (and checking the version) when needed.
    pub async fn client(&self) -> Result<Arc<HermesClient>, HermesError> {
        let access = self
            .access
            .as_ref()
            .map_err(|e| HermesError::Config(e.clone()))?;
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_connected()) {
            return Ok(c.clone());
        }
        let client = Arc::new(HermesClient::connect(access).await?);
        *slot = Some(client.clone());
        Ok(client)
    }
}

/// The Hermes sessions of this Runner's channel, in SQLite under its data directory.
pub struct Channel {
    conn: Mutex<Connection>,
}

impl Channel {
    fn open(dir: &Path) -> rusqlite::Result<Channel> {
        let path: PathBuf = dir.join("channel.db");
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS channel_sessions (
                hermes_session_id TEXT PRIMARY KEY,
                session_id        TEXT NOT NULL,
                stored_session_id TEXT NOT NULL,
                created_at        INTEGER NOT NULL,
                closed_at         INTEGER
            );",
        )?;
        Ok(Channel {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, hermes: &str, session: &str, stored: &str) -> rusqlite::Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO channel_sessions (hermes_session_id, session_id, stored_session_id, created_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![hermes, session, stored, now_ms()],
        )?;
        Ok(())
    }

    /// The control plane session that owns `hermes`, if this channel created it.
    pub fn owner(&self, hermes: &str) -> Option<String> {
        self.conn()
            .query_row(
                "SELECT session_id FROM channel_sessions WHERE hermes_session_id = ?1",
                [hermes],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten()
    }

    /// Hermes's stored id (for its REST API) of a session of this channel.
    pub fn stored_id(&self, hermes: &str) -> Option<String> {
        self.conn()
            .query_row(
                "SELECT stored_session_id FROM channel_sessions WHERE hermes_session_id = ?1",
                [hermes],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten()
    }

    pub fn mark_closed(&self, hermes: &str) {
        let _ = self.conn().execute(
            "UPDATE channel_sessions SET closed_at = ?2 WHERE hermes_session_id = ?1",
            params![hermes, now_ms()],
        );
    }
}
