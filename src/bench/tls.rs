//! `yy bench dispatch --tls`: the command path over HTTPS against plain HTTP, side by side
//! in one run. Two control planes with a Runner each (one `--tls self-signed`, its
//! certificate pinned by the admin client and the Runner) stay up together, and their
//! pickup latency and throughput are measured in alternating rounds, so that what the
//! machine does meanwhile weighs on both alike.

use serde::Serialize;

use super::harness::{self, Setup, setup};
use super::measure::{Run, latency, throughput};
use super::{DispatchArgs, progress};
use crate::output;

/// Rounds of (plain, TLS) measurements; each mode's figure is the median of its rounds.
const ROUNDS: usize = 3;
/// TLS throughput at least this share of plain HTTP's.
pub const THROUGHPUT_SHARE: f64 = 0.90;
/// TLS pickup p50 at most this much above plain HTTP's.
pub const PICKUP_P50_EXTRA_MS: f64 = 0.5;

#[derive(Debug, Serialize)]
struct Mode {
    pickup_p50_ms: Vec<f64>,
    commands_per_s: Vec<f64>,
    median_pickup_p50_ms: f64,
    median_commands_per_s: f64,
}

#[derive(Debug, Serialize)]
struct Comparison {
    benchmark: &'static str,
    version: &'static str,
    rounds: usize,
    commands: u32,
    latency_samples: u32,
    plain: Mode,
    tls: Mode,
    throughput_share: f64,
    pickup_p50_extra_ms: f64,
    throughput_target_met: bool,
    pickup_target_met: bool,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

async fn round(s: &mut Setup, args: &DispatchArgs) -> anyhow::Result<(f64, f64)> {
    let (admin, runner_id) = (s.admin.clone(), s.runner_id.clone());
    let l = s
        .while_alive(latency(&admin, &runner_id, args.latency_samples))
        .await?;
    let run = Run::of(s, vec![s.admin.clone()]);
    let t = s
        .while_alive(throughput(&run, args.commands, args.enqueuers))
        .await?;
    Ok((l.p50_ms, t.commands_per_s))
}

pub(super) async fn compare(args: &DispatchArgs, bin: std::path::PathBuf) -> anyhow::Result<()> {
    let options = |tls| harness::Options {
        max_pending: args.commands as u64 * ROUNDS as u64 + 1000,
        tls,
        ..Default::default()
    };
    progress("setting up a plain HTTP control plane and Runner");
    let mut plain = setup(harness::harness(bin.clone())?, options(false)).await?;
    progress("setting up an HTTPS control plane and Runner (self-signed, pinned)");
    let mut tls = setup(harness::harness(bin)?, options(true)).await?;
    let mut modes = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for r in 1..=ROUNDS {
        for (i, (name, s)) in [("plain", &mut plain), ("tls", &mut tls)]
            .into_iter()
            .enumerate()
        {
            progress(&format!(
                "round {r}/{ROUNDS}, {name}: {} one at a time, then {} from {}",
                crate::api::words::plural(args.latency_samples, "ping", "pings"),
                args.commands,
                crate::api::words::plural(args.enqueuers, "enqueuer", "enqueuers")
            ));
            let (p50, rate) = round(s, args).await?;
            modes[i].0.push((p50 * 1000.0).round() / 1000.0);
            modes[i].1.push(rate.round());
        }
    }
    plain.check_children()?;
    tls.check_children()?;
    drop((plain, tls));
    let mode = |(p50, rate): (Vec<f64>, Vec<f64>)| Mode {
        median_pickup_p50_ms: median(&p50),
        median_commands_per_s: median(&rate),
        pickup_p50_ms: p50,
        commands_per_s: rate,
    };
    let [p, t] = modes;
    let (plain, tls) = (mode(p), mode(t));
    let share = tls.median_commands_per_s / plain.median_commands_per_s;
    let extra = tls.median_pickup_p50_ms - plain.median_pickup_p50_ms;
    let c = Comparison {
        benchmark: "dispatch --tls",
        version: crate::VERSION,
        rounds: ROUNDS,
        commands: args.commands,
        latency_samples: args.latency_samples,
        throughput_share: (share * 1000.0).round() / 1000.0,
        pickup_p50_extra_ms: (extra * 1000.0).round() / 1000.0,
        throughput_target_met: share >= THROUGHPUT_SHARE,
        pickup_target_met: extra <= PICKUP_P50_EXTRA_MS,
        plain,
        tls,
    };
    if args.json {
        return output::json(&c);
    }
    let verdict = |ok: bool| if ok { "pass" } else { "MISSED" };
    let table = output::table(
        &["figure", "plain HTTP", "HTTPS", "target", "result"],
        vec![
            vec![
                "throughput (median of rounds)".into(),
                format!("{:.0} commands/s", c.plain.median_commands_per_s),
                format!("{:.0} commands/s", c.tls.median_commands_per_s),
                format!(">= {:.0} % of plain", THROUGHPUT_SHARE * 100.0),
                format!(
                    "{} ({:.1} %)",
                    verdict(c.throughput_target_met),
                    c.throughput_share * 100.0
                ),
            ],
            vec![
                "pickup latency p50 (median of rounds)".into(),
                format!("{:.3} ms", c.plain.median_pickup_p50_ms),
                format!("{:.3} ms", c.tls.median_pickup_p50_ms),
                format!("<= plain + {PICKUP_P50_EXTRA_MS} ms"),
                format!(
                    "{} ({:+.3} ms)",
                    verdict(c.pickup_target_met),
                    c.pickup_p50_extra_ms
                ),
            ],
        ],
    );
    output::print(&table)?;
    Ok(())
}
