//! Receipts: the Runner's durable memory of what it executed. A command's fingerprint is
//! written (and synced) before it runs and its outcome after, so a crash can never lead to a
//! second execution: a started command without an outcome is `uncertain` for good.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::api::machine::Outcome;
use crate::timefmt::now_ms;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipts (
    command_id    TEXT PRIMARY KEY,
    fingerprint   TEXT NOT NULL,
    kind          TEXT NOT NULL,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER,
    outcome       TEXT,
    result        TEXT,
    result_digest TEXT,
    error         TEXT,
    compacted     INTEGER NOT NULL DEFAULT 0
);";

/// Receipts older than this with results larger than [`COMPACT_MIN_BYTES`] keep only their
/// digest: a no-replay record.
pub const COMPACT_AFTER_MS: i64 = 3_600_000;
pub const COMPACT_MIN_BYTES: i64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("receipt store: {0}")]
pub struct ReceiptError(#[from] rusqlite::Error);

/// An outcome recorded earlier.
#[derive(Debug, Clone)]
pub struct Stored {
    pub outcome: Outcome,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// What the receipts say about a delivered command.
#[derive(Debug)]
pub enum Prior {
    /// Never seen: it may run.
    New,
    /// Already ran; report this again instead of running.
    Finished(Stored),
    /// Started here and never finished (a crash): uncertain, never run again.
    Unfinished,
    /// The same id arrived with different content.
    Mismatch,
}

pub struct Receipts {
    conn: Mutex<Connection>,
}

pub fn fingerprint(id: &str, kind: &str, payload: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    for part in [id, kind, &payload.to_string()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

impl Receipts {
    pub fn open(dir: &Path) -> Result<Receipts, ReceiptError> {
        let conn = Connection::open(dir.join("receipts.db"))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // FULL: a receipt must be on disk before the command it guards starts.
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Receipts {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn lookup(&self, id: &str, fingerprint: &str) -> Result<Prior, ReceiptError> {
        let row = self
            .conn()
            .query_row(
                "SELECT fingerprint, outcome, result, result_digest, error, compacted
                 FROM receipts WHERE command_id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, bool>(5)?,
                    ))
                },
            )
            .optional()?;
        let Some((fp, outcome, result, digest, error, compacted)) = row else {
            return Ok(Prior::New);
        };
        if fp != fingerprint {
            return Ok(Prior::Mismatch);
        }
        let Some(outcome) = outcome.as_deref().and_then(Outcome::parse) else {
            return Ok(Prior::Unfinished);
        };
        let result = if compacted {
            Some(serde_json::json!({ "compacted": true, "sha256": digest }))
        } else {
            result.and_then(|r| serde_json::from_str(&r).ok())
        };
        Ok(Prior::Finished(Stored {
            outcome,
            result,
            error,
        }))
    }

    /// Records that `id` starts now. Fails if a receipt exists (the caller looked first).
    pub fn begin(&self, id: &str, fingerprint: &str, kind: &str) -> Result<(), ReceiptError> {
        self.conn().execute(
            "INSERT INTO receipts (command_id, fingerprint, kind, started_at) VALUES (?1, ?2, ?3, ?4)",
            params![id, fingerprint, kind, now_ms()],
        )?;
        Ok(())
    }

    pub fn finish(
        &self,
        id: &str,
        outcome: Outcome,
        result: Option<&serde_json::Value>,
        error: Option<&str>,
    ) -> Result<(), ReceiptError> {
        let text = result.map(|r| r.to_string());
        let digest = text
            .as_ref()
            .map(|t| hex::encode(Sha256::digest(t.as_bytes())));
        self.conn().execute(
            "UPDATE receipts SET finished_at = ?2, outcome = ?3, result = ?4, result_digest = ?5, error = ?6
             WHERE command_id = ?1 AND outcome IS NULL",
            params![id, now_ms(), outcome.as_str(), text, digest, error],
        )?;
        Ok(())
    }

    /// After a crash: every started command without an outcome becomes `uncertain`.
    pub fn settle_unfinished(&self) -> Result<Vec<String>, ReceiptError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "UPDATE receipts SET outcome = 'uncertain', finished_at = ?1,
                 error = 'the Runner stopped while it was running; it will not run again'
             WHERE outcome IS NULL RETURNING command_id",
        )?;
        let ids = stmt
            .query_map([now_ms()], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Drops large results older than an hour, keeping outcome and digest.
    pub fn compact(&self) -> Result<usize, ReceiptError> {
        Ok(self.conn().execute(
            "UPDATE receipts SET result = NULL, compacted = 1
             WHERE compacted = 0 AND finished_at < ?1 AND length(result) > ?2",
            params![now_ms() - COMPACT_AFTER_MS, COMPACT_MIN_BYTES],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_prevents_a_second_run() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receipts::open(dir.path()).unwrap();
        let fp = fingerprint("c1", "ping", &serde_json::json!({}));
        assert!(matches!(r.lookup("c1", &fp).unwrap(), Prior::New));
        r.begin("c1", &fp, "ping").unwrap();
        assert!(matches!(r.lookup("c1", &fp).unwrap(), Prior::Unfinished));
        r.finish(
            "c1",
            Outcome::Done,
            Some(&serde_json::json!({"x": 1})),
            None,
        )
        .unwrap();
        match r.lookup("c1", &fp).unwrap() {
            Prior::Finished(s) => {
                assert_eq!(s.outcome, Outcome::Done);
                assert_eq!(s.result, Some(serde_json::json!({"x": 1})));
            }
            other => panic!("{other:?}"),
        }
        let other = fingerprint("c1", "ping", &serde_json::json!({"hold_ms": 1}));
        assert!(matches!(r.lookup("c1", &other).unwrap(), Prior::Mismatch));
    }

    #[test]
    fn unfinished_receipts_settle_as_uncertain_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let fp = fingerprint("c2", "ping", &serde_json::json!({}));
        {
            let r = Receipts::open(dir.path()).unwrap();
            r.begin("c2", &fp, "ping").unwrap();
        }
        let r = Receipts::open(dir.path()).unwrap();
        assert_eq!(r.settle_unfinished().unwrap(), vec!["c2".to_string()]);
        match r.lookup("c2", &fp).unwrap() {
            Prior::Finished(s) => assert_eq!(s.outcome, Outcome::Uncertain),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn old_large_results_compact_into_no_replay_records() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receipts::open(dir.path()).unwrap();
        let fp = fingerprint("c3", "fetch", &serde_json::json!({}));
        r.begin("c3", &fp, "fetch").unwrap();
        let big = serde_json::json!({ "content": "x".repeat(100_000) });
        r.finish("c3", Outcome::Done, Some(&big), None).unwrap();
        assert_eq!(r.compact().unwrap(), 0, "too recent");
        r.conn()
            .execute(
                "UPDATE receipts SET finished_at = finished_at - 3600001",
                [],
            )
            .unwrap();
        assert_eq!(r.compact().unwrap(), 1);
        match r.lookup("c3", &fp).unwrap() {
            Prior::Finished(s) => {
                assert_eq!(s.outcome, Outcome::Done);
                assert_eq!(s.result.unwrap()["compacted"], true);
            }
            other => panic!("{other:?}"),
        }
    }
}
