//! Warm computers (`yy runner run --warm-computers N`): containers created, hardened,
//! verified and started before any agent needs one, so that a computer's start (a
//! `computer create`, an agent's first turn) only attaches the agent's workspace.
//!
//! A warm container's workspace mount is a *slot*: a host directory under
//! `DATA_DIR/warm/` made a shared mount point, bound into the container as a slave
//! (`rslave`). A claim binds the agent's workspace onto the slot on the host, and the
//! container sees it at its working directory; the claim also renames the container to the
//! computer's name and opens the guest agent's session afterwards, so it starts in the
//! agent's workspace. A warm container has never run agent code, and one that was claimed
//! is never warm again: it goes with its computer, and its slot with it.
//!
//! Warm computers are made for the image and guest path of the last start with no network
//! (not desktop images, not `public-web`, Docker only), hold pool slots, and give theirs
//! up first when a start finds the pool full. A start for another image drains the set.
//! Every reconcile (a restart, a new connection) removes them: the next start makes new
//! ones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rand::RngCore;

use super::{Computers, PoolError};
use crate::api::computers::{NetworkMode, StartPayload, StartResult};
use crate::computer::engine::Engine;
use crate::computer::host_read::HostWorkspace;
use crate::computer::session::GuestSession;
use crate::computer::workspaces::unmount_under;
use crate::computer::{ComputerError, ComputerSpec, GuestNetwork};

/// Warm computers kept by default (the setting takes 0-8).
pub const DEFAULT_WARM: u32 = 1;
/// The most a Runner keeps.
pub const MAX_WARM: u32 = 8;

/// A warm computer ready to be claimed.
pub(super) struct Ready {
    id: String,
    container: String,
    image: String,
    slot: PathBuf,
}

#[derive(Default)]
pub(super) struct State {
    /// The image and guest path warm computers are made for (the last eligible start's).
    kind: Option<(String, String)>,
    ready: Vec<Ready>,
    /// Claimed computers' slots, unbound when their container goes.
    slots: HashMap<String, PathBuf>,
    /// The Runner is stopping: no more are made ([`Computers::close_warm`]).
    closed: bool,
}

pub(super) struct Warm {
    target: usize,
    dir: PathBuf,
    state: Mutex<State>,
    /// One fill at a time.
    filling: tokio::sync::Mutex<()>,
}

/// The pool slot a warm computer holds.
fn slot_key(id: &str) -> String {
    format!("warm:{id}")
}

async fn mount(args: &[&std::ffi::OsStr]) -> Result<(), ComputerError> {
    let out = tokio::process::Command::new("mount")
        .args(args)
        .output()
        .await
        .map_err(|e| ComputerError::Io(format!("cannot run mount: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(ComputerError::Io(format!(
        "mount {}: {}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Unbinds whatever is mounted on `slot` (a claimed workspace, the slot's own bind: both
/// at the same point, latest first) and removes the directory.
async fn clear_slot(slot: &Path) {
    let dir = slot.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        unmount_under(&dir);
        let _ = std::fs::remove_dir(&dir);
    })
    .await;
}

impl Warm {
    pub(super) fn new(data_dir: &Path, target: u32) -> Warm {
        Warm {
            target: target.min(MAX_WARM) as usize,
            dir: data_dir.join("warm"),
            state: Mutex::default(),
            filling: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn target(&self) -> usize {
        self.target
    }

    /// Warm computers ready now.
    pub(super) fn ready(&self) -> usize {
        self.state().ready.len()
    }

    /// Removes every slot an earlier run (or connection) left: their containers are gone.
    pub(super) async fn clear_all(&self) {
        let slots = {
            let mut s = self.state();
            s.ready.clear();
            std::mem::take(&mut s.slots)
        };
        drop(slots);
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || unmount_under(&dir)).await;
    }
}

impl Computers {
    /// Whether a start of `p` may take (and keeps the set for) a warm computer.
    async fn warm_eligible(&self, p: &StartPayload) -> bool {
        self.warm.target > 0
            && p.network == NetworkMode::None
            && self.provider.engine().engine == Engine::Docker
            && !self.is_desktop(&p.image_id).await
    }

    /// Takes a warm computer for `p` (its pool slot becomes the computer's), after making
    /// the set follow `p`'s image and path (a new image drains the old set).
    pub(super) async fn take_warm(&self, p: &StartPayload) -> Option<Ready> {
        if !self.warm_eligible(p).await {
            return None;
        }
        let kind = (p.image_id.clone(), p.guest_cwd.clone());
        let (taken, drained) = {
            let mut s = self.warm.state();
            let drained = if s.kind.as_ref() != Some(&kind) {
                s.kind = Some(kind);
                std::mem::take(&mut s.ready)
            } else {
                Vec::new()
            };
            let taken = s.ready.pop();
            (taken, drained)
        };
        for r in drained {
            tracing::info!(warm = %r.id, image = %r.image, "a new image: removing a warm computer of the old one");
            self.discard_warm(r).await;
        }
        let r = taken?;
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        reserved.remove(&slot_key(&r.id));
        reserved.insert(p.computer_id.clone());
        Some(r)
    }

    /// At the Runner's stop ([`Computers::close`]): no warm computer is made any more,
    /// and the ready ones go (their containers and slots), since no start will claim
    /// them; a fill under way ends first.
    pub(super) async fn close_warm(&self) {
        self.warm.state().closed = true;
        let _no_more = self.warm.filling.lock().await;
        let ready = std::mem::take(&mut self.warm.state().ready);
        for r in ready {
            tracing::info!(warm = %r.id, "removing a warm computer: the Runner stops");
            self.discard_warm(r).await;
        }
    }

    /// Removes a warm computer that will not be claimed, and gives its slot back.
    async fn discard_warm(&self, r: Ready) {
        if let Err(e) = self.provider.remove(&r.container).await {
            tracing::warn!(warm = %r.id, error = %e, "could not remove a warm computer");
        }
        clear_slot(&r.slot).await;
        self.release(&slot_key(&r.id));
    }

    /// When the pool is full: gives up one warm computer's slot for `computer`. Whether
    /// one was given.
    pub(super) async fn yield_warm(&self, computer: &str) -> bool {
        let Some(r) = self.warm.state().ready.pop() else {
            return false;
        };
        {
            let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
            reserved.remove(&slot_key(&r.id));
            reserved.insert(computer.to_string());
        }
        tracing::info!(warm = %r.id, %computer, "the pool is full: a warm computer gives its slot up");
        if let Err(e) = self.provider.remove(&r.container).await {
            tracing::warn!(warm = %r.id, error = %e, "could not remove a warm computer");
        }
        clear_slot(&r.slot).await;
        true
    }

    /// Turns warm computer `r` into `p`'s computer: the workspace (prepared) bound onto
    /// its slot, the container renamed, a guest session opened in the workspace.
    pub(super) async fn claim_warm(
        &self,
        p: &StartPayload,
        spec: &ComputerSpec,
        r: Ready,
    ) -> Result<(StartResult, GuestSession), PoolError> {
        let workspace = self.workspace(&p.computer_id);
        let host_dir = std::fs::canonicalize(&workspace).unwrap_or(workspace);
        let claimed = async {
            mount(&["--bind".as_ref(), host_dir.as_os_str(), r.slot.as_os_str()]).await?;
            self.provider.rename(&r.container, &spec.name()).await?;
            let guest = self.provider.guest_at(&r.container, &p.guest_cwd).await?;
            Ok::<_, ComputerError>(guest.with_host_workspace(HostWorkspace {
                host_dir: host_dir.clone(),
                guest_cwd: p.guest_cwd.clone(),
            }))
        }
        .await;
        let guest = match claimed {
            Ok(g) => g,
            Err(e) => {
                let _ = self.provider.remove(&r.container).await;
                clear_slot(&r.slot).await;
                return Err(e.into());
            }
        };
        self.warm
            .state()
            .slots
            .insert(p.computer_id.clone(), r.slot.clone());
        tracing::info!(computer = %p.computer_id, warm = %r.id, container = %r.container, "claimed a warm computer");
        let started = StartResult {
            container_id: r.container,
            name: spec.name(),
            resources: serde_json::to_value(&spec.limits).unwrap_or_default(),
        };
        Ok((started, guest))
    }

    /// The computer's container is gone: its slot (if it was warm once) goes too, so that
    /// its workspace can be unmounted.
    pub(super) async fn unslot(&self, computer: &str) {
        let slot = self.warm.state().slots.remove(computer);
        if let Some(slot) = slot {
            clear_slot(&slot).await;
        }
    }

    /// Makes warm computers until the set is full or no pool slot is free.
    pub(super) async fn fill_warm(self: Arc<Self>) {
        let Ok(_one) = self.warm.filling.try_lock() else {
            return;
        };
        loop {
            let (image, cwd) = {
                let s = self.warm.state();
                match &s.kind {
                    Some(k) if !s.closed && s.ready.len() < self.warm.target => k.clone(),
                    _ => return,
                }
            };
            let mut bytes = [0u8; 6];
            rand::rng().fill_bytes(&mut bytes);
            let id = format!("warm-{}", hex::encode(bytes));
            {
                let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
                if reserved.len() as u32 >= self.max_running {
                    return;
                }
                reserved.insert(slot_key(&id));
            }
            match self.make_warm(&id, &image, &cwd).await {
                Ok(r) => {
                    // Kept unless the set moved to another image meanwhile.
                    let stale = {
                        let mut s = self.warm.state();
                        if !s.closed && s.kind.as_ref() == Some(&(image.clone(), cwd.clone())) {
                            tracing::info!(warm = %r.id, image = %image, "a warm computer is ready");
                            s.ready.push(r);
                            None
                        } else {
                            Some(r)
                        }
                    };
                    match stale {
                        Some(r) => self.discard_warm(r).await,
                        // A start waiting for a full pool may take its slot now.
                        None => self.slot_freed.notify_waiters(),
                    }
                }
                Err(e) => {
                    tracing::warn!(warm = %id, error = %e, "could not make a warm computer");
                    clear_slot(&self.warm.dir.join(&id)).await;
                    self.release(&slot_key(&id));
                    return;
                }
            }
        }
    }

    async fn make_warm(&self, id: &str, image: &str, cwd: &str) -> Result<Ready, PoolError> {
        let slot = self.warm.dir.join(id);
        std::fs::create_dir_all(&slot)
            .map_err(|e| ComputerError::Io(format!("cannot create {}: {e}", slot.display())))?;
        mount(&["--bind".as_ref(), slot.as_os_str(), slot.as_os_str()]).await?;
        mount(&["--make-shared".as_ref(), slot.as_os_str()]).await?;
        let spec = ComputerSpec {
            owner_key: format!("warm/{id}"),
            runner_id: self.runner_id.clone(),
            computer_id: id.to_string(),
            agent_id: "warm".into(),
            account_id: "warm".into(),
            image_id: image.to_string(),
            generation: (*self.generation.lock().unwrap_or_else(|e| e.into_inner())).max(0) as u64,
            workspace_host_dir: slot.clone(),
            guest_cwd: cwd.to_string(),
            limits: self.limits.clone(),
            network: GuestNetwork::None,
        };
        // Created, verified, started, and its guest agent answered: then its session ends,
        // and the claim opens the agent's own.
        let (created, guest) = self.provider.launch_warm(&spec).await?;
        drop(guest);
        Ok(Ready {
            id: id.to_string(),
            container: created.id,
            image: image.to_string(),
            slot,
        })
    }
}
