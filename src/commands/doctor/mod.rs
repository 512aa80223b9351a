//! `yy doctor`: ordered checks of this host's setup, each with a fix. The control plane side
//! ([`server`]) first; with `--runner-config` the Runner host's ([`host`]). A fatal failure
//! skips the checks that depend on it (they could not mean anything); other failures let
//! the rest go on. Exit 1 on any failure, 0 with warnings only.

mod host;
mod server;

use std::collections::HashSet;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::computer::engine::EngineArgs;
use crate::error::CliError;
use crate::output;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// List the checks (id and title) and run none
    #[arg(long)]
    pub list_checks: bool,
    /// Also check this host as a Runner's: its runner.json (from `yy runner register`)
    #[arg(long, value_name = "FILE")]
    pub runner_config: Option<PathBuf>,
    /// The Runner's data directory [default: as `yy runner run`'s,
    /// $XDG_DATA_HOME/yy/runner-RUNNER_ID]
    #[arg(long, value_name = "DIR", requires = "runner_config")]
    pub data_dir: Option<PathBuf>,
    /// The Hermes home whose config.yaml holds the model settings [default: runner.json's
    /// hermesHome, else DATA_DIR/hermes-home for a Hermes the Runner starts itself]
    #[arg(long, value_name = "DIR", requires = "runner_config")]
    pub hermes_home: Option<PathBuf>,
    /// The computer image to check [default: the one the control plane assigned to the
    /// Runner]
    #[arg(long, value_name = "IMAGE_ID", requires = "runner_config")]
    pub image: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Every check, in the order it runs: stable ids for scripts, a title for people.
pub const CHECKS: &[(&str, &str)] = &[
    ("server.reachable", "The control plane answers"),
    (
        "tls.pin",
        "Its certificate is the pinned one or issued by a trusted CA",
    ),
    ("server.version", "Its version is compatible with this yy"),
    (
        "clock.skew",
        "This host's clock is within 2 s of the server's",
    ),
    ("login.valid", "The login's token is accepted"),
    ("runner.config", "runner.json is valid"),
    ("runner.token", "The Runner's token is accepted; its expiry"),
    (
        "engine.reachable",
        "The container engine answers; its version",
    ),
    ("image.present", "The computer image is on the engine"),
    (
        "image.verified",
        "The computer image passed `yy image verify`",
    ),
    ("hermes.reachable", "Hermes answers; its version"),
    ("hermes.model", "Model settings are in the Hermes home"),
    (
        "browser.chromium",
        "Chromium for the managed browser, or a way to install it",
    ),
    (
        "disk.free",
        "Free disk in the data directory and workspace root",
    ),
    (
        "files.modes",
        "The config and data are private to their owner",
    ),
];

fn title(id: &str) -> &'static str {
    CHECKS.iter().find(|(i, _)| *i == id).map_or("", |(_, t)| t)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Warn,
    Fail,
    /// Not run: an earlier fatal failure makes it meaningless, or it does not apply here.
    Skipped,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Warn => "warn",
            Outcome::Fail => "FAIL",
            Outcome::Skipped => "skip",
        }
    }
}

/// What one check found.
#[derive(Debug)]
pub struct Finding {
    outcome: Outcome,
    detail: String,
    fix: Option<String>,
    /// The checks that need this one are skipped.
    fatal: bool,
}

impl Finding {
    pub fn ok(detail: impl Into<String>) -> Finding {
        Finding {
            outcome: Outcome::Ok,
            detail: detail.into(),
            fix: None,
            fatal: false,
        }
    }
    pub fn warn(detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            outcome: Outcome::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
            fatal: false,
        }
    }
    pub fn fail(detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            outcome: Outcome::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
            fatal: false,
        }
    }
    /// A failure the later checks that need this one cannot go past.
    pub fn fatal(detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            fatal: true,
            ..Finding::fail(detail, fix)
        }
    }
    pub fn skip(detail: impl Into<String>) -> Finding {
        Finding {
            outcome: Outcome::Skipped,
            detail: detail.into(),
            fix: None,
            fatal: false,
        }
    }
    /// Skipped, and what needs it is skipped too.
    pub fn skip_all(detail: impl Into<String>) -> Finding {
        Finding {
            fatal: true,
            ..Finding::skip(detail)
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CheckResult {
    pub id: &'static str,
    pub title: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// No check failed (warnings allowed).
    pub ok: bool,
    pub checks: Vec<CheckResult>,
}

/// The checks run so far, and which ended fatally.
#[derive(Default)]
pub struct Doctor {
    results: Vec<CheckResult>,
    stopped: HashSet<&'static str>,
}

impl Doctor {
    /// True when `id` may run: none of `needs` ended fatally. Otherwise records it as
    /// skipped (and fatal in turn, so what needs it is skipped too).
    pub fn ready(&mut self, id: &'static str, needs: &[&'static str]) -> bool {
        let Some(first) = needs.iter().find(|n| self.stopped.contains(*n)) else {
            return true;
        };
        let detail = format!("skipped: {first} did not pass");
        self.push(id, Finding::skip_all(detail));
        false
    }

    pub fn push(&mut self, id: &'static str, f: Finding) {
        if f.fatal {
            self.stopped.insert(id);
        }
        self.results.push(CheckResult {
            id,
            title: title(id),
            outcome: f.outcome,
            detail: f.detail,
            fix: f.fix,
        });
    }

    fn report(self) -> Report {
        Report {
            ok: !self.results.iter().any(|r| r.outcome == Outcome::Fail),
            checks: self.results,
        }
    }
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    if args.list_checks {
        return list_checks(args.json);
    }
    let mut d = Doctor::default();
    // runner.json first: on a Runner host it may be the only place that names the server.
    let runner = args
        .runner_config
        .as_ref()
        .map(|p| (p.clone(), crate::runner::config::load(p)));
    let config = runner.as_ref().and_then(|(_, c)| c.as_ref().ok());
    let target = server::target(config)?;
    server::check(&mut d, target.as_ref(), runner.is_some()).await;
    if let Some((path, loaded)) = runner {
        host::check(&mut d, &args, &path, loaded).await;
    }
    let report = d.report();
    if args.json {
        output::json(&report)?;
    } else {
        print_table(&report)?;
    }
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .map(|c| c.id)
        .collect();
    if !failed.is_empty() {
        return Err(CliError::failure(format!(
            "{} of {} failed: {}; see each fix above",
            failed.len(),
            crate::api::words::plural(report.checks.len(), "check", "checks"),
            failed.join(", ")
        ))
        .into());
    }
    Ok(())
}

fn list_checks(as_json: bool) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Listed {
        id: &'static str,
        title: &'static str,
    }
    let items: Vec<Listed> = CHECKS
        .iter()
        .map(|(id, title)| Listed { id, title })
        .collect();
    output::list(&items, as_json, &["id", "title"], |c| {
        vec![c.id.to_string(), c.title.to_string()]
    })
}

/// One line per check; fixes of failures and warnings below the table, one a line. The
/// table cleans every cell: details quote what servers, engines and Hermes said.
fn print_table(report: &Report) -> anyhow::Result<()> {
    let rows = report
        .checks
        .iter()
        .map(|c| {
            vec![
                c.outcome.label().to_string(),
                c.id.to_string(),
                output::cut(&c.detail, 160),
            ]
        })
        .collect();
    let mut text = output::table(&["result", "check", "detail"], rows);
    for c in &report.checks {
        if let Some(fix) = &c.fix {
            text.push_str(&format!("\nfix {}: {}", c.id, output::clean(fix)));
        }
    }
    Ok(output::print(&text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fatal_failure_skips_what_needs_it_and_only_that() {
        let mut d = Doctor::default();
        d.push("server.reachable", Finding::fatal("down", "start it"));
        assert!(!d.ready("server.version", &["server.reachable"]));
        // Skipped in turn: what needs the skipped check is skipped too.
        assert!(!d.ready("clock.skew", &["server.version"]));
        assert!(d.ready("engine.reachable", &["runner.config"]));
        d.push("engine.reachable", Finding::fail("stopped", "start it"));
        assert!(d.ready("image.present", &["engine.reachable"]));
        d.push("image.present", Finding::warn("old", "update"));
        let r = d.report();
        assert!(!r.ok);
        let outcomes: Vec<Outcome> = r.checks.iter().map(|c| c.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Fail,
                Outcome::Skipped,
                Outcome::Skipped,
                Outcome::Fail,
                Outcome::Warn
            ]
        );
        assert_eq!(r.checks[1].detail, "skipped: server.reachable did not pass");
    }

    #[test]
    fn warnings_alone_pass() {
        let mut d = Doctor::default();
        d.push("clock.skew", Finding::warn("1 s", "sync"));
        d.push("login.valid", Finding::skip("no login"));
        assert!(d.report().ok);
    }

    #[test]
    fn every_check_has_a_title() {
        let ids: HashSet<&str> = CHECKS.iter().map(|(i, _)| *i).collect();
        assert_eq!(ids.len(), CHECKS.len());
        assert!(CHECKS.iter().all(|(_, t)| !t.is_empty()));
    }
}
