//! The Runner's computers: the Docker provider, a bounded pool with reservations, durable
//! fences (a smaller fence is always refused), and reconciliation of containers left by an
//! earlier run of this Runner.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use crate::api::computers::NetworkMode;
use crate::api::computers::{ComputerRef, ExecPayload, StartPayload, StartResult};
use crate::computer::docker::Provider;
use crate::computer::engine::Engine;
use crate::computer::protocol::ExecParams;
use crate::computer::session::GuestSession;
use crate::computer::{
    ComputerError, ComputerSpec, GuestNetwork, Limits, labels, validate_image_id,
};
use crate::egress::docker::{Egress, EgressOptions};

use crate::computer::workspaces::{WorkspaceError, Workspaces};

mod warm;
pub use warm::{DEFAULT_WARM, MAX_WARM};

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
    /// A pool slot was given back: whoever waits for one looks again.
    slot_freed: tokio::sync::Notify,
    guests: tokio::sync::Mutex<HashMap<String, Arc<GuestSession>>>,
    /// Which images are desktop images, by full image ID.
    desktop_images: Mutex<HashMap<String, bool>>,
    /// The egress proxy and the networks of `public-web` computers.
    egress: Egress,
    /// The connection generation, recorded in container labels.
    pub generation: Mutex<i64>,
    /// Models paused by an operator's takeover.
    pub pauses: super::pauses::Pauses,
    /// The computers' workspaces, with their size limit.
    workspaces: Arc<Workspaces>,
    /// Containers started before any agent needs one ([`warm`]).
    warm: warm::Warm,
}

/// Why a computer operation on this Runner failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Computer(#[from] ComputerError),
    #[error("the Runner's computer records: {0}")]
    Records(#[from] rusqlite::Error),
    #[error("stale fence {fence} for computer {computer}: fence {held} holds it now; refused")]
    StaleFence {
        computer: String,
        fence: i64,
        held: i64,
    },
    #[error("computer {0} is not running on this Runner")]
    NotRunning(String),
    #[error(
        "this Runner's pool is full: {running} of {} running; stop one first (`yy computer stop`)",
        crate::api::words::plural(.max, "computer", "computers")
    )]
    PoolFull { running: usize, max: u32 },
    #[error("the stop was not confirmed ({0}); the reservation is kept and the stop retried")]
    StopUnconfirmed(ComputerError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("cannot encode the result: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Egress(String),
}

type Outcome = Result<serde_json::Value, PoolError>;

impl Computers {
    /// Connects to Docker; `None` (with the reason) when this host cannot run computers.
    pub async fn new(
        runner_id: &str,
        data_dir: &Path,
        max_running: u32,
        egress: EgressOptions,
        engine: Option<Engine>,
        workspace_limit: Option<u64>,
        warm_computers: u32,
    ) -> Result<Computers, PoolError> {
        let provider = Provider::connect_to(engine).await?;
        provider.check_engine().await?;
        let egress = Egress::new(provider.docker().clone(), runner_id, egress);
        let db = Connection::open(data_dir.join("computers.db"))?;
        db.busy_timeout(Duration::from_secs(5))?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS computers (
                computer_id  TEXT PRIMARY KEY,
                fence        INTEGER NOT NULL,
                container_id TEXT
            );
            -- What the current container was made from: a lease on the same image and
            -- path may keep it (background programs keep running).
            -- Stops that could not be confirmed: retried until they are, across restarts,
            -- and their pool slots stay taken meanwhile.
            CREATE TABLE IF NOT EXISTS pending_stops (
                container_id TEXT PRIMARY KEY,
                computer_id  TEXT NOT NULL,
                since        INTEGER NOT NULL
            );
            CREATE TABLE IF NOT EXISTS container_specs (
                computer_id TEXT PRIMARY KEY,
                image_id    TEXT NOT NULL,
                guest_cwd   TEXT NOT NULL,
                network     TEXT NOT NULL
            );",
        )?;
        Ok(Computers {
            provider,
            runner_id: runner_id.to_string(),
            data_dir: data_dir.to_path_buf(),
            max_running,
            limits: Limits::default(),
            db: Mutex::new(db),
            reserved: Mutex::default(),
            slot_freed: tokio::sync::Notify::new(),
            guests: tokio::sync::Mutex::default(),
            desktop_images: Mutex::default(),
            pauses: Default::default(),
            egress,
            generation: Mutex::new(0),
            workspaces: Arc::new(Workspaces::new(data_dir, workspace_limit)),
            warm: warm::Warm::new(data_dir, warm_computers),
        })
    }

    pub fn workspaces(&self) -> &Workspaces {
        &self.workspaces
    }

    /// Runs `f` on the workspaces off the async threads (it mounts, copies, allocates).
    async fn on_workspaces<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Workspaces) -> T + Send + 'static,
    ) -> T {
        let w = self.workspaces.clone();
        tokio::task::spawn_blocking(move || f(&w))
            .await
            .expect("a workspace task does not panic")
    }

    /// What the computer's workspace takes now (none before its first start).
    pub async fn workspace_usage(
        &self,
        computer: &str,
    ) -> Option<crate::api::computers::WorkspaceUsage> {
        let id = computer.to_string();
        self.on_workspaces(move |w| w.usage(&id)).await
    }

    pub fn capacity(&self) -> u32 {
        self.max_running
    }

    /// Computers holding a pool slot now (warm ones too).
    pub fn slots_held(&self) -> usize {
        self.reserved.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Warm computers ready to be claimed now.
    pub fn warm_ready(&self) -> usize {
        self.warm.ready()
    }

    /// Warm computers this Runner keeps (`--warm-computers`; none on Podman).
    pub fn warm_target(&self) -> u32 {
        if self.provider.engine().engine == Engine::Docker {
            self.warm.target() as u32
        } else {
            0
        }
    }

    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// Whether `public-web` computers can run here; the reason when they cannot.
    pub fn public_web(&self) -> Result<(), &'static str> {
        match self.provider.engine().engine {
            Engine::Docker => Ok(()),
            Engine::Podman => Err(crate::computer::engine::PODMAN_NO_PUBLIC_WEB),
        }
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `fence` for the computer: only a strictly greater fence takes it over.
    fn take_fence(&self, computer: &str, fence: i64) -> Result<Option<String>, PoolError> {
        let db = self.db();
        let current: Option<(i64, Option<String>)> = db
            .query_row(
                "SELECT fence, container_id FROM computers WHERE computer_id = ?1",
                [computer],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((held, _)) = current
            && fence <= held
        {
            return Err(PoolError::StaleFence {
                computer: computer.into(),
                fence,
                held,
            });
        }
        db.execute(
            "INSERT INTO computers (computer_id, fence) VALUES (?1, ?2)
             ON CONFLICT(computer_id) DO UPDATE SET fence = ?2",
            params![computer, fence],
        )?;
        Ok(current.and_then(|(_, c)| c))
    }

    fn set_container(&self, computer: &str, container: Option<&str>) {
        let _ = self.db().execute(
            "UPDATE computers SET container_id = ?2 WHERE computer_id = ?1",
            params![computer, container],
        );
    }

    /// The fence must be exactly the current one (operations inside a lease).
    fn check_current(&self, computer: &str, fence: i64) -> Result<String, PoolError> {
        let row: Option<(i64, Option<String>)> = self
            .db()
            .query_row(
                "SELECT fence, container_id FROM computers WHERE computer_id = ?1",
                [computer],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match row {
            Some((held, Some(container))) if held == fence => Ok(container),
            Some((held, _)) if held != fence => Err(PoolError::StaleFence {
                computer: computer.into(),
                fence,
                held,
            }),
            _ => Err(PoolError::NotRunning(computer.into())),
        }
    }

    fn workspace(&self, computer: &str) -> PathBuf {
        self.workspaces.dir(computer)
    }

    /// Removes containers of this Runner left from an earlier run: after a restart every
    /// lease has ended (a new connection generation), so they are orphans. Returns how many.
    pub async fn reconcile(&self) -> Result<usize, PoolError> {
        let found = self.provider.list_for_runner(&self.runner_id).await?;
        for c in &found {
            tracing::warn!(container = %c.id, name = %c.name, computer = c.labels.get(labels::COMPUTER).map(String::as_str).unwrap_or("-"), "removing an orphan computer container");
            self.provider.remove(&c.id).await?;
        }
        // Warm computers were among them: their slots go before the workspaces they hold.
        self.warm.clear_all().await;
        // Their networks and the proxy go too; the next public-web start makes new ones.
        self.egress.reconcile().await?;
        // Their workspaces are unmounted (and their space given back) until started again.
        let released = self.on_workspaces(|w| w.release_all()).await;
        if released > 0 {
            tracing::info!(released, "released the workspaces of removed containers");
        }
        let _ = self
            .db()
            .execute("UPDATE computers SET container_id = NULL", []);
        {
            // Every lease ended; only unconfirmed stops keep their slots.
            let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            reserved.clear();
            reserved.extend(self.pending_stop_computers());
        }
        self.slot_freed.notify_waiters();
        self.guests.lock().await.clear();
        Ok(found.len())
    }

    /// At the Runner's stop: its warm computers go ([`Computers::close_warm`]), and so do
    /// its computers' containers, found in its own records (the engine's labels would also
    /// name a new instance's after a takeover), with their slots and workspace mounts; the
    /// workspaces stay. Their leases end with this Runner's connection: the next start
    /// would remove them anyway, and until then nothing supervises what runs in them.
    /// Egress networks are named by computer, not by instance, so they wait for the next
    /// start's reconcile.
    pub async fn close(self: &Arc<Self>) {
        self.close_warm().await;
        let held: Vec<(String, String)> = {
            let db = self.db();
            let rows = db
                .prepare("SELECT computer_id, container_id FROM computers WHERE container_id IS NOT NULL")
                .and_then(|mut s| {
                    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<Vec<_>, _>>()
                });
            rows.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read which computers this Runner holds; the next start removes them");
                Vec::new()
            })
        };
        self.guests.lock().await.clear();
        for (computer, container) in held {
            tracing::info!(%computer, %container, "removing a computer's container: the Runner stops (its workspace stays)");
            if let Err(e) = self.provider.remove(&container).await {
                tracing::warn!(%computer, error = %e, "could not remove the computer's container; the next start does");
                continue;
            }
            self.set_container(&computer, None);
            self.unslot(&computer).await;
        }
        self.on_workspaces(|w| w.release_all()).await;
    }

    /// Creates and starts the computer under `fence`; an earlier container is removed first
    /// and never reused. A full pool is waited for (the command's deadline bounds it).
    pub async fn start(self: &Arc<Self>, p: StartPayload) -> Outcome {
        let (started, _) = self.ensure(&p, false, &|_| {}).await?;
        Ok(serde_json::to_value(started)?)
    }

    /// The computer under the lease `p` (a strictly greater fence), with its guest agent.
    /// With `reuse`, a running container made from the same image and path is kept, so that
    /// background programs live on between turns; otherwise, or when it is gone, it is
    /// recreated (workspace kept). A full pool is waited for; `waiting` hears why, once.
    pub async fn ensure(
        self: &Arc<Self>,
        p: &StartPayload,
        reuse: bool,
        waiting: &(dyn Fn(String) + Sync),
    ) -> Result<(StartResult, Arc<GuestSession>), PoolError> {
        validate_image_id(&p.image_id)?;
        let old = self.take_fence(&p.computer_id, p.fence)?;
        if reuse
            && let Some(container) = &old
            && self.same_spec(p)
            && let Ok(guest) = self.guest(&p.computer_id, container).await
            && guest.version().await.is_ok()
        {
            let started = StartResult {
                container_id: container.clone(),
                name: self.spec(p, GuestNetwork::None).name(),
                resources: serde_json::to_value(&self.limits).unwrap_or_default(),
            };
            return Ok((started, guest));
        }
        // A warm computer brings its pool slot along.
        let warm = self.take_warm(p).await;
        if warm.is_none() {
            self.reserve(&p.computer_id, waiting).await;
        }
        let result = self.recreate(p, old, warm).await;
        if result.is_err() {
            self.release(&p.computer_id);
        } else {
            tokio::spawn(self.clone().fill_warm());
        }
        result
    }

    /// Takes a pool slot for `computer`, waiting while every slot is taken.
    async fn reserve(&self, computer: &str, waiting: &(dyn Fn(String) + Sync)) {
        let mut told = false;
        loop {
            let freed = self.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
                if reserved.contains(computer) || (reserved.len() as u32) < self.max_running {
                    reserved.insert(computer.to_string());
                    return;
                }
            }
            // Warm computers give their slots up first.
            if self.yield_warm(computer).await {
                return;
            }
            {
                let reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
                if !told {
                    told = true;
                    let full = PoolError::PoolFull {
                        running: reserved.len(),
                        max: self.max_running,
                    };
                    tracing::info!(%computer, "{full}; waiting for a free slot");
                    waiting(format!("waiting for a free computer slot: {full}"));
                }
            }
            freed.await;
        }
    }

    fn spec(&self, p: &StartPayload, network: GuestNetwork) -> ComputerSpec {
        ComputerSpec {
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
        }
    }

    fn same_spec(&self, p: &StartPayload) -> bool {
        self.db()
            .query_row(
                "SELECT 1 FROM container_specs
                 WHERE computer_id = ?1 AND image_id = ?2 AND guest_cwd = ?3 AND network = ?4",
                params![p.computer_id, p.image_id, p.guest_cwd, p.network.as_str()],
                |_| Ok(()),
            )
            .is_ok()
    }

    async fn recreate(
        &self,
        p: &StartPayload,
        old: Option<String>,
        warm: Option<warm::Ready>,
    ) -> Result<(StartResult, Arc<GuestSession>), PoolError> {
        self.guests.lock().await.remove(&p.computer_id);
        if let Some(old) = old {
            self.provider.remove(&old).await?;
            self.set_container(&p.computer_id, None);
        }
        self.unslot(&p.computer_id).await;
        // A network of an earlier public-web lease is never reused.
        let network = match p.network {
            NetworkMode::None => {
                self.egress
                    .detach(&p.computer_id)
                    .await
                    .map_err(|e| PoolError::Egress(e.to_string()))?;
                GuestNetwork::None
            }
            NetworkMode::PublicWeb => {
                self.public_web()
                    .map_err(|why| PoolError::Egress(why.to_string()))?;
                self.egress
                    .attach(&p.computer_id, &p.image_id)
                    .await
                    .map_err(|e| {
                        PoolError::Egress(format!("cannot set up the egress network: {e}"))
                    })?
            }
        };
        let mut spec = self.spec(p, network);
        if self.is_desktop(&p.image_id).await {
            spec.limits = Limits::desktop();
        }
        // A container under the owner's name from an earlier lease goes first.
        let _ = self.provider.remove(&spec.name()).await;
        // The workspace, with its limit, before a container mounts it.
        let id = p.computer_id.clone();
        if let Err(e) = self.on_workspaces(move |w| w.prepare(&id)).await {
            if matches!(spec.network, GuestNetwork::Egress { .. }) {
                let _ = self.egress.detach(&p.computer_id).await;
            }
            return Err(e.into());
        }
        if let Some(r) = warm {
            match self.claim_warm(p, &spec, r).await {
                Ok((started, guest)) => {
                    let guest = self.record(p, &started.container_id, guest).await;
                    return Ok((started, guest));
                }
                Err(e) => {
                    tracing::warn!(computer = %p.computer_id, error = %e, "could not claim a warm computer; starting one cold");
                }
            }
        }
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
                return Err(PoolError::Egress(e));
            }
        }
        let (created, guest) = launched?;
        let guest = self.record(p, &created.id, guest).await;
        let started = StartResult {
            container_id: created.id,
            name: created.name,
            resources: serde_json::to_value(&spec.limits).unwrap_or_default(),
        };
        Ok((started, guest))
    }

    /// Records `container` as `p`'s computer, made from `p`'s spec, with its guest session.
    async fn record(
        &self,
        p: &StartPayload,
        container: &str,
        guest: GuestSession,
    ) -> Arc<GuestSession> {
        self.set_container(&p.computer_id, Some(container));
        let _ = self.db().execute(
            "INSERT INTO container_specs (computer_id, image_id, guest_cwd, network)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(computer_id) DO UPDATE SET image_id = ?2, guest_cwd = ?3, network = ?4",
            params![p.computer_id, p.image_id, p.guest_cwd, p.network.as_str()],
        );
        let guest = Arc::new(guest);
        self.guests
            .lock()
            .await
            .insert(p.computer_id.clone(), guest.clone());
        guest
    }

    /// The guest agent of a computer under its current fence (a turn's tools).
    pub async fn guest_under(
        &self,
        computer: &str,
        fence: i64,
    ) -> Result<Arc<GuestSession>, PoolError> {
        let container = self.check_current(computer, fence)?;
        self.guest(computer, &container).await
    }

    fn release(&self, computer: &str) {
        self.reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(computer);
        self.slot_freed.notify_waiters();
    }

    /// Stops the computer and removes its container; the workspace stays unless
    /// `delete_workspace`. A stop that cannot be confirmed keeps the reservation and is
    /// retried in the background.
    pub async fn stop(self: &Arc<Self>, p: ComputerRef) -> Outcome {
        let container = self.take_fence(&p.computer_id, p.fence)?;
        self.guests.lock().await.remove(&p.computer_id);
        if let Some(container) = container {
            if let Err(e) = self.stop_container(&container).await {
                self.db().execute(
                    "INSERT OR IGNORE INTO pending_stops (container_id, computer_id, since)
                     VALUES (?1, ?2, ?3)",
                    params![container, p.computer_id, crate::timefmt::now_ms()],
                )?;
                let me = self.clone();
                let (computer, container) = (p.computer_id.clone(), container.clone());
                tokio::spawn(async move { me.retry_stop(computer, container).await });
                return Err(PoolError::StopUnconfirmed(e));
            }
            self.set_container(&p.computer_id, None);
            self.unslot(&p.computer_id).await;
        }
        if let Err(e) = self.egress.detach(&p.computer_id).await {
            tracing::warn!(computer = %p.computer_id, error = %e, "could not remove the computer's egress network");
        }
        // The workspace before the slot: a start waiting for the slot mounts it again.
        let id = p.computer_id.clone();
        if p.delete_workspace {
            let deleted = self.on_workspaces(move |w| w.delete(&id)).await;
            self.release(&p.computer_id);
            deleted?;
            let _ = self.db().execute(
                "DELETE FROM computers WHERE computer_id = ?1 AND fence <= ?2",
                params![p.computer_id, p.fence],
            );
        } else {
            // No container uses it now: its free space goes back to the host.
            self.on_workspaces(move |w| w.release(&id)).await;
            self.release(&p.computer_id);
        }
        Ok(json!({ "stopped": true, "workspace_deleted": p.delete_workspace }))
    }

    /// Stops and removes a container; one that is already gone is stopped.
    async fn stop_container(&self, container: &str) -> Result<(), ComputerError> {
        let gone = |r: Result<(), ComputerError>| match r {
            Err(ComputerError::NotFound(_)) => Ok(()),
            other => other,
        };
        gone(self.provider.stop(container, STOP_GRACE).await)?;
        gone(self.provider.remove(container).await)
    }

    /// Retries an unconfirmed stop until it is done (or the Runner stops; the next start
    /// takes it up again).
    async fn retry_stop(self: Arc<Self>, computer: String, container: String) {
        let mut attempt = 0u32;
        loop {
            tokio::time::sleep(STOP_RETRY).await;
            attempt += 1;
            match self.stop_container(&container).await {
                Ok(()) => {
                    tracing::info!(%computer, attempt, "an earlier unconfirmed stop is now done");
                    let _ = self.db().execute(
                        "DELETE FROM pending_stops WHERE container_id = ?1",
                        [&container],
                    );
                    self.set_container(&computer, None);
                    self.unslot(&computer).await;
                    let _ = self.egress.detach(&computer).await;
                    let id = computer.clone();
                    self.on_workspaces(move |w| w.release(&id)).await;
                    self.release(&computer);
                    return;
                }
                Err(e) => {
                    tracing::warn!(%computer, attempt, error = %e, "stop still not confirmed")
                }
            }
        }
    }

    fn pending_stop_computers(&self) -> Vec<String> {
        let db = self.db();
        let Ok(mut stmt) = db.prepare("SELECT computer_id FROM pending_stops") else {
            return Vec::new();
        };
        stmt.query_map([], |r| r.get(0))
            .map(|rows| rows.flatten().collect())
            .unwrap_or_default()
    }

    /// Takes up the unconfirmed stops an earlier run of this Runner recorded: each keeps
    /// its pool slot until its container is confirmed gone.
    pub fn resume_pending_stops(self: &Arc<Self>) -> usize {
        let pending: Vec<(String, String)> = {
            let db = self.db();
            let Ok(mut stmt) = db.prepare("SELECT computer_id, container_id FROM pending_stops")
            else {
                return 0;
            };
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map(|rows| rows.flatten().collect())
                .unwrap_or_default()
        };
        for (computer, container) in &pending {
            self.reserved
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(computer.clone());
            let me = self.clone();
            let (computer, container) = (computer.clone(), container.clone());
            tokio::spawn(async move { me.retry_stop(computer, container).await });
        }
        pending.len()
    }

    /// An admin diagnostic through the guest agent, under the computer's current fence.
    pub async fn exec(&self, p: ExecPayload) -> Outcome {
        let guest = self.guest_under(&p.computer_id, p.fence).await?;
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
            .await?;
        Ok(serde_json::to_value(result)?)
    }

    /// The container of a computer under its current fence (the operator's shell).
    pub fn container_under(&self, computer: &str, fence: i64) -> Result<String, PoolError> {
        self.check_current(computer, fence)
    }

    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The spec of a throw-away acceptance computer of `image`: this Runner's production
    /// hardening and labels (so that a restart's reconcile removes one left behind), its
    /// own temporary workspace under the data dir, no network.
    pub(super) fn acceptance_spec(&self, image: &str, run: &str, desktop: bool) -> ComputerSpec {
        ComputerSpec {
            owner_key: format!("accept/{run}"),
            runner_id: self.runner_id.clone(),
            computer_id: format!("accept-{run}"),
            agent_id: "accept".into(),
            account_id: "accept".into(),
            image_id: image.into(),
            generation: (*self.generation.lock().unwrap_or_else(|e| e.into_inner())).max(0) as u64,
            workspace_host_dir: self.data_dir.join("accept").join(run),
            guest_cwd: "/workspace".into(),
            limits: if desktop {
                Limits::desktop()
            } else {
                self.limits.clone()
            },
            network: GuestNetwork::None,
        }
    }

    /// Whether `image` (a full image ID, so its content never changes) is a desktop
    /// image; asked of the engine once per image, since every turn wants to know.
    pub async fn is_desktop(&self, image: &str) -> bool {
        let known = self
            .desktop_images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .copied();
        if let Some(desktop) = known {
            return desktop;
        }
        let Some(desktop) = self.provider.is_desktop_image(image).await else {
            return false;
        };
        if validate_image_id(image).is_ok() {
            let mut known = self
                .desktop_images
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if known.len() >= 64 {
                known.clear();
            }
            known.insert(image.to_string(), desktop);
        }
        desktop
    }

    /// An operator's screen action on the computer's display. Input runs only while the
    /// frame it names is the latest (the control plane checked the control fence).
    pub async fn screen(&self, p: crate::api::computers::ScreenPayload) -> Outcome {
        use crate::computer::screen::ScreenAction as A;
        let looking = matches!(
            p.action,
            A::Screenshot | A::GetScreenSize | A::GetCursorPosition
        );
        if !looking && p.frame_id.is_none() {
            return Err(ComputerError::Invalid(
                "screen input needs the id of the frame it aims at; refused".into(),
            )
            .into());
        }
        let guest = self.guest_under(&p.computer_id, p.fence).await?;
        let result = match &p.frame_id {
            Some(frame) => guest.screen_at(frame, p.action).await?,
            None => guest.screen(p.action).await?,
        };
        Ok(serde_json::to_value(result)?)
    }

    async fn guest(&self, computer: &str, container: &str) -> Result<Arc<GuestSession>, PoolError> {
        let mut guests = self.guests.lock().await;
        if let Some(g) = guests.get(computer).filter(|g| !g.is_closed()) {
            return Ok(g.clone());
        }
        let g = Arc::new(self.provider.guest(container).await?);
        guests.insert(computer.to_string(), g.clone());
        Ok(g)
    }
}
