//! Operations that go through a Runner's command queue: ping, fetch, commands, cancel.

use std::path::Path;
use std::time::{Duration, Instant};

use super::progress::Waiting;
use super::{Columns, context, print_list, print_one};
use crate::api::artifacts::{ArtifactRef, MAX_ARTIFACT_BYTES};
use crate::api::machine::{self, FetchParams, FetchResult, PingParams};
use crate::api::sessions::SessionListResult;
use crate::api::states::CommandState;
use crate::api::words::plural;
use crate::client::Client;
use crate::client::LONG_POLL_MS;
use crate::error::{CliError, Exit};
use crate::output::{self, opt};

pub use crate::client::result_of;

/// Waits until command `id` ends, saying within a second why it waits while it has not
/// started (its Runner offline, or busy); Ctrl-C cancels it.
pub async fn wait(client: &Client, id: &str) -> anyhow::Result<machine::Command> {
    let mut waiting = Waiting::new("Ctrl-C cancels it");
    let watch = async {
        // The first look comes back within a second, so that waiting is never silent.
        let mut wait_ms = super::progress::FIRST_LOOK_MS;
        loop {
            let cmd = client.command_show(id, wait_ms).await?;
            if cmd.is_final() {
                return Ok::<_, anyhow::Error>(cmd);
            }
            waiting.say(cmd.waiting.as_deref());
            // While queued, look again soon: whether its Runner is there can change.
            wait_ms = if cmd.waiting.is_some() {
                1000
            } else {
                LONG_POLL_MS
            };
        }
    };
    tokio::select! {
        r = watch => r,
        _ = tokio::signal::ctrl_c() => {
            let _ = client.command_cancel(id).await;
            Err(CliError::new(Exit::Cancelled, format!("interrupted; command {id} was cancelled")).into())
        }
    }
}

#[derive(serde::Serialize)]
struct PingReport {
    seq: u32,
    command_id: String,
    state: CommandState,
    ms: f64,
    error: Option<String>,
}

pub async fn ping(runner: &str, count: u32, hold: Duration, json: bool) -> anyhow::Result<()> {
    let client = context::client()?;
    let mut reports = Vec::new();
    for seq in 1..=count {
        let started = Instant::now();
        let ping = PingParams {
            hold_ms: hold.as_millis() as u64,
            timeout_ms: None,
        };
        let cmd = client.runner_ping(runner, &ping).await?;
        let cmd = wait(&client, &cmd.id).await?;
        let report = PingReport {
            seq,
            command_id: cmd.id.into(),
            state: cmd.state,
            ms: started.elapsed().as_secs_f64() * 1000.0,
            error: cmd.error,
        };
        if !json {
            match report.state {
                CommandState::Done => output::print(&format!("ping {seq}: {:.1} ms", report.ms))?,
                state => output::print(&format!(
                    "ping {seq}: {state}: {}",
                    report.error.as_deref().unwrap_or("no answer")
                ))?,
            }
        }
        reports.push(report);
    }
    let mut times: Vec<f64> = reports
        .iter()
        .filter(|r| r.state == CommandState::Done)
        .map(|r| r.ms)
        .collect();
    times.sort_by(f64::total_cmp);
    let answered = times.len();
    let summary = serde_json::json!({
        "sent": count,
        "answered": answered,
        "min_ms": times.first(),
        "p50_ms": times.get(answered.saturating_sub(1) / 2),
        "avg_ms": (answered > 0).then(|| times.iter().sum::<f64>() / answered as f64),
        "max_ms": times.last(),
    });
    if json {
        output::json(&serde_json::json!({ "pings": reports, "summary": summary }))?;
    } else if answered > 0 {
        output::print(&format!(
            "{count} sent, {answered} answered; min {:.1} ms, p50 {:.1} ms, max {:.1} ms",
            times[0],
            times[(answered - 1) / 2],
            times[answered - 1]
        ))?;
    } else {
        output::print(&format!("{count} sent, 0 answered"))?;
    }
    if answered < count as usize {
        return Err(CliError::failure(format!(
            "{} of {} got no answer: is the runner online? (`yy runner show {runner}`)",
            count as usize - answered,
            plural(count, "ping", "pings")
        ))
        .into());
    }
    Ok(())
}

pub async fn fetch(
    runner: &str,
    path: &str,
    output_path: &Path,
    force: bool,
) -> anyhow::Result<()> {
    super::artifact::check_output(output_path, force)?;
    let client = context::client()?;
    let fetch = FetchParams {
        path: path.to_string(),
        timeout_ms: None,
    };
    let cmd = client.runner_fetch(runner, &fetch).await?;
    // The file is received while the Runner sends it (a follow of the command's artifact);
    // the command's result decides whether it is kept. Stdout gets bytes only once they
    // are checked, so it waits for the result.
    let follow = async {
        if output_path.as_os_str() == "-" {
            return None;
        }
        let resp = client.command_artifact(&cmd.id).await.ok()?;
        let name = crate::api::artifacts::sanitize_name(path).unwrap_or_default();
        let received = super::artifact::receive(resp, output_path, name, MAX_ARTIFACT_BYTES).await;
        received
            .inspect_err(|e| tracing::debug!(error = %e, "following the fetch failed"))
            .ok()
    };
    let mut follow = std::pin::pin!(follow);
    let mut waiting = std::pin::pin!(wait(&client, &cmd.id));
    let mut followed = None;
    let done = loop {
        tokio::select! {
            f = &mut follow, if followed.is_none() => followed = Some(f),
            done = &mut waiting => break done,
        }
    };
    // A failed command drops the follow (and its temporary file) right away.
    let result: FetchResult = result_of(done?, &format!("fetch {path}"))?;
    let known = ArtifactRef {
        artifact_id: result.artifact_id.clone(),
        name: crate::api::artifacts::sanitize_name(&result.path).unwrap_or_default(),
        size: result.size,
        sha256: result.sha256.clone(),
    };
    let followed = match followed {
        Some(f) => f,
        None => follow.await,
    };
    match followed {
        Some(received) if received.is(&known) => received.keep()?,
        // Not followed, or not these bytes (the upload started over): the stored
        // artifact, checked again on arrival against what the Runner reported.
        _ => super::artifact::download_known(&client, &known, output_path).await?,
    }
    if output_path.as_os_str() != "-" {
        // The server keeps the artifact a day (`FETCH_KEPT_MS`) for `yy artifact show|get`.
        eprintln!(
            "fetched {} ({}, sha256 {}) to {}; kept as artifact {} for 24 hours",
            crate::output::clean(&result.path),
            plural(result.size, "byte", "bytes"),
            crate::output::clean(&result.sha256),
            output_path.display(),
            crate::output::clean(&result.artifact_id)
        );
    }
    Ok(())
}

impl Columns for machine::Command {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "kind",
        "state",
        "created",
        "started",
        "finished",
        "generation",
        "error",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.kind.to_string(),
            self.state.to_string(),
            self.created_at.clone(),
            opt(&self.started_at),
            opt(&self.finished_at),
            self.generation
                .map(|g| g.to_string())
                .unwrap_or_else(|| "-".into()),
            self.error
                .clone()
                .map(|e| e.chars().take(60).collect())
                .unwrap_or_else(|| "-".into()),
        ]
    }
}

pub async fn commands(runner: &str, limit: u32, json: bool) -> anyhow::Result<()> {
    let list = context::client()?.runner_commands(runner, limit).await?;
    print_list(&list, json)
}

pub async fn cancel(command: &str, json: bool) -> anyhow::Result<()> {
    let c = context::client()?.command_cancel(command).await?;
    print_one(&c, json)
}

pub async fn sessions(runner: &str, json: bool) -> anyhow::Result<()> {
    let client = context::client()?;
    let cmd = client.runner_sessions(runner).await?;
    let cmd = wait(&client, &cmd.id).await?;
    let list: SessionListResult = result_of(cmd, "listing sessions")?;
    output::list(
        &list.sessions,
        json,
        &["session", "hermes session", "status"],
        |s| {
            vec![
                s.session_id.clone(),
                s.hermes_session_id.clone(),
                s.status.clone(),
            ]
        },
    )
}

/// `yy runner update`: records the change and, for a new image or a rollback, waits for
/// the Runner's acceptance and then for the switch (the Runner idle), saying why it waits.
pub async fn update(
    id: &str,
    update: &crate::api::params::RunnerUpdate,
    no_wait: bool,
    show: impl Fn(&crate::api::views::Runner) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let client = context::client()?;
    let r = client.runner_update(id, update).await?;
    let wants_image = update.computer_image.is_some() || update.rollback;
    let (Some(cmd), Some(target)) = (r.pending_command.clone(), r.pending_image.clone()) else {
        return show(&r);
    };
    if no_wait || !wants_image {
        return show(&r);
    }
    let accepted = wait(&client, &cmd).await?;
    if accepted.state == CommandState::Done
        && let Ok(a) = serde_json::from_value::<crate::api::computers::ImageAcceptResult>(
            accepted.result.clone().unwrap_or_default(),
        )
    {
        eprintln!(
            "{} accepted: {} passed, acceptance computer {} ran and was removed ({:.1} s)",
            output::clean(&a.image_id),
            plural(a.checks.len(), "check", "checks"),
            output::clean(&a.acceptance_container),
            a.duration_ms as f64 / 1000.0
        );
    }
    let mut waiting = Waiting::new(
        "Ctrl-C stops waiting (the image still becomes current when the Runner is idle)",
    );
    loop {
        let r = client.runner_show(&r.id).await?;
        if r.pending_image.as_deref() != Some(target.as_str()) {
            waiting.clear();
            show(&r)?;
            if r.computer_image.as_deref() == Some(target.as_str()) {
                return Ok(());
            }
            return Err(CliError::failure(
                r.image_note
                    .unwrap_or_else(|| format!("{target} did not become current")),
            )
            .into());
        }
        waiting.say(r.pending_reason.as_deref());
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(super::progress::QUEUED_LOOK_MS)) => {}
            _ = tokio::signal::ctrl_c() => {
                return Err(CliError::new(
                    Exit::Cancelled,
                    format!("stopped waiting; {target} becomes current when runner {} is idle (`yy runner show {}`)", r.id, r.id),
                )
                .into());
            }
        }
    }
}
