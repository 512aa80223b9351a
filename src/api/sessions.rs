//! Bot sessions: the admin API's wire types and what travels between the control plane and
//! the Runner for a turn.

use serde::{Deserialize, Serialize};

pub use super::ids::{CommandId, RunnerId, SessionId};

pub use super::turn_events::{
    ApprovalRequest, ComputerReady, LIVE_OUTPUT_CAP, SessionCreated, StdStream, TextDelta,
    ToolComplete, ToolOutput, ToolStart, TurnEvent, event_types,
};

// ---- admin API ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatParams {
    pub agent: String,
    pub message: String,
    /// Continue this session; a new one is started when absent.
    #[serde(default)]
    pub session: Option<String>,
    /// Uploaded files (`POST /api/v1/uploads`) to put into a computer agent's workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub id: SessionId,
    pub agent: String,
    pub owner: String,
    pub runner_id: Option<RunnerId>,
    pub hermes_session_id: Option<String>,
    /// idle, running, pending_cleanup or closed.
    pub state: super::states::SessionState,
    /// A stop was asked for and is not confirmed yet.
    #[serde(default)]
    pub stopping: bool,
    pub cleanup_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The state of its newest turn (`queued` while it waits for its Runner).
    #[serde(default)]
    pub last_turn: Option<super::states::TurnState>,
    /// The transcript; present when one session is shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Turn>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Turn {
    pub id: String,
    /// Its place in the session; 0 while it waits to start.
    pub seq: i64,
    /// The Runner and the command it runs as; absent while it waits to start.
    #[serde(default)]
    pub runner_id: Option<RunnerId>,
    #[serde(default)]
    pub command_id: Option<CommandId>,
    pub message: String,
    /// waiting (in the chat queue, not yet admitted), queued (admitted, not yet taken by
    /// its Runner), running, complete, interrupted, error or uncertain.
    pub state: super::states::TurnState,
    pub final_text: Option<String>,
    pub usage: Option<serde_json::Value>,
    pub error: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// For an uncertain turn: what its original Hermes session showed when checked later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<serde_json::Value>,
    /// Tool calls of the turn, when one session is shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolCall>,
}

impl Turn {
    pub fn is_final(&self) -> bool {
        self.state.is_final()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_id: String,
    pub name: String,
    pub args: Option<serde_json::Value>,
    pub result: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChatStarted {
    pub session: Session,
    pub turn: Turn,
    /// Present when the turn could not start at once and waits (answered with 202).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Queued>,
}

/// Where a waiting chat turn stands: turns of one agent start first in, first out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Queued {
    /// 1 when it starts next.
    pub position: u32,
    /// Turns that start before it (its agent's current turn and earlier waiting ones).
    pub ahead: u32,
    /// Why it cannot start now.
    pub reason: String,
}

impl Queued {
    /// The one line said to a person.
    pub fn line(&self) -> String {
        format!("queued: {} ahead of this turn; {}", self.ahead, self.reason)
    }
}

/// A stored turn event: `{seq, turn_id, type, payload, at}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionEvent {
    pub seq: i64,
    pub turn_id: String,
    #[serde(flatten)]
    pub event: TurnEvent,
    pub at: String,
}

/// A page of a session's events after a sequence number, with the turn's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsPage {
    pub events: Vec<SessionEvent>,
    pub session_state: super::states::SessionState,
    pub turn: Option<Turn>,
    /// Why a queued turn has not started yet (its Runner is offline, or has not taken it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StopStarted {
    pub session: Session,
    /// The command that interrupts and confirms; absent when the turn never reached a Runner.
    pub command_id: Option<CommandId>,
}

// ---- Runner commands ----

/// A message of the recent history, carried when a session moves to another Runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryMessage {
    pub role: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnPayload {
    pub session_id: String,
    pub turn_id: String,
    /// The Hermes session to continue; absent for a new session (or one moved here).
    pub hermes_session_id: Option<String>,
    pub profile: String,
    /// The profile's terminal.cwd when it is an absolute path.
    pub cwd: Option<String>,
    pub message: String,
    #[serde(default)]
    pub history: Vec<HistoryMessage>,
    /// The agent whose managed browser this turn may use, for its duration only; absent
    /// when the agent may not (or the Runner has not declared `browser-v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<super::browser::BrowserUse>,
}

/// A computer agent's turn: the model loop runs in the Worker on the Runner's host, and
/// every tool in the agent's computer, under the lease this turn holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerTurnPayload {
    pub session_id: String,
    pub turn_id: String,
    /// The allowlisted Hermes profile whose model settings the Worker uses.
    pub profile: String,
    pub message: String,
    #[serde(default)]
    pub history: Vec<HistoryMessage>,
    /// The computer lease of this turn: started or recreated when it is not running.
    pub computer: crate::api::computers::StartPayload,
    /// Files the user attached: written into the workspace before the model starts.
    #[serde(default)]
    pub attachments: Vec<crate::api::artifacts::AttachmentRef>,
    /// The input artifacts of the subtask this turn works on (a team member's turn):
    /// written under `inputs/` in the workspace before the model starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::api::artifacts::AttachmentRef>,
    /// The opaque per-turn id of the team tools, when the agent may manage a team. Never
    /// in the stored payload: the Runner sets it from its lease
    /// ([`crate::api::machine::LeasedCommand::team_tools`]) and sends it with each
    /// team-tool call; the model never sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_tools: Option<String>,
    /// The agent whose turn this is, when the computer is another agent's, shared with it
    /// by the user's grant: the turn has this agent's Worker (its own Hermes home and
    /// model history). Left out for the computer's own agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acting_agent_id: Option<String>,
}

impl WorkerTurnPayload {
    /// The agent whose turn this is: a shared computer's member, or the computer's agent.
    pub fn agent_id(&self) -> &str {
        self.acting_agent_id
            .as_deref()
            .unwrap_or(&self.computer.agent_id)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnResult {
    pub hermes_session_id: String,
    /// complete, interrupted or error (Hermes's own words).
    pub status: String,
    pub text: String,
    pub usage: Option<serde_json::Value>,
    /// What Hermes said when the turn ended with an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRef {
    pub session_id: String,
    pub hermes_session_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StopResult {
    /// `idle` or `gone`, as `session.active_list` showed it.
    pub confirmed: String,
}

/// The result of a `session.list` command: the live sessions of the Runner's own channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionListResult {
    pub sessions: Vec<LiveSession>,
}

/// A live Hermes session of a Runner's channel. Fields in this order so `--json` prints
/// them as before they were typed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveSession {
    pub hermes_session_id: String,
    /// The yy session it belongs to.
    pub session_id: String,
    /// Hermes's own word for it (`idle`, `running`, ...).
    pub status: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    pub events: Vec<TurnEvent>,
}
