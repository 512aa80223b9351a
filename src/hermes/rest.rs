//! Hermes's REST side: read-only GETs of an allowlist of paths, and the authentication
//! steps (password login, WebSocket ticket) that the gateway connection needs.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::access::{HermesAuth, Secret, read_token_file};
use super::{HermesAccess, HermesError, SUPPORTED_VERSION_PREFIX, SUPPORTED_VERSIONS, chain};

/// The session token header of Hermes's dashboard server.
const TOKEN_HEADER: &str = "X-Hermes-Session-Token";
/// The password provider of Hermes's `dashboard.basic_auth`.
const PASSWORD_PROVIDER: &str = "basic";

/// `GET /api/status` (public: no authentication needed). Only what yy uses is typed.
#[derive(Debug, Clone, Deserialize)]
pub struct HermesStatus {
    pub version: String,
    #[serde(default)]
    pub auth_required: bool,
    #[serde(default)]
    pub active_sessions: u64,
    #[serde(default)]
    pub profiles: Vec<String>,
}

enum Auth {
    Token(Secret),
    /// The password login's cookies (`name=value; ...`) once logged in.
    Credentials {
        username: String,
        password: Secret,
        cookies: tokio::sync::Mutex<Option<Secret>>,
    },
}

/// The read-only REST client. [`HermesRest::get`] is the one way to read, and it refuses
/// every path outside `/api/status`, `/api/sessions*` and `/api/profiles`.
pub struct HermesRest {
    http: reqwest::Client,
    base: Url,
    shown: String,
    auth: Auth,
}

/// The one place that decides which REST paths yy may read (GET only).
fn check_rest_path(path_and_query: &str) -> Result<(), HermesError> {
    let refused = || HermesError::PathNotAllowed(path_and_query.to_string());
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    };
    let allowed = match path {
        "/api/status" | "/api/profiles" | "/api/sessions" => true,
        p => p
            .strip_prefix("/api/sessions/")
            .is_some_and(|rest| rest.split('/').all(plain)),
    };
    let query_ok = query.is_none_or(|q| {
        q.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.=&%".contains(c))
    });
    if allowed && query_ok {
        Ok(())
    } else {
        Err(refused())
    }
}

impl HermesRest {
    /// A client for `access`; a `hermesTokenFile` is read now.
    pub fn new(access: &HermesAccess) -> Result<HermesRest, HermesError> {
        let auth = match &access.auth {
            HermesAuth::Token(t) => Auth::Token(t.clone()),
            HermesAuth::TokenFile(path) => Auth::Token(read_token_file(path)?),
            HermesAuth::Credentials(c) => Auth::Credentials {
                username: c.username.clone(),
                password: c.password.clone(),
                cookies: tokio::sync::Mutex::new(None),
            },
        };
        let http = crate::api::http::http_builder(&access.url)
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("yy-runner/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HermesError::Config(chain(&e)))?;
        Ok(HermesRest {
            http,
            base: access.url.clone(),
            shown: access.shown_url(),
            auth,
        })
    }

    fn url(&self, path_and_query: &str) -> Url {
        self.base
            .join(path_and_query)
            .expect("REST paths are absolute paths")
    }

    fn unreachable(&self, e: reqwest::Error) -> HermesError {
        HermesError::Unreachable {
            url: self.shown.clone(),
            reason: chain(&e.without_url()),
        }
    }

    pub(crate) fn refused(&self, status: StatusCode) -> HermesError {
        let (what, hint) = match &self.auth {
            Auth::Token(_) => (
                format!("the session token (HTTP {})", status.as_u16()),
                "the token must be the HERMES_DASHBOARD_SESSION_TOKEN that Hermes was started with (check hermesTokenFile)",
            ),
            Auth::Credentials { .. } => (
                format!("the login (HTTP {})", status.as_u16()),
                "check hermesCredentials against dashboard.basic_auth in that Hermes's config.yaml",
            ),
        };
        HermesError::Unauthorized {
            url: self.shown.clone(),
            what,
            hint: hint.into(),
        }
    }

    async fn json_of(&self, what: &str, resp: reqwest::Response) -> Result<Value, HermesError> {
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| self.unreachable(e))?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.refused(status));
        }
        let parsed = serde_json::from_slice::<Value>(&bytes);
        if !status.is_success() {
            let detail = parsed
                .ok()
                .and_then(|v| v.get("detail").map(|d| d.to_string()))
                .unwrap_or_default();
            return Err(HermesError::Protocol {
                what: what.into(),
                reason: format!("HTTP {status} {detail}").trim().to_string(),
            });
        }
        parsed.map_err(|e| HermesError::Protocol {
            what: what.into(),
            reason: e.to_string(),
        })
    }

    /// `GET /api/status`, public.
    pub async fn status(&self) -> Result<HermesStatus, HermesError> {
        let resp = self
            .http
            .get(self.url("/api/status"))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let v = self.json_of("GET /api/status", resp).await?;
        serde_json::from_value(v).map_err(|e| HermesError::Protocol {
            what: "GET /api/status".into(),
            reason: e.to_string(),
        })
    }

    /// `GET /api/status` and the version check: 0.19.x only.
    pub async fn check_version(&self) -> Result<HermesStatus, HermesError> {
        let status = self.status().await?;
        if !status.version.starts_with(SUPPORTED_VERSION_PREFIX) {
            return Err(HermesError::UnsupportedVersion {
                url: self.shown.clone(),
                found: status.version,
                supported: SUPPORTED_VERSIONS.into(),
            });
        }
        Ok(status)
    }

    /// `GET path_and_query` (e.g. `/api/sessions?limit=5`), authenticated, for an allowed
    /// path only. A login that expired is renewed once.
    pub async fn get(&self, path_and_query: &str) -> Result<Value, HermesError> {
        check_rest_path(path_and_query)?;
        let what = format!("GET {}", path_and_query.split('?').next().unwrap_or(""));
        for attempt in 0..2 {
            let req = self.http.get(self.url(path_and_query));
            let req = match &self.auth {
                Auth::Token(t) => req.header(TOKEN_HEADER, t.expose()),
                Auth::Credentials { .. } => {
                    req.header(reqwest::header::COOKIE, self.cookies(attempt > 0).await?)
                }
            };
            let resp = req.send().await.map_err(|e| self.unreachable(e))?;
            if resp.status() == StatusCode::UNAUTHORIZED
                && attempt == 0
                && matches!(self.auth, Auth::Credentials { .. })
            {
                continue;
            }
            return self.json_of(&what, resp).await;
        }
        unreachable!("the loop returns on its second pass")
    }

    /// `GET /api/sessions`: Hermes's stored sessions (newest first).
    pub async fn sessions(&self) -> Result<Value, HermesError> {
        self.get("/api/sessions").await
    }

    /// `GET /api/sessions/{stored_session_id}/messages`.
    pub async fn session_messages(&self, stored_session_id: &str) -> Result<Value, HermesError> {
        self.get(&format!("/api/sessions/{stored_session_id}/messages"))
            .await
    }

    /// `GET /api/profiles`.
    pub async fn profiles(&self) -> Result<Value, HermesError> {
        self.get("/api/profiles").await
    }

    /// The login cookies, logging in first when there are none (or `renew`).
    async fn cookies(&self, renew: bool) -> Result<String, HermesError> {
        let Auth::Credentials {
            username,
            password,
            cookies,
        } = &self.auth
        else {
            unreachable!("cookies are only for credentials");
        };
        let mut held = cookies.lock().await;
        if let Some(c) = held.as_ref().filter(|_| !renew) {
            return Ok(c.expose().to_string());
        }
        let body = serde_json::json!({
            "provider": PASSWORD_PROVIDER,
            "username": username,
            "password": password.expose(),
        });
        let resp = self
            .http
            .post(self.url("/auth/password-login"))
            .json(&body)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Err(HermesError::Unauthorized {
                url: self.shown.clone(),
                what: "the password login (HTTP 404)".into(),
                hint: "that Hermes has no password provider: set dashboard.basic_auth in its config.yaml".into(),
            });
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            return Err(HermesError::Unauthorized {
                url: self.shown.clone(),
                what: "the password login (HTTP 429)".into(),
                hint: "too many login attempts; try again shortly".into(),
            });
        }
        let jar: Vec<String> = resp
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .map(|kv| kv.trim().to_string())
            .filter(|kv| kv.contains('='))
            .collect();
        self.json_of("POST /auth/password-login", resp).await?;
        if jar.is_empty() {
            return Err(HermesError::Protocol {
                what: "POST /auth/password-login".into(),
                reason: "no session cookie in the answer".into(),
            });
        }
        let joined = jar.join("; ");
        *held = Some(Secret::new(joined.clone()));
        Ok(joined)
    }

    /// The WebSocket URL with its credential: `?token=` on loopback, else a fresh
    /// single-use `?ticket=`. It holds a secret: never show it.
    pub(crate) async fn ws_url(&self) -> Result<Url, HermesError> {
        let mut url = self.url("/api/ws");
        let scheme = if self.base.scheme() == "https" {
            "wss"
        } else {
            "ws"
        };
        url.set_scheme(scheme).expect("ws and wss are valid here");
        let credential = match &self.auth {
            Auth::Token(t) => ("token", t.expose().to_string()),
            Auth::Credentials { .. } => ("ticket", self.ticket().await?.expose().to_string()),
        };
        url.query_pairs_mut()
            .append_pair(credential.0, &credential.1);
        Ok(url)
    }

    async fn ticket(&self) -> Result<Secret, HermesError> {
        #[derive(Deserialize)]
        struct Ticket {
            ticket: String,
        }
        const WHAT: &str = "POST /api/auth/ws-ticket";
        for attempt in 0..2 {
            let resp = self
                .http
                .post(self.url("/api/auth/ws-ticket"))
                .header(reqwest::header::COOKIE, self.cookies(attempt > 0).await?)
                .send()
                .await
                .map_err(|e| self.unreachable(e))?;
            if resp.status() == StatusCode::UNAUTHORIZED && attempt == 0 {
                continue;
            }
            let v = self.json_of(WHAT, resp).await?;
            let t: Ticket = serde_json::from_value(v).map_err(|e| HermesError::Protocol {
                what: WHAT.into(),
                reason: e.to_string(),
            })?;
            return Ok(Secret::new(t.ticket));
        }
        unreachable!("the loop returns on its second pass")
    }
}

#[cfg(test)]
mod tests {
    use super::check_rest_path;

    #[test]
    fn only_read_paths_are_allowed() {
        for ok in [
            "/api/status",
            "/api/profiles",
            "/api/sessions",
            "/api/sessions?limit=5&offset=10",
            "/api/sessions/20261130_112814_132df2/messages",
        ] {
            assert!(check_rest_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/api/config",
            "/api/sessions/../config",
            "/api/sessions/x/../../env",
            "/api/sessions//messages",
            "/api/statusx",
            "/api/ws",
            "/auth/password-login",
            "/api/sessions?x=<script>",
            "api/status",
        ] {
            assert!(check_rest_path(bad).is_err(), "{bad}");
        }
    }
}
