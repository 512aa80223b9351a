//! Moving a deployment (issue 27): `yy store migrate` from a populated SQLite control plane
//! to PostgreSQL and on to a new SQLite file gives the same rows in every table; `yy serve`
//! on the PostgreSQL copy answers with the same agents, logins and artifacts; a filled
//! target, a running server and a running replica are refused. The backup of a PostgreSQL
//! control plane restores into a fresh database with the same rows. Real binaries, real
//! SQLite files, a real throw-away PostgreSQL cluster.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::postgres::{Cluster, simple_query};
use common::{Env, Server};

/// A sandbox on SQLite whatever `YY_TEST_DATABASE` says: the test picks its databases.
fn sqlite_env() -> Env {
    let mut env = Env::new();
    env.envs.retain(|(k, _)| k != "YY_DATABASE");
    env
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every table of a SQLite file (SQLite's own `sqlite_sequence` too) and its schema: each
/// row as its typed values, sorted.
fn sqlite_export(db: &Path) -> BTreeMap<String, Vec<Vec<String>>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut out = BTreeMap::new();
    let schema: Vec<Vec<String>> = conn
        .prepare("SELECT type, name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name")
        .unwrap()
        .query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?, r.get(2)?]))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let tables: Vec<String> = schema
        .iter()
        .filter(|r| r[0] == "table")
        .map(|r| r[1].clone())
        .collect();
    out.insert("(schema)".to_string(), schema);
    for t in tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let n = stmt.column_count();
        let mut rows: Vec<Vec<String>> = stmt
            .query_map([], |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => "null".to_string(),
                            rusqlite::types::ValueRef::Integer(v) => format!("int {v}"),
                            rusqlite::types::ValueRef::Real(v) => format!("real {v}"),
                            rusqlite::types::ValueRef::Text(v) => {
                                format!("text {}", String::from_utf8_lossy(v))
                            }
                            rusqlite::types::ValueRef::Blob(v) => format!("blob {v:?}"),
                        })
                    })
                    .collect()
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.sort();
        out.insert(t, rows);
    }
    out
}

/// Every row of every table of a PostgreSQL database, as text, sorted; and where each
/// sequence stands.
fn postgres_export(url: &str) -> BTreeMap<String, Vec<Vec<Option<String>>>> {
    let relations = simple_query(
        url,
        "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S') ORDER BY 1",
    );
    relations
        .into_iter()
        .map(|r| {
            let t = r[0].clone().unwrap();
            let sql = match r[1].as_deref() {
                Some("S") => format!("SELECT last_value, is_called FROM \"{t}\""),
                _ => format!("SELECT * FROM \"{t}\""),
            };
            let mut rows = simple_query(url, &sql);
            rows.sort();
            (t, rows)
        })
        .collect()
}

/// Rows in the data tables of `export` (the server's identity, the schema and the
/// counters left out).
fn data_rows<T>(export: &BTreeMap<String, Vec<T>>) -> usize {
    let bookkeeping = [
        "(schema)",
        "server_identity",
        "schema_version",
        "sqlite_sequence",
    ];
    export
        .iter()
        .filter(|(t, _)| !bookkeeping.contains(&t.as_str()) && !t.ends_with("_seq_seq"))
        .map(|(_, rows)| rows.len())
        .sum()
}

/// A control plane with rows in many tables: an admin and its login, a source, a profile,
/// agents, a team, a Runner that answered pings and an artifact it uploaded. Returns the
/// agents' names and the artifact's id and bytes.
fn populate(env: &Env, server: &Server) -> (Vec<String>, String, Vec<u8>) {
    let root = env.path("roots");
    std::fs::create_dir(&root).unwrap();
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("report.bin"), &bytes).unwrap();
    let reg = env.register_runner(server, "main", &["--artifact-root", s(&root)]);
    let (_runner, _) = env.start_online(&reg, "r", 0);
    env.run(&["runner", "ping", &reg.id, "--count", "2"]).ok();
    let fetched = env.path("fetched.bin");
    env.run(&[
        "runner",
        "fetch",
        &reg.id,
        s(&root.join("report.bin")),
        "-o",
        s(&fetched),
    ])
    .ok();
    for (name, kind) in [
        ("host-1", "host"),
        ("box", "computer"),
        ("boss", "computer"),
    ] {
        env.run(&[
            "agent",
            "create",
            name,
            "--profile",
            "default",
            "--env",
            kind,
        ])
        .ok();
    }
    env.run(&["agent", "update", "boss", "--manage-team"]).ok();
    env.run(&[
        "team", "create", "crew", "--admin", "boss", "--member", "host-1",
    ])
    .ok();
    let artifacts = env.json(&["artifact", "list"]);
    let id = artifacts[0]["id"].as_str().unwrap().to_string();
    (agent_names(env), id, bytes)
}

fn agent_names(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = env
        .json(&["agent", "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// `yy serve` on the PostgreSQL database `url` (artifact bytes in it): the admin logs in,
/// `agents` are listed and `artifact` downloads as `bytes`; returned once its heartbeat
/// says it is up.
fn serve_copy(env: &Env, url: &str, agents: &[String], artifact: &str, bytes: &[u8]) -> Server {
    let replica = Server::start_with(
        env,
        &env.path("replica"),
        "127.0.0.1:0",
        &["--database", url],
    );
    env.login(&replica, "root");
    assert_eq!(agent_names(env), agents);
    let got = env.path("got.bin");
    env.run(&["artifact", "get", artifact, "-o", s(&got)]).ok();
    assert_eq!(std::fs::read(&got).unwrap(), bytes);
    common::wait_for(Duration::from_secs(20), "the replica's heartbeat", || {
        let status = env.json(&["status"]);
        let up = status["replicas"]
            .as_array()?
            .iter()
            .any(|r| r["state"] == "up");
        up.then_some(())
    });
    replica
}

#[test]
fn a_control_plane_moves_to_postgres_and_back_with_every_row() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let env = sqlite_env();
    let server = env.bootstrap();
    let (agents, artifact, bytes) = populate(&env, &server);
    let moved = cluster.create_database("moved");
    let from = format!("sqlite:{}", s(&env.data_dir()));

    // While `yy serve` runs on it, the source is refused and the target stays untouched.
    env.run(&["store", "migrate", "--from", &from, "--to", &moved])
        .fails(6, "stop it first");
    assert!(postgres_export(&moved).is_empty());
    assert_eq!(server.terminate(), 0);

    // Without --to-blob-dir the artifact's bytes go into PostgreSQL, as `yy serve
    // --database` keeps them without --blob-dir.
    let there = env.run(&[
        "store", "migrate", "--from", &from, "--to", &moved, "--json",
    ]);
    there.ok();
    let report = there.json();
    assert!(
        report["schema_version"].as_i64().unwrap() >= 22,
        "{report:#}"
    );
    let tables = report["tables"].as_array().unwrap();
    let table = |name: &str| tables.iter().find(|t| t["table"] == name).unwrap().clone();
    assert_eq!(table("agents")["rows"], 3, "{report:#}");
    assert_eq!(table("runners")["rows"], 1, "{report:#}");
    assert!(
        table("runner_commands")["rows"].as_u64().unwrap() >= 3,
        "{report:#}"
    );
    let commands = table("runner_commands");
    assert!(
        commands["counter"].as_u64() >= commands["rows"].as_u64(),
        "{report:#}"
    );
    assert_eq!(report["artifacts"]["files"], 1, "{report:#}");
    let original = sqlite_export(&env.data_dir().join("yy.db"));
    assert!(data_rows(&original) >= 15, "{original:#?}");
    let on_postgres = postgres_export(&moved);
    let chunks = on_postgres["artifact_chunks"].len();
    assert!(
        chunks >= 1,
        "the artifact's bytes as chunks: {on_postgres:#?}"
    );
    assert_eq!(data_rows(&on_postgres), data_rows(&original) + chunks);

    // A filled target: refused, exit 6, and not a row changes.
    env.run(&["store", "migrate", "--from", &from, "--to", &moved])
        .fails(6, "is not empty");
    assert_eq!(postgres_export(&moved), on_postgres);

    // On to a new SQLite file: the same rows in every table, the same counters, and the
    // chunks written out as the artifact's file.
    let back = env.path("back");
    let home = env.run(&[
        "store",
        "migrate",
        "--from",
        &moved,
        "--to",
        &format!("sqlite:{}/yy.db", s(&back)),
    ]);
    home.ok();
    assert!(home.stdout.contains("every table read back"), "{home:?}");
    assert!(home.stdout.contains("agents"), "{home:?}");
    assert_eq!(sqlite_export(&back.join("yy.db")), original);
    assert_eq!(
        std::fs::read(back.join("artifacts").join(&artifact)).unwrap(),
        bytes
    );

    // `yy serve` on the PostgreSQL copy: the admin logs in, the agents and the artifact
    // are there.
    // While that replica is up, the database is refused as a source, naming it.
    let _replica = serve_copy(&env, &moved, &agents, &artifact, &bytes);
    let elsewhere = env.path("elsewhere");
    env.run(&[
        "store",
        "migrate",
        "--from",
        &moved,
        "--to",
        &format!("sqlite:{}", s(&elsewhere)),
    ])
    .fails(6, "stop every replica first");
    assert!(!elsewhere.join("yy.db").exists());
}

#[test]
fn passwords_stay_off_the_command_line_and_other_mistakes_are_one_line() {
    let env = sqlite_env();
    env.create_admin("root");
    let from = format!("sqlite:{}", s(&env.data_dir()));
    env.run(&[
        "store",
        "migrate",
        "--from",
        &from,
        "--to",
        "postgres://yy:s3cret@127.0.0.1:1/yy",
    ])
    .fails(2, "--to-env");
    let out = env.run_with(
        &["store", "migrate", "--from", &from, "--to-env", "YY_TARGET"],
        "",
        &[("YY_TARGET", "postgres://yy:s3cret@127.0.0.1:1/yy")],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!out.stderr.contains("s3cret"), "{out:?}");
    assert!(
        out.stderr.contains("postgres://yy@127.0.0.1:1/yy"),
        "{out:?}"
    );
    env.run(&[
        "store",
        "migrate",
        "--from",
        &from,
        "--to-env",
        "YY_UNSET_HERE",
    ])
    .fails(2, "is not set");
    env.run(&[
        "store",
        "migrate",
        "--from",
        &format!("sqlite:{}", s(&env.path("nothing"))),
        "--to",
        &format!("sqlite:{}", s(&env.path("new"))),
    ])
    .fails(5, "does not exist");
    env.run(&["store", "migrate", "--from", &from, "--to", "mysql://db/yy"])
        .fails(2, "--to");
    env.run(&["store", "migrate", "--from", &from, "--to", &from])
        .fails(2, "both name");
}

/// A sandbox whose control planes use the database at `url`.
fn env_on(url: &str) -> Env {
    let mut env = sqlite_env();
    env.envs.push(("YY_DATABASE".into(), url.to_string()));
    env
}

#[test]
fn a_backup_of_a_postgres_control_plane_restores_into_a_fresh_database() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let live = cluster.create_database("live");
    let env = env_on(&live);
    let server = env.bootstrap();
    let (agents, artifact, bytes) = populate(&env, &server);

    // While it runs: one snapshot of the database, the artifact's bytes (chunks in the
    // database) written out beside it as its file, and an archive `yy backup verify` takes
    // as any other.
    let running = env.path("running.yyb");
    env.run(&[
        "backup",
        "create",
        "--data-dir",
        s(&env.data_dir()),
        "-o",
        s(&running),
    ])
    .ok();
    let verified = env.json(&["backup", "verify", s(&running)]);
    assert_eq!(
        verified["schema_version"],
        yy::server::store::LATEST_VERSION,
        "{verified:#}"
    );
    assert!(
        verified["source"]
            .as_str()
            .unwrap()
            .starts_with("postgres://")
    );
    let paths: Vec<&str> = verified["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    let entry = format!("artifacts/{artifact}");
    assert_eq!(
        paths,
        ["yy.db", "artifacts", entry.as_str()],
        "{verified:#}"
    );
    assert_eq!(server.terminate(), 0);

    // Stopped, so that nothing changes after the backup: restored into a fresh database,
    // every row is the same (the replicas' heartbeats are not part of a backup).
    let file = env.path("stopped.yyb");
    env.run(&[
        "backup",
        "create",
        "--data-dir",
        s(&env.data_dir()),
        "-o",
        s(&file),
    ])
    .ok();
    // Without --blob-dir the file goes back into the database as the same chunks.
    let fresh = cluster.create_database("fresh");
    let restored = env.run(&["restore", s(&file), "--database", &fresh, "--json"]);
    restored.ok();
    let summary = restored.json();
    assert_eq!(summary["replaced_rows"], 0, "{summary:#}");
    assert_eq!(summary["artifacts"]["files"], 1, "{summary:#}");
    let without_replicas = |url: &str| {
        let mut e = postgres_export(url);
        e.remove("replicas");
        e
    };
    let before = without_replicas(&live);
    assert!(data_rows(&before) >= 15, "{before:#?}");
    assert!(!before["artifact_chunks"].is_empty(), "{before:#?}");
    assert_eq!(without_replicas(&fresh), before);

    // The restored database serves; while it does, another restore into it is refused.
    let _replica = serve_copy(&env, &fresh, &agents, &artifact, &bytes);
    env.run(&["restore", s(&file), "--database", &fresh])
        .fails(6, "stop every replica first");
}
