//! Work that must run on one replica at a time (issue 27): the team scheduler's passes, the
//! sweeps, retention and the image-update orchestration. With several `yy serve` replicas on
//! one PostgreSQL database, the replica holding a session-level advisory lock does it; the
//! lock goes with its connection, so when that replica dies another one takes it within
//! [`CHECK_EVERY`] (PostgreSQL releases it as soon as the connection is gone).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::store::replicas;

/// The lock's key: "yy_lead" in ASCII.
pub const LEADER_LOCK: i64 = 0x0079_795f_6c65_6164;
/// How often a replica without the lock tries to take it, and one with it checks its
/// connection.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Whether this replica does the once-only work now.
#[derive(Default)]
pub struct Leadership {
    held: AtomicBool,
}

impl Leadership {
    /// Starts contending for the lock on the database at `url`.
    pub fn start(url: String) -> Arc<Leadership> {
        let me = Arc::new(Leadership::default());
        tokio::spawn(hold_forever(url, me.clone()));
        me
    }

    pub fn held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    fn set(&self, held: bool) {
        if self.held.swap(held, Ordering::Relaxed) != held {
            if held {
                tracing::info!("this replica now runs the scheduler, the sweeps and retention");
            } else {
                tracing::warn!(
                    "this replica no longer runs the scheduler and sweeps (its database connection ended)"
                );
            }
        }
    }
}

async fn hold_forever(url: String, me: Arc<Leadership>) {
    loop {
        let client = match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                client
            }
            Err(e) => {
                tracing::debug!(error = %super::store::pg::describe(&e), "cannot connect to contend for the once-only work");
                tokio::time::sleep(CHECK_EVERY).await;
                continue;
            }
        };
        loop {
            let result = if me.held() {
                client.query_one("SELECT true", &[]).await
            } else {
                client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
                    .await
            };
            match result {
                Ok(row) => me.set(row.get::<_, bool>(0)),
                Err(e) => {
                    tracing::debug!(error = %super::store::pg::describe(&e), "the once-only work's connection ended");
                    me.set(false);
                    break;
                }
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }
}

/// How the other replicas reach this one.
pub struct Peer {
    pub url: Option<String>,
    pub tls: Option<Arc<super::tls::ServerTls>>,
}

/// Writes this replica's row every [`replicas::HEARTBEAT_MS`] (with whether it leads), so
/// that `yy status` on any replica lists them all.
pub async fn heartbeat_forever(
    queue: super::queue::Queue,
    id: Arc<str>,
    listen: String,
    started_at: i64,
    peer: Peer,
) {
    let mut row = replicas::ReplicaRow {
        id: id.to_string(),
        hostname: crate::sys::hostname(),
        listen,
        version: crate::VERSION.into(),
        leads: false,
        started_at,
        seen_at: started_at,
        peer_url: peer.url,
        cert_sha256: None,
    };
    let mut tick = tokio::time::interval(Duration::from_millis(replicas::HEARTBEAT_MS as u64));
    loop {
        tick.tick().await;
        row.leads = queue.leads();
        // A certificate reloaded on SIGHUP is pinned by the others from the next beat.
        row.cert_sha256 = peer.tls.as_ref().map(|t| t.fingerprint());
        let me = row.clone();
        let written = queue
            .store()
            .call_relaxed(move |c| replicas::heartbeat(c, &me, crate::timefmt::now_ms()))
            .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "the replica's heartbeat was not written");
        }
    }
}
