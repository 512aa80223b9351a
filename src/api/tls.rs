//! TLS as yy's clients see it: a server certificate is trusted when its SHA-256 matches
//! the fingerprint pinned for that server (a self-signed `yy serve --tls self-signed`), or
//! when a CA of the system's roots issued it for the name (`SSL_CERT_FILE` and
//! `SSL_CERT_DIR` are honoured). Nothing else is.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// The crypto every yy TLS endpoint uses (one provider, chosen here, so that two crates
/// enabling different ones never leave rustls without a default).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate's fingerprint: lowercase hex of the SHA-256 of its DER bytes.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Accepts a fingerprint as printed by yy, by `openssl x509 -fingerprint -sha256` (colons,
/// upper case) or with a `sha256:` prefix; returns it in yy's form.
pub fn parse_fingerprint(text: &str) -> Result<String, String> {
    let t = text.trim();
    let t = t
        .strip_prefix("sha256:")
        .or_else(|| t.strip_prefix("SHA256:"))
        .or_else(|| t.strip_prefix("sha256 Fingerprint="))
        .unwrap_or(t);
    let hex: String = t.chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "{text:?} is not a SHA-256 certificate fingerprint (64 hex digits, as `yy serve` prints it)"
        ));
    }
    Ok(hex.to_ascii_lowercase())
}

/// What the last handshake presented, for an error that names the new fingerprint.
#[derive(Debug, Default)]
pub struct Seen {
    pub fingerprint: Option<String>,
    /// True when a CA of the system's roots vouched for it.
    pub ca_issued: bool,
}

#[derive(Debug)]
struct Verifier {
    pin: Option<String>,
    /// None when the system has no roots at all: then only the pin can be trusted.
    webpki: Option<Arc<dyn ServerCertVerifier>>,
    provider: Arc<CryptoProvider>,
    /// Accept any certificate (a first contact that only looks at it; never sends a byte
    /// of HTTP over the connection).
    look_only: bool,
    seen: Arc<Mutex<Seen>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = fingerprint(end_entity);
        let by_ca = match &self.webpki {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Err(rustls::Error::General("no CA roots on this system".into())),
        };
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.fingerprint = Some(presented.clone());
            seen.ca_issued = by_ca.is_ok();
        }
        if self.look_only || self.pin.as_deref() == Some(presented.as_str()) {
            return Ok(ServerCertVerified::assertion());
        }
        match (by_ca, &self.pin) {
            (Ok(v), _) => Ok(v),
            (Err(_), Some(pin)) => Err(rustls::Error::General(format!(
                "the server's certificate has SHA-256 {presented}, not the pinned {pin}, and no trusted CA issued it"
            ))),
            (Err(e), None) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn system_roots() -> Option<Arc<dyn ServerCertVerifier>> {
    let loaded = rustls_native_certs::load_native_certs();
    for e in &loaded.errors {
        tracing::debug!(error = %e, "a system CA certificate could not be read");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if roots.is_empty() {
        return None;
    }
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .ok()?;
    Some(verifier)
}

fn config(verifier: Verifier) -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // yy's server speaks HTTP/1.1 (long-polls and WebSocket upgrades).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A configuration that trusts no certificate, for a client of a plain `http://` peer: it
/// never makes a handshake (redirects are off), and loading the system's roots would cost
/// every CLI start about 40 ms.
pub fn no_roots() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// The client configuration for a server: its certificate must match `pin` or be issued
/// by a trusted CA for the name.
pub fn client_config(pin: Option<&str>) -> (Arc<rustls::ClientConfig>, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let verifier = Verifier {
        pin: pin.map(str::to_string),
        webpki: system_roots(),
        provider: provider(),
        look_only: false,
        seen: seen.clone(),
    };
    (config(verifier), seen)
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("TLS handshake with {0} failed: {1}")]
    Handshake(String, std::io::Error),
    #[error("{0} is not a host name or address TLS can check")]
    Name(String),
}

/// Looks at the certificate an `https://` server presents, trusting nothing and sending
/// nothing but the handshake: for `yy login` to show a fingerprint before a password goes
/// out, and for `yy doctor`.
pub async fn probe(url: &url::Url) -> Result<Seen, ProbeError> {
    let host = url.host_str().unwrap_or_default().to_string();
    let port = url.port_or_known_default().unwrap_or(443);
    let shown = format!("{host}:{port}");
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = ServerName::try_from(bare.clone()).map_err(|_| ProbeError::Name(host.clone()))?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let verifier = Verifier {
        pin: None,
        webpki: system_roots(),
        provider: provider(),
        look_only: true,
        seen: seen.clone(),
    };
    let connector = tokio_rustls::TlsConnector::from(config(verifier));
    let connect = tokio::net::TcpStream::connect((bare.as_str(), port));
    let tcp = tokio::time::timeout(std::time::Duration::from_secs(10), connect)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|e| ProbeError::Connect(shown.clone(), e))?;
    let handshake = connector.connect(name, tcp);
    let _tls = tokio::time::timeout(std::time::Duration::from_secs(10), handshake)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|e| ProbeError::Handshake(shown, e))?;
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_read_in_the_forms_tools_print_them() {
        let f = fingerprint(b"certificate");
        assert_eq!(f.len(), 64);
        assert_eq!(parse_fingerprint(&f).unwrap(), f);
        let colons: Vec<String> = f
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).to_uppercase())
            .collect();
        let openssl = format!("sha256 Fingerprint={}", colons.join(":"));
        assert_eq!(parse_fingerprint(&openssl).unwrap(), f);
        assert_eq!(parse_fingerprint(&format!("sha256:{f}")).unwrap(), f);
        assert!(parse_fingerprint(&f[..63]).is_err());
        assert!(parse_fingerprint(&format!("{}g", &f[..63])).is_err());
        assert!(parse_fingerprint("").is_err());
    }
}
