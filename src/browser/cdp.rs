//! The DevTools protocol over Chromium's debugging pipe (`--remote-debugging-pipe`): JSON
//! messages, each ended by a NUL byte, commands written to the browser's fd 3 and answers
//! and events read from its fd 4. A pipe rather than a debugging port: no other process
//! of the host (a host agent's Hermes included) can reach it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::BrowserError;

/// Longest message taken from the browser (a full-page screenshot in base64 fits).
pub const MAX_MESSAGE: usize = 64 << 20;
/// How long a command may wait for its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Value>>>>>;

/// One DevTools connection; commands may be sent from several tasks at once.
pub struct Cdp {
    to_browser: tokio::sync::Mutex<pipe::Sender>,
    pending: Pending,
    next: std::sync::atomic::AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Cdp {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Cdp {
    pub fn new(to_browser: pipe::Sender, from_browser: pipe::Receiver) -> Cdp {
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let reader = tokio::spawn(read_answers(from_browser, pending.clone()));
        Cdp {
            to_browser: tokio::sync::Mutex::new(to_browser),
            pending,
            next: std::sync::atomic::AtomicU64::new(1),
            reader,
        }
    }

    /// Sends `method` (to the page of `session` when given) and returns its result, or the
    /// browser's error as [`BrowserError::Protocol`].
    pub async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, BrowserError> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(p) => p.insert(id, tx),
            None => return Err(BrowserError::Gone),
        };
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).expect("a JSON value serializes");
        bytes.push(0);
        {
            let mut to = self.to_browser.lock().await;
            to.write_all(&bytes).await.map_err(|_| BrowserError::Gone)?;
        }
        let answer = match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => return Err(BrowserError::Gone),
            Err(_) => {
                self.forget(id);
                return Err(BrowserError::Protocol(format!(
                    "{method}: no answer in {ANSWER_TIMEOUT:?}"
                )));
            }
        };
        if let Some(e) = answer.get("error") {
            let said = e["message"].as_str().unwrap_or("an error");
            return Err(BrowserError::Protocol(format!(
                "{method}: {}",
                super::printable(said, 300)
            )));
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    fn forget(&self, id: u64) {
        if let Some(p) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            p.remove(&id);
        }
    }
}

/// Splits what the browser writes into messages and hands each answer to its caller.
/// Events are not used (pages are polled) and dropped. When the pipe ends or breaks the
/// protocol, every waiting call learns that the browser is gone.
async fn read_answers(mut from: pipe::Receiver, pending: Pending) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let searched = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        let mut from_here = searched;
        while let Some(end) = buf[from_here..].iter().position(|&b| b == 0) {
            let end = from_here + end;
            if let Ok(v) = serde_json::from_slice::<Value>(&buf[start..end])
                && let Some(id) = v.get("id").and_then(Value::as_u64)
            {
                let waiting = pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                    .and_then(|p| p.remove(&id));
                if let Some(tx) = waiting {
                    let _ = tx.send(v);
                }
            }
            start = end + 1;
            from_here = start;
        }
        buf.drain(..start);
        if buf.len() > MAX_MESSAGE {
            tracing::warn!(
                bytes = buf.len(),
                "the browser sent a message over the limit; closing it"
            );
            break 'read;
        }
    }
    // Dropping the senders tells every waiting call.
    pending.lock().unwrap_or_else(|p| p.into_inner()).take();
}
