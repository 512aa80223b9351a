//! Crafted backups (issue 23, finding 9), against the real `yy restore`, `yy runner
//! restore` and `yy serve`: archives rewritten from real ones by the archive library, and
//! raw bytes for what no writer makes. A restore writes only regular files and directories
//! inside the target (links only inside a Runner's workspaces), refuses another server's
//! backup unless asked, and refuses impossible sizes with one line, never a panic.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{Env, PASSWORD, Server};
use sha2::{Digest, Sha256};
use yy::backup::archive::{self, ArchiveWriter, Sink};
use yy::backup::manifest::{Entry, EntryType, Manifest};
use yy::backup::progress::Progress;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// path → kind, mode and content hash (SQLite's -wal and -shm left out).
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(list) = std::fs::read_dir(dir) else {
            return;
        };
        for e in list {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel.ends_with("-wal") || rel.ends_with("-shm") {
                continue;
            }
            let m = p.symlink_metadata().unwrap();
            if m.is_dir() {
                out.insert(rel, format!("dir {:o}", m.mode() & 0o7777));
                walk(root, &p, out);
            } else if m.file_type().is_symlink() {
                out.insert(rel, format!("link {:?}", std::fs::read_link(&p).unwrap()));
            } else {
                let h = hex::encode(Sha256::digest(std::fs::read(&p).unwrap()));
                out.insert(rel, format!("file {:o} {h}", m.mode() & 0o7777));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

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

/// A server's data directory with admin `name` and one artifact.
fn server_dir(env: &Env, rel: &str, name: &str) -> PathBuf {
    let dir = env.path(rel);
    env.run_with(
        &[
            "admin",
            "create",
            "--data-dir",
            s(&dir),
            "--username",
            name,
            "--password-stdin",
        ],
        PASSWORD,
        &[],
    )
    .ok();
    std::fs::create_dir_all(dir.join("artifacts")).unwrap();
    std::fs::write(dir.join(format!("artifacts/{name}.bin")), name.repeat(100)).unwrap();
    dir
}

/// Every entry of an archive with its content (read through the verifying reader).
struct Keep(Vec<(Entry, Vec<u8>)>);

impl Sink for Keep {
    fn dir(&mut self, e: &Entry) -> yy::backup::Result<()> {
        self.0.push((e.clone(), vec![]));
        Ok(())
    }
    fn symlink(&mut self, e: &Entry, t: &[u8]) -> yy::backup::Result<()> {
        self.0.push((e.clone(), t.to_vec()));
        Ok(())
    }
    fn file_start(&mut self, e: &Entry) -> yy::backup::Result<()> {
        self.0.push((e.clone(), vec![]));
        Ok(())
    }
    fn file_data(&mut self, c: &[u8]) -> yy::backup::Result<()> {
        self.0.last_mut().unwrap().1.extend_from_slice(c);
        Ok(())
    }
    fn file_end(&mut self, _: &Entry) -> yy::backup::Result<()> {
        Ok(())
    }
}

fn read(path: &Path) -> (Manifest, Vec<(Entry, Vec<u8>)>) {
    let mut opened = archive::open(path).unwrap();
    let mut keep = Keep(vec![]);
    opened.read_all(&mut keep, &Progress::hidden()).unwrap();
    (opened.manifest.clone(), keep.0)
}

/// Writes a valid archive (every hash right) of `entries` with `manifest`'s header fields.
fn write(path: &Path, manifest: &Manifest, entries: Vec<(Entry, Vec<u8>)>) {
    let p = Progress::hidden();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArchiveWriter::new(file, path, &p).unwrap();
    for (mut e, data) in entries {
        match e.kind {
            EntryType::Dir => w.dir(e).unwrap(),
            EntryType::Symlink => w.symlink(e, &data).unwrap(),
            EntryType::File => {
                e.size = data.len() as u64;
                w.file(e, &mut &data[..], path).unwrap()
            }
        }
    }
    let mut m = manifest.clone();
    m.entries = vec![];
    w.finish(m).unwrap();
}

fn link(path: &str, target: &str) -> (Entry, Vec<u8>) {
    let e = Entry {
        path: path.into(),
        kind: EntryType::Symlink,
        size: 0,
        sha256: None,
        mode: 0o777,
        uid: 0,
        gid: 0,
        mtime: 0,
        mtime_nsec: 0,
    };
    (e, target.as_bytes().to_vec())
}

/// Raw archive bytes around `manifest` (no entry data): for sizes no writer would make.
fn raw_archive(path: &Path, manifest: &serde_json::Value) {
    let json = manifest.to_string().into_bytes();
    let mut out = b"YYBACKUP".to_vec();
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&json));
    out.extend_from_slice(b"YYBKEND1");
    std::fs::write(path, out).unwrap();
}

#[test]
fn crafted_links_other_servers_and_overflowing_sizes_are_refused() {
    let env = Env::new();
    let target = server_dir(&env, "target", "bob");
    let other = server_dir(&env, "other", "alice");
    let own = env.path("own.yyb");
    let foreign = env.path("foreign.yyb");
    env.run(&["backup", "create", "--data-dir", s(&target), "-o", s(&own)])
        .ok();
    env.run(&[
        "backup",
        "create",
        "--data-dir",
        s(&other),
        "-o",
        s(&foreign),
    ])
    .ok();
    let (own_m, own_entries) = read(&own);
    let before = tree(&target);
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // A database of something else, which a yy following a link would migrate and use.
    rusqlite::Connection::open(outside.join("victim.db"))
        .unwrap()
        .execute_batch("CREATE TABLE precious (x); INSERT INTO precious VALUES (42);")
        .unwrap();
    let outside_before = tree(&outside);

    // yy.db as a link to a file outside; artifacts/ as a link to a directory outside.
    let victim = outside.join("victim.db");
    let mut as_link = own_entries.clone();
    for entry in as_link.iter_mut() {
        if entry.0.path == "yy.db" {
            *entry = link("yy.db", s(&victim));
        }
    }
    let db_link = env.path("db-link.yyb");
    write(&db_link, &own_m, as_link);
    let mut art_link: Vec<_> = own_entries
        .iter()
        .filter(|(e, _)| !e.path.starts_with("artifacts"))
        .cloned()
        .collect();
    art_link.push(link("artifacts", s(&outside)));
    let artifacts_link = env.path("artifacts-link.yyb");
    write(&artifacts_link, &own_m, art_link);
    for crafted in [&db_link, &artifacts_link] {
        env.run(&["restore", s(crafted), "--data-dir", s(&target)])
            .fails(2, "as a symlink");
        env.run(&["backup", "verify", s(crafted)])
            .fails(2, "as a symlink");
        assert_eq!(tree(&target), before, "{crafted:?} changed the target");
    }
    // The target still serves, and nothing was written beside the outside file.
    let server = Server::start(&env, &target);
    assert_eq!(server.terminate(), 0);
    assert_eq!(tree(&outside), outside_before);
    assert_eq!(accounts(&target), vec!["bob"]);
    // (The server made its artifact directory private.)
    let before = tree(&target);

    // A Runner's backup: a workspace root or its Hermes home may not be a link; a link
    // inside a workspace is the guest's own and comes back as a link.
    let runner_m = Manifest {
        kind: yy::backup::Kind::Runner,
        schema_version: yy::backup::RUNNER_LAYOUT_VERSION,
        server_id: None,
        ..own_m.clone()
    };
    let dir = |p: &str| {
        let e = Entry {
            path: p.into(),
            kind: EntryType::Dir,
            size: 0,
            sha256: None,
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: 0,
            mtime_nsec: 0,
        };
        (e, vec![])
    };
    let runner_dir = env.path("runner-data");
    for (i, bad) in [
        vec![dir("workspaces"), link("workspaces/c1", "/etc")],
        vec![link("hermes-home", s(&outside))],
    ]
    .into_iter()
    .enumerate()
    {
        let path = env.path(&format!("runner-bad-{i}.yyb"));
        write(&path, &runner_m, bad);
        env.run(&["runner", "restore", s(&path), "--data-dir", s(&runner_dir)])
            .fails(2, "as a symlink");
        assert!(!runner_dir.exists());
    }
    let good = env.path("runner-good.yyb");
    write(
        &good,
        &runner_m,
        vec![
            dir("workspaces"),
            dir("workspaces/c1"),
            link("workspaces/c1/python", "/usr/bin/python3"),
        ],
    );
    env.run(&["runner", "restore", s(&good), "--data-dir", s(&runner_dir)])
        .ok();
    assert_eq!(
        std::fs::read_link(runner_dir.join("workspaces/c1/python")).unwrap(),
        Path::new("/usr/bin/python3")
    );
    assert!(
        std::fs::symlink_metadata(runner_dir.join("workspaces/c1"))
            .unwrap()
            .is_dir()
    );

    // Sizes whose sum or end overflows 64 bits: one clear line, no panic.
    let entry = |path: &str, size: u64| {
        serde_json::json!({ "path": path, "type": "file", "size": size,
            "sha256": "0".repeat(64), "mode": 0o600, "uid": 0, "gid": 0,
            "mtime": 0, "mtime_nsec": 0 })
    };
    let manifest = |entries: Vec<serde_json::Value>, files: u64, total: u64| {
        serde_json::json!({ "format": 1, "kind": "control-plane", "yy_version": "x",
            "schema_version": 1, "created_at": "x", "hostname": "x", "source": "/x",
            "file_count": files, "total_bytes": total, "entries": entries })
    };
    let sum_overflow = env.path("sum-overflow.yyb");
    raw_archive(
        &sum_overflow,
        &manifest(vec![entry("a", u64::MAX), entry("b", 2)], 2, 1),
    );
    let end_overflow = env.path("end-overflow.yyb");
    raw_archive(
        &end_overflow,
        &manifest(vec![entry("yy.db", u64::MAX - 8)], 1, u64::MAX - 8),
    );
    for (crafted, says) in [
        (&sum_overflow, "add up to more than"),
        (&end_overflow, "runs past the entries"),
    ] {
        let out = env.run(&["backup", "verify", s(crafted)]);
        out.fails(1, says);
        // The restore may refuse earlier (no room for 2^64 bytes), but as clearly.
        let out = env.run(&[
            "restore",
            s(crafted),
            "--data-dir",
            s(&target),
            "--from-other-server",
        ]);
        out.fails(1, "error: ");
        assert!(!out.stderr.contains("panicked"), "{out:?}");
        assert_eq!(tree(&target), before);
    }

    // Its own backup restores without a word; another server's only when asked.
    assert!(own_m.server_id.is_some(), "a backup names its server");
    env.run(&["restore", s(&own), "--data-dir", s(&target)])
        .ok();
    assert_eq!(accounts(&target), vec!["bob"]);
    let restored = tree(&target);
    env.run(&["restore", s(&foreign), "--data-dir", s(&target)])
        .fails(2, "--from-other-server");
    assert_eq!(tree(&target), restored);
    assert_eq!(accounts(&target), vec!["bob"]);
    env.run(&[
        "restore",
        s(&foreign),
        "--data-dir",
        s(&target),
        "--from-other-server",
    ])
    .ok();
    assert_eq!(accounts(&target), vec!["alice"]);
    // A new directory has no server to replace.
    env.run(&["restore", s(&own), "--data-dir", s(&env.path("fresh"))])
        .ok();
}
