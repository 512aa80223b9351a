//! Runner token rotation. A Runner holds one current token (`token_hash`, issued at
//! `token_issued_at`) and at most one pending one (`next_token_hash`): both authenticate,
//! and the first request with the pending one promotes it and drops the old one in the
//! same transaction. A new rotation replaces the pending token, so a Runner that died
//! before it saved a token it was given simply asks again with the old one.

use super::db::Db;
use rusqlite::{OptionalExtension, params};

use super::StoreError;
use super::runners::{self, RunnerRow};
use crate::api::ids::RunnerId;
use crate::timefmt::now_ms;

/// A Runner renews its token once this share (per mille) of the lifetime has passed.
pub const RENEW_AT_PER_MILLE: i64 = 750;

/// Who a Runner token belongs to, and what its lifetime says.
#[derive(Debug, Clone)]
pub struct RunnerAuth {
    pub runner_id: RunnerId,
    pub disabled_at: Option<i64>,
    /// When the token used was issued.
    pub issued_at: i64,
    /// When it stops working.
    pub expires_at: i64,
    /// Past its lifetime: refused.
    pub expired: bool,
    /// The Runner should renew now: 75 % of the lifetime passed, or an admin asked.
    pub rotate: bool,
    /// This request was the first with the pending token: it is current now, the old one dead.
    pub promoted: bool,
}

fn due(issued_at: i64, requested: bool, lifetime_ms: i64, now: i64) -> bool {
    requested || now - issued_at >= lifetime_ms / 1000 * RENEW_AT_PER_MILLE
}

/// Authenticates a Runner token by its hash; promotes a pending token on its first use.
pub fn authenticate(
    conn: &mut Db,
    hash: &str,
    lifetime_ms: i64,
) -> Result<Option<RunnerAuth>, StoreError> {
    // Nearly every request only reads; the rare promotion writes inside the same savepoint.
    // It runs without the store's lock (Store::call_unlocked): the promotion's own WHERE
    // decides, so a token replaced meanwhile through another replica is not promoted.
    let tx = conn.savepoint()?;
    type Found = (
        RunnerId,
        Option<i64>,
        bool,
        Option<i64>,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let found: Option<Found> = tx
        .prepare_cached(
            "SELECT id, disabled_at, token_hash = ?1, token_issued_at, created_at,
                    next_token_issued_at, rotate_requested_at
             FROM runners WHERE token_hash = ?1 OR next_token_hash = ?1",
        )?
        .query_row([hash], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    let Some((runner_id, disabled_at, current, issued, created, next_issued, requested)) = found
    else {
        return Ok(None);
    };
    let now = now_ms();
    let mut promoted = false;
    let (issued_at, requested) = if current {
        (issued.unwrap_or(created), requested.is_some())
    } else {
        let next_issued = next_issued.unwrap_or(now);
        if disabled_at.is_none() {
            let changed = tx.execute(
                "UPDATE runners SET token_hash = next_token_hash, token_issued_at = next_token_issued_at,
                     next_token_hash = NULL, next_token_issued_at = NULL, rotate_requested_at = NULL
                 WHERE id = ?1 AND next_token_hash = ?2",
                params![runner_id, hash],
            )?;
            if changed == 0 {
                // Replaced by a newer pending token between the read and the change: this
                // one is neither current nor pending any more.
                return Ok(None);
            }
            promoted = true;
        }
        (next_issued, false)
    };
    tx.commit()?;
    let expires_at = issued_at.saturating_add(lifetime_ms);
    Ok(Some(RunnerAuth {
        runner_id,
        disabled_at,
        issued_at,
        expires_at,
        expired: now >= expires_at,
        rotate: due(issued_at, requested, lifetime_ms, now),
        promoted,
    }))
}

/// Records `hash` as the Runner's pending token (replacing an earlier pending one);
/// returns when it was issued.
pub fn issue(conn: &Db, runner_id: &RunnerId, hash: &str) -> Result<i64, StoreError> {
    let now = now_ms();
    let changed = conn.execute(
        "UPDATE runners SET next_token_hash = ?2, next_token_issued_at = ?3
         WHERE id = ?1 AND disabled_at IS NULL",
        params![runner_id, hash, now],
    )?;
    if changed == 0 {
        return Err(StoreError::Invalid(format!(
            "runner {runner_id} is disabled"
        )));
    }
    Ok(now)
}

/// Whether the Runner should renew its token now (for the lease answer).
pub fn rotate_due(conn: &Db, runner_id: &RunnerId, lifetime_ms: i64) -> Result<bool, StoreError> {
    let found: Option<(Option<i64>, i64, Option<i64>)> = conn
        .prepare_cached(
            "SELECT token_issued_at, created_at, rotate_requested_at FROM runners WHERE id = ?1",
        )?
        .query_row([runner_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(found.is_some_and(|(issued, created, requested)| {
        due(
            issued.unwrap_or(created),
            requested.is_some(),
            lifetime_ms,
            now_ms(),
        )
    }))
}

/// An admin asked for a rotation that no token answered yet: the lease long-poll answers
/// at once so the Runner hears it (and only until it asked for its new token, so a Runner
/// that cannot save one does not spin).
pub fn rotation_waiting(conn: &Db, runner_id: &RunnerId) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT rotate_requested_at IS NOT NULL AND next_token_hash IS NULL
             FROM runners WHERE id = ?1",
        )?
        .query_row([runner_id], |r| r.get(0))
        .optional()?
        .unwrap_or(false))
}

/// `yy runner rotate-token`: asks the Runner to renew at its next contact. With `revoke`
/// the current and pending tokens stop working at once and the Runner is disabled (its
/// token may have leaked): it must be registered again.
pub fn request(conn: &mut Db, key: &str, revoke: bool) -> Result<RunnerRow, StoreError> {
    // Nearly every request only reads; the rare promotion writes inside the same savepoint.
    // It runs without the store's lock (Store::call_unlocked): the promotion's own WHERE
    // decides, so a token replaced meanwhile through another replica is not promoted.
    let tx = conn.savepoint()?;
    let runner = runners::get(&tx, key)?;
    if runner.disabled_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "runner {} is disabled: its token works no more; register a new one with `yy runner register --source {}`",
            runner.id, runner.source
        )));
    }
    let now = now_ms();
    if revoke {
        // token_hash is NOT NULL and UNIQUE: a value no SHA-256 hex can equal.
        tx.execute(
            "UPDATE runners SET token_hash = 'revoked:' || id, next_token_hash = NULL,
                 next_token_issued_at = NULL, rotate_requested_at = NULL, disabled_at = ?2
             WHERE id = ?1",
            params![runner.id, now],
        )?;
    } else {
        tx.execute(
            "UPDATE runners SET rotate_requested_at = ?2 WHERE id = ?1",
            params![runner.id, now],
        )?;
    }
    let row = runners::get(&tx, &runner.id)?;
    tx.commit()?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(conn: &mut Db) -> String {
        super::super::migrate(conn.sqlite_mut().unwrap()).unwrap();
        conn.execute_batch(
            "INSERT INTO sources (id, name, description, created_at) VALUES ('s', 'main', '', 0);
             INSERT INTO runners (id, source_id, token_hash, allowed_profiles, artifact_roots,
                 server_url, hermes_url, created_at, token_issued_at)
             VALUES ('r', 's', 'old', '[]', '[]', 'http://127.0.0.1:1', 'http://127.0.0.1:2', 0, 0);",
        )
        .unwrap();
        "r".into()
    }

    #[test]
    fn the_pending_token_replaces_the_old_one_on_first_use() {
        let mut c = Db::open_in_memory().unwrap();
        let id = RunnerId::new(runner(&mut c));
        let day = 24 * 3600 * 1000;
        // Issued at 0 with a lifetime of 30 days: long expired by now.
        let old = authenticate(&mut c, "old", 30 * day).unwrap().unwrap();
        assert!(old.expired && old.rotate && !old.promoted);
        let lifetime = i64::MAX / 2;
        issue(&c, &id, "first").unwrap();
        // A second rotation (the Runner died before saving the first) replaces it.
        issue(&c, &id, "second").unwrap();
        assert!(authenticate(&mut c, "first", lifetime).unwrap().is_none());
        let a = authenticate(&mut c, "old", lifetime).unwrap().unwrap();
        assert!(
            !a.expired && !a.promoted,
            "the old token works until the new one is used"
        );
        let b = authenticate(&mut c, "second", lifetime).unwrap().unwrap();
        assert!(b.promoted && !b.expired && !b.rotate);
        assert!(authenticate(&mut c, "old", lifetime).unwrap().is_none());
        let again = authenticate(&mut c, "second", lifetime).unwrap().unwrap();
        assert!(!again.promoted);
    }

    #[test]
    fn an_admin_request_asks_and_a_revocation_disables() {
        let mut c = Db::open_in_memory().unwrap();
        let id = RunnerId::new(runner(&mut c));
        let lifetime = i64::MAX / 2;
        assert!(!rotation_waiting(&c, &id).unwrap());
        request(&mut c, &id, false).unwrap();
        assert!(rotation_waiting(&c, &id).unwrap());
        assert!(rotate_due(&c, &id, lifetime).unwrap());
        issue(&c, &id, "new").unwrap();
        assert!(!rotation_waiting(&c, &id).unwrap(), "asked already");
        authenticate(&mut c, "new", lifetime).unwrap().unwrap();
        assert!(!rotate_due(&c, &id, lifetime).unwrap(), "answered");
        let row = request(&mut c, &id, true).unwrap();
        assert!(row.disabled_at.is_some());
        assert!(authenticate(&mut c, "new", lifetime).unwrap().is_none());
        assert!(request(&mut c, &id, false).is_err());
    }
}
