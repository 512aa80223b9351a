//! The HTTP client every CLI command uses to talk to `yy serve`; its typed methods, one per
//! endpoint, are in [`admin`] and [`status`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::{Serialize, de::DeserializeOwned};

use crate::api::ErrorBody;
use crate::api::http::{
    PinnedTls, changed_certificate, pinned_builder, websocket_connector, websocket_request,
};

pub mod admin;
mod browser;
pub mod status;

pub use admin::{LONG_POLL_MS, result_of, seg};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("{message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot reach the yy server at {url}: {reason}")]
    Connect { url: String, reason: String },
    /// The server's certificate is not the one pinned for it.
    #[error("{0}")]
    Certificate(String),
    #[error("unexpected answer from the yy server at {url}: {reason}")]
    Protocol { url: String, reason: String },
    /// A Runner command did not end as the caller needs (failed, cancelled, or an answer
    /// of another shape).
    #[error("{0}")]
    Command(String),
}

impl ClientError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The server's replicas (one, unless the stored login names more); requests go to
    /// `bases[current]`, and move on to the next when it cannot be reached.
    bases: Arc<[Url]>,
    current: Arc<AtomicUsize>,
    token: Option<String>,
    tls: Option<PinnedTls>,
    pin: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("Client")
            .field("base", &self.base().as_str())
            .finish()
    }
}

impl Client {
    /// `base` is the server URL, e.g. `http://127.0.0.1:8420`.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, ClientError> {
        Client::pinned(base, token, None)
    }

    /// A client that trusts an `https://` server's certificate when its SHA-256 is `pin`
    /// (or a trusted CA issued it for the name).
    pub fn pinned(
        base: &str,
        token: Option<String>,
        pin: Option<&str>,
    ) -> Result<Self, ClientError> {
        let base = parse_base(base)?;
        let (builder, tls) = pinned_builder(&base, pin);
        let http = builder
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("yy/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Connect {
                url: base.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Client {
            http,
            bases: Arc::new([base]),
            current: Arc::default(),
            token,
            tls,
            pin: pin.map(str::to_string),
        })
    }

    /// The same client with `others`, replicas of the server (same scheme, same
    /// certificate), to try in order when the first cannot be reached.
    pub fn with_replicas(mut self, others: &[String]) -> Result<Self, ClientError> {
        let mut bases: Vec<Url> = self.bases.to_vec();
        for other in others {
            let url = parse_base(other)?;
            if url.scheme() != bases[0].scheme() {
                return Err(ClientError::Connect {
                    url: other.clone(),
                    reason: format!(
                        "a replica of {} must be reached over {}:// too",
                        self.base_url(),
                        bases[0].scheme()
                    ),
                });
            }
            if !bases.contains(&url) {
                bases.push(url);
            }
        }
        self.bases = bases.into();
        Ok(self)
    }

    fn base(&self) -> &Url {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Sends the request `build` makes for the current replica's URL of `path`; when that
    /// replica cannot be reached (nothing was sent), the next one gets it.
    async fn send_request(
        &self,
        path: &str,
        build: impl Fn(Url) -> RequestBuilder,
    ) -> Result<(reqwest::Response, Url), ClientError> {
        let mut others = self.bases.len() - 1;
        loop {
            let url = self.url(path);
            match build(url.clone()).send().await {
                Ok(resp) => return Ok((resp, url)),
                Err(e) if e.is_connect() && others > 0 => {
                    others -= 1;
                    tracing::info!(server = %self.base_url(), error = %root_cause(&e), "cannot reach this replica; trying the next");
                    self.current.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(self.connect_error(&e)),
            }
        }
    }

    /// A request to `url` with the token.
    fn authed(&self, method: Method, url: Url) -> RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// The TLS connector for a WebSocket to this server (None over plain HTTP).
    pub fn websocket_connector(&self) -> Option<tokio_tungstenite::Connector> {
        websocket_connector(&self.tls)
    }

    /// The WebSocket request for an admin path (with its query), authenticated.
    pub fn websocket(
        &self,
        path: &str,
    ) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, ClientError> {
        websocket_request(self.base(), path, self.token.as_deref()).map_err(|reason| {
            ClientError::Connect {
                url: self.base_url().to_string(),
                reason,
            }
        })
    }

    /// The client error an HTTP answer refusing a WebSocket upgrade stands for.
    pub fn refused(&self, status: u16, body: &[u8], path: &str) -> ClientError {
        api_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            body,
            path,
        )
    }

    pub fn base_url(&self) -> &str {
        self.base().as_str().trim_end_matches('/')
    }

    fn url(&self, path: &str) -> Url {
        self.base()
            .join(path.trim_start_matches('/'))
            .expect("API paths are valid relative URLs")
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send(Method::GET, path, None::<&()>).await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.send(Method::POST, path, Some(body)).await
    }

    pub async fn patch<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.send(Method::PATCH, path, Some(body)).await
    }

    /// A GET whose body the caller reads itself (a download); error answers are errors.
    pub async fn get_stream(&self, path: &str) -> Result<reqwest::Response, ClientError> {
        let (resp, url) = self
            .send_request(path, |url| self.authed(Method::GET, url))
            .await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp.bytes().await.map_err(|e| self.connect_error(&e))?;
        Err(api_error(status, &bytes, url.path()))
    }

    /// A POST of raw bytes with extra headers; the answer is JSON.
    pub async fn post_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Result<T, ClientError> {
        let body = bytes::Bytes::from(body);
        let sent = self
            .send_request(path, |url| {
                let mut req = self
                    .authed(Method::POST, url)
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(body.clone());
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                req
            })
            .await?;
        self.answer(sent).await
    }

    fn connect_error(&self, e: &reqwest::Error) -> ClientError {
        if let (Some(pinned), Some(tls)) = (&self.pin, &self.tls)
            && let Some(presented) = tls.refused(pinned)
        {
            return ClientError::Certificate(changed_certificate(
                self.base_url().trim_end_matches('/'),
                pinned,
                &presented,
            ));
        }
        ClientError::Connect {
            url: self.base_url().to_string(),
            reason: root_cause(e),
        }
    }

    pub async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let sent = self
            .send_request(path, |url| {
                let req = self.authed(method.clone(), url);
                match body {
                    Some(body) => req.json(body),
                    None => req,
                }
            })
            .await?;
        self.answer(sent).await
    }

    /// Reads the answer to a request sent to `url`: the typed body, or the server's error.
    async fn answer<T: DeserializeOwned>(
        &self,
        (resp, url): (reqwest::Response, Url),
    ) -> Result<T, ClientError> {
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.connect_error(&e))?;
        if !status.is_success() {
            return Err(api_error(status, &bytes, url.path()));
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
            url: self.base_url().to_string(),
            reason: format!(
                "{} answered with a body that is not what yy expects ({e}); is this a yy server of the same version?",
                url.path()
            ),
        })
    }
}

/// A server URL as the base of API paths (ending in `/`).
fn parse_base(raw: &str) -> Result<Url, ClientError> {
    let mut base = Url::parse(raw).map_err(|e| ClientError::Connect {
        url: raw.to_string(),
        reason: format!("not a URL ({e})"),
    })?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(ClientError::Connect {
            url: base.to_string(),
            reason: "the server URL must start with http:// or https://".into(),
        });
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

fn api_error(status: StatusCode, body: &[u8], path: &str) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => ClientError::Api {
            status: status.as_u16(),
            code: b.error.code,
            message: b.error.message,
        },
        Err(_) => ClientError::Api {
            status: status.as_u16(),
            code: "http".into(),
            message: format!(
                "{path}: HTTP {status} (not a yy error body; is the URL a yy server?)"
            ),
        },
    }
}

/// reqwest's top-level messages ("error sending request") hide the useful part.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
