//! A network namespace of the test's own: a veth pair with both ends inside it, so that
//! servers listen on an address that is not loopback while no packet ever leaves the
//! namespace. Removed when dropped.

use std::process::Command;

pub struct Netns {
    pub name: String,
}

/// The address of the namespace's first veth end, where servers listen.
pub const SERVER_IP: &str = "10.77.0.1";
/// The other end's address.
pub const PEER_IP: &str = "10.77.0.2";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// A new namespace; None (a skip) when `ip netns` cannot be used here, which fails
    /// the test under CI instead.
    pub fn create() -> Option<Netns> {
        let name = format!("yy-t{}-{}", std::process::id(), super::rand_suffix());
        let made = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !made {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot create a network namespace (`ip netns add`; run as root with iproute2)"
            );
            eprintln!("skipping: cannot create a network namespace");
            return None;
        }
        let ns = Netns { name };
        let n = ns.name.as_str();
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&[
            "-n", n, "link", "add", "yya", "type", "veth", "peer", "name", "yyb",
        ]);
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            "yya",
        ]);
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{PEER_IP}/24"),
            "dev",
            "yyb",
        ]);
        ip(&["-n", n, "link", "set", "yya", "up"]);
        ip(&["-n", n, "link", "set", "yyb", "up"]);
        Some(ns)
    }

    /// `program ARGS` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}
