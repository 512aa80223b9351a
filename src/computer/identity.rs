//! The guest agent's identity inside a computer (`yy guest serve --user UID:GID`): the
//! agent runs apart from the commands it starts, out of their reach, while it works on the
//! workspace as their user. docs/computer-notes.md, "The guest agent's identity", says why
//! each step is there and what was measured.

/// The user and group every command runs as, once [`take_identity`] set them.
static RUN_AS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();

fn os_err(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Makes the guest agent a process that `uid:gid` cannot reach, while it works on the
/// workspace as them and runs its commands as them. Started as root (the Runner's exec,
/// with only the capabilities SETUID, SETGID and SETPCAP), it empties the bounding set
/// (nothing it starts can ever gain a capability), takes `gid` as its only supplementary
/// group, and sets real and saved ids to the agent's own ([`GUEST_AGENT_UID`]) and the
/// effective ones to `uid:gid`. No id is 0 then, so the kernel drops every capability;
/// the process is not dumpable, so its `/proc` entries (fd, mem, environ, ...) belong to
/// root and need ptrace access, which a process of `uid` lacks (its real and saved ids
/// differ); a signal from `uid` is refused for the same reason. Children set all their ids
/// to `uid:gid` before they run anything (allowed: `uid` is the effective id).
///
/// Must run before any other thread exists: capabilities and the bounding set belong to
/// the calling thread only.
///
/// [`GUEST_AGENT_UID`]: super::GUEST_AGENT_UID
pub fn take_identity(uid: u32, gid: u32) -> std::io::Result<()> {
    use super::GUEST_AGENT_UID as AGENT;
    // SAFETY: plain system calls on this process's credentials; no memory is shared.
    unsafe {
        if libc::geteuid() != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "--user needs the guest agent to start as root (the Runner's exec does)",
            ));
        }
        if uid == 0 || uid == AGENT || gid == 0 || gid == AGENT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("--user {uid}:{gid} must not be root nor the agent's own {AGENT}"),
            ));
        }
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINVAL) {
                    break; // past the kernel's last capability
                }
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("emptying the capability bounding set (needs SETPCAP): {e}"),
                ));
            }
        }
        let groups = [gid as libc::gid_t];
        if libc::setgroups(1, groups.as_ptr()) != 0 {
            return Err(os_err("setgroups"));
        }
        if libc::setresgid(AGENT, gid, AGENT) != 0 {
            return Err(os_err("setresgid"));
        }
        if libc::setresuid(AGENT, uid, AGENT) != 0 {
            return Err(os_err("setresuid"));
        }
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            return Err(os_err("PR_SET_DUMPABLE"));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(os_err("PR_SET_NO_NEW_PRIVS"));
        }
    }
    // Check what the kernel says, not what was asked.
    let status = std::fs::read_to_string("/proc/self/status")?;
    let field = |key: &str| status_field(&status, key);
    let want_uid = format!("{AGENT} {uid} {AGENT} {uid}");
    let zero = "0000000000000000";
    if field("Uid:") != want_uid
        || ["CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
            .iter()
            .any(|k| field(k) != zero)
    {
        return Err(std::io::Error::other(format!(
            "the guest agent's identity did not take: Uid {}, CapEff {}, CapBnd {}",
            field("Uid:"),
            field("CapEff:"),
            field("CapBnd:")
        )));
    }
    let _ = RUN_AS.set((uid, gid));
    Ok(())
}

/// Makes `cmd` run as the user of [`take_identity`] (all its ids), when the agent took one.
pub(super) fn as_user(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let Some(&(uid, gid)) = RUN_AS.get() else {
        return;
    };
    // SAFETY: only raw system calls between fork and exec (async-signal-safe; no
    // allocation, no lock).
    unsafe {
        cmd.pre_exec(move || {
            if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether the agent took an identity apart from its commands.
pub fn runs_apart() -> bool {
    RUN_AS.get().is_some()
}

/// Leaves this process with no capability it could use or pass on, for a plain exec of
/// the Runner (diagnostics, the takeover shell) that starts as the guest user: Docker
/// gives such a process none, but Podman hands a non-root user the container's added
/// capabilities (ambient, so they survive `execve`). Empties the bounding set where it can
/// (with SETPCAP), then the ambient, inheritable, permitted and effective sets, and sets
/// `no_new_privs`; checks what the kernel says. Call it with one thread only, then exec.
pub fn drop_capabilities() -> std::io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: system calls on this thread's own credentials; `capset` reads the two
    // structs, which outlive the call and have the kernel's layout (repr(C)).
    unsafe {
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                // EINVAL: past the kernel's last one; EPERM: no SETPCAP, and then no
                // capability to keep either (see below).
                break;
            }
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return Err(os_err("clearing the ambient capabilities"));
        }
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
            return Err(os_err("capset"));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(os_err("PR_SET_NO_NEW_PRIVS"));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kept: Vec<&str> = ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"]
        .into_iter()
        .filter(|k| status_field(&status, k) != "0000000000000000")
        .collect();
    if !kept.is_empty() {
        return Err(std::io::Error::other(format!(
            "capabilities kept after dropping them: {}",
            kept.join(" ")
        )));
    }
    Ok(())
}

/// One field of `/proc/self/status`, its words joined by one space.
fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
