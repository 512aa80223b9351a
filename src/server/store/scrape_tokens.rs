//! Scrape tokens: what a Prometheus server holds to read `/metrics` (and nothing else).

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::{StoreError, get_by_id, ids, is_unique_violation, new_id};
use crate::api::status::ScrapeToken;
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

/// Live scrape tokens at most: each is a standing credential, so a handful is plenty.
pub const MAX_LIVE: i64 = 64;

const COLUMNS: &str = "t.id, t.name, a.username, t.created_at, t.last_used_at, t.revoked_at";

fn row(r: &Row<'_>) -> rusqlite::Result<ScrapeToken> {
    Ok(ScrapeToken {
        id: r.get(0)?,
        name: r.get(1)?,
        created_by: r.get(2)?,
        created_at: rfc3339(r.get(3)?),
        last_used_at: rfc3339_opt(r.get(4)?),
        revoked_at: rfc3339_opt(r.get(5)?),
    })
}

/// Stores a new scrape token (by its hash) under a name no live one has.
pub fn create(
    conn: &mut Db,
    name: &str,
    token_hash: &str,
    account_id: &str,
) -> Result<ScrapeToken, StoreError> {
    let tx = conn.savepoint()?;
    let live: i64 = tx.query_row(
        "SELECT count(*) FROM scrape_tokens WHERE revoked_at IS NULL",
        [],
        |r| r.get(0),
    )?;
    if live >= MAX_LIVE {
        return Err(StoreError::Limit(format!(
            "there are already {live} live scrape tokens: revoke one with `yy metrics token revoke ID`"
        )));
    }
    let id = new_id();
    tx.execute(
        "INSERT INTO scrape_tokens (id, name, token_hash, created_by, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, name, token_hash, account_id, now_ms()],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!(
                "a live scrape token is already named {name:?}: pick another name or revoke it first"
            ))
        } else {
            e.into()
        }
    })?;
    let token = get(&tx, &id)?;
    tx.commit()?;
    Ok(token)
}

pub fn get(conn: &Db, id: &str) -> Result<ScrapeToken, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM scrape_tokens t JOIN accounts a ON a.id = t.created_by
         WHERE t.id = ?1"
    );
    get_by_id(conn, ids::Kind::ScrapeToken, &sql, id, row)
}

/// Live scrape tokens, newest first.
pub fn list(conn: &Db) -> Result<Vec<ScrapeToken>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM scrape_tokens t JOIN accounts a ON a.id = t.created_by
         WHERE t.revoked_at IS NULL ORDER BY t.created_at DESC, t.id"
    ))?;
    let rows = stmt.query_map([], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Revokes the scrape token named by `key`: its id, a unique id prefix, or a live one's name.
pub fn revoke(conn: &mut Db, key: &str) -> Result<ScrapeToken, StoreError> {
    let tx = conn.savepoint()?;
    let by_name: Option<String> = tx
        .query_row(
            "SELECT id FROM scrape_tokens WHERE name = ?1 AND revoked_at IS NULL",
            [key],
            |r| r.get(0),
        )
        .optional()?;
    let id = match by_name {
        Some(id) => id,
        None => ids::resolve(&tx, ids::Kind::ScrapeToken, key)?,
    };
    tx.execute(
        "UPDATE scrape_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![now_ms(), id],
    )?;
    let token = get(&tx, &id)?;
    tx.commit()?;
    Ok(token)
}

/// Whether `token_hash` is a live scrape token's; records its use (a minute's precision:
/// a scraper calls every few seconds, and each read must not become a write).
pub fn authenticate(conn: &Db, token_hash: &str) -> Result<bool, StoreError> {
    let found: Option<(String, Option<i64>)> = conn
        .prepare_cached(
            "SELECT id, last_used_at FROM scrape_tokens WHERE token_hash = ?1 AND revoked_at IS NULL",
        )?
        .query_row([token_hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((id, last)) = found else {
        return Ok(false);
    };
    let now = now_ms();
    if last.is_none_or(|t| now - t > 60_000) {
        conn.execute(
            "UPDATE scrape_tokens SET last_used_at = ?1 WHERE id = ?2",
            params![now, id],
        )?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (Db, String) {
        let mut c = Db::open_in_memory().unwrap();
        super::super::migrate::migrate(c.sqlite_mut().unwrap()).unwrap();
        let a = super::super::accounts::create(&c, "root", "x", true).unwrap();
        (c, a.id)
    }

    #[test]
    fn names_are_unique_among_live_tokens_and_revoked_ones_stop_working() {
        let (mut c, admin) = db();
        let t = create(&mut c, "prom", "h1", &admin).unwrap();
        assert_eq!(t.created_by, "root");
        assert!(authenticate(&c, "h1").unwrap());
        assert!(!authenticate(&c, "h2").unwrap());
        assert!(matches!(
            create(&mut c, "prom", "h2", &admin),
            Err(StoreError::Conflict(_))
        ));
        let r = revoke(&mut c, "prom").unwrap();
        assert_eq!(r.id, t.id);
        assert!(r.revoked_at.is_some());
        assert!(!authenticate(&c, "h1").unwrap());
        assert!(list(&c).unwrap().is_empty());
        // The name is free again once revoked; a revoked id still resolves (no-op).
        create(&mut c, "prom", "h3", &admin).unwrap();
        assert_eq!(revoke(&mut c, &t.id).unwrap().id, t.id);
        assert_eq!(list(&c).unwrap().len(), 1);
        assert!(matches!(
            revoke(&mut c, "nosuchtoken"),
            Err(StoreError::NotFound(_))
        ));
    }
}
