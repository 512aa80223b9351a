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

/// A host-side veth into a namespace, and the route through it; see
/// [`Netns::reach_from_host`]. The namespace's removal takes both away.
pub struct HostLink {
    pub host_if: String,
}

impl Netns {
    /// Gives the namespace the address `public` and routes it, and it alone, from the host
    /// into the namespace through a veth pair of the test's own: the host's processes reach
    /// a server there as a public address, while every packet stays on this machine.
    pub fn reach_from_host(&self, public: &str) -> HostLink {
        // Names of at most 15 characters, unique per process; a /30 per process too.
        let host_if = format!("yyh{}", std::process::id() % 1_000_000);
        let net = std::process::id() % 250;
        let (host_ip, ns_ip) = (format!("10.79.{net}.1"), format!("10.79.{net}.2"));
        let n = self.name.as_str();
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", "yyp", "netns", n,
        ]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", n, "addr", "add", &format!("{ns_ip}/30"), "dev", "yyp"]);
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{public}/32"),
            "dev",
            "yyp",
        ]);
        ip(&["-n", n, "link", "set", "yyp", "up"]);
        ip(&[
            "route",
            "add",
            &format!("{public}/32"),
            "via",
            &ns_ip,
            "dev",
            &host_if,
        ]);
        HostLink { host_if }
    }

    /// Runs `f` on a thread of its own that has entered the namespace: sockets it opens
    /// live there.
    pub fn thread<F: FnOnce() + Send + 'static>(&self, f: F) {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let ns = std::fs::File::open(&path).expect("open the namespace");
            // SAFETY: setns(2) on an open namespace file; it changes this thread only.
            let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f();
        });
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}
