//! Team tools in an admin computer agent's Worker turn: their schemas for the model, and
//! the forwarding of each call to the control plane with the turn's opaque tool id. The
//! model never sees the id nor the Runner's token; the control plane decides who calls,
//! and reads the arguments (so a bad one is refused there, in its words).

use serde_json::{Value, json};

use super::{Call, Family, Spec, Tool, string, strings};
use crate::api::teams::TeamToolCall;

/// Added to the system prompt of a turn that has team tools.
pub const SYSTEM_NOTE: &str = " You lead a team: with your team tools you create members, teams and goals, split a goal into subtasks with owners, dependencies and acceptance criteria, review each result, and complete the goal once every subtask is accepted. Ending your answer completes nothing.";

/// One team tool; the control plane runs it.
pub struct TeamTool(Spec);

pub static TEAM_CREATE_MEMBER: TeamTool = TeamTool(Spec {
    name: "team_create_member",
    description: || {
        "Create a persistent member agent (it runs in its own computer, like you, and cannot manage teams).".into()
    },
    properties: || json!({ "name": string("The new agent's name"), "profile": string("Profile (default: yours)") }),
    required: &["name"],
});

pub static TEAM_CREATE: TeamTool = TeamTool(Spec {
    name: "team_create",
    description: || "Create a team you administer with 1-7 members (2-8 with you).".into(),
    properties: || json!({ "name": string("Team name"), "members": strings("Member agent names") }),
    required: &["name", "members"],
});

pub static GOAL_CREATE: TeamTool = TeamTool(Spec {
    name: "goal_create",
    description: || {
        "Create a goal for one of your teams; its result comes back to this conversation.".into()
    },
    properties: || json!({ "team": string("Team name"), "title": string("What to achieve"), "criteria": string("When it is achieved") }),
    required: &["team", "title", "criteria"],
});

pub static SUBTASK_ADD: TeamTool = TeamTool(Spec {
    name: "subtask_add",
    description: || {
        "Add a subtask to a goal (at most 32 per goal). It runs when the subtasks it depends on are accepted; their results' files are copied into the owner's computer under inputs/deps/#N/ before its turn.".into()
    },
    properties: || {
        json!({
            "goal": string("Goal id"),
            "title": string("What to do"),
            "owner": string("The member (or helper) who does it"),
            "criteria": string("Acceptance criteria"),
            "deps": strings("Subtasks (ids, #seq or titles) that must be accepted first"),
            "inputs": string("Text the owner gets with the task"),
            "artifacts": strings("Artifact ids (at most 8) copied into the owner's computer under inputs/ before its turn"),
        })
    },
    required: &["goal", "title", "owner", "criteria"],
});

pub static SUBTASK_REVIEW: TeamTool = TeamTool(Spec {
    name: "subtask_review",
    description: || {
        "Review a finished subtask: accept it, send it back for rework with a note (at most 3 attempts), let it wait for the user, or mark it blocked.".into()
    },
    properties: || {
        json!({
            "goal": string("Goal id"),
            "subtask": string("Subtask id, #seq or title"),
            "decision": { "type": "string", "enum": ["accept", "rework", "wait_user", "blocked"] },
            "note": string("What to change (required for rework)"),
        })
    },
    required: &["goal", "subtask", "decision"],
});

pub static GOAL_COMPLETE: TeamTool = TeamTool(Spec {
    name: "goal_complete",
    description: || {
        "Complete a goal whose subtasks are all accepted; the summary goes to the user.".into()
    },
    properties: || json!({ "goal": string("Goal id"), "summary": string("The outcome, for the user") }),
    required: &["goal", "summary"],
});

pub static GOAL_BLOCK: TeamTool = TeamTool(Spec {
    name: "goal_block",
    description: || "End a goal that cannot be achieved, saying why.".into(),
    properties: || json!({ "goal": string("Goal id"), "reason": string("Why it is blocked") }),
    required: &["goal", "reason"],
});

pub static GOAL_STATUS: TeamTool = TeamTool(Spec {
    name: "goal_status",
    description: || "Show a goal with its subtasks, their states and results.".into(),
    properties: || json!({ "goal": string("Goal id") }),
    required: &["goal"],
});

pub static ASK_USER: TeamTool = TeamTool(Spec {
    name: "ask_user",
    description: || {
        "Ask the user a question about a goal; the goal waits until the user answers and resumes it.".into()
    },
    properties: || json!({ "goal": string("Goal id"), "question": string("The question") }),
    required: &["goal", "question"],
});

pub static HELPER_CREATE: TeamTool = TeamTool(Spec {
    name: "helper_create",
    description: || {
        "Create a temporary helper agent for one goal (always in its own computer; retired when the goal ends).".into()
    },
    properties: || json!({ "goal": string("Goal id"), "name": string("The helper's name") }),
    required: &["goal", "name"],
});

impl Tool for TeamTool {
    /// The arguments travel as the model wrote them: the control plane parses them.
    type Args = Value;

    fn spec(&self) -> &Spec {
        &self.0
    }

    fn family(&self) -> Family {
        Family::Team
    }

    fn parse(&self, args: &Value) -> Result<Value, String> {
        Ok(args.clone())
    }

    /// Sends the call; a refusal is an answer to the model, not an error of the turn.
    async fn run<'a>(&'a self, args: Value, call: &'a Call<'a>) -> Value {
        let Some(tool_id) = call.team else {
            return super::not_offered(self.0.name);
        };
        let request = TeamToolCall {
            tool_id: tool_id.to_string(),
            name: self.0.name.to_string(),
            args,
        };
        match call.control.team_tool(call.generation, &request).await {
            Ok(v) => v,
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}
