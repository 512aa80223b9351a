//! The container engine computers run on: Docker (dockerd) or Podman's Docker-compatible
//! API (`podman system service`, rootful). Both are driven through the same Docker API
//! (bollard); the engine is told by what the socket answers, never only by the flag.
//!
//! * `--engine docker|podman` picks the engine: its socket is `DOCKER_HOST` when set, else
//!   the engine's usual one ([`DOCKER_SOCKET`], [`PODMAN_SOCKET`]); whatever answers there
//!   must be that engine.
//! * Without `--engine`: `DOCKER_HOST` when set, else the first of the two sockets that
//!   answers (Docker first).

use std::path::Path;

use bollard::models::SystemVersion;
use serde::Serialize;

use super::ComputerError;

pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";
pub const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// The `nofile` and `nproc` limits of every computer (soft = hard), on both engines.
/// Docker passes its own limits on by default; Podman raises both to the host's maximum,
/// which a host without `CAP_SYS_RESOURCE` refuses ("error setting rlimit type 7"). Fixed
/// values make computers alike on both engines and start on either.
pub const NOFILE: i64 = 16384;
pub const NPROC: i64 = 16384;

/// Why `public-web` computers are not offered on Podman.
pub const PODMAN_NO_PUBLIC_WEB: &str = "the public-web network mode is not available on Podman: yy's egress proxy relies on Docker bridge networks (an internal network per computer, joined by the running proxy, with inter-container traffic off), which yy has not verified on Podman's CNI backend; run this Runner with --engine docker for public-web computers";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Docker,
    Podman,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }

    /// How people write it in a sentence.
    pub fn title(self) -> &'static str {
        match self {
            Engine::Docker => "Docker",
            Engine::Podman => "Podman",
        }
    }

    pub fn default_socket(self) -> &'static str {
        match self {
            Engine::Docker => DOCKER_SOCKET,
            Engine::Podman => PODMAN_SOCKET,
        }
    }

    pub fn install_script(self) -> &'static str {
        match self {
            Engine::Docker => "scripts/install-docker.sh",
            Engine::Podman => "scripts/install-podman.sh",
        }
    }

    /// The user a computer's container (its init and main process) runs as, chosen so
    /// that the guest agent's exec as root gets the three capabilities it needs to take
    /// its identity (docs/computer-notes.md, "The guest agent's identity"). Docker gives
    /// an exec the capabilities it computed for the container's user, none for a non-root
    /// one (and `no-new-privileges` keeps a root exec from gaining them), so its
    /// containers run as root, running no guest code: tini and `sleep infinity`, or tini
    /// and the guest agent itself, which takes its identity before anything else
    /// ([`super::launch`]). Podman computes them per exec, and
    /// its tmpfs owner `U` follows the container's user, so its containers run as the
    /// guest user (it hands a non-root exec the added capabilities: see
    /// [`super::without_capabilities`]).
    pub fn container_user(self) -> &'static str {
        match self {
            Engine::Docker => super::GUEST_AGENT_START_USER,
            Engine::Podman => super::GUEST_USER,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `--engine` for the commands that drive an engine.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct EngineArgs {
    /// The container engine: docker (dockerd) or podman (Podman's Docker-compatible API,
    /// rootful) [default: the engine at DOCKER_HOST, else the first of
    /// /var/run/docker.sock and /run/podman/podman.sock that answers]
    #[arg(long, value_name = "ENGINE", value_enum)]
    pub engine: Option<Engine>,
}

/// The engine a provider is connected to, as it said itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineInfo {
    pub engine: Engine,
    /// The engine's own version (`20.10.24+dfsg1`, `4.3.1`).
    pub version: String,
    /// The Docker API version it speaks (`1.41`).
    pub api_version: String,
    /// The unix socket it answers on.
    pub socket: String,
}

impl EngineInfo {
    /// `podman 4.3.1`: how a Runner reports it.
    pub fn label(&self) -> String {
        format!("{} {}", self.engine, self.version)
    }
}

/// An image ID as Docker writes it: Podman answers a commit with the bare 64 hex digits.
pub fn full_image_id(id: &str) -> String {
    if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("sha256:{id}")
    } else {
        id.to_string()
    }
}

/// Which engine answered `GET /version`, and its version: Podman's compat answer names a
/// component "Podman Engine".
pub fn identify(v: &SystemVersion) -> (Engine, String) {
    let podman = v
        .components
        .iter()
        .flatten()
        .find(|c| c.name.to_ascii_lowercase().contains("podman"));
    match podman {
        Some(c) => (Engine::Podman, c.version.clone()),
        None => (Engine::Docker, v.version.clone().unwrap_or_default()),
    }
}

/// A socket to try: its path, where it came from, and the engine that must answer there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub socket: String,
    pub from: &'static str,
    pub want: Option<Engine>,
}

/// The sockets to try, in order, for `choice` and the value of `DOCKER_HOST`.
pub fn candidates(
    choice: Option<Engine>,
    docker_host: Option<&str>,
) -> Result<Vec<Candidate>, ComputerError> {
    if let Some(host) = docker_host.filter(|h| !h.is_empty()) {
        let path = host.strip_prefix("unix://").ok_or_else(|| {
            ComputerError::Invalid(format!(
                "DOCKER_HOST={host} is not a unix socket (unix:///PATH); computers need the engine on this host"
            ))
        })?;
        return Ok(vec![Candidate {
            socket: path.to_string(),
            from: "DOCKER_HOST",
            want: choice,
        }]);
    }
    Ok(match choice {
        Some(e) => vec![Candidate {
            socket: e.default_socket().into(),
            from: "--engine",
            want: Some(e),
        }],
        None => [Engine::Docker, Engine::Podman]
            .into_iter()
            .map(|e| Candidate {
                socket: e.default_socket().into(),
                from: "the default sockets",
                want: None,
            })
            .collect(),
    })
}

/// Whether something listens on the unix socket at `path` (a cheap first look).
pub fn socket_answers(path: &str) -> bool {
    Path::new(path).exists() && std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// The hint for a socket nobody answers on.
pub fn not_answering(tried: &[Candidate], choice: Option<Engine>) -> ComputerError {
    let sockets = tried
        .iter()
        .map(|c| c.socket.as_str())
        .collect::<Vec<_>>()
        .join(" or ");
    let how = match choice {
        Some(e) => format!("start it with {}", e.install_script()),
        None => "start one with scripts/install-docker.sh or scripts/install-podman.sh".into(),
    };
    let what = match choice {
        Some(e) => e.title(),
        None => "no container engine",
    };
    ComputerError::Docker(format!(
        "{what} does not answer on {sockets} ({}); {how}",
        tried.first().map_or("", |c| c.from)
    ))
}

/// Reads one JSON document by a plain HTTP/1.0 GET on the engine's unix socket: for the
/// few libpod endpoints bollard has no call for.
pub async fn get_json(socket: &str, path: &str) -> Result<serde_json::Value, ComputerError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let failed = |e: String| ComputerError::Docker(format!("GET {path} on {socket}: {e}"));
    let fetch = async {
        let mut s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| failed(e.to_string()))?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: engine\r\n\r\n").as_bytes())
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut buf = Vec::new();
        s.take(64 << 20)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok::<_, ComputerError>(buf)
    };
    let buf = tokio::time::timeout(std::time::Duration::from_secs(30), fetch)
        .await
        .map_err(|_| failed("no answer within 30 s".into()))??;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| failed("not an HTTP answer".into()))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status == "404" {
        return Err(ComputerError::NotFound(format!("{path}: not found")));
    }
    if status != "200" {
        return Err(failed(format!(
            "status {status}: {}",
            body.trim().chars().take(200).collect::<String>()
        )));
    }
    serde_json::from_str(body).map_err(|e| failed(format!("not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use bollard::models::SystemVersionComponents as ComponentVersion;

    use super::*;

    #[test]
    fn the_engine_is_told_by_its_version_answer() {
        let podman = SystemVersion {
            version: Some("4.3.1".into()),
            api_version: Some("1.41".into()),
            components: Some(vec![ComponentVersion {
                name: "Podman Engine".into(),
                version: "4.3.1".into(),
                details: None,
            }]),
            ..Default::default()
        };
        assert_eq!(identify(&podman), (Engine::Podman, "4.3.1".to_string()));
        let docker = SystemVersion {
            version: Some("20.10.24+dfsg1".into()),
            components: Some(vec![ComponentVersion {
                name: "Engine".into(),
                version: "20.10.24+dfsg1".into(),
                details: None,
            }]),
            ..Default::default()
        };
        assert_eq!(
            identify(&docker),
            (Engine::Docker, "20.10.24+dfsg1".to_string())
        );
    }

    #[test]
    fn podman_image_ids_get_their_algorithm() {
        let hex = "ab".repeat(32);
        assert_eq!(full_image_id(&hex), format!("sha256:{hex}"));
        assert_eq!(
            full_image_id(&format!("sha256:{hex}")),
            format!("sha256:{hex}")
        );
    }

    #[test]
    fn sockets_come_from_the_flag_docker_host_or_the_defaults() {
        let auto = candidates(None, None).unwrap();
        assert_eq!(
            auto.iter().map(|c| c.socket.as_str()).collect::<Vec<_>>(),
            vec![DOCKER_SOCKET, PODMAN_SOCKET]
        );
        assert!(auto.iter().all(|c| c.want.is_none()));
        let podman = candidates(Some(Engine::Podman), Some("")).unwrap();
        assert_eq!(podman.len(), 1);
        assert_eq!(podman[0].socket, PODMAN_SOCKET);
        assert_eq!(podman[0].want, Some(Engine::Podman));
        let host = candidates(Some(Engine::Docker), Some("unix:///tmp/x.sock")).unwrap();
        assert_eq!(host[0].socket, "/tmp/x.sock");
        assert_eq!(host[0].from, "DOCKER_HOST");
        assert_eq!(host[0].want, Some(Engine::Docker));
        let e = candidates(None, Some("tcp://10.0.0.1:2375")).unwrap_err();
        assert!(e.to_string().contains("not a unix socket"), "{e}");
    }
}
