//! Every error the API answers with: `{ "error": { "code", "message" } }` and a fitting status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::queue::QueueError;
use super::store::StoreError;
use super::store::commands::StartRefused;
use crate::api::machine::codes;
use crate::api::{ErrorBody, ErrorDetail};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// 429 with `Retry-After`.
    pub fn too_many(retry_after_secs: u64, message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(retry_after_secs),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message)
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// When to retry while the database is out of reach (its connection is tried again at
/// most this often).
const DATABASE_RETRY_SECS: u64 = 5;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => ApiError::not_found(m),
            StoreError::Conflict(m) => ApiError::conflict(m),
            StoreError::Limit(m) => ApiError::new(StatusCode::CONFLICT, "limit_reached", m),
            StoreError::Invalid(m) => ApiError::bad_request(m),
            StoreError::Forbidden(m) => ApiError::forbidden(m),
            StoreError::RunnerOnline(m) => {
                ApiError::new(StatusCode::CONFLICT, codes::RUNNER_LIVE, m)
            }
            StoreError::Unavailable(m) => {
                tracing::warn!(error = %m, "the database is out of reach");
                ApiError {
                    retry_after: Some(DATABASE_RETRY_SECS),
                    ..ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the control plane's database is out of reach; retry shortly",
                    )
                }
            }
            other => {
                tracing::error!(error = %other, "database failure");
                ApiError::internal("the server could not complete the request; see its log")
            }
        }
    }
}

/// The machine API's refusals carry the codes that tell a Runner what to do next.
impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> Self {
        let message = e.to_string();
        match e {
            QueueError::Store(e) => e.into(),
            QueueError::Disabled(_) => {
                ApiError::new(StatusCode::FORBIDDEN, codes::RUNNER_DISABLED, message)
            }
            QueueError::StaleGeneration(_) => {
                ApiError::new(StatusCode::CONFLICT, codes::STALE_GENERATION, message)
            }
            QueueError::Replaced(_) => {
                ApiError::new(StatusCode::CONFLICT, codes::REPLACED, message)
            }
            QueueError::StartRefused(StartRefused::Cancelled(_)) => {
                ApiError::new(StatusCode::GONE, "cancelled", message)
            }
            QueueError::StartRefused(StartRefused::Expired(_)) => {
                ApiError::new(StatusCode::GONE, "expired", message)
            }
            QueueError::StartRefused(StartRefused::NotLeased(_)) => {
                ApiError::new(StatusCode::CONFLICT, "not_leased", message)
            }
            QueueError::StartRefused(StartRefused::Unauthorized(_)) => {
                ApiError::new(StatusCode::FORBIDDEN, "not_authorized", message)
            }

            QueueError::StartRefused(StartRefused::Store(e)) => e.into(),
            QueueError::ShuttingDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::SHUTTING_DOWN,
                message,
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// Answers paths that match no route.
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no endpoint {}: see docs/api.md", uri.path()))
}
