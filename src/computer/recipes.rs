//! The image recipes shipped with yy (`images/<name>/`) and their package locks.
//!
//! A recipe pins its Debian suite and lists packages; its lock (`packages.lock`) records
//! every installed package as `name=version sha256`, the SHA-256 being that of the `.deb`
//! file that was installed (debootstrap and apt check those against the signed archive
//! index). A build compares what it installed with the lock and refuses any difference
//! unless told to update the lock.

use std::collections::BTreeMap;

use super::ComputerError;

/// One recipe built into yy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinRecipe {
    pub name: &'static str,
    /// The Debian suite, pinned so a build does not depend on the build host's release.
    pub suite: &'static str,
    pub packages: &'static str,
    pub lock: &'static str,
    /// Has a display (Xvfb), a window manager and a browser.
    pub desktop: bool,
}

pub const BASE: BuiltinRecipe = BuiltinRecipe {
    name: "base",
    suite: "bookworm",
    packages: include_str!("../../images/base/packages.txt"),
    lock: include_str!("../../images/base/packages.lock"),
    desktop: false,
};

pub const DESKTOP: BuiltinRecipe = BuiltinRecipe {
    name: "desktop",
    suite: "bookworm",
    packages: include_str!("../../images/desktop/packages.txt"),
    lock: include_str!("../../images/desktop/packages.lock"),
    desktop: true,
};

pub const ALL: [BuiltinRecipe; 2] = [BASE, DESKTOP];

/// The recipe called `name`.
pub fn builtin(name: &str) -> Result<BuiltinRecipe, ComputerError> {
    ALL.iter().copied().find(|r| r.name == name).ok_or_else(|| {
        ComputerError::Invalid(format!(
            "there is no recipe {name:?}; the recipes are {}",
            ALL.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// One locked package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locked {
    pub version: String,
    /// 64 hex digits; empty in an old lock that recorded versions only.
    pub sha256: String,
}

/// A parsed lock: package name to version and digest.
pub type Lock = BTreeMap<String, Locked>;

/// Parses `name=version sha256` lines (a missing digest is tolerated for old locks).
pub fn parse_lock(text: &str) -> Result<Lock, ComputerError> {
    let mut out = Lock::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || ComputerError::Invalid(format!("package lock line {}: {line:?}", n + 1));
        let (pkg, rest) = line.split_once(' ').unwrap_or((line, ""));
        let (name, version) = pkg.split_once('=').ok_or_else(bad)?;
        let sha256 = rest.trim();
        if name.is_empty()
            || version.is_empty()
            || !(sha256.is_empty()
                || sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(bad());
        }
        out.insert(
            name.to_string(),
            Locked {
                version: version.to_string(),
                sha256: sha256.to_ascii_lowercase(),
            },
        );
    }
    Ok(out)
}

/// Differences between the lock a build expects and what it installed, one per line:
/// `+ name=version` (new), `- name=version` (gone), `~ name a -> b` (version or digest).
pub fn lock_diff(expected: &Lock, got: &Lock) -> Vec<String> {
    let mut out = Vec::new();
    for (name, want) in expected {
        match got.get(name) {
            None => out.push(format!("- {name}={}", want.version)),
            Some(have) if have.version != want.version => {
                out.push(format!("~ {name} {} -> {}", want.version, have.version))
            }
            Some(have) if have.sha256 != want.sha256 => out.push(format!(
                "~ {name}={} sha256 {} -> {}",
                have.version,
                short(&want.sha256),
                short(&have.sha256)
            )),
            Some(_) => {}
        }
    }
    for (name, have) in got {
        if !expected.contains_key(name) {
            out.push(format!("+ {name}={}", have.version));
        }
    }
    out
}

fn short(h: &str) -> &str {
    if h.is_empty() {
        "(none)"
    } else {
        &h[..h.len().min(12)]
    }
}

/// Checks a build's lock against the expected one; the error lists the first differences.
pub fn check_lock(expected_text: &str, got_text: &str, source: &str) -> Result<(), ComputerError> {
    let expected = parse_lock(expected_text)?;
    let got = parse_lock(got_text)?;
    let diff = lock_diff(&expected, &got);
    if diff.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = diff.iter().take(6).map(String::as_str).collect();
    Err(ComputerError::Io(format!(
        "the installed packages differ from the lock {source} in {} place(s): {}{}; if the change is expected (e.g. a Debian security update), rebuild with --update-lock",
        diff.len(),
        shown.join(", "),
        if diff.len() > shown.len() {
            ", ..."
        } else {
            ""
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn builtin_recipes_pin_a_suite_and_have_hashed_locks() {
        for r in ALL {
            assert_eq!(r.suite, "bookworm");
            let lock = parse_lock(r.lock).unwrap();
            assert!(lock.len() > 50, "{}: {} packages", r.name, lock.len());
            assert!(
                lock.values().all(|l| l.sha256.len() == 64),
                "{} lock lacks digests",
                r.name
            );
            for p in super::super::rootfs::parse_packages(r.packages).unwrap() {
                assert!(lock.contains_key(&p), "{}: {p} not locked", r.name);
            }
        }
        const { assert!(DESKTOP.desktop && !BASE.desktop) };
        assert_eq!(builtin("desktop").unwrap(), DESKTOP);
        let e = builtin("kde").unwrap_err().to_string();
        assert!(e.contains("base, desktop"), "{e}");
    }

    #[test]
    fn locks_are_compared_by_version_and_digest() {
        let a = format!("a=1 {H1}\nb=2 {H1}\n");
        check_lock(&a, &a, "x").unwrap();
        let changed = format!("a=1 {H2}\nb=3 {H1}\nc=1 {H1}\n");
        let diff = lock_diff(&parse_lock(&a).unwrap(), &parse_lock(&changed).unwrap());
        assert_eq!(
            diff,
            vec![
                "~ a=1 sha256 111111111111 -> 222222222222",
                "~ b 2 -> 3",
                "+ c=1"
            ]
        );
        let e = check_lock(&a, &changed, "images/x/packages.lock")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 place(s)") && e.contains("--update-lock"),
            "{e}"
        );
        assert!(parse_lock("a=1 nothex\n").is_err());
        assert!(parse_lock("novers\n").is_err());
        assert_eq!(parse_lock("a=1\n").unwrap()["a"].sha256, "");
    }
}
