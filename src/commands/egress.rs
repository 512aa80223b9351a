//! `yy egress serve`: the egress proxy of `public-web` computers. The Runner starts it in a
//! hardened container; docs/egress.md describes the rules.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::egress::proxy::{Proxy, ProxyConfig, SystemResolver};
use crate::error::CliError;

#[derive(Debug, Args)]
pub struct EgressArgs {
    #[command(subcommand)]
    pub command: EgressCommand,
}

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Run the egress proxy (the Runner starts it in a container; not usually run by hand)
    ///
    /// Allows CONNECT to port 443 and absolute-form http:// to port 80 of public addresses
    /// only. A name is resolved once and refused if any answer is not public; the
    /// connection goes to the checked address. Every decision is one JSON line on stdout;
    /// logs go to stderr.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// An address of the host, refused whatever its class; repeat for several (the
    /// proxy's own addresses are found by itself)
    #[arg(long = "deny-host", value_name = "IP")]
    pub deny_host: Vec<IpAddr>,
    /// Connections served at once; one more is answered 503
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,
    /// Close a connection after this long without a byte either way
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Give up connecting to an address after this long
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
}

pub async fn run(args: EgressArgs) -> anyhow::Result<()> {
    match args.command {
        EgressCommand::Serve(a) => serve(a).await,
    }
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    for (what, d) in [
        ("--idle-timeout", a.idle_timeout),
        ("--connect-timeout", a.connect_timeout),
    ] {
        if d.is_zero() {
            return Err(CliError::usage(format!("{what} must be more than zero")).into());
        }
    }
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(|e| CliError::failure(format!("cannot listen on {}: {e}", a.listen)))?;
    let cfg = ProxyConfig {
        host_addrs: a.deny_host,
        max_connections: a.max_connections as usize,
        idle_timeout: a.idle_timeout,
        connect_timeout: a.connect_timeout,
        ..ProxyConfig::default()
    };
    // One decision, one line: the Runner reads them from the container's stdout.
    let sink = Arc::new(|d: crate::egress::Decision| {
        if let Ok(line) = serde_json::to_string(&d) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    });
    let proxy = Proxy::new(cfg, Arc::new(SystemResolver), sink);
    let shutdown = super::serve::shutdown_signal()?;
    tracing::info!(listen = %a.listen, "egress proxy listening");
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        on_signal.cancel();
    });
    proxy.serve(listener, stop).await?;
    tracing::info!("egress proxy stopped");
    Ok(())
}

/// `yy runner egress-log RUNNER [--computer C]`: the Runner's recent proxy decisions.
pub async fn log(
    runner: &str,
    computer: Option<String>,
    limit: u32,
    json: bool,
) -> anyhow::Result<()> {
    use crate::egress::{Decision, LogParams, LogResult, printable};
    use crate::output;

    let client = super::context::client()?;
    let cmd = client
        .runner_egress_log(
            runner,
            &LogParams {
                computer,
                limit: Some(limit),
            },
        )
        .await?;
    let cmd = super::runner_ops::wait(&client, &cmd.id).await?;
    let result: LogResult = super::runner_ops::result_of(cmd, "reading the egress log")?;
    if json {
        return output::json(&result);
    }
    if !result.proxy_running && result.decisions.is_empty() {
        eprintln!(
            "no decisions: runner {runner} has no egress proxy running (it starts with the first public-web computer)"
        );
    }
    // Everything here came from a computer's requests: printable text only.
    let row = |d: &Decision| {
        vec![
            crate::timefmt::rfc3339(d.at_ms),
            d.computer
                .as_deref()
                .map(|c| printable(c, 36))
                .unwrap_or_else(|| "-".into()),
            printable(&d.method, 16),
            printable(&d.host, 80),
            d.port.to_string(),
            d.address
                .as_deref()
                .map(|a| printable(a, 45))
                .unwrap_or_else(|| "-".into()),
            printable(&d.verdict, 32),
            printable(&d.reason, 160),
        ]
    };
    output::list(
        &result.decisions,
        false,
        &[
            "time", "computer", "method", "host", "port", "address", "verdict", "reason",
        ],
        row,
    )
}
