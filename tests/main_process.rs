//! Issue 29, the cold start: a computer launched cold on Docker runs its guest agent as the
//! container's own main process, attached before the start, so its first session costs no
//! exec. When the Runner drops that session, what it ran is stopped and the agent stays,
//! idle, so the container keeps running and the next session opens by exec. An image whose
//! guest agent was not built with the flag keeps `sleep infinity` and the exec. Real Docker
//! engine and guest agent (the test image, see tests/computer_support).

mod common;
mod computer_support;

use std::sync::Arc;
use std::time::Duration;

use yy::computer::docker::Provider;
use yy::computer::main_process::MainProcess;
use yy::computer::protocol::ExecParams;

use computer_support::{Fixture, docker, docker_ok, test_image};

/// `ppid pid args` of every process of `container`, as the host sees them.
fn processes(container: &str) -> String {
    docker_ok(&["top", container, "-eo", "ppid,pid,args"])
}

fn exec_ids(container: &str) -> String {
    docker_ok(&["inspect", "--format", "{{json .ExecIDs}}", container])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_launch_serves_from_the_main_process_and_outlives_its_session() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let p = Provider::connect().await.unwrap();
    let (created, s) = p.launch(&f.spec).await.unwrap();
    assert_eq!(created.main_process, MainProcess::GuestAgent);
    // No exec was made: the session is the main process's attach.
    assert_eq!(exec_ids(&created.id), "null");
    assert!(p.verify(&created.id, &f.spec).await.unwrap().is_empty());
    let cmd = docker_ok(&["inspect", "--format", "{{json .Config.Cmd}}", &created.id]);
    assert_eq!(
        cmd,
        r#"["/usr/local/bin/yy","guest","serve","--workspace","/workspace","--user","1000:1000","--main-process"]"#
    );
    // Inside: a command's parent (the agent that serves this session) is tini's child.
    let r = s
        .exec(
            ExecParams::shell(
                "ps -o ppid= -p $PPID; tr '\\0' ' ' </proc/$PPID/cmdline; echo; tr '\\0' ' ' </proc/1/cmdline",
            ),
            None,
        )
        .await
        .unwrap();
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    assert_eq!(
        lines,
        [
            "1",
            "/usr/local/bin/yy guest serve --workspace /workspace --user 1000:1000 --main-process",
            "/sbin/docker-init -- /usr/local/bin/yy guest serve --workspace /workspace --user 1000:1000 --main-process",
        ],
        "{r:?}"
    );
    assert_eq!(
        s.hello().agent_uid,
        Some(yy::computer::GUEST_AGENT_UID),
        "it took its identity as an exec's agent does"
    );

    // The Runner drops the session while a command runs: the command is stopped, the
    // agent stays, the container runs on.
    let s = Arc::new(s);
    let running = {
        let s = s.clone();
        tokio::spawn(async move { s.exec(ExecParams::argv(["sleep", "555"]), None).await })
    };
    common::wait_for_async(Duration::from_secs(20), "sleep 555 to run", || async {
        processes(&created.id).contains("sleep 555").then_some(())
    })
    .await;
    running.abort();
    let _ = running.await;
    drop(s);
    common::wait_for_async(
        Duration::from_secs(20),
        "sleep 555 to be stopped",
        || async { (!processes(&created.id).contains("sleep 555")).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let running = docker_ok(&["inspect", "--format", "{{.State.Running}}", &created.id]);
    assert_eq!(running, "true");
    let tree = processes(&created.id);
    assert!(
        tree.contains("guest serve --workspace /workspace --user 1000:1000 --main-process"),
        "{tree}"
    );
    assert_eq!(tree.lines().count(), 3, "tini and the idle agent: {tree}");

    // The next session opens by exec, as a re-attach always did.
    let again = p.guest(&created.id).await.unwrap();
    let r = again
        .exec(
            ExecParams::shell("echo again; ps -eo ppid=,stat=,args="),
            None,
        )
        .await
        .unwrap();
    assert!(r.stdout.starts_with("again\n"), "{r:?}");
    assert_ne!(exec_ids(&created.id), "null");
    // The idle agent, tini's child, sleeps in the kernel (state S) with its session gone.
    let idle: Vec<&str> = r
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("--main-process") && !l.contains("docker-init"))
        .collect();
    assert_eq!(idle.len(), 1, "{}", r.stdout);
    assert!(idle[0].starts_with("1 S"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_the_label_keeps_sleep_and_the_exec() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    // The test image as an older `yy image build` made it: no `yy.guest.main-process`.
    let helper = docker_ok(&["create", &image.id]);
    let older = docker_ok(&[
        "commit",
        "--change",
        "LABEL yy.guest.main-process=",
        &helper,
    ]);
    let _ = docker(&["rm", "-f", &helper]);
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = docker(&["rmi", "-f", &self.0]);
        }
    }
    let _older = Remove(older.clone());

    let f = Fixture::new(&older);
    let p = Provider::connect().await.unwrap();
    assert_eq!(
        p.main_process_for(&older).await.unwrap(),
        MainProcess::Sleep
    );
    let (created, s) = p.launch(&f.spec).await.unwrap();
    assert_eq!(created.main_process, MainProcess::Sleep);
    assert!(p.verify(&created.id, &f.spec).await.unwrap().is_empty());
    let cmd = docker_ok(&["inspect", "--format", "{{json .Config.Cmd}}", &created.id]);
    assert_eq!(cmd, r#"["sleep","infinity"]"#);
    // Its session is an exec, whose agent is not tini's child.
    assert_ne!(exec_ids(&created.id), "null");
    let r = s
        .exec(ExecParams::shell("echo ok; ps -o ppid= -p $PPID"), None)
        .await
        .unwrap();
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    assert_eq!(lines[0], "ok");
    assert_ne!(lines[1], "1", "{r:?}");
}
