//! Parsers under property tests: random and adversarial input never panics them, and path
//! confinement never admits a path outside its root.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use proptest::prelude::*;
use yy::api::machine::{CompleteParams, FetchParams, LeaseParams, PingParams, RunnerStatus};
use yy::api::sessions::EventsParams;
use yy::computer::confine::Workspace;
use yy::computer::protocol::Request;

/// Any JSON value, nested a few levels, with strings full of awkward characters.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
            prop::collection::btree_map(field_name(), inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly the names the parsers know, sometimes anything.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "protocol",
            "serverURL",
            "runnerId",
            "token",
            "hermesURL",
            "allowedProfiles",
            "artifactRoots",
            "allowInsecureLan",
            "hermesTokenFile",
            "hermesCommand",
            "id",
            "op",
            "argv",
            "path",
            "data",
            "target",
            "version",
            "capabilities",
            "computers_capacity",
            "hostname",
            "max",
            "wait_ms",
            "outcome",
            "result",
            "error",
            "events",
            "hold_ms",
            "timeout_ms",
            "type",
            "payload",
        ])
        .prop_map(String::from),
        ".{0,12}",
    ]
}

/// Raw text: valid JSON, JSON cut anywhere, or bytes that are barely text.
fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        json_value().prop_map(|v| v.to_string()),
        json_value().prop_flat_map(|v| {
            let s = v.to_string();
            let n = s.len();
            (Just(s), 0..=n).prop_map(|(s, cut)| {
                let mut cut = cut;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s[..cut].to_string()
            })
        }),
        ".{0,200}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn machine_api_bodies_never_panic(text in body()) {
        let _ = serde_json::from_str::<RunnerStatus>(&text).map(|s| s.check());
        let _ = serde_json::from_str::<LeaseParams>(&text);
        let _ = serde_json::from_str::<CompleteParams>(&text);
        let _ = serde_json::from_str::<EventsParams>(&text);
        let _ = serde_json::from_str::<PingParams>(&text);
        let _ = serde_json::from_str::<FetchParams>(&text);
    }

    #[test]
    fn an_accepted_runner_status_has_no_control_characters_in_its_words(
        version in ".{0,80}",
        capabilities in prop::collection::vec(".{0,70}", 0..70),
        hostname in ".{0,300}",
    ) {
        let status = RunnerStatus { version, capabilities, computers_capacity: 0, hostname, hermes_listen: None, engine: None, computer_idle_ms: None, computer_reclaim_ms: None, warm_computers: None };
        if status.check().is_ok() {
            prop_assert!(!status.version.chars().any(char::is_control));
            prop_assert!(status.capabilities.iter().all(|c| !c.chars().any(char::is_control)));
            prop_assert!(status.hostname.len() <= 255 && !status.hostname.contains('\0'));
        }
    }

    #[test]
    fn the_guest_decoder_never_panics_and_what_it_accepts_round_trips(text in body()) {
        if let Ok(req) = serde_json::from_str::<Request>(&text) {
            let again = serde_json::to_string(&req).unwrap();
            prop_assert_eq!(serde_json::from_str::<Request>(&again).unwrap(), req);
        }
    }

    #[test]
    fn runner_json_loading_never_panics(text in body(), obj in json_value()) {
        let dir = tempfile::tempdir().unwrap();
        for (i, content) in [text, obj.to_string()].iter().enumerate() {
            let path = dir.path().join(format!("runner-{i}.json"));
            std::fs::write(&path, content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            let _ = yy::runner::config::load(&path);
        }
    }
}

/// A workspace with a file, a directory, a symlink inside, and symlinks leading out.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: Workspace,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("file"), b"x").unwrap();
    std::fs::write(dir.path().join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink("sub", root.join("in")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    let ws = Workspace::open(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    Tree {
        _dir: dir,
        root,
        ws,
    }
}

/// `ROOT` stands for the workspace's own absolute path.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "..", ".", "", "file", "sub", "in", "out", "up", "etc", "new", "passwd", "proc",
            "self", "root", "a\0b", "~", "ROOT",
        ])
        .prop_map(String::from),
        1 => "[^/]{0,6}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn confinement_never_admits_a_path_outside_the_root(
        absolute in any::<bool>(),
        parts in prop::collection::vec(segment(), 0..7),
    ) {
        let t = tree();
        let root = t.root.display().to_string();
        let joined = parts.join("/").replace("ROOT", root.trim_start_matches('/'));
        let path = if absolute { format!("/{joined}") } else { joined };
        if let Ok(p) = t.ws.lexical(&path) {
            prop_assert!(p.starts_with(&t.root), "lexical({path:?}) = {p:?}");
        }
        if let Ok(p) = t.ws.existing(&path) {
            prop_assert!(p.starts_with(&t.root), "existing({path:?}) = {p:?}");
        }
        if let Ok((_file, p)) = t.ws.open_existing(&path) {
            prop_assert!(p.starts_with(&t.root), "open_existing({path:?}) = {p:?}");
        }
        if let Ok((dir, _name)) = t.ws.creatable(&path) {
            let real = std::fs::canonicalize(&dir).unwrap();
            prop_assert!(real.starts_with(&t.root), "creatable({path:?}) = {dir:?}");
        }
        // Nothing was made outside the root.
        let outside: Vec<_> = std::fs::read_dir(t.root.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        prop_assert!(outside.len() == 2, "made outside the root: {outside:?}");
    }
}
