//! Request bodies of the admin API. Unknown fields are refused so a typo never passes
//! silently.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginParams {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountCreate {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub admin: bool,
}

/// A new password. An admin may set any account's; an account that is not an admin sets
/// its own and must give the current one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub password: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_password: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCreate {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceUpdate {
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileCreate {
    pub name: String,
    /// The guest `terminal.cwd`: an absolute path, or `.`/`auto`/`cwd` for host-only use.
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileUpdate {
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentEnv {
    Host,
    Computer,
}

impl AgentEnv {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentEnv::Host => "host",
            AgentEnv::Computer => "computer",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "host" => Some(AgentEnv::Host),
            "computer" => Some(AgentEnv::Computer),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCreate {
    pub name: String,
    pub profile: String,
    pub env: AgentEnv,
    /// Defaults to the only active source when there is exactly one.
    pub source: Option<String>,
    #[serde(default)]
    pub manage_team: bool,
    /// The managed browser (host agents only).
    #[serde(default)]
    pub browser: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentUpdate {
    pub profile: Option<String>,
    pub env: Option<AgentEnv>,
    pub manage_team: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerRegister {
    pub source: String,
    pub profiles: Vec<String>,
    pub server_url: String,
    pub hermes_url: String,
    #[serde(default)]
    pub artifact_roots: Vec<String>,
    /// Enables computers with this full image id (`sha256:...`).
    #[serde(default)]
    pub computer_image: Option<String>,
    /// The network mode of its computers [default: none].
    #[serde(default)]
    pub network: Option<crate::api::computers::NetworkMode>,
}

/// `POST /api/v1/runners/{id}/rotate-token`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerRotateToken {
    /// Also revoke the current token at once and disable the Runner (a leaked token).
    #[serde(default)]
    pub now: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerUpdate {
    /// A new image: pending until the Runner accepted it and is idle.
    #[serde(default)]
    pub computer_image: Option<String>,
    #[serde(default)]
    pub network: Option<crate::api::computers::NetworkMode>,
    /// Go back to the previous image (the same acceptance and idle switch).
    #[serde(default)]
    pub rollback: bool,
}
