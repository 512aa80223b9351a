//! The screen tools a computer agent on a desktop image gets: the guest agent's screen
//! actions (cua's names and shapes). A screenshot goes back to the model the way Hermes's
//! own computer_use tool hands images over: a `_multimodal` envelope of OpenAI-style
//! content parts (text, then a PNG data URL) with a text summary for text-only models.

use serde_json::{Value, json};

use crate::computer::screen::{HEIGHT, ScreenAction, ScreenResult, WIDTH};
use crate::computer::session::GuestSession;

/// The tool names, in the order they are offered.
pub const NAMES: [&str; 12] = [
    "screenshot",
    "left_click",
    "right_click",
    "double_click",
    "move_cursor",
    "drag",
    "type_text",
    "press_key",
    "hotkey",
    "scroll",
    "get_screen_size",
    "get_cursor_position",
];

pub fn is_screen_tool(name: &str) -> bool {
    NAMES.contains(&name)
}

/// The tools' schemas (OpenAI function format).
pub fn schemas() -> Vec<Value> {
    let tool = |name: &str, description: String, properties: Value, required: &[&str]| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": { "type": "object", "properties": properties, "required": required },
            }
        })
    };
    let xy = json!({
        "x": { "type": "integer", "description": format!("0 to {} (left to right)", WIDTH - 1) },
        "y": { "type": "integer", "description": format!("0 to {} (top to bottom)", HEIGHT - 1) }
    });
    let screen = format!("your computer's {WIDTH}x{HEIGHT} screen");
    vec![
        tool(
            "screenshot",
            format!("Take a screenshot of {screen}; returns the image and its frame id."),
            json!({}),
            &[],
        ),
        tool(
            "left_click",
            format!("Left-click at (x, y) on {screen}."),
            xy.clone(),
            &["x", "y"],
        ),
        tool(
            "right_click",
            format!("Right-click at (x, y) on {screen}."),
            xy.clone(),
            &["x", "y"],
        ),
        tool(
            "double_click",
            format!("Double-click at (x, y) on {screen}."),
            xy.clone(),
            &["x", "y"],
        ),
        tool(
            "move_cursor",
            format!("Move the mouse cursor to (x, y) on {screen}."),
            xy,
            &["x", "y"],
        ),
        tool(
            "drag",
            "Press the left button at the first point, move through the others and release at the last.".into(),
            json!({ "path": { "type": "array", "description": "Points [[x, y], ...], at least two",
                              "items": { "type": "array", "items": { "type": "integer" } } } }),
            &["path"],
        ),
        tool(
            "type_text",
            "Type text into the focused window (a newline presses Return).".into(),
            json!({ "text": { "type": "string" } }),
            &["text"],
        ),
        tool(
            "press_key",
            "Press one key: Return, Tab, Escape, BackSpace, Delete, Up, Down, Left, Right, Home, End, PageUp, PageDown, F1-F24, or a character.".into(),
            json!({ "key": { "type": "string" } }),
            &["key"],
        ),
        tool(
            "hotkey",
            "Press keys together, e.g. [\"ctrl\", \"l\"] (ctrl, shift, alt, super and key names).".into(),
            json!({ "keys": { "type": "array", "items": { "type": "string" } } }),
            &["keys"],
        ),
        tool(
            "scroll",
            "Scroll by notches: dy down (negative: up), dx right (negative: left), at (x, y) if given.".into(),
            json!({
                "dy": { "type": "integer" }, "dx": { "type": "integer" },
                "x": { "type": "integer" }, "y": { "type": "integer" }
            }),
            &[],
        ),
        tool(
            "get_screen_size",
            "The screen's width and height in pixels.".into(),
            json!({}),
            &[],
        ),
        tool(
            "get_cursor_position",
            "Where the mouse cursor is.".into(),
            json!({}),
            &[],
        ),
    ]
}

/// The model's arguments as a screen action.
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

/// Runs a screen tool; the answer is a plain JSON value, or for a screenshot the
/// multimodal envelope.
pub async fn run(guest: &GuestSession, name: &str, args: &Value) -> Value {
    let action = match action(name, args) {
        Ok(a) => a,
        Err(e) => return json!({ "error": e }),
    };
    match guest.screen(action).await {
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

/// A tool result as it goes into the turn's events: images are replaced by their size
/// (bulk bytes stay out of the event log; the frame id says which screen it was).
pub fn for_event(result: &Value) -> Value {
    if result["_multimodal"] != json!(true) {
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
    fn tools_match_the_guest_actions() {
        let schemas = schemas();
        assert_eq!(schemas.len(), NAMES.len());
        for (s, name) in schemas.iter().zip(NAMES) {
            assert_eq!(s["function"]["name"], name);
        }
        assert_eq!(
            action("left_click", &json!({"x": 3, "y": 4})).unwrap(),
            ScreenAction::LeftClick { x: 3, y: 4 }
        );
        assert_eq!(
            action("screenshot", &Value::Null).unwrap(),
            ScreenAction::Screenshot
        );
        assert!(action("left_click", &json!({"x": 3})).is_err());
        assert!(action("drag", &json!([1, 2])).is_err());
        // Every tool name is an action the guest knows.
        for name in NAMES {
            let args = match name {
                "left_click" | "right_click" | "double_click" | "move_cursor" => {
                    json!({"x": 1, "y": 1})
                }
                "drag" => json!({"path": [[1, 1], [2, 2]]}),
                "type_text" => json!({"text": "a"}),
                "press_key" => json!({"key": "a"}),
                "hotkey" => json!({"keys": ["ctrl", "a"]}),
                _ => json!({}),
            };
            assert_eq!(action(name, &args).unwrap().name(), name);
        }
    }

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
