//! The README's walkthrough and the CLI must not drift apart: every `yy` command of the
//! fenced `sh` blocks of "Five minutes with yy" is parsed, verbatim (placeholders such as
//! `<RUNNER-ID>` filled in), by this yy's own command line, and steps 1-7 run in order
//! against a fresh data directory: the control plane, the Runner with its supervised Hermes
//! (the README's offline config block, the scripted model), the chat and the fetch of the
//! file it wrote. Only paths, the server's address, the model's port and the ids are
//! substituted. Steps 8-9 build the
//! computer image with the test's own (dynamically linked) yy, as the README's `cargo
//! build --release` yy would be, and run the computer agent's turn on the real Docker
//! engine.

mod common;

use common::{Env, PASSWORD};

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
