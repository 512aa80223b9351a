//! What the tests of several `yy serve` replicas on one PostgreSQL database share.

use super::common::postgres::Cluster;
use super::common::{self, Env, Server};

/// A sandbox whose control planes all use the cluster's database `yy`.
pub fn env_on(cluster: &Cluster) -> Env {
    let mut env = Env::new();
    env.envs.retain(|(k, _)| k != "YY_DATABASE");
    env.envs.push(("YY_DATABASE".into(), cluster.url()));
    env
}

/// `yy ARGS` against `server` with the stored login's token (and its certificate pinned,
/// over HTTPS).
pub fn run_on(env: &Env, server: &Server, args: &[&str]) -> common::Out {
    let vars = on(env, server);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.run_with(args, "", &vars)
}

/// The environment that points the CLI at `server` with the stored login's token.
pub fn on(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("YY_SERVER", server.url.clone()),
        ("YY_TOKEN", env.stored_token()),
    ];
    if let Some(pin) = &server.cert_sha256 {
        vars.push(("YY_CERT_SHA256", pin.clone()));
    }
    vars
}

/// The replicas `yy status --json` lists through `server`, as (id, state, leads, this).
pub fn replicas(env: &Env, server: &Server) -> Vec<(String, String, bool, bool)> {
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
