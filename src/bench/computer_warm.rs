//! `yy bench computer`'s warm claims: the whole `yy computer create` path (the CLI, the
//! control plane, the Runner) for a computer agent whose Runner has a warm computer ready,
//! one claim at a time (issue 29: p50 <= 100 ms).

use std::time::Instant;

use serde_json::json;

use super::harness::{Options, bench_agent, harness, setup};
use super::progress;
use crate::api::params::AgentEnv;
use crate::error::CliError;

/// The target of a warm claim through the CLI.
pub const WARM_CLAIM_P50_MS: f64 = 100.0;

/// `samples` warm claims through `yy computer create`, each stopped again (not timed).
pub async fn warm_claims(image: &str, samples: usize) -> anyhow::Result<serde_json::Value> {
    let bin = std::env::current_exe()?;
    let h = harness(bin)?;
    progress("warm claims: starting the control plane and a Runner with computers");
    let s = setup(
        h,
        Options {
            profile_cwd: Some("/workspace".into()),
            computer_image: Some(image.to_string()),
            max_computers: Some(3),
            runner_metrics: true,
            ..Default::default()
        },
    )
    .await?;
    let metrics = s
        .runner_metrics
        .clone()
        .ok_or_else(|| CliError::failure("the Runner serves no metrics"))?;
    let cli = |args: &[&str]| {
        let mut c = tokio::process::Command::from(s.h.command(args));
        c.env("YY_SERVER", &s.url)
            .env("YY_TOKEN", &s.token)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let run = |args: Vec<String>| {
        let mut c = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        async move {
            let out = c.output().await?;
            if !out.status.success() {
                return Err(anyhow::Error::from(CliError::failure(format!(
                    "yy {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        }
    };
    for i in 0..=samples {
        s.admin
            .agent_create(&bench_agent(format!("warm{i}"), AgentEnv::Computer))
            .await?;
    }
    // The first start is cold: it tells the Runner which image to keep warm.
    run(vec![
        "computer".into(),
        "create".into(),
        "--agent".into(),
        "warm0".into(),
    ])
    .await?;
    let mut claims = Vec::new();
    for i in 1..=samples {
        super::harness::wait_gauge(
            &metrics,
            "yy_runner_computers_warm",
            "the Runner made no warm computer",
        )
        .await?;
        let started = Instant::now();
        let shown = run(vec![
            "computer".into(),
            "create".into(),
            "--agent".into(),
            format!("warm{i}"),
            "--json".into(),
        ])
        .await?;
        claims.push(started.elapsed());
        let id = serde_json::from_str::<serde_json::Value>(&shown)?["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        run(vec!["computer".into(), "stop".into(), id]).await?;
    }
    let claimed =
        s.h.runner
            .as_ref()
            .map(|r| r.log_text())
            .unwrap_or_default()
            .matches("claimed a warm computer")
            .count();
    let summary = super::computer::summary(&claims);
    let p50 = summary["p50_ms"].as_f64().unwrap_or(f64::MAX);
    Ok(json!({
        "what": "`yy computer create --agent A` (a new process: the CLI, the control plane, the Runner) with a warm computer ready",
        "yy_computer_create": summary,
        "claimed": claimed,
        "target_p50_le_100ms": p50 <= WARM_CLAIM_P50_MS && claimed >= samples,
    }))
}
