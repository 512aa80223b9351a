//! The host side of the guest protocol: one long-lived session per running computer, with
//! requests multiplexed by id (a tool round trip is then a line each way, not a new exec).

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::ComputerError;
use super::host_read::HostWorkspace;
use super::protocol::*;

/// How long a new session waits for the guest's hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(15);

/// Bytes from the guest agent's process.
pub enum Output {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

pub type OutputStream = Pin<Box<dyn Stream<Item = std::io::Result<Output>> + Send>>;
pub type InputSink = Pin<Box<dyn AsyncWrite + Send>>;

/// A request sent and not yet answered: where its frames go, and which frames other than
/// its answer it may get.
struct Waiting {
    tx: mpsc::UnboundedSender<FrameBody>,
    before: Before,
}

/// The frames a request may get before its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    Nothing,
    /// An export's chunks.
    Chunks,
    /// A streamed exec's output.
    Output,
}

impl Before {
    fn of(op: &Op) -> Before {
        match op {
            Op::Export { .. } => Before::Chunks,
            Op::Exec(p) if p.stream => Before::Output,
            _ => Before::Nothing,
        }
    }

    fn allows(self, body: &FrameBody) -> bool {
        match body {
            FrameBody::Result { .. } | FrameBody::Error { .. } => true,
            FrameBody::Chunk { .. } => self == Before::Chunks,
            FrameBody::Output { .. } => self == Before::Output,
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, Waiting>>>;

/// Why a session ended, once it has.
type Ended = Arc<std::sync::OnceLock<String>>;

pub struct GuestSession {
    hello: Hello,
    writer: tokio::sync::Mutex<InputSink>,
    pending: Pending,
    /// Request ids are issued in order from a random start, so a frame cannot guess one.
    next_id: AtomicU64,
    closed: CancellationToken,
    ended: Ended,
    reader: tokio::task::JoinHandle<()>,
    /// Keeps a local guest process alive (and kills it on drop).
    _child: Option<tokio::process::Child>,
    /// The workspace's bind mount as the host sees it, when known: bulk reads go there.
    host_workspace: Option<HostWorkspace>,
}

impl Drop for GuestSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The last stderr bytes of the guest, for error messages.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
        if self.0.len() > 2048 {
            self.0.drain(..self.0.len() - 2048);
        }
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).trim().replace('\n', " ")
    }
}

impl GuestSession {
    /// Speaks the protocol over a guest's output and input; waits for its hello.
    pub async fn start(
        output: OutputStream,
        input: InputSink,
        child: Option<tokio::process::Child>,
    ) -> Result<GuestSession, ComputerError> {
        let pending: Pending = Arc::default();
        let closed = CancellationToken::new();
        let ended: Ended = Arc::default();
        let (hello_tx, hello_rx) = oneshot::channel();
        let reader = tokio::spawn(read_loop(
            output,
            pending.clone(),
            closed.clone(),
            ended.clone(),
            hello_tx,
        ));
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, hello_rx).await {
            Ok(Ok(Ok(h))) => h,
            Ok(Ok(Err(why))) => return Err(ComputerError::Guest(why)),
            Ok(Err(_)) => {
                return Err(ComputerError::Guest(
                    "the session ended before hello".into(),
                ));
            }
            Err(_) => {
                reader.abort();
                return Err(ComputerError::Guest(format!(
                    "no hello within {}s",
                    HELLO_TIMEOUT.as_secs()
                )));
            }
        };
        if hello.protocol != PROTOCOL {
            reader.abort();
            return Err(ComputerError::Guest(format!(
                "the guest speaks protocol {} (yy {}), this host speaks {PROTOCOL} (yy {}); rebuild the image with this yy",
                hello.protocol,
                hello.yy_version,
                crate::VERSION
            )));
        }
        Ok(GuestSession {
            hello,
            writer: tokio::sync::Mutex::new(input),
            pending,
            next_id: AtomicU64::new(first_id()),
            closed,
            ended,
            reader,
            _child: child,
            host_workspace: None,
        })
    }

    /// Records where the host sees the guest's workspace (its bind mount).
    pub fn with_host_workspace(mut self, workspace: HostWorkspace) -> GuestSession {
        self.host_workspace = Some(workspace);
        self
    }

    pub fn host_workspace(&self) -> Option<&HostWorkspace> {
        self.host_workspace.as_ref()
    }

    /// Runs `program guest serve --workspace DIR` as a local child process (no container).
    pub async fn local(program: &Path, workspace: &Path) -> Result<GuestSession, ComputerError> {
        let mut child = tokio::process::Command::new(program)
            .args(["guest", "serve", "--workspace"])
            .arg(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ComputerError::Guest(format!("cannot run {}: {e}", program.display())))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let out = reader_stream(stdout, Output::Stdout);
        let err = reader_stream(stderr, Output::Stderr);
        let merged = futures_util::stream::select(out, err);
        Self::start(Box::pin(merged), Box::pin(stdin), Some(child)).await
    }

    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// True once the guest's output ended (or broke the protocol); open a new session then.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Why the session ended, once it has.
    pub fn ended(&self) -> Option<&str> {
        self.ended.get().map(String::as_str)
    }

    fn closed_error(&self, what: &str) -> ComputerError {
        ComputerError::Guest(match self.ended() {
            Some(why) => format!("{what}: {why}"),
            None => what.to_string(),
        })
    }

    /// Sends one request and returns the receiver of its frames.
    async fn send(
        &self,
        op: Op,
    ) -> Result<(u64, mpsc::UnboundedReceiver<FrameBody>), ComputerError> {
        if self.is_closed() {
            return Err(self.closed_error("the session is closed"));
        }
        let before = Before::of(&op);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, Waiting { tx, before });
        }
        let mut line = serde_json::to_vec(&Request { id, op })
            .map_err(|e| ComputerError::Guest(e.to_string()))?;
        line.push(b'\n');
        let mut w = self.writer.lock().await;
        let sent = async {
            w.write_all(&line).await?;
            w.flush().await
        }
        .await;
        if let Err(e) = sent {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&id);
            }
            return Err(ComputerError::Guest(format!(
                "cannot write to the guest: {e}"
            )));
        }
        Ok((id, rx))
    }

    /// The final frame of a request, as a value or the guest's error; a streamed exec's
    /// output goes to `on_output` on the way.
    async fn finish(
        &self,
        rx: &mut mpsc::UnboundedReceiver<FrameBody>,
        on_output: &mut (dyn FnMut(StdStream, &str) + Send),
    ) -> Result<serde_json::Value, ComputerError> {
        loop {
            match rx.recv().await {
                Some(FrameBody::Result { result }) => return Ok(result),
                Some(FrameBody::Error { error }) => {
                    return Err(ComputerError::Op {
                        code: error.code,
                        message: error.message,
                    });
                }
                Some(FrameBody::Output { stream, text }) => on_output(stream, &text),
                Some(FrameBody::Chunk { .. }) => continue,
                None => return Err(self.closed_error("the session closed mid-request")),
            }
        }
    }

    /// One request that answers with a single result.
    pub async fn call<T: serde::de::DeserializeOwned>(&self, op: Op) -> Result<T, ComputerError> {
        let (_, mut rx) = self.send(op).await?;
        let value = self.finish(&mut rx, &mut |_, _| {}).await?;
        serde_json::from_value(value)
            .map_err(|e| ComputerError::Guest(format!("malformed result: {e}")))
    }

    /// Runs a command. When `cancel` fires, the guest kills the command's process group
    /// and the result comes back with `cancelled: true`.
    pub async fn exec(
        &self,
        params: ExecParams,
        cancel: Option<&CancellationToken>,
    ) -> Result<ExecResult, ComputerError> {
        self.exec_with(params, cancel, &mut |_, _| {}).await
    }

    /// Runs a command as [`exec`](Self::exec) does and hands its output to `on_output` as
    /// it arrives: at most the output cap of each stream, however much the guest sends.
    pub async fn exec_live(
        &self,
        mut params: ExecParams,
        cancel: Option<&CancellationToken>,
        on_output: &mut (dyn FnMut(StdStream, &str) + Send),
    ) -> Result<ExecResult, ComputerError> {
        params.stream = true;
        self.exec_with(params, cancel, on_output).await
    }

    async fn exec_with(
        &self,
        params: ExecParams,
        cancel: Option<&CancellationToken>,
        on_output: &mut (dyn FnMut(StdStream, &str) + Send),
    ) -> Result<ExecResult, ComputerError> {
        let cap = params
            .output_cap_bytes
            .unwrap_or(DEFAULT_OUTPUT_CAP)
            .min(MAX_OUTPUT_CAP) as usize;
        let mut left = [cap, cap];
        let mut bounded = |stream: StdStream, text: &str| {
            let left = &mut left[stream as usize];
            let text = crate::output::cut_bytes(text, *left);
            *left -= text.len();
            if !text.is_empty() {
                on_output(stream, text);
            }
        };
        let (id, mut rx) = self.send(Op::Exec(params)).await?;
        let value = match cancel {
            None => self.finish(&mut rx, &mut bounded).await?,
            Some(token) => {
                let finish = self.finish(&mut rx, &mut bounded);
                tokio::pin!(finish);
                tokio::select! {
                    r = &mut finish => r?,
                    _ = token.cancelled() => {
                        self.cancel(id).await?;
                        finish.await?
                    }
                }
            }
        };
        let mut result: ExecResult = serde_json::from_value(value)
            .map_err(|e| ComputerError::Guest(format!("malformed exec result: {e}")))?;
        cap_exec_result(&mut result, cap);
        Ok(result)
    }

    /// Kills the process group of exec request `target`.
    pub async fn cancel(&self, target: u64) -> Result<CancelResult, ComputerError> {
        self.call(Op::Cancel { target }).await
    }

    pub async fn version(&self) -> Result<VersionResult, ComputerError> {
        self.call(Op::Version).await
    }

    pub async fn read(
        &self,
        path: &str,
        max_bytes: Option<u64>,
    ) -> Result<(ReadResult, Vec<u8>), ComputerError> {
        let r: ReadResult = self
            .call(Op::Read {
                path: path.into(),
                max_bytes,
            })
            .await?;
        let data = B64
            .decode(&r.content)
            .map_err(|e| ComputerError::Guest(format!("read content is not base64: {e}")))?;
        Ok((r, data))
    }

    pub async fn write(
        &self,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<WriteResult, ComputerError> {
        self.call(Op::Write {
            path: path.into(),
            content: B64.encode(data),
            mode,
        })
        .await
    }

    pub async fn list(&self, path: &str) -> Result<ListResult, ComputerError> {
        self.call(Op::List { path: path.into() }).await
    }

    pub async fn stat(&self, path: &str) -> Result<StatResult, ComputerError> {
        self.call(Op::Stat { path: path.into() }).await
    }

    /// One screen action (desktop images).
    pub async fn screen(
        &self,
        action: crate::computer::screen::ScreenAction,
    ) -> Result<crate::computer::screen::ScreenResult, ComputerError> {
        self.call(Op::Screen(action)).await
    }

    /// A screen action that the guest runs only while `frame_id` is the current frame.
    pub async fn screen_at(
        &self,
        frame_id: &str,
        action: crate::computer::screen::ScreenAction,
    ) -> Result<crate::computer::screen::ScreenResult, ComputerError> {
        self.call(Op::ScreenAt {
            frame_id: frame_id.into(),
            action,
        })
        .await
    }

    /// Starts the display unless it runs.
    pub async fn display(&self) -> Result<crate::computer::screen::DisplayResult, ComputerError> {
        self.call(Op::Display).await
    }

    pub async fn browser(
        &self,
        action: crate::computer::browser::BrowserAction,
    ) -> Result<crate::computer::browser::BrowserResult, ComputerError> {
        self.call(Op::Browser { action }).await
    }

    /// Exports a snapshot of a file into `sink`, checking order, size and SHA-256.
    pub async fn export(
        &self,
        path: &str,
        sink: &mut (dyn std::io::Write + Send),
    ) -> Result<ExportResult, ComputerError> {
        let (_, mut rx) = self.send(Op::Export { path: path.into() }).await?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut next = 0u64;
        loop {
            match rx.recv().await {
                Some(FrameBody::Chunk { seq, data }) => {
                    if seq != next {
                        return Err(ComputerError::Guest(format!(
                            "export chunk {seq} arrived, expected {next}"
                        )));
                    }
                    let bytes = B64.decode(&data).map_err(|e| {
                        ComputerError::Guest(format!("export chunk is not base64: {e}"))
                    })?;
                    hasher.update(&bytes);
                    size += bytes.len() as u64;
                    sink.write_all(&bytes)
                        .map_err(|e| ComputerError::Io(format!("writing the export: {e}")))?;
                    next += 1;
                }
                Some(FrameBody::Result { result }) => {
                    let r: ExportResult = serde_json::from_value(result).map_err(|e| {
                        ComputerError::Guest(format!("malformed export result: {e}"))
                    })?;
                    let sha = hex::encode(hasher.finalize());
                    if r.size != size || r.sha256 != sha || r.chunks != next {
                        return Err(ComputerError::Guest(format!(
                            "export of {path} is corrupt: guest says {} sha256 {}, received {} sha256 {sha}",
                            crate::api::words::plural(r.size, "byte", "bytes"),
                            r.sha256,
                            crate::api::words::plural(size, "byte", "bytes")
                        )));
                    }
                    return Ok(r);
                }
                // take_line lets only an export's chunks through.
                Some(FrameBody::Output { .. }) => continue,
                Some(FrameBody::Error { error }) => {
                    return Err(ComputerError::Op {
                        code: error.code,
                        message: error.message,
                    });
                }
                None => return Err(self.closed_error("the session closed mid-export")),
            }
        }
    }

    /// Closes the guest's stdin; the guest kills what still runs and exits.
    pub async fn close(self) {
        let mut w = self.writer.lock().await;
        let _ = w.shutdown().await;
    }
}

fn reader_stream<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    reader: R,
    wrap: fn(Vec<u8>) -> Output,
) -> impl Stream<Item = std::io::Result<Output>> + Send {
    futures_util::stream::unfold(reader, move |mut r| async move {
        let mut buf = vec![0u8; 64 * 1024];
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(wrap(buf)), r))
            }
            Err(e) => Some((Err(e), r)),
        }
    })
}

/// The first request id of a session: random in 1..2^48 (exact as a JSON number anywhere).
fn first_id() -> u64 {
    (uuid::Uuid::new_v4().as_u128() as u64 >> 16).max(1)
}

/// What the guest sent that ends the session.
enum Broken {
    /// The output ended or failed (not a protocol error).
    Gone(String),
    Violation(String),
}

/// Takes one complete line from the guest: the hello first, then frames for requests this
/// host sent and has not seen answered. Anything else breaks the session.
fn take_line(
    line: &[u8],
    pending: &Pending,
    hello_tx: &mut Option<oneshot::Sender<Result<Hello, String>>>,
) -> Result<(), Broken> {
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(());
    }
    let shown = || {
        String::from_utf8_lossy(&line[..line.len().min(200)])
            .trim()
            .to_string()
    };
    if let Some(tx) = hello_tx.take() {
        // A first line of another type does not parse as a hello.
        let hello = serde_json::from_slice::<Hello>(line)
            .ok()
            .ok_or_else(|| format!("did not start: {}", shown()));
        let failed = hello.is_err();
        let _ = tx.send(hello);
        return if failed {
            Err(Broken::Gone("no hello".into()))
        } else {
            Ok(())
        };
    }
    let frame = serde_json::from_slice::<Frame>(line).map_err(|e| {
        Broken::Violation(format!(
            "the guest sent a malformed line ({e}): {}",
            shown()
        ))
    })?;
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    let Some(waiting) = p.get(&frame.id) else {
        return Err(Broken::Violation(format!(
            "the guest answered request {}, which this host did not send or saw answered already",
            frame.id
        )));
    };
    if !waiting.before.allows(&frame.body) {
        let (what, expected) = match frame.body {
            FrameBody::Chunk { .. } => ("a chunk", "an export"),
            _ => ("output", "a streamed exec"),
        };
        let id = frame.id;
        return Err(Broken::Violation(format!(
            "the guest sent {what} for request {id}, which is not {expected}"
        )));
    }
    let answer = matches!(
        frame.body,
        FrameBody::Result { .. } | FrameBody::Error { .. }
    );
    let gone = waiting.tx.send(frame.body).is_err();
    if answer || gone {
        p.remove(&frame.id);
    }
    Ok(())
}

/// Splits the guest's output into lines in one pass over each byte (a line that arrives in
/// many pieces is never searched again from its start) and ends the session when a line
/// grows past [`MAX_FRAME_BYTES`] or breaks the protocol.
async fn read_loop(
    mut output: OutputStream,
    pending: Pending,
    closed: CancellationToken,
    ended: Ended,
    hello_tx: oneshot::Sender<Result<Hello, String>>,
) {
    let mut hello_tx = Some(hello_tx);
    let mut buf: Vec<u8> = Vec::new();
    // buf[..scanned] holds no newline.
    let mut scanned = 0usize;
    let mut stderr = Tail::default();
    let mut why = Broken::Gone("the guest agent exited".to_string());
    'read: while let Some(item) = output.next().await {
        let bytes = match item {
            Ok(Output::Stdout(b)) => b,
            Ok(Output::Stderr(b)) => {
                stderr.push(&b);
                tracing::debug!(guest_stderr = %String::from_utf8_lossy(&b).trim_end());
                continue;
            }
            Err(e) => {
                why = Broken::Gone(format!("reading from the guest: {e}"));
                break;
            }
        };
        buf.extend_from_slice(&bytes);
        let mut start = 0usize;
        while let Some(i) = memchr(b'\n', &buf[scanned..]) {
            let end = scanned + i;
            let taken = take_line(&buf[start..end], &pending, &mut hello_tx);
            start = end + 1;
            scanned = start;
            if let Err(broken) = taken {
                why = broken;
                break 'read;
            }
        }
        if start > 0 {
            buf.drain(..start);
        }
        scanned = buf.len();
        if buf.len() > MAX_FRAME_BYTES {
            why = Broken::Violation(format!(
                "the guest sent a line longer than {} MiB without a newline",
                MAX_FRAME_BYTES >> 20
            ));
            break;
        }
    }
    drop(output);
    let (text, violation) = match why {
        Broken::Gone(t) => (t, false),
        Broken::Violation(t) => (t, true),
    };
    if violation {
        tracing::warn!(error = %text, "the guest broke the protocol; its session is ended");
    }
    let _ = ended.set(if violation {
        format!("{text}; the session was ended")
    } else {
        text.clone()
    });
    if let Some(tx) = hello_tx.take() {
        let tail = stderr.text();
        let why = if tail.is_empty() {
            format!("{text} before saying hello")
        } else {
            format!("{text} before saying hello: {tail}")
        };
        let _ = tx.send(Err(why));
    }
    closed.cancel();
    pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The index of the first `needle` in `hay`.
fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest's output as the session reads it: pieces as they arrive.
    fn stream(pieces: Vec<Vec<u8>>) -> OutputStream {
        Box::pin(futures_util::stream::iter(
            pieces.into_iter().map(|p| Ok(Output::Stdout(p))),
        ))
    }

    fn hello_line() -> Vec<u8> {
        br#"{"type":"hello","protocol":1,"yy_version":"0","workspace":"/w","uid":1000,"gid":1000}
"#
        .to_vec()
    }

    #[tokio::test]
    async fn a_line_over_the_limit_in_small_pieces_is_read_once_and_ends_the_session() {
        let piece = vec![b'a'; 64 * 1024];
        let mut pieces = vec![hello_line()];
        pieces.extend(std::iter::repeat_n(
            piece,
            MAX_FRAME_BYTES / (64 * 1024) + 2,
        ));
        // Keeps the stream open after the flood, as a guest that goes on would.
        let flood = stream(pieces).chain(futures_util::stream::pending());
        let started = std::time::Instant::now();
        let s = GuestSession::start(Box::pin(flood), Box::pin(tokio::io::sink()), None)
            .await
            .unwrap();
        for _ in 0..200 {
            if s.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(s.is_closed(), "still open after {:?}", started.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        let why = s.ended().unwrap();
        assert!(why.contains("longer than 48 MiB"), "{why}");
        let e = s.version().await.unwrap_err().to_string();
        assert!(e.contains("longer than 48 MiB"), "{e}");
    }

    #[tokio::test]
    async fn frames_that_answer_no_request_end_the_session() {
        // Ids start at random: a frame for id 1 answers nothing this host sent.
        let mut pieces = vec![hello_line()];
        pieces.push(br#"{"id":1,"type":"result","result":{}}"#.to_vec());
        pieces.push(b"\n".to_vec());
        let s = GuestSession::start(
            Box::pin(stream(pieces).chain(futures_util::stream::pending())),
            Box::pin(tokio::io::sink()),
            None,
        )
        .await
        .unwrap();
        for _ in 0..100 {
            if s.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            s.ended().unwrap().contains("did not send"),
            "{:?}",
            s.ended()
        );
        assert!(first_id() >= 1 && first_id() < 1 << 48);
    }

    #[test]
    fn only_a_streamed_exec_takes_output_and_only_an_export_takes_chunks() {
        let output = FrameBody::Output {
            stream: StdStream::Stdout,
            text: "x".into(),
        };
        let chunk = FrameBody::Chunk {
            seq: 0,
            data: String::new(),
        };
        let plain = Before::of(&Op::Exec(ExecParams::shell("true")));
        let streamed = Before::of(&Op::Exec(ExecParams {
            stream: true,
            ..ExecParams::shell("true")
        }));
        let export = Before::of(&Op::Export { path: "f".into() });
        assert!(!plain.allows(&output) && !plain.allows(&chunk));
        assert!(streamed.allows(&output) && !streamed.allows(&chunk));
        assert!(export.allows(&chunk) && !export.allows(&output));
        let answer = FrameBody::Result {
            result: serde_json::Value::Null,
        };
        assert!(plain.allows(&answer) && streamed.allows(&answer) && export.allows(&answer));
    }
}
