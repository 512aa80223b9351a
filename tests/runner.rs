//! The Runner and the machine protocol, end to end: real `yy serve`, real `yy runner run`
//! processes, real SQLite files, loopback HTTP.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{Bg, Env, Registered, RunnerProc, STATUS, Server, machine, wait_for};
use serde_json::json;

const NEW_INSTANCE: &str = "00000000-0000-4000-8000-000000000001";

/// A control plane with `root` logged in, and Runner `main` running and online.
struct Setup {
    env: Env,
    server: Server,
    reg: Registered,
    runner: RunnerProc,
    /// The Runner's connection generation.
    generation: i64,
}

fn setup() -> Setup {
    setup_in(Env::new(), &[])
}

/// `setup` in a prepared sandbox, registering the Runner with `extra` flags.
fn setup_in(env: Env, extra: &[&str]) -> Setup {
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", extra);
    let (runner, generation) = env.start_online(&reg, "a", 0);
    Setup {
        env,
        server,
        reg,
        runner,
        generation,
    }
}

/// Starts `yy runner ping R --hold H --json` in the background; returns the child.
fn ping_in_background(env: &Env, server: &Server, runner: &str, hold: &str) -> Bg {
    env.background(
        server,
        &["runner", "ping", runner, "--hold", hold, "--json"],
    )
}

/// True once every command of `runner` has ended: nothing is left in flight that could
/// still report an outcome.
fn all_final(env: &Env, runner: &str) -> bool {
    env.json(&["runner", "commands", runner, "--limit", "1000"])
        .as_array()
        .unwrap()
        .iter()
        .all(|c| {
            matches!(
                c["state"].as_str(),
                Some("done" | "failed" | "cancelled" | "expired" | "uncertain")
            )
        })
}

/// The newest command of a Runner.
fn newest(env: &Env, runner: &str) -> serde_json::Value {
    wait_for(Duration::from_secs(10), "a command", || {
        env.json(&["runner", "commands", runner])
            .as_array()
            .unwrap()
            .first()
            .cloned()
    })
}

#[test]
fn pings_round_trip_and_status_is_visible() {
    let Setup {
        env,
        reg,
        generation,
        ..
    } = &setup();
    assert_eq!(*generation, 1);
    let out = env.json(&["runner", "ping", &reg.id[..8], "--count", "3"]);
    assert_eq!(out["summary"]["answered"], 3);
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(shown["version"], env!("CARGO_PKG_VERSION"));
    let caps = shown["capabilities"].as_array().unwrap();
    assert_eq!(caps[..3], [json!("ping"), json!("fetch"), json!("cancel")]);
    // Without Hermes access configured it carries no session turns.
    assert!(
        !caps
            .iter()
            .any(|c| c.as_str().unwrap().starts_with("session-"))
    );
    assert!(shown["hostname"].as_str().is_some());
    assert!(shown["instance_id"].is_string());
    let cmds = env.json(&["runner", "commands", &reg.id]);
    assert_eq!(cmds.as_array().unwrap().len(), 3);
    assert!(
        cmds.as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "done")
    );
}

#[test]
fn the_runner_starts_and_completes_commands_in_batches() {
    let Setup {
        env, reg, server, ..
    } = &setup();
    let out = env.json(&["runner", "ping", &reg.id, "--count", "20"]);
    assert_eq!(out["summary"]["answered"], 20);
    let requests = |route: &str| {
        env.metric(
            server,
            &format!(r#"yy_http_requests_total{{route="{route}",code="200"}}"#),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(requests("/runner/v1/commands/{id}/start"), 0.0);
    assert_eq!(requests("/runner/v1/commands/{id}/complete"), 0.0);
    let (starts, completes) = (
        requests("/runner/v1/commands/start"),
        requests("/runner/v1/commands/complete"),
    );
    assert!((1.0..=20.0).contains(&starts), "{starts} batched starts");
    assert!(
        (1.0..=20.0).contains(&completes),
        "{completes} batched completes"
    );
}

/// Pings queued for Runner `runner` (not running), through the admin API; their ids.
fn queue_pings(env: &Env, server: &Server, runner: &str, n: usize) -> Vec<String> {
    let auth = format!("Bearer {}", env.stored_token());
    (0..n)
        .map(|_| {
            let (status, body) = common::http(
                &server.addr(),
                "POST",
                &format!("/api/v1/runners/{runner}/ping"),
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                "{}",
            )
            .unwrap();
            assert!(status < 300, "{status} {body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn a_waiting_lease_answers_its_headers_at_once_and_its_commands_when_work_arrives() {
    use std::io::{BufRead, BufReader, Read};
    let env = Env::new();
    let server = env.bootstrap();
    let a = env.register_runner(&server, "alpha", &[]);
    let g = common::connect_runner(&server, &a.token, NEW_INSTANCE);
    // By hand, to see when the headers arrive and when the body does.
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    common::send_lease(
        &mut stream,
        &server,
        (&a.token, NEW_INSTANCE, g),
        20_000,
        true,
    );
    let sent = Instant::now();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 200"), "{status_line}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "the headers came at once, not after the wait"
    );
    // Work for the waiting lease: it ends the wait and is the body.
    let ids = queue_pings(&env, &server, &a.id, 1);
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "the body came with the work"
    );
    let json_start = rest.find("{\"commands\"").expect("a lease answer");
    let json_end = rest.rfind('}').unwrap();
    let leased: serde_json::Value = serde_json::from_str(&rest[json_start..=json_end]).unwrap();
    let commands = leased["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{leased}");
    assert_eq!(commands[0]["id"], ids[0].as_str());
}

#[test]
fn a_batch_answers_each_command_as_its_own_request_would() {
    let env = Env::new();
    let server = env.bootstrap();
    let a = env.register_runner(&server, "alpha", &[]);
    let ids = queue_pings(&env, &server, &a.id, 3);
    let (status, conn) = machine(
        &server,
        "/runner/v1/connect",
        &a.token,
        NEW_INSTANCE,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 200, "{conn}");
    assert_eq!(conn["features"], json!(["command-batches-v1"]));
    let g = conn["generation"].as_i64().unwrap();
    let call = |path: &str, body: serde_json::Value| {
        machine(
            &server,
            path,
            &a.token,
            NEW_INSTANCE,
            Some(g),
            &[],
            &body.to_string(),
        )
    };
    let (status, leased) = call("/runner/v1/lease", json!({"max": 10, "wait_ms": 200}));
    assert_eq!(status, 200);
    assert_eq!(leased["commands"].as_array().unwrap().len(), 3, "{leased}");
    // The second is cancelled while leased: its start is refused as it would be alone.
    env.json(&["runner", "cancel", &ids[1]]);
    let (status, started) = call(
        "/runner/v1/commands/start",
        json!({"ids": [ids[0], ids[1], ids[2], "no-such-command"]}),
    );
    assert_eq!(status, 200, "{started}");
    let results = started["results"].as_array().unwrap();
    let ids_back: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids_back, [&ids[0], &ids[1], &ids[2], "no-such-command"]);
    assert!(results[0]["deadline_ms"].is_i64() && results[0]["refused"].is_null());
    assert_eq!(results[1]["refused"]["status"], 410, "{started}");
    assert_eq!(results[1]["refused"]["code"], "cancelled", "{started}");
    assert!(results[2]["deadline_ms"].is_i64(), "{started}");
    assert_eq!(results[3]["refused"]["status"], 404, "{started}");

    let (status, completed) = call(
        "/runner/v1/commands/complete",
        json!({"reports": [
            {"id": ids[0], "outcome": "done", "result": {"pong": true}},
            {"id": ids[2], "outcome": "failed", "error": "it broke"},
            {"id": ids[1], "outcome": "done"},
        ]}),
    );
    assert_eq!(status, 200, "{completed}");
    let results = completed["results"].as_array().unwrap();
    assert!(results[0]["refused"].is_null() && results[1]["refused"].is_null());
    assert_eq!(results[2]["refused"]["status"], 409, "{completed}");
    // A retried report with the same outcome is answered as before; another is refused.
    let (_, again) = call(
        "/runner/v1/commands/complete",
        json!({"reports": [
            {"id": ids[0], "outcome": "done", "result": {"pong": true}},
            {"id": ids[2], "outcome": "done"},
        ]}),
    );
    assert!(again["results"][0]["refused"].is_null(), "{again}");
    assert_eq!(again["results"][1]["refused"]["status"], 409, "{again}");
    let states: std::collections::HashMap<String, String> = env
        .json(&["runner", "commands", &a.id])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(states[&ids[0]], "done");
    assert_eq!(states[&ids[1]], "cancelled");
    assert_eq!(states[&ids[2]], "failed");

    // Empty and oversized batches are refused whole.
    let (status, _) = call("/runner/v1/commands/start", json!({"ids": []}));
    assert_eq!(status, 400);
    let many: Vec<String> = (0..257).map(|i| format!("c{i}")).collect();
    let (status, body) = call(
        "/runner/v1/commands/complete",
        json!({"reports": many
        .iter()
        .map(|id| json!({"id": id, "outcome": "done"}))
        .collect::<Vec<_>>()}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("1 to 256"), "{body}");
}

#[test]
fn kill_9_during_a_long_command_leaves_it_uncertain_and_it_never_runs_again() {
    let Setup {
        env,
        server,
        reg,
        runner,
        generation: g1,
    } = &mut setup();
    let ping = ping_in_background(env, server, &reg.id, "30s");
    let cmd = newest(env, &reg.id);
    let id = cmd["id"].as_str().unwrap().to_string();
    env.wait_state(&reg.id, &id, "running");
    runner.kill9();

    let (mut runner, _) = env.start_online(reg, "a", *g1);
    let settled = env.wait_state(&reg.id, &id, "uncertain");
    assert!(
        settled["error"]
            .as_str()
            .unwrap()
            .contains("will not run again")
    );
    // The restarted Runner found the receipt without an outcome and says so.
    wait_for(Duration::from_secs(5), "uncertain in the log", || {
        runner.log().contains(&id).then_some(())
    });
    assert!(runner.log().contains("uncertain"));
    let out = ping.output();
    assert_eq!(out.status.code(), Some(1), "the ping reports no answer");
    // Nothing runs it again: once a later ping was leased and answered, the Runner has
    // taken everything queued before it, and the command is still uncertain, with no
    // other execution beside the ping.
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1
    );
    let cmds = env.json(&["runner", "commands", &reg.id]);
    assert_eq!(cmds.as_array().unwrap().len(), 2, "{cmds}");
    assert_eq!(cmds[1]["id"], id.as_str());
    assert_eq!(cmds[1]["state"], "uncertain");
    assert_eq!(cmds[0]["kind"], "ping");
    assert_eq!(
        runner.child.try_wait().unwrap(),
        None,
        "the Runner keeps running"
    );
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), 0);
}

#[test]
fn control_plane_restart_changes_the_generation_and_refuses_the_old_ones_late_result() {
    let Setup {
        env,
        server,
        reg,
        runner,
        generation: g1,
    } = setup();
    let addr = server.addr();
    let _ping = ping_in_background(&env, &server, &reg.id, "3s");
    let cmd = newest(&env, &reg.id);
    let id = cmd["id"].as_str().unwrap().to_string();
    env.wait_state(&reg.id, &id, "running");

    // Restart while the Runner long-polls and the command runs.
    let stopped = Instant::now();
    assert_eq!(server.terminate(), 0);
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "long-polls end at once on shutdown"
    );
    let server = Server::start_with(&env, &env.data_dir(), &addr, &[]);
    let g2 = env.wait_online(&reg.id, g1);
    assert!(g2 > g1);
    let settled = env.wait_state(&reg.id, &id, "uncertain");
    assert_eq!(settled["generation"], g1);
    // The old generation's late result arrives after the hold and is refused with 409; the
    // Runner logs the refusal, so the control plane has decided by then.
    wait_for(
        Duration::from_secs(10),
        "the Runner to log the refusal of its late result",
        || {
            let log = runner.log();
            (log.contains(&id) && log.contains("stale_generation")).then_some(())
        },
    );
    assert_eq!(
        newest(&env, &reg.id)["state"],
        "uncertain",
        "never replaced by the late result"
    );
    let (status, body) = machine(
        &server,
        "/runner/v1/lease",
        &reg.token,
        NEW_INSTANCE,
        Some(g1),
        &[],
        r#"{"max":1}"#,
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["code"] == "stale_generation"
            || body["error"]["code"] == "replaced_by_other_instance",
        "{body}"
    );
    // The Runner carries on in the new generation.
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1
    );
}

#[test]
fn the_same_command_delivered_twice_executes_once() {
    let Setup {
        env,
        server,
        reg,
        runner,
        ..
    } = &setup();
    env.json(&["runner", "ping", &reg.id]);
    let first = newest(env, &reg.id);
    let id = first["id"].as_str().unwrap().to_string();
    let show = |id: &str| -> serde_json::Value {
        let (status, body) = common::http(
            &server.addr(),
            "GET",
            &format!("/api/v1/commands/{id}"),
            &[("Authorization", &format!("Bearer {}", env.stored_token()))],
            "",
        )
        .unwrap();
        assert_eq!(status, 200);
        serde_json::from_str(&body).unwrap()
    };
    let execution = show(&id)["result"]["execution_id"].clone();
    assert!(execution.is_string());

    // Deliver it again, as a control plane restored from an older backup would.
    env.sql(&format!(
        "UPDATE runner_commands SET state = 'pending', lease_generation = NULL, leased_at = NULL,
             started_at = NULL, finished_at = NULL, result = NULL WHERE id = '{id}'"
    ));
    // Another ping wakes the long-poll; the Runner leases both.
    env.json(&["runner", "ping", &reg.id]);
    let again = wait_for(
        Duration::from_secs(10),
        "the redelivered command done",
        || {
            let c = show(&id);
            (c["state"] == "done").then_some(c)
        },
    );
    assert_eq!(
        again["result"]["execution_id"], execution,
        "the stored outcome, not a new run"
    );
    assert!(
        again["started_at"].is_null(),
        "it never asked to start again"
    );
    assert!(runner.log().contains("duplicate delivery"));
}

#[test]
fn cancelling_a_running_command_stops_it_and_races_end_in_exactly_one_outcome() {
    let Setup {
        env, server, reg, ..
    } = &setup();

    let _ping = ping_in_background(env, server, &reg.id, "60s");
    let id = newest(env, &reg.id)["id"].as_str().unwrap().to_string();
    env.wait_state(&reg.id, &id, "running");
    let asked = Instant::now();
    env.json(&["runner", "cancel", &id]);
    env.wait_state(&reg.id, &id, "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "cancel reached the Runner quickly"
    );

    // Cancel racing completion: whichever lands first is the only outcome.
    let auth = format!("Bearer {}", env.stored_token());
    let json = ("Content-Type", "application/json");
    let mut ended = Vec::new();
    for i in 0..16 {
        let (_, body) = common::http(
            &server.addr(),
            "POST",
            &format!("/api/v1/runners/{}/ping", reg.id),
            &[("Authorization", &auth), json],
            r#"{"hold_ms":30}"#,
        )
        .unwrap();
        let cid = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        // Fixed pause, kept: not a wait for anything but the race's input. Staggered, the
        // cancel lands before, during and after the ping's 30 ms run; no event exists to
        // aim a cancel into a window that short, and the outcome is checked either way.
        std::thread::sleep(Duration::from_millis(i * 4));
        let (status, body) = common::http(
            &server.addr(),
            "POST",
            &format!("/api/v1/commands/{cid}/cancel"),
            &[("Authorization", &auth), json],
            "{}",
        )
        .unwrap();
        assert!(
            status == 200 || (status == 409 && body.contains("already ended")),
            "{status} {body}"
        );
        let state = wait_for(
            Duration::from_secs(10),
            &format!("ping {cid} to end done or cancelled"),
            || {
                let (_, b) = common::http(
                    &server.addr(),
                    "GET",
                    &format!("/api/v1/commands/{cid}?wait_ms=2000"),
                    &[("Authorization", &auth)],
                    "",
                )
                .unwrap();
                let v: serde_json::Value = serde_json::from_str(&b).unwrap();
                let s = v["state"].as_str().unwrap().to_string();
                matches!(s.as_str(), "done" | "cancelled").then_some(s)
            },
        );
        ended.push((cid, state));
    }
    // Once nothing of the Runner's is in flight (the pings, the cancel commands), no late
    // report can arrive: every outcome is still the first one seen.
    wait_for(
        Duration::from_secs(10),
        "every command of the Runner to end",
        || all_final(env, &reg.id).then_some(()),
    );
    let cmds = env.json(&["runner", "commands", &reg.id, "--limit", "1000"]);
    for (cid, state) in &ended {
        let now = cmds
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == cid.as_str())
            .unwrap();
        assert_eq!(
            now["state"],
            state.as_str(),
            "an outcome never changes: {now}"
        );
    }
}

#[test]
fn a_runner_sees_only_its_own_commands() {
    let env = Env::new();
    let server = env.bootstrap();
    let a = env.register_runner(&server, "alpha", &[]);
    let b = env.register_runner(&server, "beta", &[]);
    // A's ping waits in A's queue (A is not running).
    let auth = format!("Bearer {}", env.stored_token());
    let (_, body) = common::http(
        &server.addr(),
        "POST",
        &format!("/api/v1/runners/{}/ping", a.id),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        "{}",
    )
    .unwrap();
    let cid = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    let g = common::connect_runner(&server, &b.token, NEW_INSTANCE);
    let (status, leased) = machine(
        &server,
        "/runner/v1/lease",
        &b.token,
        NEW_INSTANCE,
        Some(g),
        &[],
        r#"{"max":10,"wait_ms":200}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(
        leased["commands"],
        serde_json::json!([]),
        "B never sees A's command"
    );
    let (status, _) = machine(
        &server,
        &format!("/runner/v1/commands/{cid}/start"),
        &b.token,
        NEW_INSTANCE,
        Some(g),
        &[],
        "{}",
    );
    assert_eq!(status, 404, "B cannot start A's command");
    let (status, _) = machine(
        &server,
        &format!("/runner/v1/commands/{cid}/complete"),
        &b.token,
        NEW_INSTANCE,
        Some(g),
        &[],
        r#"{"outcome":"done"}"#,
    );
    assert_eq!(status, 404, "B cannot complete A's command");
    let state = env.json(&["runner", "commands", &a.id]);
    assert_eq!(state[0]["state"], "pending", "untouched by B");
}

#[test]
fn machine_requests_with_origin_wrong_version_or_bad_tokens_are_refused() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &[]);
    let (status, body) = machine(
        &server,
        "/runner/v1/connect",
        &reg.token,
        NEW_INSTANCE,
        None,
        &[("Origin", "https://evil.example")],
        STATUS,
    );
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "origin_refused");
    // Built by hand: the helper always sends protocol 1.
    let (status, text) = common::http(
        &server.addr(),
        "POST",
        "/runner/v1/connect",
        &[
            ("Authorization", &format!("Bearer {}", reg.token)),
            ("Content-Type", "application/json"),
            ("yy-protocol", "2"),
            ("yy-runner-instance", NEW_INSTANCE),
        ],
        STATUS,
    )
    .unwrap();
    assert_eq!(status, 426, "{text}");
    assert!(
        text.contains("upgrade_required") && text.contains("protocol 1"),
        "{text}"
    );
    let (status, body) = machine(
        &server,
        "/runner/v1/connect",
        "yyrt_wrong",
        NEW_INSTANCE,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unknown_runner");
    let (status, _) = machine(
        &server,
        "/runner/v1/connect",
        &env.stored_token(),
        NEW_INSTANCE,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 401, "an admin token is not a Runner token");
    let (status, _) = machine(
        &server,
        "/runner/v1/lease",
        &reg.token,
        NEW_INSTANCE,
        None,
        &[],
        r#"{"max":1}"#,
    );
    assert_eq!(status, 400, "no generation: connect first");
    let (status, _) = machine(
        &server,
        "/runner/v1/lease",
        &reg.token,
        NEW_INSTANCE,
        Some(7),
        &[],
        r#"{"max":1}"#,
    );
    assert_eq!(status, 409, "a generation that was never live");
}

#[test]
fn disable_ends_the_long_poll_at_once_and_the_token_never_works_again() {
    let Setup {
        env,
        server,
        reg,
        runner,
        ..
    } = &mut setup();
    // What is under test is a disable while the Runner's lease request is parked on the
    // server (`yy_longpolls`); the Runner sends it right after connecting.
    env.wait_longpolls(server, 1);
    let asked = Instant::now();
    env.run(&["runner", "disable", &reg.id, "--yes"]).ok();
    let code = runner.wait_exit(Duration::from_secs(5));
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "the long-poll ended at once"
    );
    assert_eq!(code, 4);
    assert!(runner.log().contains("was disabled"), "{}", runner.log());
    let (status, body) = machine(
        server,
        "/runner/v1/connect",
        &reg.token,
        NEW_INSTANCE,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "runner_disabled");
    // Starting the old config again fails clearly, and so does it after a new registration.
    let mut again = env.start_runner(reg, "b");
    assert_eq!(again.wait_exit(Duration::from_secs(5)), 4);
    let new = env.register_runner(server, "main", &["--force"]);
    assert_ne!(new.token, reg.token);
    let (status, _) = machine(
        server,
        "/runner/v1/connect",
        &reg.token,
        NEW_INSTANCE,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 403, "the old token stays dead");
}

#[test]
fn a_second_instance_is_refused_while_the_first_is_online_and_replaces_it_with_replace() {
    let Setup {
        env,
        reg,
        runner: first,
        generation: g1,
        ..
    } = &mut setup();
    // Same runner.json, another data directory: refused before it touches anything.
    let mut second = env.start_runner(reg, "b");
    assert_eq!(
        second.wait_exit(Duration::from_secs(10)),
        6,
        "{}",
        second.log()
    );
    let log = second.log();
    assert!(log.contains("is online as another instance"), "{log}");
    assert!(log.contains("--replace"), "{log}");
    assert!(
        !log.contains("removing an orphan computer container"),
        "{log}"
    );
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1,
        "the first one still serves"
    );
    assert!(
        first.child.try_wait().unwrap().is_none(),
        "the first one still runs"
    );

    let (_third, _) = env.start_online_with(reg, "c", *g1, &["--replace"]);
    assert_eq!(first.wait_exit(Duration::from_secs(5)), 4);
    assert!(first.log().contains("another instance"), "{}", first.log());
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1
    );
}

#[test]
fn fetch_exports_only_inside_artifact_roots_and_at_most_25_mib() {
    let env = Env::new();
    let root = env.path("artifacts");
    std::fs::create_dir(&root).unwrap();
    let marker = format!("all good {}\n", uuid::Uuid::new_v4().simple());
    std::fs::write(root.join("report.txt"), marker.as_bytes()).unwrap();
    std::fs::write(env.path("secret.txt"), b"keys").unwrap();
    std::os::unix::fs::symlink(env.path("secret.txt"), root.join("link.txt")).unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 25 * 1024 * 1024 + 1]).unwrap();
    let Setup { env, reg, .. } = &setup_in(env, &["--artifact-root", root.to_str().unwrap()]);

    let fetch = |path: &str, to: &std::path::Path| {
        env.run(&["runner", "fetch", &reg.id, path, "-o", to.to_str().unwrap()])
    };
    let report = root.join("report.txt");
    let report = report.to_str().unwrap();
    let out = env.path("out.txt");
    let ok = fetch(report, &out);
    ok.ok();
    assert!(ok.stderr.contains("sha256"));
    assert_eq!(std::fs::read(&out).unwrap(), marker.as_bytes());
    // The bytes travelled as an artifact: they are a file of the data directory, not a
    // row or a command result of the database.
    let mut db = Vec::new();
    for f in ["yy.db", "yy.db-wal"] {
        db.extend(std::fs::read(env.data_dir().join(f)).unwrap_or_default());
    }
    assert!(
        !String::from_utf8_lossy(&db).contains(marker.trim()),
        "bytes in the database"
    );
    let artifacts = env.json(&["artifact", "list"]);
    assert_eq!(artifacts[0]["kind"], "fetch", "{artifacts}");
    assert_eq!(
        artifacts[0]["source_path"],
        std::fs::canonicalize(report).unwrap().to_str().unwrap()
    );
    // The id it printed is an artifact to use, as the line says (the server keeps it a
    // day; `retention` unit tests check the time).
    let printed = ok
        .stderr
        .split("kept as artifact ")
        .nth(1)
        .and_then(|rest| rest.split_once(" for 24 hours"))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("no artifact id in {:?}", ok.stderr));
    assert_eq!(printed, artifacts[0]["id"].as_str().unwrap());
    let shown = env.json(&["artifact", "show", printed]);
    assert_eq!(shown["kind"], "fetch", "{shown}");
    assert_eq!(shown["state"], "ready", "{shown}");
    assert_eq!(shown["size"], marker.len(), "{shown}");
    let again = env.path("again.txt");
    env.run(&["artifact", "get", printed, "-o", again.to_str().unwrap()])
        .ok();
    assert_eq!(std::fs::read(&again).unwrap(), marker.as_bytes());
    assert!(
        ok.stderr.contains(&format!("({} bytes,", marker.len())),
        "{}",
        ok.stderr
    );
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let denied = env.path("denied.txt");
    let dotdot = format!("{}/../secret.txt", root.display());
    fetch(&dotdot, &denied).fails(1, "outside the Runner's artifactRoots");
    let link = root.join("link.txt");
    fetch(link.to_str().unwrap(), &denied).fails(1, "outside the Runner's artifactRoots");
    let big = root.join("big.bin");
    fetch(big.to_str().unwrap(), &denied).fails(1, "at most 25 MiB");
    fetch("relative/path", &denied).fails(2, "not an absolute path");
    assert!(!denied.exists(), "nothing written on refusal");
    // Not even the temporary file the CLI received a followed upload into.
    let parent = denied.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".yy-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    fetch(report, &out).fails(2, "already exists");
}

#[test]
fn a_runner_without_artifact_roots_exports_nothing() {
    let Setup { env, reg, .. } = &setup();
    std::fs::write(env.path("file.txt"), b"x").unwrap();
    let d = env.path("o.txt");
    env.run(&[
        "runner",
        "fetch",
        &reg.id,
        env.path("file.txt").to_str().unwrap(),
        "-o",
        d.to_str().unwrap(),
    ])
    .fails(1, "no artifactRoots");
}

#[test]
fn a_full_queue_is_refused_clearly() {
    let env = Env::new();
    env.create_admin("root");
    let server = Server::start_with(
        &env,
        &env.data_dir(),
        "127.0.0.1:0",
        &["--max-pending-commands", "3"],
    );
    env.login(&server, "root");
    let reg = env.register_runner(&server, "main", &[]);
    let auth = format!("Bearer {}", env.stored_token());
    for _ in 0..3 {
        let (status, body) = common::http(
            &server.addr(),
            "POST",
            &format!("/api/v1/runners/{}/ping", reg.id),
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            "{}",
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    env.run(&["runner", "ping", &reg.id])
        .fails(6, "3 pending commands, the limit");
    // Once the Runner drains its queue, pings pass again.
    let _runner = env.start_online(&reg, "a", 0);
    wait_for(Duration::from_secs(10), "the queue drained", || {
        env.json(&["runner", "commands", &reg.id])
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "done")
            .then_some(())
    });
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1
    );
}

#[test]
fn runner_config_is_checked_before_anything_runs() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &[]);
    let text = std::fs::read_to_string(&reg.config).unwrap();
    let cfg = reg.config.to_str().unwrap();

    std::fs::set_permissions(&reg.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    env.run(&["runner", "run", "--config", cfg])
        .fails(2, "chmod 600");
    std::fs::set_permissions(&reg.config, std::fs::Permissions::from_mode(0o600)).unwrap();

    let write = |t: String| {
        let p = env.path("edited.json");
        std::fs::write(&p, t).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    let p = write(text.replace("\"protocol\": 1", "\"protocol\": 2"));
    env.run(&["runner", "run", "--config", p.to_str().unwrap()])
        .fails(2, "protocol 2");
    let p = write(text.replace(&server.url, "http://192.0.2.1:8420"));
    env.run(&["runner", "run", "--config", p.to_str().unwrap()])
        .fails(2, "allowInsecureLan");
    let p = write(text.replace(&server.url, "http://localhost:8420"));
    env.run(&["runner", "run", "--config", p.to_str().unwrap()])
        .fails(2, "allowInsecureLan");
    let p = write(text.replace("\"protocol\": 1", "\"protocol\": 1, \"colour\": 1"));
    env.run(&["runner", "run", "--config", p.to_str().unwrap()])
        .fails(2, "unknown field");
    env.run(&["runner", "run", "--config", "/nonexistent/runner.json"])
        .fails(2, "cannot read");
}

#[test]
fn sigterm_finishes_commands_in_flight_and_exits_zero() {
    let Setup {
        env,
        server,
        reg,
        runner,
        ..
    } = &mut setup();
    let ping = ping_in_background(env, server, &reg.id, "1s");
    let id = newest(env, &reg.id)["id"].as_str().unwrap().to_string();
    env.wait_state(&reg.id, &id, "running");
    runner.signal(libc::SIGTERM);
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), 0);
    assert_eq!(
        newest(env, &reg.id)["state"],
        "done",
        "finished within the grace period"
    );
    assert_eq!(ping.output().status.code(), Some(0));
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(shown["online"], false, "a clean stop shows offline at once");
}

#[test]
fn the_runner_reconnects_after_the_control_plane_was_down() {
    let Setup {
        env,
        server,
        reg,
        runner,
        generation: g1,
    } = setup();
    let addr = server.addr();
    assert_eq!(server.terminate(), 0);
    // Down for real: the Runner tried to connect and failed, and retries.
    wait_for(
        Duration::from_secs(10),
        "the Runner to fail to connect and retry",
        || runner.log().contains("retrying").then_some(()),
    );
    let _server = Server::start_with(&env, &env.data_dir(), &addr, &[]);
    env.wait_online(&reg.id, g1);
    assert_eq!(
        env.json(&["runner", "ping", &reg.id])["summary"]["answered"],
        1
    );
}
