//! Waits on events the system shows, for tests that check that something did *not*
//! happen: instead of a fixed pause, each waits until the system provably had its chance
//! (the scheduler ran whole passes, the turn reported that it waits, the process that
//! could still act is gone, the server read what was sent).

use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use super::{Env, Server, http, wait_for};

impl Env {
    /// One series of the control plane's `/metrics` (read with this sandbox's admin token):
    /// `name` or `name{labels}` exactly as exposed; None while it does not exist yet.
    pub fn metric(&self, server: &Server, series: &str) -> Option<f64> {
        let auth = format!("Bearer {}", self.stored_token());
        let (status, body) = http(
            &server.addr(),
            "GET",
            "/metrics",
            &[("Authorization", &auth)],
            "",
        )
        .ok()?;
        assert_eq!(status, 200, "/metrics: {body}");
        body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// Waits until the team scheduler completed `n` whole passes that began after this
    /// call (`yy_scheduler_passes_total`; a pass runs on every change and at least once a
    /// second): whatever those passes would have done wrong is done by then.
    #[track_caller]
    pub fn wait_scheduler_passes(&self, server: &Server, n: u64) {
        let passes = || {
            self.metric(server, "yy_scheduler_passes_total")
                .unwrap_or(0.0)
        };
        // The pass running while the count is read may have started before: one more.
        let target = passes() + n as f64 + 1.0;
        let what = format!("{n} whole team scheduler passes");
        wait_for(Duration::from_secs(30), &what, || {
            (passes() >= target).then_some(())
        });
    }

    /// Waits until `server` holds `n` Runner long-polls open (`yy_longpolls`).
    #[track_caller]
    pub fn wait_longpolls(&self, server: &Server, n: u64) {
        let what = format!("{n} long-polls parked on the server");
        wait_for(Duration::from_secs(20), &what, || {
            (self.metric(server, "yy_longpolls") == Some(n as f64)).then_some(())
        });
    }

    /// Every stored event of `session` (`GET /api/v1/sessions/{id}/events`), oldest first:
    /// `{seq, turn_id, type, payload, at}`.
    pub fn session_events(&self, server: &Server, session: &str) -> Vec<Value> {
        let auth = format!("Bearer {}", self.stored_token());
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let path = format!("/api/v1/sessions/{session}/events?after={after}&wait_ms=0");
            let (status, body) = http(
                &server.addr(),
                "GET",
                &path,
                &[("Authorization", &auth)],
                "",
            )
            .unwrap();
            assert_eq!(status, 200, "{path}: {body}");
            let page: Value = serde_json::from_str(&body).unwrap();
            let events = page["events"].as_array().cloned().unwrap_or_default();
            let Some(last) = events.last() else {
                return all;
            };
            after = last["seq"].as_i64().unwrap();
            all.extend(events);
        }
    }

    /// Waits for an event of `session` that `hit` picks; returns it.
    #[track_caller]
    pub fn wait_event(
        &self,
        server: &Server,
        session: &str,
        what: &str,
        hit: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for(Duration::from_secs(60), what, || {
            self.session_events(server, session).into_iter().find(&hit)
        })
    }

    /// A paused model waits at its pause gate until a `computer.resume` command reaches its
    /// Runner (nothing else opens the gate, src/runner/pauses.rs): asserts that the pause
    /// was queued to `runner` and no resume was, so the model cannot have gone on.
    #[track_caller]
    pub fn assert_no_resume(&self, runner: &str) {
        let list = self.json(&["runner", "commands", runner, "--limit", "1000"]);
        let kinds: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["kind"].as_str())
            .collect();
        assert!(kinds.contains(&"computer.pause"), "{list:#}");
        assert!(!kinds.contains(&"computer.resume"), "{list:#}");
    }

    /// The newest session of `agent`, once there is one.
    #[track_caller]
    pub fn wait_session_of(&self, agent: &str) -> String {
        let what = format!("a session of agent {agent}");
        wait_for(Duration::from_secs(60), &what, || {
            let list = self.json(&["session", "list", "--agent", agent]);
            Some(list.as_array()?.first()?["id"].as_str()?.to_string())
        })
    }
}

/// A turn event saying the model waits at a tool call because an operator has control
/// of its computer (the pause gate held the call).
pub fn is_paused_event(e: &Value) -> bool {
    e["type"] == "waiting"
        && e["payload"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("paused: an operator has control"))
}

/// Processes on this host whose command line contains `needle` (zombies have none).
pub fn pids_with(needle: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then_some(pid)
        })
        .filter(|pid| *pid != std::process::id() as i32)
        .collect()
}

/// Waits until the peer of `stream` (a server in this network namespace) has read every
/// byte sent on it so far: its socket's receive queue in /proc/net/tcp is empty.
#[track_caller]
pub fn wait_read_by_peer(stream: &TcpStream, what: &str) {
    let (ours, theirs) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
    // /proc/net/tcp writes an IPv4 address as its 32-bit value in host order, in hex.
    let hex = |a: std::net::SocketAddr| match a {
        std::net::SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        std::net::SocketAddr::V6(_) => panic!("wait_read_by_peer speaks IPv4 only"),
    };
    let (local, remote) = (hex(theirs), hex(ours));
    wait_for(Duration::from_secs(20), what, || {
        let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
        let line = table.lines().find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 4 && f[1] == local && f[2] == remote
        })?;
        let queues = line.split_whitespace().nth(4)?;
        let rx = queues.split(':').nth(1)?;
        (u64::from_str_radix(rx, 16).ok()? == 0).then_some(())
    });
}
