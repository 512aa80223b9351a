//! Runner token rotation end to end: real `yy serve`, real `yy runner run` processes,
//! loopback HTTP. The kill -9 points are made deterministic with the test-only
//! `YY_TEST_ROTATION_PAUSE` knob (src/runner/rotate.rs).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{Env, Registered, RunnerProc, STATUS, Server, machine, wait_for};

const NEW_INSTANCE: &str = "00000000-0000-4000-8000-000000000002";

/// A control plane started with `extra` flags, `root` logged in, Runner `main` registered.
fn setup(extra: &[&str]) -> (Env, Server, Registered) {
    let env = Env::new();
    env.create_admin("root");
    let server = Server::start_with(&env, &env.data_dir(), "127.0.0.1:0", extra);
    env.login(&server, "root");
    let reg = env.register_runner(&server, "main", &[]);
    (env, server, reg)
}

/// `yy runner run` for `reg` with data directory `name`, stopping at the rotation point
/// `pause` (`before-save`, `after-save`) when given.
fn start_runner(env: &Env, reg: &Registered, name: &str, pause: Option<&str>) -> RunnerProc {
    let envs: Vec<(&str, &str)> = pause
        .map(|p| ("YY_TEST_ROTATION_PAUSE", p))
        .into_iter()
        .collect();
    env.start_runner_env(reg, name, &[], &envs)
}

/// The token runner.json holds now.
fn saved_token(reg: &Registered) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    v["token"].as_str().unwrap().to_string()
}

/// The status code of a connect with `token` (a new instance that takes over from a
/// running one, as `--replace` does).
fn connect_status(server: &Server, token: &str) -> (u16, serde_json::Value) {
    machine(
        server,
        "/runner/v1/connect",
        token,
        NEW_INSTANCE,
        None,
        &[("yy-replace", "1")],
        STATUS,
    )
}

/// Waits until runner.json holds a token other than `old` and the control plane has
/// promoted it (no rotation pending or requested).
#[track_caller]
fn wait_renewed(env: &Env, reg: &Registered, old: &str) -> String {
    wait_for(
        Duration::from_secs(20),
        "a renewed token saved and in use",
        || {
            let token = saved_token(reg);
            let r = env.json(&["runner", "show", &reg.id]);
            (token != old && r["token_rotation"].is_null()).then_some(token)
        },
    )
}

#[test]
fn a_rotated_token_works_and_the_old_one_gets_401() {
    let (env, server, reg) = setup(&[]);
    let mut runner = start_runner(&env, &reg, "a", None);
    let generation = env.wait_online(&reg.id, 0);
    let before = env.json(&["runner", "show", &reg.id]);
    assert!(before["token_expires_at"].is_string(), "{before}");
    assert!(before["token_rotation"].is_null(), "{before}");
    let shown = env.run(&["runner", "show", &reg.id]);
    shown.ok();
    assert!(
        shown.stdout.contains("issued") && shown.stdout.contains("expires"),
        "{}",
        shown.stdout
    );

    let out = env.run(&["runner", "rotate-token", &reg.id]);
    out.ok();
    assert!(out.stderr.contains("at its next contact"), "{}", out.stderr);
    let new = wait_renewed(&env, &reg, &reg.token);
    let mode = std::fs::metadata(&reg.config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "runner.json stays private");
    // The same connection carried on: no reconnect was needed for the swap.
    let after = env.json(&["runner", "show", &reg.id]);
    assert_eq!(after["generation"].as_i64(), Some(generation), "{after}");
    assert_eq!(after["online"], true);
    assert_ne!(after["token_issued_at"], serde_json::Value::Null);
    // It still works: a ping round trip through the renewed connection.
    env.run(&["runner", "ping", &reg.id]).ok();
    assert!(
        runner.log().contains("runner token renewed and saved"),
        "{}",
        runner.log()
    );

    let (status, body) = connect_status(&server, &reg.token);
    assert_eq!(
        status, 401,
        "the old token is dead once the new one was used: {body}"
    );
    assert_eq!(body["error"]["code"], "unknown_runner");
    runner.kill9();
    let (status, body) = connect_status(&server, &new);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_runner_renews_by_itself_and_one_away_past_the_lifetime_is_refused() {
    // Renewal at 75 %: every 4.5 s.
    let (env, server, reg) = setup(&["--runner-token-lifetime", "6s"]);
    let mut runner = start_runner(&env, &reg, "a", None);
    env.wait_online(&reg.id, 0);
    let first = wait_renewed(&env, &reg, &reg.token);
    let second = wait_renewed(&env, &reg, &first);
    assert_ne!(first, second);
    assert_eq!(connect_status(&server, &reg.token).0, 401);
    assert_eq!(connect_status(&server, &first).0, 401);
    // Stopped for longer than the lifetime: the saved token expired.
    runner.kill9();
    let saved = saved_token(&reg);
    wait_for(Duration::from_secs(15), "the saved token to expire", || {
        let (status, body) = connect_status(&server, &saved);
        (status == 401 && body["error"]["code"] == "token_expired").then_some(())
    });
    let mut late = start_runner(&env, &reg, "a", None);
    assert_eq!(late.wait_exit(Duration::from_secs(15)), 4, "{}", late.log());
    assert!(
        late.log().contains("register the Runner again"),
        "{}",
        late.log()
    );
}

#[test]
fn kill_9_mid_rotation_never_locks_the_runner_out() {
    let (env, server, reg) = setup(&[]);

    // Killed after the control plane issued a token, before the Runner saved it.
    let mut runner = start_runner(&env, &reg, "a", Some("before-save"));
    let g1 = env.wait_online(&reg.id, 0);
    env.run(&["runner", "rotate-token", &reg.id]).ok();
    wait_for(Duration::from_secs(20), "the pause before saving", || {
        runner
            .log()
            .contains("stopping here until killed")
            .then_some(())
    });
    let r = env.json(&["runner", "show", &reg.id]);
    assert_eq!(r["token_rotation"], "pending", "{r}");
    runner.kill9();
    assert_eq!(saved_token(&reg), reg.token, "nothing was saved");
    let runner = start_runner(&env, &reg, "a", None);
    let g2 = env.wait_online(&reg.id, g1);
    // The request still stands: the restarted Runner renews with its old token.
    let first = wait_renewed(&env, &reg, &reg.token);
    drop(runner);

    // Killed after it saved the new token, before its first use.
    let mut runner = start_runner(&env, &reg, "a", Some("after-save"));
    let g3 = env.wait_online(&reg.id, g2);
    env.run(&["runner", "rotate-token", &reg.id]).ok();
    wait_for(Duration::from_secs(20), "the pause after saving", || {
        runner
            .log()
            .contains("stopping here until killed")
            .then_some(())
    });
    let saved = saved_token(&reg);
    assert_ne!(saved, first, "the new token is saved");
    let r = env.json(&["runner", "show", &reg.id]);
    assert_eq!(r["token_rotation"], "pending", "not used yet: {r}");
    runner.kill9();
    let _runner = start_runner(&env, &reg, "a", None);
    env.wait_online(&reg.id, g3);
    let r = env.json(&["runner", "show", &reg.id]);
    assert!(
        r["token_rotation"].is_null(),
        "promoted by its first use: {r}"
    );
    assert_eq!(saved_token(&reg), saved);
    assert_eq!(
        connect_status(&server, &first).0,
        401,
        "the old one is dead"
    );
}

#[test]
fn rotate_token_now_revokes_at_once_and_the_runner_must_be_registered_again() {
    let (env, server, reg) = setup(&[]);
    let mut runner = start_runner(&env, &reg, "a", None);
    env.wait_online(&reg.id, 0);
    env.run(&["runner", "rotate-token", &reg.id, "--now"])
        .fails(2, "--yes");
    let out = env.run(&["runner", "rotate-token", &reg.id, "--now", "--yes"]);
    out.ok();
    assert!(out.stderr.contains("register it again"), "{}", out.stderr);
    assert_eq!(
        runner.wait_exit(Duration::from_secs(10)),
        4,
        "{}",
        runner.log()
    );
    let (status, _) = connect_status(&server, &reg.token);
    assert!(status == 401 || status == 403, "{status}");
    let r = env.json(&["runner", "show", &reg.id]);
    assert_eq!(r["state"], "disabled");
    // A new registration of the source works.
    let new = env.register_runner(&server, "main", &["--force"]);
    assert_eq!(connect_status(&server, &new.token).0, 200);
}
