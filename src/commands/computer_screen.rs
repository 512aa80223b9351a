//! `yy computer screenshot` and `yy computer screen`: an operator's look at (and input
//! to) a desktop computer's display, relayed CLI -> control plane -> Runner -> guest as an
//! audited `computer.screen` command under the computer's current fence.

use std::path::PathBuf;

use clap::Args;

use super::JsonFlag;
use crate::client::Client;
use crate::computer::screen::{ScreenAction, png_size};
use crate::error::CliError;
use crate::output;
use crate::web_view::Screen;

#[derive(Debug, Args)]
pub struct ScreenshotArgs {
    /// Computer id (or unique prefix)
    pub id: String,
    /// Where to write the PNG (replaced atomically)
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Debug, Args)]
pub struct ScreenArgs {
    /// Computer id (or unique prefix)
    pub id: String,
    /// left_click X Y, right_click X Y, double_click X Y, move_cursor X Y,
    /// drag X1 Y1 X2 Y2 [X Y]..., type_text TEXT, press_key KEY, hotkey KEY KEY...,
    /// scroll DY [DX], get_screen_size or get_cursor_position
    #[arg(value_name = "ACTION")]
    pub action: String,
    /// The action's arguments
    #[arg(value_name = "ARG", allow_negative_numbers = true)]
    pub args: Vec<String>,
    /// The control fence you hold (`attach --control` prints it); input needs it (and
    /// so control: the model never acts meanwhile), refused when stale
    #[arg(long, value_name = "N")]
    pub fence: Option<i64>,
    /// The frame the input aims at (the latest screenshot's id); input needs it, and is
    /// refused when the screen was captured again since
    #[arg(long, value_name = "FRAME_ID")]
    pub frame: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

fn usage(msg: String) -> anyhow::Error {
    CliError::usage(msg).into()
}

fn ints(action: &str, args: &[String], want: &str) -> anyhow::Result<Vec<i32>> {
    args.iter()
        .map(|a| {
            a.parse::<i32>().map_err(|_| {
                usage(format!(
                    "{action} takes {want}; {a:?} is not a whole number"
                ))
            })
        })
        .collect()
}

/// The screen action an operator typed (`left_click 10 20`).
pub fn parse_action(action: &str, args: &[String]) -> anyhow::Result<ScreenAction> {
    let point = |args: &[String]| -> anyhow::Result<(i32, i32)> {
        match ints(action, args, "X Y")?[..] {
            [x, y] => Ok((x, y)),
            _ => Err(usage(format!("{action} takes X Y"))),
        }
    };
    let none = |args: &[String]| -> anyhow::Result<()> {
        if args.is_empty() {
            Ok(())
        } else {
            Err(usage(format!("{action} takes no arguments")))
        }
    };
    Ok(match action {
        "left_click" => {
            let (x, y) = point(args)?;
            ScreenAction::LeftClick { x, y }
        }
        "right_click" => {
            let (x, y) = point(args)?;
            ScreenAction::RightClick { x, y }
        }
        "double_click" => {
            let (x, y) = point(args)?;
            ScreenAction::DoubleClick { x, y }
        }
        "move_cursor" => {
            let (x, y) = point(args)?;
            ScreenAction::MoveCursor { x, y }
        }
        "drag" => {
            let n = ints(action, args, "X1 Y1 X2 Y2 [X Y]...")?;
            if n.len() < 4 || n.len() % 2 != 0 {
                return Err(usage("drag takes X1 Y1 X2 Y2 [X Y]...".into()));
            }
            ScreenAction::Drag {
                path: n.chunks(2).map(|c| (c[0], c[1])).collect(),
            }
        }
        "type_text" => match args {
            [text] => ScreenAction::TypeText { text: text.clone() },
            _ => return Err(usage("type_text takes one TEXT (quote it)".into())),
        },
        "press_key" => match args {
            [key] => ScreenAction::PressKey { key: key.clone() },
            _ => return Err(usage("press_key takes one KEY (e.g. Return)".into())),
        },
        "hotkey" if !args.is_empty() => ScreenAction::Hotkey {
            keys: args.to_vec(),
        },
        "hotkey" => return Err(usage("hotkey takes KEY... (e.g. ctrl l)".into())),
        "scroll" => match ints(action, args, "DY [DX]")?[..] {
            [dy] => ScreenAction::Scroll {
                dx: 0,
                dy,
                x: None,
                y: None,
            },
            [dy, dx] => ScreenAction::Scroll {
                dx,
                dy,
                x: None,
                y: None,
            },
            _ => return Err(usage("scroll takes DY [DX]".into())),
        },
        "get_screen_size" => {
            none(args)?;
            ScreenAction::GetScreenSize
        }
        "get_cursor_position" => {
            none(args)?;
            ScreenAction::GetCursorPosition
        }
        "screenshot" => {
            return Err(usage(
                "use `yy computer screenshot ID -o FILE` (or `yy browser screenshot AGENT -o FILE`) for screenshots".into(),
            ));
        }
        other => {
            return Err(usage(format!(
                "{other:?} is not a screen action (left_click, right_click, double_click, move_cursor, drag, type_text, press_key, hotkey, scroll, get_screen_size, get_cursor_position)"
            )));
        }
    })
}

pub async fn screenshot(client: &Client, a: ScreenshotArgs) -> anyhow::Result<()> {
    screenshot_of(client, &Screen::Computer(a.id), &a.output, a.json.json).await
}

/// Writes a screenshot of `screen` to `output` (0600, atomically) and says what it wrote.
pub(super) async fn screenshot_of(
    client: &Client,
    screen: &Screen,
    output: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    let r = screen
        .act(client, &ScreenAction::Screenshot, None, None)
        .await?;
    let png = r
        .png_bytes()
        .ok_or_else(|| CliError::failure("the screenshot came back without a PNG"))?;
    let (w, h) = png_size(&png)
        .map_err(|e| CliError::failure(format!("the screenshot is not a valid PNG: {e}")))?;
    crate::fsutil::write_atomic(output, &png, 0o600)
        .map_err(|e| CliError::failure(format!("writing {}: {e}", output.display())))?;
    let shown = serde_json::json!({
        "path": output.display().to_string(),
        "width": w,
        "height": h,
        "bytes": png.len(),
        "frame_id": r.frame_id,
    });
    if json {
        output::json(&shown)
    } else {
        Ok(output::print(&format!(
            "{} {w}x{h} {} bytes frame {}",
            output.display(),
            png.len(),
            output::clean(&r.frame_id)
        ))?)
    }
}

pub async fn screen(client: &Client, a: ScreenArgs) -> anyhow::Result<()> {
    let action = parse_action(&a.action, &a.args)?;
    let target = Screen::Computer(a.id);
    act_on(
        client,
        &target,
        &action,
        a.fence,
        a.frame.as_deref(),
        a.json.json,
    )
    .await
}

/// Runs an operator's `action` on `screen` and says where the cursor and frame are.
pub(super) async fn act_on(
    client: &Client,
    screen: &Screen,
    action: &ScreenAction,
    fence: Option<i64>,
    frame: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let r = screen.act(client, action, fence, frame).await?;
    if json {
        output::json(&r)
    } else {
        Ok(output::print(&format!(
            "{} cursor {},{} screen {}x{} frame {}",
            r.action,
            r.x,
            r.y,
            r.width,
            r.height,
            if r.frame_id.is_empty() {
                "-".to_string()
            } else {
                output::clean(&r.frame_id).into_owned()
            }
        ))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn operator_actions_parse() {
        assert_eq!(
            parse_action("left_click", &s(&["10", "20"])).unwrap(),
            ScreenAction::LeftClick { x: 10, y: 20 }
        );
        assert_eq!(
            parse_action("drag", &s(&["1", "2", "3", "4"])).unwrap(),
            ScreenAction::Drag {
                path: vec![(1, 2), (3, 4)]
            }
        );
        // The CLI's words give the same action as the wire form.
        let wire: ScreenAction = serde_json::from_str(r#"{"action":"scroll","dy":-3}"#).unwrap();
        assert_eq!(parse_action("scroll", &s(&["-3"])).unwrap(), wire);
        assert_eq!(
            parse_action("hotkey", &s(&["ctrl", "l"])).unwrap(),
            ScreenAction::Hotkey {
                keys: s(&["ctrl", "l"])
            }
        );
        for (a, args) in [
            ("left_click", vec!["1"]),
            ("left_click", vec!["a", "b"]),
            ("drag", vec!["1", "2", "3"]),
            ("type_text", vec![]),
            ("hotkey", vec![]),
            ("get_screen_size", vec!["1"]),
            ("fly", vec![]),
        ] {
            let e = parse_action(a, &s(&args)).unwrap_err();
            let code = e.downcast_ref::<CliError>().map(|c| c.exit);
            assert_eq!(code, Some(crate::error::Exit::Usage), "{a} {args:?}: {e}");
        }
    }
}
