//! `GET /api/v1/status` (what `yy status` shows) and the scrape tokens of `/metrics`.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::status::{
    GoalCounts, SCRAPE_TOKEN_PREFIX, ScrapeToken, ScrapeTokenCreate, ScrapeTokenCreated, Status,
    StatusFailure, StatusReplica, StatusRunner, TurnCounts,
};
use crate::server::AppState;
use crate::server::auth::{self, Admin};
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::store::{overview, replicas, scrape_tokens};
use crate::server::telemetry;
use crate::timefmt::rfc3339_opt;

pub async fn status(State(state): State<AppState>, _: Admin) -> Result<Json<Status>, ApiError> {
    let (o, replicas) = state
        .store
        .call(|c| Ok((overview::read(c, true)?, replicas::list(c)?)))
        .await?;
    let now = crate::timefmt::now_ms();
    let me = state.replica_id.as_deref();
    let replicas = replicas
        .into_iter()
        .map(|r| StatusReplica {
            state: if r.up(now) { "up" } else { "gone" }.into(),
            this: Some(r.id.as_str()) == me,
            started_at: crate::timefmt::rfc3339(r.started_at),
            seen_at: crate::timefmt::rfc3339(r.seen_at),
            id: r.id,
            hostname: r.hostname,
            listen: r.listen,
            version: r.version,
            leads: r.leads,
        })
        .collect();
    let runners = o
        .runners
        .iter()
        .map(|r| StatusRunner {
            id: r.id.to_string(),
            source: r.source.clone(),
            state: telemetry::runner_state_word(&state, r).into(),
            last_seen_at: rfc3339_opt(r.last_seen_at),
            engine: r
                .status
                .as_ref()
                .and_then(|s| s["engine"].as_str().map(str::to_string)),
            version: r.version.clone(),
            computers: o
                .computers
                .iter()
                .filter(|((runner, _), _)| *runner == r.id)
                .map(|((_, s), n)| (s.clone(), *n))
                .collect(),
        })
        .collect();
    let turn = |s: &str| o.turns.get(s).copied().unwrap_or(0);
    let goal = |s: &str| o.goals.get(s).copied().unwrap_or(0);
    let artifacts = match state.artifacts.blobs() {
        crate::server::artifacts::Blobs::Dir(_) => "files",
        crate::server::artifacts::Blobs::Database => "database",
    };
    Ok(Json(Status {
        artifacts: Some(artifacts.into()),
        version: crate::VERSION.into(),
        started_at: crate::timefmt::rfc3339(state.started_ms),
        uptime_ms: u64::try_from(state.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        database_bytes: o.database_bytes,
        runners,
        turns: TurnCounts {
            running: turn("running"),
            queued: turn("queued"),
            waiting: turn("waiting"),
        },
        goals: GoalCounts {
            active: goal("active"),
            waiting_user: goal("waiting_user"),
        },
        recent_failures: o
            .failures
            .into_iter()
            .map(|f| StatusFailure {
                at: crate::timefmt::rfc3339(f.at),
                runner_id: f.runner_id.into(),
                command_id: f.command_id.into(),
                kind: f.kind,
                state: f.state,
                error: f.error,
            })
            .collect(),
        warnings: state.config.warnings.clone(),
        replicas,
    }))
}

pub async fn scrape_token_create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Body(p): Body<ScrapeTokenCreate>,
) -> Result<Json<ScrapeTokenCreated>, ApiError> {
    super::check_name("scrape token", &p.name)?;
    let token = auth::new_token(SCRAPE_TOKEN_PREFIX);
    let hash = auth::token_hash(&token);
    let account = caller.account.id.clone();
    let info = state
        .store
        .call(move |c| scrape_tokens::create(c, &p.name, &hash, &account))
        .await?;
    tracing::info!(id = %info.id, name = %info.name, by = ?caller.account.username, "scrape token created");
    Ok(Json(ScrapeTokenCreated { info, token }))
}

pub async fn scrape_token_list(
    State(state): State<AppState>,
    _: Admin,
) -> Result<Json<Vec<ScrapeToken>>, ApiError> {
    Ok(Json(state.store.call(|c| scrape_tokens::list(c)).await?))
}

pub async fn scrape_token_revoke(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<ScrapeToken>, ApiError> {
    Ok(Json(
        state
            .store
            .call(move |c| scrape_tokens::revoke(c, &id))
            .await?,
    ))
}
