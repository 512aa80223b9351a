use axum::Json;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, State};

use super::{many, one};

use crate::api::{params, views};
use crate::server::auth::{self, Admin, Caller};
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::{accounts, ids};
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
    if let Some(a) = account.as_ref().filter(|a| ok && a.disabled_at.is_some()) {
        tracing::warn!(account = ?a.username, %address, "login of a disabled account");
        return Err(ApiError::forbidden(format!(
            "account {:?} is disabled: ask an admin to enable it",
            a.username
        )));
    }
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

pub async fn account_disable(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Account>, ApiError> {
    if name == caller.account.username {
        return Err(ApiError::conflict(
            "you cannot disable your own account: ask another admin",
        ));
    }
    let (account, stops) = state.queue.account_disable(name).await?;
    tracing::info!(account = ?account.username, by = ?caller.account.username, stops = stops.len(),
        "account disabled: its tokens revoked, waiting turns refused, goals stopped, running turns stopping");
    Ok(Json(account.into()))
}

pub async fn account_enable(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Account>, ApiError> {
    one(&state, move |c| accounts::set_disabled(c, &name, false)).await
}

/// Sets a password: an admin for any account, anyone else for their own with the current
/// password. Every other token of the account is revoked.
pub async fn account_password(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    caller: Caller,
    Path(name): Path<String>,
    Body(p): Body<params::PasswordChange>,
) -> Result<Json<views::Account>, ApiError> {
    let own = name == caller.account.username;
    if !own && !caller.account.admin {
        return Err(ApiError::forbidden(format!(
            "account {:?} is not an admin: you may change only your own password",
            caller.account.username
        )));
    }
    auth::check_password(&p.password).map_err(ApiError::bad_request)?;
    let key = name.clone();
    let (account, old_hash) = state
        .store
        .call(move |c| accounts::credentials(c, &key))
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("no account named {name:?}: see `yy account list`"))
        })?;
    let busy = |b: login::Busy| ApiError::too_many(b.retry_after_secs, b.reason);
    let _slot = state.login.slot().await.map_err(busy)?;
    if !caller.account.admin {
        // The same flood rules as login: this is a password check too.
        state.login.throttled(&name, peer.ip()).map_err(busy)?;
        let current = p.current_password.clone().unwrap_or_default();
        let ok = tokio::task::spawn_blocking(move || auth::verify_password(&current, &old_hash))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if !ok {
            state.login.failed(&name, peer.ip());
            return Err(ApiError::forbidden(
                "the current password is wrong (give it with the new one)",
            ));
        }
    }
    let password = p.password;
    let hash = tokio::task::spawn_blocking(move || auth::hash_password(&password))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::internal)?;
    let keep = own.then(|| caller.token_id.clone());
    let id = account.id.clone();
    state
        .store
        .call(move |c| accounts::set_password(c, &id, &hash, keep.as_deref()))
        .await?;
    tracing::info!(account = ?account.username, by = ?caller.account.username, "password changed; other tokens revoked");
    Ok(Json(account.into()))
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenQuery {
    pub account: Option<String>,
}

/// Live tokens: an admin sees every account's (or one's), anyone else only their own.
pub async fn token_list(
    State(state): State<AppState>,
    caller: Caller,
    Q(q): Q<TokenQuery>,
) -> Result<Json<Vec<views::Token>>, ApiError> {
    let account = match q.account {
        Some(a) if !caller.account.admin && a != caller.account.username => {
            return Err(ApiError::forbidden(
                "only admins may list another account's tokens",
            ));
        }
        None if !caller.account.admin => Some(caller.account.username.clone()),
        other => other,
    };
    let lifetime = state.token_lifetime_ms();
    let rows = state
        .store
        .call(move |c| accounts::list_tokens(c, account.as_deref(), lifetime))
        .await?;
    Ok(Json(rows.into_iter().map(|t| t.view(lifetime)).collect()))
}

/// Revokes a token: an admin any, anyone else their own.
pub async fn token_revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<views::Token>, ApiError> {
    let (key, account) = (
        id.clone(),
        (!caller.account.admin).then(|| caller.account.id.clone()),
    );
    let token = state
        .store
        .call(move |c| {
            let id = ids::resolve_for(c, ids::Kind::Token, &key, account.as_deref())?;
            accounts::get_token(c, &id)
        })
        .await?;
    let id = token.id.clone();
    if !caller.account.admin && token.account_id != caller.account.id {
        // Someone else's token does not exist for this caller.
        return Err(ApiError::not_found(format!(
            "no token {id:?}: see `yy token list`"
        )));
    }
    let lifetime = state.token_lifetime_ms();
    let token = state
        .store
        .call(move |c| {
            accounts::revoke_token(c, &id)?;
            accounts::get_token(c, &id)
        })
        .await?;
    Ok(Json(token.view(lifetime)))
}
