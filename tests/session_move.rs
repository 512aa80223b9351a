//! A session that moves to another Runner (issue 22, item 5; seed 000: 历史附件路径需要重新
//! 核实): the files attached earlier in it are put into the new computer again, each
//! downloaded and checked once more, so the paths its history names hold there too. Real
//! control plane, two Runners, Docker, Hermes's Worker and a scripted model.

mod common;
mod computer_support;

use common::hermes::worker_setup;
use common::{configure, session_of};
use computer_support::test_image;
use serde_json::json;

#[test]
fn a_session_on_another_runner_finds_its_attachments_again() {
    let Some(mut s) = worker_setup(
        || test_image().id.clone(),
        json!({
            "steps": [],
            "by_prompt": [
                { "match": "hello", "steps": [ { "text": "got it" } ] },
                { "match": "again", "steps": [
                    { "tool_call": { "name": "terminal", "arguments": { "command": "cat attachments/notes.txt" } } },
                    { "text": "read it" }
                ] }
            ]
        }),
    ) else {
        return;
    };
    let file = s.env.path("notes.txt");
    std::fs::write(&file, "first line\nsecond line\n").unwrap();
    let chat = s
        .env
        .run(&["chat", "box", "hello", "--attach", file.to_str().unwrap()]);
    chat.ok();
    let session = session_of(&chat);

    // Runner a goes away for good; Runner b takes over the source.
    s.runner.kill9();
    s.env.run(&["runner", "disable", &s.reg.id, "--yes"]).ok();
    std::fs::remove_file(&s.reg.config).unwrap();
    let image = test_image().id.clone();
    let b = s
        .env
        .register_runner(&s.server, "main", &["--computer-image", &image]);
    let python = common::require_hermes()
        .unwrap()
        .parent()
        .unwrap()
        .join("python");
    configure(
        &b,
        json!({ "hermesHome": s.env.path("hermes-home"), "workerPython": python }),
    );
    let _runner_b = s.env.start_runner_with(&b, "b", &[]);
    s.env.wait_online(&b.id, 0);

    s.env
        .run(&["chat", "box", "again", "--session", &session])
        .ok();
    let asked: Vec<serde_json::Value> = s
        .model
        .steps()
        .into_iter()
        .filter(|r| r["step"].as_str().is_some_and(|k| k.starts_with("again#")))
        .collect();
    let first = asked[0]["body"]["messages"].to_string();
    assert!(
        first.contains("/workspace/attachments/notes.txt"),
        "{first}"
    );
    let read = asked[1]["body"]["messages"].to_string();
    assert!(
        read.contains("first line") && read.contains("second line"),
        "{read}"
    );
    // On Runner b, byte for byte.
    let computer = s.env.json(&["computer", "list"])[0].clone();
    assert_eq!(computer["runner_id"], b.id.as_str(), "{computer}");
    let out = s.env.run(&[
        "computer",
        "exec",
        computer["id"].as_str().unwrap(),
        "--",
        "cat",
        "attachments/notes.txt",
    ]);
    out.ok();
    assert_eq!(out.stdout, "first line\nsecond line\n");
}
