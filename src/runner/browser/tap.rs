//! The socket the Hermes plugin calls (`plugin.py`): one JSON request line per connection,
//! one JSON answer. Only the supervised Hermes process itself is served (its pid, from the
//! kernel's peer credentials): the shells its terminal tool starts, or anything else of
//! the Runner's user, cannot drive a browser through it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::ManagedBrowser;
use crate::fsutil::SocketPath;

/// Names the socket in Hermes's environment (a path, not a secret).
pub const SOCKET_ENV: &str = "YY_BROWSER_SOCKET";
/// A request line at most (a typed text is the largest part).
const MAX_REQUEST: usize = 256 * 1024;
/// Calls served at once; more wait for a slot.
const MAX_CALLS: usize = 32;
/// How long a request line may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Socket {
    path: SocketPath,
    listener: std::sync::Mutex<Option<UnixListener>>,
}

impl Socket {
    /// Binds `data_dir/browser/tools.sock` (directory 0700).
    pub fn bind(data_dir: &Path) -> std::io::Result<Socket> {
        let dir = data_dir.join("browser");
        crate::fsutil::create_private_dir(&dir)?;
        let path = SocketPath::new(&dir, "tools.sock", "yy-browser")?;
        let listener = UnixListener::bind(path.path())?;
        Ok(Socket {
            path,
            listener: std::sync::Mutex::new(Some(listener)),
        })
    }

    pub fn path(&self) -> &Path {
        self.path.path()
    }
}

/// Serves the socket for as long as the service lives.
pub fn listen(browser: Arc<ManagedBrowser>) {
    let Some(listener) = browser
        .socket
        .listener
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    else {
        return;
    };
    let weak = Arc::downgrade(&browser);
    drop(browser);
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CALLS));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let Some(browser) = weak.upgrade() else {
                return;
            };
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            tokio::spawn(async move {
                serve(&browser, stream).await;
                drop(slot);
            });
        }
    });
}

#[derive(Deserialize)]
struct Request {
    v: u32,
    #[serde(default)]
    session: String,
    #[serde(default)]
    session_key: String,
    tool: String,
    #[serde(default)]
    args: Value,
}

async fn serve(browser: &ManagedBrowser, stream: UnixStream) {
    let peer = stream.peer_cred().ok().and_then(|c| c.pid());
    let (read, mut write) = stream.into_split();
    let answer = match browser.hermes_pid.get() {
        Some(&hermes) if peer.is_some_and(|p| p as u32 == hermes) => {
            match read_request(read).await {
                Ok(req) => answer(browser, req).await,
                Err(e) => refused(&e),
            }
        }
        _ => {
            tracing::warn!(peer = ?peer, "browser socket: refused a caller that is not the Runner's Hermes");
            refused("only the Hermes this Runner started may use its browser")
        }
    };
    let mut line = serde_json::to_vec(&answer).unwrap_or_default();
    line.push(b'\n');
    let _ = write.write_all(&line).await;
    let _ = write.shutdown().await;
}

fn refused(message: &str) -> Value {
    json!({ "ok": false, "error": message })
}

async fn read_request(read: tokio::net::unix::OwnedReadHalf) -> Result<Request, String> {
    let mut line = Vec::new();
    let mut reader = BufReader::new(read).take(MAX_REQUEST as u64 + 1);
    tokio::time::timeout(READ_TIMEOUT, reader.read_until(b'\n', &mut line))
        .await
        .map_err(|_| "the request did not arrive in time".to_string())?
        .map_err(|e| format!("cannot read the request: {e}"))?;
    if line.len() > MAX_REQUEST {
        return Err(format!("the request is larger than {MAX_REQUEST} bytes"));
    }
    let req: Request =
        serde_json::from_slice(&line).map_err(|e| format!("malformed request: {e}"))?;
    if req.v != 1 {
        return Err(format!("request version {} is not 1", req.v));
    }
    Ok(req)
}

async fn answer(browser: &ManagedBrowser, req: Request) -> Value {
    let Some(agent) = browser.granted(&req.session, &req.session_key) else {
        return refused(
            "this turn may not use a browser: the agent's managed browser is off (an admin turns it on with `yy agent update AGENT --browser`), or the turn has ended",
        );
    };
    // An operator holding the browser: wait until it is handed back, then go on only if
    // the turn still runs.
    let _pass = browser.model_pass(&agent).await;
    if browser.granted(&req.session, &req.session_key).as_deref() != Some(agent.as_str()) {
        return refused("the turn ended while an operator held the browser");
    }
    let note = browser.take_note(&agent).map(|n| {
        format!("[An operator took over your browser and handed it back with this note: {n}]\n")
    });
    match super::tools::run(browser, &agent, &req.tool, &req.args).await {
        Ok(mut done) => {
            if let Some(n) = note {
                done.text.insert_str(0, &n);
            }
            done.to_json()
        }
        Err(e) => refused(&format!("{}{e}", note.unwrap_or_default())),
    }
}
