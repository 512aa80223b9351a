//! yy's Hermes client against the real `hermes serve` (hermes-agent 0.19.0, pinned by
//! scripts/install-hermes.sh), offline: a private HERMES_HOME per test, the scripted fake
//! model server from tests/fixtures, and the offline settings of docs/hermes.md.

mod common;

use common::hermes::{FakeModel, write_config};

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use yy::hermes::{
    ApprovalChoice, CompleteStatus, HermesAccess, HermesAuth, HermesClient, HermesCredentials,
    HermesError, HermesRest, Secret, StopConfirmation, Supervisor, SupervisorOptions, TurnEvent,
    TurnStream,
};

/// Collects a turn's events up to and including `Complete`.
async fn rest_of_turn(stream: &mut TurnStream, mut events: Vec<TurnEvent>) -> Vec<TurnEvent> {
    let collect = async {
        while let Some(ev) = stream.next().await {
            let done = ev.is_complete();
            events.push(ev);
            if done {
                break;
            }
        }
        events
    };
    tokio::time::timeout(Duration::from_secs(90), collect)
        .await
        .expect("the turn ended in time")
}

fn position(events: &[TurnEvent], what: &str, f: impl Fn(&TurnEvent) -> bool) -> usize {
    events
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no {what} in {events:#?}"))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// One supervised Hermes for the turn, stop, allowlist, REST and token scenarios.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervised_hermes_turns_stops_and_allowlist() {
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    let fake = FakeModel::start(
        dir.path(),
        json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo hi"}}},
            {"text": "The command printed hi."},
            {"text": "Seeded answer."},
            {"tool_call": {"name": "terminal", "arguments": {"command": "rm -r ./scratch"}}},
            {"text": "Scratch is gone."},
            {"text": "one two three four five six seven eight nine ten", "delay_ms": 700},
            {"text": "never finished", "delay_ms": 3000},
        ]),
    );
    write_config(&home, fake.port, &work, "manual", "");
    std::fs::create_dir_all(work.join("scratch")).unwrap();

    // Supervised start: the token travels only in the child's environment.
    let options = SupervisorOptions {
        cwd: Some(work.clone()),
        ..SupervisorOptions::default()
    };
    let command = vec![hermes.display().to_string(), "serve".to_string()];
    let (access, sup) = Supervisor::start_with(command, home.clone(), options)
        .await
        .expect("hermes serve starts");
    let HermesAuth::Token(token) = &access.auth else {
        panic!("supervised access uses the session token");
    };
    let token = token.expose().to_string();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", sup.pid())).unwrap();
    assert!(contains(&cmdline, "serve") && contains(&cmdline, "127.0.0.1"));
    assert!(!contains(&cmdline, &token), "the token is in argv");
    let environ = std::fs::read(format!("/proc/{}/environ", sup.pid())).unwrap();
    assert!(contains(
        &environ,
        &format!("HERMES_DASHBOARD_SESSION_TOKEN={token}")
    ));
    assert!(!format!("{access:?} {sup:?}").contains(&token));

    // hermesTokenFile: the same token, read from a private file.
    let token_file = dir.path().join("hermes.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = access.shown_url();
    let from_file = HermesAccess::new(&url, HermesAuth::TokenFile(token_file), false).unwrap();
    let client = HermesClient::connect(&from_file).await.expect("connects");
    assert_eq!(client.status().version, "0.19.0");

    // The allowlist: refused locally, nothing written to the socket, never Hermes's -32601.
    let before = client.requests_sent();
    for method in ["nope.nope", "shell.exec", "config.set", "session.resume"] {
        let started = std::time::Instant::now();
        let err = client
            .call(method, json!({"command": "touch /tmp/yy-must-not-exist"}))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, HermesError::MethodNotAllowed(m) if m == method),
            "{err:?}"
        );
        assert!(err.rpc_code().is_none(), "Hermes answered: {err:?}");
        assert!(started.elapsed() < Duration::from_millis(50));
    }
    assert_eq!(client.requests_sent(), before, "a refused method was sent");
    assert!(client.active_list().await.unwrap().is_empty());
    assert_eq!(client.requests_sent(), before + 1);

    // A full turn with a terminal tool call.
    let session = client
        .create_session(work.to_str().unwrap(), None, Some("yy tool turn"))
        .await
        .unwrap();
    assert_eq!(session.desktop_contract, 4);
    let mut turn = client
        .submit(&session.session_id, "Run echo hi")
        .await
        .unwrap();
    assert!(matches!(
        client.submit(&session.session_id, "again").await,
        Err(HermesError::TurnInProgress(_))
    ));
    let events = rest_of_turn(&mut turn, Vec::new()).await;
    assert_eq!(events[0], TurnEvent::Started, "{events:#?}");
    let start = position(
        &events,
        "tool start",
        |e| matches!(e, TurnEvent::ToolStart { tool_id, name } if tool_id == "call_fake_1" && name == "terminal"),
    );
    let done = position(&events, "tool complete", |e| {
        matches!(e, TurnEvent::ToolComplete { tool_id, name, args, result }
            if tool_id == "call_fake_1" && name == "terminal"
            && args["command"] == "echo hi" && result["output"] == "hi")
    });
    let delta = position(&events, "text delta", |e| {
        matches!(e, TurnEvent::TextDelta(_))
    });
    assert!(start < done && done < delta, "{events:#?}");
    match events.last().unwrap() {
        TurnEvent::Complete {
            text,
            status,
            usage,
        } => {
            assert_eq!(text, "The command printed hi.");
            assert_eq!(*status, CompleteStatus::Complete);
            assert!(usage.calls >= 2, "{usage:?}");
        }
        other => panic!("the turn did not end with Complete: {other:?}"),
    }
    let after = tokio::time::timeout(Duration::from_secs(2), turn.next()).await;
    assert!(matches!(after, Ok(None)), "the stream ends after Complete");

    // Read-only REST, and only the allowed paths.
    let rest = client.rest();
    let messages = rest
        .session_messages(&session.stored_session_id)
        .await
        .unwrap();
    assert!(messages.to_string().contains("echo hi"), "{messages}");
    assert!(rest.sessions().await.unwrap()["sessions"].is_array());
    rest.profiles().await.unwrap();
    assert!(matches!(
        rest.get("/api/config").await,
        Err(HermesError::PathNotAllowed(_))
    ));

    // A session seeded with earlier history (a session continued from elsewhere).
    let history = [
        ("user".to_string(), "My name is Ada.".to_string()),
        ("assistant".to_string(), "Hello Ada.".to_string()),
    ];
    let seeded = client
        .create_session_seeded(work.to_str().unwrap(), None, None, &history)
        .await
        .unwrap();
    let mut turn = client
        .submit(&seeded.session_id, "What is my name?")
        .await
        .unwrap();
    let events = rest_of_turn(&mut turn, Vec::new()).await;
    assert!(
        matches!(events.last(), Some(TurnEvent::Complete { text, .. }) if text == "Seeded answer.")
    );
    let sent = fake.steps()[2]["body"]["messages"].to_string();
    assert!(sent.contains("My name is Ada.") && sent.contains("Hello Ada."));

    // An approval (approvals.mode manual): answered once, then the command runs.
    let approval = client
        .create_session(work.to_str().unwrap(), None, None)
        .await
        .unwrap();
    let mut turn = client
        .submit(&approval.session_id, "Delete scratch")
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(60), turn.next())
        .await
        .unwrap()
    {
        let asked = matches!(&ev, TurnEvent::Approval(a) if a.command == "rm -r ./scratch");
        assert!(!ev.is_complete(), "no approval asked: {events:#?} {ev:?}");
        events.push(ev);
        if asked {
            break;
        }
    }
    client
        .approval_respond(&approval.session_id, ApprovalChoice::Once)
        .await
        .unwrap();
    let events = rest_of_turn(&mut turn, events).await;
    assert!(matches!(
        events.last(),
        Some(TurnEvent::Complete {
            status: CompleteStatus::Complete,
            ..
        })
    ));
    assert!(!work.join("scratch").exists());

    // Interrupt and a confirmed stop: idle while open, gone after close.
    let slow = client
        .create_session(work.to_str().unwrap(), None, None)
        .await
        .unwrap();
    let mut turn = client
        .submit(&slow.session_id, "Count slowly")
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(60), turn.next())
            .await
            .unwrap()
            .expect("the slow turn streams");
        let first_text = matches!(ev, TurnEvent::TextDelta(_));
        events.push(ev);
        if first_text {
            break;
        }
    }
    let working = client.active_list().await.unwrap();
    assert!(
        working
            .iter()
            .any(|s| s.id == slow.session_id && s.status == "working")
    );
    let stopped = client
        .confirm_stopped(&slow.session_id, Duration::from_secs(15))
        .await;
    assert_eq!(stopped.unwrap(), StopConfirmation::Idle);
    let events = rest_of_turn(&mut turn, events).await;
    assert!(
        matches!(
            events.last(),
            Some(TurnEvent::Complete {
                status: CompleteStatus::Interrupted,
                ..
            })
        ),
        "{events:#?}"
    );
    assert!(client.close(&slow.session_id).await.unwrap());
    assert!(!client.close(&slow.session_id).await.unwrap());
    let gone = client
        .confirm_stopped(&slow.session_id, Duration::from_secs(5))
        .await;
    assert_eq!(gone.unwrap(), StopConfirmation::Gone);
    assert!(matches!(
        client.interrupt(&slow.session_id).await,
        Err(HermesError::SessionNotFound(_))
    ));

    // A wrong token: 403 on the WebSocket upgrade, 401 on REST; the message names it.
    let wrong =
        HermesAccess::new(&url, HermesAuth::Token(Secret::new("wrong-token")), false).unwrap();
    let err = HermesClient::connect(&wrong).await.unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, HermesError::Unauthorized { .. }) && shown.contains("HTTP 403"),
        "{shown}"
    );
    assert!(
        shown.contains("session token")
            && !shown.contains("wrong-token")
            && !shown.contains(&token)
    );
    let err = HermesRest::new(&wrong)
        .unwrap()
        .sessions()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("session token (HTTP 401)"),
        "{err}"
    );

    // Stopping the supervisor ends Hermes and the connection; a turn in flight then ends
    // without a `Complete` (its outcome is unknown).
    let last = client
        .create_session(work.to_str().unwrap(), None, None)
        .await
        .unwrap();
    let mut in_flight = client
        .submit(&last.session_id, "Take your time")
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(60), in_flight.next()).await;
    assert_eq!(first.unwrap(), Some(TurnEvent::Started));
    let pid = sup.pid();
    let stopping = std::time::Instant::now();
    let exited = sup.stop(Duration::from_secs(10)).await;
    assert!(exited.is_some());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "SIGTERM was enough"
    );
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    tokio::time::timeout(Duration::from_secs(5), client.disconnected())
        .await
        .expect("the client notices that Hermes is gone");
    assert!(!client.is_connected());
    let lost = tokio::time::timeout(Duration::from_secs(5), in_flight.next()).await;
    assert_eq!(lost.unwrap(), None, "no Complete for a turn cut off");
    assert!(matches!(
        client.active_list().await,
        Err(HermesError::Disconnected { .. })
    ));
    let refused = Supervisor::start(
        vec![
            hermes.display().to_string(),
            "serve".into(),
            "--port=9".into(),
        ],
        dir.path().join("other"),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("--host or --port"));
}

/// A Hermes on a non-loopback address (127.0.0.2: Hermes gates every address but
/// 127.0.0.1, ::1 and localhost) with `dashboard.basic_auth`: password login, then a
/// single-use WebSocket ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_on_a_non_loopback_bind() {
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    let basic =
        "dashboard:\n  basic_auth:\n    username: yy-runner\n    password: \"pw-for-tests\"\n";
    write_config(&home, 9, &work, "off", basic);
    std::fs::write(
        home.join(".update_check"),
        r#"{"ts": 4102444800, "behind": 0, "rev": null, "ver": "0.19.0"}"#,
    )
    .unwrap();
    let mut child = Command::new(&hermes)
        .args(["serve", "--host", "127.0.0.2", "--port", "0"])
        .env("HERMES_HOME", &home)
        .env("HERMES_DISABLE_LAZY_INSTALLS", "1")
        .current_dir(&work)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("serve.stderr")).unwrap())
        .spawn()
        .unwrap();
    /// SIGTERM (Hermes then ends its workers), SIGKILL if that is not enough.
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            unsafe {
                libc::kill(self.0.id() as i32, libc::SIGTERM);
            }
            let ended = common::poll(Duration::from_secs(5), || self.0.try_wait().ok().flatten());
            if ended.is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _guard = Kill(child);
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let port = lines
        .find_map(|l| {
            l.strip_prefix("HERMES_BACKEND_READY port=")
                .map(|p| p.trim().to_string())
        })
        .unwrap_or_else(|| {
            panic!(
                "hermes serve failed: {}",
                std::fs::read_to_string(dir.path().join("serve.stderr")).unwrap()
            )
        });
    // Keep reading: Hermes prints more, and a closed pipe would break it.
    std::thread::spawn(move || lines.for_each(drop));
    let url = format!("http://127.0.0.2:{port}");
    let creds = |password: &str| {
        HermesAuth::Credentials(HermesCredentials {
            username: "yy-runner".into(),
            password: Secret::new(password),
        })
    };
    let err = HermesAccess::new(&url, creds("pw-for-tests"), false).unwrap_err();
    assert!(err.to_string().contains("allowInsecureLan"), "{err}");
    let access = HermesAccess::new(&url, creds("pw-for-tests"), true).unwrap();
    common::wait_for(Duration::from_secs(30), "hermes status", || {
        common::http(&format!("127.0.0.2:{port}"), "GET", "/api/status", &[], "")
            .ok()
            .filter(|(s, _)| *s == 200)
    });

    let client = HermesClient::connect(&access).await.expect("logs in");
    assert!(client.status().auth_required);
    let session = client
        .create_session(work.to_str().unwrap(), None, None)
        .await
        .unwrap();
    assert_eq!(session.desktop_contract, 4);
    assert!(client.rest().sessions().await.unwrap()["sessions"].is_array());
    assert!(client.close(&session.session_id).await.unwrap());
    // Tickets are single-use: a second connection logs in for a fresh one.
    let second = HermesClient::connect(&access)
        .await
        .expect("a fresh ticket");
    assert!(second.active_list().await.unwrap().is_empty());

    let wrong = HermesAccess::new(&url, creds("not-the-password"), true).unwrap();
    let err = HermesClient::connect(&wrong).await.unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("login (HTTP 401)"), "{shown}");
    assert!(!shown.contains("not-the-password"));
    // The session token does not open a gated Hermes.
    let err = HermesAccess::new(&url, HermesAuth::Token(Secret::new("x")), true).unwrap_err();
    assert!(err.to_string().contains("hermesCredentials"));
}

/// Any Hermes but 0.19.x is refused at connect, before the WebSocket is tried.
#[tokio::test]
async fn an_unsupported_version_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            record
                .lock()
                .unwrap()
                .push(head.lines().next().unwrap_or("").to_string());
            let body = r#"{"version":"0.18.0","auth_required":false}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let access = HermesAccess::new(
        &format!("http://{addr}"),
        HermesAuth::Token(Secret::new("t")),
        false,
    )
    .unwrap();
    let err = HermesClient::connect(&access).await.unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, HermesError::UnsupportedVersion { .. }),
        "{shown}"
    );
    assert!(
        shown.contains("hermes-agent 0.18.0") && shown.contains("supports hermes-agent 0.19.x"),
        "{shown}"
    );
    assert_eq!(*seen.lock().unwrap(), ["GET /api/status HTTP/1.1"]);
}
