//! runner.json: the Runner's private configuration, written by `yy runner register`.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::api::machine::PROTOCOL_VERSION;

pub use crate::api::views::RunnerConfig;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is readable by group or others (mode {mode:04o}); it holds the Runner's token: run `chmod 600 {path}`"
    )]
    Shared { path: String, mode: u32 },
    #[error("{path} is not a valid runner.json: {reason}")]
    Invalid { path: String, reason: String },
}

/// True only for the literal loopback addresses (never a name such as `localhost`).
pub fn is_loopback_literal(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        url::Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
        url::Host::Domain(_) => false,
    }
}

/// A server URL of runner.json: https://, or plain http:// to loopback (or anywhere with
/// `allowInsecureLan`).
fn check_server_url(name: &str, raw: &str, insecure_lan: bool) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|e| format!("{name} {raw:?}: {e}"))?;
    let host = url
        .host()
        .ok_or_else(|| format!("{name} {raw:?} has no host"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback_literal(&host) || insecure_lan => {}
        "http" => {
            return Err(format!(
                "{name} {raw} is plain http:// to a host that is not loopback: use https://, or set \"allowInsecureLan\": true if this network is trusted"
            ));
        }
        other => return Err(format!("{name} has unsupported scheme {other:?}")),
    }
    Ok(url)
}

pub fn load(path: &Path) -> Result<RunnerConfig, ConfigError> {
    let shown: PathBuf = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let shown = shown.display().to_string();
    let read = |source| ConfigError::Read {
        path: shown.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o7777;
    if crate::fsutil::is_shared(mode) {
        return Err(ConfigError::Shared { path: shown, mode });
    }
    let text = std::fs::read(path).map_err(read)?;
    let invalid = |reason: String| ConfigError::Invalid {
        path: shown.clone(),
        reason,
    };
    let mut config: RunnerConfig =
        serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
    if config.protocol != PROTOCOL_VERSION {
        return Err(invalid(format!(
            "it is for runner protocol {}, and this yy speaks protocol {PROTOCOL_VERSION}: use the yy version that matches the control plane",
            config.protocol
        )));
    }
    let url = check_server_url("serverURL", &config.server_url, config.allow_insecure_lan)
        .map_err(invalid)?;
    for other in &config.server_urls {
        let u = check_server_url("serverURLs entry", other, config.allow_insecure_lan)
            .map_err(invalid)?;
        if u.scheme() != url.scheme() {
            return Err(invalid(format!(
                "serverURLs entry {other} is {}:// and serverURL is {}://: the replicas of one control plane are reached one way",
                u.scheme(),
                url.scheme()
            )));
        }
    }
    if let Some(pin) = &config.server_cert_sha256 {
        let parsed = crate::api::tls::parse_fingerprint(pin)
            .map_err(|e| invalid(format!("serverCertSha256: {e}")))?;
        if url.scheme() != "https" {
            return Err(invalid(
                "serverCertSha256 is set but serverURL is not https://: remove one of them".into(),
            ));
        }
        config.server_cert_sha256 = Some(parsed);
    }
    if uuid::Uuid::parse_str(&config.runner_id).is_err() {
        return Err(invalid(format!(
            "runnerId {:?} is not a UUID",
            config.runner_id
        )));
    }
    if !config.token.starts_with(crate::api::RUNNER_TOKEN_PREFIX) {
        return Err(invalid("token is not a yy Runner token".into()));
    }
    let ways = [
        config.hermes_token_file.is_some(),
        config.hermes_command.is_some(),
        config.hermes_credentials.is_some(),
    ];
    if ways.iter().filter(|w| **w).count() > 1 {
        return Err(invalid(
            "set only one of hermesTokenFile, hermesCommand and hermesCredentials".into(),
        ));
    }
    if config.hermes_command.as_ref().is_some_and(|c| c.is_empty()) {
        return Err(invalid("hermesCommand is empty".into()));
    }
    for root in &config.artifact_roots {
        crate::api::names::check_absolute_path("artifactRoots entry", root).map_err(invalid)?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(servers: serde_json::Value) -> Result<RunnerConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runner.json");
        let mut v = serde_json::json!({
            "protocol": PROTOCOL_VERSION,
            "serverURL": "https://a.example:8420",
            "runnerId": "6f1c2a8e-8d5b-4c1e-9a3f-2b7d4e6c8a10",
            "token": format!("{}x", crate::api::RUNNER_TOKEN_PREFIX),
            "hermesURL": "http://127.0.0.1:9119",
            "allowedProfiles": ["default"],
            "artifactRoots": [],
        });
        v["serverURLs"] = servers;
        crate::fsutil::write_atomic(&path, v.to_string().as_bytes(), 0o600).unwrap();
        load(&path)
    }

    #[test]
    fn every_replica_is_used_in_order_without_repeats() {
        let c = config_with(serde_json::json!([
            "https://a.example:8420/",
            "https://b.example:8420"
        ]))
        .unwrap();
        assert_eq!(
            c.servers(),
            ["https://a.example:8420", "https://b.example:8420"]
        );
    }

    #[test]
    fn replicas_reached_another_way_are_refused() {
        let e = config_with(serde_json::json!(["http://127.0.0.1:8420"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reached one way"), "{e}");
        let e = config_with(serde_json::json!(["https://"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("serverURLs entry"), "{e}");
    }
}
