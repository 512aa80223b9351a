//! Secrets as values that never print, and the Hermes login a Runner's config may hold.

use serde::{Deserialize, Serialize};

/// A secret string: shown as `<redacted>` by Debug, with no Display, so that it never ends
/// up in a log line or an error message by accident.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// runner.json `hermesCredentials`: Hermes's `dashboard.basic_auth` user, for a Hermes bound
/// to a non-loopback address.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HermesCredentials {
    pub username: String,
    pub password: Secret,
}
