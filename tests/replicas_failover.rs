//! Replicas dying and relayed streams (issue 27): the Runner and the CLI move to a
//! surviving replica, over plain HTTP and over HTTPS with one pinned certificate; an
//! operator's shell crosses from the Runner's replica into the CLI's.

mod common;
mod computer_support;
mod replica_support;

use std::time::Duration;

use common::postgres::Cluster;
use common::{Env, Server};
use replica_support::{env_on, replicas, run_on};

/// The commands of `runner` with their states, read from the database.
fn command_states(env: &Env, runner: &str) -> std::collections::HashMap<String, String> {
    env.sql(&format!(
        "SELECT id, state FROM runner_commands WHERE runner_id = '{runner}'"
    ))
    .into_iter()
    .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
    .collect()
}

/// The Runner and the CLI name both replicas. kill -9 of the one the Runner uses, during
/// a stream of pings enqueued through the other: the Runner moves to the survivor, every
/// acknowledged ping is answered there (or, caught running at the kill, reported
/// uncertain and never run again), none runs twice, the survivor leads the once-only
/// work, and the CLI moves on by itself.
#[test]
fn the_runner_moves_to_the_surviving_replica_when_its_own_dies() {
    moves_when_its_replica_dies(false);
}

/// The same over HTTPS: both replicas present one self-signed certificate (the first's
/// `DATA_DIR/tls` copied into the second's), which the login and runner.json pin once.
#[test]
fn over_https_one_pinned_certificate_serves_every_replica() {
    moves_when_its_replica_dies(true);
}

fn moves_when_its_replica_dies(tls: bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let https: &[&str] = if tls { &["--tls", "self-signed"] } else { &[] };
    let mut a = Server::start_with(&env, &env.path("replica-a"), "127.0.0.1:0", https);
    if tls {
        let (from, to) = (env.path("replica-a/tls"), env.path("replica-b/tls"));
        std::fs::create_dir_all(&to).unwrap();
        for name in ["server.crt", "server.key"] {
            std::fs::copy(from.join(name), to.join(name)).unwrap();
        }
    }
    let b = Server::start_with(&env, &env.path("replica-b"), "127.0.0.1:0", https);
    assert_eq!(a.cert_sha256, b.cert_sha256);
    let mut login = vec![
        "login",
        &a.url,
        &b.url,
        "--username",
        "root",
        "--password-stdin",
    ];
    if let Some(pin) = &a.cert_sha256 {
        login.extend(["--cert-sha256", pin]);
    }
    env.run_with(&login, common::PASSWORD, &[]).ok();
    let reg = env.register_runner(&a, "main", &["--server-url", &b.url]);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    assert_eq!(
        config["serverURLs"],
        serde_json::json!([a.url, b.url]),
        "{config:#}"
    );
    // Each run of a command is logged with its id: a command run twice would show twice.
    let runner = env.start_runner_env(
        &reg,
        "runner",
        &[],
        &[("YY_LOG", "info,yy::runner::dispatch=debug")],
    );
    let first = env.wait_online(&reg.id, 0);

    // Pings enqueued through B, one after another, until told to stop.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let client =
            yy::client::Client::pinned(&b.url, Some(env.stored_token()), b.cert_sha256.as_deref())
                .unwrap();
        let (runner_id, acked, stop) = (reg.id.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ping = yy::api::machine::PingParams {
                hold_ms: 0,
                timeout_ms: None,
            };
            while !stop.load(Ordering::SeqCst) {
                let cmd = rt
                    .block_on(client.runner_ping(&runner_id, &ping))
                    .unwrap_or_else(|e| panic!("replica B stopped answering: {e}"));
                acked.lock().unwrap().push(cmd.id.to_string());
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let count = || acked.lock().unwrap().len();
    common::wait_for(Duration::from_secs(30), "100 pings acknowledged", || {
        (count() >= 100).then_some(())
    });
    let done_before = command_states(&env, &reg.id)
        .values()
        .filter(|s| *s == "done")
        .count();
    assert!(done_before > 0, "the Runner answers pings through A");
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let at_kill = count();
    common::wait_for(
        Duration::from_secs(30),
        "100 more pings acknowledged",
        || (count() >= at_kill + 100).then_some(()),
    );
    stop.store(true, Ordering::SeqCst);
    stream.join().unwrap();
    let acked = acked.lock().unwrap().clone();

    // The Runner connected to B in a new generation, and answers there.
    let second = env.wait_online(&reg.id, first);
    assert!(second > first);
    let states = common::wait_for(
        Duration::from_secs(60),
        "every acknowledged ping answered or uncertain",
        || {
            let states = command_states(&env, &reg.id);
            acked
                .iter()
                .all(|id| {
                    matches!(
                        states.get(id).map(String::as_str),
                        Some("done" | "uncertain")
                    )
                })
                .then_some(states)
        },
    );
    let uncertain: Vec<&String> = acked
        .iter()
        .filter(|id| states[*id] == "uncertain")
        .collect();
    // At most what was running on the Runner when A died (pings run one by one, a few at
    // a time).
    assert!(uncertain.len() <= 8, "uncertain: {uncertain:?}");
    let log = runner.log();
    assert!(
        log.contains("moving to another replica of the control plane"),
        "{log}"
    );
    for id in &acked {
        let runs = log
            .lines()
            .filter(|l| l.contains("running") && l.contains(&format!("command={id}")))
            .count();
        assert!(runs <= 1, "command {id} ran {runs} times:\n{log}");
        if states[id] == "done" {
            assert_eq!(runs, 1, "command {id} is done without a run:\n{log}");
        }
    }
    // The survivor leads; the CLI, whose login names A first, reaches B by itself.
    common::wait_for(Duration::from_secs(40), "the survivor leading", || {
        replicas(&env, &b).iter().any(|r| r.3 && r.2).then_some(())
    });
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(shown["online"], true, "{shown:#}");
    assert_eq!(shown["generation"], second);
}

/// `yy computer attach --control` through replica B while the Runner is connected to A,
/// both over HTTPS: A carries the Runner's leg of the shell relay on to B (pinning B's
/// certificate from its row), and the shell works both ways.
#[test]
fn an_operator_shell_through_one_replica_reaches_the_runner_on_the_other() {
    use std::io::Write;
    if !common::require_docker() {
        return;
    }
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let image = computer_support::test_image().id.clone();
    let env = env_on(&cluster);
    env.create_admin("root");
    // Over HTTPS, each with a certificate of its own: A pins B's, as B's row says.
    let https = ["--tls", "self-signed"];
    let a = Server::start_with(&env, &env.path("replica-a"), "127.0.0.1:0", &https);
    let b = Server::start_with(&env, &env.path("replica-b"), "127.0.0.1:0", &https);
    assert_ne!(a.cert_sha256, b.cert_sha256);
    env.login(&a, "root");
    let reg = env.register_runner(&a, "main", &["--computer-image", &image]);
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
    let (runner, _) = env.start_online(&reg, "runner", 0);
    let computer = run_on(
        &env,
        &b,
        &["computer", "create", "--agent", "box", "--json"],
    );
    computer.ok();
    let id = computer.json()["id"].as_str().unwrap().to_string();

    let mut attach = env
        .command(&["computer", "attach", &id, "--control"])
        .envs(replica_support::on(&env, &b))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::lines_of(attach.stdout.take().unwrap());
    let _err = common::lines_of(attach.stderr.take().unwrap());
    writeln!(attach.stdin.as_mut().unwrap(), "tty; echo \"SH$((6*7)):\"").unwrap();
    let mut printed = String::new();
    let answered = common::poll(Duration::from_secs(60), || {
        if let Ok(l) = out.recv_timeout(Duration::from_millis(200)) {
            printed.push_str(&l);
            printed.push('\n');
        }
        printed.contains("SH42:").then_some(())
    });
    let _ = attach.kill();
    let _ = attach.wait();
    assert!(
        answered.is_some(),
        "no answer from the shell: {printed}\nA: {}\nB: {}\nrunner: {}",
        a.log(),
        b.log(),
        runner.log()
    );
    assert!(printed.contains("/dev/pts/"), "a pty: {printed}");
    assert!(
        a.log()
            .contains("shell relay carried on to the replica holding it"),
        "{}",
        a.log()
    );
}
