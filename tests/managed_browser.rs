//! The managed browser of host agents, end to end: a real control plane, a Runner with
//! the real Hermes it starts (driven by the scripted model), Debian's Chromium behind yy's
//! egress proxy, and a page served in a network namespace the test makes, at an address
//! that classifies as public (every packet stays on this machine).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::hermes::{FakeModel, write_config};
use common::netns::Netns;
use common::{Env, configure, wait_for};
use serde_json::{Value, json};

/// The page's address in the test's namespace: public by classification, reached only
/// through the test's own veth.
const PUBLIC: &str = "93.184.215.14";

/// Requests the page server saw: when, and the path.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

/// A page that asks for `/tick` every 200 ms while it can reach its server, and a red band
/// a screenshot shows.
const PAGE: &str = "<html><head><title>Field report</title></head><body style='margin:0'>\
    <div style='background:#ff0000;height:300px'></div><h1>Quarterly numbers</h1>\
    <a href='/detail'>the detail</a>\
    <script>setInterval(() => fetch('/tick?' + Date.now()).catch(() => {}), 200)</script>\
    </body></html>";

fn serve_page(ns: &Netns) -> Seen {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    ns.thread(move || {
        let listener = TcpListener::bind(format!("{PUBLIC}:80")).unwrap();
        tx.send(()).unwrap();
        for mut conn in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut head = [0u8; 4096];
                let n = conn.read(&mut head).unwrap_or(0);
                let head = String::from_utf8_lossy(&head[..n]).to_string();
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push((Instant::now(), path.clone()));
                let body = if path.starts_with("/tick") { "" } else { PAGE };
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the page server listens");
    seen
}

fn ticks_since(seen: &Seen, since: Instant) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(at, p)| *at > since && p.starts_with("/tick"))
        .count()
}

fn pages_since(seen: &Seen, since: Instant) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(at, p)| *at > since && p == "/")
        .count()
}

struct Setup {
    env: Env,
    server: common::Server,
    reg: common::Registered,
    model: FakeModel,
}

/// A control plane, a host agent `web` with the managed browser, and a Runner with a
/// supervised Hermes (runner.json gets `runner_json` too), not started yet.
fn setup(script: Value, runner_json: Value) -> Option<Setup> {
    let hermes = common::require_hermes()?;
    common::chromium::require_chromium()?;
    let env = Env::new();
    let server = env.bootstrap();
    let model = FakeModel::start(&env.path("model"), script);
    let home = env.path("hermes-home");
    write_config(&home, model.port, &env.path("work"), "off", "");
    // The model sees images (Hermes's own model.supports_vision key): screenshots reach it.
    let config = home.join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "  api_mode: chat_completions\n",
        "  api_mode: chat_completions\n  supports_vision: true\n",
    );
    std::fs::write(&config, text).unwrap();
    let reg = env.register_runner(&server, "main", &[]);
    let mut cfg =
        json!({ "hermesCommand": [hermes.display().to_string(), "serve"], "hermesHome": home });
    for (k, v) in runner_json.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    configure(&reg, cfg);
    env.run(&[
        "agent",
        "create",
        "web",
        "--profile",
        "default",
        "--env",
        "host",
        "--browser",
    ])
    .ok();
    Some(Setup {
        env,
        server,
        reg,
        model,
    })
}

/// `yy chat web MESSAGE --json`: the turn's events, once it ended.
fn chat(s: &Setup, message: &str) -> Vec<Value> {
    let out = s.env.run(&["chat", "web", message, "--json"]);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        events.last().map(|e| e["turn"]["state"].clone()),
        Some(json!("complete")),
        "{out:#?}"
    );
    events
}

/// The results of the turn's tool calls, in order, as text.
fn tool_results(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool.complete")
        .map(|e| {
            (
                e["payload"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["payload"]["result"].to_string(),
            )
        })
        .collect()
}

/// The Chromium processes that run on `web`'s profile under `data`.
fn chromium_on_profile(data: &std::path::Path) -> usize {
    let profiles = data.join("browser").join("profiles");
    let needle = format!("--user-data-dir={}", profiles.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(&needle)
                })
                .unwrap_or(false)
        })
        .count()
}

/// The PNG a turn's screenshot handed the model: decoded from the model's requests.
fn screenshot_sent_to_model(model: &FakeModel) -> png::Reader<std::io::Cursor<Vec<u8>>> {
    use base64::Engine as _;
    let text = std::fs::read_to_string(&model.log).unwrap();
    let marker = "data:image/png;base64,";
    let at = text
        .find(marker)
        .expect("a screenshot reached the model as an image")
        + marker.len();
    let b64: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '+' || *c == '/' || *c == '=')
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap()
}

#[test]
fn a_host_agent_browses_a_public_page_through_the_proxy_and_its_network_pauses_between_turns() {
    let Some(ns) = Netns::create() else { return };
    let _link = ns.reach_from_host(PUBLIC);
    let seen = serve_page(&ns);
    let page = format!("http://{PUBLIC}/");
    let Some(s) = setup(
        json!([
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": page}}},
            {"tool_call": {"name": "browser_snapshot", "arguments": {}}},
            {"tool_call": {"name": "browser_screenshot", "arguments": {}}},
            // The page ticks while it stays open in the turn.
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 1"}}},
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": "http://127.0.0.1/"}}},
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": "http://10.1.2.3/"}}},
            {"text": "Read the report"},
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": page}}},
            {"tool_call": {"name": "browser_tabs", "arguments": {"action": "new", "url": format!("{page}detail")}}},
            {"tool_call": {"name": "browser_tabs", "arguments": {"action": "close", "index": 0}}},
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 2"}}},
            {"text": "Read it again"}
        ]),
        json!({}),
    ) else {
        return;
    };
    let (runner, _) = s
        .env
        .start_online_with(&s.reg, "a", 0, &["--browser-idle", "6s"]);
    let data = s.env.path("runner-data-a");
    let shown = s.env.json(&["runner", "show", &s.reg.id]);
    assert!(
        shown["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("browser-v1")),
        "{shown:#}"
    );

    let t0 = Instant::now();
    let events = chat(&s, "open the report");
    let ended = Instant::now();
    let results = tool_results(&events);
    assert_eq!(results.len(), 6, "{events:#?}");
    assert!(
        results[0].1.contains("opened http://93.184.215.14/")
            && results[0].1.contains("Field report"),
        "{results:#?}"
    );
    assert!(results[1].1.contains("Quarterly numbers"), "{results:#?}");
    assert!(results[1].1.contains("@e1"), "{results:#?}");
    // Loopback and a private address: refused by the proxy, saying so.
    for (i, what) in [
        (4, "refused 127.0.0.1:80"),
        (5, "refused 10.1.2.3:80 (private)"),
    ] {
        assert!(
            results[i].1.contains(&format!("egress proxy {what}")),
            "{i}: {results:#?}"
        );
    }
    assert!(pages_since(&seen, t0) >= 1);
    // The screenshot shows the page: its red band across the top.
    let mut png = screenshot_sent_to_model(&s.model);
    let mut pixels = vec![0; png.output_buffer_size()];
    let info = png.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1280, 800));
    let channels = info.line_size / info.width as usize;
    let at = |x: usize, y: usize| {
        let i = y * info.line_size + x * channels;
        (pixels[i], pixels[i + 1], pixels[i + 2])
    };
    assert_eq!(at(640, 100), (255, 0, 0), "the red band");
    assert_ne!(at(640, 500), (255, 0, 0), "below the band");

    // After the turn the page keeps trying, and nothing reaches the network.
    std::thread::sleep(Duration::from_secs(1));
    let quiet = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ticks_since(&seen, quiet),
        0,
        "the page still reached its server after the turn"
    );
    assert!(
        ticks_since(&seen, t0) > 0 && ticks_since(&seen, ended) < ticks_since(&seen, t0),
        "the page ticked during the turn"
    );
    assert!(chromium_on_profile(&data) > 0, "the context stays open");

    // The next turn opens it again.
    let t1 = Instant::now();
    let events = chat(&s, "look again");
    let results = tool_results(&events);
    assert!(
        results[0].1.contains("opened http://93.184.215.14/"),
        "{results:#?}"
    );
    assert!(pages_since(&seen, t1) >= 1 && ticks_since(&seen, t1) > 0);

    // Unused for the idle time (6 s here), the context closes; its profile stays.
    wait_for(Duration::from_secs(30), "the idle context to close", || {
        (chromium_on_profile(&data) == 0).then_some(())
    });
    let profiles = data.join("browser").join("profiles");
    assert_eq!(std::fs::read_dir(&profiles).unwrap().count(), 1);
    drop(runner);
}

#[test]
fn an_explicit_close_a_new_connection_and_a_revoked_permission_close_the_context_and_archiving_removes_its_profile()
 {
    let open = json!({"tool_call": {"name": "browser_navigate", "arguments": {"url": "http://10.1.2.3/"}}});
    let Some(s) = setup(
        json!([
            open, {"text": "Could not open it"},
            open, {"text": "Could not open it"},
            open, {"text": "Could not open it"},
            {"tool_call": {"name": "browser_snapshot", "arguments": {}}},
            {"text": "No browser"}
        ]),
        json!({}),
    ) else {
        return;
    };
    let Setup {
        env,
        server,
        reg,
        model: _model,
    } = s;
    let (runner, generation) = env.start_online(&reg, "a", 0);
    let data = env.path("runner-data-a");
    let turn = |message: &str| {
        let out = env.run(&["chat", "web", message, "--json"]);
        let events: Vec<Value> = out
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        tool_results(&events)
    };
    let opened = |what: &str| {
        let results = turn(what);
        assert!(
            results[0].1.contains("refused 10.1.2.3:80 (private)"),
            "{results:#?}"
        );
        assert!(chromium_on_profile(&data) > 0, "the context opened");
    };
    let closed = |why: &str| {
        wait_for(Duration::from_secs(20), why, || {
            (chromium_on_profile(&data) == 0).then_some(())
        });
    };
    opened("open it");
    let profiles = data.join("browser").join("profiles");
    assert_eq!(std::fs::read_dir(&profiles).unwrap().count(), 1);

    // An explicit close.
    let shut = env.json(&["browser", "close", "web"]);
    assert_eq!(shut["closed"], true);
    closed("the closed context's Chromium to end");

    // A new connection to the control plane (restarted) closes what the old one granted.
    opened("again");
    let addr = server.addr();
    assert_eq!(server.terminate(), 0);
    let server = common::Server::start_with(&env, &env.data_dir(), &addr, &[]);
    env.wait_online(&reg.id, generation);
    closed("the contexts of the old connection to close");
    opened("a third time");

    // Revoked: the context closes at once (a `browser.close` on the Runner); the profile
    // stays; the next turn's calls are refused.
    let shown = env.json(&["agent", "update", "web", "--no-browser"]);
    assert_eq!(shown["browser"], false);
    closed("the revoked context to close");
    assert_eq!(std::fs::read_dir(&profiles).unwrap().count(), 1);
    let results = turn("look");
    assert!(
        results[0].1.contains("may not use a browser"),
        "{results:#?}"
    );
    assert_eq!(chromium_on_profile(&data), 0);

    // Archived: its profile goes.
    env.run(&["agent", "archive", "web"]).ok();
    wait_for(
        Duration::from_secs(20),
        "the archived agent's profile to go",
        || (std::fs::read_dir(&profiles).unwrap().count() == 0).then_some(()),
    );
    drop((runner, server));
}

#[test]
fn browser_enabled_false_keeps_it_off() {
    let Some(s) = setup(
        json!([
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": "http://10.1.2.3/"}}},
            {"text": "No browser here"}
        ]),
        json!({ "browser": { "enabled": false } }),
    ) else {
        return;
    };
    let (runner, _) = s.env.start_online(&s.reg, "a", 0);
    let data = s.env.path("runner-data-a");
    let shown = s.env.json(&["runner", "show", &s.reg.id]);
    assert!(
        !shown["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("browser-v1")),
        "{shown:#}"
    );
    let results = tool_results(&chat(&s, "open it"));
    assert!(results[0].1.contains("off on this Runner"), "{results:#?}");
    assert_eq!(chromium_on_profile(&data), 0);
    assert!(!data.join("browser").join("profiles").exists());
    drop(runner);
}

/// A GET to the web view over plain TCP: status, head, body.
fn web_get(url: &str, cookie: Option<&str>) -> (u16, String, Vec<u8>) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut conn = std::net::TcpStream::connect(host).unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        conn,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\n{cookie}Accept: text/html\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    conn.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, all[split + 4..].to_vec())
}

#[test]
fn a_takeover_holds_the_models_browser_calls_acts_on_the_latest_frame_and_hands_back_a_note() {
    let Some(s) = setup(
        json!([
            {"tool_call": {"name": "browser_navigate", "arguments": {"url": "http://10.1.2.3/"}}},
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 6"}}},
            {"tool_call": {"name": "browser_snapshot", "arguments": {}}},
            {"text": "Done with the page"}
        ]),
        json!({}),
    ) else {
        return;
    };
    let (runner, _) = s.env.start_online_with(
        &s.reg,
        "a",
        0,
        &["--browser-idle", "8s", "--metrics-listen", "127.0.0.1:0"],
    );
    let data = s.env.path("runner-data-a");
    let metrics = runner.metrics_addr();
    let gauge = |name: &str| -> String {
        let (status, head, body) = web_get(&format!("http://{metrics}/metrics"), None);
        assert_eq!(status, 200, "{head}");
        String::from_utf8_lossy(&body)
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_string()
    };
    let chat = s
        .env
        .background(&s.server, &["chat", "web", "work on the page", "--json"]);
    // The navigation is done and the model sleeps in its terminal: take control now.
    wait_for(Duration::from_secs(120), "the model's second step", || {
        (s.model.steps().len() >= 2).then_some(())
    });
    let mut attach = s.env.control_with(
        &["browser", "attach", "web", "--control"],
        std::process::Stdio::null(),
    );
    let fence = s.env.json(&["browser", "show", "web"])["control_fence"]
        .as_i64()
        .unwrap();
    assert_eq!(fence, 1);
    assert_eq!(
        gauge("yy_runner_browser_contexts"),
        "yy_runner_browser_contexts 1"
    );
    assert_eq!(
        gauge("yy_runner_browser_taken_over"),
        "yy_runner_browser_taken_over 1"
    );

    // A look gives a frame; input aims at it under the fence.
    let shot = s.env.path("shot.png");
    let look = s
        .env
        .json(&["browser", "screenshot", "web", "-o", shot.to_str().unwrap()]);
    assert_eq!(
        (look["width"].as_u64(), look["height"].as_u64()),
        (Some(1280), Some(800))
    );
    let frame = look["frame_id"].as_str().unwrap().to_string();
    let fence_arg = fence.to_string();
    let act = |frame: &str, fence: &str| {
        s.env.run(&[
            "browser",
            "screen",
            "web",
            "left_click",
            "20",
            "30",
            "--fence",
            fence,
            "--frame",
            frame,
        ])
    };
    let clicked = act(&frame, &fence_arg);
    assert_eq!(clicked.code, 0, "{clicked:?}");
    assert!(clicked.stdout.contains("cursor 20,30"), "{clicked:?}");
    // A newer frame makes the old one stale; a wrong fence is refused by the control plane.
    s.env
        .json(&["browser", "screenshot", "web", "-o", shot.to_str().unwrap()]);
    let stale = act(&frame, &fence_arg);
    assert_ne!(stale.code, 0);
    assert!(stale.stderr.contains("not the latest"), "{stale:?}");
    let wrong = act(&frame, "7");
    assert_ne!(wrong.code, 0);
    assert!(wrong.stderr.contains("control fence 7"), "{wrong:?}");

    // The model's next browser call waits while the operator holds the browser.
    wait_for(
        Duration::from_secs(60),
        "the model's browser_snapshot call",
        || (s.model.steps().len() >= 3).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        s.model.steps().len(),
        3,
        "the snapshot call went on under control"
    );

    // A line hands back with it as the note; the waiting call carries it to the model.
    writeln!(
        attach.child.stdin.as_mut().unwrap(),
        "I closed the cookie banner"
    )
    .unwrap();
    common::wait_line(&attach.err, "handed back", &mut attach.seen);
    assert!(attach.child.wait().unwrap().success());
    wait_for(Duration::from_secs(10), "the hold to end", || {
        (gauge("yy_runner_browser_taken_over") == "yy_runner_browser_taken_over 0").then_some(())
    });
    let out = chat.output();
    assert!(out.status.success(), "{out:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let results = tool_results(&events);
    assert!(
        results[2]
            .1
            .contains("handed it back with this note: I closed the cookie banner"),
        "{results:#?}"
    );
    let audit = s.env.json(&["computer", "audit"]);
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for a in ["browser.control", "browser.screen", "browser.handback"] {
        assert!(actions.contains(&a), "{a}: {actions:?}");
    }

    // The page of `attach --web` shows the browser's frames.
    let mut web = s
        .env
        .command(&["browser", "attach", "web", "--web"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let link = common::lines_of(web.stdout.take().unwrap())
        .recv_timeout(Duration::from_secs(30))
        .unwrap();
    let (status, head, body) = web_get(&link, None);
    assert_eq!(status, 303, "{head}");
    let cookie = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string();
    let base = link.split_once("/?").unwrap().0;
    let (status, head, body2) = web_get(&format!("{base}/"), Some(&cookie));
    assert_eq!(status, 200, "{head}");
    assert!(String::from_utf8_lossy(&body2).contains("browser <code>web</code>"));
    let (status, head, png) = web_get(&format!("{base}/frame"), Some(&cookie));
    assert_eq!(status, 200, "{head}");
    assert!(png.starts_with(b"\x89PNG"), "{head}");
    assert!(head.to_ascii_lowercase().contains("x-frame-id: "), "{head}");
    drop(body);
    let _ = web.kill();
    let _ = web.wait();

    // Looks do not keep it open: it closes after its idle time (8 s here) while an
    // operator keeps taking screenshots, and then there is nothing to look at.
    let last_use = Instant::now();
    while chromium_on_profile(&data) > 0 {
        assert!(
            last_use.elapsed() < Duration::from_secs(30),
            "never reclaimed"
        );
        s.env
            .run(&["browser", "screenshot", "web", "-o", shot.to_str().unwrap()]);
        std::thread::sleep(Duration::from_secs(1));
    }
    let gone = s
        .env
        .run(&["browser", "screenshot", "web", "-o", shot.to_str().unwrap()]);
    assert_ne!(gone.code, 0);
    assert!(gone.stderr.contains("not open"), "{gone:?}");
    drop(runner);
}
