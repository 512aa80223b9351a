//! Accounts and API tokens.

use rusqlite::{Connection, OptionalExtension, params};

use super::{StoreError, is_unique_violation, new_id, not_found};
use crate::api::views;
use crate::timefmt::{now_ms, rfc3339};

#[derive(Debug, Clone)]
pub struct AccountRow {
    pub id: String,
    pub username: String,
    pub admin: bool,
    pub created_at: i64,
}

impl From<AccountRow> for views::Account {
    fn from(r: AccountRow) -> Self {
        views::Account {
            id: r.id,
            username: r.username,
            admin: r.admin,
            created_at: rfc3339(r.created_at),
        }
    }
}

const COLUMNS: &str = "id, username, admin, created_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AccountRow> {
    Ok(AccountRow {
        id: r.get(0)?,
        username: r.get(1)?,
        admin: r.get(2)?,
        created_at: r.get(3)?,
    })
}

pub fn create(
    conn: &Connection,
    username: &str,
    password_hash: &str,
    admin: bool,
) -> Result<AccountRow, StoreError> {
    let account = AccountRow {
        id: new_id(),
        username: username.to_string(),
        admin,
        created_at: now_ms(),
    };
    conn.execute(
        "INSERT INTO accounts (id, username, password_hash, admin, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![account.id, account.username, password_hash, admin, account.created_at],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("account {username:?} already exists"))
        } else {
            e.into()
        }
    })?;
    Ok(account)
}

pub fn list(conn: &Connection) -> Result<Vec<AccountRow>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM accounts ORDER BY username"))?;
    let rows = stmt.query_map([], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn get_by_name(conn: &Connection, username: &str) -> Result<AccountRow, StoreError> {
    not_found(
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM accounts WHERE username = ?1"),
            [username],
            row,
        ),
        || format!("no account named {username:?}: see `yy account list`"),
    )
}

/// The account and its password hash, for a login attempt.
pub fn credentials(
    conn: &Connection,
    username: &str,
) -> Result<Option<(AccountRow, String)>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS}, password_hash FROM accounts WHERE username = ?1"),
            [username],
            |r| Ok((row(r)?, r.get(4)?)),
        )
        .optional()?)
}

/// Stores a new token (by its hash) and returns the token's id.
pub fn insert_token(
    conn: &Connection,
    account_id: &str,
    token_hash: &str,
) -> Result<String, StoreError> {
    let id = new_id();
    conn.execute(
        "INSERT INTO api_tokens (id, account_id, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, account_id, token_hash, now_ms()],
    )?;
    Ok(id)
}

/// The account behind a live token, and the token's id.
pub fn authenticate(
    conn: &Connection,
    token_hash: &str,
) -> Result<Option<(AccountRow, String)>, StoreError> {
    let found = conn
        .prepare_cached(
            "SELECT a.id, a.username, a.admin, a.created_at, t.id, t.last_used_at
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id
             WHERE t.token_hash = ?1 AND t.revoked_at IS NULL",
        )?
        .query_row([token_hash], |r| {
            Ok((row(r)?, r.get::<_, String>(4)?, r.get::<_, Option<i64>>(5)?))
        })
        .optional()?;
    let Some((account, token_id, last_used)) = found else {
        return Ok(None);
    };
    // Recording every use would make each read a write; a minute's precision is enough.
    let now = now_ms();
    if last_used.is_none_or(|t| now - t > 60_000) {
        conn.execute(
            "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
            params![now, token_id],
        )?;
    }
    Ok(Some((account, token_id)))
}

pub fn revoke_token(conn: &Connection, token_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE api_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![now_ms(), token_id],
    )?;
    Ok(())
}
