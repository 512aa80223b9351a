//! Isolated computers: the admin API's wire types and the Runner commands that drive them.

use serde::{Deserialize, Serialize};

// ---- admin API ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerCreate {
    /// A `--env computer` agent.
    pub agent: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerExec {
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub output_cap_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Computer {
    pub id: String,
    pub agent: String,
    pub owner: String,
    pub runner_id: String,
    pub image_id: String,
    pub guest_cwd: String,
    /// starting, running, stopping, stopped, failed or removed.
    pub state: String,
    pub fence: i64,
    pub container_id: Option<String>,
    pub resources: Option<serde_json::Value>,
    pub last_error: Option<String>,
    /// The Runner command that last changed the state (for `yy runner commands`).
    pub last_command: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The network mode it was last started with: `none` or `public-web`.
    #[serde(default)]
    pub network: crate::egress::NetworkMode,
}

impl Computer {
    /// No Runner command is in flight for it.
    pub fn is_settled(&self) -> bool {
        !matches!(self.state.as_str(), "starting" | "stopping")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditEntry {
    pub seq: i64,
    pub at: String,
    pub account: String,
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

// ---- Runner commands ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartPayload {
    pub computer_id: String,
    pub agent_id: String,
    pub account_id: String,
    /// Stable owner ids the container name derives from.
    pub owner_key: String,
    /// Full image id; the Runner refuses a tag or a short id.
    pub image_id: String,
    pub guest_cwd: String,
    pub fence: i64,
    /// The server-generated scheduling round that holds the lease.
    pub round: String,
    /// `public-web`: only through the Runner's egress proxy. Left out for `none`, so a
    /// Runner from before network modes still accepts the payload.
    #[serde(default, skip_serializing_if = "crate::egress::NetworkMode::is_none")]
    pub network: crate::egress::NetworkMode,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartResult {
    pub container_id: String,
    pub name: String,
    pub resources: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerRef {
    pub computer_id: String,
    pub fence: i64,
    /// With `computer.remove`: delete the workspace too.
    #[serde(default)]
    pub delete_workspace: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecPayload {
    pub computer_id: String,
    pub fence: i64,
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub output_cap_bytes: Option<u64>,
}

/// The capability of a Runner that can run computers (a Docker engine answered).
pub const COMPUTER_CAPABILITY: &str = "computer-v1";
/// The capability of a Runner that can run the egress proxy for `public-web` computers.
pub const EGRESS_CAPABILITY: &str = "egress-v1";
