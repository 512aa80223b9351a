//! One instance of a Runner online at a time. The id of the instance that last connected
//! from a data directory is kept there, so that a restart (even after `kill -9`, while the
//! control plane still counts the old one online) is no takeover; any other instance needs
//! `--replace` (docs/cli.md, `yy runner run`).

use std::path::{Path, PathBuf};

use super::client::{MachineClient, MachineError};
use super::config::RunnerConfig;

fn file(data_dir: &Path) -> PathBuf {
    data_dir.join("instance")
}

/// The instance that last connected from `data_dir`, if it recorded one.
pub fn previous(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(file(data_dir)).ok()?;
    uuid::Uuid::parse_str(text.trim())
        .ok()
        .map(|u| u.to_string())
}

/// Records `instance` as the one that connected from `data_dir`.
pub fn record(data_dir: &Path, instance: &str) -> std::io::Result<()> {
    crate::fsutil::write_atomic(&file(data_dir), format!("{instance}\n").as_bytes(), 0o600)
}

/// Another instance of this Runner that is online now and is not `previous`, as the words
/// that refuse a second one; `None` when nobody else is online.
pub async fn online_elsewhere(
    config: &RunnerConfig,
    previous: Option<&str>,
) -> Result<Option<String>, MachineError> {
    let client = MachineClient::for_config(config)?;
    let me = client.whoami().await?;
    Ok(me
        .online_instance
        .filter(|o| previous != Some(o.instance.as_str()))
        .map(|o| o.refusal(&config.runner_id)))
}
