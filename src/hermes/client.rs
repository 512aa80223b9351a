//! One connection to Hermes's JSON-RPC gateway (`/api/ws`): requests matched to responses by
//! id, events routed by `session_id` to the turn that waits for them, and the allowlist of
//! methods yy may call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};
use tokio_util::sync::CancellationToken;

use super::events::{
    ActiveSession, ApprovalChoice, CompleteStatus, CreatedError, NotConfirmed, SessionInfo,
    StopConfirmation, TurnEvent, TurnStream, Usage, parse_event, parse_session_created,
};
use super::rest::{HermesRest, HermesStatus};
use super::{DESKTOP_CONTRACT, HermesAccess, HermesError, chain, codes};

/// The gateway methods yy may call. Everything else is refused by [`check_method`] before a
/// byte is sent: Hermes's gateway also offers shell, config, plugin and billing methods.
pub const ALLOWED_METHODS: &[&str] = &[
    "session.create",
    "prompt.submit",
    "session.interrupt",
    "session.close",
    "session.active_list",
    "approval.respond",
];

/// The one place the allowlist is enforced (every request passes through it).
fn check_method(method: &str) -> Result<(), HermesError> {
    if ALLOWED_METHODS.contains(&method) {
        Ok(())
    } else {
        Err(HermesError::MethodNotAllowed(method.to_string()))
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

type Reply = Result<Value, (i64, String)>;

struct Turn {
    seq: u64,
    tx: mpsc::UnboundedSender<TurnEvent>,
}

struct Shared {
    shown: String,
    out: mpsc::UnboundedSender<Message>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    turns: Mutex<HashMap<String, Turn>>,
    /// Requests written to the socket.
    sent: AtomicU64,
    /// Fires when the connection is gone; `reason` says why.
    closed: CancellationToken,
    reason: Mutex<String>,
    /// Fires when the last [`HermesClient`] clone is dropped.
    shutdown: CancellationToken,
}

impl Shared {
    fn disconnected(&self) -> HermesError {
        HermesError::Disconnected {
            url: self.shown.clone(),
            reason: self.reason.lock().map(|r| r.clone()).unwrap_or_default(),
        }
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, HermesError> {
        check_method(method)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        // `closed` fires before pending requests are failed: checking it after inserting
        // means no request is left waiting on a dead connection.
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.closed.is_cancelled() || self.out.send(frame.to_string().into()).is_err() {
            self.pending.lock().unwrap().remove(&id);
            return Err(self.disconnected());
        }
        match tokio::time::timeout(RPC_TIMEOUT, rx).await {
            Err(_) => {
                self.pending.lock().unwrap().remove(&id);
                Err(HermesError::Timeout {
                    what: method.into(),
                    secs: RPC_TIMEOUT.as_secs(),
                })
            }
            Ok(Err(_)) => Err(self.disconnected()),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err((code, message)))) => Err(HermesError::Rpc {
                method: method.into(),
                code,
                message,
            }),
        }
    }

    fn frame(self: &Arc<Self>, text: &str) {
        let Ok(msg) = serde_json::from_str::<Value>(text) else {
            tracing::debug!("ignoring a gateway frame that is not JSON");
            return;
        };
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            let reply = match msg.get("error") {
                Some(e) => Err((
                    e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message")
                        .to_string(),
                )),
                None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            if let Some(tx) = self.pending.lock().unwrap().remove(&id) {
                let _ = tx.send(reply);
            }
            return;
        }
        if msg.get("method").and_then(Value::as_str) != Some("event") {
            return;
        }
        let params = msg.get("params").unwrap_or(&Value::Null);
        let (Some(kind), Some(sid)) = (
            params.get("type").and_then(Value::as_str),
            params.get("session_id").and_then(Value::as_str),
        ) else {
            return;
        };
        let Some(event) = parse_event(kind, params.get("payload").unwrap_or(&Value::Null)) else {
            return;
        };
        let mut turns = self.turns.lock().unwrap();
        let Some(turn) = turns.get(sid) else {
            return;
        };
        let seq = turn.seq;
        let ended = event.is_complete();
        let errored = matches!(event, TurnEvent::Error(_));
        if turn.tx.send(event).is_err() || ended {
            turns.remove(sid);
        } else if errored {
            tokio::spawn(finish_errored_turn(self.clone(), sid.to_string(), seq));
        }
    }

    /// Ends the turn `seq` of `sid`, if it is still the one registered.
    fn end_turn(&self, sid: &str, seq: u64, last: Option<TurnEvent>) {
        let mut turns = self.turns.lock().unwrap();
        if turns.get(sid).is_some_and(|t| t.seq == seq) {
            if let (Some(t), Some(ev)) = (turns.get(sid), last) {
                let _ = t.tx.send(ev);
            }
            turns.remove(sid);
        }
    }

    fn fail_all(&self, reason: String) {
        if let Ok(mut r) = self.reason.lock() {
            *r = reason;
        }
        self.closed.cancel();
        self.pending.lock().unwrap().clear();
        // Dropping the senders ends every turn stream without a `Complete`.
        self.turns.lock().unwrap().clear();
    }
}

/// After an `error` event Hermes may send no `message.complete` (a crashed turn): once the
/// session no longer runs and the turn is still open, end it with status `Error`.
async fn finish_errored_turn(shared: Arc<Shared>, sid: String, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open = |s: &Shared| {
            s.turns
                .lock()
                .unwrap()
                .get(&sid)
                .is_some_and(|t| t.seq == seq)
        };
        if !open(&shared) {
            return;
        }
        let Ok(v) = shared.request("session.active_list", json!({})).await else {
            return;
        };
        let running = active_of(&v)
            .iter()
            .any(|s| s.id == sid && s.status != "idle");
        if !running {
            // A `message.complete` already on its way wins.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let complete = TurnEvent::Complete {
                text: String::new(),
                status: CompleteStatus::Error,
                usage: Usage::default(),
            };
            shared.end_turn(&sid, seq, Some(complete));
            return;
        }
    }
}

fn active_of(result: &Value) -> Vec<ActiveSession> {
    result
        .get("sessions")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default()
}

struct Inner {
    shared: Arc<Shared>,
    rest: HermesRest,
    status: HermesStatus,
    next_turn: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

/// A connection to one Hermes. Cheap to clone; the connection closes when the last clone
/// is dropped. Sessions created through it survive a lost connection in Hermes.
#[derive(Clone)]
pub struct HermesClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HermesClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HermesClient")
            .field("url", &self.inner.shared.shown)
            .field("version", &self.inner.status.version)
            .finish_non_exhaustive()
    }
}

impl HermesClient {
    /// Checks the version (`GET /api/status`), authenticates, opens `/api/ws` and waits
    /// for `gateway.ready`.
    pub async fn connect(access: &HermesAccess) -> Result<HermesClient, HermesError> {
        let shown = access.shown_url();
        let rest = HermesRest::new(access)?;
        let status = rest.check_version().await?;
        let url = rest.ws_url().await?;
        let request = url
            .as_str()
            .into_client_request()
            .map_err(|e| HermesError::Config(format!("gateway request: {e}")))?;
        let connecting = tokio_tungstenite::connect_async(request);
        let (mut ws, _) = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Err(_) => {
                return Err(HermesError::Timeout {
                    what: "the WebSocket upgrade".into(),
                    secs: CONNECT_TIMEOUT.as_secs(),
                });
            }
            Ok(Err(tungstenite::Error::Http(resp)))
                if matches!(resp.status().as_u16(), 401 | 403) =>
            {
                return Err(rest.refused(resp.status()));
            }
            Ok(Err(e)) => {
                return Err(HermesError::Unreachable {
                    url: shown,
                    reason: format!("WebSocket /api/ws: {}", chain(&e)),
                });
            }
            Ok(Ok(pair)) => pair,
        };
        let ready = async {
            while let Some(msg) = ws.next().await {
                let text = match msg {
                    Ok(Message::Text(t)) => t,
                    Ok(Message::Close(_)) => break,
                    Ok(_) => continue,
                    Err(e) => return Err(chain(&e)),
                };
                let v: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                if v.pointer("/params/type").and_then(Value::as_str) == Some("gateway.ready") {
                    return Ok(());
                }
            }
            Err("Hermes closed the connection before gateway.ready".into())
        };
        match tokio::time::timeout(READY_TIMEOUT, ready).await {
            Err(_) => {
                return Err(HermesError::Timeout {
                    what: "gateway.ready".into(),
                    secs: READY_TIMEOUT.as_secs(),
                });
            }
            Ok(Err(reason)) => return Err(HermesError::Unreachable { url: shown, reason }),
            Ok(Ok(())) => {}
        }

        let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
        let shared = Arc::new(Shared {
            shown,
            out,
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            turns: Mutex::default(),
            sent: AtomicU64::new(0),
            closed: CancellationToken::new(),
            reason: Mutex::default(),
            shutdown: CancellationToken::new(),
        });
        let (mut sink, mut stream) = ws.split();
        let writer = shared.clone();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    m = out_rx.recv() => m,
                    _ = writer.shutdown.cancelled() => None,
                    _ = writer.closed.cancelled() => None,
                };
                let Some(msg) = msg else {
                    let _ = sink.send(Message::Close(None)).await;
                    return;
                };
                if let Err(e) = sink.send(msg).await {
                    writer.fail_all(chain(&e));
                    return;
                }
                writer.sent.fetch_add(1, Ordering::Relaxed);
            }
        });
        let reader = shared.clone();
        tokio::spawn(async move {
            let reason = loop {
                let msg = tokio::select! {
                    m = stream.next() => m,
                    _ = reader.shutdown.cancelled() => break "the client was closed".to_string(),
                };
                match msg {
                    Some(Ok(Message::Text(t))) => reader.frame(t.as_str()),
                    Some(Ok(Message::Close(_))) | None => {
                        break "Hermes closed the connection".to_string();
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break chain(&e),
                }
            };
            tracing::debug!(%reason, "Hermes gateway connection ended");
            reader.fail_all(reason);
        });
        Ok(HermesClient {
            inner: Arc::new(Inner {
                shared,
                rest,
                status,
                next_turn: AtomicU64::new(1),
            }),
        })
    }

    /// Hermes's `/api/status` as read at connect (its `version` is checked).
    pub fn status(&self) -> &HermesStatus {
        &self.inner.status
    }

    /// The read-only REST helpers, authenticated like this connection.
    pub fn rest(&self) -> &HermesRest {
        &self.inner.rest
    }

    /// False once the connection is lost (a new [`HermesClient::connect`] is needed).
    pub fn is_connected(&self) -> bool {
        !self.inner.shared.closed.is_cancelled()
    }

    /// Resolves when the connection is lost.
    pub async fn disconnected(&self) {
        self.inner.shared.closed.cancelled().await
    }

    /// How many requests were written to the socket so far (refused ones never are).
    pub fn requests_sent(&self) -> u64 {
        self.inner.shared.sent.load(Ordering::Relaxed)
    }

    /// Calls a gateway method. Methods outside [`ALLOWED_METHODS`] are refused here,
    /// without a network round trip.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, HermesError> {
        self.inner.shared.request(method, params).await
    }

    async fn call_for(&self, method: &str, sid: &str, params: Value) -> Result<Value, HermesError> {
        match self.call(method, params).await {
            Err(e) if e.rpc_code() == Some(codes::SESSION_NOT_FOUND) => {
                Err(HermesError::SessionNotFound(sid.to_string()))
            }
            other => other,
        }
    }

    /// `session.create` in `cwd` (absolute), with an optional Hermes profile and title;
    /// checks `desktop_contract`.
    pub async fn create_session(
        &self,
        cwd: &str,
        profile: Option<&str>,
        title: Option<&str>,
    ) -> Result<SessionInfo, HermesError> {
        self.create_session_seeded(cwd, profile, title, &[]).await
    }

    /// [`create_session`](Self::create_session) seeded with earlier text history, as
    /// `(role, content)` pairs with role `user`, `assistant` or `system` (a session
    /// continued from elsewhere).
    pub async fn create_session_seeded(
        &self,
        cwd: &str,
        profile: Option<&str>,
        title: Option<&str>,
        history: &[(String, String)],
    ) -> Result<SessionInfo, HermesError> {
        let mut params = json!({ "cwd": cwd });
        if let Some(p) = profile {
            params["profile"] = json!(p);
        }
        if let Some(t) = title {
            params["title"] = json!(t);
        }
        if !history.is_empty() {
            let messages: Vec<Value> = history
                .iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect();
            params["messages"] = Value::Array(messages);
        }
        let result = self.call("session.create", params).await?;
        match parse_session_created(&result, DESKTOP_CONTRACT) {
            Ok(info) => Ok(info),
            Err(CreatedError::Contract(found)) => {
                if let Some(sid) = result.get("session_id").and_then(Value::as_str) {
                    let _ = self.close(sid).await;
                }
                Err(HermesError::ContractMismatch {
                    url: self.inner.shared.shown.clone(),
                    found,
                    expected: DESKTOP_CONTRACT,
                })
            }
            Err(CreatedError::Malformed(reason)) => Err(HermesError::Protocol {
                what: "session.create".into(),
                reason: reason.into(),
            }),
        }
    }

    /// `prompt.submit`: starts a turn and returns its events. One turn per session at a
    /// time: a second submit while one runs is refused ([`HermesError::TurnInProgress`]).
    pub async fn submit(&self, session_id: &str, text: &str) -> Result<TurnStream, HermesError> {
        let shared = &self.inner.shared;
        let seq = self.inner.next_turn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            // Registered before the request: events may arrive before its answer.
            let mut turns = shared.turns.lock().unwrap();
            if turns.get(session_id).is_some_and(|t| !t.tx.is_closed()) {
                return Err(HermesError::TurnInProgress(session_id.to_string()));
            }
            turns.insert(session_id.to_string(), Turn { seq, tx });
        }
        let params = json!({"session_id": session_id, "text": text});
        let answer = self.call_for("prompt.submit", session_id, params).await;
        let refused = match answer {
            Ok(v) if v.get("status").and_then(Value::as_str) == Some("streaming") => {
                return Ok(TurnStream {
                    session_id: session_id.to_string(),
                    rx,
                });
            }
            // Hermes queued it behind a turn that this client did not start.
            Ok(v) if v.get("status").and_then(Value::as_str) == Some("queued") => {
                HermesError::TurnInProgress(session_id.to_string())
            }
            Ok(v) => HermesError::Protocol {
                what: "prompt.submit".into(),
                reason: format!("status {}", v.get("status").unwrap_or(&Value::Null)),
            },
            Err(e) => e,
        };
        shared.end_turn(session_id, seq, None);
        Err(refused)
    }

    /// `session.interrupt`: asks the running turn to stop (it then completes with status
    /// `interrupted`). [`HermesError::SessionNotFound`] for a session Hermes does not have.
    pub async fn interrupt(&self, session_id: &str) -> Result<(), HermesError> {
        self.call_for(
            "session.interrupt",
            session_id,
            json!({ "session_id": session_id }),
        )
        .await
        .map(|_| ())
    }

    /// `session.close`: true when Hermes closed it now, false when it was not open.
    pub async fn close(&self, session_id: &str) -> Result<bool, HermesError> {
        let v = self
            .call_for(
                "session.close",
                session_id,
                json!({ "session_id": session_id }),
            )
            .await?;
        Ok(v.get("closed").and_then(Value::as_bool).unwrap_or(false))
    }

    /// `session.active_list`: the live sessions of this Hermes process.
    pub async fn active_list(&self) -> Result<Vec<ActiveSession>, HermesError> {
        let v = self.call("session.active_list", json!({})).await?;
        if v.get("sessions").and_then(Value::as_array).is_none() {
            return Err(HermesError::Protocol {
                what: "session.active_list".into(),
                reason: "no sessions list".into(),
            });
        }
        Ok(active_of(&v))
    }

    /// `approval.respond`: answers the session's pending approval request.
    pub async fn approval_respond(
        &self,
        session_id: &str,
        choice: ApprovalChoice,
    ) -> Result<(), HermesError> {
        let params = json!({"session_id": session_id, "choice": choice.as_str()});
        self.call_for("approval.respond", session_id, params)
            .await
            .map(|_| ())
    }

    /// Interrupts the session, then polls `session.active_list` until it is idle or gone,
    /// for at most `timeout`. Anything short of that (a timeout, a lost connection) is
    /// [`NotConfirmed`]: the session must then be treated as possibly still running.
    pub async fn confirm_stopped(
        &self,
        session_id: &str,
        timeout: Duration,
    ) -> Result<StopConfirmation, NotConfirmed> {
        let deadline = Instant::now() + timeout;
        let not = |reason: String| NotConfirmed {
            session_id: session_id.to_string(),
            reason,
        };
        let late = || not(format!("no answer within {timeout:?}"));
        match tokio::time::timeout_at(deadline, self.interrupt(session_id)).await {
            Err(_) => return Err(late()),
            Ok(Ok(())) | Ok(Err(HermesError::SessionNotFound(_))) => {}
            Ok(Err(e)) => return Err(not(e.to_string())),
        }
        loop {
            let list = match tokio::time::timeout_at(deadline, self.active_list()).await {
                Err(_) => return Err(late()),
                Ok(Err(e)) => return Err(not(e.to_string())),
                Ok(Ok(list)) => list,
            };
            let status = match list.into_iter().find(|s| s.id == session_id) {
                None => return Ok(StopConfirmation::Gone),
                Some(s) if s.status == "idle" => return Ok(StopConfirmation::Idle),
                Some(s) => s.status,
            };
            if Instant::now() + POLL >= deadline {
                return Err(not(format!("still {status} after {timeout:?}")));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
