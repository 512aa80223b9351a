//! Computers shared by explicit grant, end to end: a real control plane, a Runner with the
//! Worker (hermes-agent 0.19.0's loop, driven by the scripted fake model) and computers on
//! a real Docker engine. Two agents sharing one computer run their turns in one container,
//! one after the other, each with its own model history; a helper is never granted; and
//! once unshared the member gets its own computer again.

mod common;
mod computer_support;

use std::time::{Duration, Instant};

use common::hermes::{WorkerSetup, worker_setup_with};
use computer_support::test_image;
use serde_json::{Value, json};

fn tool(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

/// A terminal step that reads what the other agent left in the workspace, holds the
/// computer two seconds, leaves `mark`, and says where and when it ran (guest clock, ns).
fn shared_step(mark: &str) -> Value {
    let command = format!(
        "s=$(date +%s%N); seen=$(cat shared.txt 2>/dev/null || echo none); sleep 2; \
         echo {mark} >> shared.txt; echo \"host=$(hostname) seen=$seen start=$s end=$(date +%s%N)\""
    );
    json!({ "tool_call": tool("terminal", json!({ "command": command })) })
}

/// What a turn's terminal step printed: `key=value` words.
fn said(session: &Value) -> std::collections::HashMap<String, String> {
    let stdout = session["turns"][0]["tools"][0]["result"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no terminal output: {session:#}"));
    stdout
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The session `yy chat --json` started (its first line).
fn session_of_json(stdout: &str) -> String {
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap_or("{}")).unwrap();
    first["session"]["id"].as_str().unwrap().to_string()
}

fn setup() -> Option<WorkerSetup> {
    let s = worker_setup_with(
        || test_image().id.clone(),
        json!({
            "steps": [],
            // "alpha work" is box2's, "beta work" box's; "alone" box2's after the unshare.
            "by_prompt": [
                { "match": "alpha work", "steps": [ shared_step("alpha"), { "text": "alpha done" } ] },
                { "match": "beta work", "steps": [ shared_step("beta"), { "text": "beta done" } ] },
                { "match": "takeover work", "steps": [
                    { "tool_call": tool("terminal", json!({ "command": "touch started; sleep 3; echo first-done" })) },
                    { "tool_call": tool("terminal", json!({ "command": "echo second > second.txt" })) },
                    { "text": "member resumed" }
                ] },
                { "match": "alone", "steps": [
                    { "tool_call": tool("terminal", json!({ "command": "echo host=$(hostname); cat shared.txt 2>/dev/null || echo empty" })) },
                    { "text": "alone done" }
                ] },
                { "match": "Build the team", "steps": [
                    { "tool_call": tool("team_create_member", json!({ "name": "writer" })) },
                    { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer"] })) },
                    { "tool_call": tool("goal_create", json!({ "team": "crew", "title": "Report", "criteria": "c" })) },
                    { "tool_call": tool("helper_create", json!({ "goal": "Report", "name": "temp1" })) },
                    { "text": "A helper exists." }
                ] }
            ]
        }),
        &["--max-computers", "4"],
    )?;
    for (name, extra) in [("box2", None), ("boss", Some("--manage-team"))] {
        let mut args = vec![
            "agent",
            "create",
            name,
            "--profile",
            "default",
            "--env",
            "computer",
        ];
        args.extend(extra);
        s.env.run(&args).ok();
    }
    Some(s)
}

#[test]
fn two_agents_share_one_computer_one_turn_at_a_time_and_unsharing_gives_it_back() {
    let Some(s) = setup() else {
        return;
    };
    let created = s.env.json(&["computer", "create", "--agent", "box"]);
    let computer = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["shared_with"], json!([]));

    // Without a terminal and without --yes nothing is shared, and the one line says why.
    let asked = s
        .env
        .run(&["computer", "share", &computer, "--with", "box2"]);
    assert_eq!(asked.code, 2, "{asked:?}");
    assert!(asked.stderr.contains("--yes"), "{asked:?}");
    for what in ["workspace files", "browser logins", "desktop"] {
        assert!(asked.stderr.contains(what), "names {what}: {asked:?}");
    }
    assert_eq!(asked.stderr.trim().lines().count(), 1, "{asked:?}");
    let shown = s.env.json(&["computer", "show", &computer]);
    assert_eq!(shown["shared_with"], json!([]));

    let shared = s
        .env
        .json(&["computer", "share", &computer, "--with", "box2", "--yes"]);
    assert_eq!(shared["shared_with"][0]["agent"], "box2", "{shared:#}");
    let table = s.env.run(&["computer", "show", &computer]);
    table.ok();
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.contains("shared with") && l.contains("box2")),
        "{table:?}"
    );

    // Both turns asked for at once: one takes the computer, the other waits and says so.
    let alpha = s.env.background(
        &s.server,
        &[
            "chat",
            "box2",
            "alpha work in the shared computer",
            "--json",
        ],
    );
    let beta = s.env.background(
        &s.server,
        &["chat", "box", "beta work in the shared computer", "--json"],
    );
    let (alpha, beta) = (alpha.output(), beta.output());
    let (alpha_out, beta_out) = (
        String::from_utf8_lossy(&alpha.stdout).to_string(),
        String::from_utf8_lossy(&beta.stdout).to_string(),
    );
    assert!(alpha.status.success(), "{alpha:?}");
    assert!(beta.status.success(), "{beta:?}");
    let waited: Vec<&String> = [&alpha_out, &beta_out]
        .into_iter()
        .filter(|out| out.contains("is shared") && out.contains("is in a turn in it"))
        .collect();
    assert_eq!(
        waited.len(),
        1,
        "exactly one turn waited:\n{alpha_out}\n{beta_out}"
    );
    let start: Value = serde_json::from_str(waited[0].lines().next().unwrap()).unwrap();
    assert_eq!(
        start["queued"]["ahead"], 1,
        "the other agent's turn: {start}"
    );

    let alpha_session = s
        .env
        .json(&["session", "show", &session_of_json(&alpha_out)]);
    let beta_session = s
        .env
        .json(&["session", "show", &session_of_json(&beta_out)]);
    assert_eq!(alpha_session["agent"], "box2");
    assert_eq!(beta_session["agent"], "box");
    for session in [&alpha_session, &beta_session] {
        assert_eq!(session["turns"][0]["state"], "complete", "{session:#}");
    }
    let (a, b) = (said(&alpha_session), said(&beta_session));
    // One container: the same host name.
    assert_eq!(a["host"], b["host"], "{a:?} {b:?}");
    // Never at the same time: one tool run ended before the other began.
    let span = |m: &std::collections::HashMap<String, String>| -> (u128, u128) {
        (m["start"].parse().unwrap(), m["end"].parse().unwrap())
    };
    let ((a0, a1), (b0, b1)) = (span(&a), span(&b));
    assert!(a1 <= b0 || b1 <= a0, "the runs overlap: {a:?} {b:?}");
    eprintln!(
        "tool runs (guest ns): box2 {a0}..{a1}, box {b0}..{b1}; gap {} ms",
        (b0.max(a0) - a1.min(b1)) / 1_000_000
    );
    // One workspace: the later turn read the file the earlier one wrote.
    let (first, second) = if a1 <= b0 { (&a, &b) } else { (&b, &a) };
    let first_mark = if a1 <= b0 { "alpha" } else { "beta" };
    assert_eq!(first["seen"], "none", "{first:?}");
    assert_eq!(second["seen"], first_mark, "{second:?}");
    // Each kept its own model history: no request of one turn carried the other's prompt.
    for step in s.model.steps() {
        let body = step["body"]["messages"].to_string();
        assert!(
            !(body.contains("alpha work") && body.contains("beta work")),
            "one model call saw both agents' turns: {body}"
        );
    }

    // A temporary helper is never granted.
    s.env
        .run(&["chat", "boss", "Build the team with a helper"])
        .ok();
    let helper = s.env.json(&["agent", "show", "temp1"]);
    assert_eq!(helper["env"], "computer");
    let refused = s
        .env
        .run(&["computer", "share", &computer, "--with", "temp1", "--yes"]);
    assert_eq!(refused.code, 4, "not allowed: {refused:?}");
    assert!(refused.stderr.contains("temporary helper"), "{refused:?}");
    let shown = s.env.json(&["computer", "show", &computer]);
    let members: Vec<&str> = shown["shared_with"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["agent"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["box2"]);

    // Unshared: box2's next turn runs in a computer of its own, another container.
    let unshared = s
        .env
        .json(&["computer", "unshare", &computer, "--with", "box2"]);
    assert_eq!(unshared["shared_with"], json!([]));
    let out = s.env.run(&["chat", "box2", "alone now"]);
    out.ok();
    let own = s.env.json(&["session", "show", &common::session_of(&out)]);
    let stdout = own["turns"][0]["tools"][0]["result"]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    let host = stdout
        .lines()
        .find_map(|l| l.strip_prefix("host="))
        .unwrap();
    assert_ne!(host, a["host"], "{stdout}");
    assert!(
        stdout.contains("empty"),
        "not the shared workspace: {stdout}"
    );
    let list = s.env.json(&["computer", "list"]);
    let own_computer = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["agent"] == "box2")
        .unwrap_or_else(|| panic!("box2 has a computer of its own: {list:#}"));
    assert_ne!(own_computer["id"], computer.as_str());

    // Every grant and revoke is in the audit log.
    let audit = s.env.json(&["computer", "audit"]);
    let actions: Vec<(&str, &str)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == computer.as_str())
        .filter(|e| e["action"] == "computer.share" || e["action"] == "computer.unshare")
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["detail"]["agent"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [("computer.unshare", "box2"), ("computer.share", "box2")],
        "newest first"
    );
}

/// Takeover of a shared computer pauses the member whose turn acts in it (after the tool in
/// flight), holds every other member's turn behind it, uses the computer's one control
/// fence, and the handback note reaches the paused member's model.
#[test]
fn takeover_of_a_shared_computer_pauses_the_member_that_acts_and_hands_back_to_it() {
    let Some(s) = setup() else {
        return;
    };
    let created = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = created["id"].as_str().unwrap().to_string();
    s.env
        .json(&["computer", "share", &id, "--with", "box2", "--yes"]);
    let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
    let member = s
        .env
        .background(&s.server, &["chat", "box2", "takeover work, two steps"]);
    common::wait_for(Duration::from_secs(90), "the member's first tool", || {
        ws.join("started").exists().then_some(())
    });
    let asked = Instant::now();
    // `_err` keeps reading stderr while the test goes on.
    let common::Controller {
        child: mut attach,
        err: _err,
        seen,
    } = s.env.take_control(&id, std::process::Stdio::piped());
    assert!(
        asked.elapsed() >= Duration::from_millis(1500),
        "control only after the tool in flight: {:?} {seen:?}",
        asked.elapsed()
    );
    assert!(
        seen.iter().any(|l| l.contains("control fence 1:")),
        "{seen:?}"
    );
    // The member that acts is paused at its next tool call.
    let session = s.env.wait_session_of("box2");
    s.env.wait_event(
        &s.server,
        &session,
        "the member's next tool call held by the pause",
        common::waits::is_paused_event,
    );
    assert!(!ws.join("second.txt").exists(), "the next tool ran");
    // The owner's turn, asked for now, waits behind the paused member.
    let owner = s.env.background(
        &s.server,
        &["chat", "box", "beta work after the takeover", "--json"],
    );
    let waiting = s.env.wait_session_of("box");
    common::wait_for(Duration::from_secs(30), "the owner's turn waiting", || {
        let v = s.env.json(&["session", "show", &waiting]);
        (v["turns"][0]["state"] == "waiting").then_some(())
    });
    let shown = s.env.json(&["computer", "show", &id]);
    assert_eq!(shown["control"]["control_fence"], 1, "{shown}");
    assert_eq!(shown["control"]["paused"], true, "{shown}");

    drop(attach.stdin.take());
    assert!(attach.wait().unwrap().success());
    let note = "the operator looked around; carry on";
    s.env
        .run(&["computer", "handback", &id, "--note", note])
        .ok();
    let done = member.output();
    let member_out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{member_out}");
    assert!(member_out.contains("member resumed"), "{member_out}");
    // The paused tool did not run; its answer carried the note to the member's model.
    assert!(!ws.join("second.txt").exists());
    let last = s
        .model
        .steps()
        .into_iter()
        .rev()
        .find(|st| st["body"].to_string().contains("takeover work"))
        .unwrap();
    assert!(last["body"].to_string().contains(note), "{last}");
    // Then the owner's turn took the computer.
    let done = owner.output();
    let owner_out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{owner_out}");
    assert!(owner_out.contains("is in a turn in it"), "{owner_out}");
    assert!(owner_out.contains("beta done"), "{owner_out}");
}
