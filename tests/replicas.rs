//! Several `yy serve` replicas on one PostgreSQL database (issue 27): the CLI and the Runner
//! on different replicas, on a real throw-away cluster.

mod common;
mod computer_support;

use std::time::{Duration, Instant};

use common::postgres::Cluster;
use common::{Env, Server};

/// A sandbox whose control planes all use the cluster's database `yy`.
fn env_on(cluster: &Cluster) -> Env {
    let mut env = Env::new();
    env.envs.retain(|(k, _)| k != "YY_DATABASE");
    env.envs.push(("YY_DATABASE".into(), cluster.url()));
    env
}

/// `yy ARGS` against `server` with the stored login's token.
fn run_on(env: &Env, server: &Server, args: &[&str]) -> common::Out {
    let token = env.stored_token();
    env.run_with(
        args,
        "",
        &[
            ("YY_SERVER", server.url.as_str()),
            ("YY_TOKEN", token.as_str()),
        ],
    )
}

#[test]
fn commands_enqueued_through_one_replica_reach_the_runner_polling_the_other() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let a = Server::start(&env, &env.path("replica-a"));
    let b = Server::start(&env, &env.path("replica-b"));
    env.login(&a, "root");
    let reg = env.register_runner(&a, "main", &[]);
    let (_runner, _) = env.start_online(&reg, "runner", 0);

    // The Runner long-polls replica A. Each ping is enqueued through B, and B waits for
    // its outcome: A must wake for B's command, and B for A's outcome. Without the
    // wake-ups the long-poll would only look again after its 25 s.
    for round in 0..5 {
        let began = Instant::now();
        let out = run_on(&env, &b, &["runner", "ping", &reg.id, "--json"]);
        out.ok();
        let took = began.elapsed();
        assert_eq!(
            out.json()["summary"]["answered"],
            1,
            "round {round}: {out:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "round {round}: a ping through the other replica took {took:?}"
        );
    }
    // Both replicas show the same Runner online, and the same commands.
    let on_a = run_on(&env, &a, &["runner", "show", &reg.id, "--json"]).json();
    let on_b = run_on(&env, &b, &["runner", "show", &reg.id, "--json"]).json();
    assert_eq!(on_a["online"], true, "{on_a:#}");
    assert_eq!(on_b["online"], true, "{on_b:#}");
    assert_eq!(on_a["generation"], on_b["generation"]);
}

/// The replicas `yy status --json` lists through `server`, as (id, state, leads, this).
fn replicas(env: &Env, server: &Server) -> Vec<(String, String, bool, bool)> {
    let status = run_on(env, server, &["status", "--json"]).json();
    status["replicas"]
        .as_array()
        .unwrap_or_else(|| panic!("no replicas in {status:#}"))
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
                r["leads"].as_bool().unwrap(),
                r["this"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn replicas_are_listed_one_leads_and_the_lead_moves_when_it_dies() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let mut servers = vec![
        Server::start(&env, &env.path("replica-a")),
        Server::start(&env, &env.path("replica-b")),
    ];
    env.login(&servers[0], "root");
    // Both heartbeat within 5 s; one takes the lead within 2 s of starting.
    let listed = common::wait_for(Duration::from_secs(20), "two replicas, one leading", || {
        let r = replicas(&env, &servers[0]);
        (r.len() == 2 && r.iter().all(|x| x.1 == "up") && r.iter().filter(|x| x.2).count() == 1)
            .then_some(r)
    });
    assert_eq!(listed.iter().filter(|x| x.3).count(), 1, "{listed:?}");
    let leader = listed.iter().position(|x| x.2).unwrap();
    // Which server is it? The one whose own row says `this` when asked.
    let leader_server = (0..2)
        .find(|&i| {
            replicas(&env, &servers[i])
                .iter()
                .any(|x| x.3 && x.0 == listed[leader].0)
        })
        .unwrap();
    let dead = listed[leader].0.clone();
    let mut killed = servers.remove(leader_server);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let survivor = &servers[0];
    // PostgreSQL releases the dead one's lock with its connection: the survivor leads
    // within a few seconds, and the dead one is gone after three missed heartbeats.
    let after = common::wait_for(
        Duration::from_secs(40),
        "the survivor leading, the other gone",
        || {
            let r = replicas(&env, survivor);
            let gone = r.iter().any(|x| x.0 == dead && x.1 == "gone");
            let leads = r.iter().any(|x| x.3 && x.2);
            (gone && leads).then_some(r)
        },
    );
    assert_eq!(
        after.iter().filter(|x| x.2 && x.1 == "up").count(),
        1,
        "{after:?}"
    );
}

#[test]
fn the_database_away_for_10_s_gives_503_and_loses_nothing() {
    let Some(mut cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let server = Server::start(&env, &env.path("replica-a"));
    env.login(&server, "root");
    let reg = env.register_runner(&server, "main", &[]);
    let (_runner, _) = env.start_online(&reg, "runner", 0);
    let before = env.json(&["runner", "ping", &reg.id, "--count", "3"]);
    assert_eq!(before["summary"]["answered"], 3, "{before:#}");

    // Down for 10 s (stopped at once, as a crash would) while the CLI asks: it is told the
    // database is out of reach, and the server keeps running.
    let down = std::thread::spawn(move || {
        cluster.restart_after(Duration::from_secs(10));
        cluster
    });
    std::thread::sleep(Duration::from_secs(2));
    let refused = env.run(&["runner", "list", "--json"]);
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(refused.stderr.contains("out of reach"), "{refused:?}");
    let _cluster = down.join().unwrap();

    // Back: the server connects again, the Runner's next long-poll works, and every
    // command acknowledged before is still there, answered.
    let after = common::wait_for(Duration::from_secs(60), "pings answered again", || {
        let out = env.run(&["runner", "ping", &reg.id, "--json"]);
        (out.code == 0).then(|| out.json())
    });
    assert_eq!(after["summary"]["answered"], 1, "{after:#}");
    let commands = env.json(&["runner", "commands", &reg.id]);
    let done = commands
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "done")
        .count();
    assert!(
        done >= 4,
        "the 3 pings before and the one after: {commands:#}"
    );
}

#[test]
fn an_artifact_fetched_through_one_replica_is_served_by_the_other_from_the_shared_blob_dir() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let blobs = env.path("shared-blobs");
    let blob_dir = ["--blob-dir", blobs.to_str().unwrap()];
    let a = Server::start_with(&env, &env.path("replica-a"), "127.0.0.1:0", &blob_dir);
    let b = Server::start_with(&env, &env.path("replica-b"), "127.0.0.1:0", &blob_dir);
    let log = b.log();
    assert!(
        log.contains(&format!(
            "artifact bytes are kept in files in {}",
            blobs.display()
        )),
        "{log}"
    );
    env.login(&a, "root");
    let root = env.path("roots");
    std::fs::create_dir(&root).unwrap();
    let file = root.join("report.txt");
    std::fs::write(&file, b"made on the runner's host\n").unwrap();
    let reg = env.register_runner(&a, "main", &["--artifact-root", root.to_str().unwrap()]);
    let (_runner, _) = env.start_online(&reg, "runner", 0);
    let fetched = env.path("fetched.txt");
    env.run(&[
        "runner",
        "fetch",
        &reg.id,
        file.to_str().unwrap(),
        "-o",
        fetched.to_str().unwrap(),
    ])
    .ok();
    let listed = run_on(&env, &b, &["artifact", "list", "--json"]).json();
    let id = listed[0]["id"].as_str().unwrap().to_string();
    let again = env.path("again.txt");
    run_on(
        &env,
        &b,
        &["artifact", "get", &id, "-o", again.to_str().unwrap()],
    )
    .ok();
    assert_eq!(
        std::fs::read(&again).unwrap(),
        b"made on the runner's host\n"
    );
    // With --blob-dir the bytes are files there, none in the database.
    assert!(blobs.join(&id).exists());
    let rows =
        common::postgres::simple_query(&cluster.url(), "SELECT count(*) FROM artifact_chunks");
    assert_eq!(rows, [[Some("0".to_string())]]);
}

/// Without --blob-dir the bytes are kept in the database: a file the Runner on replica A
/// uploads is fetched (followed while it uploads) and downloaded again through replica B
/// byte-identical, with nothing shared but the database, and its chunks go with the
/// artifact when the retention removes it.
#[test]
fn an_artifact_fetched_through_one_replica_is_served_by_the_other_from_the_database() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    // A fetched file stays for the retention at most: 30 s here, to see it go.
    let retention = ["--retention", "30s"];
    let a = Server::start_with(&env, &env.path("replica-a"), "127.0.0.1:0", &retention);
    let b = Server::start_with(&env, &env.path("replica-b"), "127.0.0.1:0", &retention);
    for server in [&a, &b] {
        let log = server.log();
        assert!(
            log.contains("artifact bytes are kept in the database"),
            "{log}"
        );
        assert!(!log.contains("cannot serve"), "{log}");
    }
    env.login(&a, "root");
    let root = env.path("roots");
    std::fs::create_dir(&root).unwrap();
    let file = root.join("report.bin");
    // More than one chunk (the Runner sends 4 MiB ones), not a multiple of it.
    let data: Vec<u8> = (0..5 * 1024 * 1024 + 17)
        .map(|_| rand::random::<u8>())
        .collect();
    std::fs::write(&file, &data).unwrap();
    let reg = env.register_runner(&a, "main", &["--artifact-root", root.to_str().unwrap()]);
    let (_runner, _) = env.start_online(&reg, "runner", 0);
    // Fetched through B while the Runner uploads through A: the CLI follows the upload's
    // chunks as B finds them in the database.
    let fetched = env.path("fetched.bin");
    run_on(
        &env,
        &b,
        &[
            "runner",
            "fetch",
            &reg.id,
            file.to_str().unwrap(),
            "-o",
            fetched.to_str().unwrap(),
        ],
    )
    .ok();
    assert!(
        std::fs::read(&fetched).unwrap() == data,
        "fetched through B"
    );
    let listed = run_on(&env, &b, &["artifact", "list", "--json"]).json();
    let id = listed[0]["id"].as_str().unwrap().to_string();
    let again = env.path("again.bin");
    run_on(
        &env,
        &b,
        &["artifact", "get", &id, "-o", again.to_str().unwrap()],
    )
    .ok();
    assert!(
        std::fs::read(&again).unwrap() == data,
        "downloaded through B"
    );
    // In the database, as two chunks; no replica has a file of it.
    let chunks = |id: &str| {
        common::postgres::simple_query(
            &cluster.url(),
            &format!(
                "SELECT count(*), coalesce(sum(length(data)), 0) FROM artifact_chunks WHERE artifact_id = '{id}'"
            ),
        )
    };
    let size = data.len().to_string();
    assert_eq!(chunks(&id), [[Some("2".to_string()), Some(size)]]);
    let status = run_on(&env, &b, &["status", "--json"]).json();
    assert_eq!(status["artifacts"], "database", "{status:#}");
    for replica in ["replica-a", "replica-b"] {
        let dir = env.path(replica).join("artifacts");
        assert!(
            std::fs::read_dir(&dir).map_or(0, |d| d.count()) == 0,
            "{replica} keeps artifact files"
        );
    }

    // The retention removes the artifact, and its chunks with it.
    common::wait_for(Duration::from_secs(90), "the artifact removed", || {
        let shown = run_on(&env, &b, &["artifact", "show", &id]);
        (shown.code != 0).then_some(())
    });
    assert_eq!(
        chunks(&id),
        [[Some("0".to_string()), Some("0".to_string())]]
    );
    let left =
        common::postgres::simple_query(&cluster.url(), "SELECT count(*) FROM artifact_chunks");
    assert_eq!(left, [[Some("0".to_string())]]);
}

/// Chat with the CLI on replica B and the Runner (with its Hermes and the scripted model)
/// on replica A: the turn streams to the CLI through B and ends there.
#[test]
fn a_chat_through_one_replica_streams_from_the_runner_on_the_other() {
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let a = Server::start(&env, &env.path("replica-a"));
    let b = Server::start(&env, &env.path("replica-b"));
    env.login(&a, "root");
    let model = common::hermes::FakeModel::start(
        &env.path("model"),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo across"}}},
            {"text": "Done on the other replica"}
        ]),
    );
    let home = env.path("hermes-home");
    common::hermes::write_config(&home, model.port, &env.path("work"), "off", "");
    let reg = env.register_runner(&a, "main", &[]);
    common::configure(
        &reg,
        serde_json::json!({ "hermesCommand": [hermes.display().to_string(), "serve"], "hermesHome": home }),
    );
    env.run(&[
        "agent",
        "create",
        "bot",
        "--profile",
        "default",
        "--env",
        "host",
    ])
    .ok();
    let (_runner, _) = env.start_online(&reg, "runner", 0);
    let chat = run_on(&env, &b, &["chat", "bot", "run echo across"]);
    chat.ok();
    assert!(
        chat.stdout.contains("Done on the other replica"),
        "{chat:?}"
    );
    // The tool call's output reached B's stream too, and the session ended idle on both.
    assert!(chat.stderr.contains("across"), "{chat:?}");
    assert!(chat.stderr.contains("[tool terminal done]"), "{chat:?}");
    for server in [&a, &b] {
        let sessions = run_on(&env, server, &["session", "list", "--json"]).json();
        assert_eq!(sessions[0]["state"], "idle", "{sessions:#}");
    }
}

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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = env_on(&cluster);
    env.create_admin("root");
    let mut a = Server::start(&env, &env.path("replica-a"));
    let b = Server::start(&env, &env.path("replica-b"));
    let login = [
        "login",
        &a.url,
        &b.url,
        "--username",
        "root",
        "--password-stdin",
    ];
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
        let (addr, auth) = (b.addr(), format!("Bearer {}", env.stored_token()));
        let path = format!("/api/v1/runners/{}/ping", reg.id);
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let headers = [
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ];
            while !stop.load(Ordering::SeqCst) {
                let (status, body) = common::http(&addr, "POST", &path, &headers, "{}")
                    .unwrap_or_else(|e| panic!("replica B stopped answering: {e}"));
                assert_eq!(status, 200, "{body}");
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                acked
                    .lock()
                    .unwrap()
                    .push(v["id"].as_str().unwrap().to_string());
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

/// `yy computer attach --control` through replica B while the Runner is connected to A:
/// A carries the Runner's leg of the shell relay on to B, and the shell works both ways.
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
    let a = Server::start(&env, &env.path("replica-a"));
    let b = Server::start(&env, &env.path("replica-b"));
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

    let token = env.stored_token();
    let mut attach = env
        .command(&["computer", "attach", &id, "--control"])
        .env("YY_SERVER", &b.url)
        .env("YY_TOKEN", &token)
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
