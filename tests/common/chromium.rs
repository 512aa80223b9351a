//! Headless Chromium (Debian's package) driven over the DevTools protocol, for the web
//! view of `yy computer attach --web`. Chromium is kept on loopback: every name resolves
//! to nothing but 127.0.0.1, and anything not on loopback goes to a proxy port nobody
//! listens on.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

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

/// A headless Chromium with its own profile directory (yy's own launcher, `yy::browser`),
/// killed when dropped.
pub struct Browser {
    inner: yy::browser::Browser,
    _dir: tempfile::TempDir,
}

impl Browser {
    pub async fn launch(exe: &std::path::Path) -> Browser {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = yy::browser::LaunchOptions::new(exe.to_path_buf());
        opts.extra_args = [
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ]
        .map(String::from)
        .to_vec();
        let inner = yy::browser::Browser::launch(&opts, &dir.path().join("profile"))
            .await
            .expect("starting chromium");
        Browser { inner, _dir: dir }
    }

    /// Sends one command to the page and waits for its answer.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.inner
            .page_call(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Opens `url` in the page at `width`x`height` CSS pixels.
    pub async fn open(&mut self, url: &str, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await;
        self.call("Page.navigate", json!({ "url": url })).await;
    }

    /// The value of a JavaScript expression in the page (null while it throws, e.g.
    /// before the page has loaded).
    pub async fn eval(&mut self, expr: &str) -> Value {
        match self.inner.eval(expr).await {
            Ok(v) => v,
            Err(yy::browser::BrowserError::Page(_)) => Value::Null,
            Err(e) => panic!("{expr}: {e}"),
        }
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
