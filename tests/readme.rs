//! The README's walkthrough and the CLI must not drift apart: every `yy` command of the
//! fenced `sh` blocks of "Five minutes with yy" is parsed, verbatim (placeholders such as
//! `<RUNNER-ID>` filled in), by this yy's own command line, and steps 1-7 run in order
//! against a fresh data directory: the control plane, the Runner with its supervised Hermes
//! (the README's offline config block, the scripted model), the chat and the fetch of the
//! file it wrote. Only paths, the server's address, the model's port and the ids are
//! substituted. Steps 8-9 build the
//! computer image with the test's own (dynamically linked) yy, as the README's `cargo
//! build --release` yy would be, and run the computer agent's turn on the real Docker
//! engine. Then "After the first five minutes": the teams example (builder's team tools,
//! the member's turn in its own computer, the review, the stop and the resume, until the
//! goal completes) and the long turn stopped by its session id.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Env, PASSWORD, wait_for};

/// The `yy ...` command lines of the walkthrough, in order, continuation lines joined,
/// comments and a trailing `&` removed.
fn walkthrough_commands() -> Vec<String> {
    section_commands("## Five minutes with yy")
}

/// The `yy ...` command lines of the README section under `heading`.
fn section_commands(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no {heading:?}"));
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut heredoc: Option<String> = None;
    let mut pending = String::new();
    for line in section.lines() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
            }
            continue;
        }
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(i) = line.find("<<'") {
            heredoc = Some(line[i + 3..].trim_end_matches('\'').to_string());
        }
        let code = match line.find(" #") {
            Some(i) if !line[..i].contains('"') || line[..i].matches('"').count() % 2 == 0 => {
                &line[..i]
            }
            _ => line,
        };
        let code = if code.trim_start().starts_with('#') {
            ""
        } else {
            code
        };
        pending.push_str(code.trim_end().trim_end_matches('\\'));
        pending.push(' ');
        if code.trim_end().ends_with('\\') {
            continue;
        }
        let full = pending.trim().trim_end_matches('&').trim().to_string();
        pending.clear();
        if full.starts_with("yy ") {
            commands.push(full);
        }
    }
    commands
}

/// Placeholders the reader fills in, as a test fills them.
fn fill(line: &str) -> String {
    line.replace("<RUNNER-ID>", "0f0f0f0f")
        .replace("<SESSION-ID>", "0f0f0f0f")
        .replace("<COMPUTER-ID>", "0f0f0f0f")
        .replace("<GOAL-ID>", "0f0f0f0f")
        .replace("sha256:...", &format!("sha256:{}", "0".repeat(64)))
}

#[test]
fn every_walkthrough_command_is_one_this_yy_accepts() {
    let commands = walkthrough_commands();
    assert!(
        commands.len() >= 20,
        "the walkthrough lost its commands: {commands:?}"
    );
    // Continuation lines are part of their command.
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("yy runner register") && c.ends_with("-o runner.json")),
        "{commands:?}"
    );
    let more = section_commands("## After the first five minutes");
    assert!(more.len() >= 8, "{more:?}");
    for line in commands.iter().chain(&more) {
        let words = shell_words::split(&fill(line)).unwrap_or_else(|e| panic!("{line}: {e}"));
        if let Err(e) = yy::cli::command().try_get_matches_from(&words) {
            panic!("the README says `{line}`, which this yy refuses:\n{e}");
        }
    }
}

#[test]
fn the_walkthrough_runs_as_written() {
    let env = Env::new();
    let data = env.path("var-lib-yy");
    let commands = walkthrough_commands();
    let server = {
        // Step 1 is run against a data directory of the test's own.
        let admin = commands
            .iter()
            .find(|c| c.starts_with("yy admin create"))
            .expect("step 1");
        let line = admin.replace("/var/lib/yy", data.to_str().unwrap()) + " --password-stdin";
        let words = shell_words::split(&line).unwrap();
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        env.run_with(&args, PASSWORD, &[]).ok();
        common::Server::start(&env, &data)
    };
    // Steps 2-4, verbatim but for the server's address and the password on stdin.
    for line in commands.iter().filter(|c| {
        [
            "yy login",
            "yy whoami",
            "yy source",
            "yy profile",
            "yy agent",
        ]
        .iter()
        .any(|p| c.starts_with(p))
    }) {
        let mut line = line.replace("http://127.0.0.1:8420", &server.url);
        if line.starts_with("yy login") {
            line.push_str(" --password-stdin");
        }
        let words = shell_words::split(&line).unwrap();
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let out = env.run_with(&args, PASSWORD, &[]);
        assert_eq!(out.code, 0, "the README's `{line}` failed: {out:#?}");
    }
    let agents = env.json(&["agent", "list"]);
    let names: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{agents}");

    // Step 5: the Runner's registration, its Hermes settings in runner.json, no hand edit.
    let register = commands
        .iter()
        .find(|c| c.starts_with("yy runner register"))
        .expect("step 5");
    let runner_dir = env.path("srv-yy-runner");
    let config = env.path("runner.json");
    let line = register
        .replace("http://127.0.0.1:8420", &server.url)
        .replace("/srv/yy-runner", runner_dir.to_str().unwrap())
        .replace("/srv/exports", env.path("srv-exports").to_str().unwrap())
        .replace("-o runner.json", &format!("-o {}", config.display()));
    let words = shell_words::split(&line).unwrap();
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let out = env.run(&args);
    assert_eq!(out.code, 0, "the README's `{line}` failed: {out:#?}");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(
        written["hermesCommand"],
        serde_json::json!(["/opt/yy/hermes-venv/bin/hermes", "serve"]),
        "{written}"
    );
    assert_eq!(
        written["hermesHome"].as_str(),
        Some(runner_dir.join("hermes-home").to_str().unwrap()),
        "{written}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Steps 6-7 with the offline scripted model: the README's config block, its Runner,
    // a chat whose tool writes the file that the fetch then brings back.
    let Some(hermes) = common::require_hermes() else {
        return;
    };
    if !common::require_docker() {
        return;
    }
    let exports = env.path("srv-exports");
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/readme_script.json"
    ))
    .unwrap()
    .replace("/srv/exports", exports.to_str().unwrap());
    let model = common::hermes::FakeModel::start(
        &env.path("model"),
        serde_json::from_str(&script).unwrap(),
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme.find("<<'EOF'\n").expect("the offline config block") + 8;
    let yaml = &readme[start..start + readme[start..].find("\nEOF\n").unwrap()];
    let yaml = yaml
        .replace("8421", &model.port.to_string())
        .replace("/srv/yy-runner", runner_dir.to_str().unwrap());
    for dir in ["hermes-home", "work"] {
        std::fs::create_dir_all(runner_dir.join(dir)).unwrap();
    }
    std::fs::create_dir_all(&exports).unwrap();
    std::fs::write(runner_dir.join("hermes-home/config.yaml"), yaml).unwrap();
    if hermes != std::path::Path::new("/opt/yy/hermes-venv/bin/hermes") {
        let text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("/opt/yy/hermes-venv/bin/hermes", hermes.to_str().unwrap());
        std::fs::write(&config, text).unwrap();
    }
    let run = commands
        .iter()
        .find(|c| c.starts_with("yy runner run"))
        .expect("step 6");
    let line = run
        .replace("runner.json", config.to_str().unwrap())
        .replace("/srv/yy-runner", runner_dir.to_str().unwrap());
    let words = shell_words::split(&line).unwrap();
    let log = env.path("runner.log");
    let child = env
        .command(&words[1..].iter().map(String::as_str).collect::<Vec<_>>())
        .env("YY_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _runner = common::RunnerProc { child, log };
    let runner_id = written["runnerId"].as_str().unwrap().to_string();
    env.wait_online(&runner_id, 0);
    let session = std::cell::RefCell::new(String::new());
    let computer = std::cell::RefCell::new(String::new());
    let mut image: Option<BuiltImage> = None;
    for line in commands
        .iter()
        .skip_while(|c| !c.starts_with("yy runner run"))
        .skip(1)
    {
        let line = line
            .replace("<RUNNER-ID>", &runner_id)
            .replace("<SESSION-ID>", &session.borrow())
            .replace("<COMPUTER-ID>", &computer.borrow())
            .replace(
                "sha256:...",
                image.as_ref().map_or("sha256:...", |i| i.0.as_str()),
            )
            .replace("/srv/exports", exports.to_str().unwrap())
            .replace(
                "-o report.txt",
                &format!("-o {}", env.path("report.txt").display()),
            );
        let words = shell_words::split(&line).unwrap();
        let out = env.run(&words[1..].iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(out.code, 0, "the README's `{line}` failed: {out:#?}");
        if line.starts_with("yy chat") {
            *session.borrow_mut() = common::session_of(&out);
        }
        if line.starts_with("yy image build") {
            let id = out.stdout.lines().last().unwrap_or_default().to_string();
            assert!(id.starts_with("sha256:") && id.len() == 71, "{out:#?}");
            image = Some(BuiltImage(id));
        }
        if line.starts_with("yy computer create") {
            let list = env.json(&["computer", "list"]);
            *computer.borrow_mut() = list[0]["id"].as_str().unwrap().to_string();
        }
        if line.starts_with("yy computer exec") {
            assert!(out.stdout.starts_with("Linux"), "{out:#?}");
        }
        if line.starts_with("yy chat builder") {
            assert!(
                out.stdout.contains("hello.txt is in your workspace"),
                "{out:#?}"
            );
        }
    }
    let image = image.expect("the walkthrough builds no image");

    // "After the first five minutes": the teams example and the stop of a long turn run as
    // written. The desktop lines need the desktop image and a running computer turn to
    // watch (tests/desktop.rs and tests/computer_control.rs run them), sharing needs a
    // second computer agent (tests/computer_share.rs runs it), and the managed browser a
    // host agent's turn with Chromium (tests/managed_browser.rs runs it); here they are
    // only parsed, above.
    let (mut teams, mut stop) = (Vec::new(), Vec::new());
    for line in section_commands("## After the first five minutes") {
        if ["yy chat builder", "yy goal ", "yy subtask "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            teams.push(line);
        } else if ["yy chat helper", "yy session stop"]
            .iter()
            .any(|p| line.starts_with(p))
        {
            stop.push(line);
        } else {
            assert!(
                [
                    "yy image prepare",
                    "yy computer attach",
                    "yy computer handback",
                    "yy computer share",
                    "yy computer unshare",
                    "yy agent update <HOST-AGENT> --browser",
                    "yy browser "
                ]
                .iter()
                .any(|p| line.starts_with(p)),
                "a README command this test neither runs nor knows: {line}"
            );
        }
    }
    run_teams(&env, &teams);
    stop_a_long_turn(&env, &model, &stop, &runner_dir);

    // The image is in use (its computer runs it, the Runner is configured with it): `yy image
    // rm` refuses it and removes nothing; once nothing uses it, it goes.
    env.run(&["image", "rm", &image.0]).fails(6, "in use");
    env.run(&["image", "rm", &image.0, "--local-only"])
        .fails(6, "in use");
    image.remove_containers();
    env.run(&["image", "rm", &image.0]).fails(6, "in use");
    let out = env.run(&["image", "rm", &image.0[..19], "--local-only"]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(out.stdout.contains(&image.0), "{out:#?}");
    let gone = std::process::Command::new("docker")
        .args(["image", "inspect", &image.0])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "the image is still there");
    let fetched = std::fs::read_to_string(env.path("report.txt")).unwrap();
    assert_eq!(fetched, "yy walkthrough: the README was summarised\n");
}

/// The teams example: builder (the scripted model) makes a member, a team and a goal with
/// one subtask in its chat turn; the scheduler runs the subtask in the member's computer,
/// builder accepts the result and asks the user, so `yy goal watch` ends (`waiting_user`);
/// the stop and the resume follow, and builder completes the goal.
fn run_teams(env: &Env, lines: &[String]) {
    let mut goal = String::new();
    for line in lines {
        let line = line.replace("<GOAL-ID>", &goal);
        let words = shell_words::split(&line).unwrap();
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let out = if line.starts_with("yy goal watch") {
            // It follows the goal until it is no longer active; a flow that broke would
            // leave it watching.
            run_within(env, &args, Duration::from_secs(300))
        } else {
            env.run(&args)
        };
        assert_eq!(out.code, 0, "the README's `{line}` failed: {out:#?}");
        let show = |goal: &str| env.json(&["goal", "show", goal]);
        if line.starts_with("yy chat builder") {
            assert!(out.stdout.contains("writer is on it"), "{out:#?}");
            let writer = env.json(&["agent", "show", "writer"]);
            assert_eq!(writer["env"], "computer", "{writer}");
            assert_eq!(writer["manage_team"], false, "{writer}");
            let team = env.json(&["team", "show", "reports"]);
            assert_eq!(team["admin"], "builder", "{team}");
        } else if line.starts_with("yy goal list") {
            // The goal's id is the first column of the table's only row.
            let rows: Vec<&str> = out.stdout.lines().skip(1).collect();
            assert_eq!(rows.len(), 1, "{out:#?}");
            goal = rows[0].split_whitespace().next().unwrap().to_string();
            let g = show(&goal);
            assert_eq!(g["title"], "Quarterly report", "{g:#}");
            assert_eq!(g["admin"], "builder", "{g:#}");
        } else if line.starts_with("yy goal watch") {
            let goal_lines: Vec<&str> = out
                .stdout
                .lines()
                .filter(|l| l.split(' ').nth(1) == Some("goal"))
                .collect();
            assert!(
                goal_lines
                    .last()
                    .is_some_and(|l| l.contains(" waiting_user ")),
                "{out:#?}"
            );
            assert!(
                out.stdout
                    .lines()
                    .any(|l| l.contains(" subtask ") && l.contains(" accepted ")),
                "{out:#?}"
            );
            let g = show(&goal);
            assert_eq!(g["state"], "waiting_user", "{g:#}");
            assert!(
                g["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("the admin asks: report.txt is accepted")),
                "{g:#}"
            );
        } else if line.starts_with("yy subtask list") {
            assert!(out.stdout.contains("accepted"), "{out:#?}");
            let subs = env.json(&["subtask", "list", "--goal", &goal]);
            let subs = subs.as_array().unwrap();
            assert_eq!(subs.len(), 1, "{subs:#?}");
            assert_eq!(subs[0]["owner"], "writer");
            assert_eq!(subs[0]["state"], "accepted");
            let result = &subs[0]["result"];
            assert_eq!(result["turn_state"], "complete", "{result:#}");
            assert_eq!(
                result["text"],
                "report.txt has the revenue, the costs and the profit; exported."
            );
            // The member's exported file is the result's artifact.
            let artifact = &result["artifacts"][0];
            assert_eq!(artifact["name"], "report.txt", "{result:#}");
            let file = env.path("quarterly.txt");
            env.run(&[
                "artifact",
                "get",
                artifact["id"].as_str().unwrap(),
                "-o",
                file.to_str().unwrap(),
            ])
            .ok();
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                "Quarterly report\nrevenue: 120\ncosts: 80\nprofit: 40\n"
            );
        } else if line.starts_with("yy goal stop") {
            assert_eq!(show(&goal)["state"], "stopped");
        } else if line.starts_with("yy goal resume") {
            let g = show(&goal);
            assert_eq!(g["generation"], 2, "{g:#}");
        }
    }
    // The resume was the go-ahead: builder completes the goal, and both results (the
    // question, then the completion) come back to the chat's session, answered there.
    let (g, answers) = wait_for(
        Duration::from_secs(300),
        "the goal to complete and both of its results to be answered",
        || {
            let g = env.json(&["goal", "show", &goal]);
            let state = g["state"].as_str().unwrap();
            assert!(["active", "completed"].contains(&state), "{g:#}");
            let s = env.json(&["session", "show", g["origin_session_id"].as_str()?]);
            let answers: Vec<String> = s["turns"]
                .as_array()?
                .iter()
                .filter(|t| {
                    t["state"] == "complete"
                        && t["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("[yy goal result]"))
                })
                .map(|t| t["final_text"].as_str().unwrap_or_default().to_string())
                .collect();
            (state == "completed" && answers.len() == 2).then_some((g, answers))
        },
    );
    let summary = "The quarterly report is in report.txt, written by writer.";
    assert_eq!(g["summary"], summary, "{g:#}");
    let delivered = g["deliveries"].as_array().unwrap();
    assert_eq!(delivered.len(), 2, "{g:#}");
    assert!(delivered.iter().all(|d| d["state"] == "delivered"), "{g:#}");
    assert_eq!(
        answers,
        [
            "The goal waits for your go-ahead: yy goal resume.",
            "The quarterly report is ready: report.txt."
        ]
    );
}

/// A long host turn in the background, stopped from "another terminal" by its session id
/// (the first line `yy chat` writes on stderr): interrupted on the Runner, and confirmed.
fn stop_a_long_turn(
    env: &Env,
    model: &common::hermes::FakeModel,
    lines: &[String],
    runner_dir: &std::path::Path,
) {
    let [chat, stop] = lines else {
        panic!("the README's stop example changed: {lines:?}");
    };
    let chat = chat.replace("/srv/yy-runner", runner_dir.to_str().unwrap());
    let words = shell_words::split(&chat).unwrap();
    let mut child = env
        .command(&words[1..].iter().map(String::as_str).collect::<Vec<_>>())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = common::lines_of(child.stderr.take().unwrap());
    let mut chat_proc = common::Bg(Some(child));
    let first = stderr
        .recv_timeout(Duration::from_secs(60))
        .expect("yy chat names its session");
    let session = first
        .strip_prefix("session ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    // Stopped while the model answers, slowly (the script's delay): the turn runs.
    wait_for(
        Duration::from_secs(120),
        "the long turn's model call",
        || {
            model
                .steps()
                .iter()
                .any(|r| {
                    r["step"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("review every file under#"))
                })
                .then_some(())
        },
    );
    let stop = stop.replace("<SESSION-ID>", &session);
    let words = shell_words::split(&stop).unwrap();
    let out = env.run(&words[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.code, 0, "the README's `{stop}` failed: {out:#?}");
    assert!(
        out.stdout
            .starts_with(&format!("session {session} stopped")),
        "{out:#?}"
    );
    let child = chat_proc.0.as_mut().unwrap();
    let status = wait_for(Duration::from_secs(60), "the stopped chat to end", || {
        child.try_wait().unwrap()
    });
    let said: Vec<String> = stderr.try_iter().collect();
    assert_eq!(status.code(), Some(1), "{said:?}");
    assert!(
        said.iter().any(|l| l.contains("the turn was interrupted")),
        "{said:?}"
    );
    let s = env.json(&["session", "show", &session]);
    assert_eq!(s["turns"][0]["state"], "interrupted", "{s:#}");
}

/// `yy ARGS`, failing the test if it has not ended within `limit` (it is killed then).
fn run_within(env: &Env, args: &[&str], limit: Duration) -> common::Out {
    let (out, err) = (env.path("run-within.out"), env.path("run-within.err"));
    let child = env
        .command(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut bg = common::Bg(Some(child));
    let child = bg.0.as_mut().unwrap();
    let status = wait_for(limit, &format!("`yy {}` to end", args.join(" ")), || {
        child.try_wait().unwrap()
    });
    common::Out {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
    }
}

/// The image the walkthrough built: removed (with the containers made from it) when the
/// test ends.
struct BuiltImage(String);

impl Drop for BuiltImage {
    fn drop(&mut self) {
        self.remove_containers();
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .output();
    }
}

impl BuiltImage {
    fn remove_containers(&self) {
        let filter = format!("ancestor={}", self.0);
        if let Ok(out) = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        {
            let ids = String::from_utf8_lossy(&out.stdout).to_string();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", "-v"])
                    .args(&ids)
                    .output();
            }
        }
    }
}
