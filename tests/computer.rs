//! Isolated computers against the real Docker engine: the image, the hardening, the guest
//! agent and its confinement. The test image is built once (cached by tag
//! `yy-computer:test` while its `yy.binary` label matches this build's binary; the
//! debootstrapped root filesystem is cached under /var/tmp/yy).

mod common;
mod computer_support;

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use yy::computer::ComputerError;
use yy::computer::docker::Provider;
use yy::computer::protocol::{ExecParams, codes};
use yy::computer::session::GuestSession;

use common::{BIN, Env};
use computer_support::{Fixture, docker_ok, launch, op_code, test_image};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_hardening() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let f = Fixture::new(&image.id);
    let p = Provider::connect().await.unwrap();
    let created = p.create(&f.spec).await.unwrap();
    assert_eq!(created.name, f.spec.name());
    assert!(p.verify(&created.id, &f.spec).await.unwrap().is_empty());

    // Read back with the docker CLI, independent of our own verify code.
    let text = docker_ok(&["inspect", &created.id]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = &v[0];
    let h = &c["HostConfig"];
    assert_eq!(c["Image"], image.id.as_str());
    // On Docker the container (tini and `sleep`) runs as root with three capabilities,
    // so that the guest agent's exec gets them to take its own identity at once; commands
    // and plain execs run as uid 1000 with none.
    assert_eq!(c["Config"]["User"], "0:0");
    assert_eq!(h["NetworkMode"], "none");
    assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
    assert_eq!(
        h["CapAdd"],
        serde_json::json!(["SETUID", "SETGID", "SETPCAP"])
    );
    assert_eq!(h["SecurityOpt"], serde_json::json!(["no-new-privileges"]));
    assert_eq!(h["ReadonlyRootfs"], true);
    assert_eq!(h["Privileged"], false);
    assert_eq!(h["Init"], true);
    assert_eq!(h["Memory"], 512 << 20);
    assert_eq!(h["MemorySwap"], 512 << 20);
    assert_eq!(h["NanoCpus"], 500_000_000);
    assert_eq!(h["PidsLimit"], 128);
    assert!(h["Tmpfs"]["/tmp"].as_str().unwrap().contains("exec"), "{h}");
    assert!(h["Binds"].is_null());
    let ws = std::fs::canonicalize(&f.spec.workspace_host_dir).unwrap();
    // The workspace read-write and, since the Runner is root here, yy's hosts file
    // read-only: the network namespace is runc's own, not the engine's sandbox.
    assert_eq!(c["Config"]["NetworkDisabled"], true);
    let mut mounts = c["Mounts"].as_array().unwrap().clone();
    mounts.sort_by_key(|m| m["Destination"].as_str().unwrap_or_default().to_string());
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    assert_eq!(mounts[0]["Type"], "bind");
    assert_eq!(mounts[0]["Source"], "/run/yy/computer-hosts");
    assert_eq!(mounts[0]["Destination"], "/etc/hosts");
    assert_eq!(mounts[0]["RW"], false);
    assert_eq!(mounts[1]["Type"], "bind");
    assert_eq!(mounts[1]["Source"], ws.to_str().unwrap());
    assert_eq!(mounts[1]["Destination"], "/workspace");
    assert_eq!(mounts[1]["RW"], true);
    let labels = &c["Config"]["Labels"];
    assert_eq!(labels["yy.managed"], "1");
    assert_eq!(labels["yy.runner"], f.spec.runner_id.as_str());
    assert_eq!(labels["yy.account"], f.spec.account_id.as_str());
    assert_eq!(labels["yy.computer"], f.spec.computer_id.as_str());
    assert_eq!(labels["yy.agent"], "agent");
    assert_eq!(labels["yy.image"], image.id.as_str());
    assert_eq!(labels["yy.generation"], "1");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&ws).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (1000, 1000, 0o700)
    );

    // The Runner's reconcile finds it by its labels.
    let listed = p.list_for_runner(&f.spec.runner_id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, created.id);
    assert_eq!(listed[0].state, "created");
    // The same owner cannot get a second container.
    match p.create(&f.spec).await {
        Err(ComputerError::NameInUse { existing, .. }) => assert_eq!(existing, created.id),
        other => panic!("expected NameInUse, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_exists_and_connecting_out_fails() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    assert_eq!(s.hello().uid, 1000);
    assert_eq!(s.hello().gid, 1000);
    assert_eq!(s.hello().workspace, "/workspace");
    let r = s
        .exec(ExecParams::argv(["cat", "/proc/net/dev"]), None)
        .await
        .unwrap();
    let names: Vec<&str> = r
        .stdout
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, vec!["lo"], "{}", r.stdout);
    let r = s
        .exec(ExecParams::argv(["ls", "/sys/class/net"]), None)
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "lo");
    let py = "import socket\ntry:\n socket.create_connection(('1.1.1.1', 80), timeout=3)\n print('connected')\nexcept OSError as e:\n print('refused', e)";
    let r = s
        .exec(ExecParams::argv(["python3", "-c", py]), None)
        .await
        .unwrap();
    assert!(r.stdout.starts_with("refused"), "{r:?}");
    assert!(r.stdout.contains("unreachable"), "{r:?}");
    // Loopback works by name: `localhost` resolves (yy's hosts file) and reaches a server
    // on it; the file cannot be changed from inside.
    let py = "import socket\nserver = socket.create_server(('127.0.0.1', 0))\nport = server.getsockname()[1]\nsocket.create_connection(('localhost', port), timeout=3)\nprint('reached', port)";
    let r = s
        .exec(ExecParams::argv(["python3", "-c", py]), None)
        .await
        .unwrap();
    assert!(r.stdout.starts_with("reached"), "{r:?}");
    let r = s
        .exec(ExecParams::argv(["getent", "hosts", "localhost"]), None)
        .await
        .unwrap();
    assert!(r.stdout.contains("localhost"), "{r:?}");
    let r = s
        .exec(
            ExecParams::shell("echo '127.0.0.1 example.org' >> /etc/hosts"),
            None,
        )
        .await
        .unwrap();
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    let r = s
        .exec(ExecParams::shell("touch /usr/x"), None)
        .await
        .unwrap();
    assert_ne!(r.exit_code, Some(0));
    assert!(r.stderr.contains("Read-only"), "{r:?}");
    let r = s
        .exec(
            ExecParams::shell("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"),
            None,
        )
        .await
        .unwrap();
    assert!(
        r.stdout.contains("0000000000000000") && r.stdout.contains("NoNewPrivs:\t1"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_survives_stop_and_recreate() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (p, first, s) = launch(&f).await;
    s.write("notes/plan.md", b"step 1\n", None).await.unwrap();
    let r = s
        .exec(ExecParams::shell("echo built > notes/out.txt"), None)
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    drop(s);
    let started = Instant::now();
    p.stop(&first, Duration::from_secs(10)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        started.elapsed()
    );
    p.remove(&first).await.unwrap();

    let (created, s) = p.launch(&f.spec).await.unwrap();
    assert_ne!(created.id, first, "a recreated computer is a new container");
    let (_, data) = s.read("notes/plan.md", None).await.unwrap();
    assert_eq!(data, b"step 1\n");
    let (_, data) = s.read("notes/out.txt", None).await.unwrap();
    assert_eq!(data, b"built\n");
    // A second session (found by container id alone) sees the same workspace.
    let s2 = p.guest(&created.id).await.unwrap();
    assert_eq!(s2.hello().workspace, "/workspace");
    assert_eq!(s2.list("notes").await.unwrap().entries.len(), 2);
    let host = f.spec.workspace_host_dir.join("notes/out.txt");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(host).unwrap().uid(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_or_cancel_kills_the_whole_process_tree() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    // The grandchild sleeps in a subshell of the shell that the guest started.
    let mut params = ExecParams::shell("(sleep 1000 & echo $! > gc.pid; wait) & wait");
    params.timeout_ms = Some(700);
    let started = Instant::now();
    let r = s.exec(params, None).await.unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal, Some(9));
    assert!(started.elapsed() < Duration::from_secs(5));
    let (_, pid) = s.read("gc.pid", None).await.unwrap();
    let pid = String::from_utf8(pid).unwrap().trim().to_string();
    assert!(!pid.is_empty());
    common::wait_for_async(
        Duration::from_secs(2),
        &format!("grandchild {pid} to be gone after the timeout"),
        || async {
            let r = s
                .exec(ExecParams::argv(["kill", "-0", &pid]), None)
                .await
                .unwrap();
            (r.exit_code != Some(0)).then_some(())
        },
    )
    .await;
    let r = s
        .exec(
            ExecParams::shell("ps -eo args | grep -c '^sleep 1000' || true"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "0", "{r:?}");

    // Cancel once it runs (its marker file exists), with another request answered meanwhile.
    let token = CancellationToken::new();
    let canceller = async {
        common::wait_for_async(Duration::from_secs(10), "the exec to start", || async {
            s.read("cancel-me.started", None).await.ok()
        })
        .await;
        token.cancel();
    };
    let (r, v, _) = tokio::join!(
        s.exec(
            ExecParams::shell(": > cancel-me.started; sleep 1000 & sleep 1000; echo never"),
            Some(&token)
        ),
        s.version(),
        canceller
    );
    let r = r.unwrap();
    assert!(r.cancelled && !r.timed_out, "{r:?}");
    assert!(r.duration_ms < 5000);
    assert_eq!(v.unwrap().protocol, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_cap_holds() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    let mut params = ExecParams::shell("head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2");
    params.output_cap_bytes = Some(1000);
    let r = s.exec(params, None).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(r.stdout.len(), 1000);
    assert!(r.stdout.bytes().all(|b| b == b'a'));
    assert!(r.stdout_truncated && r.truncated && !r.stderr_truncated);
    assert_eq!(r.stderr, "done\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_operations_refuse_dotdot_and_symlink_escapes() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    s.write("ok.txt", b"fine", Some(0o600)).await.unwrap();
    let r = s
        .exec(
            ExecParams::shell(
                "ln -s /etc/passwd out && ln -s / root && ln -s ok.txt in && mkdir d",
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    let outside = codes::OUTSIDE_WORKSPACE;
    assert_eq!(op_code(s.read("out", None).await.unwrap_err()), outside);
    assert_eq!(
        op_code(s.read("../etc/passwd", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.read("d/../../etc/passwd", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.read("/etc/passwd", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.read("root/etc/passwd", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.write("root/tmp/x", b"x", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.write("out", b"x", None).await.unwrap_err()),
        outside
    );
    assert_eq!(
        op_code(s.write("../x", b"x", None).await.unwrap_err()),
        outside
    );
    assert_eq!(op_code(s.list("root").await.unwrap_err()), outside);
    assert_eq!(op_code(s.stat("out").await.unwrap_err()), outside);
    let mut sink = Vec::new();
    assert_eq!(
        op_code(s.export("out", &mut sink).await.unwrap_err()),
        outside
    );
    assert!(sink.is_empty());

    let (r, data) = s.read("in", None).await.unwrap();
    assert_eq!(
        (r.path.as_str(), data.as_slice()),
        ("ok.txt", b"fine".as_slice())
    );
    assert_eq!(s.stat("ok.txt").await.unwrap().info.mode, 0o600);
    let names: Vec<String> = s
        .list(".")
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["d", "in", "ok.txt", "out", "root"]);
    assert_eq!(
        op_code(s.read("missing", None).await.unwrap_err()),
        codes::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_chunks_reassemble_to_the_right_sha256() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    let r = s
        .exec(
            ExecParams::shell("head -c 1000000 /dev/urandom > big.bin && sha256sum big.bin"),
            None,
        )
        .await
        .unwrap();
    let want = r.stdout.split_whitespace().next().unwrap().to_string();
    let mut data = Vec::new();
    let e = s.export("big.bin", &mut data).await.unwrap();
    assert_eq!(e.size, 1_000_000);
    assert_eq!(e.chunks, 4); // 256 KiB chunks
    assert_eq!(e.sha256, want);
    assert_eq!(hex::encode(Sha256::digest(&data)), want);
    // The snapshot in the guest's /tmp is gone again.
    let r = s
        .exec(
            ExecParams::shell("ls /tmp | grep -c yy-export || true"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_the_image_and_fails_one_without_guest_agent() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let env = Env::new();
    let out = env.run(&["image", "verify", &image.id]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    for check in [
        "guest agent",
        "uid:gid",
        "network interfaces",
        "root read-only",
        "connect out",
    ] {
        assert!(out.stdout.contains(check), "{check}: {}", out.stdout);
    }
    let out = env.run(&["image", "verify", &image.base, "--json"]);
    assert_eq!(out.code, 1, "{out:#?}");
    let report = out.json();
    assert_eq!(report["ok"], false);
    let agent = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "guest agent")
        .unwrap();
    assert_eq!(agent["ok"], false, "{agent}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
    assert!(out.stderr.starts_with("error: image sha256:"), "{out:#?}");

    let out = env.run(&["image", "list", "--json"]);
    assert_eq!(out.code, 0, "{out:#?}");
    let rows = out.json();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == image.id.as_str())
        .unwrap();
    assert_eq!(row["yy_version"], yy::VERSION);
    assert!(row["recipe"].as_str().unwrap().starts_with("sha256:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_and_short_ids_are_refused() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let env = Env::new();
    let short = &image.id["sha256:".len().."sha256:".len() + 12];
    let tag = computer_support::tag();
    for bad in [tag.as_str(), short] {
        env.run(&["image", "verify", bad])
            .fails(2, "not a full image ID");
        let mut f = Fixture::new(&image.id);
        f.spec.image_id = bad.to_string();
        let p = Provider::connect().await.unwrap();
        match p.create(&f.spec).await {
            Err(ComputerError::Invalid(m)) => assert!(m.contains("not a full image ID"), "{m}"),
            other => panic!("{bad} accepted: {other:?}"),
        }
    }
    // A full id that is not on the engine.
    let absent = format!("sha256:{}", "0".repeat(64));
    env.run(&["image", "verify", &absent])
        .fails(5, "not on this Docker engine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_drifted_is_detected() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let f = Fixture::new(&image.id);
    let p = Provider::connect().await.unwrap();
    let ws = yy::computer::docker::prepare_workspace(&f.spec.workspace_host_dir).unwrap();
    // By hand: the right labels and name, but on the bridge network, writable, no limits.
    let mut args: Vec<String> = vec!["create".into(), "--name".into(), f.spec.name()];
    for (k, v) in f.spec.labels() {
        args.push("--label".into());
        args.push(format!("{k}={v}"));
    }
    args.extend(
        [
            "--user",
            "1000:1000",
            "--network",
            "bridge",
            "-v",
            &format!("{}:/workspace", ws.display()),
            "-w",
            "/workspace",
            &image.id,
            "sleep",
            "infinity",
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = docker_ok(&argv);
    let drifts = p.verify(&id, &f.spec).await.unwrap();
    let fields: Vec<&str> = drifts.iter().map(|d| d.field.as_str()).collect();
    for want in [
        "HostConfig.NetworkMode",
        "NetworkSettings.Networks",
        "HostConfig.CapDrop",
        "HostConfig.ReadonlyRootfs",
        "HostConfig.Memory",
        "HostConfig.Binds",
        "HostConfig.Init",
    ] {
        assert!(fields.contains(&want), "{want} missing from {fields:?}");
    }
    let nm = drifts
        .iter()
        .find(|d| d.field == "HostConfig.NetworkMode")
        .unwrap();
    assert_eq!(
        nm.to_string(),
        "HostConfig.NetworkMode: expected \"none\", found \"bridge\""
    );
    // Listed for reconcile (labels match), so the Runner would check and refuse it.
    let listed = p.list_for_runner(&f.spec.runner_id).await.unwrap();
    assert_eq!(listed.len(), 1);
}

/// The guest protocol without Docker: the same binary as a local child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_protocol_over_a_local_process() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let s = GuestSession::local(std::path::Path::new(BIN), &ws)
        .await
        .unwrap();
    assert_eq!(s.hello().protocol, 1);
    assert_eq!(s.version().await.unwrap().yy_version, yy::VERSION);
    // Requests are multiplexed: a slow exec does not hold up a fast one.
    let slow = s.exec(ExecParams::shell("sleep 1; echo slow"), None);
    let fast = async {
        let started = Instant::now();
        let r = s
            .exec(ExecParams::argv(["echo", "fast"]), None)
            .await
            .unwrap();
        (r, started.elapsed())
    };
    let (slow, (fast, took)) = tokio::join!(slow, fast);
    assert_eq!(slow.unwrap().stdout, "slow\n");
    assert_eq!(fast.stdout, "fast\n");
    assert!(took < Duration::from_millis(800), "{took:?}");
    let mut env = ExecParams::shell("echo $GREETING; pwd");
    env.env.insert("GREETING".into(), "hi".into());
    env.cwd = Some("sub".into());
    std::fs::create_dir(ws.join("sub")).unwrap();
    let r = s.exec(env, None).await.unwrap();
    assert_eq!(
        r.stdout,
        format!(
            "hi\n{}\n",
            std::fs::canonicalize(ws.join("sub")).unwrap().display()
        )
    );
    let e = s
        .exec(ExecParams::argv(["/no/such/program"]), None)
        .await
        .unwrap_err();
    assert_eq!(op_code(e), codes::SPAWN);
    let e = s.exec(ExecParams::default(), None).await.unwrap_err();
    assert_eq!(op_code(e), codes::BAD_REQUEST);
    s.write("a.bin", &[1, 2, 3], None).await.unwrap();
    let mut out = Vec::new();
    let r = s.export("a.bin", &mut out).await.unwrap();
    assert_eq!((r.size, r.chunks, out), (3, 1, vec![1, 2, 3]));
    std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
    assert_eq!(
        op_code(s.list("etc").await.unwrap_err()),
        codes::OUTSIDE_WORKSPACE
    );
    s.close().await;
}

/// `yy bench computer` runs end to end against the engine and reports every figure. Only
/// that it measured is checked here: its targets are judged by the benchmark itself
/// (docs/benchmarks.md), never by a test.
#[test]
fn the_computer_benchmark_measures_both_yy_and_the_docker_cli() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let v = Env::new().json(&["bench", "computer", &image.id, "--samples", "2"]);
    assert_eq!(v["image"], image.id.as_str());
    assert_eq!(v["samples"], 2);
    for (figure, who) in [
        ("cold_start", ["yy", "docker_run_rm_true"]),
        ("round_trip", ["yy", "docker_exec_true"]),
    ] {
        for who in who {
            let s = &v[figure][who];
            assert_eq!(s["samples"], 2, "{figure}.{who}: {v:#}");
            let ms = ["min_ms", "p50_ms", "p90_ms", "max_ms"].map(|q| {
                s[q].as_f64()
                    .unwrap_or_else(|| panic!("{figure}.{who}.{q} missing: {v:#}"))
            });
            assert!(
                ms.iter().all(|m| m.is_finite() && *m > 0.0),
                "{figure}.{who}: every figure is a positive time: {s}"
            );
            assert!(
                ms.is_sorted(),
                "{figure}.{who}: min <= p50 <= p90 <= max: {s}"
            );
        }
    }
    let ratio = v["cold_start"]["ratio_p50"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{v:#}");
    assert!(v["ok"].is_boolean(), "{v:#}");
}

/// The README builds yy with a plain `cargo build --release`: a dynamically linked yy, like
/// this test's. `yy image build` without `--binary` takes the running yy, checks that it
/// runs in the image, and ends with a full image ID that `yy image verify` passes.
#[test]
fn image_build_takes_the_readmes_dynamic_yy_and_the_image_verifies() {
    if !common::require_docker() {
        return;
    }
    let env = Env::new();
    let lock = env.path("packages.lock");
    let out = env.run(&["image", "build", "--lock", lock.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stderr
            .contains("dynamically linked: the build checks that it runs in the image"),
        "{}",
        out.stderr
    );
    let id = out.stdout.lines().last().unwrap_or_default().to_string();
    assert!(id.starts_with("sha256:") && id.len() == 71, "{out:#?}");
    let verified = env.run(&["image", "verify", &id]);
    let _ = computer_support::docker(&["rmi", &id]);
    assert_eq!(verified.code, 0, "{verified:#?}");
    assert!(!verified.stdout.contains("FAIL"), "{}", verified.stdout);
}
