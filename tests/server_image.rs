//! The control plane as a container built the yy way (`yy image build --recipe server`):
//! non-root, read-only root filesystem, data on a volume, HTTPS with its own certificate;
//! a Runner on the host connects to it over a Docker network the test makes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{BIN, Env, PASSWORD, wait_for};

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("run docker")
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the test made in Docker, removed at the end whatever happened.
struct Made {
    name: String,
}

impl Drop for Made {
    fn drop(&mut self) {
        let n = &self.name;
        let _ = docker(&["rm", "-f", "-v", n]);
        let _ = docker(&["volume", "rm", "-f", n]);
        let _ = docker(&["network", "rm", n]);
        let _ = docker(&[
            "rmi",
            "-f",
            &format!("yy-server-test:{}", std::process::id()),
        ]);
    }
}

#[test]
fn the_server_image_starts_and_a_runner_connects_over_https() {
    if docker(&["version"]).status.code() != Some(0) {
        assert!(std::env::var_os("CI").is_none(), "Docker is required in CI");
        eprintln!("skipping: no Docker engine");
        return;
    }
    let env = Env::new();
    let tag = format!("yy-server-test:{}", std::process::id());
    let made = Made {
        name: format!("yy-server-test-{}", std::process::id()),
    };
    let name = made.name.as_str();
    let lock = env.path("server.lock");
    let out = env.run(&[
        "image",
        "build",
        "--recipe",
        "server",
        "--binary",
        BIN,
        "--tag",
        &tag,
        "--lock",
        lock.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:#?}");

    docker_ok(&["network", "create", name]);
    docker_ok(&["volume", "create", name]);
    let volume = format!("{name}:/var/lib/yy");
    // The first admin, made in the data volume by the image's own yy.
    let mut admin = Command::new("docker")
        .args(["run", "--rm", "-i", "--read-only", "-v", &volume, &tag])
        .args(["admin", "create", "--username", "root", "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    admin
        .stdin
        .take()
        .unwrap()
        .write_all(PASSWORD.as_bytes())
        .unwrap();
    let admin = admin.wait_with_output().unwrap();
    assert!(admin.status.success(), "{admin:?}");

    docker_ok(&[
        "run",
        "-d",
        "--name",
        name,
        "--network",
        name,
        "--read-only",
        "--tmpfs",
        "/tmp",
        "-v",
        &volume,
        &tag,
    ]);
    let pin = wait_for(
        Duration::from_secs(20),
        "the fingerprint in the log",
        || {
            let logs = docker(&["logs", name]);
            let text = String::from_utf8_lossy(&logs.stdout).to_string();
            text.lines()
                .find_map(|l| l.strip_prefix("certificate SHA-256 "))
                .map(str::to_string)
        },
    );
    let config = docker_ok(&[
        "inspect",
        "--format",
        "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}",
        name,
    ]);
    assert_eq!(config, "1000:1000 true");
    assert_eq!(docker_ok(&["exec", name, "id", "-u"]), "1000");
    let ip = docker_ok(&[
        "inspect",
        "--format",
        &format!("{{{{(index .NetworkSettings.Networks \"{name}\").IPAddress}}}}"),
        name,
    ]);
    let url = format!("https://{ip}:8420");

    env.run_with(
        &[
            "login",
            &url,
            "--username",
            "root",
            "--password-stdin",
            "--cert-sha256",
            &pin,
        ],
        PASSWORD,
        &[],
    )
    .ok();
    let reg = env.register_runner_at(&url, "main", &[]);
    let runner_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reg.config).unwrap()).unwrap();
    assert_eq!(runner_json["serverCertSha256"], pin.as_str());
    let (_runner, _generation) = env.start_online(&reg, "a", 0);
    let ping = env.json(&["runner", "ping", &reg.id]);
    assert_eq!(ping["summary"]["answered"], 1, "{ping}");
    // The data lives on the volume: the database is there, owned by the image's user.
    let listing = docker_ok(&["exec", name, "ls", "-ln", "/var/lib/yy/data"]);
    assert!(listing.contains(" 1000 1000 "), "{listing}");
}
