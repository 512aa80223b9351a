//! One consistent read of what `/metrics` gauges and `yy status` show: Runners, computers
//! and turns by state, goals, the database's size and recent failures. Computed from the
//! database when asked (one read transaction), never kept in sync by hand.

use super::db::{Db, Dialect, Row};
use std::collections::BTreeMap;

use super::StoreError;
use super::runners::{self, RunnerRow};
use crate::api::ids::{CommandId, RunnerId};
use crate::timefmt::now_ms;

/// Non-final turn states (the final ones only grow and are not a level).
pub const TURN_STATES: &[&str] = &["queued", "running", "waiting"];
/// Every goal state (closed by the schema).
pub const GOAL_STATES: &[&str] = &[
    "active",
    "waiting_user",
    "stopped",
    "completed",
    "blocked",
    "cancelled",
];
/// Computer states shown (`removed` ones are history).
pub const COMPUTER_STATES: &[&str] = &["starting", "running", "stopping", "stopped", "failed"];

/// How many recent failures `yy status` shows, and how far back.
pub const RECENT_FAILURES: i64 = 10;
pub const RECENT_WINDOW_MS: i64 = 24 * 3600 * 1000;

pub struct Overview {
    pub runners: Vec<RunnerRow>,
    /// (runner id, state) -> computers.
    pub computers: BTreeMap<(String, String), u64>,
    /// Turn state (of [`TURN_STATES`]) -> turns.
    pub turns: BTreeMap<String, u64>,
    /// Goal state -> goals.
    pub goals: BTreeMap<String, u64>,
    pub database_bytes: u64,
    pub failures: Vec<Failure>,
}

pub struct Failure {
    pub at: i64,
    pub runner_id: RunnerId,
    pub command_id: CommandId,
    pub kind: String,
    pub state: String,
    pub error: Option<String>,
}

fn counts<K: Ord>(
    conn: &Db,
    sql: &str,
    key: impl Fn(&Row<'_>) -> rusqlite::Result<K>,
) -> Result<BTreeMap<K, u64>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut out = BTreeMap::new();
    let rows = stmt.query_map([], |r| Ok((key(r)?, r.get::<_, i64>("n")?)))?;
    for row in rows {
        let (k, n) = row?;
        out.insert(k, u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

/// Reads everything at once. `failures`: whether to look for recent failures too (a scan
/// of the commands table, which only `yy status` needs).
pub fn read(conn: &mut Db, failures: bool) -> Result<Overview, StoreError> {
    let tx = conn.savepoint()?;
    let runners = runners::list(&tx)?;
    let computers = counts(
        &tx,
        "SELECT runner_id, state, count(*) AS n FROM computers WHERE state != 'removed'
         GROUP BY runner_id, state",
        |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
    )?;
    let mut turns = counts(
        &tx,
        "SELECT state, count(*) AS n FROM session_turns WHERE state IN ('queued', 'running')
         GROUP BY state",
        |r| r.get::<_, String>(0),
    )?;
    let waiting: i64 = tx.query_row(
        "SELECT count(*) FROM turn_waits WHERE state = 'waiting'",
        [],
        |r| r.get(0),
    )?;
    turns.insert("waiting".into(), u64::try_from(waiting).unwrap_or(0));
    let goals = counts(
        &tx,
        "SELECT state, count(*) AS n FROM goals GROUP BY state",
        |r| r.get::<_, String>(0),
    )?;
    let size = match tx.dialect() {
        Dialect::Sqlite => {
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
        }
        Dialect::Postgres => "SELECT pg_database_size(current_database())",
    };
    let database_bytes: i64 = tx.query_row(size, [], |r| r.get(0))?;
    let failures = if failures {
        let mut stmt = tx.prepare_cached(
            "SELECT finished_at, runner_id, id, kind, state, error FROM runner_commands
             WHERE state IN ('failed', 'uncertain', 'expired') AND finished_at > ?1
             ORDER BY finished_at DESC, seq DESC LIMIT ?2",
        )?;
        stmt.query_map(
            rusqlite::params![now_ms() - RECENT_WINDOW_MS, RECENT_FAILURES],
            |r| {
                Ok(Failure {
                    at: r.get(0)?,
                    runner_id: r.get(1)?,
                    command_id: r.get(2)?,
                    kind: r.get(3)?,
                    state: r.get(4)?,
                    error: r.get(5)?,
                })
            },
        )?
        .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    tx.commit()?;
    Ok(Overview {
        runners,
        computers,
        turns,
        goals,
        database_bytes: u64::try_from(database_bytes).unwrap_or(0),
        failures,
    })
}
