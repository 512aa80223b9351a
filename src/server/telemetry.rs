//! The control plane's metrics: counters and the pickup histogram recorded where things
//! happen (these functions), gauges read from the database at scrape time, and `/metrics`
//! itself, readable with an admin's API token or a scrape token. Every label value comes
//! from a closed set (command kinds and outcomes, states, route templates, status codes) or
//! from the runners table (ids): nothing a Runner or a client writes becomes a label.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};

use super::AppState;
use super::auth;
use super::error::ApiError;
use super::store::overview::{self, Overview};
use super::store::scrape_tokens;
use crate::api::status::SCRAPE_TOKEN_PREFIX;
use crate::prom;

/// Installs the recorder (once per process) and describes the recorded metrics.
pub fn install() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    prom::handle();
    DESCRIBED.call_once(|| {
        describe_counter!(
            "yy_commands_total",
            "Runner commands that ended, by kind and outcome."
        );
        describe_histogram!(
            "yy_command_pickup_seconds",
            Unit::Seconds,
            "From a command's enqueue to its lease by its Runner."
        );
        describe_counter!(
            "yy_artifact_bytes_total",
            Unit::Bytes,
            "Artifact bytes received (in) and served (out) by the control plane."
        );
        describe_counter!(
            "yy_login_failures_total",
            "Failed password checks (logins and password changes)."
        );
        describe_counter!(
            "yy_http_requests_total",
            "HTTP requests answered, by route template and status code."
        );
        describe_counter!(
            "yy_peer_wakeups_total",
            "Wake-ups heard from other replicas on the PostgreSQL database, by kind (work, done, upload)."
        );
        describe_counter!(
            "yy_scheduler_passes_total",
            "Team scheduler passes completed."
        );
    });
}

/// A command reached a final state (`outcome`: its state's word).
pub fn command_ended(kind: &'static str, outcome: &'static str) {
    counter!("yy_commands_total", "kind" => kind, "outcome" => outcome).increment(1);
}

/// A command was leased `ms` milliseconds after it was enqueued.
pub fn command_picked_up(ms: i64) {
    histogram!("yy_command_pickup_seconds").record(ms.max(0) as f64 / 1000.0);
}

/// Artifact bytes received (`in`) or served (`out`).
pub fn artifact_bytes(direction: &'static str, n: u64) {
    counter!("yy_artifact_bytes_total", "direction" => direction).increment(n);
}

/// The team scheduler completed a pass (settled, admitted, delivered, stopped what it found).
pub fn scheduler_pass() {
    counter!("yy_scheduler_passes_total").increment(1);
}

/// A wake-up from another replica arrived (`kind`: work, done or upload).
pub fn peer_wakeup(kind: &'static str) {
    counter!("yy_peer_wakeups_total", "kind" => kind).increment(1);
}

pub fn login_failed() {
    counter!("yy_login_failures_total").increment(1);
}

/// Middleware: counts every answered request by its route template (`/api/v1/runners/{id}`,
/// never the raw path, so label values stay few) and status code.
pub async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let resp = next.run(req).await;
    let code = resp.status().as_u16().to_string();
    counter!("yy_http_requests_total", "route" => route, "code" => code).increment(1);
    resp
}

/// Who may read `/metrics`: an admin's API token or a live scrape token.
async fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match auth::bearer(headers) {
        Some(t) if t.starts_with(SCRAPE_TOKEN_PREFIX) => {
            let hash = auth::token_hash(t);
            let live = state
                .store
                .call(move |c| scrape_tokens::authenticate(c, &hash))
                .await?;
            if live {
                Ok(())
            } else {
                Err(ApiError::unauthorized(
                    "the scrape token is invalid or was revoked: make one with `yy metrics token create NAME`",
                ))
            }
        }
        Some(_) => {
            let caller = auth::caller(state, headers).await?;
            if caller.account.admin {
                Ok(())
            } else {
                Err(ApiError::forbidden(format!(
                    "account {:?} is not an admin: /metrics needs an admin's token or a scrape token",
                    caller.account.username
                )))
            }
        }
        None => Err(ApiError::unauthorized(
            "no token: /metrics needs a scrape token (`yy metrics token create NAME`) or an admin's API token",
        )),
    }
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers).await {
        return e.into_response();
    }
    let seen = match state.store.call(|c| overview::read(c, false)).await {
        Ok(o) => o,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let body = prom::render(gauges(&state, &seen));
    ([(header::CONTENT_TYPE, prom::CONTENT_TYPE)], body).into_response()
}

/// The gauges of one scrape. Every state of a closed set is written, zeros too, so a
/// series never just disappears while its subject exists.
fn gauges(state: &AppState, o: &Overview) -> prom::Text {
    let mut t = prom::Text::default();
    let mut by_state = [("online", 0u64), ("offline", 0), ("disabled", 0)];
    for r in &o.runners {
        by_state[runner_state(state, r)].1 += 1;
    }
    t.gauge("yy_runners", "Registered Runners by state.");
    for (s, n) in by_state {
        t.sample("yy_runners", &[("state", s)], n as f64);
    }
    t.gauge(
        "yy_longpolls",
        "Long-polls of Runners held open by this control plane now.",
    )
    .sample("yy_longpolls", &[], state.queue.open_polls() as f64);
    t.gauge(
        "yy_turns",
        "Turns not ended yet: running, queued on a Runner, waiting to be sent.",
    );
    for s in overview::TURN_STATES {
        let n = o.turns.get(*s).copied().unwrap_or(0);
        t.sample("yy_turns", &[("state", s)], n as f64);
    }
    t.gauge("yy_computers", "Computers by Runner and state.");
    for r in o.runners.iter().filter(|r| r.disabled_at.is_none()) {
        for s in overview::COMPUTER_STATES {
            let n = o
                .computers
                .get(&(r.id.to_string(), (*s).to_string()))
                .copied()
                .unwrap_or(0);
            t.sample("yy_computers", &[("runner", &r.id), ("state", s)], n as f64);
        }
    }
    t.gauge("yy_goals", "Goals by state.");
    for s in overview::GOAL_STATES {
        let n = o.goals.get(*s).copied().unwrap_or(0);
        t.sample("yy_goals", &[("state", s)], n as f64);
    }
    t
}

/// 0 online, 1 offline, 2 disabled (the index into the gauge's states).
fn runner_state(state: &AppState, r: &super::store::runners::RunnerRow) -> usize {
    if r.disabled_at.is_some() {
        2
    } else if r.online(crate::timefmt::now_ms()) && state.queue.is_live(&r.id) {
        0
    } else {
        1
    }
}

/// `online`, `offline` or `disabled`, as `yy status` shows it.
pub fn runner_state_word(state: &AppState, r: &super::store::runners::RunnerRow) -> &'static str {
    ["online", "offline", "disabled"][runner_state(state, r)]
}
