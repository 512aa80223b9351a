//! The egress proxy (`yy egress serve`). One request per client connection:
//!
//! 1. read the head (bounded in size and time);
//! 2. `CONNECT host:443`, or an absolute-form `http://host[:80]/...` request; anything else
//!    is refused;
//! 3. parse the host ([`classify::parse_host`]): literals in any form are classified as
//!    they are, names are resolved once through the injected [`Resolver`];
//! 4. every address of the answer must be public ([`classify::check_answer`]), else 403
//!    with the verdict in `X-YY-Egress-Verdict` and the reason in `X-YY-Egress-Reason`;
//! 5. connect to the checked address literal (never to the name again), then relay bytes
//!    both ways until both sides finish or the connection is idle too long.
//!
//! Every decision goes to the [`Sink`] (one JSON line on stdout for `yy egress serve`).
//! Connections are bounded by a semaphore; a client over the limit gets 503.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Decision;
use super::classify::{self, Context, Host, Ports, Refusal, Verdict};
use crate::timefmt::now_ms;

/// Largest request head (request line and headers).
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;
/// How long the proxy's own addresses are trusted before they are read again (the Runner
/// connects the proxy to a new network for every computer).
const OWN_ADDRS_TTL: Duration = Duration::from_secs(1);

pub const HEADER_VERDICT: &str = "X-YY-Egress-Verdict";
pub const HEADER_REASON: &str = "X-YY-Egress-Reason";

pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, String>> + Send + 'a>>;

/// Answers a name with addresses. Injected so tests answer names without real DNS.
pub trait Resolver: Send + Sync + 'static {
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a>;
}

/// The system resolver (`getaddrinfo`, i.e. the container's resolv.conf).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            tokio::net::lookup_host((name, 0))
                .await
                .map(|addrs| addrs.map(|a| a.ip()).collect())
                .map_err(|e| e.to_string())
        })
    }
}

/// Fixed answers (tests and the benchmark); an unknown name does not resolve.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver(pub HashMap<String, Vec<IpAddr>>);

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a> {
        let answer = self.0.get(name).cloned();
        Box::pin(async move { answer.ok_or_else(|| "no such name".to_string()) })
    }
}

/// Receives every decision.
pub type Sink = Arc<dyn Fn(Decision) + Send + Sync>;

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The host's addresses, refused as `host-address` whatever their class.
    pub host_addrs: Vec<IpAddr>,
    /// Connections served at once; one more is answered 503.
    pub max_connections: usize,
    /// A tunnel with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Connecting to the checked address (each address of the answer).
    pub connect_timeout: Duration,
    /// Reading the request head.
    pub head_timeout: Duration,
    /// Resolving a name.
    pub resolve_timeout: Duration,
    /// Tests and the benchmark only (no flag sets these): ports other than 443/80, and
    /// networks treated as public.
    pub ports: Ports,
    pub treat_as_public: Vec<(IpAddr, u8)>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            host_addrs: Vec::new(),
            max_connections: 256,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(5),
            ports: Ports::default(),
            treat_as_public: Vec::new(),
        }
    }
}

pub struct Proxy {
    cfg: ProxyConfig,
    resolver: Arc<dyn Resolver>,
    sink: Sink,
    slots: Arc<Semaphore>,
    own: Mutex<(Option<Instant>, Vec<IpAddr>)>,
    /// Every request is refused (`paused`) while set.
    paused: std::sync::atomic::AtomicBool,
    /// Cancelled when the proxy pauses: every connection open then is cut.
    cut: Mutex<CancellationToken>,
}

/// What a request asked for, once its head is parsed.
struct Target {
    method: String,
    host: String,
    port: u16,
    /// For absolute-form HTTP: the head to send upstream.
    upstream_head: Option<Vec<u8>>,
}

/// A request refused before any address was chosen, with its HTTP status.
struct Refused {
    status: u16,
    refusal: Refusal,
    method: String,
    host: String,
    port: u16,
}

impl Proxy {
    pub fn new(cfg: ProxyConfig, resolver: Arc<dyn Resolver>, sink: Sink) -> Arc<Proxy> {
        Arc::new(Proxy {
            slots: Arc::new(Semaphore::new(cfg.max_connections.max(1))),
            cfg,
            resolver,
            sink,
            own: Mutex::new((None, Vec::new())),
            paused: std::sync::atomic::AtomicBool::new(false),
            cut: Mutex::new(CancellationToken::new()),
        })
    }

    /// Pauses or resumes everything: a paused proxy cuts every connection open now (kept-
    /// alive tunnels included) and refuses each new request as `paused` before resolving
    /// anything.
    pub fn set_paused(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
        if paused {
            let mut cut = self.cut.lock().unwrap_or_else(|p| p.into_inner());
            cut.cancel();
            *cut = CancellationToken::new();
        }
    }

    /// Accepts connections until `shutdown` fires; connections in flight are dropped then.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let tasks = tokio_util::task::TaskTracker::new();
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: wait a little instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.cancelled() => break,
            };
            let me = self.clone();
            let stop = shutdown.clone();
            let cut = self.cut.lock().unwrap_or_else(|p| p.into_inner()).clone();
            tasks.spawn(async move {
                tokio::select! {
                    _ = me.handle(stream, peer) => {}
                    _ = stop.cancelled() => {}
                    _ = cut.cancelled() => {}
                }
            });
        }
        tasks.close();
        Ok(())
    }

    fn decide(&self, d: Decision) {
        (self.sink)(d);
    }

    fn decision(
        &self,
        peer: SocketAddr,
        (method, host, port): (&str, &str, u16),
        address: Option<IpAddr>,
        verdict: Verdict,
        reason: &str,
    ) -> Decision {
        Decision {
            at_ms: now_ms(),
            client: peer.ip().to_string(),
            method: super::printable(method, 16),
            host: super::printable(host, 255),
            port,
            address: address.map(|a| a.to_string()),
            verdict: verdict.as_str().to_string(),
            allowed: verdict.allowed(),
            reason: super::printable(reason, 512),
            computer: None,
        }
    }

    /// The classification context: the host's addresses and the proxy's own, read again
    /// when older than a second.
    fn context(&self) -> Context {
        let own = {
            let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
            if own.0.is_none_or(|t| t.elapsed() > OWN_ADDRS_TTL) {
                match super::interface_addresses() {
                    Ok(addrs) => *own = (Some(Instant::now()), addrs),
                    Err(e) => tracing::warn!(error = %e, "cannot read the proxy's own addresses"),
                }
            }
            own.1.clone()
        };
        Context {
            host: self.cfg.host_addrs.clone(),
            own,
            treat_as_public: self.cfg.treat_as_public.clone(),
        }
    }

    async fn handle(self: Arc<Self>, mut client: TcpStream, peer: SocketAddr) {
        let Ok(_permit) = self.slots.clone().try_acquire_owned() else {
            let reason = format!(
                "the proxy is serving {}, its limit; try again later",
                crate::api::words::plural(self.cfg.max_connections, "connection", "connections")
            );
            self.decide(self.decision(
                peer,
                ("-", "-", 0),
                None,
                Verdict::TooManyConnections,
                &reason,
            ));
            let _ = respond(&mut client, 503, Verdict::TooManyConnections, &reason).await;
            return;
        };
        let _ = client.set_nodelay(true);
        let head = tokio::time::timeout(self.cfg.head_timeout, read_head(&mut client)).await;
        let (head, leftover) = match head {
            Ok(Ok(h)) => h,
            Ok(Err(HeadError::Closed)) => return,
            Ok(Err(HeadError::TooLarge)) => {
                return self
                    .refuse_early(&mut client, peer, 431, "the request head is over 16 KiB")
                    .await;
            }
            Ok(Err(HeadError::Malformed)) => {
                return self
                    .refuse_early(&mut client, peer, 400, "the request head is malformed")
                    .await;
            }
            Err(_) => {
                return self
                    .refuse_early(&mut client, peer, 408, "the request head came too slowly")
                    .await;
            }
        };
        let target = match self.parse_target(&head) {
            Ok(t) => t,
            Err(r) => {
                self.decide(self.decision(
                    peer,
                    (&r.method, &r.host, r.port),
                    r.refusal.address,
                    r.refusal.verdict,
                    &r.refusal.reason,
                ));
                let _ = respond(&mut client, r.status, r.refusal.verdict, &r.refusal.reason).await;
                return;
            }
        };
        if self.paused.load(std::sync::atomic::Ordering::SeqCst) {
            let reason = "the network is paused until the next turn";
            self.decide(self.decision(
                peer,
                (&target.method, &target.host, target.port),
                None,
                Verdict::Paused,
                reason,
            ));
            let _ = respond(&mut client, 403, Verdict::Paused, reason).await;
            return;
        }
        let upstream = match self.open(&target).await {
            Ok(u) => u,
            Err((status, refusal)) => {
                self.decide(self.decision(
                    peer,
                    (&target.method, &target.host, target.port),
                    refusal.address,
                    refusal.verdict,
                    &refusal.reason,
                ));
                let _ = respond(&mut client, status, refusal.verdict, &refusal.reason).await;
                return;
            }
        };
        let address = upstream.peer_addr().ok().map(|a| a.ip());
        self.decide(self.decision(
            peer,
            (&target.method, &target.host, target.port),
            address,
            Verdict::Public,
            "allowed: every address of the answer is public",
        ));
        let mut upstream = upstream;
        let _ = upstream.set_nodelay(true);
        let ready = async {
            match &target.upstream_head {
                None => {
                    client
                        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                        .await?
                }
                Some(h) => upstream.write_all(h).await?,
            }
            if !leftover.is_empty() {
                upstream.write_all(&leftover).await?;
            }
            Ok::<_, std::io::Error>(())
        };
        if ready.await.is_err() {
            return;
        }
        super::relay::relay(client, upstream, self.cfg.idle_timeout).await;
    }

    async fn refuse_early(&self, client: &mut TcpStream, peer: SocketAddr, status: u16, why: &str) {
        self.decide(self.decision(peer, ("-", "-", 0), None, Verdict::BadRequest, why));
        let _ = respond(client, status, Verdict::BadRequest, why).await;
    }

    fn parse_target(&self, head: &[u8]) -> Result<Target, Refused> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let bad = |why: &str| Refused {
            status: 400,
            refusal: Refusal {
                verdict: Verdict::BadRequest,
                address: None,
                reason: why.to_string(),
            },
            method: "-".into(),
            host: "-".into(),
            port: 0,
        };
        match req.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(bad("the request head is malformed")),
        }
        let method = req.method.unwrap_or("").to_string();
        let path = req.path.unwrap_or("");
        let refuse = |status: u16, verdict: Verdict, reason: String, host: &str, port: u16| {
            Err(Refused {
                status,
                refusal: Refusal {
                    verdict,
                    address: None,
                    reason,
                },
                method: method.clone(),
                host: host.to_string(),
                port,
            })
        };
        if method == "CONNECT" {
            let Some((host, port)) = split_authority(path, None) else {
                return refuse(
                    400,
                    Verdict::InvalidHost,
                    "CONNECT needs host:port".into(),
                    path,
                    0,
                );
            };
            if let Err(r) = classify::check_port(true, port, self.cfg.ports) {
                return refuse(403, r.verdict, r.reason, host, port);
            }
            return Ok(Target {
                method,
                host: host.to_string(),
                port,
                upstream_head: None,
            });
        }
        let lower = path.get(..8).unwrap_or(path).to_ascii_lowercase();
        if lower.starts_with("https://") {
            return refuse(
                403,
                Verdict::MethodNotAllowed,
                "absolute-form https:// is not proxied: use CONNECT (HTTPS_PROXY)".into(),
                "-",
                0,
            );
        }
        if !lower.starts_with("http://") {
            return refuse(
                403,
                Verdict::MethodNotAllowed,
                format!(
                    "only CONNECT host:{} and absolute-form http:// requests are proxied",
                    self.cfg.ports.connect
                ),
                "-",
                0,
            );
        }
        let rest = &path[7..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return refuse(
                400,
                Verdict::InvalidHost,
                "credentials in the URL are refused".into(),
                "-",
                0,
            );
        }
        let Some((host, port)) = split_authority(authority, Some(classify::HTTP_PORT)) else {
            return refuse(
                400,
                Verdict::InvalidHost,
                "the URL has no valid host[:port]".into(),
                authority,
                0,
            );
        };
        if let Err(r) = classify::check_port(false, port, self.cfg.ports) {
            return refuse(403, r.verdict, r.reason, host, port);
        }
        let tail = match tail.split_once('#') {
            Some((t, _)) => t,
            None => tail,
        };
        let origin_path = if tail.is_empty() {
            "/".to_string()
        } else if tail.starts_with('?') {
            format!("/{tail}")
        } else {
            tail.to_string()
        };
        Ok(Target {
            upstream_head: Some(upstream_head(&method, &origin_path, authority, req.headers)),
            method,
            host: host.to_string(),
            port,
        })
    }

    /// Resolves (once), checks every answer and connects to a checked address.
    async fn open(&self, t: &Target) -> Result<TcpStream, (u16, Refusal)> {
        let forbid = |r: Refusal| (403, r);
        let answer: Vec<IpAddr> = match classify::parse_host(&t.host) {
            Err(v) => {
                return Err(forbid(Refusal {
                    verdict: v,
                    address: None,
                    reason: format!("{:?} is {}", super::printable(&t.host, 255), v.describe()),
                }));
            }
            Ok(Host::Literal(ip)) => vec![ip],
            Ok(Host::Name(name)) if classify::is_localhost_name(&name) => {
                return Err(forbid(Refusal {
                    verdict: Verdict::Loopback,
                    address: None,
                    reason: format!("{name} is a loopback name"),
                }));
            }
            Ok(Host::Name(name)) => {
                let resolved =
                    tokio::time::timeout(self.cfg.resolve_timeout, self.resolver.resolve(&name))
                        .await;
                match resolved {
                    Ok(Ok(ips)) => ips,
                    Ok(Err(e)) => {
                        return Err((
                            502,
                            Refusal {
                                verdict: Verdict::DnsFailure,
                                address: None,
                                reason: format!("{name} does not resolve: {e}"),
                            },
                        ));
                    }
                    Err(_) => {
                        return Err((
                            504,
                            Refusal {
                                verdict: Verdict::DnsFailure,
                                address: None,
                                reason: format!(
                                    "resolving {name} took over {:?}",
                                    self.cfg.resolve_timeout
                                ),
                            },
                        ));
                    }
                }
            }
        };
        let checked = classify::check_answer(&t.host, &answer, &self.context()).map_err(forbid)?;
        let mut last = String::new();
        for ip in &checked {
            let addr = SocketAddr::new(*ip, t.port);
            match tokio::time::timeout(self.cfg.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within {:?}", self.cfg.connect_timeout),
            }
        }
        Err((
            502,
            Refusal {
                verdict: Verdict::Unreachable,
                address: checked.last().copied(),
                reason: format!("{} is public but unreachable ({last})", t.host),
            },
        ))
    }
}

/// `host:port` or `[v6]:port`; the port may be left out when `default` is given.
fn split_authority(a: &str, default: Option<u16>) -> Option<(&str, u16)> {
    let (host, port) = if a.starts_with('[') {
        let close = a.find(']')?;
        let (h, rest) = a.split_at(close + 1);
        match rest.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if rest.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match port {
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|p| *p != 0)?
        }
        Some(_) => return None,
        None => default?,
    };
    if host.is_empty() {
        return None;
    }
    Some((host, port))
}

/// Hop-by-hop headers (RFC 9110 7.6.1) and the proxy's own: never forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The origin-form head sent upstream: the client's headers minus hop-by-hop ones, `Host`
/// set from the URL, and `Connection: close` (one request per connection).
fn upstream_head(
    method: &str,
    path: &str,
    authority: &str,
    headers: &[httparse::Header<'_>],
) -> Vec<u8> {
    let listed: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n").as_bytes());
    for h in headers {
        let name = h.name.to_ascii_lowercase();
        if name == "host" || HOP_BY_HOP.contains(&name.as_str()) || listed.contains(&name) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

enum HeadError {
    Closed,
    TooLarge,
    Malformed,
}

/// Reads until the blank line that ends the head; returns the head and any bytes after it.
async fn read_head(s: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                HeadError::Closed
            } else {
                HeadError::Malformed
            });
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + i + 4;
            if end > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

async fn respond(
    s: &mut TcpStream,
    status: u16,
    verdict: Verdict,
    reason: &str,
) -> std::io::Result<()> {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    // The reason may quote the client's host: keep the header to printable ASCII.
    let reason = super::printable(reason, 512);
    let body = format!("yy egress proxy: {}: {reason}\n", verdict.as_str());
    let head = format!(
        "HTTP/1.1 {status} {text}\r\n{HEADER_VERDICT}: {}\r\n{HEADER_REASON}: {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        verdict.as_str(),
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    s.shutdown().await
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
