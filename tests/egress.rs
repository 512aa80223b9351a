//! The controlled public network end to end: `yy runner register --network public-web` →
//! a real Runner → the egress proxy container → a real `public-web` computer, all on a real
//! Docker engine.
//!
//! The "public web" is the test's own: a Docker network it creates (`internal`, so no
//! packet leaves the host, and with no address on the host bridge) whose subnet is public
//! address space, so the proxy treats it as public without any test switch in the product.
//! On it, one container of the test image answers DNS (UDP 53) and HTTP (ports 80 and 443,
//! tests/fixtures/egress_world.py). The Runner's proxy reaches out through that network
//! only (`--egress-network`) and resolves through that DNS (`--egress-dns`). Refused
//! destinations are refused by classification, before any packet is sent.

mod common;
mod computer_support;

use std::net::IpAddr;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use common::{Env, Registered, RunnerProc, Server, wait_for};
use computer_support::{TestImage, build_test_image, docker, docker_ok};
use serde_json::Value;

/// This test binary's own image tag, so other test binaries' images are left alone.
const TAG: &str = "yy-computer:egress-test";

fn image() -> &'static TestImage {
    static IMAGE: OnceLock<TestImage> = OnceLock::new();
    IMAGE.get_or_init(|| build_test_image(TAG))
}

fn rand_u8() -> u8 {
    uuid::Uuid::new_v4().as_bytes()[0] % 200 + 20
}

/// The test's world: its network and its DNS + web server. Removed when dropped, with
/// everything the Runner left on the engine (proxy, computer networks).
struct World {
    network: String,
    server: String,
    /// The server's address (public address space, inside the test's network only).
    ip: String,
    runner_id: Option<String>,
}

impl World {
    fn start(image: &str) -> World {
        let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
        let network = format!("yy-test-world-{tag}");
        // 100.128.0.0/16 lies just past CGNAT's 100.64.0.0/10: public space, used here only
        // inside an internal network of this host.
        let octet = rand_u8();
        let subnet = format!("100.128.{octet}.0/24");
        let ip = format!("100.128.{octet}.10");
        docker_ok(&[
            "network",
            "create",
            "--internal",
            "-o",
            "com.docker.network.bridge.inhibit_ipv4=true",
            "--subnet",
            &subnet,
            &network,
        ]);
        let server = format!("yy-test-world-srv-{tag}");
        let answers = serde_json::json!({
            "site.test": [ip],
            "mixed.test": [ip, "10.0.0.5"],
            "private.test": ["192.168.77.1"],
        })
        .to_string();
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let world = World {
            network,
            server,
            ip,
            runner_id: None,
        };
        docker_ok(&[
            "run",
            "-d",
            "--name",
            &world.server,
            "--network",
            &world.network,
            "--ip",
            &world.ip,
            "--user",
            "0",
            "-v",
            &format!("{fixtures}:/fixtures:ro"),
            "--entrypoint",
            "python3",
            image,
            "/fixtures/egress_world.py",
            &answers,
        ]);
        wait_for(Duration::from_secs(20), "the test world", || {
            let logs = docker(&["logs", &world.server]);
            String::from_utf8_lossy(&logs.stdout)
                .contains("ready")
                .then_some(())
        });
        world
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(r) = &self.runner_id {
            let label = format!("label=yy.runner={r}");
            let ids = docker(&["ps", "-aq", "--filter", &label]);
            for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                let _ = docker(&["rm", "-f", id]);
            }
            let nets = docker(&["network", "ls", "-q", "--filter", &label]);
            for id in String::from_utf8_lossy(&nets.stdout).split_whitespace() {
                let _ = docker(&["network", "rm", id]);
            }
        }
        let _ = docker(&["rm", "-f", &self.server]);
        let _ = docker(&["network", "rm", &self.network]);
    }
}

fn start_runner(env: &Env, reg: &Registered, world: &World) -> RunnerProc {
    let log = env.path("runner-egress.log");
    let child = env
        .command(&[
            "runner",
            "run",
            "--config",
            reg.config.to_str().unwrap(),
            "--data-dir",
            env.path("runner-data").to_str().unwrap(),
            "--shutdown-grace",
            "5s",
            "--metrics-listen",
            "off",
            "--egress-network",
            &world.network,
            "--egress-dns",
            &world.ip,
        ])
        .env("YY_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn yy runner run");
    RunnerProc { child, log }
}

/// Runs `argv` in the computer as its user (through the guest agent) and returns the exit
/// code and stdout.
fn exec(env: &Env, computer: &str, argv: &[&str]) -> (i64, String, String) {
    let mut args = vec!["computer", "exec", computer, "--json", "--"];
    args.extend_from_slice(argv);
    let out = env.run(&args);
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("exec {argv:?}: not JSON ({e}): {out:#?}"));
    (
        v["exit_code"].as_i64().unwrap_or(-1),
        v["stdout"].as_str().unwrap_or_default().to_string(),
        v["stderr"].as_str().unwrap_or_default().to_string(),
    )
}

/// `curl` in the computer: HTTP status (000 when no response) and the verdict header.
fn curl(env: &Env, computer: &str, extra: &[&str], url: &str) -> (String, String) {
    let mut argv = vec![
        "curl",
        "-sS",
        "-m",
        "10",
        "-o",
        "/dev/null",
        "-D",
        "/tmp/headers",
        "-w",
        "%{http_code}",
    ];
    argv.extend_from_slice(extra);
    argv.push(url);
    let (_, status, _) = exec(env, computer, &argv);
    let (_, headers, _) = exec(env, computer, &["cat", "/tmp/headers"]);
    let verdict = headers
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-yy-egress-verdict:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    (status.trim().to_string(), verdict)
}

fn host_ipv4() -> IpAddr {
    yy::egress::interface_addresses()
        .unwrap()
        .into_iter()
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .expect("the host has a non-loopback IPv4 address")
}

#[test]
fn a_public_web_computer_reaches_the_public_web_through_the_proxy_and_nothing_else() {
    if !common::require_docker() {
        return;
    }
    let image = image().id.clone();
    let mut world = World::start(&image);
    let env = Env::new();
    let server: Server = env.bootstrap();
    let reg = env.register_runner(
        &server,
        "main",
        &["--computer-image", &image, "--network", "public-web"],
    );
    world.runner_id = Some(reg.id.clone());
    let shown = env.json(&["runner", "show", &reg.id]);
    assert_eq!(shown["network"], "public-web", "{shown}");
    for agent in ["web", "offline"] {
        env.run(&[
            "agent",
            "create",
            agent,
            "--profile",
            "default",
            "--env",
            "computer",
        ])
        .ok();
    }
    let runner = start_runner(&env, &reg, &world);
    env.wait_online(&reg.id, 0);
    let shown = env.json(&["runner", "show", &reg.id]);
    assert!(
        shown["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "egress-v1"),
        "{shown}"
    );

    let c = env.json(&["computer", "create", "--agent", "web"]);
    assert_eq!(c["state"], "running", "{c}\n{}", runner.log());
    assert_eq!(c["network"], "public-web");
    let id = c["id"].as_str().unwrap().to_string();
    let container = c["container_id"].as_str().unwrap().to_string();
    let text = env.run(&["computer", "show", &id]);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("network:") && l.contains("public-web")),
        "{}",
        text.stdout
    );

    // The computer sits on its own internal network only, with the proxy settings.
    let net = format!("yy-egress-net-{id}");
    let inspect: Value = serde_json::from_str(&docker_ok(&["inspect", &container])).unwrap();
    let ci = &inspect[0];
    assert_eq!(ci["HostConfig"]["NetworkMode"], net.as_str());
    let networks: Vec<&String> = ci["NetworkSettings"]["Networks"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(networks, vec![&net]);
    let env_vars: Vec<&str> = ci["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let proxy_url = env_vars
        .iter()
        .find_map(|v| v.strip_prefix("HTTPS_PROXY="))
        .expect("HTTPS_PROXY is set")
        .to_string();
    assert!(env_vars.contains(&format!("HTTP_PROXY={proxy_url}").as_str()));
    assert!(env_vars.contains(&format!("http_proxy={proxy_url}").as_str()));
    let netinfo: Value = serde_json::from_str(&docker_ok(&["network", "inspect", &net])).unwrap();
    assert_eq!(netinfo[0]["Internal"], true);
    assert_eq!(
        netinfo[0]["Options"]["com.docker.network.bridge.inhibit_ipv4"],
        "true"
    );
    // Its members: the computer and the proxy, nothing else.
    let proxy_name = format!("yy-egress-proxy-{}", reg.id);
    let mut members: Vec<String> = netinfo[0]["Containers"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c["Name"].as_str().unwrap().to_string())
        .collect();
    members.sort();
    let cname = ci["Name"]
        .as_str()
        .unwrap()
        .trim_start_matches('/')
        .to_string();
    let mut want = vec![proxy_name.clone(), cname];
    want.sort();
    assert_eq!(members, want);

    // The proxy runs hardened, from the computer image, on the world and the computer's net.
    let pi: Value = serde_json::from_str(&docker_ok(&["inspect", &proxy_name])).unwrap();
    let pi = &pi[0];
    assert_eq!(pi["Image"], image.as_str());
    assert_eq!(pi["Config"]["User"], "1000:1000");
    assert_eq!(pi["HostConfig"]["ReadonlyRootfs"], true);
    assert_eq!(pi["HostConfig"]["CapDrop"], serde_json::json!(["ALL"]));
    assert_eq!(
        pi["HostConfig"]["SecurityOpt"],
        serde_json::json!(["no-new-privileges"])
    );
    assert!(pi["Mounts"].as_array().unwrap().is_empty());
    let mut pnets: Vec<&String> = pi["NetworkSettings"]["Networks"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    pnets.sort();
    let mut want_nets = vec![&world.network, &net];
    want_nets.sort();
    assert_eq!(pnets, want_nets);

    // Through the proxy: absolute-form http:// to 80, and CONNECT to 443 (curl tunnels a
    // plain HTTP request with -p; the test server speaks HTTP on 443).
    let (code, out, err) = exec(
        &env,
        &id,
        &["curl", "-sS", "-m", "10", "http://site.test/page"],
    );
    assert_eq!(code, 0, "{err}\n{}", runner.log());
    assert_eq!(out, "hello from the test world: /page on port 80\n");
    let (code, out, err) = exec(
        &env,
        &id,
        &[
            "curl",
            "-sS",
            "-m",
            "10",
            "-p",
            "http://site.test:443/tunnel",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello from the test world: /tunnel on port 443\n");

    // Refusals: 403 with the verdict header, and never a connection.
    let host = host_ipv4().to_string();
    // ::1 is the host's (the proxy container has no IPv6), 127.0.0.1 the proxy's own.
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "mixed answer",
            "http://mixed.test/".into(),
            &["mixed-dns-answer"],
        ),
        ("private name", "http://private.test/".into(), &["private"]),
        ("private literal", "http://10.1.2.3/".into(), &["private"]),
        (
            "the proxy's loopback",
            "http://127.0.0.1/".into(),
            &["self-address"],
        ),
        ("loopback", "http://127.0.0.2/".into(), &["loopback"]),
        (
            "IPv6 loopback",
            "http://[::1]/".into(),
            &["host-address", "self-address", "loopback"],
        ),
        (
            "embedded IPv4",
            "http://[::ffff:a00:1]/".into(),
            &["ipv6-embedding"],
        ),
        (
            "metadata",
            "http://169.254.169.254/latest/".into(),
            &["metadata"],
        ),
        ("hex metadata", "http://0xa9fea9fe/".into(), &["metadata"]),
        ("the host", format!("http://{host}/"), &["host-address"]),
        (
            "port 22",
            "http://site.test:22/".into(),
            &["port-not-allowed"],
        ),
    ];
    for (what, url, verdict) in &cases {
        let (status, got) = curl(&env, &id, &["--noproxy", ""], url);
        assert_eq!(status, "403", "{what}: {url}");
        assert!(verdict.contains(&got.as_str()), "{what}: {url}: {got}");
    }
    // CONNECT to 22 (what ssh through the proxy would need) is refused too.
    let (code, _, err) = exec(
        &env,
        &id,
        &["curl", "-sS", "-m", "10", "-p", "http://site.test:22/"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("403"), "{err}");

    // A program that ignores the proxy has no route: not to the world, not to the host.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let gateway = docker_ok(&[
        "network",
        "inspect",
        "bridge",
        "--format",
        "{{(index .IPAM.Config 0).Gateway}}",
    ]);
    for target in [
        format!("http://{}/", world.ip),
        format!("http://{host}:{port}/"),
        format!("http://{gateway}:{port}/"),
    ] {
        let (code, out, err) = exec(
            &env,
            &id,
            &["curl", "-sS", "-m", "3", "--noproxy", "*", &target],
        );
        assert_ne!(code, 0, "{target} was reachable without the proxy: {out}");
        assert!(!err.is_empty());
    }
    drop(listener);
    // Its interfaces: loopback and its one network, and no IPv6 address at all.
    let (_, dev, _) = exec(&env, &id, &["cat", "/proc/net/dev"]);
    let mut ifaces: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    ifaces.sort();
    assert_eq!(ifaces, vec!["eth0", "lo"], "{dev}");
    let (_, inet6, _) = exec(&env, &id, &["cat", "/proc/net/if_inet6"]);
    assert_eq!(inet6.trim(), "", "IPv6 addresses in a public-web computer");

    // The operator's view: the decisions, named by computer.
    let log = env.json(&["runner", "egress-log", &reg.id, "--computer", &id[..8]]);
    let decisions = log["decisions"].as_array().unwrap();
    let find = |verdict: &str, host: &str| {
        decisions
            .iter()
            .find(|d| d["verdict"] == verdict && d["host"] == host)
            .unwrap_or_else(|| panic!("no {verdict} decision for {host}: {log:#}"))
    };
    let allowed = find("public", "site.test");
    assert_eq!(allowed["allowed"], true);
    assert_eq!(allowed["address"], world.ip.as_str());
    assert_eq!(allowed["computer"], id.as_str());
    let connect = decisions
        .iter()
        .find(|d| d["method"] == "CONNECT" && d["port"] == 443)
        .expect("the CONNECT decision");
    assert_eq!(connect["verdict"], "public");
    let mixed = find("mixed-dns-answer", "mixed.test");
    assert_eq!(mixed["allowed"], false);
    assert_eq!(mixed["address"], "10.0.0.5");
    find("port-not-allowed", "site.test");
    find("host-address", &host);
    let text = env.run(&["runner", "egress-log", &reg.id]);
    text.ok();
    assert!(text.stdout.contains("mixed-dns-answer"), "{}", text.stdout);
    env.run(&["runner", "egress-log", &reg.id, "--computer", "ffffffff"])
        .fails(5, "no computer");

    // The proxy crashes: Docker restarts it in place, and the computer's way out and the
    // decision log come back without a new start.
    let restarts = |name: &str| docker_ok(&["inspect", "--format", "{{.RestartCount}}", name]);
    assert_eq!(restarts(&proxy_name), "0");
    docker_ok(&["exec", &proxy_name, "pkill", "-KILL", "-f", "egress serve"]);
    wait_for(Duration::from_secs(30), "the proxy restarted", || {
        (restarts(&proxy_name) == "1"
            && docker_ok(&["inspect", "--format", "{{.State.Running}}", &proxy_name]) == "true")
            .then_some(())
    });
    let out = wait_for(Duration::from_secs(30), "the web again", || {
        let (code, out, _) = exec(
            &env,
            &id,
            &["curl", "-sS", "-m", "5", "http://site.test/again"],
        );
        (code == 0).then_some(out)
    });
    assert_eq!(out, "hello from the test world: /again on port 80\n");
    wait_for(
        Duration::from_secs(10),
        "the decision after the restart",
        || {
            let log = env.json(&["runner", "egress-log", &reg.id, "--limit", "5"]);
            log["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| {
                    d["host"] == "site.test"
                        && d["computer"] == id.as_str()
                        && d["verdict"] == "public"
                })
                .then_some(())
        },
    );
    let before = env.json(&["runner", "egress-log", &reg.id])["decisions"]
        .as_array()
        .unwrap()
        .len();
    assert!(before > 10, "decisions from before the restart were kept");

    // Back to none: the next computer has loopback only, and stopping the public-web one
    // removes its network.
    let updated = env.json(&["runner", "update", &reg.id, "--network", "none"]);
    assert_eq!(updated["network"], "none");
    let off = env.json(&["computer", "create", "--agent", "offline"]);
    assert_eq!(off["state"], "running", "{off}\n{}", runner.log());
    assert_eq!(off["network"], "none");
    let off_id = off["id"].as_str().unwrap().to_string();
    let mode = docker_ok(&[
        "inspect",
        "--format",
        "{{.HostConfig.NetworkMode}}",
        off["container_id"].as_str().unwrap(),
    ]);
    assert_eq!(mode, "none");
    let (_, dev, _) = exec(&env, &off_id, &["cat", "/proc/net/dev"]);
    let ifaces: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, vec!["lo"], "{dev}");
    let (_, env_out, _) = exec(&env, &off_id, &["env"]);
    assert!(
        !env_out.to_ascii_lowercase().contains("_proxy="),
        "{env_out}"
    );

    env.json(&["computer", "stop", &id]);
    wait_for(
        Duration::from_secs(30),
        "the computer network removed",
        || (!docker(&["network", "inspect", &net]).status.success()).then_some(()),
    );
    env.json(&["computer", "stop", &off_id]);
}

/// The control plane's side, no Docker needed: the flags, the stored mode, and the refusal
/// of a public-web start on a Runner whose yy cannot run the proxy.
#[test]
fn network_modes_are_stored_checked_and_gated_by_capability() {
    let env = Env::new();
    let server = env.bootstrap();
    let image = format!("sha256:{}", "ab".repeat(32));
    let reg = env.register_runner(&server, "main", &["--computer-image", &image]);
    assert_eq!(env.json(&["runner", "show", &reg.id])["network"], "none");
    let shown = env.run(&["runner", "show", &reg.id]);
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.starts_with("network:") && l.ends_with("none")),
        "{}",
        shown.stdout
    );
    // Neither flag, or a mode that does not exist: usage errors, nothing changed.
    let out = env.run(&["runner", "update", &reg.id]);
    assert_eq!(out.code, 2, "{out:#?}");
    let out = env.run(&["runner", "update", &reg.id, "--network", "internet"]);
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.stderr.contains("public-web"), "{out:#?}");
    let out = env.run(&["runner", "update", &reg.id, "--computer-image", "yy:latest"]);
    out.fails(2, "not a full image id");
    let r = env.json(&["runner", "update", &reg.id, "--network", "public-web"]);
    assert_eq!(r["network"], "public-web");
    assert_eq!(r["computer_image"], image.as_str());

    // A Runner that reports computers but not the egress capability (an older yy).
    env.run(&[
        "agent",
        "create",
        "web",
        "--profile",
        "default",
        "--env",
        "computer",
    ])
    .ok();
    let status =
        r#"{"version":"old","capabilities":["computer-v1"],"computers_capacity":2,"hostname":"t"}"#;
    let (code, conn) = common::machine(
        &server,
        "/runner/v1/connect",
        &reg.token,
        &uuid::Uuid::new_v4().to_string(),
        None,
        &[],
        status,
    );
    assert_eq!(code, 200, "{conn}");
    env.run(&["computer", "create", "--agent", "web"])
        .fails(2, "cannot run the egress proxy");
    let listed = env.json(&["computer", "list"]);
    assert_eq!(
        listed.as_array().unwrap().len(),
        0,
        "nothing was half-created"
    );
    // Registering with a mode stores it.
    let reg2 = env.register_runner(&server, "second", &["--network", "public-web"]);
    assert_eq!(
        env.json(&["runner", "show", &reg2.id])["network"],
        "public-web"
    );
}
