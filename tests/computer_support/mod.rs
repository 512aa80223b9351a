//! Shared by tests/computer.rs: the cached test image, computer fixtures and helpers.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use sha2::{Digest, Sha256};
use yy::computer::docker::Provider;
use yy::computer::session::GuestSession;
use yy::computer::{ComputerError, ComputerSpec, Limits};

use crate::common::{BIN, Env, Registered, RunnerProc, Server};

pub const TAG: &str = "yy-computer:test";

/// The tag of the shared test image: `YY_TEST_IMAGE_TAG` lets parallel checkouts (each with
/// its own yy binary) keep their own image instead of rebuilding and removing each other's.
pub fn tag() -> String {
    std::env::var("YY_TEST_IMAGE_TAG").unwrap_or_else(|_| TAG.to_string())
}

pub struct TestImage {
    pub id: String,
    /// The imported root filesystem alone: no user, no guest agent.
    pub base: String,
}

/// Runs an engine's CLI (`docker`, `podman`) and waits.
pub fn engine_cli(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run the {program} CLI: {e}"))
}

/// Runs an engine's CLI, which must succeed; its trimmed stdout.
pub fn engine_cli_ok(program: &str, args: &[&str]) -> String {
    let out = engine_cli(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn docker(args: &[&str]) -> std::process::Output {
    engine_cli("docker", args)
}

pub fn docker_ok(args: &[&str]) -> String {
    engine_cli_ok("docker", args)
}

pub fn binary_digest() -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(std::fs::read(BIN).unwrap()))
    )
}

/// Builds the test image unless the tagged one already carries this binary.
pub fn test_image() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| build_test_image(&tag()))
}

/// The test image under `tag` (a test binary that runs while other worktrees' tests use
/// [`TAG`] can keep its own), built unless the tagged one already carries this binary.
pub fn build_test_image(tag: &str) -> TestImage {
    {
        // Test binaries run side by side (scripts/run-tests.sh): one builds a stale image,
        // the others wait for it and then find it fresh.
        let lock_path = std::env::temp_dir().join(format!(
            "yy-test-image-{}.lock",
            tag.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ));
        let lock = std::fs::File::create(&lock_path).expect("create the test image lock");
        lock.lock().expect("lock the test image");
        let want = binary_digest();
        let have = docker(&[
            "image",
            "inspect",
            "--format",
            "{{index .Config.Labels \"yy.binary\"}} {{.Id}}",
            tag,
        ]);
        let text = String::from_utf8_lossy(&have.stdout).trim().to_string();
        let id = match text.split_once(' ') {
            Some((digest, id)) if have.status.success() && digest == want => id.to_string(),
            _ => {
                let env = Env::new();
                let lock = env.path("packages.lock");
                let started = Instant::now();
                let out = env.run(&[
                    "image",
                    "build",
                    "--binary",
                    BIN,
                    "--tag",
                    tag,
                    "--lock",
                    lock.to_str().unwrap(),
                ]);
                assert_eq!(out.code, 0, "image build failed: {out:#?}");
                eprintln!(
                    "built the test image in {:.1}s",
                    started.elapsed().as_secs_f64()
                );
                let lock_text = std::fs::read_to_string(&lock).unwrap();
                assert!(
                    lock_text.lines().any(|l| l.starts_with("python3=")),
                    "{lock_text}"
                );
                let id = out.stdout.lines().last().unwrap().to_string();
                // The previous test image (if any) is stale now; free its space.
                if let Some((_, old)) = text.split_once(' ')
                    && old != id
                {
                    let _ = docker(&["rmi", old]);
                }
                id
            }
        };
        assert!(id.starts_with("sha256:") && id.len() == 71, "{id}");
        // Committed on top of the imported root filesystem, which is its parent.
        let base = docker_ok(&["image", "inspect", "--format", "{{.Parent}}", &id]);
        assert!(base.starts_with("sha256:"), "no parent image: {base:?}");
        let labels = docker_ok(&[
            "image",
            "inspect",
            "--format",
            "{{json .Config.Labels}}",
            &base,
        ]);
        assert!(
            !labels.contains("yy.version"),
            "the parent is not a bare base: {labels}"
        );
        TestImage { id, base }
    }
}

/// A computer's spec with a fresh workspace under /var/tmp/yy/test-ws; removes what it
/// made when dropped.
pub struct Fixture {
    pub spec: ComputerSpec,
}

impl Fixture {
    pub fn new(image: &str) -> Fixture {
        let run = uuid::Uuid::new_v4().simple().to_string();
        Fixture {
            spec: ComputerSpec {
                owner_key: format!("acct-{}/agent", &run[..8]),
                runner_id: format!("runner-{}", &run[..8]),
                computer_id: format!("comp-{}", &run[..8]),
                agent_id: "agent".into(),
                account_id: format!("acct-{}", &run[..8]),
                image_id: image.into(),
                generation: 1,
                workspace_host_dir: PathBuf::from("/var/tmp/yy/test-ws").join(&run),
                guest_cwd: "/workspace".into(),
                limits: Limits {
                    memory_bytes: 512 << 20,
                    nano_cpus: 500_000_000,
                    pids: 128,
                    tmp_bytes: 64 << 20,
                    home_bytes: 32 << 20,
                },
                network: Default::default(),
            },
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.spec.name()]);
        let _ = std::fs::remove_dir_all(&self.spec.workspace_host_dir);
    }
}

pub async fn launch(f: &Fixture) -> (Provider, String, GuestSession) {
    let p = Provider::connect().await.unwrap();
    let (created, session) = p.launch(&f.spec).await.unwrap();
    (p, created.id, session)
}

pub fn op_code(e: ComputerError) -> String {
    match e {
        ComputerError::Op { code, .. } => code,
        other => panic!("expected a refused operation, got {other}"),
    }
}

/// A control plane, computer agents `a1`..`aN`, and a Runner (data directory `a`) with
/// computers enabled and `runner_args`. Fields drop in order: the Runner stops first (its
/// computers go with it) while its control plane still answers, and the environment, which
/// removes whatever is left in its directory, last.
pub struct ComputerSetup {
    pub runner: RunnerProc,
    pub server: Server,
    pub reg: Registered,
    pub env: Env,
}

/// [`ComputerSetup`], or `None` where Docker is missing outside CI.
pub fn computer_setup(agents: usize, runner_args: &[&str]) -> Option<ComputerSetup> {
    if !crate::common::require_docker() {
        return None;
    }
    let image = test_image().id.clone();
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &["--computer-image", &image]);
    for i in 1..=agents {
        env.run(&[
            "agent",
            "create",
            &format!("a{i}"),
            "--profile",
            "default",
            "--env",
            "computer",
        ])
        .ok();
    }
    let runner = env.start_runner_with(&reg, "a", runner_args);
    env.wait_online(&reg.id, 0);
    Some(ComputerSetup {
        runner,
        server,
        reg,
        env,
    })
}
