//! `yy service print|install serve|runner`: systemd units for the control plane and the
//! Runner, confined as far as each can work: a read-only system (`ProtectSystem=strict`)
//! with only the data directory writable, no new privileges, a private /tmp and the
//! smallest capability set. `install` writes the unit and prints what to run next; it
//! starts nothing itself.
//!
//! Secrets: the control plane's TLS key comes in through `LoadCredential=` (systemd hands
//! the service a private copy under `%d`). The Runner's runner.json does not: the Runner
//! rewrites it when it renews its token, and a read-only credential copy would hand the
//! old token back after the next restart. It lives in the Runner's data directory (mode
//! 0600, owned by the Runner's user), the one place the unit lets the Runner write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::computer::engine::Engine;
use crate::error::CliError;

#[derive(Debug, Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub command: ServiceCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Print the systemd unit of `yy serve` or `yy runner run` on stdout
    Print(UnitArgs),
    /// Write the systemd unit (/etc/systemd/system/yy-serve.service or yy-runner.service)
    /// atomically and print the commands that enable and start it; starts nothing itself
    Install {
        #[command(flatten)]
        unit: UnitArgs,
        /// Directory the unit is written to
        #[arg(long, value_name = "DIR", default_value = "/etc/systemd/system")]
        unit_dir: PathBuf,
        /// Replace an existing unit file
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// The control plane (`yy serve`)
    Serve,
    /// The Runner (`yy runner run`) on the Hermes machine
    Runner,
}

#[derive(Debug, Args)]
pub struct UnitArgs {
    /// Which service
    pub which: Which,
    /// The yy binary the unit runs (absolute)
    #[arg(long, value_name = "FILE", default_value = "/usr/local/bin/yy")]
    pub bin: PathBuf,
    /// The service's user (its own: create it with `useradd --system`); `root` for a Runner
    /// with a workspace size limit [default: yy for serve, yy-runner for runner]
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The data directory, the only place the service may write [default: /var/lib/yy
    /// for serve, /var/lib/yy-runner for runner]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// As `yy serve --shutdown-grace` / `yy runner run --shutdown-grace`; systemd's
    /// TimeoutStopSec is this plus 15 s
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// serve: the address to listen on (a port below 1024 adds CAP_NET_BIND_SERVICE)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8420")]
    pub listen: std::net::SocketAddr,
    /// serve: `self-signed` passes `yy serve --tls self-signed` (the certificate is made
    /// and kept in the data directory)
    #[arg(long, value_name = "MODE", value_enum, conflicts_with = "tls_cert")]
    pub tls: Option<super::serve::TlsMode>,
    /// serve: the TLS certificate (passed to `yy serve --tls-cert` as a systemd credential;
    /// a renewed certificate takes `systemctl restart`, which copies it again)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// serve: the TLS private key (passed to `yy serve --tls-key` as a systemd credential)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// runner: runner.json; it must lie in the data directory, since the Runner rewrites
    /// it when it renews its token [default: DATA_DIR/runner.json]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// runner: the container engine its computers run on; its socket is the one other
    /// path the Runner may write to
    #[arg(long, value_enum, default_value = "docker")]
    pub engine: Engine,
    /// runner: as `yy runner run --workspace-limit`; a limit needs root (loop mounts), so
    /// it is `none` unless --user root
    #[arg(long, value_name = "SIZE")]
    pub workspace_limit: Option<String>,
    /// More arguments for `yy serve` / `yy runner run`, after `--`
    #[arg(last = true, value_name = "ARGS")]
    pub extra: Vec<String>,
}

/// Extra seconds systemd waits after the grace period: the process reports what is left,
/// says goodbye and stops a supervised Hermes.
const STOP_MARGIN: Duration = Duration::from_secs(15);

/// One argument of ExecStart=, quoted for systemd: `%` and `$` are specifiers and
/// variables there, and quotes and backslashes need escaping.
fn quote(arg: &str) -> Result<String, String> {
    if arg.chars().any(|c| c.is_control()) {
        return Err(format!("{arg:?} contains a control character"));
    }
    let escaped = arg
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    if !escaped.is_empty()
        && escaped
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,@+".contains(c))
    {
        Ok(escaped)
    } else {
        Ok(format!("\"{escaped}\""))
    }
}

/// A path a unit setting names: absolute, and free of what systemd would read otherwise.
fn unit_path(what: &str, p: &Path) -> Result<String, String> {
    let s = p
        .to_str()
        .ok_or_else(|| format!("{what} {} is not UTF-8", p.display()))?;
    if !p.is_absolute()
        || s.chars().any(|c| {
            c.is_whitespace() || c.is_control() || c == '%' || c == '$' || c == '"' || c == '\\'
        })
    {
        return Err(format!(
            "{what} {s:?} must be an absolute path without spaces, quotes, % or $"
        ));
    }
    Ok(s.to_string())
}

fn user_name(u: &str) -> Result<String, String> {
    let ok = !u.is_empty()
        && u.len() <= 32
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !u.starts_with('-');
    ok.then(|| u.to_string())
        .ok_or_else(|| format!("--user {u:?} is not a user name (a-z 0-9 - _)"))
}

/// The unit's file name.
pub fn unit_name(which: Which) -> &'static str {
    match which {
        Which::Serve => "yy-serve.service",
        Which::Runner => "yy-runner.service",
    }
}

/// The hardening every yy unit gets.
const COMMON: &str = "\
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
UMask=0077
";

/// The text of the unit `a` describes.
pub fn render(a: &UnitArgs) -> Result<String, String> {
    let bin = unit_path("--bin", &a.bin)?;
    let grace = humantime::format_duration(a.shutdown_grace).to_string();
    let stop = (a.shutdown_grace + STOP_MARGIN).as_secs();
    let mut exec = vec![bin];
    let mut service = String::new();
    let description;
    let data_dir;
    match a.which {
        Which::Serve => {
            description = "yy control plane";
            let user = user_name(a.user.as_deref().unwrap_or("yy"))?;
            data_dir = unit_path(
                "--data-dir",
                a.data_dir.as_deref().unwrap_or(Path::new("/var/lib/yy")),
            )?;
            exec.extend(["serve".into(), "--data-dir".into(), data_dir.clone()]);
            exec.extend(["--listen".into(), a.listen.to_string()]);
            exec.extend(["--shutdown-grace".into(), quote(&grace)?]);
            let plain = a.tls.is_none() && a.tls_cert.is_none();
            if plain
                && !a.listen.ip().is_loopback()
                && !a.extra.iter().any(|e| e == "--insecure-http")
            {
                return Err(format!(
                    "--listen {} is not a loopback address and no TLS is set: add --tls self-signed (or --tls-cert FILE --tls-key FILE), or `-- --insecure-http` if this network is trusted",
                    a.listen
                ));
            }
            if a.tls.is_some() {
                exec.extend(["--tls".into(), "self-signed".into()]);
            }
            if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
                let (cert, key) = (unit_path("--tls-cert", cert)?, unit_path("--tls-key", key)?);
                service.push_str(&format!(
                    "LoadCredential=tls.crt:{cert}\nLoadCredential=tls.key:{key}\n"
                ));
                exec.extend([
                    "--tls-cert".into(),
                    "%d/tls.crt".into(),
                    "--tls-key".into(),
                    "%d/tls.key".into(),
                ]);
            }
            service.push_str(&format!("User={user}\nGroup={user}\n"));
            // A port below 1024 is the one privilege yy serve may need.
            if a.listen.port() < 1024 {
                service.push_str(
                    "AmbientCapabilities=CAP_NET_BIND_SERVICE\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n",
                );
            } else {
                service.push_str("AmbientCapabilities=\nCapabilityBoundingSet=\n");
            }
            service.push_str(
                "PrivateDevices=yes\nRestrictNamespaces=yes\nMemoryDenyWriteExecute=yes\n\
                 RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n\
                 SystemCallFilter=@system-service\nSystemCallErrorNumber=EPERM\n",
            );
            service.push_str(&format!("ReadWritePaths={data_dir}\n"));
        }
        Which::Runner => {
            description = "yy Runner";
            let user = user_name(a.user.as_deref().unwrap_or("yy-runner"))?;
            data_dir = unit_path(
                "--data-dir",
                a.data_dir
                    .as_deref()
                    .unwrap_or(Path::new("/var/lib/yy-runner")),
            )?;
            let config = match &a.config {
                Some(c) => unit_path("--config", c)?,
                None => format!("{data_dir}/runner.json"),
            };
            if Path::new(&config).parent() != Some(Path::new(&data_dir)) {
                return Err(format!(
                    "--config {config} must lie in the data directory {data_dir}: the Runner rewrites it when it renews its token, and may write nowhere else (install -m 600 -o {user} runner.json {data_dir}/runner.json)"
                ));
            }
            let root = user == "root";
            let limit = match (&a.workspace_limit, root) {
                (Some(l), _) => l.clone(),
                (None, true) => "10GiB".into(),
                (None, false) => "none".into(),
            };
            if !root && !matches!(limit.as_str(), "none" | "0") {
                return Err(
                    "--workspace-limit needs the Runner to run as root (it mounts an ext4 image per workspace): add --user root, or leave the limit out".into(),
                );
            }
            let socket = match a.engine {
                Engine::Docker => "/run/docker.sock",
                Engine::Podman => "/run/podman/podman.sock",
            };
            exec.extend(["runner".into(), "run".into(), "--config".into(), config]);
            exec.extend(["--data-dir".into(), data_dir.clone()]);
            exec.extend(["--shutdown-grace".into(), quote(&grace)?]);
            exec.extend(["--engine".into(), a.engine.to_string()]);
            exec.extend(["--workspace-limit".into(), quote(&limit)?]);
            service.push_str(&format!("User={user}\n"));
            if root {
                // Workspace images: loop devices, mkfs.ext4 and mounts.
                service.push_str(
                    "AmbientCapabilities=\nCapabilityBoundingSet=CAP_SYS_ADMIN CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER\n",
                );
            } else {
                service.push_str(&format!("Group={user}\n"));
                if a.engine == Engine::Docker {
                    // The Docker socket's group: the one way to the engine without root.
                    service.push_str("SupplementaryGroups=docker\n");
                }
                service
                    .push_str("AmbientCapabilities=\nCapabilityBoundingSet=\nPrivateDevices=yes\n");
            }
            service.push_str(&format!("ReadWritePaths={data_dir} {socket}\n"));
            if a.engine == Engine::Docker {
                // /run/yy: the hosts file of computers without a network
                // (docs/computer-notes.md, "The loopback of runc's own").
                service.push_str("RuntimeDirectory=yy\n");
            }
        }
    }
    for extra in &a.extra {
        exec.push(quote(extra)?);
    }
    let mut unit = format!(
        "# Written by `yy service` (yy {}). Regenerate rather than edit.\n\
         [Unit]\n\
         Description={description}\n\
         Documentation=man:yy-service(1)\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={}\n\
         Restart=on-failure\n\
         RestartSec=5s\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec={stop}s\n",
        crate::VERSION,
        exec.join(" ")
    );
    if a.which == Which::Runner {
        // Refusals (disabled, token expired) exit 4: restarting would not help.
        unit.push_str("RestartPreventExitStatus=2 4\n");
    } else {
        unit.push_str("RestartPreventExitStatus=2 6\nLimitNOFILE=65536\n");
    }
    unit.push_str(&service);
    unit.push_str(COMMON);
    unit.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    Ok(unit)
}

pub async fn run(args: ServiceArgs) -> anyhow::Result<()> {
    match args.command {
        ServiceCommand::Print(a) => {
            let unit = render(&a).map_err(CliError::usage)?;
            crate::output::print(unit.trim_end())?;
            Ok(())
        }
        ServiceCommand::Install {
            unit,
            unit_dir,
            force,
        } => {
            let text = render(&unit).map_err(CliError::usage)?;
            if !unit_dir.is_dir() {
                return Err(CliError::usage(format!(
                    "{} is not a directory: give --unit-dir DIR",
                    unit_dir.display()
                ))
                .into());
            }
            let path = unit_dir.join(unit_name(unit.which));
            if path.exists() && !force {
                return Err(CliError::new(
                    crate::error::Exit::Conflict,
                    format!("{} exists: pass --force to replace it", path.display()),
                )
                .into());
            }
            crate::fsutil::write_atomic(&path, text.as_bytes(), 0o644)
                .map_err(|e| CliError::failure(format!("cannot write {}: {e}", path.display())))?;
            let name = unit_name(unit.which);
            let (user, dir) = match unit.which {
                Which::Serve => ("yy", "/var/lib/yy"),
                Which::Runner => ("yy-runner", "/var/lib/yy-runner"),
            };
            let user = unit.user.as_deref().unwrap_or(user);
            let dir = unit
                .data_dir
                .as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| dir.to_string());
            let mut next = format!("wrote {}; next:\n", path.display());
            if user != "root" {
                next.push_str(&format!(
                    "  useradd --system --home-dir {dir} --shell /usr/sbin/nologin {user}\n"
                ));
            }
            next.push_str(&format!("  install -d -m 700 -o {user} -g {user} {dir}\n"));
            if unit.which == Which::Runner {
                next.push_str(&format!(
                    "  install -m 600 -o {user} -g {user} runner.json {dir}/runner.json\n"
                ));
            }
            next.push_str(&format!(
                "  systemctl daemon-reload\n  systemctl enable --now {name}"
            ));
            crate::output::print(&next)?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: UnitArgs,
    }

    fn unit(args: &[&str]) -> Result<String, String> {
        let mut all = vec!["t"];
        all.extend_from_slice(args);
        render(&T::try_parse_from(all).unwrap().a)
    }

    #[test]
    fn units_confine_and_quote() {
        let serve = unit(&[
            "serve",
            "--listen",
            "0.0.0.0:443",
            "--tls-cert",
            "/etc/yy/c.pem",
            "--tls-key",
            "/etc/yy/k.pem",
            "--",
            "--allowed-host",
            "yy.example",
            "--retention",
            "7 days",
        ])
        .unwrap();
        assert!(
            serve.contains("CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n"),
            "{serve}"
        );
        assert!(serve.contains("LoadCredential=tls.key:/etc/yy/k.pem\n"));
        assert!(serve.contains("--tls-key %d/tls.key"));
        assert!(serve.contains("\"7 days\""), "{serve}");
        assert!(serve.contains("ReadWritePaths=/var/lib/yy\n"));
        assert!(serve.contains("TimeoutStopSec=25s\n"));
        let runner = unit(&["runner", "--shutdown-grace", "1m"]).unwrap();
        assert!(
            runner.contains("--config /var/lib/yy-runner/runner.json"),
            "{runner}"
        );
        assert!(runner.contains("ReadWritePaths=/var/lib/yy-runner /run/docker.sock\n"));
        assert!(runner.contains("RuntimeDirectory=yy\n"), "{runner}");
        assert!(runner.contains("CapabilityBoundingSet=\n"));
        assert!(runner.contains("TimeoutStopSec=75s\n"));
        assert!(runner.contains("--workspace-limit none"));
        let e = unit(&["runner", "--config", "/etc/yy/runner.json"]).unwrap_err();
        assert!(e.contains("must lie in the data directory"), "{e}");
        let e = unit(&["runner", "--workspace-limit", "1GiB"]).unwrap_err();
        assert!(e.contains("--user root"), "{e}");
        assert!(unit(&["serve", "--data-dir", "/var/lib/my yy"]).is_err());
        let e = unit(&["serve", "--listen", "0.0.0.0:8420"]).unwrap_err();
        assert!(e.contains("--tls self-signed"), "{e}");
        let own = unit(&["serve", "--listen", "0.0.0.0:8420", "--tls", "self-signed"]).unwrap();
        assert!(own.contains("--tls self-signed"), "{own}");
        assert!(
            unit(&[
                "serve",
                "--listen",
                "10.0.0.1:8420",
                "--",
                "--insecure-http"
            ])
            .is_ok()
        );
        assert_eq!(quote("50%$x").unwrap(), "\"50%%$$x\"");
    }
}
