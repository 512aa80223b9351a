//! The Runner's computers: the Docker provider, a bounded pool with reservations, durable
//! fences (a smaller fence is always refused), and reconciliation of containers left by an
//! earlier run of this Runner.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use crate::api::computers::{ComputerRef, ExecPayload, StartPayload, StartResult};
use crate::computer::docker::Provider;
use crate::computer::protocol::ExecParams;
use crate::computer::session::GuestSession;
use crate::computer::{ComputerSpec, GuestNetwork, Limits, labels, validate_image_id};
use crate::egress::NetworkMode;
use crate::egress::docker::{Egress, EgressOptions};

/// How many computers may run at once by default (the setting takes 1-8).
pub const DEFAULT_MAX_RUNNING: u32 = 2;
/// How long a container gets to stop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// A stop that fails is retried this often while its reservation is kept.
const STOP_RETRY: Duration = Duration::from_secs(5);

pub struct Computers {
    provider: Provider,
    runner_id: String,
    data_dir: PathBuf,
    max_running: u32,
    limits: Limits,
    db: Mutex<Connection>,
    /// Computers holding a pool slot (running, starting, or with an unconfirmed stop).
    reserved: Mutex<HashSet<String>>,
    guests: tokio::sync::Mutex<HashMap<String, Arc<GuestSession>>>,
    /// The egress proxy and the networks of `public-web` computers.
    egress: Egress,
    /// The connection generation, recorded in container labels.
    pub generation: Mutex<i64>,
}

type Outcome = Result<serde_json::Value, String>;

impl Computers {
    /// Connects to Docker; `None` (with the reason) when this host cannot run computers.
    pub async fn new(
        runner_id: &str,
        data_dir: &Path,
        max_running: u32,
        egress: EgressOptions,
    ) -> Result<Computers, String> {
        let provider = Provider::connect().await.map_err(|e| e.to_string())?;
        let egress = Egress::new(provider.docker().clone(), runner_id, egress);
        let db = Connection::open(data_dir.join("computers.db")).map_err(|e| e.to_string())?;
        db.busy_timeout(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        db.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| e.to_string())?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS computers (
                computer_id  TEXT PRIMARY KEY,
                fence        INTEGER NOT NULL,
                container_id TEXT
            );",
        )
        .map_err(|e| e.to_string())?;
        Ok(Computers {
            provider,
            runner_id: runner_id.to_string(),
            data_dir: data_dir.to_path_buf(),
            max_running,
            limits: Limits::default(),
            db: Mutex::new(db),
            reserved: Mutex::default(),
            guests: tokio::sync::Mutex::default(),
            egress,
            generation: Mutex::new(0),
        })
    }

    pub fn capacity(&self) -> u32 {
        self.max_running
    }

    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `fence` for the computer: only a strictly greater fence takes it over.
    fn take_fence(&self, computer: &str, fence: i64) -> Result<Option<String>, String> {
        let db = self.db();
        let current: Option<(i64, Option<String>)> = db
            .query_row(
                "SELECT fence, container_id FROM computers WHERE computer_id = ?1",
                [computer],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| e.to_string())?;
        if let Some((held, _)) = &current
            && fence <= *held
        {
            return Err(format!(
                "stale fence {fence} for computer {computer}: fence {held} holds it now; refused"
            ));
        }
        db.execute(
            "INSERT INTO computers (computer_id, fence) VALUES (?1, ?2)
             ON CONFLICT(computer_id) DO UPDATE SET fence = ?2",
            params![computer, fence],
        )
        .map_err(|e| e.to_string())?;
        Ok(current.and_then(|(_, c)| c))
    }

    fn set_container(&self, computer: &str, container: Option<&str>) {
        let _ = self.db().execute(
            "UPDATE computers SET container_id = ?2 WHERE computer_id = ?1",
            params![computer, container],
        );
    }

    /// The fence must be exactly the current one (operations inside a lease).
    fn check_current(&self, computer: &str, fence: i64) -> Result<String, String> {
        let row: Option<(i64, Option<String>)> = self
            .db()
            .query_row(
                "SELECT fence, container_id FROM computers WHERE computer_id = ?1",
                [computer],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| e.to_string())?;
        match row {
            Some((held, Some(container))) if held == fence => Ok(container),
            Some((held, _)) if held != fence => Err(format!(
                "stale fence {fence} for computer {computer}: fence {held} holds it now; refused"
            )),
            _ => Err(format!("computer {computer} is not running on this Runner")),
        }
    }

    fn workspace(&self, computer: &str) -> PathBuf {
        self.data_dir.join("workspaces").join(computer)
    }

    /// Removes containers of this Runner left from an earlier run: after a restart every
    /// lease has ended (a new connection generation), so they are orphans. Returns how many.
    pub async fn reconcile(&self) -> Result<usize, String> {
        let found = self
            .provider
            .list_for_runner(&self.runner_id)
            .await
            .map_err(|e| e.to_string())?;
        for c in &found {
            tracing::warn!(container = %c.id, name = %c.name, computer = ?c.labels.get(labels::COMPUTER), "removing an orphan computer container");
            self.provider
                .remove(&c.id)
                .await
                .map_err(|e| e.to_string())?;
        }
        // Their networks and the proxy go too; the next public-web start makes new ones.
        self.egress.reconcile().await.map_err(|e| e.to_string())?;
        let _ = self
            .db()
            .execute("UPDATE computers SET container_id = NULL", []);
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.guests.lock().await.clear();
        Ok(found.len())
    }

    /// Creates and starts the computer under `fence`; an earlier container is removed first
    /// and never reused. The pool slot is reserved before anything starts.
    pub async fn start(&self, payload: serde_json::Value) -> Outcome {
        let p: StartPayload =
            serde_json::from_value(payload).map_err(|e| format!("malformed payload: {e}"))?;
        validate_image_id(&p.image_id).map_err(|e| e.to_string())?;
        let old = self.take_fence(&p.computer_id, p.fence)?;
        {
            let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            if !reserved.contains(&p.computer_id) {
                if reserved.len() as u32 >= self.max_running {
                    return Err(format!(
                        "this Runner's pool is full: {} of {} computers are running; stop one first (`yy computer stop`)",
                        reserved.len(),
                        self.max_running
                    ));
                }
                reserved.insert(p.computer_id.clone());
            }
        }
        let result = self.recreate(&p, old).await;
        if result.is_err() {
            self.release(&p.computer_id);
        }
        result
    }

    async fn recreate(&self, p: &StartPayload, old: Option<String>) -> Outcome {
        self.guests.lock().await.remove(&p.computer_id);
        if let Some(old) = old {
            self.provider
                .remove(&old)
                .await
                .map_err(|e| e.to_string())?;
            self.set_container(&p.computer_id, None);
        }
        // A network of an earlier public-web lease is never reused.
        let network = match p.network {
            NetworkMode::None => {
                self.egress
                    .detach(&p.computer_id)
                    .await
                    .map_err(|e| e.to_string())?;
                GuestNetwork::None
            }
            NetworkMode::PublicWeb => self
                .egress
                .attach(&p.computer_id, &p.image_id)
                .await
                .map_err(|e| format!("cannot set up the egress network: {e}"))?,
        };
        let spec = ComputerSpec {
            owner_key: p.owner_key.clone(),
            runner_id: self.runner_id.clone(),
            computer_id: p.computer_id.clone(),
            agent_id: p.agent_id.clone(),
            account_id: p.account_id.clone(),
            image_id: p.image_id.clone(),
            generation: (*self.generation.lock().unwrap_or_else(|e| e.into_inner())).max(0) as u64,
            workspace_host_dir: self.workspace(&p.computer_id),
            guest_cwd: p.guest_cwd.clone(),
            limits: self.limits.clone(),
            network,
        };
        // A container under the owner's name from an earlier lease goes first.
        let _ = self.provider.remove(&spec.name()).await;
        let launched = self.provider.launch(&spec).await;
        if let GuestNetwork::Egress { network, .. } = &spec.network {
            let bound = match &launched {
                Ok((created, _)) => self
                    .egress
                    .bind_client(&p.computer_id, &created.id, network)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = bound {
                if let Ok((created, _)) = &launched {
                    let _ = self.provider.remove(&created.id).await;
                }
                let _ = self.egress.detach(&p.computer_id).await;
                return Err(e);
            }
        }
        let (created, guest) = launched.map_err(|e| e.to_string())?;
        self.set_container(&p.computer_id, Some(&created.id));
        self.guests
            .lock()
            .await
            .insert(p.computer_id.clone(), Arc::new(guest));
        serde_json::to_value(StartResult {
            container_id: created.id,
            name: created.name,
            resources: serde_json::to_value(&self.limits).unwrap_or_default(),
        })
        .map_err(|e| e.to_string())
    }

    fn release(&self, computer: &str) {
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(computer);
    }

    /// Stops the computer and removes its container; the workspace stays unless
    /// `delete_workspace`. A stop that cannot be confirmed keeps the reservation and is
    /// retried in the background.
    pub async fn stop(self: &Arc<Self>, payload: serde_json::Value) -> Outcome {
        let p: ComputerRef =
            serde_json::from_value(payload).map_err(|e| format!("malformed payload: {e}"))?;
        let container = self.take_fence(&p.computer_id, p.fence)?;
        self.guests.lock().await.remove(&p.computer_id);
        if let Some(container) = container {
            if let Err(e) = self.stop_container(&container).await {
                let me = self.clone();
                let (computer, container) = (p.computer_id.clone(), container.clone());
                tokio::spawn(async move { me.retry_stop(computer, container).await });
                return Err(format!(
                    "the stop was not confirmed ({e}); the reservation is kept and the stop retried"
                ));
            }
            self.set_container(&p.computer_id, None);
        }
        if let Err(e) = self.egress.detach(&p.computer_id).await {
            tracing::warn!(computer = %p.computer_id, error = %e, "could not remove the computer's egress network");
        }
        self.release(&p.computer_id);
        if p.delete_workspace {
            let ws = self.workspace(&p.computer_id);
            if ws.exists() {
                std::fs::remove_dir_all(&ws)
                    .map_err(|e| format!("cannot delete the workspace: {e}"))?;
            }
            let _ = self.db().execute(
                "DELETE FROM computers WHERE computer_id = ?1 AND fence <= ?2",
                params![p.computer_id, p.fence],
            );
        }
        Ok(json!({ "stopped": true, "workspace_deleted": p.delete_workspace }))
    }

    async fn stop_container(&self, container: &str) -> Result<(), String> {
        self.provider
            .stop(container, STOP_GRACE)
            .await
            .map_err(|e| e.to_string())?;
        self.provider
            .remove(container)
            .await
            .map_err(|e| e.to_string())
    }

    async fn retry_stop(self: Arc<Self>, computer: String, container: String) {
        for attempt in 1..=60 {
            tokio::time::sleep(STOP_RETRY).await;
            match self.stop_container(&container).await {
                Ok(()) => {
                    tracing::info!(%computer, attempt, "an earlier unconfirmed stop is now done");
                    self.set_container(&computer, None);
                    let _ = self.egress.detach(&computer).await;
                    self.release(&computer);
                    return;
                }
                Err(e) => {
                    tracing::warn!(%computer, attempt, error = %e, "stop still not confirmed")
                }
            }
        }
    }

    /// An admin diagnostic through the guest agent, under the computer's current fence.
    pub async fn exec(&self, payload: serde_json::Value) -> Outcome {
        let p: ExecPayload =
            serde_json::from_value(payload).map_err(|e| format!("malformed payload: {e}"))?;
        let container = self.check_current(&p.computer_id, p.fence)?;
        let guest = self.guest(&p.computer_id, &container).await?;
        let result = guest
            .exec(
                ExecParams {
                    argv: Some(p.argv),
                    timeout_ms: p.timeout_ms,
                    output_cap_bytes: p.output_cap_bytes,
                    ..ExecParams::default()
                },
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(result).map_err(|e| e.to_string())
    }

    async fn guest(&self, computer: &str, container: &str) -> Result<Arc<GuestSession>, String> {
        let mut guests = self.guests.lock().await;
        if let Some(g) = guests.get(computer).filter(|g| !g.is_closed()) {
            return Ok(g.clone());
        }
        let g = Arc::new(
            self.provider
                .guest(container)
                .await
                .map_err(|e| e.to_string())?,
        );
        guests.insert(computer.to_string(), g.clone());
        Ok(g)
    }
}
