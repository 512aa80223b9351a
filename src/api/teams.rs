//! Teams, goals and subtasks on the wire: views, request bodies, and the team-tool call a
//! Runner forwards for an admin agent's model.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::states::word_enum;

word_enum! {
    /// A goal: `active` until the admin completes or blocks it; `stopped` by an operator;
    /// `waiting_user` when its automatic wake-ups ran out. Only `yy goal resume` (a new
    /// user instruction) makes a stopped, waiting or blocked goal active again.
    GoalState {
        Active = "active",
        WaitingUser = "waiting_user",
        Stopped = "stopped",
        Completed = "completed",
        Blocked = "blocked",
        Cancelled = "cancelled",
    }
}

impl GoalState {
    /// States no scheduler step leaves (only a user instruction may).
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            GoalState::Completed | GoalState::Blocked | GoalState::Cancelled
        )
    }
}

word_enum! {
    /// A subtask: `queued -> running -> review -> accepted`; from review the admin may
    /// also send it back (rework: queued again, one more attempt), let it wait for the
    /// user, or mark it blocked. `cancelled` when its goal ends without it.
    SubtaskState {
        Queued = "queued",
        Running = "running",
        Review = "review",
        Accepted = "accepted",
        WaitingUser = "waiting_user",
        Blocked = "blocked",
        Cancelled = "cancelled",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeamMember {
    pub agent: String,
    pub agent_id: String,
    /// `admin` or `member`.
    pub role: String,
    /// True for a temporary helper (bound to one goal).
    #[serde(default)]
    pub helper: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Team {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub admin: String,
    pub members: Vec<TeamMember>,
    /// `operator`, or the id of the admin agent that created it with a team tool.
    pub created_by: String,
    pub created_at: String,
    pub archived_at: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub id: String,
    pub name: String,
    pub size: i64,
    pub sha256: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubtaskInputs {
    #[serde(default)]
    pub text: String,
    /// Artifact ids handed to the owner: named in its prompt, and written under `inputs/`
    /// in a computer owner's workspace before its turn.
    #[serde(default)]
    pub artifacts: Vec<String>,
}

word_enum! {
    /// A goal's result on its way to the session it came from.
    DeliveryState {
        /// Waiting for the session to be free.
        Pending = "pending",
        Delivered = "delivered",
        Failed = "failed",
    }
}

/// What a member's turn produced: its final answer and the files it exported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubtaskResult {
    pub text: String,
    /// The state the turn ended in (`complete`, `error`, `interrupted`, `uncertain`).
    pub turn_state: super::states::TurnState,
    #[serde(default)]
    pub artifacts: Vec<ArtifactRef>,
    pub attempt: i64,
}

/// What a result that cannot be read is taken for: nothing known of its turn.
impl Default for SubtaskResult {
    fn default() -> Self {
        SubtaskResult {
            text: String::new(),
            turn_state: super::states::TurnState::Uncertain,
            artifacts: Vec::new(),
            attempt: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Subtask {
    pub id: String,
    pub goal_id: String,
    pub seq: i64,
    pub title: String,
    pub owner: String,
    pub criteria: String,
    pub inputs: SubtaskInputs,
    /// Ids of the subtasks that must be accepted first.
    pub deps: Vec<String>,
    pub state: SubtaskState,
    pub attempts: i64,
    pub note: Option<String>,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub result: Option<SubtaskResult>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub id: String,
    pub session_id: String,
    pub generation: i64,
    pub state: DeliveryState,
    pub turn_id: Option<String>,
    pub error: Option<String>,
    pub created_at: String,
    pub delivered_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Goal {
    pub id: String,
    pub team: String,
    pub team_id: String,
    pub admin: String,
    pub title: String,
    pub criteria: String,
    pub state: GoalState,
    pub reason: Option<String>,
    pub origin_session_id: Option<String>,
    pub admin_session_id: Option<String>,
    pub created_by: String,
    /// The current authorization (1 at creation, one more at every resume).
    pub generation: i64,
    /// Automatic admin wake-ups used in this authorization.
    pub wakeups: i64,
    /// What an open goal waits for: its admin's turn, a member's turn, a Runner or a
    /// slot, or the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
    pub summary: Option<String>,
    /// Accepted subtasks, and all of them.
    pub accepted: i64,
    pub total: i64,
    pub created_at: String,
    pub updated_at: String,
    pub ended_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtasks: Option<Vec<Subtask>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
}

// ---- request bodies ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamCreate {
    pub name: String,
    pub admin: String,
    pub members: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamMemberChange {
    pub agent: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalCreate {
    pub team: String,
    pub title: String,
    pub criteria: String,
    /// A session of the team's admin: where it plans and where the result is delivered.
    #[serde(default)]
    pub session: Option<String>,
}

/// One goal event of `yy goal watch --json` (and of the watch endpoint).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoalEvent {
    /// `goal` (the goal's state changed), `subtask`, or `waits` (what the goal waits for
    /// changed: `waits_for`).
    pub kind: String,
    pub goal_id: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtask_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
    pub at: String,
}

// ---- the machine side ----

/// A team-tool call of an admin agent's model, forwarded by the Runner with the turn's
/// opaque tool id (which the model never sees).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamToolCall {
    pub tool_id: String,
    pub name: String,
    #[serde(default)]
    pub args: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeamToolAnswer {
    pub result: Value,
}
