//! Live output of a supervised Hermes's terminal commands (host agents). Hermes's gateway
//! reports a tool only when it starts and when it completes, so the Runner taps the
//! commands themselves: the Hermes it starts finds a Runner-written `bash` first on its
//! PATH, which runs the real bash through `yy tool-tap` (commands/tool_tap.rs); the tap
//! copies the output through unchanged and sends each piece, best-effort, to this
//! Runner's datagram socket with Hermes's session id. Here the pieces are checked and
//! handed to the running turn of that session (turns.rs), which makes `tool.output`
//! events of them (host_output.rs).
//!
//! Host agents are not isolated from the Runner's user, so anything of that user may write
//! to the socket: every datagram is size-checked and parsed defensively, and only reaches
//! a turn this Runner is running for one of its channel's sessions.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixDatagram;
use tokio::sync::mpsc;

use super::host_output::Piece;
use crate::api::sessions::StdStream;

/// Names the Runner's socket in Hermes's environment (a path, not a secret).
pub const SOCKET_ENV: &str = "YY_TOOL_OUTPUT_SOCKET";
/// Hermes's live session id (`session.create`'s `session_id`) in a tool's environment,
/// set while a `prompt.submit` of that session runs.
pub const SESSION_ENV: &str = "HERMES_UI_SESSION_ID";
/// Hermes's stored session id (`stored_session_id`) in a tool's environment.
pub const SESSION_KEY_ENV: &str = "HERMES_SESSION_KEY";
/// Output bytes in one datagram at most.
pub const MAX_DATA: usize = 16 * 1024;
/// A datagram at most: the header's fields are bounded too.
const MAX_DATAGRAM: usize = MAX_DATA + 1024;
const MAX_FIELD: usize = 128;
const MAGIC: &[u8] = b"yytap1\n";
/// Pieces queued for one turn; more are dropped (and counted).
const ROUTE_QUEUE: usize = 256;

/// One datagram from the tap.
#[derive(Debug, PartialEq)]
pub struct Message {
    /// Hermes's live session id ([`SESSION_ENV`]), maybe empty.
    pub session: String,
    /// Hermes's stored session id ([`SESSION_KEY_ENV`]), maybe empty.
    pub session_key: String,
    pub piece: Piece,
}

/// The datagram for a piece: `yytap1\n`, then invocation, session, session key, stream
/// (`o`/`e`) and dropped bytes, one line each, then the output bytes.
pub fn encode(
    invocation: &str,
    session: &str,
    session_key: &str,
    stream: StdStream,
    dropped: u64,
    data: &[u8],
) -> Vec<u8> {
    let s = match stream {
        StdStream::Stdout => "o",
        StdStream::Stderr => "e",
    };
    let mut out = Vec::with_capacity(MAGIC.len() + 64 + data.len());
    out.extend_from_slice(MAGIC);
    for field in [invocation, session, session_key, s, &dropped.to_string()] {
        let field: String = field
            .chars()
            .filter(|c| *c != '\n')
            .take(MAX_FIELD)
            .collect();
        out.extend_from_slice(field.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(data);
    out
}

/// A datagram as sent by [`encode`]; `None` for anything else.
pub fn parse(buf: &[u8]) -> Option<Message> {
    if buf.len() > MAX_DATAGRAM {
        return None;
    }
    let mut rest = buf.strip_prefix(MAGIC)?;
    let mut fields = Vec::with_capacity(5);
    for _ in 0..5 {
        let end = rest
            .iter()
            .take(MAX_FIELD * 4 + 1)
            .position(|&b| b == b'\n')?;
        fields.push(std::str::from_utf8(&rest[..end]).ok()?.to_string());
        rest = &rest[end + 1..];
    }
    if rest.len() > MAX_DATA || fields.iter().any(|f| f.chars().count() > MAX_FIELD) {
        return None;
    }
    let stream = match fields[3].as_str() {
        "o" => StdStream::Stdout,
        "e" => StdStream::Stderr,
        _ => return None,
    };
    let dropped = fields[4].parse().ok()?;
    if fields[0].is_empty() || (fields[1].is_empty() && fields[2].is_empty()) {
        return None;
    }
    Some(Message {
        session: std::mem::take(&mut fields[1]),
        session_key: std::mem::take(&mut fields[2]),
        piece: Piece {
            invocation: std::mem::take(&mut fields[0]),
            stream,
            data: rest.to_vec(),
            dropped,
        },
    })
}

struct Route {
    token: u64,
    tx: mpsc::Sender<Piece>,
    /// Bytes dropped since the last piece that got through (the turn was behind).
    dropped: u64,
}

/// The running turns by Hermes session id (live and stored).
#[derive(Default)]
struct Routes {
    map: Mutex<HashMap<String, Route>>,
    next: Mutex<u64>,
}

impl Routes {
    fn deliver(&self, msg: Message) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let key = [&msg.session, &msg.session_key]
            .into_iter()
            .find(|k| !k.is_empty() && map.contains_key(k.as_str()))
            .cloned();
        // Not a turn running here (or not this Runner's session): nothing to do.
        let Some(route) = key.and_then(|k| map.get_mut(&k)) else {
            return;
        };
        let mut piece = msg.piece;
        let len = piece.data.len() as u64;
        piece.dropped = piece.dropped.saturating_add(route.dropped);
        match route.tx.try_send(piece) {
            Ok(()) => route.dropped = 0,
            Err(_) => route.dropped = route.dropped.saturating_add(len),
        }
    }
}

/// A running turn's pieces; unsubscribes when dropped.
pub struct Subscription {
    pub rx: mpsc::Receiver<Piece>,
    routes: Arc<Routes>,
    ids: Vec<String>,
    token: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.routes.map.lock().unwrap_or_else(|p| p.into_inner());
        for id in &self.ids {
            if map.get(id).is_some_and(|r| r.token == self.token) {
                map.remove(id);
            }
        }
    }
}

/// The socket, the shim and the listener. Dropping it stops listening and removes the
/// socket.
pub struct ToolTap {
    socket: crate::fsutil::SocketPath,
    shim_dir: PathBuf,
    routes: Arc<Routes>,
    listener: tokio::task::JoinHandle<()>,
}

/// `'text'` for sh.
fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// The first executable `bash` on `path`, skipping `skip` (the shim's own directory).
fn find_bash(path: Option<&std::ffi::OsStr>, skip: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    dirs.into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .filter(|d| d.is_absolute() && d != skip)
        .map(|d| d.join("bash"))
        .find(|b| {
            std::fs::metadata(b).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The shim: the tap for a command of a Hermes session, plain bash for anything else
/// (and when the yy binary is gone, e.g. replaced by an upgrade).
fn shim_script(yy: &Path, bash: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         # Written by the yy Runner: Hermes's terminal commands run through `yy tool-tap`,\n\
         # which sends their output live to the Runner (docs/hermes.md).\n\
         if [ -n \"${{{socket}-}}\" ] && [ -n \"${{{session}-}}${{{key}-}}\" ] && [ -x {yy} ]; then\n\
         \x20 exec {yy} tool-tap -- {bash} \"$@\"\n\
         fi\n\
         unset {socket}\n\
         exec {bash} \"$@\"\n",
        socket = SOCKET_ENV,
        session = SESSION_ENV,
        key = SESSION_KEY_ENV,
        yy = sh_quote(yy),
        bash = sh_quote(bash),
    )
}

impl ToolTap {
    /// Writes the shim under `data_dir/tool-tap` and listens on its socket.
    pub fn start(data_dir: &Path) -> io::Result<ToolTap> {
        use std::os::unix::fs::PermissionsExt;
        let dir = data_dir.join("tool-tap");
        let shim_dir = dir.join("bin");
        crate::fsutil::create_private_dir(&dir)?;
        crate::fsutil::create_private_dir(&shim_dir)?;
        let yy = std::env::current_exe()?;
        let path = std::env::var_os("PATH");
        let bash = find_bash(path.as_deref(), &shim_dir)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no bash on PATH"))?;
        crate::fsutil::write_atomic(
            &shim_dir.join("bash"),
            shim_script(&yy, &bash).as_bytes(),
            0o700,
        )?;
        std::fs::set_permissions(
            shim_dir.join("bash"),
            std::fs::Permissions::from_mode(0o700),
        )?;

        let socket = crate::fsutil::SocketPath::new(&dir, "output.sock", "yy-tool-tap")?;
        let sock = UnixDatagram::bind(socket.path())?;
        let routes = Arc::new(Routes::default());
        let listener = tokio::spawn(listen(sock, routes.clone()));
        tracing::info!(socket = %socket.path().display(), bash = %bash.display(), "tool output tap ready");
        Ok(ToolTap {
            socket,
            shim_dir,
            routes,
            listener,
        })
    }

    /// Environment for the Hermes the Runner starts: the shim first on PATH, the socket.
    pub fn hermes_env(&self) -> Vec<(String, String)> {
        let mut dirs = vec![self.shim_dir.clone()];
        if let Some(p) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&p).filter(|d| d != &self.shim_dir));
        }
        let path = std::env::join_paths(dirs)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| self.shim_dir.display().to_string());
        vec![
            ("PATH".into(), path),
            (SOCKET_ENV.into(), self.socket.path().display().to_string()),
        ]
    }

    /// Pieces for the turn of the Hermes session known by `ids` (live and stored id).
    pub fn subscribe(&self, ids: &[&str]) -> Subscription {
        let (tx, rx) = mpsc::channel(ROUTE_QUEUE);
        let token = {
            let mut next = self.routes.next.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let ids: Vec<String> = ids
            .iter()
            .filter(|i| !i.is_empty())
            .map(|i| i.to_string())
            .collect();
        let mut map = self.routes.map.lock().unwrap_or_else(|p| p.into_inner());
        for id in &ids {
            map.insert(
                id.clone(),
                Route {
                    token,
                    tx: tx.clone(),
                    dropped: 0,
                },
            );
        }
        drop(map);
        Subscription {
            rx,
            routes: self.routes.clone(),
            ids,
            token,
        }
    }
}

impl Drop for ToolTap {
    fn drop(&mut self) {
        // The socket (and its temp directory) go with `socket`.
        self.listener.abort();
    }
}

async fn listen(sock: UnixDatagram, routes: Arc<Routes>) {
    // One byte more than any valid datagram: a longer one shows as too long.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    loop {
        match sock.recv(&mut buf).await {
            Ok(n) => {
                if let Some(msg) = parse(&buf[..n]) {
                    routes.deliver(msg);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "tool output socket");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_round_trips_and_anything_else_is_refused() {
        let d = encode(
            "123-9",
            "abcd1234",
            "20260101_x",
            StdStream::Stderr,
            7,
            b"hi\n\xff",
        );
        let m = parse(&d).unwrap();
        assert_eq!(m.session, "abcd1234");
        assert_eq!(m.session_key, "20260101_x");
        assert_eq!(m.piece.invocation, "123-9");
        assert_eq!(m.piece.stream, StdStream::Stderr);
        assert_eq!(m.piece.dropped, 7);
        assert_eq!(m.piece.data, b"hi\n\xff");
        // Empty output is fine; no session at all is not.
        assert!(parse(&encode("i", "s", "", StdStream::Stdout, 0, b"")).is_some());
        assert!(parse(&encode("i", "", "", StdStream::Stdout, 0, b"x")).is_none());
        assert!(parse(&encode("", "s", "k", StdStream::Stdout, 0, b"x")).is_none());
        for bad in [
            &b""[..],
            b"yytap1\n",
            b"yytap2\ni\ns\nk\no\n0\nx",
            b"yytap1\ni\ns\nk\nx\n0\nx",
            b"yytap1\ni\ns\nk\no\n-1\nx",
            b"yytap1\ni\ns\nk\no\n0",
            b"yytap1\ni\n\xff\nk\no\n0\nx",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
        // Too much output, or too long a field.
        for (len, taken) in [(MAX_DATA, true), (MAX_DATA + 1, false)] {
            let data = vec![b'a'; len];
            let message = encode("i", "s", "k", StdStream::Stdout, 0, &data);
            assert_eq!(parse(&message).is_some(), taken, "{len} bytes");
        }
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&[b's'; MAX_FIELD + 1]);
        long.extend_from_slice(b"\ns\nk\no\n0\nx");
        assert!(parse(&long).is_none());
        // encode never writes a field parse refuses.
        let m = parse(&encode(
            &"i\n".repeat(200),
            "s",
            "k",
            StdStream::Stdout,
            0,
            b"x",
        ))
        .unwrap();
        assert_eq!(m.piece.invocation, "i".repeat(MAX_FIELD));
    }

    #[test]
    fn pieces_reach_only_a_subscribed_session_and_a_full_queue_counts_what_it_drops() {
        let routes = Arc::new(Routes::default());
        let tap_routes = routes.clone();
        let subscribe = |ids: &[&str], token: u64| {
            let (tx, rx) = mpsc::channel(2);
            let mut map = tap_routes.map.lock().unwrap();
            for id in ids {
                map.insert(
                    id.to_string(),
                    Route {
                        token,
                        tx: tx.clone(),
                        dropped: 0,
                    },
                );
            }
            Subscription {
                rx,
                routes: tap_routes.clone(),
                ids: ids.iter().map(|s| s.to_string()).collect(),
                token,
            }
        };
        let msg = |session: &str, key: &str, data: &[u8]| {
            parse(&encode("inv", session, key, StdStream::Stdout, 0, data)).unwrap()
        };
        let mut sub = subscribe(&["live1", "stored1"], 1);
        routes.deliver(msg("other", "", b"not mine"));
        routes.deliver(msg("live1", "", b"a"));
        routes.deliver(msg("", "stored1", b"b"));
        routes.deliver(msg("live1", "", b"ccc"));
        assert_eq!(sub.rx.try_recv().unwrap().data, b"a");
        assert_eq!(sub.rx.try_recv().unwrap().data, b"b");
        assert!(sub.rx.try_recv().is_err());
        routes.deliver(msg("live1", "", b"d"));
        let p = sub.rx.try_recv().unwrap();
        assert_eq!((p.data.as_slice(), p.dropped), (&b"d"[..], 3));
        drop(sub);
        assert!(routes.map.lock().unwrap().is_empty());
        // An older subscription going away leaves a newer one of the same session alone.
        let old = subscribe(&["s"], 2);
        let mut new = subscribe(&["s"], 3);
        drop(old);
        routes.deliver(msg("s", "", b"x"));
        assert_eq!(new.rx.try_recv().unwrap().data, b"x");
    }

    #[test]
    fn the_shim_finds_the_real_bash_and_never_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let shim_dir = tmp.path().join("bin");
        std::fs::create_dir(&shim_dir).unwrap();
        std::fs::write(shim_dir.join("bash"), "#!/bin/sh\n").unwrap();
        let path = std::env::join_paths([shim_dir.clone(), PathBuf::from("/usr/bin")]).unwrap();
        let bash = find_bash(Some(&path), &shim_dir).unwrap();
        assert_ne!(bash.parent().unwrap(), shim_dir);
        let script = shim_script(Path::new("/opt/y'y/yy"), &bash);
        assert!(
            script.contains(r"'/opt/y'\''y/yy' tool-tap -- "),
            "{script}"
        );
    }
}
