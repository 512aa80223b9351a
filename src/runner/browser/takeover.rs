//! An operator's takeover of an agent's browser on the Runner: `browser.pause` holds the
//! agent's gate (the model's browser calls wait, the one in flight finishes first) and
//! opens the browser for the operator; `browser.screen` looks (without counting as use) or
//! acts under the control fence on the latest frame; `browser.resume` lets the model's
//! calls go on, the first one carrying the operator's note.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use super::ManagedBrowser;
use crate::api::browser::{BrowserPausePayload, BrowserScreenPayload};
use crate::api::computers::{PauseResult, ResumeResult};
use crate::api::screen::{ScreenAction, ScreenResult};
use crate::browser::BrowserError;

/// An operator's hold of an agent's browser.
pub struct Hold {
    fence: i64,
    _gate: OwnedRwLockWriteGuard<()>,
}

/// What the Runner knows of an agent's screen for takeover.
#[derive(Default)]
pub struct Screen {
    /// The latest screenshot's id.
    frame: Option<String>,
    /// Where the operator's pointer was last.
    at: (i32, i32),
}

fn refused(m: impl Into<String>) -> BrowserError {
    BrowserError::Page(m.into())
}

impl ManagedBrowser {
    fn gate(&self, agent: &str) -> Arc<RwLock<()>> {
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(agent.to_string())
            .or_default()
            .clone()
    }

    /// A model call's pass: waits while an operator holds the agent's browser.
    pub(super) async fn model_pass(&self, agent: &str) -> OwnedRwLockReadGuard<()> {
        self.gate(agent).read_owned().await
    }

    /// How many agents' browsers an operator holds now.
    pub fn held(&self) -> usize {
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The operator's note waiting for the agent's next browser call, taken.
    pub(super) fn take_note(&self, agent: &str) -> Option<String> {
        self.notes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent)
    }

    /// `browser.pause`: the model's browser calls wait from now on (the one in flight
    /// ends first); the browser opens for the operator, its network open.
    pub async fn pause(&self, p: &BrowserPausePayload) -> Result<PauseResult, BrowserError> {
        let started = Instant::now();
        let held = {
            let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
            match holds.get_mut(&p.agent_id) {
                Some(h) if h.fence > p.control_fence => {
                    return Err(refused(format!(
                        "control fence {} is stale: the browser is held under {}",
                        p.control_fence, h.fence
                    )));
                }
                Some(h) => {
                    h.fence = p.control_fence;
                    true
                }
                None => false,
            }
        };
        if !held {
            let gate = self.gate(&p.agent_id).write_owned().await;
            self.holds.lock().unwrap_or_else(|p| p.into_inner()).insert(
                p.agent_id.clone(),
                Hold {
                    fence: p.control_fence,
                    _gate: gate,
                },
            );
        }
        let waited = started.elapsed();
        // A new takeover aims at frames of its own.
        self.screens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&p.agent_id);
        if let Err(e) = self.authorize(&p.agent_id).await {
            // Nothing to control: the model's calls go on (they fail the same way).
            self.holds
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&p.agent_id);
            return Err(e);
        }
        tracing::info!(agent = %p.agent_id, control_fence = p.control_fence, waited = ?waited, "browser taken over by an operator");
        Ok(PauseResult {
            paused: true,
            control_fence: p.control_fence,
            waited_for_tool_ms: waited.as_millis() as u64,
        })
    }

    /// `browser.resume`: the model's browser calls go on, the next one with the note.
    /// Without a turn using the browser, its network pauses.
    pub async fn resume(&self, p: &BrowserPausePayload) -> ResumeResult {
        let hold = {
            let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
            match holds.get(&p.agent_id) {
                Some(h) if h.fence <= p.control_fence => holds.remove(&p.agent_id),
                _ => None,
            }
        };
        let resumed = hold.is_some();
        if !p.note.trim().is_empty() {
            self.notes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(p.agent_id.clone(), p.note.clone());
        }
        drop(hold);
        let in_turn = self
            .grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|a| *a == p.agent_id);
        if !in_turn {
            self.contexts.end_use(&p.agent_id).await;
        }
        tracing::info!(agent = %p.agent_id, control_fence = p.control_fence, resumed, "browser handed back");
        ResumeResult {
            resumed,
            control_fence: p.control_fence,
        }
    }

    /// `browser.screen`: a look (not counted as use; the browser must be open) or, under
    /// the control fence held here and on the latest frame, input.
    pub async fn screen(&self, p: &BrowserScreenPayload) -> Result<ScreenResult, BrowserError> {
        let looking = matches!(
            p.action,
            ScreenAction::Screenshot
                | ScreenAction::GetScreenSize
                | ScreenAction::GetCursorPosition
        );
        let ctx = self.contexts.peek(&p.agent_id).await.ok_or_else(|| {
            refused("the agent's browser is not open: it opens at the first browser call of its next turn, or when you take control")
        })?;
        let page = &ctx.browser;
        let (width, height) = page.size();
        let mut result = ScreenResult {
            action: p.action.name().to_string(),
            width: width as u16,
            height: height as u16,
            ..ScreenResult::default()
        };
        if !looking {
            let fence = self
                .holds
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&p.agent_id)
                .map(|h| h.fence);
            if fence.is_none() || fence != p.control_fence {
                return Err(refused(format!(
                    "the browser is not held under control fence {}: take control again",
                    p.control_fence.unwrap_or(0)
                )));
            }
            let (latest, at) = {
                let screens = self.screens.lock().unwrap_or_else(|p| p.into_inner());
                let s = screens.get(&p.agent_id);
                (
                    s.and_then(|s| s.frame.clone()),
                    s.map(|s| s.at).unwrap_or((0, 0)),
                )
            };
            if latest.is_none() || latest != p.frame_id {
                return Err(refused(format!(
                    "frame {} is not the latest ({}): take a screenshot and aim at it",
                    p.frame_id.as_deref().unwrap_or("-"),
                    latest.as_deref().unwrap_or("none yet")
                )));
            }
            ctx.used();
            let now = page.act(&p.action, at).await?;
            let mut screens = self.screens.lock().unwrap_or_else(|p| p.into_inner());
            let s = screens.entry(p.agent_id.clone()).or_default();
            s.at = now;
            (result.x, result.y) = now;
            result.frame_id = s.frame.clone().unwrap_or_default();
            return Ok(result);
        }
        let png = match p.action {
            ScreenAction::Screenshot => Some(page.screenshot().await?),
            _ => None,
        };
        let mut screens = self.screens.lock().unwrap_or_else(|p| p.into_inner());
        let s = screens.entry(p.agent_id.clone()).or_default();
        if png.is_some() {
            s.frame = Some(uuid::Uuid::new_v4().simple().to_string()[..16].to_string());
        }
        (result.x, result.y) = s.at;
        result.frame_id = s.frame.clone().unwrap_or_default();
        result.png = png.map(|b| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(b)
        });
        Ok(result)
    }
}
