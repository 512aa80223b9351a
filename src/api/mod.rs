//! What crosses the wire: request bodies (`params`), responses (`views`) and the HTTP client
//! used by every CLI command (`client`, typed per endpoint in `admin`). Kept apart from database rows on purpose: a column can change
//! without changing the API, and the reverse.

pub mod admin;
pub mod client;
pub mod computers;
pub mod machine;
pub mod names;
pub mod params;
pub mod sessions;
pub mod views;

/// Largest request body the admin API accepts.
pub const ADMIN_BODY_LIMIT: usize = 1024 * 1024;

/// The error body every endpoint answers with: `{ "error": { "code", "message" } }`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}
