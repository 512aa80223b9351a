//! The dispatch benchmark's report: figures, targets and checks, as JSON or a table.

use serde::Serialize;

use super::{DispatchArgs, RUNNER_MAX_CONCURRENT, WARMUP_PINGS, targets};
use crate::output;

// ---- the report ----

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    cpu_model: Option<String>,
    kernel: Option<String>,
    memory_mb: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Parameters {
    commands: u32,
    latency_samples: u32,
    warmup_pings: u32,
    long_polls: u32,
    enqueuers: u32,
    runner_max_concurrent: u32,
}

#[derive(Debug, Serialize)]
pub(super) struct Latency {
    pub samples: usize,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub(super) p50_ms: f64,
    pub(super) p90_ms: f64,
    pub(super) p99_ms: f64,
    pub max_ms: f64,
    /// Enqueue to outcome seen by the client (includes reporting and the client's wait).
    pub(super) round_trip_p50_ms: f64,
    pub(super) round_trip_p99_ms: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct Throughput {
    pub commands: u32,
    /// From the first enqueue request to the last outcome stored by the control plane.
    pub seconds: f64,
    pub commands_per_s: f64,
    /// Enqueue requests answered per second (all enqueuers together).
    pub enqueue_per_s: f64,
    /// Final states of the run's commands; all must be `done`.
    pub states: std::collections::BTreeMap<String, u64>,
    /// CPU time per command during the run, by process, in milliseconds.
    pub cpu_ms_per_command: CpuPerCommand,
    /// How busy the whole machine was during the run (100 = every CPU), how much of that
    /// was not the benchmark's processes (other load skews every figure), and how much the
    /// hypervisor took for other guests (a virtual machine's CPUs shared on the host: it
    /// skews them too, and varies from run to run).
    pub machine_busy_percent: f64,
    pub other_processes_percent: f64,
    pub stolen_percent: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct CpuPerCommand {
    pub control_plane: f64,
    pub runner: f64,
    /// The benchmark's own enqueuers (an admin API client).
    pub client: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct LongPolls {
    pub long_polls: u32,
    pub control_plane_rss_mb_before: f64,
    /// With the Runners registered and connected (each connect answered), before their
    /// long-polls: what the long-polls and their connections add is the difference.
    pub control_plane_rss_mb_connected: f64,
    pub control_plane_rss_mb: f64,
    /// Open sockets of the control plane while they were held.
    pub control_plane_sockets: usize,
}

#[derive(Debug, Serialize)]
struct Targets {
    pickup_p50_ms_max: f64,
    pickup_p99_ms_max: f64,
    throughput_commands_per_s_min: f64,
    runner_idle_rss_mb_max: f64,
    long_polls_control_plane_rss_mb_max: f64,
    long_polls_count: u32,
}

#[derive(Debug, Serialize)]
struct Check {
    figure: &'static str,
    value: f64,
    unit: &'static str,
    /// `<=` or `>=`.
    comparison: &'static str,
    target: f64,
    pass: bool,
}

/// What a run measured (each part `None` when skipped); MB are 10^6 bytes of VmRSS.
#[derive(Debug, Serialize)]
pub(super) struct Figures {
    pub pickup_latency: Option<Latency>,
    pub throughput: Option<Throughput>,
    pub runner_idle_rss_mb: f64,
    /// Of that, the Runner's own memory (`RssAnon`); the rest is mapped files.
    pub runner_idle_private_mb: f64,
    pub runner_rss_mb_after_throughput: Option<f64>,
    pub control_plane_rss_mb_idle: f64,
    pub long_polls: Option<LongPolls>,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    benchmark: &'static str,
    version: &'static str,
    machine: Machine,
    parameters: Parameters,
    #[serde(flatten)]
    figures: Figures,
    targets: Targets,
    checks: Vec<Check>,
    all_targets_met: bool,
    pub missed: Vec<String>,
}

pub(super) fn report(args: &DispatchArgs, mut figures: Figures) -> Report {
    figures.runner_idle_rss_mb = round2(figures.runner_idle_rss_mb);
    figures.runner_idle_private_mb = round2(figures.runner_idle_private_mb);
    figures.runner_rss_mb_after_throughput = figures.runner_rss_mb_after_throughput.map(round2);
    figures.control_plane_rss_mb_idle = round2(figures.control_plane_rss_mb_idle);
    let mut checks = Vec::new();
    if let Some(l) = &figures.pickup_latency {
        checks.push(at_most(
            "pickup latency p50",
            l.p50_ms,
            "ms",
            targets::PICKUP_P50_MS,
        ));
        checks.push(at_most(
            "pickup latency p99",
            l.p99_ms,
            "ms",
            targets::PICKUP_P99_MS,
        ));
    }
    if let Some(t) = &figures.throughput {
        checks.push(Check {
            figure: "throughput",
            value: t.commands_per_s,
            unit: "commands/s",
            comparison: ">=",
            target: targets::THROUGHPUT_PER_S,
            pass: t.commands_per_s >= targets::THROUGHPUT_PER_S,
        });
    }
    checks.push(at_most(
        "Runner RSS, idle",
        figures.runner_idle_rss_mb,
        "MB",
        targets::RUNNER_IDLE_RSS_MB,
    ));
    if let Some(lp) = &figures.long_polls {
        // The target is for 10,000 long-polls; other counts are reported, not judged.
        if lp.long_polls == targets::LONG_POLLS {
            checks.push(at_most(
                "control plane RSS, 10000 long-polls",
                lp.control_plane_rss_mb,
                "MB",
                targets::LONG_POLLS_RSS_MB,
            ));
        }
    }
    let missed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| {
            format!(
                "{}: {} {} (target {} {} {})",
                c.figure,
                fmt_value(c.value),
                c.unit,
                c.comparison,
                fmt_value(c.target),
                c.unit
            )
        })
        .collect();
    Report {
        benchmark: "dispatch",
        version: crate::VERSION,
        machine: machine(),
        parameters: Parameters {
            commands: args.commands,
            latency_samples: args.latency_samples,
            warmup_pings: if args.latency_samples > 0 {
                WARMUP_PINGS
            } else {
                0
            },
            long_polls: args.long_polls,
            enqueuers: args.enqueuers,
            runner_max_concurrent: RUNNER_MAX_CONCURRENT,
        },
        figures,
        targets: Targets {
            pickup_p50_ms_max: targets::PICKUP_P50_MS,
            pickup_p99_ms_max: targets::PICKUP_P99_MS,
            throughput_commands_per_s_min: targets::THROUGHPUT_PER_S,
            runner_idle_rss_mb_max: targets::RUNNER_IDLE_RSS_MB,
            long_polls_control_plane_rss_mb_max: targets::LONG_POLLS_RSS_MB,
            long_polls_count: targets::LONG_POLLS,
        },
        all_targets_met: missed.is_empty(),
        missed,
        checks,
    }
}

fn at_most(figure: &'static str, value: f64, unit: &'static str, target: f64) -> Check {
    Check {
        figure,
        value,
        unit,
        comparison: "<=",
        target,
        pass: value <= target,
    }
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_mb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| (kib * 1024.0 / 1e6).round());
    Machine {
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        memory_mb,
    }
}

// ---- output ----

pub(super) fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

pub(super) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn print_human(r: &Report) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let judged = |figure: &str| r.checks.iter().find(|c| c.figure == figure);
    let mut row = |figure: &str, value: String, check: Option<&Check>| {
        let (target, result) = match check {
            Some(c) => (
                format!("{} {} {}", c.comparison, fmt_value(c.target), c.unit),
                if c.pass { "pass" } else { "MISSED" }.to_string(),
            ),
            None => ("-".into(), "-".into()),
        };
        rows.push(vec![figure.to_string(), value, target, result]);
    };
    if let Some(l) = &r.figures.pickup_latency {
        let p50 = "pickup latency p50";
        let p99 = "pickup latency p99";
        row(p50, format!("{:.2} ms", l.p50_ms), judged(p50));
        row(p99, format!("{:.2} ms", l.p99_ms), judged(p99));
        row("pickup latency max", format!("{:.2} ms", l.max_ms), None);
        row(
            "round trip p50 (enqueue to outcome seen)",
            format!("{:.2} ms", l.round_trip_p50_ms),
            None,
        );
    }
    if let Some(t) = &r.figures.throughput {
        row(
            "throughput",
            format!("{:.0} commands/s", t.commands_per_s),
            judged("throughput"),
        );
        row(
            "enqueue rate",
            format!("{:.0} requests/s", t.enqueue_per_s),
            None,
        );
        let c = &t.cpu_ms_per_command;
        row(
            "CPU per command: control plane / Runner / client",
            format!(
                "{:.3} / {:.3} / {:.3} ms",
                c.control_plane, c.runner, c.client
            ),
            None,
        );
        row(
            "machine busy during throughput (other processes)",
            format!(
                "{:.0}% ({:.0}%)",
                t.machine_busy_percent, t.other_processes_percent
            ),
            None,
        );
        row(
            "CPU taken by the hypervisor during throughput",
            format!("{:.0}%", t.stolen_percent),
            None,
        );
    }
    let idle = "Runner RSS, idle";
    row(
        idle,
        format!(
            "{:.1} MB ({:.1} MB own)",
            r.figures.runner_idle_rss_mb, r.figures.runner_idle_private_mb
        ),
        judged(idle),
    );
    if let Some(v) = r.figures.runner_rss_mb_after_throughput {
        row("Runner RSS, after throughput", format!("{v:.1} MB"), None);
    }
    row(
        "control plane RSS, idle",
        format!("{:.1} MB", r.figures.control_plane_rss_mb_idle),
        None,
    );
    if let Some(lp) = &r.figures.long_polls {
        row(
            &format!("control plane RSS, {} Runners connected", lp.long_polls),
            format!("{:.1} MB", lp.control_plane_rss_mb_connected),
            None,
        );
        let figure = format!("control plane RSS, {} long-polls", lp.long_polls);
        row(
            &figure,
            format!("{:.1} MB", lp.control_plane_rss_mb),
            judged("control plane RSS, 10000 long-polls"),
        );
    }
    let mut text = output::table(&["figure", "value", "target", "result"], rows);
    let m = &r.machine;
    text.push_str(&format!(
        "\n\nyy {} on {} ({}), Linux {}; {}, {}, {}",
        r.version,
        crate::api::words::plural(m.cpus, "CPU", "CPUs"),
        m.cpu_model.as_deref().unwrap_or("unknown CPU"),
        m.kernel.as_deref().unwrap_or("?"),
        crate::api::words::plural(
            r.parameters.latency_samples,
            "latency sample",
            "latency samples"
        ),
        crate::api::words::plural(r.parameters.commands, "throughput ping", "throughput pings"),
        crate::api::words::plural(r.parameters.long_polls, "long-poll", "long-polls"),
    ));
    if r.missed.is_empty() {
        text.push_str("\nall targets met");
    } else {
        text.push_str(&format!(
            "\nMISSED {} target(s): {}",
            r.missed.len(),
            r.missed.join("; ")
        ));
    }
    output::print(&text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_stand_at_the_top_of_the_json_report() {
        let args = DispatchArgs {
            json: true,
            commands: 0,
            latency_samples: 0,
            long_polls: 0,
            enqueuers: 1,
            bin: None,
            tls: false,
            database: None,
            replicas: 2,
        };
        let figures = Figures {
            pickup_latency: None,
            throughput: None,
            runner_idle_rss_mb: 10.345,
            runner_idle_private_mb: 4.321,
            runner_rss_mb_after_throughput: None,
            control_plane_rss_mb_idle: 30.0,
            long_polls: None,
        };
        let r = serde_json::to_value(report(&args, figures)).unwrap();
        assert!(r.get("figures").is_none());
        assert_eq!(r["runner_idle_rss_mb"], 10.35);
        assert_eq!(r["runner_idle_private_mb"], 4.32);
        assert_eq!(r["control_plane_rss_mb_idle"], 30.0);
        assert!(r["pickup_latency"].is_null());
        assert_eq!(r["all_targets_met"], true);
    }
}
