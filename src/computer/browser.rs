//! The desktop's browser, driven by the guest agent: Firefox ESR with its profile in the
//! workspace (`.yy/firefox`), so the profile survives browser kills and computer
//! recreates.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::confine::OpError;
use super::protocol::codes;
use super::screen::{ensure_display, io_err, spawn_detached};

/// The browser's profile, relative to the workspace root (so it persists with it).
pub const BROWSER_PROFILE: &str = ".yy/firefox";
const BROWSER: &str = "/usr/bin/firefox-esr";

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BrowserAction {
    /// Start the browser on the display (if not running) with the workspace profile.
    Start,
    /// Kill the browser (SIGKILL: what a crash looks like to the profile).
    Kill,
    Status,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrowserResult {
    pub running: bool,
    pub pids: Vec<u32>,
    /// The profile directory in the guest.
    pub profile: String,
    /// The profile's creation time (ms, from its times.json); absent before the browser
    /// first wrote it. A profile that survived keeps its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_created_ms: Option<u64>,
}

/// Processes whose command line runs the browser with `profile`.
fn browser_pids(profile: &Path) -> Vec<u32> {
    let want = profile.to_string_lossy().into_owned();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let is_browser = args
            .first()
            .is_some_and(|a| a.ends_with(b"firefox-esr") || a.ends_with(b"firefox"));
        if is_browser && args.contains(&want.as_bytes()) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

fn profile_created(profile: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(profile.join("times.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("created").and_then(|c| c.as_u64())
}

/// Preferences the guest keeps in the profile's user.js: few processes (the computer has
/// a pids limit), no crash-restore page after a kill, nothing phoning home.
const USER_JS: &str = r#"// Written by the yy guest agent.
user_pref("dom.ipc.processCount", 2);
user_pref("browser.sessionstore.resume_from_crash", false);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("app.update.enabled", false);
"#;

/// Starts, kills or reports the browser whose profile is `<workspace>/.yy/firefox`.
pub fn browser(workspace: &Path, action: BrowserAction) -> Result<BrowserResult, OpError> {
    let profile = workspace.join(BROWSER_PROFILE);
    let report = |profile: &PathBuf| {
        let pids = browser_pids(profile);
        BrowserResult {
            running: !pids.is_empty(),
            pids,
            profile: profile.display().to_string(),
            profile_created_ms: profile_created(profile),
        }
    };
    match action {
        BrowserAction::Status => Ok(report(&profile)),
        BrowserAction::Kill => {
            for pid in browser_pids(&profile) {
                // SAFETY: kill(2) on a pid read from /proc; no memory involved.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while !browser_pids(&profile).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(report(&profile))
        }
        BrowserAction::Start => {
            if !Path::new(BROWSER).exists() {
                return Err(OpError::new(
                    codes::NOT_FOUND,
                    "this computer has no browser (its image is not a desktop image)",
                ));
            }
            ensure_display(workspace)?;
            if browser_pids(&profile).is_empty() {
                std::fs::create_dir_all(&profile).map_err(|e| io_err("the browser profile", e))?;
                // A browser that was killed leaves its lock behind; none runs now.
                let _ = std::fs::remove_file(profile.join("lock"));
                let _ = std::fs::remove_file(profile.join(".parentlock"));
                std::fs::File::create(profile.join("user.js"))
                    .and_then(|mut f| f.write_all(USER_JS.as_bytes()))
                    .map_err(|e| io_err("the browser profile", e))?;
                let p = profile.to_string_lossy().into_owned();
                spawn_detached(
                    BROWSER,
                    &["--no-remote", "--profile", &p, "about:blank"],
                    "yy-browser.log",
                    workspace,
                )?;
            }
            // Started means: running, and its profile written.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let r = report(&profile);
                if r.running && r.profile_created_ms.is_some() {
                    return Ok(r);
                }
                if Instant::now() > deadline {
                    let log = std::fs::read_to_string(std::env::temp_dir().join("yy-browser.log"))
                        .unwrap_or_default();
                    let tail: String = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                    return Err(OpError::new(
                        codes::IO,
                        format!(
                            "the browser did not start within 60 s (running: {}); it said: {tail}",
                            r.running
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}
