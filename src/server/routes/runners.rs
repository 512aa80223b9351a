use axum::Json;
use axum::extract::{Path, State};

use crate::api::{names, params, views};
use crate::server::AppState;
use crate::server::auth::{self, Admin};
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::store::computers;
use crate::server::store::runner_images::ImageChange;
use crate::server::store::runners::{self, NewRunner};

pub async fn runner_list(
    State(state): State<AppState>,
    _: Admin,
) -> Result<Json<Vec<views::Runner>>, ApiError> {
    let lifetime = state.runner_token_lifetime_ms();
    let rows = state.store.call(|c| runners::list(c)).await?;
    let mut list: Vec<views::Runner> = rows.into_iter().map(|r| r.view(lifetime)).collect();
    for r in &mut list {
        polling(&state, r);
    }
    Ok(Json(list))
}

/// "Online" means polling for work now: a Runner killed without a goodbye stops being
/// online as soon as the control plane notices its polls stopped, not minutes later.
fn polling(state: &AppState, r: &mut views::Runner) {
    r.online = r.online && state.queue.is_live(&r.id);
}

pub async fn runner_show(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<views::Runner>, ApiError> {
    let row = state.store.call(move |c| runners::get(c, &id)).await?;
    let mut r = row.view(state.runner_token_lifetime_ms());
    polling(&state, &mut r);
    Ok(Json(r))
}

/// `yy runner rotate-token`: the Runner renews its token at its next contact (its
/// long-poll answers at once and says so). With `now`, the current token is revoked and
/// the Runner disabled at once (a leaked token): it must be registered again.
pub async fn runner_rotate_token(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<params::RunnerRotateToken>,
) -> Result<Json<views::Runner>, ApiError> {
    let revoke = p.now;
    let row = if revoke {
        // Through the queue's disable path: the long-poll ends now and grants close.
        let key = id.clone();
        state
            .store
            .call(move |c| crate::server::store::runner_tokens::request(c, &key, true))
            .await?;
        state.queue.runner_disable(id).await?
    } else {
        let row = state
            .store
            .call(move |c| crate::server::store::runner_tokens::request(c, &id, false))
            .await?;
        state.queue.wake_runner(&row.id);
        row
    };
    tracing::info!(runner = %row.id, revoke, "runner token rotation requested");
    let mut r = row.view(state.runner_token_lifetime_ms());
    polling(&state, &mut r);
    Ok(Json(r))
}

pub async fn runner_register(
    State(state): State<AppState>,
    _: Admin,
    Body(p): Body<params::RunnerRegister>,
) -> Result<Json<views::RunnerRegistration>, ApiError> {
    if p.profiles.is_empty() {
        return Err(ApiError::bad_request(
            "a runner needs at least one allowed profile: pass --profile NAME",
        ));
    }
    names::check_http_url("--server-url", &p.server_url, names::SERVER_URL_EXAMPLE)
        .map_err(ApiError::bad_request)?;
    names::check_http_url("--hermes-url", &p.hermes_url, names::HERMES_URL_EXAMPLE)
        .map_err(ApiError::bad_request)?;
    for root in &p.artifact_roots {
        names::check_absolute_path("--artifact-root", root).map_err(ApiError::bad_request)?;
    }
    if let Some(image) = &p.computer_image {
        computers::check_image_id(image).map_err(ApiError::bad_request)?;
    }
    let token = auth::new_token(auth::RUNNER_TOKEN_PREFIX);
    let hash = auth::token_hash(&token);
    let params = p.clone();
    let row = state
        .store
        .call(move |c| {
            runners::register(
                c,
                NewRunner {
                    source: &params.source,
                    profiles: &params.profiles,
                    artifact_roots: &params.artifact_roots,
                    server_url: params.server_url.trim_end_matches('/'),
                    hermes_url: params.hermes_url.trim_end_matches('/'),
                    token_hash: &hash,
                    computer_image: params.computer_image.as_deref(),
                    network: params.network.unwrap_or_default(),
                },
            )
        })
        .await?;
    tracing::info!(runner = %row.id, source = %row.source, "runner registered");
    let config = views::RunnerConfig {
        protocol: crate::api::machine::PROTOCOL_VERSION,
        server_url: row.server_url.clone(),
        server_urls: Vec::new(),
        runner_id: row.id.to_string(),
        token,
        hermes_url: row.hermes_url.clone(),
        allowed_profiles: row.allowed_profiles.clone(),
        artifact_roots: row.artifact_roots.clone(),
        // The Runner pins the certificate this server presents now (over https only).
        server_cert_sha256: match &state.config.tls {
            Some(tls) if row.server_url.starts_with("https://") => Some(tls.fingerprint()),
            _ => None,
        },
        allow_insecure_lan: false,
        hermes_token_file: None,
        hermes_command: None,
        hermes_home: None,
        hermes_credentials: None,
        worker_python: None,
        browser: None,
    };
    Ok(Json(views::RunnerRegistration {
        runner: row.into(),
        config,
    }))
}

pub async fn runner_disable(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
) -> Result<Json<views::Runner>, ApiError> {
    // Its long-poll ends now: the Runner hears the refusal at once, not at its next poll.
    let row = state.queue.runner_disable(id).await?;
    tracing::info!(runner = %row.id, "runner disabled");
    Ok(Json(row.into()))
}

/// Changes how a Runner's next computers start: the network mode at once; a new image
/// (a full id only) or `rollback` to the previous one becomes pending, is checked on the
/// Runner, and becomes current when the Runner is idle (store::runner_images). Running
/// computers keep theirs until they are started again.
pub async fn runner_update(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<params::RunnerUpdate>,
) -> Result<Json<views::Runner>, ApiError> {
    if p.computer_image.is_none() && p.network.is_none() && !p.rollback {
        return Err(ApiError::bad_request(
            "nothing to change: give computer_image, rollback and/or network",
        ));
    }
    let image = match (p.computer_image, p.rollback) {
        (Some(_), true) => {
            return Err(ApiError::bad_request(
                "give either computer_image or rollback, not both",
            ));
        }
        (Some(image), false) => {
            computers::check_image_id(&image).map_err(ApiError::bad_request)?;
            ImageChange::To(image)
        }
        (None, true) => ImageChange::Rollback,
        (None, false) => ImageChange::Keep,
    };
    let network = p.network;
    let row = state.queue.runner_update(id, image, network).await?;
    if let Some(network) = network {
        tracing::info!(runner = %row.id, %network, "runner network mode changed");
    }
    if let Some(pending) = &row.images.pending_image {
        tracing::info!(runner = %row.id, image = %pending, "computer image pending acceptance");
    }
    let mut view = row.view(state.runner_token_lifetime_ms());
    polling(&state, &mut view);
    Ok(Json(view))
}
