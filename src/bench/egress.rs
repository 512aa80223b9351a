//! `yy bench egress`: what the egress proxy costs, on loopback, in one run.
//!
//! A target server on 127.0.0.2 and the real proxy ([`crate::egress::proxy`]) on 127.0.0.1
//! run in this process. Only code can point the proxy at a loopback address and a port
//! other than 443 (`treat_as_public` and `ports`); names are answered by a fixed resolver.
//! Each figure is measured directly and through the proxy, alternating sample by sample:
//!
//! * connect latency: TCP connect, then one byte each way (direct), against TCP connect to
//!   the proxy, `CONNECT`, its `200`, then one byte each way (through the proxy);
//! * bulk throughput: one connection receiving a large stream, direct and tunnelled.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::egress::classify::Ports;
use crate::egress::proxy::{Proxy, ProxyConfig, StaticResolver};

pub const TARGET_ADDED_P50_MS: f64 = 2.0;
pub const TARGET_THROUGHPUT_RATIO: f64 = 0.8;

const TARGET_IP: &str = "127.0.0.2";
const NAME: &str = "bench.test";
const WARMUP: usize = 20;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub direct_p50_ms: f64,
    pub direct_p99_ms: f64,
    pub proxy_p50_ms: f64,
    pub proxy_p99_ms: f64,
    pub added_p50_ms: f64,
    pub target_added_p50_le_2ms: bool,
}

#[derive(Debug, Serialize)]
pub struct Throughput {
    pub rounds: usize,
    pub bytes_per_round: u64,
    pub direct_mib_s: f64,
    pub proxy_mib_s: f64,
    pub ratio: f64,
    pub target_ratio_ge_0_8: bool,
    /// CPU time of this whole process (target, proxy and client) per GiB moved: what the
    /// proxy costs, independent of how busy the machine is.
    pub direct_cpu_s_per_gib: f64,
    pub proxy_cpu_s_per_gib: f64,
}

#[derive(Debug, Serialize)]
pub struct Figures {
    pub latency: Latency,
    pub throughput: Throughput,
    /// Decisions the proxy made (one per proxied connection; all `public`).
    pub decisions: u64,
    /// The targets this run missed (empty: all met).
    pub missed: Vec<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// CPU seconds (user + system) this process has used.
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The target: `e` answers one byte per byte; `b` then 8 bytes of length streams that many
/// bytes and closes.
async fn target(listener: TcpListener, stop: CancellationToken) {
    let chunk = Arc::new(vec![0x5au8; 256 * 1024]);
    loop {
        let (mut s, _) = tokio::select! {
            r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
            _ = stop.cancelled() => return,
        };
        let chunk = chunk.clone();
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            let mut mode = [0u8; 1];
            if s.read_exact(&mut mode).await.is_err() {
                return;
            }
            match mode[0] {
                b'e' => {
                    let _ = s.write_all(b"e").await;
                    let mut rest = [0u8; 64];
                    while let Ok(n) = s.read(&mut rest).await {
                        if n == 0 || s.write_all(&rest[..n]).await.is_err() {
                            break;
                        }
                    }
                }
                b'b' => {
                    let mut len = [0u8; 8];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut left = u64::from_be_bytes(len);
                    while left > 0 {
                        let n = left.min(chunk.len() as u64) as usize;
                        if s.write_all(&chunk[..n]).await.is_err() {
                            return;
                        }
                        left -= n as u64;
                    }
                    let _ = s.shutdown().await;
                }
                _ => {}
            }
        });
    }
}

/// A connection to the target, direct or through the proxy's tunnel.
async fn open(target: SocketAddr, proxy: Option<SocketAddr>) -> anyhow::Result<TcpStream> {
    let Some(proxy) = proxy else {
        let s = TcpStream::connect(target).await?;
        s.set_nodelay(true)?;
        return Ok(s);
    };
    let mut s = TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    let port = target.port();
    s.write_all(
        format!("CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n").as_bytes(),
    )
    .await?;
    // Read the answer head byte by byte: nothing after it may be consumed here.
    let mut head = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 || head.len() > 4096 {
            anyhow::bail!("the proxy closed the connection before answering");
        }
        head.push(b[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        anyhow::bail!(
            "the proxy refused the benchmark's CONNECT: {}",
            String::from_utf8_lossy(&head).lines().next().unwrap_or("")
        );
    }
    Ok(s)
}

/// Connect, then one byte there and back: milliseconds.
async fn connect_once(target: SocketAddr, proxy: Option<SocketAddr>) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut s = open(target, proxy).await?;
    s.write_all(b"e").await?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await?;
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

/// One bulk transfer of `bytes`: MiB/s.
async fn bulk_once(
    target: SocketAddr,
    proxy: Option<SocketAddr>,
    bytes: u64,
) -> anyhow::Result<f64> {
    let mut s = open(target, proxy).await?;
    let started = Instant::now();
    let mut req = vec![b'b'];
    req.extend_from_slice(&bytes.to_be_bytes());
    s.write_all(&req).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    if got != bytes {
        anyhow::bail!("received {got} of {bytes} bytes");
    }
    Ok(bytes as f64 / (1024.0 * 1024.0) / started.elapsed().as_secs_f64())
}

pub async fn bench_egress(samples: usize, rounds: usize, mib: u64) -> anyhow::Result<Figures> {
    let target_ip: IpAddr = TARGET_IP.parse().expect("a constant address");
    let target_listener = TcpListener::bind((target_ip, 0)).await?;
    let target_addr = target_listener.local_addr()?;
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    tokio::spawn(target(target_listener, stop.clone()));

    let decisions = Arc::new(AtomicU64::new(0));
    let counted = decisions.clone();
    // The same work per decision as `yy egress serve` (one JSON line), minus the terminal.
    let sink = Arc::new(move |d: crate::egress::Decision| {
        let line = serde_json::to_vec(&d).unwrap_or_default();
        std::hint::black_box(line);
        counted.fetch_add(1, Ordering::Relaxed);
    });
    let cfg = ProxyConfig {
        ports: Ports {
            connect: target_addr.port(),
            http: target_addr.port(),
        },
        treat_as_public: vec![(target_ip, 32)],
        ..ProxyConfig::default()
    };
    let resolver = StaticResolver(HashMap::from([(NAME.to_string(), vec![target_ip])]));
    let proxy = Proxy::new(cfg, Arc::new(resolver), sink);
    let proxy_listener = TcpListener::bind("127.0.0.1:0").await?;
    let proxy_addr = proxy_listener.local_addr()?;
    tokio::spawn(proxy.serve(proxy_listener, stop.clone()));

    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + samples {
        let d = connect_once(target_addr, None).await?;
        let p = connect_once(target_addr, Some(proxy_addr)).await?;
        if i >= WARMUP {
            direct.push(d);
            through.push(p);
        }
    }
    direct.sort_by(f64::total_cmp);
    through.sort_by(f64::total_cmp);
    let (d50, p50) = (percentile(&direct, 0.5), percentile(&through, 0.5));
    let latency = Latency {
        samples,
        direct_p50_ms: round3(d50),
        direct_p99_ms: round3(percentile(&direct, 0.99)),
        proxy_p50_ms: round3(p50),
        proxy_p99_ms: round3(percentile(&through, 0.99)),
        added_p50_ms: round3(p50 - d50),
        target_added_p50_le_2ms: p50 - d50 <= TARGET_ADDED_P50_MS,
    };

    let bytes = mib * 1024 * 1024;
    // One untimed round each warms the buffers and the page cache of the socket path.
    bulk_once(target_addr, None, bytes / 4).await?;
    bulk_once(target_addr, Some(proxy_addr), bytes / 4).await?;
    let (mut d_rates, mut p_rates) = (Vec::new(), Vec::new());
    let (mut d_cpu, mut p_cpu) = (0.0, 0.0);
    for _ in 0..rounds {
        let c0 = cpu_s();
        d_rates.push(bulk_once(target_addr, None, bytes).await?);
        let c1 = cpu_s();
        p_rates.push(bulk_once(target_addr, Some(proxy_addr), bytes).await?);
        d_cpu += c1 - c0;
        p_cpu += cpu_s() - c1;
    }
    let gib = (bytes * rounds as u64) as f64 / (1u64 << 30) as f64;
    d_rates.sort_by(f64::total_cmp);
    p_rates.sort_by(f64::total_cmp);
    let (dm, pm) = (percentile(&d_rates, 0.5), percentile(&p_rates, 0.5));
    let ratio = if dm > 0.0 { pm / dm } else { 0.0 };
    let throughput = Throughput {
        rounds,
        bytes_per_round: bytes,
        direct_mib_s: dm.round(),
        proxy_mib_s: pm.round(),
        ratio: round3(ratio),
        target_ratio_ge_0_8: ratio >= TARGET_THROUGHPUT_RATIO,
        direct_cpu_s_per_gib: round3(d_cpu / gib),
        proxy_cpu_s_per_gib: round3(p_cpu / gib),
    };
    let mut missed = Vec::new();
    if !latency.target_added_p50_le_2ms {
        missed.push(format!(
            "added connect latency p50 {:.3} ms > {TARGET_ADDED_P50_MS} ms",
            latency.added_p50_ms
        ));
    }
    if !throughput.target_ratio_ge_0_8 {
        missed.push(format!(
            "throughput ratio {:.3} < {TARGET_THROUGHPUT_RATIO}",
            throughput.ratio
        ));
    }
    Ok(Figures {
        latency,
        throughput,
        decisions: decisions.load(Ordering::Relaxed),
        missed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_from_the_sorted_samples() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    /// The benchmark's own plumbing works end to end (tiny sizes; no timing asserted).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_run_goes_through_the_real_proxy() {
        let f = bench_egress(3, 1, 1).await.unwrap();
        assert_eq!(f.latency.samples, 3);
        assert!(f.latency.proxy_p50_ms > 0.0);
        assert!(f.throughput.proxy_mib_s > 0.0);
        // Warm-up and samples each made one proxied connection, plus the bulk rounds.
        assert_eq!(f.decisions, (WARMUP + 3 + 2) as u64);
    }
}
