//! How every yy HTTP client is built: no proxy from the environment, no redirects, a
//! connect timeout, and for `https://` the trust of [`super::tls`] (a pinned certificate or
//! a CA). The CLI's admin client, the Runner's machine client and the Hermes client use it.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

/// A client builder for yy's own HTTP peers: no proxy from the environment, no redirects,
/// a connect timeout. For a plain `http://` peer no TLS roots are loaded
/// ([`super::tls::no_roots`]).
pub fn http_builder(base: &Url) -> reqwest::ClientBuilder {
    pinned_builder(base, None).0
}

/// [`http_builder`] for a yy server: an `https://` one must present the certificate
/// pinned for it or one a trusted CA issued for its name ([`super::tls`]). Also returns
/// the TLS configuration, for WebSockets to the same server.
pub fn pinned_builder(
    base: &Url,
    pin: Option<&str>,
) -> (reqwest::ClientBuilder, Option<PinnedTls>) {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10));
    if base.scheme() == "http" {
        return (
            builder.tls_backend_preconfigured(super::tls::no_roots()),
            None,
        );
    }
    let (config, seen) = super::tls::client_config(pin);
    (
        builder.tls_backend_preconfigured((*config).clone()),
        Some(PinnedTls { config, seen }),
    )
}

/// The TLS of a client for an `https://` yy server: its configuration (for WebSockets to
/// the same server) and what the last handshake presented (for the refusal's message).
#[derive(Clone)]
pub struct PinnedTls {
    pub config: Arc<rustls::ClientConfig>,
    pub seen: Arc<std::sync::Mutex<super::tls::Seen>>,
}

impl PinnedTls {
    /// The fingerprint presented last, when it is neither `pin` nor CA-issued: the reason
    /// a handshake was refused.
    pub fn refused(&self, pin: &str) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.fingerprint
            .clone()
            .filter(|presented| presented != pin && !seen.ca_issued)
    }
}

/// The one-line refusal of a certificate that is neither the pinned one nor CA-issued,
/// with both fingerprints and how to accept the new one.
pub fn changed_certificate(base: &str, pinned: &str, presented: &str) -> String {
    format!(
        "the certificate of {base} changed: pinned SHA-256 {pinned}, presented {presented}, and no trusted CA issued it; if the server got a new certificate on purpose (check its fingerprint in the `yy serve` log), run `yy login {base} --username NAME --cert-sha256 {presented}`"
    )
}

/// The connector for a WebSocket to a yy server reached with `tls` (None: plain).
pub fn websocket_connector(tls: &Option<PinnedTls>) -> Option<tokio_tungstenite::Connector> {
    tls.as_ref()
        .map(|t| tokio_tungstenite::Connector::Rustls(t.config.clone()))
}

/// A WebSocket request (`ws`/`wss` for `http`/`https`) to `path` (with its query) under
/// `base`, carrying `token` as a bearer credential: the operator's shell relay.
pub fn websocket_request(
    base: &Url,
    path: &str,
    token: Option<&str>,
) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut url = base.join(path).map_err(|e| format!("{path}: {e}"))?;
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    url.set_scheme(scheme)
        .map_err(|_| format!("cannot make a WebSocket URL of {base}"))?;
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("WebSocket request: {e}"))?;
    if let Some(token) = token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?;
        req.headers_mut().insert("authorization", value);
    }
    Ok(req)
}
