//! completions/ and man/ are generated from the CLI definition and committed; this test
//! fails when they are stale. Refresh them with: YY_UPDATE_GENERATED=1 cargo test --test generated

use std::path::Path;

use yy::commands::generate::{ShellArg, completion_script, man_pages};

fn check(path: &Path, expected: &[u8], stale: &mut Vec<String>) {
    if std::env::var_os("YY_UPDATE_GENERATED").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, expected).unwrap();
        return;
    }
    if std::fs::read(path).ok().as_deref() != Some(expected) {
        stale.push(path.display().to_string());
    }
}

#[test]
fn completions_and_man_pages_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stale = Vec::new();
    for shell in ShellArg::ALL {
        check(
            &root.join("completions").join(shell.file_name()),
            &completion_script(shell),
            &mut stale,
        );
    }
    let pages = man_pages().unwrap();
    let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    for (name, data) in &pages {
        check(&root.join("man").join(name), data, &mut stale);
    }
    // A page for a command that no longer exists is stale too.
    for entry in std::fs::read_dir(root.join("man")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !names.contains(&name.as_str()) {
            stale.push(format!("man/{name} (no such command)"));
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale: {stale:?}; refresh them with YY_UPDATE_GENERATED=1 cargo test --test generated"
    );
}

/// The README promises that every `list` is also `ls`.
#[test]
fn every_list_is_also_ls() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let here = format!("{path} {}", sub.get_name());
            if sub.get_name() == "list" && !sub.get_visible_aliases().any(|a| a == "ls") {
                missing.push(here.clone());
            }
            walk(sub, &here, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&yy::cli::command(), "yy", &mut missing);
    assert!(missing.is_empty(), "no `ls` alias: {missing:?}");
}
