//! The Runner-managed browser for host agents (docs/browser.md): Debian's Chromium,
//! headless, on a persistent profile directory per agent, driven over the DevTools
//! protocol through a pipe ([`cdp`]); pages opened, read (text, links, elements with refs)
//! and photographed, acted on by ref ([`Browser::click`], ...) or, by an operator, at
//! points of the screen (`screen`); tabs; yy's egress proxy in front of each, paused
//! between turns ([`network`]); each agent's context opened on use and reclaimed when idle
//! ([`contexts`]). The Runner serves it to Hermes's browser tools (`runner::browser`).

mod actions;
pub mod cdp;
mod chromium;
pub mod contexts;
pub mod network;
mod screen;
mod tabs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Serialize;
use serde_json::{Value, json};

pub use actions::Scroll;
pub use chromium::LaunchOptions;
pub use tabs::Tab;

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("cannot start Chromium ({exe}): {reason}")]
    Start { exe: String, reason: String },
    #[error("the browser's profile directory {dir}: {reason}")]
    Profile { dir: String, reason: String },
    #[error("the browser has gone away")]
    Gone,
    #[error("the browser refused: {0}")]
    Protocol(String),
    #[error("{0}")]
    Page(String),
}

/// Most characters of page text a snapshot carries, and most links.
pub const SNAPSHOT_TEXT: usize = 20_000;
pub const SNAPSHOT_LINKS: usize = 200;
pub const SNAPSHOT_ELEMENTS: usize = 200;

/// Reads the page and marks each visible element one can act on with `data-yy-ref`.
const SNAPSHOT_SCRIPT: &str = r#"(() => {
  document.querySelectorAll('[data-yy-ref]').forEach(e => e.removeAttribute('data-yy-ref'));
  const acts = 'a[href], button, input:not([type=hidden]), textarea, select, [role=button], [role=link], [contenteditable=""], [contenteditable=true], [onclick]';
  const visible = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const elements = Array.from(document.querySelectorAll(acts)).filter(visible).slice(0, ELEMENTS_MAX)
    .map((e, i) => {
      e.setAttribute('data-yy-ref', 'e' + (i + 1));
      const name = (e.innerText || e.getAttribute('aria-label') || e.placeholder || e.value || e.name || '').trim();
      return { ref: '@e' + (i + 1), kind: e.getAttribute('role') || e.tagName.toLowerCase(), name: name.slice(0, 100) };
    });
  return {
    url: location.href, title: document.title,
    text: (document.body ? document.body.innerText : '').slice(0, TEXT_MAX),
    links: Array.from(document.links).slice(0, LINKS_MAX)
      .map(a => ({ text: a.innerText.trim().slice(0, 200), href: a.href })),
    elements,
  };
})()"#;
/// How long a navigation may take to load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// What the model reads of a page: its address, title, visible text, links, and the
/// elements it can act on, each with a ref (`@e3`) for [`Browser::click`] and
/// [`Browser::type_text`] (as Hermes's browser tools name them).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub url: String,
    pub title: String,
    pub text: String,
    pub links: Vec<Link>,
    pub elements: Vec<Element>,
}

impl Snapshot {
    /// The snapshot cut to the limits again: the script runs among the page's own scripts,
    /// which can replace what it calls, so a hostile page could answer anything.
    fn within_limits(mut self) -> Snapshot {
        let cut = |s: &mut String, n: usize| {
            if let Some((i, _)) = s.char_indices().nth(n) {
                s.truncate(i);
            }
        };
        cut(&mut self.url, 2048);
        cut(&mut self.title, 200);
        cut(&mut self.text, SNAPSHOT_TEXT);
        self.links.truncate(SNAPSHOT_LINKS);
        for l in &mut self.links {
            cut(&mut l.text, 200);
            cut(&mut l.href, 2048);
        }
        self.elements.truncate(SNAPSHOT_ELEMENTS);
        for e in &mut self.elements {
            cut(&mut e.ref_id, 16);
            cut(&mut e.kind, 32);
            cut(&mut e.name, 100);
        }
        self
    }
}

/// A visible element one can click or type into.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Element {
    /// `@eN`, valid until the next snapshot.
    #[serde(rename = "ref")]
    pub ref_id: String,
    /// The tag (`a`, `button`, `input`, ...), or the ARIA role when it has one.
    pub kind: String,
    /// Its text, label, placeholder or value, cut to 100 characters.
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Link {
    pub text: String,
    pub href: String,
}

/// A running browser with its first page.
pub struct Browser {
    process: chromium::Process,
    cdp: cdp::Cdp,
    /// The DevTools session of the current tab's page (flat mode).
    page: std::sync::Mutex<Page>,
    /// Tab targets in the order they were opened.
    order: std::sync::Mutex<Vec<String>>,
    width: u32,
    height: u32,
}

/// The tab the browser's actions go to.
#[derive(Debug, Clone)]
struct Page {
    target: String,
    session: String,
}

impl Browser {
    /// Starts Chromium on `profile` (made 0700 when missing, kept afterwards) and attaches
    /// to its page.
    pub async fn launch(opts: &LaunchOptions, profile: &Path) -> Result<Browser, BrowserError> {
        let (process, cdp) = chromium::launch(opts, profile)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = loop {
            let targets = cdp.call(None, "Target.getTargets", json!({})).await?;
            let page = targets["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["targetId"].as_str().map(str::to_string));
            if let Some(p) = page {
                break p;
            }
            if Instant::now() > deadline {
                return Err(BrowserError::Page("Chromium opened no page in 30 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let browser = Browser {
            process,
            cdp,
            page: std::sync::Mutex::new(Page {
                target: String::new(),
                session: String::new(),
            }),
            order: std::sync::Mutex::new(vec![target.clone()]),
            width: opts.width,
            height: opts.height,
        };
        browser.attach(&target).await?;
        Ok(browser)
    }

    /// Makes `target` the tab the actions go to: attached, its viewport the size asked for
    /// (the window's includes its frame).
    async fn attach(&self, target: &str) -> Result<(), BrowserError> {
        let attached = self
            .cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target, "flatten": true }),
            )
            .await?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| BrowserError::Protocol("attachToTarget gave no session".into()))?
            .to_string();
        self.cdp
            .call(
                Some(&session),
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": false }),
            )
            .await?;
        *self.page.lock().unwrap_or_else(|p| p.into_inner()) = Page {
            target: target.to_string(),
            session,
        };
        Ok(())
    }

    /// The browser's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Ends the browser now, even while others still hold it (their calls then fail with
    /// [`BrowserError::Gone`]).
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Sends a DevTools command to the page and returns its result.
    pub async fn page_call(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        let session = self
            .page
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .session
            .clone();
        self.cdp.call(Some(&session), method, params).await
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&self, expression: &str) -> Result<Value, BrowserError> {
        let r = self
            .page_call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(BrowserError::Page(format!(
                "the page's script failed: {}",
                printable(&e["text"].to_string(), 200)
            )));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Opens `url` and waits until it has loaded.
    pub async fn navigate(&self, url: &str) -> Result<(), BrowserError> {
        let r = self
            .page_call("Page.navigate", json!({ "url": url }))
            .await?;
        if let Some(e) = r["errorText"].as_str() {
            return Err(BrowserError::Page(format!(
                "cannot open {}: {}",
                printable(url, 200),
                printable(e, 200)
            )));
        }
        let deadline = Instant::now() + LOAD_TIMEOUT;
        while self.eval("document.readyState").await? != json!("complete") {
            if Instant::now() > deadline {
                return Err(BrowserError::Page(format!(
                    "{} did not finish loading in {LOAD_TIMEOUT:?}",
                    printable(url, 200)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The page's address, title, visible text, links and elements, cut to the snapshot
    /// limits. The elements get fresh refs.
    pub async fn snapshot(&self) -> Result<Snapshot, BrowserError> {
        let script = SNAPSHOT_SCRIPT
            .replace("TEXT_MAX", &SNAPSHOT_TEXT.to_string())
            .replace("LINKS_MAX", &SNAPSHOT_LINKS.to_string())
            .replace("ELEMENTS_MAX", &SNAPSHOT_ELEMENTS.to_string());
        let v = self.eval(&script).await?;
        let snapshot: Snapshot = serde_json::from_value(v)
            .map_err(|e| BrowserError::Protocol(format!("the snapshot did not read back: {e}")))?;
        Ok(snapshot.within_limits())
    }

    /// A PNG of what the page shows now.
    pub async fn screenshot(&self) -> Result<Vec<u8>, BrowserError> {
        let r = self
            .page_call("Page.captureScreenshot", json!({ "format": "png" }))
            .await?;
        let data = r["data"]
            .as_str()
            .ok_or_else(|| BrowserError::Protocol("captureScreenshot gave no data".into()))?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| BrowserError::Protocol(format!("the screenshot is not base64: {e}")))
    }
}

/// The default profile directory of `agent` under a Runner's data directory.
pub fn profile_dir(data_dir: &Path, agent: &str) -> PathBuf {
    let safe: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    data_dir.join("browser").join("profiles").join(safe)
}

/// `s` on one line for a message: control characters dropped, at most `max` characters.
pub(crate) fn printable(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_that_answers_too_much_is_cut_to_the_limits() {
        let long = "x".repeat(100_000);
        let snap = Snapshot {
            url: long.clone(),
            title: long.clone(),
            text: long.clone(),
            links: vec![
                Link {
                    text: long.clone(),
                    href: long.clone()
                };
                1000
            ],
            elements: vec![
                Element {
                    ref_id: long.clone(),
                    kind: long.clone(),
                    name: long
                };
                1000
            ],
        }
        .within_limits();
        assert_eq!(snap.text.chars().count(), SNAPSHOT_TEXT);
        assert_eq!(snap.links.len(), SNAPSHOT_LINKS);
        assert_eq!(snap.elements.len(), SNAPSHOT_ELEMENTS);
        assert_eq!(snap.elements[0].name.len(), 100);
        assert!(serde_json::to_string(&snap).unwrap().len() < 2 << 20);
    }
}
