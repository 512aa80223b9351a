//! Tabs: listed, opened, switched to and closed by their place in the list; the browser's
//! actions go to the current one.

use serde::Serialize;
use serde_json::{Value, json};

use super::{Browser, BrowserError, printable};

/// Tabs a browser may have open; opening one more is refused.
pub const MAX_TABS: usize = 16;

/// One tab as listed: its place (from 0), address and title.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tab {
    pub index: usize,
    pub url: String,
    pub title: String,
    pub current: bool,
}

impl Browser {
    /// The page targets in the order they were opened (Chromium lists them in no stable
    /// order): known ones keep their place, new ones (a page's `window.open`) go last.
    async fn page_targets(&self) -> Result<Vec<Value>, BrowserError> {
        let targets = self.cdp.call(None, "Target.getTargets", json!({})).await?;
        let pages: Vec<Value> = targets["targetInfos"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["type"] == "page")
            .cloned()
            .collect();
        let id = |t: &Value| t["targetId"].as_str().unwrap_or_default().to_string();
        let mut order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        order.retain(|o| pages.iter().any(|t| id(t) == *o));
        for t in &pages {
            if !order.contains(&id(t)) {
                order.push(id(t));
            }
        }
        let mut sorted = pages;
        sorted.sort_by_key(|t| order.iter().position(|o| *o == id(t)));
        Ok(sorted)
    }

    fn current_target(&self) -> String {
        self.page
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .target
            .clone()
    }

    /// The open tabs.
    pub async fn tabs(&self) -> Result<Vec<Tab>, BrowserError> {
        let current = self.current_target();
        Ok(self
            .page_targets()
            .await?
            .iter()
            .enumerate()
            .map(|(index, t)| Tab {
                index,
                url: printable(t["url"].as_str().unwrap_or_default(), 2000),
                title: printable(t["title"].as_str().unwrap_or_default(), 200),
                current: t["targetId"].as_str() == Some(current.as_str()),
            })
            .collect())
    }

    /// Opens a new tab, makes it current and opens `url` in it.
    pub async fn new_tab(&self, url: &str) -> Result<(), BrowserError> {
        if self.page_targets().await?.len() >= MAX_TABS {
            return Err(BrowserError::Page(format!(
                "{MAX_TABS} tabs are open, the limit: close one first"
            )));
        }
        let made = self
            .cdp
            .call(None, "Target.createTarget", json!({ "url": "about:blank" }))
            .await?;
        let target = made["targetId"]
            .as_str()
            .ok_or_else(|| BrowserError::Protocol("createTarget gave no target".into()))?
            .to_string();
        self.attach(&target).await?;
        self.navigate(url).await
    }

    async fn target_at(&self, index: usize) -> Result<String, BrowserError> {
        let pages = self.page_targets().await?;
        pages
            .get(index)
            .and_then(|t| t["targetId"].as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                BrowserError::Page(format!(
                    "there is no tab {index}: {} are open (from 0)",
                    pages.len()
                ))
            })
    }

    /// Makes tab `index` current.
    pub async fn select_tab(&self, index: usize) -> Result<(), BrowserError> {
        let target = self.target_at(index).await?;
        self.cdp
            .call(None, "Target.activateTarget", json!({ "targetId": target }))
            .await?;
        self.attach(&target).await
    }

    /// Closes tab `index`; closing the current one makes the first remaining current. The
    /// last tab cannot be closed.
    pub async fn close_tab(&self, index: usize) -> Result<(), BrowserError> {
        let target = self.target_at(index).await?;
        if self.page_targets().await?.len() == 1 {
            return Err(BrowserError::Page(
                "this is the only tab: open another before closing it".into(),
            ));
        }
        self.cdp
            .call(None, "Target.closeTarget", json!({ "targetId": target }))
            .await?;
        if target == self.current_target() {
            let first = self.target_at(0).await?;
            self.attach(&first).await?;
        }
        Ok(())
    }
}
