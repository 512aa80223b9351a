//! `yy service print|install`: the units pass `systemd-analyze verify` (Debian's systemd
//! package; under CI a missing systemd-analyze is a failure, else the test says it did
//! not run).

mod common;

use std::process::Command;

use common::Env;

const BIN: &str = env!("CARGO_BIN_EXE_yy");

fn analyze() -> Option<&'static str> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("CI").is_some() {
            panic!(
                "systemd-analyze is missing: install Debian's systemd package (scripts/test.sh does)"
            );
        }
        common::skipped("systemd-analyze is missing (apt-get install systemd)");
        return None;
    }
    Some("systemd-analyze")
}

/// Runs `systemd-analyze verify` on `unit`; panics with its output when it complains.
fn verify(analyze: &str, unit: &std::path::Path) {
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Complaints about other units of this host are not ours; any line naming ours is.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(unit.file_name().unwrap().to_str().unwrap()))
        .collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify {}: {stderr}\n{}",
        unit.display(),
        std::fs::read_to_string(unit).unwrap()
    );
}

#[test]
fn printed_and_installed_units_pass_systemd_analyze_verify() {
    let Some(analyze) = analyze() else { return };
    let env = Env::new();
    let dir = env.path("units");
    std::fs::create_dir(&dir).unwrap();
    let cases: [&[&str]; 5] = [
        &["serve"],
        &["serve", "--listen", "0.0.0.0:8420", "--tls", "self-signed"],
        &[
            "serve",
            "--listen",
            "0.0.0.0:443",
            "--tls-cert",
            "/etc/yy/tls.crt",
            "--tls-key",
            "/etc/yy/tls.key",
            "--shutdown-grace",
            "30s",
            "--",
            "--allowed-host",
            "yy.example",
        ],
        &["runner", "--engine", "podman", "--user", "root"],
        &["runner", "--data-dir", "/srv/yy-runner"],
    ];
    for (i, case) in cases.iter().enumerate() {
        let mut args = vec!["service", "print", "--bin", BIN];
        args.extend_from_slice(case);
        let out = env.run(&args);
        out.ok();
        assert!(
            out.stdout.contains("ProtectSystem=strict"),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("NoNewPrivileges=yes"));
        assert!(out.stdout.contains("PrivateTmp=yes"));
        let sub = dir.join(format!("{i}"));
        std::fs::create_dir(&sub).unwrap();
        let name = if case[0] == "serve" {
            "yy-serve.service"
        } else {
            "yy-runner.service"
        };
        let path = sub.join(name);
        std::fs::write(&path, &out.stdout).unwrap();
        verify(analyze, &path);
    }

    // The same unit through install, which says what to run next and never overwrites
    // without --force.
    let args = ["service", "install", "--bin", BIN, "runner", "--unit-dir"];
    let mut a = args.to_vec();
    let unit_dir = dir.to_str().unwrap();
    a.push(unit_dir);
    let out = env.run(&a);
    out.ok();
    assert!(
        out.stdout
            .contains("systemctl enable --now yy-runner.service"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("runner.json"), "{}", out.stdout);
    verify(analyze, &dir.join("yy-runner.service"));
    env.run(&a).fails(6, "--force");
    a.push("--force");
    env.run(&a).ok();
    // Bad input: one line naming what is wrong.
    env.run(&[
        "service",
        "print",
        "runner",
        "--config",
        "/etc/yy/runner.json",
    ])
    .fails(2, "must lie in the data directory");
}
