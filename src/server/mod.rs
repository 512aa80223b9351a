//! `yy serve`: the control plane. One HTTP server on one port: the admin API under
//! `/api/v1`, the machine API for Runners under `/runner/v1`, and `/healthz`.

pub mod artifacts;
pub mod auth;
pub mod conn;
pub mod error;
mod extract;
pub mod hosts;
mod hub;
mod leader;
pub mod login;
mod machine;
mod peers;
pub mod queue;
mod routes;
mod scheduler;
pub mod shell_relay;
pub mod store;
pub mod telemetry;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::sync::watch;
use tower_http::trace::TraceLayer;

pub use conn::ConnLimits;
pub use queue::Queue;
pub use store::Store;
use store::commands::QueueLimits;

/// Settings of one control plane, fixed at start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub queue: QueueLimits,
    pub conn: ConnLimits,
    pub allowed_hosts: hosts::AllowedHosts,
    /// An API token unused for this long stops working (each use extends it).
    pub token_lifetime: Duration,
    /// Finished commands and turn events older than this are deleted.
    pub retention: Duration,
    /// HTTPS: the certificate in use (None: plain HTTP).
    pub tls: Option<Arc<tls::ServerTls>>,
    /// What an operator should know about this server's setup (`yy status`).
    pub warnings: Vec<String>,
    /// A Runner token works this long after it was issued; the Runner renews it at 75 %.
    pub runner_token_lifetime: Duration,
    /// The PostgreSQL database the store is on, when it is: the replicas sharing it wake
    /// each other through it (`peers`). Never shown: it may hold a password.
    pub database_url: Option<String>,
    /// How the other replicas reach this one (`--peer-url`), with a database.
    pub peer_url: Option<String>,
}

impl ServerConfig {
    /// Defaults for a server listening on `listen`.
    pub fn new(listen: std::net::SocketAddr) -> ServerConfig {
        ServerConfig {
            queue: QueueLimits::default(),
            conn: ConnLimits::default(),
            allowed_hosts: hosts::AllowedHosts::new(listen, &[]),
            token_lifetime: DEFAULT_TOKEN_LIFETIME,
            retention: DEFAULT_RETENTION,
            tls: None,
            warnings: Vec::new(),
            runner_token_lifetime: DEFAULT_RUNNER_TOKEN_LIFETIME,
            database_url: None,
            peer_url: None,
        }
    }
}

pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
pub const DEFAULT_RUNNER_TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// What every handler can reach: the store for reads, the command service for changes
/// that concern Runners.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub queue: Queue,
    pub config: Arc<ServerConfig>,
    pub login: Arc<login::LoginGuard>,
    /// Artifact files under the data directory.
    pub artifacts: artifacts::Files,
    /// Operators' shells being relayed (`yy computer attach --control`).
    pub shells: Arc<shell_relay::Relays>,
    /// When this state was made (the uptime `yy status` shows).
    pub started: std::time::Instant,
    pub started_ms: i64,
    /// This process's id among the replicas on a PostgreSQL database.
    pub replica_id: Option<Arc<str>>,
}

impl AppState {
    pub fn token_lifetime_ms(&self) -> i64 {
        i64::try_from(self.config.token_lifetime.as_millis()).unwrap_or(i64::MAX)
    }

    pub fn runner_token_lifetime_ms(&self) -> i64 {
        i64::try_from(self.config.runner_token_lifetime.as_millis()).unwrap_or(i64::MAX)
    }

    /// The state, and the sender that starts the shutdown (long-polls answer at once).
    pub fn new(
        store: Store,
        config: ServerConfig,
        artifacts: artifacts::ArtifactFiles,
    ) -> (AppState, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        telemetry::install();
        let replica_id = config
            .database_url
            .is_some()
            .then(|| Arc::from(&store::new_id()[..8]));
        let mut queue = Queue::new(store.clone(), config.queue, rx);
        if let Some(url) = &config.database_url {
            queue = queue.replicated(url.clone(), artifacts.upload_listener());
        }
        let state = AppState {
            queue,
            store,
            config: Arc::new(config),
            login: Arc::default(),
            artifacts: std::sync::Arc::new(artifacts),
            shells: Arc::default(),
            started: std::time::Instant::now(),
            started_ms: crate::timefmt::now_ms(),
            replica_id,
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
        // Inside the host guard: a request it refuses is not counted under a route. Router
        // layers run after routing, so the route template is known here.
        .layer(axum::middleware::from_fn(telemetry::count_requests))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            hosts::guard,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves on `listener` until `shutdown` completes; then long-polls end at once, requests
/// in flight get the shutdown grace to finish, and whatever is still open is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.config.conn.clone();
    let tls = state.config.tls.clone();
    let sweeper = tokio::spawn(
        state
            .queue
            .clone()
            .sweep_forever(state.config.retention, state.artifacts.clone()),
    );
    let scheduler = tokio::spawn(state.queue.clone().schedule_forever());
    let heartbeat = state.replica_id.clone().map(|id| {
        let listen = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tokio::spawn(leader::heartbeat_forever(
            state.queue.clone(),
            id,
            listen,
            state.started_ms,
            leader::Peer {
                url: state.config.peer_url.clone(),
                tls: state.config.tls.clone(),
            },
        ))
    });
    let upkeep = tokio::spawn(crate::prom::upkeep_forever());
    let app = router(state);
    let result = conn::serve_connections(listener, app, limits, tls, async move {
        shutdown.await;
        let _ = stop.send(true);
    })
    .await;
    sweeper.abort();
    scheduler.abort();
    if let Some(h) = heartbeat {
        h.abort();
    }
    upkeep.abort();
    result
}
