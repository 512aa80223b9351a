//! Data that would only grow: finished commands (with their results) and the events of
//! finished turns are deleted after the retention; large results are dropped soon after
//! their first delivery; the freed pages go back to the file system a little at a time.

use super::db::Db;
use rusqlite::params;

use super::StoreError;
use crate::api::ids::CommandId;
use crate::api::states::CommandState;

/// Results larger than this are dropped a while after their first delivery.
pub const BIG_RESULT_BYTES: i64 = 64 * 1024;
/// How long a delivered big result is kept for a retry of the same read.
const DELIVERED_GRACE_MS: i64 = 60_000;
/// How long a fetched file stays an artifact after its `yy runner fetch` got it, so that
/// the id it printed works with `yy artifact show|get` (the retention, if shorter, wins).
pub const FETCH_KEPT_MS: i64 = 24 * 3_600_000;
/// Pages given back per sweep (16 MiB at 4 KiB pages), so no sweep holds the database long.
const VACUUM_PAGES: i64 = 4096;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    pub commands: usize,
    pub events: usize,
    pub results: usize,
    /// Artifacts whose rows went: their files go too.
    pub artifacts: Vec<String>,
}

impl Compacted {
    pub fn any(&self) -> bool {
        self.commands + self.events + self.results + self.artifacts.len() > 0
    }
}

/// Deletes what the retention no longer keeps, in one transaction. Commands that
/// something still refers to for its next step (a session's unconfirmed stop, a
/// computer's last command, an unsettled turn) are kept.
pub fn compact(conn: &mut Db, retention_ms: i64, now: i64) -> Result<Compacted, StoreError> {
    let cutoff = now.saturating_sub(retention_ms);
    let delivered_before = now.saturating_sub(retention_ms.min(DELIVERED_GRACE_MS));
    let fetched_before = now.saturating_sub(retention_ms.min(FETCH_KEPT_MS));
    let tx = conn.savepoint()?;
    let results = tx.execute(
        "UPDATE runner_commands SET result = NULL
         WHERE delivered_at IS NOT NULL AND delivered_at < ?1
           AND result IS NOT NULL AND length(result) > ?2",
        params![delivered_before, BIG_RESULT_BYTES],
    )?;
    let events = tx.execute(
        "DELETE FROM session_events WHERE turn_id IN (
             SELECT id FROM session_turns
             WHERE finished_at IS NOT NULL AND finished_at < ?1
               AND state IN ('complete', 'interrupted', 'error'))",
        [cutoff],
    )?;
    // A fetched file is a copy the operator already has: it stays a day after its fetch got
    // it (the printed id works meanwhile), not for ever, else every fetch grows the data
    // directory. An upload that never finished goes with the retention. Exports and inputs
    // are the users' files and stay.
    let artifacts = {
        let mut stmt = tx.prepare(
            "DELETE FROM artifacts
             WHERE (kind = 'fetch' AND (created_at < ?1 OR command_id IN (
                        SELECT id FROM runner_commands
                        WHERE delivered_at IS NOT NULL AND delivered_at < ?2)))
                OR (state = 'uploading' AND created_at < ?1)
             RETURNING id",
        )?;
        stmt.query_map(params![cutoff, fetched_before], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?
    };
    // Chat turns that ended without starting (their `yy chat` has long seen how).
    super::turn_waits::compact(&tx, cutoff)?;
    let commands = tx.execute(
        &format!(
            "DELETE FROM runner_commands
             WHERE state IN {final_states} AND finished_at IS NOT NULL AND finished_at < ?1
               AND id NOT IN (SELECT stop_command_id FROM sessions WHERE stop_command_id IS NOT NULL)
               AND id NOT IN (SELECT last_command FROM computers WHERE last_command IS NOT NULL)
               AND id NOT IN (SELECT command_id FROM session_turns
                              WHERE state IN ('queued', 'running', 'uncertain'))
               AND id NOT IN (SELECT check_command_id FROM session_turns
                              WHERE check_command_id IS NOT NULL AND state = 'uncertain')",
            final_states = CommandState::final_sql()
        ),
        [cutoff],
    )?;
    tx.commit()?;
    Ok(Compacted {
        commands,
        events,
        results,
        artifacts,
    })
}

/// Records the first delivery of a final command's result.
pub fn mark_delivered(conn: &Db, command_id: &CommandId, now: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE runner_commands SET delivered_at = ?1
         WHERE id = ?2 AND delivered_at IS NULL AND result IS NOT NULL",
    )?
    .execute(params![now, command_id])?;
    Ok(())
}

/// Gives free pages back to the file system, a bounded number per call; then truncates
/// the WAL once nothing is left to give back. Returns the pages still free. SQLite only:
/// PostgreSQL's autovacuum does this work itself.
pub fn give_back_space(conn: &Db) -> Result<i64, StoreError> {
    let Some(conn) = conn.sqlite() else {
        return Ok(0);
    };
    let free: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
    if free == 0 {
        return Ok(0);
    }
    // incremental_vacuum returns a row per page; run it to the end.
    let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    let left: i64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
    if left == 0 {
        let mut stmt = conn.prepare("PRAGMA wal_checkpoint(TRUNCATE)")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(left)
}
