//! Where a Hermes is and how the Runner authenticates to it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use url::Url;

use super::HermesError;

pub use crate::api::credentials::{HermesCredentials, Secret};

/// How the Runner proves itself to Hermes.
#[derive(Clone, Debug)]
pub enum HermesAuth {
    /// Hermes's session token (`HERMES_DASHBOARD_SESSION_TOKEN`) held in memory, as the
    /// [`Supervisor`](super::Supervisor) does. Loopback only.
    Token(Secret),
    /// runner.json `hermesTokenFile`: a file holding the session token, read at every
    /// connect (so a restarted Hermes with a new token is picked up). Loopback only.
    TokenFile(PathBuf),
    /// Password login (`POST /auth/password-login`), then a single-use WebSocket ticket.
    Credentials(HermesCredentials),
}

/// A Hermes's base URL and the way to authenticate, checked by [`HermesAccess::new`].
#[derive(Clone, Debug)]
pub struct HermesAccess {
    /// The server root, e.g. `http://127.0.0.1:9119/`.
    pub url: Url,
    pub auth: HermesAuth,
    /// Permits plain `http://` to a Hermes that is not on loopback.
    pub allow_insecure_lan: bool,
}

/// True only for the literal addresses `127.0.0.1` and `::1`: never a name such as
/// `localhost`, nor another 127/8 address (which Hermes itself treats as public).
pub fn is_loopback_literal(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Ipv4(ip) => *ip == std::net::Ipv4Addr::LOCALHOST,
        url::Host::Ipv6(ip) => *ip == std::net::Ipv6Addr::LOCALHOST,
        url::Host::Domain(_) => false,
    }
}

impl HermesAccess {
    /// Checks that `url` and `auth` fit together: the session token only on a loopback
    /// literal, credentials only elsewhere, plain http:// off loopback only with
    /// `allow_insecure_lan`, and no secret, path or query in the URL.
    pub fn new(
        url: &str,
        auth: HermesAuth,
        allow_insecure_lan: bool,
    ) -> Result<HermesAccess, HermesError> {
        let bad = |reason: String| HermesError::Config(reason);
        let parsed = Url::parse(url).map_err(|e| bad(format!("hermesURL {url:?}: {e}")))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Do not echo the URL: it holds a secret.
            return Err(bad(
                "hermesURL must not carry a user or password: use hermesCredentials".into(),
            ));
        }
        let host = parsed
            .host()
            .ok_or_else(|| bad(format!("hermesURL {url:?} has no host")))?;
        if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad(format!(
                "hermesURL {url:?} must be the server's root URL, such as http://127.0.0.1:9119"
            )));
        }
        let loopback = is_loopback_literal(&host);
        let shown = parsed.as_str().trim_end_matches('/').to_string();
        match parsed.scheme() {
            "https" => {}
            "http" if loopback || allow_insecure_lan => {}
            "http" => {
                return Err(bad(format!(
                    "hermesURL {shown} is plain http:// to a host that is not 127.0.0.1 or ::1: use https://, or set \"allowInsecureLan\": true if this network is trusted"
                )));
            }
            other => return Err(bad(format!("hermesURL has unsupported scheme {other:?}"))),
        }
        match (&auth, loopback) {
            (HermesAuth::Token(_) | HermesAuth::TokenFile(_), false) => {
                return Err(bad(format!(
                    "the Hermes session token only works when Hermes listens on 127.0.0.1 or ::1, and {shown} is not one of them: use hermesCredentials"
                )));
            }
            (HermesAuth::Credentials(_), true) => {
                return Err(bad(format!(
                    "hermesCredentials are for a Hermes bound to a non-loopback address; for {shown} use hermesTokenFile or hermesCommand"
                )));
            }
            (HermesAuth::Credentials(c), false) if c.username.is_empty() => {
                return Err(bad("hermesCredentials.username is empty".into()));
            }
            _ => {}
        }
        Ok(HermesAccess {
            url: parsed,
            auth,
            allow_insecure_lan,
        })
    }

    /// The URL as shown in messages (never with a secret).
    pub fn shown_url(&self) -> String {
        self.url.as_str().trim_end_matches('/').to_string()
    }

    pub fn is_loopback(&self) -> bool {
        self.url.host().is_some_and(|h| is_loopback_literal(&h))
    }
}

/// Reads a session token file: private to its owner (like runner.json), one non-empty line.
pub(crate) fn read_token_file(path: &Path) -> Result<Secret, HermesError> {
    let shown = path.display().to_string();
    let fail = |reason: String| HermesError::TokenFile {
        path: shown.clone(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if crate::fsutil::is_shared(mode) {
        return Err(fail(format!(
            "it is readable by group or others (mode {mode:04o}): run `chmod 600 {shown}`"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(fail("it is empty".into()));
    }
    if token.contains(char::is_whitespace) {
        return Err(fail("it must hold the token alone, on one line".into()));
    }
    Ok(Secret::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> HermesAuth {
        HermesAuth::Token(Secret::new("t0ken"))
    }
    fn creds() -> HermesAuth {
        HermesAuth::Credentials(HermesCredentials {
            username: "yy".into(),
            password: Secret::new("pw"),
        })
    }
    fn err(url: &str, auth: HermesAuth, lan: bool) -> String {
        HermesAccess::new(url, auth, lan).unwrap_err().to_string()
    }

    #[test]
    fn loopback_is_only_the_two_literals() {
        assert!(HermesAccess::new("http://127.0.0.1:9119", token(), false).is_ok());
        assert!(HermesAccess::new("http://[::1]:9119/", token(), false).is_ok());
        for url in [
            "http://localhost:9119",
            "http://127.0.0.2:9119",
            "http://10.0.0.5:9119",
        ] {
            assert!(err(url, token(), true).contains("only works when Hermes listens"));
        }
        assert!(err("http://localhost:9119", creds(), false).contains("allowInsecureLan"));
        assert!(HermesAccess::new("http://localhost:9119", creds(), true).is_ok());
        assert!(HermesAccess::new("https://hermes.lan:9119", creds(), false).is_ok());
        assert!(err("http://127.0.0.1:9119", creds(), false).contains("non-loopback"));
    }

    #[test]
    fn urls_with_secrets_paths_or_odd_schemes_are_refused() {
        let e = err("http://u:hunter2@10.0.0.5:1", creds(), true);
        assert!(!e.contains("hunter2"), "{e}");
        assert!(err("http://127.0.0.1:1/api", token(), false).contains("root URL"));
        assert!(err("http://127.0.0.1:1/?token=x", token(), false).contains("root URL"));
        assert!(err("ftp://127.0.0.1:1", token(), false).contains("scheme"));
    }

    #[test]
    fn debug_output_hides_secrets() {
        let access = HermesAccess::new("https://h.lan", creds(), false).unwrap();
        let shown = format!("{access:?} {:?}", token());
        assert!(
            !shown.contains("pw\"") && !shown.contains("t0ken"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn token_files_must_be_private_and_hold_one_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token_file(&path).unwrap().expose(), "abc123");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            read_token_file(&path)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "  \n").unwrap();
        assert!(
            read_token_file(&path)
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
    }
}
