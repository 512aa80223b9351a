//! A JSON body extractor whose rejections are yy error bodies with clear messages.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(rejection) => Err(reject(rejection)),
        }
    }
}

fn reject(r: JsonRejection) -> ApiError {
    match &r {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the request body must be JSON with Content-Type: application/json",
        ),
        JsonRejection::JsonSyntaxError(_) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_body",
            format!("the request body is not valid JSON: {}", r.body_text()),
        ),
        JsonRejection::JsonDataError(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            format!("the request body does not fit: {}", r.body_text()),
        ),
        _ if r.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the request body is too large (the admin API accepts {} KiB, the machine API {} MiB)",
                crate::api::ADMIN_BODY_LIMIT / 1024,
                crate::api::machine::MACHINE_BODY_LIMIT / (1024 * 1024)
            ),
        ),
        _ => ApiError::new(r.status(), "bad_body", r.body_text()),
    }
}

/// A query-string extractor whose rejections are yy error bodies.
pub struct Q<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Q<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Q(v)),
            Err(r) => Err(ApiError::bad_request(format!(
                "the query string does not fit: {}",
                r.body_text()
            ))),
        }
    }
}

/// Answers a path that exists with another method.
pub async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not accept {method}: see docs/api.md", uri.path()),
    )
}
