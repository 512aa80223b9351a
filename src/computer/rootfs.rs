//! The computer's root filesystem from Debian packages (debootstrap), cached by recipe.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};

use super::ComputerError;

/// What decides the root filesystem's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    pub suite: String,
    pub mirror: String,
    pub security_mirror: String,
    pub updates: bool,
    pub packages: Vec<String>,
}

/// The cached root filesystem for a recipe.
#[derive(Debug, Clone)]
pub struct Rootfs {
    pub dir: PathBuf,
    /// `name=version sha256` per installed package, sorted.
    pub lock_file: PathBuf,
    /// The dpkg status as debootstrap left it, before `SUITE-updates` and `SUITE-security`
    /// (what the point release's packages depended on).
    pub point_status: PathBuf,
    /// Unique per debootstrap run (a new run means a new base image).
    pub build_id: String,
    pub reused: bool,
}

fn host_codename() -> Option<String> {
    let text = fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// Package names from a list: one per line, `#` starts a comment.
pub fn parse_packages(text: &str) -> Result<Vec<String>, ComputerError> {
    let mut out = Vec::new();
    for line in text.lines() {
        let name = line.split('#').next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        let ok = name.len() >= 2
            && name
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'+' | b'-' | b'.'))
            && name.as_bytes()[0].is_ascii_alphanumeric();
        if !ok {
            return Err(ComputerError::Invalid(format!(
                "{name:?} in the package list is not a Debian package name"
            )));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

impl Recipe {
    pub fn new(
        suite: Option<String>,
        mirror: &str,
        security_mirror: &str,
        updates: bool,
        packages_text: &str,
    ) -> Result<Recipe, ComputerError> {
        let suite = suite
            .or_else(host_codename)
            .unwrap_or_else(|| "bookworm".into());
        if suite.is_empty()
            || !suite
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ComputerError::Invalid(format!(
                "{suite:?} is not a Debian suite name"
            )));
        }
        for m in [mirror, security_mirror] {
            let ok = (m.starts_with("http://") || m.starts_with("https://"))
                && url::Url::parse(m).is_ok()
                && !m.contains(char::is_whitespace);
            if !ok {
                return Err(ComputerError::Invalid(format!(
                    "mirror {m:?} must be an http:// or https:// URL"
                )));
            }
        }
        Ok(Recipe {
            suite,
            mirror: mirror.trim_end_matches('/').to_string(),
            security_mirror: security_mirror.trim_end_matches('/').to_string(),
            updates,
            packages: parse_packages(packages_text)?,
        })
    }

    fn canonical(&self) -> String {
        format!(
            "yy-rootfs-v3\nsuite={}\nmirror={}\nupdates={}\nsecurity_mirror={}\npackages={}\n",
            self.suite,
            self.mirror,
            self.updates,
            if self.updates {
                self.security_mirror.as_str()
            } else {
                "-"
            },
            self.packages.join(",")
        )
    }

    /// 16 hex digits naming the cached root filesystem.
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(self.canonical().as_bytes()))[..16].to_string()
    }

    /// The `yy.recipe` label: the inputs and the resulting package lock.
    pub fn digest(&self, lock: &str) -> String {
        let text = format!("{}lock:\n{lock}", self.canonical());
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
    }
}

/// An exclusive lock on the cache directory for the life of the value.
struct CacheLock(#[allow(dead_code)] fs::File);

/// Takes the lock; with `wait` false, `None` when another builder holds it.
fn lock_cache(dir: &Path, wait: bool) -> io::Result<Option<CacheLock>> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".rootfs.flock"))?;
    if wait {
        // Blocks until the other builder is done.
        f.lock()?;
    } else {
        match f.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(Some(CacheLock(f)))
}

/// Returns the cached root filesystem of `recipe`, building it first if needed.
pub async fn ensure(
    recipe: &Recipe,
    cache_dir: &Path,
    fresh: bool,
    progress: &dyn Fn(&str),
) -> Result<Rootfs, ComputerError> {
    let io_err = |what: &str, e: io::Error| ComputerError::Io(format!("{what}: {e}"));
    fs::create_dir_all(cache_dir).map_err(|e| io_err(&cache_dir.display().to_string(), e))?;
    let _lock = match lock_cache(cache_dir, false)
        .map_err(|e| io_err("locking the rootfs cache", e))?
    {
        Some(lock) => lock,
        None => {
            // Waiting is never silent: another build holds the cache.
            progress(&format!(
                "waiting for another yy image build, which holds the lock on {}; Ctrl-C stops this one",
                cache_dir.join(".rootfs.flock").display()
            ));
            let owned = cache_dir.to_path_buf();
            tokio::task::spawn_blocking(move || lock_cache(&owned, true))
                .await
                .map_err(|e| ComputerError::Io(e.to_string()))?
                .map_err(|e| io_err("locking the rootfs cache", e))?
                .ok_or_else(|| ComputerError::Io("the rootfs cache lock was not taken".into()))?
        }
    };
    let key = recipe.key();
    let dir = cache_dir.join(format!("rootfs-{key}"));
    let done = cache_dir.join(format!("rootfs-{key}.done"));
    let lock_file = cache_dir.join(format!("rootfs-{key}.packages.lock"));
    let point_status = cache_dir.join(format!("rootfs-{key}.point-status"));
    if !fresh
        && dir.is_dir()
        && lock_file.is_file()
        && point_status.is_file()
        && let Ok(build_id) = fs::read_to_string(&done)
    {
        // A cached root filesystem keeps the packages of the day it was built.
        let age = fs::metadata(&done)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .map_or_else(String::new, |a| match a.as_secs() / 86_400 {
                0 => " built today;".to_string(),
                1 => " built yesterday;".to_string(),
                days => format!(" built {days} days ago;"),
            });
        progress(&format!(
            "reusing the root filesystem {}{age} --fresh installs the suite's current packages",
            dir.display()
        ));
        return Ok(Rootfs {
            dir,
            lock_file,
            point_status,
            build_id: build_id.trim().to_string(),
            reused: true,
        });
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(ComputerError::Io(
            "building the root filesystem needs root (debootstrap, chroot, file ownership); run yy image build as root".into(),
        ));
    }
    let partial = cache_dir.join(format!("rootfs-{key}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(|e| io_err("removing an old partial rootfs", e))?;
    }
    let _ = fs::remove_file(&done);
    progress(&format!(
        "debootstrap {} from {} (minbase + {} packages; about a minute)",
        recipe.suite,
        recipe.mirror,
        recipe.packages.len()
    ));
    let mut args = vec![
        "--variant=minbase".to_string(),
        "--components=main".to_string(),
        format!("--include={}", recipe.packages.join(",")),
    ];
    let keyring = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
    if keyring.is_file() {
        args.push(format!("--keyring={}", keyring.display()));
    }
    args.push(recipe.suite.clone());
    args.push(partial.display().to_string());
    args.push(recipe.mirror.clone());
    run(
        "debootstrap",
        &args,
        "is debootstrap installed? run scripts/install-docker.sh",
    )
    .await?;
    let status = partial.join("var/lib/dpkg/status");
    let before_updates = fs::read(&status).map_err(|e| io_err("reading the dpkg status", e))?;
    crate::fsutil::write_atomic(&point_status, &before_updates, 0o644)
        .map_err(|e| io_err(&point_status.display().to_string(), e))?;
    if recipe.updates {
        progress(&format!(
            "applying {0}-updates and {0}-security",
            recipe.suite
        ));
        let sources = format!(
            "deb {m} {s} main\ndeb {m} {s}-updates main\ndeb {sec} {s}-security main\n",
            m = recipe.mirror,
            s = recipe.suite,
            sec = recipe.security_mirror
        );
        fs::write(partial.join("etc/apt/sources.list"), sources)
            .map_err(|e| io_err("sources.list", e))?;
        let _ = fs::copy("/etc/resolv.conf", partial.join("etc/resolv.conf"));
        let script = "apt-get update -q && apt-get -y -q -o Dpkg::Use-Pty=0 upgrade";
        let chroot_args = [
            partial.display().to_string(),
            "/usr/bin/env".into(),
            "-i".into(),
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "DEBIAN_FRONTEND=noninteractive".into(),
            "sh".into(),
            "-c".into(),
            script.into(),
        ];
        run("chroot", &chroot_args, "applying updates failed").await?;
    }
    // Before slimming: the lock hashes the downloaded .deb files, which slimming removes.
    let lock = package_lock(&partial).await?;
    slim(&partial).map_err(|e| io_err("slimming the root filesystem", e))?;
    crate::fsutil::write_atomic(&lock_file, lock.as_bytes(), 0o644)
        .map_err(|e| io_err(&lock_file.display().to_string(), e))?;
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| io_err("replacing the cached rootfs", e))?;
    }
    fs::rename(&partial, &dir).map_err(|e| io_err("finishing the rootfs", e))?;
    let build_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    crate::fsutil::write_atomic(&done, build_id.as_bytes(), 0o644)
        .map_err(|e| io_err(&done.display().to_string(), e))?;
    progress(&format!(
        "{} packages in {}",
        lock.lines().count(),
        dir.display()
    ));
    Ok(Rootfs {
        dir,
        lock_file,
        point_status,
        build_id,
        reused: false,
    })
}

/// Runs a tool to completion; on failure the error carries the end of its output.
async fn run(program: &str, args: &[String], hint: &str) -> Result<(), ComputerError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| ComputerError::Io(format!("cannot run {program} ({e}); {hint}")))?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
    Err(ComputerError::Io(format!(
        "{program} failed ({}): {tail}",
        out.status
    )))
}

fn clear_dir(dir: &Path, keep: impl Fn(&Path) -> bool) -> io::Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let p = e?.path();
        if keep(&p) {
            continue;
        }
        if fs::symlink_metadata(&p)?.is_dir() {
            fs::remove_dir_all(&p)?;
        } else {
            fs::remove_file(&p)?;
        }
    }
    Ok(())
}

/// Removes docs except copyright files, then empty directories; true if `dir` is now empty.
fn prune_docs(dir: &Path) -> io::Result<bool> {
    let mut empty = true;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        let t = e.file_type()?;
        if t.is_dir() {
            if prune_docs(&p)? {
                fs::remove_dir(&p)?;
            } else {
                empty = false;
            }
        } else if e.file_name() == "copyright" {
            empty = false;
        } else {
            fs::remove_file(&p)?;
        }
    }
    Ok(empty)
}

/// Drops caches, logs, host identity and documentation (copyright files stay).
fn slim(root: &Path) -> io::Result<()> {
    let all = |_: &Path| false;
    for d in [
        "var/cache/apt/archives/partial",
        "var/lib/apt/lists",
        "var/log/apt",
        "tmp",
        "var/tmp",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "usr/share/lintian",
    ] {
        clear_dir(&root.join(d), all)?;
    }
    clear_dir(&root.join("var/cache/apt/archives"), |p| {
        p.extension().is_none_or(|e| e != "deb")
    })?;
    clear_dir(&root.join("var/cache/apt"), |p| {
        p.extension().is_none_or(|e| e != "bin")
    })?;
    clear_dir(&root.join("var/cache/debconf"), |p| {
        !p.to_string_lossy().ends_with("-old")
    })?;
    for f in [
        "var/log/dpkg.log",
        "var/log/bootstrap.log",
        "var/log/alternatives.log",
        "etc/machine-id",
        "var/lib/dbus/machine-id",
    ] {
        let _ = fs::remove_file(root.join(f));
    }
    fs::write(root.join("etc/hostname"), b"")?;
    fs::write(root.join("etc/resolv.conf"), b"")?;
    fs::create_dir_all(root.join("var/lib/apt/lists/partial"))?;
    let doc = root.join("usr/share/doc");
    if doc.is_dir() {
        prune_docs(&doc)?;
    }
    fs::create_dir_all(root.join("etc/dpkg/dpkg.cfg.d"))?;
    fs::write(
        root.join("etc/dpkg/dpkg.cfg.d/yy-slim"),
        "path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\n\
         path-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n\
         path-exclude /usr/share/locale/*\npath-exclude /usr/share/lintian/*\n",
    )
}

/// Installed packages as `name=version sha256`, sorted bytewise (C locale), one per line;
/// the digest is that of the `.deb` installed (left in var/cache/apt/archives by
/// debootstrap and apt-get, both of which check it against the signed archive index).
async fn package_lock(root: &Path) -> Result<String, ComputerError> {
    let out = tokio::process::Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args([
            "-W",
            "-f=${db:Status-Abbrev}${Package}=${Version} ${Architecture}\\n",
        ])
        .output()
        .await
        .map_err(|e| ComputerError::Io(format!("cannot run dpkg-query: {e}")))?;
    if !out.status.success() {
        return Err(ComputerError::Io(format!(
            "dpkg-query failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let listed = lock_lines(&String::from_utf8_lossy(&out.stdout));
    let archives = root.join("var/cache/apt/archives");
    tokio::task::spawn_blocking(move || hash_debs(&listed, &archives))
        .await
        .map_err(|e| ComputerError::Io(e.to_string()))?
}

/// Turns `name=version arch` lines into `name=version sha256` from the archive files.
fn hash_debs(listed: &str, archives: &Path) -> Result<String, ComputerError> {
    let mut out = String::new();
    for line in listed.lines() {
        let (pkg, arch) = line.split_once(' ').unwrap_or((line, ""));
        let (name, version) = pkg.split_once('=').unwrap_or((pkg, ""));
        let file = archives.join(deb_file_name(name, version, arch));
        let data = fs::read(&file).map_err(|e| {
            ComputerError::Io(format!(
                "cannot hash the installed package {pkg} ({}: {e}); rebuild with --fresh",
                file.display()
            ))
        })?;
        out.push_str(&format!("{pkg} {}\n", hex::encode(Sha256::digest(&data))));
    }
    Ok(out)
}

/// The archive file name apt and debootstrap give a package (the epoch colon escaped).
fn deb_file_name(name: &str, version: &str, arch: &str) -> String {
    format!("{name}_{}_{arch}.deb", version.replacen(':', "%3a", 1))
}

fn lock_lines(dpkg_output: &str) -> String {
    let mut lines: Vec<String> = dpkg_output
        .lines()
        .filter_map(|l| l.strip_prefix("ii "))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.dedup();
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_are_keyed_by_what_shapes_the_rootfs() {
        let r = Recipe::new(
            Some("bookworm".into()),
            "http://deb.debian.org/debian/",
            "http://deb.debian.org/debian-security",
            true,
            "# c\npython3\n git # vcs\n\n",
        )
        .unwrap();
        assert_eq!(r.packages, vec!["python3", "git"]);
        assert_eq!(r.mirror, "http://deb.debian.org/debian");
        let mut other = r.clone();
        other.packages.push("curl".into());
        assert_ne!(r.key(), other.key());
        assert_eq!(r.key().len(), 16);
        assert_ne!(r.digest("a=1\n"), r.digest("a=2\n"));
        assert!(r.digest("").starts_with("sha256:"));
        assert!(Recipe::new(Some("Bookworm!".into()), "http://x", "http://y", false, "").is_err());
        assert!(Recipe::new(None, "ftp://x", "http://y", false, "").is_err());
        assert!(parse_packages("bad name\n").is_err());
        assert!(parse_packages("../etc\n").is_err());
    }

    #[test]
    fn locks_keep_installed_packages_sorted() {
        let out = "ii bash=5.2\nrc gone=1\nii apt=2.6.1\nii  git=1:2.39\n";
        assert_eq!(lock_lines(out), "apt=2.6.1\nbash=5.2\ngit=1:2.39\n");
        assert_eq!(
            deb_file_name("git", "1:2.39.5-0+deb12u3", "amd64"),
            "git_1%3a2.39.5-0+deb12u3_amd64.deb"
        );
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a_1_all.deb"), b"x").unwrap();
        let lock = hash_debs("a=1 all\n", dir.path()).unwrap();
        assert_eq!(
            lock,
            "a=1 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881\n"
        );
        assert!(hash_debs("b=1 all\n", dir.path()).is_err());
    }
}
