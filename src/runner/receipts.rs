//! Receipts: the Runner's durable memory of what it executed. A command's fingerprint is
//! written (and synced) before it runs and its outcome after, so a crash can never lead to a
//! second execution: a started command without an outcome is `uncertain` for good.
//!
//! Writes are group-committed: one writer thread takes every receipt that is waiting, writes
//! them in one transaction and syncs it once (synchronous=FULL), then answers each. Nothing
//! is acknowledged before its transaction is on disk, so the guarantee is the same as one
//! transaction per receipt; only the number of fsyncs per command drops under load, and
//! the async threads never wait on the disk.

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
pub enum ReceiptError {
    #[error("receipt store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The group transaction holding this write failed (every write in it failed).
    #[error("receipt store: {0}")]
    Batch(String),
}

/// Most receipt writes committed together.
const MAX_BATCH: usize = 256;

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
    /// Lookups and maintenance (WAL: reads never wait for the writer).
    conn: Mutex<Connection>,
    /// Receipt writes, for the writer thread.
    writes: std::sync::mpsc::Sender<Write>,
}

enum Op {
    Begin {
        id: String,
        fingerprint: String,
        kind: String,
        at: i64,
    },
    Finish {
        id: String,
        at: i64,
        outcome: Outcome,
        result: Option<String>,
        digest: Option<String>,
        error: Option<String>,
    },
    /// A receipt whose command did not start after all (the control plane refused it).
    Forget { id: String },
}

struct Write {
    op: Op,
    done: tokio::sync::oneshot::Sender<Result<(), ReceiptError>>,
}

fn open_connection(path: &Path) -> Result<Connection, ReceiptError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a receipt must be on disk before the command it guards starts.
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The writer thread: until every sender is gone, commits whatever waits as one group.
fn write_groups(conn: Connection, queue: std::sync::mpsc::Receiver<Write>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(w) => group.push(w),
                Err(_) => break,
            }
        }
        let results = commit_group(&conn, &group);
        for (w, r) in group.into_iter().zip(results) {
            let _ = w.done.send(r);
        }
    }
}

fn apply(conn: &Connection, op: &Op) -> rusqlite::Result<usize> {
    match op {
        Op::Begin {
            id,
            fingerprint,
            kind,
            at,
        } => conn
            .prepare_cached(
                "INSERT INTO receipts (command_id, fingerprint, kind, started_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id, fingerprint, kind, at]),
        Op::Finish {
            id,
            at,
            outcome,
            result,
            digest,
            error,
        } => conn
            .prepare_cached(
                "UPDATE receipts SET finished_at = ?2, outcome = ?3, result = ?4, result_digest = ?5, error = ?6
                 WHERE command_id = ?1 AND outcome IS NULL",
            )?
            .execute(params![id, at, outcome.as_str(), result, digest, error]),
        Op::Forget { id } => conn
            .prepare_cached("DELETE FROM receipts WHERE command_id = ?1 AND outcome IS NULL")?
            .execute([id]),
    }
}

/// One transaction for the group. A write that fails alone (a receipt that already exists)
/// fails only itself; if the transaction fails, every write in it does.
fn commit_group(conn: &Connection, group: &[Write]) -> Vec<Result<(), ReceiptError>> {
    let all_failed = |e: &dyn std::fmt::Display| {
        group
            .iter()
            .map(|_| Err(ReceiptError::Batch(e.to_string())))
            .collect()
    };
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        return all_failed(&e);
    }
    let mut results = Vec::with_capacity(group.len());
    for w in group {
        match apply(conn, &w.op) {
            Ok(_) => results.push(Ok(())),
            // The statement failed and SQLite ended the whole transaction (disk full, I/O).
            Err(e) if conn.is_autocommit() => return all_failed(&e),
            Err(e) => results.push(Err(e.into())),
        }
    }
    if let Err(e) = conn.execute_batch("COMMIT") {
        let _ = conn.execute_batch("ROLLBACK");
        return all_failed(&e);
    }
    results
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
        let path = dir.join("receipts.db");
        crate::fsutil::private_db_file(&path)
            .map_err(|e| ReceiptError::Batch(format!("cannot create {}: {e}", path.display())))?;
        let conn = open_connection(&path)?;
        conn.execute_batch(SCHEMA)?;
        let writer = open_connection(&path)?;
        let (writes, queue) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("yy-receipts".into())
            .spawn(move || write_groups(writer, queue))
            .map_err(|e| ReceiptError::Batch(format!("cannot start the writer thread: {e}")))?;
        Ok(Receipts {
            conn: Mutex::new(conn),
            writes,
        })
    }

    /// Hands a write to the writer thread and waits until it is on disk.
    async fn write(&self, op: Op) -> Result<(), ReceiptError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.writes
            .send(Write { op, done })
            .map_err(|_| ReceiptError::Batch("the writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| ReceiptError::Batch("the writer thread has stopped".into()))?
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

    /// Records that `id` starts now; returns once the receipt is on disk. Fails if a
    /// receipt exists (the caller looked first).
    pub async fn begin(&self, id: &str, fingerprint: &str, kind: &str) -> Result<(), ReceiptError> {
        self.write(Op::Begin {
            id: id.to_string(),
            fingerprint: fingerprint.to_string(),
            kind: kind.to_string(),
            at: now_ms(),
        })
        .await
    }

    /// Takes back the receipt [`Receipts::begin`] wrote for `id` when the command did not
    /// start after all (written side by side with the control plane's re-check, which
    /// refused it). A finished receipt stays.
    pub async fn forget(&self, id: &str) -> Result<(), ReceiptError> {
        self.write(Op::Forget { id: id.to_string() }).await
    }

    /// Records the outcome of `id`; returns once it is on disk.
    pub async fn finish(
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
        self.write(Op::Finish {
            id: id.to_string(),
            at: now_ms(),
            outcome,
            result: text,
            digest,
            error: error.map(str::to_string),
        })
        .await
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

    #[tokio::test]
    async fn a_receipt_prevents_a_second_run() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receipts::open(dir.path()).unwrap();
        let fp = fingerprint("c1", "ping", &serde_json::json!({}));
        assert!(matches!(r.lookup("c1", &fp).unwrap(), Prior::New));
        r.begin("c1", &fp, "ping").await.unwrap();
        assert!(matches!(r.lookup("c1", &fp).unwrap(), Prior::Unfinished));
        r.begin("c1", &fp, "ping")
            .await
            .expect_err("a second receipt for the same command is refused");
        r.finish(
            "c1",
            Outcome::Done,
            Some(&serde_json::json!({"x": 1})),
            None,
        )
        .await
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

    #[tokio::test]
    async fn a_receipt_of_a_refused_start_is_taken_back_and_a_finished_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receipts::open(dir.path()).unwrap();
        let fp = fingerprint("c2", "ping", &serde_json::json!({}));
        r.begin("c2", &fp, "ping").await.unwrap();
        r.forget("c2").await.unwrap();
        assert!(matches!(r.lookup("c2", &fp).unwrap(), Prior::New));
        // Delivered again later, it starts as if it never came.
        r.begin("c2", &fp, "ping").await.unwrap();
        r.finish("c2", Outcome::Done, None, None).await.unwrap();
        r.forget("c2").await.unwrap();
        assert!(matches!(r.lookup("c2", &fp).unwrap(), Prior::Finished(_)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_receipts_commit_in_groups_and_fail_alone() {
        let dir = tempfile::tempdir().unwrap();
        let r = std::sync::Arc::new(Receipts::open(dir.path()).unwrap());
        let fp = |id: &str| fingerprint(id, "ping", &serde_json::json!({}));
        // 200 distinct commands and one delivered twice, all at once.
        let mut ids: Vec<String> = (0..200).map(|i| format!("g{i}")).collect();
        ids.push("g7".into());
        let tasks: Vec<_> = ids
            .iter()
            .map(|id| {
                let (r, id, fp) = (r.clone(), id.clone(), fp(id));
                tokio::spawn(async move { r.begin(&id, &fp, "ping").await.is_ok() })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            ok += t.await.unwrap() as usize;
        }
        assert_eq!(
            ok, 200,
            "every command began once; the duplicate alone failed"
        );
        for id in &ids[..200] {
            assert!(matches!(r.lookup(id, &fp(id)).unwrap(), Prior::Unfinished));
            r.finish(id, Outcome::Done, None, None).await.unwrap();
            assert!(matches!(r.lookup(id, &fp(id)).unwrap(), Prior::Finished(_)));
        }
    }

    #[tokio::test]
    async fn unfinished_receipts_settle_as_uncertain_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let fp = fingerprint("c2", "ping", &serde_json::json!({}));
        {
            let r = Receipts::open(dir.path()).unwrap();
            r.begin("c2", &fp, "ping").await.unwrap();
        }
        let r = Receipts::open(dir.path()).unwrap();
        assert_eq!(r.settle_unfinished().unwrap(), vec!["c2".to_string()]);
        match r.lookup("c2", &fp).unwrap() {
            Prior::Finished(s) => assert_eq!(s.outcome, Outcome::Uncertain),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn old_large_results_compact_into_no_replay_records() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receipts::open(dir.path()).unwrap();
        let fp = fingerprint("c3", "fetch", &serde_json::json!({}));
        r.begin("c3", &fp, "fetch").await.unwrap();
        let big = serde_json::json!({ "content": "x".repeat(100_000) });
        r.finish("c3", Outcome::Done, Some(&big), None)
            .await
            .unwrap();
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
