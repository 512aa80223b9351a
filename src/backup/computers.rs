//! Before a Runner's maintenance, its computers are stopped and that is confirmed: a
//! container whose workspace is copied or replaced must not be writing to it.
//!
//! A Runner's computers are the yy containers (label `yy.managed=1`) that mount a
//! workspace under its data directory, plus any container its `computers.db` still names.
//! Each is stopped and removed (as the Runner itself does on stop; the workspace stays on
//! the host, and the Runner recreates computers on demand), then the engine is asked again
//! to confirm that none is left.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::ListContainersOptionsBuilder;
use rusqlite::{Connection, OpenFlags};

use super::{BackupError, Result};
use crate::computer::docker::Provider;
use crate::computer::labels;

const STOP_GRACE: Duration = Duration::from_secs(5);

/// Container ids the Runner's `computers.db` says may be running.
fn recorded(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join("computers.db");
    if !path.exists() {
        return Ok(vec![]);
    }
    let db_err = |e: rusqlite::Error| BackupError::Db(format!("reading {}: {e}", path.display()));
    let conn =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(db_err)?;
    let mut stmt =
        match conn.prepare("SELECT container_id FROM computers WHERE container_id IS NOT NULL") {
            Ok(s) => s,
            // No table yet: no computer was ever started here.
            Err(_) => return Ok(vec![]),
        };
    stmt.query_map([], |r| r.get(0))
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)
}

/// yy containers that mount something under `dir`, or are named in `ids`; with whether
/// each is a warm computer nobody claimed (not a computer yet).
async fn find(provider: &Provider, dir: &Path, ids: &[String]) -> Result<BTreeMap<String, bool>> {
    let filters: HashMap<&str, Vec<String>> =
        HashMap::from([("label", vec![format!("{}=1", labels::MANAGED)])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let list = provider
        .docker()
        .list_containers(Some(opts))
        .await
        .map_err(|e| BackupError::Io(format!("docker: listing containers: {e}")))?;
    let mut found = BTreeMap::new();
    for c in list {
        let Some(id) = c.id else { continue };
        let warm = c
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::AGENT))
            .is_some_and(|a| a == "warm");
        let mounts_here = c.mounts.unwrap_or_default().iter().any(|m| {
            m.source
                .as_deref()
                .is_some_and(|s| Path::new(s).starts_with(dir))
        });
        let named = ids.contains(&id);
        if mounts_here || named {
            found.insert(id, warm && !named);
        }
    }
    Ok(found)
}

/// Stops and removes the Runner's computers and confirms none is left. Returns the ids of
/// the containers stopped.
pub async fn stop_all(dir: &Path) -> Result<Vec<String>> {
    let ids = recorded(dir)?;
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let provider = match Provider::connect().await {
        Ok(p) => p,
        Err(e) if ids.is_empty() => {
            tracing::info!(error = %e, "no Docker engine, and no computer is recorded as running");
            return Ok(vec![]);
        }
        Err(e) => {
            return Err(BackupError::Busy(format!(
                "cannot confirm that this Runner's computers are stopped ({e}); {} computer(s) are recorded as running in {}",
                ids.len(),
                dir.join("computers.db").display()
            )));
        }
    };
    let found = find(&provider, &real, &ids).await?;
    for id in found.keys() {
        tracing::info!(container = %id, "stopping a computer for maintenance");
        provider
            .stop(id, STOP_GRACE)
            .await
            .and(provider.remove(id).await)
            .map_err(|e| BackupError::Busy(format!("cannot stop computer container {id}: {e}")))?;
    }
    // Asked again from scratch: what the engine has now, not what was just stopped.
    let left: Vec<_> = find(&provider, &real, &ids).await?.into_keys().collect();
    if !left.is_empty() {
        return Err(BackupError::Busy(format!(
            "computer containers are still there after stopping them: {}; stop them with `docker rm -f` and try again",
            left.join(", ")
        )));
    }
    // The containers are gone: the records must not name them any more, and the warm
    // computers' slots (a claimed one's holds its workspace) are unbound.
    if !found.is_empty() {
        let path = dir.join("computers.db");
        if let Ok(conn) = Connection::open(&path) {
            let _ = conn.execute("UPDATE computers SET container_id = NULL", []);
        }
    }
    crate::computer::workspaces::unmount_under(&real.join("warm"));
    Ok(found
        .into_iter()
        .filter(|(_, unclaimed_warm)| !unclaimed_warm)
        .map(|(id, _)| id)
        .collect())
}
