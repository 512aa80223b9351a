//! Teams and goals end to end: a scripted admin model (hermes-agent 0.19's own loop in the
//! Worker) builds a team with its team tools, members' turns run in their computers on a
//! real Docker engine, the admin reviews through the control plane's scheduler, and the
//! result comes back to the session the goal came from.

mod common;
mod computer_support;

use std::time::Duration;

use common::hermes::{WorkerSetup, worker_setup_with};
use common::{Env, Server, wait_for};
use computer_support::test_image;
use serde_json::{Value, json};

fn setup(script: Value) -> Option<WorkerSetup> {
    setup_with(script, "4")
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

const GOAL: &str = "Quarterly report";

/// The admin's first turn: two members, a team, a goal, two subtasks (#2 after #1).
fn plan_steps(members: &[&str]) -> Value {
    let creates: Vec<Value> = members
        .iter()
        .map(|m| tool("team_create_member", json!({ "name": m })))
        .collect();
    let mut subtasks = vec![tool(
        "subtask_add",
        json!({ "goal": GOAL, "title": "Collect data", "owner": members[0],
                "criteria": "data.txt with a total line" }),
    )];
    if members.len() > 1 {
        subtasks.push(tool(
            "subtask_add",
            json!({ "goal": GOAL, "title": "Summarize", "owner": members[1],
                    "criteria": "one sentence", "deps": ["#1"] }),
        ));
    }
    json!([
        { "tool_calls": creates },
        { "tool_call": tool("team_create", json!({ "name": "crew", "members": members })) },
        { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL,
                                                   "criteria": "data with a total, then a summary" })) },
        { "tool_calls": subtasks },
        { "text": "The team is at work." }
    ])
}

fn goal_of(s: &WorkerSetup) -> Value {
    let list = s.env.json(&["goal", "list"]);
    list.as_array().unwrap()[0].clone()
}

/// Waits until the goal is completed and its delivery turn has ended; the goal's view.
fn wait_completed(s: &WorkerSetup, id: &str) -> Value {
    wait_for(
        Duration::from_secs(400),
        "the goal to complete and be delivered",
        || {
            let g = s.env.json(&["goal", "show", id]);
            if g["state"] != "completed" && g["state"] != "active" {
                panic!("the goal ended otherwise: {g:#}");
            }
            let d = g["deliveries"].as_array()?.first()?.clone();
            let turn = d["turn_id"].as_str()?;
            let session = s.env.json(&["session", "show", d["session_id"].as_str()?]);
            let t = session["turns"]
                .as_array()?
                .iter()
                .find(|t| t["id"] == turn)?
                .clone();
            (t["state"] != "queued" && t["state"] != "running").then_some(g)
        },
    )
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

fn offered(request: &Value) -> Vec<String> {
    request["body"]["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_admin_model_builds_a_team_reviews_reworks_and_the_result_comes_back_once() {
    let review = "[yy team review]";
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": review, "steps": [
                { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1",
                    "decision": "rework", "note": "add the total line and export the file" })) },
                { "text": "Sent the data back." },
                { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })) },
                { "text": "Data accepted." },
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#2", "decision": "accept" })),
                    tool("goal_complete", json!({ "goal": GOAL, "summary": "The report is in data.txt." }))
                ] },
                { "text": "Goal complete." }
            ] },
            { "match": "[yy goal result]", "steps": [ { "text": "Your report is ready." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "text": "q1: 10" },
                { "tool_call": tool("terminal", json!({ "command": "printf 'q1: 10\\ntotal: 10\\n' > data.txt" })) },
                { "tool_call": tool("computer_export", json!({ "path": "data.txt" })) },
                { "text": "data.txt with the total, exported" }
            ] },
            { "match": "[yy subtask] #2", "steps": [ { "text": "Summary: the total is 10." } ] },
            { "match": "Build the team", "steps": plan_steps(&["writer", "editor"]) }
        ]
    })) else {
        return;
    };
    let out = s.env.run(&[
        "chat",
        "box",
        "Build the team and deliver the quarterly report",
    ]);
    out.ok();
    assert!(out.stdout.contains("The team is at work."), "{out:?}");
    let origin = common::session_of(&out);

    // What the admin's tools made: members without manage_team, in computers.
    for m in ["writer", "editor"] {
        let a = s.env.json(&["agent", "show", m]);
        assert_eq!(a["manage_team"], false, "{a}");
        assert_eq!(a["env"], "computer", "{a}");
    }
    let team = s.env.json(&["team", "show", "crew"]);
    assert_eq!(team["admin"], "box");
    assert_eq!(team["members"].as_array().unwrap().len(), 3);
    let goal = goal_of(&s);
    assert_eq!(goal["origin_session_id"], origin.as_str());
    let id = goal["id"].as_str().unwrap().to_string();

    let g = wait_completed(&s, &id);
    assert_eq!(g["state"], "completed", "{g:#}");
    assert_eq!(g["summary"], "The report is in data.txt.");
    let subs = g["subtasks"].as_array().unwrap();
    assert_eq!(subs[0]["state"], "accepted");
    assert_eq!(subs[0]["attempts"], 2, "one rework: {g:#}");
    assert_eq!(subs[0]["note"], "add the total line and export the file");
    assert_eq!(subs[1]["state"], "accepted");
    assert_eq!(subs[1]["deps"][0], subs[0]["id"]);
    let artifact = subs[0]["result"]["artifacts"][0].clone();
    assert_eq!(artifact["name"], "data.txt", "{g:#}");
    let artifact_id = artifact["id"].as_str().unwrap();
    let file = s.env.path("data.txt");
    s.env
        .run(&["artifact", "get", artifact_id, "-o", file.to_str().unwrap()])
        .ok();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "q1: 10\ntotal: 10\n"
    );

    // Delivered to the origin session exactly once, with the artifact.
    let deliveries = g["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{g:#}");
    assert_eq!(deliveries[0]["state"], "delivered");
    assert_eq!(deliveries[0]["session_id"], origin.as_str());
    let session = s.env.json(&["session", "show", &origin]);
    let results: Vec<&Value> = session["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["message"]
                .as_str()
                .unwrap()
                .starts_with("[yy goal result]")
        })
        .collect();
    assert_eq!(results.len(), 1, "{session:#}");
    assert!(
        results[0]["message"]
            .as_str()
            .unwrap()
            .contains(artifact_id)
    );
    assert_eq!(results[0]["final_text"], "Your report is ready.");
    // The scheduler delivers: after two more whole passes a second delivery would show.
    s.env.wait_scheduler_passes(&s.server, 2);
    assert_eq!(
        s.env.json(&["session", "show", &origin])["turns"]
            .as_array()
            .unwrap()
            .len(),
        session["turns"].as_array().unwrap().len(),
        "nothing delivered twice"
    );

    // The admin's model had team tools; the members' models had none.
    let admin_tools = offered(&requests_of(&s, "Build the team")[0]);
    assert!(
        admin_tools.iter().any(|t| t == "subtask_review"),
        "{admin_tools:?}"
    );
    for key in ["[yy subtask] #1", "[yy subtask] #2"] {
        for r in requests_of(&s, key) {
            let tools = offered(&r);
            assert!(tools.contains(&"terminal".to_string()));
            assert!(
                !tools.iter().any(|t| t.starts_with("team_")
                    || t.starts_with("goal_")
                    || t.starts_with("subtask_")),
                "a member has no team tools: {tools:?}"
            );
        }
    }
    assert_eq!(requests_of(&s, review).len(), 6, "three review turns");
    // The tool id never reached a model.
    for r in s.model.steps() {
        assert!(!r["body"].to_string().contains("yytt_"), "{r}");
    }

    // The id reached the Runner in its lease only: no stored payload holds one. A guessed
    // id is refused on the live Runner connection (an ended turn's id: team_tests.rs).
    let payload = s.env.sql(&format!(
        "SELECT c.payload FROM session_turns t JOIN runner_commands c ON c.id = t.command_id
         WHERE t.session_id = '{origin}' ORDER BY t.seq LIMIT 1"
    ))[0][0]
        .clone()
        .unwrap();
    assert!(!payload.contains("team_tools"), "{payload}");
    let runner = s.env.json(&["runner", "show", &s.reg.id]);
    let (status, _) = common::machine(
        &s.server,
        "/runner/v1/team-tools",
        &s.reg.token,
        runner["instance_id"].as_str().unwrap(),
        runner["generation"].as_i64(),
        &[],
        &json!({ "tool_id": "yytt_guessed", "name": "goal_status", "args": { "goal": id } })
            .to_string(),
    );
    assert_eq!(status, 403);

    // The watch of an ended goal prints its tree as JSON events and exits.
    let watch = s.env.run(&["goal", "watch", &id, "--json"]);
    watch.ok();
    let events: Vec<Value> = watch
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["kind"], "goal");
    assert_eq!(events[0]["state"], "completed");
    assert_eq!(events.iter().filter(|e| e["kind"] == "subtask").count(), 2);
    let list = s.env.json(&["subtask", "ls", "--goal", &id[..8]]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let first = list[0]["id"].as_str().unwrap();
    assert_eq!(s.env.json(&["subtask", "show", &first[..8]])["id"], first);
}

#[test]
fn a_control_plane_restart_leaves_the_running_turn_uncertain_unreplayed_and_the_goal_finishes() {
    let review = "[yy team review]";
    let Some(mut s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": review, "steps": [
                { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1",
                    "decision": "rework", "note": "the last turn's outcome is unknown: do it again" })) },
                { "text": "Asked again." },
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })),
                    tool("goal_complete", json!({ "goal": GOAL, "summary": "done after a restart" }))
                ] },
                { "text": "Goal complete." }
            ] },
            { "match": "[yy goal result]", "steps": [ { "text": "Delivered." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "text": "a slow first answer that the restart cuts off", "delay_ms": 1500 },
                { "text": "second attempt" }
            ] },
            { "match": "Build the team", "steps": plan_steps(&["writer"]) }
        ]
    })) else {
        return;
    };
    s.env
        .run(&["chat", "box", "Build the team, one member"])
        .ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    // The member's slow turn is running: restart the control plane on the same address.
    wait_for(Duration::from_secs(120), "the member's turn to run", || {
        let g = s.env.json(&["goal", "show", &id]);
        let sub = &g["subtasks"][0];
        (sub["state"] == "running" && !requests_of(&s, "[yy subtask] #1").is_empty()).then_some(())
    });
    let addr = s.server.addr();
    let old = std::mem::replace(&mut s.server, placeholder(&s.env));
    assert_eq!(old.terminate(), 0);
    s.server = Server::start_with(&s.env, &s.env.data_dir(), &addr, &[]);

    let g = wait_completed(&s, &id);
    assert_eq!(g["state"], "completed", "{g:#}");
    let sub = &g["subtasks"][0];
    assert_eq!(sub["attempts"], 2);
    assert_eq!(sub["result"]["text"], "second attempt");
    let session = s
        .env
        .json(&["session", "show", sub["session_id"].as_str().unwrap()]);
    let states: Vec<&str> = session["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["uncertain", "complete"], "{session:#}");
    // The uncertain turn's model call happened once: never replayed.
    let firsts = requests_of(&s, "[yy subtask] #1")
        .into_iter()
        .filter(|r| r["step"] == "[yy subtask] #1#0")
        .count();
    assert_eq!(firsts, 1);
    assert_eq!(g["deliveries"].as_array().unwrap().len(), 1);
}

/// A server to hold the place of one being restarted (never used).
fn placeholder(env: &Env) -> Server {
    Server::start(env, &env.path("placeholder-data"))
}

#[test]
fn team_and_goal_commands_refuse_bad_input_and_limits_with_their_messages() {
    let env = Env::new();
    let _server = env.bootstrap();
    env.run(&["source", "create", "main"]).ok();
    env.run(&["profile", "create", "default", "--cwd", "/workspace"])
        .ok();
    for (name, envname) in [
        ("boss", "computer"),
        ("m1", "computer"),
        ("m2", "computer"),
        ("hb", "host"),
    ] {
        env.run(&[
            "agent",
            "create",
            name,
            "--profile",
            "default",
            "--env",
            envname,
        ])
        .ok();
    }
    // The admin needs manage_team.
    env.run(&[
        "team", "create", "crew", "--admin", "boss", "--member", "m1",
    ])
    .fails(4, "--manage-team");
    env.run(&["agent", "update", "boss", "--manage-team"]).ok();
    assert_eq!(env.json(&["agent", "show", "boss"])["manage_team"], true);
    let both = env.run(&[
        "agent",
        "update",
        "boss",
        "--manage-team",
        "--no-manage-team",
    ]);
    assert_eq!(both.code, 2, "{both:?}");
    // Team size: 2-8 with the admin.
    env.run(&[
        "team", "create", "solo", "--admin", "boss", "--member", "boss",
    ])
    .fails(6, "team size limit");
    let out = env.run(&[
        "team", "create", "crew", "--admin", "boss", "--member", "m1",
    ]);
    out.ok();
    let team_id = out.stdout.trim().to_string();
    assert_eq!(
        env.json(&["team", "show", "crew"])["id"],
        team_id.as_str(),
        "create prints the id"
    );
    env.run(&[
        "team", "create", "crew", "--admin", "boss", "--member", "m1",
    ])
    .fails(6, "crew");
    env.json(&["team", "add", "crew", "m2"]);
    env.run(&["team", "remove", "crew", "boss"])
        .fails(2, "admin");
    env.json(&["team", "remove", "crew", "m2"]);
    env.run(&["team", "remove", "crew", "m1"])
        .fails(6, "team size limit");
    assert_eq!(env.json(&["team", "list"]).as_array().unwrap().len(), 1);

    // A goal: printed id; stop and resume; a host admin is refused with the reason.
    let out = env.run(&[
        "goal",
        "create",
        "--team",
        "crew",
        "--title",
        "t",
        "--criteria",
        "c",
    ]);
    out.ok();
    let goal = out.stdout.trim().to_string();
    let g = env.json(&["goal", "show", &goal]);
    assert_eq!(g["state"], "active");
    // Ids take unique prefixes, as everywhere; a prefix too short says so.
    assert_eq!(env.json(&["goal", "show", &goal[..8]])["id"], goal.as_str());
    env.run(&["goal", "show", &goal[..3]])
        .fails(2, "at least 4 characters");
    assert_eq!(env.json(&["goal", "ls"]).as_array().unwrap().len(), 1);
    assert_eq!(env.json(&["team", "ls"]).as_array().unwrap().len(), 1);
    assert_eq!(env.json(&["goal", "stop", &goal[..8]])["state"], "stopped");
    let g = env.json(&["goal", "resume", &goal]);
    assert_eq!(
        (g["state"].as_str(), g["generation"].as_i64()),
        (Some("active"), Some(2))
    );
    assert!(
        env.json(&["subtask", "list", "--goal", &goal])
            .as_array()
            .unwrap()
            .is_empty()
    );
    env.run(&["goal", "show", "nope"]).fails(5, "no goal");
    env.run(&["subtask", "show", "0f0f0f0f"])
        .fails(5, "no subtask");
    // A host agent cannot manage a team (team tools reach only computer agents).
    env.run(&["agent", "update", "hb", "--manage-team"])
        .fails(2, "must be a computer agent");
    // Revoke: final for old work, and resume says what is missing.
    env.run(&["agent", "update", "boss", "--no-manage-team"])
        .ok();
    wait_for(
        Duration::from_secs(10),
        "the scheduler to stop the goal",
        || (env.json(&["goal", "show", &goal])["state"] == "stopped").then_some(()),
    );
    env.run(&["goal", "resume", &goal])
        .fails(4, "--manage-team");
    // Archive is final: its goals are cancelled.
    env.json(&["team", "archive", "crew"]);
    assert_eq!(env.json(&["goal", "show", &goal])["state"], "cancelled");
    env.run(&["goal", "resume", &goal]).fails(6, "final");
}

#[test]
fn two_goals_at_once_keep_one_turn_per_agent_and_four_slots() {
    let members = ["m1", "m2", "m3", "m4", "m5"];
    let mut subtasks = Vec::new();
    let mut accepts = Vec::new();
    for goal in ["Goal A", "Goal B"] {
        for (i, m) in members.iter().enumerate() {
            subtasks.push(tool(
                "subtask_add",
                json!({ "goal": goal, "title": format!("{goal} part {}", i + 1), "owner": m, "criteria": "done" }),
            ));
            accepts.push(tool(
                "subtask_review",
                json!({ "goal": goal, "subtask": format!("#{}", i + 1), "decision": "accept" }),
            ));
        }
    }
    for goal in ["Goal A", "Goal B"] {
        accepts.push(tool(
            "goal_complete",
            json!({ "goal": goal, "summary": "all parts done" }),
        ));
    }
    // Every review turn accepts whatever is in review and tries to complete both goals
    // (the refusals are answers the model gets).
    let mut reviews = Vec::new();
    for _ in 0..16 {
        reviews.push(json!({ "tool_calls": accepts }));
        reviews.push(json!({ "text": "reviewed" }));
    }
    let member_steps: Vec<Value> = (0..10)
        .map(|_| json!({ "text": "part done", "delay_ms": 200 }))
        .collect();
    let creates: Vec<Value> = members
        .iter()
        .map(|m| tool("team_create_member", json!({ "name": m })))
        .collect();
    let Some(s) = setup_with(
        json!({
            "steps": [],
            "by_prompt": [
                { "match": "[yy team review]", "steps": reviews },
                { "match": "[yy goal result]", "steps": [ { "text": "A is done." }, { "text": "B is done." } ] },
                { "match": "[yy subtask]", "steps": member_steps },
                { "match": "Two goals", "steps": [
                    { "tool_calls": creates },
                    { "tool_call": tool("team_create", json!({ "name": "crew", "members": members })) },
                    { "tool_calls": [
                        tool("goal_create", json!({ "team": "crew", "title": "Goal A", "criteria": "five parts" })),
                        tool("goal_create", json!({ "team": "crew", "title": "Goal B", "criteria": "five parts" }))
                    ] },
                    { "tool_calls": subtasks },
                    { "text": "Both goals are under way." }
                ] }
            ]
        }),
        "8",
    ) else {
        return;
    };
    s.env.run(&["chat", "box", "Two goals at once"]).ok();
    let goals = s.env.json(&["goal", "list"]);
    let ids: Vec<String> = goals
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        let g = wait_completed(&s, id);
        assert_eq!(g["accepted"], 5, "{g:#}");
        assert_eq!(g["deliveries"].as_array().unwrap().len(), 1);
    }
    // Every turn's admission and end, from the control plane's own records.
    let turns: Vec<(String, i64, i64)> = s
        .env
        .sql(
            "SELECT s.agent_id, t.created_at, t.finished_at FROM session_turns t
             JOIN sessions s ON s.id = t.session_id ORDER BY t.created_at",
        )
        .into_iter()
        .map(|r| {
            let number = |i: usize| r[i].as_deref().unwrap().parse::<i64>().unwrap();
            (r[0].clone().unwrap(), number(1), number(2))
        })
        .collect();
    assert!(
        turns.len() >= 14,
        "1 plan + 10 parts + reviews + 2 deliveries: {}",
        turns.len()
    );
    let mut most = 0;
    for (i, (agent, start, end)) in turns.iter().enumerate() {
        let at_once = turns
            .iter()
            .filter(|(_, s2, e2)| s2 <= start && start < e2)
            .count();
        most = most.max(at_once);
        for (j, (a2, s2, e2)) in turns.iter().enumerate() {
            if i != j && a2 == agent {
                assert!(
                    end <= s2 || e2 <= start,
                    "one turn at a time per agent: {turns:?}"
                );
            }
        }
    }
    assert!(most <= 4, "at most 4 turns at once, saw {most}");
    assert_eq!(most, 4, "the slots were used: {turns:?}");
}

fn setup_with(script: Value, computers: &str) -> Option<WorkerSetup> {
    let s = worker_setup_with(
        || test_image().id.clone(),
        script,
        &["--max-computers", computers],
    )?;
    s.env.run(&["agent", "update", "box", "--manage-team"]).ok();
    Some(s)
}

#[test]
fn a_stopped_goal_runs_no_further_turn_until_it_is_resumed() {
    let generic_review = json!({ "tool_calls": [
        tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })),
        tool("goal_complete", json!({ "goal": GOAL, "summary": "done after a resume" }))
    ] });
    let mut reviews = Vec::new();
    for _ in 0..4 {
        reviews.push(generic_review.clone());
        reviews.push(json!({ "text": "reviewed" }));
    }
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": "[yy team review]", "steps": reviews },
            { "match": "[yy goal result]", "steps": [ { "text": "It stopped." }, { "text": "It is done." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "text": "a slow answer the stop interrupts", "delay_ms": 1500 },
                { "text": "second attempt" }
            ] },
            { "match": "Build the team", "steps": plan_steps(&["writer"]) }
        ]
    })) else {
        return;
    };
    s.env
        .run(&["chat", "box", "Build the team, then stop"])
        .ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    wait_for(Duration::from_secs(120), "the member's turn to run", || {
        let g = s.env.json(&["goal", "show", &id]);
        (g["subtasks"][0]["state"] == "running" && !requests_of(&s, "[yy subtask] #1").is_empty())
            .then_some(())
    });
    assert_eq!(s.env.json(&["goal", "stop", &id])["state"], "stopped");
    // Its running turn is stopped, the subtask goes back to the queue, and nothing runs.
    let g = wait_for(Duration::from_secs(60), "the member's turn to end", || {
        let g = s.env.json(&["goal", "show", &id]);
        (g["subtasks"][0]["state"] == "queued").then_some(g)
    });
    let member_session = g["subtasks"][0]["session_id"].as_str().unwrap().to_string();
    // The scheduler admits queued subtasks: two more whole passes had their chance to.
    s.env.wait_scheduler_passes(&s.server, 2);
    let session = s.env.json(&["session", "show", &member_session]);
    let turns = session["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "no further turn: {session:#}");
    assert_eq!(turns[0]["state"], "interrupted");
    assert_eq!(requests_of(&s, "[yy subtask] #1").len(), 1);
    assert_eq!(s.env.json(&["goal", "show", &id])["state"], "stopped");

    // A user's resume: a new authorization, and the work goes on to the end.
    let g = s.env.json(&["goal", "resume", &id]);
    assert_eq!(g["generation"], 2);
    let g = wait_for(
        Duration::from_secs(300),
        "the resumed goal to complete",
        || {
            let g = s.env.json(&["goal", "show", &id]);
            let delivered = g["deliveries"]
                .as_array()
                .is_some_and(|d| d.len() == 2 && d.iter().all(|d| d["state"] == "delivered"));
            (g["state"] == "completed" && delivered).then_some(g)
        },
    );
    let sub = &g["subtasks"][0];
    assert_eq!(sub["result"]["text"], "second attempt");
    assert_eq!(
        sub["attempts"], 1,
        "attempts count from zero in the new authorization"
    );
    // One delivery for the stop, one for the completion, each exactly once.
    let gens: Vec<i64> = g["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["generation"].as_i64().unwrap())
        .collect();
    assert_eq!(gens, [1, 2]);
}

#[test]
fn a_temporary_helper_works_in_its_own_computer_and_retires_with_its_goal() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": "[yy team review]", "steps": [
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })),
                    tool("goal_complete", json!({ "goal": GOAL, "summary": "the helper did it" }))
                ] },
                { "text": "Done." }
            ] },
            { "match": "[yy goal result]", "steps": [ { "text": "Delivered." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "echo helped > helped.txt" })) },
                { "tool_call": tool("computer_export", json!({ "path": "helped.txt" })) },
                { "text": "helped.txt exported" }
            ] },
            { "match": "Build the team", "steps": [
                { "tool_call": tool("team_create_member", json!({ "name": "writer" })) },
                { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer"] })) },
                { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL, "criteria": "c" })) },
                { "tool_call": tool("helper_create", json!({ "goal": GOAL, "name": "temp1" })) },
                { "tool_call": tool("subtask_add", json!({ "goal": GOAL, "title": "Help", "owner": "temp1", "criteria": "a file" })) },
                { "text": "A helper is at work." }
            ] }
        ]
    })) else {
        return;
    };
    s.env
        .run(&["chat", "box", "Build the team with a helper"])
        .ok();
    let helper = s.env.json(&["agent", "show", "temp1"]);
    assert_eq!(helper["env"], "computer");
    assert_eq!(helper["manage_team"], false);
    let helper_id = helper["id"].as_str().unwrap().to_string();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    let g = wait_completed(&s, &id);
    let sub = &g["subtasks"][0];
    assert_eq!(sub["owner"], "temp1");
    let artifact = sub["result"]["artifacts"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Retired with its goal: the agent archived, its computer removed on the Runner; its
    // session and exported file stay.
    let archived = s.env.json(&["agent", "show", &helper_id]);
    assert!(archived["archived_at"].is_string(), "{archived}");
    let computer = wait_for(
        Duration::from_secs(60),
        "the helper's computer removed",
        || {
            let all = s.env.json(&["computer", "list", "--removed"]);
            all.as_array()?
                .iter()
                .find(|c| c["agent"] == "temp1" && c["state"] == "removed")
                .cloned()
        },
    );
    let filter = format!("label=yy.computer={}", computer["id"].as_str().unwrap());
    let left = computer_support::docker(&["ps", "-aq", "--filter", &filter]);
    assert!(left.status.success());
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "the container is gone"
    );
    assert!(
        !s.env
            .path("runner-data-a")
            .join("workspaces")
            .join(computer["id"].as_str().unwrap())
            .exists(),
        "and its workspace"
    );
    s.env
        .json(&["session", "show", sub["session_id"].as_str().unwrap()]);
    s.env.json(&["artifact", "show", &artifact]);
}

/// A subtask's input artifact reaches its owner's computer: member 1 exports a file, the
/// admin's second subtask lists that artifact as input (its id taken from the review
/// prompt), and member 2's turn finds it under `inputs/` and reads it there.
#[test]
fn a_subtask_input_artifact_is_in_the_member_computer_before_its_turn() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": "[yy team review]", "steps": [
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })),
                    tool("subtask_add", json!({ "goal": GOAL, "title": "Check", "owner": "editor",
                        "criteria": "the total is read",
                        "artifacts": ["{{re:data\\.txt \\(artifact ([^,\\s]+),}}"] }))
                ] },
                { "text": "Handed to the editor." },
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#2", "decision": "accept" })),
                    tool("goal_complete", json!({ "goal": GOAL, "summary": "checked" }))
                ] },
                { "text": "Done." }
            ] },
            { "match": "[yy goal result]", "steps": [ { "text": "Delivered." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "printf 'q1: 10\\ntotal: 10\\n' > data.txt" })) },
                { "tool_call": tool("computer_export", json!({ "path": "data.txt" })) },
                { "text": "data.txt exported" }
            ] },
            { "match": "[yy subtask] #2", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "cat inputs/data.txt" })) },
                { "text": "The total is 10." }
            ] },
            { "match": "Build the team", "steps": [
                { "tool_calls": [
                    tool("team_create_member", json!({ "name": "writer" })),
                    tool("team_create_member", json!({ "name": "editor" }))
                ] },
                { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer", "editor"] })) },
                { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL, "criteria": "c" })) },
                { "tool_call": tool("subtask_add", json!({ "goal": GOAL, "title": "Collect", "owner": "writer", "criteria": "data.txt" })) },
                { "text": "At work." }
            ] }
        ]
    })) else {
        return;
    };
    s.env.run(&["chat", "box", "Build the team"]).ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    let g = wait_completed(&s, &id);
    assert_eq!(g["state"], "completed", "{g:#}");
    let subs = g["subtasks"].as_array().unwrap();
    let exported = subs[0]["result"]["artifacts"][0]["id"].as_str().unwrap();
    assert_eq!(subs[1]["inputs"]["artifacts"][0], exported, "{g:#}");

    // Member 2's prompt named the file's path in its computer, and its `cat` read it there.
    let asked = requests_of(&s, "[yy subtask] #2");
    assert_eq!(asked.len(), 2, "{asked:#?}");
    let first = asked[0]["body"]["messages"].to_string();
    assert!(first.contains("/workspace/inputs/data.txt"), "{first}");
    let after_cat = asked[1]["body"]["messages"].as_array().unwrap();
    let tool_result = after_cat
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    // The tool's JSON result, with the file's newline escaped in it.
    assert!(tool_result.contains(r"q1: 10\ntotal: 10"), "{tool_result}");
    // And the file is still there, byte for byte.
    let editor = s
        .env
        .json(&["computer", "list"])
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["agent"] == "editor")
        .cloned()
        .expect("the editor's computer");
    let out = s.env.run(&[
        "computer",
        "exec",
        editor["id"].as_str().unwrap(),
        "--",
        "cat",
        "inputs/data.txt",
    ]);
    out.ok();
    assert_eq!(out.stdout, "q1: 10\ntotal: 10\n");
}

/// Issue 23, finding 6: while an operator holds the admin's computer its model made six
/// `team_create_member` calls in six seconds. A paused turn makes no tool call of any
/// kind until the handback, team tools included.
#[test]
fn team_tools_wait_like_every_tool_while_an_operator_has_the_computer() {
    let members: Vec<String> = (1..=6).map(|i| format!("m{i}")).collect();
    let creates: Vec<Value> = members
        .iter()
        .map(|m| tool("team_create_member", json!({ "name": m })))
        .collect();
    let Some(s) = setup(json!([
        { "tool_call": tool("terminal", json!({ "command": "touch started; sleep 3; echo first-done" })) },
        { "tool_calls": creates },
        { "text": "members asked for" }
    ])) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let chat = s
        .env
        .background(&s.server, &["chat", "box", "make six members"]);
    // Take control while the first tool runs: the model pauses at its next call.
    let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
    wait_for(Duration::from_secs(60), "the first tool", || {
        ws.join("started").exists().then_some(())
    });
    // `_err` keeps reading stderr while the test goes on.
    let common::Controller {
        child: mut attach,
        err: _err,
        ..
    } = s.env.take_control(&id, std::process::Stdio::null());
    let made = || {
        s.env
            .json(&["agent", "list"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| members.iter().any(|m| a["name"] == m.as_str()))
            .count()
    };
    // The model asks for its team calls meanwhile; none runs while it is paused: the
    // turn reports that its first team call waits at the pause gate (a call that ran
    // would complete instead).
    let session = s.env.wait_session_of("box");
    let held = s.env.wait_event(
        &s.server,
        &session,
        "the first team call to wait or complete",
        |e| {
            common::waits::is_paused_event(e)
                || (e["type"] == "tool.complete" && e["payload"]["name"] == "team_create_member")
        },
    );
    assert_eq!(
        held["type"], "waiting",
        "a team tool ran under control: {held}"
    );
    assert_eq!(made(), 0, "a team tool ran under an operator's control");
    // Control ends; the model stays paused: still nothing. Only a resume command wakes
    // the gate, and releasing control queues none.
    drop(attach.stdin.take());
    attach.wait().unwrap();
    let c = s.env.json(&["computer", "show", &id]);
    assert!(c["control"]["holder"].is_null(), "released: {c}");
    assert_eq!(c["control"]["paused"], true, "{c}");
    s.env.assert_no_resume(&s.reg.id);
    assert!(
        !s.env
            .session_events(&s.server, &session)
            .iter()
            .any(|e| e["type"] == "tool.complete" && e["payload"]["name"] == "team_create_member"),
        "a team call ended while paused"
    );
    assert_eq!(made(), 0, "a team tool ran while paused");
    // The handback: the waiting call is answered with the note instead of running.
    s.env
        .run(&["computer", "handback", &id, "--note", "carry on"])
        .ok();
    let done = chat.output();
    assert!(done.status.success(), "{done:?}");
    assert!(made() < 6, "the handed-back call did not run");
    let last = s.model.steps().last().unwrap()["body"].to_string();
    assert!(last.contains("carry on"), "{last}");
}

/// An admin that creates a goal in chat but adds no subtask in that turn is woken once
/// the turn ends, and plans it then: nobody has to stop and resume the goal.
#[test]
fn a_goal_left_without_subtasks_wakes_its_admin_when_the_creating_turn_ends() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": "[yy team review]", "steps": [
                { "tool_call": tool("subtask_add", json!({ "goal": GOAL, "title": "Write", "owner": "writer", "criteria": "a line" })) },
                { "text": "Planned now." }
            ] },
            { "match": "[yy subtask] #1", "steps": [ { "text": "written" } ] },
            { "match": "Set up a goal", "steps": [
                { "tool_call": tool("team_create_member", json!({ "name": "writer" })) },
                { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer"] })) },
                { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL, "criteria": "c" })) },
                { "text": "I will plan it later." }
            ] }
        ]
    })) else {
        return;
    };
    s.env
        .run(&["chat", "box", "Set up a goal, plan later"])
        .ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    let planned = wait_for(
        Duration::from_secs(240),
        "the admin woken to plan the goal",
        || {
            let g = s.env.json(&["goal", "show", &id]);
            (g["total"].as_i64()? >= 1).then_some(g)
        },
    );
    assert_eq!(planned["state"], "active", "{planned:#}");
    assert!(planned["wakeups"].as_i64().unwrap() >= 1, "{planned:#}");
    assert_eq!(planned["subtasks"][0]["owner"], "writer");
    // Until it ends, the goal says what it waits for.
    let shown = s.env.run(&["goal", "show", &id]);
    assert!(shown.stdout.contains("waits for"), "{shown:?}");
    let g = s.env.json(&["goal", "show", &id]);
    if g["state"] == "active" {
        assert!(g["waits_for"].is_string(), "{g:#}");
    }
    assert!(!requests_of(&s, "[yy team review]").is_empty());
}

/// Issue 22, item 5: files travel with reviews and dependencies. The admin's review turn
/// finds the member's exported file under `reviews/#1/`, byte for byte; the subtask that
/// depends on #1 finds #1's accepted file under `inputs/deps/#1/` without the admin naming
/// it.
#[test]
fn result_files_travel_to_the_review_and_to_the_dependent_subtask() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            { "match": "[yy team review]", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "sha256sum reviews/#1/data.txt" })) },
                { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })) },
                { "text": "Accepted #1." },
                { "tool_calls": [
                    tool("subtask_review", json!({ "goal": GOAL, "subtask": "#2", "decision": "accept" })),
                    tool("goal_complete", json!({ "goal": GOAL, "summary": "checked" }))
                ] },
                { "text": "Done." }
            ] },
            { "match": "[yy goal result]", "steps": [ { "text": "Delivered." } ] },
            { "match": "[yy subtask] #1", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "printf 'q1: 10\\ntotal: 10\\n' > data.txt" })) },
                { "tool_call": tool("computer_export", json!({ "path": "data.txt" })) },
                { "text": "data.txt exported" }
            ] },
            { "match": "[yy subtask] #2", "steps": [
                { "tool_call": tool("terminal", json!({ "command": "cat inputs/deps/#1/data.txt" })) },
                { "text": "The total is 10." }
            ] },
            { "match": "Build the team", "steps": [
                { "tool_calls": [
                    tool("team_create_member", json!({ "name": "writer" })),
                    tool("team_create_member", json!({ "name": "editor" }))
                ] },
                { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer", "editor"] })) },
                { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL, "criteria": "c" })) },
                { "tool_calls": [
                    tool("subtask_add", json!({ "goal": GOAL, "title": "Collect", "owner": "writer", "criteria": "data.txt" })),
                    tool("subtask_add", json!({ "goal": GOAL, "title": "Check", "owner": "editor",
                        "criteria": "the total is read", "deps": ["#1"] }))
                ] },
                { "text": "At work." }
            ] }
        ]
    })) else {
        return;
    };
    s.env.run(&["chat", "box", "Build the team"]).ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    let g = wait_completed(&s, &id);
    assert_eq!(g["state"], "completed", "{g:#}");
    let subs = g["subtasks"].as_array().unwrap();
    let exported = &subs[0]["result"]["artifacts"][0];
    let sha = exported["sha256"].as_str().unwrap();
    // Nobody named the file for #2.
    assert!(
        subs[1]["inputs"]["artifacts"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{g:#}"
    );

    // The review turn was told where the file is, and its sha256sum read it there.
    let reviews = requests_of(&s, "[yy team review]");
    let first = reviews[0]["body"]["messages"].to_string();
    assert!(first.contains("/workspace/reviews/#1/data.txt"), "{first}");
    let summed = reviews[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        summed.contains(&format!("{sha}  reviews/#1/data.txt")),
        "the review read the same bytes: {summed}"
    );
    let computer_of = |agent: &str| {
        s.env
            .json(&["computer", "list"])
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["agent"] == agent)
            .and_then(|c| c["id"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("{agent}'s computer"))
    };
    let out = s.env.run(&[
        "computer",
        "exec",
        &computer_of("box"),
        "--",
        "cat",
        "reviews/#1/data.txt",
    ]);
    out.ok();
    assert_eq!(out.stdout, "q1: 10\ntotal: 10\n");

    // The dependent subtask's member read #1's accepted file under inputs/deps/#1/.
    let asked = requests_of(&s, "[yy subtask] #2");
    let first = asked[0]["body"]["messages"].to_string();
    assert!(
        first.contains("/workspace/inputs/deps/#1/data.txt"),
        "{first}"
    );
    let out = s.env.run(&[
        "computer",
        "exec",
        &computer_of("editor"),
        "--",
        "cat",
        "inputs/deps/#1/data.txt",
    ]);
    out.ok();
    assert_eq!(out.stdout, "q1: 10\ntotal: 10\n");

    // The goal's result went back to the session it came from with the accepted file.
    let delivered = requests_of(&s, "[yy goal result]");
    let told = delivered[0]["body"]["messages"].to_string();
    assert!(told.contains("/workspace/results/#1/data.txt"), "{told}");
    let out = s.env.run(&[
        "computer",
        "exec",
        &computer_of("box"),
        "--",
        "cat",
        "results/#1/data.txt",
    ]);
    out.ok();
    assert_eq!(out.stdout, "q1: 10\ntotal: 10\n");
}

/// Issue 22: three computer agents (an admin and two members) on the default pool of two
/// complete a goal with a review and a rework, with no operator action: idle computers give
/// their slots back, and a start waiting for a full pool takes the longest idle one's.
#[test]
fn three_computer_agents_share_a_pool_of_two_through_a_review_and_a_rework() {
    let Some(s) = worker_setup_with(
        || test_image().id.clone(),
        json!({
            "steps": [],
            "by_prompt": [
                { "match": "[yy team review]", "steps": [
                    { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1",
                        "decision": "rework", "note": "add the total" })) },
                    { "text": "Sent back." },
                    { "tool_call": tool("subtask_review", json!({ "goal": GOAL, "subtask": "#1", "decision": "accept" })) },
                    { "text": "Accepted #1." },
                    { "tool_calls": [
                        tool("subtask_review", json!({ "goal": GOAL, "subtask": "#2", "decision": "accept" })),
                        tool("goal_complete", json!({ "goal": GOAL, "summary": "checked" }))
                    ] },
                    { "text": "Done." }
                ] },
                { "match": "[yy goal result]", "steps": [ { "text": "Delivered." } ] },
                { "match": "[yy subtask] #1", "steps": [
                    { "tool_call": tool("terminal", json!({ "command": "printf 'q1: 10\\n' > data.txt" })) },
                    { "text": "first try" },
                    { "tool_call": tool("terminal", json!({ "command": "printf 'q1: 10\\ntotal: 10\\n' > data.txt" })) },
                    { "tool_call": tool("computer_export", json!({ "path": "data.txt" })) },
                    { "text": "with the total" }
                ] },
                { "match": "[yy subtask] #2", "steps": [
                    { "tool_call": tool("terminal", json!({ "command": "cat inputs/deps/#1/data.txt" })) },
                    { "text": "The total is 10." }
                ] },
                { "match": "Build the team", "steps": [
                    { "tool_calls": [
                        tool("team_create_member", json!({ "name": "writer" })),
                        tool("team_create_member", json!({ "name": "editor" }))
                    ] },
                    { "tool_call": tool("team_create", json!({ "name": "crew", "members": ["writer", "editor"] })) },
                    { "tool_call": tool("goal_create", json!({ "team": "crew", "title": GOAL, "criteria": "c" })) },
                    { "tool_calls": [
                        tool("subtask_add", json!({ "goal": GOAL, "title": "Collect", "owner": "writer", "criteria": "a total line" })),
                        tool("subtask_add", json!({ "goal": GOAL, "title": "Check", "owner": "editor",
                            "criteria": "the total is read", "deps": ["#1"] }))
                    ] },
                    { "text": "At work." }
                ] }
            ]
        }),
        // The default pool of two; idle computers go after 5 s, and a waiting start takes
        // one idle for 1 s.
        &["--computer-idle", "5s", "--computer-reclaim-after", "1s"],
    ) else {
        return;
    };
    s.env.run(&["agent", "update", "box", "--manage-team"]).ok();
    let runner = s.env.json(&["runner", "show", &s.reg.id]);
    assert_eq!(runner["computers_capacity"], 2, "{runner}");
    s.env.run(&["chat", "box", "Build the team"]).ok();
    let id = goal_of(&s)["id"].as_str().unwrap().to_string();
    let g = wait_completed(&s, &id);
    assert_eq!(g["state"], "completed", "{g:#}");
    let subs = g["subtasks"].as_array().unwrap();
    assert_eq!(subs[0]["attempts"], 2, "reworked once: {g:#}");
    assert!(subs.iter().all(|s| s["state"] == "accepted"), "{g:#}");
    let member = requests_of(&s, "[yy subtask] #2");
    let read = member[1]["body"]["messages"].to_string();
    assert!(read.contains("total: 10"), "{read}");
    // Three computers took turns on two slots; once the work is done, each gives its slot
    // back by itself.
    let stopped = wait_for(
        Duration::from_secs(60),
        "every computer idle-stopped",
        || {
            let list = s.env.json(&["computer", "list"]);
            let all = list.as_array()?;
            (all.len() == 3
                && all
                    .iter()
                    .all(|c| c["state"] == "stopped" && c["stop_reason"].is_string()))
            .then_some(list)
        },
    );
    eprintln!("{stopped:#}");
}
