//! `yy serve`: the control plane. One axum server on one port: the admin API under
//! `/api/v1`, and `/healthz`.

pub mod auth;
pub mod error;
mod extract;
mod routes;
pub mod store;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::trace::TraceLayer;

pub use store::Store;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(routes::admin())
        .layer(DefaultBodyLimit::max(crate::api::ADMIN_BODY_LIMIT))
        .merge(routes::health())
        .fallback(error::no_route)
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
