//! Several `yy serve` replicas on one PostgreSQL database (issue 27): the CLI and the Runner
//! on different replicas, on a real throw-away cluster.

mod common;
mod replica_support;

use std::time::{Duration, Instant};

use common::Server;
use common::postgres::Cluster;
use replica_support::{env_on, replicas, run_on};

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
    // B's follow heard each step of the upload from A (not only its look once a second);
    // A hears none of its own.
    assert!(
        upload_wakeups(&env, &b) >= 2.0,
        "B heard no upload wake-ups"
    );
    assert_eq!(upload_wakeups(&env, &a), 0.0, "A heard its own wake-ups");
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

/// The upload wake-ups `server` heard from other replicas (`yy_peer_wakeups_total`).
fn upload_wakeups(env: &common::Env, server: &Server) -> f64 {
    let auth = format!("Bearer {}", env.stored_token());
    let (status, body) = common::http(
        &server.addr(),
        "GET",
        "/metrics",
        &[("Authorization", auth.as_str())],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix("yy_peer_wakeups_total{kind=\"upload\"} "))
        .map_or(0.0, |v| v.trim().parse().unwrap())
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
