//! Several `yy serve` replicas on one PostgreSQL database (issue 27): the CLI and the Runner
//! on different replicas, on a real throw-away cluster.

mod common;

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
