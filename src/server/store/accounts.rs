//! Accounts and API tokens.

use super::db::{Db, Row};
use rusqlite::{OptionalExtension, params};

use super::ids::Kind;
use super::{StoreError, get_by_id, is_unique_violation, new_id, not_found};
use crate::api::teams::GoalState;
use crate::api::views;
use crate::timefmt::{now_ms, rfc3339};

#[derive(Debug, Clone)]
pub struct AccountRow {
    pub id: String,
    pub username: String,
    pub admin: bool,
    pub created_at: i64,
    pub disabled_at: Option<i64>,
}

impl From<AccountRow> for views::Account {
    fn from(r: AccountRow) -> Self {
        views::Account {
            id: r.id,
            username: r.username,
            admin: r.admin,
            created_at: rfc3339(r.created_at),
            disabled_at: r.disabled_at.map(rfc3339),
        }
    }
}

const COLUMNS: &str = "id, username, admin, created_at, disabled_at";

fn row(r: &Row<'_>) -> rusqlite::Result<AccountRow> {
    from_columns!(r => AccountRow {
        id,
        username,
        admin,
        created_at,
        disabled_at,
    })
}

pub fn create(
    conn: &Db,
    username: &str,
    password_hash: &str,
    admin: bool,
) -> Result<AccountRow, StoreError> {
    let account = AccountRow {
        id: new_id(),
        username: username.to_string(),
        admin,
        created_at: now_ms(),
        disabled_at: None,
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

pub fn list(conn: &Db) -> Result<Vec<AccountRow>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM accounts ORDER BY username"))?;
    let rows = stmt.query_map([], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn get_by_name(conn: &Db, username: &str) -> Result<AccountRow, StoreError> {
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
pub fn credentials(conn: &Db, username: &str) -> Result<Option<(AccountRow, String)>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS}, password_hash FROM accounts WHERE username = ?1"),
            [username],
            |r| Ok((row(r)?, r.get(5)?)),
        )
        .optional()?)
}

/// The account's name when it is disabled (its work is refused and stopped).
pub fn disabled_name(conn: &Db, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT username FROM accounts WHERE id = ?1 AND disabled_at IS NOT NULL")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// Stores a new token (by its hash) and returns the token's id.
pub fn insert_token(conn: &Db, account_id: &str, token_hash: &str) -> Result<String, StoreError> {
    let id = new_id();
    conn.execute(
        "INSERT INTO api_tokens (id, account_id, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, account_id, token_hash, now_ms()],
    )?;
    Ok(id)
}

/// The account behind a live token, and the token's id. A token is live until revoked,
/// until its account is disabled, and until it was unused for `lifetime_ms` (each use
/// extends it).
pub fn authenticate(
    conn: &Db,
    token_hash: &str,
    lifetime_ms: i64,
) -> Result<Option<(AccountRow, String)>, StoreError> {
    let now = now_ms();
    let found = conn
        .prepare_cached(
            "SELECT a.id, a.username, a.admin, a.created_at, a.disabled_at, t.id, t.last_used_at
             FROM api_tokens t JOIN accounts a ON a.id = t.account_id
             WHERE t.token_hash = ?1 AND t.revoked_at IS NULL AND a.disabled_at IS NULL
               AND coalesce(t.last_used_at, t.created_at) > ?2",
        )?
        .query_row(params![token_hash, now.saturating_sub(lifetime_ms)], |r| {
            Ok((row(r)?, r.get::<_, String>(5)?, r.get::<_, Option<i64>>(6)?))
        })
        .optional()?;
    let Some((account, token_id, last_used)) = found else {
        return Ok(None);
    };
    // Recording every use would make each read a write; a minute's precision (or a
    // quarter of a short lifetime) is enough.
    if last_used.is_none_or(|t| now - t > (lifetime_ms / 4).min(60_000)) {
        conn.execute(
            "UPDATE api_tokens SET last_used_at = ?1 WHERE id = ?2",
            params![now, token_id],
        )?;
    }
    Ok(Some((account, token_id)))
}

pub fn revoke_token(conn: &Db, token_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE api_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![now_ms(), token_id],
    )?;
    Ok(())
}

/// Disables or enables an account. Disabling revokes all its tokens in the same transaction.
pub fn set_disabled(
    conn: &mut Db,
    username: &str,
    disabled: bool,
) -> Result<AccountRow, StoreError> {
    let tx = conn.savepoint()?;
    let account = get_by_name(&tx, username)?;
    let now = now_ms();
    if disabled {
        mark_disabled(&tx, &account.id, now)?;
    } else {
        tx.execute(
            "UPDATE accounts SET disabled_at = NULL WHERE id = ?1",
            [&account.id],
        )?;
    }
    let account = get_by_name(&tx, username)?;
    tx.commit()?;
    Ok(account)
}

/// Marks an account disabled (keeping the first time) and revokes its live tokens.
fn mark_disabled(conn: &Db, account_id: &str, now: i64) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE accounts SET disabled_at = coalesce(disabled_at, ?1) WHERE id = ?2",
        params![now, account_id],
    )?;
    conn.execute(
        "UPDATE api_tokens SET revoked_at = ?1 WHERE account_id = ?2 AND revoked_at IS NULL",
        params![now, account_id],
    )?;
    Ok(())
}

/// Disables an account and ends its old work in the same transaction: its tokens are
/// revoked, its waiting turns refused, its goals stopped, its controls of computers ended.
/// Returns the sessions whose running turns must now be stopped (a stop needs its Runner
/// to confirm it, so the caller queues those).
pub fn disable(
    conn: &mut Db,
    username: &str,
) -> Result<(AccountRow, Vec<crate::api::ids::SessionId>), StoreError> {
    let tx = conn.savepoint()?;
    let account = get_by_name(&tx, username)?;
    let now = now_ms();
    mark_disabled(&tx, &account.id, now)?;
    let why = format!("account {username:?} was disabled");
    super::turn_waits::refuse_account(&tx, &account.id, &format!("refused: {why}"))?;
    for goal in super::goals::goals_where(
        &tx,
        "account_id = ?1 AND state IN ('active', 'waiting_user')",
        [&account.id],
    )? {
        super::goals::end(
            &tx,
            &goal.id,
            GoalState::Stopped,
            &format!("stopped: {why}"),
            None,
        )?;
    }
    for table in ["computer_controls", "browser_controls"] {
        tx.execute(
            &format!("UPDATE {table} SET holder = NULL, expires_at = NULL WHERE holder = ?1"),
            [&account.id],
        )?;
    }
    let running: Vec<crate::api::ids::SessionId> = {
        let mut stmt = tx.prepare(
            "SELECT id FROM sessions WHERE account_id = ?1 AND state = 'running' ORDER BY id",
        )?;
        stmt.query_map([&account.id], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let account = get_by_name(&tx, username)?;
    tx.commit()?;
    Ok((account, running))
}

/// Sets a password and revokes every token of the account except `keep`.
pub fn set_password(
    conn: &mut Db,
    account_id: &str,
    password_hash: &str,
    keep: Option<&str>,
) -> Result<(), StoreError> {
    let tx = conn.savepoint()?;
    tx.execute(
        "UPDATE accounts SET password_hash = ?1 WHERE id = ?2",
        params![password_hash, account_id],
    )?;
    tx.execute(
        "UPDATE api_tokens SET revoked_at = ?1
         WHERE account_id = ?2 AND revoked_at IS NULL AND id IS DISTINCT FROM ?3",
        params![now_ms(), account_id, keep],
    )?;
    tx.commit()?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: String,
    pub account_id: String,
    pub username: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl TokenRow {
    pub fn view(self, lifetime_ms: i64) -> views::Token {
        let last = self.last_used_at.unwrap_or(self.created_at);
        views::Token {
            id: self.id,
            account: self.username,
            created_at: rfc3339(self.created_at),
            last_used_at: self.last_used_at.map(rfc3339),
            expires_at: rfc3339(last.saturating_add(lifetime_ms)),
            revoked_at: self.revoked_at.map(rfc3339),
        }
    }
}

const TOKEN_COLUMNS: &str =
    "t.id, t.account_id, a.username, t.created_at, t.last_used_at, t.revoked_at";

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    from_columns!(r => TokenRow {
        id,
        account_id,
        username,
        created_at,
        last_used_at,
        revoked_at,
    })
}

/// Live tokens (not revoked, not expired), of one account or of all, newest first.
pub fn list_tokens(
    conn: &Db,
    username: Option<&str>,
    lifetime_ms: i64,
) -> Result<Vec<TokenRow>, StoreError> {
    if let Some(name) = username {
        get_by_name(conn, name)?;
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN accounts a ON a.id = t.account_id
         WHERE t.revoked_at IS NULL AND coalesce(t.last_used_at, t.created_at) > ?1
           AND (?2 IS NULL OR a.username = ?2)
         ORDER BY t.created_at DESC, t.id"
    ))?;
    let rows = stmt
        .query_map(
            params![now_ms().saturating_sub(lifetime_ms), username],
            token_row,
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One token by id (revoked ones too).
pub fn get_token(conn: &Db, id: &str) -> Result<TokenRow, StoreError> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN accounts a ON a.id = t.account_id
         WHERE t.id = ?1"
    );
    get_by_id(conn, Kind::Token, &sql, id, token_row)
}
