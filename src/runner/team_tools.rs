//! Team tools in an admin computer agent's Worker turn: their schemas for the model, and
//! the forwarding of each call to the control plane with the turn's opaque tool id. The
//! model never sees the id nor the Runner's token; the control plane decides who calls.

use serde_json::{Value, json};

use super::client::MachineClient;
use crate::api::teams::TeamToolCall;

/// Added to the system prompt of a turn that has team tools.
pub const SYSTEM_NOTE: &str = " You lead a team: with your team tools you create members, teams and goals, split a goal into subtasks with owners, dependencies and acceptance criteria, review each result, and complete the goal once every subtask is accepted. Ending your answer completes nothing.";

const NAMES: &[&str] = &[
    "team_create_member",
    "team_create",
    "goal_create",
    "subtask_add",
    "subtask_review",
    "goal_complete",
    "goal_block",
    "goal_status",
    "ask_user",
    "helper_create",
];

pub fn is_team_tool(name: &str) -> bool {
    NAMES.contains(&name)
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": { "type": "object", "properties": properties, "required": required },
        }
    })
}

fn s(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn strings(description: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "description": description })
}

/// The team tools, in the order the model sees them.
pub fn schemas() -> Vec<Value> {
    vec![
        tool(
            "team_create_member",
            "Create a persistent member agent (it runs in its own computer, like you, and cannot manage teams).",
            json!({ "name": s("The new agent's name"), "profile": s("Profile (default: yours)") }),
            &["name"],
        ),
        tool(
            "team_create",
            "Create a team you administer with 1-7 members (2-8 with you).",
            json!({ "name": s("Team name"), "members": strings("Member agent names") }),
            &["name", "members"],
        ),
        tool(
            "goal_create",
            "Create a goal for one of your teams; its result comes back to this conversation.",
            json!({ "team": s("Team name"), "title": s("What to achieve"), "criteria": s("When it is achieved") }),
            &["team", "title", "criteria"],
        ),
        tool(
            "subtask_add",
            "Add a subtask to a goal (at most 32 per goal). It runs when the subtasks it depends on are accepted; their results' files are copied into the owner's computer under inputs/deps/#N/ before its turn.",
            json!({
                "goal": s("Goal id"),
                "title": s("What to do"),
                "owner": s("The member (or helper) who does it"),
                "criteria": s("Acceptance criteria"),
                "deps": strings("Subtasks (ids, #seq or titles) that must be accepted first"),
                "inputs": s("Text the owner gets with the task"),
                "artifacts": strings("Artifact ids (at most 8) copied into the owner's computer under inputs/ before its turn"),
            }),
            &["goal", "title", "owner", "criteria"],
        ),
        tool(
            "subtask_review",
            "Review a finished subtask: accept it, send it back for rework with a note (at most 3 attempts), let it wait for the user, or mark it blocked.",
            json!({
                "goal": s("Goal id"),
                "subtask": s("Subtask id, #seq or title"),
                "decision": { "type": "string", "enum": ["accept", "rework", "wait_user", "blocked"] },
                "note": s("What to change (required for rework)"),
            }),
            &["goal", "subtask", "decision"],
        ),
        tool(
            "goal_complete",
            "Complete a goal whose subtasks are all accepted; the summary goes to the user.",
            json!({ "goal": s("Goal id"), "summary": s("The outcome, for the user") }),
            &["goal", "summary"],
        ),
        tool(
            "goal_block",
            "End a goal that cannot be achieved, saying why.",
            json!({ "goal": s("Goal id"), "reason": s("Why it is blocked") }),
            &["goal", "reason"],
        ),
        tool(
            "goal_status",
            "Show a goal with its subtasks, their states and results.",
            json!({ "goal": s("Goal id") }),
            &["goal"],
        ),
        tool(
            "ask_user",
            "Ask the user a question about a goal; the goal waits until the user answers and resumes it.",
            json!({ "goal": s("Goal id"), "question": s("The question") }),
            &["goal", "question"],
        ),
        tool(
            "helper_create",
            "Create a temporary helper agent for one goal (always in its own computer; retired when the goal ends).",
            json!({ "goal": s("Goal id"), "name": s("The helper's name") }),
            &["goal", "name"],
        ),
    ]
}

/// Sends one call; a refusal is an answer to the model, not an error of the turn.
pub async fn forward(
    control: &MachineClient,
    generation: i64,
    tool_id: &str,
    name: &str,
    args: &Value,
) -> Value {
    let call = TeamToolCall {
        tool_id: tool_id.to_string(),
        name: name.to_string(),
        args: args.clone(),
    };
    match control.team_tool(generation, &call).await {
        Ok(v) => v,
        Err(e) => json!({ "error": e.to_string() }),
    }
}
