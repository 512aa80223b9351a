//! Screen actions and their answers: what the CLI, the control plane, the Runner and the
//! guest agent of a desktop computer say to each other about its screen.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

/// One screen action, named like cua's computer-server commands.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ScreenAction {
    Screenshot,
    LeftClick {
        x: i32,
        y: i32,
    },
    RightClick {
        x: i32,
        y: i32,
    },
    DoubleClick {
        x: i32,
        y: i32,
    },
    MoveCursor {
        x: i32,
        y: i32,
    },
    /// Press the left button at the first point, move through the rest, release at the
    /// last.
    Drag {
        path: Vec<(i32, i32)>,
    },
    TypeText {
        text: String,
    },
    /// One key by name (`Return`, `Escape`, `a`, `F5`, ...).
    PressKey {
        key: String,
    },
    /// Keys pressed in order and released in reverse (`["ctrl", "l"]`).
    Hotkey {
        keys: Vec<String>,
    },
    /// Scroll by `dy` notches down (negative: up) and `dx` right (negative: left), at
    /// (x, y) when given.
    Scroll {
        #[serde(default)]
        dx: i32,
        #[serde(default)]
        dy: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<i32>,
    },
    GetScreenSize,
    GetCursorPosition,
}

impl ScreenAction {
    pub fn name(&self) -> &'static str {
        match self {
            ScreenAction::Screenshot => "screenshot",
            ScreenAction::LeftClick { .. } => "left_click",
            ScreenAction::RightClick { .. } => "right_click",
            ScreenAction::DoubleClick { .. } => "double_click",
            ScreenAction::MoveCursor { .. } => "move_cursor",
            ScreenAction::Drag { .. } => "drag",
            ScreenAction::TypeText { .. } => "type_text",
            ScreenAction::PressKey { .. } => "press_key",
            ScreenAction::Hotkey { .. } => "hotkey",
            ScreenAction::Scroll { .. } => "scroll",
            ScreenAction::GetScreenSize => "get_screen_size",
            ScreenAction::GetCursorPosition => "get_cursor_position",
        }
    }
}

/// What a screen action answers. Every answer names the current frame (the frame id of
/// the last screenshot); a screenshot adds the PNG.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ScreenResult {
    pub action: String,
    pub width: u16,
    pub height: u16,
    /// Cursor position after the action.
    pub x: i32,
    pub y: i32,
    /// The id of the latest screenshot (this one's, for a screenshot); empty before any.
    pub frame_id: String,
    /// The screenshot, PNG, base64 (standard, padded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
}

impl ScreenResult {
    /// The decoded PNG of a screenshot.
    pub fn png_bytes(&self) -> Option<Vec<u8>> {
        self.png.as_deref().and_then(|p| B64.decode(p).ok())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DisplayResult {
    pub display: String,
    pub width: u16,
    pub height: u16,
    /// False when the display was already running.
    pub started: bool,
}
