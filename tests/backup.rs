//! Control plane backup and restore, end to end: the real binary, a real `yy serve` on a
//! loopback port, real SQLite files, kill -9 at every step of a restore.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, PASSWORD, Server, http};
use sha2::{Digest, Sha256};

/// Everything in a directory: path → kind, mode and content hash. SQLite's -wal and -shm
/// files come and go with connections and are left out.
pub fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel.ends_with("-wal") || rel.ends_with("-shm") {
                continue;
            }
            let m = p.symlink_metadata().unwrap();
            if m.is_dir() {
                out.insert(rel, format!("dir {:o}", m.mode() & 0o7777));
                walk(root, &p, out);
            } else if m.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("link {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else {
                let data = std::fs::read(&p).unwrap();
                out.insert(
                    rel,
                    format!(
                        "file {:o} {}",
                        m.mode() & 0o7777,
                        hex::encode(Sha256::digest(&data))
                    ),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The usernames in a data directory's database.
fn accounts(dir: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(dir.join("yy.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT username FROM accounts ORDER BY username")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn integrity(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

fn admin(env: &Env, dir: &Path, name: &str) {
    env.run_with(
        &[
            "admin",
            "create",
            "--data-dir",
            dir.to_str().unwrap(),
            "--username",
            name,
            "--password-stdin",
        ],
        PASSWORD,
        &[],
    )
    .ok();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A data directory with admin `name` and one artifact `artifacts/NAME.bin`.
fn data_dir(env: &Env, rel: &str, name: &str) -> PathBuf {
    let dir = env.path(rel);
    admin(env, &dir, name);
    std::fs::create_dir_all(dir.join("artifacts")).unwrap();
    std::fs::write(dir.join(format!("artifacts/{name}.bin")), name.repeat(1000)).unwrap();
    dir
}

fn backup(env: &Env, dir: &Path, out: &Path) -> serde_json::Value {
    env.json(&["backup", "create", "--data-dir", s(dir), "-o", s(out)])
}

#[test]
fn a_backup_taken_while_agents_are_created_restores_every_acknowledged_one() {
    let env = Env::new();
    let server = env.bootstrap();
    env.run(&["source", "create", "main"]).ok();
    env.run(&["profile", "create", "default", "--cwd", "/workspace"])
        .ok();
    let token = env.stored_token();
    let auth = format!("Bearer {token}");
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let creator = {
        let (addr, acked, stop, auth) = (server.addr(), acked.clone(), stop.clone(), auth.clone());
        std::thread::spawn(move || {
            // Below the limit of 100 active agents per account.
            for i in 0..95 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let body = format!(r#"{{"name":"agent-{i}","profile":"default","env":"host"}}"#);
                let (status, text) = http(
                    &addr,
                    "POST",
                    "/api/v1/agents",
                    &[
                        ("Authorization", &auth),
                        ("Content-Type", "application/json"),
                    ],
                    &body,
                )
                .unwrap();
                assert_eq!(status, 200, "{text}");
                acked.lock().unwrap().push(format!("agent-{i}"));
                // Fixed pause, kept: the writer's pace spreads its writes over the backup
                // (which is what is under test); it waits for nothing.
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    common::wait_for(Duration::from_secs(20), "20 agents", || {
        (acked.lock().unwrap().len() >= 20).then_some(())
    });
    let before: Vec<String> = acked.lock().unwrap().clone();
    let archive = env.path("live.yyb");
    let created = backup(&env, &env.data_dir(), &archive);
    let during = acked.lock().unwrap().len();
    stop.store(true, Ordering::Relaxed);
    creator.join().unwrap();
    assert!(
        during > before.len(),
        "agents were created while the backup ran"
    );
    assert_eq!(created["kind"], "control-plane");
    assert_eq!(created["sha256"].as_str().unwrap().len(), 64);
    let bytes = std::fs::read(&archive).unwrap();
    assert_eq!(created["sha256"], hex::encode(Sha256::digest(&bytes)));
    assert_eq!(
        std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // While the server holds the directory a restore is refused, and changes nothing.
    let before_tree = tree(&env.data_dir());
    env.run(&["restore", s(&archive), "--data-dir", s(&env.data_dir())])
        .fails(6, "stop it first");
    assert_eq!(tree(&env.data_dir()), before_tree);

    let checked = env.json(&["backup", "verify", s(&archive)]);
    assert_eq!(checked["ok"], true);
    assert_eq!(checked["databases"][0]["integrity_check"], "ok");
    assert_eq!(
        checked["schema_version"],
        checked["databases"][0]["user_version"]
    );

    assert_eq!(server.terminate(), 0);
    let restored = env.json(&["restore", s(&archive), "--data-dir", s(&env.data_dir())]);
    let old_copy = PathBuf::from(restored["old_copy"].as_str().unwrap());
    assert!(
        old_copy.join("yy.db").is_file(),
        "the data from before is kept"
    );
    assert!(
        std::fs::read_to_string(restored["log"].as_str().unwrap())
            .unwrap()
            .contains("restored")
    );
    let db = env.data_dir().join("yy.db");
    assert_eq!(integrity(&db), "ok");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let names: Vec<String> = conn
        .prepare("SELECT name FROM agents")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for name in &before {
        assert!(
            names.contains(name),
            "{name} was acknowledged before the backup"
        );
    }
    // And the restored directory serves.
    let server = env.serve();
    let list = env.run_with(
        &["agent", "list", "--json"],
        "",
        &[("YY_SERVER", &server.url), ("YY_TOKEN", &token)],
    );
    assert_eq!(list.ok().json().as_array().unwrap().len(), names.len());
}

#[test]
fn artifacts_come_back_byte_identical_into_a_new_directory() {
    let env = Env::new();
    let server = env.bootstrap();
    let art = env.data_dir().join("artifacts");
    std::fs::create_dir_all(art.join("run-1/out")).unwrap();
    let mut seed = 7u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect()
    };
    std::fs::write(art.join("run-1/out/big.bin"), noise(3 * 1024 * 1024 + 17)).unwrap();
    std::fs::write(art.join("run-1/report.txt"), b"hello\n").unwrap();
    std::fs::write(art.join("empty"), b"").unwrap();
    std::fs::set_permissions(
        art.join("run-1/report.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    // A link is not taken: a restore writes only files and directories here.
    std::os::unix::fs::symlink("run-1/report.txt", art.join("latest")).unwrap();
    let archive = env.path("a.yyb");
    let created = backup(&env, &env.data_dir(), &archive);
    assert_eq!(created["file_count"], 4, "{created}");
    let verified = env.json(&["backup", "verify", s(&archive)]);
    let paths: Vec<&str> = verified["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"artifacts/run-1/out/big.bin"));
    assert!(!paths.contains(&"artifacts/latest"), "{paths:?}");
    assert!(
        !paths
            .iter()
            .any(|p| p.ends_with("-wal") || p.ends_with("-shm"))
    );
    drop(server);

    let fresh = env.path("elsewhere/new-host");
    let out = env.run(&["restore", s(&archive), "--data-dir", s(&fresh)]);
    out.ok();
    assert!(out.stdout.contains("the directory was new"), "{out:?}");
    let want: BTreeMap<_, _> = tree(&env.data_dir())
        .into_iter()
        .filter(|(k, _)| k.starts_with("artifacts") && k != "artifacts/latest")
        .collect();
    let got: BTreeMap<_, _> = tree(&fresh)
        .into_iter()
        .filter(|(k, _)| k.starts_with("artifacts"))
        .collect();
    assert_eq!(got, want);
    assert_eq!(integrity(&fresh.join("yy.db")), "ok");
    assert_eq!(accounts(&fresh), vec!["root"]);
}

#[test]
fn a_flipped_byte_fails_verify_and_restore_and_the_data_stays() {
    let env = Env::new();
    let src = data_dir(&env, "src", "new");
    let archive = env.path("a.yyb");
    backup(&env, &src, &archive);
    let target = data_dir(&env, "target", "old");
    let before = tree(&target);
    let good = std::fs::read(&archive).unwrap();
    let len = good.len();
    // The header, the first entry's header and content, somewhere in the middle, the
    // manifest, the trailer's length, hash and end mark.
    let mut positions = vec![
        0,
        9,
        15,
        16,
        20,
        40,
        62,
        len / 3,
        len / 2,
        len - 200,
        len - 48,
        len - 30,
        len - 1,
    ];
    let mut x = 12345usize;
    for _ in 0..6 {
        x = x.wrapping_mul(1103515245).wrapping_add(12345) % len;
        positions.push(x);
    }
    let bad = env.path("bad.yyb");
    for i in positions {
        let mut data = good.clone();
        data[i] ^= 0x20;
        std::fs::write(&bad, &data).unwrap();
        let v = env.run(&["backup", "verify", s(&bad)]);
        assert_ne!(v.code, 0, "verify missed a flip at byte {i}: {v:?}");
        assert_eq!(v.stderr.lines().count(), 1, "{v:?}");
        let r = env.run(&[
            "restore",
            s(&bad),
            "--data-dir",
            s(&target),
            "--from-other-server",
        ]);
        assert_ne!(
            r.code, 0,
            "restore took an archive flipped at byte {i}: {r:?}"
        );
        assert_eq!(tree(&target), before, "the flip at {i} changed the data");
        let leftovers: Vec<_> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("restore-staging") || n.contains("restore-journal"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
    // The good archive still restores. A Runner data directory nested in the control
    // plane's (the default layout) is not part of its backups and stays through restores.
    let nested = target.join("runner-1234/workspaces/c");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(nested.join("f"), "runner data").unwrap();
    env.run(&[
        "restore",
        s(&archive),
        "--data-dir",
        s(&target),
        "--from-other-server",
    ])
    .ok();
    assert_eq!(accounts(&target), vec!["new"]);
    assert_eq!(
        std::fs::read_to_string(nested.join("f")).unwrap(),
        "runner data"
    );
    std::fs::create_dir_all(src.join("runner-5678")).unwrap();
    let again = env.path("again.yyb");
    backup(&env, &src, &again);
    let listed = env.json(&["backup", "verify", s(&again)]);
    assert!(
        !listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"].as_str().unwrap().starts_with("runner-")),
        "{listed}"
    );

    // Wrong files are named as such.
    env.run(&["backup", "verify", "/etc/hostname"])
        .fails(2, "not a yy backup");
    env.run(&["backup", "verify", s(&env.path("missing"))])
        .fails(5, "does not exist");
    env.run(&["backup", "create", "--data-dir", s(&src), "-o", s(&archive)])
        .fails(2, "--force");
    env.run(&[
        "backup",
        "create",
        "--data-dir",
        s(&env.path("nothing")),
        "-o",
        s(&env.path("x.yyb")),
    ])
    .fails(5, "does not exist");
    env.run(&[
        "backup",
        "create",
        "--data-dir",
        s(&src),
        "-o",
        s(&src.join("in.yyb")),
    ])
    .fails(2, "inside the data directory");
}

#[test]
fn a_newer_schema_is_refused_and_an_older_one_is_migrated() {
    let env = Env::new();
    let newer = data_dir(&env, "newer", "n");
    rusqlite::Connection::open(newer.join("yy.db"))
        .unwrap()
        .pragma_update(None, "user_version", 999)
        .unwrap();
    let archive = env.path("newer.yyb");
    backup(&env, &newer, &archive);
    let target = data_dir(&env, "target", "old");
    let before = tree(&target);
    env.run(&["restore", s(&archive), "--data-dir", s(&target)])
        .fails(1, "newer");
    assert_eq!(tree(&target), before);

    // A database at schema 3, made by the first three migrations.
    let older = env.path("older");
    std::fs::create_dir_all(&older).unwrap();
    let conn = rusqlite::Connection::open(older.join("yy.db")).unwrap();
    for m in [
        "0001_init.sql",
        "0002_runner_commands.sql",
        "0003_sessions.sql",
    ] {
        let sql = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(m),
        )
        .unwrap();
        conn.execute_batch(&sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 3).unwrap();
    drop(conn);
    let archive = env.path("older.yyb");
    let made = backup(&env, &older, &archive);
    assert_eq!(made["schema_version"], 3);
    // Schema 3 has no server identity: which server it came from is unknown.
    env.run(&["restore", s(&archive), "--data-dir", s(&target)])
        .fails(2, "--from-other-server");
    let out = env.run(&[
        "restore",
        s(&archive),
        "--data-dir",
        s(&target),
        "--from-other-server",
    ]);
    out.ok();
    assert!(out.stdout.contains("migrated from schema 3"), "{out:?}");
    let conn = rusqlite::Connection::open(target.join("yy.db")).unwrap();
    let v: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, yy::server::store::LATEST_VERSION);
}

const STEPS: [&str; 8] = [
    "staging", "staged", "planned", "swap-1", "swap-2", "swapped", "migrated", "logged",
];

#[test]
fn a_restore_killed_at_any_step_is_rolled_back_by_the_next_start() {
    let env = Env::new();
    let old_src = data_dir(&env, "old-src", "old");
    let new_src = data_dir(&env, "new-src", "new");
    let (old_archive, new_archive) = (env.path("old.yyb"), env.path("new.yyb"));
    backup(&env, &old_src, &old_archive);
    backup(&env, &new_src, &new_archive);
    for (i, step) in STEPS.iter().enumerate() {
        let dir = env.path(&format!("step-{i}/data"));
        env.run(&["restore", s(&old_archive), "--data-dir", s(&dir)])
            .ok();
        let old = tree(&dir);
        let out = env.run_with(
            &[
                "restore",
                s(&new_archive),
                "--data-dir",
                s(&dir),
                "--from-other-server",
            ],
            "",
            &[("YY_TEST_RESTORE_CRASH_AT", step)],
        );
        assert_eq!(out.code, -1, "killed at {step}: {out:?}");
        let journal = env.path(&format!("step-{i}/.data.restore-journal"));
        assert!(journal.exists(), "{step}: the journal is left behind");
        // At the moment of the kill the old data is whole: in place, or in the dated copy
        // between the two renames; or the new data is whole in place.
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
        let old_copy = PathBuf::from(j["old_copy"].as_str().unwrap());
        if dir.exists() {
            let now = tree(&dir);
            assert!(
                now == old || accounts(&dir) == vec!["new"],
                "{step}: the data in place is neither the old nor the new"
            );
        } else {
            assert_eq!(tree(&old_copy), old, "{step}: the dated copy is whole");
        }
        if i % 2 == 0 {
            // The next start is `yy serve`: it rolls back first and says so.
            let server = Server::start(&env, &dir);
            assert!(
                server.log().contains("rolled back an unfinished restore"),
                "{step}: {}",
                server.log()
            );
            assert_eq!(server.terminate(), 0);
            assert_eq!(accounts(&dir), vec!["old"], "{step}");
            assert_eq!(
                tree(&dir.join("artifacts")),
                tree(&old_src.join("artifacts"))
            );
        } else {
            // The next start is `yy restore`: it rolls back, says so, then restores.
            let out = env.run(&[
                "restore",
                s(&new_archive),
                "--data-dir",
                s(&dir),
                "--json",
                "--from-other-server",
            ]);
            out.ok();
            assert!(
                out.stderr.contains("rolled back an unfinished restore"),
                "{step}: {out:?}"
            );
            assert_eq!(accounts(&dir), vec!["new"]);
            let kept = PathBuf::from(out.json()["old_copy"].as_str().unwrap().to_string());
            assert_eq!(tree(&kept), old, "{step}: the old data is kept whole");
        }
        assert!(!journal.exists());
        assert!(
            !env.path(&format!("step-{i}/.data.restore-staging"))
                .exists()
        );
        let log = std::fs::read_to_string(env.path(&format!("step-{i}/data.restore.log"))).unwrap();
        assert!(log.contains("rolled back"), "{log}");
    }
}
