//! The web view of `yy computer attach C --web [--control]` and `yy browser attach A --web
//! [--control]`: a small page served by the CLI on 127.0.0.1 that shows the computer's (or
//! the agent's managed browser's) live screen and, under control, sends mouse and keyboard
//! input. The browser never sees the operator's login: the CLI fetches frames and relays
//! input through the control plane with its stored credentials.
//!
//! Access: the printed URL carries a one-time token; its first load exchanges it for an
//! HttpOnly, SameSite=Strict cookie (and redirects to drop the token from the address
//! bar); a later use of the token takes a browser holding the cookie to the page and is
//! refused otherwise, as is every request without the cookie (a browser gets a page that
//! says what to run for a new link, other clients JSON).
//! The Host header must name this listener (no DNS rebinding). Input is JSON only (a
//! cross-site form cannot send it) and carries the control fence and the frame id the
//! person clicked on; the control plane refuses an old fence, the guest a stale frame.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::api::screen::ScreenAction;
use crate::client::Client;
use crate::error::CliError;
use crate::server::conn::{ConnLimits, serve_connections};

/// Browser connections open at once (a page needs two or three).
const MAX_CONNECTIONS: usize = 8;
/// The largest request body (an input action).
const MAX_BODY: usize = 4096;
/// The longest text one `type_text` input may carry.
const MAX_TEXT_CHARS: usize = 1000;
const COOKIE: &str = "yy_attach";

const PAGE: &str = include_str!("page.html");
const REFUSED: &str = include_str!("refused.html");
const SCRIPT: &str = include_str!("page.js");

/// Whose screen the page shows.
#[derive(Debug, Clone)]
pub enum Screen {
    /// A desktop computer, by id.
    Computer(String),
    /// A host agent's managed browser, by agent name.
    Browser(String),
}

impl Screen {
    pub fn noun(&self) -> &'static str {
        match self {
            Screen::Computer(_) => "computer",
            Screen::Browser(_) => "browser",
        }
    }

    pub fn name(&self) -> &str {
        let (Screen::Computer(n) | Screen::Browser(n)) = self;
        n
    }

    /// `yy computer attach ID` or `yy browser attach AGENT`.
    pub fn attach(&self) -> String {
        format!("yy {} attach {}", self.noun(), self.name())
    }

    /// Runs one screen action on it and waits for the answer.
    pub async fn act(
        &self,
        client: &Client,
        action: &ScreenAction,
        fence: Option<i64>,
        frame: Option<&str>,
    ) -> Result<crate::api::screen::ScreenResult, crate::client::ClientError> {
        match self {
            Screen::Computer(id) => client.computer_screen_act(id, action, fence, frame).await,
            Screen::Browser(agent) => client.browser_screen_act(agent, action, fence, frame).await,
        }
    }

    /// Takes control; the fence, and the pause command to wait for.
    pub async fn take_control(
        &self,
        client: &Client,
    ) -> Result<(i64, Option<String>), crate::client::ClientError> {
        Ok(match self {
            Screen::Computer(id) => {
                let c = client.computer_control(id).await?;
                (c.control_fence, c.command_id)
            }
            Screen::Browser(agent) => {
                let c = client.browser_control(agent).await?;
                (c.control_fence, c.command_id)
            }
        })
    }

    /// Renews the control held under `fence`, or with `release` gives it up.
    pub async fn renew_control(
        &self,
        client: &Client,
        fence: i64,
        release: bool,
    ) -> Result<(), crate::client::ClientError> {
        match self {
            Screen::Computer(id) => client
                .computer_control_renew(id, fence, release)
                .await
                .map(drop),
            Screen::Browser(agent) => client
                .browser_control_renew(agent, fence, release)
                .await
                .map(drop),
        }
    }

    /// Hands it back with `note`; the fence of the control that ended.
    pub async fn handback(
        &self,
        client: &Client,
        note: &str,
    ) -> Result<i64, crate::client::ClientError> {
        match self {
            Screen::Computer(id) => client
                .computer_handback(id, note)
                .await
                .map(|c| c.control_fence),
            Screen::Browser(agent) => client
                .browser_handback(agent, note)
                .await
                .map(|c| c.control_fence),
        }
    }
}

struct Web {
    client: Client,
    screen: Screen,
    /// The Host header this listener answers to (`127.0.0.1:PORT`).
    host: String,
    /// The one-time token of the printed URL; taken by its first use.
    token: Mutex<Option<String>>,
    /// The cookie the token was exchanged for.
    session: String,
    /// The control fence held, under `--control`.
    fence: Option<i64>,
    /// One frame and one input in flight at a time.
    frames: Semaphore,
    inputs: Semaphore,
}

fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Compares secrets without an early exit on the first differing byte.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": msg.into() })),
    )
        .into_response()
}

/// Whether a browser asks (it takes HTML); the page's script and API clients get JSON.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

impl Web {
    /// The command that prints a new link for this page.
    fn again(&self) -> String {
        let control = if self.fence.is_some() {
            " --control"
        } else {
            ""
        };
        format!("{} --web{control}", self.screen.attach())
    }

    /// A refusal of the page itself: a person who opened it in a browser reads what
    /// happened and what to run; others get `error` as JSON. Same status either way.
    fn refuse_page(
        &self,
        headers: &HeaderMap,
        status: StatusCode,
        title: &str,
        why: &str,
        json: String,
    ) -> Response {
        if !wants_html(headers) {
            return error(status, json);
        }
        let page = REFUSED
            .replace("{{title}}", &html_escape(title))
            .replace("{{why}}", &html_escape(why))
            .replace("{{command}}", &html_escape(&self.again()));
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            page,
        )
            .into_response()
    }

    fn has_cookie(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .any(|(k, v)| k == COOKIE && same(v, &self.session))
    }

    /// The refusal of a request without the page's cookie.
    fn refused(&self, headers: &HeaderMap) -> Option<Response> {
        (!self.has_cookie(headers)).then(|| {
            error(
                StatusCode::UNAUTHORIZED,
                format!(
                    "not signed in: open the link `{} --web` printed",
                    self.screen.attach()
                ),
            )
        })
    }
}

/// Refuses requests whose Host is not this listener (a rebound DNS name), and sets the
/// headers every answer carries.
async fn guard(State(web): State<Arc<Web>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if host != Some(web.host.as_str()) {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            format!("this server answers only to http://{}/", web.host),
        );
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

#[derive(Deserialize)]
struct TokenQuery {
    t: Option<String>,
}

async fn index(
    State(web): State<Arc<Web>>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
) -> Response {
    if let Some(t) = q.t {
        let taken = {
            let mut token = web.token.lock().unwrap_or_else(|e| e.into_inner());
            match token.as_deref() {
                Some(want) if same(want, &t) => token.take().is_some(),
                _ => false,
            }
        };
        if !taken && web.has_cookie(&headers) {
            // This browser is signed in already (the printed link opened again): the page.
            return see_other("/", None);
        }
        if !taken {
            return web.refuse_page(
                &headers,
                StatusCode::FORBIDDEN,
                "This link was already used or has expired",
                &format!(
                    "Each link works once, and only while the {} --web that printed it runs.",
                    web.screen.attach()
                ),
                format!(
                    "this link was already used or has expired (it works once): run `{}` for a new one",
                    web.again()
                ),
            );
        }
        let cookie = format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            web.session
        );
        return see_other("/", Some(cookie));
    }
    if !web.has_cookie(&headers) {
        return web.refuse_page(
            &headers,
            StatusCode::UNAUTHORIZED,
            "Not signed in",
            &format!(
                "This page opens through the one-time link {} --web prints; this browser has not opened it.",
                web.screen.attach()
            ),
            format!(
                "not signed in: open the link `{} --web` printed",
                web.screen.attach()
            ),
        );
    }
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        PAGE.replace("{{noun}}", web.screen.noun())
            .replace("{{name}}", &html_escape(web.screen.name())),
    )
        .into_response()
}

fn see_other(to: &'static str, cookie: Option<String>) -> Response {
    let mut res = Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, to);
    if let Some(c) = cookie {
        res = res.header(header::SET_COOKIE, c);
    }
    res.body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn script(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(r) = web.refused(&headers) {
        return r;
    }
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

async fn state(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(r) = web.refused(&headers) {
        return r;
    }
    axum::Json(serde_json::json!({
        web.screen.noun(): web.screen.name(),
        "control": web.fence.is_some(),
        "fence": web.fence,
    }))
    .into_response()
}

async fn frame(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(r) = web.refused(&headers) {
        return r;
    }
    let Ok(_one) = web.frames.try_acquire() else {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "a frame is already being fetched",
        );
    };
    let shot = web
        .screen
        .act(&web.client, &ScreenAction::Screenshot, None, None)
        .await;
    let r = match shot {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_GATEWAY, format!("{e:#}")),
    };
    let Some(png) = r.png_bytes() else {
        return error(
            StatusCode::BAD_GATEWAY,
            "the screenshot came back without a PNG",
        );
    };
    let mut res = (
        [(header::CONTENT_TYPE, HeaderValue::from_static("image/png"))],
        png,
    )
        .into_response();
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&r.frame_id) {
        h.insert("x-frame-id", v);
    }
    h.insert("x-screen-width", HeaderValue::from(r.width));
    h.insert("x-screen-height", HeaderValue::from(r.height));
    res
}

#[derive(Deserialize)]
struct Input {
    fence: i64,
    frame_id: String,
    action: ScreenAction,
}

/// The actions a person may send from the page.
fn allowed(a: &ScreenAction) -> Result<(), String> {
    use ScreenAction as A;
    match a {
        A::LeftClick { .. }
        | A::RightClick { .. }
        | A::DoubleClick { .. }
        | A::MoveCursor { .. }
        | A::Scroll { .. }
        | A::PressKey { .. } => Ok(()),
        A::TypeText { text } if text.chars().count() <= MAX_TEXT_CHARS => Ok(()),
        A::TypeText { .. } => Err(format!(
            "type at most {MAX_TEXT_CHARS} characters at a time"
        )),
        A::Hotkey { keys } if (1..=5).contains(&keys.len()) => Ok(()),
        other => Err(format!("{} is not an input the page sends", other.name())),
    }
}

async fn input(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: Result<axum::Json<Input>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Some(r) = web.refused(&headers) {
        return r;
    }
    let axum::Json(i) = match body {
        Ok(b) => b,
        Err(e) => return error(e.status(), e.body_text()),
    };
    if web.fence.is_none() {
        return error(
            StatusCode::FORBIDDEN,
            "read-only: attach with --web --control to send input",
        );
    }
    if let Err(msg) = allowed(&i.action) {
        return error(StatusCode::BAD_REQUEST, msg);
    }
    let Ok(_one) = web.inputs.try_acquire() else {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "an input is still being sent; send one at a time",
        );
    };
    // The control plane is the judge of the fence (it refuses one that is not current
    // and held), the guest of the frame (it refuses one that is not the latest).
    match web
        .screen
        .act(&web.client, &i.action, Some(i.fence), Some(&i.frame_id))
        .await
    {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => error(StatusCode::CONFLICT, format!("{e:#}")),
    }
}

fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(script))
        .route("/state", get(state))
        .route("/frame", get(frame))
        .route("/input", post(input))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(web.clone(), guard))
        .with_state(web)
}

/// The page's server, running.
pub struct Served {
    /// The link with the one-time token.
    pub url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    /// Stops accepting, and waits (briefly) for the requests in flight.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Starts the page's server for `screen` on a random port of 127.0.0.1; with `fence` (the
/// control held) the page may send input. Also used by `yy bench screen`.
pub async fn serve(client: Client, screen: Screen, fence: Option<i64>) -> anyhow::Result<Served> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| CliError::failure(format!("listening on 127.0.0.1: {e}")))?;
    let port = listener.local_addr()?.port();
    let token = random_hex();
    let web = Arc::new(Web {
        client,
        screen,
        host: format!("127.0.0.1:{port}"),
        token: Mutex::new(Some(token.clone())),
        session: random_hex(),
        fence,
        frames: Semaphore::new(1),
        inputs: Semaphore::new(1),
    });
    let limits = ConnLimits {
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        max_connections: MAX_CONNECTIONS,
        shutdown_grace: Duration::from_secs(2),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_connections(
        listener,
        router(web),
        limits,
        None,
        async move {
            let _ = stopped.await;
        },
    ));
    Ok(Served {
        url: format!("http://127.0.0.1:{port}/?t={token}"),
        stop,
        task,
    })
}

#[cfg(test)]
mod tests;
