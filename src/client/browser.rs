//! The managed browser's endpoints (`/api/v1/agents/{name}/browser...`): an operator's
//! looks, input and takeover, as for a computer's screen.

use super::Client;
use super::admin::{Result, result_of, seg};
use crate::api::browser::BrowserControl;
use crate::api::computers::{ComputerScreen, ControlFence, Handback};
use crate::api::machine::Command;
use crate::api::screen::{ScreenAction, ScreenResult};

fn path(agent: &str, action: &str) -> String {
    format!("api/v1/agents/{}/browser{action}", seg(agent))
}

impl Client {
    /// Who controls the agent's browser, and on which Runner it is.
    pub async fn browser_show(&self, agent: &str) -> Result<BrowserControl> {
        self.get(&path(agent, "")).await
    }

    /// Queues one screen action on the agent's browser.
    pub async fn browser_screen(
        &self,
        agent: &str,
        action: &ScreenAction,
        control_fence: Option<i64>,
        frame_id: Option<&str>,
    ) -> Result<Command> {
        let body = ComputerScreen {
            action: action.clone(),
            control_fence,
            frame_id: frame_id.map(str::to_string),
        };
        self.post(&path(agent, "/screen"), &body).await
    }

    /// Runs one screen action on the agent's browser and waits for its answer.
    pub async fn browser_screen_act(
        &self,
        agent: &str,
        action: &ScreenAction,
        control_fence: Option<i64>,
        frame_id: Option<&str>,
    ) -> Result<ScreenResult> {
        let cmd = self
            .browser_screen(agent, action, control_fence, frame_id)
            .await?;
        let cmd = self.wait_command(&cmd.id, None).await?;
        result_of(cmd, action.name())
    }

    /// Takes control of the agent's browser; the answer names the pause to wait for.
    pub async fn browser_control(&self, agent: &str) -> Result<BrowserControl> {
        self.post(&path(agent, "/control"), &serde_json::json!({}))
            .await
    }

    /// Renews (or with `release`, gives up) the control held under `fence`.
    pub async fn browser_control_renew(
        &self,
        agent: &str,
        fence: i64,
        release: bool,
    ) -> Result<BrowserControl> {
        let action = if release {
            "/control/release"
        } else {
            "/control/renew"
        };
        let body = ControlFence {
            control_fence: fence,
        };
        self.post(&path(agent, action), &body).await
    }

    /// Hands the browser back, with a note for the model.
    pub async fn browser_handback(&self, agent: &str, note: &str) -> Result<BrowserControl> {
        let body = Handback { note: note.into() };
        self.post(&path(agent, "/handback"), &body).await
    }

    /// Closes the agent's browser now (its profile stays).
    pub async fn browser_close(&self, agent: &str) -> Result<Command> {
        self.post(&path(agent, "/close"), &serde_json::json!({}))
            .await
    }
}
