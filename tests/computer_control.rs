//! Computers end to end: `yy computer ...` → control plane (records, fences, audit) →
//! Runner (pool, reservations, reconcile) → a real Docker engine and the guest agent.

mod common;
mod computer_support;

use std::time::Duration;

use common::{Env, wait_for};
use computer_support::{ComputerSetup, computer_setup, docker, test_image};
use serde_json::Value;

/// A control plane, computer agents `a1`..`aN`, and a Runner with computers enabled.
fn setup(agents: usize) -> Option<ComputerSetup> {
    computer_setup(agents, &[])
}

fn create(env: &Env, agent: &str) -> Value {
    env.json(&["computer", "create", "--agent", agent])
}

fn container_exists(id: &str) -> bool {
    docker(&["inspect", id]).status.success()
}

#[test]
fn a_computer_runs_isolated_and_its_workspace_survives_stop_and_recreate() {
    let Some(s) = setup(1) else { return };
    let env = &s.env;
    let c = create(env, "a1");
    assert_eq!(c["state"], "running", "{c}");
    assert_eq!(c["fence"], 1);
    assert_eq!(c["guest_cwd"], "/workspace");
    let id = c["id"].as_str().unwrap().to_string();
    let first = c["container_id"].as_str().unwrap().to_string();
    let inspect = String::from_utf8(docker(&["inspect", "--format", "{{.HostConfig.NetworkMode}} {{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{index .Config.Labels \"yy.computer\"}}", &first]).stdout).unwrap();
    assert_eq!(inspect.trim(), format!("none 0:0 true {id}"));
    let shown = env.json(&["runner", "show", &s.reg.id]);
    assert_eq!(shown["computers_capacity"], 2);
    assert!(
        shown["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "computer-v1")
    );

    // Asking again returns the same computer.
    assert_eq!(create(env, "a1")["container_id"], first.as_str());

    let out = env.computer_sh(&id, "echo kept > note.txt; id -u; cat /proc/net/dev");
    out.ok();
    assert!(out.stdout.starts_with("1000\n"), "{out:?}");
    let interfaces: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains(':'))
        .map(|l| l.trim().split(':').next().unwrap())
        .collect();
    assert_eq!(interfaces, vec!["lo"], "only loopback inside");
    // The command's status is yy's exit code, as with docker exec and ssh; no error line.
    let failed = env.computer_sh(&id, "echo out; exit 7");
    assert_eq!(
        (failed.code, failed.stdout.as_str()),
        (7, "out\n"),
        "{failed:?}"
    );
    assert!(!failed.stderr.contains("error:"), "{failed:?}");
    let killed = env.run(&["computer", "exec", &id, "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(killed.code, 128 + 9, "{killed:?}");
    assert!(killed.stderr.contains("killed by signal 9"), "{killed:?}");
    let slow = env.run(&[
        "computer",
        "exec",
        &id,
        "--timeout",
        "1s",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(slow.code, 124, "{slow:?}");
    assert!(slow.stderr.contains("timed out after 1s"), "{slow:?}");
    let audit = env.json(&["computer", "audit"]);
    assert_eq!(audit.as_array().unwrap().len(), 4);
    assert_eq!(audit[1]["action"], "computer.exec");
    assert_eq!(audit[1]["target"], id.as_str());
    assert_eq!(audit[1]["detail"]["argv"][0], "sh");

    let stopped = env.json(&["computer", "stop", &id]);
    assert_eq!(stopped["state"], "stopped");
    assert!(
        !container_exists(&first),
        "a stopped computer's container is removed"
    );
    env.run(&["computer", "exec", &id, "--", "true"])
        .fails(6, "not running");

    // Recreated, never resumed: a new container under a greater fence, same workspace.
    let again = create(env, "a1");
    assert_eq!(again["state"], "running");
    assert_eq!(again["fence"], 3);
    assert_ne!(again["container_id"], first.as_str());
    let out = env.run(&["computer", "exec", &id, "--", "cat", "note.txt"]);
    out.ok();
    assert_eq!(out.stdout, "kept\n");

    let removed = env.json(&["computer", "rm", &id, "--yes"]);
    assert_eq!(removed["state"], "removed");
    assert!(!container_exists(again["container_id"].as_str().unwrap()));
    assert_eq!(env.json(&["computer", "list"]), serde_json::json!([]));
}

#[test]
fn the_third_computer_waits_for_a_slot_of_the_default_pool() {
    let Some(s) = setup(3) else { return };
    let env = &s.env;
    let a1 = create(env, "a1")["id"].as_str().unwrap().to_string();
    create(env, "a2");
    // The third waits (queued on the Runner) instead of failing...
    let third = env.background(
        &s.server,
        &["computer", "create", "--agent", "a3", "--json"],
    );
    let find_a3 = || -> Option<Value> {
        env.json(&["computer", "list"])
            .as_array()?
            .iter()
            .find(|c| c["agent"] == "a3")
            .cloned()
    };
    wait_for(
        Duration::from_secs(20),
        "a3's computer to be starting",
        || find_a3().filter(|c| c["state"] == "starting"),
    );
    // The Runner says it waits for a slot (a wait without a deadline of its own)...
    wait_for(
        Duration::from_secs(20),
        "the Runner to wait for a slot",
        || {
            s.runner
                .log()
                .contains("waiting for a free slot")
                .then_some(())
        },
    );
    assert_eq!(find_a3().unwrap()["state"], "starting");
    // ...and starts as soon as stopping one frees a slot.
    env.json(&["computer", "stop", &a1]);
    let out = third.output();
    assert!(out.status.success(), "{out:?}");
    let started: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(started["state"], "running", "{started}");
    for c in env.json(&["computer", "list"]).as_array().unwrap() {
        env.run(&["computer", "rm", c["id"].as_str().unwrap(), "--yes"])
            .ok();
    }
}

#[test]
fn an_orphan_container_is_reconciled_after_kill_9_of_the_runner() {
    let Some(mut s) = setup(1) else { return };
    let env = &s.env;
    let c = create(env, "a1");
    let container = c["container_id"].as_str().unwrap().to_string();
    let g1 = env.json(&["runner", "show", &s.reg.id])["generation"]
        .as_i64()
        .unwrap();
    s.runner.kill9();
    assert!(
        container_exists(&container),
        "the container outlives the Runner"
    );

    let (runner, _) = env.start_online(&s.reg, "a", g1);
    wait_for(
        Duration::from_secs(20),
        "the orphan container to be removed",
        || (!container_exists(&container)).then_some(()),
    );
    assert!(runner.log().contains("orphan"), "{}", runner.log());
    let shown = env.json(&["computer", "show", c["id"].as_str().unwrap()]);
    assert_eq!(shown["state"], "stopped");
    assert!(
        shown["last_error"]
            .as_str()
            .unwrap()
            .contains("lease ended"),
        "{shown}"
    );
    assert!(
        shown["fence"].as_i64().unwrap() > 1,
        "the lease ended with a greater fence"
    );
    // The next start takes a new container.
    let again = create(env, "a1");
    assert_eq!(again["state"], "running");
    assert_ne!(again["container_id"], container.as_str());
    env.run(&["computer", "rm", again["id"].as_str().unwrap(), "--yes"])
        .ok();
}

#[test]
fn a_stale_fence_is_refused_by_the_runner() {
    let Some(s) = setup(1) else { return };
    let env = &s.env;
    let c = create(env, "a1");
    let id = c["id"].as_str().unwrap().to_string();
    // A control plane that lost track (e.g. restored from an older backup) sends an older
    // fence: the Runner refuses it.
    env.sql(&format!("UPDATE computers SET fence = 0 WHERE id = '{id}'"));
    env.run(&["computer", "exec", &id, "--", "true"])
        .fails(1, "stale fence 0");
    env.run(&["computer", "stop", &id]).fails(1, "stale fence");
    env.sql(&format!(
        "UPDATE computers SET fence = 5, state = 'running' WHERE id = '{id}'"
    ));
    env.run(&["computer", "rm", &id, "--yes"]).ok();
}

#[test]
fn computers_need_a_computer_agent_and_a_full_image_id() {
    let Some(s) = setup(0) else { return };
    let env = &s.env;
    env.run(&[
        "agent",
        "create",
        "hosty",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .ok();
    env.run(&["computer", "create", "--agent", "hosty"])
        .fails(2, "only computer agents");
    env.run(&[
        "runner",
        "update",
        &s.reg.id,
        "--computer-image",
        "yy-computer:test",
    ])
    .fails(2, "not a full image id");
    env.run(&[
        "runner",
        "update",
        &s.reg.id,
        "--computer-image",
        "sha256:abc",
    ])
    .fails(2, "not a full image id");
    let shown = env.json(&["runner", "show", &s.reg.id]);
    assert_eq!(
        shown["computer_image"],
        test_image().id.as_str(),
        "unchanged"
    );
}

/// Issue 23, finding 2: 1 MiB of NUL bytes on stdout and on stderr (the default cap) used
/// to become a 12 MiB result that the control plane refused (413), and the exec ended
/// `uncertain` at its deadline. The cap counts what is sent (JSON escapes included), so
/// the result fits and the exec is reported `done` at once; the API's limit and
/// docs/api.md agree.
#[test]
fn output_that_grows_on_the_wire_stays_within_its_cap_and_is_reported() {
    let Some(s) = setup(1) else { return };
    let env = &s.env;
    let c = create(env, "a1");
    let id = c["id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let out = env.run(&[
        "computer",
        "exec",
        &id,
        "--json",
        "--timeout",
        "60s",
        "--",
        "sh",
        "-c",
        "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2",
    ]);
    out.ok();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["truncated"], true);
    for stream in ["stdout", "stderr"] {
        assert_eq!(r[format!("{stream}_truncated")], true, "{stream}");
        let sent = serde_json::to_string(&r[stream]).unwrap().len() - 2;
        assert!(
            sent <= 1 << 20 && sent > (1 << 20) - 6,
            "{stream}: {sent} bytes as sent"
        );
    }
    let cmd = env.json(&["runner", "commands", &s.reg.id]);
    let exec = cmd
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "computer.exec")
        .unwrap_or_else(|| panic!("{cmd}"));
    assert_eq!(exec["state"], "done", "{exec}");

    // More than the API takes is refused up front, and the docs say the same limit.
    let token = env.stored_token();
    let auth = format!("Bearer {token}");
    let (status, body) = common::http(
        &s.server.addr(),
        "POST",
        &format!("/api/v1/computers/{id}/exec"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        r#"{"argv":["true"],"output_cap_bytes":16777216}"#,
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("between 1 and 1048576"), "{body}");
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let documented = api
        .split("`output_cap_bytes` (optional;")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .to_string();
    assert!(
        documented.contains("1 to 1 MiB") && !documented.contains("16 MiB"),
        "{documented}"
    );
}
