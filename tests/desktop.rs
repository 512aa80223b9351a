//! Desktop computers against the real Docker engine: `yy image prepare --recipe desktop`
//! (build, lock check, verify ladder), and the guest agent's screen actions on the real
//! Xvfb display. The desktop image has its own tag (`YY_TEST_DESKTOP_TAG`, default
//! `yy-computer:desktop-test`); its root filesystem is cached under /var/tmp/yy, so only the
//! first run downloads Firefox and the fonts.

mod common;
mod computer_support;

use std::sync::OnceLock;
use std::time::Duration;

use yy::computer::desktop_look::wallpaper_rgb;
use yy::computer::docker::Provider;
use yy::computer::protocol::ExecParams;
use yy::computer::screen::{ScreenAction, ScreenResult, png_size};
use yy::computer::session::GuestSession;
use yy::computer::{ComputerError, Limits};

use common::{BIN, Env, lines_of, wait_line};
use computer_support::{Fixture, docker};

fn tag() -> String {
    std::env::var("YY_TEST_DESKTOP_TAG").unwrap_or_else(|_| "yy-computer:desktop-test".into())
}

/// The lock this test run writes: the packages the build installed. (Checking against the
/// repository's lock would fail the suite whenever Debian publishes an update; that lock's
/// shape is checked by the unit tests of `computer::recipes`.)
fn lock() -> String {
    format!(
        "{}/desktop-{}.lock",
        env!("CARGO_TARGET_TMPDIR"),
        std::process::id()
    )
}

/// Runs `yy image prepare --recipe desktop` once per test binary: the output and the ID.
fn prepared() -> &'static (common::Out, String) {
    static PREPARED: OnceLock<(common::Out, String)> = OnceLock::new();
    PREPARED.get_or_init(|| {
        let env = Env::new();
        let tag = tag();
        let old = docker(&["image", "inspect", "--format", "{{.Id}}", &tag]);
        let lock = lock();
        let _ = std::fs::remove_file(&lock);
        let out = env.run(&[
            "image", "prepare", "--recipe", "desktop", "--binary", BIN, "--tag", &tag, "--lock",
            &lock,
        ]);
        assert_eq!(out.code, 0, "prepare failed: {out:#?}");
        let id = out.stdout.lines().last().unwrap_or_default().to_string();
        let old = String::from_utf8_lossy(&old.stdout).trim().to_string();
        if !old.is_empty() && old != id {
            let _ = docker(&["rmi", &old]);
        }
        (out, id)
    })
}

#[test]
fn prepare_builds_a_desktop_image_that_passes_the_ladder() {
    if !common::require_docker() {
        return;
    }
    let (out, id) = prepared();
    assert!(id.starts_with("sha256:") && id.len() == 71, "{out:#?}");
    for step in [
        "guest agent",
        "network interfaces",
        "root read-only",
        "display up",
        "fonts",
        "complete screenshot",
        "browser starts, writes its profile",
        "profile survives a browser kill",
        "profile survives a recreate",
    ] {
        let row = out
            .stdout
            .lines()
            .find(|l| l.contains(step))
            .unwrap_or_else(|| panic!("no step {step:?} in {}", out.stdout));
        assert!(row.contains("PASS"), "{row}");
    }
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    // The image says what it is, and runs computers with the display set.
    let labels = computer_support::docker_ok(&[
        "image",
        "inspect",
        "--format",
        "{{index .Config.Labels \"yy.recipe.name\"}} {{json .Config.Env}}",
        id,
    ]);
    assert!(labels.starts_with("desktop "), "{labels}");
    assert!(labels.contains("DISPLAY=:0"), "{labels}");
    // verify on its own gives the same ladder, as JSON.
    let env = Env::new();
    let v = env.run(&["image", "verify", id, "--json"]);
    assert_eq!(v.code, 0, "{v:#?}");
    let report = v.json();
    assert_eq!(report["ok"], true);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"profile survives a recreate"), "{names:?}");
}

#[test]
fn the_lock_is_compared_at_build() {
    if !common::require_docker() {
        return;
    }
    prepared();
    let env = Env::new();
    // One digest changed (another .deb of the same version): the build says so and goes on;
    // --locked refuses it, naming the package.
    let text = std::fs::read_to_string(lock()).unwrap();
    assert!(
        text.lines()
            .all(|l| l.split(' ').nth(1).is_some_and(|h| h.len() == 64))
    );
    let line = text.lines().find(|l| l.starts_with("xvfb=")).unwrap();
    let (pkg, digest) = line.split_once(' ').unwrap();
    let flipped = if digest.starts_with('0') { "1" } else { "0" };
    let tampered = text.replace(line, &format!("{pkg} {flipped}{}", &digest[1..]));
    let lock = env.path("desktop.lock");
    std::fs::write(&lock, &tampered).unwrap();
    let lock_arg = lock.to_str().unwrap();
    let args = [
        "image", "build", "--recipe", "desktop", "--binary", BIN, "--lock", lock_arg,
    ];
    let mut locked = args.to_vec();
    locked.push("--locked");
    let refused = env.run(&locked);
    assert_eq!(refused.code, 6, "{refused:#?}");
    let last = refused.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains("1 package (xvfb)"),
        "{refused:#?}"
    );
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), tampered);
    // --update-lock takes what was installed and rewrites the lock.
    let mut update = args.to_vec();
    update.push("--update-lock");
    let built = env.run(&update);
    built.ok();
    let said = format!("1 package rebuilt since {lock_arg}: xvfb");
    assert!(built.stderr.contains(&said), "{built:#?}");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), text);
    // That build made an untagged image of its own: remove it.
    let id = built.stdout.lines().last().unwrap_or_default();
    assert!(id.starts_with("sha256:"), "{built:#?}");
    let _ = docker(&["rmi", id]);
    // A recipe that does not exist is a usage error.
    let kde = env.run(&["image", "prepare", "--recipe", "kde"]);
    assert_eq!(kde.code, 2, "{kde:#?}");
    assert!(
        kde.stderr.contains("'kde'") && kde.stderr.contains("desktop"),
        "{kde:#?}"
    );
}

async fn act(s: &GuestSession, a: ScreenAction) -> ScreenResult {
    let name = a.name();
    s.screen(a)
        .await
        .unwrap_or_else(|e| panic!("{name} failed: {e}"))
}

async fn shot(s: &GuestSession) -> (ScreenResult, Vec<u8>) {
    let r = act(s, ScreenAction::Screenshot).await;
    let png = r.png_bytes().expect("a screenshot has a PNG");
    assert_eq!(png_size(&png).unwrap(), (1280, 800));
    (r, png)
}

/// The RGB colour of pixel (`x`, `y`) of a screenshot.
fn pixel(png_data: &[u8], x: usize, y: usize) -> [u8; 3] {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_data))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let at = (y * info.width as usize + x) * 3;
    [buf[at], buf[at + 1], buf[at + 2]]
}

/// The file's text once its line is whole: the shell's `>` creates the file before the
/// command writes to it, so an empty or unfinished file is read again.
async fn wait_for_file(s: &GuestSession, path: &str) -> String {
    for _ in 0..100 {
        if let Ok((_, data)) = s.read(path, None).await
            && data.ends_with(b"\n")
        {
            return String::from_utf8_lossy(&data).into_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never held a whole line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screen_actions_drive_the_real_display() {
    if !common::require_docker() {
        return;
    }
    let (_, image) = prepared();
    let mut f = Fixture::new(image);
    f.spec.limits = Limits::desktop();
    let p = Provider::connect().await.unwrap();
    let (_created, s) = p.launch(&f.spec).await.unwrap();

    let d = s.display().await.unwrap();
    assert_eq!((d.width, d.height), (1280, 800));
    let size = act(&s, ScreenAction::GetScreenSize).await;
    assert_eq!((size.width, size.height), (1280, 800));
    let (first, first_png) = shot(&s).await;
    assert!(!first.frame_id.is_empty());
    // A new desktop shows its wallpaper, not a black screen, and the pointer.
    assert_eq!(pixel(&first_png, 10, 700), wallpaper_rgb(700, 800));
    assert_ne!(wallpaper_rgb(700, 800), [0, 0, 0]);
    act(&s, ScreenAction::MoveCursor { x: 1000, y: 600 }).await;
    let (_, moved) = shot(&s).await;
    assert_eq!(pixel(&moved, 1000, 600), [0, 0, 0], "the pointer's tip");
    assert_eq!(
        pixel(&moved, 1001, 603),
        [255, 255, 255],
        "inside the pointer"
    );
    assert_eq!(pixel(&moved, 1040, 600), wallpaper_rgb(600, 800));

    // A terminal window in the top left corner.
    let started = s
        .exec(
            ExecParams::shell(
                "setsid xterm -geometry 100x30+0+0 -e bash --norc >/dev/null 2>&1 < /dev/null &",
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(started.exit_code, Some(0), "{started:?}");
    // The window is mapped once the screen changes (xterm takes a while to start on a
    // loaded machine).
    let blank = shot(&s).await.1;
    let mut before = blank.clone();
    let mapped_by = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < mapped_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
        before = shot(&s).await.1;
        if before != blank {
            break;
        }
    }
    assert_ne!(before, blank, "the xterm never appeared");

    // A click lands where it was asked for.
    let click = act(&s, ScreenAction::LeftClick { x: 200, y: 150 }).await;
    assert_eq!((click.x, click.y), (200, 150));
    let pos = act(&s, ScreenAction::GetCursorPosition).await;
    assert_eq!((pos.x, pos.y), (200, 150));

    // Typing goes to the focused window: the screen changes and the shell runs it.
    let (before_frame, before) = shot(&s).await;
    act(
        &s,
        ScreenAction::TypeText {
            text: "echo Typed-OK: $((6*7)) > typed.txt".into(),
        },
    )
    .await;
    act(
        &s,
        ScreenAction::PressKey {
            key: "Return".into(),
        },
    )
    .await;
    assert_eq!(wait_for_file(&s, "typed.txt").await, "Typed-OK: 42\n");
    let (after_frame, after) = shot(&s).await;
    assert_ne!(before, after, "the screen did not change after type_text");
    assert_ne!(before_frame.frame_id, after_frame.frame_id);

    // A hotkey: Ctrl+U clears the line; then a command typed after it runs alone.
    act(
        &s,
        ScreenAction::TypeText {
            text: "junk".into(),
        },
    )
    .await;
    act(
        &s,
        ScreenAction::Hotkey {
            keys: vec!["ctrl".into(), "u".into()],
        },
    )
    .await;
    act(
        &s,
        ScreenAction::TypeText {
            text: "echo hot > hot.txt\n".into(),
        },
    )
    .await;
    assert_eq!(wait_for_file(&s, "hot.txt").await, "hot\n");

    // Text beyond the keyboard's keys (CJK, symbols, accents) arrives byte for byte;
    // a control character is refused before anything is typed.
    act(
        &s,
        ScreenAction::TypeText {
            text: "echo 'hello 你好 ▲ é → 한국어' > cjk.txt\n".into(),
        },
    )
    .await;
    assert_eq!(
        wait_for_file(&s, "cjk.txt").await,
        "hello 你好 ▲ é → 한국어\n"
    );
    let e = s
        .screen(ScreenAction::TypeText {
            text: "rm -rf x\u{7}".into(),
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("U+0007"), "{e}");

    // The other pointer actions leave the cursor where they end.
    let m = act(&s, ScreenAction::MoveCursor { x: 640, y: 400 }).await;
    assert_eq!((m.x, m.y), (640, 400));
    let d = act(
        &s,
        ScreenAction::Drag {
            path: vec![(100, 100), (300, 200), (500, 300)],
        },
    )
    .await;
    assert_eq!((d.x, d.y), (500, 300));
    let dc = act(&s, ScreenAction::DoubleClick { x: 50, y: 60 }).await;
    assert_eq!((dc.x, dc.y), (50, 60));
    let sc = act(
        &s,
        ScreenAction::Scroll {
            dx: 0,
            dy: 3,
            x: Some(70),
            y: Some(80),
        },
    )
    .await;
    assert_eq!((sc.x, sc.y), (70, 80));
    let rc = act(&s, ScreenAction::RightClick { x: 900, y: 700 }).await;
    assert_eq!((rc.x, rc.y), (900, 700));
    act(
        &s,
        ScreenAction::PressKey {
            key: "Escape".into(),
        },
    )
    .await;
    // The current frame id travels with every answer.
    assert_eq!(rc.frame_id, after_frame.frame_id);

    // Bad input is refused with a clear reason, not half-done.
    let e = s
        .screen(ScreenAction::LeftClick { x: 5000, y: 10 })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ComputerError::Op { message, .. } if message.contains("outside the 1280x800")),
        "{e}"
    );
    let e = s
        .screen(ScreenAction::PressKey {
            key: "NoSuchKey".into(),
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("NoSuchKey"), "{e}");
    s.close().await;
}

/// A computer agent on the desktop image: the model gets the screen tools, a screenshot
/// reaches it as an image (the way Hermes's own computer_use tool hands images over), the
/// events keep no image bytes, and an operator sees and drives the same screen through the
/// control plane.
/// `yy computer attach ID --control` in the background, once it has control: the child
/// (close its stdin to release) and the control fence it printed.
fn take_control(env: &Env, id: &str) -> (std::process::Child, i64) {
    let mut attach = env
        .command(&["computer", "attach", id, "--control"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = lines_of(attach.stderr.take().unwrap());
    let mut seen = Vec::new();
    wait_line(&err, "you have control", &mut seen);
    let line = seen
        .iter()
        .find(|l| l.contains("control fence "))
        .unwrap_or_else(|| panic!("{seen:?}"));
    let fence = line
        .split("control fence ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (attach, fence)
}

/// Issue 23, finding 7: an operator's input was accepted with no fence while the model
/// acted. Input needs the caller's live control fence and a recent frame id, from the CLI
/// and the API alike (the web view sends both); looking needs no control.
#[test]
fn screen_input_needs_the_control_fence_and_a_recent_frame() {
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "touch acting; sleep 8; echo acted"}}},
            {"text": "done acting"}
        ]),
    ) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
    let chat = s.env.background(&s.server, &["chat", "box", "act"]);
    common::wait_for(Duration::from_secs(60), "the model to act", || {
        ws.join("acting").exists().then_some(())
    });
    // The model acts and nobody has control: looking is answered, input refused.
    let shot = s.env.path("shot.png");
    let shot = shot.to_str().unwrap();
    let frame = s.env.json(&["computer", "screenshot", &id, "-o", shot])["frame_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.env
        .run(&["computer", "screen", &id, "get_cursor_position"])
        .ok();
    for extra in [&[][..], &["--frame", frame.as_str()][..]] {
        let mut args = vec!["computer", "screen", &id, "move_cursor", "5", "5"];
        args.extend_from_slice(extra);
        s.env.run(&args).fails(6, "needs control of computer");
    }
    let token = s.env.stored_token();
    let auth = format!("Bearer {token}");
    let post = |body: &str| {
        common::http(
            &s.server.addr(),
            "POST",
            &format!("/api/v1/computers/{id}/screen"),
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            body,
        )
        .unwrap()
    };
    let (status, body) = post(&format!(
        r#"{{"action":"left_click","x":5,"y":5,"frame_id":"{frame}"}}"#
    ));
    assert_eq!(status, 409, "{body}");
    // Under control: the fence without a frame is refused, with a recent one it acts.
    let (mut attach, fence) = take_control(&s.env, &id);
    let f = fence.to_string();
    s.env
        .run(&[
            "computer",
            "screen",
            &id,
            "move_cursor",
            "5",
            "5",
            "--fence",
            &f,
        ])
        .fails(6, "needs the id of the frame");
    let (status, body) = post(&format!(
        r#"{{"action":"left_click","x":5,"y":5,"control_fence":{fence}}}"#
    ));
    assert_eq!(status, 409, "{body}");
    let frame = s.env.json(&["computer", "screenshot", &id, "-o", shot])["frame_id"]
        .as_str()
        .unwrap()
        .to_string();
    let moved = s.env.json(&[
        "computer",
        "screen",
        &id,
        "move_cursor",
        "6",
        "7",
        "--fence",
        &f,
        "--frame",
        &frame,
    ]);
    assert_eq!(
        (moved["x"].as_i64(), moved["y"].as_i64()),
        (Some(6), Some(7))
    );
    // An older frame is refused by the guest once a newer one was taken.
    s.env.json(&["computer", "screenshot", &id, "-o", shot]);
    s.env
        .run(&[
            "computer",
            "screen",
            &id,
            "left_click",
            "9",
            "9",
            "--fence",
            &f,
            "--frame",
            &frame,
        ])
        .fails(1, "not the current frame");
    drop(attach.stdin.take());
    attach.wait().unwrap();
    s.env
        .run(&["computer", "handback", &id, "--note", "ok"])
        .ok();
    let done = chat.output();
    assert!(done.status.success(), "{done:?}");
}

#[test]
fn the_model_and_the_operator_share_the_screen() {
    use base64::Engine;
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([
            {"tool_call": {"name": "screenshot", "arguments": {}}},
            {"tool_call": {"name": "left_click", "arguments": {"x": 321, "y": 123}}},
            {"tool_call": {"name": "left_click", "arguments": {"x": 9999, "y": 1}}},
            {"text": "Saw the screen"}
        ]),
    ) else {
        return;
    };
    // The profile says its model sees images (Hermes's own model.supports_vision key).
    let config = s.env.path("hermes-home").join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            "  api_mode: chat_completions\n",
            "  api_mode: chat_completions\n  supports_vision: true\n",
        ),
    )
    .unwrap();
    let out = s.env.run(&["chat", "box", "look at your screen"]);
    out.ok();
    assert!(out.stdout.contains("Saw the screen"), "{out:?}");

    let steps = s.model.steps();
    let offered: Vec<&str> = steps[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in yy::runner::tools::names(yy::runner::tools::Family::Screen) {
        assert!(offered.contains(&name), "{name} not offered: {offered:?}");
    }
    // The screenshot's tool message is multi-part: text and a PNG of the whole screen.
    let messages = steps[1]["body"]["messages"].as_array().unwrap();
    let tool = messages.iter().rfind(|m| m["role"] == "tool").unwrap();
    let parts = tool["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{tool}"));
    let url = parts
        .iter()
        .find_map(|p| p["image_url"]["url"].as_str())
        .unwrap_or_else(|| panic!("no image in {tool}"));
    let b64 = url.strip_prefix("data:image/png;base64,").unwrap();
    let png = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(png_size(&png).unwrap(), (1280, 800));

    // The turn's record keeps the frame id and the size, not the image.
    let session = common::session_of(&out);
    let shown = s.env.json(&["session", "show", &session]);
    let tools = shown["turns"][0]["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "screenshot");
    assert!(
        tools[0]["result"]["frame_id"]
            .as_str()
            .unwrap()
            .starts_with('f')
    );
    assert!(
        tools[0]["result"]["image"]["base64_bytes"]
            .as_u64()
            .unwrap()
            > 1000
    );
    assert!(!shown.to_string().contains("data:image/png"));
    assert_eq!(tools[1]["result"]["x"], 321);
    assert_eq!(tools[1]["result"]["y"], 123);
    assert!(
        tools[2]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("outside the 1280x800 screen"),
        "{}",
        tools[2]
    );

    // The operator: the same screen, the cursor where the model left it.
    let list = s.env.json(&["computer", "list"]);
    let id = list[0]["id"].as_str().unwrap().to_string();
    let shot = s.env.path("shot.png");
    let out = s
        .env
        .run(&["computer", "screenshot", &id, "-o", shot.to_str().unwrap()]);
    out.ok();
    assert!(out.stdout.contains("1280x800"), "{out:?}");
    let data = std::fs::read(&shot).unwrap();
    assert_eq!(png_size(&data).unwrap(), (1280, 800));
    let out = s
        .env
        .run(&["computer", "screen", &id, "get_cursor_position"]);
    out.ok();
    assert!(out.stdout.contains("cursor 321,123"), "{out:?}");
    // Input needs control: refused without it, run with its fence and the frame.
    s.env
        .run(&["computer", "screen", &id, "move_cursor", "10", "20"])
        .fails(6, "needs control");
    let (mut attach, fence) = take_control(&s.env, &id);
    let frame = s
        .env
        .json(&["computer", "screenshot", &id, "-o", shot.to_str().unwrap()])["frame_id"]
        .as_str()
        .unwrap()
        .to_string();
    let fence = fence.to_string();
    let under = |args: &[&str]| {
        let mut v = vec!["computer", "screen", id.as_str()];
        v.extend_from_slice(args);
        v.extend_from_slice(&["--fence", &fence, "--frame", &frame]);
        v.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let args = under(&["move_cursor", "10", "20"]);
    let moved = s
        .env
        .json(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        (moved["x"].as_i64(), moved["y"].as_i64()),
        (Some(10), Some(20))
    );
    s.env
        .run(&["computer", "screen", &id, "left_click", "1"])
        .fails(2, "X Y");
    let args = under(&["press_key", "NoSuchKey"]);
    s.env
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .fails(1, "NoSuchKey");
    drop(attach.stdin.take());
    attach.wait().unwrap();
    let audit = s.env.run(&["computer", "audit"]);
    audit.ok();
    assert!(audit.stdout.contains("computer.screen"), "{audit:?}");
}

/// `yy computer attach` (read-only) shows the running turn's tool calls and outputs as
/// they happen, and detaches on Ctrl-C.
#[test]
fn attach_shows_the_running_turn_live() {
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 2; echo agent-output-$((40+2))"}}},
            {"text": "finished"}
        ]),
    ) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let mut attach = s
        .env
        .command(&["computer", "attach", &id])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::lines_of(attach.stdout.take().unwrap());
    let err = common::lines_of(attach.stderr.take().unwrap());
    let mut said = Vec::new();
    // It looked for a running turn (so it follows, and its Ctrl-C handler is set).
    common::wait_line(&err, "no turn is running", &mut said);
    s.env.run(&["chat", "box", "run it"]).ok();
    let mut shown = Vec::new();
    common::wait_line(&out, "ended complete", &mut shown);
    // SAFETY: signalling the child this test started.
    unsafe {
        libc::kill(attach.id() as i32, libc::SIGINT);
    }
    let status = attach.wait().unwrap();
    common::wait_line(&err, "detached", &mut said);
    let stdout = shown.join("\n");
    let stderr = said.join("\n");
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("read-only"), "{stderr}");
    assert!(stdout.contains("[tool terminal started]"), "{stdout}");
    assert!(stdout.contains("agent-output-42"), "{stdout}");
    assert!(stdout.contains("finished"), "{stdout}");
    assert!(stdout.contains("ended complete"), "{stdout}");
    assert!(stderr.contains("detached"), "{stderr}");
}

/// Takeover: `attach --control` waits for the tool in flight, the model's next tool does
/// not run, the operator's commands run in the same container (the agent's background
/// process is alive), detaching leaves the model paused, and the handback note reaches
/// the model's next request.
#[test]
fn an_operator_takes_over_and_hands_back_with_a_note() {
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 600 >/dev/null 2>&1 & echo $! > bg.pid; sleep 3; echo first-done"}}},
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo second > second.txt"}}},
            {"text": "resumed after the handback"}
        ]),
    ) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
    let chat = s
        .env
        .background(&s.server, &["chat", "box", "do two steps"]);
    // The first tool is running once it wrote the background process's pid.
    common::wait_for(Duration::from_secs(60), "the first tool", || {
        ws.join("bg.pid").exists().then_some(())
    });
    let started = std::time::Instant::now();
    let common::Controller {
        child: mut attach,
        err,
        mut seen,
    } = s.env.take_control(&id, std::process::Stdio::piped());
    let out = common::lines_of(attach.stdout.take().unwrap());
    // Control came only after the tool in flight (sleep 3) finished.
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "control after {:?}: {seen:?}",
        started.elapsed()
    );
    let mut stdin = attach.stdin.take().unwrap();
    use std::io::Write;
    // A shell on a pty: the typed line is echoed, so wait for what only running it prints.
    writeln!(
        stdin,
        "echo operator > op.txt; kill -0 $(cat bg.pid) && echo bg-$((1+1))-alive"
    )
    .unwrap();
    let mut printed = Vec::new();
    common::wait_line(&out, "bg-2-alive", &mut printed);
    assert_eq!(
        std::fs::read_to_string(ws.join("op.txt")).unwrap(),
        "operator\n"
    );
    // Screen input under control needs the current fence and a current frame.
    let fence_line = seen.iter().find(|l| l.contains("control fence")).unwrap();
    assert!(fence_line.contains("control fence 1:"), "{fence_line}");
    s.env
        .run(&["computer", "screen", &id, "move_cursor", "5", "5"])
        .fails(6, "needs the current control fence");
    s.env
        .run(&[
            "computer",
            "screen",
            &id,
            "move_cursor",
            "5",
            "5",
            "--fence",
            "0",
        ])
        .fails(6, "stale");
    let shot = s.env.path("f.png");
    let shot = shot.to_str().unwrap();
    let first = s.env.json(&["computer", "screenshot", &id, "-o", shot]);
    let frame = first["frame_id"].as_str().unwrap().to_string();
    let moved = s.env.json(&[
        "computer",
        "screen",
        &id,
        "move_cursor",
        "7",
        "8",
        "--fence",
        "1",
        "--frame",
        &frame,
    ]);
    assert_eq!(
        (moved["x"].as_i64(), moved["y"].as_i64()),
        (Some(7), Some(8))
    );
    s.env.json(&["computer", "screenshot", &id, "-o", shot]);
    s.env
        .run(&[
            "computer",
            "screen",
            &id,
            "left_click",
            "9",
            "9",
            "--fence",
            "1",
            "--frame",
            &frame,
        ])
        .fails(1, "not the current frame");
    // The model's next tool did not run: the turn says it waits at that call.
    let session = s.env.wait_session_of("box");
    s.env.wait_event(
        &s.server,
        &session,
        "the model's next tool call held by the pause",
        common::waits::is_paused_event,
    );
    assert!(!ws.join("second.txt").exists(), "the next tool ran");
    // Detach: control ends, the model stays paused (no resume was sent to wake it).
    drop(stdin);
    let status = attach.wait().unwrap();
    assert!(status.success());
    common::wait_line(&err, "stays paused", &mut seen);
    s.env.assert_no_resume(&s.reg.id);
    assert!(!ws.join("second.txt").exists(), "resumed by itself");
    let shown = s.env.json(&["session", "list"]);
    assert_eq!(shown[0]["state"], "running", "{shown}");
    let c = s.env.json(&["computer", "show", &id]);
    assert_eq!(c["control"]["paused"], true, "{c}");
    assert!(c["control"]["holder"].is_null(), "released: {c}");
    let text = s.env.run(&["computer", "show", &id]);
    assert!(
        text.stdout.contains("paused until `yy computer handback`"),
        "{text:?}"
    );

    let note = "I logged in for you; the page is open";
    s.env
        .run(&["computer", "handback", &id, "--note", note])
        .ok();
    let done = chat.output();
    let chat_out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{chat_out}");
    assert!(
        chat_out.contains("resumed after the handback"),
        "{chat_out}"
    );
    // The waiting tool was not run; its answer carried the note to the model.
    assert!(!ws.join("second.txt").exists());
    let steps = s.model.steps();
    let last = steps.last().unwrap()["body"].to_string();
    assert!(last.contains(note), "{last}");
    assert!(
        last.contains("first-done"),
        "the tool results so far are kept"
    );
    // Nothing is paused any more: a second handback is a conflict.
    s.env
        .run(&["computer", "handback", &id, "--note", "again"])
        .fails(6, "not paused");
    let audit = s.env.run(&["computer", "audit"]);
    assert!(audit.stdout.contains("computer.control"), "{audit:?}");
    assert!(audit.stdout.contains("computer.handback"), "{audit:?}");
}

/// A lost connection (the attached CLI killed) ends control within 30 s: input without a
/// fence is refused as under someone's control while it lives, then as needing control;
/// the model stays paused.
#[test]
fn a_lost_connection_ends_control_and_the_model_stays_paused() {
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo one > one.txt"}}},
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo two > two.txt"}}},
            {"text": "done"}
        ]),
    ) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
    // Take control before the turn: the model is paused at its first tool call.
    let mut attach = s
        .env
        .command(&["computer", "attach", &id, "--control"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = common::lines_of(attach.stderr.take().unwrap());
    let mut seen = Vec::new();
    common::wait_line(&err, "you have control", &mut seen);
    let chat = s.env.background(&s.server, &["chat", "box", "two steps"]);
    // The turn reaches its first tool call and says it waits there.
    let session = s.env.wait_session_of("box");
    s.env.wait_event(
        &s.server,
        &session,
        "the first tool call held by the pause",
        common::waits::is_paused_event,
    );
    assert!(!ws.join("one.txt").exists(), "a tool ran under control");
    // The connection is lost: no release, no more renewals.
    attach.kill().unwrap();
    attach.wait().unwrap();
    let lost = std::time::Instant::now();
    s.env
        .run(&["computer", "screen", &id, "move_cursor", "1", "1"])
        .fails(6, "under an operator's control");
    // Once control ended, input is still refused: it needs control of its own.
    common::wait_for(Duration::from_secs(40), "control to end", || {
        let out = s
            .env
            .run(&["computer", "screen", &id, "move_cursor", "1", "1"]);
        (out.code == 6 && out.stderr.contains("needs control of computer")).then_some(())
    });
    assert!(
        lost.elapsed() <= Duration::from_secs(31),
        "{:?}",
        lost.elapsed()
    );
    // Nothing resumed by itself: no resume was sent to wake the waiting call.
    s.env.assert_no_resume(&s.reg.id);
    assert_eq!(
        s.env.json(&["computer", "show", &id])["control"]["paused"],
        true
    );
    assert!(!ws.join("one.txt").exists(), "resumed by itself");
    let sessions = s.env.json(&["session", "list"]);
    assert_eq!(sessions[0]["state"], "running", "{sessions}");
    s.env
        .run(&["computer", "handback", &id, "--note", "ok"])
        .ok();
    let done = chat.output();
    assert!(done.status.success(), "{done:?}");
    // The first tool call waited and was answered with the note; the second ran.
    assert!(!ws.join("one.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("two.txt")).unwrap(),
        "two\n"
    );
}

/// `attach --web --control` in headless Chromium: the one-time link signs the page in, the
/// page shows the live screen, a click on the (scaled) image lands in the guest at the
/// pixel clicked, keys typed on the page reach the focused window, input with an old fence
/// or a stale frame is refused (the page says so and shows a new frame; the cursor does
/// not move), and Ctrl-C releases control leaving the model paused.
#[test]
fn the_web_view_shows_the_screen_and_sends_input_under_the_fence() {
    let Some(chromium) = common::chromium::require_chromium() else {
        return;
    };
    let Some(s) = common::hermes::worker_setup(
        || prepared().1.clone(),
        serde_json::json!([{"text": "nothing to do"}]),
    ) else {
        return;
    };
    let computer = s.env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let mut attach = s
        .env
        .command(&["computer", "attach", &id, "--web", "--control"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = lines_of(attach.stdout.take().unwrap());
    let err = lines_of(attach.stderr.take().unwrap());
    let mut seen = Vec::new();
    wait_line(&err, "you have control", &mut seen);
    let url = out.recv_timeout(Duration::from_secs(10)).unwrap();
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .unwrap_or_else(|| panic!("{url}"));
    let (port, query) = rest.split_once('/').unwrap();
    let addr = format!("127.0.0.1:{port}");
    let token = query.strip_prefix("?t=").unwrap();
    assert_eq!(token.len(), 64, "{url}");

    // Nothing without the page's credential; no other Host name.
    let (status, body) = common::http(&addr, "GET", "/frame", &[], "").unwrap();
    assert_eq!(status, 401, "{body}");
    let input = r#"{"fence":1,"frame_id":"x","action":{"action":"left_click","x":1,"y":1}}"#;
    let json = [("Content-Type", "application/json")];
    let (status, _) = common::http(&addr, "POST", "/input", &json, input).unwrap();
    assert_eq!(status, 401);
    let (status, _) = common::http(&addr, "GET", "/?t=wrong", &[], "").unwrap();
    assert_eq!(status, 403);
    let rebound = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            c,
            "GET /?t={token} HTTP/1.1\r\nHost: attacker.test:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut r = String::new();
        let _ = c.read_to_string(&mut r);
        r
    };
    assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut b = common::chromium::Browser::launch(&chromium).await;
        // 652 px wide: the 1280 px screen is shown at exactly half size.
        b.open(&url, 652, 520).await;
        let width = b
            .wait_for(
                "document.getElementById('screen').naturalWidth === 1280 && document.getElementById('frame').textContent.startsWith('f') && document.getElementById('screen').naturalWidth",
                "the first frame",
            )
            .await;
        assert_eq!(width, 1280);
        assert_eq!(b.eval("location.pathname + location.search").await, "/");
        let mode = b.eval("document.getElementById('mode').textContent").await;
        assert_eq!(mode, "in control (fence 1)");
        let rect = b
            .eval("(() => { const r = document.getElementById('screen').getBoundingClientRect(); return [r.left, r.top, r.width]; })()")
            .await;
        let (left, top, shown) = (
            rect[0].as_f64().unwrap(),
            rect[1].as_f64().unwrap(),
            rect[2].as_f64().unwrap(),
        );
        assert_eq!(shown, 640.0, "{rect}");

        // A click at (200, 150) of the half-size image is (400, 300) on the screen. The
        // pointer's move pauses frames; click once the frame in flight is shown.
        b.point_at(left + 200.0, top + 150.0).await;
        b.click(left + 200.0, top + 150.0).await;
        let said = b
            .wait_for(
                "document.getElementById('status').textContent.startsWith('left_click') && document.getElementById('status').textContent",
                "the click's answer",
            )
            .await;
        assert_eq!(said, "left_click done; cursor 400,300");
        let pos = s
            .env
            .run(&["computer", "screen", &id, "get_cursor_position"]);
        pos.ok();
        assert!(pos.stdout.contains("cursor 400,300"), "{pos:?}");

        // Keys typed on the focused screen reach the focused window: a shell in a terminal
        // at the top left reads a line and writes it to the workspace.
        s.env
            .run(&[
                "computer", "exec", &id, "--", "/bin/sh", "-c",
                "setsid xterm -geometry 80x24+0+0 -e sh -c ': > xterm-up; read line; echo \"$line\" > typed.txt' >/dev/null 2>&1 </dev/null &",
            ])
            .ok();
        let ws = s.env.path("runner-data-a").join("workspaces").join(&id);
        // The terminal's shell runs once its window is up (a loaded host takes seconds).
        common::wait_for(Duration::from_secs(30), "the terminal", || {
            ws.join("xterm-up").exists().then_some(())
        });
        // Click once the page's own frame shows the window where the click goes: screen
        // pixel (100, 100) is no longer the wallpaper's colour.
        let [r, g, bl] = wallpaper_rgb(100, 800);
        b.wait_for(
            &format!(
                "(() => {{ const i = document.getElementById('screen'); const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight; const x = c.getContext('2d'); x.drawImage(i, 0, 0); const d = x.getImageData(100, 100, 1, 1).data; return Math.max(Math.abs(d[0] - {r}), Math.abs(d[1] - {g}), Math.abs(d[2] - {bl})) > 32 && d.join(','); }})()"
            ),
            "the terminal's window on the page's frame",
        )
        .await;
        b.point_at(left + 50.0, top + 50.0).await;
        b.click(left + 50.0, top + 50.0).await;
        let said = b
            .wait_for(
                "(() => { const t = document.getElementById('status').textContent + ' ' + document.getElementById('refusal').textContent; return !t.startsWith('left_click done; cursor 400,300') && t; })()",
                "the click into the terminal",
            )
            .await;
        // (The window manager may move the pointer when the window takes focus.)
        assert!(said.as_str().unwrap().starts_with("left_click done"), "{said}");
        for k in ["h", "i", "Enter"] {
            b.key(k).await;
        }
        common::wait_for(Duration::from_secs(30), "the typed line", || {
            std::fs::read_to_string(ws.join("typed.txt")).ok()
        });
        assert_eq!(std::fs::read_to_string(ws.join("typed.txt")).unwrap(), "hi\n");

        // The page's fence goes old: the control plane refuses, the page says why and
        // shows a new frame.
        b.wait_for("!sending && !fetching", "the page to settle").await;
        let before = b.eval("frameId").await;
        let cursor = |s: &common::hermes::WorkerSetup| {
            let pos = s
                .env
                .json(&["computer", "screen", &id, "get_cursor_position"]);
            (pos["x"].as_i64().unwrap(), pos["y"].as_i64().unwrap())
        };
        let was = cursor(&s);
        b.eval("state.fence = state.fence - 1").await;
        b.point_at(left + 20.0, top + 30.0).await;
        b.click(left + 20.0, top + 30.0).await;
        let refusal = b
            .wait_for(
                "document.getElementById('refusal').textContent",
                "the refusal",
            )
            .await;
        let refusal = refusal.as_str().unwrap();
        assert!(
            refusal.contains("control fence 0") && refusal.contains("stale"),
            "{refusal}"
        );
        b.wait_for(
            &format!("frameId !== {before} && frameId"),
            "a new frame after the refusal",
        )
        .await;
        assert_eq!(cursor(&s), was, "a refused click moved the cursor");

        // A stale frame: the guest refuses. (Set and sent in one go, so that no new
        // frame comes in between.)
        b.eval("state.fence = state.fence + 1; document.getElementById('refusal').textContent = ''")
            .await;
        b.wait_for("!sending && !fetching", "the page to settle").await;
        b.eval("frameId = 'f0-1'; send({ action: 'left_click', x: 10, y: 10 }); true")
            .await;
        let refusal = b
            .wait_for(
                "document.getElementById('refusal').textContent",
                "the refusal",
            )
            .await;
        assert!(
            refusal.as_str().unwrap().contains("not the current frame"),
            "{refusal}"
        );
        assert_eq!(cursor(&s), was, "a click on a stale frame moved the cursor");

        // The printed link opened again in this (signed-in) browser shows the page; in a
        // browser without the cookie it says it was used and what prints a new one.
        b.eval("window.before = true").await;
        b.call("Page.navigate", serde_json::json!({ "url": url }))
            .await;
        b.wait_for(
            "window.before === undefined && location.pathname === '/' && document.getElementById('frame').textContent.startsWith('f')",
            "the page again",
        )
        .await;
        b.call("Network.clearBrowserCookies", serde_json::json!({}))
            .await;
        b.call("Page.navigate", serde_json::json!({ "url": url }))
            .await;
        let said = b
            .wait_for(
                "document.querySelector('h1') && document.body.innerText",
                "the used-link page",
            )
            .await;
        let said = said.as_str().unwrap();
        assert!(said.contains("already used or has expired"), "{said}");
        assert!(
            said.contains(&format!("yy computer attach {id} --web --control")),
            "{said}"
        );
    });

    // The link worked once; an API client gets the refusal as JSON.
    let (status, body) = common::http(&addr, "GET", &format!("/?t={token}"), &[], "").unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("already used"), "{body}");
    assert!(body.starts_with("{\"error\""), "{body}");

    // Ctrl-C stops the page and releases control; the model stays paused.
    unsafe {
        libc::kill(attach.id() as i32, libc::SIGINT);
    }
    let status = attach.wait().unwrap();
    assert!(status.success(), "{status:?}");
    wait_line(&err, "control released", &mut seen);
    let c = s.env.json(&["computer", "show", &id]);
    assert!(c["control"]["holder"].is_null(), "released: {c}");
    assert_eq!(c["control"]["paused"], true, "{c}");
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "still serving"
    );
    s.env
        .run(&["computer", "handback", &id, "--note", "done"])
        .ok();
}
