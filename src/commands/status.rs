//! `yy status`: the control plane on one screen (admins only): version and uptime, the
//! database's size, Runners with their computers, turns and goals in flight, recent
//! failures and warnings. `--watch` redraws it every 2 s on a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;

use super::context;
use crate::api::status::Status;
use crate::error::CliError;
use crate::output::{self, clean, cut, table};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a screen
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Redraw every 2 s until interrupted (on a terminal only)
    #[arg(long)]
    pub watch: bool,
}

const REFRESH: Duration = Duration::from_secs(2);

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    if args.watch && !std::io::stdout().is_terminal() {
        return Err(CliError::usage(
            "--watch redraws a terminal and stdout is not one: run `yy status` (or `yy status --json`) in a loop instead",
        )
        .into());
    }
    let client = context::client()?;
    if !args.watch {
        let status = client.status().await?;
        return if args.json {
            output::json(&status)
        } else {
            Ok(output::print(&render(&status))?)
        };
    }
    loop {
        let status = client.status().await?;
        // Home, clear the screen, then the whole screen in one write.
        output::print(&format!("\x1b[H\x1b[2J{}", render(&status)))?;
        tokio::time::sleep(REFRESH).await;
    }
}

/// The screen. Everything a Runner reported (engines, versions, errors) goes through the
/// table's cleaning or [`clean`]: it is untrusted text on a terminal.
pub fn render(s: &Status) -> String {
    let artifacts = match s.artifacts.as_deref() {
        Some("database") => ", artifacts in the database".to_string(),
        Some("files") => ", artifacts in files".to_string(),
        Some(other) => format!(", artifacts in {}", clean(other)),
        None => String::new(),
    };
    let mut out = format!(
        "yy {} up {} (since {}), database {}{artifacts}\n",
        clean(&s.version),
        crate::timefmt::duration_words(i64::try_from(s.uptime_ms).unwrap_or(i64::MAX)),
        s.started_at,
        super::progress::human_bytes(s.database_bytes),
    );
    for w in &s.warnings {
        out.push_str(&format!("warning: {}\n", clean(w)));
    }
    out.push('\n');
    if s.runners.is_empty() {
        out.push_str("no Runners registered\n");
    } else {
        let rows = s
            .runners
            .iter()
            .map(|r| {
                let computers: Vec<String> = r
                    .computers
                    .iter()
                    .map(|(state, n)| format!("{n} {state}"))
                    .collect();
                vec![
                    r.id.clone(),
                    r.source.clone(),
                    r.state.clone(),
                    output::opt(&r.last_seen_at),
                    cut(&output::opt(&r.engine), 32),
                    cut(&output::opt(&r.version), 16),
                    if computers.is_empty() {
                        "-".into()
                    } else {
                        computers.join(", ")
                    },
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "runner",
                "source",
                "state",
                "last seen",
                "engine",
                "version",
                "computers",
            ],
            rows,
        ));
        out.push('\n');
    }
    if !s.replicas.is_empty() {
        out.push('\n');
        let rows = s
            .replicas
            .iter()
            .map(|r| {
                let mut role = r.state.clone();
                if r.leads {
                    role.push_str(", leads");
                }
                if r.this {
                    role.push_str(", answered this");
                }
                vec![
                    clean(&r.id).into_owned(),
                    cut(&r.hostname, 32),
                    cut(&r.listen, 48),
                    cut(&r.version, 16),
                    role,
                    r.seen_at.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["replica", "host", "listen", "version", "state", "last seen"],
            rows,
        ));
        out.push('\n');
    }
    out.push_str(&format!(
        "\nturns: {} running, {} queued, {} waiting\ngoals: {} active, {} waiting for a user\n",
        s.turns.running, s.turns.queued, s.turns.waiting, s.goals.active, s.goals.waiting_user
    ));
    if s.recent_failures.is_empty() {
        out.push_str("\nno failures in the last 24 hours\n");
    } else {
        out.push_str("\nrecent failures (last 24 hours):\n");
        let rows = s
            .recent_failures
            .iter()
            .map(|f| {
                vec![
                    f.at.clone(),
                    f.runner_id.clone(),
                    f.kind.clone(),
                    f.state.clone(),
                    cut(&output::opt(&f.error), 80),
                ]
            })
            .collect();
        out.push_str(&table(&["at", "runner", "kind", "state", "error"], rows));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::{GoalCounts, StatusFailure, StatusRunner, TurnCounts};

    #[test]
    fn the_screen_shows_everything_and_escapes_what_runners_wrote() {
        let s = Status {
            version: "0.1.0".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            uptime_ms: 90 * 60_000,
            database_bytes: 2 * 1024 * 1024,
            runners: vec![StatusRunner {
                id: "r1".into(),
                source: "lab".into(),
                state: "online".into(),
                last_seen_at: Some("2026-01-01T01:00:00Z".into()),
                engine: Some("docker\x1b[31m 27".into()),
                version: Some("0.1.0".into()),
                computers: [("running".to_string(), 2), ("stopped".to_string(), 1)].into(),
            }],
            turns: TurnCounts {
                running: 1,
                queued: 2,
                waiting: 3,
            },
            goals: GoalCounts {
                active: 4,
                waiting_user: 5,
            },
            recent_failures: vec![StatusFailure {
                at: "2026-01-01T00:30:00Z".into(),
                runner_id: "r1".into(),
                command_id: "c1".into(),
                kind: "ping".into(),
                state: "failed".into(),
                error: Some("boom\x07".into()),
            }],
            warnings: vec!["listening without TLS".into()],
            replicas: vec![crate::api::status::StatusReplica {
                id: "3f2a9c1d".into(),
                hostname: "cp-2".into(),
                listen: "10.0.0.2:8420".into(),
                version: "0.1.0".into(),
                state: "up".into(),
                leads: true,
                this: false,
                started_at: "2026-01-01T00:00:00Z".into(),
                seen_at: "2026-01-01T01:29:58Z".into(),
            }],
            artifacts: Some("database".into()),
        };
        let text = render(&s);
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text}");
        for needle in [
            "yy 0.1.0 up 1h30m",
            "warning: listening without TLS",
            "2 running, 1 stopped",
            "docker\\x1b[31m 27",
            "turns: 1 running, 2 queued, 3 waiting",
            "goals: 4 active, 5 waiting for a user",
            "boom\\x07",
            "up, leads",
            "cp-2",
            "MiB, artifacts in the database",
        ] {
            assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
        }
    }
}
