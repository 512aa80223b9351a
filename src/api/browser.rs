//! The managed browser of host agents on the wire: a turn's grant, the Runner commands
//! that close, show, pause and resume an agent's browser, and an operator's control of it
//! (docs/browser.md).

use serde::{Deserialize, Serialize};

use super::screen::ScreenAction;

/// A turn's use of its agent's managed browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserUse {
    pub agent_id: String,
}

/// What `browser.close` does on the Runner: closes the agent's browser context, and with
/// `remove_profile` (the agent was removed) deletes its profile too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserClosePayload {
    pub agent_id: String,
    #[serde(default)]
    pub remove_profile: bool,
}

/// What `browser.close` answers: whether a context was open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserCloseResult {
    pub closed: bool,
}

/// Payload of `browser.screen`: an operator's look at (or input to) an agent's browser.
/// Input carries the control fence the operator holds and the frame it aims at.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserScreenPayload {
    pub agent_id: String,
    pub action: ScreenAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_fence: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_id: Option<String>,
}

/// Payload of `browser.pause` (an operator takes control: the model waits at its next
/// browser call) and `browser.resume` (handback, with the note for the model).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserPausePayload {
    pub agent_id: String,
    pub control_fence: i64,
    #[serde(default)]
    pub note: String,
}

/// An operator's control of an agent's managed browser (`yy browser attach --control`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrowserControl {
    pub agent: String,
    pub agent_id: String,
    /// The Runner that holds the agent's browser.
    pub runner_id: String,
    /// The model waits at its next browser call until a handback.
    pub paused: bool,
    // The rest as a computer's [`crate::api::computers::Control`].
    pub control_fence: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    pub holder: Option<String>,
    pub expires_at: Option<String>,
}
