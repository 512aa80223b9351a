//! The dispatch benchmark's measurements: pickup latency, throughput and long-poll memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;

use super::harness::{machine_cpu_s, process_cpu_s, register, rss_mb, socket_count};
use super::report::{CpuPerCommand, Latency, LongPolls, Throughput, round2, round3};
use super::{LONG_POLL_WAIT_MS, PING_TIMEOUT_MS, WARMUP_PINGS};
use crate::api::machine::{
    self, Connected, HEADER_GENERATION, HEADER_INSTANCE, HEADER_PROTOCOL, LeaseParams,
    PROTOCOL_VERSION, PingParams, PingResult, RunnerStatus,
};
use crate::api::params;
use crate::api::states::CommandState;
use crate::client::Client;
use crate::error::CliError;
use crate::server::store::Db;
use crate::server::store::pg::conn::PgConn;
use crate::timefmt::now_us;

async fn enqueue_ping(
    admin: &Client,
    runner_id: &str,
    timeout_ms: u64,
) -> anyhow::Result<machine::Command> {
    let ping = PingParams {
        hold_ms: 0,
        timeout_ms: Some(timeout_ms),
    };
    Ok(admin.runner_ping(runner_id, &ping).await?)
}

/// Pings one at a time: execution start (stamped by the Runner) minus the instant just
/// before the enqueue request was sent. Both clocks are this machine's.
pub(super) async fn latency(
    admin: &Client,
    runner_id: &str,
    samples: u32,
) -> anyhow::Result<Latency> {
    let mut pickup = Vec::with_capacity(samples as usize);
    let mut round_trip = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP_PINGS + samples {
        let sent_us = now_us();
        let cmd = enqueue_ping(admin, runner_id, PING_TIMEOUT_MS).await?;
        let cmd = admin.wait_command(&cmd.id, None).await?;
        let seen_us = now_us();
        if cmd.state != CommandState::Done {
            return Err(CliError::failure(format!(
                "ping {} ended {}: {}",
                cmd.id,
                cmd.state,
                cmd.error.unwrap_or_default()
            ))
            .into());
        }
        let result: PingResult = serde_json::from_value(cmd.result.unwrap_or_default())
            .context("the ping's result is not a ping result")?;
        if result.started_at_us == 0 {
            return Err(CliError::failure(
                "the Runner's ping result has no started_at_us: run the same yy version as the benchmark (--bin)",
            )
            .into());
        }
        if i >= WARMUP_PINGS {
            pickup.push((result.started_at_us - sent_us) as f64 / 1000.0);
            round_trip.push((seen_us - sent_us) as f64 / 1000.0);
        }
    }
    pickup.sort_by(f64::total_cmp);
    round_trip.sort_by(f64::total_cmp);
    Ok(Latency {
        samples: pickup.len(),
        min_ms: round3(pickup[0]),
        mean_ms: round3(pickup.iter().sum::<f64>() / pickup.len() as f64),
        p50_ms: round3(percentile(&pickup, 0.50)),
        p90_ms: round3(percentile(&pickup, 0.90)),
        p99_ms: round3(percentile(&pickup, 0.99)),
        max_ms: round3(pickup[pickup.len() - 1]),
        round_trip_p50_ms: round3(percentile(&round_trip, 0.50)),
        round_trip_p99_ms: round3(percentile(&round_trip, 0.99)),
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// N pings from several concurrent enqueuers; the run ends when the control plane has
/// stored the last outcome. The control plane's own database (opened read-only, which WAL
/// allows beside the writer) gives exact final states and the millisecond each outcome was
/// stored, without loading the server with thousands of status requests.
/// What the throughput run works with.
pub(super) struct Run {
    /// The admin client of each replica: the enqueuers take turns.
    pub(super) admins: Vec<Client>,
    pub(super) runner_id: String,
    /// Where the final states are read: the SQLite file, or the PostgreSQL database.
    pub(super) db: PathBuf,
    pub(super) database: Option<String>,
    /// Every replica's process; the Runner's.
    pub(super) control_plane: Vec<u32>,
    pub(super) runner: u32,
}

impl Run {
    /// The run of `s`, enqueueing through `admins`.
    pub(super) fn of(s: &super::harness::Setup, admins: Vec<Client>) -> Run {
        Run {
            admins,
            runner_id: s.runner_id.clone(),
            db: s.db.clone(),
            database: s.database.clone(),
            control_plane: s.control_plane_pids(),
            runner: s.runner_pid().expect("the Runner runs"),
        }
    }

    /// Runs `work` on a read-only connection to the control plane's database.
    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Db) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        read_db(self.database.clone(), self.db.clone(), work).await
    }
}

/// Runs `work` on a connection to the PostgreSQL database `database`, else read-only to
/// the SQLite file `db_path`, on a thread of its own (PostgreSQL's connection runs its
/// own runtime).
pub(super) async fn read_db<T: Send + 'static>(
    database: Option<String>,
    db_path: PathBuf,
    work: impl FnOnce(&Db) -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let conn = match &database {
            Some(url) => PgConn::connect(url)
                .map(|c| Db::Postgres(Box::new(c)))
                .map_err(|e| anyhow::anyhow!(crate::server::store::pg::describe(&e))),
            None => rusqlite::Connection::open_with_flags(
                &db_path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map(Db::Sqlite)
            .map_err(anyhow::Error::from),
        };
        let _ = tx.send(conn.and_then(|c| work(&c)));
    });
    rx.await.context("the database reader ended")?
}

/// Pings of the run after `before` by state, and when the last one finished (ms).
fn ping_states(conn: &Db, before: i64) -> anyhow::Result<(Vec<(String, u64)>, i64)> {
    let mut stmt = conn.prepare(
        "SELECT state, count(*), coalesce(max(finished_at), 0) FROM runner_commands
         WHERE seq > ?1 AND kind = 'ping' GROUP BY state",
    )?;
    let rows: Vec<(String, u64, i64)> = stmt
        .query_map([before], |r| {
            Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64, r.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    let last = rows.iter().map(|r| r.2).max().unwrap_or(0);
    Ok((rows.into_iter().map(|r| (r.0, r.1)).collect(), last))
}

pub(super) async fn throughput(run: &Run, n: u32, enqueuers: u32) -> anyhow::Result<Throughput> {
    let runner_id = run.runner_id.as_str();
    // The last command waits for all before it: a minute plus 10 ms each is ample.
    let timeout_ms = (60_000 + n as u64 * 10).min(3_600_000);
    let before: i64 = run
        .read(|c| {
            Ok(c.query_row(
                "SELECT coalesce(max(seq), 0) FROM runner_commands",
                [],
                |r| r.get(0),
            )?)
        })
        .await?;

    let pids: Vec<u32> = run
        .control_plane
        .iter()
        .copied()
        .chain([run.runner, std::process::id()])
        .collect();
    let cpu_before: Vec<f64> = pids.iter().map(|&p| process_cpu_s(p)).collect();
    let machine_before = machine_cpu_s();
    let next = Arc::new(AtomicU32::new(0));
    let last_id = Arc::new(std::sync::Mutex::new((0u32, String::new(), 0usize)));
    let started_us = now_us();
    let mut tasks = tokio::task::JoinSet::new();
    for e in 0..enqueuers as usize {
        let which = e % run.admins.len();
        let (admin, runner_id, next, last_id) = (
            run.admins[which].clone(),
            runner_id.to_string(),
            next.clone(),
            last_id.clone(),
        );
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                let cmd = enqueue_ping(&admin, &runner_id, timeout_ms).await?;
                let mut last = last_id.lock().unwrap_or_else(|p| p.into_inner());
                if i >= last.0 {
                    *last = (i, cmd.id.into(), which);
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let enqueued_us = now_us();
    let (_, last, which) = last_id.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // The queue is leased oldest first: when the last one is final, the rest nearly are.
    run.admins[which].wait_command(&last, None).await?;
    let cpu_after: Vec<f64> = pids.iter().map(|&p| process_cpu_s(p)).collect();
    let machine_after = machine_cpu_s();

    let (states, last_ms) = run
        .read(move |conn| {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (states, last_ms) = ping_states(conn, before)?;
                let open_states = ["pending", "leased", "running"];
                let unfinished: u64 = states
                    .iter()
                    .filter(|(s, _)| open_states.contains(&s.as_str()))
                    .map(|(_, c)| c)
                    .sum();
                if unfinished == 0 {
                    return Ok((states, last_ms));
                }
                if Instant::now() > deadline {
                    return Err(CliError::failure(format!(
                        "{unfinished} of {} still not final a minute after the last one ended",
                        crate::api::words::plural(n, "ping", "pings")
                    ))
                    .into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .await?;
    let total: u64 = states.iter().map(|(_, c)| c).sum();
    let done = states
        .iter()
        .find(|(s, _)| s == "done")
        .map(|(_, c)| *c)
        .unwrap_or(0);
    if total != n as u64 || done != n as u64 {
        return Err(CliError::failure(format!(
            "of {}, {done} ended done (states: {states:?}); a benchmark command must never fail",
            crate::api::words::plural(n, "ping", "pings")
        ))
        .into());
    }
    let seconds = ((last_ms * 1000 - started_us) as f64 / 1e6).max(1e-3);
    let used: Vec<f64> = (0..pids.len())
        .map(|i| cpu_after[i] - cpu_before[i])
        .collect();
    let replicas = run.control_plane.len();
    let per_command = |s: f64| round3(s * 1000.0 / n as f64);
    let (busy, total, stolen) = (
        machine_after.0 - machine_before.0,
        (machine_after.1 - machine_before.1).max(1e-9),
        machine_after.2 - machine_before.2,
    );
    Ok(Throughput {
        cpu_ms_per_command: CpuPerCommand {
            control_plane: per_command(used[..replicas].iter().sum()),
            runner: per_command(used[replicas]),
            client: per_command(used[replicas + 1]),
        },
        machine_busy_percent: round2(100.0 * busy / total),
        other_processes_percent: round2(
            (100.0 * (busy - stolen - used.iter().sum::<f64>()) / total).max(0.0),
        ),
        stolen_percent: round2((100.0 * stolen / total).max(0.0)),
        commands: n,
        seconds: round3(seconds),
        commands_per_s: (n as f64 / seconds).round(),
        enqueue_per_s: (n as f64 / ((enqueued_us - started_us) as f64 / 1e6)).round(),
        states: states.into_iter().collect(),
    })
}

/// Registers `count` Runners (one source each: one enabled Runner per source), connects
/// each as the Runner would, holds one long-poll per Runner and reads the control plane's
/// memory while they wait. The long-polls end by themselves (bounded wait) and are dropped
/// right after the measurement.
pub(super) async fn long_poll_rss(
    admin: &Client,
    url: &str,
    pid: u32,
    count: u32,
) -> anyhow::Result<LongPolls> {
    let before = rss_mb(pid)?;
    let tokens: Vec<String> = futures_util::stream::iter(0..count)
        .map(|i| async move {
            let name = format!("bench-lp-{i:05}");
            admin
                .source_create(&params::SourceCreate {
                    name: name.clone(),
                    description: String::new(),
                })
                .await?;
            Ok::<_, anyhow::Error>(
                register(admin, url, &name, None, Vec::new())
                    .await?
                    .config
                    .token,
            )
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;

    let http = crate::api::http::http_builder(&url.parse()?)
        .timeout(Duration::from_millis(LONG_POLL_WAIT_MS + 30_000))
        .pool_max_idle_per_host(usize::MAX)
        .build()?;
    let base = url.trim_end_matches('/').to_string();
    let post = {
        let (http, base) = (http.clone(), base.clone());
        move |path: &str, token: &str, instance: &str, generation: Option<i64>| {
            let mut req = http
                .post(format!("{base}/runner/v1/{path}"))
                .bearer_auth(token)
                .header(HEADER_PROTOCOL, PROTOCOL_VERSION.to_string())
                .header(HEADER_INSTANCE, instance);
            if let Some(g) = generation {
                req = req.header(HEADER_GENERATION, g.to_string());
            }
            req
        }
    };
    let status = RunnerStatus {
        version: crate::VERSION.into(),
        hostname: "bench".into(),
        ..RunnerStatus::default()
    };
    let connected: Vec<(String, String, i64)> = futures_util::stream::iter(tokens)
        .map(|token| {
            let (post, status) = (post.clone(), status.clone());
            async move {
                let instance = uuid::Uuid::new_v4().to_string();
                let resp = post("connect", &token, &instance, None)
                    .json(&status)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    return Err(CliError::failure(format!(
                        "a benchmark Runner could not connect: HTTP {}: {}",
                        resp.status(),
                        resp.text().await.unwrap_or_default()
                    ))
                    .into());
                }
                let c: Connected = resp.json().await?;
                Ok::<_, anyhow::Error>((token, instance, c.generation.get()))
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let connected_rss = rss_mb(pid)?;

    let returned = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut polls = tokio::task::JoinSet::new();
    for (token, instance, generation) in connected {
        let (post, returned, first_error) = (post.clone(), returned.clone(), first_error.clone());
        polls.spawn(async move {
            let r = post("lease", &token, &instance, Some(generation))
                .json(&LeaseParams {
                    max: 1,
                    wait_ms: Some(LONG_POLL_WAIT_MS),
                })
                .send()
                .await;
            // A waiting poll answers its headers at once and its body when the wait ends:
            // only the body says it returned.
            let problem = match r {
                Ok(resp) if resp.status().is_success() => {
                    resp.bytes().await.err().map(|e| e.to_string())
                }
                Ok(resp) => Some(format!(
                    "HTTP {}: {}",
                    resp.status(),
                    resp.text().await.unwrap_or_default()
                )),
                Err(e) => Some(e.to_string()),
            };
            returned.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = problem {
                first_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(p);
            }
        });
    }
    let launched = Instant::now();

    // Held: the control plane has a socket per long-poll and none has been answered.
    let deadline = launched + Duration::from_secs(10);
    let sockets = loop {
        let sockets = socket_count(pid);
        if sockets > count as usize {
            break sockets;
        }
        if returned.load(Ordering::Relaxed) > 0 || Instant::now() > deadline {
            let why = first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Err(CliError::failure(format!(
                "the control plane held only {} for {} ({} answered early{})",
                crate::api::words::plural(sockets, "connection", "connections"),
                crate::api::words::plural(count, "long-poll", "long-polls"),
                returned.load(Ordering::Relaxed),
                why.map(|w| format!("; first problem: {w}"))
                    .unwrap_or_default()
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Let every request reach its wait, then take the peak over a short window.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut peak = 0f64;
    for _ in 0..15 {
        peak = peak.max(rss_mb(pid)?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let early = returned.load(Ordering::Relaxed);
    if early > 0 {
        let why = first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        return Err(CliError::failure(format!(
            "{early} of {} ended before the measurement was over{}",
            crate::api::words::plural(count, "long-poll", "long-polls"),
            why.map(|w| format!(": {w}")).unwrap_or_default()
        ))
        .into());
    }
    if launched.elapsed() >= Duration::from_millis(LONG_POLL_WAIT_MS) {
        return Err(
            CliError::failure("the long-polls outlived their wait during the measurement").into(),
        );
    }
    polls.abort_all();
    while polls.join_next().await.is_some() {}
    Ok(LongPolls {
        long_polls: count,
        control_plane_rss_mb_before: round2(before),
        control_plane_rss_mb_connected: round2(connected_rss),
        control_plane_rss_mb: round2(peak),
        control_plane_sockets: sockets,
    })
}

// ---- the process's limits and the machine ----

/// Raises the soft open-file limit to the hard one when `need` exceeds it; children
/// inherit it, so the control plane can hold the long-polls too.
pub(super) fn raise_fd_limit(need: u64) -> anyhow::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a pointer to an rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading the open-file limit");
    }
    let need = need as libc::rlim_t;
    if lim.rlim_cur >= need {
        return Ok(());
    }
    if lim.rlim_max < need {
        return Err(CliError::usage(format!(
            "the open-file limit is {} (hard), and {need} are needed: raise it (ulimit -Hn) or pass a smaller --long-polls",
            lim.rlim_max
        ))
        .into());
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: a pointer to an rlimit we own, read only.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error()).context("raising the open-file limit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.50), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }
}
