//! Connections: a bounded accept loop over hyper's HTTP/1 server with timers, so that no
//! client can hold the server by being slow. Headers must arrive within the header
//! timeout (which also closes a keep-alive connection left idle that long), a request
//! body within the body deadline, at most `max_connections` sockets are open at once, and
//! a shutdown waits at most the grace period for requests in flight.
//!
//! A Runner's long-poll is a request in progress (its headers came at once and the
//! handler holds the answer), so neither timeout applies to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, watch};
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

/// The connection cap that fits an open-file limit: room is kept for the database, the
/// listener, logs and the blocking pool.
pub fn connections_for(nofile: u64) -> usize {
    nofile.saturating_sub(256).clamp(64, 65_536) as usize
}

/// Accepts and serves connections until `shutdown` completes.
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let tracker = tokio_util::task::TaskTracker::new();
    let (closing_tx, closing) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // Take a slot before accepting: at the cap, new clients wait in the backlog
        // instead of costing a file descriptor each.
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
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
        tracker.spawn(async move {
            let _slot = slot;
            let body_timeout = limits.body_timeout;
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let mut req = req.map(|b| axum::body::Body::new(Deadline::new(b, body_timeout)));
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(req)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            // With upgrades: an operator's shell relay is a WebSocket (`shell_relay.rs`).
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                _ = async { let _ = closing.wait_for(|c| *c).await; } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
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
        assert_eq!(super::connections_for(100), 64);
        assert_eq!(super::connections_for(u64::MAX), 65_536);
    }
}
