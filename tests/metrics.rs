//! Metrics and `yy status`, end to end: a real `yy serve` and `yy runner run`, their
//! `/metrics` read over loopback HTTP and parsed as Prometheus text, and the counters
//! checked to move when commands run.

mod common;

use std::time::Duration;

use common::{Env, PASSWORD, Server, http, send_lease, wait_for};
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};

type Scrape = MetricsExposition<PrometheusType, PrometheusValue>;

/// Parses Prometheus text with a grammar-based parser (openmetrics-parser), which refuses
/// anything malformed rather than skipping it.
fn parse(text: &str) -> Scrape {
    parse_prometheus(text).unwrap_or_else(|e| panic!("not Prometheus text ({e:?}):\n{text}"))
}

/// The value of one sample, a histogram's count (0 when the series is not there yet).
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let Some(family) = s.families.get(name) else {
        return 0.0;
    };
    family
        .iter_samples()
        .find(|x| {
            let set = x.get_labelset().expect("labels");
            labels
                .iter()
                .all(|(k, v)| set.get_label_value(k) == Some(*v))
        })
        .map(|x| match &x.value {
            PrometheusValue::Unknown(n) | PrometheusValue::Gauge(n) => n.as_f64(),
            PrometheusValue::Counter(c) => c.value.as_f64(),
            PrometheusValue::Histogram(h) => h.count.unwrap_or(0) as f64,
            PrometheusValue::Summary(s) => s.count.unwrap_or(0) as f64,
        })
        .unwrap_or(0.0)
}

#[test]
fn the_parser_refuses_malformed_text() {
    // So a scrape that parses below is well-formed, not skipped over.
    assert!(parse_prometheus("yy_x{a=\"b} 1\n").is_err());
    assert!(parse_prometheus("yy_x one\n").is_err());
    assert!(parse_prometheus("# TYPE yy_x counter\nyy_x{a=\"{id}\"} 1\n").is_ok());
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// GET `path` with `token` (if any): (status, body).
fn get(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map(bearer);
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    http(&server.addr(), "GET", path, &headers, "").unwrap()
}

fn scrape(server: &Server, token: &str) -> Scrape {
    let (status, body) = get(server, "/metrics", Some(token));
    assert_eq!(status, 200, "{body}");
    parse(&body)
}

#[test]
fn metrics_need_a_token_and_a_scrape_token_reads_nothing_else() {
    let env = Env::new();
    let server = env.bootstrap();
    let admin = env.stored_token();

    let (status, body) = get(&server, "/metrics", None);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("scrape token"), "{body}");

    let made = env.run(&["metrics", "token", "create", "prom"]);
    made.ok();
    let token = made.stdout.trim().to_string();
    assert!(token.starts_with("yyst_"), "{made:?}");
    assert!(
        !made.stderr.contains(&token),
        "the token goes to stdout only"
    );

    let s = scrape(&server, &token);
    assert_eq!(value(&s, "yy_runners", &[("state", "online")]), 0.0);
    for family in ["yy_runners", "yy_longpolls", "yy_turns", "yy_goals"] {
        assert!(s.families.contains_key(family), "{family} missing");
    }
    // An admin's API token reads it too.
    scrape(&server, &admin);

    // The scrape token can call nothing else.
    for (method, path) in [
        ("GET", "/api/v1/whoami"),
        ("GET", "/api/v1/runners"),
        ("GET", "/api/v1/status"),
        ("GET", "/api/v1/metrics/tokens"),
    ] {
        let (status, body) = http(
            &server.addr(),
            method,
            path,
            &[("Authorization", &bearer(&token))],
            "",
        )
        .unwrap();
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("reads /metrics and nothing else"), "{body}");
    }
    let (status, _) = http(
        &server.addr(),
        "POST",
        "/api/v1/metrics/tokens",
        &[
            ("Authorization", &bearer(&token)),
            ("Content-Type", "application/json"),
        ],
        r#"{"name":"more"}"#,
    )
    .unwrap();
    assert_eq!(status, 403);

    // An account that is not an admin reads no metrics and makes no scrape token.
    env.run_with(
        &["account", "create", "alice", "--password-stdin"],
        PASSWORD,
        &[],
    )
    .ok();
    let alice = Env::new();
    alice.login(&server, "alice");
    let (status, body) = get(&server, "/metrics", Some(&alice.stored_token()));
    assert_eq!(status, 403, "{body}");
    alice
        .run(&["metrics", "token", "create", "mine"])
        .fails(4, "not an admin");

    // Listed without the secret; a second live one of the same name is refused.
    let list = env.json(&["metrics", "token", "ls"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["name"], "prom");
    assert_eq!(list[0]["created_by"], "root");
    assert!(!list.to_string().contains(&token));
    env.run(&["metrics", "token", "create", "prom"])
        .fails(6, "already named");

    // Revoked: 401 at once; a made-up one too.
    env.run(&["metrics", "token", "revoke", "prom"]).ok();
    let (status, _) = get(&server, "/metrics", Some(&token));
    assert_eq!(status, 401);
    let (status, _) = get(&server, "/metrics", Some("yyst_nothing"));
    assert_eq!(status, 401);
    assert!(
        env.json(&["metrics", "token", "ls"])
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn counters_move_when_commands_run_on_the_server_and_the_runner() {
    let env = Env::new();
    let server = env.bootstrap();
    let admin = env.stored_token();
    let reg = env.register_runner(&server, "lab", &[]);
    let runner = env.start_runner_with(&reg, "main", &["--metrics-listen", "127.0.0.1:0"]);
    env.wait_online(&reg.id, 0);
    // The Runner's own metrics: the port it picked is in its log.
    let runner_addr = runner.metrics_addr();

    let ping = [("kind", "ping"), ("outcome", "done")];
    let route = [("route", "/api/v1/runners/{id}/ping"), ("code", "200")];
    let before = scrape(&server, &admin);
    env.json(&["runner", "ping", &reg.id, "--count", "3"]);
    // A failed login and a path no route matches count too.
    env.run_with(
        &[
            "login",
            &server.url,
            "--username",
            "root",
            "--password-stdin",
        ],
        "wrong password",
        &[],
    )
    .fails(4, "wrong username or password");
    get(&server, "/no/such/path", None);

    let after = scrape(&server, &admin);
    let moved = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    assert_eq!(moved("yy_commands_total", &ping), 3.0);
    assert!(moved("yy_command_pickup_seconds", &[]) >= 3.0);
    assert!(moved("yy_http_requests_total", &route) >= 3.0);
    assert!(
        moved(
            "yy_http_requests_total",
            &[("route", "unmatched"), ("code", "404")]
        ) >= 1.0
    );
    assert_eq!(moved("yy_login_failures_total", &[]), 1.0);
    assert_eq!(value(&after, "yy_runners", &[("state", "online")]), 1.0);
    assert_eq!(value(&after, "yy_runners", &[("state", "offline")]), 0.0);
    assert_eq!(
        value(
            &after,
            "yy_computers",
            &[("runner", &reg.id), ("state", "running")]
        ),
        0.0
    );
    // The Runner keeps a long-poll open between commands.
    wait_for(Duration::from_secs(10), "a long-poll open", || {
        (value(&scrape(&server, &admin), "yy_longpolls", &[]) >= 1.0).then_some(())
    });
    // No raw path, no id in any route label.
    for x in after.families["yy_http_requests_total"].iter_samples() {
        let set = x.get_labelset().unwrap();
        let r = set.get_label_value("route").unwrap();
        assert!(!r.contains(&reg.id) && !r.contains("no/such"), "{r}");
    }

    // The Runner's own endpoint: no auth on loopback, its counters moved too.
    let (status, body) = http(&runner_addr, "GET", "/metrics", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let r = parse(&body);
    assert_eq!(value(&r, "yy_runner_commands_total", &ping), 3.0);
    assert_eq!(value(&r, "yy_runner_connected", &[]), 1.0);
    assert_eq!(value(&r, "yy_runner_commands_running", &[]), 0.0);

    // yy status: the same Runner, online, in JSON and on the screen.
    let st = env.json(&["status"]);
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));
    assert!(st["database_bytes"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["runners"][0]["id"], reg.id.as_str());
    assert_eq!(st["runners"][0]["state"], "online");
    assert!(st["warnings"].as_array().unwrap().is_empty());
    let screen = env.run(&["status"]);
    screen.ok();
    assert!(screen.stdout.contains(&reg.id), "{}", screen.stdout);
    assert!(
        screen.stdout.contains("turns: 0 running"),
        "{}",
        screen.stdout
    );
    // --watch redraws a terminal; the test's stdout is a pipe.
    env.run(&["status", "--watch"]).fails(2, "not one");
}

#[test]
fn runner_metrics_listen_is_checked() {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "lab", &[]);
    let config = reg.config.to_str().unwrap();
    env.run(&[
        "runner",
        "run",
        "--config",
        config,
        "--metrics-listen",
        "0.0.0.0:0",
    ])
    .fails(2, "--metrics-listen-public");
    // clap's own error (several lines): the value and what it should be.
    let out = env.run(&[
        "runner",
        "run",
        "--config",
        config,
        "--metrics-listen",
        "nowhere",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("is not HOST:PORT"), "{out:?}");
}

const RUNNER_INSTANCE: &str = "00000000-0000-4000-8000-000000000002";

/// A waiting lease holds almost nothing of its connection (vendor/README.md: hyper reads
/// for the peer's EOF into a small buffer): a Runner that hangs up is still noticed at
/// once, and a request sent behind the waiting one, longer than that buffer, is answered
/// whole when the wait ends.
#[test]
fn a_waiting_lease_notices_its_runner_hang_up_and_answers_a_request_sent_behind_it() {
    use std::io::{BufRead, BufReader, Read, Write};
    let env = Env::new();
    let server = env.bootstrap();
    let admin = env.stored_token();
    let a = env.register_runner(&server, "alpha", &[]);
    let g = common::connect_runner(&server, &a.token, RUNNER_INSTANCE);
    let open_polls = || value(&scrape(&server, &admin), "yy_longpolls", &[]);

    // Hang up while the lease waits: the wait ends with the connection.
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    send_lease(
        &mut stream,
        &server,
        (&a.token, RUNNER_INSTANCE, g),
        20_000,
        false,
    );
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 200"), "{status_line}");
    wait_for(Duration::from_secs(5), "the long-poll counted", || {
        (open_polls() == 1.0).then_some(())
    });
    drop(reader);
    stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(stream);
    wait_for(
        Duration::from_secs(5),
        "the hung-up long-poll let go",
        || (open_polls() == 0.0).then_some(()),
    );

    // A request sent behind a waiting lease, once its headers are in.
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    send_lease(
        &mut stream,
        &server,
        (&a.token, RUNNER_INSTANCE, g),
        2_000,
        false,
    );
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 200"), "{status_line}");
    let padding = "p".repeat(3000);
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Padding: {padding}\r\nConnection: close\r\n\r\n",
        server.addr()
    )
    .unwrap();
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    let second = rest
        .find("HTTP/1.1 ")
        .unwrap_or_else(|| panic!("no second answer after the lease's: {rest}"));
    assert!(rest[..second].contains(r#""commands":[]"#), "{rest}");
    assert!(rest[second..].starts_with("HTTP/1.1 200"), "{rest}");
    assert!(rest[second..].contains(r#""status":"ok""#), "{rest}");
}
