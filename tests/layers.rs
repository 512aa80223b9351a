//! The house's floors: each top-level module of `src/` imports only modules on floors below
//! its own (README.md, "Layout"), so no import runs up and no circle crosses folders.
//! `api/` is the ground floor above the small leaf helpers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Floors from the ground up; a module may import any module on a lower floor.
const FLOORS: &[&[&str]] = &[
    &["fsutil", "output", "prom", "sys", "timefmt"],
    &["api"],
    &["client"],
    &["computer", "hermes"],
    &["egress"],
    &["browser"],
    &["server"],
    &["backup"],
    &["error"],
    &["runner", "web_view"],
    &["bench"],
    // clap's definitions and the commands they run are one thing split in two files.
    &["cli", "commands", "bin"],
];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::NAME` a line of code names (comments are not imports).
fn named_modules(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or_default();
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with("yy::"))
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| name.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .collect()
}

#[test]
fn every_import_points_down_a_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = Path::new(first)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_string();
        if module == "lib" {
            continue;
        }
        let Some(own) = floor_of(&module) else {
            unknown.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for target in named_modules(line) {
                if target == module {
                    continue;
                }
                let allowed = floor_of(&target)
                    .is_some_and(|f| f < own || (f == own && own == FLOORS.len() - 1));
                if !allowed {
                    wrong.insert(format!(
                        "{}:{}: {module} imports {target}",
                        relative.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules on no floor (add them to FLOORS and to README.md's Layout): {unknown:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports that run up or sideways:\n{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_module_names_of_a_line_are_found_and_comments_are_skipped() {
    assert_eq!(
        named_modules("use crate::api::client::Client; // crate::commands"),
        ["api"]
    );
    assert_eq!(
        named_modules("let v = crate::VERSION;"),
        Vec::<String>::new()
    );
    assert_eq!(
        named_modules("f(crate::sys::kill(p), crate::fsutil::x())"),
        ["sys", "fsutil"]
    );
}
