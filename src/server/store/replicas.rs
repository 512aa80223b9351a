//! The `yy serve` replicas on one database (issue 27): each one's row, written at start and
//! at every heartbeat; `yy status` lists them.

use rusqlite::params;

use super::StoreError;
use super::db::{Db, Row};

/// How often a replica writes its row.
pub const HEARTBEAT_MS: i64 = 5_000;
/// A replica unseen for three heartbeats is gone.
pub const GONE_AFTER_MS: i64 = 3 * HEARTBEAT_MS;
/// Rows of replicas unseen this long are removed.
const FORGET_AFTER_MS: i64 = 3_600_000;

#[derive(Debug, Clone)]
pub struct ReplicaRow {
    pub id: String,
    pub hostname: String,
    pub listen: String,
    pub version: String,
    pub leads: bool,
    pub started_at: i64,
    pub seen_at: i64,
    /// How the other replicas reach this one (`yy serve --peer-url`).
    pub peer_url: Option<String>,
    /// The SHA-256 of its certificate, which they pin (none over plain HTTP).
    pub cert_sha256: Option<String>,
}

impl ReplicaRow {
    pub fn up(&self, now: i64) -> bool {
        now - self.seen_at < GONE_AFTER_MS
    }
}

/// Writes this replica's row (seen now), and removes those long gone.
pub fn heartbeat(conn: &Db, me: &ReplicaRow, now: i64) -> Result<(), StoreError> {
    let tx = conn.savepoint()?;
    tx.prepare_cached(
        "INSERT INTO replicas
             (id, hostname, listen, version, leads, started_at, seen_at, peer_url, cert_sha256)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (id) DO UPDATE SET leads = excluded.leads, seen_at = excluded.seen_at,
             cert_sha256 = excluded.cert_sha256",
    )?
    .execute(params![
        me.id,
        me.hostname,
        me.listen,
        me.version,
        me.leads,
        me.started_at,
        now,
        me.peer_url,
        me.cert_sha256
    ])?;
    tx.prepare_cached("DELETE FROM replicas WHERE seen_at < ?1")?
        .execute([now - FORGET_AFTER_MS])?;
    tx.commit()?;
    Ok(())
}

const COLUMNS: &str =
    "id, hostname, listen, version, leads, started_at, seen_at, peer_url, cert_sha256";

fn from_row(r: &Row<'_>) -> rusqlite::Result<ReplicaRow> {
    from_columns!(r => ReplicaRow {
        id, hostname, listen, version, leads, started_at, seen_at, peer_url, cert_sha256
    })
}

/// Every replica seen in the last hour, the longest running first.
pub fn list(conn: &Db) -> Result<Vec<ReplicaRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM replicas ORDER BY started_at, id"
    ))?;
    let rows = stmt.query_map([], from_row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The replica `id`, if it was seen in the last hour.
pub fn get(conn: &Db, id: &str) -> Result<Option<ReplicaRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM replicas WHERE id = ?1"))?;
    let mut rows = stmt
        .query_map([id], from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows.pop())
}
