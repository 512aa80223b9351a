//! Computers on Podman (`podman system service`, rootful, its Docker-compatible API) as well
//! as on Docker: the image built into Podman, the computer lifecycle, the verify ladder,
//! the hardening compared field by field with a Docker computer of the same spec, and a
//! computer agent's Worker turn on a Runner started with `--engine podman`.
//!
//! Needs the service of scripts/install-podman.sh (and Docker, for the comparison); under CI
//! a missing one fails the tests.

mod common;
mod computer_support;

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use yy::computer::docker::Provider;
use yy::computer::engine::Engine;
use yy::computer::protocol::ExecParams;
use yy::computer::session::GuestSession;

use common::{BIN, Env, session_of};
use computer_support::{Fixture, binary_digest, engine_cli, engine_cli_ok, test_image};

fn podman(args: &[&str]) -> std::process::Output {
    engine_cli("podman", args)
}

fn podman_ok(args: &[&str]) -> String {
    engine_cli_ok("podman", args)
}

/// The tag of the test image on Podman (kept apart from other checkouts' like the Docker one).
fn tag() -> String {
    std::env::var("YY_TEST_IMAGE_TAG").unwrap_or_else(|_| computer_support::TAG.to_string())
}

/// The test image on Podman, built there by `yy image build --engine podman` (the root
/// filesystem cached by the Docker test image is reused, so no second debootstrap) unless
/// the tagged one already carries this binary.
fn podman_image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let tag = tag();
        let have = podman(&[
            "image",
            "inspect",
            "--format",
            "{{index .Labels \"yy.binary\"}} {{.Id}}",
            &tag,
        ]);
        let text = String::from_utf8_lossy(&have.stdout).trim().to_string();
        if let Some((digest, id)) = text.split_once(' ')
            && have.status.success()
            && digest == binary_digest()
        {
            return format!("sha256:{id}");
        }
        let env = Env::new();
        let lock = env.path("packages.lock");
        let started = Instant::now();
        let out = env.run(&[
            "image",
            "build",
            "--engine",
            "podman",
            "--binary",
            BIN,
            "--tag",
            &tag,
            "--lock",
            lock.to_str().unwrap(),
        ]);
        assert_eq!(out.code, 0, "image build on Podman failed: {out:#?}");
        eprintln!(
            "built the Podman test image in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        let id = out.stdout.lines().last().unwrap().to_string();
        assert!(id.starts_with("sha256:") && id.len() == 71, "{id}");
        // The labels survived Podman's import and commit.
        let labels: Value = serde_json::from_str(&podman_ok(&[
            "image",
            "inspect",
            "--format",
            "{{json .Labels}}",
            &id,
        ]))
        .unwrap();
        assert_eq!(labels["yy.version"], yy::VERSION, "{labels}");
        assert_eq!(labels["yy.binary"], binary_digest().as_str(), "{labels}");
        assert_eq!(labels["yy.recipe.name"], "base", "{labels}");
        assert!(
            labels["yy.recipe"].as_str().unwrap().starts_with("sha256:"),
            "{labels}"
        );
        assert!(
            labels["yy.packages"]
                .as_str()
                .is_some_and(|p| p.contains("python3=")),
            "{labels}"
        );
        if let Some((_, old)) = text.split_once(' ')
            && format!("sha256:{old}") != id
        {
            let _ = podman(&["rmi", old]);
        }
        id
    })
}

/// Removes the computer's container from Podman when dropped (the fixture's own cleanup
/// speaks to Docker).
struct OnPodman(Fixture);

impl Drop for OnPodman {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", &self.0.spec.name()]);
    }
}

fn ready() -> bool {
    common::require_podman() && common::require_docker()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computer_is_created_used_stopped_and_removed_on_podman() {
    if !ready() {
        return;
    }
    let image = podman_image();
    let p = Provider::connect_to(Some(Engine::Podman)).await.unwrap();
    assert_eq!(p.engine().engine, Engine::Podman);
    assert!(!p.engine().version.is_empty());
    p.check_engine().await.unwrap();
    let f = OnPodman(Fixture::new(image));
    let spec = &f.0.spec;

    let t = Instant::now();
    let created = p.create(spec).await.unwrap();
    let create_ms = t.elapsed().as_millis();
    assert!(p.verify(&created.id, spec).await.unwrap().is_empty());
    let listed = p.list_for_runner(&spec.runner_id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, "created");

    // Read back with the podman CLI, independent of our own verify code.
    let v: Value = serde_json::from_str(&podman_ok(&["inspect", &created.id])).unwrap();
    let c = &v[0];
    // The container keeps the guest agent's three capabilities and nothing else (its
    // commands and plain execs drop them: a_podman_computer_is_hardened_like_...).
    for caps in ["BoundingCaps", "EffectiveCaps"] {
        assert_eq!(
            c[caps],
            json!(["CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"]),
            "{caps}"
        );
    }
    let h = &c["HostConfig"];
    assert_eq!(h["NetworkMode"], "none");
    assert_eq!(h["ReadonlyRootfs"], true);
    assert_eq!(h["SecurityOpt"], json!(["no-new-privileges"]));
    assert_eq!(h["PidsLimit"], 128);
    assert_eq!(h["Memory"], 512 << 20);
    assert_eq!(h["MemorySwap"], 512 << 20);

    let t = Instant::now();
    p.start(&created.id).await.unwrap();
    let start_ms = t.elapsed().as_millis();
    let t = Instant::now();
    let r = p
        .exec_raw(&created.id, &["sh", "-c", "id -u; cat /proc/net/dev"])
        .await
        .unwrap();
    let exec_ms = t.elapsed().as_millis();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert!(r.stdout.starts_with("1000\n"), "{r:?}");
    let session = p.guest(&created.id).await.unwrap();
    assert_eq!(session.hello().uid, 1000);
    session
        .write("notes/plan.md", b"step 1\n", None)
        .await
        .unwrap();
    let r = session
        .exec(ExecParams::shell("cat notes/plan.md; touch /usr/x"), None)
        .await
        .unwrap();
    assert!(r.stdout.starts_with("step 1"), "{r:?}");
    assert!(r.stderr.contains("Read-only"), "{r:?}");
    let t = Instant::now();
    let rounds = 20;
    for _ in 0..rounds {
        session.version().await.unwrap();
    }
    let round_ms = t.elapsed().as_secs_f64() * 1000.0 / rounds as f64;
    session.close().await;

    let t = Instant::now();
    p.stop(&created.id, Duration::from_secs(5)).await.unwrap();
    let stop_ms = t.elapsed().as_millis();
    let state: Value = serde_json::from_str(&podman_ok(&[
        "inspect",
        "--format",
        "{{json .State.Running}}",
        &created.id,
    ]))
    .unwrap();
    assert_eq!(state, false);
    p.remove(&created.id).await.unwrap();
    assert!(p.list_for_runner(&spec.runner_id).await.unwrap().is_empty());
    // The workspace stays on the host.
    let ws = std::fs::canonicalize(&spec.workspace_host_dir).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/plan.md")).unwrap(),
        "step 1\n"
    );
    eprintln!(
        "podman {}: create+verify {create_ms} ms, start {start_ms} ms, first exec {exec_ms} ms, guest round trip {round_ms:.1} ms, stop {stop_ms} ms",
        p.engine().version
    );
}

#[test]
fn image_verify_and_list_run_on_podman() {
    if !ready() {
        return;
    }
    let image = podman_image();
    let env = Env::new();
    let out = env.run(&["image", "verify", "--engine", "podman", image]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    for check in [
        "hardening (inspect)",
        "guest agent",
        "uid:gid",
        "network interfaces",
        "root read-only",
        "capabilities (CapEff)",
        "no_new_privs",
        "guest agent from uid 1000",
        "a command's capabilities",
    ] {
        assert!(out.stdout.contains(check), "{check}: {}", out.stdout);
    }
    let list = env.json(&["image", "list", "--engine", "podman"]);
    assert!(
        list.as_array().unwrap().iter().any(|r| r["id"] == image),
        "{list}"
    );
    // An engine named by --engine must be the one that answers.
    let out = env.run_with(
        &["image", "verify", "--engine", "docker", image],
        "",
        &[("DOCKER_HOST", "unix:///run/podman/podman.sock")],
    );
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("is Podman"), "{out:#?}");
}

/// What a computer looks like, read from the outside (the engine's CLI inspect) and from
/// the inside (a command of the guest agent, and a plain exec), in words both engines can
/// be compared in.
async fn hardening(
    p: &Provider,
    session: &GuestSession,
    cli: &str,
    id: &str,
) -> Vec<(String, String)> {
    let out = Command::new(cli).args(["inspect", id]).output().unwrap();
    assert!(out.status.success(), "{cli} inspect {id}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v[0];
    let h = &c["HostConfig"];
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| rows.push((k.to_string(), v));
    add("Image", c["Image"].to_string());
    add("Config.User", c["Config"]["User"].to_string());
    add("Config.WorkingDir", c["Config"]["WorkingDir"].to_string());
    add("Config.Cmd", c["Config"]["Cmd"].to_string());
    for k in [
        "NetworkMode",
        "SecurityOpt",
        "ReadonlyRootfs",
        "Privileged",
        "Init",
        "Memory",
        "MemorySwap",
        "NanoCpus",
        "PidsLimit",
        "OomKillDisable",
    ] {
        add(&format!("HostConfig.{k}"), h[k].to_string());
    }
    let none = |x: &Value| x.is_null() || x.as_array().is_some_and(|a| a.is_empty());
    let caps = |x: &Value| {
        let mut c: Vec<String> = x
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                c.as_str()
                    .unwrap_or("?")
                    .trim_start_matches("CAP_")
                    .to_uppercase()
            })
            .collect();
        c.sort();
        c.join(",")
    };
    add("HostConfig.Devices empty", none(&h["Devices"]).to_string());
    // Docker: CapDrop ["ALL"] and CapAdd; Podman: what its process keeps (its CapAdd
    // reads empty).
    let three = "SETGID,SETPCAP,SETUID";
    let keeps_agents_three = if cli == "podman" {
        caps(&c["BoundingCaps"]) == three && caps(&c["EffectiveCaps"]) == three
    } else {
        h["CapDrop"] == json!(["ALL"]) && caps(&h["CapAdd"]) == three
    };
    add(
        "capabilities kept: the guest agent's three",
        keeps_agents_three.to_string(),
    );
    let mut limits: Vec<String> = h["Ulimits"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|u| {
            let name = u["Name"].as_str().unwrap().to_lowercase();
            let name = name.trim_start_matches("rlimit_").to_string();
            format!("{name}={}:{}", u["Soft"], u["Hard"])
        })
        .collect();
    limits.sort();
    add("HostConfig.Ulimits", limits.join(" "));
    // Podman adds its mount propagation and copy-up to each tmpfs, and reads only these
    // (the rest of its tmpfs are the read-only /run and /var/tmp it would otherwise make
    // writable).
    for path in ["/tmp", "/home/yy"] {
        let mut o: Vec<&str> = h["Tmpfs"][path]
            .as_str()
            .unwrap_or("missing")
            .split(',')
            .filter(|o| !["rprivate", "tmpcopyup"].contains(o))
            .collect();
        o.sort();
        add(&format!("HostConfig.Tmpfs[{path}]"), o.join(","));
    }
    // Each engine gives a computer without a network its `/etc/hosts` its own way: yy
    // mounts its file read-only on Docker (runc's own loopback, docs/computer-notes.md),
    // Podman its own without listing it. What each holds is compared inside, below.
    let mounts: Vec<String> = c["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !(m["Destination"] == "/etc/hosts" && m["RW"] == false))
        .map(|m| format!("{} -> {} rw={}", m["Type"], m["Destination"], m["RW"]))
        .collect();
    add("Mounts", mounts.join("; "));

    let inside = session
        .exec(
            ExecParams::shell(
                "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
                 echo uid=$(id -u):$(id -g); echo nofile=$(ulimit -n); \
                 echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '); \
                 for d in / /usr /etc /run /var/tmp /home/yy /tmp /workspace; do \
                   if touch $d/.probe 2>/dev/null; then rm -f $d/.probe; echo write$d=rw; else echo write$d=ro; fi; done; \
                 echo pids.max=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max); \
                 echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max); \
                 echo home=$(stat -c '%u:%g' /home/yy); \
                 echo localhost=$(getent hosts localhost | head -n 1 | tr -s ' ' | cut -d ' ' -f 2); \
                 if (echo >>/etc/hosts) 2>/dev/null; then echo etc-hosts=rw; else echo etc-hosts=ro; fi; \
                 echo pid1=$(cat /proc/1/comm | sed 's/catatonit\\|docker-init\\|podman-init\\|tini/init/')",
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(inside.exit_code, Some(0), "{inside:?}");
    for line in inside.stdout.lines() {
        if let Some((k, v)) = line.split_once(['=', ':']) {
            rows.push((format!("inside: {k}"), v.trim().to_string()));
        }
    }
    // A plain exec (diagnostics, the takeover shell) holds nothing either, though Podman
    // hands a non-root exec the container's added capabilities.
    let plain = p
        .exec_raw(
            id,
            &[
                "grep",
                "-E",
                "^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs):",
                "/proc/self/status",
            ],
        )
        .await
        .unwrap();
    assert_eq!(plain.exit_code, Some(0), "{plain:?}");
    for line in plain.stdout.lines() {
        if let Some((k, v)) = line.split_once(':') {
            rows.push((format!("plain exec: {k}"), v.trim().to_string()));
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podman_computer_is_hardened_like_a_docker_computer() {
    if !ready() {
        return;
    }
    let on_podman = OnPodman(Fixture::new(podman_image()));
    let docker_image = &test_image().id;
    let on_docker = Fixture::new(docker_image);
    let d = Provider::connect_to(Some(Engine::Docker)).await.unwrap();
    let p = Provider::connect_to(Some(Engine::Podman)).await.unwrap();
    let t = Instant::now();
    let (dc, ds) = d.launch(&on_docker.spec).await.unwrap();
    let docker_ms = t.elapsed().as_millis();
    let t = Instant::now();
    let (pc, ps) = p.launch(&on_podman.0.spec).await.unwrap();
    let podman_ms = t.elapsed().as_millis();
    eprintln!(
        "launch (create, verify, start, guest session): docker {} {docker_ms} ms, podman {} {podman_ms} ms",
        d.engine().version,
        p.engine().version
    );
    let dh = hardening(&d, &ds, "docker", &dc.id).await;
    let ph = hardening(&p, &ps, "podman", &pc.id).await;
    let keys: Vec<&String> = dh.iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        ph.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "the same fields on both"
    );
    // The images differ by ID (built on each engine): compared as "an image was given".
    let mut table = String::from("field | docker | podman\n");
    let mut differ = Vec::new();
    for ((k, dv), (_, pv)) in dh.iter().zip(&ph) {
        // The container's user follows each engine's rule for an exec's capabilities
        // (Engine::container_user); what runs inside is compared below.
        let same = match k.as_str() {
            "Image" => true,
            "Config.User" => dv == "\"0:0\"" && pv == "\"1000:1000\"",
            // The guest agent is the main process on Docker; Podman keeps `sleep` and the
            // exec (main_process::MainProcess::of_image).
            "Config.Cmd" => dv.ends_with(r#""--main-process"]"#) && pv == r#"["sleep","infinity"]"#,
            _ => dv == pv,
        };
        table.push_str(&format!(
            "{}{k} | {dv} | {pv}\n",
            if same { "  " } else { "! " }
        ));
        if !same {
            differ.push(k.clone());
        }
    }
    assert!(
        differ.is_empty(),
        "Podman's computer differs in {differ:?}:\n{table}"
    );
    eprintln!("{table}");
    for must in [
        "inside: CapEff",
        "inside: Seccomp",
        "inside: NoNewPrivs",
        "inside: write/",
    ] {
        assert!(
            dh.iter().any(|(k, _)| k == must),
            "{must} not read:\n{table}"
        );
    }
    let value = |k: &str| ph.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(value("inside: CapBnd"), "0000000000000000");
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(value(&format!("plain exec: {set}")), "0000000000000000");
    }
    assert_eq!(value("inside: Seccomp"), "2");
    assert_eq!(value("inside: write/"), "ro");
    assert_eq!(value("inside: write/run"), "ro");
    assert_eq!(value("inside: ifaces"), "lo");
    let _ = d.remove(&dc.id).await;
    let _ = p.remove(&pc.id).await;
}

#[test]
fn a_computer_agent_turn_runs_on_a_podman_runner() {
    if !ready() {
        return;
    }
    let Some(s) = common::hermes::worker_setup_with(
        || podman_image().to_string(),
        json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "id -u > uid.txt; id -u; pwd; cat /proc/1/comm"}}},
            {"tool_call": {"name": "write_file", "arguments": {"path": "notes.txt", "content": "from the model"}}},
            {"text": "Done on Podman"}
        ]),
        &["--engine", "podman"],
    ) else {
        return;
    };
    let shown = s.env.json(&["runner", "show", &s.reg.id]);
    assert!(
        shown["engine"]
            .as_str()
            .is_some_and(|e| e.starts_with("podman ")),
        "{shown}"
    );
    assert!(
        !shown["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "egress-v1"),
        "no public-web on Podman: {shown}"
    );
    let out = s.env.run(&["chat", "box", "work in your computer"]);
    out.ok();
    assert!(out.stdout.contains("Done on Podman"), "{out:?}");
    let session = session_of(&out);
    let shown = s.env.json(&["session", "show", &session]);
    let turn = &shown["turns"][0];
    assert_eq!(turn["state"], "complete", "{shown}");
    let tools = turn["tools"].as_array().unwrap();
    assert_eq!(
        tools[0]["result"]["stdout"], "1000\n/workspace\npodman-init\n",
        "uid 1000 in a Podman computer (PID 1 is Podman's init, catatonit): {shown}"
    );
    let list = s.env.json(&["computer", "list"]);
    let computer = &list.as_array().unwrap()[0];
    let container = computer["container_id"].as_str().unwrap();
    // The container is on Podman, not on Docker.
    assert!(podman(&["inspect", container]).status.success());
    assert!(
        !computer_support::docker(&["inspect", container])
            .status
            .success()
    );
    let ws = s
        .env
        .path("runner-data-a")
        .join("workspaces")
        .join(computer["id"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "from the model"
    );
    // Public-web is refused with the reason before anything starts.
    let out = s.env.run(&[
        "runner",
        "run",
        "--config",
        s.reg.config.to_str().unwrap(),
        "--engine",
        "podman",
        "--egress-network",
        "x",
    ]);
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(
        out.stderr
            .contains("public-web network mode is not available on Podman"),
        "{out:#?}"
    );
    let _ = podman(&["rm", "-f", container]);
}
