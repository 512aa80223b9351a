//! The classification table: every range the proxy refuses, with both sides of each boundary, the
//! IPv6 forms that embed IPv4, odd IPv4 literal forms, and names.

use super::*;

fn ctx() -> Context {
    Context {
        host: vec!["192.0.2.2".parse().unwrap(), "8.8.4.4".parse().unwrap()],
        own: vec![
            "93.184.216.1".parse().unwrap(),
            "2a00:1450::99".parse().unwrap(),
        ],
        treat_as_public: vec![],
    }
}

/// What a host string comes to: a literal's verdict, `resolve` for a DNS name, or the
/// parse refusal.
fn verdict_of(host: &str) -> &'static str {
    match parse_host(host) {
        Err(v) => v.as_str(),
        Ok(Host::Name(n)) if is_localhost_name(&n) => Verdict::Loopback.as_str(),
        Ok(Host::Name(_)) => "resolve",
        Ok(Host::Literal(ip)) => classify_ip(ip, &ctx()).as_str(),
    }
}

const TABLE: &[(&str, &str)] = &[
    // 0.0.0.0/8 and the unspecified address
    ("0.0.0.0", "unspecified"),
    ("0.0.0.1", "this-network"),
    ("0.255.255.255", "this-network"),
    ("1.0.0.0", "public"),
    // 10/8
    ("9.255.255.255", "public"),
    ("10.0.0.0", "private"),
    ("10.255.255.255", "private"),
    ("11.0.0.0", "public"),
    // 100.64/10
    ("100.63.255.255", "public"),
    ("100.64.0.0", "cgnat"),
    ("100.100.100.200", "cgnat"),
    ("100.127.255.255", "cgnat"),
    ("100.128.0.0", "public"),
    // 127/8
    ("126.255.255.255", "public"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("128.0.0.0", "public"),
    // 169.254/16 and metadata
    ("169.253.255.255", "public"),
    ("169.254.0.1", "link-local"),
    ("169.254.169.254", "metadata"),
    ("169.254.169.253", "link-local"),
    ("169.254.255.255", "link-local"),
    ("169.255.0.0", "public"),
    ("168.63.129.16", "metadata"),
    // 172.16/12
    ("172.15.255.255", "public"),
    ("172.16.0.0", "private"),
    ("172.31.255.255", "private"),
    ("172.32.0.0", "public"),
    // 192.0.0/24, TEST-NET-1, 6to4 relay, 192.168/16
    ("191.255.255.255", "public"),
    ("192.0.0.0", "ietf-protocol"),
    ("192.0.0.255", "ietf-protocol"),
    ("192.0.1.0", "public"),
    ("192.0.2.0", "documentation"),
    ("192.0.2.255", "documentation"),
    ("192.0.3.0", "public"),
    ("192.88.99.1", "reserved"),
    ("192.167.255.255", "public"),
    ("192.168.0.0", "private"),
    ("192.168.255.255", "private"),
    ("192.169.0.0", "public"),
    // 198.18/15, TEST-NET-2
    ("198.17.255.255", "public"),
    ("198.18.0.0", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("198.20.0.0", "public"),
    ("198.51.99.255", "public"),
    ("198.51.100.0", "documentation"),
    ("198.51.100.255", "documentation"),
    ("198.51.101.0", "public"),
    // TEST-NET-3
    ("203.0.112.255", "public"),
    ("203.0.113.0", "documentation"),
    ("203.0.113.255", "documentation"),
    ("203.0.114.0", "public"),
    // multicast, 240/4, broadcast
    ("223.255.255.255", "public"),
    ("224.0.0.0", "multicast"),
    ("239.255.255.255", "multicast"),
    ("240.0.0.0", "reserved"),
    ("255.255.255.254", "reserved"),
    ("255.255.255.255", "broadcast"),
    // ordinary public addresses
    ("8.8.8.8", "public"),
    ("93.184.216.34", "public"),
    // the host's and the proxy's own addresses, whatever their class
    ("192.0.2.2", "host-address"),
    ("8.8.4.4", "host-address"),
    ("93.184.216.1", "self-address"),
    ("[2a00:1450::99]", "self-address"),
    // odd IPv4 literal forms
    ("2130706433", "loopback"),
    ("0x7f000001", "loopback"),
    ("0X7F000001", "loopback"),
    ("017700000001", "loopback"),
    ("0177.0.0.1", "loopback"),
    ("0x7f.0.0.1", "loopback"),
    ("127.1", "loopback"),
    ("127.0.1", "loopback"),
    ("0x7f.1", "loopback"),
    ("127.0.0.1.", "loopback"),
    ("0xa9.0xfe.0xa9.0xfe", "metadata"),
    ("2852039166", "metadata"),
    ("0251.0376.0251.0376", "metadata"),
    ("169.254.43518", "metadata"),
    ("10.1", "private"),
    ("012.0.0.1", "private"),
    ("0", "unspecified"),
    ("0x", "unspecified"),
    ("134744072", "public"),
    ("0x08080808", "public"),
    ("4294967295", "broadcast"),
    // forms that end in a number but are no address: refused, never resolved
    ("4294967296", "invalid-host"),
    ("256.0.0.1", "invalid-host"),
    ("1.2.3.4.5", "invalid-host"),
    ("127.0.0.0x1g", "resolve"),
    ("08.0.0.1", "invalid-host"),
    ("1.2.3.256", "invalid-host"),
    ("example.123", "invalid-host"),
    ("1..2", "invalid-host"),
    // IPv6
    ("[::]", "unspecified"),
    ("[::1]", "loopback"),
    ("[0:0:0:0:0:0:0:1]", "loopback"),
    ("[fbff:ffff::1]", "not-global-unicast"),
    ("[fc00::1]", "unique-local"),
    ("[fdff:ffff::1]", "unique-local"),
    ("[fd00:ec2::254]", "metadata"),
    ("[fe7f::1]", "not-global-unicast"),
    ("[fe80::1]", "link-local"),
    ("[febf::1]", "link-local"),
    ("[fec0::1]", "not-global-unicast"),
    ("[ff00::1]", "multicast"),
    ("[ff02::1]", "multicast"),
    ("[2001:db8::1]", "documentation"),
    ("[2001:db7:ffff::1]", "public"),
    ("[2001:db9::1]", "public"),
    ("[3fff::1]", "documentation"),
    ("[3ffe::1]", "public"),
    ("[1fff:ffff::1]", "not-global-unicast"),
    ("[2000::1]", "public"),
    ("[2606:4700:4700::1111]", "public"),
    ("[4000::1]", "not-global-unicast"),
    ("[100::1]", "not-global-unicast"),
    ("[2001:1ff:ffff::1]", "ietf-protocol"),
    ("[2001:200::1]", "public"),
    // IPv6 forms that embed IPv4
    ("[::ffff:127.0.0.1]", "ipv6-embedding"),
    ("[::ffff:8.8.8.8]", "ipv6-embedding"),
    ("[::ffff:7f00:1]", "ipv6-embedding"),
    ("[::127.0.0.1]", "not-global-unicast"),
    ("[64:ff9b::a9fe:a9fe]", "ipv6-embedding"),
    ("[64:ff9b::8.8.8.8]", "ipv6-embedding"),
    ("[64:ff9b:1::a00:1]", "ipv6-embedding"),
    ("[2002:7f00:1::1]", "ipv6-embedding"),
    ("[2002:808:808::1]", "ipv6-embedding"),
    ("[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "ipv6-embedding"),
    ("[2001:0:ffff::1]", "ipv6-embedding"),
    ("[2001:1::1]", "ietf-protocol"),
    // bad IPv6 forms
    ("[fe80::1%eth0]", "invalid-host"),
    ("::1", "invalid-host"),
    ("[::1", "invalid-host"),
    ("[not-an-address]", "invalid-host"),
    // names
    ("example.com", "resolve"),
    ("EXAMPLE.com.", "resolve"),
    ("a-b_c.example", "resolve"),
    ("xn--nxasmq6b.example", "resolve"),
    ("localhost", "loopback"),
    ("LOCALHOST.", "loopback"),
    ("api.localhost", "loopback"),
    ("", "invalid-host"),
    (".", "invalid-host"),
    ("exa mple.com", "invalid-host"),
    ("例え.jp", "invalid-host"),
    ("a..b", "invalid-host"),
    ("user@example.com", "invalid-host"),
];

#[test]
fn the_classification_table() {
    assert!(TABLE.len() >= 80, "{} entries", TABLE.len());
    let mut wrong = Vec::new();
    for (host, want) in TABLE {
        let got = verdict_of(host);
        if got != *want {
            wrong.push(format!("{host:?}: expected {want}, got {got}"));
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

#[test]
fn long_names_and_labels_are_refused() {
    let label = "a".repeat(64);
    assert_eq!(
        parse_host(&format!("{label}.example")),
        Err(Verdict::InvalidHost)
    );
    let long = format!("{}.example", ["abcdefghij"; 25].join("."));
    assert!(long.len() > MAX_NAME);
    assert_eq!(parse_host(&long), Err(Verdict::InvalidHost));
    let ok = format!("{}.example", "a".repeat(63));
    assert_eq!(parse_host(&ok), Ok(Host::Name(ok.clone())));
}

#[test]
fn a_mixed_answer_is_refused_whole() {
    let ctx = ctx();
    let public: IpAddr = "93.184.216.34".parse().unwrap();
    let private: IpAddr = "10.0.0.5".parse().unwrap();
    let r = check_answer("mixed.example", &[public, private], &ctx).unwrap_err();
    assert_eq!(r.verdict, Verdict::MixedDnsAnswer);
    assert_eq!(r.address, Some(private));
    assert!(r.reason.contains("93.184.216.34"), "{}", r.reason);
    assert!(r.reason.contains("10.0.0.5 (private)"), "{}", r.reason);
    // The order of the answer does not matter.
    let r = check_answer("mixed.example", &[private, public], &ctx).unwrap_err();
    assert_eq!(r.verdict, Verdict::MixedDnsAnswer);
    // Public and an embedded form of a public address: still refused whole.
    let mapped: IpAddr = "::ffff:93.184.216.34".parse().unwrap();
    let r = check_answer("m.example", &[public, mapped], &ctx).unwrap_err();
    assert_eq!(r.verdict, Verdict::MixedDnsAnswer);
    // Only non-public: the address's own verdict.
    let r = check_answer("p.example", &[private], &ctx).unwrap_err();
    assert_eq!(r.verdict, Verdict::Private);
    assert_eq!(
        r.reason,
        "p.example resolved to 10.0.0.5, a private address (RFC 1918)"
    );
    let r = check_answer("10.0.0.5", &[private], &ctx).unwrap_err();
    assert_eq!(r.reason, "10.0.0.5 is a private address (RFC 1918)");
    // All public, duplicates folded, order kept.
    let other: IpAddr = "2606:4700:4700::1111".parse().unwrap();
    assert_eq!(
        check_answer("ok.example", &[other, public, other], &ctx).unwrap(),
        vec![other, public]
    );
    assert_eq!(
        check_answer("none.example", &[], &ctx).unwrap_err().verdict,
        Verdict::DnsFailure
    );
}

#[test]
fn only_443_for_connect_and_80_for_http() {
    let ports = Ports::default();
    assert!(check_port(true, 443, ports).is_ok());
    assert!(check_port(false, 80, ports).is_ok());
    for (connect, port) in [
        (true, 80),
        (true, 22),
        (true, 8443),
        (false, 443),
        (false, 22),
    ] {
        let r = check_port(connect, port, ports).unwrap_err();
        assert_eq!(r.verdict, Verdict::PortNotAllowed);
        assert!(r.reason.contains(&port.to_string()));
    }
}

#[test]
fn test_networks_count_as_public_only_where_code_says_so() {
    let mut ctx = ctx();
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    assert_eq!(classify_ip(lo, &ctx), Verdict::Loopback);
    ctx.treat_as_public = vec![("127.0.0.0".parse().unwrap(), 8)];
    assert_eq!(classify_ip(lo, &ctx), Verdict::Public);
    assert_eq!(
        classify_ip("10.0.0.1".parse().unwrap(), &ctx),
        Verdict::Private
    );
    // Never the host's own or the proxy's own addresses.
    ctx.treat_as_public.push(("192.0.2.0".parse().unwrap(), 24));
    assert_eq!(
        classify_ip("192.0.2.2".parse().unwrap(), &ctx),
        Verdict::HostAddress
    );
}

#[test]
fn every_verdict_has_a_distinct_name() {
    use std::collections::HashSet;
    let all = [
        Verdict::Public,
        Verdict::Unspecified,
        Verdict::Loopback,
        Verdict::Private,
        Verdict::Cgnat,
        Verdict::LinkLocal,
        Verdict::Metadata,
        Verdict::ThisNetwork,
        Verdict::IetfProtocol,
        Verdict::Documentation,
        Verdict::Benchmarking,
        Verdict::Multicast,
        Verdict::Reserved,
        Verdict::Broadcast,
        Verdict::UniqueLocal,
        Verdict::Ipv6Embedding,
        Verdict::NotGlobalUnicast,
        Verdict::SelfAddress,
        Verdict::HostAddress,
        Verdict::MixedDnsAnswer,
        Verdict::DnsFailure,
        Verdict::InvalidHost,
        Verdict::PortNotAllowed,
        Verdict::MethodNotAllowed,
        Verdict::BadRequest,
        Verdict::TooManyConnections,
        Verdict::Unreachable,
        Verdict::Paused,
    ];
    let names: HashSet<&str> = all.iter().map(|v| v.as_str()).collect();
    assert_eq!(names.len(), all.len());
    for v in all {
        // The serde name is the same as the log name.
        assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        assert_eq!(v.allowed(), v == Verdict::Public);
    }
}
