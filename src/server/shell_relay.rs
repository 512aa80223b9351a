//! The operator's shell relay (`yy computer attach C --control`). The CLI opens
//! `GET /api/v1/computers/{id}/shell?control_fence=N` (an admin call, upgraded to a
//! WebSocket), the control plane queues `computer.shell` with a one-time relay id on the
//! computer's Runner, the Runner opens a pty in the container and connects
//! `GET /runner/v1/shell/{relay_id}` (a machine call), and the two sockets are paired here.
//! Frames go both ways one at a time (each side's send is awaited before the next read:
//! no unbounded buffer anywhere); the relay ends when either side ends, when the
//! operator's control ends (released, expired, taken again), at shutdown, or when the
//! Runner does not connect in time. At most [`MAX_RELAYS`] relays are open at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding};

use super::AppState;
use super::auth::Admin;
use super::error::ApiError;
use super::extract::Q;
use super::machine::RunnerCaller;
use super::queue::QueueError;
use crate::api::ids::Generation;
use crate::api::machine::{HEADER_GENERATION, HEADER_INSTANCE, HEADER_PROTOCOL};
use crate::api::shell::{Control, HEADER_RELAYED_BY, RUNNER_CONNECT_TIMEOUT_MS, ShellQuery};

/// Shells relayed at once by this control plane.
pub const MAX_RELAYS: usize = 32;
/// How often a relay re-reads the operator's control.
const CONTROL_CHECK: Duration = Duration::from_secs(2);

pub type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Relays waiting for their Runner's side, and the bound on open relays.
pub struct Relays {
    waiting: Mutex<HashMap<String, Waiting>>,
    slots: Arc<Semaphore>,
}

struct Waiting {
    runner_id: crate::api::ids::RunnerId,
    arrived: oneshot::Sender<Socket>,
}

impl Default for Relays {
    fn default() -> Self {
        Relays {
            waiting: Mutex::default(),
            slots: Arc::new(Semaphore::new(MAX_RELAYS)),
        }
    }
}

impl Relays {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A WebSocket upgrade request (RFC 6455), checked before the handler runs; answering
/// with [`WsUpgrade::accept`] switches protocols and hands the socket to a task.
pub struct WsUpgrade {
    key: String,
    on_upgrade: hyper::upgrade::OnUpgrade,
}

impl<S: Sync> FromRequestParts<S> for WsUpgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let has = |name: header::HeaderName, token: &str| {
            parts.headers.get_all(name).iter().any(|v| {
                v.to_str()
                    .unwrap_or("")
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case(token))
            })
        };
        let version_ok = parts
            .headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v == "13");
        let key = header_str(&parts.headers, header::SEC_WEBSOCKET_KEY);
        let upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        match (
            has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "websocket") && version_ok,
            key,
            upgrade,
        ) {
            (true, Some(key), Some(on_upgrade)) => Ok(WsUpgrade { key, on_upgrade }),
            _ => Err(ApiError::new(
                StatusCode::UPGRADE_REQUIRED,
                "websocket_required",
                "this endpoint is a WebSocket (version 13): connect with an Upgrade request, as `yy computer attach --control` does",
            )),
        }
    }
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

impl WsUpgrade {
    /// Switches protocols; `then` gets the socket once the upgrade completed.
    pub fn accept<F, Fut>(self, then: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept =
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(up) => {
                    let ws = WebSocketStream::from_raw_socket(
                        TokioIo::new(up),
                        Role::Server,
                        Some(crate::api::shell::ws_config()),
                    )
                    .await;
                    then(ws).await;
                }
                Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
            }
        });
        (
            StatusCode::SWITCHING_PROTOCOLS,
            [
                (header::CONNECTION, "upgrade".to_string()),
                (header::UPGRADE, "websocket".to_string()),
                (header::SEC_WEBSOCKET_ACCEPT, accept),
            ],
        )
            .into_response()
    }
}

/// `GET /api/v1/computers/{id}/shell?control_fence=N[&cols=C&rows=R]`: the operator's side.
pub async fn computer_shell(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    Q(q): Q<ShellQuery>,
    ws: WsUpgrade,
) -> Result<Response, ApiError> {
    let relays = state.shells.clone();
    let slot = relays.slots.clone().try_acquire_owned().map_err(|_| {
        ApiError::too_many(
            5,
            format!("{MAX_RELAYS} shells are open on this control plane already; try again when one ends"),
        )
    })?;
    let relay_id = new_relay_id(&state);
    let account = caller.account.id.clone();
    // The relay waits before the command is queued: the Runner may connect at once.
    let key = id.clone();
    let runner_id = state
        .store
        .call(move |c| super::store::computers::get(c, &key).map(|r| r.runner_id))
        .await?;
    let (tx, rx) = oneshot::channel();
    relays.waiting().insert(
        relay_id.clone(),
        Waiting {
            runner_id,
            arrived: tx,
        },
    );
    let queued = state
        .queue
        .computer_shell(account.clone(), id.clone(), q.clone(), relay_id.clone())
        .await;
    let cmd = match queued {
        Ok(cmd) => cmd,
        Err(e) => {
            relays.waiting().remove(&relay_id);
            return Err(e.into());
        }
    };
    tracing::info!(computer = %id, relay = %relay_id, command = %cmd.id, control_fence = q.control_fence, "operator shell requested");
    let session = Session {
        state,
        account,
        computer: id,
        control_fence: q.control_fence,
        command_id: cmd.id,
        relay_id,
        _slot: slot,
    };
    Ok(ws.accept(move |cli| session.run(cli, rx)))
}

/// `GET /runner/v1/shell/{relay_id}`: the Runner's side of a relay it was asked to open.
/// The Runner connects to its own replica; a relay another replica holds (its id says
/// which) is carried on to that one, and the frames pass through.
pub async fn runner_shell(
    State(state): State<AppState>,
    caller: RunnerCaller,
    headers: HeaderMap,
    Path(relay_id): Path<String>,
    ws: WsUpgrade,
) -> Result<Response, ApiError> {
    let generation = super::machine::generation_header(&headers)?;
    // Only ids of the shape this side mints: the id goes into a URL when carried on.
    if !is_relay_id(&relay_id) {
        return Err(ApiError::not_found("no such shell relay"));
    }
    let relayed = headers.contains_key(HEADER_RELAYED_BY);
    if relayed {
        // Carried on by the replica the Runner is connected to: the database says which
        // generation is current.
        current_in_database(&state, &caller, generation).await?;
    } else {
        state
            .queue
            .check_live(&caller.runner_id, generation, &caller.instance)
            .await?;
    }
    let waiting = {
        let mut map = state.shells.waiting();
        match map.get(&relay_id) {
            Some(w) if w.runner_id == caller.runner_id => map.remove(&relay_id),
            _ => None,
        }
    };
    let Some(w) = waiting else {
        if let Some(holder) = holder_elsewhere(&state, &relay_id).filter(|_| !relayed) {
            return carry_on(&state, holder, &relay_id, &headers, ws).await;
        }
        return Err(ApiError::not_found(format!(
            "no shell relay {relay_id:?} waits for this Runner (it ended, timed out or was already connected)"
        )));
    };
    Ok(ws.accept(move |runner| async move {
        // The operator's side gave up meanwhile: close at once.
        if let Err(mut runner) = w.arrived.send(runner) {
            let _ = runner.close(None).await;
        }
    }))
}

/// A relay's id: the holding replica's id before a dot when the store has replicas.
fn new_relay_id(state: &AppState) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    match &state.replica_id {
        Some(replica) => format!("{replica}.{random}"),
        None => random,
    }
}

/// True for what [`new_relay_id`] makes: hex digits, and one dot after a replica's id.
fn is_relay_id(id: &str) -> bool {
    let (holder, random) = id.split_once('.').unwrap_or(("", id));
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    random.len() == 32 && hex(random) && holder.len() <= 32 && hex(holder)
}

/// The replica holding `relay_id`, when that is another one than this.
fn holder_elsewhere(state: &AppState, relay_id: &str) -> Option<String> {
    let me = state.replica_id.as_deref()?;
    let (holder, _) = relay_id.split_once('.')?;
    (holder != me).then(|| holder.to_string())
}

/// Ok when `generation` of the caller's instance is the one the database holds current.
async fn current_in_database(
    state: &AppState,
    caller: &RunnerCaller,
    generation: Generation,
) -> Result<(), ApiError> {
    let id = caller.runner_id.clone();
    let row = state
        .store
        .call(move |c| super::store::runners::get(c, &id))
        .await?;
    if row.generation != generation || row.instance_id.as_deref() != Some(&caller.instance) {
        return Err(QueueError::StaleGeneration(generation).into());
    }
    Ok(())
}

/// Opens the relay's leg to the replica `holder` with the Runner's own credentials (that
/// replica checks them again), then passes frames both ways until either side ends.
async fn carry_on(
    state: &AppState,
    holder: String,
    relay_id: &str,
    headers: &HeaderMap,
    ws: WsUpgrade,
) -> Result<Response, ApiError> {
    let key = holder.clone();
    let peer = state
        .store
        .call(move |c| super::store::replicas::get(c, &key))
        .await?;
    let now = crate::timefmt::now_ms();
    let Some((peer, url)) = peer
        .filter(|p| p.up(now))
        .and_then(|p| p.peer_url.clone().map(|u| (p, u)))
    else {
        return Err(ApiError::not_found(format!(
            "the replica {holder} that holds shell relay {relay_id:?} is gone"
        )));
    };
    let gone = |why: String| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "replica_unreachable",
            format!("cannot reach replica {holder} at {url} for the shell relay: {why}"),
        )
    };
    let base = reqwest::Url::parse(&format!("{url}/")).map_err(|e| gone(e.to_string()))?;
    let mut request =
        crate::api::http::websocket_request(&base, &format!("runner/v1/shell/{relay_id}"), None)
            .map_err(gone)?;
    for name in [
        header::AUTHORIZATION.as_str(),
        HEADER_PROTOCOL,
        HEADER_INSTANCE,
        HEADER_GENERATION,
    ] {
        if let Some(v) = headers.get(name) {
            request.headers_mut().insert(name, v.clone());
        }
    }
    let me = state.replica_id.as_deref().unwrap_or_default();
    request.headers_mut().insert(
        HEADER_RELAYED_BY,
        me.parse().map_err(|_| gone("bad replica id".into()))?,
    );
    let connector = (base.scheme() == "https").then(|| {
        let (config, _) = crate::api::tls::client_config(peer.cert_sha256.as_deref());
        tokio_tungstenite::Connector::Rustls(config)
    });
    let upstream = match crate::api::shell::connect(request, connector).await {
        Ok(ws) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp.body().clone().unwrap_or_default();
            let status = resp.status();
            return Err(
                match serde_json::from_slice::<crate::api::ErrorBody>(&body) {
                    Ok(b) => ApiError::new(
                        status,
                        "relay_refused",
                        format!(
                            "replica {holder} refused the shell relay: {}",
                            b.error.message
                        ),
                    ),
                    Err(_) => gone(format!("HTTP {status}")),
                },
            );
        }
        Err(e) => return Err(gone(e.to_string())),
    };
    tracing::info!(relay = %relay_id, replica = %holder, "shell relay carried on to the replica holding it");
    Ok(ws.accept(move |runner| pass_through(runner, upstream)))
}

/// Frames both ways, one at a time, until either side ends; then both close.
async fn pass_through(mut runner: Socket, mut upstream: crate::api::shell::RelaySocket) {
    loop {
        tokio::select! {
            m = runner.next() => match m {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    if upstream.send(m).await.is_err() { break; }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            m = upstream.next() => match m {
                Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                    if runner.send(m).await.is_err() { break; }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = runner.close(None).await;
    let _ = upstream.close(None).await;
}

struct Session {
    state: AppState,
    account: String,
    computer: String,
    control_fence: i64,
    command_id: crate::api::ids::CommandId,
    relay_id: String,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Session {
    /// Also when the operator's upgrade never completed: the relay stops waiting.
    fn drop(&mut self) {
        self.state.shells.waiting().remove(&self.relay_id);
    }
}

impl Session {
    async fn run(self, mut cli: Socket, runner: oneshot::Receiver<Socket>) {
        let why = match self.pair(&mut cli, runner).await {
            Ok(why) => why,
            Err(why) => {
                let _ = cli
                    .send(Message::text(Control::Closed(why.clone()).to_text()))
                    .await;
                why
            }
        };
        let _ = cli
            .close(Some(CloseFrame {
                code: coding::CloseCode::Normal,
                reason: "".into(),
            }))
            .await;
        tracing::info!(computer = %self.computer, relay = %self.relay_id, reason = %why, "operator shell ended");
    }

    /// Waits for the Runner's side, then relays until one side ends; the reason it ended.
    async fn pair(
        &self,
        cli: &mut Socket,
        runner: oneshot::Receiver<Socket>,
    ) -> Result<String, String> {
        let mut runner = self.wait_runner(runner).await?;
        let mut shutdown = self.state.queue.shutdown_signal();
        let mut check = tokio::time::interval(CONTROL_CHECK);
        check.tick().await;
        let why = loop {
            tokio::select! {
                m = cli.next() => match m {
                    Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                        if runner.send(m).await.is_err() {
                            break "the Runner's connection broke".to_string();
                        }
                    }
                    Some(Ok(Message::Close(_))) | None => break "detached".into(),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("the operator's connection broke: {e}"),
                },
                m = runner.next() => match m {
                    Some(Ok(m @ (Message::Binary(_) | Message::Text(_)))) => {
                        if cli.send(m).await.is_err() {
                            break "the operator's connection broke".into();
                        }
                    }
                    Some(Ok(Message::Close(_))) | None => break "the shell ended".into(),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("the Runner's connection broke: {e}"),
                },
                _ = check.tick() => {
                    if let Err(e) = self.holds().await {
                        let _ = cli.send(Message::text(Control::Closed(e.clone()).to_text())).await;
                        break e;
                    }
                }
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                    let why = "the control plane is shutting down".to_string();
                    let _ = cli.send(Message::text(Control::Closed(why.clone()).to_text())).await;
                    break why;
                }
            }
        };
        // The Runner kills the shell's processes once its socket closes.
        let _ = runner.close(None).await;
        Ok(why)
    }

    /// The Runner's socket, or why it did not come: its command failed (a stale fence, no
    /// container) or it did not connect in time. The operator's socket is not read
    /// meanwhile: what they type first waits in it (TCP holds it) until the shell is there.
    async fn wait_runner(&self, mut runner: oneshot::Receiver<Socket>) -> Result<Socket, String> {
        let deadline = tokio::time::sleep(Duration::from_millis(RUNNER_CONNECT_TIMEOUT_MS));
        tokio::pin!(deadline);
        let queue = self.state.queue.clone();
        let id = self.command_id.clone();
        let failed = async move {
            loop {
                match queue
                    .wait_command(id.clone(), Duration::from_secs(25))
                    .await
                {
                    Ok(row) if row.is_final() => {
                        if row.state != crate::api::machine::CommandState::Done {
                            return format!(
                                "the Runner could not open the shell ({}): {}",
                                row.state,
                                row.error.unwrap_or_default()
                            );
                        }
                        // Done: its socket is on the way; keep waiting for it.
                        std::future::pending::<()>().await;
                    }
                    Ok(_) => {}
                    Err(e) => return format!("cannot follow the shell command: {e}"),
                }
            }
        };
        tokio::pin!(failed);
        tokio::select! {
            r = &mut runner => r.map_err(|_| "the relay was dropped".to_string()),
            why = &mut failed => Err(why),
            _ = &mut deadline => Err(format!(
                "the Runner did not open the shell within {} s",
                RUNNER_CONNECT_TIMEOUT_MS / 1000
            )),
        }
    }

    /// Ok while the operator still holds the control the shell was opened under.
    async fn holds(&self) -> Result<(), String> {
        let (account, id, fence) = (
            self.account.clone(),
            self.computer.clone(),
            self.control_fence,
        );
        self.state
            .store
            .call(move |c| super::store::control::check_holder(c, &account, &id, fence).map(|_| ()))
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::is_relay_id;

    #[test]
    fn only_minted_relay_ids_are_taken() {
        let random = "0123456789abcdef0123456789abcdef";
        assert!(is_relay_id(random));
        assert!(is_relay_id(&format!("a1b2c3d4.{random}")));
        for bad in [
            "",
            "a1b2c3d4.",
            "a1b2c3d4.short",
            &format!("a1b2c3d4.{random}/../../api"),
            &format!("a1/../b.{random}"),
            &format!("a.b.{random}"),
            &format!("{random}?x=1"),
        ] {
            assert!(!is_relay_id(bad), "{bad:?}");
        }
    }
}
