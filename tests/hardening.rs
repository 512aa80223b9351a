//! Hardening against hostile and careless clients: login floods, slow and idle sockets,
//! browser-shaped requests, revocable accounts, data that only grows, hostile Runner
//! strings and small arithmetic and permission holes. Each test failed before its fix.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Env, PASSWORD, Server, http};

/// Sends `request` as is and returns the whole response text.
fn raw(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

const WRONG: &str = "not the password 42";

#[test]
fn a_login_flood_stays_small_and_health_answers_throughout() {
    let env = Env::new();
    env.create_admin("root");
    let server = env.serve();
    let addr = server.addr();
    let pid = server.child.id();

    let done = Arc::new(AtomicBool::new(false));
    let max_rss = Arc::new(AtomicU64::new(0));
    let health_failures = Arc::new(AtomicUsize::new(0));
    let health_ok = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (done, max_rss, fails, oks, addr) = (
            done.clone(),
            max_rss.clone(),
            health_failures.clone(),
            health_ok.clone(),
            addr.clone(),
        );
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                max_rss.fetch_max(rss(pid), Ordering::AcqRel);
                match http(&addr, "GET", "/healthz", &[], "") {
                    Ok((200, _)) => oks.fetch_add(1, Ordering::AcqRel),
                    _ => fails.fetch_add(1, Ordering::AcqRel),
                };
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let n = 200;
    let start = Arc::new(Barrier::new(n));
    let body = format!(r#"{{"username":"root","password":"{WRONG}"}}"#);
    let logins: Vec<_> = (0..n)
        .map(|_| {
            let (start, addr, body) = (start.clone(), addr.clone(), body.clone());
            std::thread::spawn(move || {
                start.wait();
                let headers = [("Content-Type", "application/json")];
                http(&addr, "POST", "/api/v1/auth/login", &headers, &body)
                    .map(|(s, _)| s)
                    .unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = logins.into_iter().map(|h| h.join().unwrap()).collect();
    // Health keeps answering right after the flood too (the monitor samples the memory
    // with each look).
    let after = health_ok.load(Ordering::Acquire) + health_failures.load(Ordering::Acquire);
    common::wait_for(
        Duration::from_secs(20),
        "three looks after the flood",
        || {
            let looks = health_ok.load(Ordering::Acquire) + health_failures.load(Ordering::Acquire);
            (looks >= after + 3).then_some(())
        },
    );
    done.store(true, Ordering::Release);
    monitor.join().unwrap();

    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "every login is refused, as wrong (401) or as too many (429): {statuses:?}"
    );
    assert!(statuses.contains(&429), "the flood was throttled");
    let peak = max_rss.load(Ordering::Acquire);
    eprintln!(
        "peak RSS under the login flood: {} MiB",
        peak / (1024 * 1024)
    );
    assert!(
        peak < 150 * 1024 * 1024,
        "the server grew to {} MiB under the flood",
        peak / (1024 * 1024)
    );
    assert_eq!(
        health_failures.load(Ordering::Acquire),
        0,
        "/healthz failed"
    );
    assert!(health_ok.load(Ordering::Acquire) > 0);

    // A throttled login says when to come back; the right password waits like any other.
    let response = raw(
        &addr,
        &format!(
            "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status_of(&response), 429, "{response}");
    assert!(
        response.to_ascii_lowercase().contains("retry-after: "),
        "{response}"
    );
    let log = server.log();
    assert!(
        log.contains("failed login") && log.contains("\"root\"") && log.contains("127.0.0.1"),
        "failed logins are logged with account and address"
    );
    assert!(!log.contains(WRONG), "the password never reaches the log");
    assert!(!log.contains(PASSWORD));
}

#[test]
fn a_silent_socket_is_closed_within_the_header_timeout_and_long_polls_still_work() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let server = Server::start_with(
        &env,
        &data,
        "127.0.0.1:0",
        &["--header-timeout", "1s", "--body-timeout", "2s"],
    );
    env.login(&server, "root");
    let addr = server.addr();

    // Silent, and half-sent headers: both closed after about a second.
    for sent in ["", "GET /healthz HTTP/1.1\r\nHost: x"] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(sent.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t = Instant::now();
        let mut buf = Vec::new();
        let r = s.read_to_end(&mut buf);
        let took = t.elapsed();
        assert!(
            r.is_ok() && took < Duration::from_secs(6),
            "a socket that sent {sent:?} stayed open {took:?}: {r:?}"
        );
    }

    // A body trickling in one byte at a time hits the body deadline.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(
        format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{")
            .as_bytes(),
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..100 {
            // Fixed pause, kept: the slow client under test is this pace itself; there is
            // nothing to wait for.
            std::thread::sleep(Duration::from_millis(200));
            if writer.write_all(b" ").is_err() {
                return;
            }
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let t = Instant::now();
    let mut head = [0u8; 4096];
    let n = s.read(&mut head).unwrap_or(0);
    let answer = String::from_utf8_lossy(&head[..n]).into_owned();
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "the trickle was served for {:?}",
        t.elapsed()
    );
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    drop(s);
    trickle.join().unwrap();

    // A Runner's long-poll is a request in progress: it outlives the header timeout.
    let reg = env.register_runner(&server, "src", &[]);
    let instance = uuid();
    let (status, connected) = common::machine(
        &server,
        "/runner/v1/connect",
        &reg.token,
        &instance,
        None,
        &[],
        common::STATUS,
    );
    assert_eq!(status, 200, "{connected}");
    let generation = connected["generation"].as_i64().unwrap();
    let t = Instant::now();
    let (status, leased) = common::machine(
        &server,
        "/runner/v1/lease",
        &reg.token,
        &instance,
        Some(generation),
        &[],
        r#"{"max":1,"wait_ms":3000}"#,
    );
    assert_eq!(status, 200, "{leased}");
    assert!(t.elapsed() >= Duration::from_millis(2900), "{leased}");
}

#[test]
fn shutdown_waits_at_most_the_grace_for_a_slow_request() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let server = Server::start_with(
        &env,
        &data,
        "127.0.0.1:0",
        &["--body-timeout", "60s", "--shutdown-grace", "1s"],
    );
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(
        format!(
            "POST /api/v1/auth/login HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
            server.addr()
        )
        .as_bytes(),
    )
    .unwrap();
    // The request is in flight once the server read its head (and the body's first byte).
    common::waits::wait_read_by_peer(&s, "the server to read the request's head");
    let t = Instant::now();
    assert_eq!(server.terminate(), 0);
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "SIGTERM waited {:?} for a trickling body",
        t.elapsed()
    );
}

#[test]
fn foreign_hosts_and_origins_are_refused() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let server = Server::start_with(&env, &data, "127.0.0.1:0", &["--allowed-host", "yy.test"]);
    env.login(&server, "root");
    let token = env.stored_token();
    let addr = server.addr();
    let port = addr.rsplit(':').next().unwrap();
    let get = |host: &str, origin: Option<&str>| {
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        let response = raw(
            &addr,
            &format!(
                "GET /api/v1/whoami HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n{origin}Connection: close\r\n\r\n"
            ),
        );
        (status_of(&response), response)
    };
    // The DNS-rebinding shape: a page on evil.example whose name now points at loopback.
    let (status, body) = get(&format!("evil.example:{port}"), None);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("host_refused") && body.contains("--allowed-host"),
        "{body}"
    );
    let (status, body) = get(&addr, Some(&format!("http://evil.example:{port}")));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("origin_refused"), "{body}");
    let (status, body) = get(&addr, Some("null"));
    assert_eq!(status, 403, "{body}");

    // The server's own names and origin, and the configured extra name, are fine.
    for (host, origin) in [
        (addr.clone(), Some(format!("http://{addr}"))),
        (format!("localhost:{port}"), None),
        (
            format!("yy.test:{port}"),
            Some(format!("http://yy.test:{port}")),
        ),
    ] {
        let (status, body) = get(&host, origin.as_deref());
        assert_eq!(status, 200, "{host} {origin:?}: {body}");
    }
    // Health probes address the server however they like.
    let response = raw(
        &addr,
        "GET /healthz HTTP/1.1\r\nHost: probe.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&response), 200, "{response}");
    // The CLI itself is unaffected.
    env.run(&["whoami"]).ok();
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[test]
fn ping_hold_at_the_maximum_is_refused_clearly() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "src", &[]);
    let token = env.stored_token();
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let path = format!("/api/v1/runners/{}/ping", reg.id);
    for body in [
        format!(r#"{{"hold_ms":{}}}"#, u64::MAX),
        format!(r#"{{"hold_ms":{},"timeout_ms":1000}}"#, u64::MAX),
        r#"{"hold_ms":5000,"timeout_ms":1000}"#.to_string(),
    ] {
        let (status, text) = http(&server.addr(), "POST", &path, &headers, &body).unwrap();
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains("hold_ms"), "{body}: {text}");
    }
    let list = env.json(&["runner", "commands", &reg.id]);
    assert_eq!(list.as_array().unwrap().len(), 0, "nothing was queued");
}

#[test]
fn concurrent_connects_of_one_runner_never_refuse_the_newest() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "src", &[]);
    let server = Arc::new(server);
    for round in 0..25 {
        let start = Arc::new(Barrier::new(4));
        let connects: Vec<_> = (0..4)
            .map(|_| {
                let (server, token, start) = (server.clone(), reg.token.clone(), start.clone());
                std::thread::spawn(move || {
                    let instance = uuid();
                    start.wait();
                    // Instances that take over (`--replace`): without it, all but the
                    // first would be refused while another is online.
                    let (status, v) = common::machine(
                        &server,
                        "/runner/v1/connect",
                        &token,
                        &instance,
                        None,
                        &[("yy-replace", "1")],
                        common::STATUS,
                    );
                    assert_eq!(status, 200, "{v}");
                    (v["generation"].as_i64().unwrap(), instance)
                })
            })
            .collect();
        let (generation, instance) = connects
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap();
        let (status, v) = common::machine(
            &server,
            "/runner/v1/lease",
            &reg.token,
            &instance,
            Some(generation),
            &[],
            r#"{"max":1,"wait_ms":0}"#,
        );
        assert_eq!(
            status, 200,
            "round {round}: the newest connect was refused: {v}"
        );
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn database_files_are_private_and_a_shared_data_dir_is_refused() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "src", &[]);
    let (_runner, _) = env.start_online(&reg, "a", 0);
    let data = env.data_dir();
    for f in ["yy.db", "yy.db-wal", "yy.db-shm"] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    let receipts = env.path("runner-data-a/receipts.db");
    assert_eq!(mode(&receipts), 0o600);

    let shared = env.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    env.run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        shared.to_str().unwrap(),
    ])
    .fails(1, "use a directory of its own");
    assert_eq!(mode(&shared), 0o1777, "the shared directory was left alone");
    assert!(!shared.join("yy.db").exists());
}

#[test]
fn a_disabled_accounts_token_is_refused_at_once_and_tokens_expire_unused() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let server = Server::start_with(&env, &data, "127.0.0.1:0", &["--token-lifetime", "3s"]);
    env.login(&server, "root");
    env.run_with(
        &["account", "create", "alice", "--password-stdin"],
        PASSWORD,
        &[],
    )
    .ok();
    let alice = Env::new();
    alice.login(&server, "alice");
    let as_alice = |args: &[&str]| alice.run(args);
    as_alice(&["whoami"]).ok();

    // Admins see every token, an account only its own.
    let tokens = env.json(&["token", "list", "--account", "alice"]);
    assert_eq!(tokens.as_array().unwrap().len(), 1, "{tokens}");
    assert_eq!(tokens[0]["account"], "alice");
    as_alice(&["token", "list", "--account", "root"]).fails(4, "only admins");
    assert_eq!(alice.json(&["token", "list"]).as_array().unwrap().len(), 1);

    // Disabling revokes at once; the account cannot log in again until enabled.
    let shown = env.json(&["account", "disable", "alice"]);
    assert!(shown["disabled_at"].is_string(), "{shown}");
    as_alice(&["whoami"]).fails(4, "invalid or was revoked");
    alice
        .run_with(
            &[
                "login",
                &server.url,
                "--username",
                "alice",
                "--password-stdin",
            ],
            PASSWORD,
            &[],
        )
        .fails(4, "disabled");
    env.run(&["account", "disable", "root"])
        .fails(6, "your own account");
    let listed = env.run(&["account", "list"]);
    assert!(listed.stdout.contains("disabled "), "{listed:?}");
    env.run(&["account", "enable", "alice"]).ok();
    alice.login(&server, "alice");

    // An admin revokes one token by id.
    let id = alice.json(&["token", "list"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    env.run(&["token", "revoke", &id]).ok();
    as_alice(&["whoami"]).fails(4, "invalid or was revoked");

    // Changing one's password keeps the current token and revokes the others.
    alice.login(&server, "alice");
    let other = Env::new();
    other.login(&server, "alice");
    let new_password = "a much better password";
    alice
        .run_with(
            &["account", "passwd", "--password-stdin"],
            &format!("{PASSWORD}\n{new_password}\n"),
            &[],
        )
        .ok();
    as_alice(&["whoami"]).ok();
    other.run(&["whoami"]).fails(4, "invalid or was revoked");
    alice
        .run_with(
            &["account", "passwd", "root", "--password-stdin"],
            &format!("{new_password}\nwhatever password\n"),
            &[],
        )
        .fails(4, "only your own password");

    // Tokens used keep living (sliding); a token left unused past its lifetime is dead.
    // Its expiry is read with another of root's tokens (a read with it would use it).
    let mine = env.json(&["token", "list", "--account", "root"]);
    assert_eq!(mine.as_array().unwrap().len(), 1, "{mine}");
    let mine = mine[0]["id"].as_str().unwrap().to_string();
    let watcher = Env::new();
    watcher.login(&server, "root");
    let expires = || {
        let list = watcher.json(&["token", "list", "--account", "root"]);
        let t = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == mine.as_str());
        humantime::parse_rfc3339(t.unwrap()["expires_at"].as_str().unwrap()).unwrap()
    };
    // Shown in whole seconds, cut: the token lives less than a second past what is shown.
    let past =
        |at: std::time::SystemTime| std::time::SystemTime::now() >= at + Duration::from_secs(1);
    let first = expires();
    common::wait_for(
        Duration::from_secs(20),
        "the token's first expiry to pass while it is used",
        || {
            env.run(&["whoami"]).ok();
            watcher.run(&["whoami"]).ok(); // (it lives by use too)
            past(first).then_some(())
        },
    );
    let last = expires();
    assert!(last > first, "each use extends it");
    common::wait_for(
        Duration::from_secs(20),
        "the token's expiry to pass unused",
        || past(last).then_some(()),
    );
    env.run(&["whoami"]).fails(4, "expired");
}

/// Bytes of every file below `dir` (the database and the artifact files).
fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[test]
fn repeated_big_fetches_leave_the_data_dir_bounded_after_the_retention_sweep() {
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    let server = Server::start_with(&env, &data, "127.0.0.1:0", &["--retention", "2s"]);
    env.login(&server, "root");
    let root = env.path("artifacts");
    std::fs::create_dir(&root).unwrap();
    let file = root.join("big.bin");
    let bytes: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &bytes).unwrap();
    let reg = env.register_runner(&server, "src", &["--artifact-root", root.to_str().unwrap()]);
    let (_runner, _) = env.start_online(&reg, "a", 0);
    let before = dir_size(&data);

    let fetches = 10;
    for i in 0..fetches {
        let out = env.path(&format!("out-{i}.bin"));
        env.run(&[
            "runner",
            "fetch",
            &reg.id,
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .ok();
        std::fs::remove_file(&out).unwrap();
    }
    let limit = before + 20 * 1024 * 1024;
    // Bounded once the sweep ran: small, and the finished commands are gone.
    let after = common::poll(Duration::from_secs(60), || {
        let size = dir_size(&data);
        let commands = env.json(&["runner", "commands", &reg.id]);
        (size < limit && commands.as_array().unwrap().len() < fetches).then_some(size)
    });
    let size = dir_size(&data);
    assert!(
        after.is_some(),
        "{fetches} fetches of 8 MiB left the data directory at {} MiB (it was {} MiB)",
        size / (1024 * 1024),
        before / (1024 * 1024)
    );
    eprintln!(
        "data directory: {} KiB before, {} KiB after {fetches} fetches of 8 MiB and the sweep",
        before / 1024,
        size / 1024
    );
    let list = env.json(&["runner", "commands", &reg.id]);
    assert!(
        list.as_array().unwrap().len() < fetches,
        "finished commands past the retention are deleted: {list}"
    );
    assert!(server.log().contains("retention: deleted old data"));
}

#[test]
fn hostile_runner_strings_are_refused_or_printed_escaped() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "src", &[]);
    // Each a new instance that takes over (`--replace`) from the one before.
    let connect = |status: &serde_json::Value| {
        common::machine(
            &server,
            "/runner/v1/connect",
            &reg.token,
            &uuid(),
            None,
            &[("yy-replace", "1")],
            &status.to_string(),
        )
    };
    // Words yy makes itself are checked strictly.
    for bad in [
        serde_json::json!({"version":"1.0\u{1b}[2J","capabilities":[],"computers_capacity":0,"hostname":"h"}),
        serde_json::json!({"version":"1.0","capabilities":["ping\nstate: disabled"],"computers_capacity":0,"hostname":"h"}),
        serde_json::json!({"version":"1.0","capabilities":[],"computers_capacity":0,"hostname":"h".repeat(300)}),
    ] {
        let (status, body) = connect(&bad);
        assert_eq!(status, 422, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_status", "{body}");
    }
    // The hostname is the host's own: kept exactly, printed escaped.
    let hostile = "evil\u{1b}[31mred\u{1b}]0;pwned\u{7}\nstate:       disabled";
    let (status, body) = connect(&serde_json::json!({
        "version": "1.0", "capabilities": ["ping"], "computers_capacity": 0, "hostname": hostile
    }));
    assert_eq!(status, 200, "{body}");
    let shown = env.run(&["runner", "show", &reg.id]);
    shown.ok();
    assert!(
        !shown.stdout.contains('\u{1b}') && !shown.stdout.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(
        shown
            .stdout
            .contains(r"evil\x1b[31mred\x1b]0;pwned\x07\nstate:       disabled"),
        "{}",
        shown.stdout
    );
    let states = shown
        .stdout
        .lines()
        .filter(|l| l.starts_with("state:"))
        .count();
    assert_eq!(states, 1, "a forged line: {}", shown.stdout);
    let listed = env.run(&["runner", "list"]);
    assert!(!listed.stdout.contains('\u{1b}'), "{listed:?}");
    assert_eq!(
        env.json(&["runner", "show", &reg.id])["hostname"],
        hostile,
        "JSON is exact"
    );
}
