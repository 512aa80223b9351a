//! Package locks record, they do not pin (real dockerd, the cached test root filesystem): a
//! build against a lock made stale on purpose succeeds and names the package, `--locked`
//! refuses it with exit 6, `--update-lock` rewrites the lock, and the image records what
//! it was built with (`yy image show`, `yy image verify`). Nothing here depends on what
//! Debian published this week: the stale lock is made from the image's own record.

mod common;
mod computer_support;

use common::{BIN, Env};
use computer_support::{docker, test_image};

/// Removes the images a test built when it ends, however it ends.
struct Built(Vec<String>);

impl Drop for Built {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = docker(&["rmi", id]);
        }
    }
}

/// The lock text of a `yy image show --json` answer, `name=version sha256` sorted by name.
fn lock_text(shown: &serde_json::Value) -> String {
    let packages = shown["packages"]
        .as_object()
        .unwrap_or_else(|| panic!("no recorded packages: {shown:#}"));
    packages
        .iter()
        .map(|(name, p)| {
            format!(
                "{name}={} {}\n",
                p["version"].as_str().unwrap(),
                p["sha256"].as_str().unwrap()
            )
        })
        .collect()
}

/// Every image in the engine, sorted: the engine lists images created in the same second
/// in any order.
fn image_ids() -> std::collections::BTreeSet<String> {
    let listed = docker(&["image", "ls", "-q", "--no-trunc"]).stdout;
    String::from_utf8_lossy(&listed)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_stale_lock_is_named_by_default_and_refused_when_locked() {
    if !common::require_docker() {
        return;
    }
    let image = test_image();
    let env = Env::new();
    let shown = env.json(&["image", "show", &image.id]);
    assert_eq!(shown["id"], image.id.as_str(), "{shown:#}");
    assert_eq!(shown["recipe_name"], "base", "{shown:#}");
    let recorded = lock_text(&shown);
    assert!(recorded.lines().count() > 50, "{recorded}");
    // The table names every package too.
    let table = env.run(&["image", "show", &image.id[..19]]);
    assert_eq!(table.code, 0, "{table:#?}");
    assert!(table.stdout.contains("python3 "), "{}", table.stdout);

    // One package at a version older than any Debian ships: the lock is stale.
    let (name, version) = ["zlib1g", "bash"]
        .iter()
        .find_map(|n| {
            shown["packages"][*n]["version"]
                .as_str()
                .map(|v| (n.to_string(), v.to_string()))
        })
        .expect("the image records zlib1g or bash");
    let stale: String = recorded
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((pkg, digest)) if pkg == format!("{name}={version}") => {
                format!("{name}=0~stale {digest}\n")
            }
            _ => format!("{l}\n"),
        })
        .collect();
    assert_ne!(stale, recorded);
    let lock = env.path("stale.lock");
    std::fs::write(&lock, &stale).unwrap();
    let lock_arg = lock.to_str().unwrap();
    let mut built = Built(Vec::new());

    // Default: the build succeeds, says which package is newer, and leaves the lock alone.
    let out = env.run(&["image", "build", "--binary", BIN, "--lock", lock_arg]);
    assert_eq!(out.code, 0, "{out:#?}");
    let id = out.stdout.lines().last().unwrap_or_default().to_string();
    assert!(id.starts_with("sha256:") && id.len() == 71, "{out:#?}");
    built.0.push(id.clone());
    let said = format!("1 package newer than {lock_arg}: {name} 0~stale -> {version}");
    assert!(out.stderr.contains(&said), "no {said:?} in {}", out.stderr);
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), stale);
    // The new image records what it was built with, which dpkg in it confirms.
    let again = env.json(&["image", "show", &id]);
    assert_eq!(lock_text(&again), recorded);
    let verified = env.run(&["image", "verify", &id]);
    assert_eq!(verified.code, 0, "{verified:#?}");
    let line = verified
        .stdout
        .lines()
        .find(|l| l.contains("packages as recorded"))
        .unwrap_or_else(|| panic!("verify does not check the lock: {}", verified.stdout));
    assert!(line.starts_with("PASS"), "{line}");

    // --locked: any difference is refused with exit 6, naming the package; no image.
    let before = image_ids();
    let refused = env.run(&[
        "image", "build", "--binary", BIN, "--lock", lock_arg, "--locked",
    ]);
    let error = last_error(&refused, 6);
    assert!(error.contains(&format!("1 package ({name})")), "{error}");
    assert!(error.contains(&said), "{error}");
    assert_eq!(refused.stdout, "", "{refused:#?}");
    assert_eq!(image_ids(), before);

    // --update-lock takes what was installed; then --locked builds.
    let updated = env.run(&[
        "image",
        "build",
        "--binary",
        BIN,
        "--lock",
        lock_arg,
        "--update-lock",
    ]);
    assert_eq!(updated.code, 0, "{updated:#?}");
    built
        .0
        .push(updated.stdout.lines().last().unwrap_or_default().into());
    let mut written: Vec<String> = std::fs::read_to_string(&lock)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    written.sort_by(|a, b| a.split('=').next().cmp(&b.split('=').next()));
    assert_eq!(written.join("\n") + "\n", recorded);
    let locked = env.run(&[
        "image", "build", "--binary", BIN, "--lock", lock_arg, "--locked",
    ]);
    assert_eq!(locked.code, 0, "{locked:#?}");
    built
        .0
        .push(locked.stdout.lines().last().unwrap_or_default().into());
    assert!(
        locked.stderr.contains("packages, as in"),
        "{}",
        locked.stderr
    );

    // --locked with nothing to compare with is a usage error, not a silent pass.
    let none = env.run(&[
        "image",
        "build",
        "--binary",
        BIN,
        "--lock",
        env.path("none.lock").to_str().unwrap(),
        "--locked",
    ]);
    assert!(last_error(&none, 2).contains("needs a lock"), "{none:#?}");
}

/// The one-line error that ends a failed build's stderr (its steps come before it), after
/// checking the exit code.
#[track_caller]
fn last_error(out: &common::Out, code: i32) -> String {
    assert_eq!(out.code, code, "wrong exit code: {out:#?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{out:#?}");
    last.to_string()
}
