//! The installed packages of a root filesystem (`var/lib/dpkg/status`) and whether each is
//! one the recipe asked for: listed, part of minbase, or needed by one of those.
//!
//! A build may install other versions than its lock records (see [`super::package_lock`]),
//! but never a package outside the recipe's dependency closure: that would be a package
//! nobody asked for.

use std::collections::{BTreeSet, HashMap, HashSet};

/// One installed package, with what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    /// `Essential: yes` or `Priority: required`: what debootstrap's minbase installs.
    pub base: bool,
    /// `Depends` and `Pre-Depends`, each entry its alternatives (`a | b`), names only.
    pub needs: Vec<Vec<String>>,
    pub provides: Vec<String>,
}

/// The installed packages of a dpkg status file (`Status: install ok installed`).
pub fn parse(status: &str) -> Vec<Installed> {
    let mut out = Vec::new();
    for stanza in status.split("\n\n") {
        let mut fields: HashMap<String, String> = HashMap::new();
        let mut last: Option<String> = None;
        for line in stanza.lines() {
            if line.starts_with([' ', '\t']) {
                if let Some(v) = last.as_ref().and_then(|k| fields.get_mut(k)) {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                let key = k.trim().to_ascii_lowercase();
                fields.insert(key.clone(), v.trim().to_string());
                last = Some(key);
            }
        }
        let installed = fields
            .get("status")
            .is_some_and(|s| s.split_whitespace().last() == Some("installed"));
        let Some(name) = fields.get("package").filter(|_| installed) else {
            continue;
        };
        let field = |k: &str| fields.get(k).map(String::as_str).unwrap_or("");
        let mut needs = relations(field("depends"));
        needs.extend(relations(field("pre-depends")));
        out.push(Installed {
            name: name.clone(),
            base: field("essential") == "yes" || field("priority") == "required",
            needs,
            provides: relations(field("provides")).into_iter().flatten().collect(),
        });
    }
    out
}

/// `a (>= 1), b:any | c` as `[[a], [b, c]]`: names only, without versions or architectures.
fn relations(field: &str) -> Vec<Vec<String>> {
    field
        .split(',')
        .map(|entry| {
            entry
                .split('|')
                .filter_map(|alt| {
                    let name = alt.split(['(', '[', '<']).next()?.trim();
                    let name = name.split(':').next()?.trim();
                    (!name.is_empty()).then(|| name.to_string())
                })
                .collect::<Vec<_>>()
        })
        .filter(|alts| !alts.is_empty())
        .collect()
}

/// Installed packages that neither `roots` (the recipe's list), minbase (`base`, plus apt,
/// which debootstrap adds to it) nor anything they depend on accounts for. Dependencies
/// count as recorded in `installed` and in `earlier` (the status before `SUITE-updates` and
/// `SUITE-security` were applied): an update may drop a dependency (firefox-esr bundling
/// NSS), and the package it leaves behind was still asked for.
pub fn outside_closure(
    installed: &[Installed],
    earlier: &[Installed],
    roots: &[String],
) -> Vec<String> {
    let present: HashSet<&str> = installed.iter().map(|p| p.name.as_str()).collect();
    let mut needs: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut providers: HashMap<&str, Vec<&str>> = HashMap::new();
    for p in installed.iter().chain(earlier) {
        if !present.contains(p.name.as_str()) {
            continue;
        }
        let name = p.name.as_str();
        needs
            .entry(name)
            .or_default()
            .extend(p.needs.iter().flatten().map(String::as_str));
        for v in &p.provides {
            providers.entry(v.as_str()).or_default().push(name);
        }
    }
    let mut reached: BTreeSet<&str> = BTreeSet::new();
    let mut todo: Vec<&str> = installed
        .iter()
        .filter(|p| p.base)
        .map(|p| p.name.as_str())
        .chain(roots.iter().map(String::as_str))
        .chain(["apt"])
        .collect();
    while let Some(name) = todo.pop() {
        // A name is reached through the package itself or whatever provides it; every
        // installed alternative counts (apt picks one, and whichever it picked is
        // legitimate).
        let itself = present.get(name).copied();
        let by_others = providers.get(name).into_iter().flatten().copied();
        for target in itself.into_iter().chain(by_others).collect::<Vec<_>>() {
            if reached.insert(target) {
                todo.extend(needs.get(target).into_iter().flatten().copied());
            }
        }
    }
    installed
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| !reached.contains(n))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "\
Package: libc6
Status: install ok installed
Priority: optional
Depends: libgcc-s1
Version: 2.36-9

Package: bash
Essential: yes
Status: install ok installed
Priority: required
Pre-Depends: libc6 (>= 2.36), libtinfo6 (>= 6)
Version: 5.2

Package: libgcc-s1
Status: install ok installed
Version: 12

Package: libtinfo6
Status: install ok installed
Version: 6

Package: git
Status: install ok installed
Depends: libc6, perl:any, git-man (>> 1:2.39.5),
 liberror-perl | libcurl3-gnutls
Version: 1:2.39.5

Package: perl-base
Status: install ok installed
Essential: yes
Provides: perl5.36, perlapi-5.36.0
Version: 5.36

Package: perl
Status: install ok installed
Depends: perl-base
Version: 5.36

Package: git-man
Status: install ok installed
Version: 1:2.39.5

Package: liberror-perl
Status: install ok installed
Version: 0.17

Package: apt
Status: install ok installed
Depends: libapt
Version: 2.6

Package: libapt
Status: install ok installed
Version: 2.6

Package: sneaky
Status: install ok installed
Depends: libc6
Version: 1

Package: removed
Status: deinstall ok config-files
Version: 1
";

    #[test]
    fn the_closure_covers_what_was_asked_for_and_nothing_else() {
        let installed = parse(STATUS);
        assert_eq!(installed.len(), 12, "config-files only is not installed");
        let git = installed.iter().find(|p| p.name == "git").unwrap();
        assert_eq!(
            git.needs,
            vec![
                vec!["libc6".to_string()],
                vec!["perl".into()],
                vec!["git-man".into()],
                vec!["liberror-perl".into(), "libcurl3-gnutls".into()],
            ]
        );
        assert!(installed.iter().find(|p| p.name == "bash").unwrap().base);
        assert_eq!(
            outside_closure(&installed, &[], &["git".to_string()]),
            vec!["sneaky"]
        );
        // Without git in the recipe, git and what only it needs are outside too.
        assert_eq!(
            outside_closure(&installed, &[], &[]),
            vec!["git", "perl", "git-man", "liberror-perl", "sneaky"]
        );
        assert!(outside_closure(&installed, &[], &["git".into(), "sneaky".into()]).is_empty());
        // Before the updates, git-man needed sneaky: an update that drops a dependency
        // leaves nothing unasked-for behind.
        let earlier = parse(
            "Package: git-man\nStatus: install ok installed\nDepends: sneaky\n\n\
             Package: gone\nStatus: install ok installed\nDepends: libc6\n",
        );
        assert!(outside_closure(&installed, &earlier, &["git".to_string()]).is_empty());
    }

    #[test]
    fn virtual_packages_reach_their_providers() {
        let status = "Package: a\nStatus: install ok installed\nDepends: virt\n\n\
                      Package: b\nStatus: install ok installed\nProvides: virt (= 1)\n";
        assert!(outside_closure(&parse(status), &[], &["a".into()]).is_empty());
        assert_eq!(
            relations("x [amd64], y:any (>= 1) | z <!nocheck>"),
            vec![vec!["x".to_string()], vec!["y".into(), "z".into()]]
        );
    }
}
