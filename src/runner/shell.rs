//! The operator's shell on the Runner (`computer.shell`): a pty by `docker exec` (tty, uid
//! 1000, the workspace) in the computer's own container, so the agent's background
//! programs are right there; its bytes relayed over a WebSocket to the control plane
//! (`GET /runner/v1/shell/{relay_id}`, authenticated like every machine call).
//!
//! When the relay ends (the operator detached, lost the connection or lost control) every
//! process of the shell's session is killed: detaching leaves no shell behind, while the
//! agent's programs (other sessions) keep running. A program the operator deliberately
//! moved to a session of its own (`setsid`) is theirs to stop.

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::CommandFailure;
use super::client::MachineClient;
use super::computers::Computers;
use crate::api::shell::{Control, MAX_FRAME, ShellPayload};
use crate::computer::{GUEST_USER, without_capabilities};

/// Shells this Runner relays at once.
pub const MAX_SHELLS: usize = 8;
static SHELLS: Semaphore = Semaphore::const_new(MAX_SHELLS);

/// The first line the wrapper prints: its pid, which is the shell's session id.
const MARK: &[u8] = b"yy-shell-pid ";
/// Longest first line read while looking for [`MARK`].
const MARK_MAX: usize = 128;
/// Prints its pid, then becomes the login shell (bash if the image has it).
const WRAPPER: &str = "printf 'yy-shell-pid %s\\n' \"$$\"; if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l";
/// Kills every process of session `$0` (the sixth field of /proc/PID/stat; the fields
/// after the command name's closing parenthesis are read, so a name with spaces is fine).
const KILL_SESSION: &str = r#"for d in /proc/[0-9]*; do { read -r s < "$d/stat"; } 2>/dev/null || continue; s=${s##*) }; set -- $s; [ "$4" = "$0" ] && kill -KILL "${d#/proc/}" 2>/dev/null; done; true"#;

type Output = std::pin::Pin<
    Box<dyn Stream<Item = Result<bollard::container::LogOutput, bollard::errors::Error>> + Send>,
>;
type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;
type Socket = crate::api::shell::RelaySocket;

/// Opens the shell and its relay; answers once both are up (the relay then runs on its
/// own until it ends). The computer's fence must be the one this Runner holds.
pub async fn open(
    pool: Arc<Computers>,
    client: &MachineClient,
    generation: i64,
    p: ShellPayload,
    stop: CancellationToken,
) -> Result<serde_json::Value, CommandFailure> {
    let permit = SHELLS.try_acquire().map_err(|_| {
        CommandFailure::failed(format!(
            "this Runner relays {MAX_SHELLS} shells already; close one first"
        ))
    })?;
    let container = pool.container_under(&p.computer_id, p.fence)?;
    let req = client
        .websocket(&format!("runner/v1/shell/{}", p.relay_id), generation)
        .map_err(|e| CommandFailure::failed(e.to_string()))?;
    let connecting = crate::api::shell::connect(req, client.websocket_connector());
    let mut ws = match tokio::time::timeout(Duration::from_secs(15), connecting).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            return Err(CommandFailure::failed(format!(
                "cannot connect the shell relay: {}",
                crate::api::words::chain(&e)
            )));
        }
        Err(_) => return Err(CommandFailure::failed("the shell relay did not connect")),
    };
    let docker = pool.provider().docker().clone();
    let (exec, output, input) = match start(&docker, &container, p.cols, p.rows).await {
        Ok(started) => started,
        Err(e) => {
            let why = format!("cannot open a shell in the computer: {e}");
            let _ = ws
                .send(Message::text(Control::Closed(why.clone()).to_text()))
                .await;
            let _ = ws.close(None).await;
            return Err(CommandFailure::failed(why));
        }
    };
    tracing::info!(computer = %p.computer_id, control_fence = p.control_fence, exec = %exec, "operator shell opened");
    let answer = serde_json::json!({ "relay_id": p.relay_id, "exec_id": exec });
    let shell = Shell {
        docker,
        container,
        exec,
        computer: p.computer_id,
    };
    tokio::spawn(shell.relay(ws, output, input, stop, permit));
    Ok(answer)
}

/// A tty exec of the wrapper as uid 1000 in the container's working directory (the
/// workspace), sized as the operator's terminal.
async fn start(
    docker: &Docker,
    container: &str,
    cols: u16,
    rows: u16,
) -> Result<(String, Output, Input), bollard::errors::Error> {
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(true),
        user: Some(GUEST_USER.into()),
        env: Some(vec!["TERM=xterm-256color".into()]),
        cmd: Some(without_capabilities(&["/bin/sh", "-c", WRAPPER])),
        ..Default::default()
    };
    let exec = docker.create_exec(container, config).await?.id;
    let opts = StartExecOptions {
        detach: false,
        tty: true,
        output_capacity: Some(MAX_FRAME),
    };
    match docker.start_exec(&exec, Some(opts)).await? {
        StartExecResults::Attached { output, input } => {
            resize(docker, &exec, cols, rows).await;
            Ok((exec, output, input))
        }
        StartExecResults::Detached => Err(bollard::errors::Error::IOError {
            err: std::io::Error::other("docker started the exec detached"),
        }),
    }
}

async fn resize(docker: &Docker, exec: &str, cols: u16, rows: u16) {
    let size = ResizeExecOptions {
        height: rows.max(1),
        width: cols.max(1),
    };
    if let Err(e) = docker.resize_exec(exec, size).await {
        tracing::debug!(exec, error = %e, "resize of the operator's shell failed");
    }
}

struct Shell {
    docker: Docker,
    container: String,
    exec: String,
    computer: String,
}

/// How the relay ended.
enum Ended {
    /// The other side closed (detach, lost connection, control ended).
    Detached,
    /// The shell exited.
    Exited,
    /// This Runner stops.
    Stopped,
}

/// Sends terminal output in frames well under [`crate::api::shell::MAX_FRAME`].
async fn send_output(
    ws: &mut Socket,
    bytes: &[u8],
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    for part in bytes.chunks(MAX_FRAME / 4) {
        ws.send(Message::binary(part.to_vec())).await?;
    }
    Ok(())
}

/// Reads the wrapper's first line (`yy-shell-pid N`) out of the output: `Some(Some(sid),
/// rest)` once it is complete, `Some(None, all)` when the output is not what was expected
/// (then everything is shown as it came), `None` while more is needed.
fn take_mark(head: &[u8]) -> Option<(Option<u32>, Vec<u8>)> {
    match head.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let line = head[..i].strip_suffix(b"\r").unwrap_or(&head[..i]);
            let sid = line
                .strip_prefix(MARK)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse().ok());
            match sid {
                Some(sid) => Some((Some(sid), head[i + 1..].to_vec())),
                None => Some((None, head.to_vec())),
            }
        }
        None if head.len() > MARK_MAX => Some((None, head.to_vec())),
        None => None,
    }
}

impl Shell {
    async fn relay(
        self,
        mut ws: Socket,
        mut output: Output,
        mut input: Input,
        stop: CancellationToken,
        _permit: SemaphorePermit<'static>,
    ) {
        // Some(bytes) until the wrapper's first line was read. Keys are not passed on
        // before: the pty would echo them ahead of that line.
        let mut head: Option<Vec<u8>> = Some(Vec::new());
        let mut sid: Option<u32> = None;
        let mark_wait = tokio::time::sleep(Duration::from_secs(10));
        tokio::pin!(mark_wait);
        let ended = loop {
            tokio::select! {
                _ = &mut mark_wait, if head.is_some() => {
                    let bytes = head.take().unwrap_or_default();
                    if send_output(&mut ws, &bytes).await.is_err() {
                        break Ended::Detached;
                    }
                }
                m = ws.next(), if head.is_none() => match m {
                    Some(Ok(Message::Binary(b))) => {
                        if input.write_all(&b).await.is_err() || input.flush().await.is_err() {
                            break Ended::Exited;
                        }
                    }
                    Some(Ok(Message::Text(t))) => {
                        if let Some(Control::Resize { cols, rows }) = Control::parse(&t) {
                            resize(&self.docker, &self.exec, cols, rows).await;
                        }
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break Ended::Detached,
                    Some(Ok(_)) => {}
                },
                o = output.next() => match o {
                    Some(Ok(out)) => {
                        let mut bytes = out.into_bytes().to_vec();
                        if let Some(h) = head.as_mut() {
                            h.extend_from_slice(&bytes);
                            match take_mark(h) {
                                Some((found, rest)) => {
                                    sid = found;
                                    head = None;
                                    bytes = rest;
                                }
                                None => continue,
                            }
                        }
                        if send_output(&mut ws, &bytes).await.is_err() {
                            break Ended::Detached;
                        }
                    }
                    Some(Err(_)) | None => break Ended::Exited,
                },
                _ = stop.cancelled() => break Ended::Stopped,
            }
        };
        if let Ended::Exited = ended {
            let code = self.exit_code().await;
            let _ = ws.send(Message::text(Control::Exit(code).to_text())).await;
        }
        let _ = ws.close(None).await;
        drop(input);
        match sid {
            Some(sid) => self.kill_session(sid).await,
            None => {
                tracing::warn!(computer = %self.computer, exec = %self.exec, "the operator's shell did not report its session; it may outlive the relay")
            }
        }
        tracing::info!(computer = %self.computer, exec = %self.exec, "operator shell closed");
    }

    /// The shell's exit status (-1 when a signal ended it or it cannot be read).
    async fn exit_code(&self) -> i64 {
        for _ in 0..20 {
            match self.docker.inspect_exec(&self.exec).await {
                Ok(i) if i.running != Some(true) => return i.exit_code.unwrap_or(-1),
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(_) => break,
            }
        }
        -1
    }

    /// Kills every process of the shell's session, twice (a fork racing the first pass).
    async fn kill_session(&self, sid: u32) {
        let sid = sid.to_string();
        for _ in 0..2 {
            let config = ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: Some(GUEST_USER.into()),
                cmd: Some(without_capabilities(&["/bin/sh", "-c", KILL_SESSION, &sid])),
                ..Default::default()
            };
            let run = async {
                let id = self.docker.create_exec(&self.container, config).await?.id;
                if let StartExecResults::Attached { mut output, .. } =
                    self.docker.start_exec(&id, None).await?
                {
                    while output.next().await.is_some() {}
                }
                Ok::<_, bollard::errors::Error>(())
            };
            if let Err(e) = run.await {
                tracing::warn!(computer = %self.computer, error = %e, "cannot end the operator's shell session");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrappers_first_line_gives_the_session() {
        assert_eq!(take_mark(b"yy-shell-pid 4"), None);
        assert_eq!(
            take_mark(b"yy-shell-pid 42\r\n$ "),
            Some((Some(42), b"$ ".to_vec()))
        );
        assert_eq!(
            take_mark(b"something else\r\n"),
            Some((None, b"something else\r\n".to_vec()))
        );
        let long = vec![b'x'; MARK_MAX + 1];
        assert_eq!(take_mark(&long), Some((None, long.clone())));
    }
}
