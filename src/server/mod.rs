//! `yy serve`: the control plane. One axum server on one port: the admin API under
//! `/api/v1`, the machine API for Runners under `/runner/v1`, and `/healthz`.

pub mod auth;
pub mod error;
mod extract;
pub mod hub;
mod machine;
mod routes;
pub mod store;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::sync::watch;
use tower_http::trace::TraceLayer;

pub use store::Store;
use store::commands::QueueLimits;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub hub: Arc<hub::Hub>,
    pub limits: QueueLimits,
    /// Turns true when the server begins to shut down: long-polls answer at once.
    pub shutdown: watch::Receiver<bool>,
}

impl AppState {
    pub fn new(store: Store, limits: QueueLimits) -> (AppState, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let state = AppState {
            store,
            hub: Arc::default(),
            limits,
            shutdown: rx,
        };
        (state, tx)
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(routes::admin().layer(DefaultBodyLimit::max(crate::api::ADMIN_BODY_LIMIT)))
        .merge(machine::routes().layer(DefaultBodyLimit::max(
            crate::api::machine::MACHINE_BODY_LIMIT,
        )))
        .merge(routes::health())
        .fallback(error::no_route)
        .method_not_allowed_fallback(extract::wrong_method)
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves on `listener` until `shutdown` completes; then long-polls end at once and
/// requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = tokio::spawn(sweep_forever(state.clone()));
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await;
    sweeper.abort();
    result
}

/// Expires and settles commands whose deadlines passed, and wakes whoever waits on them.
async fn sweep_forever(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let swept = state
            .store
            .call(|c| {
                let runners = store::commands::sweep(c)?;
                store::sessions::settle(c)?;
                store::computers::settle(c)?;
                Ok(runners)
            })
            .await;
        match swept {
            Ok(runners) => {
                for r in runners {
                    state.hub.signals(&r).done.notify_waiters();
                }
            }
            Err(e) => tracing::warn!(error = %e, "command sweep failed"),
        }
    }
}
