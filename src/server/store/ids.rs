//! Ids typed by people: a full id or a unique prefix of one, like git, docker and kubectl.
//! An ambiguous prefix is refused with the candidates (400 `invalid`, exit 2).

use super::db::Db;
use rusqlite::OptionalExtension;

use super::StoreError;

/// Shortest prefix accepted: shorter ones would match by accident.
pub const MIN_PREFIX: usize = 4;

/// Candidates named in an ambiguity error.
const SHOWN: usize = 5;

/// The tables whose `id` column a person may abbreviate, with the noun and the list command
/// named in errors. A fixed list: table names are never taken from a request.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Session,
    Computer,
    Runner,
    Artifact,
    Command,
    Token,
    Goal,
    Subtask,
    ScrapeToken,
}

impl Kind {
    fn table(self) -> &'static str {
        match self {
            Kind::Session => "sessions",
            Kind::Computer => "computers",
            Kind::Runner => "runners",
            Kind::Artifact => "artifacts",
            Kind::Command => "runner_commands",
            Kind::Token => "api_tokens",
            Kind::Goal => "goals",
            Kind::Subtask => "subtasks",
            Kind::ScrapeToken => "scrape_tokens",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Session => "session",
            Kind::Computer => "computer",
            Kind::Runner => "runner",
            Kind::Artifact => "artifact",
            Kind::Command => "command",
            Kind::Token => "token",
            Kind::Goal => "goal",
            Kind::Subtask => "subtask",
            Kind::ScrapeToken => "scrape token",
        }
    }

    fn list_command(self) -> &'static str {
        match self {
            Kind::Session => "yy session list",
            Kind::Computer => "yy computer list",
            Kind::Runner => "yy runner list",
            Kind::Artifact => "yy artifact list",
            Kind::Command => "yy runner commands RUNNER",
            Kind::Token => "yy token list",
            Kind::Goal => "yy goal list",
            Kind::Subtask => "yy subtask list --goal GOAL",
            Kind::ScrapeToken => "yy metrics token list",
        }
    }

    /// Restricts rows to the account `?3` when `scoped` (else `?3` is NULL and unused).
    fn owned_by(self, scoped: bool) -> &'static str {
        match (scoped, self) {
            (false, _) => "AND ?3 IS NULL",
            // Subtasks belong to their goal's account.
            (true, Kind::Subtask) => "AND goal_id IN (SELECT id FROM goals WHERE account_id = ?3)",
            (true, _) => "AND account_id = ?3",
        }
    }

    /// The error for an id that names nothing.
    pub fn not_found(self, key: &str) -> StoreError {
        StoreError::NotFound(format!(
            "no {} {key:?}: see `{}`",
            self.noun(),
            self.list_command()
        ))
    }
}

/// The full id named by `key`: the id itself, or the one id it is a unique prefix of (at
/// least [`MIN_PREFIX`] characters).
pub fn resolve(conn: &Db, kind: Kind, key: &str) -> Result<String, StoreError> {
    resolve_for(conn, kind, key, None)
}

/// Like [`resolve`], among the rows of one account only (`account_id` column) when given:
/// a person never learns another account's ids from an ambiguity.
pub fn resolve_for(
    conn: &Db,
    kind: Kind,
    key: &str,
    account: Option<&str>,
) -> Result<String, StoreError> {
    let table = kind.table();
    let owned = kind.owned_by(account.is_some());
    // ?2 (the row limit) is unused here; parameters are bound by number.
    // A full id (what programs send) is one index lookup; only a prefix needs the range.
    let exact: Option<String> = conn
        .prepare_cached(&format!("SELECT id FROM {table} WHERE id = ?1 {owned}"))?
        .query_row(rusqlite::params![key, None::<i64>, account], |r| r.get(0))
        .optional()?;
    if let Some(id) = exact {
        return Ok(id);
    }
    if key.contains(['%', '_']) {
        return Err(kind.not_found(key));
    }
    if key.chars().count() < MIN_PREFIX {
        return Err(StoreError::Invalid(format!(
            "{} id {key:?} is too short: give the full id or a prefix of at least {MIN_PREFIX} characters (see `{}`)",
            kind.noun(),
            kind.list_command()
        )));
    }
    // A range scan on the primary key instead of LIKE, which SQLite may not index.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM {table} WHERE id >= ?1 AND substr(id, 1, length(?1)) = ?1 {owned}
         ORDER BY id LIMIT ?2"
    ))?;
    let found: Vec<String> = stmt
        .query_map(rusqlite::params![key, SHOWN as i64 + 1, account], |r| {
            r.get(0)
        })?
        .collect::<Result<_, _>>()?;
    match found.len() {
        0 => Err(kind.not_found(key)),
        1 => Ok(found.into_iter().next().unwrap_or_default()),
        n => {
            let more = if n > SHOWN { ", ..." } else { "" };
            let shown: Vec<&str> = found.iter().take(SHOWN).map(String::as_str).collect();
            Err(StoreError::Invalid(format!(
                "{} id prefix {key:?} is ambiguous: it matches {}{more}; give more characters",
                kind.noun(),
                shown.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(ids: &[&str]) -> Db {
        let c = Db::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
            .unwrap();
        for id in ids {
            c.execute("INSERT INTO sessions (id) VALUES (?1)", [id])
                .unwrap();
        }
        c
    }

    #[test]
    fn a_unique_prefix_names_its_id_and_an_ambiguous_one_lists_the_candidates() {
        let c = conn(&["abcd1111", "abcd2222", "ef001234"]);
        assert_eq!(resolve(&c, Kind::Session, "ef00").unwrap(), "ef001234");
        assert_eq!(resolve(&c, Kind::Session, "abcd1111").unwrap(), "abcd1111");
        assert_eq!(resolve(&c, Kind::Session, "abcd1").unwrap(), "abcd1111");
        match resolve(&c, Kind::Session, "abcd") {
            Err(StoreError::Invalid(m)) => {
                assert!(m.contains("abcd1111, abcd2222"), "{m}");
                assert!(m.contains("give more characters"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        match resolve(&c, Kind::Session, "abc") {
            Err(StoreError::Invalid(m)) => assert!(m.contains("at least 4 characters"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resolve(&c, Kind::Session, "abcd%"),
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            resolve(&c, Kind::Session, "9999"),
            Err(StoreError::NotFound(_))
        ));
    }
}
