//! Image updates end to end (real dockerd): `yy runner update --computer-image` makes the
//! Runner verify the image and run an acceptance computer, the switch waits until the
//! Runner is idle, running computers keep their image until they start again (workspace
//! kept), a broken image is refused, `--rollback` goes back, and `yy image rm` keeps a
//! Runner's previous image.

mod common;
mod computer_support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{Env, wait_for};
use computer_support::{docker, docker_ok, test_image};
use serde_json::json;

/// A genuinely different image (another id) made from the test image: a container created
/// from it (never started) gets `files` copied in and is committed with a label.
fn derived_image(variant: &str, files: &[(&str, &str, u32)]) -> String {
    let base = &test_image().id;
    let name = format!("yy-test-derive-{variant}-{}", std::process::id());
    let _ = docker(&["rm", "-f", &name]);
    docker_ok(&["create", "--name", &name, base, "true"]);
    let dir = tempfile::tempdir().unwrap();
    for (path, content, mode) in files {
        let local = dir.path().join(path.replace('/', "_"));
        std::fs::write(&local, content).unwrap();
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(*mode)).unwrap();
        docker_ok(&["cp", local.to_str().unwrap(), &format!("{name}:{path}")]);
    }
    let id = docker_ok(&[
        "commit",
        "--change",
        &format!("LABEL yy.test.variant={variant}-{}", std::process::id()),
        &name,
    ]);
    docker_ok(&["rm", "-f", &name]);
    assert!(id.starts_with("sha256:") && id != *base, "{id}");
    id
}

/// Removes a derived image when the test ends, however it ends (its computer's container
/// may still be going away: retried for a while).
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = common::poll(Duration::from_secs(30), || {
            docker(&["rmi", "-f", &self.0])
                .status
                .success()
                .then_some(())
        });
    }
}

fn gone(name: &str) -> bool {
    !docker(&["container", "inspect", name]).status.success()
}

#[test]
fn an_image_update_is_accepted_waits_for_idle_moves_computers_and_rolls_back() {
    if !common::require_docker() {
        return;
    }
    let old = test_image().id.clone();
    let new = derived_image("b", &[("/etc/yy-image-marker", "new image\n", 0o644)]);
    let _cleanup = Cleanup(new.clone());
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &old]);
    env.run(&[
        "agent",
        "create",
        "a1",
        "--profile",
        "default",
        "--env",
        "computer",
    ])
    .ok();
    let (_runner, _) = env.start_online(&reg, "a", 0);
    let c = env.json(&["computer", "create", "--agent", "a1"]);
    let id = c["id"].as_str().unwrap().to_string();
    assert_eq!(c["image_id"], old.as_str());
    env.computer_sh(&id, "echo kept > note.txt").ok();

    // Busy: a computer command runs until the test lets it end.
    let busy = env.background(
        &server,
        &[
            "computer",
            "exec",
            &id,
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            "while [ ! -e go ]; do sleep 0.1; done; echo released",
        ],
    );
    wait_for(Duration::from_secs(20), "the busy exec running", || {
        let list = env.json(&["runner", "commands", &reg.id]);
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "computer.exec" && c["state"] == "running")
            .then_some(())
    });
    let mut update = env.background(
        &server,
        &["runner", "update", &reg.id, "--computer-image", &new],
    );
    let update_err = common::lines_of(update.0.as_mut().unwrap().stderr.take().unwrap());
    let waiting = wait_for(
        Duration::from_secs(120),
        "the new image accepted and waiting",
        || {
            let r = env.json(&["runner", "show", &reg.id]);
            (r["pending_state"] == "accepted").then_some(r)
        },
    );
    assert_eq!(waiting["pending_image"], new.as_str());
    assert_eq!(
        waiting["computer_image"],
        old.as_str(),
        "not switched while busy"
    );
    assert_eq!(
        waiting["pending_reason"], "accepted; waiting for 1 computer command",
        "{waiting}"
    );
    let shown = env.run(&["runner", "show", &reg.id]);
    assert!(
        shown.stdout.contains("waiting for 1 computer command"),
        "{}",
        shown.stdout
    );
    // The switch is decided when a computer command ends: one more that ends now makes
    // that decision again, with the busy one still running.
    env.run(&["computer", "exec", &id, "--", "true"]).ok();
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(
        shown["computer_image"],
        old.as_str(),
        "still busy: no switch"
    );
    assert_eq!(
        shown["pending_reason"], "accepted; waiting for 1 computer command",
        "{shown}"
    );
    // The waiting `yy runner update` says why it waits.
    let mut said = Vec::new();
    common::wait_line(&update_err, "waiting for 1 computer command", &mut said);

    // Idle: the switch follows the end of the last computer command.
    std::fs::write(
        env.path("runner-data-a")
            .join("workspaces")
            .join(&id)
            .join("go"),
        "",
    )
    .unwrap();
    let out = busy.output();
    assert!(out.status.success(), "{out:?}");
    let out = update.output();
    said.extend(update_err.iter());
    let stderr = said.join("\n");
    assert!(out.status.success(), "{stderr}");
    let container = stderr
        .split("acceptance computer ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no acceptance computer named: {stderr}"));
    assert!(container.starts_with("yy-"), "{container}");
    assert!(
        gone(container),
        "the acceptance computer {container} is gone"
    );
    let r = env.json(&["runner", "show", &reg.id]);
    assert_eq!(r["computer_image"], new.as_str(), "{r}");
    assert_eq!(r["previous_image"], old.as_str());
    assert!(r["pending_image"].is_null());

    // The running computer keeps its image until it starts again, then moves, workspace kept.
    let c = env.json(&["computer", "show", &id]);
    assert_eq!(c["image_id"], old.as_str());
    assert_eq!(c["next_image"], new.as_str());
    let shown = env.run(&["computer", "show", &id]);
    assert!(
        shown.stdout.contains("when it is started again"),
        "{}",
        shown.stdout
    );
    let marker = env.run(&["computer", "exec", &id, "--", "cat", "/etc/yy-image-marker"]);
    assert_ne!(marker.code, 0, "the old image has no marker: {marker:?}");
    env.json(&["computer", "stop", &id]);
    let c = env.json(&["computer", "create", "--agent", "a1"]);
    assert_eq!(c["image_id"], new.as_str());
    assert!(c["next_image"].is_null());
    let out = env.computer_sh(&id, "cat /etc/yy-image-marker note.txt");
    out.ok();
    assert_eq!(out.stdout, "new image\nkept\n");
    // The warm set moved with it: the old image's warm computer went, one of the new
    // image is made.
    let warm_of = |image: &str| -> usize {
        let out = docker(&[
            "ps",
            "-q",
            "--filter",
            &format!("label=yy.runner={}", reg.id),
            "--filter",
            "label=yy.agent=warm",
            "--filter",
            &format!("label=yy.image={image}"),
        ]);
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    wait_for(
        Duration::from_secs(60),
        "a warm computer of the new image",
        || (warm_of(&new) == 1).then_some(()),
    );
    assert_eq!(warm_of(&old), 0, "the old image's warm computer is gone");

    // The previous image stays on the engine.
    let rm = env.run(&["image", "rm", &old]);
    rm.fails(6, "previous image");
    assert!(docker(&["image", "inspect", &old]).status.success());

    // Rollback: the previous image again (accepted, and switched at once: idle).
    let out = env.run(&["runner", "update", &reg.id, "--rollback", "--json"]);
    out.ok();
    assert!(out.stderr.contains("accepted"), "{out:?}");
    let r = out.json();
    assert_eq!(r["computer_image"], old.as_str());
    assert_eq!(r["previous_image"], new.as_str());
    let c = env.json(&["computer", "show", &id]);
    assert_eq!(c["next_image"], old.as_str());

    env.json(&["computer", "rm", &id, "--yes"]);
}

#[test]
fn a_broken_image_is_refused_and_the_current_stays() {
    if !common::require_docker() {
        return;
    }
    let old = test_image().id.clone();
    // The guest agent replaced by a script that exits: no guest answers.
    let broken = derived_image(
        "broken",
        &[("/usr/local/bin/yy", "#!/bin/sh\nexit 1\n", 0o755)],
    );
    let _cleanup = Cleanup(broken.clone());
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &old]);
    let out = env.run(&["runner", "update", &reg.id, "--rollback"]);
    out.fails(2, "no previous image");
    let (_runner, _) = env.start_online(&reg, "a", 0);

    let out = env.run(&["runner", "update", &reg.id, "--computer-image", &broken]);
    out.fails(1, "guest agent");
    assert!(out.stderr.contains("not made current"), "{out:?}");
    let r = env.json(&["runner", "show", &reg.id]);
    assert_eq!(r["computer_image"], old.as_str());
    assert!(r["pending_image"].is_null());
    assert!(r["previous_image"].is_null());
    assert!(
        r["image_note"].as_str().unwrap().contains("guest agent"),
        "{r}"
    );
    // No acceptance or verification container is left behind.
    let left = docker_ok(&[
        "ps",
        "-a",
        "--filter",
        &format!("ancestor={broken}"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(left, "", "containers left from the broken image");

    // An image the engine does not have is refused the same way.
    let missing = format!("sha256:{}", "0f".repeat(32));
    let out = env.run(&["runner", "update", &reg.id, "--computer-image", &missing]);
    out.fails(1, "not on this Docker engine");
    assert_eq!(
        env.json(&["runner", "show", &reg.id])["computer_image"],
        old.as_str()
    );
}

/// The stdout of the last terminal result the model saw in the request of step `key`.
fn tool_result(s: &common::hermes::WorkerSetup, key: &str) -> String {
    let step = s
        .model
        .steps()
        .into_iter()
        .find(|r| r["step"] == key)
        .unwrap_or_else(|| panic!("no model request for {key}"));
    step["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
        .and_then(|c| c["stdout"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// With the Worker: a running turn holds the switch back; after it, a turn on the still
/// running computer keeps its image (not recreated under it), and a turn after a stop runs
/// on the new image with the workspace kept.
#[test]
fn a_running_turn_delays_the_switch_and_turns_keep_a_running_computer_image() {
    let tool = |command: &str| json!({ "tool_call": { "name": "terminal", "arguments": { "command": command } } });
    let marker = "cat /etc/yy-image-marker 2>/dev/null || echo no-marker; cat note.txt";
    let Some(s) = common::hermes::worker_setup(
        || test_image().id.clone(),
        json!({
            "steps": [],
            "by_prompt": [
                { "match": "first", "steps": [ tool("echo kept > note.txt"), { "text": "one" } ] },
                { "match": "slow", "steps": [
                    tool("while [ ! -e go ]; do sleep 0.1; done; echo released"), { "text": "two" } ] },
                { "match": "again", "steps": [ tool(marker), { "text": "three" } ] },
                { "match": "restarted", "steps": [ tool(marker), { "text": "four" } ] }
            ]
        }),
    ) else {
        return;
    };
    let old = test_image().id.clone();
    let new = derived_image("turns", &[("/etc/yy-image-marker", "new image\n", 0o644)]);
    let _cleanup = Cleanup(new.clone());
    // Bound after the cleanup, so dropped before it: the Runner and its warm computers of
    // the new image are gone when the image is removed.
    let s = s;
    let env = &s.env;
    env.run(&["chat", "box", "first"]).ok();
    let computer = env.json(&["computer", "list"])[0].clone();
    let id = computer["id"].as_str().unwrap().to_string();
    assert_eq!(computer["image_id"], old.as_str());

    let slow = env.background(&s.server, &["chat", "box", "slow"]);
    wait_for(Duration::from_secs(60), "the slow turn running", || {
        let list = env.json(&["runner", "commands", &s.reg.id]);
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "worker.turn" && c["state"] == "running")
            .then_some(())
    });
    let r = env.json(&[
        "runner",
        "update",
        &s.reg.id,
        "--computer-image",
        &new,
        "--no-wait",
    ]);
    assert_eq!(r["pending_state"], "verifying", "{r}");
    assert_eq!(r["computer_image"], old.as_str());
    let waiting = wait_for(Duration::from_secs(120), "accepted, waiting", || {
        let r = env.json(&["runner", "show", &s.reg.id]);
        (r["pending_state"] == "accepted").then_some(r)
    });
    assert_eq!(
        waiting["pending_reason"], "accepted; waiting for 1 running turn",
        "{waiting}"
    );
    assert_eq!(waiting["computer_image"], old.as_str());
    std::fs::write(
        env.path("runner-data-a")
            .join("workspaces")
            .join(&id)
            .join("go"),
        "",
    )
    .unwrap();
    let out = slow.output();
    assert!(out.status.success(), "{out:?}");
    wait_for(Duration::from_secs(30), "the switch once idle", || {
        let r = env.json(&["runner", "show", &s.reg.id]);
        (r["computer_image"] == new.as_str()).then_some(())
    });

    // A turn on the running computer: the same container, the old image.
    env.run(&["chat", "box", "again"]).ok();
    assert_eq!(tool_result(&s, "again#1"), "no-marker\nkept\n");
    let c = env.json(&["computer", "show", &id]);
    assert_eq!(c["image_id"], old.as_str());
    assert_eq!(c["container_id"], computer["container_id"], "not recreated");
    assert_eq!(c["next_image"], new.as_str());

    // Stopped and started again by the next turn: the new image, the workspace kept.
    env.json(&["computer", "stop", &id]);
    env.run(&["chat", "box", "restarted"]).ok();
    assert_eq!(tool_result(&s, "restarted#1"), "new image\nkept\n");
    let c = env.json(&["computer", "show", &id]);
    assert_eq!(c["image_id"], new.as_str());
    assert!(c["next_image"].is_null());
    env.json(&["computer", "rm", &id, "--yes"]);
}
