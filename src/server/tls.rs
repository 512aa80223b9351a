//! HTTPS for `yy serve`: a certificate and key from PEM files (`--tls-cert`/`--tls-key`),
//! or one the server makes for itself (`--tls self-signed`: an ECDSA P-256 key and a
//! certificate kept in the data directory, the same at every start, so that the
//! fingerprint Runners and logins pinned stays valid). SIGHUP reads the files again: new
//! connections get the new certificate, open ones (a Runner's long-poll) keep theirs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("the certificate and key do not fit together: {0}")]
    Mismatch(String),
    #[error("cannot create the self-signed certificate in {path}: {reason}")]
    Create { path: String, reason: String },
}

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// Made on first start in `dir` for these names (host names and addresses).
    SelfSigned {
        dir: PathBuf,
        names: Vec<String>,
    },
}

/// The certificate in use; swapped whole on reload.
struct Loaded {
    config: Arc<rustls::ServerConfig>,
    fingerprint: String,
}

pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Loaded>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.cert)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl ServerTls {
    pub fn load(source: &TlsSource) -> Result<Arc<ServerTls>, TlsError> {
        let (cert, key) = match source {
            TlsSource::Files { cert, key } => (cert.clone(), key.clone()),
            TlsSource::SelfSigned { dir, names } => make_self_signed(dir, names)?,
        };
        let loaded = read(&cert, &key)?;
        Ok(Arc::new(ServerTls {
            cert,
            key,
            current: RwLock::new(loaded),
        }))
    }

    /// Reads the files again; on any error the certificate in use stays. Returns the new
    /// fingerprint.
    pub fn reload(&self) -> Result<String, TlsError> {
        let loaded = read(&self.cert, &self.key)?;
        let fingerprint = loaded.fingerprint.clone();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(fingerprint)
    }

    /// The SHA-256 of the certificate new connections get.
    pub fn fingerprint(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fingerprint
            .clone()
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .config
            .clone();
        tokio_rustls::TlsAcceptor::from(config)
    }
}

fn read(cert_path: &Path, key_path: &Path) -> Result<Loaded, TlsError> {
    let shown = |p: &Path| p.display().to_string();
    let bytes = |p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            path: shown(p),
            source,
        })
    };
    let cert_pem = bytes(cert_path)?;
    let key_pem = bytes(key_path)?;
    let invalid = |p: &Path, reason: String| TlsError::Invalid {
        path: shown(p),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert_path, format!("not a PEM certificate file ({e})")))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(
            cert_path,
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        ));
    };
    let fingerprint = crate::api::tls::fingerprint(leaf);
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        invalid(
            key_path,
            format!("not a PEM private key (PKCS#8, SEC1 or PKCS#1) ({e})"),
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(crate::api::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        fingerprint,
    })
}

/// The self-signed pair in `dir`, made now when it is not there yet.
fn make_self_signed(dir: &Path, names: &[String]) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let failed = |reason: String| TlsError::Create {
        path: dir.display().to_string(),
        reason,
    };
    crate::fsutil::create_private_dir(dir).map_err(|e| failed(e.to_string()))?;
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| failed(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(names.to_vec()).map_err(|e| failed(e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "yy serve (self-signed)");
    let made = params
        .self_signed(&pair)
        .map_err(|e| failed(e.to_string()))?;
    // The key first: a certificate without its key would be kept and fail every start.
    crate::fsutil::write_atomic(&key, pair.serialize_pem().as_bytes(), 0o600)
        .map_err(|e| failed(e.to_string()))?;
    crate::fsutil::write_atomic(&cert, made.pem().as_bytes(), 0o600)
        .map_err(|e| failed(e.to_string()))?;
    tracing::info!(cert = %cert.display(), "made a self-signed certificate");
    Ok((cert, key))
}

/// The names a self-signed certificate is made for: the listen address (unless it is a
/// wildcard), loopback, this host's name and the `--allowed-host` names.
pub fn self_signed_names(listen: std::net::SocketAddr, allowed_hosts: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    names.extend(allowed_hosts.iter().cloned());
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let source = TlsSource::SelfSigned {
            dir: dir.path().join("tls"),
            names: vec!["localhost".into(), "10.1.2.3".into()],
        };
        let first = ServerTls::load(&source).unwrap();
        let again = ServerTls::load(&source).unwrap();
        assert_eq!(first.fingerprint(), again.fingerprint());
        assert_eq!(first.fingerprint().len(), 64);
        use std::os::unix::fs::PermissionsExt;
        for f in ["server.crt", "server.key"] {
            let mode = std::fs::metadata(dir.path().join("tls").join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        assert_eq!(first.reload().unwrap(), first.fingerprint());
    }

    #[test]
    fn bad_files_name_what_is_wrong_and_keep_the_certificate_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let source = TlsSource::SelfSigned {
            dir: dir.path().to_path_buf(),
            names: vec!["localhost".into()],
        };
        let tls = ServerTls::load(&source).unwrap();
        let before = tls.fingerprint();
        std::fs::write(dir.path().join("server.crt"), "not a certificate").unwrap();
        let err = tls.reload().unwrap_err().to_string();
        assert!(
            err.contains("server.crt") && err.contains("no certificate"),
            "{err}"
        );
        assert_eq!(tls.fingerprint(), before);
        let missing = TlsSource::Files {
            cert: dir.path().join("nope.crt"),
            key: dir.path().join("server.key"),
        };
        let err = ServerTls::load(&missing).unwrap_err().to_string();
        assert!(err.contains("nope.crt"), "{err}");
    }
}
