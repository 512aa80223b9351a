//! `yy guest serve`: the guest agent inside a computer. It speaks the JSON-lines protocol
//! of [`super::protocol`] on stdin/stdout, runs requests concurrently, runs every command in
//! its own process group (so a timeout or cancel kills the whole tree) and confines file
//! operations to the workspace root. It needs no network.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::confine::{OpError, Workspace, kind_of, mtime_ms};
use super::protocol::*;

/// How long output is still collected after the command exited (a background process may
/// hold the pipes open; it keeps running, its later output is dropped).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);

type Out = mpsc::Sender<Vec<u8>>;
type Inflight = Arc<Mutex<HashMap<u64, CancellationToken>>>;

fn line<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    v.push(b'\n');
    v
}

fn frame(id: u64, body: FrameBody) -> Vec<u8> {
    line(&Frame { id, body })
}

fn result_frame<T: serde::Serialize>(id: u64, r: Result<T, OpError>) -> Vec<u8> {
    match r
        .and_then(|v| serde_json::to_value(v).map_err(|e| OpError::new(codes::IO, e.to_string())))
    {
        Ok(result) => frame(id, FrameBody::Result { result }),
        Err(e) => frame(
            id,
            FrameBody::Error {
                error: ErrorBody {
                    code: e.code.into(),
                    message: e.message,
                },
            },
        ),
    }
}

/// The hello line for a workspace.
pub fn hello(ws: &Workspace) -> Hello {
    // SAFETY: these getters cannot fail and touch no memory.
    let (ruid, euid, egid) = unsafe { (libc::getuid(), libc::geteuid(), libc::getegid()) };
    Hello {
        kind: super::protocol::HelloType::Hello,
        protocol: PROTOCOL,
        yy_version: crate::VERSION.into(),
        workspace: ws.root().display().to_string(),
        uid: euid,
        gid: egid,
        agent_uid: super::identity::runs_apart().then_some(ruid),
    }
}

/// Serves requests from `input` until it closes, then kills what still runs.
pub async fn serve(
    workspace: &Path,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let ws = Arc::new(Workspace::open(workspace).map_err(|e| {
        std::io::Error::new(e.kind(), format!("workspace {}: {e}", workspace.display()))
    })?);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(bytes) = rx.recv().await {
            output.write_all(&bytes).await?;
            if rx.is_empty() {
                output.flush().await?;
            }
        }
        output.flush().await
    });
    let _ = tx.send(line(&hello(&ws))).await;
    let inflight: Inflight = Arc::default();
    let mut input = BufReader::new(input);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let too_long = match read_line_bounded(&mut input, &mut raw, MAX_FRAME_BYTES).await? {
            Line::End => break,
            Line::Complete => false,
            Line::TooLong => true,
        };
        if too_long {
            let err: Result<(), _> = Err(OpError::new(
                codes::TOO_LARGE,
                format!("a request is at most {} MiB", MAX_FRAME_BYTES >> 20),
            ));
            let _ = tx.send(result_frame(0, err)).await;
            continue;
        }
        let text = String::from_utf8_lossy(&raw);
        if text.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&text) {
            Ok(r) => r,
            Err(e) => {
                let id = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
                    .unwrap_or(0);
                let err: Result<(), _> = Err(OpError::bad(format!("malformed request: {e}")));
                let _ = tx.send(result_frame(id, err)).await;
                continue;
            }
        };
        tokio::spawn(handle(req, ws.clone(), tx.clone(), inflight.clone()));
    }
    // The host went away: nothing may outlive the session unsupervised.
    for (_, token) in inflight.lock().map(|m| m.clone()).unwrap_or_default() {
        token.cancel();
    }
    drop(tx);
    let deadline = tokio::time::sleep(Duration::from_secs(5));
    tokio::select! {
        r = writer => r.unwrap_or(Ok(())),
        _ = deadline => Ok(()),
    }
}

enum Line {
    Complete,
    /// Longer than the limit: read up to its newline and dropped.
    TooLong,
    End,
}

/// Reads one line (without its newline) into `out`, keeping at most `max` bytes of it.
async fn read_line_bounded(
    input: &mut (impl tokio::io::AsyncBufRead + Unpin),
    out: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if !any {
                Line::End
            } else if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
        any = true;
        let (part, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long && out.len() + part.len() <= max {
            out.extend_from_slice(part);
        } else {
            too_long = true;
            out.clear();
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

async fn handle(req: Request, ws: Arc<Workspace>, tx: Out, inflight: Inflight) {
    let id = req.id;
    let bytes = match req.op {
        Op::Exec(p) => {
            let token = CancellationToken::new();
            if let Ok(mut m) = inflight.lock() {
                m.insert(id, token.clone());
            }
            let live = p.stream.then(|| (id, tx.clone()));
            let r = exec(&ws, p, token, live).await;
            if let Ok(mut m) = inflight.lock() {
                m.remove(&id);
            }
            result_frame(id, r)
        }
        Op::Cancel { target } => {
            let token = inflight.lock().ok().and_then(|m| m.get(&target).cloned());
            if let Some(t) = &token {
                t.cancel();
            }
            result_frame(
                id,
                Ok(CancelResult {
                    cancelled: token.is_some(),
                }),
            )
        }
        Op::Version => result_frame(
            id,
            Ok(VersionResult {
                protocol: PROTOCOL,
                yy_version: crate::VERSION.into(),
            }),
        ),
        Op::Export { path } => {
            let tx2 = tx.clone();
            blocking(id, move || export(&ws, &path, id, &tx2)).await
        }
        Op::Read { path, max_bytes } => blocking(id, move || read(&ws, &path, max_bytes)).await,
        Op::Write {
            path,
            content,
            mode,
        } => blocking(id, move || write(&ws, &path, &content, mode)).await,
        Op::List { path } => blocking(id, move || list(&ws, &path)).await,
        Op::Stat { path } => blocking(id, move || stat(&ws, &path)).await,
        Op::Screen(action) => blocking(id, move || super::screen::act(ws.root(), &action)).await,
        Op::ScreenAt { frame_id, action } => {
            blocking(id, move || {
                super::screen::check_frame(&frame_id)?;
                super::screen::act(ws.root(), &action)
            })
            .await
        }
        Op::Display => blocking(id, move || super::screen::ensure_display(ws.root())).await,
        Op::Browser { action } => {
            blocking(id, move || super::browser::browser(ws.root(), action)).await
        }
    };
    let _ = tx.send(bytes).await;
}

/// Runs a blocking file operation off the async threads.
async fn blocking<T, F>(id: u64, f: F) -> Vec<u8>
where
    T: serde::Serialize + Send + 'static,
    F: FnOnce() -> Result<T, OpError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => result_frame(id, r),
        Err(e) => result_frame::<()>(id, Err(OpError::new(codes::IO, e.to_string()))),
    }
}

// ---- exec -------------------------------------------------------------------------------

/// Output of one stream, shared so a drain that is cut short keeps what it read.
#[derive(Default)]
struct Captured {
    data: Vec<u8>,
    truncated: bool,
}

/// Output is sent live at the latest this long after its first byte arrived, or sooner in
/// pieces of [`LIVE_PIECE`]: a program that writes a byte at a time makes a frame per
/// tenth of a second, not one per byte.
const LIVE_EVERY: Duration = Duration::from_millis(100);
const LIVE_PIECE: usize = 16 * 1024;

/// Where a streamed exec sends its output while it runs: `output` frames of request `id`,
/// at most `budget` bytes of each stream.
struct Live {
    id: u64,
    stream: StdStream,
    tx: Out,
    budget: usize,
    pending: Vec<u8>,
    since: Option<tokio::time::Instant>,
}

impl Live {
    fn push(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(self.budget);
        self.budget -= take;
        self.pending.extend_from_slice(&bytes[..take]);
        if take > 0 && self.since.is_none() {
            self.since = Some(tokio::time::Instant::now());
        }
    }

    fn due(&self) -> Option<tokio::time::Instant> {
        self.since.map(|t| t + LIVE_EVERY)
    }

    /// Sends what is pending; a character cut off at the end waits for its other bytes
    /// unless this is the last piece. False once the session is gone.
    async fn flush(&mut self, last: bool) -> bool {
        let whole = if last {
            self.pending.len()
        } else {
            whole_chars(&self.pending)
        };
        self.since = None;
        if whole == 0 {
            return true;
        }
        let rest = self.pending.split_off(whole);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        if !self.pending.is_empty() {
            self.since = Some(tokio::time::Instant::now());
        }
        let body = FrameBody::Output {
            stream: self.stream,
            text,
        };
        self.tx.send(frame(self.id, body)).await.is_ok()
    }
}

/// The length of `b` without a UTF-8 sequence cut off at its end.
fn whole_chars(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=n.min(4) {
        let byte = b[n - back];
        if byte & 0xC0 != 0x80 {
            let needs = match byte {
                0xF0.. => 4,
                0xE0.. => 3,
                0xC0.. => 2,
                _ => 1,
            };
            return if needs > back { n - back } else { n };
        }
    }
    n
}

fn capture(
    mut reader: impl AsyncRead + Unpin + Send + 'static,
    cap: usize,
    mut live: Option<Live>,
) -> (Arc<Mutex<Captured>>, tokio::task::JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Captured::default()));
    let shared = buf.clone();
    let task = tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let due = live.as_ref().and_then(Live::due);
            let read = tokio::select! {
                // `read` is cancel safe: a timer that fires first loses no bytes.
                r = reader.read(&mut chunk) => r,
                _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                    if let Some(l) = live.as_mut() && !l.flush(false).await {
                        live = None;
                    }
                    continue;
                }
            };
            let n = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Ok(mut c) = shared.lock() {
                let room = cap.saturating_sub(c.data.len());
                c.data.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    c.truncated = true;
                }
            }
            if let Some(l) = live.as_mut() {
                l.push(&chunk[..n]);
                if l.pending.len() >= LIVE_PIECE && !l.flush(false).await {
                    live = None;
                }
            }
        }
        if let Some(mut l) = live {
            l.flush(true).await;
        }
    });
    (buf, task)
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals the process group; no memory involved.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Runs a command; with `live` (its request id and the session's output) its output is
/// also sent as it arrives.
pub async fn exec(
    ws: &Workspace,
    p: ExecParams,
    cancel: CancellationToken,
    live: Option<(u64, Out)>,
) -> Result<ExecResult, OpError> {
    let argv: Vec<String> = match (p.argv, p.shell) {
        (Some(a), None) if !a.is_empty() => a,
        (None, Some(s)) => vec!["/bin/sh".into(), "-c".into(), s],
        _ => {
            return Err(OpError::bad(
                "exec needs exactly one of argv (non-empty) and shell",
            ));
        }
    };
    let cwd = match p.cwd.as_deref() {
        None | Some("") => ws.root().to_path_buf(),
        Some(c) if Path::new(c).is_absolute() => PathBuf::from(c),
        Some(c) => ws.root().join(c),
    };
    if !cwd.is_dir() {
        return Err(OpError::new(
            codes::NOT_FOUND,
            format!("working directory {} does not exist", cwd.display()),
        ));
    }
    let cap = p
        .output_cap_bytes
        .unwrap_or(DEFAULT_OUTPUT_CAP)
        .min(MAX_OUTPUT_CAP) as usize;
    let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).max(1));
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&argv[0]);
    super::identity::as_user(command.as_std_mut());
    let mut child = command
        .args(&argv[1..])
        .current_dir(&cwd)
        .env_remove("YY_LOG")
        .envs(&p.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| OpError::new(codes::SPAWN, format!("cannot run {}: {e}", argv[0])))?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let live = |stream| {
        live.clone().map(|(id, tx)| Live {
            id,
            stream,
            tx,
            budget: cap,
            pending: Vec::new(),
            since: None,
        })
    };
    let (out, out_task) = capture(
        child.stdout.take().expect("piped stdout"),
        cap,
        live(StdStream::Stdout),
    );
    let (err, err_task) = capture(
        child.stderr.take().expect("piped stderr"),
        cap,
        live(StdStream::Stderr),
    );
    let mut timed_out = false;
    let mut cancelled = false;
    let status = tokio::select! {
        s = child.wait() => s,
        _ = tokio::time::sleep(timeout) => {
            timed_out = true;
            kill_group(pgid);
            child.wait().await
        }
        _ = cancel.cancelled() => {
            cancelled = true;
            kill_group(pgid);
            child.wait().await
        }
    }
    .map_err(|e| OpError::new(codes::IO, format!("waiting for {}: {e}", argv[0])))?;
    let (out_abort, err_abort) = (out_task.abort_handle(), err_task.abort_handle());
    let drain = async {
        let _ = out_task.await;
        let _ = err_task.await;
    };
    if tokio::time::timeout(DRAIN_AFTER_EXIT, drain).await.is_err() {
        // A background process holds the pipes: stop reading (it keeps running).
        out_abort.abort();
        err_abort.abort();
    }
    // The cap holds for what is sent: the text as a JSON string, escapes included.
    let take = |c: &Arc<Mutex<Captured>>| {
        c.lock()
            .map(|c| {
                let (text, cut) = fit_json(&c.data, cap);
                (text, c.truncated || cut)
            })
            .unwrap_or_default()
    };
    let (stdout, stdout_truncated) = take(&out);
    let (stderr, stderr_truncated) = take(&err);
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        truncated: stdout_truncated || stderr_truncated,
        timed_out,
        cancelled,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

// ---- files ------------------------------------------------------------------------------

fn read(ws: &Workspace, path: &str, max: Option<u64>) -> Result<ReadResult, OpError> {
    let (file, real) = ws.open_existing(path)?;
    let meta = file.metadata().map_err(|e| OpError::io(path, e))?;
    if !meta.is_file() {
        return Err(OpError::new(
            codes::WRONG_TYPE,
            format!("{path} is not a regular file"),
        ));
    }
    let max = max.unwrap_or(DEFAULT_READ_BYTES).min(MAX_READ_BYTES);
    let mut data = Vec::new();
    file.take(max)
        .read_to_end(&mut data)
        .map_err(|e| OpError::io(path, e))?;
    Ok(ReadResult {
        path: ws.relative(&real),
        size: meta.len(),
        truncated: meta.len() > data.len() as u64,
        content: B64.encode(&data),
    })
}

fn write(
    ws: &Workspace,
    path: &str,
    content: &str,
    mode: Option<u32>,
) -> Result<WriteResult, OpError> {
    let data = B64
        .decode(content)
        .map_err(|e| OpError::bad(format!("content is not base64: {e}")))?;
    if data.len() > MAX_WRITE_BYTES {
        return Err(OpError::new(
            codes::TOO_LARGE,
            format!("a write is at most {} MiB", MAX_WRITE_BYTES >> 20),
        ));
    }
    let mode = mode.unwrap_or(0o644) & 0o777;
    let (parent, name) = ws.creatable(path)?;
    let dir = std::fs::File::open(&parent).map_err(|e| OpError::io(path, e))?;
    let real_parent = ws.check_fd(&dir, path)?;
    // Everything below goes through the pinned directory descriptor.
    let pinned = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&dir)
    ));
    let tmp = pinned.join(format!(
        ".{}.yy-{}",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(&data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, pinned.join(&name))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(OpError::io(path, e));
    }
    Ok(WriteResult {
        path: ws.relative(&real_parent.join(&name)),
        size: data.len() as u64,
        sha256: hex::encode(Sha256::digest(&data)),
    })
}

fn list(ws: &Workspace, path: &str) -> Result<ListResult, OpError> {
    let real = ws.existing(path)?;
    let dir = std::fs::File::open(&real).map_err(|e| OpError::io(path, e))?;
    let real = ws.check_fd(&dir, path)?;
    if !dir.metadata().map_err(|e| OpError::io(path, e))?.is_dir() {
        return Err(OpError::new(
            codes::WRONG_TYPE,
            format!("{path} is not a directory"),
        ));
    }
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in std::fs::read_dir(&real).map_err(|e| OpError::io(path, e))? {
        let entry = entry.map_err(|e| OpError::io(path, e))?;
        if entries.len() >= MAX_LIST_ENTRIES {
            truncated = true;
            break;
        }
        let Ok(meta) = entry.metadata() else { continue };
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            info: file_info(&meta),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ListResult {
        path: ws.relative(&real),
        entries,
        truncated,
    })
}

fn stat(ws: &Workspace, path: &str) -> Result<StatResult, OpError> {
    let real = ws.existing(path)?;
    let meta = std::fs::metadata(&real).map_err(|e| OpError::io(path, e))?;
    Ok(StatResult {
        path: ws.relative(&real),
        info: file_info(&meta),
    })
}

fn file_info(meta: &std::fs::Metadata) -> FileInfo {
    FileInfo {
        kind: kind_of(meta),
        size: meta.len(),
        mode: meta.permissions().mode() & 0o7777,
        mtime_ms: mtime_ms(meta),
    }
}

/// Removes the snapshot directory however the export ends.
struct Snapshot(PathBuf);

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn export(ws: &Workspace, path: &str, id: u64, tx: &Out) -> Result<ExportResult, OpError> {
    let (mut file, real) = ws.open_existing(path)?;
    if !file.metadata().map_err(|e| OpError::io(path, e))?.is_file() {
        return Err(OpError::new(
            codes::WRONG_TYPE,
            format!("{path} is not a regular file (archive a directory first, e.g. with tar)"),
        ));
    }
    let tmp = std::env::temp_dir().join(format!("yy-export-{}", uuid::Uuid::new_v4().simple()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| OpError::io("the export snapshot", e))?;
    let snap = Snapshot(tmp);
    let copy = snap.0.join("snapshot");
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&copy)
        .map_err(|e| OpError::io("the export snapshot", e))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = file.read(&mut buf).map_err(|e| OpError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| OpError::io("the export snapshot", e))?;
        size += n as u64;
    }
    drop(out);
    let sha256 = hex::encode(hasher.finalize());
    let mut snapshot = std::fs::File::open(&copy).map_err(|e| OpError::io(path, e))?;
    let mut seq = 0u64;
    loop {
        let mut filled = 0;
        while filled < CHUNK_BYTES {
            let n = snapshot
                .read(&mut buf[filled..])
                .map_err(|e| OpError::io("the export snapshot", e))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        let data = B64.encode(&buf[..filled]);
        if tx
            .blocking_send(frame(id, FrameBody::Chunk { seq, data }))
            .is_err()
        {
            return Err(OpError::new(
                codes::IO,
                "the session closed during the export",
            ));
        }
        seq += 1;
    }
    Ok(ExportResult {
        path: ws.relative(&real),
        size,
        sha256,
        chunks: seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_off_at_the_end_waits_for_its_other_bytes() {
        let text = "a你😀".as_bytes();
        assert_eq!(whole_chars(text), text.len());
        assert_eq!(whole_chars(&text[..text.len() - 1]), 4, "the emoji waits");
        assert_eq!(whole_chars(&text[..2]), 1, "the CJK character waits");
        assert_eq!(whole_chars(b""), 0);
        // Bytes that can never complete a character are sent (as U+FFFD) rather than held.
        assert_eq!(whole_chars(&[0x80, 0x80, 0x80, 0x80, 0x80]), 5);
    }
}
