//! Teams, goals and the scheduler's steps against SQLite in memory: the subtask state
//! machine (every illegal step refused), each limit refused with its message, tool ids
//! bound to their turn, and a goal from plan to delivery with a simulated Runner.

use super::db::Db;
use serde_json::{Value, json};

use super::agents::AgentRow;
use super::commands::{self, QueueLimits};
use super::goals::{self, Decision, NewGoal, NewSubtask, Step, transition};
use super::teams::{self, Actor};
use super::tests::{World, status, world};
use super::{StoreError, agents, schedule, sessions, team_tools};
use crate::api::capabilities;
use crate::api::ids::{Generation, RunnerId};
use crate::api::machine::Outcome;
use crate::api::params::AgentEnv;
use crate::api::teams::{GoalState, SubtaskInputs, SubtaskState as S};

/// The world of `tests.rs` with the Worker declared, an admin `boss` (computer, may manage
/// teams) and computer members `m1`..`m3`.
fn team_world() -> (World, Generation) {
    let mut w = world();
    let generation = w.connect_with_worker();
    for (name, manage) in [("boss", true), ("m1", false), ("m2", false), ("m3", false)] {
        new_agent(&mut w, name, AgentEnv::Computer, manage).unwrap();
    }
    (w, generation)
}

fn op(w: &World) -> Actor {
    Actor::Operator {
        account_id: w.account.clone(),
        admin: true,
    }
}

fn tx<R>(conn: &mut Db, f: impl FnOnce(&Db) -> Result<R, StoreError>) -> Result<R, StoreError> {
    let tx = conn.savepoint().unwrap();
    let r = f(&tx)?;
    tx.commit().unwrap();
    Ok(r)
}

fn pass(w: &mut World) -> schedule::Pass {
    schedule::pass(&mut w.conn, QueueLimits::default()).unwrap()
}

/// The turns now queued or running, as (agent name, turn id, command id, tool id). Their
/// commands are leased first, as the Runner would: the tool id exists only in a lease.
fn live_turns(w: &mut World) -> Vec<(String, String, String, Option<String>)> {
    let generation: Generation = w
        .conn
        .query_row(
            "SELECT generation FROM runners WHERE id = ?1",
            [&w.runner],
            |r| r.get(0),
        )
        .unwrap();
    for c in commands::lease(&mut w.conn, &w.runner, generation, 100).unwrap() {
        if let Some(id) = c.team_tools {
            TOOL_IDS.with(|t| t.borrow_mut().insert(c.id, id));
        }
    }
    let mut stmt = w
        .conn
        .prepare(
            "SELECT g.name, t.id, t.command_id, c.payload FROM session_turns t
             JOIN sessions s ON s.id = t.session_id JOIN agents g ON g.id = s.agent_id
             JOIN runner_commands c ON c.id = t.command_id
             WHERE t.state IN ('queued', 'running') ORDER BY t.created_at",
        )
        .unwrap();
    stmt.query_map([], |r| {
        let payload: String = r.get(3)?;
        assert!(
            !payload.contains("team_tools"),
            "no tool id in a stored payload: {payload}"
        );
        let command: String = r.get(2)?;
        let tool = TOOL_IDS.with(|t| t.borrow().get(&command).cloned());
        Ok((r.get(0)?, r.get(1)?, command, tool))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

thread_local! {
    /// Tool ids by command id, as leases delivered them (each test runs on its thread).
    static TOOL_IDS: std::cell::RefCell<std::collections::HashMap<String, String>> =
        Default::default();
}

fn turn_of<'a>(
    turns: &'a [(String, String, String, Option<String>)],
    agent: &str,
) -> &'a (String, String, String, Option<String>) {
    turns
        .iter()
        .find(|t| t.0 == agent)
        .unwrap_or_else(|| panic!("no turn of {agent}: {turns:?}"))
}

fn start(w: &mut World, generation: Generation, command: &str) {
    commands::lease(&mut w.conn, &w.runner, generation, 100).unwrap();
    commands::start(&mut w.conn, &w.runner, generation, &command.into()).unwrap();
}

fn finish(w: &mut World, generation: Generation, command: &str, text: &str) {
    let result =
        json!({"hermes_session_id": "", "status": "complete", "text": text, "usage": null});
    let row = commands::complete(
        &mut w.conn,
        &w.runner,
        generation,
        &command.into(),
        Outcome::Done,
        Some(&result.to_string()),
        None,
    )
    .unwrap();
    commands::settle(&mut w.conn, Some(row.kind)).unwrap();
}

fn tool(
    w: &mut World,
    generation: Generation,
    id: &str,
    name: &str,
    args: Value,
) -> Result<Value, StoreError> {
    team_tools::call(&mut w.conn, &w.runner, generation, id, name, &args)
}

/// The team tool `subtask_add` with no dependencies or artifacts.
fn add_subtask(
    w: &mut World,
    g: Generation,
    id: &str,
    goal: &str,
    title: &str,
    owner: &str,
    criteria: &str,
) -> Result<Value, StoreError> {
    let args = json!({ "goal": goal, "title": title, "owner": owner, "criteria": criteria });
    tool(w, g, id, "subtask_add", args)
}

/// The team tool `helper_create` for `name`, refused at the helper limit `limit` names.
fn refused_helper(w: &mut World, g: Generation, id: &str, goal: &str, name: &str, limit: &str) {
    let e = tool(
        w,
        g,
        id,
        "helper_create",
        json!({ "goal": goal, "name": name }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains(limit)),
        "{e}"
    );
}

/// The team tool `goal_complete` with `summary`.
fn complete_goal(
    w: &mut World,
    g: Generation,
    id: &str,
    goal: &str,
    summary: &str,
) -> Result<Value, StoreError> {
    tool(
        w,
        g,
        id,
        "goal_complete",
        json!({ "goal": goal, "summary": summary }),
    )
}

/// The one number a `SELECT count(*) ...` without parameters answers.
fn count(w: &World, sql: &str) -> i64 {
    w.conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Creates team `name` of `admin` and one `member`, as the operator.
fn two_team(
    w: &mut World,
    name: &str,
    admin: &str,
    member: &str,
) -> Result<teams::TeamRow, StoreError> {
    let actor = op(w);
    tx(&mut w.conn, |c| {
        teams::create(c, &actor, name, admin, &[member.to_string()])
    })
}

/// After a scheduler pass, the admin's live turn, started: (its command, its turn id).
fn admin_turn(w: &mut World, g: Generation) -> (String, String) {
    pass(w);
    let turns = live_turns(w);
    let (_, _, cmd, id) = turn_of(&turns, "boss").clone();
    let id = id.unwrap();
    start(w, g, &cmd);
    (cmd, id)
}

/// The admin's next turn, started, accepts `subtask` of `goal`: (its command, its turn id).
fn admin_accepts(w: &mut World, g: Generation, goal: &str, subtask: &str) -> (String, String) {
    let (cmd, id) = admin_turn(w, g);
    tool(
        w,
        g,
        &id,
        "subtask_review",
        json!({ "goal": goal, "subtask": subtask, "decision": "accept" }),
    )
    .unwrap();
    (cmd, id)
}

fn team(w: &mut World, members: &[&str]) -> Result<teams::TeamRow, StoreError> {
    let actor = op(w);
    let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    tx(&mut w.conn, |c| {
        teams::create(c, &actor, "crew", "boss", &members)
    })
}

#[test]
fn every_subtask_step_outside_the_state_machine_is_refused() {
    let legal = [
        (S::Queued, Step::Start, S::Running),
        (S::Running, Step::Finish, S::Review),
        (S::Running, Step::Requeue, S::Queued),
        (S::Review, Step::Accept, S::Accepted),
        (S::Review, Step::Rework, S::Queued),
        (S::WaitingUser, Step::Rework, S::Queued),
        (S::Blocked, Step::Rework, S::Queued),
        (S::Review, Step::WaitUser, S::WaitingUser),
        (S::Blocked, Step::WaitUser, S::WaitingUser),
        (S::Review, Step::Block, S::Blocked),
        (S::WaitingUser, Step::Block, S::Blocked),
        (S::Queued, Step::Block, S::Blocked),
        (S::Queued, Step::Cancel, S::Cancelled),
        (S::Running, Step::Cancel, S::Cancelled),
        (S::Review, Step::Cancel, S::Cancelled),
        (S::WaitingUser, Step::Cancel, S::Cancelled),
        (S::Blocked, Step::Cancel, S::Cancelled),
    ];
    let steps = [
        Step::Start,
        Step::Finish,
        Step::Accept,
        Step::Rework,
        Step::WaitUser,
        Step::Block,
        Step::Requeue,
        Step::Cancel,
    ];
    for &from in S::ALL {
        for step in steps {
            let expected = legal
                .iter()
                .find(|(f, s, _)| *f == from && *s == step)
                .map(|l| l.2);
            match (transition(from, step), expected) {
                (Ok(to), Some(e)) => assert_eq!(to, e, "{from} {step:?}"),
                (Err(msg), None) => assert!(msg.contains(from.as_sql()), "{msg}"),
                (got, want) => panic!("{from} {step:?}: got {got:?}, want {want:?}"),
            }
        }
    }
    // Accepted and cancelled are final.
    for step in steps {
        assert!(transition(S::Accepted, step).is_err());
        assert!(transition(S::Cancelled, step).is_err());
    }
}

#[test]
fn team_limits_are_refused_with_their_messages() {
    let (mut w, _) = team_world();
    let e = team(&mut w, &[]).unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains("team size limit")),
        "{e}"
    );
    for i in 0..8 {
        w.agent(&format!("extra-{i}"), AgentEnv::Computer);
    }
    let many: Vec<String> = (0..8).map(|i| format!("extra-{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = team(&mut w, &refs).unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains("team size limit")),
        "{e}"
    );
    // The admin needs manage_team.
    let actor = op(&w);
    let e = two_team(&mut w, "t", "m1", "m2").unwrap_err();
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains("--manage-team")),
        "{e}"
    );
    // 20 active teams per account.
    for i in 0..20 {
        two_team(&mut w, &format!("t{i}"), "boss", "m1").unwrap();
    }
    let e = two_team(&mut w, "t20", "boss", "m1").unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains("20 active teams")),
        "{e}"
    );
    tx(&mut w.conn, |c| teams::archive(c, &actor, "t0")).unwrap();
    two_team(&mut w, "t20", "boss", "m1").unwrap();
}

/// Creates agent `name` in `env` of the default profile and source, managing teams or not.
fn new_agent(
    w: &mut World,
    name: &str,
    env: AgentEnv,
    manage_team: bool,
) -> Result<AgentRow, StoreError> {
    agents::create(
        &mut w.conn,
        agents::NewAgent {
            account_id: &w.account,
            name,
            profile: "default",
            source: Some("main"),
            env,
            manage_team,
            browser: false,
        },
    )
}

#[test]
fn a_host_agent_cannot_manage_a_team() {
    let (mut w, _) = team_world();
    let e = new_agent(&mut w, "hostboss", AgentEnv::Host, true).unwrap_err();
    assert!(e.to_string().contains("runs on the host"), "{e}");
    new_agent(&mut w, "hostboss", AgentEnv::Host, false).unwrap();
    let change = || agents::AgentChange {
        profile: None,
        env: None,
        manage_team: Some(true),
        browser: None,
    };
    let e = agents::update(&mut w.conn, &w.account, "hostboss", change()).unwrap_err();
    assert!(e.to_string().contains("must be a computer agent"), "{e}");
    // An admin cannot move to the host either.
    let e = agents::update(
        &mut w.conn,
        &w.account,
        "boss",
        agents::AgentChange {
            profile: None,
            env: Some(AgentEnv::Host),
            manage_team: None,
            browser: None,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("runs on the host"), "{e}");
}

/// Creates the team `crew` (boss; m1, m2) and an operator's goal; returns its id.
fn crew_goal(w: &mut World) -> String {
    team(w, &["m1", "m2"]).unwrap();
    let actor = op(w);
    tx(&mut w.conn, |c| {
        goals::create(
            c,
            &actor,
            NewGoal {
                team: "crew",
                title: "Report",
                criteria: "a report",
                session: None,
            },
        )
    })
    .unwrap()
    .id
}

#[test]
fn a_goal_runs_from_plan_through_rework_to_one_delivery() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    // The operator's goal wakes the admin to plan it; the admin's turn has team tools.
    let p = pass(&mut w);
    assert_eq!(p.admitted, 1);
    let turns = live_turns(&mut w);
    let (_, plan_turn, plan_cmd, plan_tool) = turn_of(&turns, "boss").clone();
    let plan_tool = plan_tool.expect("the admin's turn carries a tool id");
    start(&mut w, g, &plan_cmd);
    add_subtask(&mut w, g, &plan_tool, &goal, "Draft", "m1", "a draft").unwrap();
    tool(
        &mut w,
        g,
        &plan_tool,
        "subtask_add",
        json!({
            "goal": goal, "title": "Polish", "owner": "m2", "criteria": "polished", "deps": ["#1"]
        }),
    )
    .unwrap();
    // The admin is not a subtask owner.
    let e = add_subtask(&mut w, g, &plan_tool, &goal, "x", "boss", "y").unwrap_err();
    assert!(e.to_string().contains("reviews subtasks"), "{e}");
    // The first subtask is ready at once (its owner is idle); the second waits for it.
    let p = pass(&mut w);
    assert_eq!(p.admitted, 1);
    let turns = live_turns(&mut w);
    let (_, _, m1_cmd, m1_tool) = turn_of(&turns, "m1").clone();
    assert!(m1_tool.is_none(), "a member has no team tools");
    assert!(turns.iter().all(|t| t.0 != "m2"));
    finish(&mut w, g, &plan_cmd, "planned");
    // The id of an ended turn is refused.
    let e = tool(
        &mut w,
        g,
        &plan_tool,
        "goal_status",
        json!({ "goal": goal }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains(&plan_turn) && m.contains("ended")),
        "{e}"
    );
    assert_eq!(
        pass(&mut w).admitted,
        0,
        "nothing for the admin to review yet"
    );

    start(&mut w, g, &m1_cmd);
    finish(&mut w, g, &m1_cmd, "draft v1");
    pass(&mut w);
    let draft = goals::find_subtask(&w.conn, &goal, "#1").unwrap();
    assert_eq!(draft.state, S::Review);
    assert!(draft.result.as_deref().unwrap().contains("draft v1"));
    // The review turn: its prompt carries the result; it sends the draft back once.
    let turns = live_turns(&mut w);
    let (_, review_turn, review_cmd, review_tool) = turn_of(&turns, "boss").clone();
    let prompt = sessions::get_turn(&w.conn, &review_turn).unwrap().message;
    assert!(
        prompt.contains("To review: #1") && prompt.contains("draft v1"),
        "{prompt}"
    );
    let review_tool = review_tool.unwrap();
    start(&mut w, g, &review_cmd);
    let e = complete_goal(&mut w, g, &review_tool, &goal, "s").unwrap_err();
    assert!(e.to_string().contains("no accepted subtask"), "{e}");
    tool(
        &mut w,
        g,
        &review_tool,
        "subtask_review",
        json!({
            "goal": goal, "subtask": "#1", "decision": "rework", "note": "add numbers"
        }),
    )
    .unwrap();
    finish(&mut w, g, &review_cmd, "sent back");
    pass(&mut w);
    let turns = live_turns(&mut w);
    let (_, rework_turn, m1_cmd, _) = turn_of(&turns, "m1").clone();
    let prompt = sessions::get_turn(&w.conn, &rework_turn).unwrap().message;
    assert!(
        prompt.contains("Rework requested by the admin: add numbers"),
        "{prompt}"
    );
    assert_eq!(
        goals::find_subtask(&w.conn, &goal, "#1").unwrap().attempts,
        2
    );
    start(&mut w, g, &m1_cmd);
    finish(&mut w, g, &m1_cmd, "draft v2 with numbers");
    let (cmd, id) = admin_accepts(&mut w, g, &goal, "Draft");
    let e = complete_goal(&mut w, g, &id, &goal, "s").unwrap_err();
    assert!(e.to_string().contains("every subtask is accepted"), "{e}");
    // The second subtask becomes ready now, while the admin's turn still runs.
    pass(&mut w);
    let turns = live_turns(&mut w);
    let (_, polish_turn, m2_cmd, _) = turn_of(&turns, "m2").clone();
    let prompt = sessions::get_turn(&w.conn, &polish_turn).unwrap().message;
    assert!(
        prompt.contains("draft v2 with numbers"),
        "the accepted input: {prompt}"
    );
    finish(&mut w, g, &cmd, "accepted");
    start(&mut w, g, &m2_cmd);
    finish(&mut w, g, &m2_cmd, "polished");
    let (cmd, id) = admin_accepts(&mut w, g, &goal, "#2");
    complete_goal(&mut w, g, &id, &goal, "all done").unwrap();
    assert_eq!(
        goals::get(&w.conn, &goal).unwrap().state,
        GoalState::Completed
    );
    // The origin session is busy with this turn: the delivery waits.
    assert_eq!(pass(&mut w).admitted, 0);
    finish(&mut w, g, &cmd, "completed");
    assert_eq!(pass(&mut w).admitted, 1, "the delivery");
    let turns = live_turns(&mut w);
    let (_, delivery_turn, cmd, _) = turn_of(&turns, "boss").clone();
    let message = sessions::get_turn(&w.conn, &delivery_turn).unwrap().message;
    assert!(
        message.starts_with("[yy goal result]") && message.contains("all done"),
        "{message}"
    );
    start(&mut w, g, &cmd);
    finish(&mut w, g, &cmd, "told the user");
    for _ in 0..3 {
        assert_eq!(pass(&mut w).admitted, 0, "delivered once");
    }
    let n = count(
        &w,
        "SELECT count(*) FROM session_turns WHERE message LIKE '[yy goal result]%'",
    );
    assert_eq!(n, 1);
    let view = goals::view(&w.conn, goals::get(&w.conn, &goal).unwrap(), true).unwrap();
    assert_eq!(view.deliveries.len(), 1);
    assert_eq!(
        view.deliveries[0].state,
        crate::api::teams::DeliveryState::Delivered
    );
    assert_eq!(view.wakeups, 4, "plan and three reviews");
}

#[test]
fn attempts_subtasks_and_wakeups_are_limited_with_their_messages() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let actor = op(&w);
    let admin = agents::get(&w.conn, &w.account, "boss").unwrap();
    let boss = Actor::Agent {
        account_id: w.account.clone(),
        agent_id: admin.id.clone(),
    };
    for i in 0..goals::MAX_SUBTASKS {
        tx(&mut w.conn, |c| {
            goals::add_subtask(
                c,
                &boss,
                NewSubtask {
                    goal: &goal,
                    title: &format!("t{i}"),
                    owner: "m1",
                    criteria: "c",
                    deps: &[],
                    inputs: SubtaskInputs::default(),
                },
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let e = tx(&mut w.conn, |c| {
        goals::add_subtask(
            c,
            &boss,
            NewSubtask {
                goal: &goal,
                title: "one more",
                owner: "m1",
                criteria: "c",
                deps: &[],
                inputs: SubtaskInputs::default(),
            },
        )
    })
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains("32 subtasks")),
        "{e}"
    );
    // Three attempts: a rework after the third is refused.
    let sub = goals::find_subtask(&w.conn, &goal, "#1").unwrap();
    w.conn
        .execute(
            "UPDATE subtasks SET state = 'review', attempts = 3 WHERE id = ?1",
            [&sub.id],
        )
        .unwrap();
    let e = tx(&mut w.conn, |c| {
        goals::review(c, &boss, &goal, "#1", Decision::Rework, Some("again"))
    })
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Limit(m) if m.contains("3 attempts")),
        "{e}"
    );
    // A queued subtask that used its attempts is blocked, not run.
    w.conn
        .execute(
            "UPDATE subtasks SET state = 'queued' WHERE id = ?1",
            [&sub.id],
        )
        .unwrap();
    w.conn
        .execute("UPDATE goals SET seen = attention WHERE id = ?1", [&goal])
        .unwrap();
    pass(&mut w);
    let sub = goals::find_subtask(&w.conn, &goal, "#1").unwrap();
    assert_eq!(sub.state, S::Blocked);
    assert!(sub.note.unwrap().contains("3 attempts"));
    // Eight automatic wake-ups, then the goal waits for the user.
    w.conn
        .execute(
            "UPDATE goals SET wakeups = 8, attention = seen + 1 WHERE id = ?1",
            [&goal],
        )
        .unwrap();
    for t in live_turns(&mut w) {
        start(&mut w, g, &t.2);
        finish(&mut w, g, &t.2, "x");
    }
    pass(&mut w);
    let gr = goals::get(&w.conn, &goal).unwrap();
    assert_eq!(gr.state, GoalState::WaitingUser);
    assert!(gr.reason.unwrap().contains("8 times"), "the wake-up limit");
    // Only a user's resume authorizes more: counts start again.
    let gr = tx(&mut w.conn, |c| goals::resume(c, &actor, &goal)).unwrap();
    assert_eq!(
        (gr.state, gr.generation, gr.wakeups),
        (GoalState::Active, 2, 0)
    );
}

#[test]
fn helpers_are_limited_bound_to_their_goal_and_retired_with_it() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let (_, id) = admin_turn(&mut w, g);
    for i in 0..team_tools::MAX_ACTIVE_HELPERS {
        let h = tool(
            &mut w,
            g,
            &id,
            "helper_create",
            json!({ "goal": goal, "name": format!("h{i}") }),
        )
        .unwrap();
        assert_eq!(h["helper"], true);
    }
    refused_helper(&mut w, g, &id, &goal, "h9", "8 temporary helpers");
    // A helper may own the goal's subtasks.
    add_subtask(&mut w, g, &id, &goal, "help", "h0", "c").unwrap();
    let h0 = agents::get(&w.conn, &w.account, "h0").unwrap();
    assert_eq!(h0.env, AgentEnv::Computer);
    assert!(!h0.manage_team);
    // 32 in all per account: one of the 8 retired, 24 more helpers from the past.
    w.conn
        .execute(
            "UPDATE helpers SET retired_at = 1 WHERE agent_id = (SELECT id FROM agents WHERE name = 'h7')",
            [],
        )
        .unwrap();
    for i in 0..24 {
        let name = format!("old-{i}");
        w.agent(&name, AgentEnv::Computer);
        w.conn
            .execute(
                "INSERT INTO helpers (agent_id, goal_id, account_id, generation, created_at, retired_at)
                 SELECT id, ?1, account_id, 1, 1, 1 FROM agents WHERE name = ?2",
                rusqlite::params![goal, name],
            )
            .unwrap();
    }
    refused_helper(&mut w, g, &id, &goal, "h10", "32 temporary helpers");
    // Stopping the goal retires its helpers: their agents are archived.
    let actor = op(&w);
    tx(&mut w.conn, |c| goals::stop(c, &actor, &goal)).unwrap();
    let h0 = agents::get(&w.conn, &w.account, &h0.id).unwrap();
    assert!(h0.archived_at.is_some(), "retired");
    let active = count(&w, "SELECT count(*) FROM helpers WHERE retired_at IS NULL");
    assert_eq!(active, 0);
}

#[test]
fn a_stopped_goal_runs_no_turn_until_resumed_and_revoking_manage_team_stops_it() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let actor = op(&w);
    tx(&mut w.conn, |c| goals::stop(c, &actor, &goal)).unwrap();
    for _ in 0..3 {
        assert_eq!(pass(&mut w).admitted, 0, "a stopped goal wakes no one");
    }
    let gr = tx(&mut w.conn, |c| goals::resume(c, &actor, &goal)).unwrap();
    assert_eq!(gr.generation, 2);
    assert_eq!(pass(&mut w).admitted, 1, "the admin plans after the resume");
    let turns = live_turns(&mut w);
    let (_, _, cmd, id) = turn_of(&turns, "boss").clone();
    start(&mut w, g, &cmd);
    // Revoke: the running turn's id stops working at once, and the goal stops.
    agents::update(
        &mut w.conn,
        &w.account,
        "boss",
        agents::AgentChange {
            profile: None,
            env: None,
            manage_team: Some(false),
            browser: None,
        },
    )
    .unwrap();
    let e = tool(
        &mut w,
        g,
        id.as_deref().unwrap(),
        "goal_status",
        json!({ "goal": goal }),
    )
    .unwrap_err();
    assert!(e.to_string().contains("revoked manage_team"), "{e}");
    finish(&mut w, g, &cmd, "x");
    pass(&mut w);
    let gr = goals::get(&w.conn, &goal).unwrap();
    assert_eq!(gr.state, GoalState::Stopped);
    let e = tx(&mut w.conn, |c| goals::resume(c, &actor, &goal)).unwrap_err();
    assert!(e.to_string().contains("--manage-team"), "{e}");
}

#[test]
fn an_uncertain_member_turn_goes_to_review_as_uncertain_and_is_never_resubmitted() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let admin = agents::get(&w.conn, &w.account, "boss").unwrap();
    let boss = Actor::Agent {
        account_id: w.account.clone(),
        agent_id: admin.id,
    };
    tx(&mut w.conn, |c| {
        goals::add_subtask(
            c,
            &boss,
            NewSubtask {
                goal: &goal,
                title: "a",
                owner: "m1",
                criteria: "c",
                deps: &[],
                inputs: SubtaskInputs::default(),
            },
        )
    })
    .unwrap();
    w.conn
        .execute("UPDATE goals SET seen = attention WHERE id = ?1", [&goal])
        .unwrap();
    pass(&mut w);
    let turns = live_turns(&mut w);
    let (_, turn, cmd, _) = turn_of(&turns, "m1").clone();
    start(&mut w, g, &cmd);
    // The Runner reconnects (a control plane restart ends its connection): the running
    // turn becomes uncertain.
    let status = status(
        &[capabilities::COMPUTER_WORKER, capabilities::SESSION_TURN],
        8,
    );
    // A restart of the Runner from its data directory.
    let restart = commands::Takeover {
        previous: Some("instance".into()),
        replace: false,
    };
    commands::connect(&mut w.conn, &w.runner, "instance-2", &status, &restart).unwrap();
    commands::settle(&mut w.conn, None).unwrap();
    pass(&mut w);
    assert_eq!(
        sessions::get_turn(&w.conn, &turn).unwrap().state,
        crate::api::states::TurnState::Uncertain
    );
    let sub = goals::find_subtask(&w.conn, &goal, "a").unwrap();
    assert_eq!(sub.state, S::Review);
    assert!(sub.result.unwrap().contains("uncertain"));
    assert!(
        live_turns(&mut w).iter().all(|t| t.0 != "m1"),
        "the member's turn is not replayed"
    );
}

#[test]
fn asking_the_user_makes_the_goal_wait_and_queues_the_question_for_the_origin_session() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let (cmd, id) = admin_turn(&mut w, g);
    tool(
        &mut w,
        g,
        &id,
        "ask_user",
        json!({ "goal": "Report", "question": "Which quarter?" }),
    )
    .unwrap();
    let gr = goals::get(&w.conn, &goal).unwrap();
    assert_eq!(gr.state, GoalState::WaitingUser);
    assert!(gr.reason.unwrap().contains("Which quarter?"));
    // Its team tools refuse further work on a waiting goal; the question is delivered once
    // the session is free.
    let e = add_subtask(&mut w, g, &id, &goal, "x", "m1", "y").unwrap_err();
    assert!(e.to_string().contains("waiting_user"), "{e}");
    finish(&mut w, g, &cmd, "asked");
    assert_eq!(pass(&mut w).admitted, 1);
    let turns = live_turns(&mut w);
    let (_, turn, _, _) = turn_of(&turns, "boss").clone();
    let message = sessions::get_turn(&w.conn, &turn).unwrap().message;
    assert!(message.contains("Which quarter?"), "{message}");
}

#[test]
fn a_new_user_message_in_the_origin_session_resumes_a_stopped_goal() {
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    pass(&mut w);
    let turns = live_turns(&mut w);
    let (_, _, cmd, _) = turn_of(&turns, "boss").clone();
    start(&mut w, g, &cmd);
    finish(&mut w, g, &cmd, "planned nothing yet");
    pass(&mut w);
    let origin = goals::get(&w.conn, &goal)
        .unwrap()
        .origin_session_id
        .unwrap();
    let actor = op(&w);
    tx(&mut w.conn, |c| goals::stop(c, &actor, &goal)).unwrap();
    // The stop's delivery goes first; then the user writes in the same session.
    pass(&mut w);
    for t in live_turns(&mut w) {
        start(&mut w, g, &t.2);
        finish(&mut w, g, &t.2, "noted");
    }
    assert!(
        goals::resume_by_chat(&mut w.conn, &"another-session".into())
            .unwrap()
            .is_empty()
    );
    let resumed = goals::resume_by_chat(&mut w.conn, &origin.as_str().into()).unwrap();
    assert_eq!(resumed, vec![goal.clone()]);
    let gr = goals::get(&w.conn, &goal).unwrap();
    assert_eq!((gr.state, gr.generation), (GoalState::Active, 2));
}

#[test]
fn members_an_isolated_admin_creates_never_become_host_agents() {
    let (mut w, g) = team_world();
    crew_goal(&mut w);
    let (_, id) = admin_turn(&mut w, g);
    let e = tool(
        &mut w,
        g,
        &id,
        "team_create_member",
        json!({ "name": "h", "env": "host" }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains("never on the host")),
        "{e}"
    );
    let made = tool(
        &mut w,
        g,
        &id,
        "team_create_member",
        json!({ "name": "iso" }),
    )
    .unwrap();
    assert_eq!(made["env"], "computer");
    let e = agents::update(
        &mut w.conn,
        &w.account,
        "iso",
        agents::AgentChange {
            profile: None,
            env: Some(AgentEnv::Host),
            manage_team: None,
            browser: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::Forbidden(m) if m.contains("never runs on the host")),
        "{e}"
    );
    // An agent an operator made may still move.
    agents::update(
        &mut w.conn,
        &w.account,
        "m3",
        agents::AgentChange {
            profile: None,
            env: Some(AgentEnv::Host),
            manage_team: None,
            browser: None,
        },
    )
    .unwrap();
}

/// A subtask's input artifacts: checked when added (ready, this account, small enough for
/// one guest write), carried by the owner's turn, and downloadable only by that turn's
/// Runner while it runs.
#[test]
fn subtask_inputs_ride_with_the_owner_turn_and_are_downloadable_only_while_it_runs() {
    use super::artifacts;
    let (mut w, g) = team_world();
    let goal = crew_goal(&mut w);
    let art = |w: &World, id: &str, size: u64| {
        w.conn
            .execute(
                "INSERT INTO artifacts (id, kind, name, size, sha256, chunk_size, received, state,
                     account_id, created_at, updated_at)
                 VALUES (?1, 'export', 'data.txt', ?2, ?3, 65536, ?2, 'ready', ?4, 0, 0)",
                rusqlite::params![id, size as i64, "ab".repeat(32), w.account],
            )
            .unwrap();
    };
    art(&w, "art-data", 10);
    art(&w, "art-other", 10);
    art(&w, "art-huge", crate::api::artifacts::MAX_ATTACH_BYTES + 1);
    let (plan_cmd, plan_tool) = admin_turn(&mut w, g);
    let sub = |artifacts: Value| json!({ "goal": goal, "title": "Use it", "owner": "m1", "criteria": "c", "artifacts": artifacts });
    let e = tool(
        &mut w,
        g,
        &plan_tool,
        "subtask_add",
        sub(json!(["art-huge"])),
    )
    .unwrap_err();
    assert!(matches!(e, StoreError::Limit(m) if m.contains("one write")));
    let nine: Vec<String> = (0..9).map(|_| "art-data".to_string()).collect();
    let e = tool(&mut w, g, &plan_tool, "subtask_add", sub(json!(nine))).unwrap_err();
    assert!(matches!(e, StoreError::Limit(m) if m.contains("at most 8")));
    tool(
        &mut w,
        g,
        &plan_tool,
        "subtask_add",
        sub(json!(["art-data"])),
    )
    .unwrap();
    finish(&mut w, g, &plan_cmd, "planned");
    pass(&mut w);
    let turns = live_turns(&mut w);
    let (_, _, member_cmd, _) = turn_of(&turns, "m1").clone();
    let payload: Value = serde_json::from_str(
        &commands::get(&w.conn, &member_cmd.as_str().into())
            .unwrap()
            .payload,
    )
    .unwrap();
    assert_eq!(payload["inputs"][0]["artifact_id"], "art-data", "{payload}");
    assert_eq!(payload["inputs"][0]["name"], "data.txt");

    let runner = w.runner.clone();
    let download =
        |w: &World, runner: &RunnerId, id: &str| artifacts::for_download(&w.conn, runner, g, id);
    assert!(
        download(&w, &runner, "art-data").is_err(),
        "not running yet"
    );
    start(&mut w, g, &member_cmd);
    assert_eq!(download(&w, &runner, "art-data").unwrap().id, "art-data");
    assert!(
        download(&w, &runner, "art-other").is_err(),
        "not an input of it"
    );
    assert!(download(&w, &"another-runner".into(), "art-data").is_err());
    finish(&mut w, g, &member_cmd, "used it");
    assert!(download(&w, &runner, "art-data").is_err(), "its turn ended");
}
