//! `yy bench teams`: the team scheduler. An admin computer agent (its model scripted to
//! answer at once) builds a team with one member and, each round, a goal whose subtasks
//! form a chain: each becomes ready when the admin accepts the one before. For every
//! subtask after the first: ready (the acceptance committed) -> its turn admitted -> the
//! Runner starts it -> its prompt reaching Hermes (the Runner hands it to the Worker's
//! Hermes) -> Hermes's model call. Then four teams are made and their members warmed
//! (Worker and computer started), and the four admins run a goal of eight independent
//! subtasks each at once, and the slot use is measured. Starts its own
//! control plane, Runner, Workers and scripted model in a temporary directory.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::harness::{Options, harness, setup};
use super::progress;
use crate::api::params::{AgentCreate, AgentEnv};
use crate::api::sessions::ChatParams;
use crate::api::states::SessionState;
use crate::api::teams::GoalState;
use crate::client::Client;
use crate::error::CliError;
use crate::output;

/// The scripted OpenAI-compatible model the tests use, shipped for the benchmark.
/// Target: subtask ready -> prompt reaching Hermes, p50 (docs/benchmarks.md).
pub const OVERHEAD_P50_MS: f64 = 20.0;
/// Subtasks of each round's chain (8: one review per result stays within the 8 automatic
/// wake-ups of an authorization).
const CHAIN: usize = 8;
/// Teams of the slot phase (one per execution slot).
const TEAMS: usize = 4;
/// Target: slot use while the four teams' subtasks run.
pub const SLOT_USE: f64 = 0.90;

#[derive(Debug, clap::Args)]
pub struct TeamsBenchArgs {
    #[command(flatten)]
    pub worker: super::turn::WorkerBench,
    /// Goals run one after another (each gives 7 samples)
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Print the figures and the target as one JSON object
    #[arg(long)]
    pub json: bool,
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

/// The model's script: planning, reviews and the members' answers, keyed by prompt.
fn script(rounds: u32) -> Value {
    let member_turns = rounds as usize * CHAIN + TEAMS * CHAIN;
    let mut entries = vec![
        json!({ "match": "[yy subtask]", "steps": (0..member_turns)
            .map(|_| json!({ "text": "done" })).collect::<Vec<_>>() }),
        json!({ "match": "[yy goal result]", "steps": (0..(rounds as usize + TEAMS))
            .map(|_| json!({ "text": "delivered" })).collect::<Vec<_>>() }),
        json!({ "match": "Warm up.", "steps": (0..TEAMS)
            .map(|_| json!({ "text": "warm" })).collect::<Vec<_>>() }),
    ];
    // The overhead phase: team 1, a chain per round.
    for r in 1..=rounds {
        let goal = format!("Round {r}");
        entries
            .push(json!({ "match": format!("\"{goal}\""), "steps": reviews_of(&goal, CHAIN + 2) }));
        let subtasks: Vec<Value> = (1..=CHAIN)
            .map(|k| {
                let mut a = json!({ "goal": goal, "title": format!("step {k}"), "owner": "w1", "criteria": "done" });
                if k > 1 {
                    a["deps"] = json!([format!("#{}", k - 1)]);
                }
                tool("subtask_add", a)
            })
            .collect();
        let mut plan = if r == 1 { team_steps(1) } else { Vec::new() };
        plan.push(json!({ "tool_call": tool("goal_create", json!({ "team": "crew1", "title": goal, "criteria": "a chain" })) }));
        plan.push(json!({ "tool_calls": subtasks }));
        plan.push(json!({ "text": "planned" }));
        entries.push(json!({ "match": format!("Bench round {r}."), "steps": plan }));
    }
    // The slot phase: four teams, each a goal of eight independent subtasks.
    for t in 1..=TEAMS {
        let goal = format!("Slots {t}");
        entries
            .push(json!({ "match": format!("\"{goal}\""), "steps": reviews_of(&goal, CHAIN + 4) }));
        if t > 1 {
            let mut setup = team_steps(t);
            setup.push(json!({ "text": "team made" }));
            entries.push(json!({ "match": format!("Team {t}."), "steps": setup }));
        }
        let mut plan = vec![
            json!({ "tool_call": tool("goal_create", json!({ "team": format!("crew{t}"), "title": goal, "criteria": "eight parts" })) }),
        ];
        plan.push(json!({ "tool_calls": (1..=CHAIN)
            .map(|k| tool("subtask_add", json!({ "goal": goal, "title": format!("part {k}"), "owner": format!("w{t}"), "criteria": "done" })))
            .collect::<Vec<_>>() }));
        plan.push(json!({ "text": "planned" }));
        entries.push(json!({ "match": format!("Slots team {t}."), "steps": plan }));
    }
    json!({ "steps": [], "by_prompt": entries })
}

/// Team `t`'s member `w{t}` and team `crew{t}`.
fn team_steps(t: usize) -> Vec<Value> {
    vec![
        json!({ "tool_call": tool("team_create_member", json!({ "name": format!("w{t}") })) }),
        json!({ "tool_call": tool("team_create", json!({ "name": format!("crew{t}"), "members": [format!("w{t}")] })) }),
    ]
}

/// Review turns that accept whatever is in review and try to complete the goal.
fn reviews_of(goal: &str, turns: usize) -> Vec<Value> {
    let mut accepts: Vec<Value> = (1..=CHAIN)
        .map(|k| {
            tool(
                "subtask_review",
                json!({ "goal": goal, "subtask": format!("#{k}"), "decision": "accept" }),
            )
        })
        .collect();
    accepts.push(tool(
        "goal_complete",
        json!({ "goal": goal, "summary": "done" }),
    ));
    let mut out = Vec::new();
    for _ in 0..turns {
        out.push(json!({ "tool_calls": accepts }));
        out.push(json!({ "text": "reviewed" }));
    }
    out
}

pub async fn run(args: TeamsBenchArgs) -> anyhow::Result<()> {
    let bin = std::env::current_exe().context("finding this executable")?;
    let mut h = harness(bin)?;
    let log = h.path("requests.jsonl");
    let runner_config = super::turn::scripted_hermes(
        &mut h,
        &args.worker.hermes,
        &script(args.rounds),
        Some(&log),
    )?;
    progress("starting the control plane and the Runner");
    let mut s = setup(
        h,
        Options {
            profile_cwd: Some("/workspace".into()),
            computer_image: Some(args.worker.image.clone()),
            runner_config,
            // Four admins and four members, each in its own computer.
            max_computers: Some(8),
            ..Default::default()
        },
    )
    .await?;
    for t in 1..=TEAMS {
        s.admin
            .agent_create(&AgentCreate {
                manage_team: true,
                ..super::harness::bench_agent(format!("lead{t}"), AgentEnv::Computer)
            })
            .await?;
    }
    let admin = s.admin.clone();
    let rounds = args.rounds;
    s.while_alive(drive(&admin, rounds)).await?;
    let samples = samples(&s.db, &log, &s.h.path("Runner.log"))?;
    let slots = slot_use(&s.db)?;
    drop(s);
    report(&args, &samples, slots)
}

/// Sends `message` to `agent` once it is free (it may still be telling a result).
async fn chat_when_free(admin: &Client, agent: &str, message: String) -> anyhow::Result<()> {
    let params = ChatParams {
        agent: agent.into(),
        message,
        session: None,
        attachments: Vec::new(),
    };
    let mut tries = 0;
    while let Err(e) = admin.chat(&params).await {
        tries += 1;
        if tries > 300 || !e.to_string().contains("already in a turn") {
            return Err(e.into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Waits until none of `agents` is in a turn (a minute at most).
async fn wait_idle(admin: &Client, agents: &[String]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut busy = false;
        for a in agents {
            busy |= admin
                .session_list(Some(a))
                .await?
                .iter()
                .any(|s| s.state == SessionState::Running);
        }
        if !busy {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(CliError::failure("the warm-up turns did not end in a minute").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the goals titled `titles` are completed (10 minutes at most).
async fn wait_goals(admin: &Client, titles: &[String]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let goals = admin.goal_list(None).await?;
        let mut done = 0;
        for t in titles {
            if let Some(g) = goals.iter().find(|g| &g.title == t) {
                match g.state {
                    GoalState::Completed => done += 1,
                    GoalState::Active => {}
                    other => {
                        return Err(CliError::failure(format!(
                            "goal {t:?} ended {other}: {}",
                            g.reason.clone().unwrap_or_default()
                        ))
                        .into());
                    }
                }
            }
        }
        if done == titles.len() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(CliError::failure("the goals did not finish in 10 minutes").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn drive(admin: &Client, rounds: u32) -> anyhow::Result<()> {
    for r in 1..=rounds {
        progress(&format!(
            "round {r} of {rounds}: a chain of {CHAIN} subtasks"
        ));
        chat_when_free(admin, "lead1", format!("Bench round {r}.")).await?;
        wait_goals(admin, &[format!("Round {r}")]).await?;
    }
    // Slot use is the scheduler's figure: every team, member, Worker and computer is
    // made and warmed first, so that no team waits on a cold start the others skip.
    progress("warming up the four teams");
    for t in 2..=TEAMS {
        chat_when_free(admin, &format!("lead{t}"), format!("Team {t}.")).await?;
    }
    let leads: Vec<String> = (1..=TEAMS).map(|t| format!("lead{t}")).collect();
    wait_idle(admin, &leads).await?;
    let members: Vec<String> = (1..=TEAMS).map(|t| format!("w{t}")).collect();
    for m in &members {
        chat_when_free(admin, m, "Warm up.".into()).await?;
    }
    wait_idle(admin, &members).await?;
    progress(&format!("{TEAMS} teams x {CHAIN} subtasks at once"));
    for t in 1..=TEAMS {
        chat_when_free(admin, &format!("lead{t}"), format!("Slots team {t}.")).await?;
    }
    let titles: Vec<String> = (1..=TEAMS).map(|t| format!("Slots {t}")).collect();
    wait_goals(admin, &titles).await
}

/// Busy slot time over the four teams' subtask window: from the first of their subtasks'
/// turns admitted to the last ended, the time turns (any: members', admins', deliveries')
/// held the 4 slots, over 4 x the window.
fn slot_use(db: &std::path::Path) -> anyhow::Result<f64> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let (from, to): (i64, i64) = conn.query_row(
        "SELECT min(t.created_at), max(t.finished_at) FROM session_turns t
         JOIN subtasks s ON s.session_id = t.session_id JOIN goals g ON g.id = s.goal_id
         WHERE g.title LIKE 'Slots %'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let busy: i64 = conn.query_row(
        "SELECT coalesce(sum(min(coalesce(finished_at, ?2), ?2) - max(created_at, ?1)), 0)
         FROM session_turns WHERE created_at < ?2 AND coalesce(finished_at, ?2) > ?1",
        [from, to],
        |r| r.get(0),
    )?;
    let window = (to - from).max(1);
    Ok(busy as f64 / (4 * window) as f64)
}

/// One subtask's way from ready to the model, in ms: ready -> turn admitted (the
/// scheduler), admitted -> the Runner starts it, started -> the prompt handed to Hermes
/// (the computer lease, the Worker), handed -> Hermes's model call (Hermes's own turn
/// preparation); and ready -> Hermes, ready -> the model call.
struct Sample {
    admitted: f64,
    started: f64,
    handed: f64,
    called: f64,
    to_hermes: f64,
    total: f64,
}

/// When the Runner handed each turn's prompt to Hermes, by turn id, in ms since the epoch
/// (its log line `prompt handed to Hermes`).
fn handoffs(runner_log: &std::path::Path) -> anyhow::Result<HashMap<String, i64>> {
    let mut out = HashMap::new();
    for line in std::fs::read_to_string(runner_log)?.lines() {
        if !line.contains("prompt handed to Hermes") {
            continue;
        }
        let (Some(stamp), Some(turn)) = (
            line.split_whitespace().next(),
            line.split("turn=")
                .nth(1)
                .and_then(|t| t.split_whitespace().next()),
        ) else {
            continue;
        };
        let Ok(at) = humantime::parse_rfc3339(stamp) else {
            continue;
        };
        let ms = at.duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
        out.insert(turn.to_string(), ms);
    }
    Ok(out)
}

fn samples(
    db: &std::path::Path,
    log: &std::path::Path,
    runner_log: &std::path::Path,
) -> anyhow::Result<Vec<Sample>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare(
        "SELECT g.title, s.seq, s.updated_at, t.created_at, coalesce(c.started_at, t.created_at), t.id
         FROM subtasks s JOIN goals g ON g.id = s.goal_id
         JOIN session_turns t ON t.id = s.turn_id JOIN runner_commands c ON c.id = t.command_id
         WHERE g.title LIKE 'Round %' ORDER BY g.created_at, s.seq",
    )?;
    type Row = (String, i64, i64, i64, i64, String);
    let rows: Vec<Row> = stmt
        .query_map([], |r| Row::try_from(r))?
        .collect::<Result<_, _>>()?;
    let handed_at = handoffs(runner_log)?;
    // The first model call of each subtask's prompt.
    let mut first_call: HashMap<(String, i64), i64> = Default::default();
    for line in std::fs::read_to_string(log)?.lines() {
        let v: Value = serde_json::from_str(line)?;
        let Some(at) = v["at_ms"].as_i64() else {
            continue;
        };
        let messages = v["body"]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(user) = messages.iter().rev().find(|m| m["role"] == "user") else {
            continue;
        };
        let text = user["content"].as_str().unwrap_or_default();
        let Some(rest) = text.strip_prefix("[yy subtask] #") else {
            continue;
        };
        let seq: i64 = rest
            .split(' ')
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap_or(0);
        let Some(title) = text
            .split("of goal \"")
            .nth(1)
            .and_then(|t| t.split('"').next())
        else {
            continue;
        };
        first_call.entry((title.to_string(), seq)).or_insert(at);
    }
    let mut out = Vec::new();
    for pair in rows.windows(2) {
        let ((g1, _, accepted_at, _, _, _), (g2, seq, _, admitted_at, started_at, turn)) =
            (&pair[0], &pair[1]);
        if g1 != g2 {
            continue;
        }
        let (Some(called), Some(handed)) =
            (first_call.get(&(g2.clone(), *seq)), handed_at.get(turn))
        else {
            continue;
        };
        out.push(Sample {
            admitted: (admitted_at - accepted_at) as f64,
            started: (started_at - admitted_at) as f64,
            handed: (handed - started_at) as f64,
            called: (called - handed) as f64,
            to_hermes: (handed - accepted_at) as f64,
            total: (called - accepted_at) as f64,
        });
    }
    if out.is_empty() {
        return Err(CliError::failure("no subtask was measured").into());
    }
    Ok(out)
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(args: &TeamsBenchArgs, samples: &[Sample], slots: f64) -> anyhow::Result<()> {
    let p = |f: fn(&Sample) -> f64| p50(samples.iter().map(f).collect());
    let admit = p(|s| s.admitted);
    let start = p(|s| s.started);
    let hand = p(|s| s.handed);
    let call = p(|s| s.called);
    let to_hermes = p(|s| s.to_hermes);
    let total = p(|s| s.total);
    let ok = to_hermes <= OVERHEAD_P50_MS;
    let slots_ok = slots >= SLOT_USE;
    let figures = json!({
        "slot_use": slots,
        "target_slot_use": SLOT_USE,
        "slot_use_target_met": slots_ok,
        "samples": samples.len(),
        "rounds": args.rounds,
        "ready_to_admitted_p50_ms": admit,
        "admitted_to_runner_start_p50_ms": start,
        "runner_start_to_hermes_p50_ms": hand,
        "hermes_to_model_call_p50_ms": call,
        "ready_to_hermes_p50_ms": to_hermes,
        "ready_to_model_call_p50_ms": total,
        "target_p50_ms": OVERHEAD_P50_MS,
        "target_met": ok,
    });
    if args.json {
        return output::json(&figures);
    }
    let ms = |v: f64| format!("{v:.1} ms");
    let row = |name: &str, v: f64| vec![name.to_string(), ms(v), "-".into(), "-".into()];
    let rows = vec![
        row(
            "subtask ready -> its turn admitted (the scheduler) p50",
            admit,
        ),
        row("turn admitted -> the Runner starts it p50", start),
        row(
            "Runner start -> prompt handed to Hermes (computer lease, Worker) p50",
            hand,
        ),
        vec![
            "subtask ready -> its prompt reaching Hermes p50".into(),
            ms(to_hermes),
            format!("<= {OVERHEAD_P50_MS} ms"),
            if ok { "pass" } else { "MISSED" }.into(),
        ],
        row(
            "prompt at Hermes -> Hermes's model call (Hermes's turn set-up) p50",
            call,
        ),
        row("subtask ready -> Hermes's model call p50", total),
        vec![
            "samples".into(),
            samples.len().to_string(),
            "-".into(),
            "-".into(),
        ],
        vec![
            format!("slot use, {TEAMS} teams x {CHAIN} subtasks at once"),
            format!("{:.1} %", slots * 100.0),
            format!(">= {:.0} %", SLOT_USE * 100.0),
            if slots_ok { "pass" } else { "MISSED" }.into(),
        ],
    ];
    output::print(&output::table(
        &["figure", "value", "target", "result"],
        rows,
    ))?;
    Ok(())
}
