//! Package locks: what a build installed, as `name=version sha256` per line, compared with
//! the lock a recipe ships.
//!
//! A lock records; it does not pin. A Debian mirror serves only the newest version of each
//! package in a suite, so a build installs whatever the suite (point release, `-updates`,
//! `-security`) holds that day, apt checks every package against the suite's signed
//! indexes, and the image's ID fixes what runs. The default build therefore reports how it
//! differs from the recipe's lock; `--locked` (for a frozen mirror of one's own) refuses
//! any difference.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use super::ComputerError;
use crate::api::words::plural;

/// One locked package.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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

/// The lock as one line, for an image label (labels hold no newlines): the lines joined
/// by `,`, which neither Debian package names nor versions contain.
pub fn to_label(lock_text: &str) -> String {
    lock_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// The lock text back from its label.
pub fn from_label(label: &str) -> String {
    let mut text: String = label
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    if text.is_empty() {
        text.push('\n');
    }
    text
}

/// How one package differs between the expected lock and what a build installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Newer {
        name: String,
        from: String,
        to: String,
    },
    Older {
        name: String,
        from: String,
        to: String,
    },
    /// Same version, another `.deb` (a binary rebuild, or another archive's file).
    Rebuilt {
        name: String,
        version: String,
    },
    Added {
        name: String,
        version: String,
    },
    Removed {
        name: String,
        version: String,
    },
}

impl Change {
    pub fn name(&self) -> &str {
        match self {
            Change::Newer { name, .. }
            | Change::Older { name, .. }
            | Change::Rebuilt { name, .. }
            | Change::Added { name, .. }
            | Change::Removed { name, .. } => name,
        }
    }
}

/// How a summary line relates each kind of change to the lock, in the order of the lines.
const PHRASES: [&str; 5] = [
    "newer than",
    "older than",
    "rebuilt since",
    "not in",
    "missing from the build, listed in",
];

impl Change {
    fn phrase(&self) -> &'static str {
        match self {
            Change::Newer { .. } => PHRASES[0],
            Change::Older { .. } => PHRASES[1],
            Change::Rebuilt { .. } => PHRASES[2],
            Change::Added { .. } => PHRASES[3],
            Change::Removed { .. } => PHRASES[4],
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Newer { name, from, to } | Change::Older { name, from, to } => {
                write!(f, "{name} {from} -> {to}")
            }
            Change::Rebuilt { name, version } => write!(f, "{name} {version} (another .deb)"),
            Change::Added { name, version } | Change::Removed { name, version } => {
                write!(f, "{name} {version}")
            }
        }
    }
}

/// Every difference between `expected` and `got`, by package name.
pub fn changes(expected: &Lock, got: &Lock) -> Vec<Change> {
    let mut out = Vec::new();
    for (name, want) in expected {
        let name = name.clone();
        match got.get(&name) {
            None => out.push(Change::Removed {
                name,
                version: want.version.clone(),
            }),
            Some(have) if have.version != want.version => {
                let (from, to) = (want.version.clone(), have.version.clone());
                out.push(match compare_versions(&have.version, &want.version) {
                    Ordering::Less => Change::Older { name, from, to },
                    _ => Change::Newer { name, from, to },
                })
            }
            // An old lock without digests records versions only.
            Some(have) if !want.sha256.is_empty() && have.sha256 != want.sha256 => {
                out.push(Change::Rebuilt {
                    name,
                    version: have.version.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for (name, have) in got {
        if !expected.contains_key(name) {
            out.push(Change::Added {
                name: name.clone(),
                version: have.version.clone(),
            });
        }
    }
    out
}

/// At most this many packages are named per kind of change in a summary.
const NAMED: usize = 8;

/// One line per kind of change, e.g. `1 package newer than images/base/packages.lock:
/// zlib1g 1:1.2.13.dfsg-1 -> 1:1.2.13.dfsg-1+deb12u1`; empty when nothing changed.
pub fn summary(changes: &[Change], source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for what in PHRASES {
        let of_kind: Vec<&Change> = changes.iter().filter(|c| c.phrase() == what).collect();
        if of_kind.is_empty() {
            continue;
        }
        let named: Vec<String> = of_kind.iter().take(NAMED).map(|c| c.to_string()).collect();
        let more = of_kind.len().saturating_sub(NAMED);
        out.push(format!(
            "{} {what} {source}: {}{}",
            plural(of_kind.len(), "package", "packages"),
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    out
}

/// `--locked`: any difference from the expected lock refuses the build, naming each package.
pub fn require_same(changes: &[Change], source: &str) -> Result<(), ComputerError> {
    if changes.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = changes.iter().map(Change::name).collect();
    Err(ComputerError::Lock(format!(
        "--locked: the installed packages differ from {source} in {} ({}): {}; point --mirror at a mirror that holds the locked versions, or build without --locked",
        plural(changes.len(), "package", "packages"),
        names.join(", "),
        summary(changes, source).join("; ")
    )))
}

/// Compares two Debian versions as dpkg does (`epoch:upstream-revision`, `~` sorting
/// before everything, digit runs compared as numbers).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (ea, ra) = split_epoch(a);
    let (eb, rb) = split_epoch(b);
    ea.cmp(&eb).then_with(|| {
        let (ua, va) = ra.rsplit_once('-').unwrap_or((ra, ""));
        let (ub, vb) = rb.rsplit_once('-').unwrap_or((rb, ""));
        compare_part(ua.as_bytes(), ub.as_bytes())
            .then_with(|| compare_part(va.as_bytes(), vb.as_bytes()))
    })
}

fn split_epoch(v: &str) -> (u64, &str) {
    match v.split_once(':') {
        Some((e, rest)) if e.bytes().all(|b| b.is_ascii_digit()) => (e.parse().unwrap_or(0), rest),
        _ => (0, v),
    }
}

/// dpkg's weight of a character in the non-digit part: `~` first, then the end of the
/// string, then letters, then everything else.
fn weight(c: Option<&u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(*c),
        Some(c) => i32::from(*c) + 256,
    }
}

fn compare_part(a: &[u8], b: &[u8]) -> Ordering {
    let digit = |s: &[u8], i: usize| s.get(i).is_some_and(u8::is_ascii_digit);
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        while (i < a.len() && !digit(a, i)) || (j < b.len() && !digit(b, j)) {
            let (x, y) = (weight(a.get(i)), weight(b.get(j)));
            if x != y {
                return x.cmp(&y);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first = Ordering::Equal;
        while digit(a, i) && digit(b, j) {
            if first == Ordering::Equal {
                first = a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
        if digit(a, i) {
            return Ordering::Greater;
        }
        if digit(b, j) {
            return Ordering::Less;
        }
        if first != Ordering::Equal {
            return first;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn versions_compare_as_dpkg_does() {
        use Ordering::*;
        let cases = [
            ("1:1.2.13.dfsg-1+deb12u1", "1:1.2.13.dfsg-1", Greater),
            ("1.0~rc1", "1.0", Less),
            ("1.0", "1.0-0", Equal),
            ("2:1.0", "1:9.9", Greater),
            ("1.10", "1.9", Greater),
            ("1.0a", "1.0", Greater),
            ("1.0+b1", "1.0", Greater),
            ("1.0", "1.0.1", Less),
            ("7.88.1-10+deb12u15", "7.88.1-10+deb12u8", Greater),
            ("20250419~deb12u2", "20250419", Less),
            ("1.01", "1.1", Equal),
            ("3.0.20-1~deb12u1", "3.0.20-1~deb12u1", Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn changes_are_named_by_kind() {
        let lock = parse_lock(&format!(
            "zlib1g=1:1.2.13.dfsg-1 {H1}\nbash=5.2 {H1}\ngone=1 {H1}\nsame=1 {H1}\n"
        ))
        .unwrap();
        let got = parse_lock(&format!(
            "zlib1g=1:1.2.13.dfsg-1+deb12u1 {H2}\nbash=5.1 {H1}\nnew=2 {H1}\nsame=1 {H2}\n"
        ))
        .unwrap();
        let c = changes(&lock, &got);
        assert_eq!(c.len(), 5, "{c:?}");
        let lines = summary(&c, "images/base/packages.lock");
        assert_eq!(
            lines,
            vec![
                "1 package newer than images/base/packages.lock: zlib1g 1:1.2.13.dfsg-1 -> 1:1.2.13.dfsg-1+deb12u1",
                "1 package older than images/base/packages.lock: bash 5.2 -> 5.1",
                "1 package rebuilt since images/base/packages.lock: same 1 (another .deb)",
                "1 package not in images/base/packages.lock: new 2",
                "1 package missing from the build, listed in images/base/packages.lock: gone 1",
            ]
        );
        let e = require_same(&c, "the lock").unwrap_err();
        assert!(matches!(e, ComputerError::Lock(_)));
        let e = e.to_string();
        assert!(
            e.contains("5 packages (bash, gone, same, zlib1g, new)"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        require_same(&changes(&lock, &lock), "x").unwrap();
        // A version-only lock is not a digest difference.
        let old = parse_lock("same=1\n").unwrap();
        assert!(changes(&old, &parse_lock(&format!("same=1 {H2}\n")).unwrap()).is_empty());
    }

    #[test]
    fn long_summaries_name_a_few_and_count_the_rest() {
        let lock: String = (0..20).map(|i| format!("p{i:02}=1 {H1}\n")).collect();
        let got: String = (0..20).map(|i| format!("p{i:02}=2 {H1}\n")).collect();
        let c = changes(&parse_lock(&lock).unwrap(), &parse_lock(&got).unwrap());
        let s = summary(&c, "L");
        assert_eq!(s.len(), 1);
        assert!(
            s[0].starts_with("20 packages newer than L: p00 1 -> 2,"),
            "{s:?}"
        );
        assert!(s[0].ends_with("and 12 more"), "{s:?}");
    }

    #[test]
    fn locks_travel_in_a_label_and_back() {
        let text = format!("a=1 {H1}\nb=1:2.0~rc1+b1 {H2}\n");
        let label = to_label(&text);
        assert!(!label.contains('\n'));
        assert_eq!(from_label(&label), text);
        assert_eq!(parse_lock(&from_label(&label)).unwrap().len(), 2);
        assert!(parse_lock("a=1 nothex\n").is_err());
        assert!(parse_lock("novers\n").is_err());
        assert_eq!(parse_lock("a=1\n").unwrap()["a"].sha256, "");
    }
}
