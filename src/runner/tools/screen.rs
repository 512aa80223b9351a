//! The screen tools a computer agent on a desktop image gets: the guest agent's screen
//! actions (cua's names and shapes). A screenshot goes back to the model the way Hermes's
//! own computer_use tool hands images over: a `_multimodal` envelope of OpenAI-style
//! content parts (text, then a PNG data URL) with a text summary for text-only models.

use serde_json::{Value, json};

use super::{Call, Family, Spec, Tool};
use crate::computer::screen::{HEIGHT, ScreenAction, ScreenResult, WIDTH};

/// One screen action as a tool of the same name; its arguments are the action's fields.
pub struct ScreenTool(Spec);

fn screen() -> String {
    format!("your computer's {WIDTH}x{HEIGHT} screen")
}

fn xy() -> Value {
    json!({
        "x": { "type": "integer", "description": format!("0 to {} (left to right)", WIDTH - 1) },
        "y": { "type": "integer", "description": format!("0 to {} (top to bottom)", HEIGHT - 1) }
    })
}

fn none() -> Value {
    json!({})
}

pub static SCREENSHOT: ScreenTool = ScreenTool(Spec {
    name: "screenshot",
    description: || {
        format!(
            "Take a screenshot of {}; returns the image and its frame id.",
            screen()
        )
    },
    properties: none,
    required: &[],
});

pub static LEFT_CLICK: ScreenTool = ScreenTool(Spec {
    name: "left_click",
    description: || format!("Left-click at (x, y) on {}.", screen()),
    properties: xy,
    required: &["x", "y"],
});

pub static RIGHT_CLICK: ScreenTool = ScreenTool(Spec {
    name: "right_click",
    description: || format!("Right-click at (x, y) on {}.", screen()),
    properties: xy,
    required: &["x", "y"],
});

pub static DOUBLE_CLICK: ScreenTool = ScreenTool(Spec {
    name: "double_click",
    description: || format!("Double-click at (x, y) on {}.", screen()),
    properties: xy,
    required: &["x", "y"],
});

pub static MOVE_CURSOR: ScreenTool = ScreenTool(Spec {
    name: "move_cursor",
    description: || format!("Move the mouse cursor to (x, y) on {}.", screen()),
    properties: xy,
    required: &["x", "y"],
});

pub static DRAG: ScreenTool = ScreenTool(Spec {
    name: "drag",
    description: || {
        "Press the left button at the first point, move through the others and release at the last."
            .into()
    },
    properties: || {
        json!({ "path": { "type": "array", "description": "Points [[x, y], ...], at least two",
                          "items": { "type": "array", "items": { "type": "integer" } } } })
    },
    required: &["path"],
});

pub static TYPE_TEXT: ScreenTool = ScreenTool(Spec {
    name: "type_text",
    description: || "Type text into the focused window (a newline presses Return).".into(),
    properties: || json!({ "text": { "type": "string" } }),
    required: &["text"],
});

pub static PRESS_KEY: ScreenTool = ScreenTool(Spec {
    name: "press_key",
    description: || {
        "Press one key: Return, Tab, Escape, BackSpace, Delete, Up, Down, Left, Right, Home, End, PageUp, PageDown, F1-F24, or a character.".into()
    },
    properties: || json!({ "key": { "type": "string" } }),
    required: &["key"],
});

pub static HOTKEY: ScreenTool = ScreenTool(Spec {
    name: "hotkey",
    description: || {
        "Press keys together, e.g. [\"ctrl\", \"l\"] (ctrl, shift, alt, super and key names)."
            .into()
    },
    properties: || json!({ "keys": { "type": "array", "items": { "type": "string" } } }),
    required: &["keys"],
});

pub static SCROLL: ScreenTool = ScreenTool(Spec {
    name: "scroll",
    description: || {
        "Scroll by notches: dy down (negative: up), dx right (negative: left), at (x, y) if given."
            .into()
    },
    properties: || {
        json!({
            "dy": { "type": "integer" }, "dx": { "type": "integer" },
            "x": { "type": "integer" }, "y": { "type": "integer" }
        })
    },
    required: &[],
});

pub static GET_SCREEN_SIZE: ScreenTool = ScreenTool(Spec {
    name: "get_screen_size",
    description: || "The screen's width and height in pixels.".into(),
    properties: none,
    required: &[],
});

pub static GET_CURSOR_POSITION: ScreenTool = ScreenTool(Spec {
    name: "get_cursor_position",
    description: || "Where the mouse cursor is.".into(),
    properties: none,
    required: &[],
});

impl Tool for ScreenTool {
    type Args = ScreenAction;

    fn spec(&self) -> &Spec {
        &self.0
    }

    fn family(&self) -> Family {
        Family::Screen
    }

    fn parse(&self, args: &Value) -> Result<ScreenAction, String> {
        action(self.0.name, args)
    }

    /// The answer is a plain JSON value, or for a screenshot the multimodal envelope.
    async fn run<'a>(&'a self, action: ScreenAction, call: &'a Call<'a>) -> Value {
        match call.guest.screen(action).await {
            Err(e) => json!({ "error": e.to_string() }),
            Ok(r) => match &r.png {
                Some(png) => {
                    let text = summary(&r);
                    json!({
                        "_multimodal": true,
                        "content": [
                            { "type": "text", "text": text },
                            { "type": "image_url", "image_url": { "url": format!("data:image/png;base64,{png}") } },
                        ],
                        "text_summary": text,
                        "frame_id": r.frame_id,
                    })
                }
                None => json!({
                    "action": r.action,
                    "x": r.x,
                    "y": r.y,
                    "width": r.width,
                    "height": r.height,
                    "frame_id": r.frame_id,
                }),
            },
        }
    }
}

/// The model's arguments with the tool's name as the action: the guest's own action type.
pub fn action(name: &str, args: &Value) -> Result<ScreenAction, String> {
    let mut v = match args {
        Value::Object(m) => Value::Object(m.clone()),
        Value::Null => json!({}),
        _ => return Err(format!("{name} takes an object of arguments")),
    };
    v["action"] = Value::String(name.into());
    serde_json::from_value(v).map_err(|e| format!("bad arguments for {name}: {e}"))
}

fn summary(r: &ScreenResult) -> String {
    format!(
        "{}: screen {}x{}, cursor at ({}, {}), frame {}",
        r.action,
        r.width,
        r.height,
        r.x,
        r.y,
        if r.frame_id.is_empty() {
            "-"
        } else {
            &r.frame_id
        }
    )
}

/// Whether a tool's answer is a multimodal envelope (a screenshot), which goes to the
/// Worker as it is rather than as a JSON string.
pub fn is_multimodal(result: &Value) -> bool {
    result["_multimodal"] == json!(true)
}

/// A tool result as it goes into the turn's events: images are replaced by their size
/// (bulk bytes stay out of the event log; the frame id says which screen it was).
pub fn for_event(result: &Value) -> Value {
    if !is_multimodal(result) {
        return result.clone();
    }
    let image_bytes: usize = result["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["image_url"]["url"].as_str())
                .map(|u| u.len())
                .sum()
        })
        .unwrap_or(0);
    json!({
        "text": result["text_summary"],
        "frame_id": result["frame_id"],
        "image": { "type": "image/png", "base64_bytes": image_bytes },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_no_image_bytes() {
        let envelope = json!({
            "_multimodal": true,
            "content": [{"type": "text", "text": "s"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
            "text_summary": "s",
            "frame_id": "f1-1",
        });
        let e = for_event(&envelope);
        assert_eq!(e["frame_id"], "f1-1");
        assert_eq!(e["image"]["base64_bytes"], 26);
        assert!(!e.to_string().contains("AAAA"));
        let plain = json!({"x": 1});
        assert_eq!(for_event(&plain), plain);
    }
}
