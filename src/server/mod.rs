//! `yy serve`: the control plane. One axum server on one port: the admin API under
//! `/api/v1`, the machine API for Runners under `/runner/v1`, and `/healthz`.

pub mod artifacts;
pub mod auth;
pub mod error;
mod extract;
mod hub;
mod machine;
pub mod queue;
mod routes;
pub mod store;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::sync::watch;
use tower_http::trace::TraceLayer;

pub use queue::Queue;
pub use store::Store;
use store::commands::QueueLimits;

/// What every handler can reach: the store for reads, the command service for changes
/// that concern Runners.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub queue: Queue,
    /// Artifact files under the data directory.
    pub artifacts: artifacts::Files,
}

impl AppState {
    /// The state, and the sender that starts the shutdown (long-polls answer at once).
    pub fn new(
        store: Store,
        limits: QueueLimits,
        artifacts: artifacts::ArtifactFiles,
    ) -> (AppState, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let state = AppState {
            queue: Queue::new(store.clone(), limits, rx),
            store,
            artifacts: std::sync::Arc::new(artifacts),
        };
        (state, tx)
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(
            routes::admin()
                .merge(artifacts::admin_routes())
                .layer(DefaultBodyLimit::max(crate::api::ADMIN_BODY_LIMIT)),
        )
        .merge(artifacts::upload_routes())
        .merge(
            machine::routes()
                .merge(artifacts::machine_routes())
                .layer(DefaultBodyLimit::max(
                    crate::api::machine::MACHINE_BODY_LIMIT,
                )),
        )
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
    let sweeper = tokio::spawn(state.queue.clone().sweep_forever());
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await;
    sweeper.abort();
    result
}
