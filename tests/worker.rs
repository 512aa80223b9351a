//! Computer agents end to end: `yy chat` → control plane → Runner → the isolated Worker
//! (hermes-agent 0.19.0's own model loop, driven by the scripted fake model) → every tool
//! in the agent's computer on a real Docker engine, and back.

mod common;
mod computer_support;

use std::path::PathBuf;
use std::time::Duration;

use common::hermes::{WorkerSetup, worker_setup};
use common::{Env, Out, session_of, wait_for};
use computer_support::{docker, test_image};
use serde_json::{Value, json};

type Setup = WorkerSetup;

fn setup(script: Value) -> Option<Setup> {
    worker_setup(|| test_image().id.clone(), script)
}

fn workspace(s: &Setup, computer: &str) -> PathBuf {
    s.env
        .path("runner-data-a")
        .join("workspaces")
        .join(computer)
}

fn computer_of(s: &Setup) -> Value {
    let list = s.env.json(&["computer", "list"]);
    list.as_array().unwrap()[0].clone()
}

#[test]
fn a_computer_agent_turn_runs_its_tools_in_the_guest_and_nowhere_else() {
    let canary = format!("/tmp/yy-host-canary-{}", uuid::Uuid::new_v4().simple());
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "id -u > uid.txt; id -u; pwd"}}},
        {"tool_call": {"name": "write_file", "arguments": {"path": canary, "content": "escaped"}}},
        {"tool_call": {"name": "delegate_task", "arguments": {"goal": "run on the host"}}},
        {"tool_call": {"name": "write_file", "arguments": {"path": "notes.txt", "content": "from the model"}}},
        {"text": "Done in the computer"}
    ])) else {
        return;
    };
    let out = s.env.run(&["chat", "box", "work in your computer"]);
    out.ok();
    assert!(out.stdout.contains("Done in the computer"), "{out:?}");
    let session = session_of(&out);
    let shown = s.env.json(&["session", "show", &session]);
    let turn = &shown["turns"][0];
    assert_eq!(turn["state"], "complete", "{shown}");
    let tools = turn["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["terminal", "write_file", "delegate_task", "write_file"],
        "{shown}"
    );
    assert_eq!(
        tools[0]["result"]["stdout"], "1000\n/workspace\n",
        "uid 1000 in the guest"
    );
    assert!(
        tools[1]["result"]["error"].is_string(),
        "a path outside the workspace is refused: {}",
        tools[1]
    );
    assert!(
        tools[2]["result"]["refused"]
            .as_str()
            .unwrap()
            .contains("not available"),
        "a host tool is refused and recorded: {}",
        tools[2]
    );
    assert!(
        !std::path::Path::new(&canary).exists(),
        "nothing on the host"
    );

    let computer = computer_of(&s);
    assert_eq!(computer["state"], "running", "{computer}");
    let id = computer["id"].as_str().unwrap();
    let ws = workspace(&s, id);
    assert_eq!(
        std::fs::read_to_string(ws.join("uid.txt")).unwrap(),
        "1000\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "from the model"
    );
    // The model saw only the computer's tools.
    let steps = s.model.steps();
    assert_eq!(steps.len(), 5, "one model call per step");
    let offered: Vec<&str> = steps[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        [
            "terminal",
            "read_file",
            "write_file",
            "list_files",
            "computer_export"
        ]
    );

    // Hermes's prompt describes the computer, not the Runner's host where the Worker runs.
    let system = steps[0]["body"]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("isolated Linux computer"), "{system}");
    let runner_data = s.env.path("runner-data-a");
    for host in [
        "User home directory",
        "Current working directory",
        "Python toolchain",
        "Active Hermes profile",
        runner_data.to_str().unwrap(),
    ] {
        assert!(!system.contains(host), "{host:?} in the prompt: {system}");
    }

    // The key reached the model's base URL only: not the container, no process's argv or
    // environment, no log, not the control plane's database.
    let container = computer["container_id"].as_str().unwrap();
    let inspect = docker(&["inspect", container]);
    assert!(!String::from_utf8_lossy(&inspect.stdout).contains(&s.key));
    let in_guest = s.env.computer_sh(
        id,
        "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'",
    );
    in_guest.ok();
    assert!(!in_guest.stdout.contains(&s.key));
    for proc in std::fs::read_dir("/proc").unwrap().flatten() {
        for file in ["cmdline", "environ"] {
            if let Ok(bytes) = std::fs::read(proc.path().join(file)) {
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(&s.key),
                    "{} of {:?}",
                    file,
                    proc.path()
                );
            }
        }
    }
    assert!(!s.runner.log().contains(&s.key), "Runner log");
    assert!(!s.server.log().contains(&s.key), "server log");
    let mut db = Vec::new();
    for f in ["yy.db", "yy.db-wal"] {
        db.extend(std::fs::read(s.env.data_dir().join(f)).unwrap_or_default());
    }
    assert!(!String::from_utf8_lossy(&db).contains(&s.key), "database");
    let worker_logs = s.env.path("runner-data-a").join("worker");
    let mut stack = vec![worker_logs];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(text) = std::fs::read(&p) {
                assert!(!String::from_utf8_lossy(&text).contains(&s.key), "{p:?}");
            }
        }
    }
}

#[test]
fn a_stop_during_a_guest_command_kills_it_before_it_writes() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 5; touch late"}}},
        {"text": "should not get here"}
    ])) else {
        return;
    };
    let chat = s
        .env
        .background(&s.server, &["chat", "box", "sleep then write"]);
    let session = wait_for(
        Duration::from_secs(90),
        "the guest command to start",
        || {
            let list = s.env.json(&["session", "list"]);
            let id = list.as_array()?.first()?["id"].as_str()?.to_string();
            let shown = s.env.json(&["session", "show", &id]);
            (shown["turns"][0]["tools"][0]["name"] == "terminal").then_some(id)
        },
    );
    s.env.run(&["session", "stop", &session]).ok();
    let shown = wait_for(Duration::from_secs(30), "the stopped turn to end", || {
        let v = s.env.json(&["session", "show", &session]);
        let state = v["turns"][0]["state"].clone();
        (state != "running" && state != "queued").then_some(v)
    });
    assert_eq!(shown["turns"][0]["state"], "interrupted", "{shown}");
    let _ = chat.output();
    let computer = computer_of(&s);
    let id = computer["id"].as_str().unwrap();
    let ws = workspace(&s, id);
    // Nothing of the command is left in the guest that could still write (its shell
    // holds `touch late`; `[t]` keeps the probe's own command line out).
    let probe = "ps -eo args | grep -c '[t]ouch late' || true";
    wait_for(Duration::from_secs(30), "the stopped command gone", || {
        let out = s
            .env
            .run(&["computer", "exec", id, "--", "sh", "-c", probe]);
        (out.code == 0 && out.stdout.trim() == "0").then_some(())
    });
    assert!(!ws.join("late").exists(), "no write after the stop");
    assert_eq!(s.model.steps().len(), 1, "the model was not asked again");
}

#[test]
fn a_profile_cwd_change_moves_the_next_turn_and_keeps_the_files() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "write_file", "arguments": {"path": "keep.txt", "content": "kept"}}},
        {"text": "written"},
        {"tool_call": {"name": "terminal", "arguments": {"command": "pwd; cat keep.txt"}}},
        {"text": "read"}
    ])) else {
        return;
    };
    s.env.run(&["chat", "box", "write"]).ok();
    s.env
        .run(&["profile", "update", "default", "--cwd", "/work2"])
        .ok();
    let out = s.env.run(&["chat", "box", "read"]);
    out.ok();
    let shown = s.env.json(&["session", "show", &session_of(&out)]);
    assert_eq!(
        shown["turns"][0]["tools"][0]["result"]["stdout"],
        "/work2\nkept"
    );
    assert_eq!(computer_of(&s)["guest_cwd"], "/work2");
}

/// The warm Worker keeps Hermes's agent between turns; each session still gets only its
/// own conversation.
#[test]
fn a_warm_worker_keeps_each_session_to_its_own_conversation() {
    let Some(s) = setup(json!([
        {"text": "first answer"},
        {"text": "second answer"},
        {"text": "third answer"}
    ])) else {
        return;
    };
    let first = s.env.run(&["chat", "box", "alpha-secret-1"]);
    first.ok();
    let session = session_of(&first);
    s.env
        .run(&["chat", "box", "beta", "--session", &session])
        .ok();
    let other = s.env.run(&["chat", "box", "gamma"]);
    other.ok();
    assert_ne!(session_of(&other), session);
    let steps = s.model.steps();
    assert_eq!(steps.len(), 3, "{steps:?}");
    let text = |i: usize| steps[i]["body"]["messages"].to_string();
    assert!(text(1).contains("alpha-secret-1") && text(1).contains("first answer"));
    assert!(text(1).contains("beta"));
    assert!(text(2).contains("gamma"), "{}", text(2));
    for earlier in ["alpha-secret-1", "first answer", "beta", "second answer"] {
        assert!(
            !text(2).contains(earlier),
            "another session's {earlier:?} reached the model: {}",
            text(2)
        );
    }
    assert_eq!(steps[2]["body"]["messages"][0]["role"], "system");
    assert_eq!(
        steps[0]["body"]["messages"][0], steps[2]["body"]["messages"][0],
        "the same system prompt for a new session"
    );
}

/// The profile's `model.context_length`, `model.max_tokens` and `agent.max_turns` reach the
/// Worker's Hermes; a window Hermes refuses fails that turn with Hermes's reason, and the
/// Worker serves the next one.
#[test]
fn a_profile_s_limits_reach_the_worker_and_a_refused_one_fails_only_its_turn() {
    let tool = json!({"tool_call": {"name": "terminal", "arguments": {"command": "true"}}});
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            {"match": "again", "steps": [{"text": "after the fix"}]},
            {"match": "loop", "steps": [tool, tool, tool, tool, {"text": "four tools"}]}
        ]
    })) else {
        return;
    };
    let config = s.env.path("hermes-home").join("config.yaml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}  context_length: 1000\n")).unwrap();
    let refused = s.env.run(&["chat", "box", "too small a window"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(said.contains("1,000 tokens"), "{said}");
    assert!(s.model.steps().is_empty(), "the model was not asked");

    std::fs::write(&config, format!("{good}  max_tokens: 777\n")).unwrap();
    let out = s.env.run(&["chat", "box", "again"]);
    out.ok();
    assert!(out.stdout.contains("after the fix"), "{out:?}");
    let body = &s.model.steps()[0]["body"];
    assert!(
        body["max_tokens"] == 777 || body["max_completion_tokens"] == 777,
        "{body}"
    );

    // Two model calls at most: two of the four tool calls run, then Hermes stops.
    std::fs::write(&config, format!("{good}agent:\n  max_turns: 2\n")).unwrap();
    let out = s.env.run(&["chat", "box", "loop"]);
    let shown = s.env.json(&["session", "show", &session_of(&out)]);
    let tools = shown["turns"][0]["tools"].as_array().unwrap().len();
    assert_eq!(tools, 2, "{shown}");
    let claimed = s.runner.log().matches("worker claimed").count();
    assert_eq!(claimed, 1, "the same Worker: {}", s.runner.log());
}

/// `HERMES_HOME` of the process `pid`.
fn hermes_home_of(pid: i32) -> String {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    String::from_utf8_lossy(&environ)
        .split('\0')
        .find_map(|v| v.strip_prefix("HERMES_HOME="))
        .unwrap()
        .to_string()
}

#[test]
fn a_first_turn_claims_a_pre_started_worker_that_serves_only_its_agent() {
    let Some(s) = setup(json!([
        {"text": "box answer"},
        {"text": "box2 answer"}
    ])) else {
        return;
    };
    let dir = s.env.path("runner-data-a").join("worker");
    let entry = dir.to_str().unwrap();
    // Before any turn, one Worker is started: the spare, with a home of its own.
    let spare = wait_for(Duration::from_secs(90), "a spare Worker", || {
        let pids = common::waits::pids_with(entry);
        (pids.len() == 1).then(|| pids[0])
    });
    wait_for(
        Duration::from_secs(90),
        "the spare to import Hermes",
        || s.runner.log().contains("worker started").then_some(()),
    );
    let spare_home = hermes_home_of(spare);
    assert!(spare_home.starts_with(dir.join("homes").to_str().unwrap()));

    let out = s.env.run(&["chat", "box", "first turn of box"]);
    out.ok();
    assert!(out.stdout.contains("box answer"), "{out:?}");
    // Hermes asks the model's server for the model's context window (among other probes).
    let window_probes = || {
        s.model
            .requests()
            .iter()
            .filter(|r| r["path"] == "/v1/models/fake-model")
            .count()
    };
    let probed = window_probes();
    assert!(probed >= 1, "{:?}", s.model.requests());
    let claimed = |log: &str| {
        log.lines()
            .filter(|l| l.contains("worker claimed") && l.contains("pre_started=true"))
            .count()
    };
    assert_eq!(claimed(&s.runner.log()), 1, "{}", s.runner.log());
    // The spare is box's Worker now: its log is box's, and another spare takes its place.
    let box_id = s.env.json(&["agent", "show", "box"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(dir.join("logs").join(format!("{box_id}.log")).is_file());
    let second = wait_for(Duration::from_secs(90), "a new spare", || {
        let pids = common::waits::pids_with(entry);
        (pids.len() == 2 && pids.contains(&spare))
            .then(|| pids.into_iter().find(|p| *p != spare))
            .flatten()
    });
    assert_ne!(hermes_home_of(second), spare_home);

    // Another agent's first turn claims the new spare, never box's Worker.
    s.env
        .run(&[
            "agent",
            "create",
            "box2",
            "--profile",
            "default",
            "--env",
            "computer",
        ])
        .ok();
    wait_for(
        Duration::from_secs(90),
        "the new spare to import Hermes",
        || (s.runner.log().matches("worker started").count() == 2).then_some(()),
    );
    let out = s.env.run(&["chat", "box2", "first turn of box2"]);
    out.ok();
    assert!(out.stdout.contains("box2 answer"), "{out:?}");
    assert_eq!(claimed(&s.runner.log()), 2, "{}", s.runner.log());
    assert_eq!(
        window_probes(),
        probed,
        "box2's Worker used the window box's Worker found"
    );
    let pids = common::waits::pids_with(entry);
    assert!(
        pids.contains(&spare) && pids.contains(&second),
        "each agent keeps its own Worker: {pids:?}"
    );
    let steps = s.model.steps();
    assert_eq!(steps.len(), 2, "{steps:?}");
    let second_turn = steps[1]["body"]["messages"].to_string();
    assert!(second_turn.contains("first turn of box2"), "{second_turn}");
    assert!(
        !second_turn.contains("first turn of box\""),
        "{second_turn}"
    );
    assert!(!second_turn.contains("box answer"), "{second_turn}");
}

#[test]
fn a_runner_killed_mid_turn_leaves_it_uncertain_and_the_model_is_not_asked_again() {
    let Some(mut s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 4; echo slept"}}},
        {"text": "never"}
    ])) else {
        return;
    };
    let _chat = s
        .env
        .background(&s.server, &["chat", "box", "sleep a while"]);
    wait_for(Duration::from_secs(90), "the model's first request", || {
        (!s.model.steps().is_empty()).then_some(())
    });
    // The Worker that asked: it is to die with its Runner, else it could ask again.
    let entry = s.env.path("runner-data-a").join("worker");
    let entry = entry.to_str().unwrap();
    let old_workers = common::waits::pids_with(entry);
    assert!(!old_workers.is_empty(), "no Worker runs");
    s.runner.kill9();
    let generation = s.env.json(&["runner", "show", &s.reg.id])["generation"]
        .as_i64()
        .unwrap();
    let (_runner, _) = s.env.start_online(&s.reg, "a", generation);
    let session = s.env.json(&["session", "list"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = wait_for(Duration::from_secs(30), "the turn to be uncertain", || {
        let v = s.env.json(&["session", "show", &session]);
        (v["turns"][0]["state"] == "uncertain").then_some(v)
    });
    assert!(
        shown["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("never replayed")
    );
    // Who could ask the model again: the killed Runner's Worker (gone with it) or a
    // replay of the turn by the new Runner (the turn's command is final: nothing is
    // leased again).
    // (The new Runner starts a spare of its own from the same data directory.)
    wait_for(Duration::from_secs(20), "the old Workers gone", || {
        let now = common::waits::pids_with(entry);
        (!old_workers.iter().any(|p| now.contains(p))).then_some(())
    });
    let commands = s.env.json(&["runner", "commands", &s.reg.id]);
    let turn = commands
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "worker.turn")
        .unwrap_or_else(|| panic!("{commands:#}"));
    assert!(
        !["pending", "leased", "running"].contains(&turn["state"].as_str().unwrap()),
        "{commands:#}"
    );
    assert_eq!(s.model.steps().len(), 1, "the model was asked once");
}

#[test]
fn a_runner_without_the_worker_is_refused_at_admission() {
    if !common::require_docker() {
        return;
    }
    let image = test_image().id.clone();
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &image]);
    env.run(&[
        "agent",
        "create",
        "box",
        "--profile",
        "default",
        "--env",
        "computer",
    ])
    .ok();
    let (_runner, _) = env.start_online(&reg, "a", 0);
    let out = env.run(&["chat", "box", "hello"]);
    out.fails(2, "computer-worker-v1");
    assert!(out.stderr.contains("never runs on the host"), "{out:?}");
    drop(server);
}

#[test]
fn the_worker_entry_speaks_every_api_mode_it_is_configured_with() {
    let Some(s) = setup(json!([])) else {
        return;
    };
    let home = s.env.path("hermes-home");
    for (mode, path) in [
        ("anthropic_messages", "/messages"),
        ("codex_responses", "/responses"),
    ] {
        std::fs::write(
            home.join("config.yaml"),
            format!(
                "model:\n  default: fake-model\n  provider: custom\n  base_url: http://127.0.0.1:{}/v1\n  api_key: {}\n  api_mode: {mode}\n",
                s.model.port, s.key
            ),
        )
        .unwrap();
        // The fake model speaks only chat completions: the turn fails at the model, after
        // the Worker built Hermes's loop in this mode and called the mode's endpoint.
        let out = s.env.run(&["chat", "box", "hello"]);
        let shown = s.env.json(&["session", "show", &session_of(&out)]);
        assert_eq!(shown["turns"][0]["state"], "error", "{mode}: {shown}");
        let log = std::fs::read_to_string(&s.model.log).unwrap_or_default();
        assert!(
            log.lines().any(|l| {
                let r: Value = serde_json::from_str(l).unwrap();
                r["method"] == "POST" && r["path"].as_str().unwrap_or("").ends_with(path)
            }),
            "{mode}: no request to *{path}: {log}"
        );
    }
}

type Seen = std::sync::Arc<std::sync::Mutex<String>>;

/// Collects what `from` writes, line by line, on a thread of its own (so that the waits
/// below never block on it).
fn watch(from: impl std::io::Read + Send + 'static) -> Seen {
    let seen = Seen::default();
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(from);
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) > 0 {
            sink.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    seen
}

/// Runs `yy ARGS` in the background and returns it with its stderr and stdout as they grow.
fn spawn_watched(s: &Setup, args: &[&str]) -> (std::process::Child, Seen, Seen) {
    let mut child = s
        .env
        .command(args)
        .env("YY_SERVER", &s.server.url)
        .env("YY_TOKEN", s.env.stored_token())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = watch(child.stderr.take().unwrap());
    let out = watch(child.stdout.take().unwrap());
    (child, err, out)
}

/// Waits up to `within` for the first line of `seen` that contains `needle` and returns it
/// with how long it took from `started`.
fn line_within(
    seen: &Seen,
    needle: &str,
    started: std::time::Instant,
    within: Duration,
) -> (String, Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let text = seen.lock().unwrap().clone();
        if let Some(l) = text.lines().find(|l| l.contains(needle)) {
            return (l.to_string(), started.elapsed());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {needle:?}; so far: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn line_with(seen: &Seen, needle: &str, started: std::time::Instant) -> (String, Duration) {
    line_within(seen, needle, started, Duration::from_secs(15))
}

#[test]
fn a_guest_command_s_output_reaches_chat_and_attach_while_it_runs() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "echo first-line; echo to-stderr >&2; sleep 5; echo second-line"}}},
        {"text": "printed both"}
    ])) else {
        return;
    };
    let created = s.env.json(&["computer", "create", "--agent", "box"]);
    let computer = created["id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let (mut attach, attach_err, attach_out) =
        spawn_watched(&s, &["computer", "attach", &computer]);
    line_with(&attach_err, "waiting for one", started);
    let (mut chat, chat_err, chat_out) = spawn_watched(&s, &["chat", "box", "print, wait, print"]);
    let watched = [("chat", &chat_err), ("attach", &attach_out)];
    let firsts = watched.map(|(who, seen)| {
        let (first, at) = line_within(seen, "first-line", started, Duration::from_secs(90));
        assert!(
            first.starts_with("  │ "),
            "{who}: shown under its tool: {first:?}"
        );
        at
    });
    for (who, seen) in watched {
        let so_far = seen.lock().unwrap().clone();
        assert!(!so_far.contains("second-line"), "{who}: {so_far}");
    }
    for ((who, seen), at_first) in watched.into_iter().zip(firsts) {
        let (_, at_second) = line_within(seen, "second-line", started, Duration::from_secs(30));
        eprintln!("{who}: first-line at {at_first:?}, second-line at {at_second:?}");
        assert!(
            at_second - at_first > Duration::from_secs(3),
            "{who} showed the first line while the command slept ({at_first:?}, {at_second:?})"
        );
        assert!(
            seen.lock().unwrap().contains("to-stderr"),
            "{who}: stderr too"
        );
    }
    assert!(
        chat.wait().unwrap().success(),
        "{}",
        chat_err.lock().unwrap()
    );
    // What it wrote before it exited is still on its way through the pipe to the watcher.
    line_with(&chat_out, "printed both", started);
    // attach showed the output once, live, and then how the command ended.
    let (_, _) = line_with(&attach_out, "exit 0", started);
    let shown = attach_out.lock().unwrap().clone();
    assert_eq!(shown.matches("│ second-line").count(), 1, "{shown}");
    assert!(
        !shown.contains("\nsecond-line"),
        "the result does not repeat it: {shown}"
    );
    let _ = attach.kill();
    let _ = attach.wait();
    // The stored turn keeps the tool's whole result as before.
    let session = session_of(&Out {
        code: 0,
        stdout: String::new(),
        stderr: chat_err.lock().unwrap().clone(),
    });
    let turn = &s.env.json(&["session", "show", &session])["turns"][0];
    let result = &turn["tools"][0]["result"];
    assert_eq!(result["exit_code"], 0, "{turn}");
    assert_eq!(result["stdout"], "first-line\nsecond-line\n", "{turn}");
}

#[test]
fn a_turn_for_an_offline_runner_says_so_at_once_and_can_be_stopped() {
    let Some(mut s) = setup(json!([{"text": "late but fine"}])) else {
        return;
    };
    let runner = s.env.json(&["runner", "list"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    s.runner.kill9();
    // The control plane notices within seconds that a killed Runner stopped polling.
    wait_for(Duration::from_secs(15), "the Runner to be offline", || {
        (s.env.json(&["runner", "show", &runner])["online"] == false).then_some(())
    });

    // Provisioning a computer waits for the Runner, says at once that it is offline, and
    // Ctrl-C cancels it.
    let started = std::time::Instant::now();
    let (mut create, seen, _) = spawn_watched(&s, &["computer", "create", "--agent", "box"]);
    let (said, took) = line_with(&seen, "queued", started);
    eprintln!("computer create said why it waits {took:?} after it started: {said}");
    assert!(said.contains("offline"), "{said}");
    // Measured from the process start (a debug build, on a shared machine).
    assert!(
        took < Duration::from_secs(2),
        "said at once ({took:?}): {said}"
    );
    assert!(said.contains("Ctrl-C cancels it"), "{said}");
    unsafe { libc::kill(create.id() as i32, libc::SIGINT) };
    let status = create.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{}", seen.lock().unwrap());
    let (cancelled, _) = line_with(&seen, "cancelled", started);
    assert!(cancelled.contains("interrupted"), "{cancelled}");

    // A turn for the same Runner, now known to be offline: that is the first thing said.
    let started = std::time::Instant::now();
    let (mut chat, seen, _) = spawn_watched(&s, &["chat", "box", "are you there?"]);
    let (said, took) = line_with(&seen, "queued", started);
    eprintln!("chat said why it waits {took:?} after it started: {said}");
    assert!(said.contains("offline"), "{said}");
    assert!(
        took < Duration::from_secs(2),
        "said at once ({took:?}): {said}"
    );
    assert!(said.contains("Ctrl-C cancels the turn"), "{said}");
    let _ = chat.kill();
    let _ = chat.wait();
    // The client went away; the queued turn is visible and stops, by a unique id prefix.
    let session = session_of(&Out {
        code: 0,
        stdout: String::new(),
        stderr: seen.lock().unwrap().clone(),
    });
    let listed = s.env.json(&["session", "list"]);
    assert_eq!(listed[0]["state"], "running", "{listed}");
    assert_eq!(listed[0]["last_turn"], "queued", "{listed}");
    let table = s.env.run(&["session", "ls"]);
    assert!(table.stdout.contains("queued"), "{table:?}");
    let prefix = &session[..8];
    let shown = s.env.json(&["session", "show", prefix]);
    assert_eq!(shown["id"], session.as_str(), "a prefix names its session");
    s.env.run(&["session", "stop", prefix]).ok();
    let shown = s.env.json(&["session", "show", &session]);
    assert_eq!(shown["turns"][0]["state"], "interrupted", "{shown}");
}
