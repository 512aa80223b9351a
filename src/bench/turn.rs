//! `yy bench turn`: a computer agent's turn (the isolated Worker, its tool in the agent's
//! computer) against a host agent's turn (the Runner's Hermes), with the same scripted model
//! answering at once: one tool call, then a final answer. It starts its own control plane,
//! Runner, Hermes and model server in a temporary directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use super::harness::{Harness, Options, harness, setup};
use super::progress;
use crate::api::params::AgentEnv;
use crate::api::sessions::ChatParams;
use crate::api::states::TurnState;
use crate::client::Client;
use crate::error::CliError;
use crate::output;

/// The scripted OpenAI-compatible model the tests use, shipped for the benchmark.
const FAKE_MODEL: &str = include_str!("../../tests/fixtures/fake_model_server.py");

/// Added p50 of a warm computer agent's turn over a host agent's turn (docs/benchmarks.md).
pub const ADDED_P50_MS: f64 = 150.0;

/// What `bench turn` and `bench teams` run their computer agents with.
#[derive(Debug, clap::Args)]
pub struct WorkerBench {
    /// The full image id (sha256:...) of a computer image (`yy image build` prints it)
    pub image: String,
    /// The `hermes` executable of the Hermes venv (the Worker runs the `python` beside it)
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/opt/yy/hermes-venv/bin/hermes"
    )]
    pub hermes: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct TurnBenchArgs {
    #[command(flatten)]
    pub worker: WorkerBench,
    /// Turns of each kind timed (after one untimed of each)
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=500))]
    pub samples: u32,
    /// New computer agents whose first turn is timed, each after the Runner's spare
    /// Worker is ready (their computers are created then)
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(0..=FIRST_TURNS_MAX as i64))]
    pub first_turns: u32,
    /// Print the figures and the target as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// A computer agent's first turn p50, with a spare Worker ready (issue 29).
pub const FIRST_TURN_P50_MS: f64 = 1000.0;
/// First-turn agents at most: each keeps a computer, and the Runner runs 8.
const FIRST_TURNS_MAX: u32 = 6;

/// Starts the scripted model on `script` (logging every request to `log` when given) and
/// writes a Hermes home whose default profile and profile `bench` use it. Returns the
/// runner.json entries for that home and the Worker's Python (the one beside `hermes`).
pub(super) fn scripted_hermes(
    h: &mut Harness,
    hermes: &Path,
    script: &Value,
    log: Option<&Path>,
) -> anyhow::Result<serde_json::Map<String, Value>> {
    if !hermes.is_file() {
        return Err(CliError::usage(format!(
            "{} is not the hermes executable: pass --hermes PATH (scripts/install-hermes.sh prints it)",
            hermes.display()
        ))
        .into());
    }
    let script_path = h.path("script.json");
    std::fs::write(&script_path, serde_json::to_vec(script)?)?;
    let model_py = h.path("fake_model_server.py");
    std::fs::write(&model_py, FAKE_MODEL)?;
    let mut model_args = vec![
        model_py.display().to_string(),
        "--port".into(),
        "0".into(),
        "--script".into(),
        script_path.display().to_string(),
    ];
    if let Some(log) = log {
        model_args.extend(["--log".into(), log.display().to_string()]);
    }
    progress("starting the scripted model");
    let args: Vec<&str> = model_args.iter().map(String::as_str).collect();
    let mut model = h.spawn_helper("model", "python3", &args)?;
    let port = first_line_port(&mut model)?;
    h.helpers.push(model);

    let home = h.path("hermes-home");
    crate::fsutil::create_private_dir(&home)?;
    let config = format!(
        "model:\n  default: fake-model\n  provider: custom\n  base_url: http://127.0.0.1:{port}/v1\n  api_key: sk-bench\n  api_mode: chat_completions\napprovals:\n  mode: \"off\"\n"
    );
    let profile = home.join("profiles/bench");
    std::fs::create_dir_all(&profile)?;
    for dir in [&home, &profile] {
        std::fs::write(dir.join("config.yaml"), &config)?;
    }
    let python = hermes
        .parent()
        .map(|p| p.join("python"))
        .unwrap_or_default();
    let mut runner_config = serde_json::Map::new();
    runner_config.insert("hermesHome".into(), json!(home));
    runner_config.insert("workerPython".into(), json!(python));
    Ok(runner_config)
}

pub async fn run(args: TurnBenchArgs) -> anyhow::Result<()> {
    let bin = std::env::current_exe().context("finding this executable")?;
    let mut h = harness(bin)?;
    // The model: every turn is a tool call then a final answer; both kinds alike.
    let turns = 2 * (args.samples as usize + 1) + args.first_turns as usize;
    let mut steps = Vec::new();
    for _ in 0..turns {
        steps.push(json!({"tool_call": {"name": "terminal", "arguments": {"command": "true"}}}));
        steps.push(json!({"text": "done"}));
    }
    let mut runner_config = scripted_hermes(&mut h, &args.worker.hermes, &json!(steps), None)?;
    runner_config.insert(
        "hermesCommand".into(),
        json!([args.worker.hermes.display().to_string(), "serve"]),
    );
    progress("starting the control plane, the Runner and its Hermes");
    let mut s = setup(
        h,
        Options {
            profile_cwd: Some("/workspace".into()),
            computer_image: Some(args.worker.image.clone()),
            runner_config,
            // The first-turn agents' computers and the isolated agent's.
            max_computers: Some(FIRST_TURNS_MAX + 2),
            runner_metrics: true,
            ..Default::default()
        },
    )
    .await?;
    for (name, env) in [("host", AgentEnv::Host), ("isolated", AgentEnv::Computer)] {
        s.admin
            .agent_create(&super::harness::bench_agent(name, env))
            .await?;
    }
    let admin = s.admin.clone();
    let metrics = s
        .runner_metrics
        .clone()
        .context("the Runner's metrics URL")?;
    let figures = s
        .while_alive(measure(
            &admin,
            &metrics,
            args.samples as usize,
            args.first_turns as usize,
        ))
        .await?;
    drop(s); // every child stops before the report
    report(&args, figures)
}

struct Figures {
    cold_worker_ms: f64,
    cold_host_ms: f64,
    host: Vec<f64>,
    worker: Vec<f64>,
    /// First turns of new computer agents, each with a spare Worker ready.
    first: Vec<f64>,
}

async fn measure(
    admin: &Client,
    metrics: &str,
    samples: usize,
    first_turns: usize,
) -> anyhow::Result<Figures> {
    progress("first turns (untimed for the p50s): a Worker is claimed, the computer is created");
    let cold_host_ms = turn(admin, "host").await?;
    wait_spare(metrics).await?;
    let cold_worker_ms = turn(admin, "isolated").await?;
    progress(&format!(
        "{} of each kind, alternating",
        crate::api::words::plural(samples, "turn", "turns")
    ));
    let (mut host, mut worker) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        host.push(turn(admin, "host").await?);
        worker.push(turn(admin, "isolated").await?);
    }
    progress(&format!(
        "{}, each once the spare Worker is ready",
        crate::api::words::plural(
            first_turns,
            "new computer agent's first turn",
            "new computer agents' first turns"
        )
    ));
    let mut first = Vec::new();
    for i in 0..first_turns {
        let name = format!("first-{i}");
        admin
            .agent_create(&super::harness::bench_agent(&name, AgentEnv::Computer))
            .await?;
        wait_spare(metrics).await?;
        first.push(turn(admin, &name).await?);
    }
    Ok(Figures {
        cold_worker_ms,
        cold_host_ms,
        host,
        worker,
        first,
    })
}

/// Waits until the Runner has a spare Worker ready (its metrics say so).
async fn wait_spare(metrics: &str) -> anyhow::Result<()> {
    super::harness::wait_gauge(
        metrics,
        "yy_runner_worker_spares",
        "the Runner started no spare Worker (--warm-workers)",
    )
    .await
}

/// One turn from the chat request to its recorded end, in milliseconds.
async fn turn(admin: &Client, agent: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let chat = admin
        .chat(&ChatParams {
            agent: agent.into(),
            message: "run true".into(),
            session: None,
            attachments: Vec::new(),
        })
        .await?;
    let mut after = 0;
    loop {
        let page = admin
            .session_events(&chat.session.id, after, 25_000, Some(&chat.turn.id))
            .await?;
        after = page.events.last().map(|e| e.seq).unwrap_or(after);
        if let Some(t) = page.turn.filter(|t| t.is_final()) {
            if t.state != TurnState::Complete {
                return Err(CliError::failure(format!(
                    "a {agent} turn ended {}: {}",
                    t.state,
                    t.error.unwrap_or_default()
                ))
                .into());
            }
            return Ok(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
}

pub(super) fn first_line_port(model: &mut super::harness::Proc) -> anyhow::Result<u16> {
    let stdout = model.stdout().context("the model server's stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    line.trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| CliError::failure(format!("the model server said {:?}", line.trim())).into())
}

fn p50(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(args: &TurnBenchArgs, f: Figures) -> anyhow::Result<()> {
    let (host, worker) = (p50(&f.host), p50(&f.worker));
    let added = worker - host;
    let ok = added <= ADDED_P50_MS;
    let first = (!f.first.is_empty()).then(|| p50(&f.first));
    let first_ok = first.map(|v| v <= FIRST_TURN_P50_MS);
    let figures = json!({
        "samples": args.samples,
        "host_turn_p50_ms": host,
        "computer_turn_p50_ms": worker,
        "added_p50_ms": added,
        "target_added_p50_ms": ADDED_P50_MS,
        "target_met": ok,
        "cold": { "computer_turn_ms": f.cold_worker_ms, "host_turn_ms": f.cold_host_ms },
        "first_turns": {
            "samples_ms": f.first,
            "p50_ms": first,
            "target_p50_ms": FIRST_TURN_P50_MS,
            "target_met": first_ok,
        },
    });
    if args.json {
        return output::json(&figures);
    }
    let ms = |v: f64| format!("{v:.1} ms");
    let mut rows = vec![
        vec![
            "host agent's turn p50".into(),
            ms(host),
            "-".into(),
            "-".into(),
        ],
        vec![
            "computer agent's turn p50 (warm Worker)".into(),
            ms(worker),
            "-".into(),
            "-".into(),
        ],
        vec![
            "added by the Worker and the computer".into(),
            ms(added),
            format!("<= {ADDED_P50_MS} ms"),
            if ok { "pass" } else { "MISSED" }.into(),
        ],
        vec![
            "computer agent's first turn (spare Worker, computer created)".into(),
            ms(f.cold_worker_ms),
            "-".into(),
            "-".into(),
        ],
        vec![
            "host agent's first turn".into(),
            ms(f.cold_host_ms),
            "-".into(),
            "-".into(),
        ],
    ];
    if let (Some(v), Some(met)) = (first, first_ok) {
        rows.push(vec![
            format!("new computer agents' first turn p50 ({})", f.first.len()),
            ms(v),
            format!("<= {FIRST_TURN_P50_MS} ms"),
            if met { "pass" } else { "MISSED" }.into(),
        ]);
    }
    output::print(&output::table(
        &["figure", "value", "target", "result"],
        rows,
    ))?;
    Ok(())
}
