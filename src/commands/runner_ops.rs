//! Operations that go through a Runner's command queue: ping, fetch, commands, cancel.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::{context, seg};
use crate::api::client::Client;
use crate::api::machine::{self, FetchParams, FetchResult, PingParams};
use crate::error::CliError;
use crate::output::{self, opt};

/// Waits until a command ends (the server ends every command by its deadline).
pub async fn wait(client: &Client, id: &str) -> anyhow::Result<machine::Command> {
    loop {
        let cmd: machine::Command = client
            .get(&format!("api/v1/commands/{}?wait_ms=25000", seg(id)))
            .await?;
        if cmd.is_final() {
            return Ok(cmd);
        }
    }
}

#[derive(serde::Serialize)]
struct PingReport {
    seq: u32,
    command_id: String,
    state: String,
    ms: f64,
    error: Option<String>,
}

pub async fn ping(runner: &str, count: u32, hold: Duration, json: bool) -> anyhow::Result<()> {
    let client = context::client()?;
    let mut reports = Vec::new();
    for seq in 1..=count {
        let started = Instant::now();
        let cmd: machine::Command = client
            .post(
                &format!("api/v1/runners/{}/ping", seg(runner)),
                &PingParams {
                    hold_ms: hold.as_millis() as u64,
                    timeout_ms: None,
                },
            )
            .await?;
        let cmd = wait(&client, &cmd.id).await?;
        let report = PingReport {
            seq,
            command_id: cmd.id,
            state: cmd.state,
            ms: started.elapsed().as_secs_f64() * 1000.0,
            error: cmd.error,
        };
        if !json {
            match report.state.as_str() {
                "done" => output::print(&format!("ping {seq}: {:.1} ms", report.ms))?,
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
        .filter(|r| r.state == "done")
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
    }
    if answered < count as usize {
        return Err(CliError::failure(format!(
            "{} of {count} pings got no answer: is the runner online? (`yy runner show {runner}`)",
            count as usize - answered
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
    let to_stdout = output_path.as_os_str() == "-";
    if !to_stdout && output_path.exists() && !force {
        return Err(CliError::usage(format!(
            "{} already exists: choose another -o FILE, or pass --force to overwrite it",
            output_path.display()
        ))
        .into());
    }
    let client = context::client()?;
    let cmd: machine::Command = client
        .post(
            &format!("api/v1/runners/{}/fetch", seg(runner)),
            &FetchParams {
                path: path.to_string(),
                timeout_ms: None,
            },
        )
        .await?;
    let cmd = wait(&client, &cmd.id).await?;
    if cmd.state != "done" {
        return Err(CliError::failure(format!(
            "fetch {path} {}: {}",
            cmd.state,
            cmd.error.as_deref().unwrap_or("no reason given")
        ))
        .into());
    }
    let result: FetchResult = serde_json::from_value(cmd.result.unwrap_or_default())
        .context("the Runner's answer is not a file export")?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(&result.content)
        .context("the exported content is not valid base64")?;
    let digest = hex::encode(Sha256::digest(&data));
    if data.len() as u64 != result.size || digest != result.sha256 {
        return Err(CliError::failure(format!(
            "the exported file arrived damaged (size {} vs {}, sha256 {digest} vs {}); nothing was written",
            data.len(),
            result.size,
            result.sha256
        ))
        .into());
    }
    if to_stdout {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(&data)?;
        return Ok(out.flush()?);
    }
    crate::fsutil::write_atomic(output_path, &data, 0o600)
        .with_context(|| format!("writing {}", output_path.display()))?;
    eprintln!(
        "fetched {} ({} bytes, sha256 {}) to {}",
        result.path,
        result.size,
        result.sha256,
        output_path.display()
    );
    Ok(())
}

const HEADERS: [&str; 8] = [
    "id",
    "kind",
    "state",
    "created",
    "started",
    "finished",
    "generation",
    "error",
];

fn row(c: &machine::Command) -> Vec<String> {
    vec![
        c.id.clone(),
        c.kind.clone(),
        c.state.clone(),
        c.created_at.clone(),
        opt(&c.started_at),
        opt(&c.finished_at),
        c.generation
            .map(|g| g.to_string())
            .unwrap_or_else(|| "-".into()),
        c.error
            .clone()
            .map(|e| e.chars().take(60).collect())
            .unwrap_or_else(|| "-".into()),
    ]
}

pub async fn commands(runner: &str, limit: u32, json: bool) -> anyhow::Result<()> {
    let list: Vec<machine::Command> = context::client()?
        .get(&format!(
            "api/v1/runners/{}/commands?limit={limit}",
            seg(runner)
        ))
        .await?;
    output::list(&list, json, &HEADERS, row)
}

pub async fn cancel(command: &str, json: bool) -> anyhow::Result<()> {
    let c: machine::Command = context::client()?
        .post(
            &format!("api/v1/commands/{}/cancel", seg(command)),
            &serde_json::json!({}),
        )
        .await?;
    output::show(&c, json, HEADERS.iter().copied().zip(row(&c)).collect())
}

pub async fn sessions(runner: &str, json: bool) -> anyhow::Result<()> {
    let client = context::client()?;
    let cmd: machine::Command = client
        .post(
            &format!("api/v1/runners/{}/sessions", seg(runner)),
            &serde_json::json!({}),
        )
        .await?;
    let cmd = wait(&client, &cmd.id).await?;
    if cmd.state != "done" {
        return Err(CliError::failure(format!(
            "listing sessions {}: {}",
            cmd.state,
            cmd.error.as_deref().unwrap_or("no reason given")
        ))
        .into());
    }
    let list = cmd.result.unwrap_or_default()["sessions"].clone();
    let items: Vec<serde_json::Value> = serde_json::from_value(list).unwrap_or_default();
    output::list(
        &items,
        json,
        &["session", "hermes session", "status"],
        |s| {
            ["session_id", "hermes_session_id", "status"]
                .iter()
                .map(|k| s[*k].as_str().unwrap_or("-").to_string())
                .collect()
        },
    )
}
