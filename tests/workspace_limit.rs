//! A computer's workspace has a size limit the file system enforces (issue 23, finding 5):
//! the guest gets ENOSPC at its limit, the Runner carries on (its databases never share
//! the guest's space), `yy computer show` reports the usage, and a workspace made without
//! a limit moves into an image when the Runner gets one. Real control plane, Runner,
//! Docker and guest.

mod common;
mod computer_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Env, Registered, RunnerProc, Server, wait_for};

const MIB: u64 = 1 << 20;

struct Setup {
    env: Env,
    _server: Server,
    reg: Registered,
}

fn setup() -> Option<Setup> {
    if !common::require_docker() {
        return None;
    }
    let image = computer_support::test_image().id.clone();
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
    Some(Setup {
        env,
        _server: server,
        reg,
    })
}

fn is_mountpoint(dir: &Path) -> bool {
    let (Ok(here), Ok(up)) = (std::fs::metadata(dir), std::fs::metadata(dir.join(".."))) else {
        return false;
    };
    here.dev() != up.dev()
}

fn workspaces(env: &Env) -> PathBuf {
    env.path("runner-data-a").join("workspaces")
}

fn start(s: &Setup, limit: &str, after: i64) -> (RunnerProc, i64) {
    let runner = s
        .env
        .start_runner_with(&s.reg, "a", &["--workspace-limit", limit]);
    let generation = s.env.wait_online(&s.reg.id, after);
    (runner, generation)
}

fn create(env: &Env) -> String {
    let c = env.json(&["computer", "create", "--agent", "box"]);
    assert_eq!(c["state"], "running", "{c}");
    c["id"].as_str().unwrap().to_string()
}

/// Writes 64 MiB into a workspace limited to 32 MiB: the guest's dd fails with ENOSPC.
fn fill(env: &Env, id: &str) {
    let out = env.computer_sh(id, "dd if=/dev/zero of=big bs=1M count=64");
    assert_ne!(out.code, 0, "{out:#?}");
    assert!(
        out.stderr.contains("No space left on device"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_full_workspace_stops_the_guest_not_the_runner() {
    let Some(s) = setup() else { return };
    let env = &s.env;
    let (mut runner, g1) = start(&s, "32MiB", 0);
    let id = create(env);
    let ws = workspaces(env);
    let img = ws.join(format!("{id}.img"));
    assert!(
        is_mountpoint(&ws.join(&id)),
        "the workspace is its image, mounted"
    );
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 32 * MIB);

    env.computer_sh(&id, "echo kept > keep").ok();
    fill(env, &id);

    // The Runner carries on: the next command runs and is recorded, the computer runs.
    let out = env.run(&["computer", "exec", &id, "--", "cat", "keep"]);
    out.ok();
    assert_eq!(out.stdout, "kept\n");
    let shown = env.json(&["computer", "show", &id]);
    assert_eq!(shown["state"], "running", "{shown}");
    let usage = &shown["workspace_usage"];
    assert_eq!(usage["limit_bytes"], 32 * MIB, "{shown}");
    let used = usage["used_bytes"].as_u64().unwrap();
    let free = usage["free_bytes"].as_u64().unwrap();
    assert!(used > 24 * MIB && used <= 32 * MIB, "{usage}");
    assert!(free < MIB, "{usage}");
    assert!(usage["reported_at"].is_string(), "{usage}");
    let table = env.run(&["computer", "show", &id]);
    table.ok();
    assert!(
        table.stdout.contains("used of 32.0 MiB"),
        "{}",
        table.stdout
    );
    assert!(!runner.log().contains("disk is full"), "{}", runner.log());

    // Stopped, the image gives its free blocks back and is unmounted; the data stays.
    env.run(&["computer", "exec", &id, "--", "rm", "big"]).ok();
    env.run(&["computer", "stop", &id]).ok();
    wait_for(Duration::from_secs(60), "the computer stopped", || {
        (env.json(&["computer", "show", &id])["state"] == "stopped").then_some(())
    });
    assert!(!is_mountpoint(&ws.join(&id)));
    let allocated = std::fs::metadata(&img).unwrap().blocks() * 512;
    assert!(allocated < 16 * MIB, "{allocated} bytes still allocated");

    // A backup reads the files of the unmounted image, never the image itself.
    runner.kill9();
    let rd = env.path("runner-data-a");
    let archive = env.path("runner.yyb");
    env.run(&[
        "runner",
        "backup",
        "--data-dir",
        rd.to_str().unwrap(),
        "-o",
        archive.to_str().unwrap(),
    ])
    .ok();
    assert!(
        !is_mountpoint(&ws.join(&id)),
        "unmounted again after the backup"
    );
    let listed = env.json(&["backup", "verify", archive.to_str().unwrap()]);
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&format!("workspaces/{id}/keep").as_str()),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.ends_with(".img")), "{paths:?}");
    let (runner, _) = start(&s, "32MiB", g1);
    wait_for(Duration::from_secs(60), "the old lease ended", || {
        (env.json(&["computer", "show", &id])["state"] == "stopped").then_some(())
    });
    let again = create(env);
    assert_eq!(again, id);
    let out = env.run(&["computer", "exec", &id, "--", "cat", "keep"]);
    out.ok();
    assert_eq!(out.stdout, "kept\n");
    // While it runs, the whole image is allocated: the guest never takes host space.
    let allocated = std::fs::metadata(&img).unwrap().blocks() * 512;
    assert!(allocated >= 32 * MIB, "{allocated} bytes allocated");

    env.run(&["computer", "rm", &id, "--yes"]).ok();
    assert!(!is_mountpoint(&ws.join(&id)));
    assert!(!img.exists() && !ws.join(&id).exists());
    drop(runner);
}

#[test]
fn a_workspace_made_without_a_limit_moves_into_an_image() {
    let Some(s) = setup() else { return };
    let env = &s.env;
    let (mut runner, g1) = start(&s, "0", 0);
    let id = create(env);
    let ws = workspaces(env);
    assert!(!is_mountpoint(&ws.join(&id)));
    assert!(!ws.join(format!("{id}.img")).exists());
    env.computer_sh(
        &id,
        "mkdir -p src && echo old > src/note && ln -s src/note link",
    )
    .ok();
    let shown = env.json(&["computer", "show", &id]);
    assert!(shown["workspace_usage"]["limit_bytes"].is_null(), "{shown}");
    assert!(runner.log().contains("no size limit"), "{}", runner.log());
    env.run(&["computer", "stop", &id]).ok();
    runner.kill9();

    let (_runner, _) = start(&s, "32MiB", g1);
    wait_for(Duration::from_secs(60), "the old lease ended", || {
        (env.json(&["computer", "show", &id])["state"] == "stopped").then_some(())
    });
    create(env);
    assert!(is_mountpoint(&ws.join(&id)), "moved into an image");
    let out = env.run(&["computer", "exec", &id, "--", "sh", "-c", "cat link; ls -A"]);
    out.ok();
    assert_eq!(out.stdout, "old\nlink\nsrc\n");
    fill(env, &id);
    let names: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, vec![id.clone(), format!("{id}.img")], "no leftovers");
    env.run(&["computer", "rm", &id, "--yes"]).ok();
}
