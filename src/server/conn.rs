//! Connections: a bounded accept loop over hyper's HTTP/1 server with timers, so that no
//! client can hold the server by being slow. Headers must arrive within the header
//! timeout (which also closes a keep-alive connection left idle that long), a request
//! body within the body deadline, at most `max_connections` sockets are open at once, and
//! a shutdown waits at most the grace period for requests in flight.
//!
//! At the cap, the connection idle longest (no request in progress: silent, half-sent
//! headers, or kept alive between requests) is closed to let the next client in, so idle
//! sockets can never keep out a health check or a Runner. Only connections with a request
//! in progress make new clients wait.
//!
//! A Runner's long-poll is a request in progress (its headers came at once and the
//! handler holds the answer), so neither timeout nor eviction applies to it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Sleep;
use tower::ServiceExt;

/// Limits on connections, fixed at start.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Longest wait for a request's headers, also between requests on a kept-alive
    /// connection (the idle timeout).
    pub header_timeout: Duration,
    /// Longest time a request body may take to arrive, from the end of its headers.
    pub body_timeout: Duration,
    /// Most connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Longest wait for requests in flight at shutdown.
    pub shutdown_grace: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Raises the soft open-file limit to the hard one; returns the limit now in force.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a stack struct of the right type.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    Ok(lim.rlim_cur)
}

/// The connection cap that fits an open-file limit: a quarter of the descriptors (at
/// least 64, at most 1024) is kept for the database, the listener, logs, artifact files
/// and the blocking pool, so the cap always stays below the limit.
pub fn connections_for(nofile: u64) -> usize {
    let reserve = (nofile / 4).clamp(64, 1024);
    nofile.saturating_sub(reserve).clamp(1, 65_536) as usize
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests in progress: from their headers to the end of their response body.
    busy: AtomicUsize,
    /// When it last had no request in progress (ms since the loop started).
    idle_since: AtomicU64,
    /// Asked to close; cleared when it turned out busy.
    evicting: AtomicBool,
    evict: Notify,
}

/// The open connections, to pick the one idle longest.
struct Open {
    started: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Open {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn add(self: &Arc<Self>) -> (Arc<Conn>, Registered) {
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now()),
            evicting: AtomicBool::new(false),
            evict: Notify::new(),
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, conn.clone());
        (
            conn,
            Registered {
                open: self.clone(),
                id,
            },
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        // A panic elsewhere cannot leave the map inconsistent: take it as it is.
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the connection idle longest to close; false when every one is busy.
    fn evict_oldest_idle(&self) -> bool {
        let conns = self.lock();
        let oldest = conns
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.evicting.load(Ordering::Acquire))
            .min_by_key(|c| c.idle_since.load(Ordering::Acquire));
        match oldest {
            Some(c) => {
                c.evicting.store(true, Ordering::Release);
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Removes a connection from [`Open`] when its task ends.
struct Registered {
    open: Arc<Open>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.open.lock().remove(&self.id);
    }
}

/// A request in progress on a connection; dropped with the response body.
struct Busy {
    conn: Arc<Conn>,
    open: Arc<Open>,
}

impl Busy {
    fn new(conn: &Arc<Conn>, open: &Arc<Open>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy {
            conn: conn.clone(),
            open: open.clone(),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.conn.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn
                .idle_since
                .store(self.open.now(), Ordering::Release);
        }
    }
}

/// Waits for a free slot; meanwhile closes the connection idle longest (again every
/// 100 ms, as connections finish their requests). None when `shutdown` completed.
async fn slot_at_cap(
    slots: &Arc<Semaphore>,
    open: &Open,
    shutdown: &mut Pin<&mut impl Future<Output = ()>>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    loop {
        if let Ok(s) = slots.clone().try_acquire_owned() {
            return Some(s);
        }
        open.evict_oldest_idle();
        tokio::select! {
            _ = shutdown.as_mut() => return None,
            s = slots.clone().acquire_owned() => return Some(s.expect("the semaphore is never closed")),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// A connection's byte stream: plain TCP, or TLS over it.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send> Stream for T {}
type Io = Pin<Box<dyn Stream>>;

/// Accepts and serves connections until `shutdown` completes; over TLS when `tls` is set.
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    tls: Option<Arc<super::tls::ServerTls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let open = Arc::new(Open {
        started: Instant::now(),
        next: AtomicU64::new(0),
        conns: Mutex::new(HashMap::new()),
    });
    let tracker = tokio_util::task::TaskTracker::new();
    let (closing_tx, closing) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // Take a slot before accepting: at the cap, new clients wait in the backlog
        // instead of costing a file descriptor each, while an idle connection is closed
        // to make room.
        let Some(slot) = slot_at_cap(&slots, &open, &mut shutdown).await else {
            break;
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let limits = limits.clone();
        let mut closing = closing.clone();
        let (conn_state, registered) = open.add();
        let open = open.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tracker.spawn(async move {
            let _slot = slot;
            let _registered = registered;
            // The handshake gets the header timeout: a client that never finishes it is
            // as slow as one that never sends its headers.
            let io: Io = match acceptor {
                None => Box::pin(stream),
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => Box::pin(tls),
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            let body_timeout = limits.body_timeout;
            let state = conn_state.clone();
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let busy = Busy::new(&state, &open);
                let mut req = req.map(|b| axum::body::Body::new(Deadline::new(b, body_timeout)));
                req.extensions_mut().insert(ConnectInfo(peer));
                let answer = app.clone().oneshot(req);
                async move {
                    let response = answer.await?;
                    // The body keeps its connection busy until it is sent (or dropped):
                    // the frame mapper owns the guard.
                    Ok::<_, std::convert::Infallible>(response.map(|inner| {
                        axum::body::Body::new(inner.map_frame(move |frame| {
                            let _busy = &busy;
                            frame
                        }))
                    }))
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            // With upgrades: an operator's shell relay is a WebSocket (`shell_relay.rs`).
            let conn = builder
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            tokio::pin!(conn);
            let ended = loop {
                tokio::select! {
                    r = conn.as_mut() => break r,
                    _ = async { let _ = closing.wait_for(|c| *c).await; } => {
                        conn.as_mut().graceful_shutdown();
                        break conn.await;
                    }
                    _ = conn_state.evict.notified() => {
                        if conn_state.busy.load(Ordering::Acquire) == 0 {
                            tracing::debug!(%peer, "closing an idle connection: the connection cap is reached");
                            break Ok(());
                        }
                        // A request began meanwhile: it stays, another goes.
                        conn_state.evicting.store(false, Ordering::Release);
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    tracker.close();
    if tokio::time::timeout(limits.shutdown_grace, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = tracker.len(),
            grace = ?limits.shutdown_grace,
            "connections still open after the shutdown grace; closing them"
        );
    }
    Ok(())
}

/// A request body that fails once its deadline passed before it ended.
struct Deadline {
    inner: Incoming,
    sleep: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl Deadline {
    fn new(inner: Incoming, limit: Duration) -> Deadline {
        // Bodiless requests (most GETs) need no timer.
        let sleep = (!inner.is_end_stream()).then(|| Box::pin(tokio::time::sleep(limit)));
        Deadline {
            inner,
            sleep,
            limit,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}; send it at once")]
struct BodyTooSlow(Duration);

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if let Some(sleep) = this.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(BodyTooSlow(this.limit).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_connection_cap_leaves_room_for_the_server_itself() {
        assert_eq!(super::connections_for(1024), 768);
        assert_eq!(super::connections_for(100), 36);
        assert_eq!(super::connections_for(64), 1);
        assert_eq!(super::connections_for(1_048_576), 65_536);
        assert_eq!(super::connections_for(u64::MAX), 65_536);
        for n in [65, 100, 256, 1024, 4096, 70_000] {
            assert!((super::connections_for(n) as u64) < n, "{n}");
        }
    }
}
