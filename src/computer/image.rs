//! Building the computer image without a registry or a Dockerfile builder:
//!
//! 1. a root filesystem from Debian packages (`debootstrap --variant=minbase`), slimmed,
//!    cached under the cache directory by recipe, its package set recorded as a lock;
//! 2. imported into Docker as the base image (reused while the rootfs is unchanged);
//! 3. a small top layer (user 1000 `yy`, its home, the guest agent at /usr/local/bin/yy,
//!    the package lock at /etc/yy/packages.lock) uploaded into a never-started helper
//!    container and committed with the image config and labels (`yy.version`, `yy.recipe`,
//!    `yy.binary`, `yy.packages`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use axum::body::Bytes;
use bollard::models::{ContainerConfig, ContainerCreateBody};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, CreateImageOptionsBuilder, ListImagesOptionsBuilder,
    TagImageOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::docker::Provider;
use super::recipes::{self, BuiltinRecipe};
use super::rootfs::{self, Recipe};
use super::tarball::{TarBuilder, is_static_elf};
use super::{ComputerError, GUEST_BINARY, GUEST_HOME, GUEST_UID, PACKAGE_LOCK_PATH, labels};
use super::{dpkg_status, package_lock};
use crate::api::words::plural;

pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
pub const DEFAULT_SECURITY_MIRROR: &str = "http://deb.debian.org/debian-security";
pub const DEFAULT_CACHE_DIR: &str = "/var/tmp/yy";
/// The package list shipped with yy (images/base/packages.txt).
pub const DEFAULT_PACKAGES: &str = include_str!("../../images/base/packages.txt");

pub const STATIC_BUILD_HINT: &str = "build a static yy with RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu and pass --binary target/x86_64-unknown-linux-gnu/release/yy";

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub mirror: String,
    pub security_mirror: String,
    /// Default: the host's `VERSION_CODENAME`, else bookworm.
    pub suite: Option<String>,
    /// Default: [`DEFAULT_PACKAGES`].
    pub packages_file: Option<PathBuf>,
    /// The guest agent; default: the running executable, which must then be static.
    pub binary: Option<PathBuf>,
    /// Also tag the result (`repo:tag`).
    pub tag: Option<String>,
    /// Where root filesystems are cached by recipe.
    pub cache_dir: PathBuf,
    /// Where to write the package lock (`images/base/packages.lock`).
    pub lock_out: Option<PathBuf>,
    /// Apply SUITE-updates and SUITE-security on top of the point release.
    pub updates: bool,
    /// Rebuild the root filesystem even if a cached one matches.
    pub fresh: bool,
    /// The built-in recipe: its pinned suite and package list apply unless overridden.
    pub recipe: BuiltinRecipe,
    /// Rewrite the lock file with what was installed when they differ.
    pub update_lock: bool,
    /// Refuse any difference from the lock (for a frozen mirror of one's own).
    pub locked: bool,
    /// The engine to build into (`--engine`); `None`: the one that answers.
    pub engine: Option<super::engine::Engine>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            mirror: DEFAULT_MIRROR.into(),
            security_mirror: DEFAULT_SECURITY_MIRROR.into(),
            suite: None,
            packages_file: None,
            binary: None,
            tag: None,
            cache_dir: DEFAULT_CACHE_DIR.into(),
            lock_out: None,
            updates: true,
            fresh: false,
            recipe: recipes::BASE,
            update_lock: false,
            locked: false,
            engine: None,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Built {
    pub image_id: String,
    pub base_id: String,
    pub yy_version: String,
    pub recipe: String,
    pub binary_sha256: String,
    pub packages: usize,
    /// The built-in recipe's name (`base`, `desktop`).
    pub recipe_name: String,
    pub rootfs: PathBuf,
    pub reused_rootfs: bool,
    pub reused_base: bool,
}

/// A yy image as `yy image list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageRow {
    pub id: String,
    pub created: String,
    pub yy_version: String,
    pub recipe: String,
    pub binary: String,
    pub tags: Vec<String>,
}

/// One yy image in full, as `yy image show` tells it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageDetails {
    #[serde(flatten)]
    pub row: ImageRow,
    /// The built-in recipe (`base`, `desktop`), `-` when not recorded.
    pub recipe_name: String,
    /// The packages it was built with (`yy.packages`); `None` for an image built by a yy
    /// that did not record them.
    pub packages: Option<package_lock::Lock>,
}

/// The guest agent to put in the image, its bytes, digest and version.
struct Agent {
    is_static: bool,
    data: Vec<u8>,
    sha256: String,
    version: String,
    /// It takes `guest serve --main-process` (the image is labelled so).
    main_process: bool,
}

async fn agent(binary: Option<&Path>, progress: &dyn Fn(&str)) -> Result<Agent, ComputerError> {
    let (path, given) = match binary {
        Some(p) => (p.to_path_buf(), true),
        None => (
            std::env::current_exe()
                .map_err(|e| ComputerError::Io(format!("cannot find the running yy: {e}")))?,
            false,
        ),
    };
    let shown = path.display();
    let is_static = is_static_elf(&path)
        .map_err(|e| ComputerError::Invalid(format!("guest agent {shown}: {e}")))?;
    // A dynamic yy (what `cargo build --release` makes) runs in the image when the image's
    // glibc is at least the build host's (true on a host of the suite the recipe pins);
    // the build checks it in the image before it says the image is ready.
    if !is_static {
        let which = if given { "" } else { "the running yy, " };
        progress(&format!(
            "{which}{shown} is dynamically linked: the build checks that it runs in the image"
        ));
    }
    let out = tokio::process::Command::new(&path)
        .arg("--version")
        .output()
        .await
        .map_err(|e| ComputerError::Invalid(format!("cannot run guest agent {shown}: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .trim()
        .strip_prefix("yy ")
        .filter(|_| out.status.success())
        .ok_or_else(|| {
            ComputerError::Invalid(format!(
                "{shown} is not a yy binary (--version said {text:?})"
            ))
        })?
        .to_string();
    // Asked of the binary, not told by its version: clap refuses an unknown flag before
    // it shows the help.
    let main_process = tokio::process::Command::new(&path)
        .args([
            "guest",
            "serve",
            super::main_process::MAIN_PROCESS_FLAG,
            "--help",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success());
    let data =
        std::fs::read(&path).map_err(|e| ComputerError::Io(format!("reading {shown}: {e}")))?;
    let sha256 = format!("sha256:{}", hex::encode(Sha256::digest(&data)));
    Ok(Agent {
        is_static,
        data,
        sha256,
        version,
        main_process,
    })
}

/// Builds the image; `progress` gets one line per step.
pub async fn build(opts: &BuildOptions, progress: &dyn Fn(&str)) -> Result<Built, ComputerError> {
    let agent = agent(opts.binary.as_deref(), progress).await?;
    let packages_text = match &opts.packages_file {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| ComputerError::Invalid(format!("package list {}: {e}", p.display())))?,
        None => opts.recipe.packages.to_string(),
    };
    let recipe = Recipe::new(
        opts.suite
            .clone()
            .or_else(|| Some(opts.recipe.suite.to_string())),
        &opts.mirror,
        &opts.security_mirror,
        opts.updates,
        &packages_text,
    )?;
    // Before the slow steps: a lock that cannot be read or parsed, or --locked with nothing
    // to compare with, is known at once.
    let expected = expected_lock(opts)?;
    let provider = Provider::connect_to(opts.engine).await?;
    let root = rootfs::ensure(&recipe, &opts.cache_dir, opts.fresh, progress).await?;
    let lock = std::fs::read_to_string(&root.lock_file)
        .map_err(|e| ComputerError::Io(format!("reading {}: {e}", root.lock_file.display())))?;
    within_closure(&root, &recipe.packages)?;
    compare_lock(opts, expected, &lock, progress)?;
    let recipe_digest = recipe.digest(&lock);

    let base_label = format!("{}-{}", recipe.key(), root.build_id);
    let (base_id, reused_base) = match find_base(&provider, labels::BASE, &base_label).await? {
        Some(id) => (id, true),
        None => {
            progress("importing the root filesystem into Docker");
            (
                import_rootfs(&provider, &root.dir, &base_label, &recipe_digest).await?,
                false,
            )
        }
    };
    progress("adding the guest agent layer");
    let layer = layer_tar(&root.dir, &agent.data, &lock, &opts.recipe)?;
    let image_id = commit_layer(
        &provider,
        &base_id,
        layer,
        &agent,
        &Recorded {
            recipe: &recipe_digest,
            lock: &lock,
        },
        &opts.recipe,
    )
    .await?;
    if let Some(tag) = &opts.tag {
        let (repo, t) = split_tag(tag);
        let o = TagImageOptionsBuilder::new().repo(repo).tag(t).build();
        provider.docker().tag_image(&image_id, Some(o)).await?;
    }
    if opts.recipe.server {
        server_runs(&provider, &image_id, progress).await?;
    } else if !agent.is_static {
        runs_in_image(&provider, &image_id, progress).await?;
    }
    Ok(Built {
        image_id,
        base_id,
        yy_version: agent.version,
        recipe: recipe_digest,
        binary_sha256: agent.sha256,
        packages: lock.lines().count(),
        recipe_name: opts.recipe.name.to_string(),
        rootfs: root.dir,
        reused_rootfs: root.reused,
        reused_base,
    })
}

/// Refuses a root filesystem with a package that neither the recipe's list, minbase nor
/// their dependencies (before or after the updates) account for, whatever the lock says.
fn within_closure(root: &rootfs::Rootfs, packages: &[String]) -> Result<(), ComputerError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| ComputerError::Io(format!("reading {}: {e}", path.display())))
    };
    let now = dpkg_status::parse(&read(&root.dir.join("var/lib/dpkg/status"))?);
    let before = dpkg_status::parse(&read(&root.point_status)?);
    let extra = dpkg_status::outside_closure(&now, &before, packages);
    if extra.is_empty() {
        return Ok(());
    }
    Err(ComputerError::Lock(format!(
        "the root filesystem {} has {} that the recipe neither lists nor depends on: {}; rebuild it with --fresh",
        root.dir.display(),
        plural(extra.len(), "package", "packages"),
        extra.join(", ")
    )))
}

/// The lock a build compares with and where it comes from: the lock file when it exists,
/// else the recipe's built-in lock unless the package list was overridden.
fn expected_lock(
    opts: &BuildOptions,
) -> Result<Option<(package_lock::Lock, String)>, ComputerError> {
    let (text, source) = match &opts.lock_out {
        Some(p) if p.exists() => (
            std::fs::read_to_string(p)
                .map_err(|e| ComputerError::Io(format!("reading {}: {e}", p.display())))?,
            p.display().to_string(),
        ),
        None if opts.packages_file.is_none() => (
            opts.recipe.lock.to_string(),
            format!("the lock of the {} recipe built into yy", opts.recipe.name),
        ),
        missing => {
            if opts.locked {
                return Err(ComputerError::Invalid(match missing {
                    Some(p) => format!(
                        "--locked needs a lock to compare with, and {} does not exist; build once without --locked to write it",
                        p.display()
                    ),
                    None => "--locked needs a lock to compare with: pass --lock FILE".into(),
                }));
            }
            return Ok(None);
        }
    };
    Ok(Some((package_lock::parse_lock(&text)?, source)))
}

/// Tells how the installed packages differ from the expected lock, one line per kind;
/// `--locked` refuses any difference. The lock file is written when it is missing, or
/// rewritten when `--update-lock` is given and it differs.
fn compare_lock(
    opts: &BuildOptions,
    expected: Option<(package_lock::Lock, String)>,
    lock: &str,
    progress: &dyn Fn(&str),
) -> Result<(), ComputerError> {
    let Some((want, source)) = expected else {
        if let Some(out) = &opts.lock_out {
            write_lock(out, lock, progress)?;
        }
        return Ok(());
    };
    let got = package_lock::parse_lock(lock)?;
    let changes = package_lock::changes(&want, &got);
    if opts.locked {
        package_lock::require_same(&changes, &source)?;
    }
    let lines = package_lock::summary(&changes, &source);
    if lines.is_empty() {
        progress(&format!("{} packages, as in {source}", got.len()));
    }
    for line in &lines {
        progress(&format!("note: {line}"));
    }
    if let Some(out) = &opts.lock_out
        && opts.update_lock
        && !changes.is_empty()
    {
        write_lock(out, lock, progress)?;
    }
    Ok(())
}

fn write_lock(out: &Path, lock: &str, progress: &dyn Fn(&str)) -> Result<(), ComputerError> {
    crate::fsutil::write_atomic(out, lock.as_bytes(), 0o644)
        .map_err(|e| ComputerError::Io(format!("writing {}: {e}", out.display())))?;
    progress(&format!("wrote the package lock {}", out.display()));
    Ok(())
}

/// Verifies a new image whose guest agent is dynamically linked (the agent starting in a
/// hardened computer is part of it); a failing image is removed again, and the error
/// gives the cheapest fix first.
async fn runs_in_image(
    provider: &Provider,
    image_id: &str,
    progress: &dyn Fn(&str),
) -> Result<(), ComputerError> {
    progress("checking the image (yy image verify)");
    let report = super::image_verify::verify_image(provider, image_id).await?;
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{} (got {})", c.name, c.got))
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    let _ = super::image_rm::remove(provider, image_id).await;
    Err(ComputerError::Invalid(format!(
        "the image did not pass its checks with a dynamically linked yy ({}): pass --suite with this host's Debian release so the image has its glibc, or {STATIC_BUILD_HINT}",
        failed.join("; ")
    )))
}

/// The server image's `yy --version` runs as its user on a read-only root filesystem
/// without network; an image where it does not is removed.
async fn server_runs(
    provider: &Provider,
    image_id: &str,
    progress: &dyn Fn(&str),
) -> Result<(), ComputerError> {
    progress("checking that yy runs in the server image");
    let docker = provider.docker();
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(image_id.into()),
                cmd: Some(vec!["--version".into()]),
                host_config: Some(bollard::models::HostConfig {
                    readonly_rootfs: Some(true),
                    network_mode: Some("none".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await?
        .id;
    let ran = async {
        docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await?;
        let waited: Result<Vec<_>, _> = docker
            .wait_container(&id, None::<bollard::query_parameters::WaitContainerOptions>)
            .try_collect()
            .await;
        Ok::<_, ComputerError>(matches!(waited.as_deref(), Ok([w]) if w.status_code == 0))
    }
    .await;
    let _ = provider.remove(&id).await;
    if ran? {
        return Ok(());
    }
    let _ = super::image_rm::remove(provider, image_id).await;
    Err(ComputerError::Invalid(format!(
        "yy --version did not run in the server image: pass --suite with this host's Debian release so the image has its glibc, or {STATIC_BUILD_HINT}"
    )))
}

/// `repo:tag` (a colon after the last slash), else `repo` with tag `latest`.
pub fn split_tag(tag: &str) -> (&str, &str) {
    match tag.rfind(':') {
        Some(i) if !tag[i..].contains('/') => (&tag[..i], &tag[i + 1..]),
        _ => (tag, "latest"),
    }
}

/// The newest base image (imported root filesystem) carrying `key=value`. Final images
/// inherit the base's labels, so they are told apart by their `yy.version`.
async fn find_base(
    provider: &Provider,
    key: &str,
    value: &str,
) -> Result<Option<String>, ComputerError> {
    let filters: HashMap<&str, Vec<String>> =
        HashMap::from([("label", vec![format!("{key}={value}")])]);
    let opts = ListImagesOptionsBuilder::new().filters(&filters).build();
    let list = provider.docker().list_images(Some(opts)).await?;
    Ok(list
        .into_iter()
        .filter(|i| !i.labels.contains_key(labels::VERSION))
        .max_by_key(|i| i.created)
        .map(|i| i.id))
}

/// Streams `tar` of the root filesystem into `POST /images/create?fromSrc=-`.
async fn import_rootfs(
    provider: &Provider,
    dir: &Path,
    base_label: &str,
    recipe: &str,
) -> Result<String, ComputerError> {
    let mut child = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(dir)
        .args(["--numeric-owner", "--sort=name", "-c", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ComputerError::Io(format!("cannot run tar: {e}")))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let body = futures_util::stream::unfold(stdout, |mut r| async move {
        let mut buf = vec![0u8; 1 << 20];
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), r))
            }
            Err(e) => Some((Err(e), r)),
        }
    });
    let (repo, tag) = ("yy-base", &base_label[..base_label.len().min(40)]);
    let opts = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(import_changes(provider, base_label, recipe))
        .build();
    let infos: Vec<_> = provider
        .docker()
        .create_image(Some(opts), Some(bollard::body_try_stream(body)), None)
        .try_collect()
        .await?;
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| ComputerError::Io(format!("tar: {e}")))?;
    if !out.status.success() {
        return Err(ComputerError::Io(format!(
            "tar of {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    infos
        .iter()
        .rev()
        .filter_map(|i| i.status.as_deref())
        .find(|s| s.starts_with("sha256:"))
        .map(str::to_string)
        .ok_or_else(|| ComputerError::Docker("the import did not report an image ID".into()))
}

/// Firefox ESR policies of the desktop image: no updates, telemetry or first-run pages
/// (the image is immutable and the guest has no network unless the proxy is on), and the
/// system proxy, locked: on a `public-web` computer that is the egress proxy its commands
/// use (Firefox reads `http_proxy`/`https_proxy`/`no_proxy` when no desktop settings exist).
const FIREFOX_POLICIES: &str = r#"{
  "policies": {
    "Proxy": {"Mode": "system", "Locked": true},
    "DisableAppUpdate": true,
    "DisableTelemetry": true,
    "DisableFirefoxStudies": true,
    "DontCheckDefaultBrowser": true,
    "OverrideFirstRunPage": "",
    "OverridePostUpdatePage": "",
    "NoDefaultBookmarks": true,
    "UserMessaging": {"WhatsNew": false, "ExtensionRecommendations": false, "FeatureRecommendations": false, "UrlbarInterventions": false, "SkipOnboarding": true, "MoreFromMozilla": false}
  }
}
"#;

/// The top layer: accounts with user `yy` (1000), its home, the guest agent, the package
/// lock (and, on a desktop, the browser's policies).
fn layer_tar(
    rootfs: &Path,
    binary: &[u8],
    lock: &str,
    recipe: &BuiltinRecipe,
) -> Result<Vec<u8>, ComputerError> {
    let read = |rel: &str| {
        std::fs::read_to_string(rootfs.join(rel))
            .map_err(|e| ComputerError::Io(format!("reading {rel} of the root filesystem: {e}")))
    };
    let days = crate::timefmt::now_ms() / 86_400_000;
    let mut passwd = read("etc/passwd")?;
    let mut group = read("etc/group")?;
    let mut shadow = read("etc/shadow")?;
    let mut gshadow = read("etc/gshadow")?;
    if !passwd.lines().any(|l| l.starts_with("yy:")) {
        if passwd.lines().any(|l| l.split(':').nth(2) == Some("1000")) {
            return Err(ComputerError::Invalid(
                "the root filesystem already has a user with uid 1000".into(),
            ));
        }
        passwd.push_str(&format!(
            "yy:x:{GUEST_UID}:{GUEST_UID}:yy computer user:{GUEST_HOME}:/bin/bash\n"
        ));
        group.push_str(&format!("yy:x:{GUEST_UID}:\n"));
        shadow.push_str(&format!("yy:!:{days}:0:99999:7:::\n"));
        gshadow.push_str("yy:!::\n");
    }
    // The guest agent's own identity (it needs no entry to work; this names it in `ps`).
    if !passwd.lines().any(|l| l.starts_with("yy-guest:")) {
        let a = super::GUEST_AGENT_UID;
        passwd.push_str(&format!(
            "yy-guest:x:{a}:{a}:yy guest agent:/nonexistent:/usr/sbin/nologin\n"
        ));
        group.push_str(&format!("yy-guest:x:{a}:\n"));
        shadow.push_str(&format!("yy-guest:!:{days}:0:99999:7:::\n"));
        gshadow.push_str("yy-guest:!::\n");
    }
    let io = |e: std::io::Error| ComputerError::Io(format!("building the layer: {e}"));
    let mut t = TarBuilder::new((crate::timefmt::now_ms() / 1000) as u64);
    t.file("etc/passwd", 0o644, 0, 0, passwd.as_bytes())
        .map_err(io)?;
    t.file("etc/group", 0o644, 0, 0, group.as_bytes())
        .map_err(io)?;
    t.file("etc/shadow", 0o640, 0, 42, shadow.as_bytes())
        .map_err(io)?;
    t.file("etc/gshadow", 0o640, 0, 42, gshadow.as_bytes())
        .map_err(io)?;
    let home = GUEST_HOME.trim_start_matches('/');
    t.dir(home, 0o750, GUEST_UID, GUEST_UID).map_err(io)?;
    if let Ok(entries) = std::fs::read_dir(rootfs.join("etc/skel")) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                let data = std::fs::read(e.path()).map_err(io)?;
                let name = format!("{home}/{}", e.file_name().to_string_lossy());
                t.file(&name, 0o644, GUEST_UID, GUEST_UID, &data)
                    .map_err(io)?;
            }
        }
    }
    if recipe.server {
        // The control plane's volume: a new volume takes this owner and mode.
        t.dir("var/lib", 0o755, 0, 0).map_err(io)?;
        t.dir(
            SERVER_VOLUME.trim_start_matches('/'),
            0o700,
            GUEST_UID,
            GUEST_UID,
        )
        .map_err(io)?;
    }
    if recipe.desktop {
        let dist = "usr/lib/firefox-esr/distribution";
        t.dir(dist, 0o755, 0, 0).map_err(io)?;
        t.file(
            &format!("{dist}/policies.json"),
            0o644,
            0,
            0,
            FIREFOX_POLICIES.as_bytes(),
        )
        .map_err(io)?;
    }
    let lock_path = PACKAGE_LOCK_PATH.trim_start_matches('/');
    if let Some((dir, _)) = lock_path.rsplit_once('/') {
        t.dir(dir, 0o755, 0, 0).map_err(io)?;
    }
    t.file(lock_path, 0o644, 0, 0, lock.as_bytes())
        .map_err(io)?;
    t.dir("usr/local/bin", 0o755, 0, 0).map_err(io)?;
    t.file(GUEST_BINARY.trim_start_matches('/'), 0o755, 0, 0, binary)
        .map_err(io)?;
    Ok(t.finish())
}

/// The server image's volume. The data directory lies inside it, not at its root: the
/// lock that keeps a restore and a server apart sits beside the data directory, and the
/// root filesystem around the volume is read-only.
pub const SERVER_VOLUME: &str = "/var/lib/yy";
/// The server image's data directory.
pub const SERVER_DATA_DIR: &str = "/var/lib/yy/data";
/// The server image's default arguments: HTTPS with its own certificate on every address
/// of the container (the fingerprint is in its log).
const SERVER_CMD: &str = r#"["serve", "--listen", "0.0.0.0:8420", "--data-dir", "/var/lib/yy/data", "--tls", "self-signed"]"#;

/// What an image's labels record of its making besides the guest agent.
struct Recorded<'a> {
    /// The `yy.recipe` digest.
    recipe: &'a str,
    /// The installed packages (`yy.packages`).
    lock: &'a str,
}

/// The import's labels. Podman takes the import's `changes` as one instruction (bollard
/// sends them joined by newlines), so there the base gets only its `yy.base` label (the
/// images built on it carry their own `yy.recipe`).
fn import_changes(provider: &Provider, base_label: &str, recipe: &str) -> Vec<String> {
    let mut changes = vec![format!("LABEL {}={base_label}", labels::BASE)];
    if provider.engine().engine == super::engine::Engine::Docker {
        changes.push(format!("LABEL {}={recipe}", labels::RECIPE));
    }
    changes
}

async fn commit_layer(
    provider: &Provider,
    base_id: &str,
    layer: Vec<u8>,
    agent: &Agent,
    recorded: &Recorded<'_>,
    builtin: &BuiltinRecipe,
) -> Result<String, ComputerError> {
    let recipe = recorded.recipe;
    let docker = provider.docker();
    let helper = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(base_id.into()),
                cmd: Some(vec!["/bin/true".into()]),
                ..Default::default()
            },
        )
        .await?
        .id;
    let result = async {
        let o = UploadToContainerOptionsBuilder::new().path("/").build();
        docker
            .upload_to_container(&helper, Some(o), bollard::body_full(Bytes::from(layer)))
            .await?;
        let mut changes = vec![
            format!("USER {}", super::GUEST_USER),
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "ENV LANG=C.UTF-8".into(),
        ];
        if builtin.server {
            changes.extend([
                format!("WORKDIR {SERVER_VOLUME}"),
                format!("ENV HOME={SERVER_VOLUME}"),
                format!("ENV YY_DATA_DIR={SERVER_DATA_DIR}"),
                format!(r#"ENTRYPOINT ["{GUEST_BINARY}"]"#),
                format!(r#"CMD {SERVER_CMD}"#),
                format!(r#"VOLUME ["{SERVER_VOLUME}"]"#),
                "EXPOSE 8420".into(),
            ]);
        } else {
            changes.extend([
                format!("WORKDIR {GUEST_HOME}"),
                format!("ENV HOME={GUEST_HOME}"),
                r#"CMD ["sleep", "infinity"]"#.into(),
            ]);
        }
        changes.extend([
            // One label a line: Podman reads `LABEL a="x" b="y"` as one label `a`.
            format!("LABEL {}=\"{}\"", labels::VERSION, agent.version),
            format!("LABEL {}=\"{recipe}\"", labels::RECIPE),
            format!("LABEL {}=\"{}\"", labels::BINARY, agent.sha256),
            format!("LABEL {}=\"{}\"", labels::RECIPE_NAME, builtin.name),
            format!(
                "LABEL {}=\"{}\"",
                labels::PACKAGES,
                package_lock::to_label(recorded.lock)
            ),
        ]);
        if agent.main_process && !builtin.server {
            changes.push(format!("LABEL {}=\"1\"", labels::GUEST_MAIN_PROCESS));
        }
        if builtin.desktop {
            // Commands the agent runs find the display the guest agent starts.
            changes.push(format!("ENV DISPLAY={}", super::screen::DISPLAY));
        }
        let changes = changes.join("\n");
        let o = CommitContainerOptionsBuilder::new()
            .container(&helper)
            .changes(&changes)
            .pause(false)
            .build();
        let id = docker
            .commit_container(o, ContainerConfig::default())
            .await?
            .id;
        Ok::<_, ComputerError>(super::engine::full_image_id(&id))
    }
    .await;
    let _ = provider.remove(&helper).await;
    result
}

/// yy images on this engine (those carrying `yy.version`), newest first.
pub async fn list(provider: &Provider) -> Result<Vec<ImageRow>, ComputerError> {
    let filters: HashMap<&str, Vec<String>> =
        HashMap::from([("label", vec![labels::VERSION.to_string()])]);
    let opts = ListImagesOptionsBuilder::new().filters(&filters).build();
    let mut list = provider.docker().list_images(Some(opts)).await?;
    list.sort_by_key(|i| std::cmp::Reverse(i.created));
    let label =
        |l: &HashMap<String, String>, k: &str| l.get(k).cloned().unwrap_or_else(|| "-".into());
    Ok(list
        .into_iter()
        .map(|i| ImageRow {
            created: crate::timefmt::rfc3339(i.created * 1000),
            yy_version: label(&i.labels, labels::VERSION),
            recipe: label(&i.labels, labels::RECIPE),
            binary: label(&i.labels, labels::BINARY),
            tags: i
                .repo_tags
                .into_iter()
                .filter(|t| t != "<none>:<none>")
                .collect(),
            id: i.id,
        })
        .collect())
}

/// The labels of `image`, or not found (naming the engine) when the engine does not have it.
pub async fn image_labels(
    provider: &Provider,
    image: &str,
) -> Result<HashMap<String, String>, ComputerError> {
    let inspect = provider
        .docker()
        .inspect_image(image)
        .await
        .map_err(|e| provider.image_error(image, e))?;
    Ok(inspect.config.and_then(|c| c.labels).unwrap_or_default())
}

/// The recorded lock of an image with these labels, if it has one.
pub fn recorded_lock(
    labels: &HashMap<String, String>,
) -> Result<Option<package_lock::Lock>, ComputerError> {
    labels
        .get(labels::PACKAGES)
        .map(|l| package_lock::parse_lock(&package_lock::from_label(l)))
        .transpose()
}

/// What `yy image show` tells of one listed image.
pub async fn details(provider: &Provider, row: &ImageRow) -> Result<ImageDetails, ComputerError> {
    let labels = image_labels(provider, &row.id).await?;
    Ok(ImageDetails {
        recipe_name: labels
            .get(labels::RECIPE_NAME)
            .cloned()
            .unwrap_or_else(|| "-".into()),
        packages: recorded_lock(&labels)?,
        row: row.clone(),
    })
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn the_browser_uses_the_system_proxy_and_cannot_change_it() {
        let p: serde_json::Value = serde_json::from_str(FIREFOX_POLICIES).unwrap();
        assert_eq!(p["policies"]["Proxy"]["Mode"], "system");
        assert_eq!(p["policies"]["Proxy"]["Locked"], true);
        assert_eq!(p["policies"]["DisableAppUpdate"], true);
    }
}
