//! `yy bench dispatch --database URL --replicas N`: one Runner's dispatch through N `yy
//! serve` replicas on one PostgreSQL database, beside the embedded SQLite file's single
//! process, in one run. The Runner long-polls the first replica; the pickup latency is
//! measured with the pings enqueued through another one (a cross-replica wake-up each),
//! and the throughput run's enqueuers take turns among all of them.

use serde::Serialize;

use super::harness::{self, Setup, setup};
use super::measure::{Run, latency, read_db, throughput};
use super::report::{Latency, Throughput};
use super::serve::MAX_REPLICAS;
use super::{DispatchArgs, progress};
use crate::error::CliError;
use crate::output;

/// Issue 27's targets for the replicas on this 2-core machine.
pub mod targets {
    pub const THROUGHPUT_PER_S: f64 = 2000.0;
    pub const CROSS_PICKUP_P50_MS: f64 = 5.0;
    pub const CROSS_PICKUP_P99_MS: f64 = 25.0;
}

#[derive(Debug, Serialize)]
struct Backend {
    replicas: usize,
    pickup: Latency,
    throughput: Throughput,
}

#[derive(Debug, Serialize)]
struct Comparison {
    benchmark: &'static str,
    version: &'static str,
    cpus: usize,
    commands: u32,
    latency_samples: u32,
    enqueuers: u32,
    sqlite: Backend,
    postgres: Backend,
    throughput_target_met: bool,
    pickup_p50_target_met: bool,
    pickup_p99_target_met: bool,
}

/// The benchmark fills the database with its own admin, Runner and commands: an empty one
/// only (no yy schema yet, or no account in it).
async fn check_empty(url: &str) -> anyhow::Result<()> {
    // No yy schema yet reads as no account.
    let accounts = read_db(Some(url.to_string()), Default::default(), |db| {
        Ok(db
            .query_row("SELECT count(*) FROM accounts", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0))
    })
    .await
    .map_err(|e| e.to_string());
    match accounts {
        Err(why) => Err(CliError::failure(format!("cannot connect to --database: {why}")).into()),
        Ok(0) => Ok(()),
        Ok(n) => Err(CliError::new(
            crate::error::Exit::Conflict,
            format!(
                "--database holds {n} account(s) already: the benchmark fills the database with its own, give it an empty one (createdb yy_bench)"
            ),
        )
        .into()),
    }
}

async fn measure(
    s: &mut Setup,
    through: &crate::client::Client,
    args: &DispatchArgs,
    admins: Vec<crate::client::Client>,
) -> anyhow::Result<(Latency, Throughput)> {
    let runner_id = s.runner_id.clone();
    let pickup = s
        .while_alive(latency(through, &runner_id, args.latency_samples))
        .await?;
    let run = Run::of(s, admins);
    let t = s
        .while_alive(throughput(&run, args.commands, args.enqueuers))
        .await?;
    Ok((pickup, t))
}

pub(super) async fn compare(
    args: &DispatchArgs,
    bin: std::path::PathBuf,
    url: &str,
) -> anyhow::Result<()> {
    let replicas = args.replicas as usize;
    if !(1..=MAX_REPLICAS + 1).contains(&replicas) {
        return Err(CliError::usage(format!(
            "--replicas {replicas}: give 1 to {}",
            MAX_REPLICAS + 1
        ))
        .into());
    }
    // The comparison is of both figures: neither part can be skipped here.
    for (flag, n) in [
        ("--latency-samples", args.latency_samples),
        ("--commands", args.commands),
    ] {
        if n == 0 {
            return Err(CliError::usage(format!(
                "{flag} 0: the comparison with --database measures pickup and throughput on both backends; give at least 1"
            ))
            .into());
        }
    }
    check_empty(url).await?;
    let options = |database: Option<String>, replicas: usize| harness::Options {
        max_pending: args.commands as u64 + 1000,
        database,
        replicas,
        ..Default::default()
    };

    progress("SQLite: one control plane and a Runner");
    let mut single = setup(harness::harness(bin.clone())?, options(None, 0)).await?;
    let admin = single.admin.clone();
    let (pickup, t) = measure(&mut single, &admin, args, vec![admin.clone()]).await?;
    single.check_children()?;
    drop(single);
    let sqlite = Backend {
        replicas: 1,
        pickup,
        throughput: t,
    };

    progress(&format!(
        "PostgreSQL: {replicas} replica(s) on {}, the Runner on the first",
        crate::server::store::pg::redacted(url)
    ));
    let mut rep = setup(
        harness::harness(bin)?,
        options(Some(url.to_string()), replicas - 1),
    )
    .await?;
    let mut admins = vec![rep.admin.clone()];
    admins.extend(rep.replica_admins.iter().cloned());
    // Enqueued through another replica than the Runner's, when there is one.
    let through = admins.last().expect("one at least").clone();
    let (pickup, t) = measure(&mut rep, &through, args, admins).await?;
    rep.check_children()?;
    drop(rep);
    let postgres = Backend {
        replicas,
        pickup,
        throughput: t,
    };

    let c = Comparison {
        benchmark: "dispatch --database --replicas",
        version: crate::VERSION,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        commands: args.commands,
        latency_samples: args.latency_samples,
        enqueuers: args.enqueuers,
        throughput_target_met: postgres.throughput.commands_per_s >= targets::THROUGHPUT_PER_S,
        pickup_p50_target_met: postgres.pickup.p50_ms <= targets::CROSS_PICKUP_P50_MS,
        pickup_p99_target_met: postgres.pickup.p99_ms <= targets::CROSS_PICKUP_P99_MS,
        sqlite,
        postgres,
    };
    if args.json {
        return output::json(&c);
    }
    let verdict = |ok: bool| if ok { "pass" } else { "MISSED" };
    let (s, p) = (&c.sqlite, &c.postgres);
    let table = output::table(
        &[
            "figure",
            "SQLite, 1 process",
            "PostgreSQL",
            "target (PostgreSQL)",
            "result",
        ],
        vec![
            vec![
                "throughput".into(),
                format!("{:.0} commands/s", s.throughput.commands_per_s),
                format!("{:.0} commands/s", p.throughput.commands_per_s),
                format!(">= {:.0}", targets::THROUGHPUT_PER_S),
                verdict(c.throughput_target_met).into(),
            ],
            vec![
                "pickup p50".into(),
                format!("{:.3} ms", s.pickup.p50_ms),
                format!("{:.3} ms", p.pickup.p50_ms),
                format!("<= {} ms", targets::CROSS_PICKUP_P50_MS),
                verdict(c.pickup_p50_target_met).into(),
            ],
            vec![
                "pickup p99".into(),
                format!("{:.3} ms", s.pickup.p99_ms),
                format!("{:.3} ms", p.pickup.p99_ms),
                format!("<= {} ms", targets::CROSS_PICKUP_P99_MS),
                verdict(c.pickup_p99_target_met).into(),
            ],
            vec![
                "control-plane CPU per command".into(),
                format!("{:.3} ms", s.throughput.cpu_ms_per_command.control_plane),
                format!(
                    "{:.3} ms (all replicas; PostgreSQL's own not counted)",
                    p.throughput.cpu_ms_per_command.control_plane
                ),
                String::new(),
                String::new(),
            ],
        ],
    );
    output::print(&format!(
        "yy bench dispatch: {} replica(s) on PostgreSQL beside SQLite ({} CPUs, {} pings from {} enqueuers; pickup through {})\n{table}",
        p.replicas,
        c.cpus,
        c.commands,
        c.enqueuers,
        if p.replicas > 1 {
            "another replica than the Runner's"
        } else {
            "the Runner's replica"
        }
    ))?;
    Ok(())
}
