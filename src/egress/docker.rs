//! The Runner's side of the egress proxy, over bollard.
//!
//! * The proxy is `yy egress serve` from the computer image, in a hardened container of
//!   its own (uid 1000, read-only root, all capabilities dropped, no mounts, bounded
//!   memory, pids and logs). It reaches out through one ordinary bridge network (the
//!   Runner's `yy-egress-out-RUNNER`, or the network the operator names).
//! * Every `public-web` computer gets its own `internal` network with
//!   `com.docker.network.bridge.inhibit_ipv4`: Docker gives it no route out, and the host
//!   bridge gets no IPv4 address, so the computer cannot reach the host either (a plain
//!   internal network on Docker 20.10 still lets a container reach every host service
//!   through the bridge address). The proxy joins each such network; it is the only
//!   other member, so a computer can reach nothing but the proxy.
//! * The proxy prints one JSON line per decision; the Runner follows its log, names the
//!   computer by the client address and keeps the last [`LOG_CAPACITY`] in a ring.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListNetworksOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::task::JoinHandle;

use super::{Decision, LOG_CAPACITY, LogQuery, LogResult, PROXY_PORT, Ring};
use crate::computer::{ComputerError, GUEST_BINARY, GUEST_USER, GuestNetwork, labels};

/// `yy.role` tells the proxy and the computer networks from computers.
pub const ROLE: &str = "yy.role";
pub const ROLE_PROXY: &str = "egress-proxy";
pub const ROLE_NETWORK: &str = "egress-network";

/// The proxy container's resources.
const PROXY_MEMORY: i64 = 256 << 20;
const PROXY_PIDS: i64 = 256;
const PROXY_NANO_CPUS: i64 = 1_000_000_000;
/// A decision line longer than this is not one of the proxy's (they are a few hundred bytes).
const MAX_LINE: usize = 16 * 1024;

/// Host settings of `yy runner run` for the proxy.
#[derive(Debug, Clone, Default)]
pub struct EgressOptions {
    /// The Docker network the proxy reaches out through; `None`: the Runner's own bridge
    /// network `yy-egress-out-RUNNER`, created when first needed.
    pub network: Option<String>,
    /// DNS servers of the proxy container (Docker's `--dns`); empty: the engine's own.
    pub dns: Vec<IpAddr>,
}

struct Running {
    container: String,
    follower: JoinHandle<()>,
}

pub struct Egress {
    docker: Docker,
    runner_id: String,
    opts: EgressOptions,
    /// Held while the proxy is checked or created, so two starts never race.
    proxy: tokio::sync::Mutex<Option<Running>>,
    log: Arc<Mutex<Ring>>,
    /// Client address on its network -> computer id, for the log.
    clients: Arc<Mutex<HashMap<IpAddr, String>>>,
}

fn docker_err(e: bollard::errors::Error) -> ComputerError {
    ComputerError::from(e)
}

fn is_status(e: &bollard::errors::Error, code: u16) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == code)
}

impl Egress {
    pub fn new(docker: Docker, runner_id: &str, opts: EgressOptions) -> Egress {
        Egress {
            docker,
            runner_id: runner_id.to_string(),
            opts,
            proxy: tokio::sync::Mutex::new(None),
            log: Arc::new(Mutex::new(Ring::new(LOG_CAPACITY))),
            clients: Arc::default(),
        }
    }

    pub fn proxy_name(&self) -> String {
        format!("yy-egress-proxy-{}", self.runner_id)
    }

    fn out_network(&self) -> String {
        self.opts
            .network
            .clone()
            .unwrap_or_else(|| format!("yy-egress-out-{}", self.runner_id))
    }

    /// The internal network of one computer.
    pub fn computer_network(computer_id: &str) -> String {
        format!("yy-egress-net-{computer_id}")
    }

    fn labels(&self, role: &str, computer: Option<&str>) -> HashMap<String, String> {
        let mut l = HashMap::from([
            (labels::MANAGED.to_string(), "1".to_string()),
            (labels::RUNNER.to_string(), self.runner_id.clone()),
            (ROLE.to_string(), role.to_string()),
        ]);
        if let Some(c) = computer {
            l.insert(labels::COMPUTER.to_string(), c.to_string());
        }
        l
    }

    /// Gives a computer its own internal network with the proxy on it (starting the proxy
    /// from `image` first if needed). Returns what the computer's spec needs.
    pub async fn attach(
        &self,
        computer_id: &str,
        image: &str,
    ) -> Result<GuestNetwork, ComputerError> {
        let proxy = self.ensure_proxy(image).await?;
        let network = Self::computer_network(computer_id);
        // A network left by an earlier lease goes first: nothing of it is reused.
        self.remove_network(&network).await?;
        self.docker
            .create_network(NetworkCreateRequest {
                name: network.clone(),
                driver: Some("bridge".into()),
                internal: Some(true),
                enable_ipv6: Some(false),
                options: Some(HashMap::from([(
                    "com.docker.network.bridge.inhibit_ipv4".to_string(),
                    "true".to_string(),
                )])),
                labels: Some(self.labels(ROLE_NETWORK, Some(computer_id))),
                ..Default::default()
            })
            .await
            .map_err(docker_err)?;
        let joined = async {
            self.docker
                .connect_network(
                    &network,
                    NetworkConnectRequest {
                        container: proxy.clone(),
                        endpoint_config: None,
                    },
                )
                .await
                .map_err(docker_err)?;
            self.address_on(&proxy, &network).await
        }
        .await;
        match joined {
            Ok(ip) => Ok(GuestNetwork::Egress {
                network,
                proxy: SocketAddr::new(ip, PROXY_PORT),
            }),
            Err(e) => {
                let _ = self.remove_network(&network).await;
                Err(e)
            }
        }
    }

    /// Records which computer speaks from which address, for the log.
    pub async fn bind_client(
        &self,
        computer_id: &str,
        container: &str,
        network: &str,
    ) -> Result<(), ComputerError> {
        let ip = self.address_on(container, network).await?;
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|_, c| c != computer_id);
        clients.insert(ip, computer_id.to_string());
        Ok(())
    }

    /// Removes a computer's network (after its container is gone). Nothing to do for a
    /// computer without one.
    pub async fn detach(&self, computer_id: &str) -> Result<(), ComputerError> {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, c| c != computer_id);
        self.remove_network(&Self::computer_network(computer_id))
            .await
    }

    /// After a restart or a new connection generation: removes the proxy and every
    /// computer network of this Runner (their computers are gone already).
    pub async fn reconcile(&self) -> Result<usize, ComputerError> {
        {
            let mut proxy = self.proxy.lock().await;
            if let Some(r) = proxy.take() {
                r.follower.abort();
            }
            self.remove_container(&self.proxy_name()).await?;
        }
        let filters: HashMap<&str, Vec<String>> = HashMap::from([(
            "label",
            vec![
                format!("{}={}", labels::RUNNER, self.runner_id),
                format!("{ROLE}={ROLE_NETWORK}"),
            ],
        )]);
        let list = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::new().filters(&filters).build(),
            ))
            .await
            .map_err(docker_err)?;
        let mut removed = 0;
        for n in list {
            if let Some(name) = n.name {
                self.remove_network(&name).await?;
                removed += 1;
            }
        }
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(removed)
    }

    /// The answer to an `egress.log` command.
    pub async fn log(&self, q: LogQuery) -> Result<serde_json::Value, String> {
        let limit = q.limit.unwrap_or(100).clamp(1, LOG_CAPACITY as u32) as usize;
        let (decisions, capacity) = {
            let ring = self.log.lock().unwrap_or_else(|e| e.into_inner());
            (
                ring.recent(q.computer_id.as_deref(), limit),
                ring.capacity(),
            )
        };
        let proxy_running = self
            .proxy
            .lock()
            .await
            .as_ref()
            .is_some_and(|r| !r.follower.is_finished());
        serde_json::to_value(LogResult {
            decisions,
            capacity,
            proxy_running,
        })
        .map_err(|e| e.to_string())
    }

    async fn address_on(&self, container: &str, network: &str) -> Result<IpAddr, ComputerError> {
        let c = self
            .docker
            .inspect_container(container, None)
            .await
            .map_err(docker_err)?;
        c.network_settings
            .and_then(|s| s.networks)
            .and_then(|mut n| n.remove(network))
            .and_then(|e| e.ip_address)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| {
                ComputerError::Docker(format!(
                    "container {container} has no address on network {network}"
                ))
            })
    }

    /// The running proxy's container id, created from `image` and started if needed. A
    /// proxy that Docker restarted in place (it keeps its networks, so running computers
    /// keep their way out) is kept; only its log is followed again.
    async fn ensure_proxy(&self, image: &str) -> Result<String, ComputerError> {
        let mut proxy = self.proxy.lock().await;
        if let Some(r) = proxy.as_mut() {
            let running = self
                .docker
                .inspect_container(&r.container, None)
                .await
                .ok()
                .and_then(|c| c.state)
                .and_then(|s| s.running)
                .unwrap_or(false);
            if running {
                if r.follower.is_finished() {
                    let now = crate::timefmt::now_ms() / 1000;
                    r.follower = tokio::spawn(follow(
                        self.docker.clone(),
                        r.container.clone(),
                        now as i32,
                        self.log.clone(),
                        self.clients.clone(),
                    ));
                }
                return Ok(r.container.clone());
            }
            tracing::warn!(container = %r.container, "the egress proxy is not running; recreating it");
        }
        if let Some(r) = proxy.take() {
            r.follower.abort();
        }
        let name = self.proxy_name();
        self.remove_container(&name).await?;
        self.ensure_out_network().await?;
        let body = self.proxy_body(image)?;
        let opts = CreateContainerOptionsBuilder::new().name(&name).build();
        let id = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(docker_err)?
            .id;
        if let Err(e) = self.docker.start_container(&id, None).await {
            let _ = self.remove_container(&id).await;
            return Err(docker_err(e));
        }
        let follower = tokio::spawn(follow(
            self.docker.clone(),
            id.clone(),
            0,
            self.log.clone(),
            self.clients.clone(),
        ));
        tracing::info!(container = %id, network = %self.out_network(), "egress proxy started");
        *proxy = Some(Running {
            container: id.clone(),
            follower,
        });
        Ok(id)
    }

    fn proxy_body(&self, image: &str) -> Result<ContainerCreateBody, ComputerError> {
        let host = super::interface_addresses()
            .map_err(|e| ComputerError::Io(format!("cannot read this host's addresses: {e}")))?;
        let mut cmd: Vec<String> = [
            GUEST_BINARY,
            "egress",
            "serve",
            "--listen",
            &format!("0.0.0.0:{PROXY_PORT}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for ip in host {
            cmd.push("--deny-host".into());
            cmd.push(ip.to_string());
        }
        let mut labels = self.labels(ROLE_PROXY, None);
        labels.insert(labels::IMAGE.to_string(), image.to_string());
        Ok(ContainerCreateBody {
            image: Some(image.to_string()),
            user: Some(GUEST_USER.into()),
            cmd: Some(cmd),
            env: Some(vec!["YY_LOG=info".into()]),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(self.out_network()),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                readonly_rootfs: Some(true),
                privileged: Some(false),
                init: Some(true),
                memory: Some(PROXY_MEMORY),
                memory_swap: Some(PROXY_MEMORY),
                nano_cpus: Some(PROXY_NANO_CPUS),
                pids_limit: Some(PROXY_PIDS),
                // Restarted in place after a crash: same container, same networks.
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ON_FAILURE),
                    maximum_retry_count: Some(10),
                }),
                dns: Some(self.opts.dns.iter().map(|d| d.to_string()).collect())
                    .filter(|d: &Vec<String>| !d.is_empty()),
                // The decision log on the engine is bounded too.
                log_config: Some(HostConfigLogConfig {
                    typ: Some("json-file".into()),
                    config: Some(HashMap::from([
                        ("max-size".to_string(), "10m".to_string()),
                        ("max-file".to_string(), "2".to_string()),
                    ])),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    async fn ensure_out_network(&self) -> Result<(), ComputerError> {
        let name = self.out_network();
        match self.docker.inspect_network(&name, None).await {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(docker_err(e)),
        }
        if self.opts.network.is_some() {
            return Err(ComputerError::NotFound(format!(
                "the egress network {name} does not exist: create it, or leave out --egress-network"
            )));
        }
        let created = self
            .docker
            .create_network(NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                options: Some(HashMap::from([(
                    "com.docker.network.bridge.enable_icc".to_string(),
                    "false".to_string(),
                )])),
                labels: Some(self.labels("egress-out", None)),
                ..Default::default()
            })
            .await;
        match created {
            Ok(_) => Ok(()),
            // Created meanwhile by an earlier run: fine.
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    async fn remove_container(&self, name: &str) -> Result<(), ComputerError> {
        let opts = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(name, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Disconnects whatever is still on the network (the proxy), then removes it.
    async fn remove_network(&self, name: &str) -> Result<(), ComputerError> {
        let inspect = match self.docker.inspect_network(name, None).await {
            Ok(n) => n,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(docker_err(e)),
        };
        for container in inspect.containers.unwrap_or_default().into_keys() {
            let r = self
                .docker
                .disconnect_network(
                    name,
                    NetworkDisconnectRequest {
                        container,
                        force: Some(true),
                    },
                )
                .await;
            if let Err(e) = r
                && !is_status(&e, 404)
            {
                return Err(docker_err(e));
            }
        }
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }
}

/// Follows the proxy's output: stdout lines are decisions, stderr its own log. When Docker
/// restarts the proxy in place, following resumes from then; it ends when the proxy is gone.
async fn follow(
    docker: Docker,
    container: String,
    mut since: i32,
    log: Arc<Mutex<Ring>>,
    clients: Arc<Mutex<HashMap<IpAddr, String>>>,
) {
    loop {
        follow_once(&docker, &container, since, &log, &clients).await;
        since = (crate::timefmt::now_ms() / 1000) as i32;
        if !wait_restarted(&docker, &container).await {
            tracing::info!(container = %container, "the egress proxy stopped; its log ended");
            return;
        }
        tracing::warn!(container = %container, "the egress proxy was restarted");
    }
}

/// True once the container runs again (Docker restarted it, with its growing back-off);
/// false when it is gone or still down after 30 s.
async fn wait_restarted(docker: &Docker, container: &str) -> bool {
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        match docker.inspect_container(container, None).await {
            Err(_) => return false,
            Ok(c) if c.state.as_ref().and_then(|s| s.running) == Some(true) => return true,
            Ok(_) => {}
        }
    }
    false
}

async fn follow_once(
    docker: &Docker,
    container: &str,
    since: i32,
    log: &Mutex<Ring>,
    clients: &Mutex<HashMap<IpAddr, String>>,
) {
    let opts = LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .since(since)
        .build();
    let mut stream = docker.logs(container, Some(opts));
    let mut pending: Vec<u8> = Vec::new();
    while let Some(item) = stream.next().await {
        use bollard::container::LogOutput as L;
        match item {
            Ok(L::StdOut { message }) | Ok(L::Console { message }) => {
                pending.extend_from_slice(&message);
                while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=i).collect();
                    record(&line, log, clients);
                }
                if pending.len() > MAX_LINE {
                    pending.clear();
                }
            }
            Ok(L::StdErr { message }) => {
                let text = String::from_utf8_lossy(&message);
                tracing::debug!(proxy = %super::printable(text.trim_end(), 1024), "egress proxy");
            }
            Ok(L::StdIn { .. }) => {}
            Err(e) => {
                tracing::warn!(error = %e, "lost the egress proxy's log");
                return;
            }
        }
    }
}

fn record(line: &[u8], log: &Mutex<Ring>, clients: &Mutex<HashMap<IpAddr, String>>) {
    let Ok(mut d) = serde_json::from_slice::<Decision>(line) else {
        return;
    };
    d.computer = d.client.parse::<IpAddr>().ok().and_then(|ip| {
        clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ip)
            .cloned()
    });
    tracing::info!(
        computer = d.computer.as_deref().unwrap_or("-"),
        host = %d.host,
        port = d.port,
        address = d.address.as_deref().unwrap_or("-"),
        verdict = %d.verdict,
        "egress decision"
    );
    log.lock().unwrap_or_else(|e| e.into_inner()).push(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_lines_are_attributed_to_their_computer() {
        let log = Mutex::new(Ring::new(10));
        let clients = Mutex::new(HashMap::from([(
            "172.19.0.2".parse::<IpAddr>().unwrap(),
            "comp-a".to_string(),
        )]));
        let line = br#"{"at_ms":1,"client":"172.19.0.2","method":"CONNECT","host":"example.com","port":443,"address":"93.184.216.34","verdict":"public","allowed":true,"reason":"ok"}"#;
        record(line, &log, &clients);
        record(b"not json\n", &log, &clients);
        let other = br#"{"at_ms":2,"client":"172.20.0.2","method":"GET","host":"x.test","port":80,"address":null,"verdict":"private","allowed":false,"reason":"no"}"#;
        record(other, &log, &clients);
        let ring = log.lock().unwrap();
        let all = ring.recent(None, 10);
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].computer.as_deref(), Some("comp-a"));
        assert_eq!(all[0].computer, None);
        assert_eq!(ring.recent(Some("comp-a"), 10).len(), 1);
    }
}
