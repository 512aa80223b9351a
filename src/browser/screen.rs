//! An operator's screen actions on a page (takeover), by the desktop's action names
//! ([`ScreenAction`]): the pointer and the keyboard as real input events, at CSS pixels of
//! the page's viewport.

use serde_json::json;

use super::{Browser, BrowserError, printable};
use crate::api::screen::ScreenAction;

/// A key by the desktop's (xdotool's) name, as DevTools names it: (key, code, text).
fn key_of(name: &str) -> Option<(String, i64, String)> {
    let named = |key: &str, code: i64| Some((key.to_string(), code, String::new()));
    match name {
        "Return" | "Enter" | "KP_Enter" => Some(("Enter".into(), 13, "\r".into())),
        "Tab" => named("Tab", 9),
        "Escape" => named("Escape", 27),
        "BackSpace" | "Backspace" => named("Backspace", 8),
        "Delete" => named("Delete", 46),
        "Up" | "ArrowUp" => named("ArrowUp", 38),
        "Down" | "ArrowDown" => named("ArrowDown", 40),
        "Left" | "ArrowLeft" => named("ArrowLeft", 37),
        "Right" | "ArrowRight" => named("ArrowRight", 39),
        "Page_Up" | "PageUp" => named("PageUp", 33),
        "Page_Down" | "PageDown" => named("PageDown", 34),
        "Home" => named("Home", 36),
        "End" => named("End", 35),
        "space" => Some((" ".into(), 32, " ".into())),
        "ctrl" | "Control_L" | "control" => named("Control", 17),
        "shift" | "Shift_L" => named("Shift", 16),
        "alt" | "Alt_L" => named("Alt", 18),
        k if k.chars().count() == 1 => {
            let c = k.chars().next().unwrap_or(' ');
            let code = c.to_ascii_uppercase() as i64;
            Some((k.to_string(), code, k.to_string()))
        }
        _ => None,
    }
}

fn unknown_key(name: &str) -> BrowserError {
    BrowserError::Page(format!(
        "{:?} is not a key the browser knows: Return (Enter), Tab, Escape, BackSpace, Delete, Up/Down/Left/Right (ArrowUp, ...), Page_Up/Page_Down, Home, End, space, ctrl, shift, alt, or one character",
        printable(name, 40)
    ))
}

/// Modifier bits of DevTools' input events.
fn modifier_bit(key: &str) -> i64 {
    match key {
        "Alt" => 1,
        "Control" => 2,
        "Shift" => 8,
        _ => 0,
    }
}

impl Browser {
    /// The viewport's size in CSS pixels.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    async fn mouse(
        &self,
        kind: &str,
        x: i32,
        y: i32,
        clicks: i64,
        button: &str,
    ) -> Result<(), BrowserError> {
        let mut p = json!({ "type": kind, "x": x, "y": y });
        if kind != "mouseMoved" {
            p["button"] = json!(button);
            p["clickCount"] = json!(clicks);
        }
        self.page_call("Input.dispatchMouseEvent", p).await?;
        Ok(())
    }

    async fn click_at(
        &self,
        x: i32,
        y: i32,
        button: &str,
        clicks: i64,
    ) -> Result<(), BrowserError> {
        self.mouse("mouseMoved", x, y, 0, button).await?;
        for n in 1..=clicks {
            self.mouse("mousePressed", x, y, n, button).await?;
            self.mouse("mouseReleased", x, y, n, button).await?;
        }
        Ok(())
    }

    async fn key(
        &self,
        kind: &str,
        key: &(String, i64, String),
        modifiers: i64,
    ) -> Result<(), BrowserError> {
        let mut p = json!({ "type": kind, "key": key.0, "windowsVirtualKeyCode": key.1, "modifiers": modifiers });
        // Text only without ctrl/alt: a shortcut types nothing.
        if kind == "keyDown" && !key.2.is_empty() && modifiers & 3 == 0 {
            p["text"] = json!(key.2);
        }
        self.page_call("Input.dispatchKeyEvent", p).await?;
        Ok(())
    }

    /// Presses one key in the page: the model's (`Enter`, `ArrowDown`, ...) and the
    /// desktop's (`Return`, `Down`, ...) names, or one character.
    pub async fn press(&self, key: &str) -> Result<(), BrowserError> {
        let k = key_of(key).ok_or_else(|| unknown_key(key))?;
        self.key("keyDown", &k, 0).await?;
        self.key("keyUp", &k, 0).await
    }

    /// Runs an operator's input `action`; returns where the pointer is after it (`at`: where
    /// it was).
    pub async fn act(
        &self,
        action: &ScreenAction,
        at: (i32, i32),
    ) -> Result<(i32, i32), BrowserError> {
        match action {
            ScreenAction::LeftClick { x, y } => {
                self.click_at(*x, *y, "left", 1).await.map(|_| (*x, *y))
            }
            ScreenAction::RightClick { x, y } => {
                self.click_at(*x, *y, "right", 1).await.map(|_| (*x, *y))
            }
            ScreenAction::DoubleClick { x, y } => {
                self.click_at(*x, *y, "left", 2).await.map(|_| (*x, *y))
            }
            ScreenAction::MoveCursor { x, y } => self
                .mouse("mouseMoved", *x, *y, 0, "none")
                .await
                .map(|_| (*x, *y)),
            ScreenAction::Drag { path } => {
                let (Some(first), Some(last)) = (path.first(), path.last()) else {
                    return Err(BrowserError::Page(
                        "a drag needs at least two points".into(),
                    ));
                };
                self.mouse("mouseMoved", first.0, first.1, 0, "left")
                    .await?;
                self.mouse("mousePressed", first.0, first.1, 1, "left")
                    .await?;
                for p in &path[1..] {
                    self.page_call("Input.dispatchMouseEvent", json!({ "type": "mouseMoved", "x": p.0, "y": p.1, "button": "left", "buttons": 1 }))
                        .await?;
                }
                self.mouse("mouseReleased", last.0, last.1, 1, "left")
                    .await?;
                Ok(*last)
            }
            ScreenAction::TypeText { text } => {
                self.page_call("Input.insertText", json!({ "text": text }))
                    .await?;
                Ok(at)
            }
            ScreenAction::PressKey { key } => self.press(key).await.map(|_| at),
            ScreenAction::Hotkey { keys } => {
                let keys: Vec<_> = keys
                    .iter()
                    .map(|k| key_of(k).ok_or_else(|| unknown_key(k)))
                    .collect::<Result<_, _>>()?;
                let mut modifiers = 0;
                for k in &keys {
                    modifiers |= modifier_bit(&k.0);
                    self.key("keyDown", k, modifiers).await?;
                }
                for k in keys.iter().rev() {
                    self.key("keyUp", k, modifiers).await?;
                    modifiers &= !modifier_bit(&k.0);
                }
                Ok(at)
            }
            ScreenAction::Scroll { dx, dy, x, y } => {
                let (x, y) = (x.unwrap_or(at.0), y.unwrap_or(at.1));
                self.page_call(
                    "Input.dispatchMouseEvent",
                    json!({ "type": "mouseWheel", "x": x, "y": y, "deltaX": dx * 100, "deltaY": dy * 100 }),
                )
                .await?;
                Ok((x, y))
            }
            ScreenAction::Screenshot
            | ScreenAction::GetScreenSize
            | ScreenAction::GetCursorPosition => Ok(at),
        }
    }
}
