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
        "INSERT INTO replicas (id, hostname, listen, version, leads, started_at, seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (id) DO UPDATE SET leads = excluded.leads, seen_at = excluded.seen_at",
    )?
    .execute(params![
        me.id,
        me.hostname,
        me.listen,
        me.version,
        me.leads,
        me.started_at,
        now
    ])?;
    tx.prepare_cached("DELETE FROM replicas WHERE seen_at < ?1")?
        .execute([now - FORGET_AFTER_MS])?;
    tx.commit()?;
    Ok(())
}

/// Every replica seen in the last hour, the longest running first.
pub fn list(conn: &Db) -> Result<Vec<ReplicaRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, hostname, listen, version, leads, started_at, seen_at FROM replicas
         ORDER BY started_at, id",
    )?;
    let rows = stmt
        .query_map([], |r: &Row<'_>| {
            from_columns!(r => ReplicaRow { id, hostname, listen, version, leads, started_at, seen_at })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}
