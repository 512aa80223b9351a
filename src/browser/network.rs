//! The managed browser's only way out: yy's egress proxy ([`crate::egress::proxy`]) on a
//! loopback port of its own, with the same classification as computers' (public
//! addresses on 80 and 443; loopback, private ranges and the host refused). Between turns
//! it is paused: open connections are cut and every new request is refused.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::egress::Decision;
use crate::egress::proxy::{Proxy, ProxyConfig, Resolver};

/// Decisions kept for reading back ([`Network::decisions`]).
const KEPT_DECISIONS: usize = 256;

pub struct Network {
    proxy: Arc<Proxy>,
    url: String,
    decisions: Arc<Mutex<VecDeque<Decision>>>,
    stop: CancellationToken,
}

impl Drop for Network {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Network {
    /// Starts the proxy on 127.0.0.1 on a free port.
    pub async fn start(cfg: ProxyConfig, resolver: Arc<dyn Resolver>) -> std::io::Result<Network> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let decisions: Arc<Mutex<VecDeque<Decision>>> = Arc::default();
        let kept = decisions.clone();
        let sink = Arc::new(move |d: Decision| {
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() == KEPT_DECISIONS {
                kept.pop_front();
            }
            kept.push_back(d);
        });
        let proxy = Proxy::new(cfg, resolver, sink);
        let stop = CancellationToken::new();
        tokio::spawn(proxy.clone().serve(listener, stop.clone()));
        Ok(Network {
            proxy,
            url,
            decisions,
            stop,
        })
    }

    /// `http://127.0.0.1:PORT`, for Chromium's `--proxy-server`.
    pub fn proxy_url(&self) -> &str {
        &self.url
    }

    /// Cuts what is open and refuses everything until [`Network::resume`].
    pub fn pause(&self) {
        self.proxy.set_paused(true);
    }

    pub fn resume(&self) {
        self.proxy.set_paused(false);
    }

    /// The latest decisions, oldest first.
    pub fn decisions(&self) -> Vec<Decision> {
        let kept = self.decisions.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().cloned().collect()
    }
}
