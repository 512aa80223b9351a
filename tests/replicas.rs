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
