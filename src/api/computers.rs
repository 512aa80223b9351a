//! Isolated computers: the admin API's wire types and the Runner commands that drive them.

use serde::{Deserialize, Serialize};

pub use super::ids::{CommandId, ComputerId, Fence, RunnerId};

// ---- exec limits (`yy computer exec`, the exec route, the store's deadline, the guest) ----

/// How long an exec runs before its process tree is killed, unless the caller says.
pub const EXEC_DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// The longest timeout an exec may ask for (one hour).
pub const EXEC_MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Bytes kept of stdout and of stderr each; both at the cap fit in one command result
/// ([`super::machine::MAX_RESULT_BYTES`]).
pub const EXEC_MAX_OUTPUT_CAP: u64 = 1024 * 1024;
/// The cap unless the caller asks for less.
pub const EXEC_DEFAULT_OUTPUT_CAP: u64 = EXEC_MAX_OUTPUT_CAP;

// ---- admin API ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerCreate {
    /// A `--env computer` agent.
    pub agent: String,
}

/// `yy computer share|unshare COMPUTER --with AGENT...`: agents of the computer's account.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputerShare {
    pub agents: Vec<String>,
}

/// An agent the computer is shared with: its turns run in this computer, one at a time
/// with the owner's and the other members', each with its own model history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputerGrant {
    pub agent: String,
    pub agent_id: String,
    /// The account that granted it.
    pub granted_by: String,
    pub granted_at: String,
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
    pub id: ComputerId,
    pub agent: String,
    pub owner: String,
    pub runner_id: RunnerId,
    pub image_id: String,
    pub guest_cwd: String,
    /// starting, running, stopping, stopped, failed or removed.
    pub state: super::states::ComputerState,
    pub fence: Fence,
    pub container_id: Option<String>,
    pub resources: Option<serde_json::Value>,
    pub last_error: Option<String>,
    /// The Runner command that last changed the state (for `yy runner commands`).
    pub last_command: Option<CommandId>,
    pub created_at: String,
    pub updated_at: String,
    /// The network mode it was last started with: `none` or `public-web`.
    #[serde(default)]
    pub network: NetworkMode,
    /// The Runner's current image when it differs from `image_id`: the computer keeps
    /// running on its image and moves to this one when it is started again (workspace kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_image: Option<String>,
    /// An operator's control (takeover), when it was ever taken; shown by `show`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
    /// What its workspace takes, as its Runner last reported it (with a start, an exec or
    /// a turn); none before that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_usage: Option<WorkspaceUsage>,
    /// When it was last used: a turn, an exec, takeover or screen input (reading its state
    /// or screen does not count). Its Runner stops it after its idle time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// Why yy stopped it by itself: `idle 30m`, `reclaimed for agent NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The agents it is shared with (`yy computer share`); empty: private to its agent.
    #[serde(default)]
    pub shared_with: Vec<ComputerGrant>,
}

/// A workspace's size as its Runner measured it. Without a limit (`--workspace-limit 0`)
/// every field is none: nothing bounds or measures it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceUsage {
    /// Bytes in use in the workspace's file system (its own metadata included).
    pub used_bytes: Option<u64>,
    /// Bytes the guest can still write.
    pub free_bytes: Option<u64>,
    /// The workspace's size limit.
    pub limit_bytes: Option<u64>,
    /// When the control plane heard it (RFC 3339); set by the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<String>,
}

/// The key under which a Runner adds [`WorkspaceUsage`] to the result of a computer start,
/// exec and turn.
pub const WORKSPACE_USAGE_KEY: &str = "workspace_usage";

impl Computer {
    /// No Runner command is in flight for it.
    pub fn is_settled(&self) -> bool {
        !self.state.is_busy()
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
    #[serde(default, skip_serializing_if = "NetworkMode::is_none")]
    pub network: NetworkMode,
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

/// The result of a `computer.exec` command, as the guest agent reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecResult {
    /// The exit status when the process exited; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Either stream was cut at the cap.
    pub truncated: bool,
    pub timed_out: bool,
    pub cancelled: bool,
    pub duration_ms: u64,
}

/// How long an operator's control lasts unless renewed.
pub const CONTROL_TTL_MS: i64 = 30_000;

/// The result of `computer.pause`: the model is paused (no tool in flight any more).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PauseResult {
    pub paused: bool,
    pub control_fence: i64,
    /// How long the pause waited for the tool in flight.
    pub waited_for_tool_ms: u64,
}

/// The result of `computer.resume`: whether the model was paused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResumeResult {
    pub resumed: bool,
    pub control_fence: i64,
}
/// The longest handback note.
pub const MAX_NOTE_CHARS: usize = 4000;

/// An operator's control of a computer (`yy computer attach --control`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Control {
    pub computer_id: String,
    /// Raised by every take; only the current one may renew or release.
    pub control_fence: i64,
    /// The account in control; absent when nobody is (released or expired).
    pub holder: Option<String>,
    pub expires_at: Option<String>,
    /// The model waits at its next tool call until a handback.
    pub paused: bool,
    /// The Runner command that pauses (take) or resumes (handback) the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
}

/// Body of renew and release: the control fence the caller holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlFence {
    pub control_fence: i64,
}

/// Body of `POST /api/v1/computers/{id}/handback`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handback {
    #[serde(default)]
    pub note: String,
}

/// Payload of `computer.pause` and `computer.resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PausePayload {
    pub computer_id: String,
    pub control_fence: i64,
    /// With `computer.resume`: the operator's note for the model's next segment.
    #[serde(default)]
    pub note: String,
}

/// Body of `POST /api/v1/computers/{id}/screen`: one screen action (desktop images).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ComputerScreen {
    #[serde(flatten)]
    pub action: super::screen::ScreenAction,
    /// The control fence the operator holds live; required for input (not for looking),
    /// and refused when it is not the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_fence: Option<i64>,
    /// The frame input aims at: required for input, which runs only while it is the
    /// current frame (the latest screenshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_id: Option<String>,
}

/// Payload of the `computer.screen` Runner command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScreenPayload {
    pub computer_id: String,
    pub fence: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_id: Option<String>,
    #[serde(flatten)]
    pub action: super::screen::ScreenAction,
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

/// Payload of the `egress.log` Runner command.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressLogQuery {
    /// Only this computer's decisions.
    #[serde(default)]
    pub computer_id: Option<String>,
    /// Newest first, at most this many.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Payload of the `computer.image.accept` Runner command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageAcceptPayload {
    /// The full image id (`sha256:...`) to accept.
    pub image_id: String,
}

/// One check of an image acceptance (the `yy image verify` ladder, then the acceptance
/// computer's steps).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageCheck {
    pub name: String,
    pub ok: bool,
    pub want: String,
    pub got: String,
}

/// What a `computer.image.accept` that passed reports (a refusal fails the command with
/// the failed checks as its error).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageAcceptResult {
    pub image_id: String,
    pub checks: Vec<ImageCheck>,
    /// The acceptance computer's container name; it is removed before the answer.
    pub acceptance_container: String,
    pub duration_ms: u64,
}

/// A Runner's network mode: computers get no network (`none`), or reach the public web
/// through the egress proxy only (`public-web`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    #[default]
    None,
    PublicWeb,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::PublicWeb => "public-web",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(NetworkMode::None),
            "public-web" => Some(NetworkMode::PublicWeb),
            _ => None,
        }
    }

    pub fn is_none(&self) -> bool {
        *self == NetworkMode::None
    }
}

impl std::fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Body of `POST /api/v1/runners/{id}/egress-log`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressLogParams {
    /// Only this computer's decisions (id or unique id prefix).
    #[serde(default)]
    pub computer: Option<String>,
    /// Newest first, at most this many (1-1000) [default: 100].
    #[serde(default)]
    pub limit: Option<u32>,
}
