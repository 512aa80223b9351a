//! Wake-ups across `yy serve` replicas on one PostgreSQL database (issue 27). A change made
//! through one replica wakes the long-polls and waiters that other replicas hold: each
//! replica sends its wake-ups as `NOTIFY yy_wake` and listens on that channel. Besides
//! Runners' work and commands, an artifact upload that moved wakes the fetches that follow
//! it on other replicas (`artifacts::follow`).
//!
//! A notification can be lost (a dropped connection, a full queue): that only delays work,
//! because every long-poll and wait looks at the database again when its wait ends (at
//! most [`crate::api::machine::MAX_LEASE_WAIT_MS`]), and a listener that connects again
//! wakes every local wait at once, in case it missed one meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc};

use super::hub::Hub;
use crate::api::ids::RunnerId;

/// The channel replicas notify each other on.
const CHANNEL: &str = super::store::pg::conn::WAKE_CHANNEL;
/// Wake-ups waiting to be sent; more are dropped (see the module's comment).
const QUEUE: usize = 4096;
/// At most this many distinct wake-ups go in one statement.
const BATCH: usize = 256;
/// Back-off between connection attempts: from the first to the last, doubling.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_LAST: Duration = Duration::from_secs(10);

/// A replica's side of the wake-ups: [`Peers::publish`] sends, a task listens.
pub struct Peers {
    outbox: mpsc::Sender<String>,
}

/// What hears that the upload of a command's artifact moved (`true`: it started over).
pub type UploadMoved = Arc<dyn Fn(&str, bool) + Send + Sync>;

impl Peers {
    /// Starts the sending and the listening task on the database at `url`. `store_pid`
    /// holds the backend pid of the store's own connection, whose commits notify too
    /// ([`super::store::Db::notify_peers`]).
    pub fn start(
        url: String,
        hub: Arc<Hub>,
        sched: Arc<Notify>,
        store_pid: Arc<AtomicI32>,
        uploads: UploadMoved,
    ) -> Arc<Peers> {
        let (outbox, inbox) = mpsc::channel(QUEUE);
        // The backend pid of the connection that sends: its own notifications come back to
        // the listener and are skipped (the local wake-up happened already).
        let sender_pid = Arc::new(AtomicI32::new(0));
        tokio::spawn(send_forever(url.clone(), inbox, sender_pid.clone()));
        let own = [sender_pid, store_pid];
        tokio::spawn(listen_forever(
            url,
            Heard {
                hub,
                sched,
                uploads,
            },
            own,
        ));
        Arc::new(Peers { outbox })
    }

    /// Tells the other replicas that `runner` has new work (`enqueued`) or a changed
    /// command.
    pub fn publish(&self, runner: &RunnerId, enqueued: bool) {
        // Full: dropped; the waits' own timeouts recover it.
        let _ = self.outbox.try_send(payload(runner, enqueued));
    }

    /// Tells the other replicas that the upload of `command`'s artifact moved (or started
    /// over): the fetches following it there look again.
    /// They take at most half the queue, so that a flood of uploads never crowds out a
    /// Runner's wake-up (a follow that misses one looks again within a second).
    pub fn publish_upload(&self, command: &str, restarted: bool) {
        if self.outbox.capacity() <= QUEUE / 2 {
            return;
        }
        let kind = if restarted { 'r' } else { 'u' };
        let _ = self.outbox.try_send(format!("{kind}:{command}"));
    }
}

/// The wake-up for `runner` as it travels: new work (`enqueued`) or a changed command.
pub fn payload(runner: &RunnerId, enqueued: bool) -> String {
    let kind = if enqueued { 'w' } else { 'd' };
    format!("{kind}:{}", runner.as_str())
}

/// A wake-up as the listener reads it.
#[derive(Debug, PartialEq, Eq)]
enum Wake<'a> {
    /// New work (`enqueued`) or a changed command of a Runner.
    Runner { id: &'a str, enqueued: bool },
    /// The upload of a command's artifact moved, or started over.
    Upload { command: &'a str, restarted: bool },
}

fn parse(payload: &str) -> Option<Wake<'_>> {
    let (kind, id) = payload.split_once(':')?;
    if id.is_empty() || id.len() > 64 {
        return None;
    }
    Some(match kind {
        "w" | "d" => Wake::Runner {
            id,
            enqueued: kind == "w",
        },
        "u" | "r" => Wake::Upload {
            command: id,
            restarted: kind == "r",
        },
        _ => return None,
    })
}

/// Who hears the other replicas' wake-ups here.
struct Heard {
    hub: Arc<Hub>,
    sched: Arc<Notify>,
    uploads: UploadMoved,
}

impl Heard {
    fn wake(&self, wake: Wake<'_>) {
        let kind = match wake {
            Wake::Runner { enqueued: true, .. } => "work",
            Wake::Runner { .. } => "done",
            Wake::Upload { .. } => "upload",
        };
        super::telemetry::peer_wakeup(kind);
        match wake {
            Wake::Runner { id, enqueued } => {
                self.sched.notify_one();
                let Some(signals) = self.hub.existing(id) else {
                    return;
                };
                if enqueued {
                    signals.work.notify_waiters();
                }
                signals.done.notify_waiters();
            }
            Wake::Upload { command, restarted } => (self.uploads)(command, restarted),
        }
    }
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %super::store::pg::describe(&e), "a wake-up connection to PostgreSQL ended");
        }
    });
    Ok(client)
}

async fn send_forever(url: String, mut inbox: mpsc::Receiver<String>, pid: Arc<AtomicI32>) {
    let mut retry = RETRY_FIRST;
    loop {
        let client = match connect(&url).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %super::store::pg::describe(&e), "cannot connect to send wake-ups; retrying");
                tokio::time::sleep(jittered(retry)).await;
                retry = (retry * 2).min(RETRY_LAST);
                continue;
            }
        };
        retry = RETRY_FIRST;
        match client.query_one("SELECT pg_backend_pid()", &[]).await {
            Ok(row) => pid.store(row.get(0), Ordering::Relaxed),
            Err(_) => continue,
        }
        let statement = format!("SELECT pg_notify('{CHANNEL}', p) FROM unnest($1::text[]) p");
        loop {
            let Some(first) = inbox.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match inbox.try_recv() {
                    Ok(next) if !batch.contains(&next) => batch.push(next),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            if let Err(e) = client.execute(&statement, &[&batch]).await {
                tracing::warn!(error = %super::store::pg::describe(&e), "wake-ups not sent; connecting again");
                pid.store(0, Ordering::Relaxed);
                break;
            }
        }
    }
}

/// `own`: the backend pids of this replica's connections that notify (their wake-ups
/// happened here already).
async fn listen_forever(url: String, heard: Heard, own: [Arc<AtomicI32>; 2]) {
    let mut retry = RETRY_FIRST;
    loop {
        let (client, mut connection) = match tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %super::store::pg::describe(&e), "cannot connect to listen for wake-ups; retrying");
                tokio::time::sleep(jittered(retry)).await;
                retry = (retry * 2).min(RETRY_LAST);
                continue;
            }
        };
        retry = RETRY_FIRST;
        let mut messages =
            futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
        let sql = format!("LISTEN {CHANNEL}");
        let listening = {
            // The connection's messages must be read while LISTEN runs, or it never answers.
            let mut listen = std::pin::pin!(client.batch_execute(&sql));
            loop {
                tokio::select! {
                    r = &mut listen => break r,
                    m = messages.next() => if m.is_none() { break Ok(()) },
                }
            }
        };
        if let Err(e) = listening {
            tracing::warn!(error = %super::store::pg::describe(&e), "cannot listen for wake-ups; retrying");
            continue;
        }
        // Whatever was sent while nobody listened: every wait here looks again.
        heard.hub.wake_all();
        heard.sched.notify_one();
        while let Some(message) = messages.next().await {
            let notification = match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => n,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %super::store::pg::describe(&e), "the wake-up listener lost its connection");
                    break;
                }
            };
            let pid = notification.process_id();
            if own.iter().any(|p| p.load(Ordering::Relaxed) == pid) {
                continue;
            }
            if let Some(wake) = parse(notification.payload()) {
                heard.wake(wake);
            }
        }
        // Only now: dropping the client ends the connection, and with it the LISTEN.
        drop(client);
    }
}

/// `base`, give or take a quarter, so that replicas that lost the database together do not
/// all come back at the same instant.
fn jittered(base: Duration) -> Duration {
    let quarter = base / 4;
    base - quarter + quarter.mul_f64(2.0 * rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_read_strictly() {
        let runner = |id, enqueued| Some(Wake::Runner { id, enqueued });
        let upload = |command, restarted| Some(Wake::Upload { command, restarted });
        assert_eq!(parse("w:abc"), runner("abc", true));
        assert_eq!(parse("d:abc"), runner("abc", false));
        assert_eq!(parse("u:c1"), upload("c1", false));
        assert_eq!(parse("r:c1"), upload("c1", true));
        assert_eq!(parse("x:abc"), None);
        assert_eq!(parse("w:"), None);
        assert_eq!(parse("u:"), None);
        assert_eq!(parse("w"), None);
        assert_eq!(parse(&format!("w:{}", "a".repeat(65))), None);
        assert_eq!(parse(&format!("u:{}", "a".repeat(65))), None);
    }

    #[test]
    fn upload_wake_ups_leave_half_the_queue_to_runners() {
        let (outbox, mut inbox) = mpsc::channel(QUEUE);
        let peers = Peers { outbox };
        let runner = RunnerId::new("r1");
        for _ in 0..QUEUE / 2 - 1 {
            peers.publish_upload("c1", false);
        }
        peers.publish_upload("c1", true);
        // Half full: more upload news is dropped, a Runner's wake-up still goes in.
        peers.publish_upload("c2", false);
        peers.publish(&runner, true);
        let mut sent = Vec::new();
        while let Ok(p) = inbox.try_recv() {
            sent.push(p);
        }
        assert_eq!(sent.len(), QUEUE / 2 + 1);
        assert_eq!(sent[QUEUE / 2 - 1], "r:c1");
        assert_eq!(sent[QUEUE / 2], "w:r1");
        assert!(!sent.contains(&"u:c2".to_string()));
    }

    #[test]
    fn retries_are_spread() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(800));
            assert!(d >= Duration::from_millis(600) && d <= Duration::from_millis(1000));
        }
    }
}
