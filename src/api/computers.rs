//! Isolated computers: the admin API's wire types and the Runner commands that drive them.

use serde::{Deserialize, Serialize};

/// How long a command in a computer may run when its caller does not say.
pub const EXEC_DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// The longest a command in a computer may be given.
pub const EXEC_MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Output kept of each stream (stdout, stderr) when the caller does not say; also the most
/// an admin exec may ask for, so both streams fit one 8 MiB result.
pub const EXEC_MAX_OUTPUT_CAP: u64 = 1024 * 1024;

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
