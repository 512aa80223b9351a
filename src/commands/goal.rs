//! `yy goal`: goals handed to a team's admin, their subtasks, and a live watch.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::team::print_created;
use super::{ById, Columns, JsonFlag, context, print_list, print_one};
use crate::api::teams::{Goal, GoalCreate, GoalEvent, GoalState};
use crate::output::{self, clean, opt};

/// How often `yy goal watch` looks.
const WATCH_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Args)]
pub struct GoalArgs {
    #[command(subcommand)]
    pub command: GoalCommand,
}

#[derive(Debug, Subcommand)]
pub enum GoalCommand {
    /// List goals, newest first
    #[command(visible_alias = "ls")]
    List {
        /// Only this team's goals
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show a goal with its subtasks and deliveries
    Show(ById),
    /// Hand a goal to a team's admin: it plans subtasks, reviews results and completes it
    Create {
        /// The team
        #[arg(long)]
        team: String,
        /// What to achieve
        #[arg(long)]
        title: String,
        /// When it is achieved (acceptance criteria)
        #[arg(long)]
        criteria: String,
        /// A session of the admin agent: where it works and where the result is delivered
        /// [default: a new session of the admin]
        #[arg(long)]
        session: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Stop a goal: no further turn runs until `yy goal resume`
    Stop(ById),
    /// Resume a stopped, waiting or blocked goal (a new authorization: attempts and
    /// automatic wake-ups count from zero)
    Resume(ById),
    /// Watch a goal's subtasks live until it is no longer active (one JSON event a line
    /// with --json)
    Watch(ById),
}

impl Columns for Goal {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "team",
        "admin",
        "title",
        "state",
        "accepted",
        "wake-ups",
        "generation",
        "reason",
        "waits for",
        "origin session",
        "created",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.team.clone(),
            self.admin.clone(),
            self.title.clone(),
            self.state.to_string(),
            format!("{}/{}", self.accepted, self.total),
            self.wakeups.to_string(),
            self.generation.to_string(),
            opt(&self.reason),
            opt(&self.waits_for),
            opt(&self.origin_session_id),
            self.created_at.clone(),
        ]
    }
}

pub async fn run(args: GoalArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        GoalCommand::List { team, json } => {
            print_list(&client.goal_list(team.as_deref()).await?, json.json)
        }
        GoalCommand::Show(ById { id, json }) => {
            let goal = client.goal_show(&id).await?;
            if json.json {
                return output::json(&goal);
            }
            print_one(&goal, false)?;
            if let Some(subs) = &goal.subtasks {
                output::print("")?;
                super::print_list(subs, false)?;
            }
            Ok(())
        }
        GoalCommand::Create {
            team,
            title,
            criteria,
            session,
            json,
        } => {
            let goal = client
                .goal_create(&GoalCreate {
                    team,
                    title,
                    criteria,
                    session,
                })
                .await?;
            print_created(&goal, &goal.id, json.json)
        }
        GoalCommand::Stop(ById { id, json }) => print_one(&client.goal_stop(&id).await?, json.json),
        GoalCommand::Resume(ById { id, json }) => {
            print_one(&client.goal_resume(&id).await?, json.json)
        }
        GoalCommand::Watch(ById { id, json }) => watch(&client, &id, json.json).await,
    }
}

/// Events for what changed between two looks at a goal.
fn changes(before: &HashMap<String, String>, goal: &Goal, at: &str) -> Vec<GoalEvent> {
    let mut out = Vec::new();
    let key = format!("goal:{}", goal.state);
    if before.get("goal").map(String::as_str) != Some(key.as_str()) {
        out.push(GoalEvent {
            kind: "goal".into(),
            goal_id: goal.id.clone(),
            state: goal.state.to_string(),
            subtask_id: None,
            title: Some(goal.title.clone()),
            attempts: None,
            waits_for: None,
            at: at.into(),
        });
    }
    if before.get("waits") != goal.waits_for.as_ref()
        && let Some(w) = &goal.waits_for
    {
        out.push(GoalEvent {
            kind: "waits".into(),
            goal_id: goal.id.clone(),
            state: goal.state.to_string(),
            subtask_id: None,
            title: None,
            attempts: None,
            waits_for: Some(w.clone()),
            at: at.into(),
        });
    }
    for s in goal.subtasks.iter().flatten() {
        let now = format!("{}:{}", s.state, s.attempts);
        if before.get(&s.id) != Some(&now) {
            out.push(GoalEvent {
                kind: "subtask".into(),
                goal_id: goal.id.clone(),
                state: s.state.to_string(),
                subtask_id: Some(s.id.clone()),
                title: Some(s.title.clone()),
                attempts: Some(s.attempts),
                waits_for: None,
                at: at.into(),
            });
        }
    }
    out
}

fn snapshot(goal: &Goal) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = goal
        .subtasks
        .iter()
        .flatten()
        .map(|s| (s.id.clone(), format!("{}:{}", s.state, s.attempts)))
        .collect();
    m.insert("goal".into(), format!("goal:{}", goal.state));
    if let Some(w) = &goal.waits_for {
        m.insert("waits".into(), w.clone());
    }
    m
}

/// The tree a terminal shows.
fn tree(goal: &Goal) -> String {
    let mut t = format!(
        "goal {} \"{}\" - {} ({}/{} accepted, wake-ups {}){}\n",
        goal.id,
        clean(&goal.title),
        goal.state,
        goal.accepted,
        goal.total,
        goal.wakeups,
        goal.reason
            .as_deref()
            .map(|r| format!(" - {}", clean(r)))
            .unwrap_or_default()
    );
    if let Some(w) = &goal.waits_for {
        t.push_str(&format!("waits for {}\n", clean(w)));
    }
    let subs = goal.subtasks.clone().unwrap_or_default();
    for (i, s) in subs.iter().enumerate() {
        let branch = if i + 1 == subs.len() {
            "└─"
        } else {
            "├─"
        };
        let deps: Vec<String> = s
            .deps
            .iter()
            .filter_map(|d| {
                subs.iter()
                    .find(|x| &x.id == d)
                    .map(|x| format!("#{}", x.seq))
            })
            .collect();
        t.push_str(&format!(
            "{branch} #{} {} [{}] {} attempt {}{}\n",
            s.seq,
            clean(&s.title),
            clean(&s.owner),
            s.state,
            s.attempts,
            if deps.is_empty() {
                String::new()
            } else {
                format!(" after {}", deps.join(","))
            }
        ));
    }
    t
}

async fn watch(client: &crate::client::Client, id: &str, json: bool) -> anyhow::Result<()> {
    let live = !json && std::io::stdout().is_terminal();
    let mut before: HashMap<String, String> = HashMap::new();
    loop {
        let goal = client.goal_show(id).await?;
        let at = crate::timefmt::rfc3339(crate::timefmt::now_ms());
        let events = changes(&before, &goal, &at);
        if live {
            // Redraw the tree in place when something changed.
            if !events.is_empty() {
                output::print(&format!("\x1b[2J\x1b[H{}", tree(&goal)))?;
            }
        } else {
            for e in &events {
                if json {
                    output::print(&serde_json::to_string(e)?)?;
                } else {
                    output::print(&format!(
                        "{} {} {} {}{}{}",
                        e.at,
                        e.kind,
                        e.subtask_id.as_deref().unwrap_or(&e.goal_id),
                        e.state,
                        e.title
                            .as_deref()
                            .map(|t| format!(" {}", clean(t)))
                            .unwrap_or_default(),
                        e.waits_for
                            .as_deref()
                            .map(|w| format!(" waits for {}", clean(w)))
                            .unwrap_or_default()
                    ))?;
                }
            }
        }
        before = snapshot(&goal);
        if goal.state != GoalState::Active {
            return Ok(());
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}
