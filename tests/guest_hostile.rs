//! Issue 23, "the guest is hostile": what a program inside a computer (uid 1000, as every
//! model command runs) can do to the guest agent and its channel to the Runner, against the
//! real Docker engine and the real guest agent in the test image. Each test failed before
//! its fix.

mod common;
mod computer_support;

use std::time::{Duration, Instant};

use yy::computer::docker::Provider;
use yy::computer::protocol::ExecParams;
use yy::computer::session::GuestSession;

use computer_support::{Fixture, docker_ok, launch, test_image};

/// A "guest" that is a bash script in the computer, speaking on the channel a guest agent
/// would: what a hostile program there could send the Runner, if it could write to it.
async fn scripted_guest(p: &Provider, container: &str, script: &str) -> GuestSession {
    use bollard::exec::{StartExecOptions, StartExecResults};
    use bollard::models::ExecConfig;
    use futures_util::StreamExt;
    use yy::computer::session::Output;
    let hello = r#"{"type":"hello","protocol":1,"yy_version":"0","workspace":"/workspace","uid":1000,"gid":1000}"#;
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        user: Some("1000:1000".into()),
        cmd: Some(vec![
            "bash".into(),
            "-c".into(),
            format!("printf '%s\\n' '{hello}'; {script}"),
        ]),
        ..Default::default()
    };
    let exec = p.docker().create_exec(container, config).await.unwrap().id;
    let opts = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(1 << 20),
    };
    match p.docker().start_exec(&exec, Some(opts)).await.unwrap() {
        StartExecResults::Attached { output, input } => {
            let output = output.filter_map(|item| async move {
                use bollard::container::LogOutput as L;
                match item {
                    Ok(L::StdOut { message }) => Some(Ok(Output::Stdout(message.to_vec()))),
                    Ok(L::StdErr { message }) => Some(Ok(Output::Stderr(message.to_vec()))),
                    Ok(_) => None,
                    Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
                }
            });
            GuestSession::start(Box::pin(output), input, None)
                .await
                .unwrap()
        }
        StartExecResults::Detached => panic!("detached"),
    }
}

/// What a command (uid 1000) can do to the guest agent, one line per way in.
const REACH_THE_AGENT: &str = r#"pid=$(pgrep -of '^/usr/local/bin/yy guest serve')
try() { if eval "$2" >/dev/null 2>&1; then echo "$1 yes"; else echo "$1 no"; fi; }
try signal 'kill -0 $pid'
try write-stdout '( printf "{\"id\":1,\"type\":\"result\",\"result\":{}}\n" >/proc/$pid/fd/1 )'
try read-stdin '( : </proc/$pid/fd/0 )'
try open-mem-rw '( : 1<>/proc/$pid/mem )'
try open-mem '( : </proc/$pid/mem )'
try environ 'cat /proc/$pid/environ'
try list-fds 'ls /proc/$pid/fd'
try ptrace 'python3 -c "import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(0 if l.ptrace(0x4206,int(sys.argv[1]),0,0)==0 else 1)" $pid'
grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
echo "fds $(ls /proc/self/fd | tr '\n' ' ')""#;

/// Issue 23, finding 1: a command cannot forge the guest agent's answers. The agent runs
/// as its own user (`yy-guest`): no command of uid 1000 can signal it, trace it, open its
/// stdout, stdin or memory, or list its descriptors; commands get no descriptor of its and
/// no capability. And the Runner takes no frame that is not the answer to a request it
/// sent and has not seen answered: a frame for another id, a second answer, a chunk for an
/// exec or a malformed line ends the session with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_reach_the_guest_agent_nor_forge_its_answers() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (p, id, s) = launch(&f).await;
    let r = s
        .exec(ExecParams::shell(REACH_THE_AGENT), None)
        .await
        .unwrap();
    assert_eq!(
        r.stdout,
        "signal no\nwrite-stdout no\nread-stdin no\nopen-mem-rw no\nopen-mem no\nenviron no\n\
         list-fds no\nptrace no\nUid: 1000 1000 1000 1000\nCapEff: 0000000000000000\n\
         CapBnd: 0000000000000000\nNoNewPrivs: 1\nfds 0 1 2 3 \n",
        "{r:?}"
    );

    // The reproduction: a forger floods the agent's stdout with answers for the first few
    // hundred request ids while the operator's exec runs, three times.
    let forger = r#"pid=$(pgrep -of '^/usr/local/bin/yy guest serve')
end=$(( $(date +%s) + 15 ))
while [ "$(date +%s)" -lt "$end" ]; do
  for i in $(seq 1 300); do
    printf '{"id":%d,"type":"result","result":{"exit_code":0,"signal":null,"stdout":"FORGED\\n","stderr":"","stdout_truncated":false,"stderr_truncated":false,"truncated":false,"timed_out":false,"cancelled":false,"duration_ms":1}}\n' "$i"
  done >"/proc/$pid/fd/1" 2>/dev/null
  echo >>/tmp/forged-rounds
  sleep 0.05
done"#;
    let bg = s
        .exec(
            ExecParams::shell(format!("( {forger} ) >/dev/null 2>&1 &")),
            None,
        )
        .await
        .unwrap();
    assert_eq!(bg.exit_code, Some(0), "{bg:?}");
    let hostname = docker_ok(&["inspect", "--format", "{{.Config.Hostname}}", &id]);
    // Rounds of the flood so far, counted beside the session (by the engine).
    let rounds = || {
        docker_ok(&[
            "exec",
            &id,
            "sh",
            "-c",
            "cat /tmp/forged-rounds 2>/dev/null | wc -l",
        ])
        .trim()
        .parse::<u64>()
        .unwrap()
    };
    for _ in 0..3 {
        let r = s
            .exec(ExecParams::argv(["cat", "/proc/sys/kernel/hostname"]), None)
            .await
            .unwrap();
        assert_eq!(r.stdout.trim(), hostname, "{r:?}");
        // Another round of forged answers before the next request.
        let seen = rounds();
        common::wait_for_async(Duration::from_secs(20), "another round of forging", || {
            let now = rounds();
            async move { (now > seen).then_some(()) }
        })
        .await;
    }
    assert!(!s.is_closed(), "{:?}", s.ended());
    // It said who it is: commands as 1000, itself apart.
    let hello = s.hello().clone();
    assert_eq!(
        (hello.uid, hello.gid, hello.agent_uid),
        (1000, 1000, Some(yy::computer::GUEST_AGENT_UID)),
        "{hello:?}"
    );

    // The Runner's side: frames that answer nothing it asked are refused and end the
    // session, whoever wrote them.
    let reply = |id_expr: &str, body: &str| {
        format!(
            r#"read -r line; id=$(printf '%s' "$line" | sed -E 's/^\{{"id":([0-9]+).*/\1/'); printf '{{"id":%d,{body}}}\n' "$(( {id_expr} ))"; sleep 30"#
        )
    };
    let version = r#""type":"result","result":{"protocol":1,"yy_version":"0"}"#;
    let cases = [
        (reply("id + 1", version), "did not send"),
        (reply("id - 1", version), "did not send"),
        (
            reply("id", r#""type":"chunk","seq":0,"data":"AA==""#),
            "not an export",
        ),
        (
            reply("id", r#""type":"output","stream":"stdout","text":"forged""#),
            "not a streamed exec",
        ),
        (
            "read -r line; printf 'FORGED\\n'; sleep 30".to_string(),
            "malformed line",
        ),
        (
            "for i in $(seq 0 100); do printf '{\"id\":%d,\"type\":\"result\",\"result\":{}}\\n' $i; done; sleep 30".to_string(),
            "did not send",
        ),
    ];
    for (script, why) in cases {
        let g = scripted_guest(&p, &id, &script).await;
        let e = tokio::time::timeout(Duration::from_secs(20), g.version())
            .await
            .unwrap_or_else(|_| panic!("{script}: the forged frame was waited on, not refused"))
            .expect_err(&script);
        assert!(e.to_string().contains(why), "{script}: {e}");
        assert!(g.is_closed(), "{script}");
        assert!(g.ended().unwrap().contains("session was ended"), "{script}");
    }
    // A second answer to the same request: the first is the answer, the second ends it.
    let twice = format!(
        r#"read -r line; id=$(printf '%s' "$line" | sed -E 's/^\{{"id":([0-9]+).*/\1/'); for n in 1 2; do printf '{{"id":%d,{version}}}\n' "$id"; done; sleep 30"#
    );
    let g = scripted_guest(&p, &id, &twice).await;
    g.version().await.unwrap();
    for _ in 0..100 {
        if g.is_closed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        g.ended()
            .is_some_and(|w| w.contains("saw answered already")),
        "{:?}",
        g.ended()
    );
    // The real agent was never disturbed.
    let r = s
        .exec(ExecParams::argv(["echo", "still"]), None)
        .await
        .unwrap();
    assert_eq!(r.stdout, "still\n");
}

/// Issue 23, finding 3: a line without end on the guest's channel costs the Runner one
/// pass over the bytes up to the frame limit, then ends that session with a clear error;
/// a fresh session on the same computer works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_ends_the_guest_session_and_a_fresh_one_works() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (p, id, s) = launch(&f).await;
    s.close().await;
    // 100 MiB without a newline, after the request arrived.
    let g = scripted_guest(
        &p,
        &id,
        "read -r line; head -c 104857600 /dev/zero | tr '\\0' a; sleep 60",
    )
    .await;
    let started = Instant::now();
    let e = tokio::time::timeout(
        Duration::from_secs(60),
        g.exec(ExecParams::argv(["true"]), None),
    )
    .await
    .expect("the session must end, not wait for the line's end")
    .unwrap_err();
    let took = started.elapsed();
    assert!(e.to_string().contains("longer than 48 MiB"), "{e}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(g.is_closed());
    // The next session on the same computer is fresh and works.
    let fresh = p.guest(&id).await.unwrap();
    let r = fresh
        .exec(ExecParams::argv(["echo", "fresh"]), None)
        .await
        .unwrap();
    assert_eq!(r.stdout, "fresh\n");
}

/// Issue 23, finding 2 (the guest's part): output whose JSON form is larger than its bytes
/// (NUL escapes to six bytes) is capped as it is sent, not as it was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_capped_as_it_is_sent() {
    if !common::require_docker() {
        return;
    }
    let f = Fixture::new(&test_image().id);
    let (_p, _id, s) = launch(&f).await;
    let cap = 1 << 20;
    let mut params = ExecParams::shell("head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2");
    params.output_cap_bytes = Some(cap);
    let r = s.exec(params, None).await.unwrap();
    assert!(r.truncated && r.stdout_truncated && r.stderr_truncated);
    for text in [&r.stdout, &r.stderr] {
        let sent = serde_json::to_string(text).unwrap().len() as u64 - 2;
        assert!(sent <= cap && sent > cap - 6, "{sent}");
    }
    let whole = serde_json::to_string(&r).unwrap().len() as u64;
    assert!(whole < 2 * cap + 1024, "{whole}");
    // Plain text keeps the whole cap.
    let mut params = ExecParams::shell("head -c 3000000 /dev/zero | tr '\\0' x");
    params.output_cap_bytes = Some(cap);
    let r = s.exec(params, None).await.unwrap();
    assert_eq!(r.stdout.len() as u64, cap);
    assert!(r.stdout_truncated && !r.stderr_truncated);
}
