//! The machine API for Runners (`/runner/v1`). Separate credentials (Runner tokens), no
//! browser requests (any `Origin` is refused), a protocol version on every request, and a
//! connection generation that fences everything a previous connection could still send.

use std::time::Duration;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::AppState;
use super::error::ApiError;
use super::extract::Body;
use super::queue::QueueError;
use super::store::commands::Takeover;
use super::store::runner_tokens;
use crate::api::ids::{CommandId, Generation, RunnerId};
use crate::api::machine::{
    self, CompleteParams, Connected, HEADER_GENERATION, HEADER_INSTANCE, HEADER_PREVIOUS_INSTANCE,
    HEADER_PROTOCOL, HEADER_REPLACE, LEASE_WAIT_MS, LeaseParams, Leased, LeasedCommand,
    PROTOCOL_VERSION, RunnerStatus, StartGranted, TokenRenewed, codes,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/runner/v1/connect", post(machine_connect))
        .route("/runner/v1/lease", post(machine_lease))
        .route("/runner/v1/disconnect", post(machine_disconnect))
        .route("/runner/v1/token", post(machine_token))
        .route("/runner/v1/whoami", axum::routing::get(machine_whoami))
        .route("/runner/v1/commands/start", post(commands_start))
        .route("/runner/v1/commands/complete", post(commands_complete))
        .route("/runner/v1/commands/{id}/start", post(command_start))
        .route("/runner/v1/commands/{id}/complete", post(command_complete))
        .route("/runner/v1/commands/{id}/events", post(command_events))
        .route("/runner/v1/team-tools", post(team_tool_call))
        .route(
            "/runner/v1/shell/{relay_id}",
            axum::routing::get(super::shell_relay::runner_shell),
        )
}

/// An authenticated Runner instance (any generation).
pub struct RunnerCaller {
    pub runner_id: RunnerId,
    pub instance: String,
    /// What the token's lifetime says (expiry, renew now).
    pub token: runner_tokens::RunnerAuth,
}

/// An authenticated Runner instance whose generation is the live one.
pub struct Current {
    pub runner_id: RunnerId,
    pub instance: String,
    pub generation: Generation,
    pub token: runner_tokens::RunnerAuth,
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
            .filter(|t| t.starts_with(crate::api::RUNNER_TOKEN_PREFIX))
            .ok_or_else(unknown_runner)?;
        let hash = super::auth::token_hash(token);
        let lifetime = state.runner_token_lifetime_ms();
        let found = state
            .store
            .call_unlocked_relaxed(move |c| runner_tokens::authenticate(c, &hash, lifetime))
            .await?;
        match found {
            None => Err(unknown_runner()),
            Some(auth) if auth.disabled_at.is_some() => {
                Err(QueueError::Disabled(auth.runner_id).into())
            }
            Some(auth) if auth.expired => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                codes::TOKEN_EXPIRED,
                format!(
                    "the Runner token expired at {} (a Runner renews it at 75 % of --runner-token-lifetime while it runs; this one was away too long): register the Runner again with `yy runner disable {id}` and `yy runner register`",
                    crate::timefmt::rfc3339(auth.expires_at),
                    id = auth.runner_id
                ),
            )),
            Some(auth) => {
                if auth.promoted {
                    tracing::info!(runner = %auth.runner_id, "runner token renewed: the new one is in use, the old one ended");
                }
                Ok(RunnerCaller {
                    runner_id: auth.runner_id.clone(),
                    instance,
                    token: auth,
                })
            }
        }
    }
}

/// The connection generation a machine request carries.
pub fn generation_header(headers: &axum::http::HeaderMap) -> Result<Generation, ApiError> {
    headers
        .get(HEADER_GENERATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map(Generation)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "missing or malformed {HEADER_GENERATION} header: connect first"
            ))
        })
}

fn unknown_runner() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        codes::UNKNOWN_RUNNER,
        "unknown runner token: register the Runner again with `yy runner register`",
    )
}

impl FromRequestParts<AppState> for Current {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = RunnerCaller::from_request_parts(parts, state).await?;
        let generation = generation_header(&parts.headers)?;
        state
            .queue
            .check_live(&caller.runner_id, generation, &caller.instance)
            .await?;
        Ok(Current {
            runner_id: caller.runner_id,
            instance: caller.instance,
            generation,
            token: caller.token,
        })
    }
}

async fn machine_connect(
    State(state): State<AppState>,
    caller: RunnerCaller,
    headers: axum::http::HeaderMap,
    Body(status): Body<RunnerStatus>,
) -> Result<Json<Connected>, ApiError> {
    status.check().map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_status",
            format!("the Runner's status is refused: {e}"),
        )
    })?;
    let takeover = Takeover {
        previous: headers
            .get(HEADER_PREVIOUS_INSTANCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| uuid::Uuid::parse_str(v).ok())
            .map(|u| u.to_string()),
        replace: headers
            .get(HEADER_REPLACE)
            .is_some_and(|v| v.as_bytes() == b"1"),
    };
    if takeover.replace {
        tracing::warn!(runner = %caller.runner_id, instance = %caller.instance, "runner instance connects with --replace: any other instance online stops");
    }
    let mut connected = state
        .queue
        .connect(&caller.runner_id, &caller.instance, status, takeover)
        .await?;
    connected.token_expires_at_ms = Some(caller.token.expires_at);
    connected.rotate_token = caller.token.rotate;
    tracing::info!(
        runner = %caller.runner_id,
        instance = %caller.instance,
        generation = %connected.generation,
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
    let generation = current.generation;
    state
        .queue
        .disconnect(&current.runner_id, generation)
        .await?;
    tracing::info!(runner = %current.runner_id, %generation, "runner disconnected");
    Ok(Json(serde_json::json!({ "disconnected": true })))
}

/// Long-poll: answers as soon as work is queued, or with none after the wait.
///
/// A poll that has to wait answers its status and headers at once and its body when the
/// wait ends, so that only the wait itself is held meanwhile, not the request's handler
/// and middleware (what 10,000 idle Runners cost the control plane). An error found after
/// the wait began (the Runner disabled or replaced, the server shutting down) ends it with
/// no commands; the next lease, refused at once, reports it.
async fn machine_lease(
    State(state): State<AppState>,
    current: Current,
    Body(p): Body<LeaseParams>,
) -> Result<Response, ApiError> {
    let mut wait = Duration::from_millis(p.wait_ms.unwrap_or(LEASE_WAIT_MS).min(LEASE_WAIT_MS));
    // Answer by the time the token is due for renewal, so the answer can say so while the
    // token still works (matters for short --runner-token-lifetime).
    if !current.token.rotate {
        let renew_at = current.token.issued_at
            + state.runner_token_lifetime_ms() / 1000 * runner_tokens::RENEW_AT_PER_MILLE;
        let until = renew_at - crate::timefmt::now_ms();
        if until >= 0 {
            wait = wait.min(Duration::from_millis(until as u64 + 10));
        }
    }
    let (parked_tx, parked) = tokio::sync::oneshot::channel();
    let mut lease = Box::pin({
        let (queue, id, instance) = (
            state.queue.clone(),
            current.runner_id.clone(),
            current.instance.clone(),
        );
        async move {
            queue
                .lease(
                    &id,
                    current.generation,
                    &instance,
                    p.max,
                    wait,
                    Some(parked_tx),
                )
                .await
        }
    });
    tokio::select! {
        biased;
        commands = &mut lease => {
            let answer =
                lease_answer(&state, &current.runner_id, current.token.rotate, commands?).await?;
            return Ok(Json(answer).into_response());
        }
        Ok(()) = parked => {}
    }
    let (runner_id, rotate) = (current.runner_id, current.token.rotate);
    let body = futures_util::stream::once(async move {
        let commands = lease.await.unwrap_or_else(|e| {
            tracing::debug!(runner = %runner_id, error = %e, "a parked lease ended without commands");
            Vec::new()
        });
        let answer = match lease_answer(&state, &runner_id, rotate, commands).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(runner = %runner_id, error = %e.message, "a parked lease could not read the token's rotation");
                Leased {
                    commands: Vec::new(),
                    rotate_token: rotate,
                }
            }
        };
        let json = serde_json::to_vec(&answer).expect("a lease answer serializes");
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(json))
    });
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// The lease's answer. A wait that brought nothing reads the token again: an admin may
/// have asked for a rotation meanwhile (that ends the wait). A busy Runner, which gets
/// commands at once, costs no second read: its next lease carries what its token says.
async fn lease_answer(
    state: &AppState,
    runner_id: &RunnerId,
    rotate: bool,
    commands: Vec<LeasedCommand>,
) -> Result<Leased, ApiError> {
    let rotate_token = if commands.is_empty() && !rotate {
        let (id, lifetime) = (runner_id.clone(), state.runner_token_lifetime_ms());
        state
            .store
            .call_unlocked_relaxed(move |c| runner_tokens::rotate_due(c, &id, lifetime))
            .await?
    } else {
        rotate
    };
    Ok(Leased {
        commands,
        rotate_token,
    })
}

/// Who the token belongs to and when it expires; no generation needed and none changed, so
/// `yy doctor` may ask while the Runner runs.
async fn machine_whoami(
    State(state): State<AppState>,
    caller: RunnerCaller,
) -> Result<Json<machine::RunnerWhoami>, ApiError> {
    let id = caller.runner_id.clone();
    let (computer_image, online_instance) = state
        .store
        .call(move |c| {
            Ok((
                super::store::runners::computer_image(c, &id)?,
                super::store::runners::online_instance(c, &id)?,
            ))
        })
        .await?;
    Ok(Json(machine::RunnerWhoami {
        runner_id: caller.runner_id.into(),
        token_expires_at_ms: caller.token.expires_at,
        rotate_token: caller.token.rotate,
        computer_image,
        online_instance,
    }))
}

/// A new token for the calling Runner, pending until its first use (store::runner_tokens).
/// Only the live connection may ask: a replaced instance cannot take the Runner's token.
async fn machine_token(
    State(state): State<AppState>,
    current: Current,
) -> Result<Json<TokenRenewed>, ApiError> {
    let token = super::auth::new_token(crate::api::RUNNER_TOKEN_PREFIX);
    let (id, hash) = (current.runner_id.clone(), super::auth::token_hash(&token));
    let issued_at_ms = state
        .store
        .call(move |c| runner_tokens::issue(c, &id, &hash))
        .await?;
    tracing::info!(runner = %current.runner_id, "runner token issued; pending until its first use");
    Ok(Json(TokenRenewed {
        token,
        issued_at_ms,
        expires_at_ms: issued_at_ms.saturating_add(state.runner_token_lifetime_ms()),
    }))
}

async fn command_start(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<CommandId>,
) -> Result<Json<StartGranted>, ApiError> {
    let deadline_ms = state
        .queue
        .start(&current.runner_id, current.generation, id.clone())
        .await?;
    Ok(Json(StartGranted {
        id: id.into(),
        deadline_ms,
    }))
}

async fn command_complete(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<CommandId>,
    Body(p): Body<CompleteParams>,
) -> Result<Json<machine::Command>, ApiError> {
    let row = complete_one(&state, &current, id, p).await?;
    Ok(Json(row.view(false)))
}

async fn complete_one(
    state: &AppState,
    current: &Current,
    id: CommandId,
    p: CompleteParams,
) -> Result<crate::server::store::commands::CommandRow, ApiError> {
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
    let error = p.error.map(|e| e.chars().take(4096).collect::<String>());
    Ok(state
        .queue
        .complete(
            &current.runner_id,
            current.generation,
            id,
            p.outcome,
            result,
            error,
        )
        .await?)
}

/// A batch of 1 to [`machine::MAX_BATCH`] items, else 400.
fn batch_size(n: usize) -> Result<(), ApiError> {
    if n == 0 || n > machine::MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "a batch holds 1 to {} commands, not {n}",
            machine::MAX_BATCH
        )));
    }
    Ok(())
}

fn refusal(e: ApiError) -> machine::Refusal {
    machine::Refusal {
        status: e.status.as_u16(),
        code: e.code.to_string(),
        message: e.message,
    }
}

/// [`command_start`] for several commands in one request. They run side by side, so the
/// store commits them together (group commit); each gets the answer it would have alone.
async fn commands_start(
    State(state): State<AppState>,
    current: Current,
    Body(p): Body<machine::StartBatch>,
) -> Result<Json<machine::BatchAnswer>, ApiError> {
    batch_size(p.ids.len())?;
    let each = p.ids.into_iter().map(|id| {
        let (state, current) = (&state, &current);
        async move {
            let started = state
                .queue
                .start(&current.runner_id, current.generation, CommandId::new(&id))
                .await;
            match started {
                Ok(deadline_ms) => machine::BatchItem {
                    id,
                    deadline_ms: Some(deadline_ms),
                    refused: None,
                },
                Err(e) => machine::BatchItem {
                    id,
                    deadline_ms: None,
                    refused: Some(refusal(e.into())),
                },
            }
        }
    });
    let results = futures_util::future::join_all(each).await;
    Ok(Json(machine::BatchAnswer { results }))
}

/// [`command_complete`] for several commands in one request, committed together.
async fn commands_complete(
    State(state): State<AppState>,
    current: Current,
    Body(p): Body<machine::CompleteBatch>,
) -> Result<Json<machine::BatchAnswer>, ApiError> {
    batch_size(p.reports.len())?;
    let each = p.reports.into_iter().map(|r| {
        let (state, current) = (&state, &current);
        async move {
            let params = CompleteParams {
                outcome: r.outcome,
                result: r.result,
                error: r.error,
            };
            let done = complete_one(state, current, CommandId::new(&r.id), params).await;
            machine::BatchItem {
                id: r.id,
                deadline_ms: None,
                refused: done.err().map(refusal),
            }
        }
    });
    let results = futures_util::future::join_all(each).await;
    Ok(Json(machine::BatchAnswer { results }))
}

/// Events of a running turn (text deltas, tool starts and results), streamed as they come.
async fn command_events(
    State(state): State<AppState>,
    current: Current,
    Path(id): Path<CommandId>,
    Body(p): Body<crate::api::sessions::EventsParams>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if p.events.len() > 1000 {
        return Err(ApiError::bad_request("at most 1000 events per request"));
    }
    let count = p.events.len();
    state
        .queue
        .append_events(&current.runner_id, current.generation, id, p.events)
        .await?;
    Ok(Json(serde_json::json!({ "accepted": count })))
}

/// A team-tool call of an admin agent's model, forwarded by the Runner running its turn.
/// The opaque tool id decides who calls: account, source, session and agent are bound to
/// it on this side, and it works only while its turn runs on this Runner connection.
async fn team_tool_call(
    State(state): State<AppState>,
    current: Current,
    Body(p): Body<crate::api::teams::TeamToolCall>,
) -> Result<Json<crate::api::teams::TeamToolAnswer>, ApiError> {
    let (runner, generation) = (current.runner_id.clone(), current.generation);
    let result = state
        .store
        .call(move |c| {
            super::store::team_tools::call(c, &runner, generation, &p.tool_id, &p.name, &p.args)
        })
        .await?;
    state.queue.kick();
    Ok(Json(crate::api::teams::TeamToolAnswer { result }))
}
