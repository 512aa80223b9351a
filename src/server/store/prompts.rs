//! What the scheduler tells models: the admin's review prompt, a member's subtask prompt,
//! and the message that delivers a goal's result to its origin session. Text from members'
//! models goes into the admin's prompt clipped, never as instructions of the platform.

use super::StoreError;
use super::db::Db;
use super::goals::{self, GoalRow, MAX_ATTEMPTS, SubtaskRow};
use crate::api::teams::{ArtifactRef, SubtaskInputs, SubtaskResult, SubtaskState as S};

/// Result text kept of a member's answer in a prompt.
const PROMPT_RESULT_CHARS: usize = 4000;

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n).collect();
    out.push_str(" [...]");
    out
}

fn artifact_line(a: &ArtifactRef) -> String {
    format!(
        "{} (artifact {}, {}, sha256 {})",
        a.name,
        a.id,
        crate::api::words::plural(a.size, "byte", "bytes"),
        a.sha256
    )
}

/// The admin's prompt: the goal, every subtask, and each result waiting for review.
pub fn admin_prompt(conn: &Db, goal: &GoalRow) -> Result<String, StoreError> {
    let subs = goals::subtasks(conn, &goal.id)?;
    let mut p = format!(
        "[yy team review] Goal {} \"{}\"\nAcceptance criteria: {}\n",
        goal.id, goal.title, goal.criteria
    );
    if subs.is_empty() {
        p.push_str("It has no subtasks yet. Plan it: add subtasks with subtask_add (owner, acceptance criteria, dependencies).\n");
    } else {
        p.push_str("Subtasks:\n");
        for s in &subs {
            p.push_str(&format!(
                "#{} \"{}\" owner {} - {} (attempt {}/{MAX_ATTEMPTS}){}\n",
                s.seq,
                s.title,
                s.owner,
                s.state,
                s.attempts,
                s.note
                    .as_deref()
                    .map(|n| format!(" note: {n}"))
                    .unwrap_or_default()
            ));
        }
    }
    for s in subs.iter().filter(|s| s.state == S::Review) {
        let r: SubtaskResult = s
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        p.push_str(&format!(
            "\nTo review: #{} \"{}\" by {} (attempt {}, turn {}):\n{}\n",
            s.seq,
            s.title,
            s.owner,
            r.attempt,
            r.turn_state,
            clip(&r.text, PROMPT_RESULT_CHARS)
        ));
        for a in &r.artifacts {
            p.push_str(&format!("Exported: {}\n", artifact_line(a)));
        }
    }
    p.push_str("\nUse your team tools: subtask_review (accept, rework with a note, wait_user, blocked) for each result; goal_complete when every subtask is accepted. Ending your answer completes nothing.");
    Ok(p)
}

/// A member's prompt: its subtask, criteria, inputs, and the admin's note on a rework.
pub fn member_prompt(conn: &Db, goal: &GoalRow, sub: &SubtaskRow) -> Result<String, StoreError> {
    let inputs: SubtaskInputs = serde_json::from_str(&sub.inputs).unwrap_or_default();
    let mut p = format!(
        "[yy subtask] #{} \"{}\" of goal \"{}\"\nAcceptance criteria: {}\n",
        sub.seq, sub.title, goal.title, sub.criteria
    );
    if !inputs.text.is_empty() {
        p.push_str(&format!("Inputs: {}\n", inputs.text));
    }
    for id in &inputs.artifacts {
        if let Ok(a) = super::artifacts::get(conn, id) {
            p.push_str(&format!(
                "Input file: {}\n",
                artifact_line(&ArtifactRef {
                    id: a.id,
                    name: a.name,
                    size: a.size,
                    sha256: a.sha256
                })
            ));
        }
    }
    for dep in goals::deps(conn, &sub.id)? {
        let d = goals::get_subtask(conn, &dep)?;
        let r: SubtaskResult = d
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        p.push_str(&format!(
            "Accepted result of #{} \"{}\": {}\n",
            d.seq,
            d.title,
            clip(&r.text, PROMPT_RESULT_CHARS)
        ));
        for a in &r.artifacts {
            p.push_str(&format!("  with {}\n", artifact_line(a)));
        }
    }
    if sub.attempts > 0
        && let Some(note) = &sub.note
    {
        p.push_str(&format!("Rework requested by the admin: {note}\n"));
    }
    p.push_str("Do the work with your tools; export files to hand over with computer_export. Your final answer is your result.");
    Ok(p)
}

pub(super) fn delivery_message(payload: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let mut p = format!(
        "[yy goal result] Goal \"{}\" is {}.{}\n",
        v["title"].as_str().unwrap_or_default(),
        v["state"].as_str().unwrap_or_default(),
        v["summary"]
            .as_str()
            .or(v["reason"].as_str())
            .map(|s| format!(" {s}"))
            .unwrap_or_default()
    );
    for s in v["subtasks"].as_array().into_iter().flatten() {
        p.push_str(&format!(
            "#{} \"{}\" ({}): {}\n",
            s["seq"],
            s["title"].as_str().unwrap_or_default(),
            s["state"].as_str().unwrap_or_default(),
            clip(s["result"].as_str().unwrap_or_default(), 1000)
        ));
        for a in s["artifacts"].as_array().into_iter().flatten() {
            p.push_str(&format!(
                "  artifact {} {} ({}, sha256 {})\n",
                a["id"].as_str().unwrap_or_default(),
                a["name"].as_str().unwrap_or_default(),
                crate::api::words::plural(a["size"].as_u64().unwrap_or_default(), "byte", "bytes"),
                a["sha256"].as_str().unwrap_or_default()
            ));
        }
    }
    p.push_str("Structured result: ");
    p.push_str(payload);
    p.push_str("\nTell the user what came of the goal.");
    p
}
