//! Computers as shared resources over time: a computer nobody uses gives its pool slot
//! back. Used means a turn, an exec, takeover or screen input (`last_used_at`, and the
//! turn or start that last drove it); reading its state or its screen does not count. Each
//! Runner says how long a computer may sit idle (`yy runner run --computer-idle`) and how
//! soon an idle one may be stopped for a start that waits for a full pool
//! (`--computer-reclaim-after`). A stopped computer keeps its workspace; its next use
//! starts it again.

use super::db::Db;
use std::collections::HashMap;

use rusqlite::params;

use super::StoreError;
use super::commands::CommandRow;
use super::computers::stop_because;
use crate::api::ids::RunnerId;
use crate::api::machine::{CommandKind, RunnerCommand};
use crate::api::states::{CommandState, ComputerState};
use crate::timefmt::duration_words;

/// How long a computer may sit idle when its Runner does not say (`--computer-idle`).
pub const DEFAULT_IDLE_MS: i64 = 30 * 60 * 1000;
/// How long a computer must have been idle before a waiting start takes its slot, when its
/// Runner does not say (`--computer-reclaim-after`).
pub const DEFAULT_RECLAIM_MS: i64 = 60 * 1000;

/// Marks the computer used until `until` (a turn's start, an exec's deadline, takeover,
/// screen input); an earlier time never shortens it.
pub fn used_until(conn: &Db, id: &str, until: i64) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE computers SET last_used_at = CASE WHEN last_used_at > ?2 THEN last_used_at ELSE ?2 END WHERE id = ?1",
        params![id, until],
    )?;
    Ok(())
}

/// An exec in a computer was use until it ended: the idle time starts then.
pub fn command_ended(conn: &Db, cmd: &CommandRow, now: i64) -> Result<(), StoreError> {
    if cmd.kind != CommandKind::ComputerExec {
        return Ok(());
    }
    let payload: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap_or_default();
    if let Ok(RunnerCommand::ComputerExec(p)) = RunnerCommand::parse(cmd.kind.as_sql(), &payload) {
        used_until(conn, &p.computer_id, now)?;
    }
    Ok(())
}

/// What one Runner asks of its idle computers, from what it reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Policy {
    capacity: i64,
    idle_ms: i64,
    reclaim_ms: i64,
}

impl Policy {
    fn from_status(status: Option<&str>) -> Policy {
        let v: serde_json::Value = status
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let ms = |key: &str, default: i64| {
            v[key]
                .as_u64()
                .and_then(|n| i64::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        Policy {
            capacity: v["computers_capacity"].as_i64().unwrap_or(0),
            idle_ms: ms("computer_idle_ms", DEFAULT_IDLE_MS),
            reclaim_ms: ms("computer_reclaim_ms", DEFAULT_RECLAIM_MS),
        }
    }
}

/// A computer that holds or wants a pool slot.
#[derive(Debug, Clone)]
struct Holder {
    id: String,
    runner_id: String,
    agent: String,
    state: ComputerState,
    /// The end of its last use (or when it was last driven).
    idle_since: i64,
    /// A turn or a start drives it now, or an operator holds its control.
    in_use: bool,
}

/// What to stop, and why: the pure decision, given the computers of every Runner.
fn decide(
    holders: &[Holder],
    policies: &HashMap<String, Policy>,
    now: i64,
) -> Vec<(String, String)> {
    let mut stops: Vec<(String, String)> = Vec::new();
    let mut by_runner: HashMap<&str, Vec<&Holder>> = HashMap::new();
    for h in holders {
        by_runner.entry(h.runner_id.as_str()).or_default().push(h);
    }
    for (runner, list) in by_runner {
        let Some(policy) = policies.get(runner) else {
            continue;
        };
        let idle_for = |h: &Holder| now - h.idle_since;
        let mut left: Vec<&Holder> = Vec::new();
        for h in list.iter().copied() {
            if h.state == ComputerState::Running && !h.in_use && idle_for(h) >= policy.idle_ms {
                stops.push((
                    h.id.clone(),
                    format!("idle {}", duration_words(policy.idle_ms)),
                ));
            } else {
                left.push(h);
            }
        }
        // Starts wait for a full pool: free the slots of the longest idle (a stop being
        // confirmed frees its slot already, so it is not counted as held).
        let count = |s: ComputerState| left.iter().filter(|h| h.state == s).count() as i64;
        let starting = count(ComputerState::Starting);
        let needed = starting + count(ComputerState::Running) - policy.capacity;
        if needed <= 0 || policy.capacity <= 0 {
            continue;
        }
        let Some(waiting) = left
            .iter()
            .filter(|h| h.state == ComputerState::Starting)
            .min_by_key(|h| h.idle_since)
        else {
            continue;
        };
        let mut idle: Vec<&&Holder> = left
            .iter()
            .filter(|h| {
                h.state == ComputerState::Running && !h.in_use && idle_for(h) >= policy.reclaim_ms
            })
            .collect();
        idle.sort_by_key(|h| h.idle_since);
        for h in idle.into_iter().take(needed as usize) {
            stops.push((
                h.id.clone(),
                format!("reclaimed for agent {}", waiting.agent),
            ));
        }
    }
    stops.sort();
    stops
}

/// Stops the computers that sat idle for their Runner's idle time, and the longest idle
/// ones (past the reclaim time) whose slots starts wait for. Returns the Runners to wake.
pub fn reclaim(conn: &mut Db, now: i64) -> Result<Vec<RunnerId>, StoreError> {
    let policies: HashMap<String, Policy> = {
        let mut stmt = conn.prepare_cached("SELECT id, status FROM runners")?;
        stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Policy::from_status(r.get::<_, Option<String>>(1)?.as_deref()),
            ))
        })?
        .collect::<Result<_, _>>()?
    };
    let holders: Vec<Holder> = {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT c.id, c.runner_id, g.name, c.state,
                 CASE WHEN coalesce(c.last_used_at, c.updated_at) > coalesce(m.finished_at, 0)
                     THEN coalesce(c.last_used_at, c.updated_at) ELSE coalesce(m.finished_at, 0) END,
                 (m.id IS NOT NULL AND m.state NOT IN {final_states})
                 OR EXISTS (SELECT 1 FROM computer_controls k WHERE k.computer_id = c.id
                            AND k.holder IS NOT NULL AND k.expires_at > ?4)
                 OR EXISTS (SELECT 1 FROM runner_commands e WHERE e.runner_id = c.runner_id
                            AND e.state NOT IN {final_states} AND e.kind = ?5
                            AND json_extract(e.payload, '$.computer_id') = c.id)
             FROM computers c JOIN agents g ON g.id = c.agent_id
             LEFT JOIN runner_commands m ON m.id = c.last_command
             WHERE c.state IN (?1, ?2, ?3)",
            final_states = CommandState::final_sql()
        ))?;
        stmt.query_map(
            params![
                ComputerState::Starting,
                ComputerState::Running,
                ComputerState::Stopping,
                now,
                CommandKind::ComputerExec
            ],
            |r| {
                Ok(Holder {
                    id: r.get(0)?,
                    runner_id: r.get(1)?,
                    agent: r.get(2)?,
                    state: r.get(3)?,
                    idle_since: r.get(4)?,
                    in_use: r.get(5)?,
                })
            },
        )?
        .collect::<Result<_, _>>()?
    };
    let mut runners = Vec::new();
    for (id, reason) in decide(&holders, &policies, now) {
        match stop_because(conn, &id, false, Some(&reason)) {
            Ok((c, Some(_))) => {
                tracing::info!(computer = %c.id, agent = %c.agent, %reason, "stopping a computer");
                runners.push(c.runner_id);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(computer = %id, error = %e, "could not stop an idle computer"),
        }
    }
    runners.dedup();
    Ok(runners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(id: &str, state: ComputerState, idle_since: i64, in_use: bool) -> Holder {
        Holder {
            id: id.into(),
            runner_id: "r".into(),
            agent: format!("agent-{id}"),
            state,
            idle_since,
            in_use,
        }
    }

    fn policy(capacity: i64) -> HashMap<String, Policy> {
        HashMap::from([(
            "r".to_string(),
            Policy {
                capacity,
                idle_ms: 30 * 60_000,
                reclaim_ms: 60_000,
            },
        )])
    }

    #[test]
    fn an_idle_computer_stops_after_its_runners_idle_time_and_not_while_used() {
        use ComputerState::*;
        let now = 100 * 60_000;
        let holders = [
            h("old", Running, now - 30 * 60_000, false),
            h("busy", Running, now - 50 * 60_000, true),
            h("recent", Running, now - 29 * 60_000, false),
        ];
        assert_eq!(
            decide(&holders, &policy(8), now),
            vec![("old".to_string(), "idle 30m".to_string())]
        );
    }

    #[test]
    fn a_waiting_start_takes_the_slot_of_the_longest_idle_past_the_grace() {
        use ComputerState::*;
        let now = 100 * 60_000;
        let holders = [
            h("a", Running, now - 5 * 60_000, false),
            h("b", Running, now - 9 * 60_000, false),
            h("c", Starting, now - 1000, true),
        ];
        assert_eq!(
            decide(&holders, &policy(2), now),
            vec![("b".to_string(), "reclaimed for agent agent-c".to_string())]
        );
        // Within the grace, or in use, nothing is taken: the start waits.
        let holders = [
            h("a", Running, now - 30_000, false),
            h("b", Running, now - 9 * 60_000, true),
            h("c", Starting, now - 1000, true),
        ];
        assert!(decide(&holders, &policy(2), now).is_empty());
        // A stop being confirmed already frees the slot.
        let holders = [
            h("a", Running, now - 5 * 60_000, false),
            h("b", Stopping, now - 9 * 60_000, false),
            h("c", Starting, now - 1000, true),
        ];
        assert!(decide(&holders, &policy(2), now).is_empty());
        // A Runner that reported no computers takes nothing.
        assert!(decide(&holders, &HashMap::new(), now).is_empty());
    }

    #[test]
    fn a_runners_settings_come_from_its_status() {
        let p = Policy::from_status(Some(
            r#"{"computers_capacity":2,"computer_idle_ms":5000,"computer_reclaim_ms":1000}"#,
        ));
        assert_eq!(
            p,
            Policy {
                capacity: 2,
                idle_ms: 5000,
                reclaim_ms: 1000
            }
        );
        let p = Policy::from_status(None);
        assert_eq!(
            (p.idle_ms, p.reclaim_ms),
            (DEFAULT_IDLE_MS, DEFAULT_RECLAIM_MS)
        );
    }
}
