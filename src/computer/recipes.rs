//! The image recipes shipped with yy (`images/<name>/`) and their package locks.
//!
//! A recipe pins its Debian suite and lists packages; its lock (`packages.lock`) records
//! every installed package as `name=version sha256`, the SHA-256 being that of the `.deb`
//! file that was installed (debootstrap and apt check those against the signed archive
//! index). A build reports how it differs from the lock (see [`super::package_lock`]).

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
    /// The control plane's image (`yy serve` as its non-root entrypoint), not a computer.
    pub server: bool,
}

pub const BASE: BuiltinRecipe = BuiltinRecipe {
    name: "base",
    suite: "bookworm",
    packages: include_str!("../../images/base/packages.txt"),
    lock: include_str!("../../images/base/packages.lock"),
    desktop: false,
    server: false,
};

pub const DESKTOP: BuiltinRecipe = BuiltinRecipe {
    name: "desktop",
    suite: "bookworm",
    packages: include_str!("../../images/desktop/packages.txt"),
    lock: include_str!("../../images/desktop/packages.lock"),
    desktop: true,
    server: false,
};

/// The control plane as a container: the base recipe's root filesystem (one cached
/// debootstrap serves both), `yy serve` as user `yy` with its data on a volume.
pub const SERVER: BuiltinRecipe = BuiltinRecipe {
    name: "server",
    server: true,
    ..BASE
};

pub const ALL: [BuiltinRecipe; 3] = [BASE, DESKTOP, SERVER];

/// The recipe called `name`.
pub fn builtin(name: &str) -> Result<BuiltinRecipe, ComputerError> {
    ALL.iter().copied().find(|r| r.name == name).ok_or_else(|| {
        ComputerError::Invalid(format!(
            "there is no recipe {name:?}; the recipes are {}",
            ALL.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_recipes_pin_a_suite_and_have_hashed_locks() {
        for r in ALL {
            assert_eq!(r.suite, "bookworm");
            let lock = super::super::package_lock::parse_lock(r.lock).unwrap();
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
        assert!(e.contains("base, desktop, server"), "{e}");
        assert!(SERVER.server && !SERVER.desktop && SERVER.packages == BASE.packages);
    }
}
