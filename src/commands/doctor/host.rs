//! A Runner host (`--runner-config`): its token, engine, computer image, Hermes, model
//! settings, free disk and file modes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{DoctorArgs, Finding};
use crate::api::views::RunnerConfig;
use crate::computer::docker::Provider;
use crate::computer::engine::Engine;
use crate::hermes::{HermesAccess, HermesAuth, HermesError};
use crate::output::clean;
use crate::runner::client::MachineClient;
use crate::runner::config::ConfigError;

const GIB: u64 = 1 << 30;
/// Free space below these warns / fails.
const WARN_FREE: u64 = GIB;
const FAIL_FREE: u64 = 256 << 20;

pub async fn check(
    d: &mut super::Doctor,
    args: &DoctorArgs,
    path: &Path,
    loaded: Result<RunnerConfig, ConfigError>,
) {
    let shown = path.display().to_string();
    let config = match loaded {
        Ok(c) => {
            d.push(
                "runner.config",
                Finding::ok(format!(
                    "runner {} of {}",
                    c.runner_id,
                    clean(&c.server_url)
                )),
            );
            Some(c)
        }
        Err(e) => {
            let fix = match &e {
                ConfigError::Shared { .. } => format!("chmod 600 {shown}"),
                ConfigError::Read { .. } => format!(
                    "pass the runner.json `yy runner register ... -o {shown}` wrote (--runner-config FILE)"
                ),
                ConfigError::Invalid { .. } => format!(
                    "correct {shown}, or register the Runner again: `yy runner register --source SOURCE --profile PROFILE --server-url URL -o {shown}`"
                ),
            };
            d.push("runner.config", Finding::fatal(e.to_string(), fix));
            None
        }
    };
    let data_dir = match (&args.data_dir, &config) {
        (Some(dir), _) => Some(dir.clone()),
        (None, Some(c)) => super::super::context::default_data_dir()
            .ok()
            .map(|d| d.join(format!("runner-{}", c.runner_id))),
        (None, None) => None,
    };

    // None: the control plane was not asked; Some(None): it assigned no image.
    let mut assigned: Option<Option<String>> = None;
    if d.ready(
        "runner.token",
        &["runner.config", "server.reachable", "tls.pin"],
    ) && let Some(c) = &config
    {
        let (f, image) = token(c, &shown).await;
        assigned = image;
        d.push("runner.token", f);
    }

    let image = args.image.clone().or_else(|| assigned.clone().flatten());
    let computers_off = args.image.is_none() && assigned == Some(None);
    let provider = engine(d, args.engine.engine, computers_off).await;
    let mut id = None;
    if d.ready("image.present", &["engine.reachable"])
        && let Some(p) = &provider
    {
        id = present(d, p, image.as_deref(), assigned.is_none()).await;
    }
    if d.ready("image.verified", &["image.present"]) {
        match (&provider, id) {
            (Some(p), Some(id)) => d.push("image.verified", verified(p, &id)),
            _ => d.push("image.verified", Finding::skip("no image to look up")),
        }
    }

    if d.ready("hermes.reachable", &["runner.config"])
        && let Some(c) = &config
    {
        d.push("hermes.reachable", hermes(c, &shown).await);
    }
    if d.ready("hermes.model", &["runner.config"])
        && let Some(c) = &config
    {
        let home = args
            .hermes_home
            .clone()
            .or_else(|| c.hermes_home.clone())
            .or_else(|| data_dir.as_ref().map(|d| d.join("hermes-home")));
        d.push("hermes.model", model(c, home.as_deref()));
    }
    if d.ready("browser.chromium", &["runner.config"])
        && let Some(c) = &config
    {
        d.push("browser.chromium", chromium(c));
    }
    d.push("disk.free", disk(data_dir.as_deref()));
    d.push("files.modes", modes(path, data_dir.as_deref()));
}

/// The managed browser's Chromium: there, or installable on first use (docs/browser.md).
fn chromium(c: &RunnerConfig) -> Finding {
    use crate::runner::browser;
    if !browser::enabled(c.browser.as_ref()) {
        return Finding::skip("the managed browser is off (runner.json browser.enabled is false)");
    }
    if c.hermes_command.is_none() {
        return Finding::skip(
            "no managed browser: it needs a Hermes the Runner starts (hermesCommand)",
        );
    }
    let exe = browser::find_chromium();
    if exe.is_file() {
        return Finding::ok(format!("{}", exe.display()));
    }
    let install = c
        .browser
        .as_ref()
        .and_then(|b| b.install)
        .unwrap_or(crate::api::views::BrowserInstall::Auto);
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = Path::new("/usr/bin/apt-get").is_file();
    let fix = "apt-get install chromium";
    match browser::may_install(install, root, apt) {
        Ok(()) => Finding::warn(
            format!(
                "{} is missing: the Runner installs Debian's chromium at an agent's first browser use",
                exe.display()
            ),
            fix,
        ),
        Err(why) => Finding::fail(format!("{} is missing and {why}", exe.display()), fix),
    }
}

async fn token(c: &RunnerConfig, shown: &str) -> (Finding, Option<Option<String>>) {
    let register = format!(
        "register the Runner again: `yy runner register --source SOURCE --profile PROFILE --server-url {} -o {shown}`",
        c.server_url
    );
    let client = match MachineClient::for_config(c) {
        Ok(m) => m,
        Err(e) => return (Finding::fail(e.to_string(), register), None),
    };
    let who = match tokio::time::timeout(Duration::from_secs(20), client.whoami()).await {
        Ok(Ok(w)) => w,
        Ok(Err(e)) if e.status().is_some() => {
            let fix = match e.code() {
                Some(crate::api::machine::codes::RUNNER_DISABLED) => format!(
                    "an admin disabled it: {register} (after `yy runner disable {}`)",
                    c.runner_id
                ),
                _ => register,
            };
            return (Finding::fail(clean(&e.to_string()), fix), None);
        }
        Ok(Err(e)) => {
            return (
                Finding::fail(
                    clean(&e.to_string()),
                    format!("check that {} is reachable from this host", c.server_url),
                ),
                None,
            );
        }
        Err(_) => {
            return (
                Finding::fail(
                    "no answer to GET /runner/v1/whoami within 20 s",
                    format!("check that {} is reachable from this host", c.server_url),
                ),
                None,
            );
        }
    };
    let left = who.token_expires_at_ms - crate::timefmt::now_ms();
    let when = crate::timefmt::rfc3339(who.token_expires_at_ms);
    let detail = format!(
        "runner {} accepted; token expires {when} (in {})",
        clean(&who.runner_id),
        crate::timefmt::duration_words(left.max(0))
    );
    let f = if left < 24 * 3600 * 1000 {
        Finding::warn(
            detail,
            format!(
                "run the Runner (`yy runner run --config {shown}`): it renews its token at 75 % of its lifetime"
            ),
        )
    } else {
        Finding::ok(detail)
    };
    (f, Some(who.computer_image))
}

/// How to start the engine that was asked for (or the usual one).
fn start_engine(choice: Option<Engine>) -> String {
    let unit = match choice {
        Some(Engine::Podman) => "systemctl start podman.socket",
        _ => "systemctl start docker",
    };
    match std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        Some(host) => format!(
            "start the engine that listens on DOCKER_HOST={host} (`{unit}`), or point DOCKER_HOST at a running one"
        ),
        None => format!(
            "{unit} (installed by {})",
            choice.unwrap_or(Engine::Docker).install_script()
        ),
    }
}

async fn engine(
    d: &mut super::Doctor,
    choice: Option<Engine>,
    computers_off: bool,
) -> Option<Provider> {
    let provider = match Provider::connect_to(choice).await {
        Ok(p) => p,
        Err(e) => {
            let detail = clean(&e.to_string()).into_owned();
            let f = if computers_off {
                // Nothing needs an engine while the Runner has no computer image.
                Finding {
                    fatal: true,
                    ..Finding::warn(
                        format!("{detail} (computers are not enabled for this Runner)"),
                        start_engine(choice),
                    )
                }
            } else {
                Finding::fatal(detail, start_engine(choice))
            };
            d.push("engine.reachable", f);
            return None;
        }
    };
    let info = provider.engine().clone();
    let detail = format!(
        "{} (API {}) on {}",
        clean(&info.label()),
        info.api_version,
        info.socket
    );
    let f = match provider.check_engine().await {
        Ok(()) => Finding::ok(detail),
        Err(e) => Finding::fail(
            format!("{detail}: {}", clean(&e.to_string())),
            format!(
                "run the rootful engine with seccomp ({})",
                info.engine.install_script()
            ),
        ),
    };
    d.push("engine.reachable", f);
    Some(provider)
}

/// The image's full ID when the engine has it.
async fn present(
    d: &mut super::Doctor,
    p: &Provider,
    image: Option<&str>,
    unasked: bool,
) -> Option<String> {
    let Some(image) = image else {
        let why = if unasked {
            "the control plane did not say which image this Runner uses (runner.token did not pass); pass --image IMAGE_ID"
        } else {
            "no computer image assigned to this Runner: computers are not enabled"
        };
        d.push("image.present", Finding::skip_all(why));
        return None;
    };
    match p.docker().inspect_image(image).await {
        Ok(i) => {
            let id = crate::computer::engine::full_image_id(&i.id.unwrap_or_default());
            let labels = i.config.and_then(|c| c.labels).unwrap_or_default();
            let label = |k: &str| {
                labels
                    .get(k)
                    .map_or("-".to_string(), |v| clean(v).into_owned())
            };
            d.push(
                "image.present",
                Finding::ok(format!(
                    "{id} (yy {}, recipe {})",
                    label(crate::computer::labels::VERSION),
                    label(crate::computer::labels::RECIPE_NAME)
                )),
            );
            Some(id)
        }
        Err(e) => {
            d.push(
                "image.present",
                Finding::fatal(
                    clean(&p.image_error(image, e).to_string()),
                    "build one here and assign it: `yy image prepare`, then `yy runner update RUNNER --computer-image IMAGE_ID`",
                ),
            );
            None
        }
    }
}

fn verified(p: &Provider, id: &str) -> Finding {
    let info = p.engine();
    match crate::computer::verify_record::find(info, id) {
        Some(r) => Finding::ok(format!(
            "verified {} by yy {} on {} ({})",
            r.verified_at,
            clean(&r.yy_version),
            clean(&r.engine),
            crate::api::words::plural(r.checks, "check", "checks")
        )),
        None => Finding::fail(
            format!(
                "{id} has no passing `yy image verify` on {} of this host",
                info.engine.title()
            ),
            format!("yy image verify {id} --engine {}", info.engine.name()),
        ),
    }
}

async fn hermes(c: &RunnerConfig, shown: &str) -> Finding {
    if let Some(command) = &c.hermes_command {
        return supervised(c, command, shown).await;
    }
    let auth = match (&c.hermes_token_file, &c.hermes_credentials) {
        (Some(f), _) => HermesAuth::TokenFile(f.clone()),
        (None, Some(cred)) => HermesAuth::Credentials(cred.clone()),
        (None, None) => {
            return Finding::fail(
                "runner.json names no way to reach Hermes",
                format!(
                    "set hermesTokenFile, hermesCommand or hermesCredentials in {shown} (docs/hermes.md)"
                ),
            );
        }
    };
    let url = clean(&c.hermes_url).into_owned();
    let fix_config = format!("correct the Hermes settings in {shown} (docs/hermes.md)");
    let access = match HermesAccess::new(&c.hermes_url, auth, c.allow_insecure_lan) {
        Ok(a) => a,
        Err(e) => return Finding::fail(clean(&e.to_string()), fix_config),
    };
    let rest = match crate::hermes::HermesRest::new(&access) {
        Ok(r) => r,
        Err(e) => return Finding::fail(clean(&e.to_string()), fix_config),
    };
    match tokio::time::timeout(Duration::from_secs(20), rest.check_version()).await {
        Ok(Ok(s)) => Finding::ok(format!("Hermes {} at {url}", clean(&s.version))),
        Ok(Err(e @ HermesError::UnsupportedVersion { .. })) => Finding::fail(
            clean(&e.to_string()),
            "install the pinned hermes-agent: scripts/install-hermes.sh",
        ),
        Ok(Err(e)) => Finding::fail(
            clean(&e.to_string()),
            format!(
                "start Hermes there (`hermes serve`, or its service), or correct hermesURL in {shown}"
            ),
        ),
        Err(_) => Finding::fail(
            format!("Hermes at {url} did not answer GET /api/status within 20 s"),
            format!("restart Hermes, or correct hermesURL in {shown}"),
        ),
    }
}

/// A Hermes the Runner starts itself: its program must be there, and the venv's Python
/// says which hermes-agent it is. Not `hermes --version`: that asks PyPI for updates.
async fn supervised(c: &RunnerConfig, command: &[String], shown: &str) -> Finding {
    let program = Path::new(&command[0]);
    let shown_program = clean(&command[0]).into_owned();
    let fix = format!(
        "install hermes-agent (scripts/install-hermes.sh), or correct hermesCommand in {shown}"
    );
    let executable = std::fs::metadata(program)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !executable {
        return Finding::fail(
            format!("hermesCommand's program {shown_program} is not an executable file"),
            fix,
        );
    }
    let python = c
        .worker_python
        .clone()
        .or_else(|| crate::runner::worker::default_python(Some(command)));
    let Some(python) = python.filter(|p| p.exists()) else {
        return Finding::warn(
            format!("{shown_program} is there; no Python beside it to tell its version"),
            format!("set workerPython in {shown} to the Hermes venv's python"),
        );
    };
    let run = tokio::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('hermes-agent'))",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let version = match tokio::time::timeout(Duration::from_secs(30), run).await {
        Ok(Ok(out)) if out.status.success() => {
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
        Ok(Ok(_)) => {
            return Finding::fail(
                format!("{} has no hermes-agent installed", python.display()),
                fix,
            );
        }
        Ok(Err(e)) => return Finding::fail(format!("cannot run {}: {e}", python.display()), fix),
        Err(_) => {
            return Finding::fail(
                format!("{} did not answer within 30 s", python.display()),
                fix,
            );
        }
    };
    let version = clean(&crate::output::cut(&version, 40)).into_owned();
    if !version.starts_with(crate::hermes::SUPPORTED_VERSION_PREFIX) {
        return Finding::fail(
            format!(
                "hermes-agent {version} in {}; yy needs {}",
                python.display(),
                crate::hermes::SUPPORTED_VERSIONS
            ),
            "install the pinned hermes-agent: scripts/install-hermes.sh",
        );
    }
    Finding::ok(format!(
        "hermes-agent {version} ({shown_program}; the Runner starts it itself)"
    ))
}

/// Every allowed profile has a model, and a provider or base URL; the key is never shown.
fn model(c: &RunnerConfig, home: Option<&Path>) -> Finding {
    let Some(home) = home else {
        return Finding::skip("the Hermes home is not known: pass --hermes-home DIR");
    };
    let default = ["default".to_string()];
    let profiles = if c.allowed_profiles.is_empty() {
        &default[..]
    } else {
        &c.allowed_profiles[..]
    };
    let mut found = Vec::new();
    for profile in profiles {
        let config = crate::runner::model::profile_dir(home, profile).join("config.yaml");
        let fix = format!(
            "write `model:` in {} with default, provider or base_url, and api_key (docs/hermes.md)",
            config.display()
        );
        match crate::runner::model::resolve(home, profile) {
            Ok(m) if m.provider.is_none() && m.base_url.is_none() => {
                return Finding::fail(
                    format!(
                        "{}: model.default {} has neither model.provider nor model.base_url",
                        m.source.display(),
                        clean(&m.model)
                    ),
                    fix,
                );
            }
            Ok(m) => found.push(format!(
                "{profile}: {} via {}",
                clean(&m.model),
                clean(
                    m.base_url
                        .as_deref()
                        .or(m.provider.as_deref())
                        .unwrap_or("-")
                )
            )),
            Err(e) => return Finding::fail(clean(&e), fix),
        }
    }
    Finding::ok(format!("{} (in {})", found.join("; "), home.display()))
}

/// Free bytes for an unprivileged user on the file system holding `path` (its nearest
/// existing ancestor when it is not there yet).
fn free_bytes(path: &Path) -> Result<(u64, PathBuf), String> {
    let mut at = path.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p.to_path_buf(),
            None => break,
        }
    }
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} has a NUL byte", path.display()))?;
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statvfs {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok((st.f_bavail as u64 * st.f_frsize as u64, at))
}

fn disk(data_dir: Option<&Path>) -> Finding {
    let Some(data) = data_dir else {
        return Finding::skip("the data directory is not known: pass --data-dir DIR");
    };
    let dirs = [data.to_path_buf(), data.join("workspaces")];
    let mut lines = Vec::new();
    let mut worst = (u64::MAX, PathBuf::new());
    for dir in &dirs {
        match free_bytes(dir) {
            Ok((free, _)) => {
                lines.push(format!(
                    "{}: {} free",
                    dir.display(),
                    super::super::progress::human_bytes(free)
                ));
                if free < worst.0 {
                    worst = (free, dir.clone());
                }
            }
            Err(e) => {
                return Finding::fail(
                    e,
                    format!("create {} (`yy runner run` does)", data.display()),
                );
            }
        }
    }
    let detail = lines.join("; ");
    let fix = format!(
        "free space on the file system of {} (e.g. `yy image prune`, `docker system prune`)",
        worst.1.display()
    );
    if worst.0 < FAIL_FREE {
        Finding::fail(detail, fix)
    } else if worst.0 < WARN_FREE {
        Finding::warn(detail, fix)
    } else {
        Finding::ok(detail)
    }
}

fn modes(config: &Path, data_dir: Option<&Path>) -> Finding {
    let mode_of = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    };
    let mut bad = Vec::new();
    let mut fixes = Vec::new();
    let mut good = Vec::new();
    match mode_of(config) {
        Some(m) if crate::fsutil::is_shared(m) => {
            bad.push(format!("{} is mode {m:04o}", config.display()));
            fixes.push(format!("chmod 600 {}", config.display()));
        }
        Some(m) => good.push(format!("{} {m:04o}", config.display())),
        None => bad.push(format!("{} cannot be read", config.display())),
    }
    if let Some(dir) = data_dir {
        match mode_of(dir) {
            Some(m) if m & 0o077 != 0 => {
                bad.push(format!("{} is mode {m:04o}, not 0700", dir.display()));
                fixes.push(format!("chmod 700 {}", dir.display()));
            }
            Some(m) => good.push(format!("{} {m:04o}", dir.display())),
            None => good.push(format!(
                "{} not created yet (`yy runner run` makes it 0700)",
                dir.display()
            )),
        }
    }
    if bad.is_empty() {
        Finding::ok(good.join("; "))
    } else if fixes.is_empty() {
        Finding::fail(bad.join("; "), "check the path given to --runner-config")
    } else {
        Finding::fail(bad.join("; "), fixes.join(" && "))
    }
}
