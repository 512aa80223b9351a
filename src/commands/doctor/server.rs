//! The control plane as this host sees it: reachable, TLS and its pin, version, clock,
//! login.

use std::time::{Duration, SystemTime};

use reqwest::Url;

use super::{Doctor, Finding};
use crate::api::views::{Health, RunnerConfig};
use crate::client::Client;
use crate::output::clean;

/// The largest clock difference to the server that passes.
const MAX_SKEW: Duration = Duration::from_secs(2);
const TIMEOUT: Duration = Duration::from_secs(10);

/// The server to check and the credentials for it.
pub struct Target {
    server: String,
    url: Url,
    token: Option<String>,
    pin: Option<String>,
    /// Where the pin came from (to say what to change).
    pin_from: &'static str,
    /// The server and pin are runner.json's (no login on this host).
    from_runner: bool,
}

/// The CLI's server (`--server`, `YY_SERVER`, the stored login), else runner.json's.
pub fn target(config: Option<&RunnerConfig>) -> anyhow::Result<Option<Target>> {
    let (server, token, pin, pin_from, from_runner) = match super::super::context::target()? {
        Some(t) => {
            let same = config.filter(|c| c.server_url.trim_end_matches('/') == t.server);
            let pin_from = if std::env::var("YY_CERT_SHA256").is_ok_and(|v| !v.is_empty()) {
                "YY_CERT_SHA256"
            } else {
                "the stored login"
            };
            match (t.pin, same.and_then(|c| c.server_cert_sha256.clone())) {
                (Some(p), _) => (t.server, t.token, Some(p), pin_from, false),
                (None, Some(p)) => (t.server, t.token, Some(p), "runner.json", false),
                (None, None) => (t.server, t.token, None, pin_from, false),
            }
        }
        None => match config {
            Some(c) => (
                c.server_url.trim_end_matches('/').to_string(),
                None,
                c.server_cert_sha256.clone(),
                "runner.json",
                true,
            ),
            None => return Ok(None),
        },
    };
    let Ok(url) = Url::parse(&server) else {
        return Ok(None);
    };
    Ok(Some(Target {
        server,
        url,
        token,
        pin,
        pin_from,
        from_runner,
    }))
}

pub async fn check(d: &mut Doctor, target: Option<&Target>, runner_host: bool) {
    let Some(t) = target else {
        d.push(
            "server.reachable",
            Finding::fatal(
                "no server: not logged in, YY_SERVER unset, and no valid --runner-config",
                "yy login URL --username NAME",
            ),
        );
        for id in ["tls.pin", "server.version", "clock.skew", "login.valid"] {
            d.ready(id, &["server.reachable"]);
        }
        return;
    };
    let seen = reachable(d, t).await;
    if d.ready("tls.pin", &["server.reachable"]) {
        d.push("tls.pin", pin(t, seen));
    }
    let mut health = None;
    if d.ready("server.version", &["server.reachable", "tls.pin"]) {
        let (f, h) = version(t).await;
        health = h;
        d.push("server.version", f);
    }
    if d.ready("clock.skew", &["server.version"]) {
        d.push("clock.skew", health.map_or_else(no_date, skew));
    }
    if d.ready("login.valid", &["server.reachable", "tls.pin"]) {
        d.push("login.valid", login(t, runner_host).await);
    }
}

fn where_to_fix(t: &Target) -> String {
    if t.from_runner {
        "serverURL in runner.json".into()
    } else {
        format!("`yy login {} --username NAME`", t.server)
    }
}

/// A TCP connection (and TLS handshake over https) to the server; the certificate seen.
async fn reachable(d: &mut Doctor, t: &Target) -> Option<crate::api::tls::Seen> {
    let fix = format!(
        "start `yy serve` there (or `systemctl start yy-serve`), or correct the URL: {}",
        where_to_fix(t)
    );
    if t.url.scheme() == "https" {
        return match crate::api::tls::probe(&t.url).await {
            Ok(seen) => {
                d.push(
                    "server.reachable",
                    Finding::ok(format!("{} answers (TLS)", t.server)),
                );
                Some(seen)
            }
            Err(e) => {
                d.push("server.reachable", Finding::fatal(e.to_string(), fix));
                None
            }
        };
    }
    let host = t.url.host_str().unwrap_or_default().to_string();
    let port = t.url.port_or_known_default().unwrap_or(80);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let connect = tokio::net::TcpStream::connect((bare, port));
    let f = match tokio::time::timeout(TIMEOUT, connect).await {
        Ok(Ok(_)) => Finding::ok(format!("{} answers", t.server)),
        Ok(Err(e)) => Finding::fatal(format!("cannot connect to {host}:{port}: {e}"), fix),
        Err(_) => Finding::fatal(format!("no answer from {host}:{port} within 10 s"), fix),
    };
    d.push("server.reachable", f);
    None
}

fn pin(t: &Target, seen: Option<crate::api::tls::Seen>) -> Finding {
    let Some(seen) = seen else {
        let loopback = t
            .url
            .host()
            .is_some_and(|h| crate::runner::config::is_loopback_literal(&h));
        return if loopback {
            Finding::ok("plain http:// on a loopback address: nothing crosses the network")
        } else {
            Finding::warn(
                format!(
                    "{} is plain http:// off loopback: tokens cross the network readable",
                    t.server
                ),
                "serve HTTPS: `yy serve --tls self-signed` (or --tls-cert/--tls-key), then use https://",
            )
        };
    };
    let presented = seen.fingerprint.unwrap_or_default();
    let how = if t.from_runner || t.pin_from == "runner.json" {
        format!("set \"serverCertSha256\": \"{presented}\" in runner.json")
    } else {
        format!(
            "`yy login {} --username NAME --cert-sha256 {presented}`",
            t.server
        )
    };
    match &t.pin {
        Some(p) if *p == presented => Finding::ok(format!(
            "certificate SHA-256 {presented} is the one pinned in {}",
            t.pin_from
        )),
        _ if seen.ca_issued => Finding::ok(format!(
            "certificate issued by a trusted CA (SHA-256 {presented})"
        )),
        Some(p) => Finding::fatal(
            format!(
                "the certificate has SHA-256 {presented}, not the {p} pinned in {}, and no trusted CA issued it",
                t.pin_from
            ),
            format!(
                "compare {presented} with what `yy serve` printed at its start; if it is the server's new certificate: {how}"
            ),
        ),
        None => Finding::fatal(
            format!(
                "the certificate (SHA-256 {presented}) is not issued by a trusted CA and nothing pins it"
            ),
            format!(
                "compare it with what `yy serve` printed at its start; if it is the same: {how}"
            ),
        ),
    }
}

/// What `/healthz` said, and when (for the clock).
pub struct HealthSeen {
    date: Option<SystemTime>,
    sent: SystemTime,
    received: SystemTime,
}

async fn version(t: &Target) -> (Finding, Option<HealthSeen>) {
    let (builder, _) = crate::api::http::pinned_builder(&t.url, t.pin.as_deref());
    let fix_reach = format!(
        "check that {} is a yy server (`curl {}/healthz`)",
        t.server, t.server
    );
    let http = match builder.timeout(TIMEOUT).build() {
        Ok(h) => h,
        Err(e) => return (Finding::fatal(e.to_string(), fix_reach), None),
    };
    let sent = SystemTime::now();
    let resp = match http.get(format!("{}/healthz", t.server)).send().await {
        Ok(r) => r,
        Err(e) => {
            let why = crate::error::chain(&e);
            return (
                Finding::fatal(format!("GET /healthz: {why}"), fix_reach),
                None,
            );
        }
    };
    let received = SystemTime::now();
    let date = resp
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let seen = HealthSeen {
        date,
        sent,
        received,
    };
    let status = resp.status();
    let health = match resp
        .bytes()
        .await
        .map(|b| serde_json::from_slice::<Health>(&b))
    {
        Ok(Ok(h)) if status.is_success() => h,
        _ => {
            return (
                Finding::fatal(
                    format!("GET /healthz answered HTTP {status}, not a yy health answer"),
                    fix_reach,
                ),
                Some(seen),
            );
        }
    };
    let theirs = clean(&health.version).into_owned();
    let ours = crate::VERSION;
    let f = if theirs == ours {
        Finding::ok(format!("yy {theirs}, the same as this yy"))
    } else if major_minor(&theirs).is_some() && major_minor(&theirs) == major_minor(ours) {
        Finding::ok(format!(
            "yy {theirs}; this yy is {ours} (same major.minor: compatible)"
        ))
    } else {
        Finding::fail(
            format!("the server runs yy {theirs} and this yy is {ours}"),
            format!(
                "install yy {theirs} on this host (Runners and the CLI must match the control plane's major.minor)"
            ),
        )
    };
    (f, Some(seen))
}

fn major_minor(v: &str) -> Option<(&str, &str)> {
    let mut parts = v.split('.');
    Some((parts.next()?, parts.next()?))
}

fn no_date() -> Finding {
    Finding::skip("no answer from /healthz to read the server's time from")
}

/// The server's `Date` (whole seconds, written between our send and receive) against this
/// clock: the smallest skew consistent with both.
fn skew(h: HealthSeen) -> Finding {
    let Some(date) = h.date else {
        return Finding::warn(
            "the server's answer has no Date header: the clock cannot be compared",
            "check for a proxy in front of `yy serve` that drops the Date header",
        );
    };
    let (ahead, behind) = skew_bounds(date, h.sent, h.received);
    let fix = "sync this host's clock: `timedatectl set-ntp true` (or chrony/ntpd)";
    if ahead > MAX_SKEW {
        Finding::fail(
            format!(
                "this clock is at least {} s ahead of the server's",
                ahead.as_secs()
            ),
            fix,
        )
    } else if behind > MAX_SKEW {
        Finding::fail(
            format!(
                "this clock is at least {} s behind the server's",
                behind.as_secs()
            ),
            fix,
        )
    } else {
        Finding::ok(format!(
            "within {} s of the server's (its Date has whole seconds)",
            MAX_SKEW.as_secs()
        ))
    }
}

/// How far this clock is at least ahead of / behind the server's: the server wrote `date`
/// (rounded down to the second) at a moment this clock saw between `sent` and `received`.
pub fn skew_bounds(
    date: SystemTime,
    sent: SystemTime,
    received: SystemTime,
) -> (Duration, Duration) {
    let latest = date + Duration::from_secs(1);
    let ahead = sent.duration_since(latest).unwrap_or_default();
    let behind = date.duration_since(received).unwrap_or_default();
    (ahead, behind)
}

async fn login(t: &Target, runner_host: bool) -> Finding {
    let Some(token) = &t.token else {
        return if runner_host {
            Finding::skip("no login on this host (a Runner host needs none)")
        } else {
            Finding::fail(
                format!("no login for {}", t.server),
                format!("yy login {} --username NAME", t.server),
            )
        };
    };
    let client = match Client::pinned(&t.server, Some(token.clone()), t.pin.as_deref()) {
        Ok(c) => c,
        Err(e) => return Finding::fail(e.to_string(), "yy login URL --username NAME"),
    };
    match client.whoami().await {
        Ok(me) => Finding::ok(format!(
            "logged in as {}{}",
            clean(&me.account.username),
            if me.account.admin { " (admin)" } else { "" }
        )),
        Err(e) if e.status() == Some(401) => Finding::fail(
            format!("the server refuses the token: {e}"),
            format!("yy login {} --username NAME", t.server),
        ),
        Err(e) => Finding::fail(
            e.to_string(),
            format!("yy whoami (and `yy login {} --username NAME`)", t.server),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_allows_the_date_headers_whole_seconds() {
        let at = |s: u64, ms: u64| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms)
        };
        // The server wrote 100 s (its clock between 100.0 and 101.0); we saw 100.9-101.0.
        let (a, b) = skew_bounds(at(100, 0), at(100, 900), at(101, 0));
        assert_eq!((a, b), (Duration::ZERO, Duration::ZERO));
        // We are 5 s ahead: sent at 106.0, the server's second was 100.
        let (a, b) = skew_bounds(at(100, 0), at(106, 0), at(106, 10));
        assert_eq!(a, Duration::from_secs(5));
        assert_eq!(b, Duration::ZERO);
        // We are behind: received at 95.5, the server said 100.
        let (a, b) = skew_bounds(at(100, 0), at(95, 400), at(95, 500));
        assert_eq!(a, Duration::ZERO);
        assert_eq!(b, Duration::from_millis(4500));
    }

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(major_minor("0.14.2"), Some(("0", "14")));
        assert_eq!(major_minor("0.14.0"), major_minor("0.14.9"));
        assert_ne!(major_minor("0.14.0"), major_minor("0.15.0"));
        assert_eq!(major_minor("garbage"), None);
    }
}
