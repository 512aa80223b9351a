//! The registry: which tools each kind of turn offers, that every schema is one a model
//! accepts, and what the model is told about arguments that do not parse.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::files::{ListFiles, ReadFile, WriteFile};
use super::*;
use crate::computer::screen::ScreenAction;

const BASE: [&str; 5] = [
    "terminal",
    "read_file",
    "write_file",
    "list_files",
    "computer_export",
];
const SCREEN: [&str; 12] = [
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
const TEAM: [&str; 10] = [
    "team_create_member",
    "team_create",
    "goal_create",
    "subtask_add",
    "subtask_review",
    "goal_complete",
    "goal_block",
    "goal_status",
    "ask_user",
    "helper_create",
];

fn offered(desktop: bool, team: bool) -> Vec<String> {
    TurnTools::new(TurnKind { desktop, team })
        .schemas()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_kind_of_turn_offers_its_families_in_order() {
    let cat = |parts: &[&[&str]]| -> Vec<String> {
        parts.concat().into_iter().map(String::from).collect()
    };
    assert_eq!(offered(false, false), cat(&[&BASE]));
    assert_eq!(offered(true, false), cat(&[&BASE, &SCREEN]));
    assert_eq!(offered(false, true), cat(&[&BASE, &TEAM]));
    assert_eq!(offered(true, true), cat(&[&BASE, &SCREEN, &TEAM]));
    assert_eq!(names(Family::Screen), SCREEN);
    assert_eq!(names(Family::Team), TEAM);
    // Found only where offered.
    let plain = TurnTools::new(TurnKind {
        desktop: false,
        team: false,
    });
    assert!(plain.find("terminal").is_some());
    assert!(plain.find("screenshot").is_none());
    assert!(plain.find("goal_create").is_none());
    assert_eq!(
        not_offered("goal_create"),
        json!({ "error": "tool \"goal_create\" is not available in this computer" })
    );
}

#[test]
fn every_schema_is_a_function_whose_required_arguments_are_properties() {
    let all = TurnTools::new(TurnKind {
        desktop: true,
        team: true,
    })
    .schemas();
    let mut seen = HashSet::new();
    for s in all.as_array().unwrap() {
        assert_eq!(s["type"], "function", "{s}");
        let f = &s["function"];
        let name = f["name"].as_str().unwrap();
        assert!(seen.insert(name.to_string()), "{name} twice");
        assert!(!f["description"].as_str().unwrap().is_empty(), "{name}");
        let p = &f["parameters"];
        assert_eq!(p["type"], "object", "{name}");
        let properties = p["properties"].as_object().unwrap();
        for (key, property) in properties {
            assert!(property["type"].is_string(), "{name}.{key}");
        }
        for r in p["required"].as_array().unwrap() {
            let r = r.as_str().unwrap();
            assert!(properties.contains_key(r), "{name} requires {r}");
        }
    }
    assert_eq!(seen.len(), BASE.len() + SCREEN.len() + TEAM.len());
}

#[test]
fn arguments_that_do_not_parse_are_the_models_answer_in_the_tools_words() {
    let terminal = terminal::Terminal;
    for bad in [
        json!({}),
        json!({ "command": 5 }),
        json!(["ls"]),
        Value::Null,
    ] {
        assert_eq!(
            terminal.parse(&bad).unwrap_err(),
            "terminal needs a command",
            "{bad}"
        );
    }
    // A timeout of another type means the default, as before.
    for timeout in [json!("9"), json!(-1), json!(1.5), Value::Null] {
        let args = terminal
            .parse(&json!({ "command": "ls", "timeout": timeout }))
            .unwrap();
        assert_eq!(
            format!("{args:?}"),
            r#"Args { command: "ls", timeout: None }"#
        );
    }
    let args = terminal
        .parse(&json!({ "command": "ls", "timeout": 5, "extra": true }))
        .unwrap();
    assert_eq!(
        format!("{args:?}"),
        r#"Args { command: "ls", timeout: Some(5) }"#
    );

    assert_eq!(
        ReadFile.parse(&json!({ "path": 1 })).unwrap_err(),
        "read_file needs a path"
    );
    assert_eq!(
        WriteFile.parse(&json!({ "path": "a" })).unwrap_err(),
        "write_file needs a path and content"
    );
    assert_eq!(
        export::ComputerExport.parse(&json!({})).unwrap_err(),
        "computer_export needs a path"
    );
    // list_files has no required argument: anything but a string path lists the workspace.
    for args in [json!({ "path": 3 }), json!([1]), Value::Null] {
        assert_eq!(
            format!("{:?}", ListFiles.parse(&args).unwrap()),
            "ListArgs { path: None }"
        );
    }

    // Screen tools: the guest's own action type, with serde's reason.
    assert_eq!(
        screen::LEFT_CLICK.parse(&json!({ "x": 3 })).unwrap_err(),
        "bad arguments for left_click: missing field `y`"
    );
    assert_eq!(
        screen::DRAG.parse(&json!([1, 2])).unwrap_err(),
        "drag takes an object of arguments"
    );
    assert_eq!(
        screen::LEFT_CLICK
            .parse(&json!({ "x": 3, "y": 4 }))
            .unwrap(),
        ScreenAction::LeftClick { x: 3, y: 4 }
    );
    assert_eq!(
        screen::SCREENSHOT.parse(&Value::Null).unwrap(),
        ScreenAction::Screenshot
    );
    // Team tools: the control plane reads the arguments, so they travel as written.
    for args in [json!({ "goal": 1 }), Value::Null] {
        assert_eq!(team::GOAL_STATUS.parse(&args).unwrap(), args);
    }
}

#[test]
fn every_screen_tool_is_the_guest_action_of_its_name() {
    for name in names(Family::Screen) {
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
        assert_eq!(screen::action(name, &args).unwrap().name(), name);
    }
}
