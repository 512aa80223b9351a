//! The operator's shell (`yy computer attach C --control`) end to end: the real CLI on a
//! pty this test opens (so its raw mode, window size and Ctrl-C paths run), the relay
//! through the control plane and the Runner, and a tty exec in the computer's container
//! on the real Docker engine, while a scripted model's turn is paused.

mod common;
mod computer_support;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use computer_support::test_image;

/// Everything the CLI wrote to its terminal so far.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Screen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until `needle` appears after byte `from`; returns where it ends.
    fn wait(&self, needle: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if let Some(i) = text.get(from..).and_then(|t| t.find(needle)) {
                return from + i + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the terminal after byte {from}:\n{}",
                &text[from.min(text.len())..]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn openpty(cols: u16, rows: u16) -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty fills two descriptors we then own.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened for us.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Whether the terminal is in canonical mode with echo (as a shell leaves it), not raw.
fn canonical(tty: &OwnedFd) -> bool {
    // SAFETY: tcgetattr fills a zeroed termios for a terminal descriptor we own.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(tty.as_raw_fd(), &mut t) }, 0);
    t.c_lflag & libc::ICANON != 0 && t.c_lflag & libc::ECHO != 0
}

fn set_size(master: &OwnedFd, cols: u16, rows: u16) {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ on our pty master; the kernel signals the terminal's foreground
    // process group (the CLI) with SIGWINCH.
    assert_eq!(
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) },
        0
    );
}

/// The first `TAG<digits>:` on the screen after `from`: what `echo "TAG$$:"` printed
/// (the echoed command line itself shows `$$`, not digits).
fn number_after(text: &str, tag: &str) -> Option<u32> {
    text.match_indices(tag).find_map(|(i, _)| {
        let rest = &text[i + tag.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!digits.is_empty() && rest[digits.len()..].starts_with(':'))
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// Waits until neither process `pid` nor any process whose command line is `job` runs in
/// the computer; `Err` with the last process listing when they do not end.
fn wait_ended(env: &common::Env, id: &str, pid: u32, job: &str) -> Result<(), String> {
    let probe = format!(
        "kill -0 {pid} 2>/dev/null && echo pid-left; \
         for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done"
    );
    let mut last = String::new();
    for _ in 0..50 {
        last = env
            .run(&["computer", "exec", id, "--", "sh", "-c", &probe])
            .stdout;
        // Whole lines: the probe's own command line is listed too.
        if !last.lines().any(|l| l == "pid-left" || l.trim() == job) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

/// The log lines about shells, for a failure's message.
fn shell_log(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("shell"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_operator_gets_a_real_pty_in_the_computers_container() {
    let note = "I fixed the config by hand";
    let Some(s) = common::hermes::worker_setup(
        || test_image().id.clone(),
        serde_json::json!([
            {"tool_call": {"name": "terminal", "arguments": {"command": "sleep 600 >/dev/null 2>&1 & echo $! > bg.pid; sleep 3; echo first-done"}}},
            {"tool_call": {"name": "terminal", "arguments": {"command": "echo second > second.txt"}}},
            {"text": "resumed after the handback"}
        ]),
    ) else {
        return;
    };
    let env = &s.env;
    let computer = env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let ws = env.path("runner-data-a").join("workspaces").join(&id);
    let chat = env.background(&s.server, &["chat", "box", "do two steps"]);
    common::wait_for(Duration::from_secs(60), "the first tool", || {
        ws.join("bg.pid").exists().then_some(())
    });
    let agent_bg: u32 = std::fs::read_to_string(ws.join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // The CLI on a terminal of its own (session leader, controlling tty): raw mode,
    // SIGWINCH, Ctrl-C and the handback prompt take their real paths.
    let (master, slave) = openpty(80, 24);
    let mut cmd = env.command(&["computer", "attach", &id, "--control"]);
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut attach = cmd.spawn().unwrap();
    drop(cmd); // the parent's copies of the terminal's slave side (but `slave`)
    let screen = Screen::default();
    {
        let mut reader = std::fs::File::from(master.try_clone().unwrap());
        let screen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.0.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
    }
    let mut keys = std::fs::File::from(master.try_clone().unwrap());
    let mut type_ = |text: &str| {
        keys.write_all(text.as_bytes()).unwrap();
        keys.flush().unwrap();
    };
    let at = screen.wait("you have control", 0);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "control came before the tool in flight ended: {}",
        screen.text()
    );
    let at = screen.wait("Ctrl-] detaches", at);

    // A real pty, in the same container as the agent's background program.
    type_("tty; echo TTY-$((40+2))\r");
    let mut at = screen.wait("TTY-42", at);
    assert!(screen.text().contains("/dev/pts/"), "{}", screen.text());
    assert!(
        !canonical(&slave),
        "the local terminal is raw during the session"
    );
    type_("kill -0 $(cat bg.pid) && echo BG-$((1+1))-alive; echo \"SH$$:\"; id -u\r");
    at = screen.wait("BG-2-alive", at);
    at = screen.wait("1000", at);
    let shell_pid = number_after(&screen.text(), "SH").expect("the shell's pid");
    // A background job of the operator's own: it ends with the session.
    type_("sleep 777 & echo JOB-$((3*3))\r");
    at = screen.wait("JOB-9", at);

    // Resize: the local terminal changes size, the remote pty follows.
    set_size(&master, 101, 33);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        type_("stty size; echo SZ-$((1+2))\r");
        let end = screen.wait("SZ-3", at);
        let shown = screen.text()[at..end].to_string();
        at = end;
        if shown.contains("33 101") {
            break;
        }
        assert!(Instant::now() < deadline, "no resize: {shown:?}");
        std::thread::sleep(Duration::from_millis(300));
    }

    // Bulk output arrives whole (the Runner cuts it into frames the relay takes).
    type_("head -c 300000 /dev/zero | tr '\\0' x; echo; echo BIG-$((5*5))\r");
    let end = screen.wait("BIG-25", at);
    let xs = screen.text()[at..end]
        .bytes()
        .filter(|&b| b == b'x')
        .count();
    assert!(xs >= 300_000, "{xs} of 300000 bytes arrived");
    at = end;

    // Ctrl-C interrupts the remote program, not yy; the session goes on.
    type_("sleep 100; echo SLEPT-$((2+3))\r");
    // Ctrl-C once the program runs in the guest.
    common::wait_for(Duration::from_secs(20), "sleep 100 running", || {
        let out = env.computer_sh(&id, "ps -eo args | grep -cx 'sleep 100' || true");
        (out.stdout.trim() == "1").then_some(())
    });
    let interrupted = Instant::now();
    type_("\x03");
    type_("echo INT-$((4+4))\r");
    at = screen.wait("INT-8", at);
    assert!(interrupted.elapsed() < Duration::from_secs(20));
    assert!(attach.try_wait().unwrap().is_none(), "Ctrl-C ended yy");

    // The model's next tool did not run meanwhile.
    assert!(!ws.join("second.txt").exists(), "the next tool ran");

    // Ctrl-] detaches: control released, the terminal restored, and the CLI asks for a
    // handback note (the model stays paused meanwhile).
    type_("\x1d");
    at = screen.wait("hand computer", at);
    assert!(canonical(&slave), "the local terminal is restored");
    assert!(attach.try_wait().unwrap().is_none());

    // No operator shell (nor its job) is left; the agent's program still runs.
    if let Err(left) = wait_ended(env, &id, shell_pid, "sleep 777") {
        panic!(
            "the operator's shell outlived the detach:\n{left}\n{}\n{}",
            shell_log(&s.runner.log()),
            shell_log(&s.server.log())
        );
    }
    let alive = env.run(&[
        "computer",
        "exec",
        &id,
        "--",
        "kill",
        "-0",
        &agent_bg.to_string(),
    ]);
    assert_eq!(alive.code, 0, "the agent's program was killed: {alive:?}");

    // The relay is refused without the current, held control fence.
    let token = env.stored_token();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = yy::client::Client::new(&s.server.url, Some(token)).unwrap();
    for (fence, says) in [(1, "ended"), (7, "stale")] {
        let refused = rt
            .block_on(yy::commands::computer_shell::connect(
                &client, &id, fence, None,
            ))
            .expect_err("refused");
        assert_eq!(refused.status(), Some(409), "{refused}");
        assert!(refused.to_string().contains(says), "{refused}");
    }
    let anonymous = yy::client::Client::new(&s.server.url, None).unwrap();
    let refused = rt
        .block_on(yy::commands::computer_shell::connect(
            &anonymous, &id, 1, None,
        ))
        .expect_err("refused");
    assert_eq!(refused.status(), Some(401), "{refused}");
    // A plain request (no upgrade) is told what the endpoint is.
    let plain = rt
        .block_on(
            client
                .get::<serde_json::Value>(&format!("api/v1/computers/{id}/shell?control_fence=1")),
        )
        .expect_err("not a WebSocket");
    assert_eq!(plain.status(), Some(426), "{plain}");
    assert!(plain.to_string().contains("WebSocket"), "{plain}");

    // The note typed at the prompt hands back; it reaches the model's next request.
    type_(&format!("{note}\r"));
    screen.wait("handed back", at);
    assert!(attach.wait().unwrap().success(), "{}", screen.text());
    let done = chat.output();
    let chat_out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{chat_out}");
    assert!(
        chat_out.contains("resumed after the handback"),
        "{chat_out}"
    );
    let steps = s.model.steps();
    let last = steps.last().unwrap()["body"].to_string();
    assert!(last.contains(note), "{last}");
    let audit = env.run(&["computer", "audit"]);
    assert!(audit.stdout.contains("computer.shell"), "{audit:?}");
}

/// `yy computer attach ID --control` with piped stdio and `line` typed at once; the CLI,
/// its stdout and stderr lines, and the shell's pid once `echo "SH$$:"` in `line` printed it.
fn piped_attach(
    env: &common::Env,
    id: &str,
    line: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>, u32) {
    let mut attach = env
        .command(&["computer", "attach", id, "--control"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::lines_of(attach.stdout.take().unwrap());
    let err = common::lines_of(attach.stderr.take().unwrap());
    // Typed before the shell is there (as a script does): kept until it is, and the
    // Runner still learns the shell's session first.
    writeln!(attach.stdin.as_mut().unwrap(), "{line}").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut printed = String::new();
    let pid = loop {
        if let Ok(l) = out.recv_timeout(Duration::from_millis(200)) {
            printed.push_str(&l);
            printed.push('\n');
            if let Some(pid) = number_after(&l, "SH") {
                break pid;
            }
        }
        assert!(Instant::now() < deadline, "no shell pid in {printed}");
    };
    assert!(printed.contains("/dev/pts/"), "a pty even so: {printed}");
    (attach, err, pid)
}

/// Without a terminal the shell still runs on a pty, fed stdin's bytes. Control taken
/// again closes the shell; a lost connection (the CLI killed) ends it with its jobs. A
/// control plane whose view of the computer's fence is stale gets the Runner's refusal.
#[test]
fn a_piped_shell_ends_with_its_control_or_connection_and_the_runner_checks_the_fence() {
    let Some(s) = common::hermes::worker_setup(
        || test_image().id.clone(),
        serde_json::json!([{"text": "unused"}]),
    ) else {
        return;
    };
    let env = &s.env;
    let computer = env.json(&["computer", "create", "--agent", "box"]);
    let id = computer["id"].as_str().unwrap().to_string();
    let client = yy::client::Client::new(&s.server.url, Some(env.stored_token())).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // Control taken again (fence 2): the shell of fence 1 is closed, saying why.
    let (mut attach, err, pid) = piped_attach(env, &id, "sleep 888 & tty; echo \"SH$$:\"");
    let mut seen = Vec::new();
    common::wait_line(&err, "you have control", &mut seen);
    let taken = rt.block_on(client.computer_control(&id)).unwrap();
    assert_eq!(taken.control_fence, 2);
    common::wait_line(&err, "[shell closed: control fence 1", &mut seen);
    assert!(attach.wait().unwrap().success(), "{seen:?}");
    if let Err(left) = wait_ended(env, &id, pid, "sleep 888") {
        panic!("the shell outlived its control:\n{left}");
    }

    // The connection is lost: the shell and its job end.
    let (mut attach, _err, pid) = piped_attach(env, &id, "sleep 999 & tty; echo \"SH$$:\"");
    attach.kill().unwrap();
    attach.wait().unwrap();
    if let Err(left) = wait_ended(env, &id, pid, "sleep 999") {
        panic!(
            "the shell outlived its connection:\n{left}\n{}",
            shell_log(&s.runner.log())
        );
    }

    // That control (fence 3) still lives until it expires; the control plane's record of
    // the computer's fence is made stale: the Runner refuses to open the shell.
    let fence = env.sql_number(&format!("SELECT fence FROM computers WHERE id = '{id}'"));
    env.sql(&format!("UPDATE computers SET fence = 0 WHERE id = '{id}'"));
    let closed = rt.block_on(async {
        use futures_util::StreamExt;
        let mut ws = yy::commands::computer_shell::connect(&client, &id, 3, None)
            .await
            .unwrap();
        while let Some(Ok(m)) = ws.next().await {
            if let tokio_tungstenite::tungstenite::Message::Text(t) = m
                && let Some(yy::api::shell::Control::Closed(why)) =
                    yy::api::shell::Control::parse(&t)
            {
                return why;
            }
        }
        panic!("the relay closed without saying why");
    });
    assert!(closed.contains("stale fence 0"), "{closed}");
    env.sql(&format!(
        "UPDATE computers SET fence = {fence} WHERE id = '{id}'"
    ));

    // `exit` in the shell ends the session too, saying how it exited.
    let (mut attach, err, _) = piped_attach(env, &id, "tty; echo \"SH$$:\"; exit 3");
    let mut seen = Vec::new();
    common::wait_line(&err, "[the shell exited with status 3]", &mut seen);
    assert!(attach.wait().unwrap().success(), "{seen:?}");
}
