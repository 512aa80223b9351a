//! `yy tool-tap`, the process in front of a supervised Hermes's terminal commands (see
//! runner/tool_tap.rs): the command must behave exactly as without it, and the tap must
//! never wait for the Runner. Real bash, a real datagram socket; the end-to-end path with
//! Hermes is in tests/sessions.rs.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_yy");

fn bash() -> String {
    for b in ["/usr/bin/bash", "/bin/bash"] {
        if std::path::Path::new(b).exists() {
            return b.into();
        }
    }
    panic!("no bash");
}

/// Runs `bash -c script` (tapped or not) as Hermes does: its own session, stdout and
/// stderr one pipe, `input` on stdin; returns the merged output and the status.
fn run(tapped: bool, socket: &str, script: &str, input: &[u8]) -> (Vec<u8>, ExitStatus) {
    let (mut cmd, bash) = (Command::new(BIN), bash());
    if tapped {
        cmd.args(["tool-tap", "--", &bash, "-c", script]);
    } else {
        cmd = Command::new(&bash);
        cmd.args(["-c", script]);
    }
    let (r, w) = std::io::pipe().unwrap();
    cmd.env("YY_TOOL_OUTPUT_SOCKET", socket)
        .env("HERMES_UI_SESSION_ID", "live1")
        .env("HERMES_SESSION_KEY", "stored1")
        .stdin(Stdio::piped())
        .stdout(w.try_clone().unwrap())
        .stderr(w)
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut { r }, &mut out).unwrap();
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    (out, status)
}

fn listener(dir: &std::path::Path) -> (UnixDatagram, String) {
    let path = dir.join("out.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    (sock, path.display().to_string())
}

#[test]
fn a_tapped_command_gives_the_same_bytes_and_status_as_bare_bash() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, path) = listener(dir.path());
    sock.set_nonblocking(true).unwrap();
    let cases: [(&str, &[u8]); 7] = [
        ("exit 7", b""),
        (
            "echo a; echo b >&2; echo c; printf 'd\\0e\\377'; echo f >&2",
            b"",
        ),
        (
            "for i in $(seq 300); do echo out$i; echo err$i >&2; done",
            b"",
        ),
        ("head -c 1000000 /dev/zero | tr '\\0' x; echo; exit 3", b""),
        ("cat; echo done", b"from stdin\n"),
        ("echo before; kill -TERM $$", b""),
        ("echo $YY_TOOL_OUTPUT_SOCKET-$HERMES_UI_SESSION_ID", b""),
    ];
    for (script, input) in cases {
        let bare = run(false, "", script, input);
        let tapped = run(true, &path, script, input);
        // (The bare run's socket variable is empty; the tapped command sees none.)
        assert_eq!(tapped.0, bare.0, "{script}");
        assert_eq!(tapped.1.code(), bare.1.code(), "{script}");
        assert_eq!(tapped.1.signal(), bare.1.signal(), "{script}");
        // Drain what the tap sent meanwhile.
        let mut buf = vec![0u8; 70_000];
        while sock.recv(&mut buf).is_ok() {}
    }
    let (_, status) = run(true, &path, "kill -TERM $$", b"");
    assert_eq!(status.signal(), Some(libc::SIGTERM));
}

#[test]
fn pieces_reach_the_socket_with_the_session_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, path) = listener(dir.path());
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (out, status) = run(true, &path, "echo one; sleep 0.3; echo two", b"");
    assert!(status.success());
    assert_eq!(out, b"one\ntwo\n");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while got.len() < 2 {
        let n = sock.recv(&mut buf).unwrap();
        got.push(yy::runner::tool_tap::parse(&buf[..n]).unwrap());
    }
    assert_eq!(got[0].session, "live1");
    assert_eq!(got[0].session_key, "stored1");
    assert_eq!(got[0].piece.data, b"one\n");
    assert_eq!(got[1].piece.data, b"two\n");
    assert_eq!(got[0].piece.invocation, got[1].piece.invocation);
}

#[test]
fn a_runner_that_never_reads_or_is_gone_never_slows_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, path) = listener(dir.path());
    // Thousands of small writes: far more datagrams than the socket's queue holds (it is
    // never read), then 8 MB.
    let script =
        "for i in $(seq 3000); do echo line$i; done; head -c 8000000 /dev/zero | tr '\\0' y";
    for socket in [path, "/nonexistent/out.sock".to_string()] {
        let (tx, rx) = std::sync::mpsc::channel();
        let s = socket.clone();
        std::thread::spawn(move || tx.send(run(true, &s, script, b"")).unwrap());
        let (out, status) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the tap waited for {socket}"));
        assert!(status.success());
        let expected: String = (1..=3000).map(|i| format!("line{i}\n")).collect();
        assert_eq!(&out[..expected.len()], expected.as_bytes(), "{socket}");
        assert_eq!(out.len(), expected.len() + 8_000_000, "{socket}");
    }
    // The queue filled up and stayed full: the tap dropped what did not fit.
    let mut buf = vec![0u8; 70_000];
    sock.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    while let Ok(n) = sock.recv(&mut buf) {
        got.push(yy::runner::tool_tap::parse(&buf[..n]).unwrap());
    }
    assert!(!got.is_empty() && got.len() < 3000, "{}", got.len());
}

#[test]
fn a_background_child_holding_the_output_keeps_no_one_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let (_sock, path) = listener(dir.path());
    let t = Instant::now();
    let (out, status) = run(true, &path, "sleep 4 & echo started", b"");
    assert!(status.success());
    assert_eq!(out, b"started\n");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn hermes_group_kill_reaches_the_command_and_its_trap_output_gets_through() {
    let dir = tempfile::tempdir().unwrap();
    let (_sock, path) = listener(dir.path());
    let script = "trap 'echo got-term; exit 3' TERM; sleep 30 & echo ready; wait";
    for tapped in [false, true] {
        let mut cmd = if tapped {
            let mut c = Command::new(BIN);
            c.args(["tool-tap", "--", &bash(), "-c", script]);
            c
        } else {
            let mut c = Command::new(bash());
            c.args(["-c", script]);
            c
        };
        let mut child = cmd
            .env("YY_TOOL_OUTPUT_SOCKET", &path)
            .env("HERMES_UI_SESSION_ID", "live1")
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 6];
        std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
        assert_eq!(&first, b"ready\n");
        let pgid = child.id() as i32;
        // SAFETY: signals a process group this test started.
        unsafe { libc::killpg(pgid, libc::SIGTERM) };
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(rest, b"got-term\n", "tapped: {tapped}");
        assert_eq!(status.code(), Some(3), "tapped: {tapped}");
        // Nothing of the group runs any more: the backgrounded sleep got the TERM too and
        // is gone within moments (or stays a zombie until whoever adopted it reaps it),
        // far before its 30 s are up.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut left = running_in_group(pgid);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            left = running_in_group(pgid);
        }
        assert_eq!(left, Vec::<String>::new(), "tapped: {tapped}");
    }
}

/// The processes of group `pgid` that are not zombies, as `pid state`.
fn running_in_group(pgid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2) == Some(&pgid.to_string().as_str()) && fields[0] != "Z" {
            found.push(format!(
                "{} {}",
                entry.file_name().to_string_lossy(),
                fields[0]
            ));
        }
    }
    found
}

#[test]
fn a_command_on_a_terminal_keeps_its_terminal() {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors we then own.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: both were just opened and are owned here only.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    let status = Command::new(BIN)
        .args([
            "tool-tap",
            "--",
            &bash(),
            "-c",
            "test -t 1 && test -t 2 && echo on-a-tty",
        ])
        .env("YY_TOOL_OUTPUT_SOCKET", "/nonexistent/out.sock")
        .env("HERMES_UI_SESSION_ID", "live1")
        .stdin(Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .status()
        .unwrap();
    assert!(status.success());
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut master, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"on-a-tty\r\n");
}
