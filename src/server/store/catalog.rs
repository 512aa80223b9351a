//! Sources (Hermes connections Bots come from) and profiles (a Hermes profile name and its
//! guest `terminal.cwd`).

use super::db::{Db, Row};
use rusqlite::params;

use super::{StoreError, is_unique_violation, new_id, not_found};
use crate::api::words::{self, plural};
use crate::api::{names, views};
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

#[derive(Debug, Clone)]
pub struct SourceRow {
    pub id: String,
    pub name: String,
    pub description: String,
    pub created_at: i64,
    pub archived_at: Option<i64>,
}

impl From<SourceRow> for views::Source {
    fn from(r: SourceRow) -> Self {
        views::Source {
            id: r.id,
            name: r.name,
            description: r.description,
            created_at: rfc3339(r.created_at),
            archived_at: rfc3339_opt(r.archived_at),
        }
    }
}

fn source_row(r: &Row<'_>) -> rusqlite::Result<SourceRow> {
    Ok(SourceRow {
        id: r.get(0)?,
        name: r.get(1)?,
        description: r.get(2)?,
        created_at: r.get(3)?,
        archived_at: r.get(4)?,
    })
}

const SOURCE_COLUMNS: &str = "id, name, description, created_at, archived_at";

pub fn create_source(conn: &Db, name: &str, description: &str) -> Result<SourceRow, StoreError> {
    let row = SourceRow {
        id: new_id(),
        name: name.into(),
        description: description.into(),
        created_at: now_ms(),
        archived_at: None,
    };
    conn.execute(
        "INSERT INTO sources (id, name, description, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![row.id, row.name, row.description, row.created_at],
    )
    .map_err(|e| conflict_on_unique(e, "source", name))?;
    Ok(row)
}

pub fn list_sources(conn: &Db, archived: bool) -> Result<Vec<SourceRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {SOURCE_COLUMNS} FROM sources WHERE ?1 = 1 OR archived_at IS NULL ORDER BY name, created_at"
    ))?;
    let rows = stmt
        .query_map([archived], source_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// An active source by name, or any source by id.
pub fn get_source(conn: &Db, key: &str) -> Result<SourceRow, StoreError> {
    not_found(
        conn.query_row(
            &format!(
                "SELECT {SOURCE_COLUMNS} FROM sources
                 WHERE (name = ?1 AND archived_at IS NULL) OR id = ?1"
            ),
            [key],
            source_row,
        ),
        || format!("no source named {key:?}: see `yy source list`"),
    )
}

pub fn update_source(
    conn: &Db,
    key: &str,
    description: Option<&str>,
) -> Result<SourceRow, StoreError> {
    let source = get_source(conn, key)?;
    if let Some(d) = description {
        conn.execute(
            "UPDATE sources SET description = ?1 WHERE id = ?2",
            params![d, source.id],
        )?;
    }
    get_source(conn, &source.id)
}

/// Archives a source that no active agent or enabled Runner uses.
pub fn archive_source(conn: &mut Db, key: &str) -> Result<SourceRow, StoreError> {
    let tx = conn.savepoint()?;
    let source = get_source(&tx, key)?;
    if source.archived_at.is_some() {
        return Ok(source);
    }
    let agents: i64 = tx.query_row(
        "SELECT count(*) FROM agents WHERE source_id = ?1 AND archived_at IS NULL",
        [&source.id],
        |r| r.get(0),
    )?;
    let runners: i64 = tx.query_row(
        "SELECT count(*) FROM runners WHERE source_id = ?1 AND disabled_at IS NULL",
        [&source.id],
        |r| r.get(0),
    )?;
    if agents > 0 || runners > 0 {
        return Err(StoreError::Conflict(format!(
            "source {:?} is still used by {} and {}: archive its agents and disable its runners first",
            source.name,
            plural(agents, "active agent", "active agents"),
            plural(runners, "enabled runner", "enabled runners"),
        )));
    }
    tx.execute(
        "UPDATE sources SET archived_at = ?1 WHERE id = ?2",
        params![now_ms(), source.id],
    )?;
    let source = get_source(&tx, &source.id)?;
    tx.commit()?;
    Ok(source)
}

#[derive(Debug, Clone)]
pub struct ProfileRow {
    pub id: String,
    pub name: String,
    pub cwd: Option<String>,
    pub created_at: i64,
    pub archived_at: Option<i64>,
}

impl ProfileRow {
    /// The guest's working directory, refused unless the profile is ready for a computer.
    pub fn guest_cwd(&self) -> Result<String, StoreError> {
        self.cwd
            .clone()
            .filter(|_| self.computer_ready())
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "profile {:?} has no absolute terminal.cwd for the guest",
                    self.name
                ))
            })
    }

    /// Computer agents need an absolute guest path for `terminal.cwd`.
    pub fn computer_ready(&self) -> bool {
        self.cwd
            .as_deref()
            .is_some_and(|c| names::check_absolute_path("cwd", c).is_ok())
    }
}

impl From<ProfileRow> for views::Profile {
    fn from(r: ProfileRow) -> Self {
        views::Profile {
            computer_ready: r.computer_ready(),
            id: r.id,
            name: r.name,
            cwd: r.cwd,
            created_at: rfc3339(r.created_at),
            archived_at: rfc3339_opt(r.archived_at),
        }
    }
}

fn profile_row(r: &Row<'_>) -> rusqlite::Result<ProfileRow> {
    Ok(ProfileRow {
        id: r.get(0)?,
        name: r.get(1)?,
        cwd: r.get(2)?,
        created_at: r.get(3)?,
        archived_at: r.get(4)?,
    })
}

const PROFILE_COLUMNS: &str = "id, name, cwd, created_at, archived_at";

/// Hermes's own words for "the process's directory", accepted for host-only profiles.
pub const RELATIVE_CWDS: [&str; 3] = [".", "auto", "cwd"];

/// A profile cwd is an absolute normalized path, or one of [`RELATIVE_CWDS`].
pub fn check_cwd(cwd: &str) -> Result<(), String> {
    if RELATIVE_CWDS.contains(&cwd) {
        return Ok(());
    }
    names::check_absolute_path("--cwd", cwd).map_err(|e| {
        format!("{e} (or '.', 'auto' or 'cwd' for a profile used only by host agents)")
    })
}

pub fn create_profile(conn: &Db, name: &str, cwd: Option<&str>) -> Result<ProfileRow, StoreError> {
    let row = ProfileRow {
        id: new_id(),
        name: name.into(),
        cwd: cwd.map(str::to_string),
        created_at: now_ms(),
        archived_at: None,
    };
    conn.execute(
        "INSERT INTO profiles (id, name, cwd, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![row.id, row.name, row.cwd, row.created_at],
    )
    .map_err(|e| conflict_on_unique(e, "profile", name))?;
    Ok(row)
}

pub fn list_profiles(conn: &Db, archived: bool) -> Result<Vec<ProfileRow>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {PROFILE_COLUMNS} FROM profiles WHERE ?1 = 1 OR archived_at IS NULL ORDER BY name, created_at"
    ))?;
    let rows = stmt
        .query_map([archived], profile_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn get_profile(conn: &Db, key: &str) -> Result<ProfileRow, StoreError> {
    not_found(
        conn.query_row(
            &format!(
                "SELECT {PROFILE_COLUMNS} FROM profiles
                 WHERE (name = ?1 AND archived_at IS NULL) OR id = ?1"
            ),
            [key],
            profile_row,
        ),
        || format!("no profile named {key:?}: see `yy profile list`"),
    )
}

fn active_computer_agents(conn: &Db, profile_id: &str) -> Result<i64, StoreError> {
    Ok(conn.query_row(
        "SELECT count(*) FROM agents WHERE profile_id = ?1 AND env = 'computer' AND archived_at IS NULL",
        [profile_id],
        |r| r.get(0),
    )?)
}

pub fn update_profile(
    conn: &mut Db,
    key: &str,
    cwd: Option<&str>,
) -> Result<ProfileRow, StoreError> {
    let tx = conn.savepoint()?;
    let profile = get_profile(&tx, key)?;
    if let Some(cwd) = cwd {
        if names::check_absolute_path("cwd", cwd).is_err()
            && active_computer_agents(&tx, &profile.id)? > 0
        {
            return Err(StoreError::Invalid(format!(
                "profile {:?} is used by computer agents, which need an absolute guest path for --cwd, not {cwd:?}",
                profile.name
            )));
        }
        tx.execute(
            "UPDATE profiles SET cwd = ?1 WHERE id = ?2",
            params![cwd, profile.id],
        )?;
    }
    let profile = get_profile(&tx, &profile.id)?;
    tx.commit()?;
    Ok(profile)
}

pub fn archive_profile(conn: &mut Db, key: &str) -> Result<ProfileRow, StoreError> {
    let tx = conn.savepoint()?;
    let profile = get_profile(&tx, key)?;
    if profile.archived_at.is_some() {
        return Ok(profile);
    }
    let agents: i64 = tx.query_row(
        "SELECT count(*) FROM agents WHERE profile_id = ?1 AND archived_at IS NULL",
        [&profile.id],
        |r| r.get(0),
    )?;
    if agents > 0 {
        return Err(StoreError::Conflict(format!(
            "profile {:?} is still used by {}: archive them or move them to another profile first",
            profile.name,
            plural(agents, "active agent", "active agents"),
        )));
    }
    tx.execute(
        "UPDATE profiles SET archived_at = ?1 WHERE id = ?2",
        params![now_ms(), profile.id],
    )?;
    let profile = get_profile(&tx, &profile.id)?;
    tx.commit()?;
    Ok(profile)
}

pub(crate) fn conflict_on_unique(e: rusqlite::Error, kind: &str, name: &str) -> StoreError {
    if is_unique_violation(&e) {
        StoreError::Conflict(format!(
            "{} named {name:?} already exists: pick another name",
            words::a(kind)
        ))
    } else {
        e.into()
    }
}
