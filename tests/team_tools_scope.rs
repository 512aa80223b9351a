//! Team tool ids and what team tools see (issue 23, finding 8), with the real Worker and
//! real computers: two admin models of one account, each in its own container. The tool
//! id reaches the Runner only in its lease (no raw id in either data directory), and one
//! admin's team tools cannot read or use another team's goal.

mod common;
mod computer_support;

use std::path::Path;
use std::time::Duration;

use common::hermes::{WorkerSetup, worker_setup_with};
use common::wait_for;
use computer_support::test_image;
use serde_json::{Value, json};

fn tool(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

/// Model requests that took a step of the `by_prompt` entry `key`.
fn requests_of(s: &WorkerSetup, key: &str) -> Vec<Value> {
    s.model
        .steps()
        .into_iter()
        .filter(|r| {
            r["step"]
                .as_str()
                .is_some_and(|k| k.starts_with(&format!("{key}#")))
        })
        .collect()
}

/// The tool results the model was given in its last request for `key`, in order.
fn tool_results(s: &WorkerSetup, key: &str) -> Vec<String> {
    let requests = requests_of(s, key);
    let last = requests.last().expect("the model was asked");
    last["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"]
                .as_str()
                .map_or(m["content"].to_string(), str::to_string)
        })
        .collect()
}

/// Regular files under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            let p = e.path();
            let Ok(m) = p.symlink_metadata() else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file()
                && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

const SECRET: &str = "Merger plan for Q3";
const CRITERIA: &str = "the confidential criteria";

#[test]
fn team_tools_see_only_the_callers_teams_and_no_tool_id_is_stored() {
    let Some(s) = worker_setup_with(
        || test_image().id.clone(),
        json!({
            "steps": [ { "text": "noted" }, { "text": "noted" }, { "text": "noted" },
                       { "text": "noted" }, { "text": "noted" }, { "text": "noted" } ],
            "by_prompt": [
                { "match": "Plan the merger", "steps": [
                    { "tool_call": tool("team_create_member", json!({ "name": "writer" })) },
                    { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer"] })) },
                    { "tool_call": tool("goal_create", json!({ "team": "crew", "title": SECRET, "criteria": CRITERIA })) },
                    { "text": "planned" }
                ] },
                { "match": "Own status of", "steps": [
                    { "tool_call": tool("goal_status", json!({ "goal": "{{re:Own status of (\\S+)}}" })) },
                    { "text": "seen" }
                ] },
                { "match": "Peek at", "steps": [
                    { "tool_call": tool("goal_status", json!({ "goal": "{{re:Peek at (\\S+)}}" })) },
                    { "tool_call": tool("goal_block", json!({ "goal": "{{re:Peek at (\\S+)}}", "reason": "sabotage" })) },
                    { "tool_call": tool("goal_create", json!({ "team": "crew", "title": "hijack", "criteria": "c" })) },
                    { "text": "peeked" }
                ] }
            ]
        }),
        &["--max-computers", "4"],
    ) else {
        return;
    };
    s.env.run(&["agent", "update", "box", "--manage-team"]).ok();
    s.env
        .run(&[
            "agent",
            "create",
            "rival",
            "--profile",
            "default",
            "--env",
            "computer",
            "--manage-team",
        ])
        .ok();

    // The admin's team tools work with the id its lease brought.
    let out = s.env.run(&["chat", "box", "Plan the merger"]);
    out.ok();
    assert!(out.stdout.contains("planned"), "{out:?}");
    let goals = s.env.json(&["goal", "list"]);
    let goal = goals.as_array().unwrap()[0].clone();
    assert_eq!(goal["title"], SECRET, "{goals}");
    let goal_id = goal["id"].as_str().unwrap().to_string();
    s.env
        .run(&["chat", "box", &format!("Own status of {goal_id}")])
        .ok();
    let own = tool_results(&s, "Own status of");
    assert!(
        own.len() == 1 && own[0].contains(SECRET) && own[0].contains(CRITERIA),
        "the admin sees its own goal by id: {own:?}"
    );

    // Another admin of the same account: the goal is not there for its tools.
    let out = s.env.run(&["chat", "rival", &format!("Peek at {goal_id}")]);
    out.ok();
    assert!(out.stdout.contains("peeked"), "{out:?}");
    let seen = tool_results(&s, "Peek at");
    assert_eq!(seen.len(), 3, "{seen:?}");
    for answer in &seen {
        assert!(answer.contains("error"), "refused: {answer}");
        for leak in [SECRET, CRITERIA, "box", "writer"] {
            assert!(!answer.contains(leak), "{leak:?} leaked: {answer}");
        }
    }
    assert!(seen[0].contains("no open goal"), "{seen:?}");
    assert!(seen[2].contains("no team"), "{seen:?}");
    let after = s.env.json(&["goal", "show", &goal_id]);
    assert_ne!(after["state"], "blocked", "{after:#}");
    assert_eq!(s.env.json(&["goal", "list"]).as_array().unwrap().len(), 1);

    // No raw tool id at rest: not in the control plane's files (the database, its WAL),
    // not in the Runner's data directory, not in any stored command payload.
    wait_for(Duration::from_secs(30), "the turns to settle", || {
        let list = s.env.json(&["session", "list"]);
        list.as_array()?
            .iter()
            .all(|x| x["state"] != "running")
            .then_some(())
    });
    for dir in [s.env.data_dir(), s.env.path("runner-data-a")] {
        let found = files_containing(&dir, b"yytt_");
        assert!(
            found.is_empty(),
            "a raw team tool id is stored in {found:?}"
        );
    }
    // The key, not the words: a prompt may say "team tools" (and `_` is LIKE's
    // any-character).
    let turns = s
        .env
        .sql_number("SELECT count(*) FROM runner_commands WHERE kind = 'worker.turn'");
    let with_id = s.env.sql_number(
        "SELECT count(*) FROM runner_commands
         WHERE kind = 'worker.turn' AND json_extract(payload, '$.team_tools') IS NOT NULL",
    );
    assert!(turns >= 3, "{turns} worker turns");
    assert_eq!(with_id, 0);
    let grants = s.env.sql_number("SELECT count(*) FROM tool_grants");
    assert!(grants >= 3, "each admin turn had its id (hashed): {grants}");
    // The model never saw an id either.
    for r in s.model.steps() {
        assert!(!r["body"].to_string().contains("yytt_"), "{r}");
    }
}
