//! The record of an image that passed the verify ladder on this host's engine, kept so
//! that `yy doctor` can say whether a Runner's image was verified without running the
//! ladder again. Written by every passing ladder (`yy image verify`, `yy image prepare`,
//! a Runner's image acceptance), removed by a failing one; one file per engine and image
//! under `$XDG_DATA_HOME/yy/images/verified` (mode 0600 in a 0700 directory).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::engine::EngineInfo;
use super::image_verify::Report;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyRecord {
    pub image: String,
    /// `docker 20.10.24+dfsg1`: the engine the ladder ran on.
    pub engine: String,
    /// The yy that ran the ladder.
    pub yy_version: String,
    pub verified_at: String,
    pub checks: usize,
}

/// Where records live: `$XDG_DATA_HOME/yy/images/verified`, else under `$HOME`.
pub fn dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let data = var("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("yy/images/verified"))
}

fn path(engine: &EngineInfo, image: &str) -> Option<PathBuf> {
    let hex = image.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(dir()?.join(format!("{}-{hex}.json", engine.engine.name())))
}

/// Keeps the outcome of a ladder: a record for a pass, none for a failure. Best effort: a
/// record that cannot be written only makes `yy doctor` ask for another verify.
pub fn keep(engine: &EngineInfo, report: &Report) {
    let Some(file) = path(engine, &report.image) else {
        return;
    };
    if !report.ok {
        let _ = std::fs::remove_file(&file);
        return;
    }
    let record = VerifyRecord {
        image: report.image.clone(),
        engine: engine.label(),
        yy_version: crate::VERSION.into(),
        verified_at: crate::timefmt::rfc3339(crate::timefmt::now_ms()),
        checks: report.checks.len(),
    };
    let written = file
        .parent()
        .map_or(Ok(()), crate::fsutil::create_private_dir)
        .and_then(|_| {
            let data = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?;
            crate::fsutil::write_atomic(&file, &data, 0o600)
        });
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "could not record the image's verification");
    }
}

/// The record of `image` on `engine`, if a ladder passed there.
pub fn find(engine: &EngineInfo, image: &str) -> Option<VerifyRecord> {
    let bytes = std::fs::read(path(engine, image)?).ok()?;
    serde_json::from_slice::<VerifyRecord>(&bytes)
        .ok()
        .filter(|r| r.image == image)
}
