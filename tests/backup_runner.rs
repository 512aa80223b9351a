//! Runner backup and restore, end to end: a real control plane and Runner, real receipts,
//! workspaces whose roots must keep their inodes, the maintenance lock, and (with Docker)
//! a computer stopped and confirmed before the backup.

mod common;
mod computer_support;

use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{Bg, Env, wait_for};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
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
fn a_runner_restore_brings_back_receipts_and_workspaces_in_their_roots() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &[]);
    let mut runner = env.start_runner(&reg, "a");
    env.wait_online(&reg.id, 0);
    let rd = env.path("runner-data-a");

    // While the Runner runs, maintenance is refused.
    let archive = env.path("runner.yyb");
    env.run(&["runner", "backup", "--data-dir", s(&rd), "-o", s(&archive)])
        .fails(6, "a yy runner run is using");

    // A command is running when the Runner dies: its receipt has no outcome.
    let ping = env
        .command(&["runner", "ping", &reg.id, "--hold", "30s", "--json"])
        .env("YY_SERVER", &server.url)
        .env("YY_TOKEN", env.stored_token())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ping = Bg(Some(ping));
    let cmd = newest(&env, &reg.id);
    let id = cmd["id"].as_str().unwrap().to_string();
    env.wait_state(&reg.id, &id, "running");
    runner.kill9();

    // Workspaces as computers leave them.
    let root = rd.join("workspaces/c-1");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("notes.md"), "kept\n").unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
    let out = env.run(&[
        "runner",
        "backup",
        "--data-dir",
        s(&rd),
        "-o",
        s(&archive),
        "--json",
    ]);
    out.ok();
    let made = out.json();
    assert_eq!(made["kind"], "runner");
    let listed = env.json(&["backup", "verify", s(&archive)]);
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for p in [
        "receipts.db",
        "workspaces/c-1/notes.md",
        "workspaces/c-1/src/main.rs",
    ] {
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    assert!(!paths.contains(&"runner.lock"));

    // The wrong kind of archive is refused by name.
    env.run(&["restore", s(&archive), "--data-dir", s(&env.path("x"))])
        .fails(2, "yy runner restore");

    // Lose the receipts and change the workspace.
    let inode = std::fs::metadata(&root).unwrap().ino();
    for f in ["receipts.db", "receipts.db-wal", "receipts.db-shm"] {
        let _ = std::fs::remove_file(rd.join(f));
    }
    std::fs::write(root.join("notes.md"), "changed\n").unwrap();
    std::fs::write(root.join("junk"), "junk\n").unwrap();

    let out = env.run(&[
        "runner",
        "restore",
        s(&archive),
        "--data-dir",
        s(&rd),
        "--json",
    ]);
    out.ok();
    let restored = out.json();
    assert_eq!(
        std::fs::metadata(&root).unwrap().ino(),
        inode,
        "the workspace root keeps its inode (bind mounts stay valid)"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.md")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert!(!root.join("junk").exists());
    let old = Path::new(restored["old_copy"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(old.join("workspaces/c-1/junk")).unwrap(),
        "junk\n"
    );

    // The restarted Runner finds the receipt: the command is uncertain, never run again.
    let runner = env.start_runner(&reg, "a");
    let settled = env.wait_state(&reg.id, &id, "uncertain");
    assert!(
        settled["error"]
            .as_str()
            .unwrap()
            .contains("will not run again"),
        "{settled}"
    );
    // `uncertain` is final: the command is never leased again, and no other came.
    let cmds = env.json(&["runner", "commands", &reg.id]);
    assert_eq!(cmds.as_array().unwrap().len(), 1);
    assert_eq!(cmds[0]["state"], "uncertain");
    drop(runner);
}

#[test]
fn the_maintenance_lock_keeps_a_runner_from_starting() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &[]);
    // Maintenance holds the lock beside the data directory exclusively (as `yy runner
    // backup` and `yy runner restore` do for their whole run).
    let lock = std::fs::File::create(env.path(".runner-data-a.lock")).unwrap();
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let mut runner = env.start_runner(&reg, "a");
    assert_eq!(runner.wait_exit(Duration::from_secs(15)), 6);
    assert!(
        runner.log().contains("being restored or maintained"),
        "{}",
        runner.log()
    );
    drop(lock);
    let _runner = env.start_runner(&reg, "a");
    env.wait_online(&reg.id, 0);
}

#[test]
fn a_runner_backup_stops_its_computers_and_the_workspace_comes_back() {
    if !common::require_docker() {
        return;
    }
    let image = computer_support::test_image().id.clone();
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &image]);
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
    let mut runner = env.start_runner(&reg, "a");
    let g1 = env.wait_online(&reg.id, 0);
    let c = env.json(&["computer", "create", "--agent", "a1"]);
    let computer = c["id"].as_str().unwrap().to_string();
    let container = c["container_id"].as_str().unwrap().to_string();
    env.computer_sh(&computer, "echo saved > note.txt").ok();
    // The Runner goes away and leaves its computer running.
    runner.kill9();
    let inspect =
        computer_support::docker(&["inspect", "--format", "{{.State.Running}}", &container]);
    assert_eq!(String::from_utf8_lossy(&inspect.stdout).trim(), "true");

    let rd = env.path("runner-data-a");
    let archive = env.path("runner.yyb");
    let made = env.json(&["runner", "backup", "--data-dir", s(&rd), "-o", s(&archive)]);
    assert_eq!(made["stopped_computers"][0], container.as_str(), "{made}");
    assert!(
        !computer_support::docker(&["inspect", &container])
            .status
            .success(),
        "the computer's container is gone"
    );
    let note = rd.join("workspaces").join(&computer).join("note.txt");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "saved\n");
    std::fs::remove_file(&note).unwrap();
    env.run(&["runner", "restore", s(&archive), "--data-dir", s(&rd)])
        .ok();
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "saved\n");
    let meta = std::fs::metadata(&note).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (1000, 1000),
        "the guest still owns it"
    );

    // A new Runner recreates the computer on the restored workspace.
    let _runner = env.start_runner(&reg, "a");
    env.wait_online(&reg.id, g1);
    wait_for(Duration::from_secs(20), "the old lease ended", || {
        (env.json(&["computer", "show", &computer])["state"] == "stopped").then_some(())
    });
    let again = env.json(&["computer", "create", "--agent", "a1"]);
    let id = again["id"].as_str().unwrap();
    let out = env.run(&["computer", "exec", id, "--", "cat", "note.txt"]);
    out.ok();
    assert_eq!(out.stdout, "saved\n");
    env.run(&["computer", "rm", id, "--yes"]).ok();
}
