//! Warm computers (`yy runner run --warm-computers`), against the real Docker engine: a
//! start claims a container made before it, with the agent's workspace attached; a claimed
//! container is never warm again (another agent gets another one, and sees nothing of the
//! first); a Runner killed with a warm set leaves no container a later Runner reuses; a
//! Runner stopped takes its computers with it and keeps their workspaces.

mod common;
mod computer_support;

use std::time::Duration;

use common::wait_for;
use computer_support::{ComputerSetup, computer_setup, docker};

/// The running containers of Runner `runner` labelled as warm (claimed ones keep the
/// label: they are told apart by the computers that name them).
fn warm_containers(runner: &str) -> Vec<String> {
    let out = docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=yy.runner={runner}"),
        "--filter",
        "label=yy.agent=warm",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The `n`th warm container of the Runner (ready: its log says so), none of `taken`.
fn wait_warm(s: &ComputerSetup, n: usize, taken: &[String]) -> String {
    wait_for(Duration::from_secs(60), "a warm computer ready", || {
        let ready = s.runner.log().matches("a warm computer is ready").count();
        if ready < n {
            return None;
        }
        warm_containers(&s.reg.id)
            .into_iter()
            .find(|c| !taken.contains(c))
    })
}

fn gone(container: &str) -> bool {
    !docker(&["inspect", container]).status.success()
}

#[test]
fn a_start_claims_a_warm_computer_that_is_never_offered_to_another_agent() {
    let Some(s) = computer_setup(3, &["--max-computers", "3"]) else {
        return;
    };
    let env = &s.env;
    let create = |agent: &str| -> (String, String) {
        let c = env.json(&["computer", "create", "--agent", agent]);
        (
            c["id"].as_str().unwrap().to_string(),
            c["container_id"].as_str().unwrap().to_string(),
        )
    };
    let exec = |id: &str, script: &str| -> String {
        let out = env.run(&["computer", "exec", id, "--", "sh", "-c", script]);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout
    };
    let shown = env.json(&["runner", "show", &s.reg.id]);
    assert_eq!(shown["warm_computers"], 1, "{shown:#}");

    // The first start is cold; it tells the Runner which image to keep warm.
    let (_c1, first) = create("a1");
    let w1 = wait_warm(&s, 1, std::slice::from_ref(&first));

    // a2's start claims it: the same container, a2's own (empty) workspace in it.
    let (c2, container) = create("a2");
    assert_eq!(
        container,
        w1,
        "a2's computer is the warm container: {}",
        s.runner.log()
    );
    let listed = exec(
        &c2,
        "echo mine > a2.txt; (sleep 777 >/dev/null 2>&1 &); pwd; ls -A",
    );
    assert_eq!(listed, "/workspace\na2.txt\n");
    let w2 = wait_warm(&s, 2, &[first.clone(), w1.clone()]);

    // Stopped, the claimed container goes for good; a3 gets the other warm one, which
    // holds nothing of a2's (files or processes).
    env.json(&["computer", "stop", &c2]);
    wait_for(Duration::from_secs(30), "a2's container to go", || {
        gone(&w1).then_some(())
    });
    let (c3, container) = create("a3");
    assert_eq!(container, w2);
    assert_ne!(container, w1);
    let seen = exec(&c3, "ls -A; ps -eo args");
    assert!(!seen.contains("a2.txt"), "{seen}");
    assert!(!seen.contains("sleep 777"), "{seen}");

    // a2 again: a new container (never w1), and its workspace with its file.
    let (c2_again, container) = create("a2");
    assert_eq!(c2_again, c2);
    assert_ne!(container, w1);
    assert_eq!(exec(&c2, "cat a2.txt"), "mine\n");
    drop(s);
}

#[test]
fn a_runner_killed_with_a_warm_set_leaves_no_container_a_later_runner_reuses() {
    let Some(mut s) = computer_setup(1, &[]) else {
        return;
    };
    let env = &s.env;
    let c = env.json(&["computer", "create", "--agent", "a1"]);
    let id = c["id"].as_str().unwrap().to_string();
    let first = c["container_id"].as_str().unwrap().to_string();
    let warm = wait_warm(&s, 1, std::slice::from_ref(&first));

    s.runner.kill9();
    let generation = env.json(&["runner", "show", &s.reg.id])["generation"]
        .as_i64()
        .unwrap_or(0);
    let runner = env.start_runner(&s.reg, "a");
    env.wait_online(&s.reg.id, generation);
    wait_for(
        Duration::from_secs(30),
        "the old warm container to go",
        || (gone(&warm) && gone(&first)).then_some(()),
    );
    // No slot of the old run is mounted any more.
    let slots = env.path("runner-data-a").join("warm");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&slots.display().to_string()),
        "{mountinfo}"
    );

    // The computer starts again in a container of the new run.
    let again = env.json(&["computer", "create", "--agent", "a1"]);
    assert_eq!(again["id"], id.as_str());
    let container = again["container_id"].as_str().unwrap();
    assert_ne!(container, warm);
    assert_ne!(container, first);
    drop(runner);
}

#[test]
fn a_runner_stopped_takes_its_computers_with_it_and_keeps_their_workspaces() {
    let Some(mut s) = computer_setup(1, &[]) else {
        return;
    };
    let c = s.env.json(&["computer", "create", "--agent", "a1"]);
    let id = c["id"].as_str().unwrap().to_string();
    let claimed = c["container_id"].as_str().unwrap().to_string();
    let out = s.env.run(&[
        "computer",
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo kept > f.txt",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let warm = wait_warm(&s, 1, std::slice::from_ref(&claimed));

    s.runner.signal(libc::SIGTERM);
    assert_eq!(
        s.runner.wait_exit(Duration::from_secs(60)),
        0,
        "{}",
        s.runner.log()
    );
    // Nothing of the Runner runs on without it: the warm container (nobody would claim
    // it), the agent's computer, and their slots' mounts are gone with it.
    assert!(gone(&warm), "{}", s.runner.log());
    assert!(gone(&claimed), "{}", s.runner.log());
    let data = s.env.path("runner-data-a");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(&data.display().to_string()),
        "{mountinfo}"
    );

    // The workspace stays: the next start of the computer finds its file.
    let generation = s.env.json(&["runner", "show", &s.reg.id])["generation"]
        .as_i64()
        .unwrap_or(0);
    let runner = s.env.start_runner(&s.reg, "a");
    s.env.wait_online(&s.reg.id, generation);
    let again = s.env.json(&["computer", "create", "--agent", "a1"]);
    assert_eq!(again["id"], id.as_str());
    let out = s.env.run(&["computer", "exec", &id, "--", "cat", "f.txt"]);
    assert_eq!(out.stdout, "kept\n", "{out:?}");
    drop(runner);
}
