//! What a model does on a page, with the names and arguments of Hermes's browser tools
//! where they overlap: click and type on a ref of the last snapshot, scroll, back. Clicks
//! and keys are real input events (`Input.dispatch*`), as a person's would be.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Browser, BrowserError, printable};

/// Which way [`Browser::scroll`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scroll {
    Up,
    Down,
}

impl Browser {
    /// The centre of the element `reference` (`@e3` or `e3`) in CSS pixels, scrolled into
    /// view first.
    async fn centre_of(&self, reference: &str) -> Result<(f64, f64), BrowserError> {
        let id = reference.trim().trim_start_matches('@');
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(BrowserError::Page(format!(
                "{:?} is not an element ref: give one of the last snapshot's, like @e3",
                printable(reference, 40)
            )));
        }
        let script = format!(
            "(() => {{ const e = document.querySelector('[data-yy-ref=\"{id}\"]'); \
               if (!e) return null; e.scrollIntoView({{ block: 'center', inline: 'center' }}); \
               const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        );
        match self.eval(&script).await? {
            Value::Array(xy) if xy.len() == 2 => Ok((
                xy[0].as_f64().unwrap_or_default(),
                xy[1].as_f64().unwrap_or_default(),
            )),
            _ => Err(BrowserError::Page(format!(
                "no element @{id} on the page: take a new snapshot"
            ))),
        }
    }

    /// Clicks the element `reference` of the last snapshot.
    pub async fn click(&self, reference: &str) -> Result<(), BrowserError> {
        let (x, y) = self.centre_of(reference).await?;
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            let mut p = json!({ "type": kind, "x": x, "y": y });
            if kind != "mouseMoved" {
                p["button"] = json!("left");
                p["clickCount"] = json!(1);
            }
            self.page_call("Input.dispatchMouseEvent", p).await?;
        }
        Ok(())
    }

    /// Clicks the element `reference` (to focus it) and types `text` into it.
    pub async fn type_text(&self, reference: &str, text: &str) -> Result<(), BrowserError> {
        self.click(reference).await?;
        self.page_call("Input.insertText", json!({ "text": text }))
            .await?;
        Ok(())
    }

    /// Scrolls the page by most of a screen.
    pub async fn scroll(&self, direction: Scroll) -> Result<(), BrowserError> {
        let sign = match direction {
            Scroll::Up => "-",
            Scroll::Down => "",
        };
        self.eval(&format!(
            "window.scrollBy(0, {sign}window.innerHeight * 0.8)"
        ))
        .await?;
        Ok(())
    }

    /// Goes back one page in the tab's history, and waits until that page has loaded.
    pub async fn back(&self) -> Result<(), BrowserError> {
        let history = self
            .page_call("Page.getNavigationHistory", json!({}))
            .await?;
        let current = history["currentIndex"].as_i64().unwrap_or(0);
        let Some(entry) = history["entries"]
            .as_array()
            .and_then(|e| e.get(usize::try_from(current - 1).ok()?))
        else {
            return Err(BrowserError::Page("there is no earlier page".into()));
        };
        self.page_call(
            "Page.navigateToHistoryEntry",
            json!({ "entryId": entry["id"] }),
        )
        .await?;
        let url = entry["url"].as_str().unwrap_or_default().to_string();
        let deadline = Instant::now() + super::LOAD_TIMEOUT;
        loop {
            let here = self
                .eval("document.readyState === 'complete' ? location.href : ''")
                .await?;
            if here.as_str() == Some(url.as_str()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BrowserError::Page(format!(
                    "the earlier page did not load in {:?}",
                    super::LOAD_TIMEOUT
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
