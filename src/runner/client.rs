//! The Runner's side of the machine protocol: every request carries the token, the
//! instance UUID, the protocol version and (after connecting) the generation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::ErrorBody;
use crate::api::artifacts::{HEADER_CRC32, UploadBegin, UploadState};
use crate::api::machine::{
    Connected, HEADER_GENERATION, HEADER_INSTANCE, HEADER_PREVIOUS_INSTANCE, HEADER_PROTOCOL,
    HEADER_REPLACE, LEASE_WAIT_MS, LeaseParams, Leased, PROTOCOL_VERSION, RunnerStatus,
    TokenRenewed,
};
use crate::api::words::chain;

#[derive(Debug, Clone, thiserror::Error)]
pub enum MachineError {
    /// The control plane could not be reached or the connection broke: retry.
    #[error("{0}")]
    Transport(String),
    /// The control plane answered with an error.
    #[error("{message} (HTTP {status}, {code})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
}

impl MachineError {
    pub fn code(&self) -> Option<&str> {
        match self {
            MachineError::Api { code, .. } => Some(code),
            MachineError::Transport(_) => None,
        }
    }
    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            MachineError::Api { status, .. } => Some(*status),
            MachineError::Transport(_) => None,
        }
    }
    /// Worth retrying after a pause (network trouble, a restarting or overloaded server).
    pub fn is_transient(&self) -> bool {
        match self {
            MachineError::Transport(_) => true,
            MachineError::Api { status, code, .. } => {
                *status >= 500 || code == crate::api::machine::codes::SHUTTING_DOWN
            }
        }
    }
    /// The replica is gone or going: unreachable, or shutting down. Another replica may
    /// serve (a replica that answers anything else is alive, and so is its database).
    pub fn replica_gone(&self) -> bool {
        match self {
            MachineError::Transport(_) => true,
            MachineError::Api { code, .. } => code == crate::api::machine::codes::SHUTTING_DOWN,
        }
    }
}

#[derive(Clone)]
pub struct MachineClient {
    http: reqwest::Client,
    /// The control plane's replicas (runner.json `serverURL`, then `serverURLs`); requests go
    /// to `bases[current]`, and [`Self::fail_over`] moves on to the next.
    bases: Arc<[Url]>,
    current: Arc<AtomicUsize>,
    tls: Option<crate::api::http::PinnedTls>,
    /// Swapped in place when the token is renewed (crate::runner::rotate); every clone
    /// shares it.
    token: Arc<RwLock<String>>,
    pub instance: String,
    /// Sent on connect: see [`Self::takeover`].
    previous_instance: Option<String>,
    replace: bool,
}

impl MachineClient {
    /// A client for the control plane at `server_url`; over `https://` its certificate must
    /// have the SHA-256 `pin` (runner.json's `serverCertSha256`) or be CA-issued.
    pub fn new(server_url: &str, token: String, pin: Option<&str>) -> Result<Self, MachineError> {
        Self::with_servers(&[server_url.to_string()], token, pin)
    }

    /// A client for the Runner of `config`, with every replica it names.
    pub fn for_config(config: &crate::api::views::RunnerConfig) -> Result<Self, MachineError> {
        Self::with_servers(
            &config.servers(),
            config.token.clone(),
            config.server_cert_sha256.as_deref(),
        )
    }

    /// A client for a control plane with replicas at `servers` (one scheme, one
    /// certificate pin), the first one in use.
    pub fn with_servers(
        servers: &[String],
        token: String,
        pin: Option<&str>,
    ) -> Result<Self, MachineError> {
        let bases = servers
            .iter()
            .map(|s| {
                let mut base = Url::parse(s).map_err(|e| MachineError::Transport(e.to_string()))?;
                if !base.path().ends_with('/') {
                    let p = format!("{}/", base.path());
                    base.set_path(&p);
                }
                Ok(base)
            })
            .collect::<Result<Vec<Url>, MachineError>>()?;
        let first = bases
            .first()
            .ok_or_else(|| MachineError::Transport("no server URL".into()))?;
        let (builder, tls) = crate::api::http::pinned_builder(first, pin);
        let http = builder
            .timeout(Duration::from_millis(LEASE_WAIT_MS + 15_000))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("yy-runner/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| MachineError::Transport(e.to_string()))?;
        Ok(MachineClient {
            http,
            bases: bases.into(),
            current: Arc::default(),
            tls,
            token: Arc::new(RwLock::new(token)),
            instance: uuid::Uuid::new_v4().to_string(),
            previous_instance: None,
            replace: false,
        })
    }

    /// On connect, names the instance that last connected from this data directory (a
    /// restart is no takeover), and with `replace` takes over from any instance online.
    pub fn takeover(mut self, previous_instance: Option<String>, replace: bool) -> Self {
        self.previous_instance = previous_instance;
        self.replace = replace;
        self
    }

    /// The replica requests go to now.
    pub fn server(&self) -> &Url {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Moves on to the next replica, in this client and all its clones; false when there
    /// is no other.
    pub fn fail_over(&self) -> bool {
        if self.bases.len() < 2 {
            return false;
        }
        self.current.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The TLS connector for a WebSocket to the control plane (None over plain HTTP).
    pub fn websocket_connector(&self) -> Option<tokio_tungstenite::Connector> {
        crate::api::http::websocket_connector(&self.tls)
    }

    fn token(&self) -> String {
        self.token.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Uses `token` from now on, in this client and all its clones.
    pub fn set_token(&self, token: String) {
        *self.token.write().unwrap_or_else(|e| e.into_inner()) = token;
    }

    /// A WebSocket request to a machine path with the machine headers.
    pub fn websocket(
        &self,
        path: &str,
        generation: i64,
    ) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, MachineError> {
        let mut req = crate::api::http::websocket_request(self.server(), path, Some(&self.token()))
            .map_err(MachineError::Transport)?;
        let h = req.headers_mut();
        for (name, value) in [
            (HEADER_PROTOCOL, PROTOCOL_VERSION.to_string()),
            (HEADER_INSTANCE, self.instance.clone()),
            (HEADER_GENERATION, generation.to_string()),
        ] {
            let value = value
                .parse()
                .map_err(|_| MachineError::Transport(format!("bad {name} header")))?;
            h.insert(name, value);
        }
        Ok(req)
    }

    /// A request with the machine headers (and the generation, once connected).
    fn request(&self, method: Method, path: &str, generation: Option<i64>) -> RequestBuilder {
        let url = self
            .server()
            .join(path)
            .expect("machine paths are relative URLs");
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(self.token())
            .header(HEADER_PROTOCOL, PROTOCOL_VERSION.to_string())
            .header(HEADER_INSTANCE, &self.instance);
        if let Some(g) = generation {
            req = req.header(HEADER_GENERATION, g.to_string());
        }
        req
    }

    /// Sends `req`; an error status becomes the API error it carries.
    async fn send(&self, path: &str, req: RequestBuilder) -> Result<Response, MachineError> {
        let resp = req
            .send()
            .await
            .map_err(|e| MachineError::Transport(chain(&e)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| MachineError::Transport(chain(&e)))?;
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(b) => MachineError::Api {
                status: status.as_u16(),
                code: b.error.code,
                message: b.error.message,
            },
            Err(_) => MachineError::Api {
                status: status.as_u16(),
                code: "http".into(),
                message: format!("{path}: HTTP {status} without a yy error body"),
            },
        })
    }

    async fn json_answer<T: DeserializeOwned>(
        &self,
        path: &str,
        req: RequestBuilder,
    ) -> Result<T, MachineError> {
        let resp = self.send(path, req).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| MachineError::Transport(chain(&e)))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| MachineError::Transport(format!("{path}: unexpected answer: {e}")))
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        generation: Option<i64>,
        body: &B,
    ) -> Result<T, MachineError> {
        self.call_with(path, generation, body, &[]).await
    }

    /// [`Self::call`] with extra headers.
    async fn call_with<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        generation: Option<i64>,
        body: &B,
        headers: &[(&str, &str)],
    ) -> Result<T, MachineError> {
        let request = || {
            let mut req = self.request(Method::POST, path, generation).json(body);
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            req
        };
        let used = self.token();
        match self.json_answer(path, request()).await {
            // Sent with the old token just as a renewed one took over (its first use ends
            // the old one): once more with the new one.
            Err(e) if e.status() == Some(401) && self.token() != used => {
                self.json_answer(path, request()).await
            }
            answer => answer,
        }
    }

    // ---- artifacts ----

    /// Begins (or resumes) an upload for a running command.
    pub async fn artifact_begin(
        &self,
        generation: i64,
        begin: &UploadBegin,
    ) -> Result<UploadState, MachineError> {
        self.call("runner/v1/artifacts", Some(generation), begin)
            .await
    }

    /// Sends chunk `n` with its SHA-256.
    pub async fn artifact_chunk(
        &self,
        generation: i64,
        id: &str,
        n: u64,
        data: bytes::Bytes,
        crc32: u32,
    ) -> Result<UploadState, MachineError> {
        let path = format!("runner/v1/artifacts/{id}/chunks/{n}");
        let req = self
            .request(Method::PUT, &path, Some(generation))
            .header(HEADER_CRC32, format!("{crc32:08x}"))
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(data);
        self.json_answer(&path, req).await
    }

    /// Finishes an upload; `sha256` when the begin did not announce it.
    pub async fn artifact_finish(
        &self,
        generation: i64,
        id: &str,
        sha256: Option<&str>,
    ) -> Result<UploadState, MachineError> {
        self.call(
            &format!("runner/v1/artifacts/{id}/finish"),
            Some(generation),
            &crate::api::artifacts::UploadFinish {
                sha256: sha256.map(str::to_string),
            },
        )
        .await
    }

    /// An attachment of a running turn, as a response to read in chunks.
    pub async fn artifact_content(
        &self,
        generation: i64,
        id: &str,
    ) -> Result<Response, MachineError> {
        let path = format!("runner/v1/artifacts/{id}/content");
        let req = self.request(Method::GET, &path, Some(generation));
        self.send(&path, req).await
    }

    pub async fn connect(&self, status: &RunnerStatus) -> Result<Connected, MachineError> {
        let mut headers = Vec::new();
        if let Some(previous) = &self.previous_instance {
            headers.push((HEADER_PREVIOUS_INSTANCE, previous.as_str()));
        }
        if self.replace {
            headers.push((HEADER_REPLACE, "1"));
        }
        self.call_with("runner/v1/connect", None, status, &headers)
            .await
    }

    pub async fn lease(&self, generation: i64, max: u32) -> Result<Leased, MachineError> {
        self.call(
            "runner/v1/lease",
            Some(generation),
            &LeaseParams { max, wait_ms: None },
        )
        .await
    }

    /// A new token, pending on the control plane until its first use: save it first.
    pub async fn renew_token(&self, generation: i64) -> Result<TokenRenewed, MachineError> {
        self.call("runner/v1/token", Some(generation), &serde_json::json!({}))
            .await
    }

    /// Who this token belongs to and when it expires (`yy doctor`); changes nothing.
    /// Asks each replica in turn until one answers.
    pub async fn whoami(&self) -> Result<crate::api::machine::RunnerWhoami, MachineError> {
        let path = "runner/v1/whoami";
        let mut others = self.bases.len() - 1;
        loop {
            let req = self.request(Method::GET, path, None);
            match self.json_answer(path, req).await {
                Err(e) if e.replica_gone() && others > 0 && self.fail_over() => others -= 1,
                answer => return answer,
            }
        }
    }

    /// `POST /runner/v1/commands/{id}/ACTION` for one command (`start` with `{}`,
    /// `complete` with its outcome); [`super::batches`] sends several at once instead when
    /// the control plane offers it.
    pub async fn command_call<B: Serialize, T: DeserializeOwned>(
        &self,
        generation: i64,
        id: &str,
        action: &str,
        body: &B,
    ) -> Result<T, MachineError> {
        self.call(
            &format!("runner/v1/commands/{id}/{action}"),
            Some(generation),
            body,
        )
        .await
    }

    /// `POST /runner/v1/commands/start` (`command-batches-v1`): one answer per id.
    pub async fn start_batch(
        &self,
        generation: i64,
        ids: Vec<String>,
    ) -> Result<Vec<crate::api::machine::BatchItem>, MachineError> {
        let body = crate::api::machine::StartBatch { ids };
        let answer: crate::api::machine::BatchAnswer = self
            .call("runner/v1/commands/start", Some(generation), &body)
            .await?;
        Ok(answer.results)
    }

    /// `POST /runner/v1/commands/complete` (`command-batches-v1`): one answer per report.
    pub async fn complete_batch(
        &self,
        generation: i64,
        reports: Vec<crate::api::machine::CompleteReport>,
    ) -> Result<Vec<crate::api::machine::BatchItem>, MachineError> {
        let body = crate::api::machine::CompleteBatch { reports };
        let answer: crate::api::machine::BatchAnswer = self
            .call("runner/v1/commands/complete", Some(generation), &body)
            .await?;
        Ok(answer.results)
    }

    pub async fn events(
        &self,
        generation: i64,
        id: &str,
        events: Vec<crate::api::sessions::TurnEvent>,
    ) -> Result<(), MachineError> {
        let _: serde_json::Value = self
            .call(
                &format!("runner/v1/commands/{id}/events"),
                Some(generation),
                &crate::api::sessions::EventsParams { events },
            )
            .await?;
        Ok(())
    }

    /// Forwards a team-tool call of the running turn (its opaque id decides who calls).
    pub async fn team_tool(
        &self,
        generation: i64,
        call: &crate::api::teams::TeamToolCall,
    ) -> Result<serde_json::Value, MachineError> {
        let answer: crate::api::teams::TeamToolAnswer = self
            .call("runner/v1/team-tools", Some(generation), call)
            .await?;
        Ok(answer.result)
    }

    pub async fn disconnect(&self, generation: i64) -> Result<(), MachineError> {
        let _: serde_json::Value = self
            .call(
                "runner/v1/disconnect",
                Some(generation),
                &serde_json::json!({}),
            )
            .await?;
        Ok(())
    }
}
