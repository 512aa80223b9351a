//! The Runner's own metrics, served on `--metrics-listen` (loopback by default, no auth):
//! its connection and long-poll, the commands it ran by kind and outcome, and the computers
//! holding a pool slot. Label values come from closed sets only.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics::{counter, describe_counter, describe_gauge, gauge};

use super::Shared;
use crate::api::machine::{CommandKind, Outcome};
use crate::prom;

/// Installs the recorder (once per process) and describes the Runner's metrics.
pub fn install() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    prom::handle();
    DESCRIBED.call_once(|| {
        describe_gauge!(
            "yy_runner_connected",
            "1 while the Runner holds a connection generation of the control plane."
        );
        describe_gauge!(
            "yy_runner_longpolls",
            "Long-polls for work the Runner holds open now."
        );
        describe_counter!(
            "yy_runner_connects_total",
            "Connections made to the control plane (each is a new generation)."
        );
        describe_counter!(
            "yy_runner_commands_total",
            "Commands this Runner ran, by kind and outcome."
        );
        describe_gauge!(
            "yy_runner_commands_running",
            "Commands running on this Runner now."
        );
    });
}

pub fn connected(yes: bool) {
    gauge!("yy_runner_connected").set(if yes { 1.0 } else { 0.0 });
    if yes {
        counter!("yy_runner_connects_total").increment(1);
    }
}

/// Counts one long-poll open while it lives.
pub struct LongPoll(());

impl LongPoll {
    pub fn open() -> LongPoll {
        gauge!("yy_runner_longpolls").increment(1.0);
        LongPoll(())
    }
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        gauge!("yy_runner_longpolls").decrement(1.0);
    }
}

/// Counts one command running while it lives.
pub struct Running(());

impl Running {
    pub fn start() -> Running {
        gauge!("yy_runner_commands_running").increment(1.0);
        Running(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        gauge!("yy_runner_commands_running").decrement(1.0);
    }
}

/// A command ended here. `kind` is what the control plane sent: only a known kind becomes
/// a label value.
pub fn command_ended(kind: CommandKind, outcome: Outcome) {
    counter!("yy_runner_commands_total", "kind" => kind.as_sql(), "outcome" => outcome.as_str())
        .increment(1);
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub(super) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(shared);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "the metrics listener stopped");
    }
}

async fn scrape(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let mut t = prom::Text::default();
    let (held, capacity) = match &shared.computers {
        Some(c) => (c.slots_held() as f64, f64::from(c.capacity())),
        None => (0.0, 0.0),
    };
    t.gauge(
        "yy_runner_computers_running",
        "Computers holding a pool slot (running, starting, or with a stop not confirmed yet).",
    )
    .sample("yy_runner_computers_running", &[], held);
    t.gauge(
        "yy_runner_computers_capacity",
        "Computers that may run at once (0: computers not enabled).",
    )
    .sample("yy_runner_computers_capacity", &[], capacity);
    t.gauge(
        "yy_runner_computers_warm",
        "Warm computers ready to be claimed (each holds a pool slot).",
    )
    .sample(
        "yy_runner_computers_warm",
        &[],
        shared.computers.as_ref().map_or(0, |c| c.warm_ready()) as f64,
    );
    let spares = shared.workers.as_ref().map_or(0, |w| w.spares());
    t.gauge(
        "yy_runner_worker_spares",
        "Worker processes started for computer agents' first turns and not claimed yet.",
    )
    .sample("yy_runner_worker_spares", &[], spares as f64);
    let (open, held) = match &shared.browser {
        Some(b) => (b.open_contexts().await, b.held()),
        None => (0, 0),
    };
    t.gauge(
        "yy_runner_browser_contexts",
        "Host agents' managed browsers open now (each a Chromium on its agent's profile).",
    )
    .sample("yy_runner_browser_contexts", &[], open as f64);
    t.gauge(
        "yy_runner_browser_taken_over",
        "Managed browsers an operator holds (the model's browser calls wait).",
    )
    .sample("yy_runner_browser_taken_over", &[], held as f64);
    (
        [(header::CONTENT_TYPE, prom::CONTENT_TYPE)],
        prom::render(t),
    )
}
