//! Following a fetch while it uploads: `GET /api/v1/commands/{id}/artifact` (admins) sends
//! the command's artifact as its chunks are verified, so `yy runner fetch` receives the file
//! while the Runner is still sending it instead of after. Only bytes the control plane has
//! checked chunk by chunk are sent; the body is cut off (the receiver sees it short) when the
//! upload starts over or stalls, and the receiver checks the whole file against the size and
//! SHA-256 the Runner reports before it keeps anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use tokio::sync::watch;

use super::{ApiError, AppState};
use crate::api::machine::CommandKind;
use crate::server::auth::Admin;
use crate::server::store::artifacts::{self as rows, ArtifactRow};
use crate::server::store::commands;

/// Follows at once per control plane; more are refused (the caller downloads afterwards).
const MAX_FOLLOWERS: usize = 32;
/// A follow ends when its upload has not moved for this long.
const STALL: Duration = Duration::from_secs(30);
/// How often a follow looks at its command even without news (it may have ended).
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// The commands being followed, each with how often its upload started over (every
/// change of the upload wakes its followers, with or without a restart).
#[derive(Default)]
pub struct Followers(Mutex<HashMap<String, watch::Sender<u64>>>);

impl Followers {
    /// Tells the followers of `command` (if any) that its upload moved, or started over.
    pub fn touch(&self, command: &str, restarted: bool) {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = map.get(command) {
            tx.send_modify(|restarts| *restarts += u64::from(restarted));
        }
    }

    fn subscribe(self: &Arc<Self>, command: &str) -> Result<Following, ApiError> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let rx = match map.get(command) {
            Some(tx) => tx.subscribe(),
            None if map.len() >= MAX_FOLLOWERS => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    format!(
                        "{MAX_FOLLOWERS} fetches are being followed already; download the artifact when the command is done"
                    ),
                ));
            }
            None => {
                let (tx, rx) = watch::channel(0);
                map.insert(command.to_string(), tx);
                rx
            }
        };
        Ok(Following {
            board: self.clone(),
            command: command.to_string(),
            rx: Some(rx),
        })
    }
}

/// One follower's subscription; the command leaves the board with its last follower.
struct Following {
    board: Arc<Followers>,
    command: String,
    rx: Option<watch::Receiver<u64>>,
}

impl Following {
    fn restarts(&self) -> u64 {
        self.rx.as_ref().map(|r| *r.borrow()).unwrap_or_default()
    }

    /// Waits for news or `LOOK_AGAIN`, whichever comes first.
    async fn wait(&mut self) {
        if let Some(rx) = self.rx.as_mut() {
            let _ = tokio::time::timeout(LOOK_AGAIN, rx.changed()).await;
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut map = self.board.0.lock().unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.command)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            map.remove(&self.command);
        }
    }
}

/// The command's artifact as it is now, or why there is none to follow.
async fn look(state: &AppState, command: &str) -> Result<Option<ArtifactRow>, ApiError> {
    let key = crate::api::ids::CommandId::new(command);
    let (cmd, artifact) = state
        .store
        .call(move |c| {
            let cmd = commands::get(c, &key)?;
            let artifact = rows::for_command(c, &key)?;
            Ok((cmd, artifact))
        })
        .await?;
    if cmd.kind != CommandKind::Fetch {
        return Err(ApiError::bad_request(format!(
            "command {command} is {}, not a fetch: only a fetch's artifact can be followed",
            crate::api::words::a(cmd.kind.as_sql())
        )));
    }
    if artifact.is_none() && cmd.is_final() {
        return Err(ApiError::not_found(format!(
            "command {command} ended without an artifact: see `yy runner commands`"
        )));
    }
    Ok(artifact)
}

pub async fn command_artifact(
    State(state): State<AppState>,
    _: Admin,
    UrlPath(command): UrlPath<String>,
) -> Result<Response, ApiError> {
    let mut following = state.artifacts.followers.subscribe(&command)?;
    let restarts = following.restarts();
    // Until the Runner begins its upload there is nothing to answer with.
    let started = tokio::time::Instant::now();
    let row = loop {
        if let Some(row) = look(&state, &command).await? {
            break row;
        }
        if started.elapsed() > STALL {
            return Err(ApiError::conflict(format!(
                "command {command} has not begun its upload; download its artifact when it is done"
            )));
        }
        following.wait().await;
    };
    let size = row.size as u64;
    let follow = Follow {
        state: state.clone(),
        command,
        artifact: row.id.clone(),
        following,
        restarts,
        source: None,
        sent: 0,
        size,
        last_move: tokio::time::Instant::now(),
    };
    let stream = futures_util::stream::try_unfold(follow, |mut f| async move {
        match f.next().await? {
            Some(bytes) => Ok(Some((bytes, f))),
            None => Ok::<_, std::io::Error>(None),
        }
    });
    let mut resp = super::bytes_response(axum::body::Body::from_stream(stream), size);
    if let Ok(v) = HeaderValue::from_str(&row.id) {
        resp.headers_mut().insert("yy-artifact", v);
    }
    Ok(resp)
}

/// A follow in progress: `sent` bytes of `artifact` have gone out.
struct Follow {
    state: AppState,
    command: String,
    artifact: String,
    following: Following,
    restarts: u64,
    source: Option<super::Source>,
    sent: u64,
    size: u64,
    last_move: tokio::time::Instant,
}

impl Follow {
    /// The next verified bytes, `None` at the end; an error cuts the body off. The last
    /// byte waits until the whole file was checked, so a body that ends is the artifact.
    async fn next(&mut self) -> std::io::Result<Option<bytes::Bytes>> {
        loop {
            if self.following.restarts() != self.restarts {
                return Err(self.cut("started over"));
            }
            let row = match look(&self.state, &self.command).await {
                Ok(Some(row)) if row.id == self.artifact => row,
                _ => return Err(self.cut("is gone")),
            };
            let ready = row.is_ready();
            let verified = row.received as u64;
            if !ready && verified < self.sent {
                return Err(self.cut("started over"));
            }
            let sendable = if ready {
                self.size
            } else {
                verified.min(self.size.saturating_sub(1))
            };
            if sendable > self.sent {
                let bytes = self.read(&row, sendable).await?;
                self.last_move = tokio::time::Instant::now();
                return Ok(Some(bytes));
            }
            if ready {
                return Ok(None);
            }
            if self.last_move.elapsed() > STALL {
                return Err(self.cut(&format!("has not moved for {} s", STALL.as_secs())));
            }
            self.following.wait().await;
        }
    }

    fn cut(&self, why: &str) -> std::io::Error {
        let why = format!("artifact {} {why}; its follow ends", self.artifact);
        tracing::info!("{why}");
        std::io::Error::other(why)
    }

    /// Up to a piece of the bytes between `sent` and `upto`.
    async fn read(&mut self, row: &ArtifactRow, upto: u64) -> std::io::Result<bytes::Bytes> {
        let source = match &self.source {
            Some(s) => s.clone(),
            None => {
                let s = self.state.artifacts.source(&self.state.store, row).await?;
                self.source = Some(s.clone());
                s
            }
        };
        let len = source.piece(self.sent, upto);
        let bytes = source
            .read(self.sent, len)
            .await
            .map_err(std::io::Error::other)??;
        if bytes.is_empty() {
            return Err(self.cut("holds fewer bytes than were verified"));
        }
        self.sent += bytes.len() as u64;
        Ok(bytes)
    }
}
