//! `yy bench artifacts`: the verified artifact path side by side with plain copies, in the
//! same run:
//! - a 25 MiB `computer_export` (guest snapshot, spool, chunked upload, sealed artifact)
//!   against `docker cp` of the same file plus `sha256sum`;
//! - `yy runner fetch` of an 8 MB host file (whole process: enqueue, Runner upload,
//!   download, check, atomic write) against `cp` plus `sha256sum` (whole processes).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::computer::summary;
use super::harness::{Options, harness, setup};
use super::progress;
use crate::api::machine::{CompleteParams, FetchParams, Outcome, RunnerStatus};
use crate::computer::docker::Provider;
use crate::computer::protocol::ExecParams;
use crate::computer::{ComputerSpec, Limits, validate_image_id};
use crate::error::CliError;
use crate::output;
use crate::runner::artifacts::{Transfer, TurnExports};
use crate::runner::client::MachineClient;

#[derive(Debug, clap::Args)]
pub struct ArtifactBenchArgs {
    /// The full image id (sha256:...) of a computer image (`yy image build` prints it)
    pub image: String,
    /// Samples of each figure
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=200))]
    pub samples: u32,
    /// Print the figures and targets as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Both figures are targeted at this ratio of the plain copy's p50.
pub const MAX_RATIO: f64 = 1.5;
const EXPORT_BYTES: u64 = 25 * 1024 * 1024;
const FETCH_BYTES: usize = 8_000_000;

/// Runs one process to completion; its wall time.
async fn timed(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    let took = started.elapsed();
    if !out.status.success() {
        return Err(CliError::failure(format!(
            "{} {} failed: {}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }
    Ok(took)
}

fn p50(samples: &[Duration]) -> f64 {
    summary(samples)["p50_ms"].as_f64().unwrap_or(0.0)
}

pub async fn run(args: ArtifactBenchArgs) -> anyhow::Result<()> {
    validate_image_id(&args.image)?;
    let bin = std::env::current_exe().context("finding this executable")?;
    let opts = Options {
        max_pending: 1000,
        ..Default::default()
    };
    let mut s = setup(harness(bin.clone())?, opts).await?;
    let n = args.samples as usize;
    let which = |p: &str| PathBuf::from(p);

    // ---- (b) yy runner fetch against cp + sha256sum, whole processes ----
    let src = s.export_root.join("host.bin");
    let data: Vec<u8> = (0..FETCH_BYTES).map(|_| rand::random::<u8>()).collect();
    std::fs::write(&src, &data)?;
    let out = s.export_root.join("fetched.bin");
    let copy = s.export_root.join("copied.bin");
    let (srcs, outs, copys) = (
        src.display().to_string(),
        out.display().to_string(),
        copy.display().to_string(),
    );
    let env = [
        ("YY_SERVER", s.url.as_str()),
        ("YY_TOKEN", s.token.as_str()),
        ("YY_LOG", "warn"),
    ];
    let fetch_args = [
        "runner",
        "fetch",
        s.runner_id.as_str(),
        srcs.as_str(),
        "-o",
        outs.as_str(),
        "--force",
    ];
    progress("measuring yy runner fetch of an 8 MB file against cp + sha256sum");
    // Warm-up (not counted).
    timed(&bin, &fetch_args, &env).await?;
    timed(&which("cp"), &[&srcs, &copys], &[]).await?;
    let (mut fetch, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..n {
        fetch.push(timed(&bin, &fetch_args, &env).await?);
        let cp = timed(&which("cp"), &[&srcs, &copys], &[]).await?;
        let sum = timed(&which("sha256sum"), &[&copys], &[]).await?;
        plain.push(cp + sum);
    }
    if std::fs::read(&out)? != data {
        return Err(CliError::failure("the fetched file differs from its source").into());
    }

    // ---- (a) computer_export of 25 MiB against docker cp + sha256sum ----
    // The Runner process steps aside: this benchmark plays the Runner over the machine API
    // (same token, its own instance), so every export runs under a real, running command.
    if let Some(r) = s.h.runner.as_mut() {
        r.stop(Duration::from_secs(5));
    }
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&s.runner_config)?)?;
    let token = cfg["token"].as_str().unwrap_or_default().to_string();
    let client = MachineClient::new(&s.url, token, None)?;
    let generation = client
        .connect(&RunnerStatus {
            version: crate::VERSION.into(),
            capabilities: vec!["fetch".into()],
            hostname: "bench".into(),
            ..RunnerStatus::default()
        })
        .await?
        .generation
        .get();
    let provider = Provider::connect().await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let ws = PathBuf::from("/var/tmp/yy/bench").join(format!("artifacts-{run}"));
    let spec = ComputerSpec {
        owner_key: format!("bench/artifacts-{run}"),
        runner_id: "bench".into(),
        computer_id: format!("bench-artifacts-{run}"),
        agent_id: "bench".into(),
        account_id: "bench".into(),
        image_id: args.image.clone(),
        generation: 0,
        workspace_host_dir: ws.clone(),
        guest_cwd: "/workspace".into(),
        limits: Limits::default(),
        network: crate::computer::GuestNetwork::None,
    };
    progress("starting a computer with a 25 MiB file");
    let (created, guest) = provider.launch(&spec).await?;
    let measured = async {
        let made = guest
            .exec(
                ExecParams {
                    shell: Some(format!("head -c {EXPORT_BYTES} /dev/urandom > blob.bin")),
                    ..ExecParams::default()
                },
                None,
            )
            .await?;
        if made.exit_code != Some(0) {
            return Err(
                CliError::failure(format!("cannot write the file: {}", made.stderr)).into(),
            );
        }
        let dest = s.export_root.join("docker-cp.bin");
        let dests = dest.display().to_string();
        let from = format!("{}:/workspace/blob.bin", created.id);
        let spool = s.export_root.join("spool");
        let (mut yy, mut docker) = (Vec::new(), Vec::new());
        progress("measuring 25 MiB exports against docker cp + sha256sum");
        for i in 0..=n {
            let cmd = s
                .admin
                .runner_fetch(
                    &s.runner_id,
                    &FetchParams {
                        path: srcs.clone(),
                        timeout_ms: Some(600_000),
                    },
                )
                .await?;
            client.lease(generation, 1).await?;
            let _: serde_json::Value = client
                .command_call(generation, &cmd.id, "start", &json!({}))
                .await?;
            let exports = TurnExports::new(Transfer {
                client: client.clone(),
                generation,
                command_id: cmd.id.to_string(),
                spool: spool.clone(),
            });
            let started = Instant::now();
            let r = exports.export(&guest, "blob.bin").await;
            let took = started.elapsed();
            if !r["artifact_id"].is_string() {
                return Err(CliError::failure(format!("the export failed: {r}")).into());
            }
            let _: serde_json::Value = client
                .command_call(
                    generation,
                    &cmd.id,
                    "complete",
                    &CompleteParams {
                        outcome: Outcome::Done,
                        result: Some(json!({})),
                        error: None,
                    },
                )
                .await?;
            let cp = timed(&which("docker"), &["cp", &from, &dests], &[]).await?;
            let sum = timed(&which("sha256sum"), &[&dests], &[]).await?;
            if i > 0 {
                yy.push(took);
                docker.push(cp + sum);
            }
        }
        anyhow::Ok((yy, docker))
    }
    .await;
    drop(guest);
    let _ = provider.remove(&created.id).await;
    let _ = std::fs::remove_dir_all(&ws);
    let _ = client.disconnect(generation).await;
    let (export, docker) = measured?;

    let ratio =
        |a: &[Duration], b: &[Duration]| (p50(a) / p50(b).max(0.001) * 100.0).round() / 100.0;
    let report = json!({
        "export_25mib": {
            "yy": summary(&export),
            "docker_cp_sha256sum": summary(&docker),
            "ratio_p50": ratio(&export, &docker),
            "target_ratio": MAX_RATIO,
            "pass": ratio(&export, &docker) <= MAX_RATIO,
        },
        "fetch_8mb": {
            "yy": summary(&fetch),
            "cp_sha256sum": summary(&plain),
            "ratio_p50": ratio(&fetch, &plain),
            "target_ratio": MAX_RATIO,
            "pass": ratio(&fetch, &plain) <= MAX_RATIO,
        },
    });
    if args.json {
        return output::json(&report);
    }
    let row = |name: &str, r: &serde_json::Value, base: &str| {
        vec![
            name.to_string(),
            format!("{} ms", r["yy"]["p50_ms"]),
            format!("{} ms", r[base]["p50_ms"]),
            format!("{}x", r["ratio_p50"]),
            format!("<= {MAX_RATIO}x"),
            if r["pass"] == true { "pass" } else { "MISSED" }.into(),
        ]
    };
    output::print(&output::table(
        &["figure", "yy p50", "plain p50", "ratio", "target", ""],
        vec![
            row(
                "25 MiB export vs docker cp + sha256sum",
                &report["export_25mib"],
                "docker_cp_sha256sum",
            ),
            row(
                "8 MB runner fetch vs cp + sha256sum",
                &report["fetch_8mb"],
                "cp_sha256sum",
            ),
        ],
    ))?;
    Ok(())
}
