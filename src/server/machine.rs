//! The machine API for Runners (`/runner/v1`). Separate credentials (Runner tokens), no
//! browser requests (any `Origin` is refused), a protocol version on every request, and a
//! connection generation that fences everything a previous connection could still send.

use std::time::Duration;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use axum::{Json, Router};

use super::AppState;
use super::error::ApiError;
use super::extract::Body;
use super::hub::GenerationError;
use super::store::commands::{self, StartRefused};
use super::store::{computers, sessions};
use crate::api::machine::{
    self, CompleteParams, Connected, HEADER_GENERATION, HEADER_INSTANCE, HEADER_PROTOCOL,
    LEASE_WAIT_MS, LeaseParams, Leased, PROTOCOL_VERSION, RunnerStatus, StartGranted, codes,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/runner/v1/connect", post(machine_connect))
        .route("/runner/v1/lease", post(machine_lease))
        .route("/runner/v1/disconnect", post(machine_disconnect))
        .route("/runner/v1/commands/{id}/start", post(command_start))
        .route("/runner/v1/commands/{id}/complete", post(command_complete))
        .route("/runner/v1/commands/{id}/events", post(command_events))
}

/// An authenticated Runner instance (any generation).
pub struct RunnerCaller {
    pub runner_id: String,
    pub instance: String,
}

/// An authenticated Runner instance whose generation is the live one.
pub struct Current {
    pub runner_id: String,
    pub instance: String,
    pub generation: i64,
}

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

impl FromRequestParts<AppState> for RunnerCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if parts.headers.contains_key(axum::http::header::ORIGIN) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                codes::ORIGIN_REFUSED,
                "the machine API refuses requests with an Origin header (browsers may not call it)",
            ));
        }
        match header(parts, HEADER_PROTOCOL).map(str::parse::<u32>) {
            Some(Ok(PROTOCOL_VERSION)) => {}
            Some(Ok(other)) => {
                return Err(ApiError::new(
                    StatusCode::UPGRADE_REQUIRED,
                    codes::UPGRADE_REQUIRED,
                    format!(
                        "this control plane speaks runner protocol {PROTOCOL_VERSION} and the Runner sent {other}: run the same yy version on both sides"
                    ),
                ));
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "missing or malformed {HEADER_PROTOCOL} header"
                )));
            }
        }
        let instance = header(parts, HEADER_INSTANCE)
            .and_then(|v| uuid::Uuid::parse_str(v).ok())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "missing or malformed {HEADER_INSTANCE} header (a UUID)"
                ))
            })?
            .to_string();
        let token = header(parts, "authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| t.starts_with(super::auth::RUNNER_TOKEN_PREFIX))
            .ok_or_else(unknown_runner)?;
        let hash = super::auth::token_hash(token);
        let found = state
            .store
            .call(move |c| commands::runner_for_token(c, &hash))
            .await?;
        match found {
            None => Err(unknown_runner()),
            Some((id, Some(_), _)) => Err(disabled(&id)),
            Some((runner_id, None, _)) => Ok(RunnerCaller {
                runner_id,
                instance,
            }),
        }
    }
}

fn unknown_runner() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        codes::UNKNOWN_RUNNER,
        "unknown runner token: register the Runner again with `yy runner register`",
    )
}

fn disabled(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        codes::RUNNER_DISABLED,
        format!("runner {id} was disabled by an admin; register a new Runner to continue"),
    )
}

fn generation_error(e: GenerationError, generation: i64) -> ApiError {
    match e {
        GenerationError::Stale => ApiError::new(
            StatusCode::CONFLICT,
            codes::STALE_GENERATION,
            format!("connection generation {generation} is not current: connect again"),
        ),
        GenerationError::Replaced { instance } => ApiError::new(
            StatusCode::CONFLICT,
            codes::REPLACED,
            format!(
                "another instance ({instance}) of this Runner connected after this one; only one instance may run"
            ),
        ),
    }
}

impl FromRequestParts<AppState> for Current {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = RunnerCaller::from_request_parts(parts, state).await?;
        let generation: i64 = header(parts, HEADER_GENERATION)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "missing or malformed {HEADER_GENERATION} header: connect first"
                ))
            })?;
        let signals = state.hub.signals(&caller.runner_id);
        signals
            .check(generation, &caller.instance)
            .map_err(|e| generation_error(e, generation))?;
        if signals.should_touch() {
            let id = caller.runner_id.clone();
            state.store.call(move |c| commands::touch(c, &id)).await?;
        }
        Ok(Current {
            runner_id: caller.runner_id,
            instance: caller.instance,
            generation,
        })
    }
}

async fn machine_connect(
    State(state): State<AppState>,
    caller: RunnerCaller,
    Body(status): Body<RunnerStatus>,
) -> Result<Json<Connected>, ApiError> {
    let id = caller.runner_id.clone();
    let instance = caller.instance.clone();
    let connected = state
        .store
        .call(move |c| {
            let connected = commands::connect(c, &id, &instance, &status)?;
            // Turns of the ended generation become uncertain with their commands, and
            // its computer leases end.
            sessions::settle(c)?;
            computers::end_leases(c, &id, connected.generation)?;
            Ok(connected)
        })
        .await?;
    state
        .hub
        .set_live(&caller.runner_id, connected.generation, &caller.instance);
    state.hub.signals(&caller.runner_id).done.notify_waiters();
    tracing::info!(
        runner = %caller.runner_id,
        instance = %caller.instance,
        generation = connected.generation,
        uncertain = connected.uncertain.len(),
        requeued = connected.requeued.len(),
        "runner connected"
    );
    Ok(Json(connected))
}

async fn machine_disconnect(
    State(state): State<AppState>,
    current: Current,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (id, generation) = (current.runner_id.clone(), current.generation);
    state
        .store
        .call(move |c| commands::disconnect(c, &id, generation))
        .await?;
    state.hub.clear(&current.runner_id, Some(generation));
    tracing::info!(runner = %current.runner_id, generation, "runner disconnected");
    Ok(Json(serde_json::json!({ "disconnected": true })))
}

/// Long-poll: answers as soon as work is queued, or with none after the wait.
async fn machine_lease(
    State(state): State<AppState>,
    current: Current,
    Body(p): Body<LeaseParams>,
) -> Result<Json<Leased>, ApiError> {
    let wait = Duration::from_millis(p.wait_ms.unwrap_or(LEASE_WAIT_MS).min(LEASE_WAIT_MS));
    let deadline = tokio::time::Instant::now() + wait;
    let signals = state.hub.signals(&current.runner_id);
    let mut shutdown = state.shutdown.clone();
    loop {
        // Register for wake-ups before looking, so nothing enqueued in between is missed.
        let notified = signals.work.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        let commands = match lease_checked(&state, &current, p.max).await? {
            Ok(commands) => commands,
            Err(refusal) => return Err(refusal),
        };
        if !commands.is_empty() {
            return Ok(Json(Leased { commands }));
        }
        if *shutdown.borrow() {
            return Err(shutting_down());
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(Json(Leased { commands: vec![] })),
            _ = shutdown.changed() => return Err(shutting_down()),
        }
    }
}

fn shutting_down() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        codes::SHUTTING_DOWN,
        "the control plane is shutting down; reconnect later",
    )
}

/// After a wake-up, in one database call: the Runner may have been disabled or replaced
/// meanwhile; if not, lease. The generation is checked against the database too, in the same
/// call as the lease: a connect that committed first has already requeued what an older
/// generation would take, so an older generation must take nothing.
async fn lease_checked(
    state: &AppState,
    current: &Current,
    max: u32,
) -> Result<Result<Vec<machine::LeasedCommand>, ApiError>, ApiError> {
    let (id, generation, instance) = (
        current.runner_id.clone(),
        current.generation,
        current.instance.clone(),
    );
    let hub = state.hub.clone();
    state
        .store
        .call(move |c| {
            let Some((disabled_at, stored)) = super::store::runners::fence(c, &id)? else {
                return Ok(Err(disabled(&id)));
            };
            if disabled_at.is_some() {
                return Ok(Err(disabled(&id)));
            }
            if let Err(e) = hub.signals(&id).check(generation, &instance) {
                return Ok(Err(generation_error(e, generation)));
            }
            if stored != generation {
                return Ok(Err(generation_error(GenerationError::Stale, generation)));
            }
            if max == 0 {
                return Ok(Ok(Vec::new()));
            }
            commands::lease(c, &id, generation, max.min(256)).map(Ok)
        })
        .await
        .map_err(ApiError::from)
}

async fn command_start(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<String>,
) -> Result<Json<StartGranted>, ApiError> {
    let (runner, generation, cid) = (current.runner_id.clone(), current.generation, id.clone());
    let decision = state
        .store
        .call(move |c| commands::start(c, &runner, generation, &cid))
        .await?;
    state.hub.signals(&current.runner_id).done.notify_waiters();
    match decision {
        Ok(deadline_ms) => Ok(Json(StartGranted { id, deadline_ms })),
        Err(StartRefused::Cancelled) => Err(ApiError::new(
            StatusCode::GONE,
            "cancelled",
            format!("command {id} was cancelled; do not run it"),
        )),
        Err(StartRefused::Expired) => Err(ApiError::new(
            StatusCode::GONE,
            "expired",
            format!("command {id} passed its deadline; do not run it"),
        )),
        Err(StartRefused::NotLeased(why)) => {
            Err(ApiError::new(StatusCode::CONFLICT, "not_leased", why))
        }
    }
}

async fn command_complete(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<String>,
    Body(p): Body<CompleteParams>,
) -> Result<Json<machine::Command>, ApiError> {
    let result = p.result.as_ref().map(|r| r.to_string());
    if result
        .as_ref()
        .is_some_and(|r| r.len() > machine::MAX_RESULT_JSON_BYTES)
    {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "result_too_large",
            "the result is larger than the 8 MiB limit",
        ));
    }
    let (runner, generation) = (current.runner_id.clone(), current.generation);
    let error = p.error.map(|e| e.chars().take(4096).collect::<String>());
    let row = state
        .store
        .call(move |c| {
            let row = commands::complete(
                c,
                &runner,
                generation,
                &id,
                p.outcome,
                result.as_deref(),
                error.as_deref(),
            )?;
            // Turns and computers follow the outcomes of their own commands; other kinds
            // (pings, fetches, cancels) change neither, and every second the sweep settles
            // whatever ended another way. Settling on each of them cost a transaction or
            // two per command.
            if row.kind.starts_with("session.") {
                sessions::settle(c)?;
            }
            if row.kind.starts_with("computer.") {
                computers::settle(c)?;
            }
            Ok(row)
        })
        .await?;
    state.hub.signals(&current.runner_id).done.notify_waiters();
    Ok(Json(row.view(false)))
}

/// Events of a running turn (text deltas, tool starts and results), streamed as they come.
async fn command_events(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<String>,
    Body(p): Body<crate::api::sessions::EventsParams>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if p.events.len() > 1000 {
        return Err(ApiError::bad_request("at most 1000 events per request"));
    }
    let (runner, generation) = (current.runner_id.clone(), current.generation);
    let count = p.events.len();
    state
        .store
        .call(move |c| sessions::append_events(c, &runner, generation, &id, &p.events))
        .await?;
    state.hub.signals(&current.runner_id).done.notify_waiters();
    Ok(Json(serde_json::json!({ "accepted": count })))
}
