//! The proxy on loopback, smokescreen style: an injected resolver answers every name, the
//! only servers are on 127.0.0.2 (treated as public by code, as only tests and the
//! benchmark may), and refused destinations are never dialled.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const SERVER_IP: &str = "127.0.0.2";

struct Harness {
    proxy: SocketAddr,
    handle: Arc<Proxy>,
    connect_port: u16,
    http_port: u16,
    /// Connections the test servers accepted.
    accepted: Arc<AtomicUsize>,
    decisions: Arc<Mutex<Vec<Decision>>>,
    stop: CancellationToken,
    /// The last request head the HTTP server saw.
    seen: Arc<Mutex<String>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// An echo server (for CONNECT) and a one-shot HTTP server that answers `hello`.
async fn servers(
    accepted: Arc<AtomicUsize>,
    seen: Arc<Mutex<String>>,
    stop: CancellationToken,
) -> (u16, u16) {
    let echo = TcpListener::bind((SERVER_IP, 0)).await.unwrap();
    let http = TcpListener::bind((SERVER_IP, 0)).await.unwrap();
    let ports = (
        echo.local_addr().unwrap().port(),
        http.local_addr().unwrap().port(),
    );
    let (a1, a2, s1) = (accepted.clone(), accepted, stop.clone());
    tokio::spawn(async move {
        loop {
            let (mut s, _) =
                tokio::select! { r = echo.accept() => r.unwrap(), _ = s1.cancelled() => return };
            a1.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    tokio::spawn(async move {
        loop {
            let (mut s, _) =
                tokio::select! { r = http.accept() => r.unwrap(), _ = stop.cancelled() => return };
            a2.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                let (head, _) = match read_head(&mut s).await {
                    Ok(h) => h,
                    Err(_) => return,
                };
                *seen.lock().unwrap() = String::from_utf8_lossy(&head).to_string();
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    )
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    ports
}

async fn harness(tune: impl FnOnce(&mut ProxyConfig)) -> Harness {
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(String::new()));
    let stop = CancellationToken::new();
    let (connect_port, http_port) = servers(accepted.clone(), seen.clone(), stop.clone()).await;
    let server: IpAddr = SERVER_IP.parse().unwrap();
    let names = HashMap::from([
        ("site.test".to_string(), vec![server]),
        (
            "mixed.test".to_string(),
            vec![server, "10.9.8.7".parse().unwrap()],
        ),
        (
            "private.test".to_string(),
            vec!["192.168.1.1".parse().unwrap()],
        ),
        ("empty.test".to_string(), vec![]),
    ]);
    let mut cfg = ProxyConfig {
        ports: Ports {
            connect: connect_port,
            http: http_port,
        },
        treat_as_public: vec![(server, 32)],
        ..ProxyConfig::default()
    };
    tune(&mut cfg);
    let decisions = Arc::new(Mutex::new(Vec::new()));
    let sink_decisions = decisions.clone();
    let proxy = Proxy::new(
        cfg,
        Arc::new(StaticResolver(names)),
        Arc::new(move |d| sink_decisions.lock().unwrap().push(d)),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.clone().serve(listener, stop.clone()));
    Harness {
        proxy: addr,
        handle: proxy,
        connect_port,
        http_port,
        accepted,
        decisions,
        stop,
        seen,
    }
}

struct Reply {
    status: u16,
    head: String,
    body: String,
    stream: TcpStream,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Sends `request` to the proxy and reads the response head (and, for a refusal or an
/// HTTP answer, the body up to EOF).
async fn ask(h: &Harness, request: &str) -> Reply {
    let mut s = TcpStream::connect(h.proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let (head, rest) = match read_head(&mut s).await {
        Ok(x) => x,
        Err(_) => panic!("no response head for {request:?}"),
    };
    let head = String::from_utf8(head).unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = rest;
    if status != 200 || !request.starts_with("CONNECT") {
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut body)).await;
    }
    Reply {
        status,
        head,
        body: String::from_utf8_lossy(&body).to_string(),
        stream: s,
    }
}

fn last_decision(h: &Harness) -> Decision {
    h.decisions
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a decision")
}

#[tokio::test]
async fn connect_to_a_public_name_tunnels_to_the_checked_address() {
    let h = harness(|_| {}).await;
    let mut r = ask(
        &h,
        &format!(
            "CONNECT site.test:{p} HTTP/1.1\r\nHost: site.test:{p}\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n",
            p = h.connect_port
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.head);
    r.stream
        .write_all(b"ping through the tunnel")
        .await
        .unwrap();
    let mut buf = [0u8; 23];
    r.stream.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping through the tunnel");
    let d = last_decision(&h);
    assert_eq!(d.verdict, "public");
    assert!(d.allowed);
    assert_eq!(d.method, "CONNECT");
    assert_eq!(d.host, "site.test");
    assert_eq!(d.port, h.connect_port);
    assert_eq!(d.address.as_deref(), Some(SERVER_IP));
    assert_eq!(d.client, "127.0.0.1");
    // Credentials never reach the log.
    let logged = serde_json::to_string(&*h.decisions.lock().unwrap()).unwrap();
    assert!(!logged.contains("c2VjcmV0"), "{logged}");
}

#[tokio::test]
async fn a_pause_cuts_open_tunnels_and_refuses_everything_until_resumed() {
    let h = harness(|_| {}).await;
    let connect = format!(
        "CONNECT site.test:{p} HTTP/1.1\r\nHost: site.test:{p}\r\n\r\n",
        p = h.connect_port
    );
    let mut open = ask(&h, &connect).await;
    assert_eq!(open.status, 200, "{}", open.head);
    open.stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    open.stream.read_exact(&mut buf).await.unwrap();

    h.handle.set_paused(true);
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), open.stream.read_to_end(&mut rest))
        .await
        .expect("the open tunnel is cut at once");
    assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");
    let accepted = h.accepted.load(Ordering::SeqCst);
    let refused = ask(&h, &connect).await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.header(HEADER_VERDICT).as_deref(), Some("paused"));
    let http = format!(
        "GET http://site.test:{p}/ HTTP/1.1\r\nHost: site.test:{p}\r\n\r\n",
        p = h.http_port
    );
    assert_eq!(ask(&h, &http).await.status, 403);
    assert_eq!(last_decision(&h).verdict, "paused");
    assert_eq!(
        h.accepted.load(Ordering::SeqCst),
        accepted,
        "nothing dialled"
    );

    h.handle.set_paused(false);
    assert_eq!(ask(&h, &connect).await.status, 200);
    assert_eq!(ask(&h, &http).await.body, "hello");
}

#[tokio::test]
async fn absolute_form_http_is_forwarded_in_origin_form() {
    let h = harness(|_| {}).await;
    let r = ask(
        &h,
        &format!(
            "GET http://site.test:{p}/hello?x=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nX-Kept: yes\r\n\r\n",
            p = h.http_port
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, "hello");
    let seen = h.seen.lock().unwrap().clone();
    assert!(seen.starts_with("GET /hello?x=1 HTTP/1.1\r\n"), "{seen}");
    assert!(
        seen.contains(&format!("Host: site.test:{}\r\n", h.http_port)),
        "{seen}"
    );
    assert!(seen.contains("X-Kept: yes"), "{seen}");
    assert!(seen.contains("Connection: close"), "{seen}");
    assert!(!seen.to_ascii_lowercase().contains("proxy-"), "{seen}");
    assert!(!seen.contains("evil.example"), "{seen}");
    assert_eq!(last_decision(&h).method, "GET");
}

/// Refusals: status, verdict header, a logged decision, and no connection to anything.
#[tokio::test]
async fn refusals_name_their_verdict_and_never_dial() {
    let h = harness(|_| {}).await;
    let (c, w) = (h.connect_port, h.http_port);
    let cases: Vec<(String, u16, &str)> = vec![
        (
            format!("CONNECT mixed.test:{c} HTTP/1.1\r\n\r\n"),
            403,
            "mixed-dns-answer",
        ),
        (
            format!("CONNECT private.test:{c} HTTP/1.1\r\n\r\n"),
            403,
            "private",
        ),
        (
            format!("CONNECT 10.1.2.3:{c} HTTP/1.1\r\n\r\n"),
            403,
            "private",
        ),
        (
            format!("CONNECT 0xa9fea9fe:{c} HTTP/1.1\r\n\r\n"),
            403,
            "metadata",
        ),
        (
            format!("CONNECT [::ffff:127.0.0.2]:{c} HTTP/1.1\r\n\r\n"),
            403,
            "ipv6-embedding",
        ),
        (
            format!("CONNECT 127.0.0.1:{c} HTTP/1.1\r\n\r\n"),
            403,
            "self-address",
        ),
        (
            format!("CONNECT 127.0.0.3:{c} HTTP/1.1\r\n\r\n"),
            403,
            "loopback",
        ),
        (
            format!("CONNECT localhost:{c} HTTP/1.1\r\n\r\n"),
            403,
            "loopback",
        ),
        (
            "CONNECT site.test:22 HTTP/1.1\r\n\r\n".into(),
            403,
            "port-not-allowed",
        ),
        (
            format!("CONNECT site.test:{w} HTTP/1.1\r\n\r\n"),
            403,
            "port-not-allowed",
        ),
        (
            format!("GET http://site.test:{c}/ HTTP/1.1\r\n\r\n"),
            403,
            "port-not-allowed",
        ),
        (
            format!("GET http://10.0.0.1:{w}/ HTTP/1.1\r\n\r\n"),
            403,
            "private",
        ),
        (
            format!("GET http://user:pw@site.test:{w}/ HTTP/1.1\r\n\r\n"),
            400,
            "invalid-host",
        ),
        (
            "GET https://site.test/ HTTP/1.1\r\n\r\n".into(),
            403,
            "method-not-allowed",
        ),
        (
            "GET / HTTP/1.1\r\nHost: site.test\r\n\r\n".into(),
            403,
            "method-not-allowed",
        ),
        (
            format!("CONNECT nowhere.test:{c} HTTP/1.1\r\n\r\n"),
            502,
            "dns-failure",
        ),
        (
            format!("CONNECT empty.test:{c} HTTP/1.1\r\n\r\n"),
            403,
            "dns-failure",
        ),
        (
            format!("CONNECT 1.2.3.4.5:{c} HTTP/1.1\r\n\r\n"),
            403,
            "invalid-host",
        ),
        (
            "CONNECT site.test HTTP/1.1\r\n\r\n".into(),
            400,
            "invalid-host",
        ),
        ("NONSENSE\r\n\r\n".into(), 400, "bad-request"),
    ];
    for (request, status, verdict) in cases {
        let before = h.decisions.lock().unwrap().len();
        let r = ask(&h, &request).await;
        assert_eq!(r.status, status, "{request:?}: {}", r.head);
        assert_eq!(
            r.header(HEADER_VERDICT).as_deref(),
            Some(verdict),
            "{request:?}: {}",
            r.head
        );
        assert!(r.header(HEADER_REASON).is_some_and(|v| !v.is_empty()));
        assert!(r.body.contains(verdict), "{}", r.body);
        let decisions = h.decisions.lock().unwrap();
        assert_eq!(
            decisions.len(),
            before + 1,
            "{request:?}: one decision each"
        );
        let d = decisions.last().unwrap();
        assert_eq!(d.verdict, verdict);
        assert!(!d.allowed);
    }
    assert_eq!(
        h.accepted.load(Ordering::SeqCst),
        0,
        "a refused destination was dialled"
    );
    let mixed = h.decisions.lock().unwrap()[0].clone();
    assert_eq!(mixed.address.as_deref(), Some("10.9.8.7"));
    assert!(mixed.reason.contains("refused whole"), "{}", mixed.reason);
}

#[tokio::test]
async fn the_connection_limit_answers_503() {
    let h = harness(|c| c.max_connections = 1).await;
    let held = ask(
        &h,
        &format!("CONNECT site.test:{} HTTP/1.1\r\n\r\n", h.connect_port),
    )
    .await;
    assert_eq!(held.status, 200);
    let r = ask(
        &h,
        &format!("CONNECT site.test:{} HTTP/1.1\r\n\r\n", h.connect_port),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header(HEADER_VERDICT).as_deref(),
        Some("too-many-connections")
    );
    drop(held);
    // The slot frees when the tunnel ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = ask(
            &h,
            &format!("CONNECT site.test:{} HTTP/1.1\r\n\r\n", h.connect_port),
        )
        .await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let h = harness(|c| c.idle_timeout = Duration::from_millis(200)).await;
    let mut r = ask(
        &h,
        &format!("CONNECT site.test:{} HTTP/1.1\r\n\r\n", h.connect_port),
    )
    .await;
    assert_eq!(r.status, 200);
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), r.stream.read(&mut buf))
        .await
        .expect("the idle tunnel was not closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn an_oversized_or_slow_head_is_refused() {
    let h = harness(|c| c.head_timeout = Duration::from_millis(200)).await;
    let big = format!(
        "CONNECT site.test:{} HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        h.connect_port,
        "a".repeat(MAX_HEAD)
    );
    let r = ask(&h, &big).await;
    assert_eq!(r.status, 431);
    let r = ask(&h, "CONNECT site.test:443 HTTP/1.1\r\n").await;
    assert_eq!(r.status, 408);
    assert_eq!(h.accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn authorities_split_into_host_and_port() {
    assert_eq!(split_authority("a.test:443", None), Some(("a.test", 443)));
    assert_eq!(split_authority("[::1]:443", None), Some(("[::1]", 443)));
    assert_eq!(split_authority("[::1]", Some(80)), Some(("[::1]", 80)));
    assert_eq!(split_authority("a.test", Some(80)), Some(("a.test", 80)));
    for bad in [
        "a.test",
        "a.test:",
        "a.test:0",
        "a.test:65536",
        ":443",
        "[::1]x:1",
        "a:b",
    ] {
        assert_eq!(split_authority(bad, None), None, "{bad}");
    }
}
