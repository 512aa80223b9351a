//! `yy image verify`: a throw-away computer with the production hardening, checked from the
//! outside (inspect) and from the inside (plain execs as uid 1000, and the guest agent).

use std::path::PathBuf;

use super::docker::{Created, Provider, RawExec};
use super::protocol::{ExecParams, PROTOCOL};
use super::{
    ComputerError, ComputerSpec, GUEST_AGENT_UID, GUEST_UID, Limits, PACKAGE_LOCK_PATH, labels,
    package_lock, validate_image_id,
};

/// Where throw-away workspaces of verification runs live.
pub const VERIFY_DIR: &str = "/var/tmp/yy/verify";
const GUEST_CWD: &str = "/workspace";

#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub want: String,
    pub got: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub image: String,
    pub ok: bool,
    pub checks: Vec<Check>,
}

/// The report being written, telling each check as it lands.
struct Ladder<'a> {
    report: Report,
    notify: &'a (dyn Fn(&Check) + Sync),
}

impl Ladder<'_> {
    fn add(&mut self, name: &str, want: impl Into<String>, got: impl Into<String>) {
        let (want, got) = (want.into(), got.into());
        let check = Check {
            name: name.into(),
            ok: want == got,
            want,
            got,
        };
        (self.notify)(&check);
        self.report.checks.push(check);
    }

    fn failed(&self) -> bool {
        self.report.checks.iter().any(|c| !c.ok)
    }
}

fn one_line(s: &str, max: usize) -> String {
    let s = s.trim().replace('\n', " ");
    if s.len() <= max {
        return s;
    }
    format!("{}...", crate::output::cut_bytes(&s, max))
}

/// Names of the network interfaces in a `/proc/net/dev` text.
pub fn interfaces(proc_net_dev: &str) -> Vec<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Run as uid 1000: how far the guest agent can be reached (signal, /proc fd and mem).
const AGENT_REACH: &str = r#"pid=$(pgrep -of '^/usr/local/bin/yy guest serve') || { echo 'no guest agent'; exit 0; }
u=$(awk '/^Uid:/ {print $2}' /proc/$pid/status)
r=''
kill -0 "$pid" 2>/dev/null && r="$r signalled"
( : >"/proc/$pid/fd/1" ) 2>/dev/null && r="$r stdout-writable"
( : <"/proc/$pid/mem" ) 2>/dev/null && r="$r mem-readable"
ls "/proc/$pid/fd" >/dev/null 2>&1 && r="$r fds-listed"
echo "uid $u,${r:- unreachable}""#;

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "missing".into())
}

/// Starts a throw-away computer from `image` and checks it. Errors only when the check
/// itself cannot run (no engine, no such image); failed checks are in the report.
pub async fn verify_image(provider: &Provider, image: &str) -> Result<Report, ComputerError> {
    verify_image_with(provider, image, &|_| {}).await
}

/// [`verify_image`], telling each check to `notify` as it lands. Desktop images go on up
/// the desktop ladder (display, screenshot, browser, profile persistence), which stops at
/// the first failed step.
pub async fn verify_image_with(
    provider: &Provider,
    image: &str,
    notify: &(dyn Fn(&Check) + Sync),
) -> Result<Report, ComputerError> {
    validate_image_id(image)?;
    let image_labels = super::image::image_labels(provider, image).await?;
    let image_version = image_labels
        .get(labels::VERSION)
        .cloned()
        .unwrap_or_else(|| "missing".into());
    let desktop = image_labels
        .get(labels::RECIPE_NAME)
        .is_some_and(|n| n == "desktop");
    let run = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let workspace = PathBuf::from(VERIFY_DIR).join(&run);
    let spec = ComputerSpec {
        owner_key: format!("verify/{run}"),
        runner_id: "verify".into(),
        computer_id: format!("verify-{run}"),
        agent_id: "verify".into(),
        account_id: "verify".into(),
        image_id: image.into(),
        generation: 0,
        workspace_host_dir: workspace.clone(),
        guest_cwd: GUEST_CWD.into(),
        limits: if desktop {
            Limits::desktop()
        } else {
            Limits::default()
        },
        network: Default::default(),
    };
    let mut report = Ladder {
        report: Report {
            image: image.into(),
            ok: false,
            checks: Vec::new(),
        },
        notify,
    };
    let created = provider.create(&spec).await;
    let result = match created {
        Ok(c) => {
            let recorded = image_labels.get(labels::PACKAGES).map(String::as_str);
            let mut r = checks(provider, &c, &spec, &image_version, recorded, &mut report).await;
            if r.is_ok() && desktop && !report.failed() {
                r = super::desktop_verify::ladder(provider, &c.id, &spec, &mut |n, w, g| {
                    report.add(n, w, g);
                    !report.failed()
                })
                .await;
            }
            let _ = provider.remove(&spec.name()).await;
            let _ = provider.remove(&c.id).await;
            r
        }
        Err(ComputerError::Drifted { drifts, .. }) => {
            let got = drifts
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("; ");
            report.add("hardening (inspect)", "as requested", one_line(&got, 200));
            Ok(())
        }
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&workspace);
    result?;
    let mut report = report.report;
    report.ok = !report.checks.is_empty() && report.checks.iter().all(|c| c.ok);
    super::verify_record::keep(provider.engine(), &report);
    Ok(report)
}

async fn checks(
    provider: &Provider,
    created: &Created,
    spec: &ComputerSpec,
    image_version: &str,
    recorded: Option<&str>,
    report: &mut Ladder<'_>,
) -> Result<(), ComputerError> {
    let id = created.id.as_str();
    let drifts = provider.verify(id, spec).await?;
    let got = if drifts.is_empty() {
        "as requested".to_string()
    } else {
        drifts
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    report.add("hardening (inspect)", "as requested", one_line(&got, 200));
    let want_agent = format!("yy {} protocol {PROTOCOL}", crate::VERSION);
    // Started as a computer starts: its first session from its main process when that is
    // the guest agent.
    let session = provider.start_with_guest(created, &spec.guest_cwd).await;
    let agent = match &session {
        Ok(session) => {
            let hello = session.hello().clone();
            let got = match session.version().await {
                Ok(v) => format!("yy {} protocol {}", v.yy_version, v.protocol),
                Err(e) => e.to_string(),
            };
            if hello.uid != GUEST_UID {
                format!("{got} (but running commands as uid {})", hello.uid)
            } else {
                got
            }
        }
        Err(e) => e.to_string(),
    };
    report.add("guest agent", want_agent, one_line(&agent, 120));
    report.add("image label yy.version", crate::VERSION, image_version);
    let (want, got) = packages_as_recorded(provider, id, recorded).await;
    report.add("packages as recorded (yy.packages)", want, got);

    let sh = |script: &'static str| async move {
        provider.exec_raw(id, &["/bin/sh", "-c", script]).await
    };
    let text = |r: Result<RawExec, ComputerError>| match r {
        Ok(r) if r.exit_code == Some(0) => one_line(&r.stdout, 120),
        Ok(r) => one_line(&format!("exit {:?}: {}", r.exit_code, r.stderr), 120),
        Err(e) => one_line(&e.to_string(), 120),
    };
    // The agent runs apart: uid 1000 can neither signal it nor open its /proc entries.
    let reach = sh(AGENT_REACH).await;
    // What a command of the agent holds (the path every tool takes).
    let command_caps = match &session {
        Ok(s) => match s
            .exec(ExecParams::argv(["cat", "/proc/self/status"]), None)
            .await
        {
            Ok(r) if r.exit_code == Some(0) => ["CapEff:", "CapBnd:", "NoNewPrivs:"]
                .iter()
                .map(|k| format!("{k} {}", status_field(&r.stdout, k)))
                .collect::<Vec<_>>()
                .join(" "),
            Ok(r) => one_line(&format!("exit {:?}: {}", r.exit_code, r.stderr), 120),
            Err(e) => one_line(&e.to_string(), 120),
        },
        Err(e) => one_line(&e.to_string(), 120),
    };
    if let Ok(s) = session {
        s.close().await;
    }
    report.add(
        "a command's capabilities",
        "CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1",
        command_caps,
    );
    report.add(
        "guest agent from uid 1000",
        format!("uid {GUEST_AGENT_UID}, unreachable"),
        text(reach),
    );
    report.add(
        "uid:gid",
        "1000:1000",
        text(sh("echo \"$(id -u):$(id -g)\"").await),
    );
    let ifaces = match provider.exec_raw(id, &["cat", "/proc/net/dev"]).await {
        Ok(r) if r.exit_code == Some(0) => interfaces(&r.stdout).join(" "),
        other => text(other),
    };
    report.add("network interfaces", "lo", ifaces);
    report.add(
        "root read-only",
        "ro",
        text(sh("touch /.yy-probe 2>/dev/null && echo rw || echo ro").await),
    );
    report.add(
        "workspace writable",
        "rw",
        text(
            sh("touch /workspace/.yy-probe && rm /workspace/.yy-probe && echo rw || echo ro").await,
        ),
    );
    let connect = match provider
        .exec_raw(id, &["bash", "-c", "exec 3<>/dev/tcp/1.1.1.1/80"])
        .await
    {
        Ok(r) if r.exit_code == Some(0) => "connected".to_string(),
        Ok(r) if r.stderr.contains("unreachable") => "refused".to_string(),
        other => text(other),
    };
    report.add("connect out (1.1.1.1:80)", "refused", connect);
    match provider.exec_raw(id, &["cat", "/proc/self/status"]).await {
        Ok(r) if r.exit_code == Some(0) => {
            report.add(
                "capabilities (CapEff)",
                "0000000000000000",
                status_field(&r.stdout, "CapEff:"),
            );
            report.add("no_new_privs", "1", status_field(&r.stdout, "NoNewPrivs:"));
        }
        other => report.add("capabilities (CapEff)", "0000000000000000", text(other)),
    }
    Ok(())
}

/// The packages dpkg has installed in the computer and the lock file in the image, both
/// compared with the image's `yy.packages` label: `(want, got)` of the check.
async fn packages_as_recorded(
    provider: &Provider,
    id: &str,
    recorded: Option<&str>,
) -> (String, String) {
    let Some(label) = recorded else {
        return (
            "a recorded lock".into(),
            "none (built by a yy that did not record its packages; rebuild it)".into(),
        );
    };
    let lock = package_lock::from_label(label);
    let want = match package_lock::parse_lock(&lock) {
        Ok(l) => l,
        Err(e) => return ("a recorded lock".into(), one_line(&e.to_string(), 120)),
    };
    let want_text = format!("{} packages", want.len());
    let query = "dpkg-query -W -f='${db:Status-Abbrev}${Package}=${Version}\\n'";
    let installed = match provider.exec_raw(id, &["/bin/sh", "-c", query]).await {
        Ok(r) if r.exit_code == Some(0) => r.stdout,
        Ok(r) => {
            return (
                want_text,
                one_line(&format!("dpkg-query: {}", r.stderr), 120),
            );
        }
        Err(e) => return (want_text, one_line(&e.to_string(), 120)),
    };
    let file = match provider.exec_raw(id, &["cat", PACKAGE_LOCK_PATH]).await {
        Ok(r) if r.exit_code == Some(0) => r.stdout,
        Ok(r) => {
            return (
                want_text,
                one_line(&format!("{PACKAGE_LOCK_PATH}: {}", r.stderr), 120),
            );
        }
        Err(e) => return (want_text, one_line(&e.to_string(), 120)),
    };
    if file != lock {
        return (
            want_text,
            format!("{PACKAGE_LOCK_PATH} differs from the label"),
        );
    }
    (want_text, installed_vs_recorded(&installed, &want))
}

/// `N packages` when dpkg's `ii name=version` lines are exactly the recorded ones, else
/// what differs.
fn installed_vs_recorded(dpkg_lines: &str, recorded: &package_lock::Lock) -> String {
    let installed: std::collections::BTreeMap<&str, &str> = dpkg_lines
        .lines()
        .filter_map(|l| l.strip_prefix("ii "))
        .filter_map(|l| l.trim().split_once('='))
        .collect();
    let mut differ: Vec<String> = recorded
        .iter()
        .filter(|(name, l)| installed.get(name.as_str()) != Some(&l.version.as_str()))
        .map(|(name, l)| {
            let have = installed.get(name.as_str()).copied().unwrap_or("missing");
            format!("{name} {} -> {have}", l.version)
        })
        .collect();
    differ.extend(
        installed
            .iter()
            .filter(|(name, _)| !recorded.contains_key(**name))
            .map(|(name, v)| format!("{name}={v} not recorded")),
    );
    if differ.is_empty() {
        return format!("{} packages", recorded.len());
    }
    one_line(
        &format!("{} differ: {}", differ.len(), differ.join(", ")),
        200,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_dev_is_parsed() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n    lo:       0       0\n  eth0: 1 2\n";
        assert_eq!(interfaces(text), vec!["lo", "eth0"]);
        let status = "Name:\tcat\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n";
        assert_eq!(status_field(status, "CapEff:"), "0000000000000000");
        assert_eq!(status_field(status, "NoNewPrivs:"), "1");
        assert_eq!(status_field(status, "Seccomp:"), "missing");
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc...");
    }

    #[test]
    fn installed_packages_are_compared_with_the_recorded_lock() {
        let recorded = package_lock::parse_lock("a=1\nb=2\n").unwrap();
        assert_eq!(
            installed_vs_recorded("ii a=1\nii b=2\nrc gone=1\n", &recorded),
            "2 packages"
        );
        assert_eq!(
            installed_vs_recorded("ii a=1\nii b=3\nii c=1\n", &recorded),
            "2 differ: b 2 -> 3, c=1 not recorded"
        );
    }
}
