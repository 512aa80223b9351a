//! Runner registrations. The token is stored only as a hash and never read back.

use super::db::{Db, Dialect, Row};
use rusqlite::{OptionalExtension, params};

use super::runner_images::busy_sql;
use super::{StoreError, catalog, new_id};
use crate::api::ids::{Generation, RunnerId};
use crate::api::views;
use crate::egress::NetworkMode;
use crate::timefmt::{now_ms, rfc3339, rfc3339_opt};

pub use crate::api::machine::OFFLINE_AFTER_MS;

#[derive(Debug, Clone)]
pub struct RunnerRow {
    pub id: RunnerId,
    pub source_id: String,
    pub source: String,
    pub allowed_profiles: Vec<String>,
    pub artifact_roots: Vec<String>,
    pub server_url: String,
    pub hermes_url: String,
    pub created_at: i64,
    pub disabled_at: Option<i64>,
    pub generation: Generation,
    pub instance_id: Option<String>,
    pub last_seen_at: Option<i64>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    pub status: Option<serde_json::Value>,
    pub computer_image: Option<String>,
    pub network: NetworkMode,
    /// The image update in progress, if any, and the image replaced last.
    pub images: super::runner_images::ImageUpdate,
    /// When the current token was issued (store::runner_tokens).
    pub token_issued_at: i64,
    /// A new token was issued and not used yet.
    pub token_pending: bool,
    /// An admin asked for a rotation at the next contact.
    pub rotate_requested_at: Option<i64>,
}

impl RunnerRow {
    pub fn online(&self, now: i64) -> bool {
        self.disabled_at.is_none()
            && self.instance_id.is_some()
            && self
                .last_seen_at
                .is_some_and(|t| now - t < OFFLINE_AFTER_MS)
    }
}

impl RunnerRow {
    /// The admin view, with the token's expiry under a lifetime of `token_lifetime_ms`.
    pub fn view(self, token_lifetime_ms: i64) -> views::Runner {
        let expires = self.token_issued_at.saturating_add(token_lifetime_ms);
        let disabled = self.disabled_at.is_some();
        let mut v = views::Runner::from(self);
        if !disabled {
            v.token_expires_at = Some(rfc3339(expires));
        }
        v
    }
}

impl From<RunnerRow> for views::Runner {
    fn from(r: RunnerRow) -> Self {
        views::Runner {
            online: r.online(now_ms()),
            state: if r.disabled_at.is_some() {
                views::RunnerState::Disabled
            } else {
                views::RunnerState::Enabled
            },
            id: r.id,
            source: r.source,
            allowed_profiles: r.allowed_profiles,
            artifact_roots: r.artifact_roots,
            server_url: r.server_url,
            hermes_url: r.hermes_url,
            created_at: rfc3339(r.created_at),
            disabled_at: rfc3339_opt(r.disabled_at),
            last_seen_at: rfc3339_opt(r.last_seen_at),
            generation: r.generation,
            instance_id: r.instance_id,
            version: r.version,
            capabilities: r.capabilities,
            computers_capacity: r
                .status
                .as_ref()
                .and_then(|s| s["computers_capacity"].as_u64()),
            hostname: r
                .status
                .as_ref()
                .and_then(|s| s["hostname"].as_str().map(str::to_string)),
            hermes_listen: r
                .status
                .as_ref()
                .and_then(|s| s["hermes_listen"].as_str().map(str::to_string)),
            engine: r
                .status
                .as_ref()
                .and_then(|s| s["engine"].as_str().map(str::to_string)),
            computer_idle_ms: r
                .status
                .as_ref()
                .and_then(|s| s["computer_idle_ms"].as_u64()),
            computer_reclaim_ms: r
                .status
                .as_ref()
                .and_then(|s| s["computer_reclaim_ms"].as_u64()),
            warm_computers: r
                .status
                .as_ref()
                .and_then(|s| s["warm_computers"].as_u64())
                .map(|n| n.min(u64::from(u32::MAX)) as u32),
            pending_image: r.images.pending_image.clone(),
            pending_state: r.images.pending_state,
            pending_command: r.images.pending_command.clone(),
            pending_reason: r.images.reason(),
            previous_image: r.images.previous_image.clone(),
            image_note: r.images.note.clone(),
            computer_image: r.computer_image,
            network: r.network,
            token_issued_at: Some(rfc3339(r.token_issued_at)),
            // The lifetime is the server's setting: RunnerRow::view fills it in.
            token_expires_at: None,
            token_rotation: if r.token_pending {
                Some(views::TokenRotation::Pending)
            } else {
                r.rotate_requested_at
                    .map(|_| views::TokenRotation::Requested)
            },
        }
    }
}

pub(crate) const SELECT: &str = concat!(
    "SELECT r.id, r.source_id, s.name, r.allowed_profiles, r.artifact_roots,
        r.server_url, r.hermes_url, r.created_at, r.disabled_at, r.generation, r.instance_id,
        r.last_seen_at, r.version, r.capabilities, r.status, r.computer_image, r.network,
        r.previous_image, r.pending_image, r.pending_state, r.pending_command, r.image_note,
        CASE WHEN r.pending_state = 'accepted' THEN (SELECT json_array(
                count(*) FILTER (WHERE c.kind = 'worker.turn'), count(*) FILTER (WHERE c.kind != 'worker.turn'))
            FROM runner_commands c WHERE c.runner_id = r.id AND ",
    busy_sql!(),
    ") END,
        coalesce(r.token_issued_at, r.created_at), r.next_token_issued_at IS NOT NULL,
        r.rotate_requested_at
    FROM runners r JOIN sources s ON s.id = r.source_id"
);

fn json_list(s: String) -> Vec<String> {
    serde_json::from_str(&s).unwrap_or_default()
}

pub(crate) fn row(r: &Row<'_>) -> rusqlite::Result<RunnerRow> {
    Ok(RunnerRow {
        id: r.get(0)?,
        source_id: r.get(1)?,
        source: r.get(2)?,
        allowed_profiles: json_list(r.get(3)?),
        artifact_roots: json_list(r.get(4)?),
        server_url: r.get(5)?,
        hermes_url: r.get(6)?,
        created_at: r.get(7)?,
        disabled_at: r.get(8)?,
        generation: r.get(9)?,
        instance_id: r.get(10)?,
        last_seen_at: r.get(11)?,
        version: r.get(12)?,
        capabilities: json_list(r.get(13)?),
        status: r
            .get::<_, Option<String>>(14)?
            .and_then(|s| serde_json::from_str(&s).ok()),
        computer_image: r.get(15)?,
        network: NetworkMode::parse(&r.get::<_, String>(16)?).unwrap_or_default(),
        images: super::runner_images::ImageUpdate::from_row(r, 17)?,
        token_issued_at: r.get(23)?,
        token_pending: r.get(24)?,
        rotate_requested_at: r.get(25)?,
    })
}

pub struct NewRunner<'a> {
    pub source: &'a str,
    pub profiles: &'a [String],
    pub artifact_roots: &'a [String],
    pub server_url: &'a str,
    pub hermes_url: &'a str,
    pub token_hash: &'a str,
    pub computer_image: Option<&'a str>,
    pub network: NetworkMode,
}

pub fn register(conn: &mut Db, new: NewRunner<'_>) -> Result<RunnerRow, StoreError> {
    let tx = conn.savepoint()?;
    let source = catalog::get_source(&tx, new.source)?;
    if source.archived_at.is_some() {
        return Err(StoreError::Invalid(format!(
            "source {:?} is archived",
            source.name
        )));
    }
    let mut profiles = Vec::new();
    for p in new.profiles {
        let profile = catalog::get_profile(&tx, p)?;
        if profile.archived_at.is_some() {
            return Err(StoreError::Invalid(format!(
                "profile {:?} is archived",
                profile.name
            )));
        }
        if !profiles.contains(&profile.name) {
            profiles.push(profile.name);
        }
    }
    // Looked up first, not told by the insert's unique violation: on PostgreSQL a failed
    // statement ends the transaction's work, so nothing could be read after it.
    let existing: Option<String> = tx
        .query_row(
            "SELECT id FROM runners WHERE source_id = ?1 AND disabled_at IS NULL",
            [&source.id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(existing) = existing {
        return Err(StoreError::Conflict(format!(
            "source {:?} already has an enabled runner {existing}: disable it first with `yy runner disable {existing}`",
            source.name
        )));
    }
    let id = new_id();
    tx.execute(
        "INSERT INTO runners (id, source_id, token_hash, allowed_profiles, artifact_roots,
             server_url, hermes_url, created_at, computer_image, network, token_issued_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?8)",
        params![
            id,
            source.id,
            new.token_hash,
            serde_json::to_string(&profiles).expect("strings serialize"),
            serde_json::to_string(new.artifact_roots).expect("strings serialize"),
            new.server_url,
            new.hermes_url,
            now_ms(),
            new.computer_image,
            new.network.as_str()
        ],
    )?;
    let runner = get(&tx, &id)?;
    tx.commit()?;
    Ok(runner)
}

pub fn list(conn: &Db) -> Result<Vec<RunnerRow>, StoreError> {
    let mut stmt = conn.prepare(&format!("{SELECT} ORDER BY s.name, r.created_at"))?;
    let rows = stmt.query_map([], row)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

/// A Runner by full id or by a unique id prefix of at least 4 characters.
pub fn get(conn: &Db, key: &str) -> Result<RunnerRow, StoreError> {
    // A full id (what every machine and most admin requests carry) is one index lookup;
    // only a prefix needs resolving.
    let exact = conn
        .prepare_cached(&format!("{SELECT} WHERE r.id = ?1"))?
        .query_row([key], row)
        .optional()?;
    if let Some(found) = exact {
        return Ok(found);
    }
    let id = super::ids::resolve(conn, super::ids::Kind::Runner, key)?;
    conn.prepare_cached(&format!("{SELECT} WHERE r.id = ?1"))?
        .query_row([&id], row)
        .optional()?
        .ok_or_else(|| super::ids::Kind::Runner.not_found(key))
}

/// The id of a Runner given by full id or unique prefix, without reading the whole row
/// (enqueueing resolves one on every request).
pub fn resolve(conn: &Db, key: &str) -> Result<String, StoreError> {
    let exact: Option<String> = conn
        .prepare_cached("SELECT id FROM runners WHERE id = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?;
    match exact {
        Some(id) => Ok(id),
        None => Ok(get(conn, key)?.id.into_string()),
    }
}

/// A Runner's `disabled_at` and current generation, read for a lease (None: no such
/// Runner).
pub fn fence(conn: &Db, id: &str) -> Result<Option<(Option<i64>, i64)>, StoreError> {
    let sql = match conn.dialect() {
        Dialect::Sqlite => "SELECT disabled_at, generation FROM runners WHERE id = ?1",
        // The row stays as read until the transaction ends: a connect (a new generation)
        // or a disable through another replica waits for the lease, or the lease for it
        // (and then reads what it wrote). `NO KEY`: enqueues, whose foreign key only
        // needs the row to stay, do not wait for it.
        Dialect::Postgres => {
            "SELECT disabled_at, generation FROM runners WHERE id = ?1 FOR NO KEY UPDATE"
        }
    };
    Ok(conn
        .prepare_cached(sql)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Disables a Runner: its token stops working at once and for good.
pub fn disable(conn: &Db, key: &str) -> Result<RunnerRow, StoreError> {
    let runner = get(conn, key)?;
    conn.execute(
        "UPDATE runners SET disabled_at = ?1 WHERE id = ?2 AND disabled_at IS NULL",
        params![now_ms(), runner.id],
    )?;
    get(conn, &runner.id)
}

/// The computer image a Runner's computers are created from, if computers are enabled.
pub fn computer_image(conn: &Db, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn.query_row(
        "SELECT computer_image FROM runners WHERE id = ?1",
        [id],
        |r| r.get(0),
    )?)
}

/// The instance of Runner `id` that is online now (connected, not disabled, seen within
/// [`OFFLINE_AFTER_MS`]), if any.
pub fn online_instance(
    conn: &Db,
    id: &str,
) -> Result<Option<crate::api::machine::OnlineInstance>, StoreError> {
    let row: Option<(String, i64, Option<String>)> = conn
        .prepare_cached(
            "SELECT instance_id, last_seen_at, json_extract(status, '$.hostname') FROM runners
             WHERE id = ?1 AND disabled_at IS NULL AND instance_id IS NOT NULL
               AND last_seen_at IS NOT NULL",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let now = now_ms();
    Ok(row
        .filter(|(_, seen, _)| now - seen < OFFLINE_AFTER_MS)
        .map(
            |(instance, seen, hostname)| crate::api::machine::OnlineInstance {
                instance,
                hostname,
                last_seen_ms_ago: now - seen,
            },
        ))
}

/// A Runner's computer image and network mode (how its next computers start).
pub fn computer_settings(conn: &Db, id: &str) -> Result<(Option<String>, NetworkMode), StoreError> {
    let (image, network): (Option<String>, String) = conn.query_row(
        "SELECT computer_image, network FROM runners WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok((image, NetworkMode::parse(&network).unwrap_or_default()))
}

/// [`computer_settings`] for starting a computer: refused when the Runner has no image.
pub fn computer_for_start(conn: &Db, id: &str) -> Result<(String, NetworkMode), StoreError> {
    let (image, network) = computer_settings(conn, id)?;
    let image = image.ok_or_else(|| {
        StoreError::Invalid(format!(
            "runner {id} has no computer image: `yy runner update {id} --computer-image sha256:...`"
        ))
    })?;
    Ok((image, network))
}

/// The enabled Runner of a source: where its agents' work goes.
pub fn enabled_for_source(conn: &Db, source: &catalog::SourceRow) -> Result<RunnerRow, StoreError> {
    list(conn)?
        .into_iter()
        .find(|r| r.source_id == source.id && r.disabled_at.is_none())
        .ok_or_else(|| {
            StoreError::Invalid(format!(
                "source {:?} has no enabled runner: register one with `yy runner register --source {}`",
                source.name, source.name
            ))
        })
}

pub fn touch(conn: &Db, runner_id: &RunnerId) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE runners SET last_seen_at = ?2 WHERE id = ?1")?
        .execute(params![runner_id, now_ms()])?;
    Ok(())
}

/// Marks a Runner offline after a clean disconnect of the instance holding `generation`.
pub fn disconnect(
    conn: &Db,
    runner_id: &RunnerId,
    generation: Generation,
) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE runners SET instance_id = NULL WHERE id = ?1 AND generation = ?2")?
        .execute(params![runner_id, generation])?;
    Ok(())
}
