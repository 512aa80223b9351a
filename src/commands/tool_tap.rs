//! `yy tool-tap -- BASH ARGS...`: how a Hermes the Runner started runs a terminal command
//! (the Runner's `bash` shim execs it; see runner/tool_tap.rs). Not a clap command: it
//! runs before the command line is parsed, since it sits in front of every command a host
//! agent runs, and is not meant to be typed.
//!
//! It runs BASH with ARGS and its own stdin, copies every read of the command's output at
//! once to its own stdout/stderr, and sends each piece best-effort to the Runner's socket
//! (`YY_TOOL_OUTPUT_SOCKET`) with Hermes's session ids: a non-blocking datagram, dropped
//! (and counted) when the Runner is behind or gone. The command behaves as without the
//! tap: same bytes, in the same order (stdout and stderr share one pipe when they share
//! one file, as under Hermes), same exit status (a death by signal re-raised), and the
//! tap stays in Hermes's process group, so Hermes's group kill ends both.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::api::sessions::{LIVE_OUTPUT_CAP, StdStream};
use crate::runner::tool_tap::{MAX_DATA, SESSION_ENV, SESSION_KEY_ENV, SOCKET_ENV, encode};

/// The command's name on `yy`'s command line.
pub const NAME: &str = "tool-tap";
/// After the command exits, its output is still copied until it stays quiet this long (a
/// background child may hold the pipe open; Hermes stops reading ~300 ms after the exit).
const IDLE_AFTER_EXIT: Duration = Duration::from_millis(100);
/// Sending stops after this much: the Runner shows no more of one call than the cap.
const SEND_BUDGET: usize = 2 * LIVE_OUTPUT_CAP;
const TAPPED_SIGNALS: [i32; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Runs the tap when `args` (without the program name) are `tool-tap -- BASH ...`; `None`
/// for any other command line.
pub fn intercept(args: &[OsString]) -> Option<i32> {
    if args.first().map(|a| a.as_os_str()) != Some(NAME.as_ref()) {
        return None;
    }
    let rest = match args.get(1) {
        Some(dd) if dd == "--" => &args[2..],
        _ => &args[1..],
    };
    let Some((bash, bash_args)) = rest.split_first() else {
        eprintln!("error: yy tool-tap needs a command: yy tool-tap -- BASH [ARGS...]");
        return Some(crate::error::Exit::Usage.code());
    };
    Some(run(bash, bash_args))
}

fn run(bash: &OsString, args: &[OsString]) -> i32 {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let (socket, session, key) = (env(SOCKET_ENV), env(SESSION_ENV), env(SESSION_KEY_ENV));
    // SAFETY: isatty only looks at the descriptor.
    let terminal = [0, 1, 2].iter().any(|&fd| unsafe { libc::isatty(fd) } == 1);
    // A command on a terminal (Hermes's pty mode) keeps it: a pipe in between would change
    // what the command sees.
    if socket.is_empty() || (session.is_empty() && key.is_empty()) || terminal {
        return exec_plain(bash, args);
    }
    let sender = Sender::new(&socket, session, key);
    match Tap::spawn(bash, args) {
        Ok(tap) => tap.relay(sender),
        // Could not even start: the command runs as without the tap.
        Err(_) => exec_plain(bash, args),
    }
}

fn exec_plain(bash: &OsString, args: &[OsString]) -> i32 {
    let e = Command::new(bash).args(args).env_remove(SOCKET_ENV).exec();
    eprintln!("yy tool-tap: cannot run {}: {e}", bash.to_string_lossy());
    127
}

/// Best-effort datagrams to the Runner.
struct Sender {
    sock: Option<UnixDatagram>,
    invocation: String,
    session: String,
    key: String,
    sent: usize,
    dropped: u64,
}

impl Sender {
    fn new(path: &str, session: String, key: String) -> Sender {
        let sock = UnixDatagram::unbound()
            .and_then(|s| s.connect(path).map(|_| s))
            .and_then(|s| s.set_nonblocking(true).map(|_| s))
            .ok();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        Sender {
            sock,
            invocation: format!("{}-{nanos}", std::process::id()),
            session,
            key,
            sent: 0,
            dropped: 0,
        }
    }

    fn send(&mut self, stream: StdStream, data: &[u8]) {
        let Some(sock) = &self.sock else { return };
        if self.sent >= SEND_BUDGET {
            return;
        }
        let msg = encode(
            &self.invocation,
            &self.session,
            &self.key,
            stream,
            self.dropped,
            data,
        );
        match sock.send(&msg) {
            Ok(_) => {
                self.sent += data.len();
                self.dropped = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.dropped += data.len() as u64;
            }
            // The Runner is gone: stop trying.
            Err(_) => self.sock = None,
        }
    }
}

/// One output pipe of the command and where its bytes go.
struct Channel {
    read: File,
    stream: StdStream,
    /// Our own stdout or stderr; `None` once writing to it failed.
    out: Option<ManuallyDrop<File>>,
}

struct Tap {
    child: Child,
    channels: Vec<Channel>,
}

extern "C" fn note_signal(_: libc::c_int) {}

/// Whether fds 1 and 2 are one file (Hermes gives a command one pipe for both).
fn same_file(a: i32, b: i32) -> bool {
    // SAFETY: fstat fills a plain struct we own; a bad fd only makes it fail.
    unsafe {
        let mut x: libc::stat = std::mem::zeroed();
        let mut y: libc::stat = std::mem::zeroed();
        libc::fstat(a, &mut x) == 0
            && libc::fstat(b, &mut y) == 0
            && x.st_dev == y.st_dev
            && x.st_ino == y.st_ino
    }
}

fn own_fd(fd: i32) -> ManuallyDrop<File> {
    // SAFETY: fds 1 and 2 stay open for the process's life; ManuallyDrop never closes them.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

impl Tap {
    fn spawn(bash: &OsString, args: &[OsString]) -> io::Result<Tap> {
        let merged = same_file(1, 2);
        let (out_r, out_w) = io::pipe()?;
        let mut cmd = Command::new(bash);
        cmd.args(args)
            .env_remove(SOCKET_ENV)
            .stdin(Stdio::inherit());
        let mut channels = vec![Channel {
            read: File::from(OwnedFd::from(out_r)),
            stream: StdStream::Stdout,
            out: Some(own_fd(1)),
        }];
        if merged {
            let both = OwnedFd::from(out_w);
            cmd.stdout(Stdio::from(both.try_clone()?))
                .stderr(Stdio::from(both));
        } else {
            let (err_r, err_w) = io::pipe()?;
            cmd.stdout(Stdio::from(out_w)).stderr(Stdio::from(err_w));
            channels.push(Channel {
                read: File::from(OwnedFd::from(err_r)),
                stream: StdStream::Stderr,
                out: Some(own_fd(2)),
            });
        }
        // Killed with the tap (Hermes's proc.kill() reaches only the tap).
        crate::sys::die_with_parent(&mut cmd, libc::SIGKILL);
        // Signals to the process group reach the command itself: the tap outlives them to
        // copy what the command still writes, and then dies as it did. A caught signal
        // is back to its default in the command (exec resets handlers).
        for sig in TAPPED_SIGNALS {
            // SAFETY: installs a handler that does nothing.
            unsafe {
                libc::signal(sig, note_signal as *const () as libc::sighandler_t);
            }
        }
        let child = cmd.spawn()?;
        drop(cmd); // closes our copies of the write ends: EOF when the command is done
        Ok(Tap { child, channels })
    }

    fn relay(mut self, mut sender: Sender) -> i32 {
        let mut buf = vec![0u8; MAX_DATA];
        let mut exited: Option<ExitStatus> = None;
        while !self.channels.is_empty() {
            let mut fds: Vec<libc::pollfd> = self
                .channels
                .iter()
                .map(|c| libc::pollfd {
                    fd: c.read.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let timeout = IDLE_AFTER_EXIT.as_millis() as i32;
            // SAFETY: fds is a live array of fds.len() pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            if n == 0 {
                // Quiet: once the command is gone (and was quiet), a background child
                // holding the pipe keeps no one waiting.
                if exited.is_some() {
                    break;
                }
                exited = self.child.try_wait().ok().flatten();
                continue;
            }
            let mut closed = Vec::new();
            for (i, fd) in fds.iter().enumerate() {
                if fd.revents == 0 {
                    continue;
                }
                let c = &mut self.channels[i];
                match c.read.read(&mut buf) {
                    Ok(0) => closed.push(i),
                    Ok(n) => {
                        sender.send(c.stream, &buf[..n]);
                        if let Some(out) = &mut c.out
                            && out.write_all(&buf[..n]).is_err()
                        {
                            // Nobody reads any more: the command's next write fails as
                            // it would have without the tap.
                            c.out = None;
                            closed.push(i);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => closed.push(i),
                }
            }
            for i in closed.into_iter().rev() {
                self.channels.remove(i);
            }
        }
        drop(self.channels);
        let status = match exited {
            Some(s) => s,
            None => loop {
                match self.child.wait() {
                    Ok(s) => break s,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return 1,
                }
            },
        };
        mirror(status)
    }
}

/// Ends the way the command ended: its exit code, or its death by the same signal.
fn mirror(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    let Some(sig) = status.signal() else {
        return 1;
    };
    // SAFETY: plain signal and rlimit calls on this process.
    unsafe {
        // The command dumped (or not) its own core; the tap writes none.
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    128 + sig
}
