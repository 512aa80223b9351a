//! The managed browser's first parts (issue 28 A): Debian's Chromium started by yy on a
//! private profile, driven through the DevTools pipe. Pages are `data:` URLs or a server on
//! 127.0.0.2; Chromium always has a proxy (one nobody listens on, or yy's egress proxy
//! that dials only 127.0.0.2) and resolves no name itself, so nothing leaves the machine.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use yy::browser::contexts::{Contexts, Settings};
use yy::browser::network::Network;
use yy::browser::{Browser, LaunchOptions, Link, Scroll, profile_dir};
use yy::egress::classify::Ports;
use yy::egress::proxy::{ProxyConfig, StaticResolver};

const PAGE: &str = "data:text/html,<title>Quarterly</title><h1>Hello from the page</h1>\
    <p>Second line</p><a href='https://example.org/report'>the report</a>";

#[tokio::test]
async fn a_page_is_opened_read_and_photographed_through_the_pipe() {
    let Some(exe) = common::chromium::require_chromium() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let profile = profile_dir(data.path(), "agent-1");
    let browser = Browser::launch(&offline(exe), &profile).await.unwrap();
    let mode = std::fs::metadata(&profile).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the profile is private");
    // Only the pipe: Chromium opened no debugging port.
    assert!(!profile.join("DevToolsActivePort").exists());

    browser.navigate(PAGE).await.unwrap();
    let snap = browser.snapshot().await.unwrap();
    assert_eq!(snap.title, "Quarterly");
    assert!(snap.text.contains("Hello from the page"), "{snap:?}");
    assert!(snap.text.contains("Second line"), "{snap:?}");
    assert_eq!(
        snap.links,
        vec![Link {
            text: "the report".into(),
            href: "https://example.org/report".into()
        }]
    );

    let png = browser.screenshot().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The IHDR chunk: width and height, big-endian, at bytes 16..24.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 800));

    // A page the browser cannot open is an error that names it, and the browser stays.
    let err = browser
        .navigate("yy-no-such-scheme://x")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("yy-no-such-scheme://x"), "{err}");
    assert!(browser.snapshot().await.is_ok());

    // Dropped, the browser goes; its profile stays for the next time.
    let pid = browser.pid();
    drop(browser);
    wait_gone(pid);
    assert!(profile.is_dir());
    // A missing Chromium is named.
    let missing = data.path().join("no-chromium");
    let err = match Browser::launch(&LaunchOptions::new(missing.clone()), &profile).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a missing executable started"),
    };
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}

/// Chromium with a proxy nobody listens on: its own background requests go nowhere.
fn offline(exe: std::path::PathBuf) -> LaunchOptions {
    let mut opts = LaunchOptions::new(exe);
    opts.proxy = Some("http://127.0.0.1:9".into());
    opts
}

/// Waits until process `pid` runs no more (a zombie not reaped yet runs nothing).
fn wait_gone(pid: u32) {
    common::wait_for(Duration::from_secs(10), "Chromium to exit", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split_whitespace().nth(2) == Some("Z"))
            .unwrap_or(true)
            .then_some(())
    });
}

/// A page server on `listener` that counts the requests for `/page` (never cached).
fn serve_page(listener: TcpListener, text: &'static str) -> Arc<AtomicUsize> {
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let n = conn.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]);
            if head.contains(" /page") {
                count.fetch_add(1, Ordering::SeqCst);
            }
            let body = format!("<title>{text}</title><p>{text}</p>");
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    served
}

/// A page server on 127.0.0.2, which stands for a public address in these tests (the
/// proxy's test knob), and a proxy configuration that lets only it through.
fn public_page() -> (u16, Arc<AtomicUsize>, ProxyConfig) {
    let public = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = public.local_addr().unwrap().port();
    let served = serve_page(public, "Served page");
    let cfg = ProxyConfig {
        ports: Ports {
            connect: 443,
            http: port,
        },
        treat_as_public: vec![(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 32)],
        ..ProxyConfig::default()
    };
    (port, served, cfg)
}

/// Opens `url` (a refusal shows Chromium's error page) and returns the page's text.
async fn read(browser: &Browser, url: &str) -> String {
    let _ = browser.navigate(url).await;
    browser.snapshot().await.unwrap().text
}

#[tokio::test]
async fn the_browser_reaches_only_what_its_proxy_allows_and_nothing_while_paused() {
    let Some(exe) = common::chromium::require_chromium() else {
        return;
    };
    let (port, public_served, cfg) = public_page();
    // The same port on 127.0.0.1 is loopback and refused.
    let loopback_served = TcpListener::bind(("127.0.0.1", port))
        .ok()
        .map(|l| serve_page(l, "Loopback page"));
    let network = Network::start(cfg, Arc::new(StaticResolver::default()))
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut opts = LaunchOptions::new(exe);
    opts.proxy = Some(network.proxy_url().to_string());
    let browser = Browser::launch(&opts, &profile_dir(data.path(), "agent-1"))
        .await
        .unwrap();
    let verdicts = || {
        network
            .decisions()
            .into_iter()
            .map(|d| d.verdict)
            .collect::<Vec<_>>()
    };

    let page = |n: u32| format!("http://127.0.0.2:{port}/page?n={n}");

    assert!(read(&browser, &page(1)).await.contains("Served page"));
    assert_eq!(public_served.load(Ordering::SeqCst), 1);

    let text = read(&browser, &format!("http://127.0.0.1:{port}/page?n=2")).await;
    assert!(!text.contains("Loopback page"), "{text}");
    if let Some(served) = &loopback_served {
        assert_eq!(served.load(Ordering::SeqCst), 0, "loopback was reached");
    }
    // Refused as the proxy's own address (it listens on 127.0.0.1), or as loopback.
    let to_loopback: Vec<_> = network
        .decisions()
        .into_iter()
        .filter(|d| d.host == "127.0.0.1")
        .collect();
    assert!(!to_loopback.is_empty(), "{:?}", verdicts());
    assert!(to_loopback.iter().all(|d| !d.allowed), "{to_loopback:?}");

    network.pause();
    assert!(!read(&browser, &page(3)).await.contains("Served page"));
    assert_eq!(
        public_served.load(Ordering::SeqCst),
        1,
        "reached while paused"
    );
    assert!(
        verdicts().contains(&"paused".to_string()),
        "{:?}",
        verdicts()
    );

    network.resume();
    assert!(read(&browser, &page(4)).await.contains("Served page"));
    assert_eq!(public_served.load(Ordering::SeqCst), 2);
}

const FORM: &str = "data:text/html,<input placeholder='Your name'>\
    <button onclick=\"document.getElementById('out').textContent = 'Hello ' + document.querySelector('input').value\">Greet</button>\
    <p id=out>nobody yet</p><div style='height:3000px'></div><p>the end</p>";

#[tokio::test]
async fn a_model_types_clicks_scrolls_and_goes_back_by_the_snapshot_s_refs() {
    let Some(exe) = common::chromium::require_chromium() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let browser = Browser::launch(&offline(exe), &profile_dir(data.path(), "a"))
        .await
        .unwrap();
    browser.navigate(PAGE).await.unwrap();
    browser.navigate(FORM).await.unwrap();
    let snap = browser.snapshot().await.unwrap();
    let kinds: Vec<(&str, &str, &str)> = snap
        .elements
        .iter()
        .map(|e| (e.ref_id.as_str(), e.kind.as_str(), e.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("@e1", "input", "Your name"), ("@e2", "button", "Greet")]
    );
    browser.type_text("@e1", "Ada").await.unwrap();
    browser.click("@e2").await.unwrap();
    let text = browser.snapshot().await.unwrap().text;
    assert!(text.contains("Hello Ada"), "{text}");

    let err = browser.click("@e9").await.unwrap_err().to_string();
    assert!(err.contains("take a new snapshot"), "{err}");
    let err = browser
        .click("x'); alert(1); ('")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an element ref"), "{err}");

    browser.scroll(Scroll::Down).await.unwrap();
    let y = browser.eval("window.scrollY").await.unwrap();
    assert!(y.as_f64().unwrap() > 100.0, "{y}");
    browser.scroll(Scroll::Up).await.unwrap();
    assert_eq!(browser.eval("window.scrollY").await.unwrap(), 0);

    browser.back().await.unwrap();
    assert_eq!(browser.snapshot().await.unwrap().title, "Quarterly");
}

#[tokio::test]
async fn a_context_opens_paused_serves_its_turn_and_is_reclaimed_when_unused() {
    let Some(exe) = common::chromium::require_chromium() else {
        return;
    };
    let (port, served, proxy) = public_page();
    let data = tempfile::tempdir().unwrap();
    let idle = Duration::from_secs(30 * 60);
    let settings = |enabled| Settings {
        enabled,
        launch: LaunchOptions::new(exe.clone()),
        proxy: proxy.clone(),
        resolver: Arc::new(StaticResolver::default()),
        data_dir: data.path().to_path_buf(),
        idle,
    };
    let contexts = Contexts::new(settings(true));
    let page = |n: u32| format!("http://127.0.0.2:{port}/page?n={n}");

    // Opened on first use with its network paused: only a turn opens it, until it ends.
    let a = contexts.get_or_open("agent-a").await.unwrap();
    assert!(!read(&a.browser, &page(1)).await.contains("Served page"));
    contexts.authorize("agent-a").await.unwrap();
    assert!(read(&a.browser, &page(2)).await.contains("Served page"));
    contexts.end_use("agent-a").await;
    assert!(!read(&a.browser, &page(3)).await.contains("Served page"));
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "reached only during the turn"
    );

    // Looking does not renew; using does.
    let b = contexts.get_or_open("agent-b").await.unwrap();
    let a_used = a.last_used();
    let peeked = contexts.peek("agent-a").await.unwrap();
    peeked.browser.screenshot().await.unwrap();
    contexts.get_or_open("agent-b").await.unwrap();
    assert_eq!(a.last_used(), a_used, "a look renewed the context");
    assert!(b.last_used() > a_used);
    assert_eq!(
        contexts.reclaim_idle_at(a_used + idle).await,
        vec!["agent-a".to_string()]
    );
    assert!(contexts.peek("agent-a").await.is_none());
    assert!(contexts.peek("agent-b").await.is_some());
    // Gone although the test still holds it.
    wait_gone(a.browser.pid());
    assert!(peeked.browser.snapshot().await.is_err());

    // Closing keeps the profile; removing the agent removes it.
    let profile = profile_dir(data.path(), "agent-b");
    assert!(contexts.close("agent-b").await);
    wait_gone(b.browser.pid());
    assert!(profile.is_dir());
    contexts.remove_agent("agent-b").await.unwrap();
    assert!(!profile.exists());

    let off = Contexts::new(settings(false));
    let err = off.get_or_open("agent-a").await.err().unwrap().to_string();
    assert!(err.contains("browser.enabled"), "{err}");
}
