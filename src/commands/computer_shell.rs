//! The operator's shell of `yy computer attach C --control`: a real pty in the computer's
//! own container, relayed over a WebSocket (`GET /api/v1/computers/{id}/shell`). On a
//! terminal the local tty goes raw (every key, Ctrl-C included, goes to the remote
//! program), window size changes follow, and Ctrl-] detaches; without a terminal stdin's
//! bytes are piped through as they come, and end of input detaches.

use std::io::{IsTerminal, Write};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::api::shell::{Control, DETACH_BYTE};
use crate::client::{Client, ClientError};
use crate::output;

pub type Socket = crate::api::shell::RelaySocket;

/// How the shell session ended.
#[derive(Debug, Default)]
pub struct Ended {
    /// The shell's exit status, when it exited.
    pub exit: Option<i64>,
    /// Why the relay was closed by the other side (control ended, the Runner failed).
    pub closed: Option<String>,
    /// The operator detached (Ctrl-] or end of input).
    pub detached: bool,
}

/// Opens the relay to a shell in computer `id` under control fence `fence`; refusals (a
/// stale fence, no control) come back as the API error they are.
pub async fn connect(
    client: &Client,
    id: &str,
    fence: i64,
    size: Option<(u16, u16)>,
) -> Result<Socket, ClientError> {
    let mut path = format!(
        "api/v1/computers/{}/shell?control_fence={fence}",
        crate::client::seg(id)
    );
    if let Some((cols, rows)) = size {
        path.push_str(&format!("&cols={cols}&rows={rows}"));
    }
    let req = client.websocket(&path)?;
    let connecting = crate::api::shell::connect(req, client.websocket_connector());
    match tokio::time::timeout(Duration::from_secs(30), connecting).await {
        Ok(Ok(ws)) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) => Err(client.refused(
            resp.status().as_u16(),
            resp.body().as_deref().unwrap_or_default(),
            "/api/v1/computers/{id}/shell",
        )),
        Ok(Err(e)) => Err(ClientError::Connect {
            url: client.base_url().to_string(),
            reason: crate::error::chain(&e),
        }),
        Err(_) => Err(ClientError::Connect {
            url: client.base_url().to_string(),
            reason: "the shell did not open within 30 s".into(),
        }),
    }
}

/// The local terminal in raw mode until dropped (which restores it, also on a panic's
/// unwinding and on every error path).
struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    fn enable(fd: RawFd) -> std::io::Result<RawMode> {
        // SAFETY: tcgetattr/tcsetattr on a descriptor we were given, with a zeroed
        // struct of the right type that tcgetattr fills.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut saved) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(fd, libc::TCSANOW, &raw) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(RawMode { fd, saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the attributes read in `enable` on the same descriptor.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved);
        }
    }
}

/// The terminal's size (columns, rows), from stdin or stdout, when either is a terminal.
pub fn window_size() -> Option<(u16, u16)> {
    for fd in [0, 1] {
        // SAFETY: TIOCGWINSZ fills a winsize struct; a non-terminal answers an error.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            return Some((ws.ws_col, ws.ws_row));
        }
    }
    None
}

/// Reads stdin on a thread of its own into a small bounded channel. It waits with
/// `poll` and stops when `stop` is set, so nothing typed after the session (the handback
/// note) is taken by it. An empty chunk is end of input.
fn read_stdin(stop: Arc<AtomicBool>) -> tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                let _ = tx.blocking_send(Err(e));
                return;
            }
            if ready == 0 || stop.load(Ordering::Relaxed) {
                continue;
            }
            // SAFETY: reads into a buffer of the given length.
            let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            let chunk = match n {
                n if n > 0 => Ok(buf[..n as usize].to_vec()),
                0 => Ok(Vec::new()),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    Err(e)
                }
            };
            let last = !matches!(&chunk, Ok(b) if !b.is_empty());
            if tx.blocking_send(chunk).is_err() || last {
                return;
            }
        }
    });
    rx
}

/// Runs the shell session until the operator detaches, the shell exits, or the relay or
/// the control ends. Control is renewed on `renew`'s ticks meanwhile.
pub async fn run(
    client: &Client,
    id: &str,
    fence: i64,
    renew: &mut tokio::time::Interval,
) -> anyhow::Result<Ended> {
    let tty = std::io::stdin().is_terminal();
    let mut ws = connect(client, id, fence, window_size()).await?;
    if tty {
        eprintln!("[shell in computer {id}; Ctrl-] detaches]");
    } else {
        eprintln!("[shell in computer {id}; end of input or Ctrl-] detaches]");
    }
    let raw = if tty { Some(RawMode::enable(0)?) } else { None };
    let stop = Arc::new(AtomicBool::new(false));
    let mut input = read_stdin(stop.clone());
    let mut winch = signal(SignalKind::window_change())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut ended = Ended::default();
    let result: anyhow::Result<()> = loop {
        tokio::select! {
            chunk = input.recv() => match chunk {
                Some(Ok(b)) if !b.is_empty() => {
                    let (keys, detach) = match b.iter().position(|&c| c == DETACH_BYTE) {
                        Some(i) => (&b[..i], true),
                        None => (&b[..], false),
                    };
                    if !keys.is_empty()
                        && let Err(e) = ws.send(Message::binary(keys.to_vec())).await
                    {
                        break Err(e.into());
                    }
                    if detach {
                        ended.detached = true;
                        break Ok(());
                    }
                }
                Some(Ok(_)) | None => {
                    ended.detached = true;
                    break Ok(());
                }
                Some(Err(e)) => break Err(e.into()),
            },
            m = ws.next() => match m {
                Some(Ok(Message::Binary(b))) => {
                    // The guest's terminal output, as a terminal session shows it.
                    let mut out = std::io::stdout().lock();
                    out.write_all(&b)?;
                    out.flush()?;
                }
                Some(Ok(Message::Text(t))) => match Control::parse(&t) {
                    Some(Control::Exit(code)) => ended.exit = Some(code),
                    Some(Control::Closed(why)) => ended.closed = Some(why),
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None => break Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(anyhow::anyhow!("the shell's connection broke: {}", crate::error::chain(&e))),
            },
            _ = winch.recv() => {
                if let Some((cols, rows)) = window_size() {
                    let resize = Control::Resize { cols, rows }.to_text();
                    if let Err(e) = ws.send(Message::text(resize)).await {
                        break Err(e.into());
                    }
                }
            }
            _ = renew.tick() => {
                if let Err(e) = client.computer_control_renew(id, fence, false).await {
                    break Err(e.into());
                }
            }
            _ = term.recv() => break Ok(()),
            _ = hup.recv() => break Ok(()),
            _ = int.recv() => break Ok(()),
        }
    };
    stop.store(true, Ordering::Relaxed);
    if raw.is_some() && std::io::stdout().is_terminal() {
        // What the remote programs may have left on (a killed bash leaves bracketed
        // paste on): plain attributes, a visible cursor, no paste brackets, no mouse.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[0m\x1b[?25h\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1006l");
        let _ = out.flush();
    }
    drop(raw);
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    let mut err = std::io::stderr().lock();
    match (&ended, &result) {
        (
            Ended {
                closed: Some(why), ..
            },
            _,
        ) => writeln!(err, "\n[shell closed: {}]", output::clean(why))?,
        (
            Ended {
                exit: Some(code), ..
            },
            _,
        ) => writeln!(err, "\n[the shell exited with status {code}]")?,
        (Ended { detached: true, .. }, _) => writeln!(err, "\n[detached from the shell]")?,
        _ => {}
    }
    result.map(|()| ended)
}
