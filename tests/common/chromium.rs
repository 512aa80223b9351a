//! Headless Chromium (Debian's package) driven over the DevTools protocol, for the web
//! view of `yy computer attach --web`. Chromium is kept on loopback: every name resolves
//! to nothing but 127.0.0.1, and anything not on loopback goes to a proxy port nobody
//! listens on.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// The chromium executable (YY_TEST_CHROMIUM, else `chromium` on PATH); else skip (or
/// fail under CI).
#[track_caller]
pub fn require_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("YY_TEST_CHROMIUM").map(PathBuf::from)
        && p.is_file()
    {
        return Some(p);
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let p = dir.join("chromium");
        if p.is_file() {
            return Some(p);
        }
    }
    super::missing("chromium", "run scripts/install-chromium.sh");
    None
}

/// A headless Chromium with its own profile directory, killed when dropped.
pub struct Browser {
    child: Child,
    _dir: tempfile::TempDir,
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next: u64,
    /// The session of the page target (flat mode).
    session: Option<String>,
}

impl Browser {
    pub async fn launch(exe: &std::path::Path) -> Browser {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(exe)
            .args([
                "--headless=new",
                "--remote-debugging-port=0",
                "--no-sandbox",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-domain-reliability",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--no-pings",
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", dir.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromium");
        // Chromium writes the port it chose and the browser's WebSocket path.
        let file = dir.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&file)
                && t.lines().count() >= 2
            {
                break t;
            }
            assert!(
                Instant::now() < deadline,
                "chromium wrote no DevToolsActivePort"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut lines = text.lines();
        let port = lines.next().unwrap().trim();
        let path = lines.next().unwrap().trim();
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connecting to chromium's DevTools");
        Browser {
            child,
            _dir: dir,
            ws,
            next: 0,
            session: None,
        }
    }

    /// Sends one command (to the page once one is open) and waits for its answer.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let m = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}"))
                .expect("the DevTools connection closed")
                .unwrap();
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page of `width`x`height` CSS pixels; later calls go to it.
    pub async fn open(&mut self, url: &str, width: u32, height: u32) {
        // The tab Chromium opened at start.
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = loop {
            let t = self.call("Target.getTargets", json!({})).await;
            let page = t["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["targetId"].as_str().map(str::to_string));
            if let Some(p) = page {
                break p;
            }
            assert!(Instant::now() < deadline, "chromium opened no page");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let a = self
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await;
        self.session = Some(a["sessionId"].as_str().unwrap().to_string());
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await;
        self.call("Page.navigate", json!({ "url": url })).await;
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is truthy in the page.
    pub async fn wait_for(&mut self, expr: &str, what: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.eval(expr).await;
            if !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0)) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A left click (move, press, release) at CSS pixel (x, y) of the page.
    pub async fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y).await;
        self.mouse("mousePressed", x, y).await;
        self.mouse("mouseReleased", x, y).await;
    }

    /// Moves the pointer to (x, y) until the page has no frame or input in flight: the
    /// pointer's moves keep new frames from starting, so the frame on screen stays the
    /// latest for the click that follows.
    pub async fn point_at(&mut self, x: f64, y: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.mouse("mouseMoved", x, y).await;
            if self.eval("!fetching && !sending").await == json!(true) {
                return;
            }
            assert!(Instant::now() < deadline, "the page never settled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A key typed in the page: `key` as `KeyboardEvent.key` names it ("h", "Enter").
    pub async fn key(&mut self, key: &str) {
        let mut p = json!({ "type": "keyDown", "key": key });
        if key.chars().count() == 1 {
            p["text"] = json!(key);
        } else if key == "Enter" {
            p["code"] = json!("Enter");
            p["windowsVirtualKeyCode"] = json!(13);
        }
        self.call("Input.dispatchKeyEvent", p).await;
        self.call(
            "Input.dispatchKeyEvent",
            json!({ "type": "keyUp", "key": key }),
        )
        .await;
    }

    pub async fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        let mut p = json!({ "type": kind, "x": x, "y": y });
        if kind != "mouseMoved" {
            p["button"] = json!("left");
            p["clickCount"] = json!(1);
        }
        self.call("Input.dispatchMouseEvent", p).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
