//! Computers give their pool slot back (issue 22): an idle computer stops by itself after
//! its Runner's idle time (reads do not renew it), keeps its workspace and starts again
//! on its next use; a start waiting for a full pool takes the slot of the longest idle one.
//! Real control plane, Runner, Docker engine and guest agent.

mod common;
mod computer_support;

use std::time::{Duration, Instant};

use common::{Env, wait_for};
use computer_support::{computer_setup, docker};
use serde_json::Value;

fn show(env: &Env, id: &str) -> Value {
    env.json(&["computer", "show", id])
}

#[test]
fn an_idle_computer_stops_by_itself_and_reads_do_not_renew_it() {
    let Some(s) = computer_setup(
        1,
        &["--computer-idle", "4s", "--computer-reclaim-after", "1s"],
    ) else {
        return;
    };
    let env = &s.env;
    let runner = env.run(&["runner", "show", &s.reg.id]);
    assert!(
        runner.stdout.contains("stopped after 4s"),
        "{}",
        runner.stdout
    );
    let c = env.json(&["computer", "create", "--agent", "a1"]);
    let id = c["id"].as_str().unwrap().to_string();
    let container = c["container_id"].as_str().unwrap().to_string();
    env.computer_sh(&id, "echo kept > kept.txt").ok();
    let used = Instant::now();
    // Reading its state and its screen size every half second does not keep it.
    let stopped = common::poll(Duration::from_secs(60), || {
        let _ = env.run(&["computer", "screen", &id, "get_screen_size"]);
        let c = show(env, &id);
        std::thread::sleep(Duration::from_millis(500));
        (c["state"] == "stopped").then_some(c)
    })
    .unwrap_or_else(|| {
        panic!(
            "no idle stop in 60 s: {:#}\nrunner log:\n{}\nserver log:\n{}",
            show(env, &id),
            s.runner.log(),
            s.server.log()
        )
    });
    let after = used.elapsed();
    assert!(after >= Duration::from_secs(3), "stopped after {after:?}");
    assert_eq!(stopped["stop_reason"], "idle 4s", "{stopped}");
    assert!(stopped["last_used_at"].is_string(), "{stopped}");
    let text = env.run(&["computer", "show", &id]);
    assert!(text.stdout.contains("stopped (idle 4s)"), "{}", text.stdout);
    assert!(
        !docker(&["inspect", &container]).status.success(),
        "the container is gone"
    );
    // The next use starts it again, with its workspace.
    let again = env.json(&["computer", "create", "--agent", "a1"]);
    assert_eq!(again["state"], "running", "{again}");
    assert!(again.get("stop_reason").is_none(), "{again}");
    let out = env.run(&["computer", "exec", &id, "--", "cat", "kept.txt"]);
    out.ok();
    assert_eq!(out.stdout, "kept\n");
    drop(s.server);
}

#[test]
fn a_start_waiting_for_a_full_pool_takes_the_slot_of_an_idle_computer() {
    let Some(s) = computer_setup(
        2,
        &[
            "--max-computers",
            "1",
            "--computer-idle",
            "1h",
            "--computer-reclaim-after",
            "2s",
        ],
    ) else {
        return;
    };
    let env = &s.env;
    let first = env.json(&["computer", "create", "--agent", "a1"]);
    let first_id = first["id"].as_str().unwrap().to_string();
    let asked = Instant::now();
    // The pool of one is full: this start waits, then takes a1's slot once a1 sat idle
    // for the reclaim time.
    let second = env.background(
        &s.server,
        &["computer", "create", "--agent", "a2", "--json"],
    );
    let out = second.output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(second["state"], "running", "{second}");
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    let first = wait_for(Duration::from_secs(30), "a1 stopped", || {
        let c = show(env, &first_id);
        (c["state"] == "stopped").then_some(c)
    });
    assert_eq!(first["stop_reason"], "reclaimed for agent a2", "{first}");
    // a2 is in use now only by what it does; a1 comes back the same way when asked.
    let list = env.json(&["computer", "ls"]);
    let running: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "running")
        .collect();
    assert_eq!(running.len(), 1, "{list}");
}
