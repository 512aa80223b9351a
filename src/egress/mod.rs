//! The controlled public network of computers: the egress proxy and its rules.
//!
//! * [`classify`]: the pure rules: host parsing and a named verdict per destination.
//! * [`proxy`]: the proxy itself (`yy egress serve`): `CONNECT` to 443 and absolute-form
//!   `http://` to 80, resolve once, check every answer, connect to the checked literal.
//! * [`docker`]: the Runner's side: the proxy container, one internal network per
//!   computer, and the bounded log of decisions (`yy runner egress-log`).
//!
//! docs/egress.md explains the design and what each piece defends against.

pub mod classify;
pub mod docker;
pub mod proxy;
mod relay;

use std::collections::VecDeque;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Where the proxy listens inside its container (on every network it joins).
pub const PROXY_PORT: u16 = 3128;

pub use crate::api::computers::NetworkMode;

impl clap::ValueEnum for NetworkMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[NetworkMode::None, NetworkMode::PublicWeb]
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(
            clap::builder::PossibleValue::new(self.as_str()).help(match self {
                NetworkMode::None => "no network interface but loopback (the default)",
                NetworkMode::PublicWeb => {
                    "public addresses on ports 80/443 through the Runner's egress proxy only"
                }
            }),
        )
    }
}

/// One decision of the proxy: one JSON line on its stdout, and an entry of the Runner's
/// egress log. Never carries request bodies or headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Unix milliseconds.
    pub at_ms: i64,
    /// The client's address as the proxy saw it.
    pub client: String,
    /// `CONNECT` or the HTTP method of an absolute-form request.
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The checked address that was connected to, or the one that decided a refusal.
    pub address: Option<String>,
    /// A [`classify::Verdict`] name.
    pub verdict: String,
    pub allowed: bool,
    pub reason: String,
    /// The computer the client address belonged to (filled in by the Runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer: Option<String>,
}

pub use crate::api::computers::EgressLogParams as LogParams;

/// Decisions a Runner keeps (and `egress.log` returns) at most.
pub const LOG_CAPACITY: usize = 1000;

pub use crate::api::computers::EgressLogQuery as LogQuery;

/// Result of the `egress.log` Runner command.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogResult {
    /// Newest first.
    pub decisions: Vec<Decision>,
    /// Decisions the Runner keeps at most (older ones are dropped).
    pub capacity: usize,
    /// Whether this Runner's proxy is running now.
    pub proxy_running: bool,
}

impl crate::api::machine::CommandResult for LogResult {
    const KINDS: &'static [crate::api::machine::CommandKind] =
        &[crate::api::machine::CommandKind::EgressLog];
}

/// The Runner's recent decisions: a ring that drops the oldest when full.
#[derive(Debug)]
pub struct Ring {
    items: VecDeque<Decision>,
    capacity: usize,
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        Ring {
            items: VecDeque::with_capacity(capacity.min(1024)),
            capacity: capacity.max(1),
        }
    }

    pub fn push(&mut self, d: Decision) {
        if self.items.len() == self.capacity {
            self.items.pop_front();
        }
        self.items.push_back(d);
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Newest first, optionally one computer's only.
    pub fn recent(&self, computer: Option<&str>, limit: usize) -> Vec<Decision> {
        self.items
            .iter()
            .rev()
            .filter(|d| computer.is_none_or(|c| d.computer.as_deref() == Some(c)))
            .take(limit)
            .cloned()
            .collect()
    }
}

/// The addresses of this network namespace's interfaces (`getifaddrs`).
pub fn interface_addresses() -> std::io::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below; we only read it.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if family == libc::AF_INET {
                // SAFETY: AF_INET means a sockaddr_in.
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::from(sa.sin_addr.s_addr.to_ne_bytes()));
            } else if family == libc::AF_INET6 {
                // SAFETY: AF_INET6 means a sockaddr_in6.
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::from(sa.sin6_addr.s6_addr));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    Ok(out)
}

/// Makes an untrusted string safe to print on one terminal line: control characters and
/// anything outside printable ASCII are escaped, and the length is capped.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        if out.len() >= max {
            out.push_str("...");
            break;
        }
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: i64, computer: Option<&str>) -> Decision {
        Decision {
            at_ms: n,
            client: "172.18.0.2".into(),
            method: "CONNECT".into(),
            host: "example.com".into(),
            port: 443,
            address: None,
            verdict: "public".into(),
            allowed: true,
            reason: String::new(),
            computer: computer.map(str::to_string),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_filters_by_computer() {
        let mut r = Ring::new(3);
        for i in 0..5 {
            r.push(d(i, Some(if i % 2 == 0 { "a" } else { "b" })));
        }
        let all: Vec<i64> = r.recent(None, 10).iter().map(|d| d.at_ms).collect();
        assert_eq!(all, vec![4, 3, 2]);
        let a: Vec<i64> = r.recent(Some("a"), 10).iter().map(|d| d.at_ms).collect();
        assert_eq!(a, vec![4, 2]);
        assert_eq!(r.recent(None, 1).len(), 1);
        assert_eq!(r.capacity(), 3);
    }

    #[test]
    fn network_modes_round_trip() {
        for m in [NetworkMode::None, NetworkMode::PublicWeb] {
            assert_eq!(NetworkMode::parse(m.as_str()), Some(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        assert_eq!(NetworkMode::parse("public"), None);
        assert_eq!(NetworkMode::default(), NetworkMode::None);
    }

    #[test]
    fn interface_addresses_include_loopback() {
        let addrs = interface_addresses().unwrap();
        assert!(addrs.contains(&"127.0.0.1".parse().unwrap()), "{addrs:?}");
    }

    #[test]
    fn printable_escapes_terminal_controls() {
        assert_eq!(printable("ok.example", 50), "ok.example");
        assert_eq!(printable("a\x1b[2Jb\n", 50), "a\\u{1b}[2Jb\\n");
        assert_eq!(printable(&"x".repeat(20), 5), "xxxxx...");
    }
}
