//! Browser-shaped requests. A web page can make a browser send requests to a loopback
//! server under the page's own host name (DNS rebinding) or with the page's `Origin`.
//! The server answers only to host names it was told about, and refuses admin requests
//! whose `Origin` is not the server itself.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;

/// The host names (ports aside) the server answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    names: Vec<String>,
    /// Listening on every address: any IP literal is the server's own (an IP literal
    /// cannot be rebound; only names can).
    any_ip: bool,
}

impl AllowedHosts {
    /// The listen address (and loopback names for a loopback or wildcard listen) plus
    /// `extra` names.
    pub fn new(listen: SocketAddr, extra: &[String]) -> AllowedHosts {
        let ip = listen.ip();
        let mut names = vec![ip.to_string()];
        if ip.is_loopback() || ip.is_unspecified() {
            names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        }
        names.extend(extra.iter().map(|h| normalize(h)));
        AllowedHosts {
            names,
            any_ip: ip.is_unspecified(),
        }
    }

    /// True when a `Host` header value (`name`, `name:port`, `[v6]:port`) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let name = normalize(host);
        if name.is_empty() {
            return false;
        }
        if self.any_ip && name.parse::<IpAddr>().is_ok() {
            return true;
        }
        self.names.contains(&name)
    }

    /// True when an `Origin` (`scheme://host[:port]`) names this server.
    pub fn allows_origin(&self, origin: &str) -> bool {
        match origin.split_once("://") {
            Some(("http" | "https", rest)) if !rest.contains('/') => self.allows(rest),
            _ => false,
        }
    }
}

/// The host name of a `Host` value: lowercase, without port, brackets or a final dot.
fn normalize(host: &str) -> String {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else if host.matches(':').count() > 1 {
        host // a bare IPv6 address
    } else {
        host.split(':').next().unwrap_or("")
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Refuses requests for foreign host names, and admin requests from foreign origins.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    // Health probes come from orchestrators that address the server in their own way.
    if path == "/healthz" {
        return next.run(req).await;
    }
    let hosts = &state.config.allowed_hosts;
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    match host {
        Some(h) if hosts.allows(h) => {}
        Some(h) => {
            return refuse(
                "host_refused",
                format!(
                    "this server does not answer to the host {:?}: start `yy serve` with --allowed-host NAME to add it",
                    crate::output::clean(h)
                ),
            );
        }
        None => return refuse("host_refused", "the request has no Host header".into()),
    }
    if path.starts_with("/api/")
        && let Some(origin) = req.headers().get(header::ORIGIN)
    {
        let origin = origin.to_str().unwrap_or("");
        if !hosts.allows_origin(origin) {
            return refuse(
                "origin_refused",
                format!(
                    "the admin API refuses requests from the origin {:?} (not this server)",
                    crate::output::clean(origin)
                ),
            );
        }
    }
    next.run(req).await
}

fn refuse(code: &'static str, message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, code, message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_listen_answers_to_loopback_names_only() {
        let h = AllowedHosts::new("127.0.0.1:8420".parse().unwrap(), &[]);
        for ok in [
            "127.0.0.1:8420",
            "localhost:8420",
            "LOCALHOST",
            "[::1]:1",
            "localhost.",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:8420",
            "10.0.0.1",
            "",
            "127.0.0.1.evil.example",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
        assert!(h.allows_origin("http://127.0.0.1:8420"));
        assert!(h.allows_origin("https://localhost"));
        assert!(!h.allows_origin("http://evil.example:8420"));
        assert!(!h.allows_origin("null"));
        assert!(!h.allows_origin("file://localhost/x"));
    }

    #[test]
    fn wildcard_listen_answers_to_ip_literals_and_named_hosts() {
        let h = AllowedHosts::new("0.0.0.0:8420".parse().unwrap(), &["yy.internal".into()]);
        assert!(h.allows("10.1.2.3:8420"));
        assert!(h.allows("[fd00::1]:8420"));
        assert!(h.allows("YY.internal:8420"));
        assert!(!h.allows("rebind.example:8420"));
        let specific = AllowedHosts::new("10.0.0.5:8420".parse().unwrap(), &[]);
        assert!(specific.allows("10.0.0.5:8420"));
        assert!(!specific.allows("10.0.0.6:8420"));
        assert!(!specific.allows("localhost"));
    }
}
