//! Starting a benchmark's `yy serve` processes (the control plane, and replicas on one
//! PostgreSQL database) and reading where each listens.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use super::harness::{Harness, Proc};
use crate::error::CliError;

/// What the replicas after the first are called in progress and errors.
pub(super) const REPLICA_NAMES: [&str; 3] = ["replica 2", "replica 3", "replica 4"];
/// The most replicas besides the first.
pub(super) const MAX_REPLICAS: usize = REPLICA_NAMES.len();

/// Starts `yy serve` on `data`, and reads where it listens and (with TLS) its certificate's
/// fingerprint from its first lines.
pub(super) async fn start(
    h: &Harness,
    name: &'static str,
    data: &str,
    max_pending: &str,
    tls: bool,
) -> anyhow::Result<(Proc, String, Option<String>)> {
    let mut serve_args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data,
        "--max-pending-commands",
        max_pending,
    ];
    if tls {
        serve_args.extend(["--tls", "self-signed"]);
    }
    let mut serve = h.spawn(name, &serve_args, Stdio::piped())?;
    let stdout = serve.stdout().expect("piped");
    // Its address, then (with TLS) its certificate's fingerprint.
    let lines = if tls { 2 } else { 1 };
    let first = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || {
            let mut reader = BufReader::new(stdout);
            let mut out = Vec::new();
            for _ in 0..lines {
                let mut line = String::new();
                reader.read_line(&mut line)?;
                out.push(line);
            }
            Ok::<_, std::io::Error>(out)
        }),
    )
    .await;
    let printed = match first {
        Ok(Ok(Ok(lines))) => lines,
        _ => Vec::new(),
    };
    let line = printed.first().cloned().unwrap_or_default();
    let pin = printed
        .get(1)
        .and_then(|l| l.trim().strip_prefix("certificate SHA-256 "))
        .map(str::to_string);
    let Some(url) = line
        .trim()
        .strip_prefix("listening on ")
        .map(str::to_string)
    else {
        serve.check_alive()?;
        return Err(CliError::failure(format!(
            "{name} did not say where it listens (first line {:?}); its log: {}",
            line.trim(),
            serve.log_tail()
        ))
        .into());
    };
    Ok((serve, url, pin))
}
