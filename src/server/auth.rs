//! Secrets: API and Runner tokens (random, prefixed, stored as SHA-256) and account passwords
//! (argon2id). The request extractors that turn a bearer token into a caller live here too.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use super::store::accounts::{self, AccountRow};
use super::store::scrape_tokens;
use crate::api::status::SCRAPE_TOKEN_PREFIX;

pub use crate::api::{API_TOKEN_PREFIX, RUNNER_TOKEN_PREFIX};

/// A new random token: the prefix and 256 random bits, base64url.
pub fn new_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// What the server stores for a token. Tokens carry 256 random bits, so a fast hash is safe.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Passwords shorter than this are refused when an account is made.
pub const PASSWORD_MIN: usize = 8;

pub fn check_password(password: &str) -> Result<(), String> {
    if password.chars().count() < PASSWORD_MIN {
        return Err(format!(
            "the password is too short: use at least {PASSWORD_MIN} characters"
        ));
    }
    if password.len() > 1024 {
        return Err("the password is too long: use at most 1024 bytes".into());
    }
    Ok(())
}

/// The authenticated caller of an admin API request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: AccountRow,
    pub token_id: String,
}

/// A caller that must be an admin.
#[derive(Debug, Clone)]
pub struct Admin(pub Caller);

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// The caller behind a request's API token.
pub async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(token) = bearer(headers) else {
        return Err(ApiError::unauthorized(
            "no API token: log in with `yy login URL --username NAME`",
        ));
    };
    if token.starts_with(SCRAPE_TOKEN_PREFIX) {
        // A scrape token that works is refused for what it is; one that does not, like
        // any bad token.
        let hash = token_hash(token);
        let live = state
            .store
            .call(move |c| scrape_tokens::authenticate(c, &hash))
            .await?;
        if live {
            return Err(ApiError::forbidden(
                "a scrape token reads /metrics and nothing else: use an API token (`yy login`)",
            ));
        }
    }
    if !token.starts_with(API_TOKEN_PREFIX) {
        return Err(ApiError::unauthorized(
            "that is not a yy API token: log in again with `yy login`",
        ));
    }
    let hash = token_hash(token);
    let lifetime = state.token_lifetime_ms();
    let found = state
        .store
        .call_unlocked_relaxed(move |c| accounts::authenticate(c, &hash, lifetime))
        .await?;
    match found {
        Some((account, token_id)) => Ok(Caller { account, token_id }),
        None => Err(ApiError::unauthorized(
            "the API token is invalid or was revoked, or it expired unused: log in again with `yy login`",
        )),
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        caller(state, &parts.headers).await
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if !caller.account.admin {
            return Err(ApiError::forbidden(format!(
                "account {:?} is not an admin: ask an admin to do this",
                caller.account.username
            )));
        }
        Ok(Admin(caller))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hashed() {
        let a = new_token(API_TOKEN_PREFIX);
        let b = new_token(API_TOKEN_PREFIX);
        assert!(a.starts_with("yyat_") && a.len() == 5 + 43);
        assert_ne!(a, b);
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), token_hash(&b));
    }

    #[test]
    fn passwords() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("x", "not a hash"));
        assert!(check_password("short").is_err());
        assert!(check_password("long enough").is_ok());
    }
}
