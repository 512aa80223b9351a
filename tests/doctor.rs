//! `yy doctor` (issue 24, item 5): ordered checks with a fix each, against a real control
//! plane, a registered Runner, the Docker engine and Hermes. A stopped engine is a socket
//! where nothing listens (the machine's dockerd keeps running), an unreachable Hermes a
//! loopback port where nothing listens, an unverified image the test image in a data home
//! where `yy image verify` never ran.

mod common;
mod computer_support;

use std::os::unix::fs::PermissionsExt;

use common::{Env, Out, Registered};
use serde_json::Value;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn doctor(env: &Env, reg: &Registered, data: &str, envs: &[(&str, &str)]) -> (Out, Value) {
    let out = env.run_with(
        &[
            "doctor",
            "--json",
            "--runner-config",
            reg.config.to_str().unwrap(),
            "--data-dir",
            data,
        ],
        "",
        envs,
    );
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}\n{}\n{}", out.stdout, out.stderr));
    (out, v)
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#}"))
}

#[track_caller]
fn assert_outcome(report: &Value, id: &str, outcome: &str) {
    let c = check(report, id);
    assert_eq!(c["outcome"], outcome, "{id}: {c:#}\nall: {report:#}");
}

#[track_caller]
fn assert_fix(report: &Value, id: &str, needle: &str) {
    let c = check(report, id);
    let fix = c["fix"].as_str().unwrap_or_default();
    assert!(fix.contains(needle), "{id}: fix {fix:?} lacks {needle:?}");
}

#[test]
fn doctor_names_a_stopped_engine_an_unreachable_hermes_and_an_unverified_image() {
    if !common::require_docker() {
        return;
    }
    let image = computer_support::test_image().id.clone();
    let env = Env::new();
    let server = env.bootstrap();
    let token_file = env.path("hermes-token");
    std::fs::write(&token_file, "doctor-test-token\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let hermes_port = free_port();
    let hermes_url = format!("http://127.0.0.1:{hermes_port}");
    let reg = env.register_runner(
        &server,
        "main",
        &[
            "--computer-image",
            &image,
            "--hermes-url",
            &hermes_url,
            "--hermes-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let data = env.path("runner-data");
    let data = data.to_str().unwrap();

    // A stopped engine: DOCKER_HOST names a socket nobody listens on.
    let nothing = env.path("no-engine.sock");
    let docker_host = format!("unix://{}", nothing.display());
    let (out, r) = doctor(&env, &reg, data, &[("DOCKER_HOST", &docker_host)]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("engine.reachable"), "{}", out.stderr);
    assert_eq!(r["ok"], false);
    for id in [
        "server.reachable",
        "tls.pin",
        "server.version",
        "clock.skew",
        "login.valid",
        "runner.config",
        "runner.token",
        "files.modes",
    ] {
        assert_outcome(&r, id, "ok");
    }
    let token = check(&r, "runner.token")["detail"].as_str().unwrap();
    assert!(
        token.contains(&reg.id) && token.contains("expires"),
        "{token}"
    );
    assert!(
        !out.stdout.contains(&reg.token),
        "the Runner token is shown"
    );
    assert_outcome(&r, "engine.reachable", "fail");
    let engine = check(&r, "engine.reachable")["detail"].as_str().unwrap();
    assert!(engine.contains(nothing.to_str().unwrap()), "{engine}");
    assert_fix(&r, "engine.reachable", "systemctl start docker");
    // What needs the engine cannot mean anything and is skipped.
    assert_outcome(&r, "image.present", "skipped");
    assert_outcome(&r, "image.verified", "skipped");
    // Hermes: nothing listens on its port.
    assert_outcome(&r, "hermes.reachable", "fail");
    let hermes = check(&r, "hermes.reachable")["detail"].as_str().unwrap();
    assert!(hermes.contains(&hermes_port.to_string()), "{hermes}");
    assert_fix(&r, "hermes.reachable", "hermes serve");
    assert_fix(&r, "hermes.reachable", "hermesURL");

    // The real engine: the image is there, and never verified in this data home.
    let (out, r) = doctor(&env, &reg, data, &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_outcome(&r, "engine.reachable", "ok");
    assert!(
        check(&r, "engine.reachable")["detail"]
            .as_str()
            .unwrap()
            .starts_with("docker "),
        "{r:#}"
    );
    assert_outcome(&r, "image.present", "ok");
    assert_outcome(&r, "image.verified", "fail");
    assert_fix(
        &r,
        "image.verified",
        &format!("yy image verify {image} --engine docker"),
    );
    assert_outcome(&r, "hermes.reachable", "fail");

    // The table: one line per check, then the fixes.
    let out = env.run_with(
        &[
            "doctor",
            "--runner-config",
            reg.config.to_str().unwrap(),
            "--data-dir",
            data,
        ],
        "",
        &[],
    );
    assert_eq!(out.code, 1);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("image.verified"))
        .unwrap();
    assert!(line.starts_with("FAIL"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("fix image.verified: yy image verify {image}")),
        "{}",
        out.stdout
    );
}

#[test]
fn doctor_passes_on_a_healthy_runner_host() {
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    if !common::require_docker() {
        return;
    }
    let image = computer_support::test_image().id.clone();
    let env = Env::new();
    let server = env.bootstrap();
    let home = env.path("hermes-home");
    common::hermes::write_config(&home, free_port(), &env.path("work"), "off", "");
    let command = format!("{} serve", hermes.display());
    let reg = env.register_runner(
        &server,
        "main",
        &[
            "--computer-image",
            &image,
            "--hermes-command",
            &command,
            "--hermes-home",
            home.to_str().unwrap(),
        ],
    );
    // The ladder keeps its record in this sandbox's data home, where doctor looks.
    env.run(&["image", "verify", &image]).ok();
    let data = env.path("runner-data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (out, r) = doctor(&env, &reg, data.to_str().unwrap(), &[]);
    assert_eq!(out.code, 0, "{}\n{r:#}", out.stderr);
    assert_eq!(r["ok"], true);
    for c in r["checks"].as_array().unwrap() {
        assert_eq!(c["outcome"], "ok", "{c:#}");
    }
    let model = check(&r, "hermes.model")["detail"].as_str().unwrap();
    assert!(model.contains("fake-model"), "{model}");
    assert!(!out.stdout.contains("sk-fake-test"), "the API key is shown");
    assert!(
        check(&r, "hermes.reachable")["detail"]
            .as_str()
            .unwrap()
            .contains("0.19"),
        "{r:#}"
    );

    // A data directory others can read is named with its chmod.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, r) = doctor(&env, &reg, data.to_str().unwrap(), &[]);
    assert_eq!(out.code, 1);
    assert_outcome(&r, "files.modes", "fail");
    assert_fix(&r, "files.modes", &format!("chmod 700 {}", data.display()));
}

#[test]
fn doctor_lists_its_checks_and_stops_at_an_unreachable_server() {
    let env = Env::new();
    let out = env.run(&["doctor", "--list-checks", "--json"]);
    out.ok();
    let list = out.json();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.first(), Some(&"server.reachable"));
    for id in [
        "tls.pin",
        "clock.skew",
        "login.valid",
        "runner.token",
        "engine.reachable",
        "image.verified",
        "hermes.reachable",
        "hermes.model",
        "browser.chromium",
        "disk.free",
        "files.modes",
    ] {
        assert!(ids.contains(&id), "{id} not in {ids:?}");
    }
    assert!(list.as_array().unwrap().iter().all(|c| c["title"] != ""));

    // Nothing listens: the checks after it are skipped, and the fix says what to start.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = env.run(&["doctor", "--json", "--server", &url]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let r = out.json();
    assert_outcome(&r, "server.reachable", "fail");
    assert_fix(&r, "server.reachable", "yy serve");
    for id in ["tls.pin", "server.version", "clock.skew", "login.valid"] {
        assert_outcome(&r, id, "skipped");
    }
}
