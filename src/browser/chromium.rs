//! Starting Debian's Chromium: headless, its profile in a directory of the Runner (0700),
//! the DevTools protocol on two pipes that become its fds 3 and 4, an empty environment,
//! and killed with the Runner.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::net::unix::pipe;

use super::BrowserError;
use super::cdp::Cdp;

/// How Chromium is started.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The `chromium` executable.
    pub exe: PathBuf,
    /// `--proxy-server`: every request, loopback included, goes through it.
    pub proxy: Option<String>,
    /// Chromium's own sandbox. Chromium refuses it as root; a Runner running as root has to
    /// turn it off (`--no-sandbox`).
    pub sandbox: bool,
    /// The window (and screenshot) size in CSS pixels.
    pub width: u32,
    pub height: u32,
    /// More Chromium flags (tests keep Chromium on loopback with them).
    pub extra_args: Vec<String>,
}

impl LaunchOptions {
    pub fn new(exe: PathBuf) -> LaunchOptions {
        LaunchOptions {
            exe,
            proxy: None,
            // SAFETY: geteuid(2) has no arguments and cannot fail.
            sandbox: unsafe { libc::geteuid() } != 0,
            width: 1280,
            height: 800,
            extra_args: Vec::new(),
        }
    }

    fn args(&self, profile: &Path) -> Vec<String> {
        let mut args: Vec<String> = [
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-domain-reliability",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-pings",
            // WebRTC may not send UDP around the proxy.
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        ]
        .map(String::from)
        .to_vec();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={},{}", self.width, self.height));
        if let Some(proxy) = &self.proxy {
            args.push(format!("--proxy-server={proxy}"));
            // Loopback too: Chromium sends it around a proxy unless told otherwise.
            args.push("--proxy-bypass-list=<-loopback>".into());
            // The proxy resolves names; Chromium itself resolves none but the proxy's own
            // address (no prefetch, no DNS over HTTPS around the proxy).
            args.push("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1".into());
        }
        if !self.sandbox {
            args.push("--no-sandbox".into());
        }
        args.extend(self.extra_args.iter().cloned());
        args.push("about:blank".into());
        args
    }
}

/// The Chromium process; killed when dropped.
pub struct Process {
    child: tokio::process::Child,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

impl Process {
    /// Kills the whole group: Chromium's renderers and helpers go with it, and nothing is
    /// left writing into the profile.
    pub fn kill(&self) {
        if let Some(pid) = self.child.id() {
            let _ = crate::sys::kill(-(pid as i32), libc::SIGKILL);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        let _ = self.child.start_kill();
    }
}

fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just made by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts Chromium on `profile` and connects to it.
pub(super) fn launch(opts: &LaunchOptions, profile: &Path) -> Result<(Process, Cdp), BrowserError> {
    let profile_error = |reason: String| BrowserError::Profile {
        dir: profile.display().to_string(),
        reason,
    };
    crate::fsutil::create_private_dir(profile).map_err(|e| profile_error(e.to_string()))?;
    let start_error = |reason: String| BrowserError::Start {
        exe: opts.exe.display().to_string(),
        reason,
    };
    let (browser_reads, we_write) = pipe_pair().map_err(|e| start_error(e.to_string()))?;
    let (we_read, browser_writes) = pipe_pair().map_err(|e| start_error(e.to_string()))?;
    let mut cmd = tokio::process::Command::new(&opts.exe);
    cmd.args(opts.args(profile))
        .env_clear()
        .env("HOME", profile)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(profile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so that its helpers can be killed with it.
        .process_group(0)
        .kill_on_drop(true);
    crate::sys::die_with_parent(cmd.as_std_mut(), libc::SIGKILL);
    let (r, w) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (fcntl, dup2) on fds it inherited. Copying both to fds of 10
    // and up first means dup2 never meets its own target (dup2 of an fd onto itself would
    // keep its close-on-exec flag).
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::fcntl(r, libc::F_DUPFD_CLOEXEC, 10);
            let w = libc::fcntl(w, libc::F_DUPFD_CLOEXEC, 10);
            if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| start_error(e.to_string()))?;
    // Only the browser holds its ends now: it sees the end of input when we go.
    drop((browser_reads, browser_writes));
    let to_browser =
        pipe::Sender::from_owned_fd(we_write).map_err(|e| start_error(e.to_string()))?;
    let from_browser =
        pipe::Receiver::from_owned_fd(we_read).map_err(|e| start_error(e.to_string()))?;
    Ok((Process { child }, Cdp::new(to_browser, from_browser)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_goes_through_the_proxy_and_the_debugger_only_through_the_pipe() {
        let mut o = LaunchOptions::new("/usr/bin/chromium".into());
        o.proxy = Some("http://127.0.0.1:3128".into());
        o.sandbox = true;
        let args = o.args(Path::new("/data/browser/profiles/a"));
        assert!(args.contains(&"--proxy-server=http://127.0.0.1:3128".to_string()));
        assert!(args.contains(&"--proxy-bypass-list=<-loopback>".to_string()));
        assert!(
            args.contains(&"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1".to_string())
        );
        assert!(args.contains(&"--remote-debugging-pipe".to_string()));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--remote-debugging-port"))
        );
        assert!(!args.contains(&"--no-sandbox".to_string()));
        assert!(args.contains(&"--user-data-dir=/data/browser/profiles/a".to_string()));
        o.sandbox = false;
        assert!(
            o.args(Path::new("/p"))
                .contains(&"--no-sandbox".to_string())
        );
    }
}
