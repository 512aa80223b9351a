//! Bot sessions end to end: `yy chat` → control plane → Runner → a real `hermes serve`
//! (hermes-agent 0.19.0) driven by the scripted fake model server, and back.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::hermes::{FakeModel, write_config};
use common::{Bg, Env, Registered, RunnerProc, Server, configure, session_of, wait_for};
use serde_json::{Value, json};

fn tool_script() -> Value {
    json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "echo hi"}}},
        {"text": "All done: the command printed hi"}
    ])
}

/// A slow answer (~1.5 s per streamed chunk), to stop or restart in the middle.
fn slow_script() -> Value {
    json!([{"text": "one two three four five six seven eight", "delay_ms": 1500}])
}

struct Setup {
    env: Env,
    server: Server,
    reg: Registered,
    runner: RunnerProc,
    model: FakeModel,
}

/// Control plane, a host agent `bot`, and a Runner supervising its own Hermes that talks
/// to a fake model playing `script`.
fn setup(script: Value) -> Option<Setup> {
    let hermes = common::require_hermes()?;
    let env = Env::new();
    let server = env.bootstrap();
    let model = FakeModel::start(&env.path("model"), script);
    let home = env.path("hermes-home");
    write_config(&home, model.port, &env.path("work"), "off", "");
    let reg = env.register_runner(&server, "main", &[]);
    configure(
        &reg,
        json!({ "hermesCommand": [hermes.display().to_string(), "serve"], "hermesHome": home }),
    );
    env.run(&[
        "agent",
        "create",
        "bot",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .ok();
    let (runner, _) = env.start_online(&reg, "a", 0);
    Some(Setup {
        env,
        server,
        reg,
        runner,
        model,
    })
}

fn chat_in_background(s: &Setup, message: &str) -> Bg {
    s.env.background(&s.server, &["chat", "bot", message])
}

/// Waits until the model received the turn's request (Hermes is past its start-up probes,
/// which take a while when other test binaries start their Hermes at the same time).
fn wait_streaming(model: &FakeModel) {
    wait_for(
        Duration::from_secs(120),
        "the model to stream the turn",
        || (!model.steps().is_empty()).then_some(()),
    );
}

/// A slow turn in flight: `setup` with `slow_script`, `yy chat bot MESSAGE` in the
/// background, and the running session's id once the model streams its answer.
fn slow_turn_streaming(message: &str) -> Option<(Setup, Bg, String)> {
    let s = setup(slow_script())?;
    let chat = chat_in_background(&s, message);
    let session = wait_for(Duration::from_secs(30), "a running Hermes session", || {
        let list = s.env.json(&["session", "list"]);
        list.as_array()?
            .first()
            .filter(|s| s["state"] == "running" && s["hermes_session_id"].is_string())
            .cloned()
    });
    wait_streaming(&s.model);
    let id = session["id"].as_str().unwrap().to_string();
    Some((s, chat, id))
}

#[test]
fn a_full_turn_with_a_tool_call_streams_to_the_cli_and_is_recorded() {
    let Some(s) = setup(tool_script()) else {
        return;
    };
    // The Runner reports where the Hermes it started really listens (a free port on
    // 127.0.0.1), not only the URL it was registered with.
    let shown = s.env.json(&["runner", "show", &s.reg.id]);
    let listen = shown["hermes_listen"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(listen.starts_with("http://127.0.0.1:"), "{shown}");
    let text = s.env.run(&["runner", "show", &s.reg.id]);
    assert!(
        text.stdout
            .contains(&format!("{listen} (the Hermes this Runner started")),
        "{text:?}"
    );
    // It logs its Hermes home and the model settings it found there.
    let log = s.runner.log();
    assert!(log.contains("model settings found"), "{log}");
    let out = s.env.run(&["chat", "bot", "please run echo hi"]);
    out.ok();
    assert!(
        out.stdout.contains("All done: the command printed hi"),
        "{out:?}"
    );
    assert!(out.stderr.contains("[tool terminal started]"), "{out:?}");
    assert!(out.stderr.contains("[tool terminal done]"), "{out:?}");
    // While Hermes makes the session (it reaches the model first), chat says so.
    assert!(
        out.stderr
            .contains("[starting a Hermes session (profile default); Hermes checks its model first; Ctrl-C cancels the turn]"),
        "{out:?}"
    );
    let session_id = session_of(&out);

    let shown = s.env.json(&["session", "show", &session_id]);
    assert_eq!(shown["state"], "idle");
    assert_eq!(shown["runner_id"], s.reg.id.as_str());
    let turn = &shown["turns"][0];
    assert_eq!(turn["state"], "complete");
    assert_eq!(turn["message"], "please run echo hi");
    assert_eq!(turn["tools"][0]["name"], "terminal");
    assert_eq!(turn["tools"][0]["args"]["command"], "echo hi");
    assert_eq!(turn["tools"][0]["result"]["output"], "hi");
    assert!(turn["final_text"].as_str().unwrap().contains("All done"));
    let text = s.env.run(&["session", "show", &session_id]);
    assert!(text.stdout.contains("[tool terminal]"), "{}", text.stdout);

    // The same session continues in the same Hermes session, with NDJSON events.
    let out = s.env.run(&[
        "chat",
        "bot",
        "and again",
        "--session",
        &session_id,
        "--json",
    ]);
    out.ok();
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["type"], "turn.start");
    assert_eq!(events.last().unwrap()["type"], "turn.end");
    assert_eq!(events.last().unwrap()["turn"]["state"], "complete");
    assert!(events.iter().any(|e| e["type"] == "text.delta"));
    let shown = s.env.json(&["session", "show", &session_id]);
    assert_eq!(shown["turns"].as_array().unwrap().len(), 2);
    assert_eq!(
        s.model.steps().len(),
        2,
        "two model calls for the tool turn"
    );
    let log = std::fs::read_to_string(&s.model.log).unwrap();
    assert_eq!(
        log.matches(r#""kind": "exhausted""#).count()
            + log.matches(r#""kind":"exhausted""#).count(),
        1,
        "one for the second turn"
    );
}

#[test]
fn a_stop_is_confirmed_through_active_list() {
    // Stopped while the model streams its answer.
    let Some((s, chat, id)) = slow_turn_streaming("take your time") else {
        return;
    };
    let id = id.as_str();
    let asked = Instant::now();
    let out = s.env.run(&["session", "stop", id]);
    out.ok();
    assert!(out.stdout.contains("stopped"), "{out:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "confirmed without waiting for the turn"
    );
    let shown = wait_for(Duration::from_secs(30), "the stopped turn to end", || {
        let v = s.env.json(&["session", "show", id]);
        (v["turns"][0]["state"] != "running" && v["turns"][0]["state"] != "queued").then_some(v)
    });
    assert_eq!(shown["state"], "idle");
    assert_eq!(shown["turns"][0]["state"], "interrupted");
    let out = chat.output();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the chat reports the interrupted turn"
    );
    // The Runner's commands: the turn and a confirmed stop.
    let cmds = s.env.json(&["runner", "commands", &s.reg.id]);
    let stop = cmds
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "session.stop")
        .unwrap();
    assert_eq!(stop["state"], "done");
}

#[test]
fn a_restart_of_the_control_plane_during_a_turn_leaves_it_uncertain_and_nothing_is_replayed() {
    // Restarted while the model streams its answer.
    let Some((s, chat, id)) = slow_turn_streaming("slow please") else {
        return;
    };
    let addr = s.server.addr();
    let Setup {
        env,
        server,
        reg,
        runner,
        model,
    } = s;
    assert_eq!(server.terminate(), 0);
    let server = Server::start_with(&env, &env.data_dir(), &addr, &[]);
    let envs = [("YY_SERVER", server.url.as_str())];
    let shown = wait_for(Duration::from_secs(30), "the turn marked uncertain", || {
        let out = env.run_with(&["session", "show", &id, "--json"], "", &envs);
        let v = out.json();
        (v["turns"][0]["state"] == "uncertain").then_some(v)
    });
    assert!(
        shown["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("never replayed")
    );
    assert_eq!(shown["state"], "idle");
    // The turn finishes in Hermes meanwhile; its late outcome is refused and nothing runs
    // again: the model was asked exactly once.
    let cmds = env
        .run_with(&["runner", "commands", &reg.id, "--json"], "", &envs)
        .json();
    let turn = cmds
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "session.turn")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(
        Duration::from_secs(60),
        "the Runner to report the turn's late outcome and see it refused",
        || {
            runner
                .log()
                .lines()
                .any(|l| l.contains(&turn) && l.contains("outcome not accepted"))
                .then_some(())
        },
    );
    assert_eq!(model.steps().len(), 1, "the turn was never replayed");
    let shown = env
        .run_with(&["session", "show", &id, "--json"], "", &envs)
        .json();
    assert_eq!(shown["turns"][0]["state"], "uncertain");
    // Checked later through its original session (read-only), never run again.
    let checked = wait_for(
        Duration::from_secs(20),
        "the uncertain turn checked",
        || {
            let v = env
                .run_with(&["session", "show", &id, "--json"], "", &envs)
                .json();
            v["turns"][0]["check"].is_object().then_some(v)
        },
    );
    assert_eq!(checked["turns"][0]["check"]["checked"], true, "{checked}");
    let cmds = env
        .run_with(&["runner", "commands", &reg.id, "--json"], "", &envs)
        .json();
    assert_eq!(
        cmds.as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "session.turn")
            .count(),
        1
    );
    drop(chat);
    drop(runner);
}

#[test]
fn a_profile_outside_allowed_profiles_is_refused_at_admission() {
    let Some(s) = setup(tool_script()) else {
        return;
    };
    s.env
        .run(&["profile", "create", "other", "--cwd", "/workspace"])
        .ok();
    s.env
        .run(&[
            "agent",
            "create",
            "stranger",
            "--profile",
            "other",
            "--env",
            "host",
        ])
        .ok();
    s.env
        .run(&["chat", "stranger", "hello"])
        .fails(4, "not among runner");
    assert_eq!(
        s.env.json(&["session", "list"]),
        json!([]),
        "nothing was admitted"
    );
    assert!(s.model.steps().is_empty());
    // A computer agent's turn never goes to the host Hermes: this Runner has no computer
    // image (or, without Docker, no Worker), so it is refused at admission.
    s.env
        .run(&[
            "agent",
            "create",
            "boxed",
            "--profile",
            "default",
            "--env",
            "computer",
        ])
        .ok();
    let out = s.env.run(&["chat", "boxed", "hello"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("computer image") || out.stderr.contains("computer-worker-v1"),
        "{out:?}"
    );
    assert!(
        s.model.steps().is_empty(),
        "the host Hermes was never asked"
    );
}

/// Starts a Hermes outside any Runner (as a desktop user would have it) and writes its
/// token to a 0600 file.
async fn shared_hermes(
    hermes: &Path,
    env: &Env,
    model_port: u16,
) -> (
    yy::hermes::HermesAccess,
    yy::hermes::Supervisor,
    PathBuf,
    String,
) {
    let home = env.path("shared-hermes");
    write_config(&home, model_port, &env.path("work"), "off", "");
    let (access, sup) =
        yy::hermes::Supervisor::start(vec![hermes.display().to_string(), "serve".into()], home)
            .await
            .unwrap();
    let token = match &access.auth {
        yy::hermes::HermesAuth::Token(t) => t.expose().to_string(),
        other => panic!("{other:?}"),
    };
    let file = env.path("hermes.token");
    std::fs::write(&file, &token).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = access.url.as_str().trim_end_matches('/').to_string();
    (access, sup, file, url)
}

#[tokio::test(flavor = "multi_thread")]
async fn another_channels_sessions_are_invisible_and_bad_hermes_access_fails_clearly() {
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    let env = Env::new();
    let server = env.bootstrap();
    let model = FakeModel::start(&env.path("model"), tool_script());
    let (access, _sup, token_file, url) = shared_hermes(&hermes, &env, model.port).await;

    // Two sources, two Runners, one Hermes.
    let a = env.register_runner(&server, "alpha", &["--hermes-url", &url]);
    let b = env.register_runner(&server, "beta", &["--hermes-url", &url]);
    for r in [&a, &b] {
        configure(r, json!({ "hermesTokenFile": token_file }));
    }
    env.run(&[
        "agent",
        "create",
        "bot",
        "--profile",
        "default",
        "--env",
        "host",
        "--source",
        "alpha",
    ])
    .ok();
    let _ra = env.start_online(&a, "a", 0);
    let _rb = env.start_online(&b, "b", 0);
    env.run(&["chat", "bot", "hello"]).ok();
    // A desktop user's own session in the same Hermes.
    let desktop = yy::hermes::HermesClient::connect(&access).await.unwrap();
    let own = desktop
        .create_session(env.path("work").to_str().unwrap(), None, Some("mine"))
        .await
        .unwrap();

    let seen_a = env.json(&["runner", "sessions", &a.id]);
    let seen_b = env.json(&["runner", "sessions", &b.id]);
    assert_eq!(seen_a.as_array().unwrap().len(), 1, "{seen_a}");
    assert_ne!(seen_a[0]["hermes_session_id"], own.session_id.as_str());
    assert_eq!(
        seen_b,
        json!([]),
        "beta sees neither alpha's nor the desktop's session"
    );

    // Revoking one session closes only that one.
    env.run(&["chat", "bot", "a second conversation"]).ok();
    let sessions = env.json(&["session", "list"]);
    let first = sessions.as_array().unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    env.run(&["session", "close", &first]).ok();
    let seen_a = wait_for(Duration::from_secs(10), "one session left on alpha", || {
        let v = env.json(&["runner", "sessions", &a.id]);
        (v.as_array().unwrap().len() == 1).then_some(v)
    });
    assert_ne!(seen_a[0]["session_id"], first.as_str());
    let live = desktop.active_list().await.unwrap();
    assert!(
        live.iter().any(|s| s.id == own.session_id),
        "the desktop's session is untouched"
    );
    env.run(&["chat", "bot", "more", "--session", &first])
        .fails(6, "closed");

    // A wrong token, and a Hermes of another version, stop a Runner with a clear message.
    let wrong = env.path("wrong.token");
    std::fs::write(&wrong, "not-the-token").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = env.register_runner(&server, "gamma", &["--hermes-url", &url]);
    configure(&c, json!({ "hermesTokenFile": wrong }));
    let out = env.run(&[
        "runner",
        "run",
        "--config",
        c.config.to_str().unwrap(),
        "--data-dir",
        env.path("rc").to_str().unwrap(),
        "--metrics-listen",
        "off",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("refused"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("not-the-token"),
        "the token never reaches the log"
    );

    let old = old_hermes();
    let d = env.register_runner(
        &server,
        "delta",
        &["--hermes-url", &format!("http://{old}")],
    );
    configure(&d, json!({ "hermesTokenFile": token_file }));
    let out = env.run(&[
        "runner",
        "run",
        "--config",
        d.config.to_str().unwrap(),
        "--data-dir",
        env.path("rd").to_str().unwrap(),
        "--metrics-listen",
        "off",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("0.18.0") && out.stderr.contains("0.19"),
        "{}",
        out.stderr
    );
}

/// A stand-in answering `/api/status` as hermes-agent 0.18.0 would; returns its address.
fn old_hermes() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming().flatten().take(20) {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = r#"{"version":"0.18.0","auth_required":false}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

#[test]
fn a_session_continued_on_another_runner_takes_its_recent_history_along() {
    let Some(s) = setup(json!([{"text": "The secret word is pelican."}])) else {
        return;
    };
    let hermes = common::require_hermes().unwrap();
    let out = s.env.run(&["chat", "bot", "remember the word pelican"]);
    out.ok();
    let session_id = session_of(&out);
    let first = s.env.json(&["session", "show", &session_id]);

    // The source gets a new Runner (and with it a new Hermes).
    let Setup {
        env,
        server,
        reg,
        runner,
        model,
    } = s;
    drop(runner);
    env.run(&["runner", "disable", &reg.id, "--yes"]).ok();
    let home = env.path("hermes-home-2");
    write_config(&home, model.port, &env.path("work"), "off", "");
    let next = env.register_runner(&server, "main", &["--force"]);
    configure(
        &next,
        json!({ "hermesCommand": [hermes.display().to_string(), "serve"], "hermesHome": home }),
    );
    let _runner = env.start_online(&next, "b", 0);

    env.run(&[
        "chat",
        "bot",
        "what was the word?",
        "--session",
        &session_id,
    ])
    .ok();
    let shown = env.json(&["session", "show", &session_id]);
    assert_eq!(shown["runner_id"], next.id.as_str());
    assert_ne!(
        shown["hermes_session_id"], first["hermes_session_id"],
        "a new Hermes session"
    );
    assert_eq!(shown["turns"][1]["state"], "complete");
    // The model saw the earlier exchange in the new session's context.
    let log = std::fs::read_to_string(&model.log).unwrap();
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("what was the word?"))
        .unwrap();
    assert!(
        last.contains("remember the word pelican"),
        "history missing: {last}"
    );
    assert!(
        last.contains("The secret word is pelican."),
        "history missing: {last}"
    );
}

#[test]
fn a_stop_that_cannot_be_confirmed_leaves_the_session_pending_cleanup() {
    let Some((s, chat, id)) = slow_turn_streaming("take your time") else {
        return;
    };
    // Freeze the Runner's Hermes: the connection stays up, nothing answers.
    let pids = std::process::Command::new("pgrep")
        .args(["-P", &s.runner.child.id().to_string()])
        .output()
        .unwrap();
    let hermes: Vec<i32> = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(
        !hermes.is_empty(),
        "the supervised Hermes is a child of the Runner"
    );
    for pid in &hermes {
        unsafe { libc::kill(*pid, libc::SIGSTOP) };
    }
    let out = s.env.run(&["session", "stop", &id]);
    for pid in &hermes {
        unsafe { libc::kill(*pid, libc::SIGCONT) };
    }
    out.fails(1, "pending cleanup");
    let shown = s.env.json(&["session", "show", &id]);
    assert_eq!(shown["state"], "pending_cleanup");
    assert!(
        shown["cleanup_reason"]
            .as_str()
            .unwrap()
            .contains("could not be confirmed")
    );
    // Never reused.
    s.env
        .run(&["chat", "bot", "again", "--session", &id])
        .fails(6, "pending cleanup");
    drop(chat);
}

#[test]
fn a_turn_that_hermes_ends_with_an_error_keeps_its_own_words() {
    // 400 is not retried: the model's refusal ends the turn, and its text must reach the
    // user, not only "Hermes ended the turn with an error".
    let Some(s) = setup(json!([
        {"error": 400, "message": "yy-test: the provider refused this key"}
    ])) else {
        return;
    };
    let out = s.env.run(&["chat", "bot", "hello"]);
    assert_ne!(out.code, 0, "{out:#?}");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("the provider refused this key"), "{out:#?}");
    let session = common::session_of(&out);
    let shown = s.env.run(&["session", "show", &session]);
    assert!(
        shown.stdout.contains("the provider refused this key"),
        "{shown:#?}"
    );
}

/// `yy chat` to a busy agent from the test's own process: its stderr lines on a channel.
fn queued_chat(s: &Setup, message: &str) -> (Bg, std::sync::mpsc::Receiver<String>) {
    let mut chat = chat_in_background(s, message);
    let stderr = chat.0.as_mut().unwrap().stderr.take().unwrap();
    (chat, common::lines_of(stderr))
}

#[test]
fn chats_to_a_busy_agent_queue_and_complete_in_order() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            {"match": "the first message", "steps": [{"text": "first answer comes slowly", "delay_ms": 1000}]},
            {"match": "the second message", "steps": [{"text": "second answer"}]}
        ]
    })) else {
        return;
    };
    let first = chat_in_background(&s, "the first message");
    wait_streaming(&s.model);

    // The second is queued, and says so within a second: how many are ahead and why.
    let asked = Instant::now();
    let (second, lines) = queued_chat(&s, "the second message");
    let mut seen = Vec::new();
    common::wait_line(&lines, "queued: 1 ahead of this turn", &mut seen);
    let said_after = asked.elapsed();
    eprintln!("the queued chat said so after {said_after:?}");
    assert!(said_after < Duration::from_secs(1), "{said_after:?}");
    let line = seen.last().unwrap();
    assert!(line.contains("\"bot\" is already in a turn"), "{line}");
    assert!(line.contains("Ctrl-C cancels it"), "{line}");

    // The API answers 202 with the waiting turn and its position.
    let token = s.env.stored_token();
    let auth = format!("Bearer {token}");
    let (status, body) = common::http(
        &s.server.addr(),
        "POST",
        "/api/v1/chat",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        r#"{"agent":"bot","message":"the third message"}"#,
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let third: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(third["turn"]["state"], "waiting", "{third}");
    assert_eq!(third["queued"]["position"], 3, "{third}");
    assert_eq!(third["queued"]["ahead"], 2, "{third}");
    let (sid, tid) = (
        third["session"]["id"].as_str().unwrap(),
        third["turn"]["id"].as_str().unwrap(),
    );
    // Cancelled through the API: it never runs.
    let (status, body) = common::http(
        &s.server.addr(),
        "POST",
        &format!("/api/v1/sessions/{sid}/turns/{tid}/cancel"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        "{}",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");

    // Ctrl-C in a queued `yy chat` cancels its turn on the server.
    let (mut fourth, lines) = queued_chat(&s, "the fourth message");
    let mut seen = Vec::new();
    common::wait_line(&lines, "queued: 2 ahead of this turn", &mut seen);
    // Then it says the wait again from its first look at the turn's events, which runs
    // beside its Ctrl-C handler: from then on Ctrl-C cancels instead of killing it.
    common::wait_line(&lines, "Ctrl-C cancels the turn", &mut seen);
    let pid = fourth.0.as_ref().unwrap().id() as i32;
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = fourth.0.as_mut().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(3), "exit 3: cancelled");
    let fourth_session = seen[0].trim_start_matches("session ").to_string();
    let shown = s.env.json(&["session", "show", &fourth_session]);
    assert_eq!(shown["turns"][0]["state"], "interrupted", "{shown}");
    assert!(
        shown["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("cancelled before it started"),
        "{shown}"
    );

    // Both complete, in order.
    let out = first.output();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("first answer comes slowly"));
    let out = second.output();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("second answer"));
    let asked: Vec<String> = s
        .model
        .steps()
        .iter()
        .map(|r| r["body"].to_string())
        .collect();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert!(asked[0].contains("the first message"), "{}", asked[0]);
    assert!(asked[1].contains("the second message"), "{}", asked[1]);
    let log = std::fs::read_to_string(&s.model.log).unwrap();
    assert!(
        !log.contains("the third message"),
        "a cancelled turn never ran"
    );
    assert!(
        !log.contains("the fourth message"),
        "a cancelled turn never ran"
    );
}

#[test]
fn disabling_an_account_stops_its_running_turn_and_refuses_its_queued_one() {
    let Some(s) = setup(json!({
        "steps": [],
        "by_prompt": [
            {"match": "alice starts", "steps": [{"text": "one two three four five six seven eight", "delay_ms": 1500}]},
            {"match": "archive me", "steps": [{"text": "one two three four five six seven eight", "delay_ms": 1500}]}
        ]
    })) else {
        return;
    };
    s.env
        .run_with(
            // An admin: only admins create agents; its agent is its own all the same.
            &["account", "create", "alice", "--admin", "--password-stdin"],
            common::PASSWORD,
            &[],
        )
        .ok();
    let alice = Env::new();
    alice.login(&s.server, "alice");
    alice
        .run(&[
            "agent",
            "create",
            "helper",
            "--profile",
            "default",
            "--env",
            "host",
            "--source",
            "main",
        ])
        .ok();
    let helper = alice.json(&["agent", "list"]);
    let helper = helper.as_array().unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let running = alice.background(&s.server, &["chat", "helper", "alice starts"]);
    wait_streaming(&s.model);
    let mut queued = alice.background(&s.server, &["chat", "helper", "alice waits"]);
    let lines = common::lines_of(queued.0.as_mut().unwrap().stderr.take().unwrap());
    let mut seen = Vec::new();
    common::wait_line(&lines, "queued: 1 ahead", &mut seen);
    let queued_session = seen[0].trim_start_matches("session ").to_string();

    s.env.run(&["account", "disable", "alice"]).ok();
    // Its running turn is stopped, and the stop confirmed by the Runner.
    let sessions = s.env.json(&["session", "list"]);
    let running_session = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["owner"] == "alice" && x["id"] != queued_session.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = wait_for(Duration::from_secs(30), "alice's turn stopped", || {
        let v = s.env.json(&["session", "show", &running_session]);
        (v["turns"][0]["state"] == "interrupted" && v["stopping"] == false).then_some(v)
    });
    assert_eq!(shown["state"], "idle", "{shown}");
    let cmds = s.env.json(&["runner", "commands", &s.reg.id]);
    let stop = cmds
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "session.stop")
        .expect("a stop was sent");
    assert_eq!(stop["state"], "done", "confirmed");
    // Its queued turn was refused, and never reached the model.
    let shown = s.env.json(&["session", "show", &queued_session]);
    assert_eq!(shown["turns"][0]["state"], "error", "{shown}");
    assert!(
        shown["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("disabled"),
        "{shown}"
    );
    // A turn reaches the model only as a command to its Runner, and the refused turn
    // (final) never became one: the one turn command is the stopped turn's.
    let cmds = s.env.json(&["runner", "commands", &s.reg.id]);
    let turns = cmds
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "session.turn")
        .count();
    assert_eq!(turns, 1, "{cmds:#}");
    let log = std::fs::read_to_string(&s.model.log).unwrap();
    assert!(
        !log.contains("alice waits"),
        "the queued turn never reached the model"
    );
    assert_eq!(s.model.steps().len(), 1);
    drop(running);
    drop(queued);
    // A turn for the disabled account's agent is refused at admission, even an admin's.
    s.env
        .run(&["chat", &helper, "from an admin"])
        .fails(4, "account \"alice\" is disabled");

    // Archiving an agent stops its running host turn (confirmed).
    let chat = chat_in_background(&s, "archive me please");
    wait_for(Duration::from_secs(30), "the second model request", || {
        (s.model.steps().len() == 2).then_some(())
    });
    s.env.run(&["agent", "archive", "bot"]).ok();
    let out = chat.output();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interrupted"),
        "{out:?}"
    );
    // The turn ends interrupted first; the stop's confirmation follows.
    wait_for(Duration::from_secs(30), "both stops confirmed", || {
        let cmds = s.env.json(&["runner", "commands", &s.reg.id]);
        let stops: Vec<Value> = cmds
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "session.stop")
            .cloned()
            .collect();
        (stops.len() == 2 && stops.iter().all(|c| c["state"] == "done")).then_some(())
    });
}

/// Issue 25 item 1: a host agent's command shows its output while it runs (the Runner's
/// tool tap, docs/hermes.md), and the tap changes nothing of the command's result.
#[test]
fn a_host_commands_output_streams_live_and_its_result_is_unchanged() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "echo first-line; sleep 5; echo second-line"}}},
        {"tool_call": {"name": "terminal", "arguments": {"command": "echo to-out; echo to-err >&2; echo \"tap-var:${YY_TOOL_OUTPUT_SOCKET-unset}\"; exit 7"}}},
        {"text": "Both commands ran"}
    ])) else {
        return;
    };
    let mut chat = s
        .env
        .background(&s.server, &["chat", "bot", "run the slow one", "--json"]);
    let lines = common::lines_of(chat.0.as_mut().unwrap().stdout.take().unwrap());
    let t0 = Instant::now();
    let mut events: Vec<(Duration, Value)> = Vec::new();
    while events.last().is_none_or(|(_, e)| e["type"] != "turn.end") {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no turn.end; events so far: {events:#?}"));
        events.push((t0.elapsed(), serde_json::from_str(&line).unwrap()));
    }
    let out = chat.output();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(events.last().unwrap().1["turn"]["state"], "complete");
    let of = |kind: &str| -> Vec<&(Duration, Value)> {
        events.iter().filter(|(_, e)| e["type"] == kind).collect()
    };
    let starts = of("tool.start");
    let completes = of("tool.complete");
    assert_eq!((starts.len(), completes.len()), (2, 2), "{events:#?}");
    let id = |e: &Value| e["payload"]["tool_id"].as_str().unwrap().to_string();
    let (slow, failing) = (id(&starts[0].1), id(&starts[1].1));
    let live = |tool: &str| -> Vec<&(Duration, Value)> {
        of("tool.output")
            .into_iter()
            .filter(|(_, e)| e["payload"]["tool_id"] == tool)
            .collect()
    };
    let live_text = |tool: &str| -> String {
        live(tool)
            .iter()
            .map(|(_, e)| e["payload"]["text"].as_str().unwrap().to_string())
            .collect()
    };

    // The first line shows while the command still sleeps, well before it completes.
    let first = live(&slow)
        .into_iter()
        .find(|(_, e)| {
            e["payload"]["text"]
                .as_str()
                .unwrap()
                .contains("first-line")
        })
        .unwrap_or_else(|| panic!("no live first-line: {events:#?}"));
    let done = completes.iter().find(|(_, e)| id(e) == slow).unwrap();
    let ahead = done.0 - first.0;
    eprintln!("first-line came {ahead:?} before the tool completed");
    assert!(ahead >= Duration::from_secs(3), "{ahead:?}: {events:#?}");
    assert_eq!(first.1["payload"]["name"], "terminal");
    assert_eq!(first.1["payload"]["stream"], "stdout");
    let text = live_text(&slow);
    assert!(
        text.contains("first-line\n") && text.contains("second-line"),
        "{text:?}"
    );
    assert!(
        !text.contains("HERMES_CWD"),
        "Hermes's marker is cut: {text:?}"
    );
    // Every live piece of a tool comes between its start and its completion.
    for (tool, start) in [(&slow, starts[0]), (&failing, starts[1])] {
        let end = completes.iter().find(|(_, e)| &id(e) == tool).unwrap();
        let seqs = |e: &Value| e["seq"].as_i64().unwrap();
        for (_, e) in live(tool) {
            assert!(seqs(e) > seqs(&start.1) && seqs(e) < seqs(&end.1), "{e}");
        }
    }

    // The results are Hermes's own, as without the tap: output and exit codes.
    let result = |tool: &str| -> Value {
        let r = &completes.iter().find(|(_, e)| id(e) == tool).unwrap().1["payload"]["result"];
        match r {
            Value::String(s) => serde_json::from_str(s).unwrap_or(r.clone()),
            other => other.clone(),
        }
    };
    let slow_result = result(&slow);
    assert_eq!(
        slow_result["output"], "first-line\nsecond-line",
        "{slow_result}"
    );
    assert_eq!(slow_result["exit_code"], 0, "{slow_result}");
    let failing_result = result(&failing);
    assert_eq!(failing_result["exit_code"], 7, "{failing_result}");
    // (The command does not see the tap's socket: a shell it starts is not tapped.)
    assert_eq!(
        failing_result["output"], "to-out\nto-err\ntap-var:unset",
        "{failing_result}"
    );
    let text = live_text(&failing);
    assert!(text.contains("to-out\nto-err"), "{text:?}");

    // The control plane stored the live output with the turn's other events.
    let session = events[0].1["session"]["id"].as_str().unwrap();
    let token = s.env.stored_token();
    let (status, body) = common::http(
        &s.server.addr(),
        "GET",
        &format!("/api/v1/sessions/{session}/events?after=0"),
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    let stored = page["events"].as_array().unwrap();
    let at = |e: &Value| humantime::parse_rfc3339(e["at"].as_str().unwrap()).unwrap();
    let first_stored = stored
        .iter()
        .find(|e| {
            e["type"] == "tool.output"
                && e["payload"]["text"]
                    .as_str()
                    .unwrap()
                    .contains("first-line")
        })
        .unwrap_or_else(|| panic!("not stored: {page:#}"));
    let done_stored = stored
        .iter()
        .find(|e| e["type"] == "tool.complete" && e["payload"]["tool_id"] == slow.as_str())
        .unwrap();
    let gap = at(done_stored).duration_since(at(first_stored)).unwrap();
    assert!(gap >= Duration::from_secs(3), "{gap:?}");
}
