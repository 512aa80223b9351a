//! Hermes fixtures: the scripted fake model server (tests/fixtures/fake_model_server.py)
//! and an offline HERMES_HOME for it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

const FAKE_MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/fake_model_server.py"
);

/// The scripted fake model server; killed when dropped.
pub struct FakeModel {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl FakeModel {
    /// Starts the server with `steps` (see the fixture) in `dir`.
    pub fn start(dir: &Path, steps: Value) -> FakeModel {
        std::fs::create_dir_all(dir).unwrap();
        let script = dir.join("script.json");
        std::fs::write(&script, steps.to_string()).unwrap();
        let log = dir.join("requests.jsonl");
        let mut child = Command::new("python3")
            .args([FAKE_MODEL, "--port", "0", "--script"])
            .arg(&script)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the fake model server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        FakeModel { child, port, log }
    }

    /// Every request the server logged. A line the server is still writing (no newline
    /// yet) is not one yet.
    pub fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect()
    }

    /// The requests that consumed a script step.
    pub fn steps(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["kind"] == "step")
            .collect()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HERMES_HOME/config.yaml for an offline Hermes talking to the fake model on `model_port`,
/// with approvals `approvals` ("off", "manual", ...) and `extra` YAML appended.
pub fn write_config(home: &Path, model_port: u16, work: &Path, approvals: &str, extra: &str) {
    std::fs::create_dir_all(home).unwrap();
    std::fs::create_dir_all(work).unwrap();
    let yaml = format!(
        r#"model:
  default: fake-model
  provider: custom
  base_url: http://127.0.0.1:{model_port}/v1
  api_key: sk-fake-test
  api_mode: chat_completions
  context_length: 131072
approvals:
  mode: "{approvals}"
security:
  tirith_enabled: false
  allow_lazy_installs: false
model_catalog:
  enabled: false
terminal:
  backend: local
  cwd: {work}
  timeout: 60
agent:
  api_max_retries: 1
{extra}"#,
        work = work.display()
    );
    std::fs::write(home.join("config.yaml"), yaml).unwrap();
}

/// A control plane, a computer agent `box`, and a Runner with computers (from `image`)
/// and the Worker, whose profile talks to a fake model playing `script`. Fields drop in
/// order: the Runner stops first (its computers go with it), the environment, which
/// removes whatever is left in its directory, last.
pub struct WorkerSetup {
    pub runner: super::RunnerProc,
    pub model: FakeModel,
    pub server: super::Server,
    pub reg: super::Registered,
    /// The model key in the profile's config: it must reach nothing but the model.
    pub key: String,
    pub env: super::Env,
}

/// [`WorkerSetup`], or `None` where Hermes or Docker is missing outside CI (see
/// `require_hermes`, `require_docker`). `image` is only asked for when both are there.
pub fn worker_setup(image: impl FnOnce() -> String, script: Value) -> Option<WorkerSetup> {
    worker_setup_with(image, script, &[])
}

/// [`worker_setup`] with extra `yy runner run` arguments.
pub fn worker_setup_with(
    image: impl FnOnce() -> String,
    script: Value,
    runner_args: &[&str],
) -> Option<WorkerSetup> {
    let hermes = super::require_hermes()?;
    if !super::require_docker() {
        return None;
    }
    let image = image();
    let env = super::Env::new();
    let server = env.bootstrap();
    let model = FakeModel::start(&env.path("model"), script);
    let key = format!("sk-canary-{}", uuid::Uuid::new_v4().simple());
    let home = env.path("hermes-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "model:\n  default: fake-model\n  provider: custom\n  base_url: http://127.0.0.1:{}/v1\n  api_key: {key}\n  api_mode: chat_completions\n",
            model.port
        ),
    )
    .unwrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &image]);
    let python = hermes.parent().unwrap().join("python");
    super::configure(
        &reg,
        serde_json::json!({ "hermesHome": home, "workerPython": python }),
    );
    env.run(&[
        "agent",
        "create",
        "box",
        "--profile",
        "default",
        "--env",
        "computer",
    ])
    .ok();
    let runner = env.start_runner_with(&reg, "a", runner_args);
    env.wait_online(&reg.id, 0);
    Some(WorkerSetup {
        env,
        server,
        reg,
        runner,
        model,
        key,
    })
}
