use axum::Json;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, State};

use super::{many, one};

use crate::api::{params, views};
use crate::server::auth::{self, Admin, Caller};
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::store::accounts;
use crate::server::{AppState, login};

pub async fn auth_login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Body(p): Body<params::LoginParams>,
) -> Result<Json<views::LoginResult>, ApiError> {
    let address = peer.ip();
    let busy = |b: login::Busy| {
        ApiError::too_many(
            b.retry_after_secs,
            format!("{}: try again in {} s", b.reason, b.retry_after_secs),
        )
    };
    state.login.throttled(&p.username, address).map_err(busy)?;
    // One password check per core at once, behind a short queue: each takes ~19 MiB.
    let _slot = state.login.slot().await.map_err(busy)?;
    let username = p.username.clone();
    let found = state
        .store
        .call(move |c| accounts::credentials(c, &username))
        .await?;
    // Verify against a dummy hash for unknown users, so timing does not tell who exists.
    let (account, hash) = match found {
        Some((a, h)) => (Some(a), h),
        None => (None, dummy_hash().to_string()),
    };
    let password = p.password;
    let ok = tokio::task::spawn_blocking(move || auth::verify_password(&password, &hash))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Some(account) = account.filter(|_| ok) else {
        state.login.failed(&p.username, address);
        // Debug formatting escapes whatever the client put in the name.
        tracing::warn!(account = ?p.username, %address, "failed login");
        return Err(ApiError::unauthorized("wrong username or password"));
    };
    state.login.succeeded(&p.username, address);
    let token = auth::new_token(auth::API_TOKEN_PREFIX);
    let hash = auth::token_hash(&token);
    let account_id = account.id.clone();
    state
        .store
        .call(move |c| accounts::insert_token(c, &account_id, &hash))
        .await?;
    tracing::info!(username = %account.username, "login");
    Ok(Json(views::LoginResult {
        token,
        account: account.into(),
    }))
}

/// The argon2id hash of a random password nobody knows.
fn dummy_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| auth::hash_password(&auth::new_token("")).unwrap_or_default())
}

pub async fn auth_logout(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    let token_id = caller.token_id.clone();
    state
        .store
        .call(move |c| accounts::revoke_token(c, &token_id))
        .await?;
    Ok(Json(serde_json::json!({ "revoked": caller.token_id })))
}

pub async fn whoami(caller: Caller) -> Json<views::Whoami> {
    Json(views::Whoami {
        account: caller.account.into(),
        token_id: caller.token_id,
    })
}

pub async fn account_list(
    State(state): State<AppState>,
    _: Admin,
) -> Result<Json<Vec<views::Account>>, ApiError> {
    many(&state, |c| accounts::list(c)).await
}

pub async fn account_show(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Account>, ApiError> {
    one(&state, move |c| accounts::get_by_name(c, &name)).await
}

pub async fn account_create(
    State(state): State<AppState>,
    _: Admin,
    Body(p): Body<params::AccountCreate>,
) -> Result<Json<views::Account>, ApiError> {
    super::check_name("account", &p.username)?;
    auth::check_password(&p.password).map_err(ApiError::bad_request)?;
    let password = p.password;
    let hash = tokio::task::spawn_blocking(move || auth::hash_password(&password))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::internal)?;
    one(&state, move |c| {
        accounts::create(c, &p.username, &hash, p.admin)
    })
    .await
}
