//! Runner token renewal. When the control plane says so (75 % of the token's lifetime
//! passed, or an admin ran `yy runner rotate-token`), the Runner asks for a new token,
//! writes it into its runner.json (temp file 0600, fsync, rename, fsync of the directory)
//! and only then uses it. The control plane keeps the old token working until the new one
//! is first used, and a new request replaces a pending token, so a kill -9 at any point
//! leaves a runner.json whose token works:
//! - before the write: the file holds the old token, still current; the next renewal
//!   replaces the pending one nobody saved;
//! - after the write: the file holds the pending token, and its first use promotes it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::client::MachineClient;

/// Test-only: `before-save` or `after-save` makes the Runner stop (wait forever) right
/// before or right after it writes a renewed token, so a test can kill -9 it there. Never
/// set it in production: the Runner would stop working.
pub const TEST_PAUSE_ENV: &str = "YY_TEST_ROTATION_PAUSE";

/// At most one attempt per this long (a Runner that cannot save does not hammer).
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Renews the token on request; one per Runner process.
pub struct Rotation {
    config_path: PathBuf,
    last_try: Mutex<Option<Instant>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("the control plane gave no new token: {0}")]
    Ask(String),
    #[error("cannot save the new token in {path}: {reason}")]
    Save { path: String, reason: String },
}

impl Rotation {
    pub fn new(config_path: PathBuf) -> Rotation {
        Rotation {
            config_path,
            last_try: Mutex::new(None),
        }
    }

    /// Renews when `wanted`, unless an attempt failed shortly before. A failure is logged:
    /// the old token keeps working, and the next answer asks again.
    pub async fn maybe(&self, client: &MachineClient, generation: i64, wanted: bool) {
        if !wanted {
            return;
        }
        {
            let mut last = self.last_try.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
                return;
            }
            *last = Some(Instant::now());
        }
        match self.renew(client, generation).await {
            Ok(expires_at_ms) => {
                *self.last_try.lock().unwrap_or_else(|e| e.into_inner()) = None;
                tracing::info!(
                    config = %self.config_path.display(),
                    expires = %crate::timefmt::rfc3339(expires_at_ms),
                    "runner token renewed and saved; the old one ends at the new one's first use"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "runner token not renewed; the current one keeps working, retrying later")
            }
        }
    }

    async fn renew(&self, client: &MachineClient, generation: i64) -> Result<i64, RotateError> {
        let renewed = client
            .renew_token(generation)
            .await
            .map_err(|e| RotateError::Ask(e.to_string()))?;
        test_pause("before-save").await;
        let path = self.config_path.clone();
        let token = renewed.token.clone();
        tokio::task::spawn_blocking(move || save_token(&path, &token))
            .await
            .map_err(|e| RotateError::Save {
                path: self.config_path.display().to_string(),
                reason: e.to_string(),
            })??;
        test_pause("after-save").await;
        client.set_token(renewed.token);
        Ok(renewed.expires_at_ms)
    }
}

async fn test_pause(point: &str) {
    if std::env::var(TEST_PAUSE_ENV).is_ok_and(|v| v == point) {
        tracing::warn!(
            point,
            "{TEST_PAUSE_ENV} is set (test only): stopping here until killed"
        );
        std::future::pending::<()>().await;
    }
}

/// Replaces the token in runner.json and keeps everything else the file says as it is.
/// The file is written whole through a temporary file, mode 0600; a symlink is followed,
/// so the file it points to gets the token.
pub fn save_token(path: &Path, token: &str) -> Result<(), RotateError> {
    let err = |reason: String| RotateError::Save {
        path: path.display().to_string(),
        reason,
    };
    let real = std::fs::canonicalize(path).map_err(|e| err(e.to_string()))?;
    let text = std::fs::read(&real).map_err(|e| err(e.to_string()))?;
    let mut doc: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| err(format!("not JSON any more: {e}")))?;
    let obj = doc
        .as_object_mut()
        .ok_or_else(|| err("not a JSON object any more".into()))?;
    obj.insert("token".into(), serde_json::Value::String(token.into()));
    let mut out = serde_json::to_vec_pretty(&doc).map_err(|e| err(e.to_string()))?;
    out.push(b'\n');
    crate::fsutil::write_atomic(&real, &out, 0o600).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_token_is_replaced_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runner.json");
        std::fs::write(
            &path,
            r#"{"protocol":1,"token":"yyrt_old","serverURL":"http://127.0.0.1:1","extra":[1,2]}"#,
        )
        .unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        save_token(&link, "yyrt_new").unwrap();
        assert!(link.is_symlink(), "the link stays a link");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["token"], "yyrt_new");
        assert_eq!(v["extra"], serde_json::json!([1, 2]));
        assert_eq!(v["serverURL"], "http://127.0.0.1:1");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "[]").unwrap();
        assert!(save_token(&path, "yyrt_x").is_err());
    }
}
