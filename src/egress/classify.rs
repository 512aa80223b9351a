//! Where a computer may connect: a pure function from a destination to a named verdict.
//!
//! Nothing here does I/O. The proxy parses the request's host with [`parse_host`], resolves
//! a name once, and passes every answer to [`check_answer`]; the first address that is not
//! public refuses the whole answer (a mixed answer is never partly used). Each verdict has a
//! stable name that goes into the refusal header and the decision log.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// The only ports a computer may reach: `CONNECT` to 443, absolute-form HTTP to 80.
pub const CONNECT_PORT: u16 = 443;
pub const HTTP_PORT: u16 = 80;

/// Longest host name accepted (DNS's limit).
const MAX_NAME: usize = 253;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// A public unicast address on an allowed port: the connection is made.
    Public,
    Unspecified,
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// Carrier-grade NAT, 100.64/10.
    Cgnat,
    LinkLocal,
    /// A cloud instance-metadata endpoint (169.254.169.254, fd00:ec2::254, 168.63.129.16).
    Metadata,
    /// 0/8 ("this network").
    ThisNetwork,
    /// 192.0.0/24 and the IPv6 protocol assignments 2001::/23.
    IetfProtocol,
    /// TEST-NET-1/2/3, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18/15.
    Benchmarking,
    Multicast,
    /// 240/4 and the retired 6to4 relay anycast 192.88.99/24.
    Reserved,
    Broadcast,
    /// fc00::/7.
    UniqueLocal,
    /// IPv6 that carries an IPv4 address: ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48,
    /// 2002::/16 (6to4), 2001::/32 (Teredo).
    Ipv6Embedding,
    /// IPv6 outside global unicast 2000::/3 (::/96, 100::/64, ...).
    NotGlobalUnicast,
    /// An address of the proxy itself.
    SelfAddress,
    /// An address of the host the Runner runs on.
    HostAddress,
    /// A name that answered public and non-public addresses: refused whole.
    MixedDnsAnswer,
    /// The name did not resolve (or resolved to nothing).
    DnsFailure,
    /// Not a valid host name or address literal (odd forms that parse to no address, zone
    /// ids, non-ASCII, too long).
    InvalidHost,
    /// A port other than 443 for `CONNECT` or 80 for HTTP.
    PortNotAllowed,
    /// Neither `CONNECT` nor absolute-form `http://` (e.g. `https://` absolute-form, or an
    /// origin-form request that is not meant for a proxy).
    MethodNotAllowed,
    /// The request head is malformed, too large or too slow.
    BadRequest,
    /// The proxy is at its connection limit.
    TooManyConnections,
    /// Allowed, but the checked address did not accept the connection.
    Unreachable,
    /// The proxy's client may not reach anything now (a managed browser between turns).
    Paused,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Public => "public",
            Verdict::Unspecified => "unspecified",
            Verdict::Loopback => "loopback",
            Verdict::Private => "private",
            Verdict::Cgnat => "cgnat",
            Verdict::LinkLocal => "link-local",
            Verdict::Metadata => "metadata",
            Verdict::ThisNetwork => "this-network",
            Verdict::IetfProtocol => "ietf-protocol",
            Verdict::Documentation => "documentation",
            Verdict::Benchmarking => "benchmarking",
            Verdict::Multicast => "multicast",
            Verdict::Reserved => "reserved",
            Verdict::Broadcast => "broadcast",
            Verdict::UniqueLocal => "unique-local",
            Verdict::Ipv6Embedding => "ipv6-embedding",
            Verdict::NotGlobalUnicast => "not-global-unicast",
            Verdict::SelfAddress => "self-address",
            Verdict::HostAddress => "host-address",
            Verdict::MixedDnsAnswer => "mixed-dns-answer",
            Verdict::DnsFailure => "dns-failure",
            Verdict::InvalidHost => "invalid-host",
            Verdict::PortNotAllowed => "port-not-allowed",
            Verdict::MethodNotAllowed => "method-not-allowed",
            Verdict::BadRequest => "bad-request",
            Verdict::TooManyConnections => "too-many-connections",
            Verdict::Unreachable => "unreachable",
            Verdict::Paused => "paused",
        }
    }

    /// Only `public` lets a connection through.
    pub fn allowed(self) -> bool {
        self == Verdict::Public
    }

    /// What an address of this class is, for the reason text.
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Public => "a public address",
            Verdict::Unspecified => "the unspecified address",
            Verdict::Loopback => "a loopback address",
            Verdict::Private => "a private address (RFC 1918)",
            Verdict::Cgnat => "a carrier-grade NAT address (100.64.0.0/10)",
            Verdict::LinkLocal => "a link-local address",
            Verdict::Metadata => "a cloud metadata address",
            Verdict::ThisNetwork => "a \"this network\" address (0.0.0.0/8)",
            Verdict::IetfProtocol => "an IETF protocol assignment",
            Verdict::Documentation => "a documentation (TEST-NET) address",
            Verdict::Benchmarking => "a benchmarking address (198.18.0.0/15)",
            Verdict::Multicast => "a multicast address",
            Verdict::Reserved => "a reserved address",
            Verdict::Broadcast => "the broadcast address",
            Verdict::UniqueLocal => "a unique local IPv6 address (fc00::/7)",
            Verdict::Ipv6Embedding => "an IPv6 address that embeds IPv4",
            Verdict::NotGlobalUnicast => "an IPv6 address outside global unicast (2000::/3)",
            Verdict::SelfAddress => "an address of the egress proxy itself",
            Verdict::HostAddress => "an address of the Runner's host",
            Verdict::MixedDnsAnswer => "a DNS answer mixing public and non-public addresses",
            Verdict::DnsFailure => "a name that does not resolve",
            Verdict::InvalidHost => "not a valid host",
            Verdict::PortNotAllowed => "a port other than 443 (CONNECT) or 80 (http://)",
            Verdict::MethodNotAllowed => "a request other than CONNECT or absolute-form http://",
            Verdict::BadRequest => "a malformed request",
            Verdict::TooManyConnections => "over the proxy's connection limit",
            Verdict::Unreachable => "an address that did not accept the connection",
            Verdict::Paused => "a paused network",
        }
    }
}

/// A request's host, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An address literal in any form a client might send (dotted, decimal, octal, hex,
    /// bracketed IPv6): it is never given to DNS.
    Literal(IpAddr),
    /// A DNS name, lowercased, without a trailing dot.
    Name(String),
}

/// Addresses refused whatever their class: the host's and the proxy's own.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub host: Vec<IpAddr>,
    pub own: Vec<IpAddr>,
    /// Test and benchmark networks treated as public. Only code sets this (the proxy's
    /// command line has no way to); it never widens the host or self checks.
    pub treat_as_public: Vec<(IpAddr, u8)>,
}

/// Parses the host of a `CONNECT` authority or an `http://` URL (brackets already part of
/// `raw` for IPv6). Anything that ends in a number must be a valid IPv4 literal in one of
/// the forms `inet_aton` and browsers accept (`127.1`, `0x7f000001`, `017700000001`,
/// `2130706433`), so no odd form reaches DNS or slips past the checks.
pub fn parse_host(raw: &str) -> Result<Host, Verdict> {
    if raw.is_empty() || raw.len() > MAX_NAME + 1 || !raw.is_ascii() {
        return Err(Verdict::InvalidHost);
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or(Verdict::InvalidHost)?;
        // Zone ids (`fe80::1%eth0`) name an interface of the proxy: never meant for a computer.
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Literal(IpAddr::V6(ip)))
            .map_err(|_| Verdict::InvalidHost);
    }
    if raw.contains(':') {
        // IPv6 without brackets is ambiguous with a port; refuse rather than guess.
        return Err(Verdict::InvalidHost);
    }
    let lower = raw.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() {
        return Err(Verdict::InvalidHost);
    }
    if ends_in_number(name) {
        return parse_ipv4_loose(name)
            .map(|ip| Host::Literal(IpAddr::V4(ip)))
            .ok_or(Verdict::InvalidHost);
    }
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !labels_ok {
        return Err(Verdict::InvalidHost);
    }
    Ok(Host::Name(name.to_string()))
}

/// The names RFC 6761 reserves for loopback, refused without asking DNS.
pub fn is_localhost_name(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// WHATWG URL "ends in a number": the last label is all digits or `0x` hex.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or("");
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One part of a loose IPv4 literal: `0x` hex, leading-zero octal, or decimal.
fn parse_part(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = part.strip_prefix("0x") {
        (h, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return Some(0);
    }
    if digits.len() > 32 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// IPv4 in the 1-4 part forms of `inet_aton` (the last part fills the remaining bytes).
pub fn parse_ipv4_loose(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for p in &parts {
        values.push(parse_part(p)?);
    }
    let (last, init) = values.split_last()?;
    if init.iter().any(|v| *v > 255) {
        return None;
    }
    let room = 8 * (5 - values.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let mut n: u64 = *last;
    for (i, v) in init.iter().enumerate() {
        n |= v << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from(n as u32))
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    u128::from(ip) & mask == u128::from(net) & mask
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => in_v4(a, n.octets(), len.min(32) as u32),
        (IpAddr::V6(a), IpAddr::V6(n)) => in_v6(a, n, len.min(128) as u32),
        _ => false,
    }
}

/// The class of an IPv4 address by range alone.
fn class_v4(ip: Ipv4Addr) -> Verdict {
    const RANGES: &[([u8; 4], u32, Verdict)] = &[
        ([169, 254, 169, 254], 32, Verdict::Metadata),
        ([168, 63, 129, 16], 32, Verdict::Metadata),
        ([255, 255, 255, 255], 32, Verdict::Broadcast),
        ([0, 0, 0, 0], 32, Verdict::Unspecified),
        ([0, 0, 0, 0], 8, Verdict::ThisNetwork),
        ([10, 0, 0, 0], 8, Verdict::Private),
        ([100, 64, 0, 0], 10, Verdict::Cgnat),
        ([127, 0, 0, 0], 8, Verdict::Loopback),
        ([169, 254, 0, 0], 16, Verdict::LinkLocal),
        ([172, 16, 0, 0], 12, Verdict::Private),
        ([192, 0, 0, 0], 24, Verdict::IetfProtocol),
        ([192, 0, 2, 0], 24, Verdict::Documentation),
        ([192, 88, 99, 0], 24, Verdict::Reserved),
        ([192, 168, 0, 0], 16, Verdict::Private),
        ([198, 18, 0, 0], 15, Verdict::Benchmarking),
        ([198, 51, 100, 0], 24, Verdict::Documentation),
        ([203, 0, 113, 0], 24, Verdict::Documentation),
        ([224, 0, 0, 0], 4, Verdict::Multicast),
        ([240, 0, 0, 0], 4, Verdict::Reserved),
    ];
    RANGES
        .iter()
        .find(|(net, len, _)| in_v4(ip, *net, *len))
        .map(|(_, _, v)| *v)
        .unwrap_or(Verdict::Public)
}

/// The class of an IPv6 address by range alone. Anything outside 2000::/3 is refused, so
/// IPv6 is allowed only where it is global unicast and embeds no IPv4.
fn class_v6(ip: Ipv6Addr) -> Verdict {
    let v = |s: &str| s.parse::<Ipv6Addr>().expect("a valid constant");
    let ranges: [(&str, u32, Verdict); 16] = [
        ("::", 128, Verdict::Unspecified),
        ("::1", 128, Verdict::Loopback),
        ("fd00:ec2::254", 128, Verdict::Metadata),
        ("::ffff:0:0", 96, Verdict::Ipv6Embedding),
        ("64:ff9b::", 96, Verdict::Ipv6Embedding),
        ("64:ff9b:1::", 48, Verdict::Ipv6Embedding),
        ("2002::", 16, Verdict::Ipv6Embedding),
        ("2001::", 32, Verdict::Ipv6Embedding),
        ("2001:db8::", 32, Verdict::Documentation),
        ("3fff::", 20, Verdict::Documentation),
        ("2001::", 23, Verdict::IetfProtocol),
        ("fc00::", 7, Verdict::UniqueLocal),
        ("fe80::", 10, Verdict::LinkLocal),
        ("ff00::", 8, Verdict::Multicast),
        ("2000::", 3, Verdict::Public),
        ("::", 0, Verdict::NotGlobalUnicast),
    ];
    ranges
        .iter()
        .find(|(net, len, _)| in_v6(ip, v(net), *len))
        .map(|(_, _, verdict)| *verdict)
        .unwrap_or(Verdict::NotGlobalUnicast)
}

/// The verdict for connecting to `ip`: the proxy's and the host's own addresses first
/// (whatever their class), then the address ranges.
pub fn classify_ip(ip: IpAddr, ctx: &Context) -> Verdict {
    if ctx.own.contains(&ip) {
        return Verdict::SelfAddress;
    }
    if ctx.host.contains(&ip) {
        return Verdict::HostAddress;
    }
    let class = match ip {
        IpAddr::V4(a) => class_v4(a),
        IpAddr::V6(a) => class_v6(a),
    };
    if class != Verdict::Public
        && ctx
            .treat_as_public
            .iter()
            .any(|(net, len)| in_net(ip, *net, *len))
    {
        return Verdict::Public;
    }
    class
}

/// A refusal, or the addresses that may be connected to (in the resolver's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub verdict: Verdict,
    /// The address that decided it, if one did.
    pub address: Option<IpAddr>,
    pub reason: String,
}

/// Checks a whole DNS answer (or the one literal): every address must be public, else the
/// whole answer is refused. Never returns an empty list.
pub fn check_answer(host: &str, answer: &[IpAddr], ctx: &Context) -> Result<Vec<IpAddr>, Refusal> {
    let mut unique: Vec<IpAddr> = Vec::with_capacity(answer.len());
    for ip in answer {
        if !unique.contains(ip) {
            unique.push(*ip);
        }
    }
    if unique.is_empty() {
        return Err(Refusal {
            verdict: Verdict::DnsFailure,
            address: None,
            reason: format!("{host} resolved to no address"),
        });
    }
    let verdicts: Vec<(IpAddr, Verdict)> = unique
        .iter()
        .map(|ip| (*ip, classify_ip(*ip, ctx)))
        .collect();
    let Some((bad, verdict)) = verdicts.iter().find(|(_, v)| !v.allowed()).copied() else {
        return Ok(unique);
    };
    let public: Vec<String> = verdicts
        .iter()
        .filter(|(_, v)| v.allowed())
        .map(|(ip, _)| ip.to_string())
        .collect();
    if public.is_empty() {
        let reason = if unique.len() == 1 && host == bad.to_string() {
            format!("{bad} is {}", verdict.describe())
        } else {
            format!("{host} resolved to {bad}, {}", verdict.describe())
        };
        Err(Refusal {
            verdict,
            address: Some(bad),
            reason,
        })
    } else {
        Err(Refusal {
            verdict: Verdict::MixedDnsAnswer,
            address: Some(bad),
            reason: format!(
                "{host} resolved to {} and to {bad} ({}): a mixed answer is refused whole",
                public.join(", "),
                verdict.as_str()
            ),
        })
    }
}

/// The ports a computer may reach. Production uses [`Ports::default`]; tests and the
/// benchmark, which cannot bind 443 on loopback, set their own in code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub connect: u16,
    pub http: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            connect: CONNECT_PORT,
            http: HTTP_PORT,
        }
    }
}

/// The port rule: `CONNECT` to 443, absolute-form `http://` to 80.
pub fn check_port(connect: bool, port: u16, ports: Ports) -> Result<(), Refusal> {
    let (want, what) = if connect {
        (ports.connect, "CONNECT")
    } else {
        (ports.http, "http://")
    };
    if port == want {
        return Ok(());
    }
    Err(Refusal {
        verdict: Verdict::PortNotAllowed,
        address: None,
        reason: format!("port {port} is not allowed: {what} may reach port {want} only"),
    })
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
